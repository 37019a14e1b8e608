/** The controller manager's queueing layer: priority work queue, rate limiters, worker pool. */
export { FakeClock, realClock, settle, sleepUntil, type Clock, type Timer } from '../../core/clock.ts';
export { DelayingWorkQueue } from './delaying.ts';
export { noQueueMetrics, queueMetrics, workerMetrics, type QueueMetrics, type QueueSnapshot } from './metrics.ts';
export {
  parseWorkerPoolConfig,
  THESIS_PERIODS_MS,
  WORKER_MODES,
  WorkerModeSchema,
  WorkerPoolConfigSchema,
  type WorkerMode,
  type WorkerPoolConfig,
  type WorkerPoolConfigInput,
} from './pool-config.ts';
export { PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NAMES, PRIORITY_NONE, priorityName, toPriority, type Priority, type PriorityLike, type PriorityName } from '../../core/priority.ts';
export { WorkQueue, type GetOptions, type PriorityAdmission, type QueueItem, type WorkQueueOptions } from './queue.ts';
export {
  BucketRateLimiter,
  defaultControllerRateLimiter,
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  type RateLimiter,
} from './rate-limiters.ts';
export { PriorityWorkQueue, type PriorityWorkQueueOptions } from './rate-limiting.ts';
export { FifoStorage, PriorityStorage, type Ordering, type QueueEntry, type QueueStorage } from './storage.ts';
export { TokenBucket, type TokenBucketOptions } from '../../core/token-bucket.ts';
export {
  KCM_API_BURST,
  KCM_API_QPS,
  TerminalError,
  WorkerPool,
  type ReconcileContext,
  type ReconcileResult,
  type Reconciler,
  type WorkerPoolOptions,
  type WorkerPoolStats,
} from './worker-pool.ts';
