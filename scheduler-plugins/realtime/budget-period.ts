/**
 * Budget/period reservations (thesis §5.3.2 and §6.2 "medium isolation" nodes; RT-Kubernetes,
 * Fiorino et al., i.e. SCHED_DEADLINE / HCBS reservations).
 *
 * A reservation (Q = runtimeUs, P = periodUs, cpus = m) is m per-core reservations of bandwidth Q/P
 * on m distinct cores (partitioned: a reservation never migrates). A core admits reservations while
 *
 *     Σ_{r on core} Q_r / P_r ≤ U_max        (U_max: node's maxUtilization, kernel default 0.95)
 *
 * which is exact for the EDF-scheduled SCHED_DEADLINE reservations with implicit deadlines. The sum
 * is a sum of ratios: NEVER Σ Q / Σ P (summing runtimes and periods separately was a bug in the
 * RT-Kubernetes prototype; it admits e.g. 9/10 + 9/10 as 18/20 = 0.9).
 *
 * Core choice: worst-fit — the m cores with the most remaining room (lowest utilization, ties by core
 * index); if the m-th of them cannot take Q/P, no set of m cores can.
 *
 * Tasks declared inside a reservation (optional) are checked fixed-priority against the periodic
 * resource (Θ = Q, Π = P) with the sufficient bound R = L + (ceil(L/Q)+1)(P − Q) (see
 * `deferrable-server.ts`). With m > 1 the check assumes all the tasks run on ONE of the reservation's
 * cores: a placement the guest can always use, so passing it is sufficient.
 *
 * Exact arithmetic: Σ Q/P ≤ U_max is decided by integer cross-multiplication (task.ts
 * utilizationExceeds, U_max as the decimal written: 0.95 = 95/100), so 0.5 + 0.45 ≤ 0.95 holds and
 * no rounding slack admits 1 + 5e-10 at periods near 2e9 µs.
 * No I/O.
 */
import { periodicResourceBound } from './deferrable-server.ts';
import { MAX_TIME_US, decimalRatio, utilizationExceeds, type AnalysisBudget, type RtTask, type TaskResponse } from './task.ts';

export const DEFAULT_MAX_UTILIZATION = 0.95;

export interface CoreReservation {
  readonly runtimeUs: number;
  readonly periodUs: number;
  readonly podUid?: string;
}

export interface Reservation extends CoreReservation {
  /** Number of distinct cores, each getting runtimeUs every periodUs. */
  readonly cpus: number;
  readonly tasks?: readonly RtTask[];
}

/** Bandwidth of one per-core reservation: Q/P. */
export function reservationBandwidth(r: CoreReservation): number {
  return r.runtimeUs / r.periodUs;
}

/** Σ Q_r/P_r over the core's reservations (a sum of ratios, never ΣQ/ΣP). */
export function coreUtilization(core: readonly CoreReservation[]): number {
  let u = 0;
  for (const r of core) u += reservationBandwidth(r);
  return u;
}

export function invalidReservation(r: Reservation): string | undefined {
  const okTime = (v: number) => Number.isSafeInteger(v) && v > 0 && v <= MAX_TIME_US;
  if (!okTime(r.periodUs)) return `periodUs must be an integer in (0, ${MAX_TIME_US}], got ${r.periodUs}`;
  if (!okTime(r.runtimeUs)) return `runtimeUs must be an integer > 0, got ${r.runtimeUs}`;
  if (r.runtimeUs > r.periodUs) return `runtimeUs (${r.runtimeUs}) must be <= periodUs (${r.periodUs})`;
  if (!Number.isSafeInteger(r.cpus) || r.cpus < 1) return `cpus must be an integer >= 1, got ${r.cpus}`;
  return undefined;
}

export interface ReservationTasksResult {
  readonly schedulable: boolean;
  /** In the order of `reservation.tasks`. */
  readonly tasks: readonly TaskResponse[];
  readonly reason?: string;
}

/** Fixed-priority check of the reservation's own tasks against the periodic resource (Q, P). */
export function reservationTasksSchedulable(reservation: Reservation, budget?: AnalysisBudget): ReservationTasksResult {
  const tasks = reservation.tasks ?? [];
  const supply = { budgetUs: reservation.runtimeUs, periodUs: reservation.periodUs };
  const results: TaskResponse[] = [];
  for (const t of tasks) {
    const r = periodicResourceBound(t, tasks, supply, undefined, budget);
    results.push(r);
    // the first miss decides; the later tasks are not analysed (bounded work)
    if (!r.schedulable) return { schedulable: false, tasks: results, reason: `task ${results.length - 1}: ${r.reason}` };
  }
  return { schedulable: true, tasks: results };
}

export interface PlacementOptions {
  /** U_max per core, in (0, 1]; default {@link DEFAULT_MAX_UTILIZATION}. */
  readonly maxUtilization?: number;
  /** Work bound of the request (task.ts AnalysisBudget). */
  readonly budget?: AnalysisBudget | undefined;
}

export type ReservationPlacement =
  | {
      readonly ok: true;
      /** Chosen cores, ascending. */
      readonly cores: readonly number[];
      /** Utilization of every core of the node after the placement. */
      readonly utilizationAfter: readonly number[];
      readonly tasks: readonly TaskResponse[];
    }
  | { readonly ok: false; readonly reason: string; readonly tasks?: readonly TaskResponse[] };

/**
 * Chooses `reservation.cpus` cores (worst-fit) such that each stays at Σ Q/P ≤ U_max, and checks the
 * reservation's tasks. `cores[i]` lists the reservations already on core i.
 */
export function placeReservation(
  cores: readonly (readonly CoreReservation[])[],
  reservation: Reservation,
  options: PlacementOptions = {},
): ReservationPlacement {
  const bad = invalidReservation(reservation);
  if (bad) return { ok: false, reason: `invalid reservation: ${bad}` };
  const cap = options.maxUtilization ?? DEFAULT_MAX_UTILIZATION;
  if (!(cap > 0 && cap <= 1)) return { ok: false, reason: `maxUtilization must be in (0, 1], got ${cap}` };
  if (reservation.cpus > cores.length) {
    return { ok: false, reason: `reservation needs ${reservation.cpus} cpus, node has ${cores.length} cores` };
  }
  const tasks = reservationTasksSchedulable(reservation, options.budget);
  if (!tasks.schedulable) return { ok: false, reason: `tasks do not fit the reservation: ${tasks.reason}`, tasks: tasks.tasks };

  const util = cores.map(coreUtilization);
  const order = util.map((_, i) => i).sort((a, b) => util[a]! - util[b]! || a - b);
  const bw = reservationBandwidth(reservation);
  const chosen = order.slice(0, reservation.cpus);
  const worst = chosen[chosen.length - 1]!;
  const [capNum, capDen] = decimalRatio(cap);
  const terms = [...cores[worst]!, reservation].map((r) => [r.runtimeUs, r.periodUs] as const);
  if (utilizationExceeds(terms, capNum, capDen)) {
    return {
      ok: false,
      reason:
        `no ${reservation.cpus} core(s) with room for ${reservation.runtimeUs}/${reservation.periodUs} = ${bw.toFixed(4)}: ` +
        `the ${reservation.cpus === 1 ? 'least loaded core' : `${reservation.cpus} least loaded cores`} would reach ${(util[worst]! + bw).toFixed(4)} > ${cap}`,
      tasks: tasks.tasks,
    };
  }
  const after = util.slice();
  for (const c of chosen) after[c] = after[c]! + bw;
  return { ok: true, cores: chosen.sort((a, b) => a - b), utilizationAfter: after, tasks: tasks.tasks };
}
