/**
 * Criticality-aware queue sort (issue 4, thesis §5.3.2 (a)) on the REAL kube-scheduler: the
 * PriorityClasses of scheduler-plugins/priority-classes.yaml order the scheduler's queue
 * (PrioritySort: spec.priority descending, then queue timestamp), so a `ulysses-high` pod that
 * arrives AFTER many `ulysses-low` pods is scheduled first once they all become schedulable together.
 *
 * How kube-scheduler's queue behaves (pkg/scheduler/backend/queue, v1.36), and why the test is
 * built this way:
 * - A pod that fails a scheduling attempt goes to `unschedulablePods`. A cluster event whose
 *   QueueingHint says "Queue" (here: a node gets the label the pods' nodeSelector asks for, hint of
 *   NodeAffinity) moves ALL such pods in one call under the queue lock (moveAllToActiveOrBackoffQueue)
 *   and only then wakes Pop(): the head of activeQ is then the highest-priority pod.
 * - A moved pod still inside its backoff window goes to backoffQ instead (popped by backoff expiry,
 *   SchedulerPopFromBackoffQ), which would NOT be priority order. So the scheduler runs with
 *   podInitialBackoffSeconds = podMaxBackoffSeconds = 1 and the label is added only after every
 *   pod's failed attempt is visible and no pod can still be backing off. Backoff expiry is aligned
 *   DOWN to the backoffQ's 1-s ordering window and a pod counts as backing off while its expiry is
 *   not before the current window's start (backoff_queue.go isPodBackingoff), so a pod enqueued at
 *   t backs off until the second boundary after trunc(t + 1 s), i.e. up to 2 s: the test waits for
 *   the scheduler's queue to be quiet (nothing active or backing off) for backoff + window.
 * - Binding runs asynchronously after the scheduling cycle, so bind completion order is not strictly
 *   pop order. Instead exactly ONE pod fits (each requests 20 of the node's 32 CPUs): the pod popped
 *   first is assumed on the node and every later pod fails with "Insufficient cpu". Whoever holds the
 *   node was popped first, regardless of binding latency.
 * Observed through a watch: the first (and only) pod to get spec.nodeName, and every low pod's
 * PodScheduled=False condition switching to "Insufficient cpu" (it was re-tried after the node opened
 * and lost the node to the high pod). Control in the same run: the same race with one class for all
 * pods is won by the pod queued first (PrioritySort's tie-break: queue timestamp), so the high pod's
 * win is the priority's doing, not an artefact of the setup.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, stringify } from 'yaml';
import type { V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { KubeClient } from '../../core/kube.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { PORTS } from '../../experiments/testbed/controlplane.ts';
import https from 'node:https';
import { metricSamples } from '../../core/metrics.ts';

const runDir = SHARED_RUN_DIR;
const schedulerConfig = '/tmp/ulysses-it-sched-priority-kube-scheduler.yaml';
const ns = 'sched-prio';
const GATE_LABEL = 'ulysses.io/prio-test';
const LOW_BEFORE = 12;
const LOW_AFTER = 6;
/** podMaxBackoffSeconds below, in ms. */
const BACKOFF_MS = 1000;
/** kube-scheduler's backoffQOrderingWindowDuration (backend/queue/backoff_queue.go), in ms. */
const BACKOFF_WINDOW_MS = 1000;
/** How long the queue must stay quiet before the node opens: no pod may still be backing off (header). */
const QUIET_MS = BACKOFF_MS + BACKOFF_WINDOW_MS + 200;

writeFileSync(
  schedulerConfig,
  stringify({
    apiVersion: 'kubescheduler.config.k8s.io/v1',
    kind: 'KubeSchedulerConfiguration',
    clientConnection: { kubeconfig: schedulerKubeconfigPath(runDir) },
    leaderElection: { leaderElect: false },
    // default queue sort (PrioritySort) and plugins; backoff capped at 1 s (see header)
    podInitialBackoffSeconds: 1,
    podMaxBackoffSeconds: 1,
  }),
);
const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 2, namespace: ns, schedulerConfig });

