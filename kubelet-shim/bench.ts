#!/usr/bin/env -S npx tsx
/**
 * Latency the kubelet-shim adds to CRI calls: Version, ListPodSandbox and PodSandboxStatus, N times
 * each, through the shim vs straight to containerd, in the same run and interleaved (direct and
 * proxied calls alternate, in alternating order), from one client process, as the kubelet would.
 *
 *   npx tsx kubelet-shim/bench.ts [--n 2000] [--warmup 200] [--backend /path/containerd.sock] [--in-process]
 *
 * Without --backend it starts its own containerd (node index 9 under /tmp/ulysses-bench-shim: do not
 * run it together with the shim's integration test, which uses the same bridge and cgroup root),
 * creates one pod sandbox for PodSandboxStatus, and cleans everything up. The shim runs as its own
 * process (main.ts) unless --in-process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { CriClient } from './cri-client.ts';
import { CriProxy } from './proxy.ts';
import { podSandboxConfig, startCriTestNode, stopCriTestNode, type CriTestNode } from './testnode.ts';
import { pollUntil, stopProcess } from '../experiments/testbed/processes.ts';

interface Stats {
  p50: number;
  p99: number;
  mean: number;
  max: number;
}

function stats(samples: number[]): Stats {
  const s = [...samples].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]!;
  return { p50: q(0.5), p99: q(0.99), mean: s.reduce((a, b) => a + b, 0) / s.length, max: s[s.length - 1]! };
}

async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

async function startShimProcess(listen: string, backend: string, nodeFlags: string[]): Promise<ChildProcess> {
  const main = fileURLToPath(new URL('./main.ts', import.meta.url));
  const child = spawn(process.execPath, [...nodeFlags, '--import', 'tsx', main, '--listen', listen, '--backend', backend], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, ULYSSES_LOG_LEVEL: 'warn' },
    cwd: fileURLToPath(new URL('..', import.meta.url)),
  });
  await pollUntil('kubelet-shim socket', () => existsSync(listen) || child.exitCode !== null, { timeoutMs: 30_000, intervalMs: 50 });
  if (child.exitCode !== null) throw new Error(`kubelet-shim exited with ${child.exitCode}`);
  return child;
}

async function main(): Promise<void> {
  const o = new Command('bench')
    .option('--n <n>', 'calls per method and path', (v) => Number(v), 2000)
    .option('--warmup <n>', 'warm-up calls per method and path', (v) => Number(v), 200)
    .option('--backend <socket>', 'an existing containerd socket (else one is started)')
    .option('--run-dir <dir>', 'run directory of the containerd started here', '/tmp/ulysses-bench-shim')
    .option('--node-index <i>', 'node index of the containerd started here (bridge uly-br<i>, 10.244.<i>.0/24)', (v) => Number(v), 9)
    .option('--in-process', 'run the proxy inside this process instead of as its own process', false)
    .option('--shim-node-flags <flags>', 'extra node flags of the shim process, e.g. "--max-semi-space-size=32"', '')
    .parse(process.argv)
    .opts<{ n: number; warmup: number; backend?: string; runDir: string; nodeIndex: number; inProcess: boolean; shimNodeFlags: string }>();

  let node: CriTestNode | undefined;
  let child: ChildProcess | undefined;
  let proxy: CriProxy | undefined;
  const clients: CriClient[] = [];
  try {
    let backend = o.backend;
    if (!backend) {
      node = await startCriTestNode(o.runDir, o.nodeIndex);
      backend = node.spec.socket;
    }
    const listen = join(o.runDir, 'bench-shim.sock');
    if (o.inProcess) {
      proxy = new CriProxy({ listen, backend });
      await proxy.start();
    } else {
      child = await startShimProcess(listen, backend, o.shimNodeFlags.split(' ').filter(Boolean));
    }
    const direct = new CriClient(backend);
    const shim = new CriClient(listen);
    clients.push(direct, shim);

    let sandboxId: string | undefined;
    if (node) {
      const r = await direct.call('RunPodSandbox', { config: podSandboxConfig(node.spec, { namespace: 'bench', name: 'status', uid: 'bench-status-1' }) });
      sandboxId = r.pod_sandbox_id;
    } else {
      sandboxId = (await direct.call('ListPodSandbox', {})).items[0]?.id;
    }
    const calls: Array<[string, (c: CriClient) => Promise<unknown>]> = [
      ['Version', (c) => c.call('Version', { version: 'v1' })],
      ['ListPodSandbox', (c) => c.call('ListPodSandbox', {})],
    ];
    if (sandboxId) calls.push(['PodSandboxStatus', (c) => c.call('PodSandboxStatus', { pod_sandbox_id: sandboxId })]);
    else console.error('no pod sandbox on the backend: PodSandboxStatus skipped');

    const rows: Array<{ method: string; direct: Stats; shim: Stats }> = [];
    for (const [method, call] of calls) {
      for (let i = 0; i < o.warmup; i++) {
        await call(direct);
        await call(shim);
      }
      const d: number[] = [];
      const s: number[] = [];
      for (let i = 0; i < o.n; i++) {
        if (i % 2 === 0) {
          d.push(await time(() => call(direct)));
          s.push(await time(() => call(shim)));
        } else {
          s.push(await time(() => call(shim)));
          d.push(await time(() => call(direct)));
        }
      }
      rows.push({ method, direct: stats(d), shim: stats(s) });
    }
    if (node && sandboxId) {
      await direct.call('StopPodSandbox', { pod_sandbox_id: sandboxId });
      await direct.call('RemovePodSandbox', { pod_sandbox_id: sandboxId });
    }

    const f = (v: number) => v.toFixed(3).padStart(8);
    console.log(`\nCRI latency in ms, N=${o.n} per method and path (warm-up ${o.warmup}), shim ${o.inProcess ? 'in-process' : 'as its own process'}, Node ${process.version}`);
    console.log(`${'method'.padEnd(18)}${'direct p50'.padStart(11)}${'direct p99'.padStart(11)}${'shim p50'.padStart(11)}${'shim p99'.padStart(11)}${'added p50'.padStart(11)}${'added p99'.padStart(11)}`);
    for (const r of rows) {
      console.log(
        `${r.method.padEnd(18)}   ${f(r.direct.p50)}   ${f(r.direct.p99)}   ${f(r.shim.p50)}   ${f(r.shim.p99)}   ${f(r.shim.p50 - r.direct.p50)}   ${f(r.shim.p99 - r.direct.p99)}`,
      );
    }
  } finally {
    for (const c of clients) c.close();
    await proxy?.close(500);
    if (child?.pid) await stopProcess(child.pid, 3000);
    if (node) await stopCriTestNode(node);
  }
}

main().catch((err: Error) => {
  console.error(err.stack ?? err.message);
  process.exit(1);
});
