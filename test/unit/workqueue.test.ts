import { describe, expect, it } from 'vitest';
import { metricsRegistry } from '../../core/metrics.ts';
import { FakeClock, settle } from '../../core/clock.ts';
import { MinHeap } from '../../core/heap.ts';
import { PRIORITY_NAMES, priorityName, toPriority, type Priority } from '../../core/priority.ts';
import { CRITICALITY_LEVELS, criticalityRank } from '../../core/criticality.ts';
import type { QueueItem } from '../../controller-manager/queue/queue.ts';
import {
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  BucketRateLimiter,
} from '../../controller-manager/queue/rate-limiters.ts';
import { PriorityWorkQueue } from '../../controller-manager/queue/rate-limiting.ts';
import type { Ordering } from '../../controller-manager/queue/storage.ts';
import { TokenBucket } from '../../core/token-bucket.ts';

function drain<K>(q: PriorityWorkQueue<K>, minPriority?: number): QueueItem<K>[] {
  const out: QueueItem<K>[] = [];
  for (let item = q.tryGet(minPriority); item; item = q.tryGet(minPriority)) {
    out.push(item);
    q.done(item.key);
  }
  return out;
}

const keys = <K>(items: QueueItem<K>[]) => items.map((i) => i.key);
/** prom-client fills metricName on histogram samples (_bucket/_sum/_count); its types omit it. */
const metricName = (v: object) => (v as { metricName?: string }).metricName;

/** Resolves-or-not probe for a promise, without sleeping: one macrotask turn. */
async function isSettled(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void p.then(() => (settled = true));
  await settle();
  return settled;
}

describe('priority levels', () => {
  it('a criticality rank (the controllers\' mapping) is the queue level of the same name', () => {
    expect([...PRIORITY_NAMES]).toEqual([...CRITICALITY_LEVELS]);
    for (const c of CRITICALITY_LEVELS) {
      expect(toPriority(criticalityRank(c))).toBe(criticalityRank(c));
      expect(priorityName(toPriority(criticalityRank(c)))).toBe(c);
      expect(toPriority(c)).toBe(criticalityRank(c));
    }
    expect(toPriority('urgent' as never)).toBe(0);
  });
});

describe('PriorityWorkQueue: dirty and processing sets', () => {
  it('collapses duplicates', () => {
    const q = new PriorityWorkQueue();
    for (const k of ['a', 'b', 'a', 'a', 'c', 'b']) q.add(k);
    expect(q.len()).toBe(3);
    expect(keys(drain(q))).toEqual(['a', 'b', 'c']);
    expect(q.len()).toBe(0);
  });

  it('never hands out a key being processed; a re-add during processing is queued once, after done', async () => {
    const q = new PriorityWorkQueue();
    q.add('a');
    const first = q.tryGet();
    expect(first?.key).toBe('a');
    q.add('a');
    q.add('a', 'low');
    expect(q.len()).toBe(0);
    expect(q.tryGet()).toBeUndefined();
    const waiting = q.get();
    expect(await isSettled(waiting)).toBe(false);
    q.done('a');
    expect(await waiting).toEqual({ key: 'a', priority: 1 });
    expect(q.len()).toBe(0);
    q.done('a');
    expect(q.len()).toBe(0);
    expect(q.tryGet()).toBeUndefined();
  });

  it('done() of a key that is not processing is ignored', () => {
    const q = new PriorityWorkQueue();
    q.add('a');
    q.done('a');
    expect(q.len()).toBe(1);
    expect(q.numProcessing()).toBe(0);
  });
});

