/**
 * EndpointSlice controller, behaviour as upstream pkg/controller/endpointslice and
 * k8s.io/endpointslice's Reconciler:
 *  - a Service with a selector (not ExternalName) gets, per address type of spec.ipFamilies (IPv4,
 *    IPv6; without ipFamilies: the family of the clusterIP, both for a headless Service), slices
 *    of its selected pods that are not terminal and have an IP: addresses from status.podIPs of
 *    that family, conditions ready/serving/terminating (terminating pods stay, serving as their
 *    Ready condition says), nodeName, zone of the node, hostname when spec.hostname is set and
 *    spec.subdomain is the Service's name, targetRef; grouped by their resolved port set (named
 *    targetPorts found in containers, then in native sidecars), at most 100 per slice;
 *  - a pod whose Node is not in the cache is left out (unless publishNotReadyAddresses) and the
 *    Service is retried with backoff, the other endpoints are written;
 *  - slices are changed in place as upstream reconcileByPortMapping: endpoints stay in their slice,
 *    changed ones are replaced there, new ones fill the slices being updated (fullest first), then
 *    the unchanged slice closest to full that can take them all, then new slices; an unneeded slice
 *    is reused for a new one instead of delete+create; an unchanged slice is not written;
 *    one empty placeholder slice when there are no endpoints; slices of another family are deleted;
 *  - labels: the Service's labels plus kubernetes.io/service-name, endpointslice.kubernetes.io/managed-by
 *    and service.kubernetes.io/headless; annotation endpoints.kubernetes.io/last-change-trigger-time
 *    (TriggerTimeTracker); owner reference to the Service;
 *  - a Service that loses its selector keeps its slices (upstream leaves them alone); a deleted
 *    Service's slices go with the garbage collector;
 *  - topology hints are not computed: hint fields of existing endpoints are left as they are.
 * A tracker of the generations we wrote keeps a lagging cache from producing duplicate slices
 * (upstream endpointSliceTracker). What is ours: keys carry the Service's criticality (thesis §5.3.1).
 */
import type { V1EndpointSlice, V1Endpoint, V1Node, V1Pod, V1Service, V1ServicePort, DiscoveryV1EndpointPort } from '@kubernetes/client-node';
import { isIPv6 } from 'node:net';
import { criticalityRank, serviceSelector } from '../../core/criticality.ts';
import { PRIORITY_NONE } from '../../core/priority.ts';
import { isPodReady, objectKey } from '../../core/objects.ts';
import { isConflict, isNotFound } from '../../core/kube.ts';
import { NO_EVENTS } from '../../core/events.ts';
import type { ReconcileResult } from '../queue/index.ts';
import type { ControllerDeps } from './deps.ts';
import { isNamespaceTerminating, semanticEqual } from './semantic.ts';
import { setTriggerTime, TriggerTimeTracker } from './trigger-time.ts';

export const MAX_ENDPOINTS_PER_SLICE = 100;
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const MANAGED_BY_LABEL = 'endpointslice.kubernetes.io/managed-by';
export const MANAGED_BY = 'endpointslice-controller.k8s.io';
export const HEADLESS_LABEL = 'service.kubernetes.io/headless';
const ZONE_LABEL = 'topology.kubernetes.io/zone';
const RESERVED_LABELS = new Set([SERVICE_NAME_LABEL, MANAGED_BY_LABEL, HEADLESS_LABEL]);

export type AddressType = 'IPv4' | 'IPv6';

/** The EndpointSlice controller's own setting (upstream --max-endpoints-per-slice). */
export interface EndpointSliceOptions {
  /** endpoints per slice, default MAX_ENDPOINTS_PER_SLICE (100) */
  maxEndpointsPerSlice?: number;
}

/**
 * Resolves a Service port's targetPort against the pod (upstream podutil.FindPort): a number as
 * is; a name in the containers' ports, then in native sidecars' (init containers with
 * restartPolicy Always), with the Service port's protocol.
 */
export function resolvePort(pod: V1Pod, sp: V1ServicePort): number | undefined {
  const target = sp.targetPort ?? sp.port;
  if (typeof target === 'number') return target;
  if (/^\d+$/.test(String(target))) return Number(target);
  const protocol = sp.protocol ?? 'TCP';
  const find = (containers: { ports?: { name?: string; containerPort: number; protocol?: string }[] }[]) => {
    for (const c of containers) for (const cp of c.ports ?? []) if (cp.name === target && (cp.protocol ?? 'TCP') === protocol) return cp.containerPort;
    return undefined;
  };
  return find(pod.spec?.containers ?? []) ?? find((pod.spec?.initContainers ?? []).filter((c) => c.restartPolicy === 'Always'));
}

