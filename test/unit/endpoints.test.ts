/**
 * Endpoints controller against facts of upstream pkg/controller/endpoint (endpoints_controller_test.go:
 * TestTruncateEndpoints, TestSyncServiceAddresses) and its syncService.
 */
import { describe, expect, it } from 'vitest';
import type { KubernetesObject, V1EndpointAddress, V1Endpoints, V1EndpointSubset, V1Pod, V1Service } from '@kubernetes/client-node';
import { desiredSubsets, endpointIP, EndpointsController, truncateSubsets } from '../../controller-manager/controllers/endpoints.ts';
import { controllerDeps, FakeInformer, fakeClient } from './fake-cluster.ts';

const T0 = '2026-01-01T10:00:00Z';
const svc = (extra: Partial<V1Service['spec']> = {}): V1Service => ({
  metadata: { name: 'foo', namespace: 'ns', uid: 'svc', creationTimestamp: new Date(T0), labels: { tier: 'a' } },
  spec: { selector: { foo: 'bar' }, clusterIP: '1.1.1.1', ipFamilies: ['IPv4'], ports: [{ port: 80, protocol: 'TCP', targetPort: 8080 as never }], ...extra },
});
const pod = (name: string, phase: string, ready: boolean, terminating: boolean, ips = ['10.1.1.1']): V1Pod => ({
  metadata: { name, namespace: 'ns', uid: `u-${name}`, labels: { foo: 'bar' }, ...(terminating ? { deletionTimestamp: new Date(T0) } : {}) },
  spec: { nodeName: 'n1', containers: [{ name: 'c', ports: [{ name: 'port1', containerPort: 8080 }] }] },
  status: { phase, podIP: ips[0], podIPs: ips.map((ip) => ({ ip })), conditions: [{ type: 'Ready', status: ready ? 'True' : 'False', lastTransitionTime: new Date(T0) }] },
});
const count = (subsets: V1EndpointSubset[]) => [subsets.reduce((n, s) => n + (s.addresses?.length ?? 0), 0), subsets.reduce((n, s) => n + (s.notReadyAddresses?.length ?? 0), 0)];

describe('addresses by phase, readiness, deletion, publishNotReadyAddresses (upstream TestSyncServiceAddresses)', () => {
  const cases: [string, boolean, boolean, boolean, number, number][] = [
    // phase, ready, terminating, tolerateUnready, ready count, not-ready count
    ['Running', true, false, false, 1, 0],
    ['Running', true, true, false, 0, 0],
    ['Unknown', true, false, false, 1, 0],
    ['Unknown', true, true, false, 0, 0],
    ['Pending', true, false, false, 1, 0],
    ['Pending', true, true, false, 0, 0],
    ['Unknown', false, false, false, 0, 1],
    ['Pending', false, false, false, 0, 1],
    ['Failed', false, false, false, 0, 0],
    ['Succeeded', false, false, false, 0, 0],
    ['Running', false, false, true, 1, 0],
    ['Running', false, true, true, 1, 0],
    ['Unknown', false, false, true, 1, 0],
    ['Unknown', false, true, true, 1, 0],
    ['Pending', false, false, true, 1, 0],
    ['Pending', false, true, true, 1, 0],
    ['Failed', false, false, true, 0, 0],
    ['Succeeded', false, false, true, 0, 0],
  ];
  it.each(cases)('%s ready=%s terminating=%s tolerate=%s -> %i ready, %i not ready', (phase, ready, terminating, tolerate, r, nr) => {
    expect(count(desiredSubsets(svc({ publishNotReadyAddresses: tolerate }), [pod('p', phase, ready, terminating)]).subsets)).toEqual([r, nr]);
  });
});

describe('truncation above 1000 addresses (upstream TestTruncateEndpoints)', () => {
  const mk = (ready: number[], notReady: number[]): V1EndpointSubset[] =>
    ready.map((r, i) => ({ addresses: Array.from({ length: r }, () => ({ ip: '' })), notReadyAddresses: Array.from({ length: notReady[i]! }, () => ({ ip: '' })) }));
  const sizes = (ss: V1EndpointSubset[]) => [ss.map((s) => s.addresses?.length ?? 0), ss.map((s) => s.notReadyAddresses?.length ?? 0)];
  it.each([
    ['total < max', [50, 100, 100, 100, 100], [50, 100, 100, 100, 100], [50, 100, 100, 100, 100], [50, 100, 100, 100, 100], false],
    ['total = max', [100, 100, 100, 100, 100], [100, 100, 100, 100, 100], [100, 100, 100, 100, 100], [100, 100, 100, 100, 100], false],
    ['ready < max < total', [90, 110, 50, 10, 20], [101, 200, 200, 201, 298], [90, 110, 50, 10, 20], [73, 144, 144, 145, 214], true],
    ['ready > max', [205, 400, 402, 400, 693], [100, 200, 200, 200, 300], [98, 191, 192, 191, 328], [0, 0, 0, 0, 0], true],
  ])('%s', (_d, ready, notReady, wantReady, wantNotReady, truncated) => {
    const ss = mk(ready, notReady);
    expect(truncateSubsets(ss, 1000)).toBe(truncated);
    expect(sizes(ss)).toEqual([wantReady, wantNotReady]);
  });
});