describe('PriorityWorkQueue: priorities', () => {
  it('merges a duplicate to the highest priority requested, never lowering it', () => {
    const q = new PriorityWorkQueue();
    q.add('x', 'low');
    q.add('x', 'none');
    expect(q.priorityOf('x')).toBe(1);
    q.add('x', 'high');
    q.add('x', 'low');
    expect(q.priorityOf('x')).toBe(2);
    expect(q.lenByPriority()).toEqual({ none: 0, low: 0, high: 1 });
  });

  it('a raised key keeps its place in FIFO order within its new priority', () => {
    const q = new PriorityWorkQueue();
    q.add('x', 'low');
    q.add('y', 'high');
    q.add('z', 'low');
    q.add('x', 'high'); // x was pushed before y
    expect(keys(drain(q))).toEqual(['x', 'y', 'z']);
  });

  it('merges re-adds during processing to the max, and serves them with it', async () => {
    const q = new PriorityWorkQueue();
    q.add('a', 'low');
    q.tryGet();
    q.add('a', 'none');
    q.add('a', 'high');
    q.add('b', 'low');
    q.done('a');
    expect(drain(q)).toEqual([
      { key: 'a', priority: 2 },
      { key: 'b', priority: 1 },
    ]);
  });

  it('serves highest priority first and FIFO within a priority; unknown priority is lowest', () => {
    const q = new PriorityWorkQueue();
    q.add('a', 'low');
    q.add('b', 'high');
    q.add('c'); // unspecified
    q.add('d', 1);
    q.add('e', 2);
    q.add('f', 'none');
    q.add('g', Number.NaN);
    q.add('h', 7); // out of range -> high
    expect(keys(drain(q))).toEqual(['b', 'e', 'h', 'a', 'd', 'c', 'f', 'g']);
  });

  it('get/tryGet with minPriority take only keys at or above it', async () => {
    const q = new PriorityWorkQueue();
    q.add('low', 'low');
    expect(q.tryGet('high')).toBeUndefined();
    const high = q.get({ minPriority: 'high' });
    const any = q.get();
    expect(await any).toEqual({ key: 'low', priority: 1 }); // the high waiter was skipped, the later one served
    expect(await isSettled(high)).toBe(false);
    q.add('n', 'none');
    expect(await isSettled(high)).toBe(false);
    q.add('h', 'high');
    expect(await high).toEqual({ key: 'h', priority: 2 });
    expect(q.len()).toBe(1);
    expect(q.tryGet('low')).toBeUndefined();
    expect(q.tryGet()?.key).toBe('n');
  });

  it('raising a queued key wakes a high-priority waiter', async () => {
    const q = new PriorityWorkQueue();
    q.add('k', 'low');
    const high = q.get({ minPriority: 2 });
    expect(await isSettled(high)).toBe(false);
    q.add('k', 'high');
    expect(await high).toEqual({ key: 'k', priority: 2 });
  });

  it('serves waiting getters in call order', async () => {
    const q = new PriorityWorkQueue();
    const g = [q.get(), q.get(), q.get()];
    q.add('a');
    q.add('b');
    q.add('c');
    expect((await Promise.all(g)).map((i) => i?.key)).toEqual(['a', 'b', 'c']);
  });

  it('an aborted get resolves undefined and takes nothing afterwards', async () => {
    const q = new PriorityWorkQueue();
    const ac = new AbortController();
    const g = q.get({ signal: ac.signal });
    ac.abort();
    expect(await g).toBeUndefined();
    q.add('a');
    expect(q.len()).toBe(1);
    expect(await q.get({ signal: ac.signal })).toEqual({ key: 'a', priority: 0 }); // a ready key wins over an aborted signal
    expect(await q.get({ signal: ac.signal })).toBeUndefined();
  });

  it('the admission hook can lower a new or raising request, never raise it', () => {
    const q = new PriorityWorkQueue();
    q.setPriorityAdmission((key, requested) => (key.startsWith('x') ? 1 : requested === 0 ? 2 : requested));
    q.add('x1', 'high');
    q.add('y', 'none');
    q.add('z', 'high');
    expect(q.priorityOf('x1')).toBe(1);
    expect(q.priorityOf('y')).toBe(0);
    expect(q.priorityOf('z')).toBe(2);
  });
});

