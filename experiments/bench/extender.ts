#!/usr/bin/env -S npx tsx
/**
 * `npm run bench:extender`: latency of one scheduling round trip as kube-scheduler makes it with a
 * nodeCacheCapable extender — POST /filter with all node NAMES, then POST /prioritize with the nodes
 * that passed — over real HTTP on loopback, for 100 and 1000 nodes. Cluster per size N: 10%
 * deferrable-server nodes (2 cores), 10% budget/period nodes (4 cores), 5% EDF nodes (2 cores), 20%
 * of the nodes on the TDMA network (some of them budget/period nodes), every node with an assurance
 * vector; 5 plain pods per node, 1-2 RT pods per RT node (cores reserved), 1-slot TDMA pods holding
 * a third of the slots. Pods scheduled: a critical pod with a threshold assurance policy, a
 * deferrable-server RT pod, a TDMA pod, a budget/period RT pod that also needs 2 TDMA slots — each
 * with a fresh UID.
 *
 * Every pod's UID is a random UUID v4 (seeded: the same in every run), as the apiserver makes them.
 * Where a new deferrable server and an existing one have the same period, their rate-monotonic tie
 * is broken by UID (deferrable-server.ts serverPriorityOrder), so a new pod ranks among a node's
 * servers as a real one would: above some, below others, and on some nodes it is the new server
 * that misses its deadline (a rejection naming the new pod, server.ts).
 *
 * Two modes:
 * - in memory (default): the node/pod cache (the ClusterState the informers feed) is filled
 *   directly;
 * - `--kwok`: per size, a control-plane-only testbed (experiments/testbed) with N KWOK nodes; the
 *   same cluster is made through the API (labels/annotations patched onto the KWOK nodes, pods
 *   created with spec.nodeName, so kwok runs them and keeps updating their status), the extender is
 *   started exactly as its process starts it (main.ts startExtender: config file, kubeconfig, nodes
 *   and pods informers, runtime config) against the testbed's apiserver, and the rows run once its
 *   state holds every node role and every pod, and every pod is Ready (read from the API; or all
 *   but a few kwok leaves not Ready, their count unchanged for 2 minutes: printed with the rows). The
 *   testbed is taken down at the end of each size, also on errors and on SIGINT/SIGTERM. Ports are fixed: run it under the testbed lock
 *   (`flock /tmp/ulysses-testbed.lock npm run bench:extender -- --kwok ...`). 1000 KWOK nodes need
 *   a few minutes to become Ready (profile `nodesReadyTimeoutMs`, default testbed.ts's).
 *   The measured part (extender, client, no-op extender, churn) runs in a child process of its own
 *   that never loads the testbed code or client-node's generated API: in one process with them the
 *   extender's GC pauses were most of its p99 (see kwokSize).
 *   Profile `pinCpus: true`: the testbed's processes (and the bench's parent) on CPU 0 (testbed `pinCpus`), the
 *   measuring process on CPU 1, so the extender does not share its CPU with the control plane it is
 *   fed by; right before the rows its main thread (and the client worker) stay on CPU 1 and its
 *   other threads (V8's GC and compiler helpers, libuv) move to CPU 0 (pinMainThreadApart): on CPU
 *   1 with the main thread they preempted it 2-8 times in each of the slowest 1% of rounds.
 *
 * The scheduler's side of a round (extender-client.ts) runs on the measuring process's event loop, with
 * the extender; profile `client: worker` runs it in a worker thread instead (its JSON and HTTP work and its
 * garbage off the extender's loop and heap, as kube-scheduler's are). On a 2-vCPU machine that is no
 * better: on CPU 0 the client's timing measures the testbed's load, on CPU 1 the client thread
 * preempts the extender's main thread; it is the setup for a machine with a third CPU for the
 * client (figures: scheduler-plugins/README.md). `client: go` makes the rounds with
 * kube-scheduler's own extender client (k8s.io/kubernetes pkg/scheduler HTTPExtender, the release
 * the testbed runs) in a Go process of its own (extender-client-go/main.go, built on first use);
 * `clientCpus` places it (taskset). The same holds for it: on CPU 0 the testbed switches it out
 * several times per round, on CPU 1 it preempts the extender; on 2 vCPUs no separate client beats
 * the loop.
 *
 * Between two rounds (not timed) profile `churn` nodes change the way the binding of the previous pod
 * changes its node: a new plain pod bound to the node (and the node's previous churn pod deleted).
 * A pod starting to hold capacity is a change the analyses read (state.ts bumps the node version
 * only for those; a status update does not), so each changed node has every verdict recomputed in
 * the next round. Default 1, the node the previous pod was bound to in a real cluster; `churn: all`
 * changes every node each round (every verdict recomputed: the cold path, in-memory mode only);
 * `churn: 0` none. In KWOK mode the change is an API call (create with spec.nodeName, delete with
 * grace period 0) and the next round starts once the extender's informers delivered it; kwok's status
 * updates of the churn pods arrive during later rounds (real churn, which must not invalidate anything).
 * Baseline in the same run: a no-op fastify extender (accepts every node, scores 0): the HTTP+JSON
 * floor. Target (issue 26, replacing issue 4's absolute 2 ms / 10 ms): the round trip's p99 at most
 * 1.3x the no-op extender's p99 of the same run, at 100 and at 1000 nodes (printed per row). "recomputed" = node
 * verdicts the extender computed per round (filter + prioritize; the rest came from its cache).
 *
 *   npm run bench:extender -- [--iterations 400] [--sizes 100,1000] [--kinds a,b] [--kwok] [--json] [--profile FILE]
 * (`--help`: the options; the profile's fields — churn, client, CPU pinning, SCHED_FIFO, informers,
 * per-round output... — experiments/bench/options.ts, examples experiments/profiles/bench-extender-*.yaml.)
 */
import { PerformanceObserver, constants as perfConstants } from 'node:perf_hooks';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Fastify, { type FastifyInstance } from 'fastify';
import os from 'node:os';
import type { V1Node, V1Pod, V1Toleration } from '@kubernetes/client-node';
import type { KubeClient } from '../../core/kube.ts';
import { prng } from '../../core/prng.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { reservationRequest, RT_ANNOTATION, TDMA_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import { MachineCpuAudit, describeMachine, type RepCpu } from '../harness/cpu-window.ts';
import { GoRoundClient, RoundClient, buildGoClient, preemptions, round, type RoundRunner } from './extender-client.ts';
import { silentLogger } from '../../core/logging.ts';
import { onShutdownSignal } from '../../core/shutdown.ts';
import { pinMainThreadApart, pollUntil } from '../testbed/processes.ts';
import { K8S_VERSION } from '../testbed/binaries.ts';
import PQueue from 'p-queue';
import { benchFailure, extenderBenchOptions, type ExtenderPodKind } from './options.ts';
import { bootstrapQuantileRatio, quantile } from '../harness/stats.ts';