/** upstream getAddressTypesForService */
export function addressTypesFor(svc: V1Service): AddressType[] {
  const out = new Set<AddressType>();
  for (const f of svc.spec?.ipFamilies ?? []) {
    if (f === 'IPv4') out.add('IPv4');
    if (f === 'IPv6') out.add('IPv6');
  }
  if (out.size > 0) return [...out];
  const ip = svc.spec?.clusterIP;
  if (ip && ip !== 'None') return [isIPv6(ip) ? 'IPv6' : 'IPv4'];
  return ['IPv4', 'IPv6'];
}

/** upstream ShouldPodBeInEndpoints(pod, includeTerminating) */
export function shouldPodBeInEndpoints(pod: V1Pod, includeTerminating: boolean): boolean {
  if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return false;
  if (!pod.status?.podIP && !pod.status?.podIPs?.length) return false;
  if (!includeTerminating && pod.metadata?.deletionTimestamp) return false;
  return true;
}

/** upstream ShouldSetHostname */
export function shouldSetHostname(pod: V1Pod, svc: V1Service): boolean {
  return !!pod.spec?.hostname && pod.spec.subdomain === svc.metadata?.name && pod.metadata?.namespace === svc.metadata?.namespace;
}

function podIPs(pod: V1Pod): string[] {
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip).filter((ip): ip is string => !!ip);
  return ips.length ? ips : pod.status?.podIP ? [pod.status.podIP] : [];
}

/** The endpoint of a pod for a Service and address type (upstream podToEndpoint). */
export function podEndpoint(pod: V1Pod, svc: V1Service, node: V1Node | undefined, addressType: AddressType = 'IPv4'): V1Endpoint {
  const terminating = !!pod.metadata?.deletionTimestamp;
  const serving = isPodReady(pod);
  const ready = svc.spec?.publishNotReadyAddresses ? true : serving && !terminating;
  const zone = node?.metadata?.labels?.[ZONE_LABEL];
  return {
    addresses: podIPs(pod).filter((ip) => (addressType === 'IPv6') === isIPv6(ip)),
    conditions: { ready, serving, terminating },
    ...(shouldSetHostname(pod, svc) ? { hostname: pod.spec!.hostname } : {}),
    ...(pod.spec?.nodeName ? { nodeName: pod.spec.nodeName } : {}),
    ...(zone ? { zone } : {}),
    targetRef: { kind: 'Pod', namespace: pod.metadata!.namespace, name: pod.metadata!.name, uid: pod.metadata!.uid },
  };
}

/** upstream getEndpointPorts */
export function endpointPorts(svc: V1Service, pod: V1Pod): DiscoveryV1EndpointPort[] {
  const ports: DiscoveryV1EndpointPort[] = [];
  for (const sp of svc.spec?.ports ?? []) {
    const port = resolvePort(pod, sp);
    if (port === undefined) continue;
    ports.push({ name: sp.name ?? '', port, protocol: sp.protocol ?? 'TCP', ...(sp.appProtocol ? { appProtocol: sp.appProtocol } : {}) });
  }
  return ports;
}

/** Identity of a port set, independent of order (upstream NewPortMapKey). */
export function portMapKey(ports: readonly DiscoveryV1EndpointPort[] | undefined): string {
  return JSON.stringify((ports ?? []).map((p) => JSON.stringify([p.name ?? '', p.port ?? 0, p.protocol ?? 'TCP', p.appProtocol ?? ''])).sort());
}

/** Identity of an endpoint: addresses, hostname and target (upstream hashEndpoint). */
export function endpointKey(ep: V1Endpoint): string {
  return JSON.stringify([[...ep.addresses].sort(), ep.hostname ?? '', ep.targetRef?.namespace ?? '', ep.targetRef?.name ?? '']);
}

/** upstream EndpointsEqualBeyondHash: nodeName, zone, conditions, targetRef (ignoring resourceVersion). */
export function endpointsEqualBeyondHash(a: V1Endpoint, b: V1Endpoint): boolean {
  const ref = (e: V1Endpoint) => (e.targetRef ? { ...e.targetRef, resourceVersion: undefined } : undefined);
  return (
    (a.nodeName ?? undefined) === (b.nodeName ?? undefined) &&
    (a.zone ?? undefined) === (b.zone ?? undefined) &&
    (a.conditions?.ready ?? undefined) === (b.conditions?.ready ?? undefined) &&
    (a.conditions?.serving ?? undefined) === (b.conditions?.serving ?? undefined) &&
    (a.conditions?.terminating ?? undefined) === (b.conditions?.terminating ?? undefined) &&
    semanticEqual(ref(a), ref(b))
  );
}

