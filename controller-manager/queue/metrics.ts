/**
 * Work queue metrics with client-go's names (component-base/metrics/prometheus/workqueue), plus a
 * `priority` label (none/low/high), and the worker pool's `ulysses_*` series. The metric objects
 * are created once per process on `metricsRegistry()` and shared by every queue, which is told
 * apart by the `name` label (the controller). Gauges (depth, unfinished work, longest running
 * processor) are computed at scrape time from the live queues, so they need no timers and a shut
 * down queue simply disappears from them.
 */
import { Counter, Gauge, Histogram } from 'prom-client';
import { metricsRegistry, registeredMetric } from '../../core/metrics.ts';
import { PRIORITIES, priorityName, type Priority } from '../../core/priority.ts';

type QueueLabel = 'name' | 'priority';

/** What a live queue reports at scrape time, each array indexed by priority. */
export interface QueueSnapshot {
  depth: number[];
  unfinishedSeconds: number[];
  longestRunningSeconds: number[];
}

interface LiveQueue {
  readonly name: string;
  readonly snapshot: () => QueueSnapshot;
}

interface QueueMetricSet {
  adds: Counter<QueueLabel>;
  retries: Counter<QueueLabel>;
  queueDuration: Histogram<QueueLabel>;
  workDuration: Histogram<QueueLabel>;
}

const live = new Set<LiveQueue>();
let queueSet: QueueMetricSet | undefined;

/** client-go: ExponentialBuckets(10e-9, 10, 12), i.e. 10 ns .. 1000 s. */
const WORKQUEUE_BUCKETS = Array.from({ length: 12 }, (_, i) => 1e-8 * 10 ** i);

/** Sets `gauge{name,priority}` from every live queue; queues sharing a name are combined by `combine`. */
function collectFrom(gauge: Gauge<QueueLabel>, pick: (s: QueueSnapshot) => number[], combine: (a: number, b: number) => number): void {
  const byName = new Map<string, number[]>();
  for (const q of live) {
    const values = pick(q.snapshot());
    const acc = byName.get(q.name);
    byName.set(q.name, acc ? acc.map((v, i) => combine(v, values[i] ?? 0)) : [...values]);
  }
  gauge.reset();
  for (const [name, values] of byName) {
    for (const p of PRIORITIES) gauge.set({ name, priority: priorityName(p) }, values[p] ?? 0);
  }
}

function queueMetricSet(): QueueMetricSet {
  if (queueSet) return queueSet;
  const registers = [metricsRegistry()];
  const labelNames: QueueLabel[] = ['name', 'priority'];
  const sum = (a: number, b: number) => a + b;
  registeredMetric('workqueue_depth', () => {
    const g: Gauge<QueueLabel> = new Gauge({
      name: 'workqueue_depth',
      help: 'Current depth of workqueue (ready items), by priority.',
      labelNames,
      registers,
      collect: () => collectFrom(g, (s) => s.depth, sum),
    });
    return g;
  });
  registeredMetric('workqueue_unfinished_work_seconds', () => {
    const g: Gauge<QueueLabel> = new Gauge({
      name: 'workqueue_unfinished_work_seconds',
      help: 'How many seconds of work has been done that is in progress and has not been observed by work_duration.',
      labelNames,
      registers,
      collect: () => collectFrom(g, (s) => s.unfinishedSeconds, sum),
    });
    return g;
  });
  registeredMetric('workqueue_longest_running_processor_seconds', () => {
    const g: Gauge<QueueLabel> = new Gauge({
      name: 'workqueue_longest_running_processor_seconds',
      help: 'How many seconds has the longest running processor for workqueue been running.',
      labelNames,
      registers,
      collect: () => collectFrom(g, (s) => s.longestRunningSeconds, Math.max),
    });
    return g;
  });
  queueSet = {
    adds: registeredMetric('workqueue_adds_total', () => new Counter({ name: 'workqueue_adds_total', help: 'Total number of adds handled by workqueue.', labelNames, registers })),
    retries: registeredMetric('workqueue_retries_total', () => new Counter({ name: 'workqueue_retries_total', help: 'Total number of retries (delayed adds) handled by workqueue.', labelNames, registers })),
    queueDuration: registeredMetric('workqueue_queue_duration_seconds', () => new Histogram({
      name: 'workqueue_queue_duration_seconds',
      help: 'How long in seconds an item stays in workqueue before being requested.',
      labelNames,
      buckets: WORKQUEUE_BUCKETS,
      registers,
    })),
    workDuration: registeredMetric('workqueue_work_duration_seconds', () => new Histogram({
      name: 'workqueue_work_duration_seconds',
      help: 'How long in seconds processing an item from workqueue takes.',
      labelNames,
      buckets: WORKQUEUE_BUCKETS,
      registers,
    })),
  };
  return queueSet;
}

