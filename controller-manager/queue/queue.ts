/**
 * WorkQueue: the base layer of the controller work queue (client-go util/workqueue/queue.go with
 * priorities). Layers, one file each, composed like client-go:
 *   queue.ts (this: dedup, processing, priorities) -> delaying.ts (addAfter) ->
 *   rate-limiting.ts (addRateLimited, forget, numRequeues = PriorityWorkQueue).
 *
 * Contract
 *  - Keys are compared with Map semantics (strings "namespace/name" in practice).
 *  - dirty set: keys that need processing; processing set: keys handed out by get() and not yet
 *    done(). A key is never handed to two workers at once.
 *  - add(key) of a key already dirty is merged into it (duplicates collapse); the merged key keeps
 *    the HIGHEST priority requested. add(key) of a key being processed marks it dirty only: it is
 *    queued once, when done(key) is called, with the highest priority requested meanwhile.
 *  - Priorities: 0 none (also unknown/unspecified), 1 low, 2 high (core/priority.ts).
 *    Ordering `priority`: highest priority first, FIFO (push order) within a priority. Ordering
 *    `fifo`: push order, priority ignored but remembered. setOrdering() switches at runtime and
 *    keeps every queued key (and, back in `priority`, the FIFO order within each priority).
 *  - get({minPriority, signal}) takes the next ready key with priority >= minPriority, waiting
 *    until there is one; it resolves undefined when the queue shuts down or `signal` aborts.
 *    Waiting getters are served in call order. tryGet(minPriority) never waits.
 *  - Every key returned by get()/tryGet() must be passed to done(key) exactly once.
 *  - shutDown(): adds are ignored from now on; get()/tryGet() resolve undefined at once, waiting
 *    getters are woken with undefined; queued keys are not handed out any more; done() still works.
 *    (client-go's Get keeps returning queued items after ShutDown; we stop at once and offer
 *    shutDownWithDrain() for the other behaviour.)
 *  - shutDownWithDrain(): adds are ignored; get() keeps handing out the queued keys (including
 *    keys re-queued by done()); resolves once nothing is queued or processing, then behaves as
 *    shutDown(). Getters must keep running for it to resolve.
 *  - Delaying layer: addAfter(key, ms) makes the key ready at now+ms; merged with a waiting entry of
 *    the same key it keeps the earliest due time and the highest priority; add(key) of a waiting key
 *    (or addAfter of a dirty one) leaves the delayed add in place: the key is served now and again
 *    at its due time, as client-go. Waiting keys are dropped on shutdown (like client-go).
 *  - Rate-limiting layer: addRateLimited(key) = addAfter(key, rateLimiter.when(key)); forget(key)
 *    clears the key's failure history; numRequeues(key) reports it.
 *  - A priority admission hook (setPriorityAdmission) may lower a requested priority when it would
 *    create or raise a dirty entry; the worker pool uses it to bound high-priority work.
 *  - Time comes from an injectable Clock (clock.ts).
 */
import { realClock, type Clock } from '../../core/clock.ts';
import { noQueueMetrics, queueMetrics, type QueueMetrics, type QueueSnapshot } from './metrics.ts';
import { PRIORITY_LEVELS, toPriority, type Priority, type PriorityLike, type PriorityName } from '../../core/priority.ts';
import { createStorage, drainInto, type Ordering, type QueueEntry, type QueueStorage } from './storage.ts';

export interface WorkQueueOptions {
  /** Queue (controller) name; the workqueue_* metrics are recorded only for named queues. */
  name?: string;
  clock?: Clock;
  /** Initial ordering (default `priority`). */
  ordering?: Ordering;
}

export interface QueueItem<K> {
  readonly key: K;
  readonly priority: Priority;
}

export interface GetOptions {
  /** Only keys with at least this priority (default 0: any). */
  minPriority?: PriorityLike;
  /** Stop waiting: get() resolves undefined. */
  signal?: AbortSignal;
}

/**
 * Decides the priority actually given to a request that would create a dirty entry or raise one
 * (`requested` is above the entry's current priority, if any). May return a lower priority, never
 * a higher one (a higher result is clamped to `requested`).
 */
export type PriorityAdmission<K> = (key: K, requested: Priority) => Priority;

interface Processing {
  readonly priority: Priority;
  readonly startedAt: number;
}