export interface DesiredGroup {
  ports: DiscoveryV1EndpointPort[];
  /** by endpointKey, in pod name order */
  endpoints: Map<string, V1Endpoint>;
}

/**
 * Desired endpoints of a Service for one address type, grouped by port set (upstream
 * reconcileByAddressType, first half). Pods whose node is not in the cache are skipped unless the
 * Service publishes not-ready addresses; their names go to `skipped`.
 */
export function desiredEndpoints(
  svc: V1Service,
  pods: readonly V1Pod[],
  nodeOf: (name: string) => V1Node | undefined,
  addressType: AddressType = 'IPv4',
  skipped: string[] = [],
): Map<string, DesiredGroup> {
  const groups = new Map<string, DesiredGroup>();
  const sorted = [...pods].sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : a.metadata!.name! > b.metadata!.name! ? 1 : 0));
  for (const pod of sorted) {
    if (!shouldPodBeInEndpoints(pod, true)) continue;
    const ports = endpointPorts(svc, pod);
    const key = portMapKey(ports);
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { ports, endpoints: new Map() }));
    const node = nodeOf(pod.spec?.nodeName ?? '');
    if (!node && !svc.spec?.publishNotReadyAddresses) {
      skipped.push(pod.metadata!.name!);
      continue;
    }
    const ep = podEndpoint(pod, svc, node, addressType);
    if (ep.addresses.length > 0) g.endpoints.set(endpointKey(ep), ep);
  }
  return groups;
}

/** upstream setEndpointSliceLabels: the labels a slice of `svc` should have, and whether its own differ. */
export function sliceLabels(current: Record<string, string> | undefined, svc: V1Service): { labels: Record<string, string>; changed: boolean } {
  const own: Record<string, string> = {};
  for (const [k, v] of Object.entries(current ?? {})) if (!RESERVED_LABELS.has(k)) own[k] = v;
  const labels: Record<string, string> = {};
  for (const [k, v] of Object.entries(svc.metadata?.labels ?? {})) if (!RESERVED_LABELS.has(k)) labels[k] = v;
  const changed = !semanticEqual(own, labels);
  const clusterIP = svc.spec?.clusterIP;
  if (!clusterIP || clusterIP === 'None') labels[HEADLESS_LABEL] = '';
  labels[SERVICE_NAME_LABEL] = svc.metadata!.name!;
  labels[MANAGED_BY_LABEL] = MANAGED_BY;
  return { labels, changed };
}

function ownedBy(sl: V1EndpointSlice, svc: V1Service): boolean {
  return (sl.metadata?.ownerReferences ?? []).some((o) => o.uid === svc.metadata?.uid && o.kind === 'Service' && o.apiVersion === 'v1');
}

function newSlice(svc: V1Service, ports: DiscoveryV1EndpointPort[], addressType: AddressType): V1EndpointSlice {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      generateName: `${svc.metadata!.name}-`,
      namespace: svc.metadata!.namespace,
      labels: sliceLabels({}, svc).labels,
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: svc.metadata!.name!, uid: svc.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
    },
    addressType,
    endpoints: [],
    ports,
  };
}

export interface SlicePlan {
  create: V1EndpointSlice[];
  update: V1EndpointSlice[];
  delete: V1EndpointSlice[];
}

/** Replacing an endpoint keeps the hints someone else wrote (we compute none). */
const keepHints = (desired: V1Endpoint, existing: V1Endpoint): V1Endpoint => (existing.hints ? { ...desired, hints: existing.hints } : desired);

