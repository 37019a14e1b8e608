/**
 * EndpointSlice controller against facts of upstream k8s.io/endpointslice (reconciler.go, utils.go,
 * util/endpointset.go, util/trigger_time_tracker.go) and pkg/api/v1/pod FindPort.
 */
import { describe, expect, it } from 'vitest';
import type { V1EndpointSlice, V1Node, V1Pod, V1Service, KubernetesObject } from '@kubernetes/client-node';
import {
  addressTypesFor,
  desiredEndpoints,
  EndpointSliceController,
  planSlices,
  podEndpoint,
  resolvePort,
  sliceLabels,
} from '../../controller-manager/controllers/endpointslice.ts';
import { controllerDeps, FakeInformer, fakeClient } from './fake-cluster.ts';

const T0 = '2026-01-01T10:00:00Z';
const svc = (extra: Partial<V1Service['spec']> = {}, labels?: Record<string, string>): V1Service => ({
  metadata: { name: 'web', namespace: 'ns', uid: 'svc-uid', creationTimestamp: new Date(T0), ...(labels ? { labels } : {}) },
  spec: { selector: { app: 'web' }, clusterIP: '10.0.0.10', ipFamilies: ['IPv4'], ports: [{ name: 'http', port: 80, protocol: 'TCP', targetPort: 'http' as never }], ...extra },
});
const pod = (name: string, o: { ip?: string; ips?: string[]; node?: string; ready?: boolean; deleting?: boolean; phase?: string; readySince?: string; hostname?: string; subdomain?: string } = {}): V1Pod => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}`, labels: { app: 'web' }, ...(o.deleting ? { deletionTimestamp: new Date(T0) } : {}) },
  spec: {
    nodeName: o.node ?? 'n1',
    ...(o.hostname ? { hostname: o.hostname } : {}),
    ...(o.subdomain ? { subdomain: o.subdomain } : {}),
    containers: [{ name: 'c', ports: [{ name: 'http', containerPort: 8080, protocol: 'TCP' }] }],
  },
  status: {
    phase: o.phase ?? 'Running',
    podIP: o.ips?.[0] ?? o.ip ?? `10.1.0.${name.replace(/\D/g, '') || 1}`,
    ...(o.ips ? { podIPs: o.ips.map((ip) => ({ ip })) } : {}),
    conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True', lastTransitionTime: new Date(o.readySince ?? T0) }],
  },
});
const node = (name: string, zone?: string): V1Node => ({ metadata: { name, ...(zone ? { labels: { 'topology.kubernetes.io/zone': zone } } : {}) } });
const nodes = new Map([['n1', node('n1', 'z1')], ['n2', node('n2')]]);
const nodeOf = (n: string) => nodes.get(n);
const flat = (svcObj: V1Service, pods: V1Pod[], type: 'IPv4' | 'IPv6' = 'IPv4', skipped?: string[]) =>
  [...desiredEndpoints(svcObj, pods, nodeOf, type, skipped).values()].flatMap((g) => [...g.endpoints.values()]);

describe('endpoints of pods (upstream podToEndpoint, ShouldPodBeInEndpoints)', () => {
  it('a pod whose Node is not in the cache is skipped, unless the Service publishes not-ready addresses', () => {
    const skipped: string[] = [];
    const eps = flat(svc(), [pod('p1'), pod('p2', { node: 'gone' })], 'IPv4', skipped);
    expect(eps.map((e) => e.targetRef!.name)).toEqual(['p1']);
    expect(skipped).toEqual(['p2']);
    const published = flat(svc({ publishNotReadyAddresses: true }), [pod('p1'), pod('p2', { node: 'gone' })]);
    expect(published.map((e) => [e.targetRef!.name, e.nodeName, e.zone])).toEqual([['p1', 'n1', 'z1'], ['p2', 'gone', undefined]]);
  });

  it('terminating pods stay: ready=false, serving from the Ready condition, terminating=true', () => {
    const eps = flat(svc(), [pod('p1', { deleting: true, ready: false }), pod('p2', { deleting: true }), pod('p3', { ready: false }), pod('p4', { phase: 'Failed' }), pod('p5', { phase: 'Succeeded' })]);
    expect(eps.map((e) => [e.targetRef!.name, e.conditions])).toEqual([
      ['p1', { ready: false, serving: false, terminating: true }],
      ['p2', { ready: false, serving: true, terminating: true }],
      ['p3', { ready: false, serving: false, terminating: false }],
    ]);
    // publishNotReadyAddresses: ready is true even when terminating
    expect(flat(svc({ publishNotReadyAddresses: true }), [pod('p1', { deleting: true, ready: false })])[0]!.conditions).toEqual({ ready: true, serving: false, terminating: true });
  });

  it('hostname when spec.hostname is set and spec.subdomain is the Service name (upstream ShouldSetHostname)', () => {
    const s = svc();
    expect(podEndpoint(pod('web-0', { hostname: 'web-0', subdomain: 'web' }), s, nodes.get('n1')).hostname).toBe('web-0');
    expect(podEndpoint(pod('web-0', { hostname: 'web-0', subdomain: 'other' }), s, nodes.get('n1')).hostname).toBeUndefined();
    expect(podEndpoint(pod('web-0', { subdomain: 'web' }), s, nodes.get('n1')).hostname).toBeUndefined();
  });

  it('named targetPort: containers first, then native sidecars (init containers with restartPolicy Always), same protocol', () => {
    const p = pod('p1');
    p.spec!.containers = [{ name: 'c', ports: [{ name: 'dns', containerPort: 53, protocol: 'UDP' }] }];
    p.spec!.initContainers = [
      { name: 'init', ports: [{ name: 'metrics', containerPort: 9000, protocol: 'TCP' }] },
      { name: 'sidecar', restartPolicy: 'Always', ports: [{ name: 'proxy', containerPort: 15001, protocol: 'TCP' }, { name: 'dns', containerPort: 5353, protocol: 'TCP' }] },
    ];
    expect(resolvePort(p, { port: 80, protocol: 'TCP', targetPort: 'proxy' as never })).toBe(15001);
    expect(resolvePort(p, { port: 80, protocol: 'TCP', targetPort: 'metrics' as never })).toBeUndefined(); // not a sidecar
    expect(resolvePort(p, { port: 53, protocol: 'UDP', targetPort: 'dns' as never })).toBe(53);
    expect(resolvePort(p, { port: 53, protocol: 'TCP', targetPort: 'dns' as never })).toBe(5353);
    expect(resolvePort(p, { port: 80, protocol: 'TCP', targetPort: 8081 as never })).toBe(8081);
  });
});

describe('address types (upstream getAddressTypesForService, getEndpointAddresses)', () => {
  it('one set of slices per family of spec.ipFamilies; without: family of the clusterIP, both when headless', () => {
    expect(addressTypesFor(svc({ ipFamilies: ['IPv6', 'IPv4'] }))).toEqual(['IPv6', 'IPv4']);
    expect(addressTypesFor(svc({ ipFamilies: undefined, clusterIP: 'fd00::10' }))).toEqual(['IPv6']);
    expect(addressTypesFor(svc({ ipFamilies: undefined, clusterIP: '10.0.0.1' }))).toEqual(['IPv4']);
    expect(addressTypesFor(svc({ ipFamilies: undefined, clusterIP: 'None' }))).toEqual(['IPv4', 'IPv6']);
  });
  it('addresses come from status.podIPs, filtered by the slice family', () => {
    const p = pod('p1', { ips: ['10.1.0.1', 'fd00::1'] });
    expect(podEndpoint(p, svc(), undefined, 'IPv4').addresses).toEqual(['10.1.0.1']);
    expect(podEndpoint(p, svc(), undefined, 'IPv6').addresses).toEqual(['fd00::1']);
    // a pod without an address of the family makes no endpoint
    expect(flat(svc(), [pod('p2', { ips: ['10.1.0.2'] })], 'IPv6')).toEqual([]);
  });
});

describe('slice labels (upstream setEndpointSliceLabels)', () => {
  it('the Service labels plus the reserved ones; reserved labels on the Service are ignored', () => {
    const s = svc({}, { tier: 'front', 'kubernetes.io/service-name': 'x' });
    expect(sliceLabels({}, s)).toEqual({ labels: { tier: 'front', 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' }, changed: true });
    expect(sliceLabels({ tier: 'front', 'kubernetes.io/service-name': 'web' }, s).changed).toBe(false);
    expect(sliceLabels({}, svc({ clusterIP: 'None' })).labels['service.kubernetes.io/headless']).toBe('');
  });
});

/** A slice as the API returns it, owned by `svc()`. */
function slice(name: string, pods: V1Pod[], s = svc()): V1EndpointSlice {
  return {
    metadata: { name, namespace: 'ns', generation: 1, labels: sliceLabels({}, s).labels, ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: 'web', uid: 'svc-uid', controller: true, blockOwnerDeletion: true }] },
    addressType: 'IPv4',
    ports: [{ name: 'http', port: 8080, protocol: 'TCP' }],
    endpoints: pods.map((p) => podEndpoint(p, s, nodes.get(p.spec!.nodeName!))),
  };
}
const many = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => pod(`p${from + i}`, { ip: `10.1.${Math.floor((from + i) / 250)}.${(from + i) % 250}` }));
const plan = (pods: V1Pod[], existing: V1EndpointSlice[], s = svc()) => planSlices(s, desiredEndpoints(s, pods, nodeOf), existing, 'IPv4');

describe('slice reconciler (upstream reconcileByPortMapping / finalize)', () => {
  it('250 pods: slices of 100, 100 and 50 (upstream TestReconcileManyPods)', () => {
    const p = plan(many(0, 250), []);
    expect(p.create.map((s) => s.endpoints.length)).toEqual([100, 100, 50]);
    expect(p.update).toEqual([]);
  });

  it('an unchanged Service writes nothing, whatever the key order of the stored slice', () => {
    const existing = slice('web-a', many(0, 3));
    // as the API returns it: other key order, targetRef with a resourceVersion
    existing.endpoints = existing.endpoints.map((e) => ({ targetRef: { ...e.targetRef, resourceVersion: '7' }, conditions: { terminating: false, serving: true, ready: true }, zone: e.zone, nodeName: e.nodeName, addresses: e.addresses }));
    expect(plan(many(0, 3), [existing])).toEqual({ create: [], update: [], delete: [] });
  });

  it('a new pod goes into the unchanged slice closest to full that takes it; the others are not written, endpoints stay in place', () => {
    const a = slice('web-a', many(0, 100));
    const b = slice('web-b', many(100, 200));
    const c = slice('web-c', many(200, 250));
    const p = plan([...many(0, 250), pod('p999', { ip: '10.9.9.9' })], [a, b, c]);
    expect(p.create).toEqual([]);
    expect(p.delete).toEqual([]);
    expect(p.update.map((s) => [s.metadata!.name, s.endpoints.length])).toEqual([['web-c', 51]]);
    expect(p.update[0]!.endpoints.slice(0, 50)).toEqual(c.endpoints);
  });

  it('a removed pod rewrites only its slice; new pods fill the slices being updated first', () => {
    const a = slice('web-a', many(0, 100));
    const b = slice('web-b', many(100, 150));
    const pods = [...many(0, 150).filter((p) => p.metadata!.name !== 'p5'), pod('p999', { ip: '10.9.9.9' })];
    const p = plan(pods, [a, b]);
    expect(p.update.map((s) => s.metadata!.name)).toEqual(['web-a']);
    expect(p.update[0]!.endpoints.map((e) => e.targetRef!.name)).toEqual([...a.endpoints.map((e) => e.targetRef!.name!).filter((n) => n !== 'p5'), 'p999']);
  });

  it('a changed endpoint is replaced where it is; hints written by someone else are kept', () => {
    const a = slice('web-a', many(0, 3));
    a.endpoints[1]!.hints = { forZones: [{ name: 'z1' }] };
    const pods = many(0, 3);
    pods[1]!.status!.conditions![0]!.status = 'False';
    const p = plan(pods, [a]);
    expect(p.update).toHaveLength(1);
    expect(p.update[0]!.endpoints.map((e) => [e.targetRef!.name, e.conditions!.ready, e.hints])).toEqual([['p0', true, undefined], ['p1', false, { forZones: [{ name: 'z1' }] }], ['p2', true, undefined]]);
  });

  it('no endpoints: one placeholder slice; an existing placeholder is kept without a write', () => {
    const p = plan([], []);
    expect(p.create.map((s) => [s.ports, s.endpoints])).toEqual([[[], []]]);
    const placeholder = { ...slice('web-a', []), ports: [] };
    expect(plan([], [placeholder])).toEqual({ create: [], update: [], delete: [] });
  });

  it('a slice that is no longer needed is reused for a new one instead of delete + create', () => {
    const placeholder = { ...slice('web-a', []), ports: [] };
    const p = plan(many(0, 2), [placeholder]);
    expect(p.create).toEqual([]);
    expect(p.delete).toEqual([]);
    expect(p.update.map((s) => [s.metadata!.name, s.ports, s.endpoints.length])).toEqual([['web-a', [{ name: 'http', port: 8080, protocol: 'TCP' }], 2]]);
  });

  it('a slice owned by another Service of the same name is deleted', () => {
    const stale = slice('web-old', many(0, 1));
    stale.metadata!.ownerReferences![0]!.uid = 'old-uid';
    const p = plan(many(0, 1), [stale]);
    expect(p.delete.map((s) => s.metadata!.name)).toEqual(['web-old']); // not recycled: not owned by this Service
    expect(p.create).toHaveLength(1);
  });
});

function controller(objs: { pods?: V1Pod[]; services?: V1Service[]; slices?: V1EndpointSlice[] }, fail?: Parameters<typeof fakeClient>[1]) {
  const pods = new FakeInformer(objs.pods ?? []);
  const services = new FakeInformer(objs.services ?? [svc()]);
  const slices = new FakeInformer(objs.slices ?? []);
  const nodeInf = new FakeInformer([...nodes.values()]);
  const f = fakeClient({ endpointslices: slices as unknown as FakeInformer<KubernetesObject> }, fail);
  const c = new EndpointSliceController(controllerDeps({ client: f.client, informers: { pods, services, endpointSlices: slices, nodes: nodeInf } }));
  return { c, pods, services, slices, ...f };
}

describe('EndpointSliceController', () => {
  it('a second sync of an unchanged Service sends no request', async () => {
    const h = controller({ pods: many(0, 150) });
    await h.c.reconcile('ns/web');
    expect(h.writes().map((c) => c.method)).toEqual(['POST', 'POST']);
    await h.c.reconcile('ns/web');
    expect(h.writes()).toHaveLength(2);
  });

  it('a pod on a missing node: the others are written, the sync fails (retried with backoff)', async () => {
    const h = controller({ pods: [pod('p1'), pod('p2', { node: 'gone' })] });
    await expect(h.c.reconcile('ns/web')).rejects.toThrow(/p2.*Node not found/);
    expect(h.slices.list().flatMap((s) => s.endpoints.map((e) => e.targetRef!.name))).toEqual(['p1']);
  });

  it('a Service that loses its selector keeps its slices', async () => {
    const h = controller({ pods: [pod('p1')] });
    await h.c.reconcile('ns/web');
    h.services.upsert({ ...svc(), spec: { ...svc().spec, selector: undefined } });
    await h.c.reconcile('ns/web');
    expect(h.writes().map((c) => c.method)).toEqual(['POST']);
    expect(h.slices.list()).toHaveLength(1);
  });

  it('dual-stack: one slice per family', async () => {
    const h = controller({ services: [svc({ ipFamilies: ['IPv4', 'IPv6'] })], pods: [pod('p1', { ips: ['10.1.0.1', 'fd00::1'] })] });
    await h.c.reconcile('ns/web');
    expect(h.slices.list().map((s) => [s.addressType, s.endpoints.map((e) => e.addresses)]).sort()).toEqual([['IPv4', [['10.1.0.1']]], ['IPv6', [['fd00::1']]]]);
  });

  it('last-change-trigger-time: the Service creation at the first sync, then the earliest Ready transition that moved', async () => {
    const h = controller({ pods: [pod('p1', { readySince: '2026-01-01T10:00:05Z' })] });
    await h.c.reconcile('ns/web');
    const ann = () => h.slices.list()[0]!.metadata!.annotations?.['endpoints.kubernetes.io/last-change-trigger-time'];
    expect(ann()).toBe('2026-01-01T10:00:00Z');
    h.pods.upsert(pod('p2', { readySince: '2026-01-01T10:00:09Z' }));
    h.pods.upsert(pod('p3', { readySince: '2026-01-01T10:00:07.5Z' }));
    await h.c.reconcile('ns/web');
    expect(ann()).toBe('2026-01-01T10:00:07.5Z');
  });

  it('namespace terminating: a create error is dropped, not retried', async () => {
    const h = controller({ pods: [pod('p1')] }, (c) => (c.method === 'POST' ? Object.assign(new Error('forbidden'), { body: { details: { causes: [{ type: 'NamespaceTerminating' }] } } }) : undefined));
    await expect(h.c.reconcile('ns/web')).resolves.toBeUndefined();
  });
});

describe('EndpointSliceController with slices as the API returns them', () => {
  it('a slice stored with endpoints: null (empty) is handled like an empty one; a label change rewrites it', async () => {
    const stored = { ...slice('web-a', []), ports: [], endpoints: null as never, metadata: { ...slice('web-a', []).metadata, labels: { ...sliceLabels({}, svc()).labels, stale: 'x' } } };
    const h = controller({ pods: [], slices: [stored] });
    await h.c.reconcile('ns/web');
    expect(h.writes().map((c) => [c.method, (c.body as V1EndpointSlice | undefined)?.endpoints])).toEqual([['PUT', []]]);
    expect(h.slices.list()[0]!.metadata!.labels!.stale).toBeUndefined();
  });
});
