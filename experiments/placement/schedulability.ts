/**
 * Thesis §6.2 "Schedulability": how many pod sets vanilla Kubernetes and Ulysses accept on a
 * mixed cluster, and whether the sets Ulysses rejects would really miss deadlines.
 *
 * Cluster (§6.2): 5 nodes without RT guarantees, 2 "medium isolation" nodes with a budget/period
 * interface (ulysses.io/rt-scheduler=budget-period; the analysis of
 * scheduler-plugins/realtime/budget-period.ts: per-core Σ Q/P ≤ U_max = 0.95, the SCHED_DEADLINE
 * (EDF) utilization bound, worst-fit cores), 1 "high isolation" node with hierarchical deferrable
 * servers (rt-scheduler=deferrable-server; exact Davis & Burns response-time analysis of
 * deferrable-server.ts). Core counts are not in the thesis: defaults 4 (non-RT), 3 (each
 * budget/period node: 6 cores at U_max 0.95 for 30 reservations of mean 16.5 %), 6 (DS node); they
 * are options, and the report shows the sensitivity to the DS node's size.
 *
 * Pod set (§6.2): 30 best-effort pods with CPU 8-25 % (uniform); 30 medium-isolation RT pods with a
 * reservation of 8-25 % (uniform), period log-uniform in [10, 100] ms, 1 cpu; 6-12 high-isolation
 * RT pods whose utilizations come from randfixedsum (Emberson, Stafford, Davis 2010) with total
 * 180 %, each value in [0, 1]. A high pod's utilization u is its deferrable server's bandwidth:
 * T_S log-uniform in [5, 50] ms, C_S = round(u·T_S); inside it one task with C = C_S, period
 * T = 2·T_S and constrained deadline D = T_S + C_S (ours: the thesis gives no task model). In
 * isolation its worst case is R = (T_S − C_S) + C_S = T_S ≤ D; it meets D iff the higher-priority
 * servers delay its last budget by at most C_S, so the task-level test of the analysis is the one
 * that binds and a rejection means a real worst-case miss, which the simulator can exhibit.
 * CPU request of every pod = its utilization (milli-CPU).
 *
 * Vanilla: kube-scheduler NodeResourcesFit filter on CPU requests + LeastAllocated (default), no RT
 * check; a set is accepted when every pod gets a node.
 * Ulysses: the same kube filter, plus the scheduler extender's filter and score exactly as served
 * (scheduler-plugins/extender/evaluate.ts `podRequirements` + `evaluateNode` over a ClusterState,
 * realtime plugin on), pods in criticality order (high RT, medium RT, best effort); a placement is
 * recorded as the extender's bind does (spec.nodeName + ulysses.io/rt-cores). A set is accepted when
 * every pod is placed; every failing pod is counted (a set can be rejected by both tests).
 * Check of the rejections: for a sample of sets rejected on the DS node, the core the failing server
 * would have gone to (least loaded) is simulated (scheduler-plugins/realtime/simulator.ts) under the
 * analysis' critical instant and under the simulator's adversarial scenarios; for budget/period
 * rejections, whether the reservations exceed the cores' total capacity (a miss is then certain)
 * or whether a first-fit-decreasing packing at 100 % per core would succeed (then the rejection is
 * SCHED_DEADLINE's admission bound U_max, not a certain miss).
 * Pure and deterministic for a seed.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { prng } from '../../core/prng.ts';
import { extenderConfig } from '../../scheduler-plugins/extender/config.ts';
import { evaluateNode, podRequirements } from '../../scheduler-plugins/extender/evaluate.ts';
import { ClusterState } from '../../scheduler-plugins/extender/state.ts';
import { coreUtilization, type CoreReservation } from '../../scheduler-plugins/realtime/budget-period.ts';
import { coreSchedulable, serverPriorityOrder, type DeferrableServer } from '../../scheduler-plugins/realtime/deferrable-server.ts';
import { adversarialScenarios, simulateDeferrableServers, simulationHorizon } from '../../scheduler-plugins/realtime/simulator.ts';
import { RT_ANNOTATION, RT_CAPACITY_ANNOTATION, RT_CORES_ANNOTATION, RT_SCHEDULER_LABEL } from '../../scheduler-plugins/schedulability.ts';
import { fits, resourceScore, selectHost } from './kube-scoring.ts';
import { logUniform, randfixedsum } from './randfixedsum.ts';

export interface StudyOptions {
  readonly sets?: number;
  readonly nonRtNodes?: number;
  readonly nonRtCores?: number;
  readonly budgetPeriodNodes?: number;
  readonly budgetPeriodCores?: number;
  readonly dsCores?: number;
  /** Total utilization of the high-isolation pods (default 1.8). */
  readonly highTotalUtilization?: number;
  /** How many DS-rejected sets to check by simulation (default 10). */
  readonly simulateSample?: number;
  /** Simulated horizon cap per scenario, µs (default 2 s). */
  readonly simulationCapUs?: number;
}

