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
import { loadKubeConfig } from '../../core/kube.ts';
import { componentLogger } from '../../core/logging.ts';
import { extenderConfig, loadExtenderConfig, type ExtenderConfig } from './config.ts';
import { ExtenderServer } from './server.ts';
import { NodeAssuranceUpdater } from '../assurance/updater.ts';
import { AssuranceRescheduler } from '../assurance/rescheduler.ts';

export interface RunningExtender {
  readonly server: ExtenderServer;
  /** Applies a config to the server and starts/stops/reconfigures the updater and the rescheduler. */
  apply(cfg: ExtenderConfig): Promise<void>;
  stop(): Promise<void>;
}

export async function startExtender(opts: { configFile?: string; kubeconfig?: string; host?: string; port?: number }): Promise<RunningExtender> {
  const load = async (): Promise<ExtenderConfig> => {
    const base = opts.configFile ? await loadExtenderConfig(opts.configFile) : extenderConfig({});
    return extenderConfig({ ...base, listen: { host: opts.host ?? base.listen.host, port: opts.port ?? base.listen.port } }, 'scheduler-extender flags');
  };
  const kc = loadKubeConfig(opts.kubeconfig);
  const cfg = await load();
  const server = new ExtenderServer({ config: cfg, kubeconfig: kc });
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
  await apply(cfg);
  process.on('SIGHUP', () => {
    load().then(apply, (err: Error) => log.error({ err: err.message }, 'config reload failed: keeping the current configuration'));
  });
  return {
    server,
    apply,
    stop: async () => {
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
    .action(async (o) => {
      const running = await startExtender({ configFile: o.config, kubeconfig: o.kubeconfig, host: o.host, port: o.port });
      const stop = () => void running.stop().then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
  program.parseAsync().catch((err: Error) => {
    console.error(err.message);
    process.exit(1);
  });
}
