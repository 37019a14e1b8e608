/**
 * TDMA network slots (thesis §5.3.2 (c): filter nodes whose TDMA network has no free slot meeting
 * the pod's needs, reserve the slot at bind; testbed §6.3: RTnet, 5 ms cycle, 1 ms slots).
 *
 * A network has a cycle of c µs split into N = c/s slots of s µs (slot i = [i·s, (i+1)·s) in every
 * cycle). A pod holding k slots gets Θ = k·s µs of medium time per cycle.
 *
 * - Supply bound of k CONTIGUOUS slots (periodic resource with the blackout at the start):
 *       sbf(D) = floor(D/c)·Θ + max(0, (D mod c) − (c − Θ))
 *   and the worst-case time to transmit W µs worth of slot time:  W + ceil(W/Θ)·(c − Θ).
 *   {@link slotSetSupplyBound} computes the exact worst-case supply of ANY slot set (minimum over
 *   window start times); for contiguous slots it equals the closed form.
 * - Gap: the idle time between the END of one of the pod's slots and the START of its next slot,
 *   going round the cycle (the gap from the last slot wraps to the first one of the next cycle).
 *   It is the longest time the pod cannot transmit; k contiguous slots have the single gap c − Θ.
 *   (Start-to-start distance = gap + s.)
 * - Allocation `allocateSlots`: k free slots whose largest circular gap ≤ maxGapUs:
 *   1. contiguous if possible (cycle wrap-around counts as contiguous: slot N−1 is followed by slot
 *      0): best-fit — the shortest free run that holds k slots, at its start (ties: lowest index);
 *      valid when c − Θ ≤ maxGapUs;
 *   2. else spread: the k free slots minimising the largest gap (exact: greedy circular cover for
 *      each candidate gap and first slot), topped up with the lowest free slots if fewer suffice.
 * - Annotation `ulysses.io/tdma`: `{"network":"rtnet0","slots":2,"maxGapUs":3000}` (maxGapUs
 *   optional: no latency bound).
 * No I/O.
 */
import { z } from 'zod';
import { micros, num, parseAnnotation, type Parsed } from '../realtime/annotations.ts';

export const TDMA_ANNOTATION = 'ulysses.io/tdma';

export interface TdmaNetwork {
  readonly name: string;
  readonly cycleUs: number;
  readonly slotUs: number;
}

/** The thesis testbed (RTnet on Xenomai): 5 ms cycle, 1 ms slots. */
export const THESIS_TESTBED_NETWORK: TdmaNetwork = { name: 'rtnet0', cycleUs: 5000, slotUs: 1000 };

export const MAX_SLOTS_PER_CYCLE = 1024;

export const tdmaNetworkSchema = z
  .strictObject({
    name: z.string().min(1, { error: 'must not be empty' }),
    cycleUs: micros(),
    slotUs: micros(),
  })
  .superRefine((n, ctx) => {
    if (n.cycleUs % n.slotUs !== 0) ctx.addIssue({ code: 'custom', path: ['cycleUs'], message: `must be a multiple of slotUs (${n.slotUs})` });
    else if (n.cycleUs / n.slotUs > MAX_SLOTS_PER_CYCLE) {
      ctx.addIssue({ code: 'custom', path: ['slotUs'], message: `at most ${MAX_SLOTS_PER_CYCLE} slots per cycle` });
    }
  });

export function invalidNetwork(n: TdmaNetwork): string | undefined {
  const r = tdmaNetworkSchema.safeParse(n);
  return r.success ? undefined : r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
}

/** N = c / s. */
export function slotsPerCycle(n: TdmaNetwork): number {
  return n.cycleUs / n.slotUs;
}

/** sbf(D) = floor(D/c)·Θ + max(0, (D mod c) − (c − Θ)) for Θ µs of contiguous slots per cycle c. */
export function supplyBound(windowUs: number, cycleUs: number, budgetUs: number): number {
  if (windowUs <= 0) return 0;
  return Math.floor(windowUs / cycleUs) * budgetUs + Math.max(0, (windowUs % cycleUs) - (cycleUs - budgetUs));
}

/** Worst-case time to be served W µs: W + ceil(W/Θ)·(c − Θ) (the least D with sbf(D) ≥ W). */
export function timeToServe(workUs: number, cycleUs: number, budgetUs: number): number {
  if (workUs <= 0) return 0;
  return workUs + Math.ceil(workUs / budgetUs) * (cycleUs - budgetUs);
}

