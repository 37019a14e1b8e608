/**
 * The adversarial inputs of issue 26 (experiments/bench/extender-adversarial-inputs.ts: the review's
 * pod and generated worst cases — max tasks, max servers, extreme periods, 1024 cores) through every
 * verb of an in-process extender (fastify inject): each request answers HTTP 200 with the case's
 * refusal, its counted work within the per-request budget, with the analysis thread and inline;
 * `/healthz` and an ordinary pod answered while all of them run at once. Durations are printed,
 * never asserted.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { ANALYSIS_THREAD_NICE, type ExtenderConfigInput } from '../../scheduler-plugins/extender/config.ts';
import type { ExtenderFilterResult, HostPriority } from '../../scheduler-plugins/extender/wire.ts';
import { higherPriorityTasks, taskPriorityOrder, taskSetFacts, type RtTask } from '../../scheduler-plugins/realtime/task.ts';
import { silentLogger } from '../../core/logging.ts';
import { RtAnalysisWorker } from '../../scheduler-plugins/extender/analysis-worker.ts';
import { parseRtAnnotation } from '../../scheduler-plugins/realtime/annotations.ts';
import { AnalysisBudget } from '../../scheduler-plugins/realtime/task.ts';
import { analyzeRtNode, type NewPod, type ParsedRtNode } from '../../scheduler-plugins/realtime/what-if.ts';
import { prng } from '../../core/prng.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';
import { adversarialCases, adversarialObjects, ISSUE_ITEM_1_RT } from '../../experiments/bench/extender-adversarial-inputs.ts';

const CASES = adversarialCases();
const BUDGET = 1_000_000;

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});

/** A fake API for bind: GETs of unknown pods fail, PATCH and binding POST are recorded. */
function recordingClient(): BindClient & { calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    request: (async (method: string, path: string) => {
      calls.push(`${method} ${path}`);
      return {};
    }) as BindClient['request'],
  };
}

/** An extender holding every case's node (adv-<i>) with its holders, plus `plain` ordinary nodes. */
function extender(config: ExtenderConfigInput, plain = 0): { s: ExtenderServer; pods: V1Pod[]; names: string[]; client: ReturnType<typeof recordingClient> } {
  const client = recordingClient();
  const s = new ExtenderServer({ config: { analysisBudget: BUDGET, ...config }, log: silentLogger(), client });
  servers.push(s);
  const pods: V1Pod[] = [];
  const names: string[] = [];
  CASES.forEach((c, i) => {
    const o = adversarialObjects(c, `adv-${i}`);
    s.state.upsertNode(o.node);
    for (const h of o.holders) s.state.upsertPod(h);
    pods.push(o.pod);
    names.push(o.node.metadata!.name!);
  });
  for (let i = 0; i < plain; i++) {
    const n: V1Node = { metadata: { name: `plain-${i}`, uid: `plain-${i}-uid`, resourceVersion: '1' } };
    s.state.upsertNode(n);
    names.push(n.metadata!.name!);
  }
  return { s, pods, names, client };
}

async function post<T>(s: ExtenderServer, verb: string, payload: unknown): Promise<{ status: number; body: T; ms: number }> {
  const t0 = performance.now();
  const res = await s.app.inject({ method: 'POST', url: `/${verb}`, payload: payload as object });
  return { status: res.statusCode, body: res.json() as T, ms: performance.now() - t0 };
}

