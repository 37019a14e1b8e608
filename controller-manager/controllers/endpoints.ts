/**
 * Legacy Endpoints controller, behaviour as upstream pkg/controller/endpoint (for clusters that
 * run kube-controller-manager with -endpoints-controller): one core/v1 Endpoints object per Service
 * with a selector, named like the Service; the selected pods with an IP become addresses when Ready
 * (or when the Service has publishNotReadyAddresses) and notReadyAddresses otherwise; ports are the
 * Service's ports resolved against each pod by number or by name (upstream FindPort); subsets are
 * repacked by port set (upstream RepackSubsets); at most 1000 addresses, with the over-capacity
 * annotation as upstream; the label endpoints.kubernetes.io/managed-by=endpoint-controller and the
 * Service's labels (plus service.kubernetes.io/headless for headless Services). Endpoints of a
 * Service that is gone or lost its selector are deleted (only the ones this controller manages).
 * The annotation endpoints.kubernetes.io/last-change-trigger-time is written as the latest change
 * of the Service or a selected pod (creation, Ready transition, deletion request) we saw.
 * What is ours: keys carry the Service's criticality (thesis §5.3.1); period 50 ms (§6.1.1).
 */
import type { CoreV1EndpointPort, V1EndpointAddress, V1EndpointSubset, V1Endpoints, V1Pod, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { criticalityRank, serviceSelector, type CriticalityIndex } from '../../core/criticality.ts';
import type { ResilientInformer } from '../../core/informer.ts';
import { isNotFound, type KubeClient } from '../../core/kube.ts';
import { isPodReady, objectKey, podReadyCondition } from '../../core/objects.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../../core/events.ts';
import type { ReconcileResult } from '../queue/index.ts';
import { resolvePort } from './endpointslice.ts';

export const MAX_ENDPOINT_ADDRESSES = 1000;
export const ENDPOINTS_MANAGED_BY_LABEL = 'endpoints.kubernetes.io/managed-by';
export const ENDPOINTS_MANAGED_BY = 'endpoint-controller';
export const OVER_CAPACITY_ANNOTATION = 'endpoints.kubernetes.io/over-capacity';
export const LAST_CHANGE_TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';
const HEADLESS_LABEL = 'service.kubernetes.io/headless';

export interface EndpointsDeps {
  client: KubeClient;
  pods: ResilientInformer<V1Pod>;
  services: ResilientInformer<V1Service>;
  endpoints: ResilientInformer<V1Endpoints>;
  criticality: CriticalityIndex;
  enqueue: (key: string, priority: number, afterMs?: number) => void;
  log: Logger;
  /** upstream event FailedToUpdateEndpoint on the Service */
  events?: ComponentEventRecorder;
}

/** upstream shouldPodBeInEndpoints (+ the terminating rule of the endpoints controller) */
function podInEndpoints(pod: V1Pod, svc: V1Service): boolean {
  if (!pod.status?.podIP) return false;
  if (pod.status.phase === 'Succeeded' || pod.status.phase === 'Failed') return false;
  if (pod.metadata?.deletionTimestamp && !svc.spec?.publishNotReadyAddresses) return false;
  return true;
}

const byIp = (a: V1EndpointAddress, b: V1EndpointAddress) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);

