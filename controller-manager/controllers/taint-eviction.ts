/**
 * Taint eviction controller, behaviour as upstream pkg/controller/tainteviction: a pod bound to a
 * node with NoExecute taints it does not tolerate is deleted at once; if it tolerates them all for
 * a limited time, it is deleted when the smallest tolerationSeconds of the tolerations used (the
 * first matching one per taint) has passed since the event that exposed it was handled (a per-pod
 * clock, stopped when the taints go away, so a taint removed and re-added starts it again); before deleting, the pod gets the DisruptionTarget condition (reason
 * DeletionByTaintManager). What is ours: pod keys are queued with the pod's criticality, so in the
 * multi-priority modes critical pods are evicted (and thus respawned) first (thesis §5.3.1).
 */
import type { V1Node, V1Pod, V1Taint, V1Toleration } from '@kubernetes/client-node';
import { criticalityRank, podCriticality } from '../../core/criticality.ts';
import { objectKey } from '../../core/objects.ts';
import { isNotFound } from '../../core/kube.ts';
import { NO_EVENTS } from '../../core/events.ts';
import { criticalWrites } from '../../core/critical-writes.ts';
import { controllerRef } from './claim.ts';
import type { ReconcileResult } from '../queue/index.ts';
import type { ControllerDeps } from './deps.ts';
import { NODE_UNREACHABLE_TAINT, type NodeFailureScope } from '../node-failure.ts';

/** upstream v1helper.TolerationsTolerateTaint / Toleration.ToleratesTaint */
export function toleratesTaint(t: V1Toleration, taint: V1Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.key && t.key !== taint.key) return false;
  switch (t.operator ?? 'Equal') {
    case 'Exists':
      return true;
    case 'Equal':
      return !!t.key && (t.value ?? '') === (taint.value ?? '');
    default:
      return false;
  }
}

/**
 * What to do with a pod on a node carrying `taints` (upstream processPodOnNode): 'evict' now, keep
 * 'forever', or keep for `afterMs`. The tolerations used are, per NoExecute taint, the FIRST
 * toleration that tolerates it (upstream GetMatchingTolerations); the delay is the minimum
 * tolerationSeconds among them, a non-positive one meaning at once (upstream getMinTolerationTime).
 */
export function evictionDecision(tolerations: V1Toleration[] | undefined, taints: V1Taint[] | undefined): { action: 'evict' | 'keep' } | { action: 'after'; afterMs: number } {
  const noExecute = (taints ?? []).filter((t) => t.effect === 'NoExecute');
  if (noExecute.length === 0) return { action: 'keep' };
  let min = Infinity;
  for (const taint of noExecute) {
    const used = (tolerations ?? []).find((t) => toleratesTaint(t, taint));
    if (!used) return { action: 'evict' };
    if (used.tolerationSeconds !== undefined && used.tolerationSeconds !== null) {
      if (used.tolerationSeconds <= 0) return { action: 'evict' };
      min = Math.min(min, used.tolerationSeconds);
    }
  }
  if (min === Infinity) return { action: 'keep' };
  return { action: 'after', afterMs: min * 1000 };
}

/**
 * The taints of `taints` that apply to `pod`: all of them, except Ulysses' node-failure taint
 * (node-failure.ts), which applies only to pods in its scope (`critical`: criticality high) and
 * never to DaemonSet or mirror pods (they belong to their node and cannot fail over); the other
 * pods of a failed node follow stock Kubernetes (kcm's node.kubernetes.io/unreachable later).
 */
export function applicableTaints(pod: V1Pod, taints: V1Taint[] | undefined, scope: NodeFailureScope): V1Taint[] | undefined {
  if (!taints?.some((t) => t.key === NODE_UNREACHABLE_TAINT)) return taints;
  const nodeBound = pod.metadata?.ownerReferences?.some((o) => o.kind === 'DaemonSet' && o.controller) || pod.metadata?.annotations?.['kubernetes.io/config.mirror'] !== undefined;
  const inScope = !nodeBound && (scope === 'all' || podCriticality(pod).level === 'high');
  return inScope ? taints : taints.filter((t) => t.key !== NODE_UNREACHABLE_TAINT);
}

