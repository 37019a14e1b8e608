/**
 * The extender's decisions for one pod (thesis §5.3.2), on top of the analyses of assurance/,
 * realtime/ and tdma/ (nothing is re-derived here):
 *
 * 1. {@link podRequirements}: the pod's annotations of the enabled plugins, parsed once per request.
 *    A malformed annotation (or a TDMA network the config does not know) is a POD-level error: the
 *    pod is rejected on every node with the same message (FailedAndUnresolvableNodes).
 * 2. {@link evaluateNode}, per node, in this order (first failure wins):
 *    - assurance (§3.1.2): the node's `ulysses.io/assurance` must satisfy the pod's policy
 *      (`ulysses.io/assurance-policy`, else the config default of its criticality level);
 *    - real time (§5.3.2 b): an RT pod only on an RT node (label `ulysses.io/rt-scheduler`) of the kind
 *      its `ulysses.io/rt` fits, whose schedulability test passes with the pod added to the pods
 *      already bound or reserved there (realtime/what-if.ts `analyzeRtNode`);
 *    - TDMA (§5.3.2 c): a TDMA pod only on a node of the requested network (label
 *      `ulysses.io/tdma-network`) where `allocateSlots` finds a slot set meeting `slots`/`maxGapUs`
 *      among the slots not reserved by other pods on that network (slots are network-wide).
 * 3. Score 0..10 (prioritize): the mean of the applicable components weighted by
 *    `prioritize.weights`: assurance → `assuranceScore` (10 for the node that just satisfies the
 *    policy, decreasing with the assurance offered beyond it, so high-assurance nodes stay free for
 *    critical pods); realtime (RT pods only) → `leastLoadedCoreScore` (remaining utilization of the
 *    least loaded core after placement, worst-fit). score = round(Σ w_c s_c / Σ w_c); 0 when no
 *    component applies.
 * Every capacity/affinity failure is "unresolvable": preemption by the default scheduler would evict
 * pods without knowing whether that frees RT capacity or slots, so we never invite it.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { podCriticality } from '../../core/criticality.ts';
import { objectKey } from '../../core/objects.ts';
import { assuranceScore, parseAssurancePolicyAnnotation, satisfies, ASSURANCE_POLICY_ANNOTATION, type AssurancePolicy } from '../assurance/assurance.ts';
import { parseRtAnnotation, type RtPodSpec } from '../realtime/annotations.ts';
import { analyzeRtNode, type NewPod, type NodeReport, type ParsedRtNode } from '../realtime/what-if.ts';
import type { AnalysisBudget } from '../realtime/task.ts';
import { allocateSlots, parseTdmaAnnotation, type SlotAllocation, type TdmaNetwork, type TdmaRequest } from '../tdma/tdma.ts';
import { RESERVATION_RESOURCE, RT_ANNOTATION, TDMA_ANNOTATION } from '../schedulability.ts';
import type { ExtenderConfig } from './config.ts';
import type { ClusterState, NodeInfo } from './state.ts';

/**
 * A node's rejection, as kube-scheduler shows it: it counts identical messages over the nodes
 * ("0/1000 nodes are available: 750 ulysses: not a real-time node, 200 ...", FitError in
 * pkg/scheduler/framework) and cuts the event at 1 KiB, so a message names the kind of failure and
 * never the node or its values; and every rejected node's message is in each /filter answer, which
 * the scheduler decodes on every pod. Only a malformed node annotation names its node, and an RT
 * analysis keeps its reason (the task, core and bound that failed).
 */
export const MESSAGES = {
  assurance: `ulysses: node assurance below the pod's policy`,
  notRealtime: `ulysses: not a real-time node`,
  otherRtKind: (node: string, pod: string) => `ulysses: ${node} node, pod needs ${pod}`,
  otherNetwork: (network: string) => `ulysses: not on TDMA network ${network}`,
  unknownNode: `ulysses: node not in the extender's cache yet`,
} as const;

