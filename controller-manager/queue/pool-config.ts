/**
 * Serving policy of one controller's worker pool, as a validated configuration object (thesis
 * §5.3.1 and §6.1.1). Everything here can be changed at runtime with WorkerPool.setMode().
 */
import { z } from 'zod';
import { validateConfig } from '../../core/config.ts';

export const WORKER_MODES = ['vanilla', 'multi-priority-async', 'multi-priority-periodic'] as const;

/**
 * - `vanilla`: FIFO queue, `workers` async workers, every sync gated by the client-side token bucket
 *   (kube-controller-manager as shipped);
 * - `multi-priority-async`: priority queue, `workers` async workers (thesis config 4: "a vanilla
 *   Controller with only modifications for multi-priority queues", so still gated by default);
 * - `multi-priority-periodic`: priority queue; `workers - highPriorityWorkers` periodic workers,
 *   worker k ticking at phase k*T/N' of period T (one key every T/N'), plus `highPriorityWorkers`
 *   async workers that serve high-priority keys at once (the thesis' polling server).
 */
export type WorkerMode = (typeof WORKER_MODES)[number];

export const WorkerModeSchema = z.enum(WORKER_MODES);

export const WorkerPoolConfigSchema = z
  .object({
    mode: WorkerModeSchema.default('vanilla'),
    /** Workers per controller (kcm --concurrent-*-syncs default 5; thesis: 5). */
    workers: z.number().int().min(1).max(1000).default(5),
    /**
     * Async workers in `vanilla` mode where they differ from `workers`. kube-controller-manager's
     * taint-eviction controller has no worker count: each pod's eviction runs in a goroutine of its
     * own once due (TimedWorkerQueue createWorker: `go f()`), bounded only by its client limiter; the
     * controller manager gives that controller 256 here.
     */
    vanillaWorkers: z.number().int().min(1).max(1000).optional(),
    /**
     * In periodic mode, how many of `workers` are async and dedicated to high priority (thesis: 1).
     * Default 1 (0 when workers is 1).
     */
    highPriorityWorkers: z.number().int().min(0).optional(),
    /** Period T of the periodic workers (thesis: 50 ms nodes/endpoints/endpointslices, 100 ms others). */
    periodMs: z.number().positive().max(3_600_000).default(100),
    /**
     * Abuse guard: minimum inter-arrival (ms) of high-priority requests, as a token bucket of
     * `highBurst` tokens refilled every `highMinInterArrivalMs`; excess requests are queued as low
     * ("if every request has high priority, no request has high priority"). 0 disables the guard.
     */
    highMinInterArrivalMs: z.number().nonnegative().max(3_600_000).default(50),
    highBurst: z.number().int().min(1).default(5),
    /** Modes in which every sync first waits for a token of the client-side bucket. */
    rateLimitedModes: z.array(WorkerModeSchema).default(['vanilla', 'multi-priority-async']),
  })
  .strict()
  .transform((c) => ({ ...c, highPriorityWorkers: c.highPriorityWorkers ?? Math.min(1, c.workers - 1) }))
  .refine((c) => c.highPriorityWorkers < c.workers, {
    message: 'must be smaller than workers (periodic mode needs at least one periodic worker)',
    path: ['highPriorityWorkers'],
  });

export type WorkerPoolConfig = z.output<typeof WorkerPoolConfigSchema>;
export type WorkerPoolConfigInput = z.input<typeof WorkerPoolConfigSchema>;

export function parseWorkerPoolConfig(raw: unknown, source = 'worker pool'): WorkerPoolConfig {
  return validateConfig(WorkerPoolConfigSchema, raw, source);
}

/** Thesis §6.1.1 periods (ms) per controller, chosen to stay near the vanilla 20 requests/s. */
export const THESIS_PERIODS_MS = Object.freeze({
  node: 50,
  endpoints: 50,
  endpointslice: 50,
  replicaset: 100,
  deployment: 100,
  service: 100,
} as const);
