/**
 * Hierarchical fixed-priority schedulability with deferrable servers (thesis §5.3.2, the analysis of
 * Davis & Burns, "Hierarchical Fixed Priority Pre-emptive Scheduling", RTSS 2005; spec §5).
 *
 * System model (one core):
 * - every RT pod owns one deferrable server S = (C_S budget, T_S period). The budget is replenished
 *   to C_S every T_S (no carry-over) and, unlike a periodic server, is kept until the end of the
 *   period when the server has nothing to run ("deferred");
 * - servers are scheduled fixed-priority, rate-monotonic by server period, ties by pod UID (string
 *   order); a server runs when it has budget and a pending task;
 * - inside a server, tasks are fixed-priority (see `task.ts` for the order).
 *
 * Analysis:
 * 1. server S: R_S = C_S + Σ_{X ∈ hp(S)} ceil((R_S + J_X)/T_X) C_X with J_X = T_X − C_X (a deferrable
 *    server can run at the end of one period and again at the start of the next: "back-to-back");
 *    S is schedulable iff R_S ≤ T_S, i.e. it always receives its full budget within its period;
 * 2. task i in S: L_i(w) = C_i + Σ_{j ∈ hp(i)} ceil(w/T_j) C_j;
 * 3. m = ceil(L_i(R)/C_S), q = L_i(R) − (m−1)C_S, x(q) = least x with x = q + Σ_{X ∈ hp(S)}
 *    ceil((x + J_X)/T_X) C_X, R ← (m T_S − C_S) + x(q), from R = C_i to a fixed point; schedulable
 *    iff R ≤ D_i. Worst case: the task arrives just as S exhausted its budget, the next replenishment
 *    is T_S − C_S away, m − 1 full budgets are consumed in the following periods and the last q
 *    units suffer the worst interference from hp(S);
 * 4. fast sufficient pre-check (periodic-resource model, Shin & Lee 2003): R = L + (ceil(L/C_S)+1)(T_S − C_S).
 *    Sound for a server with R_S ≤ T_S (it then supplies C_S in every period, so its worst blackout is
 *    2(T_S − C_S)), and never below the exact R (x(q) − q ≤ R_S − C_S ≤ T_S − C_S).
 * Task deadlines are min(D, T) (see `task.ts`). Checked against a discrete-event simulator
 * (`simulator.ts`, test/unit/sched-ds-simulation.test.ts).
 *
 * No I/O; invalid parameters give `schedulable: false` with a reason, never a throw.
 */
import {
  MAX_ITERATIONS,
  MAX_TIME_US,
  ceilDiv,
  spend,
  type AnalysisBudget,
  effectiveDeadline,
  higherPriorityTasks,
  taskSetFacts,
  invalidTask,
  levelLoad,
  type RtTask,
  type TaskResponse,
  decimalRatio,
  utilizationExceeds,
} from './task.ts';

export interface ServerParams {
  readonly budgetUs: number;
  readonly periodUs: number;
}

export interface DeferrableServer extends ServerParams {
  /** Tie-breaker of the rate-monotonic order (equal periods): smaller UID = higher priority. */
  readonly podUid: string;
  readonly tasks: readonly RtTask[];
}

export interface ServerResponse {
  readonly schedulable: boolean;
  /** R_S; when unschedulable, the first iterate beyond T_S (a lower bound), or null for invalid input. */
  readonly responseTimeUs: number | null;
  readonly periodUs: number;
  readonly reason?: string;
}

/** Describes what is wrong with a server's parameters, or undefined. */
export function invalidServer(server: ServerParams): string | undefined {
  const { budgetUs, periodUs } = server;
  if (!Number.isSafeInteger(periodUs) || periodUs <= 0 || periodUs > MAX_TIME_US) {
    return `periodUs must be an integer in (0, ${MAX_TIME_US}], got ${periodUs}`;
  }
  if (!Number.isSafeInteger(budgetUs) || budgetUs <= 0) return `budgetUs must be an integer > 0, got ${budgetUs}`;
  if (budgetUs > periodUs) return `budgetUs (${budgetUs}) must be <= periodUs (${periodUs})`;
  return undefined;
}

