/**
 * The controller manager's section of UlyssesConfig (`spec.controllerManager`), applied live
 * (thesis §5.3.5): mode and worker-pool parameters per controller. A controller absent from the
 * section runs `vanilla` with the thesis period (declarative: removing an entry reverts it).
 */
import type { KubeAccess } from '../core/kube.ts';
import { z } from 'zod';
import type { Logger } from '../core/logging.ts';
import { RuntimeConfigWatcher } from '../core/runtime-config.ts';
import { CONTROLLERS, type ControllerName } from '../core/controllers.ts';
import { KCM_API_BURST, KCM_API_QPS, WORKER_MODES } from './queue/index.ts';
import { defaultPeriodMs, type ControllerManager } from './manager.ts';

export const RUNTIME_MODES = [...WORKER_MODES, 'auto'] as const;
export type RuntimeMode = (typeof RUNTIME_MODES)[number];

const ControllerRuntimeSchema = z
  .object({
    mode: z.enum(RUNTIME_MODES).default('vanilla'),
    periodMs: z.number().positive().max(3_600_000).optional(),
    workers: z.number().int().min(1).max(1000).optional(),
    highWorkers: z.number().int().min(0).optional(),
  })
  .strict();

/**
 * kube-controller-manager's client-side limiter (--kube-api-qps/--kube-api-burst) at runtime;
 * `enabled: false` is the thesis' "rate limiting off" (§4.3.3 Fig 4.10, §6.1 Fig 6.4). Absent: the
 * limits the process was started with.
 */
const ApiRateLimitSchema = z
  .object({
    enabled: z.boolean().default(true),
    qps: z.number().positive().optional(),
    burst: z.number().int().min(1).optional(),
  })
  .strict();

export const ControllerManagerRuntimeSchema = z
  .object({
    controllers: z.partialRecord(z.enum(CONTROLLERS), ControllerRuntimeSchema).default({}),
    apiRateLimit: ApiRateLimitSchema.optional(),
    /**
     * CriticalPathHold (critical-path-hold.ts): ms a critical pod on its way to Ready may hold the
     * periodic workers' low-priority work; 0 or absent: off.
     */
    criticalPathHoldMs: z.number().int().min(0).max(60_000).optional(),
  })
  .strict();
export type ControllerManagerRuntime = z.output<typeof ControllerManagerRuntimeSchema>;

/**
 * Applies a section to the running controllers; returns "name=mode[/periodms],...[,api-rate-limit=...]".
 * `startRate`: the client limiter's rate when no apiRateLimit is given (the process' own settings);
 * `startHoldMs`: likewise the CriticalPathHold when no criticalPathHoldMs is given.
 */
export function applyControllerManagerRuntime(
  cm: ControllerManager,
  cfg: ControllerManagerRuntime,
  enabled: readonly ControllerName[],
  startRate: { qps: number; burst: number } = { qps: KCM_API_QPS, burst: KCM_API_BURST },
  startHoldMs = 0,
): string {
  const parts: string[] = [];
  for (const name of enabled) {
    const e = cfg.controllers[name] ?? { mode: 'vanilla' as const };
    const overrides = {
      periodMs: e.periodMs ?? defaultPeriodMs(name),
      ...(e.workers !== undefined ? { workers: e.workers } : {}),
      ...(e.highWorkers !== undefined ? { highPriorityWorkers: e.highWorkers } : {}),
    };
    cm.setMode(name, e.mode, overrides);
    parts.push(`${name}=${e.mode}${e.mode === 'multi-priority-periodic' ? `/${overrides.periodMs}ms` : ''}`);
  }
  const rl = cfg.apiRateLimit;
  const burst = rl?.burst ?? startRate.burst;
  // an infinite qps never waits (TokenBucket): the limiter is off, whatever the mode
  cm.setApiRate(rl && !rl.enabled ? Infinity : (rl?.qps ?? startRate.qps), burst);
  if (rl) parts.push(`api-rate-limit=${rl.enabled ? `${rl.qps ?? startRate.qps}qps/${burst}` : 'off'}`);
  cm.criticalPathHold.setMaxHoldMs(cfg.criticalPathHoldMs ?? startHoldMs);
  if (cfg.criticalPathHoldMs) parts.push(`critical-path-hold=${cfg.criticalPathHoldMs}ms`);
  return parts.join(',');
}

export function controllerManagerRuntimeWatcher(
  kc: KubeAccess,
  cm: ControllerManager,
  enabled: readonly ControllerName[],
  log?: Logger,
): RuntimeConfigWatcher<typeof ControllerManagerRuntimeSchema> {
  const startRate = cm.apiRate;
  const startHoldMs = cm.criticalPathHold.holdMs;
  return new RuntimeConfigWatcher({
    kc,
    statusKey: 'controller-manager',
    field: 'controllerManager',
    schema: ControllerManagerRuntimeSchema,
    apply: (cfg) => applyControllerManagerRuntime(cm, cfg, enabled, startRate, startHoldMs),
    log,
  });
}
