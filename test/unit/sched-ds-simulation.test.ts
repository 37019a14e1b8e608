/**
 * Soundness of the deferrable-server analysis against the discrete-event simulator: on 300 random
 * small systems (seeded), whenever the analysis says "schedulable", no simulated scenario misses a
 * deadline. Scenarios per system: synchronous release with full budgets; for every server S, S
 * exhausted at the release (next replenishment T_S − C_S) while every other server is back-to-back
 * (full budget at 0, replenished again at C_X) and hp servers' bursts aligned with S's k-th
 * replenishment; and random legal initial states with random release offsets.
 * A second test shows the check has teeth: two deliberately optimistic analyses are caught.
 */
import { describe, expect, it } from 'vitest';
import {
  coreSchedulable,
  deferrableServerJitter,
  periodicResourceBound,
  deferrableServerResponseTime,
  serverPriorityOrder,
  type DeferrableServer,
  type ServerParams,
} from '../../scheduler-plugins/realtime/deferrable-server.ts';
import {
  adversarialScenarios,
  simulateDeferrableServers,
  simulationHorizon,
  type SimulationOptions,
} from '../../scheduler-plugins/realtime/simulator.ts';
import { ceilDiv, effectiveDeadline, higherPriorityTasks, levelLoad, type RtTask } from '../../scheduler-plugins/realtime/task.ts';
import { prng } from '../../core/prng.ts';

const SERVER_PERIODS = [2000, 2500, 4000, 5000, 10000];
const TASK_PERIODS = [5000, 10000, 20000, 25000, 40000, 50000];

function randomSystem(rand: () => number): DeferrableServer[] {
  const pick = <T,>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const nServers = int(1, 3);
  const servers: DeferrableServer[] = [];
  for (let s = 0; s < nServers; s++) {
    const periodUs = pick(SERVER_PERIODS);
    const budgetUs = 100 * int(Math.max(1, Math.round(periodUs / 1000)), Math.round(periodUs / 200)); // 10%..50%
    const share = (budgetUs / periodUs) * (0.1 + 0.6 * rand());
    const nTasks = int(1, 3);
    const tasks: RtTask[] = [];
    for (let k = 0; k < nTasks; k++) {
      const taskPeriod = pick(TASK_PERIODS);
      const wcetUs = Math.max(100, 100 * Math.round(((share / nTasks) * taskPeriod) / 100));
      const implicit = rand() < 0.5;
      const deadlineUs = implicit ? taskPeriod : 100 * int(Math.ceil(wcetUs / 100), taskPeriod / 100);
      const withPriority = rand() < 0.5;
      tasks.push({ wcetUs, periodUs: taskPeriod, deadlineUs, ...(withPriority ? { priority: int(1, 3) } : {}) });
    }
    servers.push({ podUid: `pod-${s}`, budgetUs, periodUs, tasks });
  }
  return servers;
}

function maxOffset(o: SimulationOptions): number {
  return Math.max(0, ...(o.taskOffsetsUs ?? []).flatMap((x) => [...(x ?? [])]));
}

/** Runs every scenario; returns per server/task the max observed response time, and whether any job missed. */
function simulateAll(servers: readonly DeferrableServer[], rand: () => number) {
  const observed = servers.map((s) => s.tasks.map(() => 0));
  let missed = false;
  for (const o of adversarialScenarios(servers, rand)) {
    const res = simulateDeferrableServers(servers, simulationHorizon(servers, maxOffset(o)), o);
    if (res.misses.length > 0) missed = true;
    res.maxResponseUs.forEach((row, i) => row.forEach((r, k) => (observed[i]![k] = Math.max(observed[i]![k]!, r))));
  }
  return { observed, missed };
}

