/**
 * Entry point of the SLO-aware controller manager image / static pod:
 *   tsx controller-manager/main.ts [--kubeconfig F] [--config F] [--metrics-port 10357]
 *     [--leader-elect=true|false] [--leader-elect-lease-duration 15s] [--leader-elect-renew-deadline 10s]
 *     [--leader-elect-retry-period 2s] [--leader-elect-resource-namespace kube-system]
 *     [--leader-elect-resource-name ulysses-controller-manager] [--identity ID] [--runtime-config=true|false]
 * The config file (YAML/JSON) sets per-controller worker pools and the client limiter, e.g.
 *   controllers: [replicaset, deployment]
 *   pools: { replicaset: { mode: multi-priority-periodic, workers: 5, periodMs: 100 } }
 *   auto: [deployment]        # vanilla until a high-criticality pod exists, then periodic
 *   autoHoldMs: 30000
 *   criticalPathHoldMs: 1500  # default: low-priority periodic work waits while a critical pod starts (max per pod); 0 = off
 *   apiQps: 20
 *   apiBurst: 30
 *   nodeFailure: { periodMs: 100, windowMs: 600 }   # fast node-failure detection (node-failure.ts), on by default
 *   detectDuplicateControllers: true                # kcm pods running a replaced controller reported (duplicate-controllers.ts)
 * With leader election (the default, as kube-controller-manager) the controllers run only while
 * this process holds the Lease; losing it stops them and exits with status 1 (kcm does the same),
 * SIGTERM stops them and releases the Lease.
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { loadConfigFile, validateConfig } from '../core/config.ts';
import { KubeClient } from '../core/kube.ts';
import { loadKubeAccess } from '../core/kubeconfig.ts';
import { waitForKcmTakeBack } from './kcm-gate.ts';
import { defaultIdentity, DEFAULT_LEASE_DURATION_S, DEFAULT_RENEW_DEADLINE_S, DEFAULT_RETRY_PERIOD_S, LeaderElector, parseDurationSeconds as parseSeconds } from '../core/leader-election.ts';
import { componentLogger } from '../core/logging.ts';
import { serveMetrics } from '../core/metrics.ts';
import { onShutdownSignal } from '../core/shutdown.ts';
import { WorkerPoolConfigSchema } from './queue/index.ts';
import { CONTROLLERS, ControllerManager } from './manager.ts';
import { DEFAULT_CRITICAL_PATH_HOLD_MS } from './critical-path-hold.ts';
import { controllerManagerRuntimeWatcher } from './runtime.ts';
import { sloRuntimeWatcher } from './recovery-slo.ts';
import { apfRuntimeWatcher } from '../apf-configs/runtime.ts';
import { NodeFailureConfigSchema, nodeFailureRuntimeWatcher } from './node-failure.ts';

export const ControllerManagerConfigSchema = z
  .object({
    controllers: z.array(z.enum(CONTROLLERS)).default([...CONTROLLERS]),
    pools: z.partialRecord(z.enum(CONTROLLERS), WorkerPoolConfigSchema).default({}),
    auto: z.array(z.enum(CONTROLLERS)).default([]),
    autoHoldMs: z.number().nonnegative().max(3_600_000).optional(),
    criticalPathHoldMs: z.number().int().min(0).max(60_000).default(DEFAULT_CRITICAL_PATH_HOLD_MS),
    apiQps: z.number().positive().default(20),
    apiBurst: z.number().int().positive().default(30),
    priorityClassThreshold: z.number().int().optional(),
    stripManagedFields: z.boolean().default(true),
    cacheProjection: z.boolean().default(true),
    /** fast node-failure detection (node-failure.ts); on by default, UlyssesConfig spec.nodeFailure overrides it */
    nodeFailure: NodeFailureConfigSchema.prefault({}),
    /** report kube-controller-manager pods running a replaced controller too (duplicate-controllers.ts) */
    detectDuplicateControllers: z.boolean().default(true),
  })
  .strict();

