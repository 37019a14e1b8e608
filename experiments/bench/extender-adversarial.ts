#!/usr/bin/env -S npx tsx
/**
 * `npm run bench:extender-adversarial`: the extender under the adversarial RT inputs of issue 26
 * (extender-adversarial-inputs.ts: the review's 13.5 KB pod and generated worst cases — max tasks,
 * max servers, extreme periods, 1024 cores) at N nodes (default 100), over loopback HTTP as
 * kube-scheduler calls it (POST /filter with every node name, nodeCacheCapable):
 *  - per case, the /filter latency of each repetition (a fresh pod UID each: refusals by the work
 *    budget are never cached, so every repetition analyses again), its max and median;
 *  - meanwhile, /healthz sent back to back: its p50/p99/max while the adversarial filters run,
 *    against /healthz alone in the same run (baseline), and the extender's event loop meanwhile
 *    (perf_hooks: the delay of a 1 ms timer, p99 and max, and the share of time it was busy): a
 *    /healthz tail with a short loop delay is the CPU, one with a long delay the loop's own work;
 *  - an ordinary pod's /filter (no RT demand) interleaved, the same way, against its baseline.
 * The clients (filter sender, /healthz prober, ordinary pod) run in a worker thread of their own
 * (their timing is not delayed by the extender's event loop, only by what they measure); the
 * extender, with its analysis thread, runs on the main thread as in its process.
 *
 * Two clusters: `mixed` — one node per case (its holders bound there) among ordinary nodes
 * (a quarter deferrable-server 2-core, an eighth budget/period, an eighth EDF, the rest plain);
 * `hostile` — every node a case node, the cases repeated round-robin (every RT node heavy).
 * Targets (issue 26, printed, not asserted): every adversarial /filter within 100 ms at 100 nodes;
 * /healthz p99 under 5 ms while they run.
 *
 *   npm run bench:extender-adversarial -- [--nodes 100] [--repetitions 20] [--clusters mixed,hostile] [--json]
 *       [--profile experiments/profiles/bench-extender-adversarial-no-analysis-thread.yaml]
 * The first /filter of each fresh extender is also reported on its own (median and max over the
 * profile's `starts` extenders): without the background feed it carries every RT pod into the analysis
 * thread; profile `analysisThreadFeed: both` runs extenders with the feed and without it in turn.
 * (options and profile fields: experiments/bench/options.ts)
 */
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import os from 'node:os';
import http from 'node:http';
import { monitorEventLoopDelay, performance, type EventLoopUtilization } from 'node:perf_hooks';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { adversarialBenchOptions, benchFailure } from './options.ts';

const FILTER_TARGET_MS = 100;
const HEALTHZ_P99_TARGET_MS = 5;

// ------------------------------------------------------------------ client thread

interface ClientJob {
  readonly url: string;
  readonly names: readonly string[];
  /** Adversarial pods, in the order to send them (each sent `repetitions` times, a fresh UID each). */
  readonly pods: ReadonlyArray<{ readonly label: string; readonly pod: V1Pod }>;
  readonly repetitions: number;
  readonly ordinary: V1Pod;
  /** Baseline phase: only /healthz and the ordinary pod, for this many ms. */
  readonly baselineMs: number;
}

