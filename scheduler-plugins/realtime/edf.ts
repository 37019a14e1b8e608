/**
 * Partitioned EDF (thesis §2 and §6.2: "rejected by the EDF utilization bound"; Liu & Layland 1973).
 *
 * Per core, preemptive EDF, synchronous or sporadic tasks:
 * - every task has D ≥ T (implicit deadlines, or longer): Σ C/T ≤ 1 is necessary and sufficient
 *   (exact). The spec says "exact for implicit deadlines"; D > T is also exact because the demand
 *   bound function is then ≤ U·t;
 * - some task has D < T: the density test Σ C/min(D, T) ≤ 1 is only sufficient (a failing set may
 *   still be feasible: an exact processor-demand analysis is not done here).
 * The result says which test was used (`test`) and whether its answer is exact (`exact`). A bound
 * below 1 (a node's maxUtilization) can be passed; the answer is then no longer "exact".
 * A task with D < C is never schedulable (its density is > 1).
 * The comparison is exact: Σ C/T (or Σ C/min(D,T)) against the bound by integer cross-multiplication
 * (task.ts utilizationExceeds; the bound as the decimal written, 0.95 = 95/100), so no rounding
 * slack admits e.g. U = 1 + 5e-10 with periods near 2e9 µs. `load` is the float sum, for messages.
 *
 * Placement over cores: the tasks are placed one by one, highest density first (ties by index),
 * each on the least loaded core (by density, ties by core index) that still passes the test:
 * worst-fit decreasing. All-or-nothing. A task over the bound alone fails at once (on every core
 * it would). With a budget, every core test is counted.
 * No I/O.
 */
import { decimalRatio, effectiveDeadline, invalidTask, relativeDeadline, spend, taskDensity, taskUtilization, utilizationExceeds, type AnalysisBudget, type RtTask } from './task.ts';

export interface EdfResult {
  readonly schedulable: boolean;
  /** 'utilization': Σ C/T (all D ≥ T); 'density': Σ C/min(D,T). */
  readonly test: 'utilization' | 'density';
  /** True when the answer is exact (utilization test against bound 1), false when only sufficient. */
  readonly exact: boolean;
  /** The sum compared (Σ C/T or Σ C/min(D,T)). */
  readonly load: number;
  readonly bound: number;
  readonly reason?: string;
}

/** EDF test for one core. */
export function edfCoreSchedulable(tasks: readonly RtTask[], bound = 1): EdfResult {
  const implicit = tasks.every((t) => relativeDeadline(t) >= t.periodUs);
  const test = implicit ? 'utilization' : 'density';
  const exact = implicit && bound === 1;
  for (const [i, t] of tasks.entries()) {
    const bad = invalidTask(t);
    if (bad) return { schedulable: false, test, exact, load: Number.NaN, bound, reason: `invalid task ${i}: ${bad}` };
  }
  let load = 0;
  for (const t of tasks) load += implicit ? taskUtilization(t) : taskDensity(t);
  // an infinite bound (placing pods already there, what-if.ts edfPinnedAssignment) admits everything
  const over = Number.isFinite(bound) && exceeds(tasks, implicit, load, bound);
  if (!over) return { schedulable: true, test, exact, load, bound };
  const what = implicit ? 'utilization Σ C/T' : 'density Σ C/min(D,T)';
  const tail = implicit ? '' : ' (sufficient test only)';
  return { schedulable: false, test, exact, load, bound, reason: `${what} = ${load.toFixed(4)} > ${bound}${tail}` };
}

/** Per bound: the exact decimal written, and whether the float is that decimal to within 2^-53 (plain notation). */
const boundRatios = new Map<number, { readonly ratio: [bigint, bigint]; readonly plain: boolean }>();

function boundRatio(bound: number): { readonly ratio: [bigint, bigint]; readonly plain: boolean } {
  let b = boundRatios.get(bound);
  if (!b) {
    b = { ratio: decimalRatio(bound), plain: /^\d+(?:\.\d+)?$/.test(String(bound)) };
    if (boundRatios.size < 256) boundRatios.set(bound, b);
  }
  return b;
}

/**
 * The float sum of n positive terms against `bound`, when rounding cannot change the answer: true
 * (over) or false (within), undefined near the bound. Each term C/T is within 2^-53 of its value,
 * the sum within n·2^-52 of the exact sum, a plain decimal bound within 2^-53 of its float: a
 * margin of (n + 2)·2^-50 of the larger side is not crossed by rounding.
 */
function clearlyOver(load: number, n: number, bound: number): boolean | undefined {
  if (!boundRatio(bound).plain) return undefined;
  const margin = (n + 2) * 2 ** -50 * Math.max(load, bound);
  if (load > bound + margin) return true;
  if (load < bound - margin) return false;
  return undefined;
}