export const STUDY_DEFAULTS = {
  sets: 200,
  nonRtNodes: 5,
  nonRtCores: 4,
  budgetPeriodNodes: 2,
  budgetPeriodCores: 3,
  dsCores: 6,
  highTotalUtilization: 1.8,
  simulateSample: 10,
  simulationCapUs: 2_000_000,
} as const;

export type PodClass = 'best-effort' | 'medium-rt' | 'high-rt';

export interface StudyPod {
  readonly name: string;
  readonly cls: PodClass;
  /** CPU utilization = CPU request in cores. */
  readonly utilization: number;
  readonly pod: V1Pod;
}

export interface PodSet {
  readonly index: number;
  readonly pods: readonly StudyPod[];
  readonly highCount: number;
  readonly highUtilizations: readonly number[];
}

const int = (rand: () => number, lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
const uniform = (rand: () => number, lo: number, hi: number) => lo + (hi - lo) * rand();

function podObject(name: string, criticality: string, milliCpu: number, rt?: unknown): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: 'study',
      uid: `uid-${name}`,
      labels: { [CRITICALITY_LABEL]: criticality },
      ...(rt ? { annotations: { [RT_ANNOTATION]: JSON.stringify(rt) } } : {}),
    },
    spec: { containers: [{ name: 'c', image: 'pause', resources: { requests: { cpu: `${milliCpu}m` } } }] },
  };
}

/** One pod set of §6.2 (rounding to whole µs / milli-CPU). */
export function generatePodSet(index: number, rand: () => number, highTotal: number = STUDY_DEFAULTS.highTotalUtilization): PodSet {
  const pods: StudyPod[] = [];
  const milli = (u: number) => Math.max(1, Math.round(u * 1000));
  for (let i = 0; i < 30; i++) {
    const u = uniform(rand, 0.08, 0.25);
    pods.push({ name: `be-${i}`, cls: 'best-effort', utilization: u, pod: podObject(`s${index}-be-${i}`, 'none', milli(u)) });
  }
  for (let i = 0; i < 30; i++) {
    const u = uniform(rand, 0.08, 0.25);
    const periodUs = Math.round(logUniform(rand, 10_000, 100_000));
    const runtimeUs = Math.max(1, Math.round(u * periodUs));
    pods.push({ name: `med-${i}`, cls: 'medium-rt', utilization: runtimeUs / periodUs, pod: podObject(`s${index}-med-${i}`, 'low', milli(u), { reservation: { runtimeUs, periodUs, cpus: 1 } }) });
  }
  const n = int(rand, 6, 12);
  const us = randfixedsum(n, highTotal, rand, { min: 0, max: 1 });
  us.forEach((u, i) => {
    const periodUs = Math.round(logUniform(rand, 5_000, 50_000));
    const budgetUs = Math.min(periodUs, Math.max(1, Math.round(u * periodUs)));
    const task = { wcetUs: budgetUs, periodUs: 2 * periodUs, deadlineUs: periodUs + budgetUs };
    pods.push({ name: `high-${i}`, cls: 'high-rt', utilization: u, pod: podObject(`s${index}-high-${i}`, 'high', milli(u), { server: { budgetUs, periodUs }, tasks: [task] }) });
  });
  return { index, pods, highCount: n, highUtilizations: us };
}

