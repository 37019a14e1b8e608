import { describe, expect, it } from 'vitest';
import { edfCoreSchedulable, placeEdfTasks } from '../../scheduler-plugins/realtime/edf.ts';
import { AnalysisBudget, decimalRatio, MAX_TIME_US, taskDensity, utilizationExceeds, type RtTask } from '../../scheduler-plugins/realtime/task.ts';
import { prng } from '../../core/prng.ts';

const t = (wcetUs: number, periodUs: number, deadlineUs?: number): RtTask => ({ wcetUs, periodUs, ...(deadlineUs ? { deadlineUs } : {}) });

describe('EDF per core', () => {
  it('implicit deadlines: exact utilization test, boundary U = 1 included', () => {
    // 1/4 + 2/6 + 3/12 = 0.8333; adding 2/12 gives exactly 1.
    expect(edfCoreSchedulable([t(1, 4), t(2, 6), t(3, 12)])).toMatchObject({ schedulable: true, test: 'utilization', exact: true });
    const full = edfCoreSchedulable([t(1, 4), t(2, 6), t(3, 12), t(2, 12)]);
    expect(full).toMatchObject({ schedulable: true, test: 'utilization', exact: true });
    expect(full.load).toBeCloseTo(1, 12);
    const over = edfCoreSchedulable([t(1, 4), t(2, 6), t(3, 12), t(3, 12)]);
    expect(over).toMatchObject({ schedulable: false, test: 'utilization', exact: true });
    expect(over.reason).toMatch(/utilization Σ C\/T = 1\.0833 > 1/);
  });

  it('deadlines longer than periods are still exact (utilization)', () => {
    expect(edfCoreSchedulable([t(5, 10, 50), t(5, 10)])).toMatchObject({ schedulable: true, test: 'utilization', exact: true });
  });

  it('constrained deadlines: density test, only sufficient, and says so', () => {
    // 2/min(4,10) + 3/6 = 1.0
    expect(edfCoreSchedulable([t(2, 10, 4), t(3, 6)])).toMatchObject({ schedulable: true, test: 'density', exact: false });
    // Feasible under EDF (jobs run [0,1) and [1,2)) but density 1 + 0.5 > 1: rejected, flagged as sufficient only.
    const r = edfCoreSchedulable([t(1, 10, 1), t(1, 10, 2)]);
    expect(r).toMatchObject({ schedulable: false, test: 'density', exact: false, load: 1.5 });
    expect(r.reason).toMatch(/sufficient test only/);
  });

  it('a deadline shorter than the WCET is unschedulable', () => {
    expect(edfCoreSchedulable([t(5, 10, 4)])).toMatchObject({ schedulable: false, test: 'density' });
    expect(edfCoreSchedulable([t(4, 10, 4)])).toMatchObject({ schedulable: true, test: 'density' });
  });

  it('a bound below 1 makes the answer non-exact', () => {
    expect(edfCoreSchedulable([t(9, 10)], 0.95)).toMatchObject({ schedulable: true, exact: false, bound: 0.95 });
    expect(edfCoreSchedulable([t(96, 100)], 0.95)).toMatchObject({ schedulable: false });
  });

  it('reports invalid tasks', () => {
    expect(edfCoreSchedulable([t(0, 10)])).toMatchObject({ schedulable: false, reason: expect.stringMatching(/invalid task 0: wcetUs/) });
  });
});

