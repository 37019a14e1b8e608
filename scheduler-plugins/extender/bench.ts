#!/usr/bin/env -S npx tsx
/**
 * `npm run bench:extender`: latency of one scheduling round trip as kube-scheduler makes it with a
 * nodeCacheCapable extender — POST /filter with all node NAMES, then POST /prioritize with the nodes
 * that passed — over real HTTP on loopback, for 100 and 1000 nodes. The node/pod cache is filled in
 * memory (the same ClusterState the informers feed). Cluster per size N: 10% deferrable-server
 * nodes (2 cores), 10% budget/period nodes (4 cores), 5% EDF nodes (2 cores), 20% of the nodes on
 * the TDMA network (some of them budget/period nodes), every node with an assurance vector; 5 plain pods per node, 1-2 RT pods per RT
 * node (cores reserved), 1-slot TDMA pods holding a third of the slots. Pods scheduled: a critical
 * pod with a threshold assurance policy, a deferrable-server RT pod, a TDMA pod, a budget/period
 * RT pod that also needs 2 TDMA slots — each with a fresh UID.
 * Between two rounds (not timed) `--churn` nodes change as the informers would report it (a pod on
 * the node is updated: the node's version is bumped, which invalidates what the extender cached for
 * it): default 1, the node the previous pod was bound to in a real cluster; `--churn all` changes
 * every node each round (every verdict recomputed: the cold path); `--churn 0` none.
 * Baseline in the same run: a no-op fastify extender (accepts every node, scores 0): the HTTP+JSON
 * floor. Targets (issue 4): p99 < 2 ms at 100 nodes, < 10 ms at 1000 nodes.
 *
 *   npm run bench:extender -- [--iterations 400] [--sizes 100,1000] [--churn 1|all|0] [--kinds a,b] [--json]
 */
import http from 'node:http';
import Fastify, { type FastifyInstance } from 'fastify';
import os from 'node:os';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { prng } from '../../core/prng.ts';
import { ExtenderServer } from './server.ts';
import { RESERVED_NODE_ANNOTATION } from './state.ts';
import type { ExtenderFilterResult, HostPriority } from './wire.ts';
import { silentLogger } from '../../core/logging.ts';

const args = process.argv.slice(2);
const arg = (name: string, dflt: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] ? args[i + 1]! : dflt;
};
const ITERATIONS = Number(arg('iterations', '400'));
const SIZES = arg('sizes', '100,1000').split(',').map(Number);
const JSON_OUT = args.includes('--json');
const KINDS = arg('kinds', '');
const CHURN = arg('churn', '1');

const quiet = silentLogger();

/** Fills the cache; returns `touch(node index)`: an update of one of the node's plain pods (a new resourceVersion). */
function populate(server: ExtenderServer, n: number, rnd: () => number): (i: number) => void {
  const slotsTotal = 100;
  let slot = 0;
  let rv = 1;
  const addPod = (name: string, nodeName: string, annotations: Record<string, string>) =>
    server.state.upsertPod({
      metadata: { name, namespace: 'bench', uid: `uid-${name}`, annotations, resourceVersion: String(rv++) },
      spec: { nodeName, containers: [{ name: 'c' }] },
      status: { phase: 'Running' },
    } as V1Pod);
  for (let i = 0; i < n; i++) {
    const name = `node-${i}`;
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
    server.state.upsertNode({ metadata: { name, labels, annotations, resourceVersion: String(rv++) } } as V1Node);
    for (let k = 0; k < 5; k++) addPod(`${name}-plain-${k}`, name, {});
    const kind = labels['ulysses.io/rt-scheduler'];
    const rtPods = kind ? 1 + Math.floor(rnd() * 2) : 0;
    for (let k = 0; k < rtPods; k++) {
      const rt =
        kind === 'deferrable-server'
          ? { server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 500, periodUs: 10000 }, { wcetUs: 300, periodUs: 20000 }] }
          : kind === 'budget-period'
            ? { reservation: { runtimeUs: 3000, periodUs: 10000, cpus: 1 } }
            : { tasks: [{ wcetUs: 1000, periodUs: 10000 }] };
      addPod(`${name}-rt-${k}`, name, { 'ulysses.io/rt': JSON.stringify(rt), 'ulysses.io/rt-cores': JSON.stringify([k % 2]) });
    }
    if (labels['ulysses.io/tdma-network'] && slot < slotsTotal / 3) {
      addPod(`${name}-tdma`, name, { 'ulysses.io/tdma': '{"network":"bus0","slots":1}', 'ulysses.io/tdma-slots': JSON.stringify([slot++]), [RESERVED_NODE_ANNOTATION]: name });
    }
  }
  return (i) => addPod(`node-${i}-plain-0`, `node-${i}`, { touched: String(rv) });
}

