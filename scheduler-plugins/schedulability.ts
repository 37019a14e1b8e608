/**
 * `ulysses schedulability --input file.json`: the operator's what-if for ONE node, in the object
 * format of the API: `{"node":{labels,annotations},"pods":[existing pods],"pod":{new pod},
 * "networks":[{name,cycleUs,slotUs}]?}` where pods carry `metadata.{name,uid,annotations}` (or just
 * `{name,uid,annotations}`). Answers `{"feasible","core","responseTimesUs","slots","reasons"}` by
 * running the same analyses as the extender: the RT test of the node's kind (realtime/what-if.ts)
 * and the TDMA slot allocation (tdma/tdma.ts). Reservations already recorded on existing pods
 * (`ulysses.io/rt-cores`, `ulysses.io/tdma-slots`) pin them.
 */
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { analyze, type WhatIfPod } from './realtime/what-if.ts';
import { RT_KINDS, type RtKind } from './realtime/annotations.ts';
import { allocateSlots, parseTdmaAnnotation, THESIS_TESTBED_NETWORK, type TdmaNetwork } from './tdma/tdma.ts';

export const RT_ANNOTATION = 'ulysses.io/rt';
export const RT_CAPACITY_ANNOTATION = 'ulysses.io/rt-capacity';
export const RT_SCHEDULER_LABEL = 'ulysses.io/rt-scheduler';
export const TDMA_ANNOTATION = 'ulysses.io/tdma';
export const TDMA_NETWORK_LABEL = 'ulysses.io/tdma-network';
/** reservations recorded at bind time */
export const RT_CORES_ANNOTATION = 'ulysses.io/rt-cores';
export const TDMA_SLOTS_ANNOTATION = 'ulysses.io/tdma-slots';

/**
 * The extended resource a pod requests to be bound by the extender, which records its RT/TDMA
 * reservation first: kube-scheduler calls the extender's bind only for pods requesting one of the
 * bind entry's `managedResources` (extender/kube-scheduler-config.ts). No node advertises it
 * (`ignoredByScheduler`; the kubelet drops it at admission). A pod asks for it with
 * `resources.limits: {"ulysses.io/reservation": 1}` on one container (the API requires a limit for
 * an extended resource and defaults the request to it).
 */
export const RESERVATION_RESOURCE = 'ulysses.io/reservation';

/** A container's `resources` requesting {@link RESERVATION_RESOURCE} (workloads, tests, benches): a fresh object each call. */
export function reservationRequest(): { limits: Record<string, string> } {
  return { limits: { [RESERVATION_RESOURCE]: '1' } };
}

/**
 * Does kube-scheduler send this pod to the bind entry, i.e. does a container or init container
 * name {@link RESERVATION_RESOURCE} in its requests or limits (any quantity)? As kube-scheduler's
 * `HTTPExtender.IsInterested` / `hasManagedResources` (pkg/scheduler/extender.go, v1.36 and v1.37).
 */
export function requestsReservation(pod: Pick<V1Pod, 'spec'>): boolean {
  const names = (cs: readonly V1Container[] | undefined) =>
    (cs ?? []).some((c) => (c.resources?.requests && RESERVATION_RESOURCE in c.resources.requests) || (c.resources?.limits && RESERVATION_RESOURCE in c.resources.limits));
  return names(pod.spec?.containers) || names(pod.spec?.initContainers);
}