describe('PriorityWorkQueue: fifo ordering and switching', () => {
  it('fifo ignores priority but honours minPriority', () => {
    const q = new PriorityWorkQueue({ ordering: 'fifo' });
    q.add('a', 'low');
    q.add('b', 'high');
    q.add('c');
    q.add('d', 'high');
    expect(q.tryGet('high')?.key).toBe('b');
    q.done('b');
    expect(keys(drain(q))).toEqual(['a', 'c', 'd']);
  });

  it('switching fifo <-> priority keeps every key and the order within each priority', () => {
    const q = new PriorityWorkQueue({ ordering: 'fifo' });
    const plan: Array<[string, Priority]> = [
      ['a', 0], ['b', 2], ['c', 1], ['d', 0], ['e', 2], ['f', 1], ['g', 1], ['h', 0],
    ];
    for (const [k, p] of plan) q.add(k, p);
    q.add('d', 'low'); // raised while in fifo: remembered
    expect(q.lenByPriority()).toEqual({ none: 2, low: 4, high: 2 });
    q.setOrdering('priority');
    expect(q.ordering).toBe('priority');
    expect(q.len()).toBe(8);
    expect(q.lenByPriority()).toEqual({ none: 2, low: 4, high: 2 });
    expect(q.tryGet()?.key).toBe('b');
    q.setOrdering('fifo');
    expect(keys(drain(q))).toEqual(['a', 'c', 'd', 'e', 'f', 'g', 'h']);
  });

  it('keys re-queued after done() while in the other ordering are kept too', () => {
    const q = new PriorityWorkQueue();
    q.add('p', 'high');
    const got = q.tryGet();
    q.add('p', 'none');
    q.add('q', 'low');
    q.setOrdering('fifo');
    q.done(got!.key);
    q.setOrdering('priority');
    expect(drain(q)).toEqual([
      { key: 'q', priority: 1 },
      { key: 'p', priority: 0 },
    ]);
  });
});

describe('PriorityWorkQueue: whenReady (parked periodic workers)', () => {
  it('resolves true at once with a key ready, on the next add otherwise, and takes no key', async () => {
    const q = new PriorityWorkQueue();
    const parked = q.whenReady();
    expect(await isSettled(parked)).toBe(false);
    q.add('a');
    expect(await parked).toBe(true);
    expect(await q.whenReady()).toBe(true);
    expect(q.len()).toBe(1);
  });

  it('is not woken by a key a waiting getter took, nor by a key still processing; it is by the key a done() queues', async () => {
    const q = new PriorityWorkQueue();
    const getter = q.get({ minPriority: 'high' });
    const parked = q.whenReady();
    q.add('h', 'high');
    expect((await getter)?.key).toBe('h');
    expect(await isSettled(parked)).toBe(false);
    q.add('h'); // dirty while processing: queued by done()
    expect(await isSettled(parked)).toBe(false);
    q.done('h');
    expect(await parked).toBe(true);
  });

  it('resolves false on shutdown and on abort', async () => {
    const q = new PriorityWorkQueue();
    const ac = new AbortController();
    const aborted = q.whenReady(ac.signal);
    const stopped = q.whenReady();
    ac.abort();
    expect(await aborted).toBe(false);
    expect(await isSettled(stopped)).toBe(false);
    q.shutDown();
    expect(await stopped).toBe(false);
    expect(await q.whenReady()).toBe(false);
  });
});

describe('PriorityWorkQueue: shutdown', () => {
  it('shutDown wakes waiters with undefined, ignores adds, hands nothing out, accepts done', async () => {
    const q = new PriorityWorkQueue();
    q.add('busy');
    q.tryGet();
    q.add('queued');
    const waiter = q.get({ minPriority: 'high' });
    q.shutDown();
    expect(await waiter).toBeUndefined();
    q.add('late');
    expect(q.len()).toBe(1);
    expect(q.tryGet()).toBeUndefined();
    expect(await q.get()).toBeUndefined();
    expect(q.isShutDown()).toBe(true);
    q.done('busy');
    expect(q.numProcessing()).toBe(0);
  });

  it('shutDownWithDrain keeps handing out queued keys, ignores new ones, resolves when all are done', async () => {
    const q = new PriorityWorkQueue();
    q.add('a');
    q.add('b');
    const a = q.tryGet()!;
    q.add('a', 'high'); // re-add while processing, before the drain: must still be served
    const drained = q.shutDownWithDrain();
    q.add('c');
    expect(q.isShuttingDown()).toBe(true);
    expect(await isSettled(drained)).toBe(false);
    expect(q.tryGet()?.key).toBe('b');
    q.done('b');
    expect(await isSettled(drained)).toBe(false);
    q.done(a.key);
    expect(q.tryGet()).toEqual({ key: 'a', priority: 2 });
    expect(await isSettled(drained)).toBe(false);
    q.done('a');
    await drained;
    expect(q.isShutDown()).toBe(true);
    expect(q.tryGet()).toBeUndefined();
    expect(q.len()).toBe(0);
  });

  it('a getter waiting during a drain is released with undefined when the drain completes', async () => {
    const q = new PriorityWorkQueue();
    q.add('a');
    q.tryGet();
    const drained = q.shutDownWithDrain();
    const waiter = q.get();
    expect(await isSettled(waiter)).toBe(false);
    q.done('a');
    expect(await waiter).toBeUndefined();
    await drained;
  });
});

