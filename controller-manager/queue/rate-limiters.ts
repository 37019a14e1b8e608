/**
 * Per-item retry delays for `addRateLimited`, as client-go's default_rate_limiters.go. A limiter
 * answers "how long should this key wait before its next retry", remembers failures per key until
 * `forget(key)`, and is pluggable (PriorityWorkQueueOptions.rateLimiter).
 */
import type { Clock } from '../../core/clock.ts';
import { TokenBucket } from '../../core/token-bucket.ts';

export interface RateLimiter<K> {
  /** Delay (ms) before `key` may be retried; records one more failure. */
  when(key: K): number;
  /** The key succeeded: reset its failure history. */
  forget(key: K): void;
  /** Failures recorded for `key` since the last forget. */
  numRequeues(key: K): number;
}

/** base * 2^failures, capped at max (client-go: 5 ms .. 1000 s). */
export class ItemExponentialFailureRateLimiter<K> implements RateLimiter<K> {
  private readonly failures = new Map<K, number>();

  constructor(
    private readonly baseDelayMs = 5,
    private readonly maxDelayMs = 1_000_000,
  ) {
    if (!(baseDelayMs >= 0) || !(maxDelayMs >= baseDelayMs)) throw new RangeError('need 0 <= baseDelayMs <= maxDelayMs');
  }

  when(key: K): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    const delay = this.baseDelayMs * 2 ** n;
    return Number.isFinite(delay) && delay < this.maxDelayMs ? delay : this.maxDelayMs;
  }

  forget(key: K): void {
    this.failures.delete(key);
  }

  numRequeues(key: K): number {
    return this.failures.get(key) ?? 0;
  }
}

/** Overall retry rate, independent of the key (client-go: 10 qps, burst 100). */
export class BucketRateLimiter<K> implements RateLimiter<K> {
  constructor(readonly bucket: TokenBucket) {}

  when(_key: K): number {
    return this.bucket.reserve();
  }

  forget(_key: K): void {}

  numRequeues(_key: K): number {
    return 0;
  }
}

/** The longest delay of its limiters (client-go MaxOfRateLimiter). */
export class MaxOfRateLimiter<K> implements RateLimiter<K> {
  private readonly limiters: readonly RateLimiter<K>[];

  constructor(...limiters: RateLimiter<K>[]) {
    if (limiters.length === 0) throw new RangeError('MaxOfRateLimiter needs at least one limiter');
    this.limiters = limiters;
  }

  when(key: K): number {
    let max = 0;
    for (const l of this.limiters) max = Math.max(max, l.when(key));
    return max;
  }

  forget(key: K): void {
    for (const l of this.limiters) l.forget(key);
  }

  numRequeues(key: K): number {
    let max = 0;
    for (const l of this.limiters) max = Math.max(max, l.numRequeues(key));
    return max;
  }
}

/** client-go DefaultControllerRateLimiter: max(exponential 5 ms..1000 s per key, 10 qps burst 100 overall). */
export function defaultControllerRateLimiter<K>(clock?: Clock): RateLimiter<K> {
  return new MaxOfRateLimiter<K>(
    new ItemExponentialFailureRateLimiter<K>(5, 1_000_000),
    new BucketRateLimiter<K>(new TokenBucket({ qps: 10, burst: 100, clock })),
  );
}