describe('adversarial RT inputs through every verb', () => {
  for (const analysisThread of [true, false]) {
    it(`each case is answered by filter, prioritize and bind with its refusal, within the budget (analysis thread ${analysisThread ? 'on' : 'off'})`, async () => {
      const { s, pods, names, client } = extender({ analysisThread }, 10);
      const printed: string[] = [];
      for (const [i, c] of CASES.entries()) {
        const own = `adv-${i}`;
        // its own node only: the refusal is that node's
        const f = await post<ExtenderFilterResult>(s, 'filter', { Pod: pods[i], NodeNames: [own] });
        expect(f.status, c.name).toBe(200);
        expect(f.body.Error, c.name).toBe('');
        expect(f.body.NodeNames, c.name).toEqual([]);
        expect(f.body.FailedAndUnresolvableNodes[own], c.name).toMatch(c.refusal);
        expect(s.analysisWork.last, c.name).toBeLessThanOrEqual(BUDGET);
        // every node at once: one budget for the whole request, every node answered (the plain ones are no RT nodes)
        const all = await post<ExtenderFilterResult>(s, 'filter', { Pod: pods[i], NodeNames: names });
        expect(all.status, c.name).toBe(200);
        // (a pod refused by the work of another node's servers may fit an empty node of its kind)
        expect([...all.body.NodeNames!, ...Object.keys(all.body.FailedAndUnresolvableNodes)].sort(), c.name).toEqual([...names].sort());
        expect(all.body.NodeNames, c.name).not.toContain(own);
        expect(all.body.FailedAndUnresolvableNodes[own], c.name).toMatch(new RegExp(`${c.refusal.source}|analysis budget exceeded`));
        expect(all.body.FailedAndUnresolvableNodes['plain-0'], c.name).toMatch(/not a real-time node/);
        expect(s.analysisWork.last, c.name).toBeLessThanOrEqual(BUDGET);
        const p = await post<HostPriority[]>(s, 'prioritize', { Pod: pods[i], NodeNames: names });
        expect(p.status, c.name).toBe(200);
        expect(p.body.map((h) => h.Host), c.name).toEqual(names);
        // the refused nodes score 0 (the pod's own node, the plain ones)
        for (const h of p.body) if (h.Host === own || !all.body.NodeNames!.includes(h.Host)) expect(h.Score, `${c.name} on ${h.Host}`).toBe(0);
        expect(s.analysisWork.last, c.name).toBeLessThanOrEqual(BUDGET);
        // bind re-checks under the node lock, inline, on a budget of its own: refused, nothing written
        s.state.upsertPod(pods[i]!);
        const b = await post<{ Error: string }>(s, 'bind', { PodName: pods[i]!.metadata!.name, PodNamespace: 'adv', PodUID: pods[i]!.metadata!.uid, Node: own });
        expect(b.status, c.name).toBe(200);
        expect(b.body.Error, c.name).toMatch(c.refusal);
        expect(s.analysisWork.last, c.name).toBeLessThanOrEqual(BUDGET);
        printed.push(`${c.name}: filter ${f.ms.toFixed(1)} ms (own node), ${all.ms.toFixed(1)} ms (${names.length} nodes), prioritize ${p.ms.toFixed(1)} ms, bind ${b.ms.toFixed(1)} ms`);
      }
      expect(client.calls).toEqual([]);
      console.log(`[adversarial, analysis thread ${analysisThread ? 'on' : 'off'}] ${printed.join('; ')}`);
    }, 300_000);
  }

  it('/healthz and an ordinary pod are answered while every adversarial filter runs at once', async () => {
    const { s, pods, names } = extender({}, 10);
    const order: string[] = [];
    const heavy = pods.map((p, i) => s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: p, NodeNames: names } }).then((r) => (order.push(`adv ${CASES[i]!.name}`), r)));
    const health = s.app.inject({ method: 'GET', url: '/healthz' }).then((r) => (order.push('healthz'), r));
    // an ordinary pod (no RT demand) on every node, and an ordinary RT pod on the nodes without heavy holders
    // (on the node of 64 servers x 256 tasks, any new server's analysis is heavy: it queues in the thread)
    const ordinaryPod: V1Pod = { metadata: { name: 'ordinary', namespace: 'adv', uid: 'ordinary-uid' }, spec: { containers: [{ name: 'c' }] } };
    const ordinary = s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: ordinaryPod, NodeNames: names } }).then((r) => (order.push('ordinary'), r));
    const rtPod: V1Pod = { metadata: { name: 'ordinary-rt', namespace: 'adv', uid: 'ordinary-rt-uid', annotations: { 'ulysses.io/rt': JSON.stringify({ server: { budgetUs: 100, periodUs: 1000 }, tasks: [{ wcetUs: 50, periodUs: 1000 }] }) } }, spec: { containers: [{ name: 'c', resources: reservationRequest() }] } };
    const light = ['adv-0', 'adv-1', 'adv-2', 'plain-0'];
    const ordinaryRt = s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: rtPod, NodeNames: light } }).then((r) => (order.push('ordinary-rt'), r));
    const [h, o, ort, ...rest] = await Promise.all([health, ordinary, ordinaryRt, ...heavy]);
    expect(h.statusCode).toBe(200);
    expect(o.statusCode).toBe(200);
    expect((o.json() as ExtenderFilterResult).NodeNames).toEqual(names);
    expect(ort.statusCode).toBe(200);
    expect((ort.json() as ExtenderFilterResult).NodeNames).toEqual(['adv-0', 'adv-1', 'adv-2']);
    for (const r of rest) expect(r.statusCode).toBe(200);
    expect(order.indexOf('ordinary-rt')).toBeLessThan(order.indexOf('adv issue-item-1'));
    // the heavy ones went to the analysis thread: answered after /healthz and the ordinary pod
    const heavyInThread = CASES.filter((_, i) => order.indexOf(`adv ${CASES[i]!.name}`) > order.indexOf('ordinary'));
    expect(order.indexOf('healthz')).toBeLessThan(order.indexOf('ordinary') + 1);
    expect(heavyInThread.map((c) => c.name)).toEqual(expect.arrayContaining(['issue-item-1', 'ds-max-tasks', 'ds-max-servers']));
    expect(s.analysisThreadJobs).toBeGreaterThanOrEqual(3);
    console.log(`[adversarial, all at once] answer order: ${order.join(', ')}`);
  }, 300_000);

  it("the review's pod costs the same bounded work on a retry (refusals by the budget are not cached)", async () => {
    const { s, names } = extender({}, 0);
    const pod: V1Pod = { metadata: { name: 'again', namespace: 'adv', uid: 'again-uid', annotations: { 'ulysses.io/rt': ISSUE_ITEM_1_RT } }, spec: { containers: [{ name: 'c', resources: reservationRequest() }] } };
    const works: number[] = [];
    for (let k = 0; k < 3; k++) {
      const r = await post<ExtenderFilterResult>(s, 'filter', { Pod: pod, NodeNames: names });
      expect(r.status).toBe(200);
      expect(r.body.FailedAndUnresolvableNodes['adv-0']).toMatch(/analysis budget exceeded: 256 tasks x 1 servers/);
      works.push(s.analysisWork.last);
    }
    for (const w of works) {
      expect(w).toBeGreaterThan(0);
      expect(w).toBeLessThanOrEqual(BUDGET);
    }
  }, 120_000);
});

