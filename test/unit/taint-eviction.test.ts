import { describe, expect, it } from 'vitest';
import { EventEmitter } from 'node:events';
import { pino } from 'pino';
import type { V1Node, V1Pod, V1Taint } from '@kubernetes/client-node';
import { TaintEvictionController, evictionDecision, toleratesTaint } from '../../controller-manager/controllers/taint-eviction.ts';
import { CriticalityIndex } from '../../core/criticality.ts';

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
  it('waits the smallest tolerationSeconds of the tolerations used, forever without any', () => {
    const tol = [
      { key: taint.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      { operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
    ];
    expect(evictionDecision(tol, [taint])).toEqual({ action: 'after', afterMs: 30_000 });
    expect(evictionDecision([{ operator: 'Exists' }], [taint])).toEqual({ action: 'keep' });
    expect(evictionDecision([{ operator: 'Exists', tolerationSeconds: -5 }], [taint])).toEqual({ action: 'evict' });
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
    const c = new TaintEvictionController({
      client: {} as never,
      pods: podInformer as never,
      nodes: nodeInformer as never,
      criticality,
      enqueue: (key, priority) => queued.push([key, priority]),
      log: pino({ level: 'silent' }),
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
      request: async (method: string, path: string) => {
        calls.push(`${method} ${path}`);
        now += 7;
      },
      delete: async (path: string) => {
        calls.push(`DELETE ${path}`);
        now += 11;
      },
    };
    const lines: Record<string, unknown>[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
    const criticality = new CriticalityIndex();
    criticality.upsertPod(pod);
    const c = new TaintEvictionController({ client: client as never, pods: podInformer as never, nodes: nodeInformer as never, criticality, enqueue: () => {}, log, now: () => now });
    c.register();
    nodes.set('n1', tainted);
    nodeInformer.emit('update', tainted, { metadata: { name: 'n1' }, spec: {} });
    now += 5; // queued, then picked by a worker
    await c.reconcile('ns/crit');
    expect(calls).toEqual(['PATCH /api/v1/namespaces/ns/pods/crit/status', 'DELETE /api/v1/namespaces/ns/pods/crit']);
    const evicted = lines.find((l) => l.msg === 'evicted pod from a node with an untolerated NoExecute taint');
    expect(evicted).toMatchObject({ pod: 'ns/crit', node: 'n1', sinceTaintMs: 5, patchMs: 7, deleteMs: 11 });
  });
});
