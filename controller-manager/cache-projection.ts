/**
 * Informer cache projections of the controller manager (issue 3: RSS < 150 MB with 1000 nodes and
 * 10k pods): pods and nodes are cached with only the fields one of the five controllers, the
 * criticality index or the Events recorder reads — client-go's informer transform, as
 * kube-controller-manager does for managedFields. A pod of a real workload is 6-10 KiB of JSON
 * (projected service-account volume, env, probes, resources, container statuses); what the
 * controllers read of it is a few hundred bytes.
 *
 * Nothing writes a cached pod or node back (pods are only created from templates, patched with
 * explicit bodies and deleted with a uid precondition), so a projection never loses data on the
 * server. ReplicaSets, Deployments, Services, Endpoints and EndpointSlices are cached whole (minus
 * managedFields): they are few, and the controllers compare or PUT them.
 *
 * Who reads what of a pod:
 *  - metadata (all of it, minus managedFields): name/namespace/uid/resourceVersion (keys, Events,
 *    delete preconditions, targetRef), labels (selectors, criticality), ownerReferences (claim,
 *    criticality), deletionTimestamp, creationTimestamp (ReplicaSet deletion rank, Endpoints
 *    trigger time), generation/annotations (kept: small, and upstream's pod-deletion-cost lives there)
 *  - spec: nodeName (everyone), tolerations (taint-eviction), priority (criticality fallback),
 *    hostname/subdomain (Endpoints), containers[].name/ports (named targetPort, FindPort),
 *    initContainers[].name/ports/restartPolicy (sidecars), readinessGates, priorityClassName
 *  - status: phase, conditions (Ready + lastTransitionTime), podIP/podIPs, hostIP/hostIPs, startTime,
 *    reason, containerStatuses[].name/ready/started/restartCount (ReplicaSet deletion rank)
 * Of a node: metadata minus managedFields and annotations (labels: zone of EndpointSlices), spec
 * taints/unschedulable (taint-eviction).
 *
 * Repeated strings (label keys and values, toleration keys, condition types, node names, IPs of
 * hosts...) are shared through a bounded {@link StringPool}.
 */
import type { V1Container, V1ContainerStatus, V1Node, V1Pod } from '@kubernetes/client-node';
import { stripManagedFields } from '../core/informer.ts';

/**
 * Shares equal strings between cached objects: JSON.parse gives every pod its own copy of
 * "node.kubernetes.io/not-ready", "ContainersReady", its namespace, node name, host IP... (7 MiB of
 * duplicates for 10k pods). Bounded: when full the pool is dropped and refilled, so strings of
 * objects long gone (timestamps, names) are never kept alive by it.
 */
export class StringPool {
  private pool = new Map<string, string>();
  constructor(
    readonly maxEntries = 50_000,
    readonly maxLength = 64,
  ) {}

  intern<T extends string | undefined>(s: T): T {
    if (s === undefined || s.length > this.maxLength) return s;
    const hit = this.pool.get(s);
    if (hit !== undefined) return hit as T;
    if (this.pool.size >= this.maxEntries) this.pool = new Map();
    this.pool.set(s, s);
    return s;
  }

  get size(): number {
    return this.pool.size;
  }
}

const strings = new StringPool();

/** Interns every string value of a small JSON value in place (labels, tolerations, conditions...). */
function internDeep<T>(v: T): T {
  if (typeof v === 'string') return strings.intern(v) as T;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = internDeep(v[i]);
  } else if (v && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) o[k] = internDeep(o[k]);
  }
  return v;
}

/** Copies the listed keys that are present (undefined ones are left out, not stored). */
function pick<T extends object, K extends keyof T>(o: T | undefined, keys: readonly K[]): Pick<T, K> | undefined {
  if (!o) return undefined;
  const out = {} as Pick<T, K>;
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

const POD_SPEC_KEYS = ['nodeName', 'tolerations', 'priority', 'priorityClassName', 'hostname', 'subdomain', 'readinessGates'] as const;
const POD_STATUS_KEYS = ['phase', 'conditions', 'podIP', 'podIPs', 'hostIP', 'hostIPs', 'startTime', 'reason'] as const;

const container = (c: V1Container): V1Container => pick(c, ['name', 'ports', 'restartPolicy'] as const) as V1Container;
const containerStatus = (s: V1ContainerStatus): V1ContainerStatus => pick(s, ['name', 'ready', 'started', 'restartCount'] as const) as V1ContainerStatus;

/** The pod as the controllers read it (see the module comment). */
export function projectPod(pod: V1Pod): V1Pod {
  stripManagedFields(pod);
  const spec = pick(pod.spec, POD_SPEC_KEYS) as V1Pod['spec'];
  if (spec) {
    spec.containers = (pod.spec!.containers ?? []).map(container);
    if (pod.spec!.initContainers?.length) spec.initContainers = pod.spec!.initContainers.map(container);
  }
  const status = pick(pod.status, POD_STATUS_KEYS) as V1Pod['status'];
  if (status && pod.status!.containerStatuses) status.containerStatuses = pod.status!.containerStatuses.map(containerStatus);
  const meta = pod.metadata;
  if (meta) {
    meta.namespace = strings.intern(meta.namespace);
    if (meta.labels) internDeep(meta.labels);
    if (meta.ownerReferences) internDeep(meta.ownerReferences);
  }
  return { apiVersion: strings.intern(pod.apiVersion), kind: strings.intern(pod.kind), metadata: meta, spec: internDeep(spec), status: internDeep(status) };
}

/** Annotation of nodes simulated by KWOK (nothing runs there: the node failure detector probes none). */
export const KWOK_NODE_ANNOTATION = 'kwok.x-k8s.io/node';

/** The node as the controllers read it (see the module comment). */
export function projectNode(node: V1Node): V1Node {
  stripManagedFields(node);
  if (node.metadata) {
    const kwok = node.metadata.annotations?.[KWOK_NODE_ANNOTATION];
    delete node.metadata.annotations;
    if (kwok !== undefined) node.metadata.annotations = { [KWOK_NODE_ANNOTATION]: kwok };
    if (node.metadata.labels) internDeep(node.metadata.labels);
  }
  // the node failure detector probes the InternalIP and confirms with the kubelet's port (node-failure.ts)
  const addresses = node.status?.addresses?.filter((a) => a.type === 'InternalIP');
  const kubeletPort = node.status?.daemonEndpoints?.kubeletEndpoint?.Port;
  const status: V1Node['status'] = addresses?.length || kubeletPort ? { ...(addresses?.length ? { addresses } : {}), ...(kubeletPort ? { daemonEndpoints: { kubeletEndpoint: { Port: kubeletPort } } } : {}) } : undefined;
  return { apiVersion: node.apiVersion, kind: node.kind, metadata: node.metadata, spec: internDeep(pick(node.spec, ['taints', 'unschedulable'] as const)), ...(status ? { status } : {}) };
}