/** J_X = T_X − C_X: release jitter of a deferrable server seen by lower-priority servers. */
export function deferrableServerJitter(server: ServerParams): number {
  return server.periodUs - server.budgetUs;
}

/** Σ_{X ∈ hp} ceil((w + J_X)/T_X) C_X. */
function serverInterference(hpServers: readonly ServerParams[], windowUs: number): number {
  let sum = 0;
  for (const x of hpServers) sum += ceilDiv(windowUs + deferrableServerJitter(x), x.periodUs) * x.budgetUs;
  return sum;
}

/**
 * Least x with x = workUs + Σ_{X ∈ hp} ceil((x + J_X)/T_X) C_X, or null once x exceeds `limitUs`
 * (the value reached is then returned in `exceeded`).
 */
export function serverLevelResponse(
  workUs: number,
  hpServers: readonly ServerParams[],
  limitUs: number,
  budget?: AnalysisBudget,
): { value: number | null; exceeded?: number; reason?: string } {
  let x = workUs;
  for (let i = 0; i < MAX_ITERATIONS; i++) {
    spend(budget, 1 + hpServers.length);
    const next = workUs + serverInterference(hpServers, x);
    if (next > limitUs) return { value: null, exceeded: next };
    if (next === x) return { value: x };
    x = next;
  }
  return { value: null, reason: `no fixed point within ${MAX_ITERATIONS} iterations` };
}

/** Step 1: R_S = C_S + Σ_{X ∈ hp(S)} ceil((R_S + J_X)/T_X) C_X; schedulable iff R_S ≤ T_S. */
export function serverResponseTime(server: ServerParams, higherPriorityServers: readonly ServerParams[], budget?: AnalysisBudget): ServerResponse {
  const bad = invalidServer(server);
  if (bad) return { schedulable: false, responseTimeUs: null, periodUs: server.periodUs, reason: `invalid server: ${bad}` };
  for (const [i, x] of higherPriorityServers.entries()) {
    const badHp = invalidServer(x);
    if (badHp) return { schedulable: false, responseTimeUs: null, periodUs: server.periodUs, reason: `invalid higher-priority server ${i}: ${badHp}` };
  }
  const r = serverLevelResponse(server.budgetUs, higherPriorityServers, server.periodUs, budget);
  if (r.value !== null) return { schedulable: true, responseTimeUs: r.value, periodUs: server.periodUs };
  return {
    schedulable: false,
    responseTimeUs: r.exceeded ?? null,
    periodUs: server.periodUs,
    reason: r.reason ?? `server response time ${r.exceeded} us > period ${server.periodUs} us (budget not guaranteed every period)`,
  };
}

function taskIndexIn(task: RtTask, tasksInServer: readonly RtTask[]): number {
  return taskSetFacts(tasksInServer).indexOf.get(task) ?? -1;
}

function invalidTaskResponse(task: RtTask, method: TaskResponse['method'], reason: string): TaskResponse {
  const d = Number.isSafeInteger(task.periodUs) ? effectiveDeadline(task) : Number.NaN;
  return { schedulable: false, responseTimeUs: null, deadlineUs: d, method, reason };
}

/**
 * Step 2–3 for `task` (which must be an element of `tasksInServer`, compared by identity: hp(i) is
 * derived from the priority order of `tasksInServer`). Checks the server itself first (step 1): a
 * server that cannot get its budget every period makes all its tasks unschedulable.
 */
