#!/usr/bin/env -S npx tsx
/**
 * Controller benchmark (issue 3), `npm run bench:controller` — parts sync and rss need the testbed:
 * run them under the testbed lock:
 *   flock /tmp/ulysses-testbed.lock npm run bench:controller -- [--parts queue,sync|rss] [--backlog 500] [--rs 100]
 *       [--rss-nodes 1000 --rss-pods 10000] [--profile experiments/profiles/bench-controller-*.yaml]
 * (options: experiments/bench/options.ts)
 *
 * 1. `queue` (the WorkerPool alone, real timers, a 5 ms synthetic sync): a backlog of `--backlog`
 *    low-priority keys, then one high-priority key; per mode the high key's queueing delay (added ->
 *    its sync starts), with kcm's client limiter (20 qps / burst 30) gating the vanilla and
 *    multi-priority-async syncs as in the controller manager. Target (issue 3): < 5 ms in the
 *    periodic mode with 500 keys queued.
 * 2. `sync`, real syncs on the testbed (KWOK nodes): `--rs` low-priority ReplicaSets of one pod, then one
 *    high-criticality ReplicaSet, first with the vanilla kube-controller-manager, then with its
 *    ReplicaSet controller disabled and Ulysses' in each mode. Per run: throughput (pods created per
 *    second from the first ReplicaSet creation to the last pod), the high ReplicaSet's queueing delay
 *    (its informer event -> its first sync; Ulysses only) and its time to first pod, and the p50/p99
 *    sync runtime of Ulysses' ReplicaSet controller. Same qps limits (20/30) for kcm and Ulysses' vanilla.
 * 3. `rss` (heavy): resident memory of the controller manager *process* (all five
 *    controllers; profile `rssVariants`: compiled `dist` as `npm run start:controller-manager:dist`, `tsx`
 *    as `npm run start:controller-manager`, and without the cache projections) with `--rss-nodes`
 *    KWOK nodes and `--rss-pods` pods selected by 100 Services, once its informers synced and the
 *    Endpoints of every Service are written; read from its own /metrics
 *    (process_resident_memory_bytes, nodejs_heap_size_*). Target (issue 3): < 150 MB with 1000
 *    nodes and 10k pods.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod, type V1ReplicaSet } from '@kubernetes/client-node';
import * as testbed from '../testbed/testbed.ts';
import { pollUntil, startProcess, stopProcess, tailFile } from '../testbed/processes.ts';
import { apiRequest } from '../../core/kube.ts';
import { deployment, ensureNamespace } from '../workloads.ts';
import { KWOK_ANNOTATION } from '../testbed/kwok.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { ControllerManager, type SyncObservation } from '../../controller-manager/manager.ts';
import { PRIORITY_HIGH, PRIORITY_LOW, WorkerPool, type WorkerMode } from '../../controller-manager/queue/index.ts';
import { benchFailure, controllerBenchOptions, type ControllerRssVariant } from './options.ts';

const MODES: WorkerMode[] = ['vanilla', 'multi-priority-async', 'multi-priority-periodic'];

function quantile(samples: number[], p: number): number {
  if (samples.length === 0) return NaN;
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]!;
}
const f = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');

/** Part 1: the high key's queueing delay behind a backlog, per mode. */
async function queueBench(backlog: number, syncMs: number): Promise<Record<WorkerMode, number>> {
  const out = {} as Record<WorkerMode, number>;
  for (const mode of MODES) {
    let highAddedAt = 0;
    let highStartedAt = 0;
    let served = 0;
    const pool = new WorkerPool<string>({
      name: `bench-${mode}`,
      mode,
      workers: 5,
      periodMs: 100,
      highMinInterArrivalMs: 0,
      reconcile: async (key) => {
        if (key === 'high') highStartedAt = performance.now();
        served++;
        await new Promise((r) => setTimeout(r, syncMs));
      },
    });
    // silence the pool's info logs in the bench output
    for (let i = 0; i < backlog; i++) pool.queue.add(`low-${i}`, PRIORITY_LOW);
    pool.start();
    // steady state: the token bucket's burst is spent and the periodic workers are ticking
    await pollUntil('backlog being served', () => served >= 40 || (mode === 'multi-priority-periodic' && served >= 8), { timeoutMs: 60_000, intervalMs: 5 });
    highAddedAt = performance.now();
    pool.queue.add('high', PRIORITY_HIGH);
    await pollUntil(`high key served (${mode})`, () => highStartedAt > 0, { timeoutMs: 120_000, intervalMs: 1 });
    out[mode] = highStartedAt - highAddedAt;
    await pool.stop();
  }
  return out;
}

