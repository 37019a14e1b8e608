/**
 * Criticality: the one shared notion of "how critical is this resource", used as queue priority by
 * the controllers, as sort key by the scheduler extender and as pacing class by the CRI proxy.
 *
 * Thesis §3.1: applications, services and pods have a criticality level in {NO, LOW, HI}.
 * Thesis §5.3: "each resource instance has a priority level, which can either be defined in the
 * manifest file used to create it or inherited from related resource instances following the rule
 * defined by an aggregation policy ... the ReplicaSet priority [is] the highest priority of its Pods."
 *
 * Declaration: the label `ulysses.io/criticality` with a value of exactly `none`, `low` or `high`
 * (case-sensitive, not trimmed). A malformed value never throws: it counts as `none` and is reported
 * as a {@link CriticalityError}. Optionally, a pod without the label whose `spec.priority` reaches a
 * threshold (its PriorityClass value) is `high`.
 *
 * Aggregation (the same "highest of the related pods" rule, applied to every key a controller queues):
 * - ReplicaSet: max(own label, pod template, pods whose ownerReferences carry the ReplicaSet's UID);
 * - Deployment: max(own label, pod template, pods owned by the ReplicaSets the Deployment owns);
 *   old ReplicaSets' templates are not counted, so a downgraded Deployment does not stay `high`
 *   forever because of its revision history; their still-existing pods do count;
 * - Service: max(own label, pods in its namespace selected by `spec.selector`); a Service without a
 *   selector, or of type ExternalName, selects no pods;
 * - EndpointSlice: the level of the Service named by its `kubernetes.io/service-name` label;
 * - Node: max of the pods bound to it (`spec.nodeName`), ignoring pods in phase Succeeded/Failed.
 * A resource's own label can raise its level but never lower it below that of the pods it manages.
 *
 * Everything here is pure (no I/O): plain functions over arrays, and {@link CriticalityIndex}, an
 * incremental index fed by informer events.
 */
import type {
  V1Deployment,
  V1EndpointSlice,
  V1ObjectMeta,
  V1Pod,
  V1PodTemplateSpec,
  V1ReplicaSet,
  V1Service,
} from '@kubernetes/client-node';
import { objectKey as keyOf } from './objects.ts';
import { compileLabelSelector, labelValue, selectorFromMap, type LabelMatcher, type Labels } from './labels.ts';
import { PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NONE, type Priority } from './priority.ts';

// ---------------------------------------------------------------------------------------------
// Levels
// ---------------------------------------------------------------------------------------------

/** Criticality level (thesis §3.1: NO < LOW < HI). */
export type Criticality = 'none' | 'low' | 'high';

/** All levels, in increasing order; a level's index is its rank. */
export const CRITICALITY_LEVELS: readonly Criticality[] = Object.freeze(['none', 'low', 'high'] as const);

/** The label a pod (or any resource) uses to declare its criticality. */
export const CRITICALITY_LABEL = 'ulysses.io/criticality';

/** The label an EndpointSlice uses to name its Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

const RANK: Readonly<Record<Criticality, Priority>> = Object.freeze({ none: PRIORITY_NONE, low: PRIORITY_LOW, high: PRIORITY_HIGH });

/** The queue priority of a level (thesis §3.1: queue priority = criticality): none 0, low 1, high 2. Also its rank for sorting. */
export function criticalityRank(level: Criticality): Priority {
  return RANK[level];
}

/** Type guard: is `value` exactly one of the three level names? */
export function isCriticality(value: unknown): value is Criticality {
  return value === 'none' || value === 'low' || value === 'high';
}

/** Comparator (negative if a < b, 0 if equal, positive if a > b); sorts ascending. */
export function compareCriticality(a: Criticality, b: Criticality): number {
  return RANK[a] - RANK[b];
}

/** The highest of the given levels; `none` when called with none. */
export function maxCriticality(...levels: Criticality[]): Criticality {
  let max: Criticality = 'none';
  for (const level of levels) if (RANK[level] > RANK[max]) max = level;
  return max;
}