/** Supply of the slot set in [t, t + len) for 0 ≤ t < c, 0 ≤ len ≤ c (the window may wrap). */
function supplyIn(n: TdmaNetwork, slots: readonly number[], t: number, len: number): number {
  let sum = 0;
  for (const k of slots) {
    for (const shift of [0, n.cycleUs]) {
      const a = k * n.slotUs + shift;
      const b = a + n.slotUs;
      sum += Math.max(0, Math.min(b, t + len) - Math.max(a, t));
    }
  }
  return sum;
}

/**
 * Exact worst-case supply of an arbitrary slot set in any window of `windowUs`: full cycles give Θ
 * each, the remainder is minimised over start times (a piecewise-linear function of the start, so
 * checking the breakpoints — slot boundaries and slot boundaries minus the remainder — is enough).
 */
export function slotSetSupplyBound(windowUs: number, network: TdmaNetwork, slots: readonly number[]): number {
  if (windowUs <= 0 || slots.length === 0) return 0;
  const c = network.cycleUs;
  const set = [...new Set(slots)];
  const full = Math.floor(windowUs / c) * set.length * network.slotUs;
  const rest = windowUs % c;
  if (rest === 0) return full;
  let min = Number.POSITIVE_INFINITY;
  for (const k of set) {
    for (const edge of [k * network.slotUs, (k + 1) * network.slotUs]) {
      for (const start of [edge, edge - rest]) {
        const t = ((start % c) + c) % c;
        min = Math.min(min, supplyIn(network, set, t, rest));
      }
    }
  }
  return full + min;
}

/** Idle gaps (µs) from the end of each of the pod's slots to the start of its next one, in slot order. */
export function circularGapsUs(network: TdmaNetwork, slots: readonly number[]): number[] {
  const n = slotsPerCycle(network);
  const sorted = [...new Set(slots)].sort((a, b) => a - b);
  return sorted.map((a, i) => {
    const b = i + 1 < sorted.length ? sorted[i + 1]! : sorted[0]! + n;
    return (b - a - 1) * network.slotUs;
  });
}

export function maxCircularGapUs(network: TdmaNetwork, slots: readonly number[]): number {
  const gaps = circularGapsUs(network, slots);
  return gaps.length ? Math.max(...gaps) : Number.POSITIVE_INFINITY;
}

export interface SlotRequest {
  readonly slots: number;
  /** Largest tolerated gap (µs) between two of the pod's slots; absent = unbounded. */
  readonly maxGapUs?: number;
}

export type SlotAllocation =
  | {
      readonly ok: true;
      /** Allocated slot indices, ascending. */
      readonly slots: readonly number[];
      readonly contiguous: boolean;
      /** Θ = k·s. */
      readonly budgetUs: number;
      readonly maxGapUs: number;
    }
  | { readonly ok: false; readonly reason: string };

/** Circular runs of free slots as [start, length]; a fully free cycle is one run starting at 0. */
function freeRuns(free: readonly boolean[]): Array<[number, number]> {
  const n = free.length;
  const firstTaken = free.indexOf(false);
  if (firstTaken < 0) return [[0, n]];
  const runs: Array<[number, number]> = [];
  let start = -1;
  for (let step = 1; step <= n; step++) {
    const i = (firstTaken + step) % n;
    if (free[i]) {
      if (start < 0) start = i;
    } else if (start >= 0) {
      runs.push([start, (i - start + n) % n]);
      start = -1;
    }
  }
  return runs;
}

/**
 * Fewest slots from `freeSorted` covering the cycle with every gap ≤ g slots, or null. For each
 * possible first slot, greedily jump to the farthest free slot within the gap (optimal for a fixed
 * first slot); the best over all first slots is optimal.
 */
function minCover(freeSorted: readonly number[], n: number, g: number): number[] | null {
  let best: number[] | null = null;
  const m = freeSorted.length;
  for (let s = 0; s < m; s++) {
    const first = freeSorted[s]!;
    const chosen = [first];
    let cur = first; // unwrapped position
    let idx = s; // index (unwrapped, may exceed m) of cur in the doubled list
    for (;;) {
      if (first + n - cur - 1 <= g) break; // closes the circle
      let nextIdx = -1;
      for (let j = idx + 1; j < s + m; j++) {
        const pos = freeSorted[j % m]! + (j >= m ? n : 0);
        if (pos - cur - 1 <= g) nextIdx = j;
        else break;
      }
      if (nextIdx < 0) {
        chosen.length = 0;
        break;
      }
      idx = nextIdx;
      cur = freeSorted[idx % m]! + (idx >= m ? n : 0);
      chosen.push(freeSorted[idx % m]!);
      if (best && chosen.length >= best.length) break;
    }
    if (chosen.length && (!best || chosen.length < best.length)) best = chosen;
  }
  return best;
}

