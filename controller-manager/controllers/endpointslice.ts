/**
 * EndpointSlice controller, behaviour as upstream pkg/controller/endpointslice (simplified slice
 * packing): for every Service with a selector, the pods it selects that have an IP become endpoints
 * with ready/serving/terminating conditions, node name, zone and targetRef, grouped by their
 * resolved port set into slices of at most 100 endpoints, owned by the Service and labelled
 * kubernetes.io/service-name and endpointslice.kubernetes.io/managed-by as upstream (so kube-proxy
 * and a later switch back to the vanilla controller see ordinary slices). A tracker of the
 * generations we wrote keeps a lagging cache from producing duplicate slices (upstream
 * endpointSliceTracker). What is ours: keys carry the Service's criticality (thesis §5.3.1).
 */
import type { V1EndpointSlice, V1Endpoint, V1Node, V1Pod, V1Service, V1ServicePort, DiscoveryV1EndpointPort } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { criticalityRank, serviceSelector, type CriticalityIndex } from '../../core/criticality.ts';
import type { ResilientInformer } from '../../core/informer.ts';
import { isPodReady, objectKey } from '../../core/objects.ts';
import { isConflict, isNotFound, type KubeClient } from '../../core/kube.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../../core/events.ts';
import type { ReconcileResult } from '../queue/index.ts';

export const MAX_ENDPOINTS_PER_SLICE = 100;
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
export const MANAGED_BY_LABEL = 'endpointslice.kubernetes.io/managed-by';
export const MANAGED_BY = 'endpointslice-controller.k8s.io';
const ZONE_LABEL = 'topology.kubernetes.io/zone';

export interface EndpointSliceDeps {
  client: KubeClient;
  pods: ResilientInformer<V1Pod>;
  services: ResilientInformer<V1Service>;
  slices: ResilientInformer<V1EndpointSlice>;
  nodes: ResilientInformer<V1Node>;
  criticality: CriticalityIndex;
  enqueue: (key: string, priority: number, afterMs?: number) => void;
  log: Logger;
  /** upstream event FailedToUpdateEndpointSlices on the Service */
  events?: ComponentEventRecorder;
}

/** Resolves a Service port's targetPort against the pod's container ports (upstream podutil.FindPort). */
export function resolvePort(pod: V1Pod, sp: V1ServicePort): number | undefined {
  const target = sp.targetPort ?? sp.port;
  if (typeof target === 'number') return target;
  if (/^\d+$/.test(String(target))) return Number(target);
  for (const c of pod.spec?.containers ?? []) {
    for (const cp of c.ports ?? []) if (cp.name === target && (cp.protocol ?? 'TCP') === (sp.protocol ?? 'TCP')) return cp.containerPort;
  }
  return undefined;
}

/** The endpoint of a pod for a Service (upstream podToEndpoint). */
export function podEndpoint(pod: V1Pod, svc: V1Service, node: V1Node | undefined): V1Endpoint {
  const terminating = !!pod.metadata?.deletionTimestamp;
  const serving = isPodReady(pod);
  const ready = svc.spec?.publishNotReadyAddresses ? true : serving && !terminating;
  const zone = node?.metadata?.labels?.[ZONE_LABEL];
  return {
    addresses: [pod.status!.podIP!],
    conditions: { ready, serving, terminating },
    nodeName: pod.spec?.nodeName,
    ...(zone ? { zone } : {}),
    targetRef: { kind: 'Pod', namespace: pod.metadata!.namespace, name: pod.metadata!.name, uid: pod.metadata!.uid },
  };
}

/** Desired slices' contents for a Service: endpoints grouped by port set, sorted for stable packing. */
export function desiredEndpoints(svc: V1Service, pods: V1Pod[], nodeOf: (name: string) => V1Node | undefined): Map<string, { ports: DiscoveryV1EndpointPort[]; endpoints: V1Endpoint[] }> {
  const groups = new Map<string, { ports: DiscoveryV1EndpointPort[]; endpoints: V1Endpoint[] }>();
  for (const pod of pods) {
    if (!pod.status?.podIP || pod.status.phase === 'Succeeded' || pod.status.phase === 'Failed') continue;
    // upstream: terminating pods are kept (terminating=true) only when they are still serving
    if (pod.metadata?.deletionTimestamp && !isPodReady(pod)) continue;
    const ports: DiscoveryV1EndpointPort[] = [];
    for (const sp of svc.spec?.ports ?? []) {
      const port = resolvePort(pod, sp);
      if (port === undefined) continue;
      ports.push({ name: sp.name ?? '', port, protocol: sp.protocol ?? 'TCP', ...(sp.appProtocol ? { appProtocol: sp.appProtocol } : {}) });
    }
    const key = JSON.stringify(ports);
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { ports, endpoints: [] }));
    g.endpoints.push(podEndpoint(pod, svc, nodeOf(pod.spec?.nodeName ?? '')));
  }
  for (const g of groups.values()) g.endpoints.sort((a, b) => (a.targetRef!.name! < b.targetRef!.name! ? -1 : a.targetRef!.name! > b.targetRef!.name! ? 1 : 0));
  return groups;
}

const slicesPath = (ns: string) => `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`;

export class EndpointSliceController {
  /** generations we wrote per slice ("ns/name" -> generation, or 'deleted'), per service */
  private readonly written = new Map<string, Map<string, number | 'deleted'>>();

  constructor(private readonly d: EndpointSliceDeps) {}

  private enqueueService(svc: V1Service): void {
    this.d.enqueue(objectKey(svc), criticalityRank(this.d.criticality.serviceCriticality(svc)));
  }