describe('PriorityWorkQueue: delays', () => {
  it('addAfter makes the key ready exactly at its due time', async () => {
    const clock = new FakeClock(1000);
    const q = new PriorityWorkQueue({ clock });
    q.addAfter('a', 100, 'low');
    expect(q.len()).toBe(0);
    expect(q.numWaiting()).toBe(1);
    await clock.advance(99);
    expect(q.len()).toBe(0);
    await clock.advance(1);
    expect(q.tryGet()).toEqual({ key: 'a', priority: 1 });
  });

  it('merges delays to the earliest due time and the highest priority', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock });
    q.addAfter('a', 100, 'high');
    q.addAfter('a', 50, 'low');
    q.addAfter('a', 200, 'none');
    expect(q.numWaiting()).toBe(1);
    expect(q.readyAt('a')).toBe(50);
    await clock.advanceTo(49);
    expect(q.len()).toBe(0);
    await clock.advanceTo(50);
    expect(q.tryGet()).toEqual({ key: 'a', priority: 2 });
    q.done('a');
    await clock.advanceTo(500);
    expect(q.len()).toBe(0); // the 100 ms and 200 ms requests were merged, not kept
  });

  it('add() does not cancel a pending addAfter, nor does a dirty key absorb one (client-go keeps both)', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock });
    q.addAfter('a', 100, 'high');
    q.add('a', 'none');
    expect(q.numWaiting()).toBe(1);
    expect(q.priorityOf('a')).toBe(0);
    q.add('b', 'none');
    q.addAfter('b', 100, 'low');
    expect(q.numWaiting()).toBe(2);
    expect(keys(drain(q))).toEqual(['a', 'b']);
    await clock.advance(100);
    // both come again at their due time, with the delayed request's priority
    expect(drain(q)).toEqual([{ key: 'a', priority: 2 }, { key: 'b', priority: 1 }]);
  });

  it('a delayed key that comes due while processing is queued once after done', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock });
    q.add('a');
    q.tryGet();
    q.addAfter('a', 10);
    await clock.advance(10);
    expect(q.len()).toBe(0);
    q.done('a');
    expect(q.len()).toBe(1);
  });

  it('shutdown drops delayed keys and cancels their timer', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock });
    q.addAfter('a', 10);
    q.shutDown();
    expect(q.numWaiting()).toBe(0);
    expect(clock.nextTimerAt()).toBeUndefined();
  });
});

describe('rate limiting', () => {
  it('backoff doubles per failure from 5 ms, forget resets it', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock });
    const delays: number[] = [];
    for (let i = 0; i < 6; i++) {
      q.addRateLimited('a', 'low');
      expect(q.numRequeues('a')).toBe(i + 1);
      const due = q.readyAt('a')!;
      delays.push(due - clock.now());
      await clock.advanceTo(due - 1);
      expect(q.len()).toBe(0);
      await clock.advanceTo(due);
      expect(q.tryGet()).toEqual({ key: 'a', priority: 1 });
      q.done('a');
    }
    expect(delays).toEqual([5, 10, 20, 40, 80, 160]);
    q.forget('a');
    expect(q.numRequeues('a')).toBe(0);
    q.addRateLimited('a');
    expect(q.readyAt('a')! - clock.now()).toBe(5);
  });

  it('exponential backoff is capped', () => {
    const l = new ItemExponentialFailureRateLimiter<string>(5, 1000);
    const d = Array.from({ length: 12 }, () => l.when('k'));
    expect(d.slice(0, 8)).toEqual([5, 10, 20, 40, 80, 160, 320, 640]);
    expect(d.slice(8)).toEqual([1000, 1000, 1000, 1000]);
    for (let i = 0; i < 2000; i++) l.when('k');
    expect(l.when('k')).toBe(1000);
  });

  it('the default limiter also bounds the overall retry rate (10 qps, burst 100)', () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue<number>({ clock });
    for (let k = 0; k < 100; k++) q.addRateLimited(k);
    for (let k = 0; k < 100; k++) expect(q.readyAt(k)).toBe(5);
    q.addRateLimited(100);
    q.addRateLimited(101);
    expect(q.readyAt(100)).toBe(100);
    expect(q.readyAt(101)).toBe(200);
  });

  it('limiters are pluggable', async () => {
    const clock = new FakeClock(0);
    const q = new PriorityWorkQueue({ clock, rateLimiter: new MaxOfRateLimiter(new ItemExponentialFailureRateLimiter(1, 8), new BucketRateLimiter(new TokenBucket({ qps: 1000, burst: 1, clock }))) });
    q.addRateLimited('a');
    q.addRateLimited('b');
    expect(q.readyAt('a')).toBe(1);
    expect(q.readyAt('b')).toBe(1); // bucket: 1 ms for the second token
    q.addRateLimited('c');
    expect(q.readyAt('c')).toBe(2);
  });
});