describe('EDF placement (worst-fit decreasing)', () => {
  it('spreads tasks over cores, densest first, least loaded core first', () => {
    const p = placeEdfTasks([[], []], [t(3, 10), t(6, 10), t(3, 10), t(6, 10)]);
    // order: 0.6 (idx 1) → core 0; 0.6 (idx 3) → core 1; 0.3 (idx 0) → core 0 (tie); 0.3 (idx 2) → core 1
    expect(p).toMatchObject({ ok: true, assignment: [0, 0, 1, 1] });
    expect(placeEdfTasks([[t(9, 10)], [t(3, 10)]], [t(5, 10)])).toMatchObject({ ok: true, assignment: [1] });
  });

  it('is all-or-nothing and explains the failure', () => {
    // task 0 → core 1 (0.5 → 0.8); task 1 fits neither 0.8 + 0.3 nor 0.9 + 0.3.
    const p = placeEdfTasks([[t(9, 10)], [t(5, 10)]], [t(3, 10), t(3, 10)]);
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toMatch(/task 1 fits no core \(least loaded core 1: utilization/);
    expect(placeEdfTasks([], [t(1, 10)])).toMatchObject({ ok: false, reason: 'node has no cores' });
  });
  it('a task over the bound on its own is refused without testing every core', () => {
    // 1024 cores, 768 of them full: the task (density 1 + 1e-9) fits none, the least loaded core says why
    const cores = Array.from({ length: 1024 }, (_, c) => (c < 768 ? [t(1000, 1000)] : []));
    const budget = new AnalysisBudget(1_000_000);
    const p = placeEdfTasks(cores, [t(1_000_000_001, 1_000_000_000)], 1, budget);
    expect(p).toMatchObject({ ok: false, reason: expect.stringMatching(/^task 0 fits no core \(least loaded core 768: utilization Σ C\/T = 1\.0000 > 1/) });
    // ordering the cores (1 per core) and the task alone, not a test of each core (1 + its tasks each)
    expect(budget.used).toBe(1024 + 1);
    // the same task at the bound is placed, on the least loaded core
    expect(placeEdfTasks(cores, [t(1_000_000_000, 1_000_000_000)], 1)).toMatchObject({ ok: true, assignment: [768] });
  });
});

describe('exact utilization arithmetic', () => {
  it('U = 1 + 5e-10 at periods near 2e9 µs is refused (a 1e-9 float slack admitted it); U = 1 exactly is admitted', () => {
    // 1e9/2e9 + (1e9+1)/2e9 = 1 + 5e-10
    const over = edfCoreSchedulable([t(1_000_000_000, 2_000_000_000), t(1_000_000_001, 2_000_000_000)]);
    expect(over).toMatchObject({ schedulable: false, test: 'utilization' });
    expect(over.load).toBeLessThanOrEqual(1 + 1e-9); // what the float comparison let through
    expect(edfCoreSchedulable([t(1_000_000_000, 2_000_000_000), t(999_999_999, 1_999_999_998)])).toMatchObject({ schedulable: true });
    // coprime periods: 1/3 + 1/3 + 1/3 = 1 exactly, though the float sum rounds
    expect(edfCoreSchedulable([t(1, 3), t(1, 3), t(1, 3)])).toMatchObject({ schedulable: true });
    expect(edfCoreSchedulable([t(666_666_667, 2_000_000_001), t(1_333_333_334, 2_000_000_001)])).toMatchObject({ schedulable: true }); // exactly 1
    expect(edfCoreSchedulable([t(666_666_667, 2_000_000_001), t(1_333_333_335, 2_000_000_001)])).toMatchObject({ schedulable: false }); // 1 + 1/2000000001
    // density test (D < T) too
    expect(edfCoreSchedulable([t(1_000_000_000, 3_000_000_000, 2_000_000_000), t(1_000_000_001, 3_000_000_000, 2_000_000_000)])).toMatchObject({ schedulable: false, test: 'density' });
    // a bound below 1 is the decimal written: 0.5 + 0.45 <= 0.95
    expect(edfCoreSchedulable([t(5, 10), t(45, 100)], 0.95)).toMatchObject({ schedulable: true });
    expect(placeEdfTasks([[t(1_000_000_000, 2_000_000_000)]], [t(1_000_000_001, 2_000_000_000)])).toMatchObject({ ok: false });
  });
});

describe('the float sum decides only away from the bound', () => {
  // the core test compares the float sum when rounding cannot change the answer and the exact
  // integer sum near the bound; both must give the exact answer, and the placement (which tests a
  // core by its kept density sum without copying its tasks) must equal testing a copy each time
  const rnd = prng(26);
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const exact = (tasks: readonly RtTask[], bound: number) => {
    const implicit = tasks.every((x) => (x.deadlineUs ?? x.periodUs) >= x.periodUs);
    const [num, den] = decimalRatio(bound);
    return !utilizationExceeds(tasks.map((x) => [x.wcetUs, implicit ? x.periodUs : Math.min(x.deadlineUs ?? x.periodUs, x.periodUs)] as const), num, den);
  };
  /** Tasks whose sum lands on, just under or just over `bound` (the last task's WCET chosen so), or anywhere. */
  const nearBound = (bound: number): RtTask[] => {
    const n = int(1, 6);
    const big = rnd() < 0.5;
    const tasks = Array.from({ length: n - 1 }, () => {
      const periodUs = big ? int(1_000_000_000, MAX_TIME_US) : int(2, 1000);
      return t(int(1, Math.max(1, Math.floor((periodUs * bound) / (2 * n)))), periodUs, rnd() < 0.2 ? int(1, periodUs) : undefined);
    });
    const periodUs = big ? int(1_000_000_000, MAX_TIME_US) : int(2, 1000);
    const used = tasks.reduce((s, x) => s + x.wcetUs / Math.min(x.deadlineUs ?? x.periodUs, x.periodUs), 0);
    const wcet = Math.max(1, Math.round((bound - used) * periodUs) + int(-1, 1));
    return [...tasks, t(Math.min(wcet, MAX_TIME_US), periodUs)];
  };
  it('edfCoreSchedulable equals the exact test (2000 sets at, under and over the bounds 1, 0.95, 0.7)', () => {
    let near = 0;
    for (let i = 0; i < 2000; i++) {
      const bound = [1, 0.95, 0.7][i % 3]!;
      const tasks = nearBound(bound);
      const r = edfCoreSchedulable(tasks, bound);
      expect(r.schedulable, JSON.stringify({ tasks, bound })).toBe(exact(tasks, bound));
      if (Math.abs(r.load - bound) < 1e-12) near++;
    }
    expect(near).toBeGreaterThan(20); // the cases the float cannot decide were exercised
  });
  /** Worst-fit decreasing as specified: each task on the first core passing, of every core sorted afresh by (load, index). */
  const reference = (cores: readonly (readonly RtTask[])[], tasks: readonly RtTask[], bound: number) => {
    const state = cores.map((c) => [...c]);
    const loads = state.map((c) => c.reduce((s, x) => s + taskDensity(x), 0));
    const order = tasks.map((_, i) => i).sort((a, b) => taskDensity(tasks[b]!) - taskDensity(tasks[a]!) || a - b);
    const assignment: number[] = new Array<number>(tasks.length).fill(-1);
    for (const i of order) {
      const byLoad = state.map((_, c) => c).sort((a, b) => loads[a]! - loads[b]! || a - b);
      const core = byLoad.find((c) => edfCoreSchedulable([...state[c]!, tasks[i]!], bound).schedulable);
      if (core === undefined) return undefined;
      state[core]!.push(tasks[i]!);
      loads[core] = loads[core]! + taskDensity(tasks[i]!);
      assignment[i] = core;
    }
    return assignment;
  };
  it('placeEdfTasks equals placement by testing a copy of each core (300 random nodes, bounds 1 and 0.95)', () => {
    let placed = 0;
    for (let i = 0; i < 300; i++) {
      const bound = i % 2 ? 1 : 0.95;
      const cores = Array.from({ length: int(1, 4) }, () => (rnd() < 0.3 ? [] : nearBound(bound).slice(0, int(1, 3))));
      const tasks = nearBound(bound * int(1, 2));
      const r = placeEdfTasks(cores, tasks, bound);
      const ref = reference(cores, tasks, bound);
      expect(r.ok ? r.assignment : undefined, JSON.stringify({ cores, tasks, bound })).toEqual(ref);
      if (r.ok) placed++;
    }
    expect(placed).toBeGreaterThan(30);
    expect(placed).toBeLessThan(270);
  });
  it('placeEdfTasks orders the cores as a fresh sort per task would (200 nodes of up to 64 cores, equal loads and repeated tasks)', () => {
    let placed = 0;
    for (let i = 0; i < 200; i++) {
      const bound = i % 2 ? 1 : 0.95;
      const shapes = [t(1, 4), t(1, 3), t(2, 5, 3), t(1, 1000)];
      const pick = () => shapes[int(0, shapes.length - 1)]!;
      const cores = Array.from({ length: int(1, 64) }, () => Array.from({ length: int(0, 2) }, pick));
      const tasks = Array.from({ length: int(1, 40) }, pick);
      const r = placeEdfTasks(cores, tasks, bound);
      expect(r.ok ? r.assignment : undefined, JSON.stringify({ cores, tasks, bound })).toEqual(reference(cores, tasks, bound));
      if (r.ok) placed++;
    }
    expect(placed).toBeGreaterThan(20);
    expect(placed).toBeLessThan(180);
  });
});
