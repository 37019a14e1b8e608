/**
 * Writes on the critical path first. In one process, a write that moves a critical pod towards its
 * replacement (the taint that starts a failover, the eviction of a critical pod, the creation of its
 * replacement) is sent before the writes that merely follow it (Events, Endpoints, EndpointSlices,
 * status updates): those wait while a critical write is in flight, at most MAX_DEFER_MS, so the
 * apiserver serves the critical one without competing requests (on two CPUs an EndpointSlice update
 * sent at the same moment delayed a replacement's create by 37 ms).
 *
 * The wait is bounded: a critical write that hangs (a slow apiserver) delays the others by at most
 * MAX_DEFER_MS, and a stream of critical writes cannot starve them for longer than that per write.
 */
import { Counter } from 'prom-client';
import { metricsRegistry, registeredMetric } from './metrics.ts';

/** Longest a deferred write waits for the critical writes in flight. */
export const MAX_DEFER_MS = 250;
/** Longest a critical write that is due ({@link CriticalWrites.expect}) keeps the others waiting before it starts. */
export const MAX_EXPECT_MS = 100;

const deferred = () =>
  registeredMetric('ulysses_deferred_writes_total', () => new Counter({
    name: 'ulysses_deferred_writes_total',
    help: 'API writes that waited for a critical write in flight (writes on the critical path first), by how the wait ended (cleared, bounded).',
    labelNames: ['ended'],
    registers: [metricsRegistry()],
  }));

export class CriticalWrites {
  private inFlight = 0;
  private waiters: Array<() => void> = [];
  /** a critical write is due ({@link expect}): until it starts, or this timer ends the wait */
  private expected: NodeJS.Timeout | undefined;

  constructor(
    private readonly maxDeferMs = MAX_DEFER_MS,
    private readonly maxExpectMs = MAX_EXPECT_MS,
  ) {}

  /** A critical write is in flight, or due. */
  get busy(): boolean {
    return this.inFlight > 0 || this.expected !== undefined;
  }

  /**
   * A critical write is due: the replacement's create after a critical pod's eviction, which the
   * writes the eviction sets off (the EndpointSlice without the evicted pod, Events) must not
   * overtake. They wait as if it were in flight, until it starts and settles, or at most
   * maxExpectMs when it never comes (the pod had no ReplicaSet of this process).
   */
  expect(): void {
    if (this.expected) return;
    this.expected = setTimeout(() => {
      this.expected = undefined;
      this.wakeIfClear();
    }, this.maxExpectMs);
    this.expected.unref();
  }

  /** Runs a critical write; deferred writes wait until it (and every other critical one) settles. */
  async critical<T>(write: () => Promise<T>): Promise<T> {
    this.inFlight++;
    clearTimeout(this.expected); // the write that was due has come
    this.expected = undefined;
    try {
      return await write();
    } finally {
      this.inFlight--;
      this.wakeIfClear();
    }
  }

  private wakeIfClear(): void {
    if (this.busy) return;
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }

  /** Resolves when no critical write is in flight, or after maxDeferMs (at once when none is). */
  clear(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        deferred().inc({ ended: 'bounded' });
        resolve();
      }, this.maxDeferMs);
      const wake = () => {
        clearTimeout(timer);
        deferred().inc({ ended: 'cleared' });
        resolve();
      };
      this.waiters.push(wake);
    });
  }
}

/** The process' critical writes (core/kube.ts KubeClient: `critical: true` runs one, other writes wait). */
export const criticalWrites = new CriticalWrites();