/** What the taint-eviction controller tells the manager's CriticalPathHold (critical-path-hold.ts). */
export interface CriticalPathSignals {
  /**
   * A high-criticality pod is about to be evicted (called when it is queued for an immediate
   * eviction, and again right before the eviction): the manager's CriticalPathHold starts holding the
   * low-priority work from here, not only once the pod's deletion comes back through the watch.
   */
  onCriticalEviction?: (pod: V1Pod) => void;
  /** A node got a new NoExecute taint (before its pods are queued): the CriticalPathHold's taint window. */
  onNoExecuteTaint?: (node: V1Node) => void;
  /** Pods the node-failure taint applies to (default critical). */
  nodeFailureScope?: () => NodeFailureScope;
}

export class TaintEvictionController {
  /** when each pod was first seen on a node with NoExecute taints it tolerates only for a while */
  private readonly exposedSince = new Map<string, number>();
  /** when each node's newest NoExecute taint was seen (for the eviction log's `sinceTaintMs`) */
  private readonly taintSeen = new Map<string, number>();
  private readonly now: () => number;

  constructor(
    private readonly d: ControllerDeps,
    private readonly signals: CriticalPathSignals = {},
  ) {
    this.now = d.now ?? Date.now;
  }

  /** evictionDecision for pod `p` on `node`, with the taints that apply to it. */
  private decide(p: V1Pod, node: V1Node | undefined) {
    return evictionDecision(p.spec?.tolerations, applicableTaints(p, node?.spec?.taints, this.signals.nodeFailureScope?.() ?? 'critical'));
  }

  /** Queues pod `p` of tainted node `node`; a high pod due for eviction now starts the CriticalPathHold. */
  private enqueuePod(p: V1Pod, node: V1Node): void {
    const level = podCriticality(p).level;
    if (level === 'high' && this.signals.onCriticalEviction && !p.metadata?.deletionTimestamp && this.decide(p, node).action === 'evict') {
      this.signals.onCriticalEviction(p);
    }
    this.d.enqueue(objectKey(p), criticalityRank(level));
  }

  /**
   * Starts or stops the toleration clock of pod `p` when an event about it or its node is handled
   * (upstream processPodOnNode: a timed eviction is scheduled from now, an existing one keeps its
   * start while the pod stays exposed, and it is cancelled when the taints no longer call for one).
   */
  private track(p: V1Pod, node: V1Node | undefined): void {
    const key = objectKey(p);
    if (p.metadata?.deletionTimestamp || this.decide(p, node).action !== 'after') this.exposedSince.delete(key);
    else if (!this.exposedSince.has(key)) this.exposedSince.set(key, this.now());
  }

  register(): void {
    const { pods, nodes } = this.d.informers;
    const onPod = (p: V1Pod, old?: V1Pod) => {
      if (!p.spec?.nodeName) return;
      if (old && old.spec?.nodeName === p.spec.nodeName && JSON.stringify(old.spec?.tolerations) === JSON.stringify(p.spec.tolerations)) return;
      const node = nodes.get(p.spec.nodeName);
      this.track(p, node);
      if (node?.spec?.taints?.some((t) => t.effect === 'NoExecute')) this.enqueuePod(p, node);
    };
    pods.on('add', (p) => onPod(p));
    pods.on('update', onPod);
    pods.on('delete', (p) => this.exposedSince.delete(objectKey(p)));
    const onNode = (n: V1Node, old?: V1Node) => {
      const noExec = (x?: V1Node) => (x?.spec?.taints ?? []).filter((t) => t.effect === 'NoExecute').map((t) => `${t.key}=${t.value ?? ''}`);
      const now = noExec(n);
      const before = old ? noExec(old) : undefined;
      if (before && before.join('\n') === now.join('\n')) return;
      // a running node that just got a new NoExecute taint: a failure (burst) begins
      if (before && now.some((t) => !before.includes(t))) {
        this.taintSeen.set(n.metadata!.name!, this.now());
        this.signals.onNoExecuteTaint?.(n);
      }
      if (!now.length) this.taintSeen.delete(n.metadata!.name!);
      // every pod on the node, highest criticality first (the queue orders them in the priority modes)
      for (const p of this.d.criticality.podsOnNode(n.metadata!.name!)) {
        const pod = pods.get(p.key);
        if (!pod) continue;
        this.track(pod, n);
        this.enqueuePod(pod, n);
      }
    };
    nodes.on('add', (n) => onNode(n));
    nodes.on('update', onNode);
    nodes.on('delete', (n) => this.taintSeen.delete(n.metadata!.name!));
  }