interface StudyNode {
  readonly name: string;
  readonly kind: 'none' | 'budget-period' | 'deferrable-server';
  readonly milliCpu: number;
  readonly object: V1Node;
}

export function studyNodes(o: StudyOptions = {}): StudyNode[] {
  const c = { ...STUDY_DEFAULTS, ...o };
  const node = (name: string, kind: StudyNode['kind'], cores: number): StudyNode => ({
    name,
    kind,
    milliCpu: cores * 1000,
    object: {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name,
        resourceVersion: '1',
        labels: kind === 'none' ? {} : { [RT_SCHEDULER_LABEL]: kind },
        annotations: kind === 'none' ? {} : { [RT_CAPACITY_ANNOTATION]: JSON.stringify({ cores }) },
      },
      status: { allocatable: { cpu: String(cores) } },
    },
  });
  return [
    ...Array.from({ length: c.nonRtNodes }, (_, i) => node(`node-${i}`, 'none', c.nonRtCores)),
    ...Array.from({ length: c.budgetPeriodNodes }, (_, i) => node(`bp-${i}`, 'budget-period', c.budgetPeriodCores)),
    node('ds-0', 'deferrable-server', c.dsCores),
  ];
}

export interface PlacementOutcome {
  readonly accepted: boolean;
  /** Pods that found no node, with the reason of the node of their kind. */
  readonly failed: ReadonlyArray<{ readonly pod: string; readonly cls: PodClass; readonly reason: string }>;
  readonly placement: ReadonlyMap<string, string>;
}

const podMilli = (p: StudyPod) => Number(p.pod.spec!.containers[0]!.resources!.requests!.cpu!.replace('m', ''));

/** Vanilla kube-scheduler: NodeResourcesFit (CPU) + LeastAllocated, any node. */
export function placeVanilla(set: PodSet, nodes: readonly StudyNode[], rand: () => number): PlacementOutcome {
  const requested = new Map(nodes.map((n) => [n.name, 0]));
  const placement = new Map<string, string>();
  const failed: Array<{ pod: string; cls: PodClass; reason: string }> = [];
  for (const p of set.pods) {
    const m = podMilli(p);
    const cands = nodes.filter((n) => fits([requested.get(n.name)!], [m], [n.milliCpu]));
    if (!cands.length) {
      failed.push({ pod: p.name, cls: p.cls, reason: 'Insufficient cpu' });
      continue;
    }
    const scores = cands.map((n) => resourceScore('LeastAllocated', [requested.get(n.name)! + m], [n.milliCpu]));
    const chosen = cands[selectHost(scores, rand)]!;
    requested.set(chosen.name, requested.get(chosen.name)! + m);
    placement.set(p.name, chosen.name);
  }
  return { accepted: failed.length === 0, failed, placement };
}

const CLASS_ORDER: Readonly<Record<PodClass, number>> = { 'high-rt': 0, 'medium-rt': 1, 'best-effort': 2 };