const args = process.argv.slice(2);
const OPTS = (() => {
  try {
    return extenderBenchOptions(args);
  } catch (err) {
    console.error(`bench:extender: ${benchFailure(err as Error)}`);
    process.exit(1);
  }
})();
/** The run conditions: the profile's fields, the settled defaults for those it leaves out (options.ts). */
const P = OPTS.profile;
const ITERATIONS = OPTS.iterations;
/** Where the scheduler's side of a round runs: the extender's own event loop (default), a worker thread, or kube-scheduler's Go client in a process of its own (extender-client.ts). */
const CLIENT = P.client;
/** `client: go`: the CPUs the Go client runs on (taskset; default: this process's). */
const CLIENT_CPUS = P.clientCpus;
/** `client: go`: its garbage collected after each round's reply, never during a round (extender-client-go/main.go -gc-between-rounds). */
const CLIENT_GC_BETWEEN_ROUNDS = P.clientGcBetweenRounds;
/** The worker-thread or Go client (extender-client.ts) of this process, unless CLIENT is 'loop'. */
let roundClient: RoundRunner | undefined;
const SIZES = OPTS.sizes;
const JSON_OUT = OPTS.json;
const KINDS: readonly string[] = OPTS.kinds;
const CHURN = P.churn;
/**
 * The no-op extender's rows under the same churn as the extender's (an API change between two of its
 * rounds too, waited for in the extender's state): the HTTP+JSON floor of a process that also
 * receives the cluster's changes. Without it the no-op rounds run back to back, warm.
 */
const NOOP_CHURN = P.noopChurn;
/** Every timed round of every row written to DIR/<nodes>-<pod kind>-<extender|noop>.json (round trip, server time, GC, events, preemptions). */
const ROUNDS_DIR = P.roundsDir;
/**
 * KWOK mode: who makes the churn's API calls. `parent` (default): the bench's parent process, like
 * any other client of the cluster (in a real cluster the extender's process only receives the watch
 * events of a binding, it does not make the API calls); `measuring`: the measuring process itself
 * (its TLS, JSON and HTTP work between two rounds then lands in the extender's process).
 */
const CHURN_BY = P.churnBy;
/**
 * KWOK mode: where the extender's informers run. `thread` (default, as the extender runs them): in
 * a worker thread (core/informer-thread.ts), which hands the extender's loop only the changes of what
 * it reads; `loop`: on the extender's event loop, every watch event parsed there (for comparison).
 */
const INFORMERS = P.informers;
/**
 * In-memory mode: this many ms of idle after each round (both rows), as the KWOK mode's churn
 * through the API leaves the extender idle for ~35 ms between two rounds. It shows what an idle gap
 * alone does to the next round on this machine, without the API, the watch or the testbed.
 */
const IDLE_MS = P.idleMs;
const KWOK = OPTS.kwok;
const PIN_CPUS = P.pinCpus;
/**
 * With pinCpus: the measuring process's main thread (extender and no-op extender) under
 * SCHED_FIFO priority 1 (chrt). A client on its CPU (`client: go`, on CPU 1 by default) then runs
 * only while the extender waits for a request, never in the middle of its handling: on a 2-vCPU
 * machine, the nearest to a CPU of the client's own.
 */
const SCHED_FIFO = P.schedFifo;
/**
 * With schedFifo and `client: go`: every thread of the Go client under SCHED_FIFO priority 1 as
 * well, the extender's priority. On their shared CPU neither preempts the other: each runs until it
 * waits (the client for the reply, the extender for the next request), and no other process's
 * thread preempts either. On a 2-vCPU machine this stands in for the client's own CPU. It differs
 * from one in two ways: the client's work after it sent a request (parking its goroutine) delays
 * the extender's start instead of overlapping with it, and the two share one CPU's caches.
 */
const CLIENT_SCHED_FIFO = P.clientSchedFifo;
/** SCHED_FIFO priority 1 (chrt) for the process's main thread or all its threads (later ones inherit it). */
const schedFifo = (pid: number, which: 'main thread' | 'all threads') =>
  execFileSync('chrt', [...(which === 'all threads' ? ['-a'] : []), '-f', '-p', '1', String(pid)], { stdio: 'ignore' });

const quiet = silentLogger();

const NS = 'bench';
/** Extender config of both modes (the TDMA network of the cluster). */
const EXTENDER_CONFIG = { tdmaNetworks: { bus0: { cycleUs: 100_000, slotUs: 1000 } } };

interface ShapeNode {
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly annotations: Record<string, string>;
}
interface ShapePod {
  readonly name: string;
  readonly node: string;
  readonly annotations: Record<string, string>;
}

/** The cluster of one size (header): node roles and the pods holding capacity on them, deterministic for `rnd`. */
function clusterShape(names: readonly string[], rnd: () => number): { nodes: ShapeNode[]; pods: ShapePod[] } {
  const slotsTotal = 100;
  let slot = 0;
  const nodes: ShapeNode[] = [];
  const pods: ShapePod[] = [];
  names.forEach((name, i) => {
    const labels: Record<string, string> = {};
    const annotations: Record<string, string> = {
      'ulysses.io/assurance': JSON.stringify({ cpu: Math.floor(rnd() * 5), memory: Math.floor(rnd() * 5), network: Math.floor(rnd() * 4) }),
    };
    const r = i % 20;
    if (r < 2) {
      labels['ulysses.io/rt-scheduler'] = 'deferrable-server';
      annotations['ulysses.io/rt-capacity'] = '{"cores":2}';
    } else if (r < 4) {
      labels['ulysses.io/rt-scheduler'] = 'budget-period';
      annotations['ulysses.io/rt-capacity'] = '{"cores":4}';
    } else if (r < 5) {
      labels['ulysses.io/rt-scheduler'] = 'edf';
      annotations['ulysses.io/rt-capacity'] = '{"cores":2}';
    }
    if (i % 5 === 2) labels['ulysses.io/tdma-network'] = 'bus0';
    nodes.push({ name, labels, annotations });
    for (let k = 0; k < 5; k++) pods.push({ name: `${name}-plain-${k}`, node: name, annotations: {} });
    const kind = labels['ulysses.io/rt-scheduler'];
    const rtPods = kind ? 1 + Math.floor(rnd() * 2) : 0;
    for (let k = 0; k < rtPods; k++) {
      const rt =
        kind === 'deferrable-server'
          ? { server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 500, periodUs: 10000 }, { wcetUs: 300, periodUs: 20000 }] }
          : kind === 'budget-period'
            ? { reservation: { runtimeUs: 3000, periodUs: 10000, cpus: 1 } }
            : { tasks: [{ wcetUs: 1000, periodUs: 10000 }] };
      pods.push({ name: `${name}-rt-${k}`, node: name, annotations: { 'ulysses.io/rt': JSON.stringify(rt), 'ulysses.io/rt-cores': JSON.stringify([k % 2]) } });
    }
    if (labels['ulysses.io/tdma-network'] && slot < slotsTotal / 3) {
      pods.push({ name: `${name}-tdma`, node: name, annotations: { 'ulysses.io/tdma': '{"network":"bus0","slots":1}', 'ulysses.io/tdma-slots': JSON.stringify([slot++]), [RESERVED_NODE_ANNOTATION]: name } });
    }
  });
  return { nodes, pods };
}

