/**
 * PriorityWorkQueue: the rate-limiting layer on top of DelayingWorkQueue (client-go
 * rate_limiting_queue.go), i.e. the full queue a controller uses. See queue.ts for the contract.
 */
import { DelayingWorkQueue } from './delaying.ts';
import type { PriorityLike } from '../../core/priority.ts';
import type { WorkQueueOptions } from './queue.ts';
import { defaultControllerRateLimiter, type RateLimiter } from './rate-limiters.ts';

export interface PriorityWorkQueueOptions<K> extends WorkQueueOptions {
  /** Default: client-go's max(exponential 5 ms..1000 s per key, 10 qps burst 100), on the queue's clock. */
  rateLimiter?: RateLimiter<K>;
}

export class PriorityWorkQueue<K = string> extends DelayingWorkQueue<K> {
  readonly rateLimiter: RateLimiter<K>;

  constructor(opts: PriorityWorkQueueOptions<K> = {}) {
    super(opts);
    this.rateLimiter = opts.rateLimiter ?? defaultControllerRateLimiter<K>(this.clock);
  }

  /** Adds `key` after the delay the rate limiter assigns to it (one more recorded failure). */
  addRateLimited(key: K, priority?: PriorityLike): void {
    if (this.isShuttingDown()) return;
    this.addAfter(key, this.rateLimiter.when(key), priority);
  }

  /** The key succeeded: reset its backoff. Does not remove it from the queue. */
  forget(key: K): void {
    this.rateLimiter.forget(key);
  }

  numRequeues(key: K): number {
    return this.rateLimiter.numRequeues(key);
  }
}