export type RejectionReason = 'malformed' | 'reservation-request' | 'assurance' | 'realtime' | 'tdma' | 'node-annotation' | 'unknown-node' | 'bad-request';

export interface Plugins {
  readonly assurance: boolean;
  readonly realtime: boolean;
  readonly tdma: boolean;
}

export interface PodRequirements {
  readonly key: string;
  readonly uid: string;
  readonly criticality: 'none' | 'low' | 'high';
  /** null: no assurance constraint (plugin off, or no policy and no default). */
  readonly policy: AssurancePolicy | null;
  /** The policy as JSON, for messages. */
  readonly policyText: string;
  readonly rt?: RtPodSpec;
  readonly tdma?: TdmaRequest;
  readonly network?: TdmaNetwork;
  /**
   * What the pod asks of a node, as text: the effective assurance policy and the raw RT and TDMA
   * annotations the enabled plugins read. Two pods with the same demand get the same verdict on a
   * node in the same state, up to the UID tie-break of deferrable servers and the pod's UID in a
   * message naming it ({@link evaluateShared}).
   */
  readonly demand: string;
}

/**
 * `parse` with its results kept per raw annotation text (bounded, oldest dropped): the replicas of a
 * workload carry the same annotation texts, so a busy scheduler parses each once. The parsed values
 * are shared and never mutated (the analyses only read them; state.ts shares its parses the same way).
 */
function memoParse<T>(parse: (raw: string) => T, max = 512): (raw: string) => T {
  const memo = new Map<string, T>();
  return (raw) => {
    if (typeof raw !== 'string' || raw.length > 4096) return parse(raw);
    let v = memo.get(raw);
    if (v === undefined) {
      v = parse(raw);
      if (memo.size >= max) memo.delete(memo.keys().next().value!);
      memo.set(raw, v);
    }
    return v;
  };
}
const parsePolicy = memoParse(parseAssurancePolicyAnnotation);
const parseRt = memoParse(parseRtAnnotation);
const parseTdma = memoParse(parseTdmaAnnotation);

export type Requirements = { ok: true; req: PodRequirements } | { ok: false; reason: RejectionReason; message: string };

/** Parses what the enabled plugins need from the pod (header, 1). */
export function podRequirements(pod: V1Pod, cfg: ExtenderConfig, networks: ReadonlyMap<string, TdmaNetwork>): Requirements {
  const key = objectKey(pod);
  const ann = pod.metadata?.annotations ?? {};
  const errors: string[] = [];
  const criticality = podCriticality(pod, { priorityClassThreshold: cfg.priorityClassThreshold }).level;
  let policy: AssurancePolicy | null = null;
  if (cfg.plugins.assurance) {
    const raw = ann[ASSURANCE_POLICY_ANNOTATION];
    if (raw !== undefined) {
      const p = parsePolicy(raw);
      if (p.ok) policy = p.value;
      else errors.push(p.error);
    } else policy = cfg.defaultAssurancePolicies[criticality];
  }
  let rt: RtPodSpec | undefined;
  if (cfg.plugins.realtime && ann[RT_ANNOTATION] !== undefined) {
    const r = parseRt(ann[RT_ANNOTATION]);
    if (r.ok) rt = r.value;
    else errors.push(r.error);
  }
  let tdma: TdmaRequest | undefined;
  let network: TdmaNetwork | undefined;
  if (cfg.plugins.tdma && ann[TDMA_ANNOTATION] !== undefined) {
    const t = parseTdma(ann[TDMA_ANNOTATION]);
    if (t.ok) {
      tdma = t.value;
      network = networks.get(t.value.network);
      if (!network) {
        const known = [...networks.keys()];
        errors.push(`${TDMA_ANNOTATION}: network: ${JSON.stringify(t.value.network)} is not configured in the extender (known: ${known.length ? known.join(', ') : 'none'})`);
      }
    } else errors.push(t.error);
  }
  if (errors.length) return { ok: false, reason: 'malformed', message: `ulysses: pod ${key}: ${errors.join('; ')}` };
  const policyText = JSON.stringify(policy);
  return {
    ok: true,
    req: {
      key,
      uid: pod.metadata?.uid ?? key,
      criticality,
      policy,
      policyText,
      demand: `${policyText}\u0000${rt ? ann[RT_ANNOTATION] : ''}\u0000${tdma ? ann[TDMA_ANNOTATION] : ''}`,
      ...(rt ? { rt } : {}),
      ...(tdma ? { tdma } : {}),
      ...(network ? { network } : {}),
    },
  };
}

