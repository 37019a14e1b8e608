import { describe, expect, it } from 'vitest';
import {
  coreSchedulable,
  deferrableServerResponseTime,
  periodicResourceBound,
  periodicResourceSupplyTime,
  placeServer,
  serverResponseTime,
  type DeferrableServer,
} from '../../scheduler-plugins/realtime/deferrable-server.ts';
import { simulateDeferrableServers } from '../../scheduler-plugins/realtime/simulator.ts';
import { taskPriorityOrder, type RtTask } from '../../scheduler-plugins/realtime/task.ts';

describe('textbook fixed-priority examples', () => {
  // Burns & Wellings, Real-Time Systems and Programming Languages, response-time analysis example:
  // a (T=7, C=3), b (T=12, C=3), c (T=20, C=5), rate-monotonic: R_a = 3, R_b = 6, R_c = 20.
  // A server with C_S = T_S never blacks out, so the hierarchical analysis must reduce to plain RTA:
  // R = (m T_S − C_S) + x(q) = (m − 1) T_S + q = L(R).
  const tasks: RtTask[] = [
    { wcetUs: 3, periodUs: 7, priority: 1 },
    { wcetUs: 3, periodUs: 12, priority: 2 },
    { wcetUs: 5, periodUs: 20, priority: 3 },
  ];
  const fullServer = { budgetUs: 1, periodUs: 1 };

  it('reproduces R = 3, 6, 20 through a full-budget server', () => {
    expect(tasks.map((t) => deferrableServerResponseTime(t, tasks, fullServer, []).responseTimeUs)).toEqual([3, 6, 20]);
    expect(tasks.every((t) => deferrableServerResponseTime(t, tasks, fullServer, []).schedulable)).toBe(true);
  });

  it('one more unit of work for c misses its deadline (6 → 12 → 15 → 21 > 20)', () => {
    const heavier = [tasks[0]!, tasks[1]!, { wcetUs: 6, periodUs: 20, priority: 3 }];
    const r = deferrableServerResponseTime(heavier[2]!, heavier, fullServer, []);
    expect(r.schedulable).toBe(false);
    expect(r.responseTimeUs).toBe(21);
    expect(r.reason).toMatch(/deadline 20/);
  });

  it('top-level servers: the jitter J = T − C of a higher-priority deferrable server counts twice', () => {
    // S1 (C=3, T=10) above S2 (C=3, T=10): R_S2 = 3 + ceil((R+7)/10)·3 → 6 → 9 (fixed point 9);
    // with J = 0 (periodic server) it would be 6.
    const r = serverResponseTime({ budgetUs: 3, periodUs: 10 }, [{ budgetUs: 3, periodUs: 10 }]);
    expect(r).toMatchObject({ schedulable: true, responseTimeUs: 9 });
    // Three such servers: the third cannot get its budget within its period.
    const third = serverResponseTime({ budgetUs: 3, periodUs: 10 }, [{ budgetUs: 3, periodUs: 10 }, { budgetUs: 3, periodUs: 10 }]);
    expect(third.schedulable).toBe(false);
    expect(third.responseTimeUs).toBeGreaterThan(10);
  });
});

