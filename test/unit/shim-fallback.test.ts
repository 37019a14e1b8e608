/**
 * The kubelet-shim's availability pieces, against real unix sockets and a stand-in runtime (a grpc-js
 * server answering CRI Version): the fallback guard's decisions on a fake clock (fallback.ts), the
 * shim taking its path back from the guard's symlink (proxy.ts), the self-check behind /readyz and the
 * watchdog (health.ts), and the systemd notify protocol (systemd-notify.ts). The kubelet, containerd
 * and the unit's supervision are exercised on the kubeadm testbed (kubeadm.int, "kubelet-shim faults").
 */
import { existsSync, lstatSync, mkdtempSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { DgramSocket } from 'node-unix-socket';
import { criMethods } from '../../kubelet-shim/proxy.ts';
import { FallbackConfigSchema, RuntimeFallback, fallbackMetrics } from '../../kubelet-shim/fallback.ts';
import { markerPath, socketPathState } from '../../kubelet-shim/socket-path.ts';
import { HealthConfigSchema, ShimHealth } from '../../kubelet-shim/health.ts';
import { systemdNotifier, watchdogIntervalMs } from '../../kubelet-shim/systemd-notify.ts';
import { startShim } from '../../kubelet-shim/main.ts';
import { parseShimConfig } from '../../kubelet-shim/config.ts';
import { unitSettings } from '../../experiments/testbed/unit-supervisor.ts';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { CriProbeResult } from '../../kubelet-shim/health.ts';

const silent = pino({ level: 'silent' });
let dir: string;

/** A runtime that answers CRI Version (or never answers, while `hang`). */
class VersionRuntime {
  readonly server = new grpc.Server();
  hang = false;
  constructor(readonly socket: string) {
    const m = criMethods().find((x) => x.name === 'Version')!;
    this.server.register(
      m.path,
      (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        if (this.hang) return;
        cb(null, (m.definition.responseSerialize as (v: object) => Buffer)({ version: '0.1.0', runtime_name: 'stand-in', runtime_version: '1', runtime_api_version: 'v1' }));
      },
      (b: Buffer) => b,
      (b: Buffer) => b,
      'unary',
    );
  }
  start(): Promise<void> {
    return new Promise((resolve, reject) => this.server.bindAsync(`unix://${this.socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  }
  stop(): void {
    this.server.forceShutdown();
    rmSync(this.socket, { force: true });
  }
}

/** A plain listening unix socket at `path` (what the shim leaves at its path, as far as the guard's filesystem checks go). */
function listenAt(path: string): Promise<net.Server> {
  const s = net.createServer((c) => c.destroy());
  return new Promise((resolve) => s.listen(path, () => resolve(s)));
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'uly-fallback-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('runtime fallback guard (fallback.ts), fake clock and stand-in probes', () => {
  const config = FallbackConfigSchema.parse({ afterMs: 5000, returnAfterMs: 30_000, checkMs: 1000 });
  let servers: net.Server[] = [];
  afterEach(() => {
    for (const s of servers) s.close();
    servers = [];
  });

  const setup = async (name: string) => {
    const listen = join(dir, `${name}.sock`);
    const backend = join(dir, `${name}-containerd.sock`);
    servers.push(await listenAt(listen), await listenAt(backend));
    let t = 0;
    const answers: Record<'shim' | 'containerd', CriProbeResult> = { shim: 'ok', containerd: 'ok' };
    const restarts: number[] = [];
    const registry = new Registry();
    const metrics = fallbackMetrics(registry);
    const guard = new RuntimeFallback({
      listen,
      backend,
      config,
      log: silent,
      metrics,
      now: () => t,
      probe: async (target) => answers[target],
      restartKubelet: async () => {
        restarts.push(t);
      },
    });
    const value = async (name: string, labels: Record<string, string> = {}) =>
      (await registry.getSingleMetric(name)!.get()).values.find((v) => Object.entries(labels).every(([k, x]) => v.labels[k] === x))?.value ?? 0;
    return { listen, backend, guard, answers, restarts, value, at: (ms: number) => (t = ms) };
  };

  it('puts the kubelet on containerd only after the shim has not answered for afterMs, and only while containerd answers', async () => {
    const s = await setup('down');
    s.answers.shim = 'timeout';
    s.at(0);
    expect(await s.guard.tick()).toBe('shim');
    s.at(4999);
    expect(await s.guard.tick()).toBe('shim');
    expect(lstatSync(s.listen).isSocket()).toBe(true);
    s.at(5000);
    expect(await s.guard.tick()).toBe('fallback');
    expect(lstatSync(s.listen).isSymbolicLink()).toBe(true);
    expect(readlinkSync(s.listen)).toBe(s.backend);
    expect(existsSync(markerPath(s.listen))).toBe(true);
    expect(await s.value('ulysses_kubelet_shim_fallback_active')).toBe(1);
    expect(await s.value('ulysses_kubelet_shim_fallback_transitions_total', { to: 'containerd' })).toBe(1);
    // stays there; no kubelet restart while the symlink is in place
    s.at(60_000);
    expect(await s.guard.tick()).toBe('fallback');
    expect(s.restarts).toEqual([]);
  });

  it('a shim that answers, with errors too (containerd down behind it), is never replaced', async () => {
    const s = await setup('answers');
    for (const shim of ['ok', 'error'] as const) {
      s.answers.shim = shim;
      s.answers.containerd = shim === 'ok' ? 'ok' : 'error';
      for (let t = 0; t <= 20_000; t += 1000) {
        s.at(t);
        expect(await s.guard.tick()).toBe('shim');
      }
    }
    expect(lstatSync(s.listen).isSocket()).toBe(true);
    expect(existsSync(markerPath(s.listen))).toBe(false);
  });

  it('no fallback when containerd does not answer either (nothing to fall back to)', async () => {
    const s = await setup('both-down');
    s.answers.shim = 'timeout';
    s.answers.containerd = 'timeout';
    for (let t = 0; t <= 30_000; t += 1000) {
      s.at(t);
      expect(await s.guard.tick()).toBe('shim');
    }
    expect(lstatSync(s.listen).isSocket()).toBe(true);
    expect(await s.value('ulysses_kubelet_shim_fallback_transitions_total', { to: 'containerd' })).toBe(0);
  });

  it('a silence interrupted by one answer starts over', async () => {
    const s = await setup('flap');
    s.answers.shim = 'timeout';
    s.at(0);
    await s.guard.tick();
    s.at(4000);
    await s.guard.tick();
    s.answers.shim = 'ok';
    s.at(4500);
    await s.guard.tick();
    s.answers.shim = 'timeout';
    s.at(5000);
    expect(await s.guard.tick()).toBe('shim');
    s.at(9499);
    expect(await s.guard.tick()).toBe('shim');
    s.at(10_000);
    expect(await s.guard.tick()).toBe('fallback');
  });

  it('a socket replaced while it was asked (the shim restarted) is not replaced', async () => {
    const s = await setup('restarted');
    s.at(0);
    s.answers.shim = 'timeout';
    await s.guard.tick();
    s.at(6000);
    const guard = new RuntimeFallback({
      listen: s.listen,
      backend: s.backend,
      config,
      log: silent,
      now: () => 6000,
      probe: async (target) => {
        if (target === 'shim') {
          // the old shim's socket goes, a new one is bound at the same path
          servers[0]!.close();
          rmSync(s.listen, { force: true });
          servers.push(await listenAt(s.listen));
          return 'timeout';
        }
        return 'ok';
      },
    });
    // a guard whose silence began earlier (its first tick), then the probe sees the restart
    await guard.tick();
    (guard as unknown as { shimDownSince: number }).shimDownSince = 0;
    expect(await guard.tick()).toBe('shim');
    expect(lstatSync(s.listen).isSocket()).toBe(true);
  });

  it('moves the kubelet back once the shim has answered for returnAfterMs, by one kubelet restart; a failed restart is tried again', async () => {
    const s = await setup('return');
    s.answers.shim = 'timeout';
    s.at(0);
    await s.guard.tick();
    s.at(5000);
    expect(await s.guard.tick()).toBe('fallback');
    // the shim starts again and takes its path back (proxy.ts removeStaleSocket)
    const { removeStaleSocket } = await import('../../kubelet-shim/proxy.ts');
    await removeStaleSocket(s.listen, s.backend);
    servers.push(await listenAt(s.listen));
    s.answers.shim = 'ok';
    s.at(10_000);
    expect(await s.guard.tick()).toBe('shim');
    expect(s.guard.pending()).toBe(true);
    expect(await s.value('ulysses_kubelet_shim_fallback_active')).toBe(1);
    s.at(39_999);
    await s.guard.tick();
    expect(s.restarts).toEqual([]);
    let fail = true;
    const failing = new RuntimeFallback({
      listen: s.listen, backend: s.backend, config, log: silent, now: () => 40_000, probe: async () => 'ok',
      restartKubelet: async () => {
        if (fail) throw new Error('systemctl: exit 1');
      },
    });
    (failing as unknown as { shimUpSince: number }).shimUpSince = 10_000;
    await failing.tick();
    expect(failing.pending()).toBe(true);
    fail = false;
    await failing.tick();
    expect(failing.pending()).toBe(false);
    // the first guard sees the marker gone: nothing left to do
    s.at(40_000);
    await s.guard.tick();
    expect(s.restarts).toEqual([]);
    expect(await s.value('ulysses_kubelet_shim_fallback_active')).toBe(0);
  });

  it('never touches what it does not own at the path', async () => {
    const s = await setup('other');
    servers[0]!.close();
    rmSync(s.listen, { force: true });
    writeFileSync(s.listen, 'not a socket');
    s.answers.shim = 'timeout';
    for (let t = 0; t <= 20_000; t += 1000) {
      s.at(t);
      expect(await s.guard.tick()).toBe('other');
    }
    expect(readFileSync(s.listen, 'utf8')).toBe('not a socket');
  });

  it('the shim takes back only the symlink to its own runtime', async () => {
    const { removeStaleSocket } = await import('../../kubelet-shim/proxy.ts');
    const listen = join(dir, 'takeback.sock');
    const backend = join(dir, 'takeback-containerd.sock');
    symlinkSync(join(dir, 'elsewhere.sock'), listen);
    expect(socketPathState(listen, backend)).toBe('other');
    await expect(removeStaleSocket(listen, backend)).rejects.toThrow(/exists and is not a socket/);
    rmSync(listen);
    symlinkSync(backend, listen);
    expect(socketPathState(listen, backend)).toBe('fallback');
    await removeStaleSocket(listen, backend);
    expect(existsSync(listen)).toBe(false);
  });

  it('bad settings are refused naming the field', () => {
    expect(() => parseShimConfig({ fallback: { afterMs: 10 } }, 'node-1 shim config')).toThrow(/fallback\.afterMs/);
    expect(() => parseShimConfig({ fallback: { kubeletRestart: [] } }, 'node-1 shim config')).toThrow(/fallback\.kubeletRestart/);
    expect(() => parseShimConfig({ health: { timeoutMs: 1e9 } }, 'node-1 shim config')).toThrow(/health\.timeoutMs/);
  });
});

describe('the shim against a stand-in runtime: self-check, /readyz, the socket path lost', () => {
  it('is ready while the runtime answers through it, serving (watchdog) but not ready while the runtime is down', async () => {
    const runtime = new VersionRuntime(join(dir, 'rt-ready.sock'));
    await runtime.start();
    const listen = join(dir, 'shim-ready.sock');
    const shim = await startShim({ listen, backend: runtime.socket, metricsPort: 0, log: silent });
    try {
      const readyz = async () => {
        const r = await fetch(`http://127.0.0.1:${shim.metricsPort}/readyz`);
        return { status: r.status, body: await r.text() };
      };
      expect(await shim.health.check()).toBe('ok');
      expect(await readyz()).toEqual({ status: 200, body: 'the runtime answers through the shim' });
      expect(shim.health.serving()).toBe(true);
      runtime.stop();
      expect(await shim.health.check()).toBe('error');
      expect((await readyz()).status).toBe(503);
      expect(shim.health.serving()).toBe(true);
    } finally {
      await shim.stop();
      runtime.stop();
    }
  });

  it('a runtime that never answers makes the self-check time out: not serving', async () => {
    const runtime = new VersionRuntime(join(dir, 'rt-hang.sock'));
    await runtime.start();
    runtime.hang = true;
    const listen = join(dir, 'shim-hang.sock');
    const health = new ShimHealth({ socket: runtime.socket, config: HealthConfigSchema.parse({ timeoutMs: 200, checkMs: 100 }), log: silent });
    try {
      expect(await health.check()).toBe('timeout');
      expect(health.serving()).toBe(false);
      expect(health.readiness().ready).toBe(false);
    } finally {
      health.stop();
      runtime.stop();
      rmSync(listen, { force: true });
    }
  });

  it('notices that its socket path was replaced by the guard, reports it once, and is neither serving nor ready', async () => {
    const runtime = new VersionRuntime(join(dir, 'rt-lost.sock'));
    await runtime.start();
    const listen = join(dir, 'shim-lost.sock');
    const lost = vi.fn();
    const shim = await startShim({ listen, backend: runtime.socket, log: silent, onSocketLost: lost });
    try {
      expect(await shim.health.check()).toBe('ok');
      const { pointAtBackend } = await import('../../kubelet-shim/socket-path.ts');
      pointAtBackend(listen, runtime.socket);
      // a call through the path now reaches the runtime directly: the check must not count it
      expect(await shim.health.check()).toBe('timeout');
      expect(await shim.health.check()).toBe('timeout');
      expect(lost).toHaveBeenCalledTimes(1);
      expect(shim.health.serving()).toBe(false);
      expect(shim.health.readiness()).toEqual({ ready: false, detail: "the socket path no longer holds this shim's socket" });
    } finally {
      await shim.stop();
      runtime.stop();
    }
  });
});

