/**
 * Reservations the extender can trust: EDF `ulysses.io/rt-cores` holds the core of each task in
 * task order (and the sorted set older extenders wrote is still read), a deleted pod is never
 * brought back by a late bind result (tombstones), and reservations that do not fit the current
 * configuration are ignored instead of blocking every other pod.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { evaluateNode, podRequirements } from '../../scheduler-plugins/extender/evaluate.ts';
import { ClusterState, TOMBSTONES } from '../../scheduler-plugins/extender/state.ts';
import { extenderConfig } from '../../scheduler-plugins/extender/config.ts';
import { readFileSync } from 'node:fs';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { reservationRequest, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import { ExtenderServer, ignoredReservationOf, RESERVATION_IGNORED } from '../../scheduler-plugins/extender/server.ts';
import { silentLogger } from '../../core/logging.ts';
import { filter } from './extender-calls.ts';

let seq = 0;
const edfNode = (name: string, cores: number): V1Node => ({
  metadata: { name, resourceVersion: String(++seq), labels: { 'ulysses.io/rt-scheduler': 'edf' }, annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores }) } },
});
const edfPod = (name: string, tasks: Array<[number, number]>, extra: { nodeName?: string; cores?: unknown } = {}): V1Pod => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `uid-${name}`,
    resourceVersion: String(++seq),
    annotations: {
      'ulysses.io/rt': JSON.stringify({ tasks: tasks.map(([wcetUs, periodUs]) => ({ wcetUs, periodUs })) }),
      ...(extra.cores !== undefined ? { 'ulysses.io/rt-cores': JSON.stringify(extra.cores) } : {}),
    },
  },
  spec: { containers: [{ name: 'c' }], ...(extra.nodeName ? { nodeName: extra.nodeName } : {}) },
});

const cfg = extenderConfig({});
function verdict(state: ClusterState, p: V1Pod, nodeName: string) {
  const r = podRequirements(p, cfg, new Map());
  if (!r.ok) throw new Error(r.message);
  return evaluateNode(r.req, state.node(nodeName)!, state, cfg);
}
/** Places `p` as bind does: the verdict's cores recorded as rt-cores, the pod bound. */
function bindAs(state: ClusterState, p: V1Pod, nodeName: string): readonly number[] {
  const v = verdict(state, p, nodeName);
  if (!v.fits) throw new Error(v.message);
  state.upsertPod({ ...p, metadata: { ...p.metadata, resourceVersion: String(++seq), annotations: { ...p.metadata!.annotations, 'ulysses.io/rt-cores': JSON.stringify(v.cores) } }, spec: { ...p.spec!, nodeName } });
  return v.cores!;
}

describe('EDF rt-cores: the core of each task, in task order', () => {
  it('a 3-task pod over 2 cores is recorded one core per task and leaves the node usable', () => {
    const s = new ClusterState();
    s.upsertNode(edfNode('e', 2));
    // equal densities, worst-fit decreasing: task 0 -> core 0, task 1 -> core 1, task 2 -> core 0
    expect(bindAs(s, edfPod('three', [[400, 1000], [400, 1000], [400, 1000]]), 'e')).toEqual([0, 1, 0]);
    // before: rt-cores [0,1] for 3 tasks made the node unusable ("cores must list 1 core or one per task")
    const next = verdict(s, edfPod('next', [[500, 1000]]), 'e');
    expect(next).toMatchObject({ fits: true, cores: [1] });
    // core 0 holds 0.8: a task of 0.3 fits only core 1 (0.4 + 0.3), one of 0.7 nowhere
    expect(verdict(s, edfPod('big', [[700, 1000]]), 'e')).toMatchObject({ fits: false });
  });

  it('a pod whose tasks were placed swapped (task 1 -> core 0, task 0 -> core 1) reads back as placed: no core overloaded by the next pod', () => {
    const s = new ClusterState();
    s.upsertNode(edfNode('e', 2));
    // densities 0.3 and 0.6: task 1 goes first, to core 0; task 0 to core 1
    expect(bindAs(s, edfPod('swapped', [[300, 1000], [600, 1000]]), 'e')).toEqual([1, 0]);
    // truth: core 0 = 0.6, core 1 = 0.3. A task of 0.5 fits only core 1 (read swapped it went to core 0: 1.1)
    expect(verdict(s, edfPod('next', [[500, 1000]]), 'e')).toMatchObject({ fits: true, cores: [1] });
    expect(bindAs(s, edfPod('next', [[500, 1000]]), 'e')).toEqual([1]);
    // both cores now at 0.6 and 0.8: a task of 0.45 fits nowhere
    expect(verdict(s, edfPod('more', [[450, 1000]]), 'e')).toMatchObject({ fits: false });
  });

  it('migration: the sorted set of cores older extenders wrote is placed again onto those cores', () => {
    const s = new ClusterState();
    s.upsertNode(edfNode('e', 3));
    // old record of a 3-task pod over cores {1, 2}: its tasks land on cores 1 and 2 only, never on core 0
    s.upsertPod(edfPod('old', [[400, 1000], [400, 1000], [400, 1000]], { nodeName: 'e', cores: [1, 2] }));
    const v = verdict(s, edfPod('next', [[900, 1000]]), 'e');
    expect(v).toMatchObject({ fits: true, cores: [0] });
    // 0.4 + 0.4 on core 1, 0.4 on core 2 (worst-fit decreasing onto {1, 2}): 0.55 fits core 2 only
    expect(verdict(s, edfPod('mid', [[550, 1000]]), 'e')).toMatchObject({ fits: true, cores: [0] });
    s.upsertPod(edfPod('fill0', [[1000, 1000]], { nodeName: 'e', cores: [0] }));
    expect(verdict(s, edfPod('mid2', [[550, 1000]]), 'e')).toMatchObject({ fits: true, cores: [2] });
    expect(verdict(s, edfPod('mid3', [[650, 1000]]), 'e')).toMatchObject({ fits: false });
  });
});

