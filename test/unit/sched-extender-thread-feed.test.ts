/**
 * The analysis thread fed in the background (scheduler-plugins/extender/analysis-worker.ts, config
 * analysisThreadFeed): the nodes' RT pods reach the thread from the state's changes (what the
 * informers' add/update/delete handlers call) without any request; a request arriving while a large
 * transfer is under way queues behind at most one feed job and carries at most FEED_CHUNK_UNITS of
 * pods itself; updates and deletions leave the thread's lists equal to the state's; a crashed
 * thread is started again and fed everything. Asserted by the jobs' contents and the thread's state
 * (RtAnalysisWorker.snapshot), never by time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { Worker } from 'node:worker_threads';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import type { ExtenderFilterResult } from '../../scheduler-plugins/extender/wire.ts';
import { FEED_CHUNK_UNITS, RtAnalysisWorker } from '../../scheduler-plugins/extender/analysis-worker.ts';
import { ANALYSIS_THREAD_NICE } from '../../scheduler-plugins/extender/config.ts';
import type { ParsedRtPod } from '../../scheduler-plugins/realtime/what-if.ts';
import { silentLogger } from '../../core/logging.ts';
import { threadNice } from '../../core/thread.ts';
import { adversarialCases, adversarialObjects } from '../../experiments/bench/extender-adversarial-inputs.ts';

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
});

async function started(config: Record<string, unknown> = {}): Promise<{ s: ExtenderServer; w: RtAnalysisWorker }> {
  const s = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, ...config }, log: silentLogger() });
  servers.push(s);
  await s.start();
  const w = (s as unknown as { analysisWorker: RtAnalysisWorker }).analysisWorker;
  return { s, w };
}

const rtNode = (name: string, kind: string, cores: number): V1Node => ({
  metadata: { name, uid: `${name}-uid`, resourceVersion: '1', labels: { 'ulysses.io/rt-scheduler': kind }, annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores }) } },
});

let rv = 100;
const rtPod = (name: string, node: string, rt: unknown, cores: number[]): V1Pod => ({
  metadata: { name, namespace: 'feed', uid: `${name}-uid`, resourceVersion: String(++rv), annotations: { 'ulysses.io/rt': JSON.stringify(rt), 'ulysses.io/rt-cores': JSON.stringify(cores) } },
  spec: { nodeName: node, containers: [{ name: 'c' }] },
});
const server = (budgetUs: number, periodUs: number, tasks = 1) => ({ server: { budgetUs, periodUs }, tasks: Array.from({ length: tasks }, (_, i) => ({ wcetUs: 1 + i, periodUs: periodUs * 10 })) });

/** A pod as the analyses read it, comparable across the thread boundary. */
const norm = (p: ParsedRtPod) => ({ name: p.name, uid: p.uid, cores: p.cores ? [...p.cores] : undefined, spec: JSON.parse(JSON.stringify(p.spec)) as unknown });

/** The thread's node lists equal the state's (every RT node, the very pods a request would analyse), and it keeps no other pod. */
async function expectThreadIsState(s: ExtenderServer, w: RtAnalysisWorker): Promise<number> {
  const snap = await w.snapshot();
  const expected = new Map<string, unknown[]>();
  for (const name of s.state.nodeNames()) {
    const info = s.state.node(name)!;
    if (typeof info.rtKind === 'string') expected.set(name, s.state.rtSummary(name).pods.map(norm));
  }
  const lists = new Map([...snap.lists].filter(([name]) => !name.startsWith('\u0000')).map(([name, pods]) => [name, pods.map(norm)]));
  expect(lists).toEqual(expected);
  const listed = [...expected.values()].reduce((n, l) => n + l.length, 0);
  expect(snap.pods).toBe(listed);
  return listed;
}

