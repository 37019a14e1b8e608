/**
 * Client-side token bucket, like client-go's flowcontrol.NewTokenBucketRateLimiter (x/time/rate):
 * `burst` tokens, refilled at `qps` per second, starting full. `wait()` reserves a token and sleeps
 * until it is due, so waiters are served in call order at exactly `qps` once the burst is spent.
 */
import { realClock, sleepUntil, type Clock } from './clock.ts';

export interface TokenBucketOptions {
  /** Tokens per second; Infinity = unlimited. Must be > 0. */
  qps: number;
  /** Bucket size (>= 1). */
  burst: number;
  clock?: Clock;
}

export class TokenBucket {
  private qps: number;
  private burst: number;
  private tokens: number;
  private last: number;
  private readonly clock: Clock;

  constructor(opts: TokenBucketOptions) {
    validate(opts.qps, opts.burst);
    this.qps = opts.qps;
    this.burst = opts.burst;
    this.clock = opts.clock ?? realClock;
    this.tokens = opts.burst;
    this.last = this.clock.now();
  }

  get rate(): { qps: number; burst: number } {
    return { qps: this.qps, burst: this.burst };
  }

  /** Changes the rate; tokens accrued so far are kept (capped at the new burst). */
  setRate(qps: number, burst: number): void {
    validate(qps, burst);
    this.refill();
    this.qps = qps;
    this.burst = burst;
    this.tokens = Math.min(this.tokens, burst);
  }

  /** Tokens available now (negative when reservations are outstanding). */
  available(): number {
    this.refill();
    return this.tokens;
  }

  /** Takes a token if one is available now. */
  tryAccept(): boolean {
    if (this.qps === Infinity) return true;
    this.refill();
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }

  /** Takes a token now, possibly on credit; returns how long (ms) the caller must wait for it. */
  reserve(): number {
    if (this.qps === Infinity) return 0;
    this.refill();
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens * 1000) / this.qps;
  }

  /**
   * Waits for a token. Rejects with the signal's reason if `signal` aborts first; the reserved token
   * is then given back.
   */
  async wait(signal?: AbortSignal): Promise<void> {
    signal?.throwIfAborted();
    const delay = this.reserve();
    if (delay <= 0) return;
    if (!(await sleepUntil(this.clock, this.clock.now() + delay, signal))) {
      this.tokens = Math.min(this.burst, this.tokens + 1);
      signal!.throwIfAborted();
    }
  }

  private refill(): void {
    const now = this.clock.now();
    if (now > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) * this.qps) / 1000);
      this.last = now;
    }
  }
}

function validate(qps: number, burst: number): void {
  if (!(qps > 0)) throw new RangeError(`token bucket qps must be > 0, got ${qps}`);
  if (!(burst >= 1) || !Number.isFinite(burst)) throw new RangeError(`token bucket burst must be a finite number >= 1, got ${burst}`);
}
