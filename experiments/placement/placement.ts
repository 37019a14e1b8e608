/**
 * Thesis §6.2 "Acceptance rate": placement simulation of the three vanilla kube-scheduler scoring
 * strategies (NodeResourcesFit LeastAllocated, MostAllocated, RequestedToCapacityRatio; formulas in
 * kube-scoring.ts) vs the criticality-aware policy, on the same input sequence of nodes and pods.
 *
 * Setup (§6.2, with the thesis' own simplifications; the numbers it does not give are ours and named
 * here):
 * - cluster: 4-10 initial nodes, more nodes randomly added during the run (0-3); node
 *   BR_n = [cpu, memory, disk] from {4, 8, 16} cores × {8, 16, 32} GiB × {100, 250, 500} GB;
 *   RT_n with probability 0.4 (at least one RT and one non-RT node); assurance base α_n + β_n
 *   (hardware + software mechanisms, §3.1.2) in 2..4 for RT nodes, 1..2 for the others;
 * - pods: 300-1000, Poisson arrivals, exponential lifetimes ("pods were randomly terminated, freeing
 *   the resources allotted to them"), mean lifetime chosen for an offered CPU load ρ ∈ [0.9, 1.6] of
 *   the initial cluster (contention); criticality NO/LOW/HI with probability 0.5/0.3/0.2; RT_l with
 *   probability 0.1/0.3/0.5 by criticality; requests (minimum) cpu 100m-2 (log-uniform), memory
 *   128Mi-4Gi, disk 1-20 GB; limits (maximum) = request × U[1, 2];
 * - assurance (§6.2: "a percentage of α_n + β_n that assumes discrete values ... defined by the
 *   minimum Pod criticality hosted on the node, and whether the resources guaranteed to the Pod are
 *   the minimum or maximum requested"): level A_n = round(25 · (α_n + β_n) · c(min criticality) ·
 *   g), c = 1 / 0.8 / 0.5 for HI / LOW / NO (empty node: 1), g = 1 if every pod on the node gets
 *   its maximum (Σ limits ≤ capacity on every resource) else 0.8. 100 = the best node, idle.
 *   The level is the node's `ulysses.io/assurance` vector ({cpu, memory, disk} all = A_n) and pods'
 *   thresholds θ_k are threshold policies of scheduler-plugins/assurance (HI 75, LOW 35, NO none),
 *   checked with its `satisfies`;
 * - filter, common to all four policies (§6.2): NodeResourcesFit (requests), assurance compliance
 *   ∀k ∈ J_on_n ∪ {l}: A*_n ≥ θ_k (A*_n: the level with l added), RT compliance ¬RT_l ∨ RT_n;
 * - queue: pending pods are retried when resources are freed or a node joins, highest criticality
 *   first (the queue sort of §5.3.2 (a); vanilla gets the same order through PriorityClasses);
 *   a pending pod whose lifetime ends before it is placed is rejected;
 * - criticality-aware score: the objective of §6.2, a weighted sum multiplied by the acceptance rate
 *   F = AR · (w_a AR + w_A Ā + w_R R̄), weights 52.5/42.5/5 (normalised), with
 *   AR = Σ_n |J_on_n| / m (m = pending + active pods), Ā = Σ_{n: RT_n} A_n / |{n: RT_n}| (levels/100),
 *   R̄ = (1/N) Σ_n Σ_z (BR_n(z) − Σ_{l ∈ J_on_n} BR_l(z)_limit)⁺² / Σ_z BR_n(z)².
 *   The pod goes where F is highest, or stays pending if leaving it pending scores higher (the
 *   acceptance term is what "forces the scheduler to assign jobs instead of rejecting them").
 * Metrics: acceptance per criticality (placed / arrived), the thesis' AR and Ā as time averages,
 * assurance of the node at placement per criticality, CPU utilization (requests / capacity).
 * Pure and deterministic for a seed (core/prng.ts).
 */
import { criticalityRank, CRITICALITY_LEVELS, type Criticality } from '../../core/criticality.ts';
import { prng } from '../../core/prng.ts';
import { satisfies, type AssurancePolicy, type AssuranceVector } from '../../scheduler-plugins/assurance/assurance.ts';
import { fits, resourceScore, selectHost, SCORING_STRATEGIES, type ScoringStrategy } from './kube-scoring.ts';
import { logUniform } from './randfixedsum.ts';

