/**
 * DelayingWorkQueue: addAfter on top of WorkQueue (client-go delaying_queue.go). Waiting keys live
 * in a map (one entry per key: earliest due time, highest priority) indexed by a min-heap of due
 * times; one clock timer is armed for the earliest due key. A due key is add()ed; add() of a
 * waiting key leaves its delayed add in place (client-go keeps both).
 */
import type { Timer } from '../../core/clock.ts';
import { MinHeap } from '../../core/heap.ts';
import { WorkQueue, type WorkQueueOptions } from './queue.ts';
import { toPriority, type Priority, type PriorityLike } from '../../core/priority.ts';

interface Waiting {
  readyAt: number;
  priority: Priority;
}

interface DueNode<K> {
  readonly readyAt: number;
  readonly key: K;
}

export class DelayingWorkQueue<K = string> extends WorkQueue<K> {
  private readonly waiting = new Map<K, Waiting>();
  /** May hold stale nodes (key no longer waiting, or waiting with another due time): skipped. */
  private readonly due = new MinHeap<DueNode<K>>((a, b) => a.readyAt < b.readyAt);
  private timer: Timer | undefined;
  private timerAt = Infinity;

  constructor(opts: WorkQueueOptions = {}) {
    super(opts);
  }

  /**
   * Adds `key` once `delayMs` has elapsed (at once if delayMs <= 0). As client-go, the delayed add
   * is kept whatever happens to the key meanwhile: an add() or a dirty entry is served now AND the
   * key comes again at its due time.
   */
  addAfter(key: K, delayMs: number, priority?: PriorityLike): void {
    if (this.isShuttingDown()) return;
    this.metrics.retry(toPriority(priority));
    this.delay(key, delayMs, toPriority(priority));
  }

  private delay(key: K, delayMs: number, p: Priority): void {
    if (!(delayMs > 0)) {
      this.add(key, p);
      return;
    }
    const readyAt = this.clock.now() + delayMs;
    const w = this.waiting.get(key);
    if (w) {
      if (p > w.priority) w.priority = p;
      if (readyAt >= w.readyAt) return;
      w.readyAt = readyAt;
    } else {
      this.waiting.set(key, { readyAt, priority: p });
    }
    this.due.push({ readyAt, key });
    this.arm();
  }

  /** Keys waiting for their delay. */
  numWaiting(): number {
    return this.waiting.size;
  }

  /** Due time of a waiting key. */
  readyAt(key: K): number | undefined {
    return this.waiting.get(key)?.readyAt;
  }

  protected override onShuttingDown(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.timerAt = Infinity;
    this.waiting.clear();
    this.due.clear();
    super.onShuttingDown();
  }

  private isLive(n: DueNode<K>): boolean {
    return this.waiting.get(n.key)?.readyAt === n.readyAt;
  }

  private arm(): void {
    while (this.due.size > 0 && !this.isLive(this.due.peek()!)) this.due.pop();
    const top = this.due.peek();
    if (!top) {
      this.timer?.cancel();
      this.timer = undefined;
      this.timerAt = Infinity;
      return;
    }
    if (top.readyAt >= this.timerAt) return;
    this.timer?.cancel();
    this.timerAt = top.readyAt;
    this.timer = this.clock.setTimer(() => this.fire(), top.readyAt - this.clock.now());
  }

  private fire(): void {
    this.timer = undefined;
    this.timerAt = Infinity;
    const now = this.clock.now();
    for (let n = this.due.peek(); n && n.readyAt <= now; n = this.due.peek()) {
      this.due.pop();
      const w = this.waiting.get(n.key);
      if (!w || w.readyAt !== n.readyAt) continue;
      this.waiting.delete(n.key);
      super.add(n.key, w.priority);
    }
    this.arm();
  }
}