describe('the analysis thread is fed from the state in the background', () => {
  it('pods added (as the informers add them) reach the thread without any /filter; a new node too', async () => {
    const { s, w } = await started();
    expect(w.feedActive).toBe(true);
    for (const n of ['ds-a', 'ds-b']) s.state.upsertNode(rtNode(n, 'deferrable-server', 2));
    s.state.upsertNode(rtNode('edf-a', 'edf', 2));
    s.state.upsertNode({ metadata: { name: 'plain', uid: 'plain-uid', resourceVersion: '1' } });
    s.state.upsertPod(rtPod('p1', 'ds-a', server(10, 1000, 3), [0]));
    s.state.upsertPod(rtPod('p2', 'ds-a', server(20, 2000, 2), [1]));
    s.state.upsertPod(rtPod('p3', 'ds-b', server(10, 1000), [0]));
    s.state.upsertPod(rtPod('e1', 'edf-a', { tasks: [{ wcetUs: 1, periodUs: 10 }, { wcetUs: 2, periodUs: 10 }] }, [0, 1]));
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(4);
    expect(s.analysisThreadJobs).toBe(0); // no request ran
    expect(w.transfer).toMatchObject({ podsSent: 4, podsFed: 4, units: 0 });
    expect(w.transfer.feedJobs).toBeGreaterThan(0);
    // a node joining later with its pod
    s.state.upsertNode(rtNode('ds-c', 'deferrable-server', 1));
    s.state.upsertPod(rtPod('p4', 'ds-c', server(5, 500, 4), [0]));
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(5);
    expect(w.transfer).toMatchObject({ podsSent: 5, podsFed: 5 });
  }, 60_000);

  it('updates, moves and deletions reach the thread in order: its lists end equal to the state, each pod version sent once, replaced versions dropped', async () => {
    const { s, w } = await started();
    for (const n of ['ds-a', 'ds-b']) s.state.upsertNode(rtNode(n, 'deferrable-server', 2));
    const pods = Array.from({ length: 6 }, (_, i) => rtPod(`p${i}`, i < 3 ? 'ds-a' : 'ds-b', server(10 + i, 1000, 2), [i % 2]));
    for (const p of pods) s.state.upsertPod(p);
    await s.analysisThreadFeedIdle();
    await expectThreadIsState(s, w);
    expect(w.transfer.podsSent).toBe(6);
    // one burst, no request: p0 updated twice (only its last version matters), p1 deleted,
    // p3 reserved elsewhere (moves to ds-a), p4 deleted then re-created under the same name (new UID)
    const v2 = { ...pods[0]!, metadata: { ...pods[0]!.metadata, resourceVersion: String(++rv), annotations: { ...pods[0]!.metadata!.annotations, 'ulysses.io/rt': JSON.stringify(server(30, 1000, 3)) } } };
    const v3 = { ...v2, metadata: { ...v2.metadata, resourceVersion: String(++rv), annotations: { ...v2.metadata.annotations, 'ulysses.io/rt': JSON.stringify(server(40, 1000, 5)) } } };
    s.state.upsertPod(v2);
    s.state.upsertPod(v3);
    s.state.deletePod(pods[1]!);
    s.state.upsertPod({ ...pods[3]!, metadata: { ...pods[3]!.metadata, resourceVersion: String(++rv) }, spec: { containers: [{ name: 'c' }], nodeName: 'ds-a' } });
    s.state.deletePod(pods[4]!);
    s.state.upsertPod({ ...pods[4]!, metadata: { ...pods[4]!.metadata, uid: 'p4-again', resourceVersion: String(++rv) } });
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(5);
    // v3, the moved p3 and the new p4 are new pod versions (v2 was never sent: the feed reads the state as it is)
    expect(w.transfer.podsSent).toBe(9);
    expect(s.analysisThreadJobs).toBe(0);
    // every pod leaves a node: the node's list is empty; the node turns plain: its list is forgotten
    for (const p of ['p0', 'p2', 'p3']) s.state.deletePod(s.state.pod(`feed/${p}`)!.pod);
    s.state.upsertNode({ metadata: { name: 'ds-b', uid: 'ds-b-uid', resourceVersion: '2' } });
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(0);
    const snap = await w.snapshot();
    expect(snap.lists.get('ds-a')).toEqual([]);
    expect(snap.lists.has('ds-b')).toBe(false);
  }, 60_000);

  it('the lists follow the RT nodes: 4,200 of them kept (no cap with the feed), a deleted node forgotten', async () => {
    const { s, w } = await started();
    for (let i = 0; i < 4200; i++) s.state.upsertNode(rtNode(`n${i}`, 'edf', 1));
    s.state.upsertPod(rtPod('e1', 'n4199', { tasks: [{ wcetUs: 1, periodUs: 10 }] }, [0]));
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(1);
    s.state.deleteNode('n4199');
    await s.analysisThreadFeedIdle();
    const snap = await w.snapshot();
    expect(snap.lists.has('n4199')).toBe(false);
    expect([...snap.lists.keys()].filter((n) => !n.startsWith('\u0000'))).toHaveLength(4199);
    expect(snap.pods).toBe(0); // the deleted node's pod is no longer in any list
  }, 60_000);

  it('after the thread crashes, a new one is started and fed every pod again', async () => {
    const { s, w } = await started();
    s.state.upsertNode(rtNode('ds-a', 'deferrable-server', 2));
    s.state.upsertNode(rtNode('edf-a', 'edf', 2));
    s.state.upsertPod(rtPod('p1', 'ds-a', server(10, 1000, 3), [0]));
    s.state.upsertPod(rtPod('e1', 'edf-a', { tasks: [{ wcetUs: 1, periodUs: 10 }] }, [1]));
    await s.analysisThreadFeedIdle();
    await expectThreadIsState(s, w);
    const thread = (w as unknown as { worker: Worker }).worker;
    const exited = new Promise((resolve) => thread.once('exit', resolve));
    await thread.terminate();
    await exited; // the worker's own exit handler ran first: the feed starts over
    expect((w as unknown as { worker: Worker | undefined }).worker).not.toBe(thread);
    await s.analysisThreadFeedIdle();
    expect((w as unknown as { worker: Worker }).worker).not.toBe(thread);
    expect(await expectThreadIsState(s, w)).toBe(2);
    expect(w.transfer.podsFed).toBe(4); // each pod once per thread
  }, 60_000);
});