/** The subsets of a Service's Endpoints (upstream syncService + RepackSubsets), and whether they were truncated. */
export function desiredSubsets(svc: V1Service, pods: V1Pod[]): { subsets: V1EndpointSubset[]; truncated: boolean } {
  const groups = new Map<string, { ports: CoreV1EndpointPort[]; ready: V1EndpointAddress[]; notReady: V1EndpointAddress[] }>();
  const tolerateUnready = !!svc.spec?.publishNotReadyAddresses;
  for (const pod of pods) {
    if (!podInEndpoints(pod, svc)) continue;
    const addr: V1EndpointAddress = {
      ip: pod.status!.podIP!,
      nodeName: pod.spec?.nodeName,
      targetRef: { kind: 'Pod', namespace: pod.metadata!.namespace, name: pod.metadata!.name, uid: pod.metadata!.uid },
    };
    if (pod.spec?.hostname && pod.spec.subdomain === svc.metadata?.name && pod.metadata?.namespace === svc.metadata?.namespace) addr.hostname = pod.spec.hostname;
    const ports: CoreV1EndpointPort[] = [];
    for (const sp of svc.spec?.ports ?? []) {
      const port = resolvePort(pod, sp);
      if (port === undefined) continue; // upstream: "Failed to find port for service" -> skipped
      ports.push({ ...(sp.name ? { name: sp.name } : {}), port, protocol: sp.protocol ?? 'TCP', ...(sp.appProtocol ? { appProtocol: sp.appProtocol } : {}) });
    }
    // a Service with ports, none of which resolves for this pod: the pod is not an endpoint
    if ((svc.spec?.ports ?? []).length > 0 && ports.length === 0) continue;
    ports.sort((a, b) => ((a.name ?? '') < (b.name ?? '') ? -1 : (a.name ?? '') > (b.name ?? '') ? 1 : a.port - b.port));
    const key = JSON.stringify(ports);
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { ports, ready: [], notReady: [] }));
    if (tolerateUnready || isPodReady(pod)) g.ready.push(addr);
    else g.notReady.push(addr);
  }
  let budget = MAX_ENDPOINT_ADDRESSES;
  let truncated = false;
  const subsets: V1EndpointSubset[] = [];
  for (const g of [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v)) {
    g.ready.sort(byIp);
    g.notReady.sort(byIp);
    // upstream truncateEndpoints: ready addresses are kept first
    const ready = g.ready.slice(0, budget);
    budget -= ready.length;
    const notReady = g.notReady.slice(0, budget);
    budget -= notReady.length;
    if (ready.length < g.ready.length || notReady.length < g.notReady.length) truncated = true;
    if (ready.length + notReady.length === 0) continue;
    subsets.push({
      ...(ready.length ? { addresses: ready } : {}),
      ...(notReady.length ? { notReadyAddresses: notReady } : {}),
      ...(g.ports.length ? { ports: g.ports } : {}),
    });
  }
  return { subsets, truncated };
}

const epPath = (ns: string) => `/api/v1/namespaces/${ns}/endpoints`;

export class EndpointsController {
  /** latest change time per Service key (upstream TriggerTimeTracker, simplified) */
  private readonly triggerTime = new Map<string, number>();

  constructor(private readonly d: EndpointsDeps) {}

  private enqueueService(svc: V1Service): void {
    this.d.enqueue(objectKey(svc), criticalityRank(this.d.criticality.serviceCriticality(svc)));
  }

  private noteTrigger(key: string, ms: number | undefined): void {
    if (ms === undefined || !Number.isFinite(ms)) return;
    this.triggerTime.set(key, Math.max(this.triggerTime.get(key) ?? 0, ms));
  }

  private servicesFor(pod: V1Pod): V1Service[] {
    return this.d.services.list().filter((s) => s.metadata?.namespace === pod.metadata?.namespace && serviceSelector(s)(pod.metadata?.labels ?? {}));
  }

  register(): void {
    const { pods, services, endpoints } = this.d;
    const onService = (s: V1Service) => {
      this.noteTrigger(objectKey(s), new Date(s.metadata?.creationTimestamp ?? 0).getTime());
      this.enqueueService(s);
    };
    services.on('add', onService);
    services.on('update', onService);
    services.on('delete', (s) => {
      this.triggerTime.delete(objectKey(s));
      this.d.enqueue(objectKey(s), 0);
    });
    const onPod = (p: V1Pod, old?: V1Pod) => {
      const svcs = new Map<string, V1Service>();
      for (const s of this.servicesFor(p)) svcs.set(objectKey(s), s);
      if (old) for (const s of this.servicesFor(old)) svcs.set(objectKey(s), s);
      const changedAt = p.metadata?.deletionTimestamp
        ? new Date(p.metadata.deletionTimestamp).getTime()
        : new Date(podReadyCondition(p)?.lastTransitionTime ?? p.metadata?.creationTimestamp ?? 0).getTime();
      for (const s of svcs.values()) {
        this.noteTrigger(objectKey(s), changedAt);
        this.enqueueService(s);
      }
    };
    pods.on('add', (p) => onPod(p));
    pods.on('update', onPod);
    pods.on('delete', (p) => onPod(p));
    // someone else changed or deleted an Endpoints we manage: put it back
    const onEndpoints = (ep: V1Endpoints) => {
      const svc = services.get(objectKey(ep));
      if (svc) this.enqueueService(svc);
    };
    endpoints.on('update', onEndpoints);
    endpoints.on('delete', onEndpoints);
  }