/** upstream reconcileByPortMapping */
function planPortMapping(svc: V1Service, existing: V1EndpointSlice[], desired: DesiredGroup, addressType: AddressType, max: number): SlicePlan {
  const byName = new Map<string, V1EndpointSlice>();
  const unchanged: string[] = [];
  const toUpdate: string[] = [];
  const toDelete: string[] = [];
  const want = new Map(desired.endpoints);
  for (const sl of existing) {
    const name = sl.metadata!.name!;
    byName.set(name, sl);
    const kept: V1Endpoint[] = [];
    let updated = false;
    for (const ep of sl.endpoints ?? []) {
      const k = endpointKey(ep);
      const got = want.get(k);
      if (!got) continue;
      kept.push(keepHints(got, ep));
      if (!endpointsEqualBeyondHash(got, ep)) updated = true;
      want.delete(k);
    }
    const { labels, changed } = sliceLabels(sl.metadata?.labels, svc);
    if (updated || kept.length !== (sl.endpoints ?? []).length) {
      if (kept.length === 0) toDelete.push(name);
      else {
        byName.set(name, { ...structuredClone(sl), endpoints: kept, metadata: { ...structuredClone(sl.metadata), labels } });
        toUpdate.push(name);
      }
    } else if (changed) {
      byName.set(name, { ...structuredClone(sl), metadata: { ...structuredClone(sl.metadata), labels } });
      toUpdate.push(name);
    } else unchanged.push(name);
  }
  const pop = (): V1Endpoint => {
    const [k, ep] = want.entries().next().value as [string, V1Endpoint];
    want.delete(k);
    return ep;
  };
  // fill the slices being updated, fullest first
  if (want.size > 0 && toUpdate.length > 0) {
    const slices = toUpdate.map((n) => byName.get(n)!).sort((a, b) => (b.endpoints?.length ?? 0) - (a.endpoints?.length ?? 0));
    for (const sl of slices) while (want.size > 0 && (sl.endpoints ??= []).length < max) sl.endpoints.push(pop());
  }
  const create: V1EndpointSlice[] = [];
  while (want.size > 0) {
    let fill: V1EndpointSlice | undefined;
    if (want.size < max && unchanged.length > 0) {
      // upstream getSliceToFill: the unchanged slice closest to full that takes them all
      let closest = max;
      for (const n of unchanged) {
        const diff = max - (want.size + (byName.get(n)!.endpoints?.length ?? 0));
        if (diff >= 0 && diff < closest) {
          closest = diff;
          fill = byName.get(n);
          if (diff === 0) break;
        }
      }
    }
    if (!fill) fill = newSlice(svc, desired.ports, addressType);
    else {
      fill = structuredClone(fill);
      byName.set(fill.metadata!.name!, fill);
    }
    while (want.size > 0 && (fill.endpoints ??= []).length < max) fill.endpoints.push(pop());
    if (fill.metadata?.name) {
      toUpdate.push(fill.metadata.name);
      unchanged.splice(unchanged.indexOf(fill.metadata.name), 1);
    } else create.push(fill);
  }
  return { create, update: toUpdate.map((n) => byName.get(n)!), delete: toDelete.map((n) => byName.get(n)!) };
}

/** Is `sl` the placeholder slice a Service without endpoints would get (upstream placeholderSliceCompare)? */
function isPlaceholder(sl: V1EndpointSlice, placeholder: V1EndpointSlice): boolean {
  const ref = (r: V1EndpointSlice) => (r.metadata?.ownerReferences ?? []).map((o) => JSON.stringify([o.apiVersion, o.kind, o.name, o.uid, !!o.controller, !!o.blockOwnerDeletion]));
  return (
    sl.metadata?.namespace === placeholder.metadata?.namespace &&
    semanticEqual(sl.metadata?.labels ?? {}, placeholder.metadata?.labels ?? {}) &&
    semanticEqual(ref(sl), ref(placeholder)) &&
    sl.addressType === placeholder.addressType &&
    (sl.endpoints ?? []).length === 0 &&
    (sl.ports ?? []).length === 0
  );
}

/**
 * What to create, update and delete for one address type of a Service (upstream
 * reconcileByAddressType + the create-to-update recycling of finalize). `existing`: our slices of
 * this address type.
 */