/** Ulysses: kube filter + the extender's filter/score (evaluate.ts) over a ClusterState; binds recorded as the extender does. */
export function placeUlysses(set: PodSet, nodes: readonly StudyNode[], rand: () => number, state = new ClusterState()): PlacementOutcome & { state: ClusterState } {
  const cfg = extenderConfig({ plugins: { assurance: false, realtime: true, tdma: false } });
  for (const n of nodes) state.upsertNode(n.object);
  const requested = new Map(nodes.map((n) => [n.name, 0]));
  const placement = new Map<string, string>();
  const failed: Array<{ pod: string; cls: PodClass; reason: string }> = [];
  const ordered = [...set.pods].sort((a, b) => CLASS_ORDER[a.cls] - CLASS_ORDER[b.cls]);
  for (const p of ordered) {
    const req = podRequirements(p.pod, cfg, new Map());
    if (!req.ok) throw new Error(`study pod ${p.name}: ${req.message}`); // generated pods are well-formed
    const m = podMilli(p);
    const cands: Array<{ node: StudyNode; score: number; cores?: readonly number[] }> = [];
    const reasons: string[] = [];
    for (const n of nodes) {
      if (!fits([requested.get(n.name)!], [m], [n.milliCpu])) {
        reasons.push(`${n.name}: Insufficient cpu`);
        continue;
      }
      const v = evaluateNode(req.req, state.node(n.name)!, state, cfg);
      if (!v.fits) {
        if (n.kind !== 'none') reasons.push(`${n.name}: ${v.message}`);
        continue;
      }
      // kube-scheduler total: NodeResourcesFit (LeastAllocated, 0..100) + extender score (0..10) × weight 1 × 10.
      const score = resourceScore('LeastAllocated', [requested.get(n.name)! + m], [n.milliCpu]) + 10 * v.score;
      cands.push({ node: n, score, ...(v.cores ? { cores: v.cores } : {}) });
    }
    if (!cands.length) {
      failed.push({ pod: p.name, cls: p.cls, reason: reasons.join('; ') });
      continue;
    }
    const chosen = cands[selectHost(cands.map((c) => c.score), rand)]!;
    requested.set(chosen.node.name, requested.get(chosen.node.name)! + m);
    placement.set(p.name, chosen.node.name);
    // What the extender's bind records (server.ts): the node, and the RT cores.
    state.upsertPod({
      ...p.pod,
      metadata: { ...p.pod.metadata, annotations: { ...p.pod.metadata!.annotations, ...(chosen.cores ? { [RT_CORES_ANNOTATION]: JSON.stringify(chosen.cores) } : {}) } },
      spec: { ...p.pod.spec!, nodeName: chosen.node.name },
    });
  }
  return { accepted: failed.length === 0, failed, placement, state };
}

export interface DsCheck {
  readonly set: number;
  readonly pod: string;
  readonly core: number;
  readonly servers: number;
  readonly coreUtilization: number;
  /** Adversarial scenarios of simulator.ts run with every pod executing only its own task. */
  readonly scenarios: number;
  /** Misses of the failing server(s)' tasks in those scenarios. */
  readonly missesOwnWorkload: number;
  /** Critical instant (see {@link criticalInstant}) of each failing server: how many of them miss. */
  readonly criticalInstantMisses: number;
  readonly failingServers: number;
  /** Largest simulated response time minus deadline at the critical instants (µs; > 0: a miss). */
  readonly worstLatenessUs: number;
  readonly missed: boolean;
}

function simulateScenarios(servers: readonly DeferrableServer[], watched: ReadonlySet<number>, rand: () => number, capUs: number) {
  const scenarios = adversarialScenarios(servers, rand);
  let misses = 0;
  for (const o of scenarios) {
    const maxOffset = Math.max(0, ...(o.taskOffsetsUs ?? []).flatMap((x) => [...(x ?? [])]));
    misses += simulateDeferrableServers(servers, simulationHorizon(servers, maxOffset, capUs), o).misses.filter((m) => watched.has(m.server)).length;
  }
  return { misses, scenarios: scenarios.length };
}

/**
 * The worst case the deferrable-server analysis assumes for server `target` (index in `servers`),
 * built for the simulator: the target's task is released at 0 with the target's budget exhausted
 * (next replenishment r = T_S − C_S); every higher-priority server X has kept its full budget (no
 * work before r), is replenished at r + C_X, and from r on has more work than budget (two tasks of
 * C_X every T_X released at r) — what its reservation allows any pod to do: C_X at the end of one
 * period, C_X at the start of the next ("back-to-back", J_X = T_X − C_X), then C_X every period.
 * Lower-priority servers cannot delay the target and are left out. Returns the target's task
 * response time in that scenario (first job) and its deadline.
 */