export type PolicyName = ScoringStrategy | 'CriticalityAware';
export const POLICIES: readonly PolicyName[] = [...SCORING_STRATEGIES, 'CriticalityAware'];

/** §6.2 Fig 6.7: "The weights for criticality-aware policy were: 52.5, 42.5, and 5." */
export const CRITICALITY_AWARE_WEIGHTS = Object.freeze({ acceptance: 52.5, assurance: 42.5, residual: 5 });

/** Resource vector index: cpu (milli-CPU), memory (bytes), disk (bytes). */
export const RESOURCES = ['cpu', 'memory', 'disk'] as const;
/** NodeResourcesFit scores cpu and memory by default (weights 1). */
const SCORED = 2;

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;
const GB = 1e9;

export const ASSURANCE_UNIT = 25; // level per point of α+β: 4 points → 100
export const CRITICALITY_FACTOR: Readonly<Record<Criticality, number>> = { none: 0.5, low: 0.8, high: 1 };
export const MIN_GUARANTEED_FACTOR = 0.8;
export const ASSURANCE_THRESHOLDS: Readonly<Record<Criticality, number | null>> = { none: null, low: 35, high: 75 };

export interface SimNode {
  readonly name: string;
  readonly allocatable: readonly number[];
  readonly rt: boolean;
  /** α_n + β_n, 0..4. */
  readonly base: number;
  /** Simulation time the node joins (0 for the initial nodes). */
  readonly joinsAt: number;
}

export interface SimPod {
  readonly id: number;
  readonly arrival: number;
  readonly departure: number;
  readonly request: readonly number[];
  readonly limit: readonly number[];
  readonly criticality: Criticality;
  readonly rt: boolean;
}

export interface Workload {
  readonly seed: number;
  readonly nodes: readonly SimNode[];
  readonly initialNodes: number;
  readonly pods: readonly SimPod[];
  /** Offered CPU load of the initial cluster. */
  readonly load: number;
}

export interface WorkloadOptions {
  readonly nodes?: number;
  readonly pods?: number;
  readonly load?: number;
  readonly addedNodes?: number;
}