/**
 * Does bind record a reservation for the pod (RT cores or TDMA slots)? Only then does the extender
 * have to bind it: an `ulysses.io/rt` or `ulysses.io/tdma` annotation read by an enabled plugin.
 */
export function needsReservation(req: PodRequirements): boolean {
  return req.rt !== undefined || req.tdma !== undefined;
}

/**
 * The filter's refusal of a pod that needs a reservation but does not request
 * {@link RESERVATION_RESOURCE}: kube-scheduler would bind it itself, with no reservation recorded.
 * Resources of a pod cannot be changed in place: the pod (its template) has to be recreated.
 */
export function missingReservationRequest(req: PodRequirements): string {
  const what = [req.rt ? RT_ANNOTATION : '', req.tdma ? TDMA_ANNOTATION : ''].filter(Boolean).join(' and ');
  return (
    `ulysses: pod ${req.key} has ${what} but requests no ${RESERVATION_RESOURCE}, so kube-scheduler would bind it without recording its reservation: ` +
    `add resources.limits["${RESERVATION_RESOURCE}"]: 1 to one container (of its template) and recreate the pod`
  );
}

export type NodeVerdict =
  | {
      readonly fits: true;
      readonly score: number;
      readonly assuranceScore?: number;
      readonly rtScore?: number;
      /** RT placement (cores of the server / reservation / EDF tasks). */
      readonly cores?: readonly number[];
      readonly slots?: readonly number[];
      /** Existing pods whose ulysses.io/rt could not be parsed, and reservations that do not fit the configuration (ignored). */
      readonly skipped?: readonly string[];
    }
  | {
      readonly fits: false;
      readonly reason: RejectionReason;
      readonly message: string;
      readonly skipped?: readonly string[];
      /** The request's analysis budget ran out on this node (realtime/task.ts AnalysisBudget): never cached. */
      readonly budgetExceeded?: true;
    };

/**
 * Runs the RT analysis of a node (default: `analyzeRtNode` inline, on the request's budget); server.ts
 * passes one that returns the report an analysis thread computed (extender/analysis-worker.ts).
 */
export type RtAnalyzer = (node: ParsedRtNode, pod: NewPod) => NodeReport;

/** Memo of the network-wide slot allocation within one request (same answer for every node of a network). */
export type SlotMemo = Map<string, { readonly alloc: SlotAllocation; /** Out-of-range reservations left out. */ readonly ignored: readonly string[] }>;

/**
 * The per-node test and score (header, 2 and 3), computed afresh for this pod. `analyzer` replaces
 * the RT analysis (realtime/what-if.ts analyzeRtNode) of the node, e.g. by one made elsewhere.
 */
export function evaluateNode(
  req: PodRequirements,
  info: NodeInfo,
  state: ClusterState,
  cfg: ExtenderConfig,
  slotMemo: SlotMemo = new Map(),
  budget?: AnalysisBudget,
  analyzer?: RtAnalyzer,
): NodeVerdict {
  return evaluateNodeAs(req, req.uid, info, state, cfg, slotMemo, budget, analyzer);
}