describe('tombstones: a deleted pod never comes back', () => {
  const tdmaPod = (rv: string, extra: Record<string, string> = {}, nodeName?: string): V1Pod => ({
    metadata: { name: 'late', namespace: 'ns', uid: 'uid-late', resourceVersion: rv, annotations: { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}', ...extra } },
    spec: { containers: [{ name: 'c' }], ...(nodeName ? { nodeName } : {}) },
  });
  it("a bind's PATCH result handled after the pod's delete event does not re-create it or its slots", () => {
    const s = new ClusterState();
    s.upsertPod(tdmaPod('10'));
    // the delete event is handled while the bind's PATCH is in flight...
    s.deletePod(tdmaPod('11'));
    // ...then the PATCH result (newer resourceVersion, with the reservation) arrives
    s.upsertPod(tdmaPod('12', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[0,1]' }));
    expect(s.pod('ns/late')).toBeUndefined();
    expect(s.takenSlots('rtnet0', 'other')).toEqual([]);
    expect(s.holdsCapacity('uid-late')).toBe(false);
    expect(s.isDeleted('uid-late')).toBe(true);
    // a new pod of the same name (another UID) is taken in
    s.upsertPod({ ...tdmaPod('13', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[2,3]' }), metadata: { ...tdmaPod('13').metadata, uid: 'uid-late-2', annotations: { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}', 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[2,3]' } } });
    expect(s.takenSlots('rtnet0', 'other')).toEqual([2, 3]);
  });
  it('the tombstone set is bounded (oldest dropped)', () => {
    const s = new ClusterState();
    for (let i = 0; i <= TOMBSTONES; i++) s.deletePod({ metadata: { name: `p${i}`, namespace: 'ns', uid: `u${i}` } });
    expect(s.isDeleted('u0')).toBe(false);
    expect(s.isDeleted('u1')).toBe(true);
    expect(s.isDeleted(`u${TOMBSTONES}`)).toBe(true);
  });
});

describe('reservations that do not fit the configuration are ignored, never blocking', () => {
  const tdmaCfg = extenderConfig({ tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } });
  const networks = new Map([['rtnet0', { name: 'rtnet0', slotUs: 1000, cycleUs: 5000 }]]);
  const tdma = (name: string, slots: number, extra: Record<string, string> = {}, nodeName?: string): V1Pod => ({
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: String(++seq), annotations: { 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots }), ...extra } },
    spec: { containers: [{ name: 'c' }], ...(nodeName ? { nodeName } : {}) },
  });
  it('a slot index beyond the network (tdma-slots "[7]" on 5 slots) blocks no TDMA placement and is reported', () => {
    const s = new ClusterState();
    s.upsertNode({ metadata: { name: 't1', resourceVersion: '1', labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
    s.upsertPod(tdma('squatter', 1, { 'ulysses.io/tdma-slots': '[7]', 'ulysses.io/reserved-node': 't1' }));
    s.upsertPod(tdma('holder', 1, { 'ulysses.io/tdma-slots': '[0]' }, 't1'));
    const r = podRequirements(tdma('new', 2), tdmaCfg, networks);
    if (!r.ok) throw new Error(r.message);
    const v = evaluateNode(r.req, s.node('t1')!, s, tdmaCfg);
    // before: "taken slot 7 is not in [0, 5)" on every node of the network
    expect(v).toMatchObject({ fits: true, slots: [1, 2] });
    expect(v.skipped).toEqual(['pod ns/squatter: ulysses.io/tdma-slots slot 7 is not in [0, 5) of network rtnet0: ignored']);
  });

  it('an RT core beyond the node (rt-cores "[3]" on 2 cores, e.g. the node shrank) is ignored: the pod placed by the rule, the node stays usable', () => {
    const s = new ClusterState();
    s.upsertNode({ metadata: { name: 'd', resourceVersion: '1', labels: { 'ulysses.io/rt-scheduler': 'deferrable-server' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":2}' } } });
    const server = (name: string, budgetUs: number, extra: Record<string, string> = {}, nodeName?: string): V1Pod => ({
      metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: String(++seq), annotations: { 'ulysses.io/rt': JSON.stringify({ server: { budgetUs, periodUs: 10000 } }), ...extra } },
      spec: { containers: [{ name: 'c' }], ...(nodeName ? { nodeName } : {}) },
    });
    s.upsertPod(server('shrunk', 6000, { 'ulysses.io/rt-cores': '[3]' }, 'd'));
    const v = verdict(s, server('new', 5000), 'd');
    // before: "existing pod ns/shrunk: pinned core 3 does not exist (node has 2 cores)" for every pod
    expect(v).toMatchObject({ fits: true, cores: [1] }); // shrunk placed by the rule on core 0 (0.6): the new pod on core 1
    expect(v.skipped).toEqual(['node d: existing pod ns/shrunk: pinned core 3 does not exist (node has 2 cores): reservation ignored, the pod placed by the rule']);
    expect(verdict(s, server('big', 7000), 'd')).toMatchObject({ fits: true, cores: [1] });
  });
});

describe('an ignored reservation is reported with a Warning Event on its pod, once', () => {
  type Recorded = { object: { kind?: string; metadata?: { name?: string; namespace?: string; uid?: string } }; type: string; reason: string; message: string };
  const recording = () => {
    const events: Recorded[] = [];
    return { events, recorder: { event: (object: Recorded['object'], type: string, reason: string, message: string) => void events.push({ object, type, reason, message }) } };
  };
  const tdmaCfg = { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } };
  const tdmaPod = (name: string, slots: number, extra: Record<string, string> = {}, nodeName?: string): V1Pod => ({
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: String(++seq), annotations: { 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots }), ...extra } },
    spec: { containers: [{ name: 'c', resources: reservationRequest() }], ...(nodeName ? { nodeName } : {}) },
  });
  const servers: ExtenderServer[] = [];
  afterEach(async () => {
    for (const x of servers.splice(0)) await x.app.close();
  });

  it('names the pod, the annotation and why; a relist, other pods placed and a retry add nothing; a new configuration reports once more', async () => {
    const { events, recorder } = recording();
    const x = new ExtenderServer({ config: tdmaCfg, log: silentLogger(), events: recorder });
    servers.push(x);
    x.state.upsertNode({ metadata: { name: 't1', resourceVersion: '1', labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
    const squatter = tdmaPod('squatter', 1, { 'ulysses.io/tdma-slots': '[7]' }, 't1');
    x.state.upsertPod(squatter);
    const r = await filter(x, tdmaPod('new', 2), ['t1']);
    expect(r.NodeNames).toEqual(['t1']);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ object: { kind: 'Pod', metadata: { name: 'squatter', namespace: 'ns', uid: 'uid-squatter' } }, type: 'Warning', reason: RESERVATION_IGNORED });
    expect(events[0]!.message).toBe(
      "ulysses: the scheduler extender ignores this pod's reservation (ulysses.io/tdma-slots=[7] on node t1): it does not fit the current configuration, so it holds nothing and blocks no other pod: " +
        'pod ns/squatter: ulysses.io/tdma-slots slot 7 is not in [0, 5) of network rtnet0: ignored',
    );
    // other pods placed (fresh demands: verdicts computed again), the same pod again, a relist of the same objects
    await filter(x, tdmaPod('other', 1), ['t1']);
    await filter(x, tdmaPod('third', 3), ['t1']);
    await filter(x, tdmaPod('new', 2), ['t1']);
    x.state.resyncPods([{ ...squatter, metadata: { ...squatter.metadata, resourceVersion: String(++seq) } }], String(seq));
    await filter(x, tdmaPod('fourth', 2), ['t1']);
    expect(events).toHaveLength(1);
    // a new configuration (the network grew to 10 slots: the reservation fits) reports nothing; shrunk again: once more
    x.setConfig({ tdmaNetworks: { rtnet0: { cycleUs: 10000, slotUs: 1000, slots: 10 } } });
    expect((await filter(x, tdmaPod('fifth', 2), ['t1'])).NodeNames).toEqual(['t1']);
    expect(events).toHaveLength(1);
    x.setConfig(tdmaCfg);
    await filter(x, tdmaPod('sixth', 2), ['t1']);
    expect(events).toHaveLength(2);
    expect(events[1]!.object.metadata?.name).toBe('squatter');
  });

  it('an RT core beyond the node: the Event names ulysses.io/rt-cores and both findings (pin ignored, left out) in one message', async () => {
    const { events, recorder } = recording();
    const x = new ExtenderServer({ log: silentLogger(), events: recorder });
    servers.push(x);
    x.state.upsertNode({ metadata: { name: 'd', resourceVersion: '1', labels: { 'ulysses.io/rt-scheduler': 'deferrable-server' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":1}' } } });
    const server = (name: string, budgetUs: number, extra: Record<string, string> = {}, nodeName?: string, periodUs = 10000): V1Pod => ({
      metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: String(++seq), annotations: { 'ulysses.io/rt': JSON.stringify({ server: { budgetUs, periodUs } }), ...extra } },
      spec: { containers: [{ name: 'c', resources: reservationRequest() }], ...(nodeName ? { nodeName } : {}) },
    });
    // one core: holder 0.5 pinned there, shrunk (0.6, pinned to a core the node lacks) does not fit next to it
    x.state.upsertPod(server('holder', 5000, { 'ulysses.io/rt-cores': '[0]' }, 'd'));
    x.state.upsertPod(server('shrunk', 6000, { 'ulysses.io/rt-cores': '[3]' }, 'd'));
    const r = await filter(x, server('new', 500, {}, undefined, 20000), ['d']);
    expect(r.NodeNames).toEqual(['d']);
    expect(events.map((e) => [e.object.metadata?.name, e.reason])).toEqual([['shrunk', RESERVATION_IGNORED]]);
    expect(events[0]!.message).toMatch(/^ulysses: the scheduler extender ignores this pod's reservation \(ulysses\.io\/rt-cores=\[3\] on node d\): .*: node d: existing pod ns\/shrunk: pinned core 3 does not exist \(node has 1 cores\): reservation ignored, the pod placed by the rule; node d: existing pod ns\/shrunk: does not fit by the rule either: left out/);
    await filter(x, server('again', 400, {}, undefined, 20000), ['d']);
    expect(events).toHaveLength(1);
  });

  it('only ignored reservations name a pod: an unparseable ulysses.io/rt of an existing pod is logged, not reported as a reservation', () => {
    expect(ignoredReservationOf('pod ns/a: ulysses.io/tdma-slots slot 7 is not in [0, 5) of network rtnet0: ignored')).toEqual({ pod: 'ns/a', why: 'pod ns/a: ulysses.io/tdma-slots slot 7 is not in [0, 5) of network rtnet0: ignored' });
    expect(ignoredReservationOf('node n.x: existing pod ns/b.c: cores must list 2 distinct core(s), got [1,1]: reservation ignored, the pod placed by the rule')?.pod).toBe('ns/b.c');
    expect(ignoredReservationOf('ns/a: ulysses.io/rt: server.budgetUs: must be > 0')).toBeUndefined();
  });
});

describe('the ValidatingAdmissionPolicy of the reservation annotations', () => {
  const dir = 'manifests/base/scheduler-extender';
  const docs = parseAllDocuments(readFileSync(`${dir}/reservation-policy.yaml`, 'utf8')).map((d) => d.toJS() as Record<string, any>);
  it("names the annotations the code writes and the extender's ServiceAccount, and is bound with Deny", () => {
    const policy = docs.find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
    const binding = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!;
    const keys = policy.spec.variables.find((v: { name: string }) => v.name === 'keys').expression as string;
    expect(JSON.parse(keys.replace(/'/g, '"'))).toEqual([RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION]);
    const sa = parseAllDocuments(readFileSync(`${dir}/rbac.yaml`, 'utf8')).map((d) => d.toJS()).find((d) => d.kind === 'ServiceAccount');
    const extender = policy.spec.variables.find((v: { name: string }) => v.name === 'extender').expression as string;
    expect(extender).toBe(`request.userInfo.username == 'system:serviceaccount:${sa.metadata.namespace}:${sa.metadata.name}'`);
    expect(policy.spec.matchConstraints.resourceRules[0]).toMatchObject({ operations: ['CREATE', 'UPDATE'], resources: ['pods', 'pods/status', 'pods/binding'] });
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, validationActions: ['Deny'] });
    expect(parseYaml(readFileSync(`${dir}/kustomization.yaml`, 'utf8')).resources).toContain('reservation-policy.yaml');
  });
});
