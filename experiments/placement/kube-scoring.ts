/**
 * kube-scheduler's NodeResourcesFit plugin, re-implemented for the §6.2 placement simulation (the
 * thesis "simulated three possible vanilla Scheduler configurations": the plugin's scoring
 * strategies). Formulas as in kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/:
 *
 * - Filter (fit.go): a pod fits when, for every resource, node requested + pod request ≤ allocatable.
 * - requested for scoring (resource_allocation.go `calculateResourceAllocatableRequest`): the node's
 *   (non-zero) requested plus the pod's request, i.e. the node AFTER placing the pod.
 * - LeastAllocated (least_allocated.go `leastResourceScorer`): per resource
 *   `leastRequestedScore = (capacity − requested) · MaxNodeScore / capacity` (0 if capacity is 0 or
 *   requested > capacity), integer division; node score = Σ score·weight / Σ weight (integer
 *   division, resources with allocatable 0 skipped).
 * - MostAllocated (most_allocated.go `mostResourceScorer`): `mostRequestedScore = requested ·
 *   MaxNodeScore / capacity`, requested clamped to capacity; same weighted integer average.
 * - RequestedToCapacityRatio (requested_to_capacity_ratio.go `requestedToCapacityRatioScorer`): the
 *   shape's scores (0..MaxCustomPriorityScore = 10) are scaled by MaxNodeScore / 10; per resource
 *   `BuildBrokenLinearFunction(shape)(requested · 100 / capacity)` (utilization 100 when capacity is
 *   0 or requested > capacity); resources scoring 0 are left out of the weighted average, which is
 *   rounded (math.Round). Default shape here: {0 → 0, 100 → 10}, the bin-packing example of
 *   kubernetes.io/docs/concepts/scheduling-eviction/resource-bin-packing (the thesis: "prefers nodes
 *   with less percentage of free resources after allocating the Pod").
 * - Default resources and weights: cpu 1, memory 1 (NodeResourcesFitArgs defaults).
 * - Host selection (schedule_one.go `selectHost`): highest total score, ties broken uniformly at
 *   random.
 * MaxNodeScore = 100. Quantities are integers (milli-CPU, bytes) like the Go int64 arithmetic.
 */

export const MAX_NODE_SCORE = 100;
export const MAX_CUSTOM_PRIORITY_SCORE = 10;
const MAX_UTILIZATION = 100;

export type ScoringStrategy = 'LeastAllocated' | 'MostAllocated' | 'RequestedToCapacityRatio';
export const SCORING_STRATEGIES: readonly ScoringStrategy[] = ['LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'];

export interface ShapePoint {
  /** 0..100 */
  readonly utilization: number;
  /** 0..10 (MaxCustomPriorityScore) */
  readonly score: number;
}

export const BIN_PACKING_SHAPE: readonly ShapePoint[] = [
  { utilization: 0, score: 0 },
  { utilization: 100, score: 10 },
];

/** Go's integer division (truncates toward zero). */
const idiv = (a: number, b: number) => Math.trunc(a / b);

export function leastRequestedScore(requested: number, capacity: number): number {
  if (capacity === 0 || requested > capacity) return 0;
  return idiv((capacity - requested) * MAX_NODE_SCORE, capacity);
}

export function mostRequestedScore(requested: number, capacity: number): number {
  if (capacity === 0) return 0;
  return idiv(Math.min(requested, capacity) * MAX_NODE_SCORE, capacity);
}

/** helper.BuildBrokenLinearFunction over points whose scores are already scaled to 0..MaxNodeScore. */
export function brokenLinear(shape: readonly ShapePoint[], p: number): number {
  for (let i = 0; i < shape.length; i++) {
    if (p <= shape[i]!.utilization) {
      if (i === 0) return shape[0]!.score;
      const a = shape[i - 1]!;
      const b = shape[i]!;
      return a.score + idiv((b.score - a.score) * (p - a.utilization), b.utilization - a.utilization);
    }
  }
  return shape[shape.length - 1]!.score;
}

/** requested · max / capacity, clamped to [0, max] (requested_to_capacity_ratio.go `scaledUtilization`). */
function scaledUtilization(requested: number, capacity: number): number {
  if (capacity <= 0 || requested <= 0) return 0;
  if (requested >= capacity) return MAX_UTILIZATION;
  return idiv(requested * MAX_UTILIZATION, capacity);
}

export interface ScoringOptions {
  /** Resource weights (same order as the vectors); default 1 each. */
  readonly weights?: readonly number[];
  /** RequestedToCapacityRatio shape; default {@link BIN_PACKING_SHAPE}. */
  readonly shape?: readonly ShapePoint[];
}

/**
 * NodeResourcesFit score (0..100) of a node for a pod. `requested` = node requested + pod request
 * (after placement), `allocatable` = node allocatable, both over the scored resources.
 */
export function resourceScore(strategy: ScoringStrategy, requested: readonly number[], allocatable: readonly number[], options: ScoringOptions = {}): number {
  const weight = (i: number) => options.weights?.[i] ?? 1;
  let nodeScore = 0;
  let weightSum = 0;
  if (strategy === 'RequestedToCapacityRatio') {
    const shape = (options.shape ?? BIN_PACKING_SHAPE).map((p) => ({ utilization: p.utilization, score: p.score * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE) }));
    for (let i = 0; i < requested.length; i++) {
      const cap = allocatable[i]!;
      if (cap === 0) continue;
      const req = requested[i]!;
      const s = req > cap ? brokenLinear(shape, MAX_UTILIZATION) : brokenLinear(shape, scaledUtilization(req, cap));
      if (s > 0) {
        nodeScore += s * weight(i);
        weightSum += weight(i);
      }
    }
    return weightSum === 0 ? 0 : Math.round(nodeScore / weightSum);
  }
  const per = strategy === 'LeastAllocated' ? leastRequestedScore : mostRequestedScore;
  for (let i = 0; i < requested.length; i++) {
    if (allocatable[i] === 0) continue;
    nodeScore += per(requested[i]!, allocatable[i]!) * weight(i);
    weightSum += weight(i);
  }
  return weightSum === 0 ? 0 : idiv(nodeScore, weightSum);
}

/** NodeResourcesFit filter: requested + pod request ≤ allocatable for every resource. */
export function fits(nodeRequested: readonly number[], podRequest: readonly number[], allocatable: readonly number[]): boolean {
  for (let i = 0; i < podRequest.length; i++) if (nodeRequested[i]! + podRequest[i]! > allocatable[i]!) return false;
  return true;
}

/** selectHost: index of the highest score, ties uniformly at random; -1 for an empty list. */
export function selectHost(scores: readonly number[], rand: () => number): number {
  let best = -1;
  let count = 0;
  for (let i = 0; i < scores.length; i++) {
    if (best < 0 || scores[i]! > scores[best]!) {
      best = i;
      count = 1;
    } else if (scores[i] === scores[best]) {
      count++;
      if (rand() * count < 1) best = i; // reservoir sampling, as selectHost
    }
  }
  return best;
}