/**
 * Stands for the pod being placed in a verdict shared by every pod of its demand (server.ts caches
 * verdicts per demand, not per pod). The RT analyses name a deferrable server by its pod's UID
 * ("server of pod <uid>", "pod <uid> task <i>": deferrable-server.ts coreSchedulable), so
 * {@link evaluateShared} gives them the UID followed by POD_MARK (NUL) instead. That stand-in
 * orders against every other server's UID as the UID itself does (the rate-monotonic tie-break of
 * equal periods, serverPriorityOrder; spec §5, hierarchical fixed priority), since no UID contains
 * NUL (the apiserver's are UUIDs). Replacing the stand-in by POD_MARK leaves a message without the
 * pod's identity (one with a NUL of its own is not shared), in which {@link verdictFor} writes a
 * pod's UID back.
 */
export const POD_MARK = '\u0000';

/** A node's verdict for every pod of a demand at one deferrable-server tie rank (server.ts). */
export interface SharedVerdict {
  /** A rejection's message names the pod as POD_MARK when `namesPod`. */
  readonly verdict: NodeVerdict;
  readonly namesPod: boolean;
  /** False: the verdict names this pod in a way {@link verdictFor} could not write back (it is this pod's only, with its UID in). */
  readonly shareable: boolean;
}

/**
 * {@link evaluateNode} with the pod named by its stand-in (see POD_MARK): equal to evaluateNode's
 * verdict of any pod with the same demand and the same rank among the node's equal-period
 * deferrable servers, once {@link verdictFor} wrote that pod's UID in.
 */
export function evaluateShared(
  req: PodRequirements,
  info: NodeInfo,
  state: ClusterState,
  cfg: ExtenderConfig,
  slotMemo: SlotMemo = new Map(),
  budget?: AnalysisBudget,
  analyzer?: RtAnalyzer,
): SharedVerdict {
  const standIn = req.uid + POD_MARK;
  const v = evaluateNodeAs(req, standIn, info, state, cfg, slotMemo, budget, analyzer);
  if (v.fits) return { verdict: v, namesPod: false, shareable: true };
  // a refusal for the request's budget says nothing about the node
  if (v.budgetExceeded) return { verdict: { ...v, message: v.message.split(standIn).join(req.uid) }, namesPod: false, shareable: false };
  const parts = v.message.split(standIn);
  const own = (): SharedVerdict => ({ verdict: { ...v, message: parts.join(req.uid) }, namesPod: false, shareable: false });
  // a message naming the pod by its key is this pod's own
  if (v.message.includes(req.key)) return own();
  if (parts.length === 1) return { verdict: v, namesPod: false, shareable: true };
  // ...and so is one naming it next to a NUL the stand-in did not put there (POD_MARK could not be told apart)
  if (parts.some((part) => part.includes(POD_MARK))) return own();
  return { verdict: { ...v, message: parts.join(POD_MARK) }, namesPod: true, shareable: true };
}

/** The verdict of the pod with this UID from a {@link SharedVerdict} of its demand and tie rank. */
export function verdictFor(shared: SharedVerdict, uid: string): NodeVerdict {
  const v = shared.verdict;
  return shared.namesPod && !v.fits ? { ...v, message: v.message.split(POD_MARK).join(uid) } : v;
}

