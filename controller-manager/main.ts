/**
 * Entry point of the SLO-aware controller manager image / static pod:
 *   tsx controller-manager/main.ts [--kubeconfig F] [--config F] [--metrics-port 10357]
 * The config file (YAML/JSON) sets per-controller worker pools and the client limiter, e.g.
 *   controllers: [replicaset]
 *   pools: { replicaset: { mode: multi-priority-periodic, workers: 5, periodMs: 100 } }
 *   apiQps: 20
 *   apiBurst: 30
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { loadConfigFile, validateConfig } from '../core/config.ts';
import { loadKubeConfig } from '../core/kube.ts';
import { componentLogger } from '../core/logging.ts';
import { serveMetrics } from '../core/metrics.ts';
import { WorkerPoolConfigSchema } from './queue/index.ts';
import { CONTROLLERS, ControllerManager } from './manager.ts';

export const ControllerManagerConfigSchema = z
  .object({
    controllers: z.array(z.enum(CONTROLLERS)).default([...CONTROLLERS]),
    pools: z.partialRecord(z.enum(CONTROLLERS), WorkerPoolConfigSchema).default({}),
    apiQps: z.number().positive().default(20),
    apiBurst: z.number().int().positive().default(30),
    priorityClassThreshold: z.number().int().optional(),
  })
  .strict();

export async function main(argv = process.argv.slice(2)): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { kubeconfig: { type: 'string' }, config: { type: 'string' }, 'metrics-port': { type: 'string', default: '10357' } },
  });
  const log = componentLogger('controller-manager');
  const cfg = values.config ? await loadConfigFile(ControllerManagerConfigSchema, values.config) : validateConfig(ControllerManagerConfigSchema, {}, 'defaults');
  const cm = new ControllerManager({ kubeconfig: loadKubeConfig(values.kubeconfig), ...cfg, log });
  const metrics = await serveMetrics(Number(values['metrics-port']));
  log.info({ metricsPort: metrics.port }, 'serving /metrics');
  await cm.start();
  const shutdown = async () => {
    await cm.stop();
    await metrics.close();
    process.exit(0);
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: Error) => {
    console.error(`controller-manager: ${err.message}`);
    process.exit(1);
  });
}