export function planSlices(svc: V1Service, groups: Map<string, DesiredGroup>, existing: readonly V1EndpointSlice[], addressType: AddressType, max = MAX_ENDPOINTS_PER_SLICE): SlicePlan {
  const plan: SlicePlan = { create: [], update: [], delete: [] };
  const byPorts = new Map<string, V1EndpointSlice[]>();
  for (const sl of existing) {
    if (!ownedBy(sl, svc)) {
      plan.delete.push(sl);
      continue;
    }
    const k = portMapKey(sl.ports);
    byPorts.set(k, [...(byPorts.get(k) ?? []), sl]);
  }
  for (const [k, g] of groups) {
    const p = planPortMapping(svc, byPorts.get(k) ?? [], g, addressType, max);
    plan.create.push(...p.create);
    plan.update.push(...p.update);
    plan.delete.push(...p.delete);
  }
  for (const [k, slices] of byPorts) if (!groups.has(k)) plan.delete.push(...slices);
  if (existing.length === plan.delete.length && plan.create.length === 0) {
    const placeholder = newSlice(svc, [], addressType);
    if (plan.delete.length === 1 && isPlaceholder(plan.delete[0]!, placeholder)) plan.delete = [];
    else plan.create.push(placeholder);
  }
  // finalize: a slice about to be deleted is reused for a slice to create
  for (let i = 0; i < plan.delete.length && plan.create.length > 0; ) {
    const del = plan.delete[i]!;
    if (del.addressType === addressType && ownedBy(del, svc)) {
      const sl = plan.create.pop()!;
      const { generateName: _g, ...meta } = sl.metadata!;
      void _g;
      plan.update.push({ ...sl, metadata: { ...meta, name: del.metadata!.name, resourceVersion: del.metadata?.resourceVersion, annotations: del.metadata?.annotations } });
      plan.delete.splice(i, 1);
    } else i++;
  }
  return plan;
}

const slicesPath = (ns: string) => `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`;

export class EndpointSliceController {
  /** generations we wrote per slice ("ns/name" -> generation, or 'deleted'), per service */
  private readonly written = new Map<string, Map<string, number | 'deleted'>>();
  private readonly triggerTimes = new TriggerTimeTracker();

  constructor(
    private readonly d: ControllerDeps,
    private readonly opts: EndpointSliceOptions = {},
  ) {}

  private enqueueService(svc: V1Service): void {
    this.d.enqueue(objectKey(svc), criticalityRank(this.d.criticality.serviceCriticality(svc)));
  }

  /** Services in the pod's namespace whose selector matches the pod's labels. */
  private servicesFor(pod: V1Pod): V1Service[] {
    return this.d.informers.services
      .list()
      .filter((s) => s.metadata?.namespace === pod.metadata?.namespace && hasSelector(s) && serviceSelector(s)(pod.metadata?.labels ?? {}));
  }

  register(): void {
    const { pods, services, endpointSlices: slices } = this.d.informers;
    services.on('add', (s) => this.enqueueService(s));
    services.on('update', (s) => this.enqueueService(s));
    services.on('delete', (s) => this.d.enqueue(objectKey(s), PRIORITY_NONE));
    const onPod = (p: V1Pod, old?: V1Pod) => {
      const svcs = new Map<string, V1Service>();
      for (const s of this.servicesFor(p)) svcs.set(objectKey(s), s);
      if (old) for (const s of this.servicesFor(old)) svcs.set(objectKey(s), s);
      for (const s of svcs.values()) this.enqueueService(s);
    };
    pods.on('add', (p) => onPod(p));
    pods.on('update', onPod);
    pods.on('delete', (p) => onPod(p));
    const onSlice = (sl: V1EndpointSlice) => {
      if (sl.metadata?.labels?.[MANAGED_BY_LABEL] !== MANAGED_BY) return;
      const name = sl.metadata?.labels?.[SERVICE_NAME_LABEL];
      const svc = name && services.get(`${sl.metadata!.namespace}/${name}`);
      if (svc) this.enqueueService(svc);
    };
    slices.on('add', onSlice);
    slices.on('update', onSlice);
    slices.on('delete', onSlice);
  }

  /** The slices of a service in the cache (ours only). */
  private ownedSlices(ns: string, name: string): V1EndpointSlice[] {
    return this.d.informers.endpointSlices.list().filter((s) => s.metadata?.namespace === ns && s.metadata?.labels?.[SERVICE_NAME_LABEL] === name && s.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY);
  }

