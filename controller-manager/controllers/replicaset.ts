/**
 * ReplicaSet controller, behaviour as upstream pkg/controller/replicaset/replica_set.go:
 * keep `spec.replicas` active pods per ReplicaSet (create from the template / delete the least
 * valuable ones), adopt matching orphans and release owned pods that no longer match, use
 * expectations so watch lag never creates duplicates, and publish status (replicas,
 * fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration).
 *
 * What is ours (thesis §5.3.1): every key carries the ReplicaSet's criticality (the highest of its
 * template and its pods, core/criticality.ts) as its queue priority, and the serving policy
 * (vanilla / multi-priority async / periodic) lives in the WorkerPool, not here.
 */
import type { V1OwnerReference, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { criticalityRank } from '../../core/criticality.ts';
import { PRIORITY_HIGH, type Priority } from '../../core/priority.ts';
import { isPodActive, isPodAvailable, isPodReady, objectKey, podReadyCondition } from '../../core/objects.ts';
import { isConflict, isNotFound } from '../../core/kube.ts';
import { compileLabelSelector } from '../../core/labels.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../../core/events.ts';
import { ControllerExpectations } from '../expectations.ts';
import { claimObjects, controllerRef } from './claim.ts';
import { isNamespaceTerminating, semanticEqual } from './semantic.ts';
import type { ReconcileResult } from '../queue/index.ts';
import type { ControllerDeps } from './deps.ts';

/** upstream: burstReplicas = 500 creations/deletions per sync */
export const BURST_REPLICAS = 500;
/** upstream: SlowStartInitialBatchSize */
const SLOW_START_INITIAL_BATCH = 1;
/** upstream: statusUpdateRetries */
const STATUS_UPDATE_RETRIES = 1;

const asReplicaSet = (rs: V1ReplicaSet) => ({ apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: rs.metadata });


export const POD_DELETION_COST_ANNOTATION = 'controller.kubernetes.io/pod-deletion-cost';

/** upstream GetDeletionCostFromPodAnnotations: an int32 in the annotation, 0 when absent or invalid. */
export function podDeletionCost(p: V1Pod): number {
  const v = p.metadata?.annotations?.[POD_DELETION_COST_ANNOTATION];
  if (v === undefined || !/^[+-]?\d+$/.test(v.trim())) return 0;
  const n = Number(v.trim());
  return n >= -(2 ** 31) && n <= 2 ** 31 - 1 ? n : 0;
}

const ms = (t: Date | string | undefined): number => (t ? new Date(t).getTime() || 0 : 0);
const PHASE_ORDINAL: Record<string, number> = { Pending: 0, Unknown: 1, Running: 2 };

/** upstream afterOrZero: a zero time is "less"; otherwise the later one is. */
const afterOrZero = (t1: number, t2: number) => (t1 === 0 || t2 === 0 ? t1 === 0 : t1 > t2);

/** upstream logarithmicRankDiff: difference of floor(log2(age in ns)); -1 for an age <= 0. */
function logRankDiff(t1: number, t2: number, now: number): number {
  const r = (t: number) => (now - t > 0 ? Math.floor(Math.log2((now - t) * 1e6)) : -1);
  return r(t1) - r(t2);
}

/** upstream maxContainerRestarts: max of the regular containers, max of the native sidecars. */
function maxRestarts(p: V1Pod): [number, number] {
  const regular = Math.max(0, ...(p.status?.containerStatuses ?? []).map((c) => c.restartCount ?? 0));
  const sidecars = new Set((p.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always').map((c) => c.name));
  const sidecar = Math.max(0, ...(p.status?.initContainerStatuses ?? []).filter((c) => sidecars.has(c.name)).map((c) => c.restartCount ?? 0));
  return [regular, sidecar];
}

const readyTime = (p: V1Pod) => (isPodReady(p) ? ms(podReadyCondition(p)?.lastTransitionTime) : 0);

/**
 * upstream ActivePodsWithRanks.Less (PodDeletionCost and LogarithmicScaleDown enabled, their
 * defaults): is pod `a` (with `rankA` related active pods on its node) deleted before `b`?
 * Unassigned < assigned; Pending < Unknown < Running; not ready < ready; lower
 * controller.kubernetes.io/pod-deletion-cost first; more related pods on the same node first;
 * ready for less time first (in power-of-two buckets of age, then by uid); higher max container
 * restarts first (regular, then native sidecars); newer first (buckets, then uid). `now` 0: exact
 * times instead of buckets.
 */
export function deletesBefore(a: V1Pod, rankA: number, b: V1Pod, rankB: number, now: number): boolean {
  const na = a.spec?.nodeName ?? '';
  const nb = b.spec?.nodeName ?? '';
  if (na !== nb && (na === '' || nb === '')) return na === '';
  const pa = PHASE_ORDINAL[a.status?.phase ?? ''] ?? 0;
  const pb = PHASE_ORDINAL[b.status?.phase ?? ''] ?? 0;
  if (pa !== pb) return pa < pb;
  if (isPodReady(a) !== isPodReady(b)) return !isPodReady(a);
  const ca = podDeletionCost(a);
  const cb = podDeletionCost(b);
  if (ca !== cb) return ca < cb;
  if (rankA !== rankB) return rankA > rankB;
  const uidLess = () => (a.metadata?.uid ?? '') < (b.metadata?.uid ?? '');
  const byTime = (t1: number, t2: number): boolean => {
    if (now === 0 || t1 === 0 || t2 === 0) return afterOrZero(t1, t2);
    const d = logRankDiff(t1, t2, now);
    return d === 0 ? uidLess() : d < 0;
  };
  if (isPodReady(a) && isPodReady(b)) {
    const ra = readyTime(a);
    const rb = readyTime(b);
    if (ra !== rb) return byTime(ra, rb);
  }
  const [ra, sa] = maxRestarts(a);
  const [rb, sb] = maxRestarts(b);
  if (ra !== rb) return ra > rb;
  if (sa !== sb) return sa > sb;
  const ta = ms(a.metadata?.creationTimestamp);
  const tb = ms(b.metadata?.creationTimestamp);
  if (ta !== tb) return byTime(ta, tb);
  return false;
}

/** Comparator of {@link deletesBefore} for pods without related-pod ranks and exact times. */
export function deletionRank(a: V1Pod, b: V1Pod): number {
  return deletesBefore(a, 0, b, 0, 0) ? -1 : deletesBefore(b, 0, a, 0, 0) ? 1 : 0;
}

/**
 * upstream getPodsToDelete + getPodsRankedByRelatedPodsOnSameNode: the `diff` pods of `active` to
 * delete; each pod's rank is the number of active `related` pods (pods of the ReplicaSets with the
 * same controller, this one included) on its node.
 */
export function podsToDelete(active: readonly V1Pod[], related: readonly V1Pod[], diff: number, now: number): V1Pod[] {
  if (diff >= active.length) return [...active];
  const onNode = new Map<string, number>();
  for (const p of related) if (isPodActive(p)) onNode.set(p.spec?.nodeName ?? '', (onNode.get(p.spec?.nodeName ?? '') ?? 0) + 1);
  const ranked = active.map((pod) => ({ pod, rank: onNode.get(pod.spec?.nodeName ?? '') ?? 0 }));
  ranked.sort((x, y) => (deletesBefore(x.pod, x.rank, y.pod, y.rank, now) ? -1 : deletesBefore(y.pod, y.rank, x.pod, x.rank, now) ? 1 : 0));
  return ranked.slice(0, diff).map((r) => r.pod);
}

const rsPath = (ns: string, name: string) => `/apis/apps/v1/namespaces/${ns}/replicasets/${name}`;
const podsPath = (ns: string) => `/api/v1/namespaces/${ns}/pods`;

export class ReplicaSetController {
  readonly expectations: ControllerExpectations;
  private readonly now: () => number;
  private readonly events: ComponentEventRecorder;

  constructor(private readonly d: ControllerDeps) {
    this.expectations = new ControllerExpectations(d.now);
    this.now = d.now ?? Date.now;
    this.events = d.events ?? NO_EVENTS;
  }

  /** Priority of a ReplicaSet key: its aggregated criticality. */
  priorityOf(rs: V1ReplicaSet): Priority {
    return criticalityRank(this.d.criticality.replicaSetCriticality(rs));
  }

  private enqueueRs(rs: V1ReplicaSet, afterMs?: number): void {
    this.d.enqueue(objectKey(rs), this.priorityOf(rs), afterMs);
  }

  /** The ReplicaSets in the pod's namespace whose selector matches it (for orphans). */
  private matchingReplicaSets(pod: V1Pod): V1ReplicaSet[] {
    return this.d.informers.replicaSets
      .list()
      .filter((rs) => rs.metadata?.namespace === pod.metadata?.namespace && compileLabelSelector(rs.spec?.selector).matches(pod.metadata?.labels ?? {}));
  }

  private ownerOf(pod: V1Pod): V1ReplicaSet | undefined {
    const ref = controllerRef(pod.metadata);
    if (!ref || ref.kind !== 'ReplicaSet') return undefined;
    const rs = this.d.informers.replicaSets.get(`${pod.metadata?.namespace}/${ref.name}`);
    return rs?.metadata?.uid === ref.uid ? rs : undefined;
  }

  /** Wires informer events to queue keys (upstream addPod/updatePod/deletePod/addRS/updateRS/deleteRS). */
  register(): void {
    const { pods, replicaSets } = this.d.informers;
    replicaSets.on('add', (rs) => this.enqueueRs(rs));
    replicaSets.on('update', (rs) => this.enqueueRs(rs));
    replicaSets.on('delete', (rs) => {
      this.expectations.delete(objectKey(rs));
      this.d.enqueue(objectKey(rs), this.priorityOf(rs));
    });
    pods.on('add', (pod) => {
      if (pod.metadata?.deletionTimestamp) return this.podDeleted(pod);
      const owner = this.ownerOf(pod);
      if (owner) {
        this.expectations.creationObserved(objectKey(owner));
        return this.enqueueRs(owner);
      }
      if (!controllerRef(pod.metadata)) for (const rs of this.matchingReplicaSets(pod)) this.enqueueRs(rs);
    });
    pods.on('update', (pod, old) => {
      if (pod.metadata?.deletionTimestamp && !old?.metadata?.deletionTimestamp) {
        // a graceful delete: count it now, as upstream does, so a replacement is created at once
        this.podDeleted(pod);
        return;
      }
      const owner = this.ownerOf(pod);
      const oldOwner = old && this.ownerOf(old);
      if (oldOwner && oldOwner.metadata?.uid !== owner?.metadata?.uid) this.enqueueRs(oldOwner);
      if (owner) {
        this.enqueueRs(owner);
        // becomes available only after minReadySeconds: look again then
        const minReady = owner.spec?.minReadySeconds ?? 0;
        if (minReady > 0 && !isPodReady(old ?? pod) && isPodReady(pod)) this.enqueueRs(owner, minReady * 1000 + 1000);
        return;
      }
      if (!controllerRef(pod.metadata)) for (const rs of this.matchingReplicaSets(pod)) this.enqueueRs(rs);
    });
    pods.on('delete', (pod) => this.podDeleted(pod));
  }

  private podDeleted(pod: V1Pod): void {
    const owner = this.ownerOf(pod);
    if (!owner) return;
    this.expectations.deletionObserved(objectKey(owner), objectKey(pod));
    this.enqueueRs(owner);
  }

  /** syncReplicaSet */
  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const rs = this.d.informers.replicaSets.get(key);
    if (!rs) {
      this.expectations.delete(key);
      return;
    }
    const ns = rs.metadata!.namespace!;
    const log = this.d.log.child({ replicaset: key });
    const needsSync = this.expectations.satisfied(key);
    const selector = compileLabelSelector(rs.spec?.selector);
    if (selector.error) {
      log.error({ err: selector.error }, 'invalid selector: not syncing');
      return;
    }
    // upstream ClaimPods
    const pods = await claimObjects({
      client: this.d.client,
      owner: asReplicaSet(rs),
      candidates: this.d.informers.pods.list(),
      matches: selector.matches,
      path: (p) => `${podsPath(p.metadata!.namespace!)}/${p.metadata!.name}`,
      ownerPath: `/apis/apps/v1/namespaces/${ns}/replicasets/${rs.metadata!.name}`,
      noun: 'pod',
      canAdopt: isPodActive,
      log,
    });
    const active = pods.filter(isPodActive);
    let manageError: unknown;
    if (needsSync && !rs.metadata?.deletionTimestamp) {
      try {
        await this.manageReplicas(rs, active, log);
      } catch (err) {
        manageError = err;
      }
    }
    const requeue = await this.updateStatus(rs, active, pods, manageError);
    if (manageError) throw manageError;
    return requeue;
  };

  private async manageReplicas(rs: V1ReplicaSet, active: V1Pod[], log: Logger): Promise<void> {
    const key = objectKey(rs);
    const want = rs.spec?.replicas ?? 1;
    const diff = active.length - want;
    if (diff < 0) {
      const n = Math.min(-diff, BURST_REPLICAS);
      this.expectations.expectCreations(key, n);
      log.info({ creating: n, want, have: active.length }, 'too few replicas');
      // slow start (upstream slowStartBatch): 1, 2, 4, ... so a failing template does not flood the apiserver
      let remaining = n;
      let batch = Math.min(remaining, SLOW_START_INITIAL_BATCH);
      let failure: unknown;
      while (remaining > 0 && !failure) {
        const results = await Promise.allSettled(Array.from({ length: batch }, () => this.createPod(rs)));
        for (const r of results) {
          if (r.status === 'rejected') {
            failure ??= r.reason;
            this.expectations.creationObserved(key);
          }
        }
        remaining -= batch;
        batch = Math.min(2 * batch, remaining);
      }
      // creations never attempted after a failure will never be observed
      for (let i = 0; i < remaining; i++) this.expectations.creationObserved(key);
      if (failure) throw failure;
    } else if (diff > 0) {
      const n = Math.min(diff, BURST_REPLICAS);
      const victims = podsToDelete(active, this.relatedPods(rs), n, this.now());
      this.expectations.expectDeletions(key, victims.map(objectKey));
      log.info({ deleting: n, want, have: active.length }, 'too many replicas');
      let failure: unknown;
      await Promise.all(
        victims.map(async (p) => {
          try {
            await this.d.client.delete(`${podsPath(p.metadata!.namespace!)}/${p.metadata!.name}`);
            this.events.event(asReplicaSet(rs), 'Normal', 'SuccessfulDelete', `Deleted pod: ${p.metadata!.name}`);
          } catch (err) {
            this.expectations.deletionObserved(key, objectKey(p));
            if (!isNotFound(err)) {
              failure ??= err;
              this.events.event(asReplicaSet(rs), 'Warning', 'FailedDelete', `Error deleting: ${(err as Error).message}`);
            }
          }
        }),
      );
      if (failure) throw failure;
    }
  }

  /** upstream getIndirectlyRelatedPods: the pods of every ReplicaSet with the same controller as `rs` (none without one). */
  private relatedPods(rs: V1ReplicaSet): V1Pod[] {
    const ref = controllerRef(rs.metadata);
    if (!ref) return [];
    const ns = rs.metadata?.namespace;
    const uids = new Set(this.d.informers.replicaSets.list().filter((x) => x.metadata?.namespace === ns && controllerRef(x.metadata)?.uid === ref.uid).map((x) => x.metadata!.uid));
    return this.d.informers.pods.list().filter((p) => p.metadata?.namespace === ns && uids.has(controllerRef(p.metadata)?.uid));
  }

  private async createPod(rs: V1ReplicaSet): Promise<void> {
    const t = rs.spec!.template!;
    const body: V1Pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {
        generateName: `${rs.metadata!.name}-`,
        namespace: rs.metadata!.namespace,
        labels: t.metadata?.labels,
        annotations: t.metadata?.annotations,
        finalizers: t.metadata?.finalizers,
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: rs.metadata!.name!, uid: rs.metadata!.uid!, controller: true, blockOwnerDeletion: true },
        ],
      },
      spec: t.spec,
    };
    try {
      // a critical pod's replacement: the write its failover waits for (core/critical-writes.ts)
      const created = await this.d.client.post<V1Pod>(podsPath(rs.metadata!.namespace!), body, { critical: this.priorityOf(rs) === PRIORITY_HIGH });
      this.events.event(asReplicaSet(rs), 'Normal', 'SuccessfulCreate', `Created pod: ${created.metadata?.name}`);
    } catch (err) {
      // upstream: creations in a terminating namespace keep failing: no event, no error, no retry
      if (isNamespaceTerminating(err)) return;
      this.events.event(asReplicaSet(rs), 'Warning', 'FailedCreate', `Error creating: ${(err as Error).message}`);
      throw err;
    }
  }

  /** calculateStatus + updateReplicaSetStatus; returns a requeue for pods not yet available. */
  private async updateStatus(rs: V1ReplicaSet, active: V1Pod[], all: V1Pod[], manageError: unknown): Promise<ReconcileResult | void> {
    const now = this.now();
    const templateLabels = rs.spec?.template?.metadata?.labels ?? {};
    const minReady = rs.spec?.minReadySeconds ?? 0;
    const fullyLabeled = active.filter((p) => Object.entries(templateLabels).every(([k, v]) => p.metadata?.labels?.[k] === v)).length;
    const ready = active.filter(isPodReady);
    const available = active.filter((p) => isPodAvailable(p, minReady, now)).length;
    const terminating = all.filter((p) => p.metadata?.deletionTimestamp && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed').length;
    // upstream calculateStatus: a ReplicaFailure condition is added when manageReplicas fails and
    // there is none, removed when it succeeds, and otherwise left as it is (no write per retry)
    let conditions = [...(rs.status?.conditions ?? [])];
    const failure = conditions.find((c) => c.type === 'ReplicaFailure');
    if (manageError && !failure) {
      const diff = active.length - (rs.spec?.replicas ?? 1);
      conditions.push({
        type: 'ReplicaFailure',
        status: 'True',
        reason: diff < 0 ? 'FailedCreate' : diff > 0 ? 'FailedDelete' : '',
        message: (manageError as Error).message,
        lastTransitionTime: new Date(Math.floor(now / 1000) * 1000).toISOString() as never,
      });
    } else if (!manageError && failure) {
      conditions = conditions.filter((c) => c.type !== 'ReplicaFailure');
    }
    const status = {
      replicas: active.length,
      fullyLabeledReplicas: fullyLabeled,
      readyReplicas: ready.length,
      availableReplicas: available,
      terminatingReplicas: terminating,
      observedGeneration: rs.metadata?.generation,
      conditions: conditions.length ? conditions : undefined,
    };
    const cur: NonNullable<V1ReplicaSet["status"]> = rs.status ?? { replicas: 0 };
    const same =
      cur.replicas === status.replicas &&
      (cur.fullyLabeledReplicas ?? 0) === status.fullyLabeledReplicas &&
      (cur.readyReplicas ?? 0) === status.readyReplicas &&
      (cur.availableReplicas ?? 0) === status.availableReplicas &&
      (cur.terminatingReplicas ?? 0) === status.terminatingReplicas &&
      cur.observedGeneration === status.observedGeneration &&
      semanticEqual(cur.conditions ?? [], status.conditions ?? []);
    if (!same) {
      // upstream updateReplicaSetStatus: on a conflict, fetch the latest object and retry once
      const path = `${rsPath(rs.metadata!.namespace!, rs.metadata!.name!)}/status`;
      let target: V1ReplicaSet = rs;
      for (let attempt = 0; ; attempt++) {
        try {
          await this.d.client.put(path, { ...target, status });
          break;
        } catch (err) {
          if (isNotFound(err)) return;
          if (!isConflict(err) || attempt >= STATUS_UPDATE_RETRIES) throw err;
          try {
            target = await this.d.client.get<V1ReplicaSet>(rsPath(rs.metadata!.namespace!, rs.metadata!.name!));
          } catch (getErr) {
            if (isNotFound(getErr)) return;
            throw getErr;
          }
        }
      }
    }
    if (minReady > 0 && ready.length > available) return { requeueAfterMs: minReady * 1000 };
  }
}