// ---------------------------------------------------------------------------------------------
// Declared level of one object
// ---------------------------------------------------------------------------------------------

/** A malformed criticality declaration (reported, never thrown). */
export interface CriticalityError {
  /** Kind of the object carrying the bad value: "Pod", "ReplicaSet", "Deployment", "Service". */
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  /** JSONPath-like field, e.g. `metadata.labels["ulysses.io/criticality"]`. */
  readonly field: string;
  /** The offending value, verbatim. */
  readonly value: string;
  readonly allowed: readonly Criticality[];
  readonly message: string;
}

export interface PodCriticalityOptions {
  /**
   * When set, a pod *without* the criticality label whose `spec.priority` (resolved from its
   * PriorityClass at admission) is >= this value is `high`. A valid label always wins.
   */
  readonly priorityClassThreshold?: number | undefined;
}

export interface PodCriticality {
  readonly level: Criticality;
  readonly source: 'label' | 'priorityClass' | 'default';
  readonly error?: CriticalityError;
}

/** Options of the aggregations: pod options plus a sink for malformed declarations. */
export interface AggregateOptions extends PodCriticalityOptions {
  /** Called once per malformed declaration met (per call, or per pod change for the index). */
  readonly onError?: ((err: CriticalityError) => void) | undefined;
}

const DEFAULT_NAMESPACE = 'default';
const LABEL_FIELD = `metadata.labels[${JSON.stringify(CRITICALITY_LABEL)}]`;
const TEMPLATE_LABEL_FIELD = `spec.template.${LABEL_FIELD}`;

interface Subject {
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
}

function subjectOf(kind: string, meta: V1ObjectMeta | undefined): Subject {
  return {
    kind,
    namespace: meta?.namespace ?? DEFAULT_NAMESPACE,
    name: meta?.name ?? meta?.generateName ?? '<unnamed>',
  };
}

function invalidLabel(subject: Subject, field: string, raw: unknown): CriticalityError {
  const value = typeof raw === 'string' ? raw : String(raw);
  const allowed = CRITICALITY_LEVELS;
  return {
    ...subject,
    field,
    value,
    allowed,
    message:
      `${subject.kind} ${subject.namespace}/${subject.name}: invalid criticality ${field}=${JSON.stringify(value)}; ` +
      `allowed values are ${allowed.map((l) => JSON.stringify(l)).join(', ')} (exact, case-sensitive); treated as "none"`,
  };
}

/** The rule of §3.1 on one label map (+ optional priority fallback). */
function declaredCriticality(
  labels: Labels,
  priority: number | undefined,
  subject: Subject,
  field: string,
  opts: PodCriticalityOptions | undefined,
): PodCriticality {
  const raw: unknown = labelValue(labels, CRITICALITY_LABEL);
  if (raw !== undefined) {
    if (isCriticality(raw)) return { level: raw, source: 'label' };
    return { level: 'none', source: 'label', error: invalidLabel(subject, field, raw) };
  }
  const threshold = opts?.priorityClassThreshold;
  if (threshold !== undefined && typeof priority === 'number' && priority >= threshold) {
    return { level: 'high', source: 'priorityClass' };
  }
  return { level: 'none', source: 'default' };
}

/**
 * The criticality a pod declares (thesis §3.1): its `ulysses.io/criticality` label; else, if
 * `opts.priorityClassThreshold` is set and `spec.priority >= threshold`, `high`; else `none`.
 * A malformed label gives `none` with `error` set (and no priority fallback).
 */
export function podCriticality(pod: V1Pod, opts?: PodCriticalityOptions): PodCriticality {
  return declaredCriticality(pod.metadata?.labels, pod.spec?.priority, subjectOf('Pod', pod.metadata), LABEL_FIELD, opts);
}

/** Level declared by a pod template (`spec.template`) of a ReplicaSet or Deployment. */
function templateCriticality(
  kind: string,
  meta: V1ObjectMeta | undefined,
  template: V1PodTemplateSpec | undefined,
  opts: PodCriticalityOptions | undefined,
): PodCriticality {
  return declaredCriticality(template?.metadata?.labels, template?.spec?.priority, subjectOf(kind, meta), TEMPLATE_LABEL_FIELD, opts);
}