describe('systemd notify protocol (systemd-notify.ts)', () => {
  it('reads the watchdog interval systemd gives, for this pid only', () => {
    expect(watchdogIntervalMs({ WATCHDOG_USEC: '10000000' })).toBe(10_000);
    expect(watchdogIntervalMs({ WATCHDOG_USEC: '10000000', WATCHDOG_PID: String(process.pid) })).toBe(10_000);
    expect(watchdogIntervalMs({ WATCHDOG_USEC: '10000000', WATCHDOG_PID: '1' })).toBeUndefined();
    expect(watchdogIntervalMs({ WATCHDOG_USEC: 'x' })).toBeUndefined();
    expect(watchdogIntervalMs({})).toBeUndefined();
  });

  it('sends READY=1 over a real unix datagram socket, nothing without NOTIFY_SOCKET', async () => {
    expect(await systemdNotifier(silent, {})).toBeUndefined();
    const path = join(dir, 'notify.sock');
    const rx = new DgramSocket();
    const got = new Promise<string>((resolve) => rx.on('data', (b: Buffer) => resolve(b.toString())));
    rx.bind(path);
    const n = (await systemdNotifier(silent, { NOTIFY_SOCKET: path }))!;
    try {
      n.ready('serving CRI on /run/ulysses/kubelet-shim.sock');
      expect(await got).toBe('READY=1\nSTATUS=serving CRI on /run/ulysses/kubelet-shim.sock');
    } finally {
      n.close();
      rx.close();
    }
  });

  it('pings the watchdog every half interval only while the check passes', async () => {
    vi.useFakeTimers();
    try {
      const sent: string[] = [];
      let alive = true;
      const n = (await systemdNotifier(silent, { NOTIFY_SOCKET: '/run/systemd/notify', WATCHDOG_USEC: '10000000' }, { sendTo: (b) => void sent.push(b.toString()), close: () => undefined }))!;
      n.keepAlive(() => alive);
      vi.advanceTimersByTime(5000);
      expect(sent).toEqual(['WATCHDOG=1']);
      vi.advanceTimersByTime(5000);
      expect(sent).toEqual(['WATCHDOG=1', 'WATCHDOG=1']);
      alive = false;
      vi.advanceTimersByTime(30_000);
      expect(sent).toHaveLength(2);
      n.close();
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('the units as shipped (manifests/systemd/)', () => {
  const unit = (f: string) => readFileSync(fileURLToPath(new URL(`../../manifests/systemd/${f}`, import.meta.url)), 'utf8');
  it('the shim: notify with a watchdog, restarted for ever, containerd wanted but not required', () => {
    const text = unit('ulysses-kubelet-shim.service');
    expect(unitSettings(text)).toMatchObject({ type: 'notify', restart: 'always', restartSec: 1, watchdogSec: 10, timeoutAbortSec: 2 });
    expect(text).toMatch(/^StartLimitIntervalSec=0$/m);
    expect(text).toMatch(/^Wants=containerd\.service$/m);
    expect(text).toMatch(/^After=containerd\.service$/m);
    expect(text).not.toMatch(/^(Requires|BindsTo)=/m);
    expect(text).toMatch(/^NotifyAccess=main$/m);
  });
  it('the fallback guard: its own unit on the same config file, restarted for ever', () => {
    const text = unit('ulysses-kubelet-shim-fallback.service');
    expect(unitSettings(text)).toMatchObject({ restart: 'always' });
    expect(text).toMatch(/^ExecStart=\/opt\/ulysses\/manifests\/entrypoint\.sh kubelet-shim-fallback --config \/etc\/ulysses\/kubelet-shim\.yaml$/m);
    expect(text).toMatch(/^StartLimitIntervalSec=0$/m);
  });
});
