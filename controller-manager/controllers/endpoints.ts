/**
 * Legacy Endpoints controller, behaviour as upstream pkg/controller/endpoint (for clusters that
 * run kube-controller-manager with -endpoints-controller): one core/v1 Endpoints object per Service
 * with a selector, named like the Service; the selected pods with an IP become addresses when Ready
 * (or when the Service has publishNotReadyAddresses) and notReadyAddresses otherwise; ports are the
 * Service's ports resolved against each pod by number or by name (upstream FindPort); subsets are
 * repacked by port set (upstream RepackSubsets); at most 1000 addresses, with the over-capacity
 * annotation and upstream's proportional truncation (ready addresses first, each subset keeps its
 * share); the address of the Service's first IP family from status.podIPs; the label
 * endpoints.kubernetes.io/managed-by=endpoint-controller and the Service's labels (plus
 * service.kubernetes.io/headless for headless Services). The Endpoints of a deleted Service are
 * deleted; those of a Service that lost its selector are left alone (as upstream). An unchanged
 * Endpoints (compared semantically) is not written. The annotation
 * endpoints.kubernetes.io/last-change-trigger-time comes from upstream's TriggerTimeTracker.
 * What is ours: keys carry the Service's criticality (thesis §5.3.1); period 50 ms (§6.1.1).
 */
import type { CoreV1EndpointPort, V1EndpointAddress, V1EndpointSubset, V1Endpoints, V1Pod, V1Service } from '@kubernetes/client-node';
import { criticalityRank, serviceSelector } from '../../core/criticality.ts';
import { PRIORITY_NONE } from '../../core/priority.ts';
import { isNotFound } from '../../core/kube.ts';
import { isIPv6 } from 'node:net';
import { isPodReady, objectKey } from '../../core/objects.ts';
import { NO_EVENTS } from '../../core/events.ts';
import type { ReconcileResult } from '../queue/index.ts';
import type { ControllerDeps } from './deps.ts';
import { hasSelector, resolvePort, shouldPodBeInEndpoints, shouldSetHostname } from './endpointslice.ts';
import { isNamespaceTerminating, semanticEqual } from './semantic.ts';
import { setTriggerTime, TriggerTimeTracker } from './trigger-time.ts';

export const MAX_ENDPOINT_ADDRESSES = 1000;
export const ENDPOINTS_MANAGED_BY_LABEL = 'endpoints.kubernetes.io/managed-by';
export const ENDPOINTS_MANAGED_BY = 'endpoint-controller';
export const OVER_CAPACITY_ANNOTATION = 'endpoints.kubernetes.io/over-capacity';
export { LAST_CHANGE_TRIGGER_TIME_ANNOTATION } from './trigger-time.ts';
const HEADLESS_LABEL = 'service.kubernetes.io/headless';

/** upstream: ShouldPodBeInEndpoints(pod, includeTerminating = publishNotReadyAddresses) */
const podInEndpoints = (pod: V1Pod, svc: V1Service) => shouldPodBeInEndpoints(pod, !!svc.spec?.publishNotReadyAddresses);

/** upstream podToEndpointAddressForService: the pod IP of the Service's (first) family, if any. */
export function endpointIP(svc: V1Service, pod: V1Pod): string | undefined {
  let v6: boolean;
  const families = svc.spec?.ipFamilies ?? [];
  if (families.length > 0) v6 = families[0] === 'IPv6';
  else if (svc.spec?.clusterIP && svc.spec.clusterIP !== 'None') v6 = isIPv6(svc.spec.clusterIP);
  else v6 = isIPv6(pod.status?.podIP ?? '');
  const ips = (pod.status?.podIPs ?? []).map((p) => p.ip);
  if (ips.length === 0 && pod.status?.podIP) ips.push(pod.status.podIP);
  return ips.find((ip) => !!ip && isIPv6(ip) === v6);
}

/** targetRef without resourceVersion (upstream endpointSubsetsEqualIgnoreResourceVersion) */
const noRv = (a: V1EndpointAddress): V1EndpointAddress => (a.targetRef ? { ...a, targetRef: { ...a.targetRef, resourceVersion: undefined } } : a);

const byIp = (a: V1EndpointAddress, b: V1EndpointAddress) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : 0);

