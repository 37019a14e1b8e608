/**
 * Discrete-event simulator of one core running deferrable servers (used to check the analysis in
 * `deferrable-server.ts`; not used for admission).
 *
 * Semantics (the same system model as the analysis):
 * - server S has budget b_S; at each replenishment instant (every T_S) b_S := C_S (no carry-over);
 * - a server is eligible when b_S > 0 and one of its tasks has a pending job; the eligible server
 *   first in {@link serverPriorityOrder} runs, and inside it the pending task first in
 *   {@link taskPriorityOrder} runs (its oldest job first); running consumes the budget 1:1;
 * - task k of server S releases a job every T_k from its offset; a job missing its deadline keeps
 *   running (it is recorded as a miss).
 * Time is integer microseconds and every event (release, replenishment, completion, exhaustion)
 * falls on an integer, so jumping from event to event is exact.
 *
 * The initial state at t = 0 is configurable per server, so adversarial states can be built:
 * "back-to-back" (full budget at 0, replenished again at C_S: the J = T − C jitter of the analysis)
 * and "exhausted" (no budget at 0, next replenishment at T_S − C_S: the worst case for a task
 * released at 0 in that server).
 */
import { serverPriorityOrder, type DeferrableServer } from './deferrable-server.ts';
import { relativeDeadline, taskPriorityOrder } from './task.ts';

export interface ServerInitialState {
  /** Budget left at t = 0, in [0, C_S]. */
  readonly budgetUs: number;
  /** First replenishment instant, in (0, T_S]. Legal states satisfy C_S − budget ≤ T_S − first. */
  readonly firstReplenishmentUs: number;
}

export interface SimulationOptions {
  /** Per server (input order); default: full budget at 0, first replenishment at T_S (synchronous). */
  readonly initial?: readonly (ServerInitialState | undefined)[];
  /** Per server, per task release offset (default 0: synchronous release). */
  readonly taskOffsetsUs?: readonly (readonly number[] | undefined)[];
}

export interface DeadlineMiss {
  readonly server: number;
  readonly task: number;
  readonly releaseUs: number;
  readonly deadlineUs: number;
  /** null: still unfinished at the horizon. */
  readonly finishUs: number | null;
}

export interface SimulationResult {
  readonly misses: readonly DeadlineMiss[];
  /** Largest observed response time per server, per task (0 when no job completed). */
  readonly maxResponseUs: readonly (readonly number[])[];
  readonly completedJobs: number;
}

interface Job {
  release: number;
  remaining: number;
  deadline: number;
}

/** Simulates [0, horizonUs). Jobs whose deadline is ≤ horizon and that are unfinished count as misses. */
export function simulateDeferrableServers(
  servers: readonly DeferrableServer[],
  horizonUs: number,
  options: SimulationOptions = {},
): SimulationResult {
  const sOrder = serverPriorityOrder(servers);
  const tOrder = servers.map((s) => taskPriorityOrder(s.tasks));
  const budget = servers.map((s, i) => options.initial?.[i]?.budgetUs ?? s.budgetUs);
  const nextRepl = servers.map((s, i) => options.initial?.[i]?.firstReplenishmentUs ?? s.periodUs);
  const nextRelease = servers.map((s, i) => s.tasks.map((_, k) => options.taskOffsetsUs?.[i]?.[k] ?? 0));
  const queues: Job[][][] = servers.map((s) => s.tasks.map(() => []));
  const maxResponse = servers.map((s) => s.tasks.map(() => 0));
  const misses: DeadlineMiss[] = [];
  let completedJobs = 0;

  let t = 0;
  while (t < horizonUs) {
    // Events at t: replenishments, then releases.
    for (const [i, s] of servers.entries()) {
      if (nextRepl[i] === t) {
        budget[i] = s.budgetUs;
        nextRepl[i] = t + s.periodUs;
      }
      for (const [k, task] of s.tasks.entries()) {
        if (nextRelease[i]![k] === t) {
          queues[i]![k]!.push({ release: t, remaining: task.wcetUs, deadline: t + relativeDeadline(task) });
          nextRelease[i]![k] = t + task.periodUs;
        }
      }
    }
    // Who runs.
    let runServer = -1;
    let runTask = -1;
    for (const i of sOrder) {
      if (budget[i]! <= 0) continue;
      const k = tOrder[i]!.find((k) => queues[i]![k]!.length > 0);
      if (k !== undefined) {
        runServer = i;
        runTask = k;
        break;
      }
    }
    // Next event.
    let next = horizonUs;
    for (const [i, s] of servers.entries()) {
      next = Math.min(next, nextRepl[i]!);
      for (const k of s.tasks.keys()) next = Math.min(next, nextRelease[i]![k]!);
    }
    if (runServer >= 0) {
      const job = queues[runServer]![runTask]![0]!;
      next = Math.min(next, t + job.remaining, t + budget[runServer]!);
      const dt = next - t;
      job.remaining -= dt;
      budget[runServer]! -= dt;
      if (job.remaining === 0) {
        queues[runServer]![runTask]!.shift();
        completedJobs++;
        const response = next - job.release;
        const row = maxResponse[runServer]!;
        row[runTask] = Math.max(row[runTask]!, response);
        if (next > job.deadline) misses.push({ server: runServer, task: runTask, releaseUs: job.release, deadlineUs: job.deadline, finishUs: next });
      }
    }
    t = next;
  }
  for (const [i, perTask] of queues.entries()) {
    for (const [k, jobs] of perTask.entries()) {
      for (const job of jobs) {
        if (job.deadline <= horizonUs) misses.push({ server: i, task: k, releaseUs: job.release, deadlineUs: job.deadline, finishUs: null });
      }
    }
  }
  return { misses, maxResponseUs: maxResponse, completedJobs };
}

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/**
 * A horizon covering the transient and two hyperperiods: max offset + 2·lcm(all periods) + max
 * deadline, capped at `capUs`.
 */