interface Waiter<K> {
  readonly minPriority: Priority;
  readonly settle: (item: QueueItem<K> | undefined) => void;
}

type State = 'running' | 'draining' | 'shutdown';

export class WorkQueue<K = string> {
  readonly name: string | undefined;
  protected readonly clock: Clock;
  protected readonly metrics: QueueMetrics;
  private storage: QueueStorage<K>;
  private readonly dirty = new Map<K, QueueEntry<K>>();
  private readonly processing = new Map<K, Processing>();
  private waiters: Waiter<K>[] = [];
  /** whenReady() callers, woken when a key is ready (true) or on shutdown (false) */
  private sleepers = new Set<(ready: boolean) => void>();
  private state: State = 'running';
  private seq = 0;
  private admission: PriorityAdmission<K> | undefined;
  private drained: { promise: Promise<void>; resolve: () => void } | undefined;

  constructor(opts: WorkQueueOptions = {}) {
    this.name = opts.name;
    this.clock = opts.clock ?? realClock;
    this.storage = createStorage<K>(opts.ordering ?? 'priority');
    this.metrics = opts.name ? queueMetrics(opts.name, () => this.snapshot()) : noQueueMetrics;
  }

  // ----------------------------------------------------------------------------------- adding

  /** Marks `key` as needing processing (see the contract above). Ignored after shutdown. */
  add(key: K, priority?: PriorityLike): void {
    if (this.state !== 'running') return;
    this.insert(key, toPriority(priority));
  }

  /** Installs (or removes, with undefined) the priority admission hook. */
  setPriorityAdmission(admission: PriorityAdmission<K> | undefined): void {
    this.admission = admission;
  }

  private insert(key: K, requested: Priority): void {
    const existing = this.dirty.get(key);
    if (existing) {
      if (requested <= existing.priority) return;
      const admitted = this.admit(key, requested);
      if (admitted <= existing.priority) return;
      const previous = existing.priority;
      existing.priority = admitted;
      if (existing.inStorage) {
        this.storage.touch(existing, previous);
        this.dispatch();
      }
      return;
    }
    const entry: QueueEntry<K> = { key, priority: this.admit(key, requested), seq: 0, addedAt: this.clock.now(), inStorage: false };
    this.dirty.set(key, entry);
    this.metrics.add(entry.priority);
    if (this.processing.has(key)) return; // queued by done()
    this.push(entry);
  }

  private admit(key: K, requested: Priority): Priority {
    if (!this.admission) return requested;
    const p = this.admission(key, requested);
    return p < requested ? toPriority(p) : requested;
  }

  private push(entry: QueueEntry<K>): void {
    entry.seq = ++this.seq;
    this.storage.push(entry);
    this.dispatch();
  }

  // ---------------------------------------------------------------------------------- getting