describe('address family (upstream podToEndpointAddressForService)', () => {
  it("the Service's first IP family, from status.podIPs; a pod without one is skipped", () => {
    const p = pod('p', 'Running', true, false, ['10.1.1.1', 'fd00::1']);
    expect(endpointIP(svc({ ipFamilies: ['IPv6', 'IPv4'] }), p)).toBe('fd00::1');
    expect(endpointIP(svc({ ipFamilies: ['IPv4', 'IPv6'] }), p)).toBe('10.1.1.1');
    expect(endpointIP(svc({ ipFamilies: undefined, clusterIP: 'fd00::10' }), p)).toBe('fd00::1');
    expect(count(desiredSubsets(svc({ ipFamilies: ['IPv6'] }), [pod('q', 'Running', true, false, ['10.1.1.2'])]).subsets)).toEqual([0, 0]);
  });
  it('a Service without ports has addresses only when headless', () => {
    expect(count(desiredSubsets(svc({ ports: [] }), [pod('p', 'Running', true, false)]).subsets)).toEqual([0, 0]);
    const headless = desiredSubsets(svc({ ports: [], clusterIP: 'None' }), [pod('p', 'Running', true, false)]).subsets;
    expect(headless).toEqual([{ addresses: [{ ip: '10.1.1.1', nodeName: 'n1', targetRef: { kind: 'Pod', namespace: 'ns', name: 'p', uid: 'u-p' } }] }]);
  });
});

function controller(objs: { pods?: V1Pod[]; services?: V1Service[]; endpoints?: V1Endpoints[] }, fail?: Parameters<typeof fakeClient>[1]) {
  const pods = new FakeInformer(objs.pods ?? []);
  const services = new FakeInformer(objs.services ?? [svc()]);
  const endpoints = new FakeInformer(objs.endpoints ?? []);
  const f = fakeClient({ endpoints: endpoints as unknown as FakeInformer<KubernetesObject> }, fail);
  const c = new EndpointsController(controllerDeps({ client: f.client, informers: { pods, services, endpoints } }));
  return { c, pods, services, endpoints, ...f };
}

describe('EndpointsController', () => {
  it('an unchanged Endpoints is not written again, whatever its key order and targetRef resourceVersion', async () => {
    const h = controller({ pods: [pod('p1', 'Running', true, false)] });
    await h.c.reconcile('ns/foo');
    expect(h.writes().map((c) => c.method)).toEqual(['POST']);
    const stored = h.endpoints.get('ns/foo')!;
    const reordered = (a: V1EndpointAddress): V1EndpointAddress => ({ targetRef: { uid: a.targetRef!.uid, name: a.targetRef!.name, namespace: a.targetRef!.namespace, kind: 'Pod', resourceVersion: '12' }, nodeName: a.nodeName, ip: a.ip });
    h.endpoints.items.set('ns/foo', { ...stored, metadata: { ...stored.metadata, labels: Object.fromEntries(Object.entries(stored.metadata!.labels!).reverse()) }, subsets: stored.subsets!.map((s) => ({ ports: s.ports, addresses: s.addresses!.map(reordered) })) });
    await h.c.reconcile('ns/foo');
    expect(h.writes()).toHaveLength(1);
  });

  it('a Service that loses its selector keeps its Endpoints; a deleted Service loses them', async () => {
    const h = controller({ pods: [pod('p1', 'Running', true, false)] });
    await h.c.reconcile('ns/foo');
    h.services.upsert({ ...svc(), spec: { ...svc().spec, selector: undefined } });
    await h.c.reconcile('ns/foo');
    expect(h.writes().map((c) => c.method)).toEqual(['POST']);
    h.services.remove(svc());
    await h.c.reconcile('ns/foo');
    expect(h.writes().map((c) => c.method)).toEqual(['POST', 'DELETE']);
  });

  it('a deleted Service: its Endpoints are deleted even when the cache does not hold them yet (a sync of a moment ago created them)', async () => {
    const h = controller({ pods: [pod('p1', 'Running', true, false)] });
    await h.c.reconcile('ns/foo');
    h.endpoints.items.delete('ns/foo'); // the informer has not seen the create
    h.services.remove(svc());
    await h.c.reconcile('ns/foo');
    expect(h.writes().map((c) => c.method)).toEqual(['POST', 'DELETE']);
  });

  it('last-change-trigger-time: the Service creation first, then the earliest Ready transition that moved (not a deletion time)', async () => {
    const h = controller({ pods: [pod('p1', 'Running', true, false)] });
    await h.c.reconcile('ns/foo');
    const ann = () => h.endpoints.get('ns/foo')!.metadata!.annotations?.['endpoints.kubernetes.io/last-change-trigger-time'];
    expect(ann()).toBe('2026-01-01T10:00:00Z');
    const p2 = pod('p2', 'Running', true, false, ['10.1.1.2']);
    p2.status!.conditions![0]!.lastTransitionTime = new Date('2026-01-01T10:01:00Z');
    h.pods.upsert(p2);
    const p1 = pod('p1', 'Running', true, true);
    p1.metadata!.deletionTimestamp = new Date('2026-01-01T10:05:00Z');
    h.pods.upsert(p1);
    await h.c.reconcile('ns/foo');
    expect(ann()).toBe('2026-01-01T10:01:00Z');
  });

  it('a create refused because the namespace is terminating is dropped, not retried', async () => {
    const h = controller({ pods: [pod('p1', 'Running', true, false)] }, (c) => (c.method === 'POST' ? Object.assign(new Error('forbidden'), { statusCode: 403, body: { details: { causes: [{ type: 'NamespaceTerminating' }] } } }) : undefined));
    await expect(h.c.reconcile('ns/foo')).resolves.toBeUndefined();
  });
});