describe('hierarchical deferrable-server example computed by hand', () => {
  // S1: C=2, T=5 (higher priority, J = 3). S2: C=2, T=10. Task τ in S2: C=3, T=D=40.
  // R_S2 = 2 + ceil((R+3)/5)·2: 2 → 4 → 6 → 6, so R_S2 = 6 ≤ 10.
  // τ: L = 3, m = ceil(3/2) = 2, q = 3 − 2 = 1, x(1) = 1 + ceil((x+3)/5)·2: 1 → 3 → 5 → 5,
  //    R = 2·10 − 2 + 5 = 23 (fixed point at once: no hp task).
  // Periodic-resource bound: 3 + (ceil(3/2)+1)(10−2) = 27.
  const s1: DeferrableServer = { podUid: 'a', budgetUs: 2, periodUs: 5, tasks: [{ wcetUs: 4, periodUs: 40 }] };
  const task: RtTask = { wcetUs: 3, periodUs: 40 };
  const s2: DeferrableServer = { podUid: 'b', budgetUs: 2, periodUs: 10, tasks: [task] };

  it('gives R_S2 = 6, R_τ = 23 and the periodic-resource bound 27', () => {
    expect(serverResponseTime(s2, [s1])).toMatchObject({ schedulable: true, responseTimeUs: 6 });
    expect(deferrableServerResponseTime(task, s2.tasks, s2, [s1])).toMatchObject({ schedulable: true, responseTimeUs: 23, deadlineUs: 40 });
    expect(periodicResourceBound(task, s2.tasks, s2, [s1])).toMatchObject({ schedulable: true, responseTimeUs: 27 });
    expect(periodicResourceSupplyTime(3, 2, 10)).toBe(27);
  });

  it('the simulator reaches 23 in the scenario the analysis describes', () => {
    // τ released at 0 when S2 has just exhausted its budget (next replenishment 10 − 2 = 8); S2 runs
    // 8..10, is replenished at 18; S1 kept its budget (replenished at 15, no work) until its task
    // arrives at 18: it runs 18..20 and, replenished at 20, 20..22 (back-to-back); τ finishes at 23.
    const sim = simulateDeferrableServers([s1, s2], 40, {
      initial: [{ budgetUs: 2, firstReplenishmentUs: 5 }, { budgetUs: 0, firstReplenishmentUs: 8 }],
      taskOffsetsUs: [[18], [0]],
    });
    expect(sim.maxResponseUs[1]).toEqual([23]);
    expect(sim.misses).toEqual([]);
    // Tighter deadline than 23: the analysis says no, and the same scenario indeed misses.
    const tight: RtTask = { wcetUs: 3, periodUs: 40, deadlineUs: 22 };
    const s2tight = { ...s2, tasks: [tight] };
    expect(deferrableServerResponseTime(tight, s2tight.tasks, s2tight, [s1]).schedulable).toBe(false);
    const miss = simulateDeferrableServers([s1, s2tight], 40, {
      initial: [{ budgetUs: 2, firstReplenishmentUs: 5 }, { budgetUs: 0, firstReplenishmentUs: 8 }],
      taskOffsetsUs: [[18], [0]],
    });
    expect(miss.misses).toMatchObject([{ server: 1, task: 0, releaseUs: 0, deadlineUs: 22, finishUs: 23 }]);
  });

  it('the pod annotation example: exact test admits (8500 us) where the pre-check alone would not (16500 us)', () => {
    const t: RtTask = { wcetUs: 500, periodUs: 10000, deadlineUs: 10000, priority: 1 };
    const s: DeferrableServer = { podUid: 'p', budgetUs: 2000, periodUs: 10000, tasks: [t] };
    expect(periodicResourceBound(t, s.tasks, s, [])).toMatchObject({ schedulable: false, responseTimeUs: 16500 });
    // Alone on the core: arrival at budget exhaustion, replenishment 8000 later, 500 us of work.
    expect(deferrableServerResponseTime(t, s.tasks, s, [])).toMatchObject({ schedulable: true, responseTimeUs: 8500 });
    const core = coreSchedulable([s]);
    expect(core.schedulable).toBe(true);
    expect(core.servers[0]!.tasks[0]).toMatchObject({ method: 'exact', responseTimeUs: 8500 });
  });

  it('coreSchedulable uses the cheap bound when it suffices, exact times on request', () => {
    const t: RtTask = { wcetUs: 100, periodUs: 100000 };
    const s: DeferrableServer = { podUid: 'p', budgetUs: 2000, periodUs: 10000, tasks: [t] };
    expect(coreSchedulable([s]).servers[0]!.tasks[0]).toMatchObject({ method: 'periodic-resource-bound', responseTimeUs: 16100 });
    expect(coreSchedulable([s], { exactResponseTimes: true }).servers[0]!.tasks[0]).toMatchObject({ method: 'exact', responseTimeUs: 8100 });
  });
});

