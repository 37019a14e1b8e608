import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ConfigError } from '../../core/config.ts';
import { metricsRegistry } from '../../core/metrics.ts';
import { FakeClock, settle, sleepUntil } from '../../core/clock.ts';
import type { WorkerMode, WorkerPoolConfigInput } from '../../controller-manager/queue/pool-config.ts';
import type { Priority } from '../../core/priority.ts';
import { TokenBucket } from '../../core/token-bucket.ts';
import { TerminalError, WorkerPool, type ReconcileContext, type ReconcileResult } from '../../controller-manager/queue/worker-pool.ts';

const silent = pino({ level: 'silent' });
/** prom-client fills metricName on histogram samples (_bucket/_sum/_count); its types omit it. */
const metricName = (v: object) => (v as { metricName?: string }).metricName;
const T0 = 1000;

interface Served {
  key: string;
  at: number;
  priority: Priority;
  mode: WorkerMode;
}

let poolSeq = 0;

/** A pool on a fake clock whose reconcile records (key, time, priority) and runs `body`. */
function harness(config: WorkerPoolConfigInput, body?: (key: string, ctx: ReconcileContext, clock: FakeClock) => Promise<ReconcileResult | void>) {
  const clock = new FakeClock(T0);
  const served: Served[] = [];
  const inFlight = new Set<string>();
  const overlaps: string[] = [];
  const pool = new WorkerPool<string>({
    name: `test-pool-${++poolSeq}`,
    clock,
    logger: silent,
    ...config,
    reconcile: async (key, ctx) => {
      if (inFlight.has(key)) overlaps.push(key);
      inFlight.add(key);
      served.push({ key, at: clock.now(), priority: ctx.priority, mode: ctx.mode });
      try {
        return await body?.(key, ctx, clock);
      } finally {
        inFlight.delete(key);
      }
    },
  });
  return { clock, pool, served, overlaps };
}