interface ClientResult {
  readonly filters: Record<string, number[]>;
  readonly statuses: Record<string, number[]>;
  readonly healthzBaseline: number[];
  readonly healthzLoaded: number[];
  readonly ordinaryBaseline: number[];
  readonly ordinaryLoaded: number[];
  readonly healthzFailures: number;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

function request(url: string, method: 'GET' | 'POST', path: string, body?: unknown): Promise<{ status: number; ms: number; text: string }> {
  const data = body === undefined ? undefined : JSON.stringify(body);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${path}`, { method, agent, headers: data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {} }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0, text: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
}

async function runClient(job: ClientJob): Promise<ClientResult> {
  const r: ClientResult = { filters: {}, statuses: {}, healthzBaseline: [], healthzLoaded: [], ordinaryBaseline: [], ordinaryLoaded: [], healthzFailures: 0 };
  const state = { phase: 'baseline' as 'baseline' | 'loaded' | 'done' };
  const healthz = (async () => {
    while (state.phase !== 'done') {
      const h = await request(job.url, 'GET', '/healthz');
      if (h.status !== 200) (r as { healthzFailures: number }).healthzFailures++;
      if (state.phase === 'baseline') r.healthzBaseline.push(h.ms);
      else if (state.phase === 'loaded') r.healthzLoaded.push(h.ms);
      await new Promise((res) => setImmediate(res));
    }
  })();
  const ordinary = (async () => {
    let i = 0;
    while (state.phase !== 'done') {
      const pod = { ...job.ordinary, metadata: { ...job.ordinary.metadata, uid: `ordinary-${i++}` } };
      const o = await request(job.url, 'POST', '/filter', { Pod: pod, NodeNames: job.names });
      if (state.phase === 'baseline') r.ordinaryBaseline.push(o.ms);
      else if (state.phase === 'loaded') r.ordinaryLoaded.push(o.ms);
      await new Promise((res) => setTimeout(res, 5));
    }
  })();
  await new Promise((res) => setTimeout(res, job.baselineMs));
  state.phase = 'loaded';
  // the extender's thread measures its event loop from here (main below)
  parentPort?.postMessage({ phase: 'loaded' });
  for (let rep = 0; rep < job.repetitions; rep++) {
    for (const { label, pod } of job.pods) {
      const p = { ...pod, metadata: { ...pod.metadata, uid: `${pod.metadata!.uid}-${rep}` } };
      const f = await request(job.url, 'POST', '/filter', { Pod: p, NodeNames: job.names });
      (r.filters[label] ??= []).push(f.ms);
      (r.statuses[label] ??= []).push(f.status);
    }
  }
  state.phase = 'done';
  await Promise.all([healthz, ordinary]);
  return r;
}

if (!isMainThread && (workerData as { mark?: string } | null)?.mark === 'ulysses-bench-adversarial-client') {
  parentPort!.once('message', (job: ClientJob) => {
    runClient(job).then(
      (r) => parentPort!.postMessage({ ok: r }),
      (err: Error) => parentPort!.postMessage({ error: err.stack ?? err.message }),
    );
  });
}

// ------------------------------------------------------------------ main thread

const quantile = (xs: readonly number[], q: number): number => {
  if (!xs.length) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};
const max = (xs: readonly number[]) => (xs.length ? Math.max(...xs) : Number.NaN);
const f = (x: number, w = 8) => x.toFixed(2).padStart(w);

async function main(): Promise<void> {
  const opts = adversarialBenchOptions(process.argv.slice(2));
  const { ExtenderServer } = await import('../../scheduler-plugins/extender/server.ts');
  const { silentLogger } = await import('../../core/logging.ts');
  const { tsWorker } = await import('../../core/ts-worker.ts');
  const { adversarialCases, adversarialObjects } = await import('./extender-adversarial-inputs.ts');
  const N = opts.nodes;
  const cases = adversarialCases();
  const out: Array<Record<string, unknown>> = [];
  const lines: string[] = [];
  const feedModes = opts.profile.analysisThreadFeed === 'both' ? [false, true] : [opts.profile.analysisThreadFeed === 'on'];
  const niceModes = opts.profile.analysisThreadNice === 'both' ? [0, 10] : [opts.profile.analysisThreadNice];
  /** The extenders of one run: every feed mode with every nice value, in turn. */
  const variants = feedModes.flatMap((feed) => niceModes.map((nice) => ({ feed, nice })));
  type Variant = (typeof variants)[number];

  /** One fresh extender (cluster filled, started), the client's run against it. */
  const runOnce = async (cluster: (typeof opts.clusters)[number], { feed, nice }: Variant) => {
    const s = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, analysisThread: opts.profile.analysisThread, analysisThreadFeed: feed, analysisThreadNice: nice }, log: silentLogger() });
    const names: string[] = [];
    const pods: Array<{ label: string; pod: V1Pod }> = [];
    let holders = 0;
    for (let i = 0; i < N; i++) {
      const name = `node-${i}`;
      names.push(name);
      const c = cluster === 'hostile' ? cases[i % cases.length]! : i < cases.length ? cases[i]! : undefined;
      if (c) {
        const o = adversarialObjects(c, name);
        s.state.upsertNode(o.node);
        for (const h of o.holders) s.state.upsertPod(h);
        holders += o.holders.length;
        if (i < cases.length) pods.push({ label: c.name, pod: o.pod });
        continue;
      }
      const k = i % 8;
      const node: V1Node = { metadata: { name, uid: `${name}-uid`, resourceVersion: '1', labels: {}, annotations: { 'ulysses.io/assurance': '{"cpu":2,"memory":2}' } } };
      if (k < 2) Object.assign(node.metadata!.labels!, { 'ulysses.io/rt-scheduler': 'deferrable-server' }), (node.metadata!.annotations!['ulysses.io/rt-capacity'] = '{"cores":2}');
      else if (k === 2) Object.assign(node.metadata!.labels!, { 'ulysses.io/rt-scheduler': 'budget-period' }), (node.metadata!.annotations!['ulysses.io/rt-capacity'] = '{"cores":4}');
      else if (k === 3) Object.assign(node.metadata!.labels!, { 'ulysses.io/rt-scheduler': 'edf' }), (node.metadata!.annotations!['ulysses.io/rt-capacity'] = '{"cores":2}');
      s.state.upsertNode(node);
    }
    const t0 = performance.now();
    const { url } = await s.start();
    // the time the background feed took to bring every RT node's pods over (from start, thread start included)
    let feedMs = Number.NaN;
    if (feed && opts.profile.analysisThread) void s.analysisThreadFeedIdle().then(() => (feedMs = performance.now() - t0));
    const ordinary: V1Pod = { metadata: { name: 'ordinary', namespace: 'adv', uid: 'ordinary', resourceVersion: '1', labels: { 'ulysses.io/criticality': 'low' } }, spec: { containers: [{ name: 'c' }] } };
    const worker = tsWorker(import.meta.url, { workerData: { mark: 'ulysses-bench-adversarial-client' } });
    const job: ClientJob = { url, names, pods, repetitions: opts.repetitions, ordinary, baselineMs: opts.profile.baselineMs };
    const work0 = { ...s.analysisWork };
    const load = os.loadavg()[0]!;
    // the event loop while the adversarial filters run: how long a callback (a /healthz) waited for it, and how busy it was
    const loopDelay = monitorEventLoopDelay({ resolution: 1 });
    let elu0: EventLoopUtilization | undefined;
    const result = await new Promise<ClientResult>((resolve, reject) => {
      worker.on('message', (m: { ok?: ClientResult; error?: string; phase?: 'loaded' }) => {
        if (m.phase === 'loaded') {
          loopDelay.enable();
          elu0 = performance.eventLoopUtilization();
        } else if (m.ok) resolve(m.ok);
        else reject(new Error(m.error));
      });
      worker.once('error', reject);
      worker.postMessage(job);
    });
    loopDelay.disable();
    const loop = { delayP99: loopDelay.percentile(99) / 1e6, delayMax: loopDelay.max / 1e6, busy: elu0 ? performance.eventLoopUtilization(elu0).utilization : Number.NaN };
    await worker.terminate();
    const threadJobs = s.analysisThreadJobs;
    await s.stop();
    const first = result.filters[pods[0]!.label]![0]!;
    return { result, holders, threadJobs, work: s.analysisWork.units - work0.units, first, firstCase: pods[0]!.label, feedMs, load, loop };
  };

  for (const cluster of opts.clusters) {
    type Acc = { result: ClientResult; holders: number; threadJobs: number; work: number; firsts: number[]; feedMs: number[]; loads: number[]; firstCase: string; loops: Array<{ delayP99: number; delayMax: number; busy: number }> };
    const acc = new Map<Variant, Acc>();
    for (let k = 0; k < opts.profile.starts; k++) {
      for (const v of variants) {
        const r = await runOnce(cluster, v);
        const a = acc.get(v);
        if (!a) {
          acc.set(v, { result: r.result, holders: r.holders, threadJobs: r.threadJobs, work: r.work, firsts: [r.first], feedMs: [r.feedMs], loads: [r.load], firstCase: r.firstCase, loops: [r.loop] });
          continue;
        }
        for (const [label, xs] of Object.entries(r.result.filters)) (a.result.filters[label] ??= []).push(...xs);
        for (const [label, xs] of Object.entries(r.result.statuses)) (a.result.statuses[label] ??= []).push(...xs);
        for (const f of ['healthzBaseline', 'healthzLoaded', 'ordinaryBaseline', 'ordinaryLoaded'] as const) a.result[f].push(...r.result[f]);
        (a.result as { healthzFailures: number }).healthzFailures += r.result.healthzFailures;
        a.threadJobs += r.threadJobs;
        a.work += r.work;
        a.firsts.push(r.first);
        a.feedMs.push(r.feedMs);
        a.loads.push(r.load);
        a.loops.push(r.loop);
      }
    }
    const firstMedians = new Map<boolean, number>();
    const healthzP99s = new Map<number, number>();
    for (const [{ feed, nice }, a] of acc) {
      const { result } = a;
      const feedText = !opts.profile.analysisThread ? '' : `, background feed ${feed ? 'on' : 'off'}, nice ${nice}`;
      const worst = Math.max(...Object.values(result.filters).map(max));
      const hz = { p50: quantile(result.healthzLoaded, 0.5), p99: quantile(result.healthzLoaded, 0.99), max: max(result.healthzLoaded) };
      const hzBase = { p50: quantile(result.healthzBaseline, 0.5), p99: quantile(result.healthzBaseline, 0.99), max: max(result.healthzBaseline) };
      const firstMedian = quantile(a.firsts, 0.5);
      firstMedians.set(feed, firstMedian);
      healthzP99s.set(nice, hz.p99);
      const feedDone = a.feedMs.filter((x) => Number.isFinite(x));
      out.push({ cluster, nodes: N, holders: a.holders, analysisThreadFeed: feed, analysisThreadNice: nice, starts: a.firsts.length, firstFilters: a.firsts, firstFilterMedian: firstMedian, feedCaughtUpMs: a.feedMs, loadAtStarts: a.loads, filters: result.filters, healthz: hz, healthzBaseline: hzBase, healthzSamples: result.healthzLoaded.length, ordinaryLoadedP99: quantile(result.ordinaryLoaded, 0.99), ordinaryBaselineP99: quantile(result.ordinaryBaseline, 0.99), analysisThreadJobs: a.threadJobs, workUnits: a.work, eventLoop: a.loops });
      lines.push(`cluster ${cluster}: ${N} nodes (${cluster === 'hostile' ? 'every node a case node, cases round-robin' : `${cases.length} case nodes among ordinary ones`}), ${a.holders} holder pods; ${opts.repetitions} filters per case and extender, ${a.firsts.length} extender(s), every node name in each; analysis thread ${opts.profile.analysisThread ? 'on' : 'off'}${feedText}, ${a.threadJobs} thread jobs, ${a.work} work units`);
      lines.push(
        `  first /filter of a fresh extender (${a.firstCase}, after ${opts.profile.baselineMs} ms of baseline): median ${firstMedian.toFixed(2)} max ${max(a.firsts).toFixed(2)} ms over ${a.firsts.length} (target <= ${FILTER_TARGET_MS} ms: ${firstMedian <= FILTER_TARGET_MS ? 'met' : 'MISSED'} by the median); ` +
          `load average at their starts ${Math.min(...a.loads).toFixed(2)}-${Math.max(...a.loads).toFixed(2)}` +
          (feed && opts.profile.analysisThread ? `; feed caught up ${feedDone.length ? `${quantile(feedDone, 0.5).toFixed(0)} ms (median) after start` : 'never before the end'}${feedDone.length < a.feedMs.length ? ` (${a.feedMs.length - feedDone.length} not before the end)` : ''}` : ''),
      );
      lines.push('  case                  HTTP     filter p50      max   (target: every filter <= 100 ms)');
      for (const [label, xs] of Object.entries(result.filters)) {
        const codes = [...new Set(result.statuses[label])].join(',');
        lines.push(`  ${label.padEnd(20)} ${codes.padStart(5)} ${f(quantile(xs, 0.5), 12)} ${f(max(xs))}   ${max(xs) <= FILTER_TARGET_MS ? 'met' : 'MISSED'}`);
      }
      lines.push(`  worst adversarial /filter: ${worst.toFixed(2)} ms (target <= ${FILTER_TARGET_MS} ms: ${worst <= FILTER_TARGET_MS ? 'met' : 'MISSED'})`);
      lines.push(
        `  /healthz while they run: ${result.healthzLoaded.length} answers, p50 ${hz.p50.toFixed(2)} p99 ${hz.p99.toFixed(2)} max ${hz.max.toFixed(2)} ms (target p99 < ${HEALTHZ_P99_TARGET_MS} ms: ${hz.p99 < HEALTHZ_P99_TARGET_MS ? 'met' : 'MISSED'}); ` +
          `alone (baseline, same run): ${result.healthzBaseline.length} answers, p50 ${hzBase.p50.toFixed(2)} p99 ${hzBase.p99.toFixed(2)} max ${hzBase.max.toFixed(2)} ms; ratio p99 ${(hz.p99 / hzBase.p99).toFixed(2)}x; non-200: ${result.healthzFailures}`,
      );
      lines.push(
        `  the extender's event loop while they run (per extender): delay p99 ${a.loops.map((l) => l.delayP99.toFixed(1)).join(', ')} ms, max ${a.loops.map((l) => l.delayMax.toFixed(1)).join(', ')} ms; busy ${a.loops.map((l) => `${(100 * l.busy).toFixed(0)}%`).join(', ')}`,
      );
      lines.push(
        `  ordinary pod /filter (no RT demand, every node): while they run p50 ${quantile(result.ordinaryLoaded, 0.5).toFixed(2)} p99 ${quantile(result.ordinaryLoaded, 0.99).toFixed(2)} ms (${result.ordinaryLoaded.length}); ` +
          `alone p50 ${quantile(result.ordinaryBaseline, 0.5).toFixed(2)} p99 ${quantile(result.ordinaryBaseline, 0.99).toFixed(2)} ms (${result.ordinaryBaseline.length})`,
      );
    }
    if (niceModes.length === 2 && feedModes.length === 1) lines.push(`  /healthz p99 while they run: analysis thread at nice 10 ${healthzP99s.get(10)!.toFixed(2)} ms, at nice 0 ${healthzP99s.get(0)!.toFixed(2)} ms (same run, extenders alternating)`);
    if (feedModes.length === 2 && niceModes.length === 1) lines.push(`  first /filter, median: background feed on ${firstMedians.get(true)!.toFixed(2)} ms, off ${firstMedians.get(false)!.toFixed(2)} ms (same run, extenders alternating): ${(firstMedians.get(false)! / firstMedians.get(true)!).toFixed(1)}x`);
  }
  if (opts.json) {
    console.log(JSON.stringify(out, null, 2));
    return;
  }
  console.log(`extender under adversarial RT inputs, node ${process.version}, ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), load average at the end ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  for (const l of lines) console.log(l);
}

if (isMainThread) {
  main().then(
    () => process.exit(0),
    (err: Error) => {
      console.error(`bench:extender-adversarial: ${benchFailure(err)}`);
      process.exit(1);
    },
  );
}