interface ObjectLike {
  metadata?: { name?: string; uid?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  name?: string;
  uid?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface SchedulabilityInput {
  node: ObjectLike;
  pods?: ObjectLike[];
  pod: ObjectLike;
  networks?: TdmaNetwork[];
}

export interface SchedulabilityAnswer {
  feasible: boolean;
  core: number | null;
  responseTimesUs: Array<{ pod: string; task: number; responseTimeUs: number | null; deadlineUs: number }>;
  slots: number[] | null;
  reasons: string[];
}

const meta = (o: ObjectLike) => ({
  name: o.metadata?.name ?? o.name ?? '',
  uid: o.metadata?.uid ?? o.uid,
  labels: o.metadata?.labels ?? o.labels ?? {},
  annotations: o.metadata?.annotations ?? o.annotations ?? {},
});

function parseIntList(text: string | undefined, what: string, reasons: string[]): number[] | undefined {
  if (text === undefined) return undefined;
  try {
    const v = JSON.parse(text) as unknown;
    if (Array.isArray(v) && v.every((x) => Number.isInteger(x) && x >= 0)) return v as number[];
  } catch {
    /* reported below */
  }
  reasons.push(`${what}: must be a JSON array of non-negative integers, got ${JSON.stringify(text)}`);
  return undefined;
}

export function schedulability(input: SchedulabilityInput): SchedulabilityAnswer {
  const reasons: string[] = [];
  const node = meta(input.node ?? {});
  const pod = meta(input.pod ?? {});
  const existing = (input.pods ?? []).map(meta);
  const answer: SchedulabilityAnswer = { feasible: true, core: null, responseTimesUs: [], slots: null, reasons };
  const fail = (why: string) => {
    answer.feasible = false;
    reasons.push(why);
  };

  // --- real-time -----------------------------------------------------------------------------
  const rt = pod.annotations[RT_ANNOTATION];
  if (rt !== undefined) {
    const kind = node.labels[RT_SCHEDULER_LABEL];
    if (!kind) fail(`node ${node.name} is not a real-time node (no ${RT_SCHEDULER_LABEL} label)`);
    else if (!RT_KINDS.includes(kind as RtKind)) fail(`node ${node.name}: label ${RT_SCHEDULER_LABEL}: unknown kind "${kind}" (expected ${RT_KINDS.join(', ')})`);
    else {
      const pods: WhatIfPod[] = existing
        .filter((p) => p.annotations[RT_ANNOTATION] !== undefined)
        .map((p) => ({
          name: p.name,
          uid: p.uid,
          rt: p.annotations[RT_ANNOTATION],
          cores: parseIntList(p.annotations[RT_CORES_ANNOTATION], `pod ${p.name}: ${RT_CORES_ANNOTATION}`, reasons),
        }));
      const result = analyze({
        nodes: [{ name: node.name, kind: kind as RtKind, capacity: node.annotations[RT_CAPACITY_ANNOTATION] ?? '{"cores":1}', pods }],
        pod: { name: pod.name, uid: pod.uid, rt },
      });
      const report = result.nodes[0];
      if (result.error) fail(result.error);
      else if (!report) fail(`node ${node.name}: no analysis`);
      else {
        answer.core = report.cores?.[0] ?? null;
        if (!report.schedulable) fail(`node ${node.name}: ${report.reason}`);
        const core = answer.core;
        answer.responseTimesUs = report.tasks
          .filter((t) => core === null || t.core === core)
          .map((t) => ({ pod: t.pod, task: t.task, responseTimeUs: t.responseTimeUs, deadlineUs: t.deadlineUs }));
      }
    }
  }

  // --- TDMA ----------------------------------------------------------------------------------
  const tdmaRaw = pod.annotations[TDMA_ANNOTATION];
  if (tdmaRaw !== undefined) {
    const req = parseTdmaAnnotation(tdmaRaw);
    if (!req.ok) fail(`pod ${pod.name}: ${req.error}`);
    else if (node.labels[TDMA_NETWORK_LABEL] !== req.value.network) {
      fail(`node ${node.name} is not on TDMA network ${req.value.network} (label ${TDMA_NETWORK_LABEL}=${node.labels[TDMA_NETWORK_LABEL] ?? 'absent'})`);
    } else {
      const networks = input.networks ?? [THESIS_TESTBED_NETWORK];
      const net = networks.find((n) => n.name === req.value.network);
      if (!net) fail(`TDMA network ${req.value.network} is not configured (known: ${networks.map((n) => n.name).join(', ')})`);
      else {
        const taken = existing.flatMap((p) => parseIntList(p.annotations[TDMA_SLOTS_ANNOTATION], `pod ${p.name}: ${TDMA_SLOTS_ANNOTATION}`, reasons) ?? []);
        const alloc = allocateSlots(net, taken, { slots: req.value.slots, maxGapUs: req.value.maxGapUs });
        if (alloc.ok) answer.slots = [...alloc.slots];
        else fail(`network ${net.name}: ${alloc.reason}`);
      }
    }
  }
  if (rt === undefined && tdmaRaw === undefined) reasons.push(`pod ${pod.name} has neither ${RT_ANNOTATION} nor ${TDMA_ANNOTATION}: no real-time constraint to check`);
  return answer;
}