describe('a standby replica does not feed the thread', () => {
  it('behind a closed gate the state is kept but nothing is fed (nor on a configuration change); the takeover (rebuild) starts the feed, which brings every RT pod', async () => {
    const gate = { check: () => ({ ready: false, reason: 'standby replica: test' }) as const };
    const listed: V1Pod[] = [];
    // rebuild()'s consistent list: the pods the informer delivered
    const client: BindClient = { request: (async () => ({ metadata: { resourceVersion: String(rv + 1000) }, items: listed })) as BindClient['request'] };
    const s = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 } }, log: silentLogger(), gate, client });
    servers.push(s);
    await s.start();
    const w = (s as unknown as { analysisWorker: RtAnalysisWorker }).analysisWorker;
    s.state.upsertNode(rtNode('ds-a', 'deferrable-server', 2));
    s.state.upsertPod(rtPod('p1', 'ds-a', server(10, 1000, 3), [0]));
    s.state.upsertPod(rtPod('p2', 'ds-a', server(20, 2000, 2), [1]));
    s.setConfig(s.config);
    await s.analysisThreadFeedIdle();
    expect(w.feedActive).toBe(false);
    expect(w.transfer).toMatchObject({ feedJobs: 0, podsSent: 0 });
    expect(s.state.rtSummary('ds-a').pods.map((p) => p.name)).toEqual(['feed/p1', 'feed/p2']);

    for (const key of ['feed/p1', 'feed/p2']) listed.push(s.state.pod(key)!.pod);
    await s.rebuild();
    expect(w.feedActive).toBe(true);
    await s.analysisThreadFeedIdle();
    expect(await expectThreadIsState(s, w)).toBe(2);
    expect(w.transfer).toMatchObject({ podsSent: 2, podsFed: 2 });
    expect(s.analysisThreadJobs).toBe(0);
  }, 60_000);
});

