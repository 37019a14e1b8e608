/**
 * The extender's caches (server.ts verdict cache keyed by the pod's demand, state.ts per-node RT
 * summary, evaluate.ts annotation parses, wire.ts fast request check) never change an answer:
 * - a node's cached verdicts are dropped when what the analyses read of its pods or of its
 *   labels/annotations changes, and kept on status-only updates (or of fields they do not read);
 * - the deferrable-server UID tie-break and a pod that already holds capacity are honoured;
 * - a rejection naming the pod being placed (its own server missing its deadline) is cached per
 *   demand and rank, for the same pod retried and for a fresh pod of that rank, naming that pod;
 * - over a random sequence of cluster changes and pods (fresh, reused UIDs and replicas; every
 *   node kind, or deferrable-server nodes only, where such rejections are frequent), every filter
 *   and prioritize answer equals the uncached evaluation (evaluateNode on a state rebuilt from the
 *   latest objects), and an identical second round recomputes nothing;
 * - prioritize answered from the same pod's filter (its scheduling cycle) only while nothing changed;
 * - the fast request check accepts only bodies the zod schema accepts.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { prng } from '../../core/prng.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { evaluateNode, MESSAGES, podRequirements } from '../../scheduler-plugins/extender/evaluate.ts';
import { tdmaNetworks } from '../../scheduler-plugins/extender/config.ts';
import { ClusterState, RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { extenderArgsSchema, fastExtenderArgs } from '../../scheduler-plugins/extender/wire.ts';
import { silentLogger } from '../../core/logging.ts';
import { containersFor, filter, prioritize } from './extender-calls.ts';

let rv = 0;
function node(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): V1Node {
  return { metadata: { name, labels, annotations, resourceVersion: String(++rv) } };
}
function pod(name: string, annotations: Record<string, string> = {}, o: { uid?: string; nodeName?: string; labels?: Record<string, string> } = {}): V1Pod {
  return {
    metadata: { name, namespace: 'ns', uid: o.uid ?? `uid-${name}`, annotations, labels: o.labels ?? {}, resourceVersion: String(++rv) },
    spec: { containers: containersFor(annotations), ...(o.nodeName ? { nodeName: o.nodeName } : {}) },
    status: { phase: o.nodeName ? 'Running' : 'Pending' },
  };
}
/** A deferrable server (budget per server period) holding one task of period 10 ms. */
const ds = (budgetUs: number, wcetUs: number, serverPeriodUs = 2500) =>
  JSON.stringify({ server: { budgetUs, periodUs: serverPeriodUs }, tasks: [{ wcetUs, periodUs: 10000, deadlineUs: 10000, priority: 1 }] });

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});
const quiet = silentLogger();
function extender() {
  const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 6000, slotUs: 1000 } } }, log: quiet });
  servers.push(s);
  return s;
}


/** What the extender must answer for `p`: the uncached per-node evaluation on the same state (or on `state`, e.g. one rebuilt from the latest objects). */
function expected(s: ExtenderServer, p: V1Pod, names: string[], state: ClusterState = s.state) {
  const r = podRequirements(p, s.config, tdmaNetworks(s.config));
  if (!r.ok) throw new Error(r.message);
  const passing: string[] = [];
  const failed: Record<string, string> = {};
  const scores: Record<string, number> = {};
  for (const n of names) {
    const v = evaluateNode(r.req, state.node(n)!, state, s.config);
    if (v.fits) passing.push(n);
    else failed[n] = v.message;
    scores[n] = v.fits ? v.score : 0;
  }
  return { passing, failed, scores };
}

async function assertUncached(s: ExtenderServer, p: V1Pod, names: string[], what: string, state?: ClusterState) {
  const want = expected(s, p, names, state);
  const f = await filter(s, p, names);
  expect(f.NodeNames, what).toEqual(want.passing);
  expect(f.FailedAndUnresolvableNodes, what).toEqual(want.failed);
  const scores = await prioritize(s, p, f.NodeNames ?? []);
  for (const n of f.NodeNames ?? []) expect(scores[n], `${what}: score of ${n}`).toBe(want.scores[n]);
  return f;
}

