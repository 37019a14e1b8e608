/**
 * The real-time task model shared by every schedulability test in this folder (thesis §3.1: a pod
 * is a set of tasks with WCET, period and optional priority/deadline).
 *
 * - All times are integer microseconds (the annotations carry µs; integer arithmetic keeps the
 *   fixed-point iterations exact and terminating).
 * - A task is periodic or sporadic with no release jitter (the annotation has no jitter field), so
 *   the J_j of a task in the spec's L_i(w) is 0.
 * - `deadlineUs` defaults to `periodUs`. Fixed-priority response-time analysis here only looks at the
 *   first job of a busy period, which is exact for constrained deadlines (D ≤ T). A task with D > T
 *   is analysed against min(D, T) ("effective deadline"): sufficient, never optimistic.
 * - Fixed-priority order inside a server/reservation: explicit `priority` first, lower number =
 *   higher priority, ties broken by the task's index in the annotation; tasks without `priority`
 *   come after all tasks with one, deadline-monotonic among themselves (ties by index).
 *
 * No I/O.
 */

export interface RtTask {
  readonly wcetUs: number;
  readonly periodUs: number;
  /** Relative deadline; defaults to `periodUs`. */
  readonly deadlineUs?: number;
  /** Fixed priority inside the pod's server/reservation: lower number = higher priority. */
  readonly priority?: number;
}

/** Upper limit on any time value (1 hour): keeps every product far below 2^53. */
export const MAX_TIME_US = 3_600_000_000;

/** Guard against pathological fixed-point iterations (a scheduler must answer in bounded time). */
export const MAX_ITERATIONS = 100_000;

/**
 * A bound on the work of one request's analyses (a scheduler must answer in bounded time, whatever
 * the annotations ask). Work is counted in terms of the fixed-point sums: one iteration of a loop
 * R = C + Σ_{j ∈ hp} ... costs 1 + |hp| units; an EDF core test costs one unit per task on the core.
 * `spend` never lets `used` pass `limit`: the call that would is refused with
 * {@link AnalysisBudgetExceeded}, which the node-level analysis (what-if.ts analyzeRtNode) turns
 * into a refusal "analysis budget exceeded: N tasks x M servers". Once exceeded, every later spend
 * is refused too, so one pod never costs more than `limit` per request over all nodes.
 */
export class AnalysisBudget {
  used = 0;
  exceeded = false;
  /** `requestLimit`: the whole request's budget when this is the part of it left (messages name it). */
  constructor(
    readonly limit: number,
    readonly requestLimit = limit,
  ) {}

  spend(units: number): void {
    if (this.exceeded || this.used + units > this.limit) {
      this.exceeded = true;
      throw new AnalysisBudgetExceeded(this);
    }
    this.used += units;
  }
}

/**
 * Thrown once per node whose analysis runs out of budget (every node after the first on a spent
 * budget): without a stack trace, which V8 would otherwise capture on each (~10 µs apiece on the
 * event loop; it is control flow, caught by analyzeRtNode, never logged).
 */
export class AnalysisBudgetExceeded extends Error {
  constructor(readonly budget: AnalysisBudget) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      super(`analysis budget of ${budget.limit} work units exceeded (${budget.used} used)`);
    } finally {
      Error.stackTraceLimit = limit;
    }
  }
}

/** Spends `units` on `budget` when there is one. */
export function spend(budget: AnalysisBudget | undefined, units: number): void {
  if (budget) budget.spend(units);
}

/**
 * Exact test Σ n_i/d_i > capNum/capDen for positive integers (µs): the sum of ratios compared by
 * integer cross-multiplication (BigInt), so no rounding admits e.g. U = 1 + 5e-10 with periods near
 * 2e9 µs. Terms of equal denominator are added first (replicas share periods).
 */
export function utilizationExceeds(terms: Iterable<readonly [number, number]>, capNum: number | bigint, capDen: number | bigint): boolean {
  const byDen = new Map<number, number>();
  for (const [n, d] of terms) byDen.set(d, (byDen.get(d) ?? 0) + n);
  let num = 0n;
  let den = 1n;
  for (const [d, n] of byDen) {
    // n may pass 2^53 only beyond 2.5e6 terms of MAX_TIME_US: not reachable (≤ 256 tasks per pod)
    const bd = BigInt(d);
    num = num * bd + BigInt(n) * den;
    den *= bd;
  }
  return num * BigInt(capDen) > BigInt(capNum) * den;
}

/**
 * A utilization bound (e.g. a node's maxUtilization 0.95) as an exact ratio [num, den]: the decimal
 * the user wrote (0.95 = 95/100), not its binary approximation.
 */
export function decimalRatio(x: number): [bigint, bigint] {
  const text = String(x);
  const m = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (m) {
    const frac = m[2] ?? '';
    return [BigInt(m[1]! + frac), 10n ** BigInt(frac.length)];
  }
  // exponent notation (only for tiny or huge values): 12 decimals are exact enough for a bound
  return [BigInt(Math.round(x * 1e12)), 10n ** 12n];
}

/** ceil(a / b) for integers a ≥ 0, b > 0, without floating-point rounding surprises. */
export function ceilDiv(a: number, b: number): number {
  if (a <= 0) return 0;
  return Math.floor((a - 1) / b) + 1;
}

export function relativeDeadline(task: RtTask): number {
  return task.deadlineUs ?? task.periodUs;
}