/**
 * One change of a node between two rounds, as the binding of the previous pod makes it: a new plain
 * pod bound to the node (and the pod this did on the node last time deleted, so the cluster keeps
 * its size). A pod starting to hold capacity is a change the analyses read: the node's version is
 * bumped and every verdict cached for it is recomputed in the next round.
 */
type Touch = (node: string) => void | Promise<void>;

/** One churn step through the API (KWOK mode): a pod created on `create.node`, the node's previous churn pod deleted. */
interface ChurnRequest {
  create: { name: string; node: string };
  delete?: string;
}

/** A plain pod bound to `nodeName` (kwok runs it and reports its status). */
function kwokPodBody(name: string, nodeName: string, annotations: Record<string, string>, toleration: V1Toleration): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: NS, annotations, labels: { app: 'bench-extender' } },
    spec: { nodeName, containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never' }], tolerations: [{ ...toleration }] },
  };
}

async function churnThroughApi(client: KubeClient, req: ChurnRequest, toleration: V1Toleration): Promise<void> {
  await Promise.all([
    client.post(`/api/v1/namespaces/${NS}/pods`, kwokPodBody(req.create.name, req.create.node, {}, toleration)),
    req.delete ? client.request('DELETE', `/api/v1/namespaces/${NS}/pods/${req.delete}`, { query: { gracePeriodSeconds: 0 } }) : undefined,
  ]);
}

/** A pod UID as the apiserver makes them (a random UUID v4), drawn from `rnd` (see header). */
function apiserverUid(rnd: () => number): string {
  const hex = (digits: number) => Array.from({ length: digits }, () => Math.floor(rnd() * 16).toString(16)).join('');
  return `${hex(8)}-${hex(4)}-4${hex(3)}-${'89ab'[Math.floor(rnd() * 4)]}${hex(3)}-${hex(12)}`;
}

/** In-memory mode: fills the extender's ClusterState directly (as its informers would). */
function populateInMemory(server: ExtenderServer, shape: ReturnType<typeof clusterShape>, rnd: () => number): Touch {
  let rv = 1;
  const podObject = (name: string, nodeName: string, annotations: Record<string, string>) =>
    ({
      metadata: { name, namespace: NS, uid: apiserverUid(rnd), annotations, resourceVersion: String(rv++) },
      spec: { nodeName, containers: [{ name: 'c' }] },
      status: { phase: 'Running' },
    }) as V1Pod;
  for (const n of shape.nodes) server.state.upsertNode({ metadata: { name: n.name, labels: n.labels, annotations: n.annotations, resourceVersion: String(rv++) } } as V1Node);
  for (const p of shape.pods) server.state.upsertPod(podObject(p.name, p.node, p.annotations));
  const last = new Map<string, V1Pod>();
  let seq = 0;
  return (node) => {
    const prev = last.get(node);
    if (prev) server.state.deletePod(prev);
    const p = podObject(`${node}-churn-${seq++}`, node, {});
    server.state.upsertPod(p);
    last.set(node, p);
  };
}

const POD_KINDS: Record<ExtenderPodKind, Record<string, string>> = {
  'critical+assurance': { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2,"memory":1}}' },
  'rt deferrable-server': { 'ulysses.io/rt': JSON.stringify({ server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 800, periodUs: 10000, priority: 1 }, { wcetUs: 400, periodUs: 20000, priority: 2 }] }) },
  tdma: { 'ulysses.io/tdma': '{"network":"bus0","slots":2,"maxGapUs":60000}' },
  'rt budget-period+tdma': { 'ulysses.io/rt': '{"reservation":{"runtimeUs":2000,"periodUs":10000,"cpus":1}}', 'ulysses.io/tdma': '{"network":"bus0","slots":2}' },
};

/**
 * Main-thread GC pauses of this process (PerformanceObserver 'gc' entries: start, duration), kept
 * for the tail attribution of each row; and the informer events the extender's state received
 * (KWOK mode), so a slow round can be matched with what else this event loop did during it.
 */
const gcPauses: Array<{ start: number; end: number; major: boolean }> = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as { detail?: { kind?: number } }).detail?.kind;
    gcPauses.push({ start: e.startTime, end: e.startTime + e.duration, major: kind === perfConstants.NODE_PERFORMANCE_GC_MAJOR });
  }
}).observe({ entryTypes: ['gc'] });
const informerEvents = { pods: 0, nodes: 0 };
const informerEventCount = () => informerEvents.pods + informerEvents.nodes;

/** GC pause time (ms) inside [t0, t1], and the pauses there: mark-compacts (major) and the others (scavenges, incremental marking steps). */
function gcWithin(t0: number, t1: number): { ms: number; major: number; other: number } {
  const r = { ms: 0, major: 0, other: 0 };
  for (let i = gcPauses.length - 1; i >= 0; i--) {
    const g = gcPauses[i]!;
    if (g.end < t0) break;
    if (g.start > t1) continue;
    r.ms += Math.max(0, Math.min(g.end, t1) - Math.max(g.start, t0));
    if (g.major) r.major++;
    else r.other++;
  }
  return r;
}

/**
 * What the slowest 1% of a row's rounds had that the others had not: mean GC pause, informer events
 * and involuntary context switches of the main thread inside the round, for the slowest 1% and for
 * all rounds.
 */