const int = (rand: () => number, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = <T>(rand: () => number, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

function makeNode(rand: () => number, name: string, joinsAt: number, rt: boolean): SimNode {
  const hw = rt ? int(rand, 1, 2) : int(rand, 0, 1);
  const sw = rt ? int(rand, 1, 2) : 1;
  return {
    name,
    allocatable: [1000 * pick(rand, [4, 8, 16]), GiB * pick(rand, [8, 16, 32]), GB * pick(rand, [100, 250, 500])],
    rt,
    base: hw + sw,
    joinsAt,
  };
}

/** The input sequence shared by every policy (same seed → same workload). */
export function generateWorkload(seed: number, o: WorkloadOptions = {}): Workload {
  const rand = prng(seed);
  const n0 = o.nodes ?? int(rand, 4, 10);
  const nPods = o.pods ?? int(rand, 300, 1000);
  const load = o.load ?? 0.9 + 0.7 * rand();
  const added = o.addedNodes ?? int(rand, 0, 3);
  const nodes: SimNode[] = [];
  for (let i = 0; i < n0; i++) nodes.push(makeNode(rand, `node-${i}`, 0, i === 0 ? true : i === 1 ? false : rand() < 0.4));
  // Poisson arrivals (rate 1), exponential lifetimes sized for the offered load.
  const meanCpu = (2000 - 100) / Math.log(2000 / 100);
  const clusterCpu = nodes.reduce((s, n) => s + n.allocatable[0]!, 0);
  const meanLifetime = (load * clusterCpu) / meanCpu;
  const pods: SimPod[] = [];
  let t = 0;
  for (let id = 0; id < nPods; id++) {
    t += -Math.log(1 - rand());
    const u = rand();
    const criticality: Criticality = u < 0.5 ? 'none' : u < 0.8 ? 'low' : 'high';
    const rt = rand() < { none: 0.1, low: 0.3, high: 0.5 }[criticality];
    const request = [
      10 * Math.round(logUniform(rand, 100, 2000) / 10),
      MiB * Math.round(logUniform(rand, 128, 4096)),
      GB * Math.round(logUniform(rand, 1, 20)),
    ];
    const limit = request.map((r) => Math.round(r * (1 + rand())));
    pods.push({ id, arrival: t, departure: t - meanLifetime * Math.log(1 - rand()), request, limit, criticality, rt });
  }
  for (let i = 0; i < added; i++) nodes.push(makeNode(rand, `node-${n0 + i}`, rand() * t, rand() < 0.4));
  return { seed, nodes, initialNodes: n0, pods, load };
}

/** Threshold policy θ_k of a criticality level (scheduler-plugins/assurance), null = none. */
export function assurancePolicyOf(c: Criticality): AssurancePolicy | null {
  const min = ASSURANCE_THRESHOLDS[c];
  return min === null ? null : { policy: 'threshold', min: { cpu: min, memory: min, disk: min } };
}
const POLICY_OF: Readonly<Record<Criticality, AssurancePolicy | null>> = {
  none: assurancePolicyOf('none'),
  low: assurancePolicyOf('low'),
  high: assurancePolicyOf('high'),
};

/** A_n (0..100) for a node with α+β = base, lowest hosted criticality (null: empty) and guarantee. */
export function assuranceLevel(base: number, minCriticality: Criticality | null, maxGuaranteed: boolean): number {
  const c = minCriticality === null ? 1 : CRITICALITY_FACTOR[minCriticality];
  return Math.round(ASSURANCE_UNIT * base * c * (maxGuaranteed ? 1 : MIN_GUARANTEED_FACTOR));
}

export const assuranceVector = (level: number): AssuranceVector => ({ cpu: level, memory: level, disk: level });

class NodeState {
  readonly requested = [0, 0, 0];
  readonly limits = [0, 0, 0];
  readonly counts = [0, 0, 0]; // per criticality rank
  readonly pods = new Set<number>();
  constructor(readonly node: SimNode) {}

  private minCrit(extra?: Criticality): Criticality | null {
    for (let r = 0; r < 3; r++) if (this.counts[r]! > 0 || (extra !== undefined && criticalityRank(extra) === r)) return CRITICALITY_LEVELS[r]!;
    return null;
  }

  private guaranteed(extra?: SimPod): boolean {
    return this.limits.every((l, z) => l + (extra?.limit[z] ?? 0) <= this.node.allocatable[z]!);
  }

  /** A_n now, or A*_n with `pod` added. */
  level(pod?: SimPod): number {
    return assuranceLevel(this.node.base, this.minCrit(pod?.criticality), this.guaranteed(pod));
  }

  /** Σ_z (BR(z) − Σ limits)⁺² / Σ_z BR(z)², optionally with `pod` added. */
  residual(pod?: SimPod): number {
    let num = 0;
    let den = 0;
    for (let z = 0; z < 3; z++) {
      const cap = this.node.allocatable[z]!;
      const free = Math.max(0, cap - this.limits[z]! - (pod?.limit[z] ?? 0));
      num += (free / cap) ** 2; // normalised per resource: bytes and milli-CPU are not comparable
      den += 1;
    }
    return num / den;
  }

  /** The §6.2 filter: resources (requests), RT compliance, assurance compliance for every pod incl. this one. */
  admits(pod: SimPod): boolean {
    if (pod.rt && !this.node.rt) return false;
    if (!fits(this.requested, pod.request, this.node.allocatable)) return false;
    const a = assuranceVector(this.level(pod));
    for (let r = 0; r < 3; r++) {
      if (this.counts[r]! > 0 || criticalityRank(pod.criticality) === r) {
        if (!satisfies(a, POLICY_OF[CRITICALITY_LEVELS[r]!])) return false;
      }
    }
    return true;
  }

  add(pod: SimPod): void {
    for (let z = 0; z < 3; z++) {
      this.requested[z]! += pod.request[z]!;
      this.limits[z]! += pod.limit[z]!;
    }
    this.counts[criticalityRank(pod.criticality)]!++;
    this.pods.add(pod.id);
  }

  remove(pod: SimPod): void {
    for (let z = 0; z < 3; z++) {
      this.requested[z]! -= pod.request[z]!;
      this.limits[z]! -= pod.limit[z]!;
    }
    this.counts[criticalityRank(pod.criticality)]!--;
    this.pods.delete(pod.id);
  }
}

export interface PolicyResult {
  readonly policy: PolicyName;
  readonly arrived: Readonly<Record<Criticality, number>>;
  readonly placed: Readonly<Record<Criticality, number>>;
  /** placed / arrived, overall. */
  readonly acceptance: number;
  /** placed / arrived per criticality (NaN when none arrived). */
  readonly acceptanceBy: Readonly<Record<Criticality, number>>;
  /** Time average of AR = active / (pending + active) (thesis definition). */
  readonly meanAcceptanceRate: number;
  /** Time average of Ā (0..1), RT nodes. */
  readonly meanClusterAssurance: number;
  /** Mean assurance (0..1) of the node at placement, per criticality (NaN when none placed). */
  readonly assuranceAtPlacement: Readonly<Record<Criticality, number>>;
  /** Time average of Σ cpu requests / Σ cpu allocatable. */
  readonly meanCpuUtilization: number;
  /** Mean wait (simulation time units) of placed pods before placement. */
  readonly meanWait: number;
}

export interface RunResult {
  readonly seed: number;
  readonly nodes: number;
  readonly addedNodes: number;
  readonly pods: number;
  readonly load: number;
  readonly policies: readonly PolicyResult[];
}

type Event = { t: number; kind: 0 | 1 | 2; i: number }; // 0 node joins, 1 departure, 2 arrival (order at equal t)

function events(w: Workload): Event[] {
  const ev: Event[] = [];
  w.nodes.forEach((n, i) => ev.push({ t: n.joinsAt, kind: 0, i }));
  w.pods.forEach((p, i) => {
    ev.push({ t: p.arrival, kind: 2, i });
    ev.push({ t: p.departure, kind: 1, i });
  });
  return ev.sort((a, b) => a.t - b.t || a.kind - b.kind || a.i - b.i);
}

const zeroBy = (): Record<Criticality, number> => ({ none: 0, low: 0, high: 0 });

/** Runs one policy over the workload. `tieSeed` seeds selectHost's tie-breaking. */
export function simulatePolicy(w: Workload, policy: PolicyName, tieSeed = w.seed ^ 0x5bd1e995): PolicyResult {
  const rand = prng(tieSeed);
  const W = CRITICALITY_AWARE_WEIGHTS;
  const wSum = W.acceptance + W.assurance + W.residual;
  const [wa, wA, wR] = [W.acceptance / wSum, W.assurance / wSum, W.residual / wSum];
  const nodes: NodeState[] = [];
  const where = new Map<number, NodeState>();
  const pending: SimPod[] = [];
  const arrived = zeroBy();
  const placed = zeroBy();
  const assuranceSum = zeroBy();
  let waitSum = 0;
  let active = 0;
  // Incremental sums for the objective.
  let levelSum = 0; // Σ A_n over assurance nodes (RT nodes; all nodes if none is RT)
  let residualSum = 0;
  const inAssurance = (s: NodeState) => s.node.rt || !nodes.some((x) => x.node.rt);
  const recomputeSums = () => {
    levelSum = 0;
    residualSum = 0;
    for (const s of nodes) {
      if (inAssurance(s)) levelSum += s.level();
      residualSum += s.residual();
    }
  };
  const assuranceNodes = () => nodes.filter(inAssurance).length;
  const objective = (activeN: number, m: number, lvlSum: number, resSum: number) => {
    const ar = m === 0 ? 1 : activeN / m;
    const abar = lvlSum / 100 / Math.max(1, assuranceNodes());
    const rbar = resSum / Math.max(1, nodes.length);
    return ar * (wa * ar + wA * abar + wR * rbar);
  };

  // Time averages.
  let lastT = 0;
  let tTotal = 0;
  let arInt = 0;
  let arT = 0;
  let assInt = 0;
  let cpuInt = 0;
  const advance = (t: number) => {
    const dt = t - lastT;
    if (dt > 0 && nodes.length) {
      const m = active + pending.length;
      if (m > 0) {
        arInt += (active / m) * dt;
        arT += dt;
      }
      assInt += (levelSum / 100 / Math.max(1, assuranceNodes())) * dt;
      let req = 0;
      let cap = 0;
      for (const s of nodes) {
        req += s.requested[0]!;
        cap += s.node.allocatable[0]!;
      }
      cpuInt += (req / cap) * dt;
      tTotal += dt;
    }
    lastT = t;
  };

  const place = (pod: SimPod, s: NodeState, t: number) => {
    if (inAssurance(s)) levelSum -= s.level();
    residualSum -= s.residual();
    s.add(pod);
    if (inAssurance(s)) levelSum += s.level();
    residualSum += s.residual();
    where.set(pod.id, s);
    active++;
    placed[pod.criticality]++;
    assuranceSum[pod.criticality] += s.level() / 100;
    waitSum += t - pod.arrival;
  };

  /** One scheduling attempt; true when placed. */
  const tryPlace = (pod: SimPod, t: number): boolean => {
    const candidates = nodes.filter((s) => s.admits(pod));
    if (!candidates.length) return false;
    if (policy !== 'CriticalityAware') {
      const scores = candidates.map((s) => {
        const requested = s.requested.slice(0, SCORED).map((r, z) => r + pod.request[z]!);
        return resourceScore(policy, requested, s.node.allocatable.slice(0, SCORED));
      });
      place(pod, candidates[selectHost(scores, rand)]!, t);
      return true;
    }
    const m = active + pending.length; // the pod is pending: m does not change when it is placed
    const scores = candidates.map((s) => {
      const inA = inAssurance(s);
      const lvl = levelSum + (inA ? s.level(pod) - s.level() : 0);
      const res = residualSum + s.residual(pod) - s.residual();
      return objective(active + 1, m, lvl, res);
    });
    const stay = objective(active, m, levelSum, residualSum);
    const best = selectHost(scores, rand);
    if (scores[best]! < stay) return false;
    place(pod, candidates[best]!, t);
    return true;
  };

  const byPriority = (a: SimPod, b: SimPod) => criticalityRank(b.criticality) - criticalityRank(a.criticality) || a.arrival - b.arrival;
  const retryPending = (t: number) => {
    pending.sort(byPriority);
    for (let i = 0; i < pending.length; ) {
      const pod = pending[i]!; // stays in `pending` while it is tried: m counts it
      if (tryPlace(pod, t)) pending.splice(i, 1);
      else i++;
    }
  };

  for (const e of events(w)) {
    advance(e.t);
    if (e.kind === 0) {
      nodes.push(new NodeState(w.nodes[e.i]!));
      recomputeSums(); // the set of assurance nodes may change
      retryPending(e.t);
    } else if (e.kind === 2) {
      const pod = w.pods[e.i]!;
      arrived[pod.criticality]++;
      pending.push(pod);
      if (tryPlace(pod, e.t)) pending.splice(pending.indexOf(pod), 1);
    } else {
      const pod = w.pods[e.i]!;
      const s = where.get(pod.id);
      if (s) {
        if (inAssurance(s)) levelSum -= s.level();
        residualSum -= s.residual();
        s.remove(pod);
        if (inAssurance(s)) levelSum += s.level();
        residualSum += s.residual();
        where.delete(pod.id);
        active--;
        retryPending(e.t);
      } else {
        const i = pending.indexOf(pod);
        if (i >= 0) pending.splice(i, 1);
      }
    }
  }
  const totalArrived = arrived.none + arrived.low + arrived.high;
  const totalPlaced = placed.none + placed.low + placed.high;
  const by = (f: (c: Criticality) => number) => ({ none: f('none'), low: f('low'), high: f('high') });
  return {
    policy,
    arrived,
    placed,
    acceptance: totalPlaced / totalArrived,
    acceptanceBy: by((c) => placed[c] / arrived[c]),
    meanAcceptanceRate: arT > 0 ? arInt / arT : 1,
    meanClusterAssurance: tTotal > 0 ? assInt / tTotal : 0,
    assuranceAtPlacement: by((c) => assuranceSum[c] / placed[c]),
    meanCpuUtilization: tTotal > 0 ? cpuInt / tTotal : 0,
    meanWait: totalPlaced ? waitSum / totalPlaced : 0,
  };
}

/** One run: the workload of `seed` through every policy. */
export function runPlacement(seed: number, o: WorkloadOptions = {}, policies: readonly PolicyName[] = POLICIES): RunResult {
  const w = generateWorkload(seed, o);
  return {
    seed,
    nodes: w.initialNodes,
    addedNodes: w.nodes.length - w.initialNodes,
    pods: w.pods.length,
    load: w.load,
    policies: policies.map((p) => simulatePolicy(w, p)),
  };
}

/** `runs` runs with seeds derived from `seed` (run r uses seed + r). */
export function runPlacementStudy(seed: number, runs: number, o: WorkloadOptions = {}, onRun?: (r: RunResult, i: number) => void): RunResult[] {
  const out: RunResult[] = [];
  for (let r = 0; r < runs; r++) {
    const res = runPlacement(seed + r, o);
    out.push(res);
    onRun?.(res, r);
  }
  return out;
}