export function deferrableServerResponseTime(
  task: RtTask,
  tasksInServer: readonly RtTask[],
  server: ServerParams,
  hpServers: readonly ServerParams[],
  budget?: AnalysisBudget,
  /** The server's own test (step 1) was already passed (coreSchedulable): not repeated. */
  serverChecked = false,
): TaskResponse {
  const method = 'exact';
  const index = taskIndexIn(task, tasksInServer);
  if (index < 0) return invalidTaskResponse(task, method, 'task is not an element of tasksInServer');
  const bad = taskSetFacts(tasksInServer).invalid;
  if (bad) return invalidTaskResponse(task, method, `invalid task ${bad.index}: ${bad.reason}`);
  const deadline = effectiveDeadline(task);
  if (!serverChecked) {
    const srv = serverResponseTime(server, hpServers, budget);
    if (!srv.schedulable) return { schedulable: false, responseTimeUs: null, deadlineUs: deadline, method, reason: srv.reason! };
  }

  const hp = higherPriorityTasks(tasksInServer, index);
  const { budgetUs: cs, periodUs: ts } = server;
  let r = task.wcetUs;
  for (let it = 0; it < MAX_ITERATIONS; it++) {
    spend(budget, 1 + hp.length);
    const load = levelLoad(task, hp, r);
    const m = ceilDiv(load, cs);
    const q = load - (m - 1) * cs;
    // x(q) ≤ R_S ≤ T_S because the server is schedulable; the limit only guards the loop.
    const x = serverLevelResponse(q, hpServers, ts, budget);
    if (x.value === null) return { schedulable: false, responseTimeUs: null, deadlineUs: deadline, method, reason: x.reason ?? 'x(q) exceeded the server period' };
    const next = m * ts - cs + x.value;
    if (next > deadline) {
      return { schedulable: false, responseTimeUs: next, deadlineUs: deadline, method, reason: `response time >= ${next} us > deadline ${deadline} us` };
    }
    if (next === r) return { schedulable: true, responseTimeUs: r, deadlineUs: deadline, method };
    r = next;
  }
  return { schedulable: false, responseTimeUs: null, deadlineUs: deadline, method, reason: `no fixed point within ${MAX_ITERATIONS} iterations` };
}

/** Time for a periodic resource (Θ = budget every Π = period) to supply `loadUs` in the worst case: L + (ceil(L/Θ)+1)(Π − Θ). */
export function periodicResourceSupplyTime(loadUs: number, budgetUs: number, periodUs: number): number {
  return loadUs + (ceilDiv(loadUs, budgetUs) + 1) * (periodUs - budgetUs);
}

/**
 * Sufficient test: fixed point of R = L(R) + (ceil(L(R)/C_S)+1)(T_S − C_S), from R = C_i, give up
 * past the deadline. Only sound if the supply really is a periodic resource: for a deferrable
 * server pass `hpServers` and the server's own test (R_S ≤ T_S) is checked first; without it the
 * caller vouches for the supply (e.g. an admitted SCHED_DEADLINE reservation).
 */
export function periodicResourceBound(
  task: RtTask,
  tasksInServer: readonly RtTask[],
  supply: ServerParams,
  hpServers?: readonly ServerParams[],
  budget?: AnalysisBudget,
): TaskResponse {
  const method = 'periodic-resource-bound';
  const index = taskIndexIn(task, tasksInServer);
  if (index < 0) return invalidTaskResponse(task, method, 'task is not an element of tasksInServer');
  const bad = taskSetFacts(tasksInServer).invalid;
  if (bad) return invalidTaskResponse(task, method, `invalid task ${bad.index}: ${bad.reason}`);
  const badSupply = invalidServer(supply);
  if (badSupply) return invalidTaskResponse(task, method, `invalid supply: ${badSupply}`);
  const deadline = effectiveDeadline(task);
  if (hpServers) {
    const srv = serverResponseTime(supply, hpServers, budget);
    if (!srv.schedulable) return { schedulable: false, responseTimeUs: null, deadlineUs: deadline, method, reason: srv.reason! };
  }
  const hp = higherPriorityTasks(tasksInServer, index);
  let r = task.wcetUs;
  for (let it = 0; it < MAX_ITERATIONS; it++) {
    spend(budget, 1 + hp.length);
    const next = periodicResourceSupplyTime(levelLoad(task, hp, r), supply.budgetUs, supply.periodUs);
    if (next > deadline) {
      return { schedulable: false, responseTimeUs: next, deadlineUs: deadline, method, reason: `periodic-resource bound >= ${next} us > deadline ${deadline} us` };
    }
    if (next === r) return { schedulable: true, responseTimeUs: r, deadlineUs: deadline, method };
    r = next;
  }
  return { schedulable: false, responseTimeUs: null, deadlineUs: deadline, method, reason: `no fixed point within ${MAX_ITERATIONS} iterations` };
}