interface TailAttribution {
  rounds: number;
  tailGcMs: number;
  allGcMs: number;
  /** GC pauses per round: mark-compacts, and the others (scavenges, incremental marking) */
  tailMajorGcs: number;
  allMajorGcs: number;
  tailOtherGcs: number;
  allOtherGcs: number;
  tailEvents: number;
  allEvents: number;
  tailPreempted: number;
  allPreempted: number;
  tailClientPreempted: number;
  allClientPreempted: number;
  /**
   * The machine during the timed rounds (/proc at the first and after the last): hypervisor steal
   * (invisible to the context-switch counts, it delays any thread) and other work's CPU, which makes
   * a row's tail someone else's (a build, a test run).
   */
  machine: RepCpu | null;
}
interface RoundTrace {
  ms: number;
  /** the extender's handler time of the round's two requests */
  serverMs: number;
  gcMs: number;
  majorGcs: number;
  otherGcs: number;
  events: number;
  preempted: number;
  clientPreempted: number;
}
function attributeTail(rounds: RoundTrace[], machine: RepCpu | null): TailAttribution {
  const mean = (xs: RoundTrace[], f: (r: RoundTrace) => number) => xs.reduce((n, r) => n + f(r), 0) / Math.max(1, xs.length);
  const tail = [...rounds].sort((a, b) => b.ms - a.ms).slice(0, Math.max(1, Math.ceil(rounds.length / 100)));
  return {
    rounds: tail.length,
    tailGcMs: mean(tail, (r) => r.gcMs),
    allGcMs: mean(rounds, (r) => r.gcMs),
    tailMajorGcs: mean(tail, (r) => r.majorGcs),
    allMajorGcs: mean(rounds, (r) => r.majorGcs),
    tailOtherGcs: mean(tail, (r) => r.otherGcs),
    allOtherGcs: mean(rounds, (r) => r.otherGcs),
    tailEvents: mean(tail, (r) => r.events),
    allEvents: mean(rounds, (r) => r.events),
    tailPreempted: mean(tail, (r) => r.preempted),
    allPreempted: mean(rounds, (r) => r.preempted),
    tailClientPreempted: mean(tail, (r) => r.clientPreempted),
    allClientPreempted: mean(rounds, (r) => r.clientPreempted),
    machine,
  };
}

/** Issue 26: the extender's round-trip p99 at most this multiple of the no-op extender's p99 in the same run. */
const P99_RATIO_TARGET = 1.3;

/** Server-side handler time (fastify reply.elapsedTime) of the requests since the last reset. */
const serverTime = { ms: 0 };
function instrument(app: FastifyInstance) {
  app.addHook('onResponse', async (_req, reply) => {
    serverTime.ms += reply.elapsedTime;
  });
}