/** evaluateNode, the RT analyses naming the pod `analysisUid` (its UID, or its stand-in: POD_MARK). */
function evaluateNodeAs(
  req: PodRequirements,
  analysisUid: string,
  info: NodeInfo,
  state: ClusterState,
  cfg: ExtenderConfig,
  slotMemo: SlotMemo,
  budget: AnalysisBudget | undefined,
  analyzer?: RtAnalyzer,
): NodeVerdict {
  const w = cfg.prioritize.weights;
  let sum = 0;
  let weights = 0;
  let aScore: number | undefined;
  if (cfg.plugins.assurance) {
    if (!info.assurance.ok) return { fits: false, reason: 'node-annotation', message: `ulysses: node ${info.name}: ${info.assurance.error}` };
    if (!satisfies(info.assurance.value, req.policy)) {
      return {
        fits: false,
        reason: 'assurance',
        message: MESSAGES.assurance,
      };
    }
    aScore = assuranceScore(info.assurance.value, req.policy);
    sum += w.assurance * aScore;
    weights += w.assurance;
  }
  let rtScore: number | undefined;
  let cores: readonly number[] | undefined;
  let skipped: readonly string[] | undefined;
  if (req.rt) {
    if (info.rtKind === null) return { fits: false, reason: 'realtime', message: MESSAGES.notRealtime };
    if (typeof info.rtKind !== 'string') return { fits: false, reason: 'node-annotation', message: `ulysses: node ${info.name}: ${info.rtKind.error}` };
    if (!info.rtCapacity.ok) return { fits: false, reason: 'node-annotation', message: `ulysses: node ${info.name}: ${info.rtCapacity.error}` };
    if (req.rt.kind !== info.rtKind) {
      return { fits: false, reason: 'realtime', message: MESSAGES.otherRtKind(info.rtKind, req.rt.kind) };
    }
    const existing = state.rtPodsOn(info.name, req.uid);
    if (existing.skipped.length) skipped = existing.skipped;
    const rtNode: ParsedRtNode = { name: info.name, kind: info.rtKind, capacity: info.rtCapacity.value, pods: existing.pods };
    const rtPod: NewPod = { name: req.key, uid: analysisUid, spec: req.rt };
    const report = analyzer ? analyzer(rtNode, rtPod) : analyzeRtNode(rtNode, rtPod, { exactResponseTimes: false, stopAtFirstFailure: true, ...(budget ? { budget } : {}) });
    if (report.ignored) skipped = [...(skipped ?? []), ...report.ignored.map((m) => `node ${info.name}: ${m}`)];
    if (!report.schedulable || !report.cores) {
      return {
        fits: false,
        reason: 'realtime',
        message: `ulysses: ${info.rtKind}: ${report.reason}`,
        ...(skipped ? { skipped } : {}),
        ...(report.budgetExceeded ? { budgetExceeded: true as const } : {}),
      };
    }
    cores = report.cores;
    rtScore = report.score;
    sum += w.realtime * rtScore;
    weights += w.realtime;
  }
  let slots: readonly number[] | undefined;
  if (req.tdma && req.network) {
    if (info.tdmaNetwork !== req.tdma.network) {
      return { fits: false, reason: 'tdma', message: MESSAGES.otherNetwork(req.tdma.network) };
    }
    let memo = slotMemo.get(req.network.name);
    if (!memo) {
      const taken = state.takenSlotsIn(req.network.name, req.uid, Math.round(req.network.cycleUs / req.network.slotUs));
      const alloc = allocateSlots(req.network, taken.slots, { slots: req.tdma.slots, ...(req.tdma.maxGapUs !== undefined ? { maxGapUs: req.tdma.maxGapUs } : {}) });
      memo = { alloc, ignored: taken.ignored };
      slotMemo.set(req.network.name, memo);
    }
    if (memo.ignored.length) skipped = [...(skipped ?? []), ...memo.ignored];
    const alloc = memo.alloc;
    if (!alloc.ok) return { fits: false, reason: 'tdma', message: `ulysses: ${TDMA_ANNOTATION}: ${alloc.reason}`, ...(skipped ? { skipped } : {}) };
    slots = alloc.slots;
  }
  return {
    fits: true,
    score: weights > 0 ? Math.max(0, Math.min(10, Math.round(sum / weights))) : 0,
    ...(aScore !== undefined ? { assuranceScore: aScore } : {}),
    ...(rtScore !== undefined ? { rtScore } : {}),
    ...(cores ? { cores } : {}),
    ...(slots ? { slots } : {}),
    ...(skipped ? { skipped } : {}),
  };
}