describe('TokenBucket', () => {
  it('grants the burst at once, then exactly qps', async () => {
    const clock = new FakeClock(0);
    const b = new TokenBucket({ qps: 20, burst: 30, clock });
    const granted: number[] = [];
    const all = Array.from({ length: 35 }, () => b.wait().then(() => granted.push(clock.now())));
    await clock.advance(1000);
    await Promise.all(all);
    expect(granted.slice(0, 30)).toEqual(new Array(30).fill(0));
    expect(granted.slice(30)).toEqual([50, 100, 150, 200, 250]);
  });

  it('refills up to burst only; tryAccept does not go into debt', async () => {
    const clock = new FakeClock(0);
    const b = new TokenBucket({ qps: 10, burst: 2, clock });
    expect([b.tryAccept(), b.tryAccept(), b.tryAccept()]).toEqual([true, true, false]);
    await clock.advance(10_000);
    expect([b.tryAccept(), b.tryAccept(), b.tryAccept()]).toEqual([true, true, false]);
    await clock.advance(99);
    expect(b.tryAccept()).toBe(false);
    await clock.advance(1);
    expect(b.tryAccept()).toBe(true);
  });

  it('an aborted wait rejects and gives its token back', async () => {
    const clock = new FakeClock(0);
    const b = new TokenBucket({ qps: 1, burst: 1, clock });
    await b.wait();
    const ac = new AbortController();
    const w = b.wait(ac.signal);
    ac.abort(new Error('stop'));
    await expect(w).rejects.toThrow('stop');
    await clock.advance(1000);
    expect(b.tryAccept()).toBe(true);
    expect(b.tryAccept()).toBe(false);
  });

  it('rejects invalid rates', () => {
    expect(() => new TokenBucket({ qps: 0, burst: 1 })).toThrow(RangeError);
    expect(() => new TokenBucket({ qps: 1, burst: 0.5 })).toThrow(RangeError);
  });
});

describe('metrics', () => {
  async function sample(metric: string, labels: Record<string, string>): Promise<number | undefined> {
    const m = metricsRegistry().getSingleMetric(metric);
    const data = await m!.get();
    const v = data.values.find((s) => Object.entries(labels).every(([k, val]) => s.labels[k] === val) && !('le' in s.labels));
    return v?.value;
  }

  it('uses client-go names, labelled by name and priority, shared by several queues', async () => {
    const clock = new FakeClock(0);
    const q1 = new PriorityWorkQueue({ name: 'mq-one', clock });
    const q2 = new PriorityWorkQueue({ name: 'mq-two', clock });
    q1.add('a', 'high');
    q1.add('a', 'high');
    q1.add('b', 'low');
    q2.add('c');
    expect(await sample('workqueue_adds_total', { name: 'mq-one', priority: 'high' })).toBe(1);
    expect(await sample('workqueue_adds_total', { name: 'mq-one', priority: 'low' })).toBe(1);
    expect(await sample('workqueue_adds_total', { name: 'mq-two', priority: 'none' })).toBe(1);
    expect(await sample('workqueue_depth', { name: 'mq-one', priority: 'high' })).toBe(1);
    expect(await sample('workqueue_depth', { name: 'mq-one', priority: 'low' })).toBe(1);

    await clock.advance(2000);
    q1.tryGet('high');
    await clock.advance(500);
    expect(await sample('workqueue_depth', { name: 'mq-one', priority: 'high' })).toBe(0);
    expect(await sample('workqueue_unfinished_work_seconds', { name: 'mq-one', priority: 'high' })).toBeCloseTo(0.5);
    expect(await sample('workqueue_longest_running_processor_seconds', { name: 'mq-one', priority: 'high' })).toBeCloseTo(0.5);
    const queued = metricsRegistry().getSingleMetric('workqueue_queue_duration_seconds')!;
    const qd = (await queued.get()).values.find((s) => metricName(s) === 'workqueue_queue_duration_seconds_sum' && s.labels.name === 'mq-one');
    expect(qd?.value).toBeCloseTo(2);
    q1.done('a');
    const work = (await metricsRegistry().getSingleMetric('workqueue_work_duration_seconds')!.get()).values.find(
      (s) => metricName(s) === 'workqueue_work_duration_seconds_sum' && s.labels.name === 'mq-one',
    );
    expect(work?.value).toBeCloseTo(0.5);
    q1.addRateLimited('b', 'low');
    expect(await sample('workqueue_retries_total', { name: 'mq-one', priority: 'low' })).toBe(1);

    q1.shutDown();
    expect(await sample('workqueue_depth', { name: 'mq-one', priority: 'low' })).toBeUndefined();
    expect(await sample('workqueue_depth', { name: 'mq-two', priority: 'none' })).toBe(1);
    // the same names can be used again without a double-registration error
    const again = new PriorityWorkQueue({ name: 'mq-one', clock });
    again.add('z');
    expect(await sample('workqueue_adds_total', { name: 'mq-one', priority: 'none' })).toBe(1);
  });
});