/**
 * Chooses `request.slots` free slots of `network` (not in `taken`) whose largest circular gap is
 * ≤ `request.maxGapUs`: contiguous preferred, else spread (rules in the header).
 */
export function allocateSlots(network: TdmaNetwork, taken: readonly number[], request: SlotRequest): SlotAllocation {
  const bad = invalidNetwork(network);
  if (bad) return { ok: false, reason: `invalid network ${network.name}: ${bad}` };
  const n = slotsPerCycle(network);
  const k = request.slots;
  if (!Number.isSafeInteger(k) || k < 1) return { ok: false, reason: `slots must be an integer >= 1, got ${k}` };
  const maxGap = request.maxGapUs ?? Number.POSITIVE_INFINITY;
  if (!(maxGap >= 0)) return { ok: false, reason: `maxGapUs must be >= 0, got ${request.maxGapUs}` };
  const free = new Array<boolean>(n).fill(true);
  for (const t of taken) {
    if (!Number.isSafeInteger(t) || t < 0 || t >= n) return { ok: false, reason: `taken slot ${t} is not in [0, ${n})` };
    free[t] = false;
  }
  const freeSorted = free.flatMap((f, i) => (f ? [i] : []));
  if (freeSorted.length < k) return { ok: false, reason: `network ${network.name}: ${freeSorted.length} free slot(s), ${k} needed` };
  const budgetUs = k * network.slotUs;

  // 1. Contiguous, best-fit.
  const contiguousGap = network.cycleUs - budgetUs;
  if (contiguousGap <= maxGap) {
    const runs = freeRuns(free)
      .filter(([, len]) => len >= k)
      .sort((a, b) => a[1] - b[1] || a[0] - b[0]);
    const run = runs[0];
    if (run) {
      const slots = Array.from({ length: k }, (_, i) => (run[0] + i) % n).sort((a, b) => a - b);
      return { ok: true, slots, contiguous: true, budgetUs, maxGapUs: contiguousGap };
    }
  }

  // 2. Spread: the least g (in slots) whose minimal cover needs ≤ k slots.
  let lo = 0;
  let hi = n - 1; // any single free slot covers with gap n − 1
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    const cover = minCover(freeSorted, n, mid);
    if (cover && cover.length <= k) hi = mid;
    else lo = mid + 1;
  }
  const cover = minCover(freeSorted, n, lo)!;
  const chosen = new Set(cover);
  for (const f of freeSorted) {
    if (chosen.size >= k) break;
    chosen.add(f);
  }
  const slots = [...chosen].sort((a, b) => a - b);
  const achieved = maxCircularGapUs(network, slots);
  if (achieved > maxGap) {
    return {
      ok: false,
      reason: `network ${network.name}: the best ${k} free slot(s) leave a gap of ${achieved} us > maxGapUs ${request.maxGapUs}`,
    };
  }
  const contiguous = circularGapsUs(network, slots).filter((g) => g > 0).length <= 1; // k slots leave c − Θ of gap in total
  return { ok: true, slots, contiguous, budgetUs, maxGapUs: achieved };
}

export const tdmaRequestSchema = z.strictObject({
  network: z.string({ error: (i) => (i.input === undefined ? 'is required' : 'must be a string') }).min(1, { error: 'must not be empty' }).max(253, { error: 'at most 253 characters' }),
  slots: num().int({ error: 'must be an integer' }).min(1, { error: 'must be >= 1' }).max(MAX_SLOTS_PER_CYCLE, { error: `must be <= ${MAX_SLOTS_PER_CYCLE}` }),
  maxGapUs: num().int({ error: 'must be an integer (microseconds)' }).min(0, { error: 'must be >= 0' }).optional(),
});

export type TdmaRequest = z.output<typeof tdmaRequestSchema>;

/** Parses the pod annotation `ulysses.io/tdma` (string or decoded JSON); errors name the field. */
export function parseTdmaAnnotation(raw: unknown): Parsed<TdmaRequest> {
  return parseAnnotation(tdmaRequestSchema, raw, TDMA_ANNOTATION);
}