describe('scheduler extender caches', () => {
  it('a node’s cached verdicts are dropped when a pod on it is added, updated or deleted', async () => {
    const s = extender();
    s.state.upsertNode(node('rt', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    const demand = { 'ulysses.io/rt': ds(1000, 1500) };
    // same demand, fresh UID each round (as the scheduler sends replicas): the second round is a cache hit
    expect((await filter(s, pod('p1', demand), ['rt'])).NodeNames).toEqual(['rt']);
    expect((await filter(s, pod('p2', demand), ['rt'])).NodeNames).toEqual(['rt']);
    // a pod bound to the node takes 68% of the core: the same demand no longer fits
    const holder = pod('holder', { 'ulysses.io/rt': ds(1700, 2000) }, { nodeName: 'rt' });
    s.state.upsertPod(holder);
    const f = await filter(s, pod('p3', demand), ['rt']);
    expect(f.NodeNames).toEqual([]);
    expect(f.FailedAndUnresolvableNodes.rt).toMatch(/^ulysses: deferrable-server: does not fit/);
    // updated to a smaller server (a new version of the same pod): fits again
    s.state.upsertPod({ ...holder, metadata: { ...holder.metadata, annotations: { 'ulysses.io/rt': ds(500, 500) }, resourceVersion: String(++rv) } });
    expect((await filter(s, pod('p4', demand), ['rt'])).NodeNames).toEqual(['rt']);
    // bigger again, then deleted
    s.state.upsertPod({ ...holder, metadata: { ...holder.metadata, annotations: { 'ulysses.io/rt': ds(1700, 2000) }, resourceVersion: String(++rv) } });
    expect((await filter(s, pod('p5', demand), ['rt'])).NodeNames).toEqual([]);
    s.state.deletePod(holder);
    expect((await filter(s, pod('p6', demand), ['rt'])).NodeNames).toEqual(['rt']);
    // a reservation (annotation written by bind, pod not bound yet) counts as well
    s.state.upsertPod(pod('reserved', { 'ulysses.io/rt': ds(1700, 2000), [RESERVED_NODE_ANNOTATION]: 'rt', 'ulysses.io/rt-cores': '[0]' }));
    expect((await filter(s, pod('p7', demand), ['rt'])).NodeNames).toEqual([]);
  });

  it('a node’s cached verdicts are dropped when its labels or annotations change', async () => {
    const s = extender();
    const names = ['n'];
    const policy = { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' };
    s.state.upsertNode(node('n', {}, { 'ulysses.io/assurance': '{"cpu":3}' }));
    expect((await filter(s, pod('a1', policy), names)).NodeNames).toEqual(['n']);
    const before = await prioritize(s, pod('a1', policy), names);
    // assurance lowered (e.g. by the node-assurance updater)
    s.state.upsertNode(node('n', {}, { 'ulysses.io/assurance': '{"cpu":1}' }));
    const f = await filter(s, pod('a2', policy), names);
    expect(f.NodeNames).toEqual([]);
    expect(f.FailedAndUnresolvableNodes.n).toBe(MESSAGES.assurance);
    // raised beyond the original: passes, with a different score (the cached one is not reused)
    s.state.upsertNode(node('n', {}, { 'ulysses.io/assurance': '{"cpu":9}' }));
    expect((await filter(s, pod('a3', policy), names)).NodeNames).toEqual(['n']);
    expect((await prioritize(s, pod('a3', policy), names)).n).not.toBe(before.n);

    // RT: capacity annotation and kind label
    const rt = { 'ulysses.io/rt': ds(1000, 1500) };
    s.state.upsertNode(node('n', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertPod(pod('busy', { 'ulysses.io/rt': ds(1700, 2000) }, { nodeName: 'n' }));
    expect((await filter(s, pod('r1', rt), names)).NodeNames).toEqual([]);
    s.state.upsertNode(node('n', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":2}' }));
    expect((await filter(s, pod('r2', rt), names)).NodeNames).toEqual(['n']);
    s.state.upsertNode(node('n', {}, { 'ulysses.io/rt-capacity': '{"cores":2}' }));
    expect((await filter(s, pod('r3', rt), names)).FailedAndUnresolvableNodes.n).toMatch(/not a real-time node/);
  });

  it('only changes of what the analyses read drop a node’s verdicts: status-only updates keep them', async () => {
    const s = extender();
    const names = ['rt', 'other', 't'];
    s.state.upsertNode(node('rt', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertNode(node('other', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertNode(node('t', { 'ulysses.io/tdma-network': 'rtnet0' }));
    const holder = pod('holder', { 'ulysses.io/rt': ds(500, 500), 'ulysses.io/rt-cores': '[0]' }, { nodeName: 'rt' });
    s.state.upsertPod(holder);
    const slotHolder = pod('slots', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}', 'ulysses.io/tdma-slots': '[0]' }, { nodeName: 't' });
    s.state.upsertPod(slotHolder);
    const demand = { 'ulysses.io/rt': ds(1000, 1500) };
    const tdma = { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' };
    let n = 0;
    /** filter + prioritize of a fresh pod of each demand (as replicas arrive); returns the verdicts computed (cache misses). */
    const round = async (what: string) => {
      const before = s.verdictStats.misses;
      for (const d of [demand, tdma]) await assertUncached(s, pod(`p${++n}`, d), names, what);
      return s.verdictStats.misses - before;
    };
    await round('first round');
    expect(await round('nothing changed')).toBe(0);
    const version = () => [s.state.nodeVersion('rt'), s.state.nodeVersion('other'), s.state.nodeVersion('t'), s.state.networkVersion('rtnet0')];
    const v0 = version();
    const summary = s.state.rtSummary('rt');
    const next = <T extends V1Pod | V1Node>(o: T, patch: (o: T) => T): T => {
      const out = patch(structuredClone(o));
      out.metadata!.resourceVersion = String(++rv);
      return out;
    };

    // status-only updates of the pods (as KWOK/the kubelet report them), other labels/annotations, node status
    let h = next(holder, (p) => ({ ...p, status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }], podIP: '10.0.0.7' } }));
    s.state.upsertPod(h);
    h = next(h, (p) => ({ ...p, metadata: { ...p.metadata, labels: { app: 'x' }, annotations: { ...p.metadata!.annotations, 'example.com/other': '1' } } }));
    s.state.upsertPod(h);
    s.state.upsertPod(next(slotHolder, (p) => ({ ...p, status: { phase: 'Running', startTime: new Date(0) } })));
    const rtNode = s.state.node('rt')!.node;
    s.state.upsertNode(next(rtNode, (x) => ({ ...x, metadata: { ...x.metadata, annotations: { ...x.metadata!.annotations, 'node.alpha.kubernetes.io/ttl': '0' } }, status: { conditions: [{ type: 'Ready', status: 'True' }] } })));
    expect(version()).toEqual(v0);
    expect(s.state.rtSummary('rt')).toBe(summary);
    expect(await round('after status-only updates')).toBe(0);
    // the records hold the latest objects all the same
    expect(s.state.pod('ns/holder')!.pod.metadata!.labels).toEqual({ app: 'x' });
    expect(s.state.pod('ns/holder')!.pod.status!.podIP).toBe('10.0.0.7');
    expect(s.state.node('rt')!.node.status!.conditions![0]!.type).toBe('Ready');

    // an RT annotation change: that node's verdicts (and only those) are recomputed
    h = next(h, (p) => ({ ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, 'ulysses.io/rt': ds(1700, 2000) } } }));
    s.state.upsertPod(h);
    expect(s.state.nodeVersion('rt')).toBeGreaterThan(v0[0]!);
    expect(s.state.nodeVersion('other')).toBe(v0[1]);
    expect(await round('rt annotation changed')).toBe(2); // node rt, for each of the two demands
    const rtFull = await filter(s, pod('check1', demand), ['rt']);
    expect(rtFull.NodeNames).toEqual([]);

    // the reservation (rt-cores) text changes
    let v = s.state.nodeVersion('rt');
    h = next(h, (p) => ({ ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, 'ulysses.io/rt-cores': '[1]' } } }));
    s.state.upsertPod(h);
    expect(s.state.nodeVersion('rt')).toBeGreaterThan(v);
    await round('rt-cores changed');

    // the pod moves to another node: both nodes' verdicts are recomputed
    v = s.state.nodeVersion('rt');
    const vOther = s.state.nodeVersion('other');
    h = next(h, (p) => ({ ...p, spec: { ...p.spec!, nodeName: 'other' } }));
    s.state.upsertPod(h);
    expect(s.state.nodeVersion('rt')).toBeGreaterThan(v);
    expect(s.state.nodeVersion('other')).toBeGreaterThan(vOther);
    expect(await round('moved to other')).toBe(4); // two nodes × two demands
    expect((await filter(s, pod('check2', demand), ['rt', 'other'])).NodeNames).toEqual(['rt']);

    // terminal phase: the reservation is released
    v = s.state.nodeVersion('other');
    h = next(h, (p) => ({ ...p, status: { phase: 'Succeeded' } }));
    s.state.upsertPod(h);
    expect(s.state.nodeVersion('other')).toBeGreaterThan(v);
    expect(await round('terminal')).toBe(2);
    expect((await filter(s, pod('check3', demand), ['rt', 'other'])).NodeNames).toEqual(['rt', 'other']);

    // TDMA slots of the other pod change: the network version moves, every TDMA verdict is recomputed
    const vNet = s.state.networkVersion('rtnet0');
    s.state.upsertPod(next(slotHolder, (p) => ({ ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, 'ulysses.io/tdma-slots': '[0,1,2,3]' } } })));
    expect(s.state.networkVersion('rtnet0')).toBeGreaterThan(vNet);
    expect(await round('slots changed')).toBe(4); // the TDMA demand on each of the three nodes, the RT demand on t (a pod on t changed)

    // a node label change (and a node annotation the analyses read)
    v = s.state.nodeVersion('other');
    s.state.upsertNode(node('other', { 'ulysses.io/rt-scheduler': 'edf' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    expect(s.state.nodeVersion('other')).toBeGreaterThan(v);
    expect(await round('label changed')).toBe(2);
    expect((await filter(s, pod('check4', demand), ['other'])).FailedAndUnresolvableNodes.other).toMatch(/edf node/);
    v = s.state.nodeVersion('t');
    s.state.upsertNode(node('t', { 'ulysses.io/tdma-network': 'rtnet0' }, { 'ulysses.io/assurance': '{"cpu":1}' }));
    expect(s.state.nodeVersion('t')).toBeGreaterThan(v);
    expect(await round('assurance changed')).toBe(2);
    expect(await round('nothing changed again')).toBe(0);
  });

  it('prioritize right after the pod’s filter reads the filter’s scores; a change in between, another order or a node it did not pass is evaluated', async () => {
    const s = extender();
    const policy = { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' };
    const names = ['a', 'b', 'c', 'd'];
    names.forEach((n, i) => s.state.upsertNode(node(n, {}, { 'ulysses.io/assurance': `{"cpu":${i + 1},"memory":${4 - i}}` })));
    const lookups = vi.spyOn(s.state, 'slotOf');
    const p = pod('p', policy);
    const f = await filter(s, p, names);
    expect(f.NodeNames).toEqual(['b', 'c', 'd']);
    const want = expected(s, p, names).scores;
    lookups.mockClear();
    // kube-scheduler's cycle: the passing nodes (or a subsequence, after other extenders), same order
    expect(await prioritize(s, p, ['b', 'c', 'd'])).toEqual({ b: want.b, c: want.c, d: want.d });
    expect(await prioritize(s, p, ['b', 'd'])).toEqual({ b: want.b, d: want.d });
    expect(lookups).not.toHaveBeenCalled();
    // another pod of the same demand has no filter answer of its own: evaluated (from the verdict cache)
    expect(await prioritize(s, pod('q', policy), ['b', 'c'])).toEqual({ b: want.b, c: want.c });
    expect(lookups).toHaveBeenCalled();
    // a node the filter refused, or another order: evaluated per node
    for (const asked of [['a', 'b'], ['d', 'b']]) {
      lookups.mockClear();
      expect(await prioritize(s, p, asked)).toEqual(Object.fromEntries(asked.map((n) => [n, n === 'a' ? 0 : want[n]])));
      expect(lookups).toHaveBeenCalled();
    }
    // a node changed between filter and prioritize: its new score, not the filter's
    await filter(s, p, names);
    s.state.upsertNode(node('c', {}, { 'ulysses.io/assurance': '{"cpu":9,"memory":9}' }));
    const now = expected(s, p, names).scores;
    expect(now.c).not.toBe(want.c);
    expect(await prioritize(s, p, ['b', 'c', 'd'])).toEqual({ b: now.b, c: now.c, d: now.d });
  });

  it('a node that takes a deleted node’s slot gets its own verdicts, not those cached for the slot', async () => {
    const s = extender();
    const policy = { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' };
    s.state.upsertNode(node('a', {}, { 'ulysses.io/assurance': '{"cpu":3}' }));
    s.state.upsertNode(node('keep', {}, { 'ulysses.io/assurance': '{"cpu":3}' }));
    expect((await filter(s, pod('p1', policy), ['a', 'keep'])).NodeNames).toEqual(['a', 'keep']);
    const slot = s.state.slotOf('a');
    s.state.deleteNode('a');
    expect((await filter(s, pod('p2', policy), ['a', 'keep'])).FailedNodes).toEqual({ a: MESSAGES.unknownNode });
    // b (below the policy) in a's slot, then a back (in a new slot): each its own verdict
    s.state.upsertNode(node('b', {}, { 'ulysses.io/assurance': '{"cpu":1}' }));
    expect(s.state.slotOf('b')).toBe(slot);
    await assertUncached(s, pod('p3', policy), ['b', 'keep'], 'b in a’s slot');
    expect((await filter(s, pod('p4', policy), ['b'])).NodeNames).toEqual([]);
    s.state.deleteNode('b');
    s.state.upsertNode(node('a', {}, { 'ulysses.io/assurance': '{"cpu":1}' }));
    await assertUncached(s, pod('p5', policy), ['a', 'keep'], 'a back, below the policy');
    expect((await filter(s, pod('p6', policy), ['a'])).NodeNames).toEqual([]);
  });

  it('TDMA verdicts follow the network: a slot taken on another node invalidates them', async () => {
    const s = extender();
    s.state.upsertNode(node('t1', { 'ulysses.io/tdma-network': 'rtnet0' }));
    s.state.upsertNode(node('t2', { 'ulysses.io/tdma-network': 'rtnet0' }));
    const want = { 'ulysses.io/tdma': '{"network":"rtnet0","slots":3}' };
    expect((await filter(s, pod('x1', want), ['t1'])).NodeNames).toEqual(['t1']);
    // 4 of the 6 slots taken by a pod on t2: t1 (unchanged itself) no longer fits 3 slots
    s.state.upsertPod(pod('holder', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":4}', 'ulysses.io/tdma-slots': '[0,1,2,3]' }, { nodeName: 't2' }));
    expect((await filter(s, pod('x2', want), ['t1'])).NodeNames).toEqual([]);
  });

  it('deferrable servers of equal period are ranked by UID: the cache keys on the pod’s rank, not only its demand', async () => {
    const s = extender();
    s.state.upsertNode(node('ds', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    // the existing server (UID "m") and the new one together fill the core: whichever ranks lower misses its deadline
    s.state.upsertPod(pod('existing', { 'ulysses.io/rt': ds(1200, 1000) }, { uid: 'm', nodeName: 'ds' }));
    const demand = { 'ulysses.io/rt': ds(1200, 1000) };
    const a1 = await assertUncached(s, pod('a1', demand, { uid: 'a1' }), ['ds'], 'a1 ranks above m');
    const z1 = await assertUncached(s, pod('z1', demand, { uid: 'z1' }), ['ds'], 'z1 ranks below m');
    const a2 = await assertUncached(s, pod('a2', demand, { uid: 'a2' }), ['ds'], 'a2 ranks above m');
    const z2 = await assertUncached(s, pod('z2', demand, { uid: 'z2' }), ['ds'], 'z2 ranks below m');
    const z3 = await assertUncached(s, pod('z3', demand, { uid: 'z3' }), ['ds'], 'z3 ranks below m, right after z2');
    // the two ranks do give different answers (else this test would not exercise the tie-break)
    expect(a1.FailedAndUnresolvableNodes.ds).not.toEqual(z1.FailedAndUnresolvableNodes.ds);
    expect(a2.FailedAndUnresolvableNodes.ds).toEqual(a1.FailedAndUnresolvableNodes.ds);
    expect(a1.FailedAndUnresolvableNodes.ds).toContain('server of pod m');
    // a message naming the new pod is that pod's own
    expect(z2.FailedAndUnresolvableNodes.ds).toContain('server of pod z2');
    expect(z2.FailedAndUnresolvableNodes.ds).not.toContain('z1');
    expect(z3.FailedAndUnresolvableNodes.ds).toContain('server of pod z3');
  });

  it('a deferrable-server rejection naming the pod being placed is cached per demand and rank: the same pod again, or a fresh one of that rank, recomputes nothing', async () => {
    const s = extender();
    const dsNode = (name: string) => node(name, { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' });
    const names = ['ds1', 'ds2'];
    for (const n of names) s.state.upsertNode(dsNode(n));
    // one existing server per node (UIDs "m1", "m2"): a new one of the same period ranking below it misses its deadline
    s.state.upsertPod(pod('existing1', { 'ulysses.io/rt': ds(1200, 1000) }, { uid: 'm1', nodeName: 'ds1' }));
    s.state.upsertPod(pod('existing2', { 'ulysses.io/rt': ds(1200, 1000) }, { uid: 'm2', nodeName: 'ds2' }));
    const demand = { 'ulysses.io/rt': ds(1200, 1000) };
    /** filter (+ prioritize of the nodes that passed) of `p`, checked against the uncached evaluation; the verdicts computed. */
    const round = async (p: V1Pod, what: string) => {
      const before = s.verdictStats.misses;
      const f = await assertUncached(s, p, names, what);
      return { recomputed: s.verdictStats.misses - before, failed: f.FailedAndUnresolvableNodes };
    };

    const z1 = pod('z1', demand, { uid: 'z1' });
    const first = await round(z1, 'z1, first round');
    expect(first.recomputed).toBe(2);
    for (const n of names) expect(first.failed[n]).toContain('server of pod z1');
    // kube-scheduler retries the same pod: nothing recomputed, the same messages
    const again = await round(z1, 'z1, identical second round');
    expect(again.recomputed).toBe(0);
    expect(again.failed).toEqual(first.failed);
    // a fresh pod of the same demand and rank (below m1, m2): nothing recomputed, each message names that pod
    const z2 = await round(pod('z2', demand, { uid: 'z2' }), 'z2, same rank');
    expect(z2.recomputed).toBe(0);
    for (const n of names) {
      expect(z2.failed[n]).toContain('server of pod z2');
      expect(z2.failed[n]).not.toContain('z1');
      expect(z2.failed[n]).toBe(first.failed[n]!.replaceAll('z1', 'z2'));
    }
    // a pod ranking above the existing servers has a rank of its own (there the existing server misses)...
    const a1 = await round(pod('a1', demand, { uid: 'a1' }), 'a1, ranks above m1, m2');
    expect(a1.recomputed).toBe(2);
    expect(a1.failed.ds1).toContain('server of pod m1');
    expect((await round(pod('a2', demand, { uid: 'a2' }), 'a2, same rank as a1')).recomputed).toBe(0);
    // ...kept next to the other rank's verdicts
    expect((await round(pod('z3', demand, { uid: 'z3' }), 'z3, rank of z1')).recomputed).toBe(0);
    // a change on ds1 (a pod starting to hold capacity there) invalidates ds1's verdicts of every rank, and only those
    s.state.upsertPod(pod('plain', {}, { nodeName: 'ds1' }));
    expect((await round(pod('z4', demand, { uid: 'z4' }), 'z4 after ds1 changed')).recomputed).toBe(1);
    expect((await round(pod('a3', demand, { uid: 'a3' }), 'a3 after ds1 changed')).recomputed).toBe(1);
    expect((await round(pod('z4', demand, { uid: 'z4' }), 'z4 again')).recomputed).toBe(0);
  });

  it('a pod that already holds capacity is evaluated without its own reservation, not from another pod’s verdict', async () => {
    const s = extender();
    s.state.upsertNode(node('ds', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    const demand = { 'ulysses.io/rt': ds(1300, 1000) };
    // the reservation of "r" (bind wrote it, binding pending) is on the node: other pods with its demand do not fit...
    const r = pod('r', { ...demand, [RESERVED_NODE_ANNOTATION]: 'ds', 'ulysses.io/rt-cores': '[0]' });
    s.state.upsertPod(r);
    expect((await filter(s, pod('other', demand), ['ds'])).NodeNames).toEqual([]);
    // ...but "r" itself (retried by the scheduler) does: its own reservation does not count against it
    expect((await filter(s, r, ['ds'])).NodeNames).toEqual(['ds']);
    expect((await filter(s, pod('other2', demand), ['ds'])).NodeNames).toEqual([]);
  });

  /**
   * Node roles of the randomized test: RT nodes of every kind among plain ones, or deferrable-server
   * nodes only, where a new server often ranks below an existing one of its period and is the one
   * missing its deadline: a rejection naming the pod being placed.
   */
  const mixes = [
    { mix: 'RT nodes of every kind', seed: 0xcac4e, steps: 300, kinds: ['deferrable-server', 'budget-period', 'edf'], allRt: false, podNamed: 0, replicaNamedFromCache: 0 },
    { mix: 'deferrable-server nodes only', seed: 0xd5e7, steps: 700, kinds: ['deferrable-server'], allRt: true, podNamed: 50, replicaNamedFromCache: 30 },
  ];
  it.each(mixes)('random cluster changes (status-only updates among them) and pods: every answer equals the uncached evaluation ($mix)', async (mix) => {
    const rnd = prng(mix.seed);
    const int = (n: number) => Math.floor(rnd() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const s = extender();
    const names = Array.from({ length: 10 }, (_, i) => `n${i}`);
    const { kinds } = mix;
    const setNode = (i: number) => {
      const labels: Record<string, string> = {};
      const annotations: Record<string, string> = { 'ulysses.io/assurance': JSON.stringify({ cpu: int(5), memory: int(4) }) };
      if (mix.allRt || i % 2 === 0) {
        labels['ulysses.io/rt-scheduler'] = kinds[(Math.floor(i / 2) + int(2)) % kinds.length]!;
        annotations['ulysses.io/rt-capacity'] = JSON.stringify({ cores: 1 + int(2) });
      }
      if (i % 3 === 0) labels['ulysses.io/tdma-network'] = 'rtnet0';
      s.state.upsertNode(node(names[i]!, labels, annotations));
    };
    names.forEach((_, i) => setNode(i));
    const rtDemandsOf: Record<string, string[]> = {
      'deferrable-server': [ds(500, 500), ds(1200, 1000), ds(1000, 1500), ds(1000, 1000, 5000)],
      'budget-period': ['{"reservation":{"runtimeUs":3000,"periodUs":10000,"cpus":1}}'],
      edf: ['{"tasks":[{"wcetUs":3000,"periodUs":10000}]}'],
    };
    const rtDemands = kinds.flatMap((k) => rtDemandsOf[k]!);
    const demand = (): Record<string, string> => {
      const a: Record<string, string> = {};
      if (rnd() < 0.6) a['ulysses.io/rt'] = pick(rtDemands);
      if (rnd() < 0.3) a['ulysses.io/tdma'] = `{"network":"rtnet0","slots":${1 + int(2)}}`;
      if (rnd() < 0.5) a['ulysses.io/assurance-policy'] = `{"policy":"threshold","min":{"cpu":${int(4)}}}`;
      return a;
    };
    const holders: V1Pod[] = [];
    let checks = 0;
    let statusOnly = 0;
    let replaced = 0;
    const replacing = prng(mix.seed + 1);
    /** Rejections naming the pod being placed (its server missing its deadline: "server of pod <uid>: ...", "pod <uid> task <i>: ..."). */
    let podNamed = 0;
    /** Such rejections of a replica answered entirely from the cache (from the verdict computed for another UID). */
    let replicaNamedFromCache = 0;
    const namingPod = (f: { FailedAndUnresolvableNodes: Record<string, string> }, p: V1Pod) =>
      Object.values(f.FailedAndUnresolvableNodes).filter((m) => m.includes(`pod ${p.metadata!.uid}:`) || m.includes(`pod ${p.metadata!.uid} task`)).length;
    for (let step = 0; step < mix.steps; step++) {
      const op = int(10);
      if (op < 3) {
        // a pod lands on a node (bound), with a UID from a small alphabet: ties with new pods happen
        const n = names[int(names.length)]!;
        const a = demand();
        // mostly of the node's kind (a pod of another kind there makes every RT verdict of the node "existing pod ... declares ...")
        const kind = s.state.node(n)!.node.metadata!.labels!['ulysses.io/rt-scheduler'];
        if (kind && rnd() < 0.8) a['ulysses.io/rt'] = pick(rtDemandsOf[kind]!);
        if (a['ulysses.io/tdma']) a['ulysses.io/tdma-slots'] = JSON.stringify([int(6)]);
        const p = pod(`h${step}`, a, { uid: `u${int(20)}-${step}`, nodeName: n });
        s.state.upsertPod(p);
        holders.push(p);
      } else if (op < 5 && holders.length) {
        s.state.deletePod(holders.splice(int(holders.length), 1)[0]!);
      } else if (op < 6) {
        // the node replacements drawn apart, so the rest of the sequence stays the seed's
        if (replacing() < 0.25) {
          // a node leaves and another joins: the new one takes the old one's slot (state.ts NodeSlots)
          const i = int(names.length);
          s.state.deleteNode(names[i]!);
          names[i] = `n${i}-${step}`;
          setNode(i);
          replaced++;
        } else if (rnd() < 0.5 || !holders.length) setNode(int(names.length));
        else {
          // a change the analyses read: the pod moves, ends, or its RT / reservation annotations change
          const i = int(holders.length);
          const p = structuredClone(holders[i]!);
          p.metadata!.resourceVersion = String(++rv);
          const what = int(4);
          if (what === 0) p.spec!.nodeName = names[int(names.length)]!;
          else if (what === 1) p.status = { phase: pick(['Succeeded', 'Failed', 'Running']) };
          else if (what === 2) p.metadata!.annotations = { ...p.metadata!.annotations, 'ulysses.io/rt': pick(rtDemands) };
          else p.metadata!.annotations = { ...p.metadata!.annotations, 'ulysses.io/rt-cores': JSON.stringify([int(2)]) };
          s.state.upsertPod(p);
          holders[i] = p;
        }
      } else {
        // the pod to place: usually fresh, sometimes one that already holds capacity (retried after a failed bind)
        const retried = rnd() < 0.15 && holders.length;
        const a = demand();
        const p = retried ? pick(holders) : pod(`p${step}`, a, { uid: `u${int(20)}-p${step}` });
        // reference: a state built afresh from the latest objects (catches an index or version kept stale by an update)
        const fresh = new ClusterState();
        for (const n of names) fresh.upsertNode(s.state.node(n)!.node);
        for (const h of holders) fresh.upsertPod(h);
        const f = await assertUncached(s, p, names, `step ${step}`, fresh);
        podNamed += namingPod(f, p);
        // and again, identical (as kube-scheduler retries a pod): every verdict from the cache now
        const m0 = s.verdictStats.misses;
        await assertUncached(s, p, names, `step ${step} again`, fresh);
        expect(s.verdictStats.misses - m0, `step ${step}: verdicts recomputed in an identical round`).toBe(0);
        if (!retried) {
          // a replica: same demand, another UID (rank among equal-period servers: often the same, as its UID often sorts next to p's)
          const replica = pod(`q${step}`, a, { uid: `${rnd() < 0.5 ? p.metadata!.uid!.split('-')[0] : `u${int(20)}`}-q${step}` });
          // the nodes whose verdict names the replica, one at a time: answered from the cache when it has a verdict of that rank
          for (const n of names.filter((n) => namingPod({ FailedAndUnresolvableNodes: expected(s, replica, [n], fresh).failed }, replica))) {
            const m1 = s.verdictStats.misses;
            await assertUncached(s, replica, [n], `step ${step} replica on ${n}`, fresh);
            if (s.verdictStats.misses === m1) replicaNamedFromCache++;
          }
          await assertUncached(s, replica, names, `step ${step} replica`, fresh);
        }
        checks++;
      }
      if (rnd() < 0.4) {
        // a status-only update (or of a label/annotation the analyses do not read): must not change any answer, and bumps nothing
        const versions = names.map((n) => s.state.nodeVersion(n)).join() + s.state.networkVersion('rtnet0');
        if (rnd() < 0.6 && holders.length) {
          const i = int(holders.length);
          const p = structuredClone(holders[i]!);
          p.metadata!.resourceVersion = String(++rv);
          p.metadata!.labels = { ...p.metadata!.labels, gen: String(step) };
          p.status = { ...p.status, conditions: [{ type: 'Ready', status: pick(['True', 'False']) }], podIP: `10.0.0.${int(250)}` };
          s.state.upsertPod(p);
          holders[i] = p;
        } else {
          const n = structuredClone(s.state.node(pick(names))!.node);
          n.metadata!.resourceVersion = String(++rv);
          n.metadata!.annotations = { ...n.metadata!.annotations, 'node.alpha.kubernetes.io/ttl': String(step) };
          n.status = { conditions: [{ type: 'Ready', status: pick(['True', 'False']) }] };
          s.state.upsertNode(n);
        }
        expect(names.map((n) => s.state.nodeVersion(n)).join() + s.state.networkVersion('rtnet0'), `step ${step}: status-only update`).toBe(versions);
        statusOnly++;
      }
    }
    expect(checks).toBeGreaterThan(100);
    expect(statusOnly).toBeGreaterThan(80);
    expect(replaced).toBeGreaterThan(5);
    expect(podNamed).toBeGreaterThanOrEqual(mix.podNamed);
    expect(replicaNamedFromCache).toBeGreaterThanOrEqual(mix.replicaNamedFromCache);
  }, 60_000); // seconds of seeded work: beyond vitest's 5-s default on a loaded 2-CPU machine (not a timing claim)

  it('the fast request check accepts only what the schema accepts', () => {
    const rnd = prng(0xfa57);
    const int = (n: number) => Math.floor(rnd() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const bad = (): unknown => pick([undefined, null, '', 'x', 'a'.repeat(300), 1, true, [], ['n1'], {}, { a: 'b' }, { a: 1 }, [{}]]);
    let fast = 0;
    let rejected = 0;
    for (let i = 0; i < 5000; i++) {
      // a valid body, then 0..3 random fields replaced by junk
      const meta: Record<string, unknown> = { name: 'p', namespace: 'ns', uid: 'u', resourceVersion: '7', labels: { a: 'b' }, annotations: { 'ulysses.io/rt': '{}' } };
      const pod: Record<string, unknown> = { metadata: meta, spec: { containers: [] } };
      const body: Record<string, unknown> = { Pod: pod, NodeNames: ['n1', 'n2'] };
      for (let k = int(4); k > 0; k--) {
        const where = pick(['meta', 'meta', 'meta', 'pod', 'body']);
        if (where === 'meta') meta[pick(['name', 'namespace', 'uid', 'resourceVersion', 'labels', 'annotations'])] = pick([bad(), 'x'.repeat(pick([64, 65, 128, 129, 253, 254]))]);
        else if (where === 'pod') pod[pick(['metadata', 'spec', 'status'])] = bad();
        else body[pick(['Pod', 'NodeNames', 'Nodes'])] = pick([bad(), ['n1', ''], ['n1', 2], ['y'.repeat(254)], { items: [] }]);
      }
      const f = fastExtenderArgs(body);
      const z = extenderArgsSchema.safeParse(body);
      if (f) {
        fast++;
        expect(z.success, JSON.stringify(body)).toBe(true);
      } else if (!z.success) rejected++;
    }
    expect(fast).toBeGreaterThan(500);
    expect(rejected).toBeGreaterThan(500);
  });
});
