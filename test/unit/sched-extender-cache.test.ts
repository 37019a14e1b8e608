/**
 * The extender's caches (server.ts verdict cache keyed by the pod's demand, state.ts per-node RT
 * summary, evaluate.ts annotation parses, wire.ts fast request check) never change an answer:
 * - a node's cached verdicts are dropped when its pods or its labels/annotations change;
 * - the deferrable-server UID tie-break and a pod that already holds capacity are honoured;
 * - over a random sequence of cluster changes and pods (fresh and reused UIDs), every filter and
 *   prioritize answer equals the uncached evaluation (evaluateNode on the same state);
 * - the fast request check accepts only bodies the zod schema accepts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { prng } from '../../core/prng.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { evaluateNode, podRequirements } from '../../scheduler-plugins/extender/evaluate.ts';
import { tdmaNetworks } from '../../scheduler-plugins/extender/config.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { extenderArgsSchema, fastExtenderArgs } from '../../scheduler-plugins/extender/wire.ts';
import { silentLogger } from '../../core/logging.ts';
import { filter, prioritize } from './extender-calls.ts';

let rv = 0;
function node(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): V1Node {
  return { metadata: { name, labels, annotations, resourceVersion: String(++rv) } };
}
function pod(name: string, annotations: Record<string, string> = {}, o: { uid?: string; nodeName?: string; labels?: Record<string, string> } = {}): V1Pod {
  return {
    metadata: { name, namespace: 'ns', uid: o.uid ?? `uid-${name}`, annotations, labels: o.labels ?? {}, resourceVersion: String(++rv) },
    spec: { containers: [{ name: 'c' }], ...(o.nodeName ? { nodeName: o.nodeName } : {}) },
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


/** What the extender must answer for `p`: the uncached per-node evaluation on the same state. */
function expected(s: ExtenderServer, p: V1Pod, names: string[]) {
  const r = podRequirements(p, s.config, tdmaNetworks(s.config));
  if (!r.ok) throw new Error(r.message);
  const passing: string[] = [];
  const failed: Record<string, string> = {};
  const scores: Record<string, number> = {};
  for (const n of names) {
    const v = evaluateNode(r.req, s.state.node(n)!, s.state, s.config);
    if (v.fits) passing.push(n);
    else failed[n] = v.message;
    scores[n] = v.fits ? v.score : 0;
  }
  return { passing, failed, scores };
}

async function assertUncached(s: ExtenderServer, p: V1Pod, names: string[], what: string) {
  const want = expected(s, p, names);
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
    expect(f.FailedAndUnresolvableNodes.rt).toMatch(/deferrable-server node rt/);
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
    expect(f.FailedAndUnresolvableNodes.n).toContain('{"cpu":1}');
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

  it('random cluster changes and pods: every answer equals the uncached evaluation', async () => {
    const rnd = prng(0xcac4e);
    const int = (n: number) => Math.floor(rnd() * n);
    const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
    const s = extender();
    const names = Array.from({ length: 10 }, (_, i) => `n${i}`);
    const kinds = ['deferrable-server', 'budget-period', 'edf'];
    const setNode = (i: number) => {
      const labels: Record<string, string> = {};
      const annotations: Record<string, string> = { 'ulysses.io/assurance': JSON.stringify({ cpu: int(5), memory: int(4) }) };
      if (i % 2 === 0) {
        labels['ulysses.io/rt-scheduler'] = kinds[(i / 2 + int(2)) % 3]!;
        annotations['ulysses.io/rt-capacity'] = JSON.stringify({ cores: 1 + int(2) });
      }
      if (i % 3 === 0) labels['ulysses.io/tdma-network'] = 'rtnet0';
      s.state.upsertNode(node(names[i]!, labels, annotations));
    };
    names.forEach((_, i) => setNode(i));
    const rtDemands = [ds(500, 500), ds(1200, 1000), ds(1000, 1500), ds(1000, 1000, 5000), '{"reservation":{"runtimeUs":3000,"periodUs":10000,"cpus":1}}', '{"tasks":[{"wcetUs":3000,"periodUs":10000}]}'];
    const demand = (): Record<string, string> => {
      const a: Record<string, string> = {};
      if (rnd() < 0.6) a['ulysses.io/rt'] = pick(rtDemands);
      if (rnd() < 0.3) a['ulysses.io/tdma'] = `{"network":"rtnet0","slots":${1 + int(2)}}`;
      if (rnd() < 0.5) a['ulysses.io/assurance-policy'] = `{"policy":"threshold","min":{"cpu":${int(4)}}}`;
      return a;
    };
    const holders: V1Pod[] = [];
    let checks = 0;
    for (let step = 0; step < 300; step++) {
      const op = int(10);
      if (op < 3) {
        // a pod lands on a node (bound), with a UID from a small alphabet: ties with new pods happen
        const n = names[int(names.length)]!;
        const a = demand();
        if (a['ulysses.io/tdma']) a['ulysses.io/tdma-slots'] = JSON.stringify([int(6)]);
        const p = pod(`h${step}`, a, { uid: `u${int(20)}-${step}`, nodeName: n });
        s.state.upsertPod(p);
        holders.push(p);
      } else if (op < 5 && holders.length) {
        s.state.deletePod(holders.splice(int(holders.length), 1)[0]!);
      } else if (op < 6) {
        setNode(int(names.length));
      } else {
        // the pod to place: usually fresh, sometimes one that already holds capacity (retried after a failed bind)
        const p = rnd() < 0.15 && holders.length ? pick(holders) : pod(`p${step}`, demand(), { uid: `u${int(20)}-p${step}` });
        await assertUncached(s, p, names, `step ${step}`);
        // and again (a cache hit now)
        await assertUncached(s, p, names, `step ${step} again`);
        checks++;
      }
    }
    expect(checks).toBeGreaterThan(100);
  });

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