describe('model check', () => {
  /** Reference semantics written as plainly as possible: arrays and sorting. */
  class Model {
    dirty = new Map<string, { p: Priority; seq: number; queued: boolean }>();
    processing = new Set<string>();
    seq = 0;
    ordering: Ordering = 'priority';
    add(k: string, p: Priority) {
      const d = this.dirty.get(k);
      if (d) {
        d.p = toPriority(Math.max(d.p, p));
        return;
      }
      const queued = !this.processing.has(k);
      this.dirty.set(k, { p, seq: queued ? ++this.seq : 0, queued });
    }
    take(min: Priority): QueueItem<string> | undefined {
      const c = [...this.dirty.entries()].filter(([, d]) => d.queued && d.p >= min);
      c.sort(([, a], [, b]) => (this.ordering === 'priority' && a.p !== b.p ? b.p - a.p : a.seq - b.seq));
      const first = c[0];
      if (!first) return undefined;
      this.dirty.delete(first[0]);
      this.processing.add(first[0]);
      return { key: first[0], priority: first[1].p };
    }
    done(k: string) {
      if (!this.processing.delete(k)) return;
      const d = this.dirty.get(k);
      if (d) {
        d.queued = true;
        d.seq = ++this.seq;
      }
    }
  }

  it('matches the reference model under 20000 random operations', () => {
    let s = 42;
    const rnd = (n: number) => {
      s = (s * 1103515245 + 12345) % 2147483648;
      return s % n;
    };
    const q = new PriorityWorkQueue();
    const m = new Model();
    const held: string[] = [];
    for (let i = 0; i < 20000; i++) {
      const op = rnd(10);
      if (op < 5) {
        const k = `k${rnd(30)}`;
        const p = toPriority(rnd(3));
        q.add(k, p);
        m.add(k, p);
      } else if (op < 8) {
        const min = toPriority(rnd(4) === 0 ? rnd(3) : 0);
        const got = q.tryGet(min);
        expect(got).toEqual(m.take(min));
        if (got) held.push(got.key);
      } else if (op < 9) {
        if (held.length) {
          const k = held.splice(rnd(held.length), 1)[0]!;
          q.done(k);
          m.done(k);
        }
      } else {
        const o: Ordering = rnd(2) ? 'fifo' : 'priority';
        q.setOrdering(o);
        m.ordering = o;
      }
      expect(q.len()).toBe([...m.dirty.values()].filter((d) => d.queued).length);
    }
  });
});

describe('MinHeap', () => {
  it('pops in order', () => {
    const h = new MinHeap<number>((a, b) => a < b);
    for (const v of [5, 3, 9, 1, 1, 7, 0]) h.push(v);
    const out: number[] = [];
    for (let v = h.pop(); v !== undefined; v = h.pop()) out.push(v);
    expect(out).toEqual([0, 1, 1, 3, 5, 7, 9]);
  });
});