/** The subsets of a Service's Endpoints (upstream syncService + RepackSubsets), and whether they were truncated. */
export function desiredSubsets(svc: V1Service, pods: V1Pod[]): { subsets: V1EndpointSubset[]; truncated: boolean } {
  // upstream RepackSubsets: every port maps to the set of addresses that offer it; ports with the same
  // set of addresses (and readiness) form one subset. A pod whose named
  // port is missing is in the subsets of the ports it has only (2 pods with web:8080 / web:8081 and a
  // third with metrics only give {3 pods: metrics}, {pod a: web 8080}, {pod b: web 8081}).
  type Entry = { addr: V1EndpointAddress; ready: boolean };
  const byPort = new Map<string, { port: CoreV1EndpointPort | undefined; addrs: Map<string, Entry> }>();
  const offer = (port: CoreV1EndpointPort | undefined, e: Entry) => {
    const key = port ? JSON.stringify([port.name ?? '', port.port, port.protocol ?? '', port.appProtocol ?? '']) : '';
    let p = byPort.get(key);
    if (!p) byPort.set(key, (p = { port, addrs: new Map() }));
    p.addrs.set(`${e.addr.ip}/${e.addr.targetRef?.uid ?? ''}`, e);
  };
  const tolerateUnready = !!svc.spec?.publishNotReadyAddresses;
  for (const pod of pods) {
    if (!podInEndpoints(pod, svc)) continue;
    const ip = endpointIP(svc, pod);
    if (!ip) continue; // upstream: "Failed to find endpoint for service" -> skipped
    const addr: V1EndpointAddress = {
      ip,
      nodeName: pod.spec?.nodeName,
      targetRef: { kind: 'Pod', namespace: pod.metadata!.namespace, name: pod.metadata!.name, uid: pod.metadata!.uid },
    };
    if (shouldSetHostname(pod, svc)) addr.hostname = pod.spec!.hostname;
    const entry = { addr, ready: tolerateUnready || isPodReady(pod) };
    const svcPorts = svc.spec?.ports ?? [];
    // a Service without ports has endpoints only when headless (upstream's sentinel port)
    if (svcPorts.length === 0) {
      if (svc.spec?.clusterIP === 'None') offer(undefined, entry);
      continue;
    }
    for (const sp of svcPorts) {
      const port = resolvePort(pod, sp);
      if (port === undefined) continue; // upstream: "Failed to find port for service" -> skipped
      offer({ ...(sp.name ? { name: sp.name } : {}), port, protocol: sp.protocol ?? 'TCP', ...(sp.appProtocol ? { appProtocol: sp.appProtocol } : {}) }, entry);
    }
  }
  // ports with the same address set (addresses and their readiness) share a subset
  const groups = new Map<string, { ports: CoreV1EndpointPort[]; entries: Entry[] }>();
  for (const { port, addrs } of byPort.values()) {
    const entries = [...addrs.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const key = JSON.stringify(entries.map(([k, e]) => [k, e.ready]));
    let g = groups.get(key);
    if (!g) groups.set(key, (g = { ports: [], entries: entries.map(([, e]) => e) }));
    if (port) g.ports.push(port);
  }
  const subsets: V1EndpointSubset[] = [];
  for (const [, g] of [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    g.ports.sort((a, b) => ((a.name ?? '') < (b.name ?? '') ? -1 : (a.name ?? '') > (b.name ?? '') ? 1 : a.port - b.port));
    const ready = g.entries.filter((e) => e.ready).map((e) => e.addr).sort(byIp);
    const notReady = g.entries.filter((e) => !e.ready).map((e) => e.addr).sort(byIp);
    subsets.push({
      ...(ready.length ? { addresses: ready } : {}),
      ...(notReady.length ? { notReadyAddresses: notReady } : {}),
      ...(g.ports.length ? { ports: g.ports } : {}),
    });
  }
  const truncated = truncateSubsets(subsets, MAX_ENDPOINT_ADDRESSES);
  return { subsets: subsets.filter((s) => (s.addresses?.length ?? 0) + (s.notReadyAddresses?.length ?? 0) > 0), truncated };
}

/**
 * upstream truncateEndpoints: above `max` addresses, not-ready addresses are cut first; if the ready
 * ones alone exceed `max`, all not-ready ones go and the ready ones are cut. Each subset keeps its
 * share of what is cut, rounded up, in subset order (so the last subsets may get less).
 */
export function truncateSubsets(subsets: V1EndpointSubset[], max: number): boolean {
  let ready = 0;
  let notReady = 0;
  for (const s of subsets) {
    ready += s.addresses?.length ?? 0;
    notReady += s.notReadyAddresses?.length ?? 0;
  }
  if (ready + notReady <= max) return false;
  const truncateReady = ready > max;
  const budget = truncateReady ? max : max - ready;
  const total = truncateReady ? ready : notReady;
  let left = budget;
  for (const s of subsets) {
    const n = (truncateReady ? s.addresses?.length : s.notReadyAddresses?.length) ?? 0;
    const take = Math.min(Math.ceil((n / total) * budget), left);
    if (truncateReady) {
      s.addresses = (s.addresses ?? []).slice(0, take);
      delete s.notReadyAddresses;
      left -= s.addresses.length;
      if (s.addresses.length === 0) delete s.addresses;
    } else {
      s.notReadyAddresses = (s.notReadyAddresses ?? []).slice(0, take);
      left -= s.notReadyAddresses.length;
      if (s.notReadyAddresses.length === 0) delete s.notReadyAddresses;
    }
  }
  return true;
}

const epPath = (ns: string) => `/api/v1/namespaces/${ns}/endpoints`;

export class EndpointsController {
  private readonly triggerTimes = new TriggerTimeTracker();

  constructor(private readonly d: ControllerDeps) {}

  private enqueueService(svc: V1Service): void {
    this.d.enqueue(objectKey(svc), criticalityRank(this.d.criticality.serviceCriticality(svc)));
  }

  private servicesFor(pod: V1Pod): V1Service[] {
    return this.d.informers.services.list().filter((s) => s.metadata?.namespace === pod.metadata?.namespace && hasSelector(s) && serviceSelector(s)(pod.metadata?.labels ?? {}));
  }

  register(): void {
    const { pods, services, endpoints } = this.d.informers;
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
    const svc = this.d.informers.services.get(key);
    const current = this.d.informers.endpoints.get(key);
    if (!svc) {
      // upstream deletes the Endpoints of a deleted Service unconditionally: the cache may not hold
      // an Endpoints that a sync of a moment ago created
      this.triggerTimes.deleteService(key);
      try {
        await this.d.client.delete(`${epPath(ns)}/${name}`);
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
      return;
    }
    // ExternalName and selector-less Services: their Endpoints belong to someone else, left alone
    if (svc.spec?.type === 'ExternalName' || !hasSelector(svc)) return;
    const matches = serviceSelector(svc);
    const pods = this.d.informers.pods.list().filter((p) => p.metadata?.namespace === ns && matches(p.metadata?.labels ?? {}));
    // computed on every sync, so the tracker's state moves on even when nothing is written (as upstream)
    const trigger = this.triggerTimes.compute(svc, pods);
    const { subsets, truncated } = desiredSubsets(svc, pods);
    const labels: Record<string, string> = { ...(svc.metadata?.labels ?? {}), [ENDPOINTS_MANAGED_BY_LABEL]: ENDPOINTS_MANAGED_BY };
    delete labels[HEADLESS_LABEL];
    if (svc.spec?.clusterIP === 'None') labels[HEADLESS_LABEL] = '';
    const annotations: Record<string, string> = { ...(current?.metadata?.annotations ?? {}) };
    delete annotations[OVER_CAPACITY_ANNOTATION];
    if (truncated) annotations[OVER_CAPACITY_ANNOTATION] = 'truncated';
    const withoutRv = (ss: V1EndpointSubset[] | undefined) =>
      (ss ?? []).map((s) => ({ ...s, addresses: s.addresses?.map(noRv), notReadyAddresses: s.notReadyAddresses?.map(noRv) }));
    const sameContent =
      current &&
      semanticEqual(withoutRv(current.subsets), withoutRv(subsets)) &&
      semanticEqual(current.metadata?.labels ?? {}, labels) &&
      (current.metadata?.annotations?.[OVER_CAPACITY_ANNOTATION] ?? '') === (annotations[OVER_CAPACITY_ANNOTATION] ?? '');
    if (sameContent) return;
    setTriggerTime(annotations, trigger);
    const body: V1Endpoints = {
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { name, namespace: ns, labels, ...(Object.keys(annotations).length ? { annotations } : {}), ...(current ? { resourceVersion: current.metadata?.resourceVersion } : {}) },
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
        // upstream: creates in a terminating namespace keep failing: the key is dropped
        if (isNamespaceTerminating(err)) return;
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