describe('subsets packed as upstream RepackSubsets (pkg/api/v1/endpoints TestPackSubsets): ports with the same address set share a subset', () => {
  const withPorts = (name: string, ip: string, ready: boolean, ports: [string, number][]): V1Pod => {
    const p = pod(name, 'Running', ready, false, [ip]);
    p.spec!.containers[0]!.ports = ports.map(([n, containerPort]) => ({ name: n, containerPort, protocol: 'TCP' }));
    return p;
  };
  const named = (...names: string[]) => svc({ ports: names.map((n, i) => ({ name: n, port: 80 + i, protocol: 'TCP', targetPort: n as never })) });
  const shape = (subsets: V1EndpointSubset[]) =>
    subsets.map((s) => ({ ready: (s.addresses ?? []).map((a) => a.ip), notReady: (s.notReadyAddresses ?? []).map((a) => a.ip), ports: (s.ports ?? []).map((p) => p.port) })).sort((a, b) => a.ports[0]! - b.ports[0]!);

  it('"four sets, three ips, three ports, jumbled": {1.2.3.4, 1.2.3.6: 111}, {1.2.3.5: 222, 333}', () => {
    const pods = [withPorts('a', '1.2.3.4', true, [['p1', 111]]), withPorts('b', '1.2.3.5', true, [['p2', 222], ['p3', 333]]), withPorts('c', '1.2.3.6', true, [['p1', 111]])];
    expect(shape(desiredSubsets(named('p1', 'p2', 'p3'), pods).subsets)).toEqual([
      { ready: ['1.2.3.4', '1.2.3.6'], notReady: [], ports: [111] },
      { ready: ['1.2.3.5'], notReady: [], ports: [222, 333] },
    ]);
  });

  it('"four sets, three mixed ips, three ports, jumbled": the not-ready address keeps its two ports in one subset', () => {
    const pods = [withPorts('a', '1.2.3.4', true, [['p1', 111]]), withPorts('b', '1.2.3.5', false, [['p2', 222], ['p3', 333]]), withPorts('c', '1.2.3.6', true, [['p1', 111]])];
    expect(shape(desiredSubsets(named('p1', 'p2', 'p3'), pods).subsets)).toEqual([
      { ready: ['1.2.3.4', '1.2.3.6'], notReady: [], ports: [111] },
      { ready: [], notReady: ['1.2.3.5'], ports: [222, 333] },
    ]);
  });

  it('a named port with another number per pod and missing on a third pod (the conformance scenario namedPorts)', () => {
    const s = svc({ ports: [{ name: 'web', port: 80, protocol: 'TCP', targetPort: 'http' as never }, { name: 'metrics', port: 9090, protocol: 'TCP', targetPort: 9090 as never }] });
    const pods = [withPorts('a', '10.0.0.1', true, [['http', 8080]]), withPorts('b', '10.0.0.2', true, [['http', 8081]]), withPorts('c', '10.0.0.3', true, [['other', 7000]])];
    expect(shape(desiredSubsets(s, pods).subsets)).toEqual([
      { ready: ['10.0.0.1'], notReady: [], ports: [8080] },
      { ready: ['10.0.0.2'], notReady: [], ports: [8081] },
      { ready: ['10.0.0.1', '10.0.0.2', '10.0.0.3'], notReady: [], ports: [9090] },
    ]);
  });
});
