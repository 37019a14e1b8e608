import { describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import { controllerDeps } from './fake-cluster.ts';
import type { V1Node, V1Pod, V1Taint } from '@kubernetes/client-node';
import { TaintEvictionController, evictionDecision, toleratesTaint } from '../../controller-manager/controllers/taint-eviction.ts';
import { CriticalityIndex } from '../../core/criticality.ts';
import { criticalWrites } from '../../core/critical-writes.ts';

const taint = { key: 'node.kubernetes.io/unreachable', value: '', effect: 'NoExecute' };

describe('toleration matching (upstream Toleration.ToleratesTaint)', () => {
  it('matches by key/operator/value/effect', () => {
    expect(toleratesTaint({ key: taint.key, operator: 'Exists', effect: 'NoExecute' }, taint)).toBe(true);
    expect(toleratesTaint({ operator: 'Exists' }, taint)).toBe(true); // empty key + Exists tolerates everything
    expect(toleratesTaint({ key: taint.key, operator: 'Exists', effect: 'NoSchedule' }, taint)).toBe(false);
    expect(toleratesTaint({ key: 'other', operator: 'Exists' }, taint)).toBe(false);
    expect(toleratesTaint({ key: 'k', value: 'v' }, { key: 'k', value: 'v', effect: 'NoExecute' })).toBe(true); // Equal is the default
    expect(toleratesTaint({ key: 'k', value: 'w' }, { key: 'k', value: 'v', effect: 'NoExecute' })).toBe(false);
    expect(toleratesTaint({ operator: 'Equal', value: '' }, taint)).toBe(false); // Equal needs a key
  });
});

describe('eviction decision', () => {
  it('keeps pods on nodes without NoExecute taints', () => {
    expect(evictionDecision([], [{ key: 'a', effect: 'NoSchedule' }])).toEqual({ action: 'keep' });
    expect(evictionDecision(undefined, undefined)).toEqual({ action: 'keep' });
  });
  it('evicts at once when one NoExecute taint is not tolerated', () => {
    expect(evictionDecision([{ key: taint.key, operator: 'Exists', effect: 'NoExecute' }], [taint, { key: 'failure', value: 'true', effect: 'NoExecute' }])).toEqual({ action: 'evict' });
  });
  it('uses the FIRST toleration matching each taint (upstream GetMatchingTolerations), then the minimum of their tolerationSeconds', () => {
    const tol = [
      { key: taint.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      { operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
    ];
    // the 30 s toleration also matches, but the 300 s one comes first: upstream waits 300 s
    expect(evictionDecision(tol, [taint])).toEqual({ action: 'after', afterMs: 300_000 });
    // a second taint only the catch-all tolerates: it is used for that taint, minimum 30 s
    expect(evictionDecision(tol, [taint, { key: 'other', effect: 'NoExecute' }])).toEqual({ action: 'after', afterMs: 30_000 });
    // the first match tolerates forever: a later timed one does not count
    expect(evictionDecision([{ operator: 'Exists' }, { operator: 'Exists', tolerationSeconds: 5 }], [taint])).toEqual({ action: 'keep' });
    expect(evictionDecision([{ operator: 'Exists' }], [taint])).toEqual({ action: 'keep' });
  });
  it('upstream getMinTolerationTime: unset seconds = forever, the smallest set one wins, zero or negative = at once', () => {
    const t2 = { key: 'b', effect: 'NoExecute' };
    const for2 = (a?: number, b?: number) => evictionDecision([{ key: taint.key, operator: 'Exists', tolerationSeconds: a }, { key: 'b', operator: 'Exists', tolerationSeconds: b }], [taint, t2]);
    expect(for2(undefined, undefined)).toEqual({ action: 'keep' });
    expect(for2(10, 20)).toEqual({ action: 'after', afterMs: 10_000 });
    expect(for2(undefined, 10)).toEqual({ action: 'after', afterMs: 10_000 });
    expect(for2(0, 10)).toEqual({ action: 'evict' });
    expect(evictionDecision([{ operator: 'Exists', tolerationSeconds: -5 }], [taint])).toEqual({ action: 'evict' });
  });
});

describe('TaintEvictionController toleration clock (upstream processPodOnNode)', () => {
  function setup() {
    let now = 0;
    const pod: V1Pod = { metadata: { name: 'p', namespace: 'ns', uid: 'u' }, spec: { nodeName: 'n1', containers: [], tolerations: [{ key: taint.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 60 }] } };
    const nodes = new Map<string, V1Node>();
    const podInformer = Object.assign(new EventEmitter(), { get: () => pod });
    const nodeInformer = Object.assign(new EventEmitter(), { get: (k: string) => nodes.get(k) });
    const criticality = new CriticalityIndex();
    criticality.upsertPod(pod);
    const c = new TaintEvictionController(controllerDeps({ informers: { pods: podInformer, nodes: nodeInformer }, criticality, now: () => now }));
    c.register();
    const setNode = (taints: V1Taint[]) => {
      const old = nodes.get('n1') ?? { metadata: { name: 'n1' }, spec: {} };
      const n = { metadata: { name: 'n1' }, spec: { taints } };
      nodes.set('n1', n);
      nodeInformer.emit('update', n, old);
    };
    return { c, setNode, at: (t: number) => (now = t) };
  }
  it('starts when the taint event is handled, not at the first reconcile', async () => {
    const h = setup();
    h.setNode([taint]);
    h.at(10_000);
    expect(await h.c.reconcile('ns/p')).toEqual({ requeueAfterMs: 50_000 });
  });
  it('a taint removed and re-added before the pod is served starts the clock again', async () => {
    const h = setup();
    h.setNode([taint]);
    h.at(20_000);
    h.setNode([]);
    h.at(30_000);
    h.setNode([taint]);
    h.at(40_000);
    expect(await h.c.reconcile('ns/p')).toEqual({ requeueAfterMs: 50_000 });
  });
  it('another taint change while still tolerated keeps the start', async () => {
    const h = setup();
    h.setNode([taint]);
    h.at(20_000);
    h.setNode([taint, { key: 'x', effect: 'NoSchedule' }, { key: taint.key, value: 'v2', effect: 'NoExecute' }]);
    h.at(40_000);
    expect(await h.c.reconcile('ns/p')).toEqual({ requeueAfterMs: 20_000 });
  });
});

describe('TaintEvictionController hands a critical eviction to the CriticalPathHold at once', () => {
  it('calls onCriticalEviction when a high pod is queued for immediate eviction, not for low, tolerating or already deleting pods', () => {
    const criticality = new CriticalityIndex();
    const pods = new Map<string, V1Pod>();
    const podInformer = Object.assign(new EventEmitter(), { get: (k: string) => pods.get(k) });
    const nodeInformer = Object.assign(new EventEmitter(), { get: () => undefined });
    const mk = (name: string, level: string, extra: Partial<V1Pod['spec']> = {}, deleting = false): V1Pod => ({
      metadata: { name, namespace: 'ns', uid: name, labels: { 'ulysses.io/criticality': level }, ...(deleting ? { deletionTimestamp: new Date(0) } : {}) },
      spec: { nodeName: 'n1', containers: [], ...extra },
    });
    const all = [
      mk('crit', 'high'),
      mk('low', 'low'),
      mk('crit-tolerating', 'high', { tolerations: [{ key: taint.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 }] }),
      mk('crit-deleting', 'high', {}, true),
    ];
    for (const p of all) {
      pods.set(`ns/${p.metadata!.name}`, p);
      criticality.upsertPod(p);
    }
    const queued: [string, number][] = [];
    const evicting: string[] = [];
    const tainted: string[] = [];
    const c = new TaintEvictionController(controllerDeps({ informers: { pods: podInformer, nodes: nodeInformer }, criticality, enqueue: (key, priority) => queued.push([key, priority]) }), {
      onCriticalEviction: (p) => evicting.push(p.metadata!.name!),
      onNoExecuteTaint: (n) => tainted.push(`${n.metadata!.name} before ${queued.length} queued`),
    });
    c.register();
    const node = (taints: V1Taint[]): V1Node => ({ metadata: { name: 'n1' }, spec: { taints } });
    nodeInformer.emit('update', node([taint]), node([]));
    expect(evicting).toEqual(['crit']);
    expect(queued.map(([k]) => k).sort()).toEqual(['ns/crit', 'ns/crit-deleting', 'ns/crit-tolerating', 'ns/low']);
    expect(queued.find(([k]) => k === 'ns/crit')![1]).toBe(2);
    // the taint window was opened before any pod of the node was queued, once per new taint
    expect(tainted).toEqual(['n1 before 0 queued']);
    nodeInformer.emit('update', node([taint]), node([taint])); // unchanged
    nodeInformer.emit('update', node([]), node([taint])); // removed
    nodeInformer.emit('add', node([taint])); // initial list / a new node: not a failure
    expect(tainted).toHaveLength(1);
  });
});

describe('TaintEvictionController logs where an eviction spent its time', () => {
  it('reports the time since the node was seen tainted and per API call', async () => {
    let now = 1000;
    const pod: V1Pod = { metadata: { name: 'crit', namespace: 'ns', uid: 'u1', labels: { 'ulysses.io/criticality': 'high' } }, spec: { nodeName: 'n1', containers: [] } };
    const tainted: V1Node = { metadata: { name: 'n1' }, spec: { taints: [taint] } };
    const nodes = new Map<string, V1Node>();
    const podInformer = Object.assign(new EventEmitter(), { get: () => pod });
    const nodeInformer = Object.assign(new EventEmitter(), { get: (k: string) => nodes.get(k) });
    const calls: string[] = [];
    const client = {
      request: async (method: string, path: string, o?: { critical?: boolean }) => {
        calls.push(`${method} ${path}${o?.critical ? ' (critical)' : ''}`);
        now += 7;
      },
      delete: async (path: string, _body?: unknown, o?: { critical?: boolean }) => {
        calls.push(`DELETE ${path}${o?.critical ? ' (critical)' : ''}`);
        now += 11;
      },
    };
    const events = { event: (_o: unknown, _t: string, reason: string) => calls.push(`Event ${reason}`) };
    const lines: Record<string, unknown>[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
    const criticality = new CriticalityIndex();
    criticality.upsertPod(pod);
    const c = new TaintEvictionController(controllerDeps({ client, events, informers: { pods: podInformer, nodes: nodeInformer }, criticality, log, now: () => now }));
    c.register();
    nodes.set('n1', tainted);
    nodeInformer.emit('update', tainted, { metadata: { name: 'n1' }, spec: {} });
    now += 5; // queued, then picked by a worker
    await c.reconcile('ns/crit');
    // a critical pod: both writes critical (the process' other writes wait), the Event after them
    expect(calls).toEqual(['PATCH /api/v1/namespaces/ns/pods/crit/status (critical)', 'DELETE /api/v1/namespaces/ns/pods/crit (critical)', 'Event TaintManagerEviction']);
    const evicted = lines.find((l) => l.msg === 'evicted pod from a node with an untolerated NoExecute taint');
    expect(evicted).toMatchObject({ pod: 'ns/crit', node: 'n1', sinceTaintMs: 5, patchMs: 7, deleteMs: 11 });
  });
});

describe('TaintEvictionController acts on a critical DELETE\'s response', () => {
  const setup = (level: 'high' | 'low') => {
    const pod: V1Pod = {
      metadata: { name: 'p', namespace: 'ns', uid: 'u1', labels: { 'ulysses.io/criticality': level }, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'r1', controller: true }] },
      spec: { nodeName: 'n1', containers: [] },
    };
    const observed: V1Pod[] = [];
    const podInformer = Object.assign(new EventEmitter(), { get: () => pod, observeDeletion: (p: V1Pod) => observed.push(p) > 0 });
    const nodeInformer = Object.assign(new EventEmitter(), { get: () => ({ metadata: { name: 'n1' }, spec: { taints: [taint] } }) });
    // the apiserver's answer to a graceful DELETE: the pod marked for deletion
    const client = { request: async () => ({}), delete: async () => ({ ...pod, kind: 'Pod', metadata: { ...pod.metadata, deletionTimestamp: new Date(0) } }) };
    const criticality = new CriticalityIndex();
    criticality.upsertPod(pod);
    const c = new TaintEvictionController(controllerDeps({ client, informers: { pods: podInformer, nodes: nodeInformer }, criticality }));
    return { c, observed };
  };

  it('a critical pod: the response goes to the pod cache at once and the replacement\'s create is due', async () => {
    const { c, observed } = setup('high');
    await c.reconcile('ns/p');
    expect(observed.map((p) => p.metadata?.deletionTimestamp !== undefined)).toEqual([true]);
    expect(criticalWrites.busy).toBe(true); // other writes wait for the create (at most MAX_EXPECT_MS)
    await criticalWrites.clear();
  });

  it('a low pod waits for the watch as before', async () => {
    const { c, observed } = setup('low');
    await c.reconcile('ns/p');
    expect(observed).toEqual([]);
    expect(criticalWrites.busy).toBe(false);
  });
});
