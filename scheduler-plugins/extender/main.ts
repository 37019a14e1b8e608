#!/usr/bin/env -S npx tsx
/**
 * The Ulysses scheduler extender process:
 *
 *   npm run start:scheduler-extender -- --config scheduler-plugins/extender/example-config.yaml --kubeconfig ~/.kube/config
 *
 * Serves /filter, /prioritize, /bind, /metrics, /healthz on the config's `listen` address (flags
 * --host/--port win). SIGHUP re-reads the config file and applies it live (setConfig);
 * SIGTERM/SIGINT stop. This file only wires config, kubeconfig and the server.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { loadKubeConfig } from '../../core/kube.ts';
import { componentLogger } from '../../core/logging.ts';
import { serveMetrics } from '../../core/metrics.ts';
import { extenderConfig, loadExtenderConfig, type ExtenderConfig } from './config.ts';
import { ExtenderServer } from './server.ts';
import { applyExtenderRuntime, extenderRuntimeWatcher } from './runtime.ts';

export async function startExtender(opts: { configFile?: string; kubeconfig?: string; host?: string; port?: number; runtimeConfig?: boolean }): Promise<ExtenderServer> {
  const load = async (): Promise<ExtenderConfig> => {
    const base = opts.configFile ? await loadExtenderConfig(opts.configFile) : extenderConfig({});
    return extenderConfig({ ...base, listen: { host: opts.host ?? base.listen.host, port: opts.port ?? base.listen.port } }, 'scheduler-extender flags');
  };
  let base = await load();
  const kc = loadKubeConfig(opts.kubeconfig);
  const server = new ExtenderServer({ config: base, kubeconfig: kc });
  await server.start();
  const log = componentLogger('scheduler-extender');
  // spec.schedulerExtender of UlyssesConfig/default switches plugins live, over the file config
  const runtime = opts.runtimeConfig === false ? undefined : extenderRuntimeWatcher(kc, server, () => base, log);
  await runtime?.start();
  process.on('SIGHUP', () => {
    load().then(
      (cfg) => {
        base = cfg;
        server.setConfig(cfg);
        if (runtime?.current) applyExtenderRuntime(server, base, runtime.current);
      },
      (err: Error) => log.error({ err: err.message }, 'config reload failed: keeping the current configuration'),
    );
  });
  return server;
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
      const server = await startExtender({ configFile: o.config, kubeconfig: o.kubeconfig, host: o.host ?? o.bindAddress, port: o.port, runtimeConfig: o.runtimeConfig });
      const metrics = o.metricsPort !== undefined ? await serveMetrics(o.metricsPort, o.host ?? o.bindAddress) : undefined;
      const stop = () => void Promise.all([server.stop(), metrics?.close()]).then(() => process.exit(0));
      process.once('SIGTERM', stop);
      process.once('SIGINT', stop);
    });
  program.parseAsync().catch((err: Error) => {
    console.error(err.message);
    process.exit(1);
  });
}