interface RunResult {
  name: string;
  podsPerSecond: number;
  highFirstPodMs: number;
  highQueueDelayMs?: number;
  syncP50Ms?: number;
  syncP99Ms?: number;
  syncs?: number;
}

function rsBody(ns: string, name: string, criticality: 'low' | 'high'): V1ReplicaSet {
  const d = deployment({ namespace: ns, name, replicas: 1, criticality, image: 'http-server' });
  const tpl = d.spec!.template;
  tpl.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
  tpl.spec!.nodeSelector = { type: 'kwok' };
  tpl.spec!.containers[0]!.readinessProbe = undefined;
  return { apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: { name, namespace: ns }, spec: { replicas: 1, selector: d.spec!.selector, template: tpl } };
}

/** One run: n low RSs then one high RS in a fresh namespace; waits for every pod. */
async function run(kc: KubeConfig, name: string, ns: string, n: number, cm?: ControllerManager, syncs?: SyncObservation[]): Promise<RunResult> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  await ensureNamespace(core, ns);
  const firstPod = new Map<string, number>();
  const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods` });
  watch.on('add', (p) => {
    const app = p.metadata!.labels!.app!;
    if (!firstPod.has(app)) firstPod.set(app, performance.now());
  });
  await watch.start();
  let highEnqueuedAt = 0;
  const onRs = (rs: V1ReplicaSet) => {
    if (rs.metadata?.namespace === ns && rs.metadata.name === 'high' && !highEnqueuedAt) highEnqueuedAt = performance.now();
  };
  cm?.informers.replicaSets.on('add', onRs);
  const from = syncs?.length ?? 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: n }, (_, i) => apps.createNamespacedReplicaSet({ namespace: ns, body: rsBody(ns, `low-${i}`, 'low') })));
  const highCreated = performance.now();
  await apps.createNamespacedReplicaSet({ namespace: ns, body: rsBody(ns, 'high', 'high') });
  await pollUntil(`${name}: ${n + 1} pods`, () => firstPod.size === n + 1, { timeoutMs: 300_000, intervalMs: 20 });
  const t1 = Math.max(...firstPod.values());
  watch.stop();
  cm?.informers.replicaSets.off('add', onRs);
  const result: RunResult = { name, podsPerSecond: ((n + 1) * 1000) / (t1 - t0), highFirstPodMs: firstPod.get('high')! - highCreated };
  if (syncs && cm) {
    const mine = syncs.slice(from).filter((s) => s.key.startsWith(`${ns}/`));
    const highSync = mine.find((s) => s.key === `${ns}/high`);
    result.highQueueDelayMs = highSync && highEnqueuedAt ? highSync.startedAt - highEnqueuedAt : NaN;
    result.syncP50Ms = quantile(mine.map((s) => s.durationMs), 0.5);
    result.syncP99Ms = quantile(mine.map((s) => s.durationMs), 0.99);
    result.syncs = mine.length;
  }
  // clean up so the next run starts from an idle cluster
  await apps.deleteCollectionNamespacedReplicaSet({ namespace: ns });
  await core.deleteCollectionNamespacedPod({ namespace: ns, gracePeriodSeconds: 0 });
  return result;
}

async function main(): Promise<void> {
  const o = controllerBenchOptions(process.argv.slice(2));
  const { syncMs, runDir } = o.profile;
  process.env.ULYSSES_LOG_LEVEL ??= 'warn';
  for (const part of o.parts) {
    if (part === 'queue') await queuePart(o.backlog, syncMs);
    else if (part === 'sync') await syncPart(o.rs, runDir);
    else await rssBench(runDir, o.rssNodes, o.rssPods, o.profile.rssVariants, o.profile.rssHeapSnapshot);
  }
}

async function queuePart(backlog: number, syncMs: number): Promise<void> {
  console.log(`# 1. queueing delay of one high-priority key behind ${backlog} low keys (WorkerPool, ${syncMs} ms syncs, 5 workers, T = 100 ms)`);
  const q = await queueBench(backlog, syncMs);
  for (const m of MODES) console.log(`${m.padEnd(26)} high-priority queueing delay ${f(q[m], 2).padStart(10)} ms`);
  console.log(`target: < 5 ms in multi-priority-periodic -> ${q['multi-priority-periodic'] < 5 ? 'met' : 'NOT met'}`);
}