describe('WorkerPool: multi-priority-periodic', () => {
  it('serves low keys one every T/N while a high key added mid-period is served at once', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 5, highPriorityWorkers: 1, periodMs: 100 });
    for (let i = 0; i < 8; i++) pool.queue.add(`low-${i}`, 'low');
    pool.start();
    await clock.advanceTo(T0 + 60);
    pool.queue.add('crit', 'high');
    await settle();
    expect(served.find((s) => s.key === 'crit')).toEqual({ key: 'crit', at: T0 + 60, priority: 2, mode: 'multi-priority-periodic' });
    await clock.advanceTo(T0 + 400);
    const lows = served.filter((s) => s.key.startsWith('low-'));
    expect(lows.map((s) => s.key)).toEqual(Array.from({ length: 8 }, (_, i) => `low-${i}`));
    expect(lows.map((s) => s.at - T0)).toEqual([0, 25, 50, 75, 100, 125, 150, 175]);
    // the high key did not take a periodic slot
    expect(served).toHaveLength(9);
    // ticks at 200, 225, 250, 275 find the queue empty: each of the 4 periodic workers parks, and
    // no worker ticks again until a key arrives
    expect(pool.stats().idleSlots).toBe(4);
    expect(pool.stats().parks).toBe(4);
    expect(clock.pendingTimers).toBe(0);
    await pool.stop();
  });

  it('parked workers arm no timer, and a key arriving later is served at the next tick of the phases (t0 + k*T/N + m*T)', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 5, highPriorityWorkers: 1, periodMs: 100 });
    pool.start();
    await clock.advanceTo(T0 + 10_000);
    expect(pool.stats().idleSlots).toBe(4); // one tick each (phases 0, 25, 50, 75), then parked
    expect(clock.pendingTimers).toBe(0);
    clock.setTimer(() => ['a', 'b', 'c', 'd', 'e'].forEach((k) => pool.queue.add(k, 'low')), 10_137 - 10_000);
    await clock.advanceTo(T0 + 20_000);
    // first tick at or after 10 137 is 10 150 (phase 50), then one key every T/N
    expect(served.map((s) => [s.key, s.at - T0])).toEqual([
      ['a', 10_150],
      ['b', 10_175],
      ['c', 10_200],
      ['d', 10_225],
      ['e', 10_250],
    ]);
    expect(clock.pendingTimers).toBe(0);
    await pool.stop();
  });

  it('parking serves every key at the tick a ticking pool would (random arrivals, instant reconciles)', async () => {
    const period = 100;
    const n = 4;
    let seed = 7;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: n, highPriorityWorkers: 0, periodMs: period });
    const arrivals: Array<[string, number]> = [];
    let t = 0;
    for (let i = 0; i < 60; i++) {
      t += Math.floor(rnd() * (rnd() < 0.2 ? 3000 : 40)); // bursts and quiet spells
      if (t % (period / n) === 0) t++; // never at a tick's instant (which runs first is the timers' order)
      arrivals.push([`k${i}`, t]);
    }
    pool.start();
    for (const [key, at] of arrivals) clock.setTimer(() => pool.queue.add(key, 'low'), at);
    await clock.advanceTo(T0 + t + 10 * period);
    // a ticking pool: ticks every T/N from t0, each serving the oldest key that arrived before it
    const slot = period / n;
    const expected: Array<[string, number]> = [];
    let tick = -slot;
    for (const [key, at] of arrivals) {
      tick = Math.max(tick + slot, Math.ceil(at / slot) * slot);
      expected.push([key, tick]);
    }
    expect(served.map((s) => [s.key, s.at - T0])).toEqual(expected);
    await pool.stop();
  });

  it('keeps the T/N spacing when reconciles take longer than T/N (workers run in parallel)', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 5, highPriorityWorkers: 1, periodMs: 100 }, async (_k, _c, clk) => {
      await sleepUntil(clk, clk.now() + 60);
    });
    for (let i = 0; i < 6; i++) pool.queue.add(`k${i}`);
    pool.start();
    await clock.advanceTo(T0 + 500);
    expect(served.map((s) => s.at - T0)).toEqual([0, 25, 50, 75, 100, 125]);
    await pool.stop();
  });

  it('a periodic worker that overruns its period serves the missed tick late and drops the rest', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 2, highPriorityWorkers: 1, periodMs: 100 }, async (key, _c, clk) => {
      if (key === 'slow') await sleepUntil(clk, clk.now() + 250);
    });
    pool.queue.add('slow');
    pool.queue.add('a');
    pool.queue.add('b');
    pool.start();
    await clock.advanceTo(T0 + 1000);
    // ticks at 0, 100, 200, 300: 'slow' runs 0..250, the 200 tick is delivered at 250, 100 is dropped
    expect(served.map((s) => [s.key, s.at - T0])).toEqual([
      ['slow', 0],
      ['a', 250],
      ['b', 300],
    ]);
    await pool.stop();
  });

  it('without async high workers, high keys still go first in the periodic slots', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 2, highPriorityWorkers: 0, periodMs: 100 });
    pool.queue.add('l1', 'low');
    pool.queue.add('l2', 'low');
    pool.queue.add('h', 'high');
    pool.start();
    await clock.advanceTo(T0 + 100);
    expect(served.map((s) => [s.key, s.at - T0])).toEqual([
      ['h', 0],
      ['l1', 50],
      ['l2', 100],
    ]);
    await pool.stop();
  });
});

describe('WorkerPool: high-priority guard', () => {
  it('demotes a flood of high keys to low: one is served at once, the rest wait behind queued lows', async () => {
    const { clock, pool, served } = harness({
      mode: 'multi-priority-periodic',
      workers: 5,
      highPriorityWorkers: 1,
      periodMs: 100,
      highMinInterArrivalMs: 1000,
      highBurst: 1,
    });
    pool.queue.add('L1', 'low');
    pool.queue.add('L2', 'low');
    for (const k of ['H1', 'H2', 'H3', 'H4']) pool.queue.add(k, 'high');
    expect(pool.queue.lenByPriority()).toEqual({ none: 0, low: 5, high: 1 });
    expect(pool.stats().demoted).toBe(3);
    pool.queue.add('H2', 'high'); // asking again within the bound does not promote it
    expect(pool.queue.priorityOf('H2')).toBe(1);
    pool.start();
    await clock.advanceTo(T0 + 200);
    const byTime = [...served].sort((a, b) => a.at - b.at || a.key.localeCompare(b.key));
    expect(byTime.map((s) => [s.key, s.at - T0, s.priority])).toEqual([
      ['H1', 0, 2],
      ['L1', 0, 1],
      ['L2', 25, 1],
      ['H2', 50, 1],
      ['H3', 75, 1],
      ['H4', 100, 1],
    ]);
    await clock.advanceTo(T0 + 1000);
    pool.queue.add('H5', 'high');
    await settle();
    expect(served.at(-1)).toEqual({ key: 'H5', at: T0 + 1000, priority: 2, mode: 'multi-priority-periodic' });
    expect(pool.stats().demoted).toBe(4);
    await pool.stop();
  });

  it('re-adding a key that is already queued high is not a new arrival', () => {
    const { pool } = harness({ mode: 'multi-priority-async', highMinInterArrivalMs: 1000, highBurst: 1 });
    pool.queue.add('a', 'high');
    pool.queue.add('a', 'high');
    pool.queue.add('a', 'high');
    expect(pool.stats().demoted).toBe(0);
    expect(pool.queue.priorityOf('a')).toBe(2);
  });
});

