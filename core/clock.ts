/**
 * Time as an injectable dependency: the queue (delays, metrics), the token bucket and the worker
 * pool (periodic ticks) read time and arm timers only through a {@link Clock}, so tests and
 * simulations drive them deterministically with a {@link FakeClock}.
 */
import { MinHeap } from './heap.ts';

export interface Timer {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds, monotonic; the origin is arbitrary (only differences matter). */
  now(): number;
  /** Runs `fn` once, `ms` (clamped to >= 0) after now. */
  setTimer(fn: () => void, ms: number): Timer;
}

/** Wall time: `performance.now()` and the global setTimeout. */
export const realClock: Clock = Object.freeze({
  now: () => performance.now(),
  setTimer(fn: () => void, ms: number): Timer {
    const t = setTimeout(fn, Math.max(0, ms));
    return { cancel: () => clearTimeout(t) };
  },
});

/**
 * Resolves true at `clock` time `at` (at once if already past), false as soon as `signal` aborts.
 * Never rejects.
 */
export function sleepUntil(clock: Clock, at: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  const delay = at - clock.now();
  if (delay <= 0) return Promise.resolve(true);
  return new Promise((resolve) => {
    const onAbort = () => {
      timer.cancel();
      resolve(false);
    };
    const timer = clock.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, delay);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

interface FakeTimer {
  at: number;
  id: number;
  fn: () => void;
  /** cancelled or fired */
  done: boolean;
}

/** Lets every promise chain started so far settle (one macrotask turn). */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Manual time. `advance(ms)` fires due timers one at a time in (due time, creation) order, setting
 * `now()` to each timer's due time and letting promise chains settle after each, so async code that
 * re-arms timers (periodic workers, token-bucket waits) sees consistent time; then sets now to the target.
 */
export class FakeClock implements Clock {
  private t: number;
  private seq = 0;
  private readonly timers = new MinHeap<FakeTimer>((a, b) => a.at < b.at || (a.at === b.at && a.id < b.id));
  private live = 0;

  constructor(start = 0) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimer(fn: () => void, ms: number): Timer {
    const timer: FakeTimer = { at: this.t + Math.max(0, ms), id: ++this.seq, fn, done: false };
    this.timers.push(timer);
    this.live++;
    return {
      cancel: () => {
        if (timer.done) return;
        timer.done = true;
        this.live--;
      },
    };
  }

  /** Timers armed and neither fired nor cancelled. */
  get pendingTimers(): number {
    return this.live;
  }

  /** Due time of the next live timer. */
  nextTimerAt(): number | undefined {
    this.dropCancelled();
    return this.timers.peek()?.at;
  }

  async advance(ms: number): Promise<void> {
    await this.advanceTo(this.t + ms);
  }

  async advanceTo(target: number): Promise<void> {
    await settle();
    for (;;) {
      this.dropCancelled();
      const next = this.timers.peek();
      if (!next || next.at > target) break;
      this.timers.pop();
      next.done = true;
      this.live--;
      this.t = Math.max(this.t, next.at);
      next.fn();
      await settle();
    }
    this.t = Math.max(this.t, target);
    await settle();
  }

  private dropCancelled(): void {
    while (this.timers.peek()?.done) this.timers.pop();
  }
}
