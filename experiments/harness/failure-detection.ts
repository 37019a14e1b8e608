/**
 * How the cluster found a frozen node by itself (failure frozen-node): the `detected` and `taint`
 * events of a repetition, from what the harness' Node and Event watches delivered after t = 0.
 * A pure function of those observations, so the definitions are testable without a cluster.
 *
 *  - detected: the first sign that something decided the node failed, the earlier of
 *    (a) the Node's Ready condition Unknown or False in a Node the watch delivered (kcm's node
 *        lifecycle controller sets it once the node-monitor grace period passed), at its arrival;
 *    (b) a `NodeFailureDetected` Event about the Node (the Ulysses controller manager's), at the time
 *        it reports: a MicroTime (series.lastObservedTime, eventTime) as it is, else its arrival
 *        (firstTimestamp and lastTimestamp count whole seconds only);
 *  - taint: the first failure-detection NoExecute taint on the node in a delivered Node, at its
 *    arrival: Ulysses' `ulysses.io/unreachable`, or kcm's `node.kubernetes.io/unreachable` /
 *    `node.kubernetes.io/not-ready`.
 * What was already so before t = 0 is no sign of this failure: an Event or condition transition or
 * taint whose own timestamp lies before t = 0's second (e.g. the previous repetition's Event
 * redelivered by a relist) is ignored, and so is anything that arrived before t = 0.
 */
import type { CoreV1Event, V1Node } from '@kubernetes/client-node';
import type { DetectionEventName } from './results.ts';
import { NODE_FAILURE_EVENTS, NODE_UNREACHABLE_TAINT } from '../../controller-manager/node-failure.ts';

/** The Ulysses controller manager's NoExecute taint of a node it found failed. */
export const ULYSSES_UNREACHABLE_TAINT = NODE_UNREACHABLE_TAINT;
/** The Event reason with which the Ulysses controller manager reports a node it found failed. */
export const NODE_FAILURE_DETECTED_REASON = NODE_FAILURE_EVENTS.detected;
/** NoExecute taints that mean "this node failed": Ulysses' and kcm's node lifecycle controller's. */
export const DETECTION_TAINTS = [ULYSSES_UNREACHABLE_TAINT, 'node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'] as const;

/** One object a watch delivered, with the epoch ms it arrived at. */
export type DetectionObservation = { atMs: number; node: V1Node } | { atMs: number; event: CoreV1Event };

/** Epoch ms of an API timestamp (the watches hand out JSON strings; client-node types say Date). */
const epochMs = (v: unknown): number | undefined => {
  if (v === undefined || v === null || v === '') return undefined;
  const t = new Date(v as string | Date).getTime();
  return Number.isNaN(t) ? undefined : t;
};

/** When a Node's object shows it failed (Ready Unknown/False), or undefined. */
function notReadyAt(n: V1Node, atMs: number, secondOfT0: number): number | undefined {
  const ready = n.status?.conditions?.find((c) => c.type === 'Ready');
  if (!ready || ready.status === 'True') return undefined;
  const since = epochMs(ready.lastTransitionTime);
  return since !== undefined && since < secondOfT0 ? undefined : atMs;
}

/** When a Node's object first carries a failure-detection NoExecute taint, or undefined. */
function taintedAt(n: V1Node, atMs: number, secondOfT0: number): number | undefined {
  const taint = (n.spec?.taints ?? []).find((t) => t.effect === 'NoExecute' && (DETECTION_TAINTS as readonly string[]).includes(t.key));
  if (!taint) return undefined;
  const added = epochMs(taint.timeAdded);
  return added !== undefined && added < secondOfT0 ? undefined : atMs;
}

/** When a NodeFailureDetected Event says it happened, or undefined when it is no such Event or older than t = 0. */
function reportedAt(e: CoreV1Event, atMs: number, t0Ms: number, secondOfT0: number): number | undefined {
  if (e.reason !== NODE_FAILURE_DETECTED_REASON || e.involvedObject?.kind !== 'Node') return undefined;
  const micro = epochMs(e.series?.lastObservedTime) ?? epochMs(e.eventTime);
  if (micro !== undefined) return micro >= t0Ms ? micro : undefined;
  const stamp = epochMs(e.lastTimestamp) ?? epochMs(e.firstTimestamp);
  return stamp !== undefined && stamp < secondOfT0 ? undefined : atMs;
}

/**
 * `detected` and `taint` of the nodes `nodes` (the failed ones), seconds after `t0Ms`, from the
 * watches' observations; null for what was not seen (yet).
 */
export function detectionEvents(observations: readonly DetectionObservation[], nodes: readonly string[], t0Ms: number): Record<DetectionEventName, number | null> {
  const secondOfT0 = Math.floor(t0Ms / 1000) * 1000;
  let detected: number | undefined;
  let taint: number | undefined;
  const earliest = (a: number | undefined, b: number | undefined) => (a === undefined ? b : b === undefined ? a : Math.min(a, b));
  for (const o of observations) {
    if (o.atMs < t0Ms) continue;
    if ('node' in o) {
      if (!nodes.includes(o.node.metadata?.name ?? '')) continue;
      detected = earliest(detected, notReadyAt(o.node, o.atMs, secondOfT0));
      taint = earliest(taint, taintedAt(o.node, o.atMs, secondOfT0));
    } else if (nodes.includes(o.event.involvedObject?.name ?? '')) {
      detected = earliest(detected, reportedAt(o.event, o.atMs, t0Ms, secondOfT0));
    }
  }
  const rel = (t: number | undefined) => (t === undefined ? null : (t - t0Ms) / 1000);
  return { detected: rel(detected), taint: rel(taint) };
}

/** The failure-detection taints (key:effect) a Node carries, any effect. */
export function detectionTaintsOf(n: V1Node): string[] {
  return (n.spec?.taints ?? []).filter((t) => (DETECTION_TAINTS as readonly string[]).includes(t.key)).map((t) => `${t.key}:${t.effect}`);
}