describe('prioritize and bind of a heavy pod leave the event loop to others', () => {
  it('a pod that fits only after ~500,000 units: prioritize and the bind re-check run in the analysis thread, /healthz answered first, the reservation written', async () => {
    const c = CASES.find((x) => x.name === 'ds-max-servers')!;
    // four of the case's 64 servers: the pod fits, after ~494,000 work units (measured), well past inlineAnalysisBudget
    const few = { ...c, holders: c.holders.slice(0, 4) };
    const o = adversarialObjects(few, 'heavy');
    const patches: unknown[] = [];
    const client: BindClient = {
      request: (async (method: string, path: string, opts: { body?: unknown } = {}) => {
        if (method === 'PATCH') {
          patches.push(opts.body);
          const ann = { ...o.pod.metadata!.annotations };
          for (const op of opts.body as Array<{ op: string; path: string; value?: string }>) {
            if (op.op === 'add' && op.path.startsWith('/metadata/annotations/')) ann[op.path.slice('/metadata/annotations/'.length).replace(/~1/g, '/')] = op.value!;
          }
          return { ...o.pod, metadata: { ...o.pod.metadata, annotations: ann, resourceVersion: '2' } };
        }
        return {};
      }) as BindClient['request'],
    };
    const s = new ExtenderServer({ config: { analysisBudget: BUDGET }, log: silentLogger(), client });
    servers.push(s);
    s.state.upsertNode(o.node);
    for (const h of o.holders) s.state.upsertPod(h);
    s.state.upsertPod(o.pod);
    const sendAfter = async <T>(first: Promise<T>) => {
      const order: string[] = [];
      const a = first.then((r) => (order.push('heavy'), r));
      const h = s.app.inject({ method: 'GET', url: '/healthz' }).then((r) => (order.push('healthz'), r));
      const [res, hz] = await Promise.all([a, h]);
      expect(hz.statusCode).toBe(200);
      return { res, order };
    };
    const pr = await sendAfter(s.app.inject({ method: 'POST', url: '/prioritize', payload: { Pod: o.pod, NodeNames: ['heavy'] } }));
    expect(pr.order).toEqual(['healthz', 'heavy']);
    const scores = pr.res.json() as HostPriority[];
    expect(scores).toHaveLength(1);
    expect(scores[0]!.Score).toBeGreaterThan(0);
    expect(s.analysisThreadJobs).toBe(1);
    expect(s.analysisWork.last).toBeGreaterThan(50_000);
    const b = await sendAfter(s.app.inject({ method: 'POST', url: '/bind', payload: { PodName: o.pod.metadata!.name, PodNamespace: 'adv', PodUID: o.pod.metadata!.uid, Node: 'heavy' } }));
    expect(b.order).toEqual(['healthz', 'heavy']);
    expect((b.res.json() as { Error: string }).Error).toBe('');
    expect(s.bindThreadJobs).toBe(1);
    expect(JSON.stringify(patches[0])).toContain('"value":"[0]"');
    expect(s.state.pod(`adv/${o.pod.metadata!.name}`)?.rtCores).toEqual([0]);
  }, 120_000);
});