/** The metrics hooks of one queue. */
export interface QueueMetrics {
  add(p: Priority): void;
  get(p: Priority, queuedMs: number): void;
  done(p: Priority, workMs: number): void;
  retry(p: Priority): void;
  /** The queue shut down: drop it from the gauges. */
  close(): void;
}

export const noQueueMetrics: QueueMetrics = Object.freeze({
  add() {},
  get() {},
  done() {},
  retry() {},
  close() {},
});

export function queueMetrics(name: string, snapshot: () => QueueSnapshot): QueueMetrics {
  const m = queueMetricSet();
  const entry: LiveQueue = { name, snapshot };
  live.add(entry);
  const labels = (p: Priority) => ({ name, priority: priorityName(p) });
  return {
    add: (p) => m.adds.inc(labels(p)),
    get: (p, queuedMs) => m.queueDuration.observe(labels(p), queuedMs / 1000),
    done: (p, workMs) => m.workDuration.observe(labels(p), workMs / 1000),
    retry: (p) => m.retries.inc(labels(p)),
    close: () => {
      live.delete(entry);
    },
  };
}

// ------------------------------------------------------------------------------ worker pool

type SyncLabel = 'controller' | 'priority' | 'mode';

export interface WorkerMetricSet {
  syncDuration: Histogram<SyncLabel>;
  mode: Gauge<'controller' | 'mode'>;
  demoted: Counter<'controller'>;
  idleSlots: Counter<'controller'>;
  heldSlots: Counter<'controller'>;
}

let workerSet: WorkerMetricSet | undefined;

export function workerMetrics(): WorkerMetricSet {
  if (workerSet) return workerSet;
  const registers = [metricsRegistry()];
  workerSet = {
    syncDuration: registeredMetric('ulysses_worker_sync_duration_seconds', () => new Histogram({
      name: 'ulysses_worker_sync_duration_seconds',
      help: 'Duration of one reconcile (sync) of a key, by controller, key priority and serving mode.',
      labelNames: ['controller', 'priority', 'mode'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    })),
    mode: registeredMetric('ulysses_controller_mode', () => new Gauge({
      name: 'ulysses_controller_mode',
      help: 'Serving mode of a controller worker pool: 1 for the active mode, 0 for the others.',
      labelNames: ['controller', 'mode'],
      registers,
    })),
    demoted: registeredMetric('ulysses_worker_high_demoted_total', () => new Counter({
      name: 'ulysses_worker_high_demoted_total',
      help: 'High-priority requests queued as low because they exceeded the high-priority inter-arrival bound.',
      labelNames: ['controller'],
      registers,
    })),
    idleSlots: registeredMetric('ulysses_worker_idle_slots_total', () => new Counter({
      name: 'ulysses_worker_idle_slots_total',
      help: 'Periodic worker ticks that found nothing to serve.',
      labelNames: ['controller'],
      registers,
    })),
    heldSlots: registeredMetric('ulysses_worker_held_slots_total', () => new Counter({
      name: 'ulysses_worker_held_slots_total',
      help: 'Periodic worker ticks that served nothing because low-priority work was held while a critical pod was on its way to Ready.',
      labelNames: ['controller'],
      registers,
    })),
  };
  return workerSet;
}