/** min(D, T): the deadline the first-job response-time analysis must meet (see the header). */
export function effectiveDeadline(task: RtTask): number {
  return Math.min(relativeDeadline(task), task.periodUs);
}

export function taskUtilization(task: RtTask): number {
  return task.wcetUs / task.periodUs;
}

/** C / min(D, T). */
export function taskDensity(task: RtTask): number {
  return task.wcetUs / effectiveDeadline(task);
}

function isPositiveTime(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v > 0 && v <= MAX_TIME_US;
}

/**
 * Returns a description of what is wrong with the task's parameters, or undefined if they are valid.
 * A deadline shorter than the WCET is valid input (the task is simply unschedulable).
 */
export function invalidTask(task: RtTask): string | undefined {
  if (!isPositiveTime(task.wcetUs)) return `wcetUs must be an integer in (0, ${MAX_TIME_US}], got ${task.wcetUs}`;
  if (!isPositiveTime(task.periodUs)) return `periodUs must be an integer in (0, ${MAX_TIME_US}], got ${task.periodUs}`;
  if (task.deadlineUs !== undefined && !isPositiveTime(task.deadlineUs)) {
    return `deadlineUs must be an integer in (0, ${MAX_TIME_US}], got ${task.deadlineUs}`;
  }
  if (task.priority !== undefined && !Number.isSafeInteger(task.priority)) return `priority must be an integer, got ${task.priority}`;
  return undefined;
}

/** Indices of `tasks`, highest priority first (rules in the header). */
export function taskPriorityOrder(tasks: readonly RtTask[]): number[] {
  return tasks
    .map((_, i) => i)
    .sort((a, b) => {
      const ta = tasks[a]!;
      const tb = tasks[b]!;
      const pa = ta.priority ?? Number.POSITIVE_INFINITY;
      const pb = tb.priority ?? Number.POSITIVE_INFINITY;
      if (pa !== pb) return pa < pb ? -1 : 1;
      if (ta.priority === undefined) {
        const da = effectiveDeadline(ta);
        const db = effectiveDeadline(tb);
        if (da !== db) return da - db;
      }
      return a - b;
    });
}

/**
 * What the per-task analyses of one task set share: its priority order, each task's rank and index,
 * and its first invalid task. Computed once per task-set array (kept while the array lives) instead
 * of once per analysed task: with 256 tasks per server and many servers per core, sorting the set
 * again for every task was most of an analysis' time and none of it counted by the work budget.
 * Task sets are never modified after parsing; a set whose length changed is computed afresh.
 */
export interface TaskSetFacts {
  readonly length: number;
  /** Indices, highest priority first ({@link taskPriorityOrder}). */
  readonly order: readonly number[];
  /** rank[i] = position of task i in `order`. */
  readonly rank: readonly number[];
  /** First index of each task object (Array.indexOf by identity). */
  readonly indexOf: ReadonlyMap<RtTask, number>;
  /** The first invalid task ({@link invalidTask}), if any. */
  readonly invalid?: { readonly index: number; readonly reason: string };
}

const taskSetMemo = new WeakMap<readonly RtTask[], TaskSetFacts>();

export function taskSetFacts(tasks: readonly RtTask[]): TaskSetFacts {
  const hit = taskSetMemo.get(tasks);
  if (hit && hit.length === tasks.length) return hit;
  const order = taskPriorityOrder(tasks);
  const rank = new Array<number>(tasks.length);
  order.forEach((i, r) => (rank[i] = r));
  const indexOf = new Map<RtTask, number>();
  let invalid: TaskSetFacts['invalid'];
  tasks.forEach((t, i) => {
    if (!indexOf.has(t)) indexOf.set(t, i);
    if (!invalid) {
      const reason = invalidTask(t);
      if (reason) invalid = { index: i, reason };
    }
  });
  const facts: TaskSetFacts = { length: tasks.length, order, rank, indexOf, ...(invalid ? { invalid } : {}) };
  taskSetMemo.set(tasks, facts);
  return facts;
}

/** The tasks with higher priority than `tasks[index]` (hp(i)). */
export function higherPriorityTasks(tasks: readonly RtTask[], index: number): RtTask[] {
  const { order, rank } = taskSetFacts(tasks);
  const r = rank[index] ?? 0;
  const hp = new Array<RtTask>(r);
  for (let k = 0; k < r; k++) hp[k] = tasks[order[k]!]!;
  return hp;
}

/** L_i(w) = C_i + Σ_{j ∈ hp(i)} ceil(w / T_j) C_j (task jitter is 0, see header). */
export function levelLoad(task: RtTask, hpTasks: readonly RtTask[], windowUs: number): number {
  let load = task.wcetUs;
  for (const j of hpTasks) load += ceilDiv(windowUs, j.periodUs) * j.wcetUs;
  return load;
}

/**
 * Per-task outcome of a response-time analysis. When `schedulable` is false because the iteration
 * passed the deadline, `responseTimeUs` is the first iterate beyond it: a lower bound on the true
 * worst-case response time, enough to say by how much the deadline is missed (at least).
 */
export interface TaskResponse {
  readonly schedulable: boolean;
  readonly responseTimeUs: number | null;
  /** The deadline compared against: min(D, T). */
  readonly deadlineUs: number;
  readonly method: 'exact' | 'periodic-resource-bound';
  readonly reason?: string;
}