describe("bind's re-check in the analysis thread gives up inside httpTimeoutMs", () => {
  it('the review\'s pod on a budget of 1e9 units (seconds of analysis): bind answers with the step that did not finish, and writes nothing', async () => {
    const calls: string[] = [];
    const client: BindClient = { request: (async (method: string, path: string) => (calls.push(`${method} ${path}`), {})) as BindClient['request'] };
    const s = new ExtenderServer({ config: { analysisBudget: 1_000_000_000, httpTimeoutMs: 1000 }, log: silentLogger(), client });
    servers.push(s);
    const o = adversarialObjects(CASES[0]!, 'slow');
    s.state.upsertNode(o.node);
    s.state.upsertPod(o.pod);
    const b = await post<{ Error: string }>(s, 'bind', { PodName: o.pod.metadata!.name, PodNamespace: 'adv', PodUID: o.pod.metadata!.uid, Node: 'slow' });
    expect(b.status).toBe(200);
    expect(b.body.Error).toMatch(/^ulysses: bind adv\/adv-issue-item-1 to slow: gave up after \d+ ms \(httpTimeoutMs 1000\): the RT analysis in the analysis thread did not finish within \d+ ms$/);
    expect(calls).toEqual([]);
    console.log(`[adversarial] bind given up after ${b.ms.toFixed(0)} ms (httpTimeoutMs 1000)`);
  }, 120_000);
});

