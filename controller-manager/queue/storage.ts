/**
 * Pluggable storage of the ready items of a work queue (client-go's Queue interface: Push, Pop,
 * Len, Touch). The queue owns dedup and the processing set; a storage only orders ready entries.
 * Two orderings:
 *  - `fifo`: push order, priority ignored (the vanilla controller);
 *  - `priority`: highest priority first, push order within a priority.
 * Entries keep their priority in both, so switching ordering at runtime ({@link drainInto}) keeps
 * every entry and, in `priority`, the relative order of equal priorities.
 */
import { MinHeap } from '../../core/heap.ts';
import { PRIORITY_LEVELS, type Priority } from '../../core/priority.ts';

export type Ordering = 'fifo' | 'priority';

/** One ready (or pending-after-done) key. Owned by the queue; storages read `priority` and `seq`. */
export interface QueueEntry<K> {
  readonly key: K;
  priority: Priority;
  /** Push order, assigned by the queue when the entry enters storage. */
  seq: number;
  /** Clock time at which the key became dirty (start of workqueue_queue_duration_seconds). */
  readonly addedAt: number;
  /** True while the entry is held by a storage. */
  inStorage: boolean;
}

export interface QueueStorage<K> {
  readonly ordering: Ordering;
  push(entry: QueueEntry<K>): void;
  /** Removes and returns the next entry whose priority is >= minPriority. */
  pop(minPriority: Priority): QueueEntry<K> | undefined;
  /** `entry.priority` was raised from `previous` while the entry is stored. */
  touch(entry: QueueEntry<K>, previous: Priority): void;
  len(): number;
  /** Stored entries per priority, indexed by priority. */
  lenByPriority(): number[];
  /** Removes and returns every entry, in push order. */
  drain(): QueueEntry<K>[];
}

export function createStorage<K>(ordering: Ordering): QueueStorage<K> {
  return ordering === 'fifo' ? new FifoStorage<K>() : new PriorityStorage<K>();
}

/** Moves every entry of `from` into `to`, in push order. */
export function drainInto<K>(from: QueueStorage<K>, to: QueueStorage<K>): void {
  for (const e of from.drain()) to.push(e);
}

/** Push order; an entry taken from the middle (min-priority pop) leaves a hole skipped later. */
export class FifoStorage<K> implements QueueStorage<K> {
  readonly ordering = 'fifo' as const;
  private items: QueueEntry<K>[] = [];
  private head = 0;
  private readonly counts = new Array<number>(PRIORITY_LEVELS).fill(0);
  private count = 0;

  push(entry: QueueEntry<K>): void {
    entry.inStorage = true;
    this.items.push(entry);
    this.counts[entry.priority]!++;
    this.count++;
  }

  pop(minPriority: Priority): QueueEntry<K> | undefined {
    if (this.count === 0) return undefined;
    while (this.head < this.items.length && !this.items[this.head]!.inStorage) this.head++;
    for (let i = this.head; i < this.items.length; i++) {
      const e = this.items[i]!;
      if (e.inStorage && e.priority >= minPriority) {
        this.take(e);
        if (i === this.head) this.head++;
        this.compact();
        return e;
      }
    }
    return undefined;
  }

  touch(entry: QueueEntry<K>, previous: Priority): void {
    this.counts[previous]!--;
    this.counts[entry.priority]!++;
  }

  len(): number {
    return this.count;
  }

  lenByPriority(): number[] {
    return [...this.counts];
  }

  drain(): QueueEntry<K>[] {
    const out = this.items.slice(this.head).filter((e) => e.inStorage);
    for (const e of out) this.take(e);
    this.items = [];
    this.head = 0;
    return out;
  }

  private take(e: QueueEntry<K>): void {
    e.inStorage = false;
    this.counts[e.priority]!--;
    this.count--;
  }

  private compact(): void {
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }
}

/**
 * One heap per priority, ordered by push sequence. Raising a stored entry's priority pushes it into
 * the higher heap at its original sequence; the node left in the lower heap is stale and skipped.
 */
export class PriorityStorage<K> implements QueueStorage<K> {
  readonly ordering = 'priority' as const;
  private readonly heaps: MinHeap<QueueEntry<K>>[] = Array.from(
    { length: PRIORITY_LEVELS },
    () => new MinHeap<QueueEntry<K>>((a, b) => a.seq < b.seq),
  );
  private readonly counts = new Array<number>(PRIORITY_LEVELS).fill(0);

  push(entry: QueueEntry<K>): void {
    entry.inStorage = true;
    this.heaps[entry.priority]!.push(entry);
    this.counts[entry.priority]!++;
  }

  pop(minPriority: Priority): QueueEntry<K> | undefined {
    for (let p = PRIORITY_LEVELS - 1; p >= minPriority; p--) {
      if (this.counts[p] === 0) continue;
      const heap = this.heaps[p]!;
      for (let e = heap.pop(); e; e = heap.pop()) {
        if (e.inStorage && e.priority === p) {
          e.inStorage = false;
          this.counts[p]!--;
          return e;
        }
      }
    }
    return undefined;
  }

  touch(entry: QueueEntry<K>, previous: Priority): void {
    if (entry.priority === previous) return;
    this.counts[previous]!--;
    this.counts[entry.priority]!++;
    this.heaps[entry.priority]!.push(entry);
  }

  len(): number {
    return this.counts.reduce((a, b) => a + b, 0);
  }

  lenByPriority(): number[] {
    return [...this.counts];
  }

  drain(): QueueEntry<K>[] {
    const out: QueueEntry<K>[] = [];
    this.heaps.forEach((heap, p) => {
      for (const e of heap.clear()) if (e.inStorage && e.priority === p) out.push(e);
    });
    for (const e of out) e.inStorage = false;
    this.counts.fill(0);
    return out.sort((a, b) => a.seq - b.seq);
  }
}