let client: KubeClient;
let informer: ResilientInformer<V1Pod>;
/** Pod names in the order the watch saw them get spec.nodeName. */
const boundOrder: string[] = [];

beforeAll(async () => {
  client = new KubeClient(t.kc);
  // the PriorityClasses exactly as shipped
  for (const doc of parseAllDocuments(readFileSync(new URL('../../scheduler-plugins/priority-classes.yaml', import.meta.url), 'utf8'))) {
    const pc = doc.toJSON() as { metadata: { name: string } } | null;
    if (pc) await client.post('/apis/scheduling.k8s.io/v1/priorityclasses', pc);
  }
  informer = new ResilientInformer<V1Pod>(t.kc, { path: `/api/v1/namespaces/${ns}/pods` });
  const seen = (p: V1Pod, old?: V1Pod) => {
    if (p.spec?.nodeName && !old?.spec?.nodeName && !boundOrder.includes(p.metadata!.name!)) boundOrder.push(p.metadata!.name!);
  };
  informer.on('add', (p) => seen(p));
  informer.on('update', (p, old) => seen(p, old));
  await informer.start();
});
afterAll(() => informer?.stop());

function pod(name: string, priorityClassName: string, gate: string): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { app: 'sched-prio' } },
    spec: {
      priorityClassName,
      containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', resources: { requests: { cpu: '20' } } }],
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
      // no node has this label yet: every attempt fails in NodeAffinity
      nodeSelector: { type: 'kwok', [GATE_LABEL]: gate },
    },
  };
}

/**
 * kube-scheduler's own view of its queue: scheduler_pending_pods{queue} from its /metrics (admin
 * client certificate of the testbed kubeconfig; the scheduler's serving certificate is self-signed).
 */
async function pendingPods(): Promise<Record<string, number>> {
  const opts: https.RequestOptions = { host: '127.0.0.1', port: PORTS.scheduler, path: '/metrics', rejectUnauthorized: false };
  await t.kc.applyToHTTPSOptions(opts);
  opts.rejectUnauthorized = false;
  const text = await new Promise<string>((resolve, reject) => {
    https
      .get(opts, (res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`scheduler /metrics: HTTP ${res.statusCode}`))));
      })
      .on('error', reject);
  });
  const out: Record<string, number> = {};
  for (const m of metricSamples(text, new Set(['scheduler_pending_pods']))) if (m.labels.queue) out[m.labels.queue] = m.value;
  return out;
}

const podScheduled = (p: V1Pod | undefined) => p?.status?.conditions?.find((c) => c.type === 'PodScheduled');

/**
 * Creates `before` pods of class `lowClass`, then `middle` of class `middleClass`, then `after` more
 * of `lowClass`, all waiting for node label GATE_LABEL=`gate`; once every pod's failed attempt is
 * visible and the backoff window passed, labels `node`; returns the pods bound (watch order) after
 * every other pod was re-tried and refused for lack of CPU.
 */