export function criticalInstant(servers: readonly DeferrableServer[], target: number, capUs: number): { responseUs: number | null; deadlineUs: number; missed: boolean } {
  const order = serverPriorityOrder(servers);
  const s = servers[target]!;
  const r = s.periodUs - s.budgetUs;
  const hp = order.slice(0, order.indexOf(target)).map((i) => servers[i]!);
  const sim: DeferrableServer[] = [s, ...hp.map((x) => ({ ...x, tasks: [{ wcetUs: x.budgetUs, periodUs: x.periodUs }, { wcetUs: x.budgetUs, periodUs: x.periodUs }] }))];
  const initial = [
    { budgetUs: 0, firstReplenishmentUs: r },
    ...hp.map((x) => ({ budgetUs: x.budgetUs, firstReplenishmentUs: ((r + x.budgetUs - 1) % x.periodUs) + 1 })),
  ];
  const taskOffsetsUs = [s.tasks.map(() => 0), ...hp.map(() => [r, r])];
  const task = s.tasks[0]!;
  const deadline = task.deadlineUs ?? task.periodUs;
  const horizon = Math.min(capUs, r + 4 * deadline + 1);
  const res = simulateDeferrableServers(sim, horizon, { initial, taskOffsetsUs });
  const mine = res.misses.filter((m) => m.server === 0);
  const first = mine.find((m) => m.releaseUs === 0);
  const responseUs = first ? (first.finishUs === null ? null : first.finishUs) : res.maxResponseUs[0]![0]!;
  return { responseUs, deadlineUs: deadline, missed: mine.length > 0 };
}

/**
 * Simulates the DS-node core the failing high pod would go to (the least loaded one, as the what-if
 * reports) with the servers already placed there: (1) the adversarial scenarios of simulator.ts with
 * every pod executing only its own task; (2) the analysis' critical instant of every server the
 * analysis finds unschedulable, the other servers using what their reservations allow.
 */
export function checkDsRejection(set: PodSet, outcome: PlacementOutcome & { state: ClusterState }, dsCores: number, pod: string, rand: () => number, capUs: number): DsCheck {
  const cores: DeferrableServer[][] = Array.from({ length: dsCores }, () => []);
  for (const rec of outcome.state.rtPodsOn('ds-0', '').pods) {
    if (rec.spec.kind !== 'deferrable-server') continue;
    cores[rec.cores?.[0] ?? 0]!.push({ podUid: rec.uid, ...rec.spec.server, tasks: rec.spec.tasks });
  }
  const p = set.pods.find((x) => x.name === pod)!;
  const spec = JSON.parse(p.pod.metadata!.annotations![RT_ANNOTATION]!) as { server: { budgetUs: number; periodUs: number }; tasks: DeferrableServer['tasks'] };
  const util = cores.map((c) => c.reduce((u, x) => u + x.budgetUs / x.periodUs, 0));
  const core = util.map((_, i) => i).sort((a, b) => util[a]! - util[b]! || a - b)[0]!;
  const servers = [...cores[core]!, { podUid: p.pod.metadata!.uid!, ...spec.server, tasks: spec.tasks }];
  const analysis = coreSchedulable(servers);
  const failing = analysis.servers.filter((a) => !a.server.schedulable || a.tasks.some((t) => !t.schedulable)).map((a) => a.index);
  const own = simulateScenarios(servers, new Set(failing), rand, capUs);
  let ciMisses = 0;
  let worst = Number.NEGATIVE_INFINITY;
  for (const i of failing) {
    const ci = criticalInstant(servers, i, capUs);
    if (ci.missed) ciMisses++;
    worst = Math.max(worst, (ci.responseUs ?? capUs) - ci.deadlineUs);
  }
  return {
    set: set.index,
    pod,
    core,
    servers: servers.length,
    coreUtilization: util[core]! + spec.server.budgetUs / spec.server.periodUs,
    scenarios: own.scenarios,
    missesOwnWorkload: own.misses,
    criticalInstantMisses: ciMisses,
    failingServers: failing.length,
    worstLatenessUs: worst,
    missed: ciMisses > 0 || own.misses > 0,
  };
}

export interface SetResult {
  readonly index: number;
  readonly highCount: number;
  readonly totalUtilization: number;
  readonly vanillaAccepted: boolean;
  readonly ulyssesAccepted: boolean;
  readonly rejectedByDs: boolean;
  readonly rejectedByBudgetPeriod: boolean;
  readonly failedPods: number;
  /** Budget/period rejection where the medium reservations exceed 100 % of the BP cores in total (a miss is certain). */
  readonly bpOverFullCapacity: boolean;
  /** Budget/period rejection where even a first-fit-decreasing packing at 100 % per core fails (heuristic: FFD success proves a partition exists). */
  readonly bpNoPartitionAt100: boolean;
}