  reconcile = async (key: string): Promise<ReconcileResult | void> => {
    const [ns, name] = key.split('/') as [string, string];
    const svc = this.d.services.get(key);
    const current = this.d.endpoints.get(key);
    if (!svc || !svc.spec?.selector || svc.spec.type === 'ExternalName') {
      // upstream deletes the Endpoints of a deleted Service; for a selector-less Service the
      // Endpoints belong to the user, unless they carry our managed-by label
      if (current && (!svc || current.metadata?.labels?.[ENDPOINTS_MANAGED_BY_LABEL] === ENDPOINTS_MANAGED_BY)) {
        try {
          await this.d.client.delete(`${epPath(ns)}/${name}`);
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
      this.triggerTime.delete(key);
      return;
    }
    const matches = serviceSelector(svc);
    const pods = this.d.pods.list().filter((p) => p.metadata?.namespace === ns && matches(p.metadata?.labels ?? {}));
    const { subsets, truncated } = desiredSubsets(svc, pods);
    const labels: Record<string, string> = { ...(svc.metadata?.labels ?? {}), [ENDPOINTS_MANAGED_BY_LABEL]: ENDPOINTS_MANAGED_BY };
    delete labels[HEADLESS_LABEL];
    if (svc.spec.clusterIP === 'None') labels[HEADLESS_LABEL] = '';
    const annotations: Record<string, string> = { ...(current?.metadata?.annotations ?? {}) };
    delete annotations[OVER_CAPACITY_ANNOTATION];
    if (truncated) annotations[OVER_CAPACITY_ANNOTATION] = 'truncated';
    const sameContent =
      current &&
      JSON.stringify(current.subsets ?? []) === JSON.stringify(subsets) &&
      JSON.stringify(current.metadata?.labels ?? {}) === JSON.stringify(labels) &&
      (current.metadata?.annotations?.[OVER_CAPACITY_ANNOTATION] ?? '') === (annotations[OVER_CAPACITY_ANNOTATION] ?? '');
    if (sameContent) return;
    const trigger = this.triggerTime.get(key);
    if (trigger) annotations[LAST_CHANGE_TRIGGER_TIME_ANNOTATION] = new Date(trigger).toISOString();
    const body: V1Endpoints = {
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { name, namespace: ns, labels, annotations, ...(current ? { resourceVersion: current.metadata?.resourceVersion } : {}) },
      subsets,
    };
    if (current) {
      try {
        await this.d.client.put(`${epPath(ns)}/${name}`, body);
      } catch (err) {
        // our cache is behind (often our own last write): the watch event re-queues the Service
        if ((err as { statusCode?: number }).statusCode === 409) return { requeueAfterMs: 250 };
        if (isNotFound(err)) return { requeueAfterMs: 100 };
        this.failed(svc, err);
        throw err;
      }
    } else {
      try {
        await this.d.client.post(epPath(ns), body);
      } catch (err) {
        // created meanwhile (cache lag): the next sync updates it
        if ((err as { statusCode?: number }).statusCode === 409) return { requeueAfterMs: 100 };
        this.failed(svc, err);
        throw err;
      }
    }
    this.d.log.debug({ service: key, subsets: subsets.length, truncated }, current ? 'updated Endpoints' : 'created Endpoints');
  };

  private failed(svc: V1Service, err: unknown): void {
    (this.d.events ?? NO_EVENTS).event({ apiVersion: 'v1', kind: 'Service', metadata: svc.metadata }, 'Warning', 'FailedToUpdateEndpoint', `Failed to update endpoint ${objectKey(svc)}: ${(err as Error).message}`);
  }
}
