/**
 * Deployment controller, behaviour as upstream pkg/controller/deployment (sync.go, rolling.go,
 * recreate.go, progress.go, util/deployment_util.go):
 *  - the ReplicaSet of the current template is `<deployment>-<hash>`, its template and selector
 *    carry the label `pod-template-hash=<hash>`; the hash is fnv32a of the template (+ the
 *    collisionCount) encoded with upstream's SafeEncodeString alphabet (the bytes hashed differ from
 *    Go's spew dump, so hashes differ from kcm's, the shape does not);
 *  - revisions: deployment.kubernetes.io/revision on the ReplicaSets (max of the old ones + 1 for
 *    the new one, revision-history when an old one is reused) and on the Deployment; desired-replicas
 *    and max-replicas annotations as upstream; ReplicaSets orphaned by the selector are adopted,
 *    owned ones that no longer match released;
 *  - RollingUpdate with maxSurge / maxUnavailable (int or percent, surge rounded up, unavailable
 *    down, both 0 -> unavailable 1), cleanup of unhealthy old replicas first; Recreate (old to 0,
 *    wait for their pods to be gone, then the new one); proportional scaling of a scaled Deployment
 *    during a rollout; paused; revisionHistoryLimit cleanup;
 *  - status: replicas, updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas,
 *    terminatingReplicas, observedGeneration, collisionCount, conditions Available and Progressing
 *    (NewReplicaSetCreated / FoundNewReplicaSet / ReplicaSetUpdated / NewReplicaSetAvailable /
 *    ProgressDeadlineExceeded / DeploymentPaused), with a requeue at the progress deadline.
 * What is ours (thesis §5.3.1): keys carry the Deployment's criticality (core/criticality.ts
 * deploymentCriticality: own label, template, pods of its ReplicaSets) as queue priority.
 */
import type { V1Deployment, V1DeploymentCondition, V1DeploymentStatus, V1OwnerReference, V1PodTemplateSpec, V1ReplicaSet } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { criticalityRank } from '../../core/criticality.ts';
import { PRIORITY_NONE, type Priority } from '../../core/priority.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../../core/events.ts';
import { ApiError, isConflict, isNotFound } from '../../core/kube.ts';
import { compileLabelSelector } from '../../core/labels.ts';
import { objectKey } from '../../core/objects.ts';
import { TerminalError, type ReconcileResult } from '../queue/index.ts';
import type { ControllerDeps } from './deps.ts';
import { claimObjects, controllerRef } from './claim.ts';
import { semanticEqual } from './semantic.ts';

export const POD_TEMPLATE_HASH_LABEL = 'pod-template-hash';
export const REVISION_ANNOTATION = 'deployment.kubernetes.io/revision';
export const REVISION_HISTORY_ANNOTATION = 'deployment.kubernetes.io/revision-history';
export const DESIRED_REPLICAS_ANNOTATION = 'deployment.kubernetes.io/desired-replicas';
export const MAX_REPLICAS_ANNOTATION = 'deployment.kubernetes.io/max-replicas';
/** annotations of the Deployment that are not copied to its ReplicaSets (upstream annotationsToSkip) */
const ANNOTATIONS_TO_SKIP = new Set([
  'kubectl.kubernetes.io/last-applied-configuration',
  REVISION_ANNOTATION,
  REVISION_HISTORY_ANNOTATION,
  DESIRED_REPLICAS_ANNOTATION,
  MAX_REPLICAS_ANNOTATION,
  'deprecated.deployment.rollback.to',
]);

// upstream condition reasons (util/deployment_util.go)
export const REASON = {
  newRSCreated: 'NewReplicaSetCreated',
  foundNewRS: 'FoundNewReplicaSet',
  rsUpdated: 'ReplicaSetUpdated',
  newRSAvailable: 'NewReplicaSetAvailable',
  timedOut: 'ProgressDeadlineExceeded',
  paused: 'DeploymentPaused',
  resumed: 'DeploymentResumed',
  failedRSCreate: 'ReplicaSetCreateError',
  minimumAvailable: 'MinimumReplicasAvailable',
  minimumUnavailable: 'MinimumReplicasUnavailable',
} as const;

// ---------------------------------------------------------------------------------------------
// Pure helpers (unit-tested)
// ---------------------------------------------------------------------------------------------

/** JSON with sorted keys, null/undefined members dropped: equal templates give equal text. */
export function canonicalJson(v: unknown): string {
  if (v === null || v === undefined) return 'null';
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== null && x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJson(x)}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