export function simulationHorizon(servers: readonly DeferrableServer[], maxOffsetUs = 0, capUs = 50_000_000): number {
  let lcm = 1;
  let maxDeadline = 0;
  const add = (p: number) => {
    lcm = Math.min((lcm / gcd(lcm, p)) * p, capUs);
  };
  for (const s of servers) {
    add(s.periodUs);
    for (const task of s.tasks) {
      add(task.periodUs);
      maxDeadline = Math.max(maxDeadline, relativeDeadline(task));
    }
  }
  return Math.min(maxOffsetUs + 2 * lcm + maxDeadline, capUs);
}

/**
 * The adversarial scenarios the analysis is checked against (test/unit/sched-ds-simulation.test.ts,
 * and the §6.2 schedulability study's check of rejected sets): synchronous release with full
 * budgets; for every server S, S exhausted at the release (next replenishment T_S − C_S) while every
 * other server is back-to-back (full budget at 0, replenished again at C_X) and the higher-priority
 * servers' bursts aligned with S's k-th replenishment (k = 1..3); and `randomStates` random legal
 * initial states with random release offsets.
 */
export function adversarialScenarios(servers: readonly DeferrableServer[], rand: () => number, randomStates = 4): SimulationOptions[] {
  const out: SimulationOptions[] = [{}];
  const order = serverPriorityOrder(servers);
  for (const [rank, target] of order.entries()) {
    const s = servers[target]!;
    for (let k = 0; k < 3; k++) {
      // Align hp bursts with S's (k+1)-th replenishment after the release at 0.
      const a = (k + 1) * s.periodUs - s.budgetUs;
      const initial: (ServerInitialState | undefined)[] = servers.map((x, i) => {
        if (i === target) return { budgetUs: 0, firstReplenishmentUs: x.periodUs - x.budgetUs };
        const isHp = order.indexOf(i) < rank;
        const burst = isHp ? a : 0;
        let first = (burst + x.budgetUs) % x.periodUs;
        if (first === 0) first = x.periodUs;
        return { budgetUs: x.budgetUs, firstReplenishmentUs: first };
      });
      const taskOffsetsUs = servers.map((x, i) => {
        const isHp = order.indexOf(i) < rank;
        return x.tasks.map((t) => (isHp && i !== target ? a % t.periodUs : 0));
      });
      out.push({ initial, taskOffsetsUs: k === 0 ? undefined : taskOffsetsUs });
      out.push({ initial, taskOffsetsUs });
    }
  }
  for (let r = 0; r < randomStates; r++) {
    const initial = servers.map((x) => {
      const first = 1 + Math.floor(rand() * x.periodUs);
      const minBudget = Math.max(0, x.budgetUs - (x.periodUs - first));
      return { budgetUs: minBudget + Math.floor(rand() * (x.budgetUs - minBudget + 1)), firstReplenishmentUs: first };
    });
    const taskOffsetsUs = servers.map((x) => x.tasks.map((t) => Math.floor(rand() * t.periodUs)));
    out.push({ initial, taskOffsetsUs });
  }
  return out;
}