async function syncPart(rs: number, runDir: string): Promise<void> {
  const results: RunResult[] = [];
  console.log(`\n# 2. ${rs} low + 1 high ReplicaSets of one pod on KWOK nodes (testbed, same qps limits 20/30)`);
  await testbed.down({ runDir, log: () => undefined });
  let state = await testbed.up({ runDir, kwokNodes: 2, log: () => undefined });
  try {
    results.push(await run(testbed.kubeConfigFor(state), 'kube-controller-manager', 'bench-kcm', rs));
  } finally {
    await testbed.down({ runDir, log: () => undefined });
  }
  state = await testbed.up({ runDir, kwokNodes: 2, controllers: '*,-replicaset-controller', log: () => undefined });
  const syncs: SyncObservation[] = [];
  const kc = testbed.kubeConfigFor(state);
  const cm = new ControllerManager({ kubeconfig: kc, controllers: ['replicaset'], observeSync: (e) => syncs.push(e) });
  try {
    await cm.start();
    for (const mode of MODES) {
      cm.setMode('replicaset', mode);
      results.push(await run(kc, `ulysses ${mode}`, `bench-${mode}`, rs, cm, syncs));
    }
  } finally {
    await cm.stop();
    await testbed.down({ runDir, log: () => undefined });
  }
  const kcm = results[0]!.podsPerSecond;
  console.log(`${'run'.padEnd(34)}${'pods/s'.padStart(8)}${'vs kcm'.padStart(8)}${'high 1st pod ms'.padStart(17)}${'high queue ms'.padStart(15)}${'sync p50 ms'.padStart(13)}${'sync p99 ms'.padStart(13)}${'syncs'.padStart(7)}`);
  for (const r of results) {
    console.log(
      `${r.name.padEnd(34)}${f(r.podsPerSecond).padStart(8)}${f(r.podsPerSecond / kcm, 2).padStart(8)}${f(r.highFirstPodMs, 0).padStart(17)}${f(r.highQueueDelayMs ?? NaN, 2).padStart(15)}${f(r.syncP50Ms ?? NaN, 2).padStart(13)}${f(r.syncP99Ms ?? NaN, 2).padStart(13)}${String(r.syncs ?? '-').padStart(7)}`,
    );
  }
  const vanilla = results.find((r) => r.name === 'ulysses vanilla')!;
  const ratio = vanilla.podsPerSecond / kcm;
  console.log(`target: vanilla-mode throughput within 10% of kube-controller-manager -> ratio ${f(ratio, 3)} ${Math.abs(ratio - 1) <= 0.1 ? 'met' : 'NOT met'}`);
}

/**
 * How the controller manager process of part 3 is started and configured. `dist` and `tsx` are the
 * npm scripts start:controller-manager:dist / start:controller-manager (V8 --optimize-for-size,
 * glibc MALLOC_ARENA_MAX=2); the others take one of those settings away.
 */
const DIST = ['--enable-source-maps', 'dist/controller-manager/main.js'];
const TSX = ['--import', 'tsx', 'controller-manager/main.ts'];
const TUNED = { args: ['--optimize-for-size'], env: { MALLOC_ARENA_MAX: '2' } };
const RSS_VARIANTS: Record<ControllerRssVariant, { args: string[]; config?: string; env?: Record<string, string> }> = {
  // `npm run start:controller-manager:dist` (compiled by `npm run build`)
  dist: { args: [...TUNED.args, ...DIST], env: TUNED.env },
  // `npm run start:controller-manager` (tsx loader in the process)
  tsx: { args: [...TUNED.args, ...TSX], env: TUNED.env },
  // compiled, V8 and glibc defaults
  'dist-default-gc': { args: DIST },
  // compiled, --optimize-for-size, default malloc arenas (8 per core)
  'dist-no-arena-limit': { args: [...TUNED.args, ...DIST] },
  // compiled, V8 defaults but semi-spaces of at most 2 MiB instead of 16
  'dist-semi2': { args: ['--max-semi-space-size=2', ...DIST] },
  // compiled and tuned, pods and nodes cached whole (minus managedFields): what the projections save
  'dist-no-projection': { args: [...TUNED.args, ...DIST], env: TUNED.env, config: 'cacheProjection: false\n' },
  // the first measurement of issue 3: tsx, V8 defaults, whole objects with managedFields
  'tsx-no-strip': { args: TSX, config: 'cacheProjection: false\nstripManagedFields: false\n' },
};