describe('the analysis thread keeps each node\'s pods list', () => {
  it('a node unchanged since the last job is sent without its pods; a changed node sends its list of pod ids, a restarted thread the pods again; the verdicts are the inline ones', async () => {
    const w = new RtAnalysisWorker(ANALYSIS_THREAD_NICE);
    try {
      const c = CASES.find((x) => x.name === 'ds-max-servers')!;
      const parse = (rt: string) => {
        const r = parseRtAnnotation(rt);
        if (!r.ok) throw new Error(r.error);
        return r.value;
      };
      const pods = c.holders.map((h, i) => ({ name: `adv/h${i}`, uid: `h${i}`, spec: parse(h.rt), cores: h.cores }));
      const node: ParsedRtNode = { name: 'n', kind: 'deferrable-server', capacity: { cores: 1 }, pods };
      const small: NewPod = { name: 'adv/small', uid: 'small', spec: parse(JSON.stringify({ server: { budgetUs: 10, periodUs: 100_000 } })) };
      const inline = (n: ParsedRtNode) => analyzeRtNode(n, small, { exactResponseTimes: false, stopAtFirstFailure: true, budget: new AnalysisBudget(BUDGET) });
      const first = await w.analyze([node], [small], BUDGET);
      const second = await w.analyze([node], [small], BUDGET);
      expect(w.transfer).toMatchObject({ nodesSent: 1, nodesReused: 1, podsSent: 64, tasksSent: 64 * 256, units: 64 * 257 });
      for (const r of [first, second]) expect({ schedulable: r.reports[0]!.schedulable, reason: r.reports[0]!.reason, cores: r.reports[0]!.cores }).toEqual({ schedulable: inline(node).schedulable, reason: inline(node).reason, cores: inline(node).cores });
      // the first job also paid for bringing the pods over (1 unit per pod and per task), within the same budget
      for (const r of [first, second]) expect(r.used).toBeLessThanOrEqual(BUDGET);
      // the node changed (one holder fewer): a new list is sent, and analysed
      const fewer: ParsedRtNode = { ...node, pods: pods.slice(1) };
      const third = await w.analyze([fewer], [small], BUDGET);
      // the node changed (one holder fewer): its list of pod ids is sent, no pod again
      expect(w.transfer).toMatchObject({ nodesSent: 2, nodesReused: 1, podsSent: 64, podsReused: 63, units: 64 * 257 });
      expect(third.reports[0]!.reason).toBe(inline(fewer).reason);
      // the reports carry the verdict only
      expect(third.reports[0]!.tasks).toEqual([]);
      // a new thread keeps nothing: sent again
      await w.stop();
      await w.analyze([fewer], [small], BUDGET);
      expect(w.transfer).toMatchObject({ nodesSent: 3, nodesReused: 1, podsSent: 127, podsReused: 63 });
    } finally {
      await w.stop();
    }
  }, 120_000);
});

/** Objects a structured clone of `v` would make (typed arrays: one each, their contents moved, not cloned). */
function clonedObjects(v: unknown, seen = new Set<object>()): number {
  if (typeof v !== 'object' || v === null || seen.has(v)) return 0;
  seen.add(v);
  if (ArrayBuffer.isView(v)) return 1;
  let n = 1;
  for (const x of Object.values(v)) n += clonedObjects(x, seen);
  return n;
}

