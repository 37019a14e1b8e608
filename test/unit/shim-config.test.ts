/**
 * kubelet-shim configuration and entry point: the shipped config files, field-naming validation
 * errors, flags over file, SIGHUP reload of the pacing section, SIGTERM cleanup, /metrics.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { pino } from 'pino';
import { ConfigError } from '../../core/config.ts';
import { loadShimConfig, parseShimConfig, ShimConfigSchema } from '../../kubelet-shim/config.ts';
import { MAX_PACING_DURATION_MS, PacingConfigSchema, PacingPolicySchema, THESIS_POLICIES } from '../../kubelet-shim/pacing.ts';
import { startShim } from '../../kubelet-shim/main.ts';

const shimDir = fileURLToPath(new URL('../../kubelet-shim/', import.meta.url));
const repo = fileURLToPath(new URL('../../', import.meta.url));
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'uly-shimcfg-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('kubelet-shim config', () => {
  it('ships valid config files for the thesis settings', async () => {
    const files = readdirSync(join(shimDir, 'configs')).sort();
    expect(files).toEqual(['fixed.yaml', 'thesis-cloud.yaml', 'thesis-edge.yaml', 'ulysses-adaptive.yaml', 'ulysses-cloud.yaml', 'vanilla-fencing.yaml', 'vanilla.yaml']);
    const load = (f: string) => loadShimConfig(join(shimDir, 'configs', f));
    expect((await load('thesis-cloud.yaml')).pacing.policy).toEqual(THESIS_POLICIES.cloud);
    expect((await load('thesis-edge.yaml')).pacing.policy).toEqual(THESIS_POLICIES.edge);
    expect((await load('fixed.yaml')).pacing.policy).toEqual(THESIS_POLICIES.fixed);
    expect((await load('vanilla.yaml')).pacing.policy).toEqual({ type: 'vanilla' });
    const fencing = await load('vanilla-fencing.yaml');
    expect(fencing.pacing.policy).toEqual({ type: 'vanilla' });
    expect(fencing.nodeAgent.fencing).toEqual({ enabled: true, afterMs: 2000, checkMs: 250 });
    expect((await load('vanilla.yaml')).nodeAgent.fencing.enabled).toBe(false);
    const ulysses = (await load('ulysses-cloud.yaml')).pacing;
    expect(ulysses.policy).toEqual(THESIS_POLICIES.cloud);
    expect(ulysses.holdLowsDuringHighMs).toBe(2000);
    expect((await load('thesis-cloud.yaml')).pacing.holdLowsDuringHighMs).toBe(0);
    expect((await load('ulysses-adaptive.yaml')).pacing.policy).toEqual({
      type: 'adaptive', targetMs: 1500, initialWaitMs: 0, minWaitMs: 0, maxWaitMs: 1500, kp: 0.5, kn: 0.1, intervalMs: 5000, cleanIntervals: 3,
    });
  });

  it('fills defaults: vanilla pacing, 16 MiB, 0660, no metrics server', () => {
    const c = parseShimConfig({});
    expect(c).toMatchObject({ socketMode: '0660', connectTimeoutMs: 1000, maxMessageBytes: 16 * 1024 * 1024, metrics: { host: '127.0.0.1' } });
    expect(c.metrics.port).toBeUndefined();
    expect(c.pacing.policy).toEqual({ type: 'vanilla' });
  });

  it('bounds every pacing duration at 10 minutes, naming the field (setTimeout overflows past 2^31-1 ms)', () => {
    const field = (pacing: unknown) => {
      try {
        parseShimConfig({ pacing });
        return 'accepted';
      } catch (e) {
        return (e as ConfigError).issues.map((i) => i.field).join(',');
      }
    };
    expect(field({ policy: { type: 'fixed', waitMs: 3e9 } })).toBe('pacing.policy.waitMs');
    expect(field({ policy: { type: 'fixed', waitMs: MAX_PACING_DURATION_MS } })).toBe('accepted');
    expect(field({ policy: { type: 'exponential-decay', initialWaitMs: 1, resetAfterMs: MAX_PACING_DURATION_MS + 1 } })).toBe('pacing.policy.resetAfterMs');
    expect(field({ policy: { type: 'adaptive', intervalMs: 1e12 } })).toBe('pacing.policy.intervalMs');
    expect(field({ policy: { type: 'vanilla' }, lowHoldMs: 7e8, highMinInterArrivalMs: 7e8, holdLowsDuringHighMs: 7e8 })).toBe('pacing.highMinInterArrivalMs,pacing.lowHoldMs,pacing.holdLowsDuringHighMs');
  });

  it('ulysses set kubelet-shim refuses an out-of-range or unknown parameter, naming it, before it reads a kubeconfig', () => {
    const set = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', join(repo, 'cli/ulysses.ts'), 'set', 'kubelet-shim', ...args, '--kubeconfig', join(dir, 'no-such.kubeconfig')], { cwd: repo, encoding: 'utf8', timeout: 60_000 });
    const tooLong = set('fixed', '--param', 'waitMs=3e9');
    expect(tooLong.status).not.toBe(0);
    expect(tooLong.stderr).toContain('kubelet-shim fixed: policy.waitMs: ');
    expect(tooLong.stderr).not.toContain('no-such.kubeconfig');
    const unknown = set('fixed', '--param', 'waitSeconds=3');
    expect(unknown.stderr).toMatch(/kubelet-shim fixed: policy: .*waitSeconds/);
  });

  it('names the offending field', async () => {
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, 'pacing:\n  policy:\n    type: exponential-decay\n    factor: 2\n  maxQueueLength: 0\nlisten: relative.sock\nsocketMode: "0999"\nbogus: 1\n');
    const err = await loadShimConfig(bad).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).issues.map((i) => i.field).sort()).toEqual(['(root)', 'listen', 'pacing.maxQueueLength', 'pacing.policy.factor', 'socketMode']);
  });

  it('startShim: flags win over the file, reload applies the pacing section, stop removes the socket', async () => {
    const file = join(dir, 'shim.yaml');
    const fileSocket = join(dir, 'from-file.sock');
    writeFileSync(file, `listen: ${fileSocket}\nbackend: /nonexistent/containerd.sock\npacing:\n  policy: { type: fixed, waitMs: 1200 }\n`);
    const listen = join(dir, 'flag.sock');
    const shim = await startShim({ listen, configFile: file, log: pino({ level: 'silent' }) });
    try {
      expect(existsSync(listen)).toBe(true);
      expect(existsSync(fileSocket)).toBe(false);
      expect(shim.config.backend).toBe('/nonexistent/containerd.sock');
      expect(shim.gate.config.policy).toEqual({ type: 'fixed', waitMs: 1200 });
      writeFileSync(file, `listen: ${fileSocket}\npacing:\n  policy: { type: exponential-decay, initialWaitMs: 1500, factor: 0.6 }\n  highMinInterArrivalMs: 50\n`);
      await shim.reload();
      expect(shim.gate.config.policy).toEqual(THESIS_POLICIES.edge);
      expect(shim.gate.config.highMinInterArrivalMs).toBe(50);
      writeFileSync(file, 'pacing:\n  policy: { type: fixed, waitMs: -1 }\n');
      await expect(shim.reload()).rejects.toThrow(/pacing\.policy\.waitMs/);
      expect(shim.gate.config.policy).toEqual(THESIS_POLICIES.edge); // unchanged
      // the live entry point for runtime toggles: apply() validates and applies the pacing section
      expect(() => shim.apply({ pacing: { policy: { type: 'adaptive', kn: 2 } } }, 'toggle')).toThrow(/toggle[\s\S]*pacing\.policy\.kn/);
      expect(shim.gate.config.policy).toEqual(THESIS_POLICIES.edge);
      const applied = shim.apply({ pacing: { policy: { type: 'adaptive', targetMs: 1500, maxWaitMs: 1000 } } });
      expect(applied.pacing.policy).toMatchObject({ type: 'adaptive', targetMs: 1500, maxWaitMs: 1000, kp: 0.5, kn: 0.1 });
      expect(shim.gate.config.policy).toEqual(applied.pacing.policy);
      expect(shim.config.pacing).toEqual(shim.gate.config);
      expect(shim.config.implementation).toBe('splice');
      // each update is validated once: apply() parses the shim config, applyPacing() (the runtime
      // toggle's path, its watcher validated) parses nothing
      const parses = [ShimConfigSchema, PacingConfigSchema, PacingPolicySchema].map((schema) => vi.spyOn(schema, 'safeParse'));
      try {
        shim.apply({ pacing: { policy: { type: 'fixed', waitMs: 300 } } });
        expect(parses.map((p) => p.mock.calls.length)).toEqual([1, 0, 0]);
        shim.applyPacing(PacingConfigSchema.parse({ policy: { type: 'fixed', waitMs: 400 } }));
        expect(parses.map((p) => p.mock.calls.length)).toEqual([1, 0, 0]);
        expect(shim.gate.config.policy).toEqual({ type: 'fixed', waitMs: 400 });
      } finally {
        for (const p of parses) p.mockRestore();
      }
    } finally {
      await shim.stop();
    }
    expect(existsSync(listen)).toBe(false);
    await expect(startShim({ backend: '/x.sock', log: pino({ level: 'silent' }) })).rejects.toThrow(/listen/);
  });

  it('startShim: metricsHost (--metrics-host) wins over the file\'s metrics.host, and /metrics listens there only', async () => {
    const file = join(dir, 'shim-metrics.yaml');
    writeFileSync(file, `backend: /nonexistent/containerd.sock\nmetrics: { port: 0, host: 127.0.0.1 }\n`);
    const shim = await startShim({ listen: join(dir, 'metrics-host.sock'), configFile: file, metricsHost: '127.0.0.2', log: pino({ level: 'silent' }) });
    try {
      expect(shim.config.metrics).toEqual({ port: 0, host: '127.0.0.2' });
      const text = await (await fetch(`http://127.0.0.2:${shim.metricsPort}/metrics`)).text();
      expect(text).toMatch(/^ulysses_cri_pacing_queue_length 0$/m);
      await expect(fetch(`http://127.0.0.1:${shim.metricsPort}/metrics`)).rejects.toThrow();
    } finally {
      await shim.stop();
    }
  });

  it('main.ts as a process: bad config exits 2 naming the field; SIGHUP reloads; /metrics served; SIGTERM cleans up', async () => {
    const main = join(shimDir, 'main.ts');
    const run = (args: string[]) => {
      const child = spawn(process.execPath, ['--import', 'tsx', main, ...args], { cwd: repo, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      child.stdout.on('data', (b: Buffer) => (out += b.toString()));
      child.stderr.on('data', (b: Buffer) => (err += b.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      return { child, exited, out: () => out, err: () => err };
    };
    const bad = join(dir, 'bad-cli.yaml');
    writeFileSync(bad, 'pacing:\n  policy: { type: fixed, waitMs: "slow" }\n');
    const failed = run(['--listen', join(dir, 'cli-bad.sock'), '--backend', '/x.sock', '--config', bad]);
    expect(await failed.exited).toBe(2);
    expect(failed.err()).toMatch(/pacing\.policy\.waitMs/);

    const cfg = join(dir, 'cli.yaml');
    writeFileSync(cfg, 'pacing:\n  policy: { type: vanilla }\n');
    const listen = join(dir, 'cli.sock');
    const p = run(['--listen', listen, '--backend', join(dir, 'no-containerd.sock'), '--config', cfg, '--metrics-port', '0']);
    try {
      const port = await waitFor(() => /"port":(\d+).*metrics served/.exec(p.out())?.[1], 20_000, () => p.err());
      expect(statSync(listen).mode & 0o777).toBe(0o660);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      expect(metrics).toMatch(/^ulysses_cri_pacing_queue_length 0$/m);
      writeFileSync(cfg, 'pacing:\n  policy: { type: fixed, waitMs: 900 }\n');
      p.child.kill('SIGHUP');
      await waitFor(() => /"waitMs":900.*pacing reconfigured/.test(p.out()), 10_000, () => p.out());
      p.child.kill('SIGTERM');
      expect(await p.exited).toBe(0);
      expect(existsSync(listen)).toBe(false);
    } finally {
      if (p.child.exitCode === null) p.child.kill('SIGKILL');
    }
  }, 60_000);

  it('main.ts as the node service before the node joined: its kubeconfig (the kubelet\'s own) missing, the CRI proxy serves and waits for it; SIGTERM still exits 0', async () => {
    const main = join(shimDir, 'main.ts');
    const listen = join(dir, 'joining.sock');
    const kubeconfig = join(dir, 'etc-kubernetes', 'kubelet.conf'); // not there yet
    const child = spawn(process.execPath, ['--import', 'tsx', main, '--listen', listen, '--backend', join(dir, 'no-containerd.sock')], {
      cwd: repo,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, KUBECONFIG: kubeconfig, NODE_NAME: 'worker-1', KUBERNETES_SERVICE_HOST: '' },
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await waitFor(() => /kubeconfig not there yet/.test(out) && existsSync(listen), 20_000, () => out);
      expect(child.exitCode).toBeNull();
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);
});

async function waitFor<T>(check: () => T | undefined | false, timeoutMs: number, explain: () => string): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out; output:\n${explain()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
