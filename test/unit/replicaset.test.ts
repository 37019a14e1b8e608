/**
 * ReplicaSet controller against facts of upstream pkg/controller (controller_utils_test.go
 * TestSortingActivePodsWithRanks) and replica_set.go (getPodsToDelete, calculateStatus, claimPods).
 */
import { describe, expect, it } from 'vitest';
import type { KubernetesObject, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { deletesBefore, podDeletionCost, podsToDelete, ReplicaSetController } from '../../controller-manager/controllers/replicaset.ts';
import { ApiError } from '../../core/kube.ts';
import { controllerDeps, FakeInformer, fakeClient, type Call } from './fake-cluster.ts';

const now = Date.UTC(2026, 5, 15, 12);
const H = 3600_000;
const then1Month = Date.UTC(2026, 4, 15, 12);
const pod = (name: string, node: string, phase: string, ready: boolean, restarts: number, readySince: number, created: number, annotations?: Record<string, string>): V1Pod => ({
  metadata: { name, ...(created ? { creationTimestamp: new Date(created) } : {}), ...(annotations ? { annotations } : {}) },
  spec: { nodeName: node || undefined, containers: [] },
  status: {
    phase,
    ...(ready ? { conditions: [{ type: 'Ready', status: 'True', ...(readySince ? { lastTransitionTime: new Date(readySince) } : {}) }], containerStatuses: [{ name: 'c', image: 'i', imageID: '', ready: true, restartCount: restarts }] } : {}),
  },
});

// upstream TestSortingActivePodsWithRanks fixtures
const unscheduled = pod('unscheduled', '', 'Pending', false, 0, 0, 0);
const scheduledPending = pod('pending', 'node', 'Pending', false, 0, 0, 0);
const unknownPhase = pod('unknown-phase', 'node', 'Unknown', false, 0, 0, 0);
const runningNotReady = pod('not-ready', 'node', 'Running', false, 0, 0, 0);
const readyNoLastTransition = pod('ready-no-last-transition-time', 'node', 'Running', true, 0, 0, 0);
const readyNow = pod('ready-now', 'node', 'Running', true, 0, now, now);
const readyThen = pod('ready-then', 'node', 'Running', true, 0, then1Month, then1Month);
const readyNowHighRestarts = pod('ready-high-restarts', 'node', 'Running', true, 9001, now, now);
const readyNowCreatedThen = pod('ready-now-created-then', 'node', 'Running', true, 0, now, then1Month);
const lowCost = pod('low-deletion-cost', 'node', 'Running', true, 0, now, then1Month, { 'controller.kubernetes.io/pod-deletion-cost': '10' });
const highCost = pod('high-deletion-cost', 'node', 'Running', true, 0, now, then1Month, { 'controller.kubernetes.io/pod-deletion-cost': '100' });
const unscheduled5h = pod('unscheduled-5-hours', '', 'Pending', false, 0, now - 5 * H, now - 5 * H);
const unscheduled8h = pod('unscheduled-10-hours', '', 'Pending', false, 0, now - 8 * H, now - 8 * H);
const ready2h = pod('ready-2-hours', '', 'Running', true, 0, now - 2 * H, then1Month);
const ready5h = pod('ready-5-hours', '', 'Running', true, 0, now - 5 * H, then1Month);
const ready8h = pod('ready-10-hours', '', 'Running', true, 0, now - 8 * H, then1Month);

describe('scale-down ranking (upstream ActivePodsWithRanks.Less)', () => {
  it.each([
    [unscheduled, unscheduled],
    [scheduledPending, scheduledPending],
    [unknownPhase, unknownPhase],
    [runningNotReady, runningNotReady],
    [readyNowCreatedThen, readyNowCreatedThen],
    [readyNow, readyNow],
    [readyThen, readyThen],
    [readyNowHighRestarts, readyNowHighRestarts],
    [unscheduled5h, unscheduled8h],
    [ready5h, ready8h],
  ])('equal: %# (%s)', (p1, p2) => {
    expect(deletesBefore(p1, 1, p2, 1, now)).toBe(false);
    expect(deletesBefore(p2, 1, p1, 1, now)).toBe(false);
  });
  it.each([
    [unscheduled, 1, scheduledPending, 2],
    [unscheduled, 2, scheduledPending, 1],
    [scheduledPending, 1, unknownPhase, 2],
    [unknownPhase, 1, runningNotReady, 2],
    [runningNotReady, 1, readyNoLastTransition, 1],
    [readyNoLastTransition, 1, readyNow, 1],
    [readyNow, 2, readyNoLastTransition, 1],
    [readyNow, 1, readyThen, 1],
    [readyNow, 2, readyThen, 1],
    [readyNowHighRestarts, 1, readyNow, 1],
    [readyNow, 2, readyNowHighRestarts, 1],
    [readyNow, 1, readyNowCreatedThen, 1],
    [readyNowCreatedThen, 2, readyNow, 1],
    [lowCost, 2, highCost, 1],
    [ready2h, 1, ready5h, 1],
  ])('less: %# (%s rank %i before %s rank %i)', (lesser, lr, greater, gr) => {
    expect(deletesBefore(lesser as V1Pod, lr as number, greater as V1Pod, gr as number, now)).toBe(true);
    expect(deletesBefore(greater as V1Pod, gr as number, lesser as V1Pod, lr as number, now)).toBe(false);
  });
  it('restart counts: the max over containers, not the sum; native sidecars break ties', () => {
    const withRestarts = (name: string, counts: number[], sidecar = 0): V1Pod => {
      const p = structuredClone(readyNow);
      p.metadata!.name = name;
      p.status!.containerStatuses = counts.map((n, i) => ({ name: `c${i}`, image: 'i', imageID: '', ready: true, restartCount: n }));
      p.spec!.initContainers = [{ name: 'side', restartPolicy: 'Always' }];
      p.status!.initContainerStatuses = [{ name: 'side', image: 'i', imageID: '', ready: true, restartCount: sidecar }];
      return p;
    };
    // sum 6 vs max 5: the pod with the higher MAX goes first
    expect(deletesBefore(withRestarts('max5', [5]), 1, withRestarts('sum6', [3, 3]), 1, now)).toBe(true);
    expect(deletesBefore(withRestarts('side2', [1], 2), 1, withRestarts('side0', [1], 0), 1, now)).toBe(true);
  });
  it('pod-deletion-cost: an int32, anything else counts as 0', () => {
    const withCost = (v: string) => ({ metadata: { annotations: { 'controller.kubernetes.io/pod-deletion-cost': v } } }) as V1Pod;
    expect([withCost('-5'), withCost('2147483647'), withCost('2147483648'), withCost('abc'), withCost('1.5')].map(podDeletionCost)).toEqual([-5, 2147483647, 0, 0, 0]);
  });
});

describe('victims (upstream getPodsToDelete, getPodsRankedByRelatedPodsOnSameNode)', () => {
  it('a pod sharing its node with more active related pods goes first', () => {
    const mk = (name: string, node: string, created = then1Month) => ({ ...structuredClone(readyThen), metadata: { name, uid: name, creationTimestamp: new Date(created) }, spec: { nodeName: node, containers: [] } });
    const a = mk('a', 'n1');
    const b = mk('b', 'n2', then1Month + 1000);
    const c = mk('c', 'n2');
    // a pod of the other ReplicaSet of the Deployment on n1: n1 has 2 related pods, n2 has 2
    const otherRsPod = mk('old', 'n1');
    const otherRsPod2 = mk('old2', 'n1');
    expect(podsToDelete([a, b, c], [a, b, c, otherRsPod, otherRsPod2], 1, now).map((p) => p.metadata!.name)).toEqual(['a']);
    // without related pods (ReplicaSet without a controller): all ranks 0; creation times in the same
    // power-of-two age bucket: the uid decides
    expect(podsToDelete([b, a, c], [], 1, now).map((p) => p.metadata!.name)).toEqual(['a']);
    expect(podsToDelete([a, b], [], 5, now)).toHaveLength(2);
  });
});

function setup(o: { rs?: Partial<V1ReplicaSet>; pods?: V1Pod[]; fail?: (c: Call) => unknown; rsOwner?: boolean } = {}) {
  let t = now;
  const rs: V1ReplicaSet = {
    metadata: { name: 'rs', namespace: 'ns', uid: 'rs-uid', generation: 1 },
    spec: { replicas: 2, selector: { matchLabels: { app: 'a' } }, template: { metadata: { labels: { app: 'a' } }, spec: { containers: [{ name: 'c', image: 'i' }] } } },
    status: { replicas: 0 },
    ...o.rs,
  };
  const pods = new FakeInformer<V1Pod>(o.pods ?? []);
  const rss = new FakeInformer<V1ReplicaSet>([rs]);
  const f = fakeClient({ '/pods': pods as unknown as FakeInformer<KubernetesObject>, '/replicasets': rss as unknown as FakeInformer<KubernetesObject> }, o.fail);
  const c = new ReplicaSetController(controllerDeps({ client: f.client, informers: { pods, replicaSets: rss }, now: () => t }));
  return { c, pods, rss, ...f, tick: (ms: number) => (t += ms) };
}

describe('ReplicaSetController', () => {
  const quota = () => new ApiError('POST pods: 403 exceeded quota', 403, 'Forbidden', { reason: 'Forbidden' });
  it('ReplicaFailure: set once on a failed create, kept with its time while creations keep failing (no status write per retry)', async () => {
    const h = setup({ fail: (c) => (c.method === 'POST' ? quota() : undefined) });
    await expect(h.c.reconcile('ns/rs')).rejects.toThrow(/quota/);
    const statusPuts = () => h.calls.filter((c) => c.method === 'PUT' && c.path.endsWith('/status'));
    expect(statusPuts()).toHaveLength(1);
    const cond = h.rss.get('ns/rs')!.status!.conditions!.find((c) => c.type === 'ReplicaFailure')!;
    expect([cond.status, cond.reason]).toEqual(['True', 'FailedCreate']);
    h.tick(10_000);
    h.c.expectations.delete('ns/rs');
    await expect(h.c.reconcile('ns/rs')).rejects.toThrow(/quota/);
    expect(statusPuts()).toHaveLength(1);
  });

  it('creations refused because the namespace is terminating are not an error', async () => {
    const h = setup({ fail: (c) => (c.method === 'POST' ? new ApiError('forbidden', 403, 'Forbidden', { details: { causes: [{ type: 'NamespaceTerminating' }] } }) : undefined) });
    await expect(h.c.reconcile('ns/rs')).resolves.toBeUndefined();
    expect(h.rss.get('ns/rs')!.status?.conditions ?? []).toEqual([]);
  });

  it('an orphan whose adoption fails: the sync fails and no replacement pod is created', async () => {
    const orphan: V1Pod = { metadata: { name: 'orphan', namespace: 'ns', uid: 'o', labels: { app: 'a' } }, spec: { containers: [] }, status: { phase: 'Running' } };
    const h = setup({ rs: { spec: { replicas: 1, selector: { matchLabels: { app: 'a' } }, template: { metadata: { labels: { app: 'a' } }, spec: { containers: [] } } } }, pods: [orphan], fail: (c) => (c.method === 'PATCH' ? new ApiError('PATCH: 500', 500) : undefined) });
    await expect(h.c.reconcile('ns/rs')).rejects.toThrow(/500/);
    expect(h.calls.filter((c) => c.method === 'POST')).toEqual([]);
  });

  // upstream RecheckDeletionTimestamp (controller_ref_manager.go) with the ReplicaSet controller's
  // getter: before adopting, the owner is read from the API; being deleted or replaced (another uid)
  // means no adoption and a failed claim, whatever the cache says
  const orphan = (): V1Pod => ({ metadata: { name: 'orphan', namespace: 'ns', uid: 'o', labels: { app: 'a' } }, spec: { containers: [] }, status: { phase: 'Running' } });
  const rsSpec = { spec: { replicas: 1, selector: { matchLabels: { app: 'a' } }, template: { metadata: { labels: { app: 'a' } }, spec: { containers: [] } } } };
  it.each([
    ['being deleted in the API (not yet in the cache)', { deletionTimestamp: new Date(now) }, /has just been deleted/],
    ['replaced in the API by one with another uid', { uid: 'other-uid' }, /is gone: got uid other-uid, wanted rs-uid/],
  ])('an orphan is not adopted by a ReplicaSet %s', async (_what, fresh, error) => {
    const h = setup({ rs: rsSpec, pods: [orphan()] });
    const get = h.client.get;
    h.client.get = (async (path: string) => (path === '/apis/apps/v1/namespaces/ns/replicasets/rs' ? { ...h.rss.get('ns/rs'), metadata: { ...h.rss.get('ns/rs')!.metadata, ...fresh } } : get(path))) as typeof get;
    await expect(h.c.reconcile('ns/rs')).rejects.toThrow(error);
    expect(h.calls.filter((c) => c.method === 'PATCH' || c.method === 'POST')).toEqual([]);
    expect(h.pods.get('ns/orphan')!.metadata!.ownerReferences).toBeUndefined();
  });

  it('the owner is read once per claim, only when there is an orphan to adopt, and then adopts', async () => {
    const h = setup({ rs: rsSpec, pods: [orphan(), { ...orphan(), metadata: { ...orphan().metadata, name: 'orphan-2', uid: 'o2' } }] });
    await h.c.reconcile('ns/rs');
    expect(h.calls.filter((c) => c.method === 'GET' && c.path === '/apis/apps/v1/namespaces/ns/replicasets/rs')).toHaveLength(1);
    expect(h.calls.filter((c) => c.method === 'PATCH').map((c) => c.path)).toEqual(['/api/v1/namespaces/ns/pods/orphan', '/api/v1/namespaces/ns/pods/orphan-2']);
    const h2 = setup({ rs: rsSpec, pods: [] });
    h2.c.expectations.delete('ns/rs');
    await h2.c.reconcile('ns/rs');
    expect(h2.calls.filter((c) => c.method === 'GET')).toEqual([]);
  });
});