describe('edge cases', () => {
  const t: RtTask = { wcetUs: 10, periodUs: 100 };

  it('rejects a zero budget and a budget larger than the period', () => {
    const zero = serverResponseTime({ budgetUs: 0, periodUs: 100 }, []);
    expect(zero.schedulable).toBe(false);
    expect(zero.reason).toMatch(/budgetUs must be an integer > 0/);
    const over = serverResponseTime({ budgetUs: 101, periodUs: 100 }, []);
    expect(over.schedulable).toBe(false);
    expect(over.reason).toMatch(/budgetUs \(101\) must be <= periodUs \(100\)/);
    expect(deferrableServerResponseTime(t, [t], { budgetUs: 0, periodUs: 100 }, []).schedulable).toBe(false);
    expect(serverResponseTime({ budgetUs: 100, periodUs: 100 }, [])).toMatchObject({ schedulable: true, responseTimeUs: 100 });
  });

  it('a deadline shorter than the WCET is unschedulable, not an error', () => {
    const bad: RtTask = { wcetUs: 10, periodUs: 100, deadlineUs: 9 };
    const r = deferrableServerResponseTime(bad, [bad], { budgetUs: 100, periodUs: 100 }, []);
    expect(r).toMatchObject({ schedulable: false, deadlineUs: 9 });
    expect(r.reason).toMatch(/deadline 9/);
    const ok: RtTask = { wcetUs: 10, periodUs: 100, deadlineUs: 10 };
    expect(deferrableServerResponseTime(ok, [ok], { budgetUs: 100, periodUs: 100 }, []).schedulable).toBe(true);
  });

  it('analyses D > T against min(D, T)', () => {
    const late: RtTask = { wcetUs: 10, periodUs: 100, deadlineUs: 500 };
    expect(deferrableServerResponseTime(late, [late], { budgetUs: 100, periodUs: 100 }, []).deadlineUs).toBe(100);
  });

  it('an invalid task and a task not in tasksInServer are reported, not thrown', () => {
    const bad: RtTask = { wcetUs: -1, periodUs: 100 };
    expect(deferrableServerResponseTime(bad, [bad], { budgetUs: 10, periodUs: 100 }, []).reason).toMatch(/wcetUs/);
    expect(deferrableServerResponseTime(t, [{ ...t }], { budgetUs: 10, periodUs: 100 }, []).reason).toMatch(/not an element/);
  });

  it('a server that cannot get its budget makes its tasks unschedulable', () => {
    const hp = { budgetUs: 8, periodUs: 10 };
    const r = deferrableServerResponseTime(t, [t], { budgetUs: 5, periodUs: 20 }, [hp]);
    expect(r.schedulable).toBe(false);
    expect(r.reason).toMatch(/server response time/);
  });
});

describe('priority orders', () => {
  it('servers are rate-monotonic, ties by pod UID whatever the input order', () => {
    const b: DeferrableServer = { podUid: 'b', budgetUs: 3, periodUs: 10, tasks: [] };
    const a: DeferrableServer = { podUid: 'a', budgetUs: 3, periodUs: 10, tasks: [] };
    const fast: DeferrableServer = { podUid: 'z', budgetUs: 1, periodUs: 5, tasks: [] };
    const core = coreSchedulable([b, a]);
    expect(core.servers.map((s) => [s.podUid, s.rank, s.server.responseTimeUs])).toEqual([
      ['a', 0, 3],
      ['b', 1, 9],
    ]);
    expect(coreSchedulable([b, fast, a]).servers.map((s) => s.podUid)).toEqual(['z', 'a', 'b']);
  });

  it('tasks: lower priority number first, ties by index, unprioritised last (deadline-monotonic)', () => {
    const server = { budgetUs: 1, periodUs: 1 };
    const tie = [
      { wcetUs: 2, periodUs: 10, priority: 1 },
      { wcetUs: 3, periodUs: 10, priority: 1 },
    ];
    expect(tie.map((t) => deferrableServerResponseTime(t, tie, server, []).responseTimeUs)).toEqual([2, 5]);
    const swapped = [
      { wcetUs: 2, periodUs: 10, priority: 2 },
      { wcetUs: 3, periodUs: 10, priority: 1 },
    ];
    expect(swapped.map((t) => deferrableServerResponseTime(t, swapped, server, []).responseTimeUs)).toEqual([5, 3]);
    const mixed: RtTask[] = [
      { wcetUs: 1, periodUs: 50 },
      { wcetUs: 1, periodUs: 50, deadlineUs: 5 },
      { wcetUs: 2, periodUs: 20, priority: 5 },
    ];
    expect(taskPriorityOrder(mixed)).toEqual([2, 1, 0]);
  });
});