const POD_KINDS: Record<string, Record<string, string>> = {
  'critical+assurance': { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2,"memory":1}}' },
  'rt deferrable-server': { 'ulysses.io/rt': JSON.stringify({ server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 800, periodUs: 10000, priority: 1 }, { wcetUs: 400, periodUs: 20000, priority: 2 }] }) },
  tdma: { 'ulysses.io/tdma': '{"network":"bus0","slots":2,"maxGapUs":60000}' },
  'rt budget-period+tdma': { 'ulysses.io/rt': '{"reservation":{"runtimeUs":2000,"periodUs":10000,"cpus":1}}', 'ulysses.io/tdma': '{"network":"bus0","slots":2}' },
};

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/** One POST over a kept-alive connection (as the scheduler's Go http.Client does). */
function post<T>(url: string, body: unknown): Promise<T> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) reject(new Error(`${url}: HTTP ${res.statusCode}: ${text}`));
        else resolve(JSON.parse(text) as T);
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

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
}

async function measure(url: string, pod: (i: number) => V1Pod, names: string[], iterations: number, churn: (round: number) => void = () => undefined): Promise<{ lat: number[]; server: number[]; feasible: number }> {
  const lat: number[] = [];
  const server: number[] = [];
  let feasible = 0;
  for (let i = -Math.min(50, iterations); i < iterations; i++) {
    const p = pod(i);
    const t0 = performance.now();
    serverTime.ms = 0;
    const f = await post<ExtenderFilterResult>(`${url}/filter`, { Pod: p, NodeNames: names });
    await post<HostPriority[]>(`${url}/prioritize`, { Pod: p, NodeNames: f.NodeNames ?? [] });
    const dt = performance.now() - t0;
    if (i >= 0) {
      lat.push(dt);
      server.push(serverTime.ms);
    }
    feasible = f.NodeNames?.length ?? 0;
    churn(i);
  }
  return { lat: lat.sort((a, b) => a - b), server: server.sort((a, b) => a - b), feasible };
}

async function main() {
  const rows: Row[] = [];
  const noop = await noopExtender();
  for (const n of SIZES) {
    const server = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, tdmaNetworks: { bus0: { cycleUs: 100_000, slotUs: 1000 } } }, log: quiet });
    const touch = populate(server, n, prng(n));
    const perRound = CHURN === 'all' ? n : Math.min(n, Number(CHURN));
    let next = 0;
    // spread over the nodes (step coprime to n): every node changes as often as any other
    const churn = () => {
      for (let k = 0; k < perRound; k++) touch((next = (next + 7919) % n));
    };
    instrument(server.app);
    const { url } = await server.start();
    const names = server.state.nodeNames();
    for (const [kind, annotations] of Object.entries(POD_KINDS).filter(([k]) => !KINDS || KINDS.split(',').includes(k))) {
      const pod = (i: number): V1Pod => ({
        metadata: { name: `new-${i}`, namespace: 'bench', uid: `new-${kind}-${i}`, annotations, labels: { 'ulysses.io/criticality': 'high' }, resourceVersion: '1' },
        spec: { containers: [{ name: 'c' }] },
      });
      const ours = await measure(url, pod, names, ITERATIONS, churn);
      const base = await measure(noop.url, pod, names, ITERATIONS);
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
      });
    }
    await server.stop();
  }
  await noop.app.close();
  if (JSON_OUT) {
    console.log(JSON.stringify(rows, null, 2));
    return;
  }
  console.log(`filter+prioritize round trip over loopback HTTP, ${ITERATIONS} iterations per row (after 50 warm-up), node ${process.version}`);
  console.log(`churn: ${CHURN === 'all' ? 'every node' : `${CHURN} node(s)`} changed between two rounds (extender rows)`);
  console.log('round trip = client-measured filter+prioritize; server = fastify handler time of the two requests (reply.elapsedTime)');
  console.log(`load average at the end: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} on ${os.cpus().length} CPUs`);
  console.log('nodes  pod                       feasible | round trip p50  p99 | server p50  p99 | no-op round trip p50  p99 | p99 target');
  const f = (x: number, w = 7) => x.toFixed(3).padStart(w);
  for (const r of rows) {
    const target = r.nodes <= 100 ? 2 : 10;
    console.log(
      `${String(r.nodes).padEnd(6)} ${r.pod.padEnd(25)} ${String(r.feasible).padStart(8)} | ${f(r.p50Ms, 14)} ${f(r.p99Ms)} | ${f(r.serverP50Ms, 10)} ${f(r.serverP99Ms)} | ${f(r.noopP50Ms, 20)} ${f(r.noopP99Ms)} | < ${target} ms: ${r.p99Ms < target ? 'met' : 'MISSED'}`,
    );
  }
}

main().catch((err: Error) => {
  console.error(err.stack ?? err.message);
  process.exit(1);
});