  /** Services in the pod's namespace whose selector matches the pod's labels. */
  private servicesFor(pod: V1Pod): V1Service[] {
    return this.d.services
      .list()
      .filter((s) => s.metadata?.namespace === pod.metadata?.namespace && serviceSelector(s)(pod.metadata?.labels ?? {}));
  }

  register(): void {
    const { pods, services, slices } = this.d;
    services.on('add', (s) => this.enqueueService(s));
    services.on('update', (s) => this.enqueueService(s));
    services.on('delete', (s) => {
      this.written.delete(objectKey(s));
      this.d.enqueue(objectKey(s), 0);
    });
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
    return this.d.slices.list().filter((s) => s.metadata?.namespace === ns && s.metadata?.labels?.[SERVICE_NAME_LABEL] === name && s.metadata?.labels?.[MANAGED_BY_LABEL] === MANAGED_BY);
  }

  /** Is the cache behind what we wrote for this service? (upstream endpointSliceTracker.StaleSlices) */
  private stale(key: string): boolean {
    const w = this.written.get(key);
    if (!w) return false;
    for (const [sliceKey, gen] of w) {
      const cached = this.d.slices.get(sliceKey);
      if (gen === 'deleted' ? cached !== undefined : (cached?.metadata?.generation ?? 0) < gen) return true;
    }
    return false;
  }

  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const [ns, name] = key.split('/') as [string, string];
    const svc = this.d.services.get(key);
    if (!svc || !svc.spec?.selector || svc.spec.type === 'ExternalName') {
      // the garbage collector removes slices of a deleted Service through ownerReferences; a
      // Service that lost its selector keeps no managed slices (upstream deletes them)
      if (svc) for (const sl of this.ownedSlices(ns, name)) await this.deleteSlice(key, sl);
      this.written.delete(key);
      return;
    }
    if (this.stale(key)) return { requeueAfterMs: 100 };
    const matches = serviceSelector(svc);
    const pods = this.d.pods.list().filter((p) => p.metadata?.namespace === ns && matches(p.metadata?.labels ?? {}));
    const groups = desiredEndpoints(svc, pods, (n) => this.d.nodes.get(n));
    try {
      const existing = this.ownedSlices(ns, name).sort((a, b) => (a.metadata!.name! < b.metadata!.name! ? -1 : 1));
      const unused = new Set(existing);
      const w = this.written.get(key) ?? new Map<string, number | 'deleted'>();
      this.written.set(key, w);
      for (const g of groups.values()) {
        for (let i = 0; i < Math.max(1, Math.ceil(g.endpoints.length / MAX_ENDPOINTS_PER_SLICE)); i++) {
          const chunk = g.endpoints.slice(i * MAX_ENDPOINTS_PER_SLICE, (i + 1) * MAX_ENDPOINTS_PER_SLICE);
          if (chunk.length === 0 && groups.size > 1) continue;
          // reuse a slice with the same ports first, then any unused one
          const reuse = [...unused].find((s) => JSON.stringify(s.ports ?? []) === JSON.stringify(g.ports)) ?? [...unused][0];
          if (reuse) unused.delete(reuse);
          await this.writeSlice(key, svc, reuse, g.ports, chunk, w);
        }
      }
      if (groups.size === 0 && existing.length === 0) {
        // upstream keeps one empty slice per Service so consumers can tell "no endpoints" from "not synced"
        await this.writeSlice(key, svc, undefined, [], [], w);
      } else if (groups.size === 0) {
        const keep = existing[0]!;
        unused.delete(keep);
        await this.writeSlice(key, svc, keep, [], [], w);
      }
      for (const sl of unused) await this.deleteSlice(key, sl);
    } catch (err) {
      // a conflict is our cache lagging, retried at once (upstream: stale-cache errors are silent)
      if (!isConflict(err)) (this.d.events ?? NO_EVENTS).event({ apiVersion: 'v1', kind: 'Service', metadata: svc.metadata }, 'Warning', 'FailedToUpdateEndpointSlices', `Error updating Endpoint Slices for Service ${key}: ${(err as Error).message}`);
      throw err;
    }
  };

  private async writeSlice(
    key: string,
    svc: V1Service,
    current: V1EndpointSlice | undefined,
    ports: DiscoveryV1EndpointPort[],
    endpoints: V1Endpoint[],
    written: Map<string, number | 'deleted'>,
  ): Promise<void> {
    const ns = svc.metadata!.namespace!;
    const labels: Record<string, string> = { ...(svc.metadata?.labels ?? {}), [SERVICE_NAME_LABEL]: svc.metadata!.name!, [MANAGED_BY_LABEL]: MANAGED_BY };
    delete labels['service.kubernetes.io/headless'];
    if (svc.spec?.clusterIP === 'None') labels['service.kubernetes.io/headless'] = '';
    const body: V1EndpointSlice = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        ...(current ? { name: current.metadata!.name, resourceVersion: current.metadata!.resourceVersion } : { generateName: `${svc.metadata!.name}-` }),
        namespace: ns,
        labels,
        ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: svc.metadata!.name!, uid: svc.metadata!.uid!, controller: true, blockOwnerDeletion: true }],
      },
      addressType: 'IPv4',
      endpoints,
      ports,
    };
    if (current && JSON.stringify([current.endpoints ?? [], current.ports ?? [], current.metadata?.labels ?? {}]) === JSON.stringify([endpoints, ports, labels])) return;
    const res = current
      ? await this.d.client.put<V1EndpointSlice>(`${slicesPath(ns)}/${current.metadata!.name}`, body)
      : await this.d.client.post<V1EndpointSlice>(slicesPath(ns), body);
    written.set(`${ns}/${res.metadata!.name}`, res.metadata?.generation ?? 1);
    this.d.log.debug({ service: key, slice: res.metadata?.name, endpoints: endpoints.length }, current ? 'updated EndpointSlice' : 'created EndpointSlice');
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
