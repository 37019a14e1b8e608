#!/usr/bin/env -S npx tsx
/**
 * The Ulysses scheduler extender process:
 *
 *   npm run start:scheduler-extender -- --config scheduler-plugins/extender/example-config.yaml --kubeconfig ~/.kube/config
 *
 * Serves /filter, /prioritize, /bind, /metrics, /healthz on the config's `listen` address (flags
 * --host/--port win), and runs the node-assurance updater and the rescheduler when their config
 * sections enable them. SIGHUP re-reads the config file and applies it live (setConfig);
 * SIGTERM/SIGINT stop. This file only wires config, kubeconfig and the server.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { loadKubeConfig } from '../../core/kubeconfig.ts';
import { componentLogger } from '../../core/logging.ts';
import { serveMetrics } from '../../core/metrics.ts';
import { onShutdownSignal } from '../../core/shutdown.ts';
import { extenderConfig, loadExtenderConfig, type ExtenderConfig } from './config.ts';
import { ExtenderServer } from './server.ts';
import { extenderRuntimeWatcher, withRuntime } from './runtime.ts';
import { NodeAssuranceUpdater } from '../assurance/updater.ts';
import { AssuranceRescheduler } from '../assurance/rescheduler.ts';

export interface RunningExtender {
  readonly server: ExtenderServer;
  /** Applies a config to the server and starts/stops/reconfigures the updater and the rescheduler. */
  apply(cfg: ExtenderConfig): Promise<void>;
  stop(): Promise<void>;
}

export interface StartExtenderOptions {
  configFile?: string;
  kubeconfig?: string;
  host?: string;
  port?: number;
  runtimeConfig?: boolean;
  /** The informers in a worker thread (default true, ExtenderServerOptions.informerThread). */
  informerThread?: boolean;
  /** Called with the server before it starts its informers and listens (e.g. the benchmark adds a fastify hook). */
  beforeStart?: (server: ExtenderServer) => void;
}

export async function startExtender(opts: StartExtenderOptions): Promise<RunningExtender> {
  const load = async (): Promise<ExtenderConfig> => {
    const base = opts.configFile ? await loadExtenderConfig(opts.configFile) : extenderConfig({});
    return extenderConfig({ ...base, listen: { host: opts.host ?? base.listen.host, port: opts.port ?? base.listen.port } }, 'scheduler-extender flags');
  };
  const kc = await loadKubeConfig(opts.kubeconfig);
  const cfg = await load();
  const server = new ExtenderServer({ config: cfg, kubeconfig: kc, informerThread: opts.informerThread });
  opts.beforeStart?.(server);
  await server.start();
  const log = componentLogger('scheduler-extender');
  let updater: NodeAssuranceUpdater | undefined;
  let rescheduler: AssuranceRescheduler | undefined;
  const apply = async (c: ExtenderConfig) => {
    server.setConfig(c);
    if (c.assuranceUpdater.enabled && !updater) {
      updater = new NodeAssuranceUpdater(kc, { rules: c.assuranceUpdater.rules });
      await updater.start();
    } else if (c.assuranceUpdater.enabled) updater!.setConfig({ rules: c.assuranceUpdater.rules });
    else if (updater) {
      updater.stop();
      updater = undefined;
    }
    if (c.rescheduler.enabled && !rescheduler) {
      rescheduler = new AssuranceRescheduler(kc, c.rescheduler, c);
      await rescheduler.start();
    } else rescheduler?.setConfig(c.rescheduler, c); // disabled: it stays idle
  };
  // spec.schedulerExtender of UlyssesConfig/default switches plugins live, over the file config
  let base = cfg;
  const runtime = opts.runtimeConfig === false ? undefined : extenderRuntimeWatcher(kc, apply, () => base, log);
  await apply(cfg);
  await runtime?.start();
  process.on('SIGHUP', () => {
    load().then(
      (next) => {
        base = next;
        return runtime?.current ? apply(withRuntime(base, runtime.current)) : apply(base);
      },
      (err: Error) => log.error({ err: err.message }, 'config reload failed: keeping the current configuration'),
    );
  });
  return {
    server,
    apply,
    stop: async () => {
      await runtime?.stop();
      updater?.stop();
      rescheduler?.stop();
      await server.stop();
    },
  };
}

const isMain = (() => {
  try {
    return realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
})();

if (isMain) {
  const port = (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`--port must be an integer in 0..65535, got "${v}"`);
    return n;
  };
  const program = new Command('scheduler-extender')
    .description('Ulysses kube-scheduler extender: assurance, real-time and TDMA filtering, scoring and reservations')
    .option('--config <file>', 'ExtenderConfig file (YAML or JSON)')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG or ~/.kube/config)')
    .option('--host <host>', 'listen host (overrides the config)')
    .option('--port <port>', 'listen port (overrides the config)', port)
    .option('--bind-address <host>', 'listen host (kube-style alias of --host)')
    .option('--metrics-port <port>', 'also serve /metrics and /healthz on this port (e.g. for a separate metrics Service)', port)
    .option('--no-runtime-config', 'do not watch UlyssesConfig/default (spec.schedulerExtender)')
    .action(async (o) => {
      const running = await startExtender({ configFile: o.config, kubeconfig: o.kubeconfig, host: o.host ?? o.bindAddress, port: o.port, runtimeConfig: o.runtimeConfig });
      const metrics = o.metricsPort !== undefined ? await serveMetrics(o.metricsPort, o.host ?? o.bindAddress) : undefined;
      onShutdownSignal(() => Promise.all([running.stop(), metrics?.close()]));
    });
  program.parseAsync().catch((err: Error) => {
    console.error(err.message);
    process.exit(1);
  });
}