async function race(o: { prefix: string; gate: string; node: string; lowClass: string; middleClass: string }): Promise<{ bound: string[]; others: string[] }> {
  const low = (i: number) => `${o.prefix}low-${i}`;
  const others = Array.from({ length: LOW_BEFORE + LOW_AFTER }, (_, i) => low(i));
  const middle = `${o.prefix}middle`;
  // the middle pod is neither the first nor the last one queued (neither FIFO nor LIFO would pick it)
  for (const name of others.slice(0, LOW_BEFORE)) await client.post(`/api/v1/namespaces/${ns}/pods`, pod(name, o.lowClass, o.gate));
  await client.post(`/api/v1/namespaces/${ns}/pods`, pod(middle, o.middleClass, o.gate));
  for (const name of others.slice(LOW_BEFORE)) await client.post(`/api/v1/namespaces/${ns}/pods`, pod(name, o.lowClass, o.gate));
  const all = [...others, middle];
  const mine = () => boundOrder.filter((n) => all.includes(n));

  // every pod had its failed attempt (PodScheduled=False, node affinity) and sits in unschedulablePods
  await pollUntil(
    `every ${o.prefix}pod reported Unschedulable by the scheduler`,
    () => all.every((n) => {
      const c = podScheduled(informer.get(`${ns}/${n}`));
      return c?.status === 'False' && c.reason === 'Unschedulable';
    }),
    { timeoutMs: 60_000, intervalMs: 100, explain: () => all.map((n) => `${n}: ${JSON.stringify(podScheduled(informer.get(`${ns}/${n}`)))}`).join('\n') },
  );
  expect(mine()).toEqual([]);
  // Every pod must sit in unschedulablePods, none in activeQ/backoffQ (a pod re-queued by some other
  // cluster event, e.g. a KWOK node status change, and still backing off would go to backoffQ, which
  // is not priority-ordered): asked of the scheduler itself (scheduler_pending_pods), continuously for
  // QUIET_MS, so no pod is in flight and none can still count as backing off.
  let stableSince: number | undefined;
  let last: Record<string, number> = {};
  await pollUntil(
    `every ${o.prefix}pod in the scheduler's unschedulable queue, none active or backing off, for ${QUIET_MS} ms`,
    async () => {
      last = await pendingPods();
      const settled = (last.unschedulable ?? 0) >= all.length && !last.active && !last.backoff;
      if (!settled) stableSince = undefined;
      else stableSince ??= Date.now();
      return stableSince !== undefined && Date.now() - stableSince >= QUIET_MS;
    },
    { timeoutMs: 60_000, intervalMs: 100, explain: () => JSON.stringify(last) },
  );

  // open exactly one node: all pods become schedulable at once (one move under the queue lock)
  await client.mergePatch(`/api/v1/nodes/${o.node}`, { metadata: { labels: { [GATE_LABEL]: o.gate } } });
  await pollUntil(`first ${o.prefix}pod bound`, () => mine().length > 0, { timeoutMs: 30_000, intervalMs: 50 });
  const lost = [...all.filter((n) => n !== mine()[0])];
  // every other pod was tried again after the node opened and found it taken
  await pollUntil(
    `every other ${o.prefix}pod re-tried and refused with Insufficient cpu`,
    () => lost.every((n) => /Insufficient cpu/.test(podScheduled(informer.get(`${ns}/${n}`))?.message ?? '')),
    { timeoutMs: 60_000, intervalMs: 100, explain: () => `bound: ${mine().join(', ')}\n` + lost.map((n) => `${n}: ${podScheduled(informer.get(`${ns}/${n}`))?.message}`).join('\n') },
  );
  for (const n of lost) expect(informer.get(`${ns}/${n}`)?.spec?.nodeName, n).toBeFalsy();
  return { bound: mine(), others };
}

describe('PriorityClasses order kube-scheduler’s queue (testbed, KWOK nodes)', () => {
  it('a ulysses-high pod queued after many ulysses-low pods gets the only free place once they all become schedulable', async () => {
    const { bound, others } = await race({ prefix: '', gate: 'open', node: 'kwok-1', lowClass: 'ulysses-low', middleClass: 'ulysses-high' });
    // admission resolved the classes to spec.priority
    expect(informer.get(`${ns}/middle`)?.spec?.priority).toBe(1_000_000);
    for (const n of others) expect(informer.get(`${ns}/${n}`)?.spec?.priority).toBe(1000);
    expect(bound).toEqual(['middle']);
    const high = informer.get(`${ns}/middle`)!;
    expect(high.spec?.nodeName).toBe('kwok-1');
    expect(podScheduled(high)?.status).toBe('True');
  });

  it('control: with one class for all, the first pod queued wins (the queue’s FIFO tie-break), so the result above is the priority’s doing', async () => {
    const { bound } = await race({ prefix: 'same-', gate: 'control', node: 'kwok-2', lowClass: 'ulysses-low', middleClass: 'ulysses-low' });
    expect(bound).toEqual(['same-low-0']);
    expect(informer.get(`${ns}/same-low-0`)?.spec?.nodeName).toBe('kwok-2');
  });
});
