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

  constructor(private readonly maxDeferMs = MAX_DEFER_MS) {}

  /** A critical write is in flight. */
  get busy(): boolean {
    return this.inFlight > 0;
  }

  /** Runs a critical write; deferred writes wait until it (and every other critical one) settles. */
  async critical<T>(write: () => Promise<T>): Promise<T> {
    this.inFlight++;
    try {
      return await write();
    } finally {
      if (--this.inFlight === 0) {
        const waiters = this.waiters;
        this.waiters = [];
        for (const wake of waiters) wake();
      }
    }
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