describe('placeServer', () => {
  const srv = (podUid: string, budgetUs: number, periodUs: number): DeferrableServer => ({ podUid, budgetUs, periodUs, tasks: [] });

  it('tries the least loaded core first and falls back to the next one that stays schedulable', () => {
    const cores = [[srv('x', 5, 10)], [srv('y', 2, 10)]];
    const p = placeServer(cores, srv('new', 4, 10));
    expect(p).toMatchObject({ ok: true, core: 1 });
    // Core 1 (U = 0.1) is tried first, but its server y has a task with D = 20 that is met alone
    // (R = 20 − 2 + 2 = 20) and missed below the new higher-priority server (x(2) = 10, R = 28);
    // core 0 (U = 0.3): R_x = 12 + ceil((R+6)/10)·4 → 20 → 24 ≤ 40.
    const y: DeferrableServer = { podUid: 'y', budgetUs: 2, periodUs: 20, tasks: [{ wcetUs: 2, periodUs: 20 }] };
    const cores2 = [[srv('x', 12, 40)], [y]];
    expect(coreSchedulable([y]).schedulable).toBe(true);
    expect(coreSchedulable([y, srv('new', 4, 10)]).reason).toMatch(/pod y task 0: .*28/);
    expect(placeServer(cores2, srv('new', 4, 10))).toMatchObject({ ok: true, core: 0 });
  });

  it('reports why no core fits', () => {
    // U = 0.9 on both cores, but the new server (higher priority: 'new' < 'x') hits x back-to-back:
    // R_x = 6 + ceil((R+7)/10)·3 → 12 > 10.
    const cores = [[srv('x', 6, 10)], [srv('y', 6, 10)]];
    const p = placeServer(cores, srv('new', 3, 10));
    expect(p.ok).toBe(false);
    if (!p.ok) {
      expect(p.reason).toMatch(/core 0: .*server of pod/);
      expect(p.reason).toMatch(/core 1: .*server of pod y/);
    }
    expect(placeServer([[srv('x', 9, 10)]], srv('new', 5, 10))).toMatchObject({ ok: false, reason: 'core 0: utilization 1.4000 > 1' });
    expect(placeServer(cores, srv('new', 0, 10))).toMatchObject({ ok: false, reason: expect.stringMatching(/invalid server/) });
  });

  it('honours an optional utilization cap', () => {
    // x (5/10) above new (3/20): R_new = 3 + ceil((R+5)/10)·5 → 8 → 13 ≤ 20, U = 0.65.
    expect(placeServer([[srv('x', 5, 10)]], srv('new', 3, 20))).toMatchObject({ ok: true, core: 0 });
    expect(placeServer([[srv('x', 5, 10)]], srv('new', 3, 20), { maxUtilization: 0.7 })).toMatchObject({ ok: true, core: 0 });
    const capped = placeServer([[srv('x', 5, 10)]], srv('new', 3, 20), { maxUtilization: 0.6 });
    expect(capped).toMatchObject({ ok: false, reason: expect.stringMatching(/utilization 0\.6500 > 0\.6/) });
  });
});