async function noopExtender() {
  const app = Fastify({ logger: false, bodyLimit: 16 << 20 });
  instrument(app);
  app.post('/filter', async (req) => {
    const a = req.body as { NodeNames: string[] };
    return { NodeNames: a.NodeNames, FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: '' };
  });
  app.post('/prioritize', async (req) => (req.body as { NodeNames: string[] }).NodeNames.map((Host) => ({ Host, Score: 0 })));
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}` };
}

interface Row {
  nodes: number;
  pod: string;
  feasible: number;
  p50Ms: number;
  p99Ms: number;
  serverP50Ms: number;
  serverP99Ms: number;
  noopP50Ms: number;
  noopP99Ms: number;
  /** the no-op's handler time (its JSON parse and answer), as serverP50Ms is the extender's */
  noopServerP50Ms: number;
  /** 90% bootstrap interval of p99 / no-op p99 (the rounds of both rows resampled): a ratio whose interval reaches across the target is inconclusive */
  p99RatioInterval: [number, number] | null;
  /** Node verdicts computed (not answered from the cache) per timed round, filter + prioritize. */
  recomputedPerRound: number;
  /** The slowest 1% of the extender's (and the no-op's) rounds vs all of them: GC pauses, informer events, preemptions inside. */
  tail: TailAttribution;
  noopTail: TailAttribution;
}

/** What happened around the rows of one size (KWOK mode: setup times, informer events, load). */
interface SizeNote {
  nodes: number;
  lines: string[];
}

async function measure(
  url: string,
  pod: (i: number) => V1Pod,
  names: string[],
  iterations: number,
  churn: (round: number) => void | Promise<void> = () => undefined,
  recomputed: () => number = () => 0,
  label?: string,
): Promise<{ lat: number[]; server: number[]; feasible: number; recomputedPerRound: number; tail: TailAttribution }> {
  const lat: number[] = [];
  const traces: RoundTrace[] = [];
  const server: number[] = [];
  let feasible = 0;
  let misses = 0;
  const audit = new MachineCpuAudit();
  for (let i = -Math.min(50, iterations); i < iterations; i++) {
    if (i === 0) audit.arm();
    const p = pod(i);
    const m0 = recomputed();
    const e0 = informerEventCount();
    const c0 = preemptions();
    serverTime.ms = 0;
    const r = roundClient ? await roundClient.round(url, p, names) : await round(url, p, names);
    const c1 = preemptions();
    const dt = r.endMs - r.startMs;
    if (i >= 0) {
      lat.push(dt);
      const t0 = r.startMs - performance.timeOrigin;
      const gc = gcWithin(t0, t0 + dt);
      traces.push({ ms: dt, gcMs: gc.ms, majorGcs: gc.major, otherGcs: gc.other, events: informerEventCount() - e0, preempted: c1 - c0, clientPreempted: r.clientPreempted ?? 0, serverMs: serverTime.ms });
      server.push(serverTime.ms);
      misses += recomputed() - m0;
    }
    feasible = r.feasible;
    await churn(i);
    if (IDLE_MS > 0) await new Promise((r) => setTimeout(r, IDLE_MS));
  }
  gcPauses.length = 0;
  if (ROUNDS_DIR && label) {
    mkdirSync(ROUNDS_DIR, { recursive: true });
    writeFileSync(join(ROUNDS_DIR, `${label}.json`), JSON.stringify(traces));
  }
  return { lat: lat.sort((a, b) => a - b), server: server.sort((a, b) => a - b), feasible, recomputedPerRound: misses / Math.max(1, iterations), tail: attributeTail(traces, audit.finish()) };
}

/** Churn of `perRound` nodes per round, spread over the nodes (step coprime to n): every node changes as often as any other. */
function churner(names: readonly string[], perRound: number, touch: Touch): () => Promise<void> {
  let next = 0;
  return async () => {
    for (let k = 0; k < perRound; k++) await touch(names[(next = (next + 7919) % names.length)]!);
  };
}

/** The rows of one size against a running extender (`url`, its handler time instrumented) and the no-op one. */
async function rowsFor(n: number, url: string, server: ExtenderServer, names: string[], churn: () => Promise<void>, noopUrl: string): Promise<Row[]> {
  const rows: Row[] = [];
  for (const [kind, annotations] of Object.entries(POD_KINDS).filter(([k]) => KINDS.includes(k))) {
    const uids = prng(n * 16 + Object.keys(POD_KINDS).indexOf(kind));
    const pod = (i: number): V1Pod => ({
      metadata: { name: `new-${i}`, namespace: NS, uid: apiserverUid(uids), annotations, labels: { 'ulysses.io/criticality': 'high' }, resourceVersion: '1' },
      // an RT/TDMA pod requests ulysses.io/reservation, as its users must (else the filter refuses it at once)
      spec: { containers: [{ name: 'c', ...(RT_ANNOTATION in annotations || TDMA_ANNOTATION in annotations ? { resources: reservationRequest() } : {}) }] },
    });
    const ours = await measure(url, pod, names, ITERATIONS, churn, () => server.verdictStats.misses, `${n}-${kind}-extender`);
    const base = await measure(noopUrl, pod, names, ITERATIONS, NOOP_CHURN ? churn : undefined, undefined, `${n}-${kind}-noop`);
    rows.push({
      nodes: n,
      pod: kind,
      feasible: ours.feasible,
      p50Ms: quantile(ours.lat, 0.5),
      p99Ms: quantile(ours.lat, 0.99),
      serverP50Ms: quantile(ours.server, 0.5),
      serverP99Ms: quantile(ours.server, 0.99),
      noopP50Ms: quantile(base.lat, 0.5),
      noopP99Ms: quantile(base.lat, 0.99),
      noopServerP50Ms: quantile(base.server, 0.5),
      p99RatioInterval: bootstrapQuantileRatio(ours.lat, base.lat, 0.99),
      recomputedPerRound: ours.recomputedPerRound,
      tail: ours.tail,
      noopTail: base.tail,
    });
  }
  return rows;
}

function perRoundChurn(n: number): number {
  return CHURN === 'all' ? n : Math.min(n, Number(CHURN));
}

async function inMemorySize(n: number, noopUrl: string): Promise<Row[]> {
  const server = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, ...EXTENDER_CONFIG }, log: quiet });
  const names = Array.from({ length: n }, (_, i) => `node-${i}`);
  const touch = populateInMemory(server, clusterShape(names, prng(n)), prng(n + 1));
  instrument(server.app);
  const { url } = await server.start();
  try {
    return await rowsFor(n, url, server, names, churner(names, perRoundChurn(n), touch), noopUrl);
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------- KWOK mode

const RUN_DIR = P.runDir;
/** The job of the measuring process kwokSize starts (internal, in its environment): the size, the testbed's kubeconfig, its KWOK nodes, where the result goes. */
interface MeasureJob {
  nodes: number;
  kubeconfig: string;
  nodesFile: string;
  resultFile: string;
}
const MEASURE_ENV = 'ULYSSES_BENCH_EXTENDER_MEASURE';
const MEASURE = process.env[MEASURE_ENV] ? (JSON.parse(process.env[MEASURE_ENV]) as MeasureJob) : undefined;
const NODES_READY_TIMEOUT_MS = P.nodesReadyTimeoutMs;
/** Concurrent API requests while the cluster is filled. */
const FILL_CONCURRENCY = 16;



const since = (t: number) => `${((Date.now() - t) / 1000).toFixed(1)} s`;

function log(line: string) {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
}

/**
 * KWOK mode, one size: a control-plane-only testbed of `n` KWOK nodes (experiments/testbed), then
 * the measured part ({@link kwokMeasure}) in a process of its own, and the testbed down in any case
 * (finally; SIGINT/SIGTERM also stop it, see main).
 *
 * Why a process of its own: the testbed code and client-node's generated API (which it loads) are
 * ~32 MiB of live heap (extender alone: ~15 MiB). In one process with the extender, every scavenge
 * and mark-compact walked them (--trace-gc: scavenges every ~1.3 s, mark-compact pauses of
 * several ms), and the slowest 1% of rounds had several ms of GC pause inside them. The extender's own process (main.ts) never loads them.
 */
async function kwokSize(n: number, cleanups: Set<() => Promise<void>>): Promise<{ rows: Row[]; note: SizeNote }> {
  const testbed = await import('../testbed/testbed.ts');
  const { ensureNamespace } = await import('../workloads.ts');
  const { CoreV1Api } = await import('@kubernetes/client-node');
  const lines: string[] = [];
  const t0 = Date.now();
  let child: ChildProcess | undefined;
  let down: Promise<void> | undefined;
  const cleanup = async () => {
    child?.kill('SIGTERM');
    down ??= testbed.down({ runDir: RUN_DIR, log: (l) => log(`  testbed: ${l}`) });
    await down;
  };
  cleanups.add(cleanup);
  try {
    log(`size ${n}: bringing up a control-plane-only testbed with ${n} KWOK nodes in ${RUN_DIR}`);
    await testbed.down({ runDir: RUN_DIR, log: () => undefined }); // a leftover of an aborted run
    const state = await testbed.up({
      runDir: RUN_DIR,
      realNodes: 0,
      kwokNodes: n,
      pinCpus: PIN_CPUS,
      ...(NODES_READY_TIMEOUT_MS ? { nodesReadyTimeoutMs: Number(NODES_READY_TIMEOUT_MS) } : {}),
      log: (l) => log(`  testbed: ${l}`),
    });
    lines.push(`testbed up (${n} KWOK nodes Ready) in ${since(t0)}`);
    await ensureNamespace(testbed.kubeConfigFor(state).makeApiClient(CoreV1Api), NS);
    const nodesFile = join(RUN_DIR, 'bench-nodes.json');
    const resultFile = join(RUN_DIR, 'bench-result.json');
    writeFileSync(nodesFile, JSON.stringify(state.kwokNodes));
    rmSync(resultFile, { force: true });
    // this script again, with the same options and profile (pinCpus pins it to CPU 1), node flags (--import tsx, --trace-gc...) and its job in the environment
    const argv = [...process.execArgv, fileURLToPath(import.meta.url), ...args];
    const job: MeasureJob = { nodes: n, kubeconfig: state.kubeconfig, nodesFile, resultFile };
    const proc = spawn(process.execPath, argv, { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, [MEASURE_ENV]: JSON.stringify(job) } });
    child = proc;
    // churnBy parent: the churn's API calls are made here, at the measuring process' request
    const { KubeClient } = await import('../../core/kube.ts');
    const { loadKubeConfig } = await import('../../core/kubeconfig.ts');
    const { KWOK_TOLERATION } = await import('../testbed/kwok.ts');
    const churnClient = new KubeClient(await loadKubeConfig(state.kubeconfig));
    proc.on('message', (m: ChurnRequest & { id: number }) => {
      churnThroughApi(churnClient, m, KWOK_TOLERATION).then(
        () => proc.connected && proc.send({ id: m.id }),
        (err: Error) => proc.connected && proc.send({ id: m.id, error: err.message }),
      );
    });
    const [code, signal] = (await once(proc, 'exit')) as [number | null, NodeJS.Signals | null];
    child = undefined;
    if (code !== 0) throw new Error(`the measuring process of size ${n} exited with ${code ?? signal}`);
    const r = JSON.parse(readFileSync(resultFile, 'utf8')) as { rows: Row[]; lines: string[] };
    lines.push(...r.lines);
    return { rows: r.rows, note: { nodes: n, lines } };
  } finally {
    await cleanup();
    cleanups.delete(cleanup);
  }
}

/**
 * The measured part of one KWOK size, in its own process (see {@link kwokSize}): the cluster of
 * {@link clusterShape} made through the API (node labels/annotations patched, pods created with
 * spec.nodeName: kwok runs them and reports their status), the extender started as main.ts starts
 * it (startExtender: config file, kubeconfig, informers, runtime config) against the testbed's
 * apiserver, and the rows once its state holds every node role and every pod, and the API reports
 * every pod Ready. Between two
 * rounds the churn is a real change through the API, waited for in the extender's state.
 */
async function kwokMeasure(n: number, kubeconfig: string, names: string[], noopUrl: string): Promise<{ rows: Row[]; lines: string[] }> {
  const { KWOK_TOLERATION } = await import('../testbed/kwok.ts');
  const { KubeClient } = await import('../../core/kube.ts');
  const { loadKubeConfig } = await import('../../core/kubeconfig.ts');
  const { startExtender } = await import('../../scheduler-plugins/extender/main.ts');
  const { nodeFingerprint } = await import('../../scheduler-plugins/extender/state.ts');
  const lines: string[] = [];
  let running: Awaited<ReturnType<typeof startExtender>> | undefined;
  try {
    const client = new KubeClient(await loadKubeConfig(kubeconfig));

    // the extender as its process starts it (config file + kubeconfig), its fastify instance instrumented before it listens
    const configFile = join(RUN_DIR, 'bench-extender-config.json');
    writeFileSync(configFile, JSON.stringify({ listen: { host: '127.0.0.1', port: 0 }, ...EXTENDER_CONFIG }));
    let extender: ExtenderServer | undefined;
    running = await startExtender({ configFile, kubeconfig, port: 0, informerThread: INFORMERS === 'thread', beforeStart: (s) => ((extender = s), instrument(s.app)) });
    const server = extender!;
    const url = `http://127.0.0.1:${(server.app.server.address() as { port: number }).port}`;
    // informer events the extender's state receives (with informers: loop, kwok's status updates included)
    const st = server.state;
    const upsertPod = st.upsertPod.bind(st);
    const deletePod = st.deletePod.bind(st);
    const upsertNode = st.upsertNode.bind(st);
    // waiting for the state without polling: checked on every pod event (a 1 ms poll was timer work on the extender's loop)
    const waiters = new Set<() => boolean>();
    const settle = () => {
      for (const w of waiters) if (w()) waiters.delete(w);
    };
    st.upsertPod = (p) => (informerEvents.pods++, upsertPod(p), settle());
    st.deletePod = (p) => (deletePod(p), settle());
    st.upsertNode = (x) => (informerEvents.nodes++, upsertNode(x));
    const stateHolds = (what: string, holds: () => boolean, timeoutMs: number) =>
      new Promise<void>((resolve, reject) => {
        if (holds()) return resolve();
        const timer = setTimeout(() => (waiters.delete(check), reject(new Error(`${what}: not within ${timeoutMs / 1000} s`))), timeoutMs);
        const check = () => (holds() ? (clearTimeout(timer), resolve(), true) : false);
        waiters.add(check);
      });

    // the cluster, through the API
    const shape = clusterShape(names, prng(n));
    const podBody = (name: string, nodeName: string, annotations: Record<string, string>) => kwokPodBody(name, nodeName, annotations, KWOK_TOLERATION);
    let t = Date.now();
    const fill = new PQueue({ concurrency: FILL_CONCURRENCY });
    await fill.addAll(shape.nodes.map((x) => () => client.mergePatch(`/api/v1/nodes/${x.name}`, { metadata: { labels: x.labels, annotations: x.annotations } })));
    await fill.addAll(shape.pods.map((p) => () => client.post(`/api/v1/namespaces/${NS}/pods`, podBody(p.name, p.node, p.annotations))));
    lines.push(`${shape.nodes.length} nodes patched, ${shape.pods.length} pods created in ${since(t)}`);
    t = Date.now();
    const want = new Map(shape.nodes.map((x) => [x.name, nodeFingerprint({ metadata: { labels: x.labels, annotations: x.annotations } })]));
    const ready = (p: V1Pod) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
    // Ready from the API: the extender's state keeps no pod status (state.ts extenderPodProjection)
    const missing = async () => {
      let nodes = 0;
      let pods = 0;
      for (const [name, fp] of want) if (st.node(name)?.fingerprint !== fp) nodes++;
      for (const p of shape.pods) if (st.pod(`${NS}/${p.name}`)?.node !== p.node) pods++;
      // the list only once the state is complete (not on every poll before)
      if (nodes + pods > 0) return { nodes, pods, notReady: null };
      const listed = await client.get<{ items: V1Pod[] }>(`/api/v1/namespaces/${NS}/pods`, { labelSelector: 'app=bench-extender' });
      stuck = listed.items.filter((p) => !ready(p));
      const notReady: number | null = shape.pods.length - (listed.items.length - stuck.length);
      return { nodes, pods, notReady };
    };
    // a few pods kwok may leave not Ready for good (12-16 of 5,422 with 1000 KWOK nodes on 2 vCPUs):
    // the rows run once that count has not changed for SETTLED_MS, and say so
    const SETTLED_MS = 120_000;
    let stuck: V1Pod[] = [];
    let settled = { notReady: -1, since: Date.now() };
    let reported = Date.now();
    let lastMissing: Awaited<ReturnType<typeof missing>> | undefined;
    await pollUntil(
      "the extender's state (every node role, every pod on its node) and every pod Ready",
      async () => {
        const m = (lastMissing = await missing());
        if (Date.now() - reported > 15_000) {
          reported = Date.now();
          log(`  waiting for the extender's state (every node role, every pod on its node) and every pod Ready: ${JSON.stringify(m)}`);
        }
        if (m.notReady !== settled.notReady) settled = { notReady: m.notReady ?? -1, since: Date.now() };
        return m.nodes + m.pods === 0 && (m.notReady === 0 || Date.now() - settled.since >= SETTLED_MS);
      },
      { timeoutMs: 600_000, intervalMs: 500, explain: () => JSON.stringify(lastMissing) },
    );
    const notReadyNote = stuck.length
      ? `, all Ready but ${stuck.length}, unchanged for ${SETTLED_MS / 1000} s (${stuck
          .slice(0, 3)
          .map((p) => `${p.metadata?.name} on ${p.spec?.nodeName}: phase ${p.status?.phase}, Ready ${p.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'absent'}`)
          .join('; ')}${stuck.length > 3 ? '; ...' : ''})`
      : ', all Ready';
    lines.push(`extender state complete (${st.nodeNames().length} nodes, ${st.podCount} pods${notReadyNote}) ${since(t)} after the last create`);

    // churn: a new pod bound to the node, the node's previous churn pod deleted (grace period 0: gone
    // at once), both seen by the extender; the API calls by the parent process (churnBy: parent) or this one
    const last = new Map<string, string>();
    let seq = 0;
    const pending = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
    process.on('message', (m: { id: number; error?: string }) => {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (m.error) p?.reject(new Error(`churn through the API (parent process): ${m.error}`));
      else p?.resolve();
    });
    const byParent = (req: ChurnRequest) =>
      new Promise<void>((resolve, reject) => {
        const id = seq;
        if (!process.send) return reject(new Error('churnBy parent: no IPC channel to the parent process'));
        pending.set(id, { resolve, reject });
        process.send({ id, ...req }, undefined, {}, (err) => err && (pending.delete(id), reject(err)));
      });
    const touch: Touch = async (node) => {
      const prev = last.get(node);
      const req: ChurnRequest = { create: { name: `churn-${seq}`, node }, ...(prev ? { delete: prev } : {}) };
      const seen = stateHolds(`churn pod ${req.create.name} on ${node} in the extender's state`, () => st.pod(`${NS}/${req.create.name}`)?.node === node && (!prev || !st.pod(`${NS}/${prev}`)), 30_000);
      await Promise.all([CHURN_BY === 'parent' ? byParent(req) : churnThroughApi(client, req, KWOK_TOLERATION), seen]);
      seq++;
      last.set(node, req.create.name);
    };
    const e0 = { ...informerEvents };
    // the main thread (and the client worker, see extender-client.ts) on CPU 1, the process's other
    // threads (V8's GC and compiler helpers, libuv) on CPU 0: on CPU 1 they preempted the main
    // thread several times in each of the slowest 1% of rounds
    if (PIN_CPUS) {
      const clientTid = roundClient instanceof RoundClient ? await roundClient.threadId() : undefined;
      const moved = pinMainThreadApart(process.pid, '1', '0', clientTid ? [clientTid] : []);
      lines.push(`main thread${clientTid ? ' and the client worker' : ''} on CPU 1, the process's ${moved} other threads (V8, libuv) on CPU 0`);
      if (SCHED_FIFO) {
        schedFifo(process.pid, 'main thread');
        lines.push('main thread under SCHED_FIFO priority 1 (schedFifo): a client on CPU 1 runs only while the extender waits');
        if (CLIENT_SCHED_FIFO) {
          const pid = roundClient instanceof GoRoundClient ? roundClient.pid : undefined;
          if (!pid) throw new Error('clientSchedFifo: the Go client has no pid (it did not start)');
          schedFifo(pid, 'all threads');
          lines.push(`the Go client's threads under SCHED_FIFO priority 1 too (clientSchedFifo): on a shared CPU each of client and extender runs until it waits`);
        }
      }
    }
    t = Date.now();
    const rows = await rowsFor(n, url, server, names, churner(names, perRoundChurn(n), touch), noopUrl);
    lines.push(
      `rows measured in ${since(t)}; informer events into the extender's state meanwhile (informers: ${INFORMERS}${INFORMERS === 'thread' ? ': only changes of what it reads' : ': every watch event, kwok status updates included'}): ${informerEvents.pods - e0.pods} pod adds/updates, ${informerEvents.nodes - e0.nodes} node updates`,
    );
    lines.push(`load average at the end of the rows: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} on ${os.cpus().length} CPUs`);
    return { rows, lines };
  } finally {
    await running?.stop().catch((err: Error) => log(`extender stop failed: ${err.message}`));
  }
}