/** Level declared by a resource's own `metadata.labels` (no priority fallback). */
function ownCriticality(kind: string, meta: V1ObjectMeta | undefined): PodCriticality {
  return declaredCriticality(meta?.labels, undefined, subjectOf(kind, meta), LABEL_FIELD, undefined);
}

// ---------------------------------------------------------------------------------------------
// Relations between objects
// ---------------------------------------------------------------------------------------------

/** Cache key of a namespaced object's metadata (objects.ts objectKey; no namespace = "default"). */
function metaKey(meta: V1ObjectMeta | undefined): string {
  return keyOf({ metadata: { ...meta, namespace: meta?.namespace ?? DEFAULT_NAMESPACE } });
}

/** Does any of `meta.ownerReferences` point at `ownerUid`? */
export function isOwnedBy(meta: V1ObjectMeta | undefined, ownerUid: string | undefined): boolean {
  if (!ownerUid) return false;
  return (meta?.ownerReferences ?? []).some((ref) => ref.uid === ownerUid);
}

/** Pods of phase Succeeded/Failed hold no resources on their node any more. */
export function isTerminalPod(pod: V1Pod): boolean {
  const phase = pod.status?.phase;
  return phase === 'Succeeded' || phase === 'Failed';
}

/** Matcher for the pods a Service selects (matches nothing without selector or for ExternalName). */
export function serviceSelector(svc: V1Service): LabelMatcher {
  if (svc.spec?.type === 'ExternalName') return () => false;
  return compileLabelSelector(selectorFromMap(svc.spec?.selector)).matches;
}

/** Lookup of a Service by namespace and name. */
export type ServiceLookup = (namespace: string, name: string) => V1Service | undefined;

function toServiceLookup(services: Iterable<V1Service> | ServiceLookup): ServiceLookup {
  if (typeof services === 'function') return services;
  const byKey = new Map<string, V1Service>();
  for (const svc of services) byKey.set(metaKey(svc.metadata), svc);
  return (namespace, name) => byKey.get(`${namespace}/${name}`);
}

/** The Service an EndpointSlice belongs to, by its `kubernetes.io/service-name` label. */
export function endpointSliceServiceName(slice: V1EndpointSlice): string | undefined {
  return labelValue(slice.metadata?.labels, SERVICE_NAME_LABEL) || undefined;
}

// ---------------------------------------------------------------------------------------------
// Pure aggregations over arrays
// ---------------------------------------------------------------------------------------------

/** Collects levels and forwards each distinct malformed declaration once per call. */
class Accumulator {
  level: Criticality = 'none';
  private readonly seen = new Set<string>();

  constructor(private readonly onError: AggregateOptions['onError']) {}

  add(result: PodCriticality): void {
    if (result.error) {
      const e = result.error;
      const id = `${e.kind}\0${e.namespace}\0${e.name}\0${e.field}`;
      if (!this.seen.has(id)) {
        this.seen.add(id);
        this.onError?.(e);
      }
    }
    if (RANK[result.level] > RANK[this.level]) this.level = result.level;
  }

  addPods(pods: Iterable<V1Pod>, keep: (pod: V1Pod) => boolean, opts: PodCriticalityOptions | undefined): void {
    for (const pod of pods) if (keep(pod)) this.add(podCriticality(pod, opts));
  }
}

/**
 * ReplicaSet level (thesis §5.3: "the ReplicaSet priority is the highest priority of its Pods"):
 * max of its own label, its pod template and the pods whose ownerReferences carry its UID.
 */
export function replicaSetCriticality(rs: V1ReplicaSet, pods: Iterable<V1Pod>, opts?: AggregateOptions): Criticality {
  const acc = new Accumulator(opts?.onError);
  acc.add(ownCriticality('ReplicaSet', rs.metadata));
  acc.add(templateCriticality('ReplicaSet', rs.metadata, rs.spec?.template, opts));
  const uid = rs.metadata?.uid;
  acc.addPods(pods, (pod) => isOwnedBy(pod.metadata, uid), opts);
  return acc.level;
}

