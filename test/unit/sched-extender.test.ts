/**
 * The extender's decisions (filter/prioritize over the real fastify instance, via inject) on an
 * in-memory node/pod cache: assurance, RT kinds and schedulability with already-reserved pods,
 * network-wide TDMA slots, malformed annotations, bad bodies, live config changes, the bind lock,
 * the rendered KubeSchedulerConfiguration, and the informers dropping managedFields.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { readFileSync } from 'node:fs';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ExtenderServer, extenderInformerOptions, KeyedMutex } from '../../scheduler-plugins/extender/server.ts';
import { evaluateNode, MESSAGES, podRequirements } from '../../scheduler-plugins/extender/evaluate.ts';
import { ClusterState, extenderNodeProjection, extenderPodProjection, RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { extenderConfig } from '../../scheduler-plugins/extender/config.ts';
import { ConfigError } from '../../core/config.ts';
import { extenderEntries, kubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { RESERVATION_RESOURCE, requestsReservation, reservationRequest } from '../../scheduler-plugins/schedulability.ts';
import type { ExtenderFilterResult } from '../../scheduler-plugins/extender/wire.ts';
import { silentLogger } from '../../core/logging.ts';
import { filter, prioritize } from './extender-calls.ts';

let uidSeq = 0;
function node(name: string, labels: Record<string, string> = {}, annotations: Record<string, string> = {}): V1Node {
  return { metadata: { name, labels, annotations, resourceVersion: String(++uidSeq) } };
}
/** A pod; an RT/TDMA one requests ulysses.io/reservation, as its users must (`marker: false`: it does not). */
function pod(name: string, annotations: Record<string, string> = {}, extra: { nodeName?: string; labels?: Record<string, string>; phase?: string; marker?: boolean } = {}): V1Pod {
  const marker = extra.marker ?? ('ulysses.io/rt' in annotations || 'ulysses.io/tdma' in annotations);
  return {
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, annotations, labels: extra.labels ?? {}, resourceVersion: String(++uidSeq) },
    spec: { containers: [{ name: 'c', ...(marker ? { resources: reservationRequest() } : {}) }], ...(extra.nodeName ? { nodeName: extra.nodeName } : {}) },
    status: { phase: extra.phase ?? 'Pending' },
  };
}
const ds = (budgetUs: number, periodUs: number, wcetUs = Math.floor(budgetUs / 2)) =>
  JSON.stringify({ server: { budgetUs, periodUs }, tasks: [{ wcetUs, periodUs, deadlineUs: periodUs, priority: 1 }] });

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});

function extender(config: Parameters<typeof extenderConfig>[0] = {}) {
  const s = new ExtenderServer({
    config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } }, ...(config as object) },
    log: silentLogger(),
  });
  servers.push(s);
  return s;
}


