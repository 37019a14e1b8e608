/**
 * The extender leader's routing (scheduler-plugins/extender/routing.ts) against a recording API
 * client: the Service's EndpointSlice created, left alone, or replaced guarded by resourceVersion,
 * and other managers' slices of the Service removed. The real path (kube-proxy routing the ClusterIP
 * to a new leader while the controller manager is down) is in kubeadm.int.
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ROUTE_MANAGER, ROUTE_SLICE, publishRoute, routeSlice } from '../../scheduler-plugins/extender/routing.ts';

const log = pino({ level: 'silent' });
const leader = { namespace: 'ulysses-system', name: 'ext-b', uid: 'uid-b', ip: '10.244.2.7', nodeName: 'w2' };

function api(items: unknown[], fail?: { method: string; statusCode: number }) {
  const calls: Array<{ method: string; path: string; body?: any }> = [];
  return {
    calls,
    async request<T>(method: string, path: string, o: { body?: unknown } = {}): Promise<T> {
      calls.push({ method, path, body: o.body });
      if (fail && fail.method === method) throw Object.assign(new Error(`HTTP ${fail.statusCode}`), { statusCode: fail.statusCode });
      return (method === 'GET' ? { items } : {}) as T;
    },
  };
}

describe('extender routing by its own EndpointSlice', () => {
  it('creates the slice naming the leader alone, owned by its pod', async () => {
    const c = api([]);
    expect(await publishRoute(c, leader, log)).toBe(true);
    const post = c.calls.find((x) => x.method === 'POST')!;
    expect(post.path).toBe('/apis/discovery.k8s.io/v1/namespaces/ulysses-system/endpointslices');
    expect(post.body.metadata.labels).toEqual({ 'kubernetes.io/service-name': 'ulysses-scheduler-extender', 'endpointslice.kubernetes.io/managed-by': ROUTE_MANAGER });
    expect(post.body.metadata.ownerReferences).toEqual([{ apiVersion: 'v1', kind: 'Pod', name: 'ext-b', uid: 'uid-b' }]);
    expect(post.body.endpoints).toEqual([{ addresses: ['10.244.2.7'], conditions: { ready: true }, targetRef: { kind: 'Pod', namespace: 'ulysses-system', name: 'ext-b', uid: 'uid-b' }, nodeName: 'w2' }]);
    expect(post.body.addressType).toBe('IPv4');
  });

  it('writes nothing when the slice already routes to it', async () => {
    const c = api([routeSlice(leader, '42')]);
    expect(await publishRoute(c, leader, log)).toBe(false);
    expect(c.calls.map((x) => x.method)).toEqual(['GET']);
  });

  it("replaces the former leader's endpoint with a PUT carrying the resourceVersion it read; a conflict is thrown to the caller", async () => {
    const old = routeSlice({ ...leader, name: 'ext-a', uid: 'uid-a', ip: '10.244.1.3' }, '41');
    const c = api([old]);
    expect(await publishRoute(c, leader, log)).toBe(true);
    const put = c.calls.find((x) => x.method === 'PUT')!;
    expect(put.path.endsWith(`/endpointslices/${ROUTE_SLICE}`)).toBe(true);
    expect(put.body.metadata.resourceVersion).toBe('41');
    expect(put.body.endpoints[0].addresses).toEqual(['10.244.2.7']);
    await expect(publishRoute(api([old], { method: 'PUT', statusCode: 409 }), leader, log)).rejects.toThrow('HTTP 409');
  });

  it("deletes the Service's slices written by another manager (a controller's, from a selector), never its own", async () => {
    const controller = { metadata: { name: 'ulysses-scheduler-extender-x7k2p', namespace: 'ulysses-system', labels: { 'kubernetes.io/service-name': 'ulysses-scheduler-extender', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' } }, addressType: 'IPv4', endpoints: [] };
    const c = api([controller, routeSlice(leader, '7')]);
    await publishRoute(c, leader, log);
    expect(c.calls.filter((x) => x.method === 'DELETE').map((x) => x.path)).toEqual(['/apis/discovery.k8s.io/v1/namespaces/ulysses-system/endpointslices/ulysses-scheduler-extender-x7k2p']);
    // a slice already gone is fine
    await publishRoute(api([controller], { method: 'DELETE', statusCode: 404 }), leader, log);
  });
});