/**
 * Σ C/T (implicit) or Σ C/min(D,T) above `bound`, exactly: the float sum decides when it is clearly
 * apart from the bound ({@link clearlyOver}), the integer cross-multiplication (task.ts
 * utilizationExceeds) near it. The BigInt test costs ~5-10 µs per core test, which would make the
 * EDF placement's units (1 per core and per task tested) 100 times dearer than the
 * deferrable-server analyses' (1,000,000 units: 13-17 ms of one core).
 */
function exceeds(tasks: readonly RtTask[], implicit: boolean, load: number, bound: number): boolean {
  const quick = clearlyOver(load, tasks.length, bound);
  if (quick !== undefined) return quick;
  return utilizationExceeds(
    tasks.map((t) => [t.wcetUs, implicit ? t.periodUs : effectiveDeadline(t)] as const),
    ...boundRatio(bound).ratio,
  );
}

export type EdfPlacement = { readonly ok: true; /** core of each input task */ readonly assignment: readonly number[] } | { readonly ok: false; readonly reason: string };

/**
 * Work units (task.ts AnalysisBudget) of testing every core of `cores` once: 1 per core and 1 per
 * task on it, as each core test of the placement is counted.
 */
export function summaryUnits(cores: readonly (readonly RtTask[])[]): number {
  let units = cores.length;
  for (const c of cores) units += c.length;
  return units;
}

/** Worst-fit-decreasing placement of `tasks` onto cores already holding `cores[i]`. */
export function placeEdfTasks(cores: readonly (readonly RtTask[])[], tasks: readonly RtTask[], bound = 1, budget?: AnalysisBudget): EdfPlacement {
  const state = cores.map((c) => [...c]);
  if (state.length === 0) return { ok: false, reason: 'node has no cores' };
  for (const [i, t] of tasks.entries()) {
    const bad = invalidTask(t);
    if (bad) return { ok: false, reason: `invalid task ${i}: ${bad}` };
  }
  // per-core density sums kept up to date (not recomputed per comparison); Σ C/min(D,T)
  // is also the utilization when every D >= T, so it is the sum the core test compares
  const loads = state.map((c) => c.reduce((s, t) => s + taskDensity(t), 0));
  const invalid = state.map((c) => c.some((t) => invalidTask(t) !== undefined));
  // the core test of `t` on core c without copying the core's tasks, unless near the bound (or a task there invalid)
  const fits = (c: number, t: RtTask): boolean => {
    if (!invalid[c]) {
      if (!Number.isFinite(bound)) return true;
      const quick = clearlyOver(loads[c]! + taskDensity(t), state[c]!.length + 1, bound);
      if (quick !== undefined) return !quick;
    }
    return edfCoreSchedulable([...state[c]!, t], bound).schedulable;
  };
  const order = tasks.map((_, i) => i).sort((a, b) => taskDensity(tasks[b]!) - taskDensity(tasks[a]!) || a - b);
  const assignment: number[] = new Array<number>(tasks.length).fill(-1);
  // the cores by (load, index), a total order: sorted once, then the one core a task went to is
  // moved to its new place (its load only grew), which is the order a fresh sort would give
  const before = (a: number, b: number) => loads[a]! < loads[b]! || (loads[a] === loads[b] && a < b);
  const byLoad = state.map((_, c) => c).sort((a, b) => loads[a]! - loads[b]! || a - b);
  for (const i of order) {
    const t = tasks[i]!;
    spend(budget, state.length); // ordering the cores
    let at = -1;
    // a task over the bound on an empty core is over it on every core (a core's sum only grows)
    spend(budget, 1);
    const alone = edfCoreSchedulable([t], bound).schedulable;
    for (let k = 0; alone && k < byLoad.length; k++) {
      spend(budget, state[byLoad[k]!]!.length + 1);
      if (fits(byLoad[k]!, t)) {
        at = k;
        break;
      }
    }
    if (at < 0) {
      const best = edfCoreSchedulable([...state[byLoad[0]!]!, t], bound);
      return { ok: false, reason: `task ${i} fits no core (least loaded core ${byLoad[0]}: ${best.reason})` };
    }
    const core = byLoad[at]!;
    state[core]!.push(t);
    loads[core] = loads[core]! + taskDensity(t);
    assignment[i] = core;
    // its new place: after every core still before it (binary search over the cores after `at`)
    let lo = at + 1;
    let hi = byLoad.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (before(byLoad[mid]!, core)) lo = mid + 1;
      else hi = mid;
    }
    for (let k = at; k < lo - 1; k++) byLoad[k] = byLoad[k + 1]!;
    byLoad[lo - 1] = core;
  }
  return { ok: true, assignment };
}