describe('scheduler extender: informers', () => {
  it('reduce nodes and pods to what the extender reads; a state fed the projections decides as one fed whole objects', () => {
    const opts = extenderInformerOptions(silentLogger());
    expect(opts.nodes.transform).toBe(extenderNodeProjection);
    expect(opts.pods.transform).toBe(extenderPodProjection);
    expect([opts.nodes.projection, opts.pods.projection]).toEqual(['extenderNodeProjection', 'extenderPodProjection']);
    const managedFields = (manager: string) => [
      { manager, operation: 'Update', apiVersion: 'v1', time: new Date(0), fieldsType: 'FieldsV1', fieldsV1: { 'f:metadata': { 'f:annotations': { 'f:ulysses.io/rt': {} } } } },
    ];
    const rawNode = node('rt', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' });
    rawNode.metadata!.managedFields = managedFields('kubectl');
    rawNode.status = { conditions: [{ type: 'Ready', status: 'True' }], allocatable: { cpu: '2' } };
    const rawPod = pod('holder', { 'ulysses.io/rt': ds(1000, 2500, 300), 'ulysses.io/rt-cores': '[0]' }, { nodeName: 'rt', phase: 'Running', labels: { 'ulysses.io/criticality': 'high' } });
    rawPod.metadata!.managedFields = managedFields('ulysses-scheduler-extender');
    rawPod.spec!.priority = 1000;
    const [n, p] = [extenderNodeProjection(structuredClone(rawNode)), extenderPodProjection(structuredClone(rawPod))];
    expect(n.metadata!.managedFields).toBeUndefined();
    expect(p.metadata!.managedFields).toBeUndefined();
    expect(n.status).toBeUndefined();
    expect(p.status).toBeUndefined(); // not terminal: the phase is not read
    expect(p.spec).toEqual({ nodeName: 'rt', priority: 1000, priorityClassName: undefined, containers: [] });
    expect(p.metadata!.labels).toEqual(rawPod.metadata!.labels);
    expect(p.metadata!.annotations).toEqual(rawPod.metadata!.annotations);
    // a status update (a kubelet's, kwok's) leaves the projection as it was; a terminal phase does not
    const statusUpdate = structuredClone(rawPod);
    statusUpdate.status = { phase: 'Running', conditions: [{ type: 'Ready', status: 'False' }], podIP: '10.0.0.9' };
    expect(extenderPodProjection(statusUpdate)).toEqual(p);
    expect(extenderPodProjection({ ...statusUpdate, status: { phase: 'Failed' } }).status).toEqual({ phase: 'Failed' });
    // a state fed the projections decides exactly as one fed the whole objects
    const whole = new ClusterState();
    const stripped = new ClusterState();
    whole.upsertNode(rawNode);
    whole.upsertPod(rawPod);
    stripped.upsertNode(n);
    stripped.upsertPod(p);
    expect(stripped.node('rt')!.fingerprint).toBe(whole.node('rt')!.fingerprint);
    expect(stripped.pod('ns/holder')!.fingerprint).toBe(whole.pod('ns/holder')!.fingerprint);
    expect(podRequirements(p, extenderConfig({}), new Map())).toEqual(podRequirements(rawPod, extenderConfig({}), new Map()));
    const cfg = extenderConfig({});
    const fits: boolean[] = [];
    const small = JSON.stringify({ server: { budgetUs: 500, periodUs: 10000 }, tasks: [{ wcetUs: 100, periodUs: 40000, deadlineUs: 40000, priority: 1 }] });
    for (const [i, demand] of [ds(1200, 2500, 600), small].entries()) {
      const r = podRequirements(pod(`new-${i}`, { 'ulysses.io/rt': demand }), cfg, new Map());
      if (!r.ok) throw new Error(r.message);
      const v = evaluateNode(r.req, stripped.node('rt')!, stripped, cfg);
      expect(v).toEqual(evaluateNode(r.req, whole.node('rt')!, whole, cfg));
      fits.push(v.fits);
    }
    expect(fits).toEqual([false, true]);
  });
});

describe('scheduler extender: filter and prioritize', () => {
  it('assurance: explicit policy, default per criticality, score prefers the node that just satisfies', async () => {
    const s = extender({ defaultAssurancePolicies: { high: { policy: 'threshold', min: { cpu: 3 } } } });
    s.state.upsertNode(node('a0', {}, { 'ulysses.io/assurance': '{"cpu":0,"memory":5}' }));
    s.state.upsertNode(node('a1', {}, { 'ulysses.io/assurance': '{"cpu":1}' }));
    s.state.upsertNode(node('a2', {}, { 'ulysses.io/assurance': '{"cpu":2,"memory":2}' }));
    s.state.upsertNode(node('a3', {}, { 'ulysses.io/assurance': '{"cpu":3,"memory":3}' }));
    s.state.upsertNode(node('a4', {}, { 'ulysses.io/assurance': '{"cpu":9,"memory":9}' }));
    const names = ['a0', 'a1', 'a2', 'a3', 'a4'];

    const p = pod('p', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' });
    const r = await filter(s, p, names);
    expect(r.NodeNames).toEqual(['a2', 'a3', 'a4']);
    // one message for every node below the policy, whatever its values: kube-scheduler counts them as one reason
    expect(r.FailedAndUnresolvableNodes).toEqual({ a0: MESSAGES.assurance, a1: MESSAGES.assurance });
    expect(r.Error).toBe('');
    const scores = await prioritize(s, p, names);
    expect(scores.a2).toBeGreaterThan(scores.a3!);
    expect(scores.a3).toBeGreaterThan(scores.a4!);
    expect(scores.a1).toBe(0);

    // no annotation: the default of the pod's criticality level
    const critical = pod('crit', {}, { labels: { 'ulysses.io/criticality': 'high' } });
    expect((await filter(s, critical, names)).NodeNames).toEqual(['a3', 'a4']);
    const plain = pod('plain');
    expect((await filter(s, plain, names)).NodeNames).toEqual(names);
  });

  it('RT: only RT nodes of the right kind, schedulable with the pods already bound or reserved', async () => {
    const s = extender();
    s.state.upsertNode(node('plain'));
    s.state.upsertNode(node('bp', { 'ulysses.io/rt-scheduler': 'budget-period' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertNode(node('ds1', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertNode(node('ds2', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":2}' }));
    const names = ['plain', 'bp', 'ds1', 'ds2'];
    const p = pod('rt', { 'ulysses.io/rt': ds(6000, 10000) });
    let r = await filter(s, p, names);
    expect(r.NodeNames).toEqual(['ds1', 'ds2']);
    expect(r.FailedAndUnresolvableNodes.plain).toContain('not a real-time node');
    expect(r.FailedAndUnresolvableNodes.bp).toContain('budget-period node');
    // ds2 has two cores: more room left on its least loaded core -> higher score
    const scores = await prioritize(s, p, names);
    expect(scores.ds2).toBeGreaterThan(scores.ds1!);

    // a pod bound on ds1 and one only RESERVED (annotation) on ds2 core 0 take their capacity
    s.state.upsertPod(pod('bound', { 'ulysses.io/rt': ds(5000, 10000), 'ulysses.io/rt-cores': '[0]' }, { nodeName: 'ds1' }));
    s.state.upsertPod(pod('reserved', { 'ulysses.io/rt': ds(5000, 10000), 'ulysses.io/rt-cores': '[0]', [RESERVED_NODE_ANNOTATION]: 'ds2' }));
    r = await filter(s, p, names);
    expect(r.NodeNames).toEqual(['ds2']); // ds2 still has core 1
    expect(r.FailedAndUnresolvableNodes.ds1).toMatch(/^ulysses: deferrable-server: does not fit/);
    s.state.upsertPod(pod('reserved2', { 'ulysses.io/rt': ds(5000, 10000), 'ulysses.io/rt-cores': '[1]', [RESERVED_NODE_ANNOTATION]: 'ds2' }));
    r = await filter(s, p, names);
    expect(r.NodeNames).toEqual([]);
    // the pod's own old reservation never counts against it
    const self = pod('rt', { 'ulysses.io/rt': ds(6000, 10000), 'ulysses.io/rt-cores': '[1]', [RESERVED_NODE_ANNOTATION]: 'ds2' });
    s.state.deletePod(pod('reserved2'));
    s.state.upsertPod(self);
    expect((await filter(s, self, names)).NodeNames).toEqual(['ds2']);
    // deletion / terminal phase releases
    s.state.deletePod(pod('bound'));
    expect((await filter(s, p, names)).NodeNames).toEqual(['ds1', 'ds2']);
    s.state.upsertPod(pod('blocker', { 'ulysses.io/rt': ds(5000, 10000) }, { nodeName: 'ds1', phase: 'Running' }));
    expect((await filter(s, p, names)).NodeNames).toEqual(['ds2']);
    s.state.upsertPod(pod('blocker', { 'ulysses.io/rt': ds(5000, 10000) }, { nodeName: 'ds1', phase: 'Failed' }));
    expect((await filter(s, p, names)).NodeNames).toEqual(['ds1', 'ds2']);
  });

  it('TDMA: nodes of the requested network only, slots are network-wide', async () => {
    const s = extender();
    s.state.upsertNode(node('n1', { 'ulysses.io/tdma-network': 'rtnet0' }));
    s.state.upsertNode(node('n2', { 'ulysses.io/tdma-network': 'rtnet0' }));
    s.state.upsertNode(node('other', { 'ulysses.io/tdma-network': 'rtnet1' }));
    s.state.upsertNode(node('none'));
    const names = ['n1', 'n2', 'other', 'none'];
    const p = pod('t', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' });
    let r = await filter(s, p, names);
    expect(r.NodeNames).toEqual(['n1', 'n2']);
    expect(r.FailedAndUnresolvableNodes.other).toContain('not on TDMA network rtnet0');
    // 4 of 5 slots held by pods on n1 -> no node of the network can take 2 more
    s.state.upsertPod(pod('h1', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}', 'ulysses.io/tdma-slots': '[0,1]' }, { nodeName: 'n1' }));
    s.state.upsertPod(pod('h2', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}', 'ulysses.io/tdma-slots': '[2,3]', [RESERVED_NODE_ANNOTATION]: 'n2' }));
    r = await filter(s, p, names);
    expect(r.NodeNames).toEqual([]);
    expect(r.FailedAndUnresolvableNodes.n1).toContain('1 free slot(s), 2 needed');
    expect(r.FailedAndUnresolvableNodes.n2).toContain('1 free slot(s), 2 needed');
    const one = pod('one', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' });
    expect((await filter(s, one, names)).NodeNames).toEqual(['n1', 'n2']);
  });

  it('malformed annotations reject the pod on every node, naming annotation and field', async () => {
    const s = extender();
    s.state.upsertNode(node('x'));
    s.state.upsertNode(node('y'));
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ 'ulysses.io/rt': '{"server":{"budgetUs":0,"periodUs":10}}' }, /ulysses\.io\/rt: server\.budgetUs: must be > 0/],
      [{ 'ulysses.io/rt': '{not json' }, /ulysses\.io\/rt: \(json\): invalid JSON/],
      [{ 'ulysses.io/tdma': '{"network":"rtnet0","slots":"two"}' }, /ulysses\.io\/tdma: slots: must be a number/],
      [{ 'ulysses.io/tdma': '{"network":"nope","slots":1}' }, /ulysses\.io\/tdma: network: "nope" is not configured/],
      [{ 'ulysses.io/assurance-policy': '{"policy":"maximal"}' }, /ulysses\.io\/assurance-policy: policy: must be "threshold" or "weighted"/],
    ];
    for (const [ann, re] of cases) {
      const r = await filter(s, pod('bad', ann), ['x', 'y']);
      expect(r.NodeNames).toEqual([]);
      expect(Object.keys(r.FailedAndUnresolvableNodes)).toEqual(['x', 'y']);
      expect(r.FailedAndUnresolvableNodes.x).toMatch(re);
      expect(r.FailedAndUnresolvableNodes.x).toContain('pod ns/bad');
      expect(await prioritize(s, pod('bad', ann), ['x', 'y'])).toEqual({ x: 0, y: 0 });
    }
    // a malformed NODE annotation only rules out that node
    s.state.upsertNode(node('z', { 'ulysses.io/rt-scheduler': 'fifo' }, { 'ulysses.io/assurance': '{"cpu":-1}' }));
    const r = await filter(s, pod('ok'), ['x', 'z']);
    expect(r.NodeNames).toEqual(['x']);
    expect(r.FailedAndUnresolvableNodes.z).toContain('ulysses.io/assurance: cpu: must be >= 0');
  });

  it('an RT or TDMA pod that does not request ulysses.io/reservation is refused on every node, naming the pod and what to add; with it, or with its plugin off, it is placed', async () => {
    const s = extender();
    s.state.upsertNode(node('rt', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}' }));
    s.state.upsertNode(node('bus', { 'ulysses.io/tdma-network': 'rtnet0' }));
    const rt = { 'ulysses.io/rt': ds(2000, 10000) };
    const tdma = { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' };
    const refusal = (what: string, name: string) =>
      `ulysses: pod ns/${name} has ${what} but requests no ulysses.io/reservation, so kube-scheduler would bind it without recording its reservation: ` +
      `add resources.limits["ulysses.io/reservation"]: 1 to one container (of its template) and recreate the pod`;
    for (const [ann, what, name] of [
      [rt, 'ulysses.io/rt', 'rt-unmarked'],
      [tdma, 'ulysses.io/tdma', 'tdma-unmarked'],
      [{ ...rt, ...tdma }, 'ulysses.io/rt and ulysses.io/tdma', 'both-unmarked'],
    ] as const) {
      const r = await filter(s, pod(name, ann, { marker: false }), ['rt', 'bus']);
      expect(r.NodeNames).toEqual([]);
      expect(r.FailedNodes).toEqual({});
      // unresolvable: kube-scheduler does not try preemption for it
      expect(r.FailedAndUnresolvableNodes).toEqual({ rt: refusal(what, name), bus: refusal(what, name) });
    }
    const metrics = await (await s.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/ulysses_extender_rejections_total\{reason="reservation-request"\} [1-9]/);
    // requesting it (in limits, as the API wants for an extended resource), the same pods are placed
    expect((await filter(s, pod('rt-marked', rt), ['rt', 'bus'])).NodeNames).toEqual(['rt']);
    expect((await filter(s, pod('tdma-marked', tdma), ['rt', 'bus'])).NodeNames).toEqual(['bus']);
    // a plain pod needs no reservation: placed without it
    expect((await filter(s, pod('plain'), ['rt', 'bus'])).NodeNames).toEqual(['rt', 'bus']);
    // with the plugins off nothing is reserved, so nothing is asked of the pod
    s.setConfig({ ...s.config, plugins: { assurance: true, realtime: false, tdma: false } });
    expect((await filter(s, pod('rt-off', { ...rt, ...tdma }, { marker: false }), ['rt', 'bus'])).NodeNames).toEqual(['rt', 'bus']);
  });

  it('unknown node names are resolvable failures; Nodes (non-cache mode) is answered with Nodes', async () => {
    const s = extender();
    s.state.upsertNode(node('known'));
    const r = await filter(s, pod('p'), ['known', 'ghost']);
    expect(r.NodeNames).toEqual(['known']);
    expect(r.FailedNodes.ghost).toContain('not in the extender');
    const res = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: pod('p', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' }), Nodes: { items: [node('m1', { 'ulysses.io/tdma-network': 'rtnet0' }), node('m2')] } } });
    const body = res.json() as ExtenderFilterResult;
    expect(body.Nodes?.items.map((n) => n.metadata?.name)).toEqual(['m1']);
    expect(body.NodeNames ?? null).toBeNull();
  });

  it("bad request bodies get the verb's refusal as HTTP 200 naming the field (kube-scheduler reads no other body); internal errors are 500 with a request id", async () => {
    const s = extender();
    const bad: Array<[string, unknown, string | undefined, string]> = [
      ['/filter', '{"Pod":', 'application/json', 'Error'],
      ['/filter', { Pod: {} }, undefined, 'Error'],
      ['/filter', { Pod: { metadata: { name: 'p' } } }, undefined, 'Error'],
      ['/prioritize', { Pod: { metadata: { name: 'p' } }, NodeNames: [1] }, undefined, 'scores'],
      ['/bind', { PodName: 'p' }, undefined, 'Error'],
      ['/filter', 'hello', 'text/plain', 'Error'],
      ['/filter', '<a/>', 'application/xml', 'Error'],
      ['/bind', 'x'.repeat(10), 'application/json', 'Error'],
    ];
    for (const [url, payload, contentType, shape] of bad) {
      const res = await s.app.inject({ method: 'POST', url, payload: payload as string, headers: contentType ? { 'content-type': contentType } : {} });
      const where = `${url} ${JSON.stringify(payload)}`;
      expect(res.statusCode, where).toBe(200);
      if (shape === 'scores') expect(res.json(), where).toEqual([]);
      else expect(res.json().Error, where).toMatch(new RegExp(`^ulysses: bad ${url.slice(1)} request: `));
    }
    const res = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: { metadata: {} }, NodeNames: [] } });
    expect(res.json()).toEqual({ FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: expect.stringContaining('ExtenderArgs: Pod.metadata.name') });
    const noNodes = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: { metadata: { name: 'p' } } } });
    expect(noNodes.json().Error).toContain('one of NodeNames or Nodes is required');
    const unsupported = await s.app.inject({ method: 'POST', url: '/filter', payload: '<a/>', headers: { 'content-type': 'application/xml' } });
    expect(unsupported.json().Error).toContain('Unsupported Media Type');
    // other routes keep their 4xx
    expect((await s.app.inject({ method: 'GET', url: '/nothing' })).statusCode).toBe(404);
    // an internal error (here: a Node nested too deep to serialise back in the non-cache mode) is a 500 naming the request
    const depth = 20_000;
    const nested = `{"metadata":{"name":"deep"},"spec":${'{"x":'.repeat(depth)}{}${'}'.repeat(depth)}}`;
    const payload = `{"Pod":{"metadata":{"name":"p","namespace":"ns"}},"Nodes":{"items":[${nested}]}}`;
    const boom = await s.app.inject({ method: 'POST', url: '/filter', payload, headers: { 'content-type': 'application/json' } });
    expect(boom.statusCode).toBe(500);
    expect(boom.json()).toEqual({ error: expect.stringMatching(/^ulysses: internal error \(request req-\w+\): /), requestId: expect.stringMatching(/^req-/) });
  });

  it('setConfig applies live: plugins off, networks, default policies; invalid config is refused', async () => {
    const s = extender();
    s.state.upsertNode(node('plain'));
    const p = pod('t', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}', 'ulysses.io/rt': ds(1000, 10000) });
    expect((await filter(s, p, ['plain'])).NodeNames).toEqual([]);
    s.setConfig({ ...s.config, plugins: { assurance: true, realtime: false, tdma: false } });
    expect((await filter(s, p, ['plain'])).NodeNames).toEqual(['plain']);
    s.setConfig({ ...s.config, defaultAssurancePolicies: { high: null, low: null, none: { policy: 'threshold', min: { cpu: 1 } } } });
    expect((await filter(s, p, ['plain'])).NodeNames).toEqual([]);
    expect(() => s.setConfig({ tdmaNetworks: { bad: { cycleUs: 5000, slotUs: 1000, slots: 4 } } })).toThrow(ConfigError);
    expect(() => s.setConfig({ tdmaNetworks: { bad: { cycleUs: 5000, slotUs: 1000, slots: 4 } } })).toThrow(/tdmaNetworks\.bad\.slots: must equal cycleUs \/ slotUs = 5/);
    expect(s.config.plugins.realtime).toBe(false); // unchanged after the refused config
  });

  it('metrics and healthz are served', async () => {
    const s = extender();
    s.state.upsertNode(node('a'));
    await filter(s, pod('bad', { 'ulysses.io/rt': 'x' }), ['a']);
    const m = await s.app.inject({ method: 'GET', url: '/metrics' });
    expect(m.body).toContain('ulysses_extender_request_duration_seconds_bucket{le="0.001",verb="filter"}');
    expect(m.body).toMatch(/ulysses_extender_rejections_total\{reason="malformed"\} [1-9]/);
    expect((await s.app.inject({ method: 'GET', url: '/healthz' })).body).toBe('ok');
  });
});

describe('scheduler extender: plumbing', () => {
  it('answers filter and prioritize as JSON text that reads as the object answer: names and messages escaped, each node in one place', async () => {
    const s = extender();
    const odd = 'q"uote\\back\u00e4\u2028';
    s.state.upsertNode(node('fits', {}, { 'ulysses.io/assurance': '{"cpu":4,"memory":4,"network":3}' }));
    s.state.upsertNode(node('low', {}, { 'ulysses.io/assurance': '{"cpu":0,"memory":0}' }));
    s.state.upsertNode(node(odd, {}, { 'ulysses.io/assurance': '{"cpu":4,"memory":4,"network":3}' }));
    s.state.upsertNode(node('rt', { 'ulysses.io/rt-scheduler': 'deferrable-server' }, { 'ulysses.io/rt-capacity': '{"cores":1}', 'ulysses.io/assurance': '{"cpu":4,"memory":4}' }));
    s.state.upsertNode(node('bad', {}, { 'ulysses.io/assurance': '{"cpu":"x"}' }));
    const p = pod('p', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2,"memory":1}}' });
    const names = ['fits', 'low', odd, 'rt', 'bad', 'gone\u0000"'];
    const res = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: p, NodeNames: names } });
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    const text = res.json() as ExtenderFilterResult;
    // the same nodes sent whole (the path answered as an object, serialized by fastify)
    const sent = names.slice(0, 5).map((n) => s.state.node(n)!.node);
    const whole = (await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: p, Nodes: { items: sent } } })).json() as ExtenderFilterResult;
    expect(text.NodeNames).toEqual(whole.Nodes!.items.map((n) => n.metadata!.name));
    expect(text.FailedAndUnresolvableNodes).toEqual(whole.FailedAndUnresolvableNodes);
    expect(text.FailedNodes).toEqual({ 'gone\u0000"': MESSAGES.unknownNode });
    expect(text.Error).toBe('');
    // every node in exactly one place; the refusals name their kind of failure
    expect(text.NodeNames).toEqual(['fits', odd, 'rt']);
    expect(text.FailedAndUnresolvableNodes).toEqual({ low: MESSAGES.assurance, bad: expect.stringContaining('ulysses: node bad: ') });
    const prio = await s.app.inject({ method: 'POST', url: '/prioritize', payload: { Pod: pod('p2', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2,"memory":1}}' }), NodeNames: ['fits', odd, 'low', 'gone'] } });
    expect(prio.headers['content-type']).toMatch(/^application\/json/);
    const scores = prio.json() as Array<{ Host: string; Score: number }>;
    expect(scores.map((h) => h.Host)).toEqual(['fits', odd, 'low', 'gone']);
    expect(scores.every((h) => Number.isInteger(h.Score) && h.Score >= 0 && h.Score <= 10)).toBe(true);
    expect(scores[0]!.Score).toBeGreaterThan(0);
    expect(scores[0]!.Score).toBe(scores[1]!.Score); // same vectors, same score
    expect([scores[2]!.Score, scores[3]!.Score]).toEqual([0, 0]); // refused, unknown
    // refused by TDMA everywhere: nothing passes, an empty list (not null) as kube-scheduler reads it
    const none = await filter(s, pod('p3', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' }), ['fits', odd]);
    expect(none.NodeNames).toEqual([]);
    expect(Object.keys(none.FailedAndUnresolvableNodes)).toEqual(['fits', odd]);
  });

  it('KeyedMutex serializes runs sharing a key and not others', async () => {
    const m = new KeyedMutex();
    const log: string[] = [];
    const task = (name: string, keys: string[], ms: number) =>
      m.run(keys, async () => {
        log.push(`${name}+`);
        await new Promise((r) => setTimeout(r, ms));
        log.push(`${name}-`);
      });
    await Promise.all([task('a', ['node:1', 'net:x'], 20), task('b', ['net:x'], 1), task('c', ['node:2'], 1)]);
    expect(log.indexOf('b+')).toBeGreaterThan(log.indexOf('a-'));
    expect(log.indexOf('c-')).toBeLessThan(log.indexOf('a-'));
  });

  it('ClusterState ignores a late, older object version (our own patch already seen)', () => {
    const st = new ClusterState();
    const newer = pod('p', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}', 'ulysses.io/tdma-slots': '[3]', [RESERVED_NODE_ANNOTATION]: 'n' });
    newer.metadata!.resourceVersion = '200';
    const older = pod('p', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' });
    older.metadata!.resourceVersion = '150';
    st.upsertPod(newer);
    st.upsertPod(older);
    expect(st.takenSlots('rtnet0', 'x')).toEqual([3]);
  });

  it('renders the KubeSchedulerConfiguration: filter+prioritize for every pod, bind (the only binder) for pods requesting ulysses.io/reservation; the shipped snippet has the same entries', () => {
    const cfg = kubeSchedulerConfiguration({ kubeconfig: '/k', extenderUrl: 'http://127.0.0.1:8888' });
    const common = { urlPrefix: 'http://127.0.0.1:8888', enableHTTPS: false, ignorable: false, httpTimeout: '5s' };
    expect(cfg).toEqual({
      apiVersion: 'kubescheduler.config.k8s.io/v1',
      kind: 'KubeSchedulerConfiguration',
      clientConnection: { kubeconfig: '/k' },
      leaderElection: { leaderElect: false },
      extenders: [
        // no managedResources: every pod is filtered and scored
        { ...common, filterVerb: 'filter', prioritizeVerb: 'prioritize', weight: 5, nodeCacheCapable: true },
        // kube-scheduler asks this one to bind only pods requesting the resource, and does not fit it to nodes
        { ...common, bindVerb: 'bind', managedResources: [{ name: 'ulysses.io/reservation', ignoredByScheduler: true }] },
      ],
    });
    expect(RESERVATION_RESOURCE).toBe('ulysses.io/reservation');
    const extenders = cfg.extenders as Array<Record<string, unknown>>;
    // kube-scheduler's validation: at most one extender implements bind
    expect(extenders.filter((e) => e.bindVerb).length).toBe(1);
    expect(extenders[0]).not.toHaveProperty('bindVerb');
    expect(extenders[1]).not.toHaveProperty('filterVerb');
    expect(extenders[1]).not.toHaveProperty('prioritizeVerb');
    const shipped = parseYaml(readFileSync(new URL('../../scheduler-plugins/kube-scheduler-extender.yaml', import.meta.url), 'utf8')) as typeof cfg;
    expect(shipped.extenders).toEqual(extenderEntries({ extenderUrl: 'http://127.0.0.1:8888', weight: 5 }));
  });

  it('requestsReservation: as kube-scheduler IsInterested, the resource named in requests or limits of a container or init container, any quantity', () => {
    type Resources = { requests?: Record<string, string>; limits?: Record<string, string> };
    const inContainer = (resources: Resources): V1Pod => ({ spec: { containers: [{ name: 'a' }, { name: 'c', resources }] } });
    const inInit = (resources: Resources): V1Pod => ({ spec: { containers: [{ name: 'c' }], initContainers: [{ name: 'i', resources }] } });
    expect(requestsReservation(inContainer({ limits: { [RESERVATION_RESOURCE]: '1' } }))).toBe(true);
    expect(requestsReservation(inContainer({ requests: { [RESERVATION_RESOURCE]: '1' }, limits: { [RESERVATION_RESOURCE]: '1' } }))).toBe(true);
    expect(requestsReservation(inContainer({ requests: { [RESERVATION_RESOURCE]: '0' } }))).toBe(true);
    expect(requestsReservation(inInit({ limits: { [RESERVATION_RESOURCE]: '2' } }))).toBe(true);
    expect(requestsReservation(inContainer({ limits: { 'ulysses.io/other': '1', cpu: '1' } }))).toBe(false);
    expect(requestsReservation({ spec: { containers: [{ name: 'c' }] } })).toBe(false);
    expect(requestsReservation({})).toBe(false);
    expect(reservationRequest()).toEqual({ limits: { [RESERVATION_RESOURCE]: '1' } });
  });

  it('priority-classes.yaml: one class per criticality level, ordered, one global default, no preemption', () => {
    const docs = readFileSync(new URL('../../scheduler-plugins/priority-classes.yaml', import.meta.url), 'utf8').split(/^---$/m).map((d) => parseYaml(d) as { kind: string; metadata: { name: string }; value: number; globalDefault: boolean; preemptionPolicy: string });
    expect(docs.map((d) => [d.kind, d.metadata.name, d.value])).toEqual([
      ['PriorityClass', 'ulysses-high', 1000000],
      ['PriorityClass', 'ulysses-low', 1000],
      ['PriorityClass', 'ulysses-none', 0],
    ]);
    expect(docs.filter((d) => d.globalDefault).map((d) => d.metadata.name)).toEqual(['ulysses-none']);
    expect(docs.every((d) => d.preemptionPolicy === 'Never')).toBe(true);
  });

  it('the example config file is valid', async () => {
    const { loadExtenderConfig } = await import('../../scheduler-plugins/extender/config.ts');
    const cfg = await loadExtenderConfig(new URL('../../scheduler-plugins/extender/example-config.yaml', import.meta.url).pathname);
    expect(cfg.tdmaNetworks.rtnet0).toEqual({ cycleUs: 5000, slotUs: 1000, slots: 5 });
  });
});