describe('WorkerPool: vanilla', () => {
  it('vanillaWorkers sets the keys in flight at once in vanilla mode only (kcm taint eviction: one goroutine per pod)', async () => {
    let inFlight = 0;
    let peak = 0;
    let release!: () => void;
    let gate = new Promise<void>((r) => (release = r));
    const { clock, pool } = harness({ mode: 'vanilla', workers: 2, vanillaWorkers: 8, rateLimitedModes: [] }, async () => {
      peak = Math.max(peak, ++inFlight);
      await gate;
      inFlight--;
    });
    for (let i = 0; i < 12; i++) pool.queue.add(`k${i}`);
    pool.start();
    await clock.advance(0);
    expect(peak).toBe(8);
    release();
    await clock.advance(0);
    expect(inFlight).toBe(0);
    peak = 0;
    gate = new Promise<void>((r) => (release = r));
    pool.setMode('multi-priority-async');
    for (let i = 12; i < 20; i++) pool.queue.add(`k${i}`);
    await clock.advance(0);
    expect(peak).toBe(2);
    release();
    await pool.stop();
  });

  it('serves FIFO regardless of priority, limited by the client token bucket (20 qps, burst 30)', async () => {
    const { clock, pool, served } = harness({ mode: 'vanilla', workers: 5 });
    const added: string[] = [];
    for (let i = 0; i < 40; i++) {
      const k = `k${i}`;
      pool.queue.add(k, i % 7 === 3 ? 'high' : 'low');
      added.push(k);
    }
    pool.start();
    await clock.advanceTo(T0 + 1000);
    expect(served.map((s) => s.key)).toEqual(added);
    const times = served.map((s) => s.at - T0);
    expect(times.slice(0, 30)).toEqual(new Array(30).fill(0));
    expect(times.slice(30)).toEqual([50, 100, 150, 200, 250, 300, 350, 400, 450, 500]);
    await pool.stop();
  });

  it('pools given one bucket share its rate', async () => {
    const clock = new FakeClock(T0);
    const bucket = new TokenBucket({ qps: 10, burst: 2, clock });
    const times: number[] = [];
    const mk = (name: string) =>
      new WorkerPool({ name, clock, logger: silent, tokenBucket: bucket, reconcile: async () => void times.push(clock.now() - T0) });
    const a = mk(`shared-a-${++poolSeq}`);
    const b = mk(`shared-b-${++poolSeq}`);
    for (let i = 0; i < 3; i++) {
      a.queue.add(`a${i}`);
      b.queue.add(`b${i}`);
    }
    a.start();
    b.start();
    await clock.advanceTo(T0 + 1000);
    expect(times.sort((x, y) => x - y)).toEqual([0, 0, 100, 200, 300, 400]);
    await Promise.all([a.stop(), b.stop()]);
  });
});

describe('WorkerPool: multi-priority-async', () => {
  it('serves in priority order with async workers', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-async', workers: 1, rateLimitedModes: [] });
    pool.queue.add('a', 'none');
    pool.queue.add('b', 'low');
    pool.queue.add('h', 'high');
    pool.queue.add('c', 'low');
    pool.start();
    await clock.advance(0);
    expect(served.map((s) => s.key)).toEqual(['h', 'b', 'c', 'a']);
    await pool.stop();
  });

  it('is token-gated by default, like the thesis configuration 4', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-async' });
    pool.tokenBucket.setRate(10, 1);
    pool.queue.add('a');
    pool.queue.add('b');
    pool.start();
    await clock.advanceTo(T0 + 100);
    expect(served.map((s) => s.at - T0)).toEqual([0, 100]);
    await pool.stop();
  });
});