  /** Next key with priority >= minPriority, waiting for one; undefined on shutdown or abort. */
  get(opts: GetOptions = {}): Promise<QueueItem<K> | undefined> {
    if (this.state === 'shutdown') return Promise.resolve(undefined);
    const minPriority = toPriority(opts.minPriority);
    const item = this.take(minPriority);
    if (item) return Promise.resolve(item);
    const signal = opts.signal;
    if (signal?.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const onAbort = () => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        resolve(undefined);
      };
      const waiter: Waiter<K> = {
        minPriority,
        settle: (value) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(value);
        },
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Next key with priority >= minPriority if one is ready now. */
  tryGet(minPriority?: PriorityLike): QueueItem<K> | undefined {
    if (this.state === 'shutdown') return undefined;
    return this.take(toPriority(minPriority));
  }

  private take(minPriority: Priority): QueueItem<K> | undefined {
    const entry = this.storage.pop(minPriority);
    if (!entry) return undefined;
    const now = this.clock.now();
    this.dirty.delete(entry.key);
    this.processing.set(entry.key, { priority: entry.priority, startedAt: now });
    this.metrics.get(entry.priority, now - entry.addedAt);
    return { key: entry.key, priority: entry.priority };
  }

  /** Hands ready keys to waiting getters, in call order; wakes the whenReady() callers when keys are left. */
  private dispatch(): void {
    let i = 0;
    while (i < this.waiters.length && this.storage.len() > 0 && this.state !== 'shutdown') {
      const waiter = this.waiters[i]!;
      const item = this.take(waiter.minPriority);
      if (!item) {
        i++;
        continue;
      }
      this.waiters.splice(i, 1);
      waiter.settle(item);
    }
    if (this.sleepers.size && this.storage.len() > 0 && this.state !== 'shutdown') this.wakeSleepers(true);
  }

  /**
   * Resolves true once a key is ready (at once if one is), false on shutdown or abort. Takes no key:
   * a periodic worker parks on it while the queue is empty instead of ticking.
   */
  whenReady(signal?: AbortSignal): Promise<boolean> {
    if (this.state === 'shutdown' || signal?.aborted) return Promise.resolve(false);
    if (this.storage.len() > 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onAbort = () => {
        this.sleepers.delete(wake);
        resolve(false);
      };
      const wake = (ready: boolean) => {
        signal?.removeEventListener('abort', onAbort);
        resolve(ready);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.sleepers.add(wake);
    });
  }

  private wakeSleepers(ready: boolean): void {
    const sleepers = this.sleepers;
    this.sleepers = new Set();
    for (const wake of sleepers) wake(ready);
  }

  /** Processing of `key` finished; a key re-added meanwhile is queued now. */
  done(key: K): void {
    const proc = this.processing.get(key);
    if (!proc) return;
    this.processing.delete(key);
    this.metrics.done(proc.priority, this.clock.now() - proc.startedAt);
    const entry = this.dirty.get(key);
    if (entry && this.state !== 'shutdown') this.push(entry);
    this.checkDrained();
  }

  // -------------------------------------------------------------------------------- ordering

  get ordering(): Ordering {
    return this.storage.ordering;
  }

  /** Switches between `fifo` and `priority` ordering, keeping every queued key. */
  setOrdering(ordering: Ordering): void {
    if (ordering === this.storage.ordering) return;
    const next = createStorage<K>(ordering);
    drainInto(this.storage, next);
    this.storage = next;
    this.dispatch();
  }

  // --------------------------------------------------------------------------- introspection

  /** Ready keys (not processing, not waiting for a delay). */
  len(): number {
    return this.storage.len();
  }

  lenByPriority(): Record<PriorityName, number> {
    const counts = this.storage.lenByPriority();
    return { none: counts[0] ?? 0, low: counts[1] ?? 0, high: counts[2] ?? 0 };
  }

  numProcessing(): number {
    return this.processing.size;
  }

  /** Priority of the dirty entry of `key` (ready, or pending until done), if any. */
  priorityOf(key: K): Priority | undefined {
    return this.dirty.get(key)?.priority;
  }

  isProcessing(key: K): boolean {
    return this.processing.has(key);
  }

  /** True once shutDown() or shutDownWithDrain() was called. */
  isShuttingDown(): boolean {
    return this.state !== 'running';
  }

  /** True once the queue hands out nothing more (shut down, or drained). */
  isShutDown(): boolean {
    return this.state === 'shutdown';
  }

  // -------------------------------------------------------------------------------- shutdown

  shutDown(): void {
    if (this.state === 'shutdown') return;
    if (this.state === 'running') this.onShuttingDown();
    this.finish();
  }

  shutDownWithDrain(): Promise<void> {
    if (this.state === 'shutdown') return Promise.resolve();
    if (this.state === 'running') {
      this.state = 'draining';
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.drained = { promise, resolve };
      this.onShuttingDown();
      this.checkDrained();
    }
    return this.drained!.promise;
  }

  /** Hook for the upper layers: stop timers, drop delayed keys. */
  protected onShuttingDown(): void {}

  private checkDrained(): void {
    if (this.state === 'draining' && this.storage.len() === 0 && this.processing.size === 0) this.finish();
  }

  private finish(): void {
    this.state = 'shutdown';
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w.settle(undefined);
    this.wakeSleepers(false);
    this.drained?.resolve();
    this.metrics.close();
  }

  private snapshot(): QueueSnapshot {
    const now = this.clock.now();
    const unfinished = new Array<number>(PRIORITY_LEVELS).fill(0);
    const longest = new Array<number>(PRIORITY_LEVELS).fill(0);
    for (const p of this.processing.values()) {
      const s = Math.max(0, now - p.startedAt) / 1000;
      unfinished[p.priority]! += s;
      longest[p.priority] = Math.max(longest[p.priority]!, s);
    }
    return { depth: this.storage.lenByPriority(), unfinishedSeconds: unfinished, longestRunningSeconds: longest };
  }
}