  /** After the informers synced: pods already exposed when we started (events may have raced). */
  afterSync(): void {
    for (const n of this.d.informers.nodes.list()) {
      if (!n.spec?.taints?.some((t) => t.effect === 'NoExecute')) continue;
      for (const p of this.d.criticality.podsOnNode(n.metadata!.name!)) {
        const pod = this.d.informers.pods.get(p.key);
        if (!pod) continue;
        this.track(pod, n);
        this.enqueuePod(pod, n);
      }
    }
  }

  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const pod = this.d.informers.pods.get(key);
    if (!pod || pod.metadata?.deletionTimestamp || !pod.spec?.nodeName) {
      this.exposedSince.delete(key);
      return;
    }
    const node = this.d.informers.nodes.get(pod.spec.nodeName);
    const decision = this.decide(pod, node);
    if (decision.action === 'keep') {
      this.exposedSince.delete(key);
      return;
    }
    if (decision.action === 'after') {
      const since = this.exposedSince.get(key) ?? this.now();
      this.exposedSince.set(key, since);
      const remaining = since + decision.afterMs - this.now();
      if (remaining > 0) return { requeueAfterMs: remaining };
    }
    if (podCriticality(pod).level === 'high') this.signals.onCriticalEviction?.(pod);
    await this.evict(pod, node);
    this.exposedSince.delete(key);
  };

  private async evict(pod: V1Pod, node: V1Node | undefined): Promise<void> {
    const ns = pod.metadata!.namespace!;
    const name = pod.metadata!.name!;
    const log = this.d.log.child({ pod: `${ns}/${name}`, node: pod.spec?.nodeName });
    const started = this.now();
    const seen = this.taintSeen.get(pod.spec?.nodeName ?? '');
    // a critical pod's eviction is a critical write (core/critical-writes.ts): the process' other writes wait for it
    const critical = podCriticality(pod).level === 'high';
    try {
      // upstream addConditionAndDeletePod: DisruptionTarget first, then delete
      await this.d.client.request('PATCH', `/api/v1/namespaces/${ns}/pods/${name}/status`, {
        body: {
          status: {
            conditions: [
              {
                type: 'DisruptionTarget',
                status: 'True',
                reason: 'DeletionByTaintManager',
                message: 'Taint manager: deleting due to NoExecute taint',
                lastTransitionTime: new Date(this.now()).toISOString(),
              },
            ],
          },
        },
        contentType: 'application/strategic-merge-patch+json',
        critical,
      });
      const patched = this.now();
      const deleted = await this.d.client.delete<V1Pod | undefined>(`/api/v1/namespaces/${ns}/pods/${name}`, { preconditions: { uid: pod.metadata!.uid } }, { critical });
      // a critical pod: the controllers act on the DELETE's response (the pod marked for deletion)
      // instead of waiting for the watch; the ReplicaSet controller creates the replacement now
      // (core/informer.ts observeDeletion says why that is safe)
      if (critical && deleted?.kind === 'Pod') {
        // the replacement's create is the next critical write: what the deletion sets off waits for it
        if (controllerRef(pod.metadata)?.kind === 'ReplicaSet') criticalWrites.expect();
        this.d.informers.pods.observeDeletion(deleted);
      }
      // where a failover's first step spends its time: since the taint was seen, and per API call
      const timing = { sinceTaintMs: seen === undefined ? undefined : started - seen, patchMs: patched - started, deleteMs: this.now() - patched };
      log.info(timing, 'evicted pod from a node with an untolerated NoExecute taint');
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    // upstream emits this when it marks the pod for deletion, before the API calls; here it follows
    // them, so that the Event's write never goes out ahead of the eviction
    (this.d.events ?? NO_EVENTS).event({ apiVersion: 'v1', kind: 'Pod', metadata: pod.metadata }, 'Normal', 'TaintManagerEviction', `Marking for deletion Pod ${ns}/${name}`);
    // the node-failure taint: say why the default 300 s tolerations did not keep the pod
    if (applicableTaints(pod, node?.spec?.taints, this.signals.nodeFailureScope?.() ?? 'critical')?.some((t) => t.key === NODE_UNREACHABLE_TAINT))
      (this.d.events ?? NO_EVENTS).event(
        { apiVersion: 'v1', kind: 'Pod', metadata: pod.metadata },
        'Warning',
        'NodeFailureEviction',
        `node ${pod.spec?.nodeName} failed (its agent and kubelet are silent, see the Node's NodeFailureDetected Event): evicted under ${NODE_UNREACHABLE_TAINT}, which the 300 s default tolerations (for node.kubernetes.io/unreachable) do not cover`,
      );
  }
}