describe('WorkerPool: results and errors', () => {
  it('retries a failing key with exponential backoff, then forgets it; requeueAfter re-serves it later', async () => {
    let failures = 3;
    let requeued = false;
    const { clock, pool, served } = harness({ mode: 'multi-priority-async', rateLimitedModes: [] }, async (key) => {
      if (key !== 'a') return;
      if (failures-- > 0) throw new Error('conflict');
      if (!requeued) {
        requeued = true;
        return { requeueAfterMs: 1000 };
      }
    });
    pool.queue.add('a', 'low');
    pool.start();
    await clock.advanceTo(T0 + 5000);
    expect(served.map((s) => [s.at - T0, s.priority])).toEqual([
      [0, 1],
      [5, 1],
      [15, 1],
      [35, 1],
      [1035, 1],
    ]);
    expect(pool.queue.numRequeues('a')).toBe(0);
    await pool.stop();
  });

  it('does not retry a TerminalError', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-async', rateLimitedModes: [] }, async () => {
      throw new TerminalError('invalid spec');
    });
    pool.queue.add('a');
    pool.start();
    await clock.advance(10_000);
    expect(served).toHaveLength(1);
    expect(pool.queue.numWaiting()).toBe(0);
    await pool.stop();
  });
});

describe('WorkerPool: switching modes', () => {
  it('periodic -> vanilla -> periodic keeps the queued keys and the new pacing applies at once', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 5, periodMs: 100 });
    for (let i = 0; i < 10; i++) pool.queue.add(`k${i}`, 'low');
    pool.start();
    await clock.advanceTo(T0 + 30); // slots at 0 and 25
    expect(served).toHaveLength(2);
    pool.setMode('vanilla');
    expect(pool.queue.ordering).toBe('fifo');
    await clock.advance(0);
    expect(served.map((s) => s.key)).toEqual(Array.from({ length: 10 }, (_, i) => `k${i}`));
    expect(served.slice(2).every((s) => s.at === T0 + 30 && s.mode === 'vanilla')).toBe(true);
    const gauge = await metricsRegistry().getSingleMetric('ulysses_controller_mode')!.get();
    const modeOf = (m: string) => gauge.values.find((v) => v.labels.controller === pool.name && v.labels.mode === m)?.value;
    expect([modeOf('vanilla'), modeOf('multi-priority-periodic'), modeOf('multi-priority-async')]).toEqual([1, 0, 0]);
    await pool.stop();
  });

  it('a key in flight when the mode changes is finished by its old worker, and a re-add is served once after it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const { clock, pool, served, overlaps } = harness({ mode: 'vanilla', workers: 3 }, async (key) => {
      if (key === 'busy' && served.filter((s) => s.key === 'busy').length === 1) await gate;
    });
    pool.queue.add('busy');
    pool.start();
    await clock.advance(0);
    expect(served.map((s) => s.key)).toEqual(['busy']);
    pool.queue.add('busy', 'high');
    pool.setMode('multi-priority-async');
    pool.setMode('multi-priority-periodic', { periodMs: 50 });
    await clock.advance(200);
    expect(served).toHaveLength(1); // not handed to a new worker while the old one holds it
    release();
    await clock.advance(0);
    expect(served.map((s) => [s.key, s.priority, s.mode])).toEqual([
      ['busy', 0, 'vanilla'],
      ['busy', 2, 'multi-priority-periodic'],
    ]);
    expect(overlaps).toEqual([]);
    await pool.stop();
  });

  it('random adds and mode switches: no key lost, none reconciled concurrently', async () => {
    let s = 7;
    const rnd = (n: number) => {
      s = (s * 1103515245 + 12345) % 2147483648;
      return s % n;
    };
    const needed = new Set<string>();
    const { clock, pool, served, overlaps } = harness({ mode: 'vanilla', workers: 3, periodMs: 40 }, async (key, _ctx, clk) => {
      needed.delete(key); // this reconcile sees every add made before it started
      await sleepUntil(clk, clk.now() + rnd(60));
    });
    pool.start();
    const modes: WorkerMode[] = ['vanilla', 'multi-priority-async', 'multi-priority-periodic'];
    const seen = new Set<WorkerMode>();
    let switches = 0;
    for (let step = 0; step < 600; step++) {
      const op = rnd(10);
      if (op < 6) {
        const key = `k${rnd(25)}`;
        pool.queue.add(key, rnd(3));
        needed.add(key);
      } else if (op < 7) {
        const mode = modes[rnd(3)]!;
        const workers = 2 + rnd(4);
        const before = pool.mode;
        pool.setMode(mode, { workers, highPriorityWorkers: rnd(2), periodMs: 20 + rnd(80) });
        if (pool.mode !== before) switches++;
      } else {
        await clock.advance(rnd(40));
      }
      seen.add(pool.mode);
    }
    await clock.advance(60_000);
    expect(switches).toBeGreaterThan(30);
    expect(seen.size).toBe(3);
    expect(served.length).toBeGreaterThan(100);
    expect([...needed]).toEqual([]);
    expect(overlaps).toEqual([]);
    expect(pool.queue.len()).toBe(0);
    expect(pool.queue.numProcessing()).toBe(0);
    await pool.stop();
  });
});