function fnv32a(bytes: Uint8Array, h = 0x811c9dc5): number {
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** upstream k8s.io/apimachinery/pkg/util/rand.SafeEncodeString (no vowels, no 0/1/3: no words, no confusion) */
export function safeEncodeString(s: string): string {
  const alphanums = 'bcdfghjklmnpqrstvwxz2456789';
  let out = '';
  for (const c of Buffer.from(s, 'utf8')) out += alphanums[c % alphanums.length];
  return out;
}

/** The pod-template-hash of a template (upstream controller.ComputeHash: fnv32a + collisionCount). */
export function computeHash(template: V1PodTemplateSpec | undefined, collisionCount?: number): string {
  let h = fnv32a(Buffer.from(canonicalJson(template ?? {}), 'utf8'));
  if (collisionCount !== undefined && collisionCount !== null) {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(collisionCount >>> 0);
    h = fnv32a(b, h);
  }
  return safeEncodeString(String(h));
}

function withoutHash(t: V1PodTemplateSpec | undefined): unknown {
  const c = structuredClone(t ?? {}) as V1PodTemplateSpec;
  if (c.metadata?.labels) {
    delete c.metadata.labels[POD_TEMPLATE_HASH_LABEL];
    if (Object.keys(c.metadata.labels).length === 0) delete c.metadata.labels;
  }
  if (c.metadata && Object.keys(c.metadata).length === 0) delete c.metadata;
  return c;
}

/** upstream EqualIgnoreHash: same template up to the pod-template-hash label. */
export function equalIgnoreHash(a: V1PodTemplateSpec | undefined, b: V1PodTemplateSpec | undefined): boolean {
  return canonicalJson(withoutHash(a)) === canonicalJson(withoutHash(b));
}

/**
 * upstream intstr.GetScaledValueFromIntOrPercent: an int, or "N%" of `total` rounded up or down.
 * Anything else is an error naming the field.
 */
export function scaledValue(v: number | string | undefined, total: number, roundUp: boolean, field: string): number {
  if (v === undefined || v === null) return 0;
  if (typeof v === 'number') {
    if (!Number.isInteger(v) || v < 0) throw new Error(`${field}: ${v} must be a non-negative integer or a percentage`);
    return v;
  }
  const m = /^(\d+)%$/.exec(v);
  if (!m) throw new Error(`${field}: invalid value ${JSON.stringify(v)}: must be an integer or a percentage like "25%"`);
  const x = (Number(m[1]) * total) / 100;
  return roundUp ? Math.ceil(x) : Math.floor(x);
}

const isRolling = (d: V1Deployment) => (d.spec?.strategy?.type ?? 'RollingUpdate') === 'RollingUpdate';
const replicasOf = (d: V1Deployment) => d.spec?.replicas ?? 1;
const rsReplicas = (rs: V1ReplicaSet | undefined) => rs?.spec?.replicas ?? 0;

/** upstream ResolveFenceposts: (maxSurge, maxUnavailable) for `desired` replicas. */
export function resolveFenceposts(d: V1Deployment, desired = replicasOf(d)): { surge: number; unavailable: number } {
  const ru = d.spec?.strategy?.rollingUpdate;
  const key = `Deployment ${objectKey(d)}`;
  const surge = scaledValue((ru?.maxSurge as number | string | undefined) ?? '25%', desired, true, `${key}: spec.strategy.rollingUpdate.maxSurge`);
  let unavailable = scaledValue((ru?.maxUnavailable as number | string | undefined) ?? '25%', desired, false, `${key}: spec.strategy.rollingUpdate.maxUnavailable`);
  if (surge === 0 && unavailable === 0) unavailable = 1;
  return { surge, unavailable };
}

/** upstream MaxUnavailable */
export function maxUnavailable(d: V1Deployment): number {
  if (!isRolling(d) || replicasOf(d) === 0) return 0;
  return Math.min(resolveFenceposts(d).unavailable, replicasOf(d));
}

/** upstream MaxSurge */
export function maxSurge(d: V1Deployment): number {
  return isRolling(d) ? resolveFenceposts(d).surge : 0;
}

/** upstream NewRSNewReplicas: how many replicas the new ReplicaSet may have now. */
export function newRSNewReplicas(d: V1Deployment, allRSs: V1ReplicaSet[], newRS: V1ReplicaSet): number {
  if (!isRolling(d)) return replicasOf(d);
  const current = allRSs.reduce((n, rs) => n + rsReplicas(rs), 0);
  const maxTotal = replicasOf(d) + maxSurge(d);
  if (current >= maxTotal) return rsReplicas(newRS);
  const up = Math.min(maxTotal - current, Math.max(0, replicasOf(d) - rsReplicas(newRS)));
  return rsReplicas(newRS) + up;
}

export function revisionOf(rs: V1ReplicaSet | V1Deployment | undefined): number {
  const v = Number(rs?.metadata?.annotations?.[REVISION_ANNOTATION] ?? 0);
  return Number.isFinite(v) ? v : 0;
}

const created = (rs: V1ReplicaSet) => new Date(rs.metadata?.creationTimestamp ?? 0).getTime();
/** upstream ReplicaSetsByCreationTimestamp (name as tie-break) */
export const byCreation = (a: V1ReplicaSet, b: V1ReplicaSet) => created(a) - created(b) || (a.metadata!.name! < b.metadata!.name! ? -1 : 1);

/**
 * upstream scale() proportional scaling: new sizes of the active ReplicaSets when the Deployment
 * is resized during a rollout (every RS grows/shrinks in proportion to its size, leftovers to the
 * largest). Returns name -> new size.
 */
export function proportionalSizes(d: V1Deployment, allRSs: V1ReplicaSet[]): Map<string, number> {
  const want = replicasOf(d);
  const allReplicas = allRSs.reduce((n, rs) => n + rsReplicas(rs), 0);
  const allowed = want + (want > 0 ? maxSurge(d) : 0);
  const toAdd = allowed - allReplicas;
  const sorted = [...allRSs].sort((a, b) => {
    // >0: ReplicaSetsBySizeNewer (largest first, newer first); <0: ReplicaSetsBySizeOlder
    if (rsReplicas(a) !== rsReplicas(b)) return rsReplicas(b) - rsReplicas(a);
    return toAdd > 0 ? created(b) - created(a) : created(a) - created(b);
  });
  const fraction = (rs: V1ReplicaSet) => {
    if (want === 0) return -rsReplicas(rs);
    const deploymentMax = want + maxSurge(d);
    const ann = Number(rs.metadata?.annotations?.[MAX_REPLICAS_ANNOTATION]);
    const annotated = Number.isInteger(ann) && ann > 0 ? ann : (d.status?.replicas ?? 0);
    if (annotated === 0) return 0;
    return Math.round((rsReplicas(rs) * deploymentMax) / annotated) - rsReplicas(rs);
  };
  const sizes = new Map<string, number>();
  let added = 0;
  for (const rs of sorted) {
    let p = 0;
    if (toAdd !== 0 && rsReplicas(rs) !== 0 && toAdd !== added) {
      const allowedLeft = toAdd - added;
      p = toAdd > 0 ? Math.min(fraction(rs), allowedLeft) : Math.max(fraction(rs), allowedLeft);
    }
    sizes.set(rs.metadata!.name!, rsReplicas(rs) + p);
    added += p;
  }
  if (toAdd !== 0 && sorted[0]) {
    const n = sorted[0].metadata!.name!;
    sizes.set(n, Math.max(0, sizes.get(n)! + toAdd - added));
  }
  return sizes;
}

/** upstream SetDeploymentCondition: keeps lastTransitionTime when the status did not change. */
/**
 * upstream reconcileOldReplicaSets as a plan: the new sizes of the old ReplicaSets of a rolling
 * update — cleanupUnhealthyReplicas (old replicas that are not available go first, within what the
 * new ReplicaSet's unavailable pods leave of maxUnavailable) then scaleDownOldReplicaSetsForRollingUpdate
 * (available old replicas beyond replicas - maxUnavailable, oldest ReplicaSet first). Only sizes that
 * change are returned.
 *
 * `staleStatus`: an old ReplicaSet reports more available replicas than its spec asks for — its status
 * is behind a scale-down (ours, just made: the ReplicaSet controller has not counted the deleted pod
 * yet). Upstream refuses that sync ("got invalid request to scale down"); so do we: cleanup would
 * otherwise compute a negative scale-down (a scale-UP of the old ReplicaSet, beyond maxSurge, e.g. 6
 * replicas for 4 + 1), and the availability counted from the stale status
 * would allow scaling down more than maxUnavailable. The ReplicaSet's status update syncs again.
 */
export function planOldReplicaSets(d: V1Deployment, oldRSs: readonly V1ReplicaSet[], newRS: V1ReplicaSet | undefined): { sizes: Map<string, number> } | { staleStatus: V1ReplicaSet } {
  const sizes = new Map<string, number>();
  const old = [...oldRSs].sort(byCreation);
  if (old.every((rs) => rsReplicas(rs) === 0)) return { sizes };
  const available = (rs: V1ReplicaSet | undefined) => rs?.status?.availableReplicas ?? 0;
  const allPods = [...old, ...(newRS ? [newRS] : [])].reduce((n, rs) => n + rsReplicas(rs), 0);
  const minAvailable = replicasOf(d) - maxUnavailable(d);
  const maxScaledDown = allPods - minAvailable - (rsReplicas(newRS) - available(newRS));
  if (maxScaledDown <= 0) return { sizes };
  const size = (rs: V1ReplicaSet) => sizes.get(rs.metadata!.name!) ?? rsReplicas(rs);
  // cleanupUnhealthyReplicas
  let cleaned = 0;
  for (const rs of old) {
    if (cleaned >= maxScaledDown) break;
    if (rsReplicas(rs) === 0 || rsReplicas(rs) === available(rs)) continue;
    if (available(rs) > rsReplicas(rs)) return { staleStatus: rs };
    const down = Math.min(maxScaledDown - cleaned, rsReplicas(rs) - available(rs));
    sizes.set(rs.metadata!.name!, rsReplicas(rs) - down);
    cleaned += down;
  }
  // scaleDownOldReplicaSetsForRollingUpdate
  const availableAll = [...old, ...(newRS ? [newRS] : [])].reduce((n, rs) => n + available(rs), 0);
  let done = 0;
  for (const rs of old) {
    if (done >= availableAll - minAvailable) break;
    if (size(rs) === 0) continue;
    const down = Math.min(size(rs), availableAll - minAvailable - done);
    sizes.set(rs.metadata!.name!, size(rs) - down);
    done += down;
  }
  return { sizes };
}

export function setCondition(status: V1DeploymentStatus, c: V1DeploymentCondition): void {
  const conds = status.conditions ?? [];
  const cur = conds.find((x) => x.type === c.type);
  if (cur && cur.status === c.status && cur.reason === c.reason) return;
  if (cur && cur.status === c.status) c.lastTransitionTime = cur.lastTransitionTime;
  status.conditions = [...conds.filter((x) => x.type !== c.type), c];
}

export function getCondition(status: V1DeploymentStatus | undefined, type: string): V1DeploymentCondition | undefined {
  return status?.conditions?.find((c) => c.type === type);
}

function condition(type: string, status: 'True' | 'False' | 'Unknown', reason: string, message: string, nowMs: number): V1DeploymentCondition {
  const t = new Date(Math.floor(nowMs / 1000) * 1000).toISOString() as never;
  return { type, status, reason, message, lastUpdateTime: t, lastTransitionTime: t };
}

/**
 * reflect.DeepEqual of two DeploymentStatus as upstream compares them before a write: the API omits
 * zero int32/int64 fields (replicas, readyReplicas, ...: not pointers in Go, so absent = 0) and
 * empty condition strings; times compare by instant. (terminatingReplicas and collisionCount are
 * pointers: absent differs from 0.) Treating an omitted 0 as a change would PUT an unchanged status
 * (a no-op for the API: no watch event follows) instead of requeueing at the progress deadline.
 */
export function deploymentStatusEqual(a: V1DeploymentStatus | undefined, b: V1DeploymentStatus | undefined): boolean {
  const norm = (s: V1DeploymentStatus | undefined) => ({
    ...s,
    observedGeneration: s?.observedGeneration ?? 0,
    replicas: s?.replicas ?? 0,
    updatedReplicas: s?.updatedReplicas ?? 0,
    readyReplicas: s?.readyReplicas ?? 0,
    availableReplicas: s?.availableReplicas ?? 0,
    unavailableReplicas: s?.unavailableReplicas ?? 0,
    conditions: (s?.conditions ?? []).map((c) => ({ ...c, reason: c.reason ?? '', message: c.message ?? '' })),
  });
  return semanticEqual(norm(a), norm(b));
}

/** upstream DeploymentComplete */
export function deploymentComplete(d: V1Deployment, s: V1DeploymentStatus): boolean {
  const want = replicasOf(d);
  return (s.updatedReplicas ?? 0) === want && (s.replicas ?? 0) === want && (s.availableReplicas ?? 0) === want && (s.observedGeneration ?? 0) >= (d.metadata?.generation ?? 0);
}

/** upstream DeploymentProgressing */
function deploymentProgressing(d: V1Deployment, s: V1DeploymentStatus): boolean {
  const old = d.status ?? {};
  const oldOld = (old.replicas ?? 0) - (old.updatedReplicas ?? 0);
  const newOld = (s.replicas ?? 0) - (s.updatedReplicas ?? 0);
  return (s.updatedReplicas ?? 0) > (old.updatedReplicas ?? 0) || newOld < oldOld || (s.readyReplicas ?? 0) > (old.readyReplicas ?? 0) || (s.availableReplicas ?? 0) > (old.availableReplicas ?? 0);
}

const hasProgressDeadline = (d: V1Deployment) => {
  const p = d.spec?.progressDeadlineSeconds;
  return p !== undefined && p !== null && p !== 2147483647;
};

// ---------------------------------------------------------------------------------------------
// Controller
// ---------------------------------------------------------------------------------------------

const rsBase = (ns: string) => `/apis/apps/v1/namespaces/${ns}/replicasets`;
const dPath = (ns: string, name: string) => `/apis/apps/v1/namespaces/${ns}/deployments/${name}`;
const asDeployment = (d: V1Deployment) => ({ apiVersion: 'apps/v1', kind: 'Deployment', metadata: d.metadata });

export class DeploymentController {
  private readonly now: () => number;
  private readonly events: ComponentEventRecorder;

  constructor(private readonly d: ControllerDeps) {
    this.now = d.now ?? Date.now;
    this.events = d.events ?? NO_EVENTS;
  }

  /** Priority of a Deployment key: its aggregated criticality (thesis §5.3). */
  priorityOf(dep: V1Deployment): Priority {
    const ns = dep.metadata?.namespace;
    return criticalityRank(this.d.criticality.deploymentCriticality(dep, this.d.informers.replicaSets.list().filter((rs) => rs.metadata?.namespace === ns)));
  }

  private enqueueDeployment(dep: V1Deployment, afterMs?: number): void {
    this.d.enqueue(objectKey(dep), this.priorityOf(dep), afterMs);
  }

  private ownerOf(rs: V1ReplicaSet): V1Deployment | undefined {
    const ref = controllerRef(rs.metadata);
    if (!ref || ref.kind !== 'Deployment') return undefined;
    const dep = this.d.informers.deployments.get(`${rs.metadata?.namespace}/${ref.name}`);
    return dep?.metadata?.uid === ref.uid ? dep : undefined;
  }

  /** Deployments of the RS's namespace whose selector matches it (for orphans, upstream getDeploymentsForReplicaSet). */
  private matching(rs: V1ReplicaSet): V1Deployment[] {
    return this.d.informers.deployments
      .list()
      .filter((dep) => dep.metadata?.namespace === rs.metadata?.namespace && compileLabelSelector(dep.spec?.selector).matches(rs.metadata?.labels ?? {}));
  }

  register(): void {
    const { deployments, replicaSets, pods } = this.d.informers;
    deployments.on('add', (dep) => this.enqueueDeployment(dep));
    deployments.on('update', (dep) => this.enqueueDeployment(dep));
    deployments.on('delete', (dep) => this.d.enqueue(objectKey(dep), PRIORITY_NONE));
    const onRs = (rs: V1ReplicaSet, old?: V1ReplicaSet) => {
      const owner = this.ownerOf(rs);
      const oldOwner = old && this.ownerOf(old);
      if (oldOwner && oldOwner.metadata?.uid !== owner?.metadata?.uid) this.enqueueDeployment(oldOwner);
      if (owner) return this.enqueueDeployment(owner);
      if (!controllerRef(rs.metadata) && !rs.metadata?.deletionTimestamp) for (const dep of this.matching(rs)) this.enqueueDeployment(dep);
    };
    replicaSets.on('add', (rs) => onRs(rs));
    replicaSets.on('update', onRs);
    replicaSets.on('delete', (rs) => {
      const owner = this.ownerOf(rs);
      if (owner) this.enqueueDeployment(owner);
    });
    // upstream deletePod: a Recreate rollout waits for the old pods to be gone
    pods.on('delete', (pod) => {
      const ref = controllerRef(pod.metadata);
      if (ref?.kind !== 'ReplicaSet') return;
      const rs = replicaSets.get(`${pod.metadata?.namespace}/${ref.name}`);
      const owner = rs && this.ownerOf(rs);
      if (owner && owner.spec?.strategy?.type === 'Recreate') this.enqueueDeployment(owner);
    });
  }

  /** syncDeployment */
  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const cached = this.d.informers.deployments.get(key);
    if (!cached) return;
    const dep = structuredClone(cached);
    const log = this.d.log.child({ deployment: key });
    const selector = compileLabelSelector(dep.spec?.selector);
    if (selector.error || !dep.spec?.selector || (!dep.spec.selector.matchLabels && !dep.spec.selector.matchExpressions)) {
      // upstream: "This deployment will select all pods. A non-empty selector is required."
      this.events.event(asDeployment(dep), 'Warning', 'SelectingAll', 'This deployment will select all pods. A non-empty selector is required.');
      if (dep.status?.observedGeneration !== dep.metadata?.generation) {
        await this.putStatus(dep, { ...dep.status, observedGeneration: dep.metadata?.generation });
      }
      return;
    }
    try {
      resolveFenceposts(dep);
    } catch (err) {
      throw new TerminalError((err as Error).message);
    }
    try {
      // upstream ClaimReplicaSets
      const rsList = await claimObjects({
        client: this.d.client,
        owner: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: dep.metadata },
        candidates: this.d.informers.replicaSets.list(),
        matches: selector.matches,
        path: (rs) => `${rsBase(rs.metadata!.namespace!)}/${rs.metadata!.name}`,
        ownerPath: dPath(dep.metadata!.namespace!, dep.metadata!.name!),
        noun: 'ReplicaSet',
        log,
      });
      if (dep.metadata?.deletionTimestamp) return await this.syncStatusOnly(dep, rsList);
      await this.checkPausedConditions(dep);
      if (dep.spec?.paused) return await this.sync(dep, rsList);
      if (this.isScalingEvent(dep, rsList)) return await this.sync(dep, rsList);
      return await (dep.spec?.strategy?.type === 'Recreate' ? this.rolloutRecreate(dep, rsList, log) : this.rolloutRolling(dep, rsList));
    } catch (err) {
      // our cache is behind a write (often our own): the watch event re-queues the key; the
      // requeue is only a fallback. Nothing was applied from the stale view (resourceVersion).
      if (!isConflict(err)) throw err;
      log.debug({ err: (err as Error).message }, 'conflict: cache behind the apiserver, syncing again');
      return { requeueAfterMs: 250 };
    }
  };

  // ------------------------------------------------------------------------- ReplicaSets

  /** upstream FindNewReplicaSet / FindOldReplicaSets */
  private split(dep: V1Deployment, rsList: V1ReplicaSet[]): { newRS?: V1ReplicaSet; oldRSs: V1ReplicaSet[] } {
    const sorted = [...rsList].sort(byCreation);
    const newRS = sorted.find((rs) => equalIgnoreHash(rs.spec?.template, dep.spec?.template));
    return { newRS, oldRSs: sorted.filter((rs) => rs !== newRS) };
  }

  /**
   * upstream getAllReplicaSetsAndSyncRevision + getNewReplicaSet: finds the new ReplicaSet, keeps its
   * annotations (revision, desired/max replicas) and the Deployment's revision in step, and creates
   * it when asked to and missing.
   */
  private async newAndOld(dep: V1Deployment, rsList: V1ReplicaSet[], create: boolean): Promise<{ newRS?: V1ReplicaSet; oldRSs: V1ReplicaSet[] }> {
    const { newRS: existing, oldRSs } = this.split(dep, rsList);
    const maxOld = oldRSs.reduce((m, rs) => Math.max(m, revisionOf(rs)), 0);
    const newRevision = String(maxOld + 1);
    const ns = dep.metadata!.namespace!;
    if (existing) {
      const rs = structuredClone(existing);
      const changed = this.setNewRSAnnotations(dep, rs, newRevision, true);
      const minReady = dep.spec?.minReadySeconds ?? 0;
      if (changed || (rs.spec!.minReadySeconds ?? 0) !== minReady) {
        rs.spec!.minReadySeconds = minReady;
        const updated = await this.d.client.put<V1ReplicaSet>(`${rsBase(ns)}/${rs.metadata!.name}`, rs);
        return { newRS: updated, oldRSs };
      }
      let needsUpdate = this.setDeploymentRevision(dep, rs.metadata?.annotations?.[REVISION_ANNOTATION] ?? newRevision);
      if (hasProgressDeadline(dep) && !getCondition(dep.status, 'Progressing')) {
        dep.status ??= {};
        setCondition(dep.status, condition('Progressing', 'True', REASON.foundNewRS, `Found new replica set "${rs.metadata!.name}"`, this.now()));
        needsUpdate = true;
      }
      if (needsUpdate) await this.putStatus(dep, dep.status ?? {});
      return { newRS: rs, oldRSs };
    }
    if (!create) return { oldRSs };
    const template = structuredClone(dep.spec!.template);
    const hash = computeHash(template, dep.status?.collisionCount);
    template.metadata = { ...template.metadata, labels: { ...template.metadata?.labels, [POD_TEMPLATE_HASH_LABEL]: hash } };
    const selector = structuredClone(dep.spec!.selector);
    selector.matchLabels = { ...selector.matchLabels, [POD_TEMPLATE_HASH_LABEL]: hash };
    const name = `${dep.metadata!.name}-${hash}`;
    const body: V1ReplicaSet = {
      apiVersion: 'apps/v1',
      kind: 'ReplicaSet',
      metadata: {
        name,
        namespace: ns,
        labels: template.metadata.labels,
        ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: dep.metadata!.name!, uid: dep.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
      },
      spec: { replicas: 0, minReadySeconds: dep.spec?.minReadySeconds ?? 0, selector, template },
    };
    body.spec!.replicas = newRSNewReplicas(dep, [...oldRSs, body], body);
    this.setNewRSAnnotations(dep, body, newRevision, false);
    let createdRS: V1ReplicaSet;
    let alreadyExists = false;
    try {
      createdRS = await this.d.client.post<V1ReplicaSet>(rsBase(ns), body);
    } catch (err) {
      if (err instanceof ApiError && err.statusCode === 409 && err.reason === 'AlreadyExists') {
        alreadyExists = true;
        const found = this.d.informers.replicaSets.get(`${ns}/${name}`) ?? (await this.d.client.get<V1ReplicaSet>(`${rsBase(ns)}/${name}`));
        const ref = controllerRef(found.metadata);
        if (ref?.uid === dep.metadata!.uid && equalIgnoreHash(found.spec?.template, dep.spec?.template)) {
          createdRS = found;
        } else {
          // a hash collision: bump collisionCount so the next sync computes another name
          const status = { ...dep.status, collisionCount: (dep.status?.collisionCount ?? 0) + 1 };
          await this.putStatus(dep, status);
          this.d.log.warn({ deployment: objectKey(dep), replicaset: name, collisionCount: status.collisionCount }, 'pod-template-hash collision');
          throw err;
        }
      } else {
        const msg = `Failed to create new replica set "${name}": ${(err as Error).message}`;
        if (hasProgressDeadline(dep)) {
          dep.status ??= {};
          setCondition(dep.status, condition('Progressing', 'False', REASON.failedRSCreate, msg, this.now()));
          await this.putStatus(dep, dep.status).catch(() => undefined);
        }
        this.events.event(asDeployment(dep), 'Warning', REASON.failedRSCreate, msg);
        throw err;
      }
    }
    if (!alreadyExists && rsReplicas(body) > 0) {
      this.events.event(asDeployment(dep), 'Normal', 'ScalingReplicaSet', `Scaled up replica set ${name} from 0 to ${rsReplicas(body)}`);
    }
    let needsUpdate = this.setDeploymentRevision(dep, newRevision);
    if (!alreadyExists && hasProgressDeadline(dep)) {
      dep.status ??= {};
      setCondition(dep.status, condition('Progressing', 'True', REASON.newRSCreated, `Created new replica set "${name}"`, this.now()));
      needsUpdate = true;
    }
    if (needsUpdate) dep.metadata!.resourceVersion = (await this.putStatus(dep, dep.status ?? {})).metadata?.resourceVersion;
    return { newRS: createdRS, oldRSs };
  }

  /** upstream SetNewReplicaSetAnnotations; true when something changed. */
  private setNewRSAnnotations(dep: V1Deployment, rs: V1ReplicaSet, newRevision: string, exists: boolean): boolean {
    const ann = (rs.metadata!.annotations ??= {});
    let changed = false;
    for (const [k, v] of Object.entries(dep.metadata?.annotations ?? {})) {
      if (ANNOTATIONS_TO_SKIP.has(k) || ann[k] === v) continue;
      ann[k] = v;
      changed = true;
    }
    const oldRevision = ann[REVISION_ANNOTATION];
    const oldN = Number(oldRevision ?? 0);
    const newN = Number(newRevision);
    if (oldN < newN) {
      ann[REVISION_ANNOTATION] = newRevision;
      changed = true;
      if (oldRevision !== undefined) {
        const hist = ann[REVISION_HISTORY_ANNOTATION];
        ann[REVISION_HISTORY_ANNOTATION] = hist ? `${hist},${oldRevision}` : oldRevision;
      }
    }
    if (!exists && this.setReplicasAnnotations(rs, replicasOf(dep), replicasOf(dep) + maxSurge(dep))) changed = true;
    return changed;
  }

  private setReplicasAnnotations(rs: V1ReplicaSet, desired: number, max: number): boolean {
    const ann = (rs.metadata!.annotations ??= {});
    if (ann[DESIRED_REPLICAS_ANNOTATION] === String(desired) && ann[MAX_REPLICAS_ANNOTATION] === String(max)) return false;
    ann[DESIRED_REPLICAS_ANNOTATION] = String(desired);
    ann[MAX_REPLICAS_ANNOTATION] = String(max);
    return true;
  }

  private setDeploymentRevision(dep: V1Deployment, revision: string): boolean {
    const ann = (dep.metadata!.annotations ??= {});
    if (ann[REVISION_ANNOTATION] === revision) return false;
    ann[REVISION_ANNOTATION] = revision;
    return true;
  }

  /** upstream scaleReplicaSet: size and desired/max annotations in one update, with an event. */
  private async scaleReplicaSet(rs: V1ReplicaSet, newScale: number, dep: V1Deployment): Promise<V1ReplicaSet> {
    const copy = structuredClone(rs);
    const sizeChanged = rsReplicas(rs) !== newScale;
    const annChanged = this.setReplicasAnnotations(copy, replicasOf(dep), replicasOf(dep) + maxSurge(dep));
    if (!sizeChanged && !annChanged) return rs;
    copy.spec!.replicas = newScale;
    const updated = await this.d.client.put<V1ReplicaSet>(`${rsBase(rs.metadata!.namespace!)}/${rs.metadata!.name}`, copy);
    if (sizeChanged) {
      const dir = newScale > rsReplicas(rs) ? 'up' : 'down';
      this.events.event(asDeployment(dep), 'Normal', 'ScalingReplicaSet', `Scaled ${dir} replica set ${rs.metadata!.name} from ${rsReplicas(rs)} to ${newScale}`);
    }
    return updated;
  }

  // ------------------------------------------------------------------------- strategies

  /** upstream rolloutRolling */
  private async rolloutRolling(dep: V1Deployment, rsList: V1ReplicaSet[]): Promise<ReconcileResult | void> {
    let { newRS, oldRSs } = await this.newAndOld(dep, rsList, true);
    const all = () => [...oldRSs, ...(newRS ? [newRS] : [])];
    // reconcileNewReplicaSet
    if (newRS && rsReplicas(newRS) !== replicasOf(dep)) {
      const target = rsReplicas(newRS) > replicasOf(dep) ? replicasOf(dep) : newRSNewReplicas(dep, all(), newRS);
      if (target !== rsReplicas(newRS)) {
        // upstream: any scaling of the new ReplicaSet ends this sync (the next one sees its effect)
        newRS = await this.scaleReplicaSet(newRS, target, dep);
        return this.syncRolloutStatus(dep, all(), newRS);
      }
    }
    // reconcileOldReplicaSets
    const scaledDown = await this.reconcileOldReplicaSets(dep, oldRSs, newRS);
    if ('staleStatus' in scaledDown) {
      const rs = scaledDown.staleStatus;
      this.d.log.debug({ deployment: objectKey(dep), replicaset: rs.metadata?.name, replicas: rsReplicas(rs), available: rs.status?.availableReplicas }, 'old ReplicaSet status behind its spec: waiting for it');
      return { requeueAfterMs: 1000 };
    }
    if (scaledDown.changed) {
      oldRSs = scaledDown.oldRSs;
      return this.syncRolloutStatus(dep, all(), newRS);
    }
    if (newRS && deploymentComplete(dep, this.calculateStatus(dep, all(), newRS))) await this.cleanupDeployment(dep, oldRSs);
    return this.syncRolloutStatus(dep, all(), newRS);
  }

  /** upstream reconcileOldReplicaSets ({@link planOldReplicaSets}), applied oldest ReplicaSet first. */
  private async reconcileOldReplicaSets(dep: V1Deployment, oldRSs: V1ReplicaSet[], newRS: V1ReplicaSet | undefined): Promise<{ changed: boolean; oldRSs: V1ReplicaSet[] } | { staleStatus: V1ReplicaSet }> {
    const plan = planOldReplicaSets(dep, oldRSs, newRS);
    if ('staleStatus' in plan) return plan;
    const out = [...oldRSs].sort(byCreation);
    for (let i = 0; i < out.length; i++) {
      const size = plan.sizes.get(out[i]!.metadata!.name!);
      if (size !== undefined) out[i] = await this.scaleReplicaSet(out[i]!, size, dep);
    }
    return { changed: plan.sizes.size > 0, oldRSs: out };
  }

  /** upstream rolloutRecreate */
  private async rolloutRecreate(dep: V1Deployment, rsList: V1ReplicaSet[], log: Logger): Promise<ReconcileResult | void> {
    let { newRS, oldRSs } = await this.newAndOld(dep, rsList, false);
    const all = () => [...oldRSs, ...(newRS ? [newRS] : [])];
    let scaled = false;
    oldRSs = await Promise.all(
      oldRSs.map(async (rs) => {
        if (rsReplicas(rs) === 0) return rs;
        scaled = true;
        return this.scaleReplicaSet(rs, 0, dep);
      }),
    );
    if (scaled) return this.syncRolloutStatus(dep, all(), newRS);
    // upstream oldPodsRunning: wait until no pod of an old ReplicaSet is running (or pending)
    const oldUids = new Set(oldRSs.map((rs) => rs.metadata!.uid));
    const running = this.d.informers.pods
      .list()
      .some((p) => p.metadata?.namespace === dep.metadata?.namespace && oldUids.has(controllerRef(p.metadata)?.uid) && p.status?.phase !== 'Failed' && p.status?.phase !== 'Succeeded');
    if (running || oldRSs.some((rs) => (rs.status?.replicas ?? 0) > 0)) {
      log.debug('recreate: waiting for the old pods to terminate');
      return this.syncRolloutStatus(dep, all(), newRS);
    }
    if (!newRS) ({ newRS, oldRSs } = await this.newAndOld(dep, [...oldRSs], true));
    if (newRS && rsReplicas(newRS) !== replicasOf(dep)) newRS = await this.scaleReplicaSet(newRS, replicasOf(dep), dep);
    if (newRS && deploymentComplete(dep, this.calculateStatus(dep, all(), newRS))) await this.cleanupDeployment(dep, oldRSs);
    return this.syncRolloutStatus(dep, all(), newRS);
  }

  /** upstream isScalingEvent: an active ReplicaSet's desired-replicas differs from spec.replicas. */
  private isScalingEvent(dep: V1Deployment, rsList: V1ReplicaSet[]): boolean {
    const { newRS, oldRSs } = this.split(dep, rsList);
    for (const rs of [...(newRS ? [newRS] : []), ...oldRSs]) {
      if (rsReplicas(rs) === 0) continue;
      const desired = rs.metadata?.annotations?.[DESIRED_REPLICAS_ANNOTATION];
      if (desired !== undefined && Number(desired) !== replicasOf(dep)) return true;
    }
    return false;
  }

  /** upstream sync: scaling (proportional during a rollout) and cleanup, no rollout. */
  private async sync(dep: V1Deployment, rsList: V1ReplicaSet[]): Promise<ReconcileResult | void> {
    const { newRS, oldRSs } = await this.newAndOld(dep, rsList, false);
    await this.scale(dep, newRS, oldRSs);
    if (dep.spec?.paused) await this.cleanupDeployment(dep, oldRSs);
    return this.syncStatusOnly(dep, [...oldRSs, ...(newRS ? [newRS] : [])], newRS);
  }

  private async scale(dep: V1Deployment, newRS: V1ReplicaSet | undefined, oldRSs: V1ReplicaSet[]): Promise<void> {
    const active = [...(newRS ? [newRS] : []), ...oldRSs].filter((rs) => rsReplicas(rs) > 0);
    // FindActiveOrLatest: one active RS (or none: the newest) takes spec.replicas
    if (active.length <= 1) {
      const target = active[0] ?? newRS ?? [...oldRSs].sort(byCreation).at(-1);
      if (target) await this.scaleReplicaSet(target, replicasOf(dep), dep);
      return;
    }
    // IsSaturated: the new RS has everything -> old ones to 0
    if (newRS && rsReplicas(newRS) === replicasOf(dep) && Number(newRS.metadata?.annotations?.[DESIRED_REPLICAS_ANNOTATION]) === replicasOf(dep) && (newRS.status?.availableReplicas ?? 0) === replicasOf(dep)) {
      for (const rs of oldRSs) if (rsReplicas(rs) > 0) await this.scaleReplicaSet(rs, 0, dep);
      return;
    }
    if (!isRolling(dep)) return;
    const all = [...(newRS ? [newRS] : []), ...oldRSs].filter((rs) => rsReplicas(rs) > 0);
    const sizes = proportionalSizes(dep, all);
    for (const rs of all) await this.scaleReplicaSet(rs, sizes.get(rs.metadata!.name!) ?? rsReplicas(rs), dep);
  }

  /** upstream cleanupDeployment: keep at most revisionHistoryLimit old, empty ReplicaSets. */
  private async cleanupDeployment(dep: V1Deployment, oldRSs: V1ReplicaSet[]): Promise<void> {
    const limit = dep.spec?.revisionHistoryLimit;
    if (limit === undefined || limit === null) return;
    const alive = oldRSs.filter((rs) => !rs.metadata?.deletionTimestamp);
    const diff = alive.length - limit;
    if (diff <= 0) return;
    const sorted = [...alive].sort((a, b) => revisionOf(a) - revisionOf(b) || byCreation(a, b));
    for (const rs of sorted.slice(0, diff)) {
      if ((rs.status?.replicas ?? 0) !== 0 || rsReplicas(rs) !== 0 || (rs.metadata?.generation ?? 0) > (rs.status?.observedGeneration ?? 0)) continue;
      try {
        await this.d.client.delete(`${rsBase(rs.metadata!.namespace!)}/${rs.metadata!.name}`, { preconditions: { uid: rs.metadata!.uid } });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }

  // ------------------------------------------------------------------------- status

  /** upstream calculateStatus */
  calculateStatus(dep: V1Deployment, allRSs: V1ReplicaSet[], newRS: V1ReplicaSet | undefined): V1DeploymentStatus {
    const sum = (f: (rs: V1ReplicaSet) => number | undefined) => allRSs.reduce((n, rs) => n + (f(rs) ?? 0), 0);
    const available = sum((rs) => rs.status?.availableReplicas);
    // upstream: unavailable = desired replicas of the ReplicaSets (spec, so pods that cannot be
    // created count) minus available; replicas = the ReplicaSets' actual pods (status)
    const desired = sum((rs) => rs.spec?.replicas);
    const status: V1DeploymentStatus = {
      observedGeneration: dep.metadata?.generation,
      replicas: sum((rs) => rs.status?.replicas),
      updatedReplicas: newRS?.status?.replicas ?? 0,
      readyReplicas: sum((rs) => rs.status?.readyReplicas),
      availableReplicas: available,
      unavailableReplicas: Math.max(0, desired - available),
      collisionCount: dep.status?.collisionCount,
      conditions: structuredClone(dep.status?.conditions ?? []),
    };
    if (allRSs.some((rs) => rs.status?.terminatingReplicas !== undefined && rs.status?.terminatingReplicas !== null)) {
      status.terminatingReplicas = sum((rs) => rs.status?.terminatingReplicas);
    }
    const now = this.now();
    if (available >= replicasOf(dep) - maxUnavailable(dep)) {
      setCondition(status, condition('Available', 'True', REASON.minimumAvailable, 'Deployment has minimum availability.', now));
    } else {
      setCondition(status, condition('Available', 'False', REASON.minimumUnavailable, 'Deployment does not have minimum availability.', now));
    }
    return status;
  }

  /** upstream syncDeploymentStatus (status without progress conditions) */
  private async syncStatusOnly(dep: V1Deployment, allRSs: V1ReplicaSet[], newRS?: V1ReplicaSet): Promise<void> {
    newRS ??= this.split(dep, allRSs).newRS;
    const status = this.calculateStatus(dep, allRSs, newRS);
    if (!deploymentStatusEqual(status, dep.status)) await this.putStatus(dep, status);
  }

  /** upstream syncRolloutStatus: status + Progressing condition, requeue at the progress deadline. */
  private async syncRolloutStatus(dep: V1Deployment, allRSs: V1ReplicaSet[], newRS: V1ReplicaSet | undefined): Promise<ReconcileResult | void> {
    const status = this.calculateStatus(dep, allRSs, newRS);
    const now = this.now();
    if (!hasProgressDeadline(dep)) status.conditions = (status.conditions ?? []).filter((c) => c.type !== 'Progressing');
    const cur = getCondition(dep.status, 'Progressing');
    const complete = status.replicas === status.updatedReplicas && cur?.reason === REASON.newRSAvailable;
    if (hasProgressDeadline(dep) && !complete) {
      const subject = newRS ? `ReplicaSet "${newRS.metadata!.name}"` : `Deployment "${dep.metadata!.name}"`;
      if (deploymentComplete(dep, status)) {
        setCondition(status, condition('Progressing', 'True', REASON.newRSAvailable, `${subject} has successfully progressed.`, now));
      } else if (deploymentProgressing(dep, status)) {
        const c = condition('Progressing', 'True', REASON.rsUpdated, `${subject} is progressing.`, now);
        if (cur?.status === 'True') c.lastTransitionTime = cur.lastTransitionTime;
        status.conditions = [...(status.conditions ?? []).filter((x) => x.type !== 'Progressing'), c];
      } else if (this.timedOut(dep, status)) {
        setCondition(status, condition('Progressing', 'False', REASON.timedOut, `${subject} has timed out progressing.`, now));
      }
    }
    // replica failure of a ReplicaSet surfaces on the Deployment (upstream getReplicaFailures)
    const failure = allRSs.flatMap((rs) => rs.status?.conditions ?? []).find((c) => c.type === 'ReplicaFailure' && c.status === 'True');
    if (failure) setCondition(status, { type: 'ReplicaFailure', status: 'True', reason: failure.reason, message: failure.message, lastTransitionTime: failure.lastTransitionTime, lastUpdateTime: failure.lastTransitionTime });
    else status.conditions = (status.conditions ?? []).filter((c) => c.type !== 'ReplicaFailure');
    if (!deploymentStatusEqual(status, dep.status)) {
      await this.putStatus(dep, status);
      return;
    }
    return this.requeueStuck(dep, status);
  }

  private timedOut(dep: V1Deployment, s: V1DeploymentStatus): boolean {
    const c = getCondition(s, 'Progressing');
    if (!c || c.reason === REASON.newRSAvailable) return false;
    if (c.reason === REASON.timedOut) return true;
    const from = new Date(c.lastUpdateTime ?? 0).getTime();
    return from + (dep.spec?.progressDeadlineSeconds ?? 600) * 1000 < this.now();
  }

  /** upstream requeueStuckDeployment: look again when the progress deadline passes. */
  private requeueStuck(dep: V1Deployment, s: V1DeploymentStatus): ReconcileResult | void {
    const c = getCondition(s, 'Progressing');
    if (!hasProgressDeadline(dep) || !c || c.reason === REASON.newRSAvailable || c.reason === REASON.timedOut || deploymentComplete(dep, s)) return;
    const after = new Date(c.lastUpdateTime ?? 0).getTime() + (dep.spec?.progressDeadlineSeconds ?? 600) * 1000 - this.now();
    return { requeueAfterMs: Math.max(1000, after + 1000) };
  }

  /** upstream checkPausedConditions */
  private async checkPausedConditions(dep: V1Deployment): Promise<void> {
    if (!hasProgressDeadline(dep)) return;
    const c = getCondition(dep.status, 'Progressing');
    if (c?.reason === REASON.timedOut) return;
    const paused = c?.reason === REASON.paused;
    let changed = false;
    dep.status ??= {};
    if (dep.spec?.paused && !paused) {
      setCondition(dep.status, condition('Progressing', 'Unknown', REASON.paused, 'Deployment is paused', this.now()));
      changed = true;
    } else if (!dep.spec?.paused && paused) {
      setCondition(dep.status, condition('Progressing', 'Unknown', REASON.resumed, 'Deployment is resumed', this.now()));
      changed = true;
    }
    if (changed) dep.metadata!.resourceVersion = (await this.putStatus(dep, dep.status)).metadata?.resourceVersion;
  }

  /** UpdateStatus (annotations travel with it, as upstream's revision sync relies on). */
  private async putStatus(dep: V1Deployment, status: V1DeploymentStatus): Promise<V1Deployment> {
    const body = { ...dep, apiVersion: 'apps/v1', kind: 'Deployment', status };
    const res = await this.d.client.put<V1Deployment>(`${dPath(dep.metadata!.namespace!, dep.metadata!.name!)}/status`, body);
    dep.status = res.status;
    dep.metadata = res.metadata;
    return res;
  }
}
