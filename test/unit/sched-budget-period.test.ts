import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MAX_UTILIZATION,
  coreUtilization,
  placeReservation,
  reservationTasksSchedulable,
  type CoreReservation,
} from '../../scheduler-plugins/realtime/budget-period.ts';

const res = (runtimeUs: number, periodUs: number): CoreReservation => ({ runtimeUs, periodUs });

describe('budget/period reservations', () => {
  it('sums Q/P per reservation, never ΣQ/ΣP (the RT-Kubernetes bug)', () => {
    // Two 9 ms / 10 ms reservations: Σ Q/P = 1.8, while ΣQ/ΣP = 18/20 = 0.9 would look fine.
    expect(coreUtilization([res(9000, 10000), res(9000, 10000)])).toBeCloseTo(1.8, 12);
    expect(placeReservation([[res(9000, 10000)]], { runtimeUs: 9000, periodUs: 10000, cpus: 1 })).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/would reach 1\.8000 > 0\.95/),
    });
    // Different periods: 1/2 + 1/4 + 1/8 = 0.875 (ΣQ/ΣP would give 3/14 ≈ 0.21).
    expect(coreUtilization([res(1, 2), res(1, 4), res(1, 8)])).toBeCloseTo(0.875, 12);
    expect(placeReservation([[res(1, 2), res(1, 4), res(1, 8)]], { runtimeUs: 1, periodUs: 10, cpus: 1 })).toMatchObject({ ok: false });
    expect(placeReservation([[res(1, 2), res(1, 4), res(1, 8)]], { runtimeUs: 1, periodUs: 20, cpus: 1 })).toMatchObject({ ok: true });
  });

  it('admits exactly up to maxUtilization (default 0.95)', () => {
    expect(DEFAULT_MAX_UTILIZATION).toBe(0.95);
    expect(placeReservation([[res(5000, 10000)]], { runtimeUs: 4500, periodUs: 10000, cpus: 1 })).toMatchObject({ ok: true, cores: [0] });
    expect(placeReservation([[res(5000, 10000)]], { runtimeUs: 4501, periodUs: 10000, cpus: 1 }).ok).toBe(false);
    expect(placeReservation([[res(5000, 10000)]], { runtimeUs: 5000, periodUs: 10000, cpus: 1 }, { maxUtilization: 1 }).ok).toBe(true);
    expect(placeReservation([[]], { runtimeUs: 1, periodUs: 10, cpus: 1 }, { maxUtilization: 1.5 })).toMatchObject({ ok: false, reason: expect.stringMatching(/maxUtilization/) });
  });

  it('chooses cores worst-fit (most room first, ties by index)', () => {
    const cores = [[res(5, 10)], [res(2, 10)], [res(3, 10)], [res(2, 10)]];
    expect(placeReservation(cores, { runtimeUs: 1, periodUs: 10, cpus: 1 })).toMatchObject({ ok: true, cores: [1] });
    const two = placeReservation(cores, { runtimeUs: 1, periodUs: 10, cpus: 2 });
    expect(two).toMatchObject({ ok: true, cores: [1, 3] });
    if (two.ok) expect(two.utilizationAfter.map((u) => Math.round(u * 10) / 10)).toEqual([0.5, 0.3, 0.3, 0.3]);
    expect(placeReservation(cores, { runtimeUs: 1, periodUs: 10, cpus: 3 })).toMatchObject({ ok: true, cores: [1, 2, 3] });
    // The third emptiest core (0.3) cannot take 0.7: no set of 3 cores can.
    expect(placeReservation(cores, { runtimeUs: 7, periodUs: 10, cpus: 3 })).toMatchObject({ ok: false });
    expect(placeReservation(cores, { runtimeUs: 1, periodUs: 10, cpus: 5 })).toMatchObject({ ok: false, reason: expect.stringMatching(/needs 5 cpus, node has 4/) });
  });

  it('rejects zero runtime and runtime > period', () => {
    expect(placeReservation([[]], { runtimeUs: 0, periodUs: 10, cpus: 1 })).toMatchObject({ ok: false, reason: expect.stringMatching(/runtimeUs/) });
    expect(placeReservation([[]], { runtimeUs: 11, periodUs: 10, cpus: 1 })).toMatchObject({ ok: false, reason: expect.stringMatching(/must be <= periodUs/) });
    expect(placeReservation([[]], { runtimeUs: 1, periodUs: 10, cpus: 0 })).toMatchObject({ ok: false, reason: expect.stringMatching(/cpus/) });
  });

  it('checks tasks inside the reservation with the periodic-resource bound', () => {
    // Q = 2000, P = 10000: blackout up to 2·8000. A 500 us task needs 500 + 2·8000 = 16500 us.
    const r1 = reservationTasksSchedulable({ runtimeUs: 2000, periodUs: 10000, cpus: 1, tasks: [{ wcetUs: 500, periodUs: 10000 }] });
    expect(r1.schedulable).toBe(false);
    expect(r1.tasks[0]).toMatchObject({ responseTimeUs: 16500, method: 'periodic-resource-bound' });
    const r2 = reservationTasksSchedulable({ runtimeUs: 2000, periodUs: 10000, cpus: 1, tasks: [{ wcetUs: 500, periodUs: 20000 }] });
    expect(r2.tasks[0]).toMatchObject({ schedulable: true, responseTimeUs: 16500 });
    // Two tasks, fixed priority: hp (1000, 20000): 1000 + 2·8000 = 17000. lp (1500, 40000): L = 2500 →
    // 2500 + (2+1)·8000 = 26500; hp is released twice in 26500: L = 3500 → 3500 + 3·8000 = 27500 (fixed point).
    const r3 = reservationTasksSchedulable({
      runtimeUs: 2000,
      periodUs: 10000,
      cpus: 1,
      tasks: [
        { wcetUs: 1500, periodUs: 40000, priority: 2 },
        { wcetUs: 1000, periodUs: 20000, priority: 1 },
      ],
    });
    expect(r3.tasks.map((t) => t.responseTimeUs)).toEqual([27500, 17000]);
    const placed = placeReservation([[]], { runtimeUs: 2000, periodUs: 10000, cpus: 1, tasks: [{ wcetUs: 500, periodUs: 10000 }] });
    expect(placed).toMatchObject({ ok: false, reason: expect.stringMatching(/tasks do not fit the reservation: task 0/) });
  });
});

describe('exact reservation arithmetic', () => {
  it('Σ Q/P = 1 + 5e-10 at periods near 2e9 µs is refused at maxUtilization 1; 0.5 + 0.45 fits 0.95', () => {
    const near = placeReservation([[res(1_000_000_000, 2_000_000_000)]], { runtimeUs: 1_000_000_001, periodUs: 2_000_000_000, cpus: 1 }, { maxUtilization: 1 });
    expect(near.ok).toBe(false);
    expect(placeReservation([[res(1_000_000_000, 2_000_000_000)]], { runtimeUs: 1_000_000_000, periodUs: 2_000_000_000, cpus: 1 }, { maxUtilization: 1 }).ok).toBe(true);
    expect(placeReservation([[res(5, 10)]], { runtimeUs: 45, periodUs: 100, cpus: 1 }, { maxUtilization: 0.95 }).ok).toBe(true);
    expect(placeReservation([[res(5, 10)]], { runtimeUs: 451, periodUs: 1000, cpus: 1 }, { maxUtilization: 0.95 }).ok).toBe(false);
  });
});