/** Indices of `servers`, highest priority first: rate-monotonic by period, ties by pod UID. */
export function serverPriorityOrder(servers: readonly DeferrableServer[]): number[] {
  return servers
    .map((_, i) => i)
    .sort((a, b) => {
      const sa = servers[a]!;
      const sb = servers[b]!;
      if (sa.periodUs !== sb.periodUs) return sa.periodUs - sb.periodUs;
      if (sa.podUid !== sb.podUid) return sa.podUid < sb.podUid ? -1 : 1;
      return a - b;
    });
}

export interface ServerAnalysis {
  readonly podUid: string;
  /** Index in the input array. */
  readonly index: number;
  /** 0 = highest priority on the core. */
  readonly rank: number;
  readonly server: ServerResponse;
  /** One entry per task, in the order of `server.tasks`. */
  readonly tasks: readonly TaskResponse[];
}

export interface CoreAnalysis {
  readonly schedulable: boolean;
  /** Σ C_S / T_S. */
  readonly utilization: number;
  /** In priority order. */
  readonly servers: readonly ServerAnalysis[];
  /** First failure (priority order), when not schedulable. */
  readonly reason?: string;
}

export interface CoreOptions {
  /** Compute exact response times even when the periodic-resource pre-check already passes (what-if reports). */
  readonly exactResponseTimes?: boolean;
  /**
   * Stop at the first failure (priority order): the servers after it are left out of `servers`
   * and the failing server's later tasks get no response (the extender only needs the verdict).
   */
  readonly stopAtFirstFailure?: boolean;
  /** Work bound of the request (task.ts AnalysisBudget); throws AnalysisBudgetExceeded past it. */
  readonly budget?: AnalysisBudget;
}

/** Σ C_S/T_S of servers. */
export function serversUtilization(servers: readonly ServerParams[]): number {
  let u = 0;
  for (const s of servers) u += s.budgetUs / s.periodUs;
  return u;
}

/** Whole-core test: every server and every task in it (up to the first failure with `stopAtFirstFailure`). */
export function coreSchedulable(servers: readonly DeferrableServer[], options: CoreOptions = {}): CoreAnalysis {
  const order = serverPriorityOrder(servers);
  const analyses: ServerAnalysis[] = [];
  let reason: string | undefined;
  const utilization = serversUtilization(servers);
  const { budget, stopAtFirstFailure } = options;

  for (const [rank, index] of order.entries()) {
    const s = servers[index]!;
    const hpServers = order.slice(0, rank).map((i) => servers[i]!);
    const srv = serverResponseTime(s, hpServers, budget);
    const tasks: TaskResponse[] = [];
    for (const task of s.tasks) {
      let r: TaskResponse;
      if (!srv.schedulable) {
        const bad = invalidTask(task);
        r = invalidTaskResponse(task, 'exact', bad ? `invalid task: ${bad}` : `server not schedulable: ${srv.reason}`);
      } else {
        const fast = options.exactResponseTimes ? undefined : periodicResourceBound(task, s.tasks, s, undefined, budget); // server already checked above
        r = fast?.schedulable ? fast : deferrableServerResponseTime(task, s.tasks, s, hpServers, budget, true);
      }
      tasks.push(r);
      if (stopAtFirstFailure && !r.schedulable) break;
    }
    analyses.push({ podUid: s.podUid, index, rank, server: srv, tasks });
    if (reason === undefined) {
      if (!srv.schedulable) reason = `server of pod ${s.podUid}: ${srv.reason}`;
      else {
        const t = tasks.findIndex((r) => !r.schedulable);
        if (t >= 0) reason = `pod ${s.podUid} task ${t}: ${tasks[t]!.reason}`;
      }
      if (reason !== undefined && stopAtFirstFailure) break;
    }
  }
  return reason === undefined ? { schedulable: true, utilization, servers: analyses } : { schedulable: false, utilization, servers: analyses, reason };
}