/**
 * Deployment level: max of its own label, its pod template and the pods owned by the ReplicaSets
 * it owns (`replicaSets` may contain unrelated ReplicaSets; they are filtered by owner UID).
 */
export function deploymentCriticality(
  d: V1Deployment,
  replicaSets: Iterable<V1ReplicaSet>,
  pods: Iterable<V1Pod>,
  opts?: AggregateOptions,
): Criticality {
  const acc = new Accumulator(opts?.onError);
  acc.add(ownCriticality('Deployment', d.metadata));
  acc.add(templateCriticality('Deployment', d.metadata, d.spec?.template, opts));
  const rsUids = new Set<string>();
  for (const rs of replicaSets) {
    const uid = rs.metadata?.uid;
    if (uid && isOwnedBy(rs.metadata, d.metadata?.uid)) rsUids.add(uid);
  }
  if (rsUids.size > 0) {
    acc.addPods(pods, (pod) => (pod.metadata?.ownerReferences ?? []).some((ref) => rsUids.has(ref.uid)), opts);
  }
  return acc.level;
}

/**
 * Service level: max of its own label and the pods of its namespace selected by `spec.selector`
 * (equality map, Kubernetes semantics; no selector or type ExternalName → no pods).
 */
export function serviceCriticality(svc: V1Service, pods: Iterable<V1Pod>, opts?: AggregateOptions): Criticality {
  const acc = new Accumulator(opts?.onError);
  acc.add(ownCriticality('Service', svc.metadata));
  const namespace = svc.metadata?.namespace ?? DEFAULT_NAMESPACE;
  const selects = serviceSelector(svc);
  acc.addPods(pods, (pod) => (pod.metadata?.namespace ?? DEFAULT_NAMESPACE) === namespace && selects(pod.metadata?.labels), opts);
  return acc.level;
}

/**
 * EndpointSlice level: that of the Service (same namespace) named by its
 * `kubernetes.io/service-name` label; `none` when the label or the Service is missing.
 */
export function endpointSliceCriticality(
  slice: V1EndpointSlice,
  services: Iterable<V1Service> | ServiceLookup,
  pods: Iterable<V1Pod>,
  opts?: AggregateOptions,
): Criticality {
  const name = endpointSliceServiceName(slice);
  if (name === undefined) return 'none';
  const svc = toServiceLookup(services)(slice.metadata?.namespace ?? DEFAULT_NAMESPACE, name);
  return svc ? serviceCriticality(svc, pods, opts) : 'none';
}

/** Node level: max of the pods bound to `nodeName`, ignoring pods in phase Succeeded/Failed. */
export function nodeCriticality(nodeName: string, pods: Iterable<V1Pod>, opts?: AggregateOptions): Criticality {
  const acc = new Accumulator(opts?.onError);
  acc.addPods(pods, (pod) => pod.spec?.nodeName === nodeName && !isTerminalPod(pod), opts);
  return acc.level;
}

// ---------------------------------------------------------------------------------------------
// Incremental index for controllers
// ---------------------------------------------------------------------------------------------

/** What the index remembers of a pod: enough to answer every aggregation. */
export interface IndexedPod {
  /** "namespace/name". */
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  readonly uid: string | undefined;
  readonly labels: Readonly<Record<string, string>>;
  readonly nodeName: string | undefined;
  readonly ownerUids: readonly string[];
  /** Phase Succeeded or Failed. */
  readonly terminal: boolean;
  readonly level: Criticality;
  readonly source: PodCriticality['source'];
  readonly error?: CriticalityError;
}

/** Result of {@link CriticalityIndex.upsertPod}: the entry before (if any) and after the change. */
export interface PodIndexChange {
  readonly before: IndexedPod | undefined;
  readonly after: IndexedPod;
}

