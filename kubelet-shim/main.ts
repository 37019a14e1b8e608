#!/usr/bin/env -S npx tsx
/**
 * kubelet-shim: the CRI proxy between one kubelet and its containerd, with RunPodSandbox pacing.
 *
 *   npx tsx kubelet-shim/main.ts --listen /run/ulysses/kubelet-shim.sock \
 *       --backend /run/containerd/containerd.sock --config kubelet-shim/configs/thesis-cloud.yaml --metrics-port 10260
 *
 * Point the kubelet at it with containerRuntimeEndpoint/imageServiceEndpoint: unix://<listen>.
 * SIGHUP re-reads the config file and applies its `pacing` section (waiting requests are kept);
 * SIGTERM/SIGINT stop accepting calls, let running ones finish (2 s) and remove the socket.
 * This file only wires config, logger, metrics, gate and proxy.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { componentLogger, type Logger } from '../core/logging.ts';
import { serveMetrics } from '../core/metrics.ts';
import { ConfigError } from '../core/config.ts';
import { loadShimConfig, parseShimConfig, type ShimConfig } from './config.ts';
import { PacingGate } from './pacing.ts';
import { CriProxy } from './proxy.ts';
import { shimMetrics } from './metrics.ts';

export interface RunningShim {
  readonly proxy: CriProxy;
  readonly gate: PacingGate;
  readonly config: ShimConfig;
  readonly metricsPort: number | undefined;
  /** Re-reads `configFile` and applies its pacing section. */
  reload(): Promise<void>;
  stop(): Promise<void>;
}

export interface ShimOptions {
  listen?: string;
  backend?: string;
  configFile?: string;
  metricsPort?: number;
  log?: Logger;
}

/** Starts the shim; flags win over the config file. */
export async function startShim(opts: ShimOptions): Promise<RunningShim> {
  const log = opts.log ?? componentLogger('kubelet-shim');
  const fromFile = opts.configFile ? await loadShimConfig(opts.configFile) : parseShimConfig({});
  const config = parseShimConfig({
    ...fromFile,
    ...(opts.listen ? { listen: opts.listen } : {}),
    ...(opts.backend ? { backend: opts.backend } : {}),
    metrics: { ...fromFile.metrics, ...(opts.metricsPort !== undefined ? { port: opts.metricsPort } : {}) },
  }, 'kubelet-shim flags');
  if (!config.listen) throw new ConfigError('kubelet-shim flags', [{ field: 'listen', message: 'required (--listen or `listen:` in the config file)' }]);
  if (!config.backend) throw new ConfigError('kubelet-shim flags', [{ field: 'backend', message: 'required (--backend or `backend:` in the config file)' }]);

  const metrics = shimMetrics();
  const gate = new PacingGate({ config: config.pacing, log, metrics });
  const proxy = new CriProxy({
    listen: config.listen,
    backend: config.backend,
    gate,
    log,
    metrics,
    maxMessageBytes: config.maxMessageBytes,
    connectTimeoutMs: config.connectTimeoutMs,
    socketMode: parseInt(config.socketMode, 8),
  });
  await proxy.start();
  const server = config.metrics.port !== undefined ? await serveMetrics(config.metrics.port, config.metrics.host) : undefined;
  if (server) log.info({ port: server.port, host: config.metrics.host }, 'metrics served on /metrics');

  return {
    proxy,
    gate,
    config,
    metricsPort: server?.port,
    async reload() {
      if (!opts.configFile) return;
      const next = await loadShimConfig(opts.configFile);
      gate.reconfigure(next.pacing);
    },
    async stop() {
      await proxy.close(2000);
      await server?.close();
    },
  };
}

const nonNegativeInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`${name} must be a port number, got "${v}"`);
  return n;
};

async function main(argv: string[]): Promise<void> {
  const program = new Command('kubelet-shim')
    .description('CRI proxy between kubelet and containerd that paces low-priority pod creations (Ulysses, thesis §5.3.4)')
    .option('--listen <socket>', 'unix socket for the kubelet (containerRuntimeEndpoint)')
    .option('--backend <socket>', "containerd's unix socket")
    .option('--config <file>', 'YAML/JSON config file (pacing policy etc.); SIGHUP reloads its pacing section')
    .option('--metrics-port <n>', 'serve /metrics on this port (0: any free port)', nonNegativeInt('--metrics-port'))
    .parse(argv);
  const o = program.opts<{ listen?: string; backend?: string; config?: string; metricsPort?: number }>();
  const log = componentLogger('kubelet-shim');
  let shim: RunningShim;
  try {
    shim = await startShim({ listen: o.listen, backend: o.backend, configFile: o.config, metricsPort: o.metricsPort, log });
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  process.on('SIGHUP', () => {
    shim.reload().catch((err: Error) => log.error({ err: err.message }, 'config reload failed; pacing unchanged'));
  });
  let stopping = false;
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.on(sig, () => {
      if (stopping) return;
      stopping = true;
      log.info({ signal: sig }, 'stopping');
      shim.stop().then(
        () => process.exit(0),
        (err: Error) => {
          log.error({ err: err.message }, 'unclean stop');
          process.exit(1);
        },
      );
    });
  }
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  main(process.argv).catch((err: Error) => {
    console.error(`kubelet-shim: ${err.stack ?? err.message}`);
    process.exit(1);
  });
}