interface MemorySample {
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
}

function memoryFromMetrics(text: string): MemorySample {
  const v = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? NaN);
  return { rss: v('process_resident_memory_bytes'), heapUsed: v('nodejs_heap_size_used_bytes'), heapTotal: v('nodejs_heap_size_total_bytes'), external: v('nodejs_external_memory_bytes') };
}

/** Part 3: RSS of the controller-manager process with many nodes and pods. */
async function rssBench(runDir: string, nodes: number, pods: number, variants: ControllerRssVariant[], heapSnapshot: boolean): Promise<void> {
  const services = 100;
  const repo = fileURLToPath(new URL('../..', import.meta.url));
  if (variants.some((v) => v.startsWith('dist'))) {
    execFileSync('npx', ['tsc', '-p', 'tsconfig.build.json'], { cwd: repo, stdio: 'inherit' });
  }
  console.log(`# 3. controller-manager process RSS with ${nodes} KWOK nodes, ${pods} pods, ${services} Services (${variants.join(', ')})`);
  await testbed.down({ runDir, log: () => undefined });
  const t0 = performance.now();
  const state = await testbed.up({ runDir, realNodes: 0, kwokNodes: nodes, controllers: '*,-replicaset-controller,-deployment-controller,-endpoints-controller,-endpointslice-controller,-taint-eviction-controller', log: () => undefined });
  console.log(`testbed with ${nodes} KWOK nodes up in ${f((performance.now() - t0) / 1000)} s`);
  const kc = testbed.kubeConfigFor(state);
  const core = kc.makeApiClient(CoreV1Api);
  const ns = 'rss';
  let proc: ReturnType<typeof startProcess> | undefined;
  const rows: Array<{ variant: ControllerRssVariant; mem: MemorySample; settled: MemorySample; syncS: number; endpointsS: number }> = [];
  try {
    await ensureNamespace(core, ns);
    for (let k = 0; k < services; k++) {
      await core.createNamespacedService({ namespace: ns, body: { metadata: { name: `svc-${k}` }, spec: { selector: { app: `rss-${k}` }, ports: [{ port: 80, targetPort: 8080 as never }] } } });
    }
    const t1 = performance.now();
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < pods; i = next++) {
        await apiRequest(kc, 'POST', `/api/v1/namespaces/${ns}/pods`, {
          body: {
            apiVersion: 'v1',
            kind: 'Pod',
            metadata: { name: `p-${i}`, labels: { app: `rss-${i % services}`, 'ulysses.io/criticality': 'low' } },
            spec: {
              nodeName: state.kwokNodes[i % state.kwokNodes.length],
              tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
              containers: [{ name: 'c', image: 'ulysses.local/http-server:1', imagePullPolicy: 'Never', ports: [{ containerPort: 8080 }] }],
            },
          },
        });
      }
    };
    await Promise.all(Array.from({ length: 32 }, worker));
    console.log(`${pods} pods created in ${f((performance.now() - t1) / 1000)} s`);
    const want = pods / services;
    for (const variant of variants) {
      try {
        // every variant writes the Endpoints and EndpointSlices of the 100 Services itself
        await apiRequest(kc, 'DELETE', `/api/v1/namespaces/${ns}/endpoints`);
        await apiRequest(kc, 'DELETE', `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`);
        const logFile = join(runDir, 'logs', `cm-rss-${variant}.log`);
        const cfgFile = join(runDir, `cm-rss-${variant}.yaml`);
        const spec = RSS_VARIANTS[variant]!;
        writeFileSync(logFile, ''); // a log of an earlier run would answer the polls below
        writeFileSync(cfgFile, spec.config ?? '{}\n');
        const t2 = performance.now();
        proc = startProcess({
          name: 'cm-rss',
          cmd: 'node',
          args: [...spec.args, '--kubeconfig', state.kubeconfig, '--config', cfgFile, '--leader-elect', 'false', '--metrics-port', '0'],
          logFile,
          env: { ULYSSES_LOG_LEVEL: 'info', ...spec.env, ...(heapSnapshot ? { NODE_OPTIONS: '--heapsnapshot-signal=SIGUSR2' } : {}) },
        });
        await pollUntil('controller manager started', () => readFileSync(logFile, 'utf8').includes('controller manager started'), { timeoutMs: 300_000, intervalMs: 200 });
        const syncS = (performance.now() - t2) / 1000;
        const port = /"metricsPort":(\d+)/.exec(readFileSync(logFile, 'utf8'))![1];
        await pollUntil('Endpoints of every Service written', async () => {
          const list = await apiRequest<{ items: { subsets?: { addresses?: unknown[]; notReadyAddresses?: unknown[] }[] }[] }>(kc, 'GET', `/api/v1/namespaces/${ns}/endpoints`);
          return list.items.length === services && list.items.every((e) => (e.subsets ?? []).reduce((n, s) => n + (s.addresses?.length ?? 0) + (s.notReadyAddresses?.length ?? 0), 0) === want);
        }, { timeoutMs: 600_000, intervalMs: 2000 });
        const endpointsS = (performance.now() - t2) / 1000;
        const mem: MemorySample = { rss: 0, heapUsed: 0, heapTotal: 0, external: 0 };
        for (let i = 0; i < 5; i++) {
          await new Promise((r) => setTimeout(r, 2000));
          const m = memoryFromMetrics(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
          for (const k of Object.keys(mem) as (keyof MemorySample)[]) mem[k] = Math.max(mem[k], m[k]);
        }
        // settled: a minute after the last write, once V8's memory reducer had its chance
        const settled: MemorySample = { rss: 0, heapUsed: 0, heapTotal: 0, external: 0 };
        await new Promise((r) => setTimeout(r, Math.max(0, endpointsS * 1000 + 60_000 - (performance.now() - t2))));
        for (let i = 0; i < 3; i++) {
          const m = memoryFromMetrics(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
          for (const k of Object.keys(settled) as (keyof MemorySample)[]) settled[k] = Math.max(settled[k], m[k]);
          await new Promise((r) => setTimeout(r, 2000));
        }
        if (heapSnapshot) {
          // node writes Heap.<date>.<pid>.<n>.heapsnapshot into its cwd
          process.kill(proc.pid, 'SIGUSR2');
          console.log(`${variant}: heap snapshot requested (pid ${proc.pid}, written to ${repo})`);
          await new Promise((r) => setTimeout(r, 20_000));
        }
        const mib = (x: number) => f(x / 2 ** 20);
        console.log(`${variant}: informers synced ${f(syncS)} s, Endpoints in place ${f(endpointsS)} s after start; RSS ${mib(mem.rss)} MiB, heap used ${mib(mem.heapUsed)} / total ${mib(mem.heapTotal)} MiB, external ${mib(mem.external)} MiB (max of 5 scrapes over the next 10 s); 60 s later RSS ${mib(settled.rss)} MiB, heap used ${mib(settled.heapUsed)} / total ${mib(settled.heapTotal)} MiB`);
        rows.push({ variant, mem, settled, syncS, endpointsS });
      } catch (err) {
        console.log(`${variant}: FAILED: ${(err as Error).message}${proc ? `\n${tailFile(join(runDir, 'logs', `cm-rss-${variant}.log`), 5)}` : ''}`);
      }
      if (proc) await stopProcess(proc.pid, 5000);
      proc = undefined;
    }
  } finally {
    if (proc) await stopProcess(proc.pid, 5000);
    await testbed.down({ runDir, log: () => undefined });
  }
  const mib = (x: number) => f(x / 2 ** 20);
  console.log(`\n${'variant'.padEnd(24)}${'nodes'.padStart(6)}${'pods'.padStart(7)}${'RSS MiB'.padStart(9)}${'heap used'.padStart(11)}${'heap total'.padStart(12)}${'external'.padStart(10)}${'RSS +60s'.padStart(10)}${'heap +60s'.padStart(11)}${'synced s'.padStart(10)}${'endpoints s'.padStart(13)}  target < 150 MB`);
  for (const r of rows) {
    console.log(
      `${r.variant.padEnd(24)}${String(nodes).padStart(6)}${String(pods).padStart(7)}${mib(r.mem.rss).padStart(9)}${mib(r.mem.heapUsed).padStart(11)}${mib(r.mem.heapTotal).padStart(12)}${mib(r.mem.external).padStart(10)}${mib(r.settled.rss).padStart(10)}${mib(r.settled.heapUsed).padStart(11)}${f(r.syncS).padStart(10)}${f(r.endpointsS).padStart(13)}  ${Math.max(r.mem.rss, r.settled.rss) < 150e6 ? 'met' : 'NOT met'}`,
    );
  }
}

main().catch((err: Error) => {
  console.error(`bench:controller: ${benchFailure(err)}`);
  process.exit(1);
});