type Bucket = Map<string, IndexedPod>;

function bucketAdd(index: Map<string, Bucket>, bucketKey: string, entry: IndexedPod): void {
  let bucket = index.get(bucketKey);
  if (!bucket) index.set(bucketKey, (bucket = new Map()));
  bucket.set(entry.key, entry);
}

function bucketDelete(index: Map<string, Bucket>, bucketKey: string, podKey: string): void {
  const bucket = index.get(bucketKey);
  if (!bucket) return;
  bucket.delete(podKey);
  if (bucket.size === 0) index.delete(bucketKey);
}

/**
 * Pods indexed by namespace, owner UID and node name, fed by a pod informer
 * (`upsertPod` on add/update, `deletePod` on delete). Each pod's level is computed once, when it
 * changes; queries cost O(candidate pods): the owned pods for a ReplicaSet/Deployment, the pods of
 * the namespace for a Service, the pods bound to the node for a Node. Malformed labels are
 * reported through `onError` once per pod and bad value (again only if the value changes); those of
 * a ReplicaSet/Deployment/Service's own labels once per object, field and value (the memory of
 * reported object errors is bounded by the number of malformed objects ever seen).
 */
export class CriticalityIndex {
  private readonly pods = new Map<string, IndexedPod>();
  private readonly byNamespace = new Map<string, Bucket>();
  private readonly byOwner = new Map<string, Bucket>();
  private readonly byNode = new Map<string, Bucket>();
  private readonly opts: AggregateOptions;
  /** Malformed declarations of non-pod objects already reported: id → bad value. */
  private readonly reportedObjectErrors = new Map<string, string>();

  constructor(opts: AggregateOptions = {}) {
    this.opts = opts;
  }

  /** Number of indexed pods. */
  get size(): number {
    return this.pods.size;
  }

  /** Add or replace a pod (keyed by namespace/name). */
  upsertPod(pod: V1Pod): PodIndexChange {
    const meta = pod.metadata;
    const namespace = meta?.namespace ?? DEFAULT_NAMESPACE;
    const name = meta?.name ?? '';
    const key = `${namespace}/${name}`;
    const declared = podCriticality(pod, this.opts);
    const after: IndexedPod = {
      key,
      namespace,
      name,
      uid: meta?.uid,
      labels: { ...(meta?.labels ?? {}) },
      nodeName: pod.spec?.nodeName || undefined,
      ownerUids: [...new Set((meta?.ownerReferences ?? []).map((ref) => ref.uid).filter(Boolean))],
      terminal: isTerminalPod(pod),
      level: declared.level,
      source: declared.source,
      ...(declared.error ? { error: declared.error } : {}),
    };
    const before = this.pods.get(key);
    if (before) this.unlink(before);
    this.pods.set(key, after);
    bucketAdd(this.byNamespace, namespace, after);
    for (const uid of after.ownerUids) bucketAdd(this.byOwner, uid, after);
    if (after.nodeName !== undefined) bucketAdd(this.byNode, after.nodeName, after);
    if (after.error && after.error.value !== before?.error?.value) this.opts.onError?.(after.error);
    return { before, after };
  }

  /** Remove a pod, given the pod (e.g. the informer's last known state) or its "namespace/name" key. */
  deletePod(podOrKey: V1Pod | string): IndexedPod | undefined {
    const key = typeof podOrKey === 'string' ? podOrKey : metaKey(podOrKey.metadata);
    const entry = this.pods.get(key);
    if (!entry) return undefined;
    this.unlink(entry);
    this.pods.delete(key);
    return entry;
  }

  /** The indexed entry of a pod, if any. */
  getPod(namespace: string, name: string): IndexedPod | undefined {
    return this.pods.get(`${namespace}/${name}`);
  }

  /** Pods whose ownerReferences carry `ownerUid`. */
  podsOwnedBy(ownerUid: string): IndexedPod[] {
    return [...(this.byOwner.get(ownerUid)?.values() ?? [])];
  }