describe('a /filter during a large background transfer', () => {
  it('8 nodes of 64 servers x 256 tasks being fed: the request queues behind at most one feed job, carries at most FEED_CHUNK_UNITS of pods, and refuses the nodes not in the thread yet; the feed then brings every pod once', async () => {
    const NODES = 8;
    const c = adversarialCases().find((x) => x.name === 'ds-max-servers')!;
    const s = new ExtenderServer({ config: {}, log: silentLogger() });
    servers.push(s);
    const names: string[] = [];
    for (let n = 0; n < NODES; n++) {
      const o = adversarialObjects(c, `max-${n}`);
      s.state.upsertNode(o.node);
      for (const h of o.holders) s.state.upsertPod(h);
      names.push(`max-${n}`);
    }
    const total = NODES * c.holders.length;
    const w = new RtAnalysisWorker(ANALYSIS_THREAD_NICE);
    (s as unknown as { analysisWorker: RtAnalysisWorker }).analysisWorker = w;
    type Posted = { request: boolean; feedJobsOut: number; feedJobsBefore: number; batchPods: number; batchTasks: number; unitsCharged: number };
    const posted: Posted[] = [];
    let secondFeedJob!: () => void;
    const secondFeedJobPosted = new Promise<void>((resolve) => (secondFeedJob = resolve));
    let unitsBefore = 0;
    const original = (w as unknown as { post: (t: unknown, job: object, transfer: ArrayBuffer[]) => void }).post.bind(w);
    (w as unknown as { post: (t: unknown, job: object, transfer: ArrayBuffer[]) => void }).post = (t, job, transfer) => {
      const j = job as { id: number; nodes: unknown[]; batch: { ids: Int32Array; numbers: Float64Array } | null; snapshot?: true };
      if (!j.snapshot) {
        let tasks = 0;
        if (j.batch) {
          // walk the packed pods (kind, params, n tasks, 4 per task, cores)
          const n = j.batch.numbers;
          let o = 0;
          for (let i = 0; i < j.batch.ids.length; i++) {
            const kind = n[o++]!;
            o += kind === 0 ? 2 : kind === 1 ? 3 : 0;
            const count = n[o++]!;
            tasks += count;
            o += 4 * count;
            const cores = n[o++]!;
            if (cores > 0) o += cores;
          }
        }
        const request = j.nodes.length > 0;
        if (!request && j.id > warmId) feedIds.add(j.id);
        posted.push({ request, feedJobsOut: feedIds.size - (request ? 0 : 1) - feedAnswered, feedJobsBefore: w.transfer.feedJobs, batchPods: j.batch?.ids.length ?? 0, batchTasks: tasks, unitsCharged: w.transfer.units - unitsBefore });
        unitsBefore = w.transfer.units;
        if (!request && w.transfer.feedJobs === 2) secondFeedJob();
      }
      original(t, job, transfer);
    };
    // the thread warmed and fed as start() does; the feed jobs out counted from the thread's answers
    const feedIds = new Set<number>();
    let feedAnswered = 0;
    await w.warm();
    const warmId = (w as unknown as { seq: number }).seq;
    (w as unknown as { worker: Worker }).worker.on('message', (m: { id: number }) => {
      if (feedIds.has(m.id)) feedAnswered++;
    });
    (s as unknown as { feed: (w: RtAnalysisWorker) => void }).feed(w);
    await secondFeedJobPosted; // one feed job answered, the second one out: the transfer is under way
    const pod = adversarialObjects(c, 'unused').pod;
    const res = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: { ...pod, metadata: { ...pod.metadata, uid: 'during-feed' } }, NodeNames: names } });
    expect(res.statusCode).toBe(200);
    const body = res.json() as ExtenderFilterResult;
    const fedAtAnswer = w.transfer.podsFed;
    expect(fedAtAnswer).toBeLessThan(total); // the answer did not wait for the whole transfer
    const requests = posted.filter((p) => p.request && p.feedJobsBefore > 0);
    expect(requests).toHaveLength(1);
    const r = requests[0]!;
    // posted while the transfer was under way, behind at most one feed job: a feed job is only ever
    // posted when no other one is out
    expect(r.feedJobsBefore).toBeGreaterThanOrEqual(2);
    expect(r.feedJobsOut).toBeLessThanOrEqual(1);
    for (const p of posted.filter((x) => !x.request)) expect(p.feedJobsOut).toBe(0);
    // it carried at most one chunk of pods, charged to its budget
    expect(r.batchPods * 1 + r.batchTasks).toBeLessThanOrEqual(FEED_CHUNK_UNITS);
    expect(r.unitsCharged).toBe(r.batchPods + r.batchTasks);
    // every feed job a chunk too
    for (const p of posted.filter((x) => !x.request)) expect(p.batchPods + p.batchTasks).toBeLessThanOrEqual(FEED_CHUNK_UNITS);
    // every node refused: those not in the thread yet with the reason, naming the node and the budget
    expect(Object.keys(body.FailedAndUnresolvableNodes).sort()).toEqual([...names].sort());
    const notYet = Object.entries(body.FailedAndUnresolvableNodes).filter(([, m]) => m.includes('not in the analysis thread yet'));
    expect(notYet.length).toBeGreaterThan(0);
    for (const [name, m] of notYet) {
      expect(m, name).toMatch(/^ulysses: deferrable-server: /);
      expect(m).toMatch(/analysis budget exceeded: \d+ pod\(s\) with \d+ tasks on the node are not in the analysis thread yet/);
      expect(m).toContain('budget 1000000 work units per request');
      expect(m).toContain(`a request brings over at most ${FEED_CHUNK_UNITS} work units of pods, the rest are being brought over in the background`);
    }
    expect(s.analysisWork.last).toBeLessThanOrEqual(1_000_000);
    // the feed finishes: every pod sent exactly once (by the feed or the request), the thread equal to the state
    await s.analysisThreadFeedIdle();
    expect(w.transfer.podsSent).toBe(total);
    expect(w.transfer.tasksSent).toBe(total * 256);
    expect(await expectThreadIsState(s, w)).toBe(total);
    // and the next request finds every node there: refused by the analysis itself, carrying no pod
    const again = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: { ...pod, metadata: { ...pod.metadata, uid: 'after-feed' } }, NodeNames: names } });
    const messages = Object.values((again.json() as ExtenderFilterResult).FailedAndUnresolvableNodes);
    expect(messages).toHaveLength(NODES);
    for (const m of messages) expect(m).not.toContain('not in the analysis thread yet');
    expect(posted.at(-1)).toMatchObject({ request: true, batchPods: 0 });
    console.log(`[thread-feed] ${total} pods (${total * 256} tasks) fed in ${w.transfer.feedJobs} jobs; the request during the feed: ${notYet.length} of ${NODES} nodes not in the thread yet, ${r.batchPods} pods carried; pods fed when it was answered: ${fedAtAnswer}`);
  }, 120_000);
});

describe('the analysis thread yields the CPU to the event loop', () => {
  it('runs at the configured nice value (default 10), the event loop at the process’s own', async () => {
    const own = threadNice();
    expect(own, 'Linux: /proc/thread-self').toBeDefined();
    const { w } = await started();
    expect((await w.snapshot()).nice).toBe(Math.max(own!, 10));
    const { w: w2 } = await started({ analysisThreadNice: 15 });
    expect((await w2.snapshot()).nice).toBe(Math.max(own!, 15));
    const { w: w3 } = await started({ analysisThreadNice: 0 });
    expect((await w3.snapshot()).nice).toBe(own);
    expect(threadNice()).toBe(own);
  });
});
