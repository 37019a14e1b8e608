#!/usr/bin/env -S npx tsx
/**
 * The runtime fallback: a small process beside the kubelet-shim (its own unit,
 * manifests/systemd/ulysses-kubelet-shim-fallback.service) that keeps the kubelet on a working
 * runtime when the shim stays down.
 *
 *   entrypoint.sh kubelet-shim-fallback --config /etc/ulysses/kubelet-shim.yaml
 *
 * Every `checkMs` it calls CRI `Version` through the shim's socket (the kubelet's path) and straight
 * on containerd's.
 * - **Fall back**: the shim has not answered for `afterMs` while containerd answers. Its socket path is
 *   replaced, atomically, by a symlink to containerd's socket. The kubelet's CRI client redials the
 *   path it was given (grpc backoff of at most 3 s, k8s.io/cri-client remote_runtime.go), so it
 *   reaches containerd without a restart: pods keep being started and stopped, unpaced. The kubelet
 *   reports "container runtime is down" only after 30 s without a runtime answer (kubelet.go
 *   maxWaitForContainerRuntime), so the node stays Ready.
 * - **Containerd down too**: nothing to fall back to; nothing is changed.
 * - **Return**: the shim, started again (systemd's Restart=always), replaces the symlink with its
 *   socket (proxy.ts removeStaleSocket). The kubelet keeps its connection to containerd until it
 *   redials, so once the shim has answered for `returnAfterMs` the guard restarts the kubelet
 *   (`kubeletRestart`), which dials the shim again. Running pods are not touched by a kubelet restart.
 * The fallback's state is on disk (the symlink, and `<socket>.fallback` while the kubelet may still be
 * on containerd), so a restarted guard picks up where it was.
 */