  /** Pods bound to `nodeName` (including terminal ones). */
  podsOnNode(nodeName: string): IndexedPod[] {
    return [...(this.byNode.get(nodeName)?.values() ?? [])];
  }

  /** Pods of a namespace. */
  podsInNamespace(namespace: string): IndexedPod[] {
    return [...(this.byNamespace.get(namespace)?.values() ?? [])];
  }

  /** See {@link replicaSetCriticality}. */
  replicaSetCriticality(rs: V1ReplicaSet): Criticality {
    const own = this.declared(
      ownCriticality('ReplicaSet', rs.metadata),
      templateCriticality('ReplicaSet', rs.metadata, rs.spec?.template, this.opts),
    );
    const uid = rs.metadata?.uid;
    return maxOf(own, uid ? this.byOwner.get(uid)?.values() : undefined);
  }

  /** See {@link deploymentCriticality}; `replicaSets` are filtered by owner UID. */
  deploymentCriticality(d: V1Deployment, replicaSets: Iterable<V1ReplicaSet>): Criticality {
    let level = this.declared(
      ownCriticality('Deployment', d.metadata),
      templateCriticality('Deployment', d.metadata, d.spec?.template, this.opts),
    );
    for (const rs of replicaSets) {
      const uid = rs.metadata?.uid;
      if (level === 'high') break;
      if (uid && isOwnedBy(rs.metadata, d.metadata?.uid)) level = maxOf(level, this.byOwner.get(uid)?.values());
    }
    return level;
  }

  /** See {@link serviceCriticality}. */
  serviceCriticality(svc: V1Service): Criticality {
    const own = this.declared(ownCriticality('Service', svc.metadata));
    const selects = serviceSelector(svc);
    const bucket = this.byNamespace.get(svc.metadata?.namespace ?? DEFAULT_NAMESPACE);
    return maxOf(own, bucket?.values(), (p) => selects(p.labels));
  }

  /** See {@link endpointSliceCriticality}. */
  endpointSliceCriticality(slice: V1EndpointSlice, services: Iterable<V1Service> | ServiceLookup): Criticality {
    const name = endpointSliceServiceName(slice);
    if (name === undefined) return 'none';
    const svc = toServiceLookup(services)(slice.metadata?.namespace ?? DEFAULT_NAMESPACE, name);
    return svc ? this.serviceCriticality(svc) : 'none';
  }

  /** See {@link nodeCriticality}. */
  nodeCriticality(nodeName: string): Criticality {
    return maxOf('none', this.byNode.get(nodeName)?.values(), (p) => !p.terminal);
  }

  /**
   * Max of a ReplicaSet/Deployment/Service's own declarations; a malformed one is reported once
   * per object, field and value (queries repeat on every informer event).
   */
  private declared(...results: PodCriticality[]): Criticality {
    let level: Criticality = 'none';
    for (const r of results) {
      if (r.error) {
        const e = r.error;
        const id = `${e.kind}\0${e.namespace}\0${e.name}\0${e.field}`;
        if (this.reportedObjectErrors.get(id) !== e.value) {
          this.reportedObjectErrors.set(id, e.value);
          this.opts.onError?.(e);
        }
      }
      if (RANK[r.level] > RANK[level]) level = r.level;
    }
    return level;
  }

  private unlink(entry: IndexedPod): void {
    bucketDelete(this.byNamespace, entry.namespace, entry.key);
    for (const uid of entry.ownerUids) bucketDelete(this.byOwner, uid, entry.key);
    if (entry.nodeName !== undefined) bucketDelete(this.byNode, entry.nodeName, entry.key);
  }
}

/** max(start, levels of the kept entries), stopping early at `high`. */
function maxOf(
  start: Criticality,
  entries: Iterable<IndexedPod> | undefined,
  keep: (p: IndexedPod) => boolean = () => true,
): Criticality {
  let level = start;
  if (!entries) return level;
  for (const p of entries) {
    if (level === 'high') break;
    if (RANK[p.level] > RANK[level] && keep(p)) level = p.level;
  }
  return level;
}