export async function main(argv = process.argv.slice(2)): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: 'string' },
      config: { type: 'string' },
      'metrics-port': { type: 'string', default: '10357' },
      'leader-elect': { type: 'string', default: 'true' },
      'leader-elect-lease-duration': { type: 'string', default: `${DEFAULT_LEASE_DURATION_S}s` },
      'leader-elect-renew-deadline': { type: 'string', default: `${DEFAULT_RENEW_DEADLINE_S}s` },
      'leader-elect-retry-period': { type: 'string', default: `${DEFAULT_RETRY_PERIOD_S}s` },
      'leader-elect-resource-namespace': { type: 'string', default: 'kube-system' },
      'leader-elect-resource-name': { type: 'string', default: 'ulysses-controller-manager' },
      identity: { type: 'string' },
      'runtime-config': { type: 'string', default: 'true' },
    },
  });
  const log = componentLogger('controller-manager');
  const cfg = values.config ? await loadConfigFile(ControllerManagerConfigSchema, values.config) : validateConfig(ControllerManagerConfigSchema, {}, 'defaults');
  if (!['true', 'false'].includes(values['leader-elect']!)) throw new Error(`--leader-elect: expected true or false, got ${JSON.stringify(values['leader-elect'])}`);
  // not client-node's KubeConfig unless the kubeconfig needs it: its module costs ~70 MiB RSS
  const kubeconfig = await loadKubeAccess(values.kubeconfig, (reason) => log.info({ reason }, 'kubeconfig needs @kubernetes/client-node'));
  const identity = values.identity ?? defaultIdentity();
  const metrics = await serveMetrics(Number(values['metrics-port']));
  log.info({ metricsPort: metrics.port, identity }, 'serving /metrics');
  if (!['true', 'false'].includes(values['runtime-config']!)) throw new Error(`--runtime-config: expected true or false, got ${JSON.stringify(values['runtime-config'])}`);
  let cm: ControllerManager | undefined;
  // UlyssesConfig/default: spec.controllerManager (modes per controller), spec.apf (the APF
  // exemption, hosted here because this process is leader-elected) and spec.slo (the critical-recovery
  // SLO this process measures, recovery-slo.ts), applied live while leading
  let watchers: Array<{ stop(): Promise<void> }> = [];
  const startControllers = async (signal?: AbortSignal) => {
    // never beside kcm running the same controllers (kcm-gate.ts: a handback while no leader was)
    if (signal) await waitForKcmTakeBack(new KubeClient(kubeconfig), log, signal);
    if (signal?.aborted) return;
    cm = new ControllerManager({ kubeconfig, ...cfg, identity, log });
    await cm.start();
    if (values['runtime-config'] === 'true') {
      const w = [
        controllerManagerRuntimeWatcher(kubeconfig, cm, cfg.controllers, log),
        apfRuntimeWatcher(kubeconfig, log),
        sloRuntimeWatcher(kubeconfig, cm.recoveries, log),
        ...(cm.nodeFailure ? [nodeFailureRuntimeWatcher(kubeconfig, cm.nodeFailure, cfg.nodeFailure, log)] : []),
      ];
      watchers = w;
      for (const x of w) await x.start();
    }
  };
  const stopControllers = async () => {
    await Promise.all(watchers.map((w) => w.stop()));
    watchers = [];
    log.info('runtime-config watchers stopped');
    await cm?.stop();
    log.info('controllers stopped');
  };
  let elector: LeaderElector | undefined;
  if (values['leader-elect'] === 'true') {
    elector = new LeaderElector({
      client: new KubeClient(kubeconfig),
      namespace: values['leader-elect-resource-namespace'],
      name: values['leader-elect-resource-name']!,
      identity,
      component: 'controller-manager',
      leaseDurationSeconds: parseSeconds('leader-elect-lease-duration', values['leader-elect-lease-duration']!),
      renewDeadlineSeconds: parseSeconds('leader-elect-renew-deadline', values['leader-elect-renew-deadline']!),
      retryPeriodSeconds: parseSeconds('leader-elect-retry-period', values['leader-elect-retry-period']!),
      log,
      onStartedLeading: startControllers,
      onStoppedLeading: async (reason) => {
        await stopControllers();
        if (reason === 'lost') {
          log.fatal('leader election lost: exiting');
          process.exit(1);
        }
      },
    });
    void elector.run();
  } else {
    await startControllers();
  }
  onShutdownSignal(async () => {
    if (elector) await elector.stop();
    else await stopControllers();
    await metrics.close();
  }, { log });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: Error) => {
    console.error(`controller-manager: ${err.message}`);
    process.exit(1);
  });
}