  /** Is the cache behind what we wrote for this service? (upstream endpointSliceTracker.StaleSlices) */
  private stale(key: string): boolean {
    const w = this.written.get(key);
    if (!w) return false;
    for (const [sliceKey, gen] of w) {
      const cached = this.d.informers.endpointSlices.get(sliceKey);
      if (gen === 'deleted' ? cached !== undefined : (cached?.metadata?.generation ?? 0) < gen) return true;
    }
    return false;
  }

  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const [ns, name] = key.split('/') as [string, string];
    const svc = this.d.informers.services.get(key);
    if (!svc) {
      // the garbage collector removes the slices of a deleted Service through ownerReferences
      this.written.delete(key);
      this.triggerTimes.deleteService(key);
      return;
    }
    // ExternalName and selector-less Services: their slices (if any) are left alone, as upstream
    if (svc.spec?.type === 'ExternalName' || !hasSelector(svc)) return;
    if (this.stale(key)) return { requeueAfterMs: 100 };
    const matches = serviceSelector(svc);
    const pods = this.d.informers.pods.list().filter((p) => p.metadata?.namespace === ns && matches(p.metadata?.labels ?? {}));
    const triggerTime = this.triggerTimes.compute(svc, pods);
    const w = this.written.get(key) ?? new Map<string, number | 'deleted'>();
    this.written.set(key, w);
    const types = addressTypesFor(svc);
    // slices being deleted are dropped, so the controller does not wait for them (as upstream)
    const existing = this.ownedSlices(ns, name)
      .filter((s) => !s.metadata?.deletionTimestamp)
      .sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1));
    const skipped: string[] = [];
    try {
      for (const t of types) {
        const groups = desiredEndpoints(svc, pods, (n) => this.d.informers.nodes.get(n), t, skipped);
        const plan = planSlices(svc, groups, existing.filter((s) => s.addressType === t), t, this.opts.maxEndpointsPerSlice ?? MAX_ENDPOINTS_PER_SLICE);
        if (!(await this.apply(svc, plan, triggerTime, w))) return;
      }
      for (const sl of existing) if (!types.includes(sl.addressType as AddressType)) await this.deleteSlice(key, sl);
    } catch (err) {
      // a conflict is our cache lagging, retried at once (upstream: stale-cache errors are silent)
      if (!isConflict(err)) this.failed(svc, err);
      throw err;
    }
    if (skipped.length) {
      // upstream: the other endpoints are written, the Service is retried with backoff
      const err = new Error(`skipping Pod(s) ${[...new Set(skipped)].join(', ')} for Service ${key}: Node not found`);
      this.failed(svc, err);
      throw err;
    }
  };

  private failed(svc: V1Service, err: unknown): void {
    (this.d.events ?? NO_EVENTS).event({ apiVersion: 'v1', kind: 'Service', metadata: svc.metadata }, 'Warning', 'FailedToUpdateEndpointSlices', `Error updating Endpoint Slices for Service ${objectKey(svc)}: ${(err as Error).message}`);
  }

  /** upstream finalize; false when the namespace is terminating (nothing more to do). */
  private async apply(svc: V1Service, plan: SlicePlan, triggerTime: number | undefined, written: Map<string, number | 'deleted'>): Promise<boolean> {
    const ns = svc.metadata!.namespace!;
    const key = objectKey(svc);
    if (!svc.metadata?.deletionTimestamp) {
      for (const sl of plan.create) {
        setTriggerTime((sl.metadata!.annotations ??= {}), triggerTime);
        if (Object.keys(sl.metadata!.annotations).length === 0) delete sl.metadata!.annotations;
        try {
          const res = await this.d.client.post<V1EndpointSlice>(slicesPath(ns), sl);
          written.set(`${ns}/${res.metadata!.name}`, res.metadata?.generation ?? 1);
          this.d.log.debug({ service: key, slice: res.metadata?.name, endpoints: (sl.endpoints ?? []).length }, 'created EndpointSlice');
        } catch (err) {
          if (isNamespaceTerminating(err)) return false;
          throw err;
        }
      }
    }
    for (const sl of plan.update) {
      const annotations = { ...(sl.metadata?.annotations ?? {}) };
      setTriggerTime(annotations, triggerTime);
      const body: V1EndpointSlice = { ...sl, apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { ...sl.metadata, annotations }, endpoints: sl.endpoints ?? [] };
      const res = await this.d.client.put<V1EndpointSlice>(`${slicesPath(ns)}/${sl.metadata!.name}`, body);
      written.set(`${ns}/${res.metadata!.name}`, res.metadata?.generation ?? 1);
      this.d.log.debug({ service: key, slice: res.metadata?.name, endpoints: body.endpoints.length }, 'updated EndpointSlice');
    }
    for (const sl of plan.delete) await this.deleteSlice(key, sl);
    return true;
  }

  private async deleteSlice(key: string, sl: V1EndpointSlice): Promise<void> {
    try {
      await this.d.client.delete(`${slicesPath(sl.metadata!.namespace!)}/${sl.metadata!.name}`);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const w = this.written.get(key) ?? new Map();
    w.set(objectKey(sl), 'deleted');
    this.written.set(key, w);
  }
}

/** upstream: a nil selector means "endpoints managed by someone else" (an empty one is stored as none) */
export function hasSelector(svc: V1Service): boolean {
  return !!svc.spec?.selector && Object.keys(svc.spec.selector).length > 0;
}