describe('bringing the analysis thread up to date on a cluster whose every node holds max tasks', () => {
  it('8 nodes of 64 servers x 256 tasks, without the background feed: each request brings over what its budget allows (packed numbers, not task objects) and refuses the rest with the reason; every pod is sent once; a change sends no pod again', async () => {
    const NODES = 8;
    const LIMIT = 100_000;
    const c = CASES.find((x) => x.name === 'ds-max-servers')!;
    const s = new ExtenderServer({ config: { analysisBudget: LIMIT, analysisThreadFeed: false }, log: silentLogger() });
    servers.push(s);
    const names: string[] = [];
    const holders: V1Pod[] = [];
    for (let n = 0; n < NODES; n++) {
      const o = adversarialObjects(c, `max-${n}`);
      s.state.upsertNode(o.node);
      for (const h of o.holders) s.state.upsertPod(h);
      holders.push(...o.holders);
      names.push(`max-${n}`);
    }
    const pod = adversarialObjects(c, 'unused').pod;
    let uid = 0;
    const filter = async () => {
      const f = await post<ExtenderFilterResult>(s, 'filter', { Pod: { ...pod, metadata: { ...pod.metadata, uid: `fresh-${++uid}` } }, NodeNames: names });
      expect(f.status).toBe(200);
      expect(Object.keys(f.body.FailedAndUnresolvableNodes).sort()).toEqual([...names].sort());
      for (const m of Object.values(f.body.FailedAndUnresolvableNodes)) expect(m).toContain('analysis budget exceeded');
      // the whole request, the transfer to the thread included, within the budget
      expect(s.analysisWork.last).toBeLessThanOrEqual(LIMIT);
      return Object.values(f.body.FailedAndUnresolvableNodes).filter((m) => m.includes('not in the analysis thread yet')).length;
    };
    await filter(); // starts the thread
    const worker = (s as unknown as { analysisWorker: RtAnalysisWorker }).analysisWorker;
    const posted: Array<{ objects: number; bytes: number }> = [];
    const tasksBefore = worker.transfer.tasksSent;
    const original = (worker as unknown as { post: (w: unknown, job: object, transfer: ArrayBuffer[]) => void }).post.bind(worker);
    (worker as unknown as { post: (w: unknown, job: object, transfer: ArrayBuffer[]) => void }).post = (w, job, transfer) => {
      posted.push({ objects: clonedObjects(job), bytes: transfer.reduce((b, t) => b + t.byteLength, 0) });
      original(w, job, transfer);
    };
    const perNode = c.holders.length * (1 + 256);
    expect(worker.transfer.units).toBeLessThanOrEqual(LIMIT);
    expect(worker.transfer.podsSent % c.holders.length).toBe(0);
    expect(worker.transfer.podsSent).toBeGreaterThan(0);
    expect(worker.transfer.podsSent).toBeLessThan(NODES * c.holders.length);
    // later requests bring the rest over, each within its budget
    const refusedFor: number[] = [];
    for (let k = 0; k < NODES && worker.transfer.podsSent < NODES * c.holders.length; k++) refusedFor.push(await filter());
    expect(worker.transfer).toMatchObject({ podsSent: NODES * c.holders.length, tasksSent: NODES * c.holders.length * 256, units: NODES * perNode });
    expect(worker.transfer.nodesOverBudget).toBeGreaterThan(0);
    // no request posted task objects: a few objects per node and the new pod, the tasks as packed numbers (4 per task)
    for (const p of posted) expect(p.objects).toBeLessThan(1_000);
    const packed = (worker.transfer.tasksSent - tasksBefore) * 4 * 8;
    expect(packed).toBeGreaterThan(0);
    expect(posted.reduce((b, p) => b + p.bytes, 0)).toBeGreaterThanOrEqual(packed);
    expect(posted.reduce((b, p) => b + p.bytes, 0)).toBeLessThan(packed + 64 * 1024);
    // every node in the thread now: refused by the analysis itself
    expect(await filter()).toBe(0);
    expect(worker.transfer.podsSent).toBe(NODES * c.holders.length);
    // one holder leaves a node: its list of ids is sent again, no pod
    const nodesSent = worker.transfer.nodesSent;
    s.state.deletePod(holders[0]!);
    expect(await filter()).toBe(0);
    expect(worker.transfer).toMatchObject({ podsSent: NODES * c.holders.length, nodesSent: nodesSent + 1 });
    console.log(`[adversarial] ${NODES} nodes x ${c.holders.length * 256} tasks, budget ${LIMIT}: nodes refused as not yet in the thread per request ${refusedFor.join(', ')}; jobs posted ${posted.length}, at most ${Math.max(...posted.map((p) => p.objects))} objects each`);
  }, 240_000);
});

describe('task-set facts (computed once per task set)', () => {
  it('hp(i) equals the sorted definition for random sets with and without priorities; one facts object per set', () => {
    const rnd = prng(7);
    for (let k = 0; k < 200; k++) {
      const n = 1 + Math.floor(rnd() * 40);
      const tasks: RtTask[] = Array.from({ length: n }, () => ({
        wcetUs: 1 + Math.floor(rnd() * 10),
        periodUs: 10 + Math.floor(rnd() * 5) * 10,
        ...(rnd() < 0.3 ? { deadlineUs: 5 + Math.floor(rnd() * 50) } : {}),
        ...(rnd() < 0.3 ? { priority: Math.floor(rnd() * 4) } : {}),
      }));
      const order = taskPriorityOrder(tasks);
      for (let i = 0; i < n; i++) expect(higherPriorityTasks(tasks, i)).toEqual(order.slice(0, order.indexOf(i)).map((j) => tasks[j]));
      expect(taskSetFacts(tasks)).toBe(taskSetFacts(tasks));
    }
    const bad: RtTask[] = [{ wcetUs: 1, periodUs: 10 }, { wcetUs: 0, periodUs: 10 }];
    expect(taskSetFacts(bad).invalid).toEqual({ index: 1, reason: expect.stringContaining('wcetUs') });
    // a set that grew is computed afresh
    const grown: RtTask[] = [{ wcetUs: 1, periodUs: 20 }];
    expect(taskSetFacts(grown).order).toEqual([0]);
    grown.push({ wcetUs: 1, periodUs: 10 });
    expect(taskSetFacts(grown).order).toEqual([1, 0]);
  });
});