import { execFile } from 'node:child_process';
import { existsSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { Counter, Gauge, type Registry } from 'prom-client';
import { z } from 'zod';
import { componentLogger, type Logger } from '../core/logging.ts';
import { metricsRegistry, serveMetrics } from '../core/metrics.ts';
import { onShutdownSignal } from '../core/shutdown.ts';
import { ConfigError } from '../core/config.ts';
import { CriClient } from './cri-client.ts';
import { probeCri, type CriProbeResult } from './health.ts';
import { runPeriodically, type Periodic } from '../core/periodic.ts';
import { markerPath, pointAtBackend, socketIdentity, socketPathState, type SocketPathState } from './socket-path.ts';

export const FallbackConfigSchema = z
  .object({
    /** Period of the guard's checks. */
    checkMs: z.number().int().min(100).max(60_000).default(1000),
    /** A CRI call not answered within this counts as no answer. */
    probeTimeoutMs: z.number().int().min(100).max(60_000).default(2000),
    /** The shim unanswering this long (containerd answering): the kubelet is put on containerd. */
    afterMs: z.number().int().min(1000).max(600_000).default(5000),
    /** The shim back and answering this long: the kubelet is restarted onto it. */
    returnAfterMs: z.number().int().min(1000).max(3_600_000).default(30_000),
    /** argv that restarts the kubelet (no shell). */
    kubeletRestart: z.array(z.string().min(1)).min(1).max(32).default(['systemctl', 'restart', 'kubelet']),
    /** Port of the guard's /metrics (unset: none). */
    metricsPort: z.number().int().min(0).max(65535).optional(),
  })
  .strict();
export type FallbackConfig = z.output<typeof FallbackConfigSchema>;

export interface FallbackMetrics {
  readonly active: Gauge;
  readonly transitions: Counter<'to'>;
  readonly checks: Counter<'target' | 'result'>;
}

const byRegistry = new WeakMap<Registry, FallbackMetrics>();

export function fallbackMetrics(registry: Registry = metricsRegistry()): FallbackMetrics {
  let m = byRegistry.get(registry);
  if (!m) {
    m = {
      active: new Gauge({
        name: 'ulysses_kubelet_shim_fallback_active',
        help: "1 while the kubelet-shim's socket points at containerd (the shim stayed down) or the kubelet has not been moved back onto the shim yet, else 0.",
        registers: [registry],
      }),
      transitions: new Counter({
        name: 'ulysses_kubelet_shim_fallback_transitions_total',
        help: 'Runtime fallbacks of the kubelet: to="containerd" (the shim stayed down), to="shim" (the kubelet restarted onto the shim again).',
        labelNames: ['to'],
        registers: [registry],
      }),
      checks: new Counter({
        name: 'ulysses_kubelet_shim_fallback_checks_total',
        help: "The fallback guard's CRI Version calls, by target (shim, containerd) and result (ok, error, timeout).",
        labelNames: ['target', 'result'],
        registers: [registry],
      }),
    };
    byRegistry.set(registry, m);
  }
  return m;
}

export interface RuntimeFallbackOptions {
  listen: string;
  backend: string;
  config: FallbackConfig;
  log: Logger;
  metrics?: FallbackMetrics;
  /** CRI probes; tests replace them. */
  probe?: (target: 'shim' | 'containerd') => Promise<CriProbeResult>;
  /** Runs `config.kubeletRestart`; tests replace it. */
  restartKubelet?: () => Promise<void>;
  now?: () => number;
}

/** The guard's decision loop (see the file comment). */
export class RuntimeFallback {
  private shimDownSince: number | undefined;
  private shimUpSince: number | undefined;
  private loop: Periodic | undefined;
  private readonly clients: { shim?: CriClient; containerd?: CriClient } = {};

  constructor(private readonly o: RuntimeFallbackOptions) {}

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  private async probe(target: 'shim' | 'containerd'): Promise<CriProbeResult> {
    let r: CriProbeResult;
    if (this.o.probe) r = await this.o.probe(target);
    else {
      const client = (this.clients[target] ??= new CriClient(target === 'shim' ? this.o.listen : this.o.backend));
      const p = await probeCri(client, this.o.config.probeTimeoutMs);
      r = p.result;
    }
    this.o.metrics?.checks.inc({ target, result: r });
    return r;
  }

  private restartKubelet(): Promise<void> {
    if (this.o.restartKubelet) return this.o.restartKubelet();
    const [cmd, ...args] = this.o.config.kubeletRestart;
    return new Promise((resolve, reject) =>
      execFile(cmd!, args, { timeout: 120_000 }, (err, _out, stderr) => (err ? reject(new Error(`${this.o.config.kubeletRestart.join(' ')}: ${err.message} ${String(stderr).slice(-500)}`)) : resolve())),
    );
  }

  /** Whether the kubelet may still be on containerd (the fallback happened and no return yet). */
  pending(): boolean {
    return existsSync(markerPath(this.o.listen));
  }

  /** One check and what follows from it; returns the state of the socket path after it. */
  async tick(): Promise<SocketPathState> {
    const { listen, backend, config, log } = this.o;
    const state = socketPathState(listen, backend);
    const now = this.now();
    if (state === 'fallback' || state === 'other') {
      // the kubelet is on containerd (or something we do not own is there: leave it)
      this.shimDownSince = this.shimUpSince = undefined;
      this.o.metrics?.active.set(state === 'fallback' ? 1 : 0);
      return state;
    }
    const probed = socketIdentity(listen);
    const shim = state === 'shim' ? await this.probe('shim') : 'error';
    if (shim === 'ok') {
      this.shimDownSince = undefined;
      if (!this.pending()) {
        this.o.metrics?.active.set(0);
        return state;
      }
      this.shimUpSince ??= now;
      if (now - this.shimUpSince < config.returnAfterMs) return state;
      log.info({ listen, upMs: now - this.shimUpSince }, 'the kubelet-shim answers again: restarting the kubelet onto it');
      try {
        await this.restartKubelet();
      } catch (err) {
        log.error({ err: (err as Error).message }, 'kubelet restart failed: the kubelet stays on containerd, trying again next period');
        return state;
      }
      rmSync(markerPath(listen), { force: true });
      this.shimUpSince = undefined;
      this.o.metrics?.active.set(0);
      this.o.metrics?.transitions.inc({ to: 'shim' });
      return state;
    }
    this.shimUpSince = undefined;
    this.shimDownSince ??= now;
    const downMs = now - this.shimDownSince;
    if (downMs < config.afterMs) return state;
    // only a runtime that answers is worth falling back to
    const runtime = await this.probe('containerd');
    if (runtime !== 'ok') {
      if (downMs - config.afterMs < config.checkMs) log.warn({ listen, backend, shim, runtime }, 'the kubelet-shim does not answer, but containerd does not either: no fallback');
      return state;
    }
    // the shim may have been restarted while it was asked (a new socket): never replace one unasked
    if (socketIdentity(listen) !== probed) return socketPathState(listen, backend);
    writeFileSync(markerPath(listen), `${new Date(this.now()).toISOString()}\n`);
    pointAtBackend(listen, backend);
    this.shimDownSince = undefined;
    this.o.metrics?.active.set(1);
    this.o.metrics?.transitions.inc({ to: 'containerd' });
    log.error({ listen, backend, shim, downMs }, 'the kubelet-shim did not answer: the kubelet is put on containerd directly (its socket path now points there; pods are created unpaced until the shim is back)');
    return 'fallback';
  }

  start(): void {
    // kept alive: the loop is what keeps the guard's process running
    this.loop ??= runPeriodically(() => this.tick(), this.o.config.checkMs, { keepAlive: true, onError: (err) => this.o.log.error({ err: err.message }, 'fallback check failed') });
  }

  stop(): void {
    this.loop?.stop();
    this.clients.shim?.close();
    this.clients.containerd?.close();
  }
}

async function main(argv: string[]): Promise<void> {
  const program = new Command('kubelet-shim-fallback')
    .description("keeps the kubelet on a working runtime: containerd directly while the kubelet-shim stays down, the shim again once it is back")
    .requiredOption('--config <file>', "the kubelet-shim's configuration file (listen, backend, fallback)")
    .parse(argv);
  const { config: file } = program.opts<{ config: string }>();
  const log = componentLogger('kubelet-shim-fallback');
  // imported here: config.ts imports this file's schema
  const { loadShimConfig } = await import('./config.ts');
  let config;
  try {
    config = await loadShimConfig(file);
    if (!config.listen || !config.backend) throw new ConfigError(file, [{ field: config.listen ? 'backend' : 'listen', message: 'required by the fallback guard' }]);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const guard = new RuntimeFallback({ listen: config.listen, backend: config.backend, config: config.fallback, log, metrics: fallbackMetrics() });
  const server = config.fallback.metricsPort !== undefined ? await serveMetrics(config.fallback.metricsPort, '127.0.0.1') : undefined;
  log.info({ listen: config.listen, backend: config.backend, fallback: config.fallback, state: socketPathState(config.listen, config.backend) }, 'runtime fallback guard running');
  guard.start();
  onShutdownSignal(async () => {
    guard.stop();
    await server?.close();
  }, { log });
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  main(process.argv).catch((err: Error) => {
    console.error(`kubelet-shim-fallback: ${err.stack ?? err.message}`);
    process.exit(1);
  });
}
