#!/usr/bin/env -S npx tsx
/**
 * Latency the kubelet-shim adds to CRI calls: Version, ListPodSandbox and PodSandboxStatus, N times
 * each, straight to containerd and through each proxy implementation (splice, http2, grpc-js), in the same
 * run and interleaved (one call per path in turn, rotating the order), after a warm-up, from one
 * client process, as the kubelet would. Prints p50/p99/mean per path and the added p50/p99.
 *
 * The warm-up (default 5000 calls per method and path) brings the shim to the steady state of a
 * node daemon that the kubelet has called for a few minutes (PLEG relists, status polls: tens of
 * calls per second): with 500 warm-up calls the first method measured (Version) carried a tail of
 * 0.8-1.5 ms added p99 that 5000 warm-up calls remove (kubelet-shim/README.md, "Warm-up"; V8
 * tiering up the fresh shim process' per-call code is the likely cause, not verified).
 *
 * Profile `client: go` makes the calls with the kubelet's own CRI client (k8s.io/cri-client, the
 * release the testbed's kubelet is built from) in a Go process of its own
 * (kubelet-shim-client-go/main.go, built on first use), on the `pinClient` CPUs; default: a grpc-js
 * client in this process.
 *
 *   npm run bench:kubelet-shim -- [--n 5000] [--implementations splice,http2,splice+--node-flag] [--backend /path/containerd.sock]
 *       [--profile experiments/profiles/bench-kubelet-shim-*.yaml]
 * (options and profile fields — warm-up, client, CPU pinning, niceness, node flags: experiments/bench/options.ts)
 *
 * Without --backend it starts its own containerd (node index 9 under /tmp/ulysses-bench-shim: do not
 * run it together with the shim's integration test, which uses the same bridge and cgroup root; run
 * it under the testbed lock), creates one pod sandbox for PodSandboxStatus, and cleans everything up.
 * Each shim runs as its own process (main.ts) unless the profile says `inProcess: true`.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CriClient } from '../../kubelet-shim/cri-client.ts';
import { PROXY_IMPLEMENTATIONS, createCriProxy, type CriProxyServer, type ProxyImplementation } from '../../kubelet-shim/proxies.ts';
import { podSandboxConfig, startCriTestNode, stopCriTestNode, type CriTestNode } from '../testbed/cri-testnode.ts';
import { JsonLinesProcess, pinMainThreadApart, pollUntil, stopProcess } from '../testbed/processes.ts';
import { buildGoTool } from '../testbed/binaries.ts';
import { MachineCpuAudit, describeMachine, type RepCpu } from '../harness/cpu-window.ts';
import { benchFailure, kubeletShimBenchOptions, shimVariants } from './options.ts';

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

async function startShimProcess(listen: string, backend: string, implementation: ProxyImplementation, nodeFlags: string[], cpus?: string, nice?: number): Promise<ChildProcess> {
  const main = fileURLToPath(new URL('../../kubelet-shim/main.ts', import.meta.url));
  const args = [...nodeFlags, '--import', 'tsx', main, '--listen', listen, '--backend', backend, '--implementation', implementation];
  let [cmd, argv]: [string, string[]] = cpus ? ['taskset', ['-c', cpus, process.execPath, ...args]] : [process.execPath, args];
  if (nice !== undefined) [cmd, argv] = ['nice', ['-n', String(nice), cmd, ...argv]];
  const child = spawn(cmd, argv, {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, ULYSSES_LOG_LEVEL: 'warn' },
    cwd: fileURLToPath(new URL('../..', import.meta.url)),
  });
  await pollUntil('kubelet-shim socket', () => existsSync(listen) || child.exitCode !== null, { timeoutMs: 30_000, intervalMs: 50 });
  if (child.exitCode !== null) throw new Error(`kubelet-shim exited with ${child.exitCode}`);
  return child;
}

interface Target {
  name: string;
  /** the socket (the Go client's endpoint) */
  socket: string;
  client: CriClient;
  /** pid of the shim process (CPU time per call from /proc), when it runs as its own process */
  pid?: number;
}

