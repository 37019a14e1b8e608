import { describe, expect, it } from 'vitest';
import { edfCoreSchedulable, placeEdfTasks } from '../../scheduler-plugins/realtime/edf.ts';
import type { RtTask } from '../../scheduler-plugins/realtime/task.ts';

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