const CLIENT_DESCRIPTION: Record<string, string> = {
  loop: "client loop: on the extender's event loop",
  worker: "client worker: a worker thread of its own, the scheduler's JSON and HTTP work off the extender's event loop and heap",
  go: `client go: kube-scheduler's own HTTPExtender (k8s.io/kubernetes ${K8S_VERSION}) in a Go process of its own${CLIENT_CPUS ? ` on CPU ${CLIENT_CPUS}` : ''}${CLIENT_GC_BETWEEN_ROUNDS ? ', its garbage collected between rounds (clientGcBetweenRounds)' : ''}${CLIENT_SCHED_FIFO ? ', under SCHED_FIFO like the extender (clientSchedFifo)' : ''}`,
};

async function main() {
  // the option and profile checks are extenderBenchOptions' (options.ts)
  // the extender started as in main.ts logs through the root logger: warnings only, unless asked
  if (KWOK) process.env.ULYSSES_LOG_LEVEL ??= 'warn';
  if (PIN_CPUS) {
    if (os.cpus().length < 2) throw new Error('profile field pinCpus needs at least 2 CPUs');
    // every thread of this process (event loop, GC, libuv pool); threads started later inherit it.
    // The measuring process on CPU 1; the parent (testbed up/down, idle meanwhile) with the testbed on CPU 0.
    execFileSync('taskset', ['-a', '-p', '-c', MEASURE ? '1' : '0', String(process.pid)], { stdio: 'ignore' });
  }
  // after every option check; built by the parent (a first build takes a minute), found by the measuring process
  const goClient = CLIENT === 'go' ? buildGoClient(log) : undefined;
  if (MEASURE || !KWOK) {
    if (CLIENT === 'worker') roundClient = new RoundClient();
    else if (goClient) roundClient = new GoRoundClient(goClient, CLIENT_CPUS || undefined, CLIENT_GC_BETWEEN_ROUNDS);
  }
  if (MEASURE) {
    // the measured part of one KWOK size, started by kwokSize (the testbed is the parent's)
    const noop = await noopExtender();
    try {
      const names = JSON.parse(readFileSync(MEASURE.nodesFile, 'utf8')) as string[];
      const r = await kwokMeasure(MEASURE.nodes, MEASURE.kubeconfig, names, noop.url);
      writeFileSync(MEASURE.resultFile, JSON.stringify(r));
    } finally {
      await noop.app.close();
    }
    process.exit(0); // the extender's informers and keep-alive sockets would keep the process alive
  }
  const cleanups = new Set<() => Promise<void>>();
  const removeSignalHandlers = KWOK ? onShutdownSignal(async () => Promise.all([...cleanups].map((c) => c())), { exitCode: 130, graceMs: 120_000 }) : () => undefined;
  const rows: Row[] = [];
  const notes: SizeNote[] = [];
  const noop = KWOK ? undefined : await noopExtender();
  try {
    for (const n of SIZES) {
      if (KWOK) {
        const r = await kwokSize(n, cleanups);
        rows.push(...r.rows);
        notes.push(r.note);
      } else rows.push(...(await inMemorySize(n, noop!.url)));
    }
  } finally {
    await noop?.app.close();
    await roundClient?.close();
    removeSignalHandlers();
  }
  if (JSON_OUT) {
    console.log(JSON.stringify(KWOK ? { rows, notes } : rows, null, 2));
    return;
  }
  console.log(`filter+prioritize round trip over loopback HTTP, ${ITERATIONS} iterations per row (after 50 warm-up), node ${process.version}`);
  if (KWOK) {
    console.log(`KWOK mode: a control-plane-only testbed per size, the extender fed by its informers (started as main.ts does); node ${os.hostname()}`);
    if (PIN_CPUS) console.log('CPUs pinned: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok and the bench parent on CPU 0; the measuring process (extender, client, no-op extender) on CPU 1');
    for (const note of notes) for (const l of note.lines) console.log(`  ${note.nodes} nodes: ${l}`);
  }
  console.log(`churn: ${CHURN === 'all' ? 'every node' : `${CHURN} node(s)`} changed between two rounds (extender rows): a new pod bound to the node${KWOK ? ` through the API (create with spec.nodeName; the previous churn pod on the node deleted) by the ${CHURN_BY === 'parent' ? 'parent process (churnBy: parent)' : 'measuring process (churnBy: measuring)'}, waited for in the extender's state` : ' (the previous one on the node deleted)'}${IDLE_MS > 0 ? `; then ${IDLE_MS} ms idle (idleMs), in both rows` : ''}`);
  console.log(`round trip = filter+prioritize measured by the client (${CLIENT_DESCRIPTION[CLIENT]}); server = fastify handler time of the two requests (reply.elapsedTime); recomputed = node verdicts computed per round (the rest came from the cache)`);
  console.log(`load average at the end: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} on ${os.cpus().length} CPUs`);
  console.log('nodes  pod                       feasible | round trip p50  p99 | server p50  p99 | no-op round trip p50  p99, server p50 | recomputed | p99 / no-op p99 (target <= 1.3x; 90% bootstrap interval; inconclusive when it reaches across the target)');
  const f = (x: number, w = 7) => x.toFixed(3).padStart(w);
  const t = (a: TailAttribution) =>
    `GC ${a.tailGcMs.toFixed(2)} ms (all ${a.allGcMs.toFixed(2)}) in ${a.tailMajorGcs.toFixed(2)} mark-compacts (all ${a.allMajorGcs.toFixed(3)}) and ${a.tailOtherGcs.toFixed(2)} other pauses (all ${a.allOtherGcs.toFixed(3)}), informer events ${a.tailEvents.toFixed(1)} (all ${a.allEvents.toFixed(1)}), main thread preempted ${a.tailPreempted.toFixed(1)} (all ${a.allPreempted.toFixed(2)})` +
    (CLIENT !== 'loop' ? `, client ${CLIENT === 'go' ? 'process' : 'thread'} preempted ${a.tailClientPreempted.toFixed(1)} (all ${a.allClientPreempted.toFixed(2)})` : '') +
    (a.machine ? `; machine during the row: ${describeMachine(a.machine)}` : '');
  const tails: string[] = [];
  for (const r of rows) {
    tails.push(`${String(r.nodes).padEnd(6)} ${r.pod.padEnd(25)} extender: ${t(r.tail)} | no-op: ${t(r.noopTail)}`);
    const ratio = r.p99Ms / r.noopP99Ms;
    const iv = r.p99RatioInterval;
    const verdict = iv && iv[0] <= P99_RATIO_TARGET !== iv[1] <= P99_RATIO_TARGET ? 'inconclusive' : ratio <= P99_RATIO_TARGET ? 'met' : 'MISSED';
    console.log(
      `${String(r.nodes).padEnd(6)} ${r.pod.padEnd(25)} ${String(r.feasible).padStart(8)} | ${f(r.p50Ms, 14)} ${f(r.p99Ms)} | ${f(r.serverP50Ms, 10)} ${f(r.serverP99Ms)} | ${f(r.noopP50Ms, 20)} ${f(r.noopP99Ms)} ${f(r.noopServerP50Ms, 12)} | ${r.recomputedPerRound.toFixed(1).padStart(10)} | ${ratio.toFixed(2)}x${iv ? ` (90% ${iv[0].toFixed(2)}-${iv[1].toFixed(2)})` : ''} ${verdict}`,
    );
  }
  console.log(`slowest 1% of the rounds vs all rounds: mean main-thread GC pause, informer events (KWOK mode) and involuntary context switches of the main thread${CLIENT === 'worker' ? ' and of the client thread' : CLIENT === 'go' ? " and of the Go client's threads" : ''} inside one round; the machine during the row (/proc: busy, hypervisor steal, the bench's and the testbed's CPU, anything else's)`);
  for (const l of tails) console.log(l);
}

main().catch((err: Error) => {
  console.error(`bench:extender: ${benchFailure(err)}`);
  process.exit(1);
});