/** utime + stime of a process in ms (/proc/<pid>/stat, clock ticks of 10 ms). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10; // fields 14 and 15 of the whole line
}

async function main(): Promise<void> {
  const opts = kubeletShimBenchOptions(process.argv.slice(2), PROXY_IMPLEMENTATIONS);
  const o = { ...opts.profile, n: opts.n, backend: opts.backend };
  // "impl" or "impl+<extra node flags of that shim>": variants of one implementation compared in the same interleaved run
  const variants = shimVariants(opts.implementations, PROXY_IMPLEMENTATIONS, o.inProcess);
  let node: CriTestNode | undefined;
  const children: ChildProcess[] = [];
  const proxies: CriProxyServer[] = [];
  const clients: CriClient[] = [];
  try {
    if (o.pinClient) execFileSync('taskset', ['-cp', o.pinClient, String(process.pid)], { stdio: 'ignore' });
    let backend = o.backend;
    if (!backend) {
      node = await startCriTestNode(o.runDir, o.nodeIndex);
      backend = node.spec.socket;
      if (o.pinClient) execFileSync('taskset', ['-acp', o.pinClient, String(node.containerd.pid)], { stdio: 'ignore' });
    }
    const direct = new CriClient(backend);
    clients.push(direct);
    const targets: Target[] = [{ name: 'direct', socket: backend, client: direct }];
    for (const [k, v] of variants.entries()) {
      const listen = join(o.runDir, `bench-shim-${k}.sock`);
      if (o.inProcess) {
        const p = createCriProxy({ listen, backend, implementation: v.impl });
        await p.start();
        proxies.push(p);
      } else {
        children.push(await startShimProcess(listen, backend, v.impl, [...o.shimNodeFlags, ...v.nodeFlags], o.pinShim, o.shimNice));
      }
      const c = new CriClient(listen);
      clients.push(c);
      targets.push({ name: v.name, socket: listen, client: c, pid: o.inProcess ? undefined : children.at(-1)!.pid });
    }

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

    // --client go: the kubelet's CRI client in a process of its own, on the client's CPUs
    const goClient =
      o.client === 'go'
        ? new JsonLinesProcess(
            buildGoTool('kubelet-shim-bench-client', fileURLToPath(new URL('./kubelet-shim-client-go/main.go', import.meta.url)), (l) => console.error(l)),
            targets.map((t) => `${t.name}=unix://${t.socket}`),
            { cpus: o.pinClient },
          )
        : undefined;
    const rows: Array<{ method: string; stats: Map<string, Stats>; cpuUs: Map<string, number>; machine: RepCpu | null }> = [];
    // what else used the CPUs while a method was timed (another job's CPU is in the tail, not the shim's)
    const audit = new MachineCpuAudit();
    try {
      for (const [method, call] of calls) {
        if (goClient) await goClient.call({ method, count: o.warmup, sandbox: sandboxId ?? '', timed: false });
        else for (let i = 0; i < o.warmup; i++) for (const t of targets) await call(t.client);
        // threads the warm-up started included
        if (o.pinShimHelpers) for (const t of targets) if (t.pid) pinMainThreadApart(t.pid, o.pinShim!, o.pinShimHelpers);
        const cpu0 = new Map(targets.filter((t) => t.pid).map((t) => [t.name, cpuMs(t.pid!)]));
        audit.arm();
        let samples: Map<string, number[]>;
        if (goClient) {
          samples = new Map(Object.entries((await goClient.call<{ samples: Record<string, number[]> }>({ method, count: o.n, sandbox: sandboxId ?? '', timed: true })).samples));
        } else {
          samples = new Map(targets.map((t) => [t.name, []]));
          for (let i = 0; i < o.n; i++) {
            // interleaved, in rotating order, so that drifts (GC, other load) hit every path alike
            for (let k = 0; k < targets.length; k++) {
              const t = targets[(i + k) % targets.length]!;
              samples.get(t.name)!.push(await time(() => call(t.client)));
            }
          }
        }
        const machine = audit.finish();
        const cpuUs = new Map(targets.filter((t) => t.pid).map((t) => [t.name, ((cpuMs(t.pid!) - cpu0.get(t.name)!) * 1000) / o.n]));
        rows.push({ method, stats: new Map([...samples].map(([k, v]) => [k, stats(v)])), cpuUs, machine });
      }
    } finally {
      await goClient?.close();
    }
    if (node && sandboxId) {
      await direct.call('StopPodSandbox', { pod_sandbox_id: sandboxId });
      await direct.call('RemovePodSandbox', { pod_sandbox_id: sandboxId });
    }

    const f = (v: number) => v.toFixed(3).padStart(8);
    const pathWidth = Math.max(9, ...targets.map((t) => t.name.length + 2));
    const where = o.inProcess ? 'in-process' : 'each as its own process';
    const pin = (o.pinShim || o.pinClient ? `, shim pinned to CPU ${o.pinShim ?? '-'}${o.pinShimHelpers ? ` (its main thread; its other threads on CPU ${o.pinShimHelpers})` : ''}, client+containerd to CPU ${o.pinClient ?? '-'}` : ', no CPU pinning') + (o.shimNice !== undefined ? `, shims at nice ${o.shimNice}` : '');
    const clientKind = o.client === 'go' ? "the kubelet's own CRI client (k8s.io/cri-client, Go, a process of its own)" : 'a grpc-js client';
    console.log(`\nCRI call latency in ms seen by ${clientKind}, N=${o.n} per method and path (warm-up ${o.warmup}), interleaved; shims ${where}${pin}; Node ${process.version}, ${cpus().length} CPUs, load average ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    console.log(`added = proxied quantile - direct quantile of the same run; shim CPU = CPU time of the shim process per call (utime+stime, 10 ms ticks)`);
    console.log(`${'method'.padEnd(18)}${'path'.padEnd(pathWidth)}${'p50'.padStart(9)}${'p99'.padStart(9)}${'mean'.padStart(9)}${'added p50'.padStart(11)}${'added p99'.padStart(11)}${'shim CPU'.padStart(11)}`);
    for (const r of rows) {
      const d = r.stats.get('direct')!;
      for (const t of targets) {
        const st = r.stats.get(t.name)!;
        const added = t.name === 'direct' ? '' : `   ${f(st.p50 - d.p50)}   ${f(st.p99 - d.p99)}`;
        const cpu = r.cpuUs.get(t.name);
        const cpuCol = cpu === undefined ? '' : `${(cpu / 1000).toFixed(3).padStart(11)}`;
        console.log(`${(t.name === 'direct' ? r.method : '').padEnd(18)}${t.name.padEnd(pathWidth)}${f(st.p50).padStart(9)}${f(st.p99).padStart(9)}${f(st.mean).padStart(9)}${added}${cpuCol}`);
      }
    }
    for (const r of rows) if (r.machine) console.log(`machine while ${r.method} was timed: ${describeMachine(r.machine)}`);
  } finally {
    for (const c of clients) c.close();
    for (const p of proxies) await p.close(500);
    for (const c of children) if (c.pid) await stopProcess(c.pid, 3000);
    if (node) await stopCriTestNode(node);
  }
}

main().catch((err: Error) => {
  console.error(`bench:kubelet-shim: ${benchFailure(err)}`);
  process.exit(1);
});