describe('WorkerPool: lifecycle and config', () => {
  it('stop({drain}) serves every queued key at the periodic pace, ignoring new ones', async () => {
    const { clock, pool, served } = harness({ mode: 'multi-priority-periodic', workers: 3, highPriorityWorkers: 1, periodMs: 100 });
    for (const k of ['a', 'b', 'c', 'd']) pool.queue.add(k);
    pool.start();
    await clock.advance(0); // a at 0
    let stopped = false;
    const stopping = pool.stop({ drain: true }).then(() => (stopped = true));
    pool.queue.add('late');
    await clock.advanceTo(T0 + 100);
    expect(stopped).toBe(false);
    await clock.advanceTo(T0 + 150);
    await stopping;
    expect(served.map((s) => [s.key, s.at - T0])).toEqual([
      ['a', 0],
      ['b', 50],
      ['c', 100],
      ['d', 150],
    ]);
  });

  it('stop() aborts the reconcile signal and serves nothing more', async () => {
    let signal: AbortSignal | undefined;
    const { clock, pool, served } = harness({ mode: 'multi-priority-async', workers: 1, rateLimitedModes: [] }, async (_k, ctx) => {
      signal = ctx.signal;
      await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve()));
    });
    pool.queue.add('a');
    pool.queue.add('b');
    pool.start();
    await clock.advance(0);
    expect(signal?.aborted).toBe(false);
    await pool.stop();
    expect(signal?.aborted).toBe(true);
    expect(served.map((s) => s.key)).toEqual(['a']);
  });

  it('rejects invalid settings with a ConfigError naming the field, at construction and in setMode', () => {
    expect(() => harness({ workers: 2, highPriorityWorkers: 2 })).toThrow(/highPriorityWorkers/);
    const { pool } = harness({ mode: 'vanilla' });
    expect(() => pool.setMode('multi-priority-periodic', { periodMs: 0 })).toThrow(ConfigError);
    expect(pool.mode).toBe('vanilla');
  });

  it('records the sync duration by controller, priority and mode', async () => {
    const { clock, pool } = harness({ mode: 'multi-priority-async', rateLimitedModes: [] }, async (_k, _c, clk) => {
      await sleepUntil(clk, clk.now() + 40);
    });
    pool.queue.add('a', 'high');
    pool.start();
    await clock.advance(100);
    const h = await metricsRegistry().getSingleMetric('ulysses_worker_sync_duration_seconds')!.get();
    const sum = h.values.find(
      (v) => metricName(v) === 'ulysses_worker_sync_duration_seconds_sum' && v.labels.controller === pool.name && v.labels.priority === 'high' && v.labels.mode === 'multi-priority-async',
    );
    expect(sum?.value).toBeCloseTo(0.04);
    await pool.stop();
  });
});

describe('WorkerPool: real clock', () => {
  it('runs periodic and high-priority service on real timers (no fake clock)', async () => {
    const done: string[] = [];
    const starts: number[] = [];
    let finish!: () => void;
    const all = new Promise<void>((r) => (finish = r));
    const pool = new WorkerPool<string>({
      name: `real-${++poolSeq}`,
      logger: silent,
      mode: 'multi-priority-periodic',
      workers: 3,
      highPriorityWorkers: 1,
      periodMs: 40, // one low key every 20 ms
      reconcile: async (key) => {
        starts.push(performance.now());
        done.push(key);
        if (done.length === 4) finish();
      },
    });
    for (const k of ['l1', 'l2', 'l3']) pool.queue.add(k, 'low');
    pool.queue.add('h', 'high');
    pool.start();
    await all;
    await pool.stop();
    // h and l1 both start at once (async worker, first periodic tick), then one low key per slot
    expect(done.indexOf('h')).toBeLessThan(2);
    expect(done.filter((k) => k !== 'h')).toEqual(['l1', 'l2', 'l3']);
    const at = (k: string) => starts[done.indexOf(k)]!;
    // l1 to l3 is two slots of 20 ms; real timers may fire ~1 ms early
    expect(at('l3') - at('l1')).toBeGreaterThanOrEqual(38);
    expect(at('h') - at('l1')).toBeLessThan(15);
  });
});