export interface StudyResult {
  readonly seed: number;
  readonly options: Required<StudyOptions>;
  readonly sets: readonly SetResult[];
  readonly vanillaAccepted: number;
  readonly ulyssesAccepted: number;
  readonly rejectedByDs: number;
  readonly rejectedByBudgetPeriod: number;
  readonly rejectedByBoth: number;
  readonly dsChecks: readonly DsCheck[];
}

/** Does first-fit decreasing pack the medium reservations on the BP nodes' cores at 100 % per core? */
function bpPackableAt100(set: PodSet, nCores: number): boolean {
  const res = set.pods
    .filter((p) => p.cls === 'medium-rt')
    .map((p) => (JSON.parse(p.pod.metadata!.annotations![RT_ANNOTATION]!) as { reservation: CoreReservation }).reservation)
    .sort((a, b) => b.runtimeUs / b.periodUs - a.runtimeUs / a.periodUs);
  const cores: CoreReservation[][] = Array.from({ length: nCores }, () => []);
  for (const r of res) {
    const c = cores.findIndex((core) => coreUtilization(core) + r.runtimeUs / r.periodUs <= 1 + 1e-9);
    if (c < 0) return false;
    cores[c]!.push(r);
  }
  return true;
}

export function runSchedulabilityStudy(seed: number, o: StudyOptions = {}, onSet?: (r: SetResult) => void): StudyResult {
  const c = { ...STUDY_DEFAULTS, ...o } as Required<StudyOptions>;
  const gen = prng(seed);
  const tie = prng(seed ^ 0x27d4eb2d);
  const simRand = prng(seed ^ 0x165667b1);
  const nodes = studyNodes(c);
  const sets: SetResult[] = [];
  const dsChecks: DsCheck[] = [];
  for (let i = 0; i < c.sets; i++) {
    const set = generatePodSet(i, gen, c.highTotalUtilization);
    const vanilla = placeVanilla(set, nodes, tie);
    const ulysses = placeUlysses(set, nodes, tie);
    const rejectedByDs = ulysses.failed.some((f) => f.cls === 'high-rt');
    const rejectedByBudgetPeriod = ulysses.failed.some((f) => f.cls === 'medium-rt');
    const mediumU = set.pods.filter((p) => p.cls === 'medium-rt').reduce((s, p) => s + p.utilization, 0);
    const bpCores = c.budgetPeriodNodes * c.budgetPeriodCores;
    const r: SetResult = {
      index: i,
      highCount: set.highCount,
      totalUtilization: set.pods.reduce((s, p) => s + p.utilization, 0),
      vanillaAccepted: vanilla.accepted,
      ulyssesAccepted: ulysses.accepted,
      rejectedByDs,
      rejectedByBudgetPeriod,
      failedPods: ulysses.failed.length,
      bpOverFullCapacity: rejectedByBudgetPeriod && mediumU > bpCores,
      bpNoPartitionAt100: rejectedByBudgetPeriod && !bpPackableAt100(set, bpCores),
    };
    sets.push(r);
    onSet?.(r);
    if (rejectedByDs && dsChecks.length < c.simulateSample) {
      const first = ulysses.failed.find((f) => f.cls === 'high-rt')!;
      dsChecks.push(checkDsRejection(set, ulysses, c.dsCores, first.pod, simRand, c.simulationCapUs));
    }
  }
  const count = (f: (r: SetResult) => boolean) => sets.filter(f).length;
  return {
    seed,
    options: c,
    sets,
    vanillaAccepted: count((r) => r.vanillaAccepted),
    ulyssesAccepted: count((r) => r.ulyssesAccepted),
    rejectedByDs: count((r) => r.rejectedByDs),
    rejectedByBudgetPeriod: count((r) => r.rejectedByBudgetPeriod),
    rejectedByBoth: count((r) => r.rejectedByDs && r.rejectedByBudgetPeriod),
    dsChecks,
  };
}