export type ServerPlacement =
  | { readonly ok: true; readonly core: number; readonly analysis: CoreAnalysis }
  | { readonly ok: false; readonly reason: string; /** Analysis on the least-loaded core, for reporting. */ readonly analysis?: CoreAnalysis };

export interface ServerPlacementOptions extends CoreOptions {
  /** Optional extra admission cap on Σ C_S/T_S per core (default 1). */
  readonly maxUtilization?: number;
}

/**
 * Necessary condition for a server's tasks, checked before any response-time analysis: a
 * deferrable server supplies at most C_S every T_S, so Σ C_i/T_i of its tasks must not exceed
 * C_S/T_S (exact integer comparison, task.ts utilizationExceeds). Returns the reason it fails.
 */
export function serverOverloaded(server: DeferrableServer): string | undefined {
  if (server.tasks.some((t) => invalidTask(t) !== undefined)) return undefined; // reported by the analysis, naming the task
  const terms = server.tasks.map((t) => [t.wcetUs, t.periodUs] as const);
  if (!utilizationExceeds(terms, server.budgetUs, server.periodUs)) return undefined;
  const u = server.tasks.reduce((a, t) => a + t.wcetUs / t.periodUs, 0);
  return `tasks' utilization Σ C/T = ${u.toFixed(6)} > server bandwidth ${server.budgetUs}/${server.periodUs} = ${(server.budgetUs / server.periodUs).toFixed(6)}`;
}

/**
 * Picks a core for `server` on a multi-core node: cores tried worst-fit (lowest Σ C_S/T_S first,
 * ties by core index), the first whose whole-core test still passes wins. Cheap necessary
 * conditions come first: the server's own tasks within its bandwidth ({@link serverOverloaded}),
 * then per core the utilization cap (no analysis of a core the cap rules out); after the first
 * core whose analysis fails, the server is analysed alone once: if it fails alone it fails on
 * every core (more higher-priority servers only delay it), and the other cores are not analysed.
 */
export function placeServer(
  cores: readonly (readonly DeferrableServer[])[],
  server: DeferrableServer,
  options: ServerPlacementOptions = {},
): ServerPlacement {
  const bad = invalidServer(server);
  if (bad) return { ok: false, reason: `invalid server: ${bad}` };
  if (cores.length === 0) return { ok: false, reason: 'node has no cores' };
  const overloaded = serverOverloaded(server);
  if (overloaded) return { ok: false, reason: `server of pod ${server.podUid}: ${overloaded}` };
  const cap = options.maxUtilization ?? 1;
  const capRatio = decimalRatio(cap);
  const util = cores.map(serversUtilization);
  const order = cores.map((_, i) => i).sort((a, b) => util[a]! - util[b]! || a - b);
  let first: CoreAnalysis | undefined;
  let aloneChecked = false;
  const reasons: string[] = [];
  for (const core of order) {
    const candidate = [...cores[core]!, server];
    if (utilizationExceeds(candidate.map((s) => [s.budgetUs, s.periodUs] as const), capRatio[0], capRatio[1])) {
      reasons.push(`core ${core}: utilization ${serversUtilization(candidate).toFixed(4)} > ${cap}`);
      continue;
    }
    const analysis = coreSchedulable(candidate, options);
    first ??= analysis;
    if (analysis.schedulable) return { ok: true, core, analysis };
    reasons.push(`core ${core}: ${analysis.reason}`);
    // alone on the core it failed: no core can take it
    if (cores[core]!.length === 0) break;
    if (!aloneChecked) {
      aloneChecked = true;
      const alone = coreSchedulable([server], { ...options, stopAtFirstFailure: true });
      if (!alone.schedulable) {
        reasons.push(`alone on a core: ${alone.reason} (no core can take it)`);
        break;
      }
    }
  }
  return { ok: false, reason: reasons.join('; '), analysis: first };
}