describe('deferrable-server analysis vs simulation', () => {
  it('is sound on 300 random systems: analysed-schedulable never misses, observed response ≤ analysed', () => {
    const rand = prng(20250611);
    let schedulableSets = 0;
    let unschedulableSets = 0;
    let boundChecks = 0;
    let boundSaysYes = 0;
    let boundPessimistic = 0;
    const problems: string[] = [];
    for (let n = 0; n < 300; n++) {
      const servers = randomSystem(rand);
      const analysis = coreSchedulable(servers, { exactResponseTimes: true });
      const sim = simulateAll(servers, rand);
      if (analysis.schedulable) {
        schedulableSets++;
        if (sim.missed) problems.push(`set ${n}: analysed schedulable but simulation missed: ${JSON.stringify(servers)}`);
        for (const sa of analysis.servers) {
          sa.tasks.forEach((t, k) => {
            const obs = sim.observed[sa.index]![k]!;
            if (t.responseTimeUs === null || obs > t.responseTimeUs) {
              problems.push(`set ${n}: server ${sa.index} task ${k}: observed ${obs} > analysed ${t.responseTimeUs}`);
            }
          });
        }
      } else unschedulableSets++;

      // The periodic-resource bound is never more optimistic than the exact test.
      const order = serverPriorityOrder(servers);
      for (const [rank, i] of order.entries()) {
        const s = servers[i]!;
        const hp = order.slice(0, rank).map((j) => servers[j]!);
        for (const task of s.tasks) {
          const exact = deferrableServerResponseTime(task, s.tasks, s, hp);
          const bound = periodicResourceBound(task, s.tasks, s, hp);
          boundChecks++;
          if (bound.schedulable) boundSaysYes++;
          if (bound.schedulable && !exact.schedulable) problems.push(`set ${n}: bound schedulable, exact not`);
          if (bound.schedulable && exact.schedulable && bound.responseTimeUs! < exact.responseTimeUs!) {
            problems.push(`set ${n}: bound ${bound.responseTimeUs} < exact ${exact.responseTimeUs}`);
          }
          if (exact.schedulable && !bound.schedulable) boundPessimistic++;
        }
      }
    }
    expect(problems).toEqual([]);
    // Not vacuous: both outcomes are well represented.
    expect(schedulableSets).toBeGreaterThan(60);
    expect(unschedulableSets).toBeGreaterThan(30);
    expect(boundChecks).toBeGreaterThan(300);
    expect(boundSaysYes).toBeGreaterThan(50);
    expect(boundPessimistic).toBeGreaterThan(0); // it is only sufficient
  }, 60_000); // seconds of seeded work: beyond vitest's 5-s default on a loaded 2-CPU machine (not a timing claim)

  it('has teeth: deliberately optimistic analyses are caught by the same simulations', () => {
    // (a) forgets the initial blackout T_S − C_S: R = (m−1)T_S + x(q);
    // (b) forgets the back-to-back jitter of higher-priority servers (J_X = 0).
    type Variant = 'no-blackout' | 'no-jitter';
    const optimistic = (variant: Variant, task: RtTask, tasks: readonly RtTask[], s: ServerParams, hp: readonly ServerParams[]) => {
      const J = (x: ServerParams) => (variant === 'no-jitter' ? 0 : deferrableServerJitter(x));
      const x = (q: number) => {
        let v = q;
        for (;;) {
          let n = q;
          for (const h of hp) n += ceilDiv(v + J(h), h.periodUs) * h.budgetUs;
          if (n === v || n > s.periodUs) return n;
          v = n;
        }
      };
      if (x(s.budgetUs) > s.periodUs) return false;
      const hpT = higherPriorityTasks(tasks, tasks.indexOf(task));
      let r = task.wcetUs;
      for (;;) {
        const load = levelLoad(task, hpT, r);
        const m = ceilDiv(load, s.budgetUs);
        const q = load - (m - 1) * s.budgetUs;
        const next = (variant === 'no-blackout' ? (m - 1) * s.periodUs : m * s.periodUs - s.budgetUs) + x(q);
        if (next > effectiveDeadline(task)) return false;
        if (next === r) return true;
        r = next;
      }
    };
    const caught: Record<Variant, number> = { 'no-blackout': 0, 'no-jitter': 0 };
    const rand = prng(7);
    for (let n = 0; n < 300; n++) {
      const servers = randomSystem(rand);
      const sim = simulateAll(servers, rand);
      if (!sim.missed) continue;
      const order = serverPriorityOrder(servers);
      for (const variant of ['no-blackout', 'no-jitter'] as const) {
        const says = order.every((i, rank) => {
          const s = servers[i]!;
          const hp = order.slice(0, rank).map((j) => servers[j]!);
          return s.tasks.every((t) => optimistic(variant, t, s.tasks, s, hp));
        });
        if (says) caught[variant]++;
      }
    }
    expect(caught['no-blackout']).toBeGreaterThan(0);
    expect(caught['no-jitter']).toBeGreaterThan(0);
  });
});
