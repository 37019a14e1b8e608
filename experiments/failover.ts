/**
 * One failover repetition as in thesis §4.3.2: the critical UDP echo pod and low-priority
 * Deployments run on the source node; at t=0 the source node gets a NoExecute taint and everything
 * respawns on the destination node(s). Event times come from a pod watch (not polling) and from a
 * UDP client sending a packet every 50 ms to the new critical pod ("Prio up").
 */
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { CRITICALITY_LABEL } from '../core/criticality.ts';
import { ResilientInformer } from '../core/informer.ts';
import { pollUntil } from './testbed/processes.ts';
import { applyDeployment, deployment, ensureNamespace, podReady, taintNoExecute, udpFirstAnswer, untaint } from './workloads.ts';

export interface FailoverEvents {
  prioScheduled: number | null;
  prioReady: number | null;
  prioUp: number | null;
  lastScheduled: number | null;
  lastReady: number | null;
}

export interface FailoverOptions {
  namespace: string;
  source: string;
  destinations: string[];
  lowPods: number; // in Deployments of 2 pods
  timeoutMs?: number;
}

const EXPERIMENT_LABEL = 'ulysses.io/experiment';

async function setUnschedulable(core: CoreV1Api, nodes: string[], value: boolean): Promise<void> {
  for (const name of nodes) {
    await core.patchNode({ name, body: [{ op: 'add', path: '/spec/unschedulable', value }] }, undefined);
  }
}

export async function runFailover(kc: KubeConfig, o: FailoverOptions): Promise<FailoverEvents> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const nodes = [o.source, ...o.destinations];
  await ensureNamespace(core, o.namespace);

  // everything starts on the source node: the destinations are cordoned while the workload comes up
  await setUnschedulable(core, o.destinations, true);
  const labels = { [EXPERIMENT_LABEL]: 'failover' };
  await applyDeployment(apps, deployment({ namespace: o.namespace, name: 'prio', replicas: 1, criticality: 'high', image: 'udp-echo', nodes, labels }));
  for (let i = 0; i < Math.ceil(o.lowPods / 2); i++) {
    await applyDeployment(apps, deployment({ namespace: o.namespace, name: `low-${i}`, replicas: 2, criticality: 'low', image: 'http-server', nodes, labels }));
  }
  const total = 1 + 2 * Math.ceil(o.lowPods / 2);
  const readyOnSource = async () => {
    const pods = (await core.listNamespacedPod({ namespace: o.namespace, labelSelector: `${EXPERIMENT_LABEL}=failover` })).items;
    return pods.filter((p) => podReady(p) && p.spec?.nodeName === o.source).length === total;
  };
  await pollUntil(`${total} pods Ready on ${o.source}`, readyOnSource, { timeoutMs: 120_000, intervalMs: 250 });
  await setUnschedulable(core, o.destinations, false);

  const events: FailoverEvents = { prioScheduled: null, prioReady: null, prioUp: null, lastScheduled: null, lastReady: null };
  const scheduled = new Map<string, number>();
  const ready = new Map<string, number>();
  let t0 = 0;
  let probe: Promise<number> | undefined;
  const onPod = (p: V1Pod) => {
    if (!t0 || !o.destinations.includes(p.spec?.nodeName ?? '') || p.metadata?.deletionTimestamp) return;
    const uid = p.metadata!.uid!;
    const now = Date.now();
    const prio = p.metadata?.labels?.[CRITICALITY_LABEL] === 'high';
    if (!scheduled.has(uid)) scheduled.set(uid, now);
    if (podReady(p) && !ready.has(uid)) ready.set(uid, now);
    if (prio) {
      events.prioScheduled ??= (scheduled.get(uid)! - t0) / 1000;
      if (podReady(p)) events.prioReady ??= (ready.get(uid)! - t0) / 1000;
      if (p.status?.podIP && !probe) probe = udpFirstAnswer(p.status.podIP, undefined, { intervalMs: 50, timeoutMs: o.timeoutMs ?? 120_000 });
    }
  };
  const informer = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${o.namespace}/pods`, labelSelector: `${EXPERIMENT_LABEL}=failover` });
  informer.on('add', onPod);
  informer.on('update', onPod);
  await informer.start();
  try {
    t0 = await taintNoExecute(core, o.source);
    for (const p of informer.list()) onPod(p);
    await pollUntil(`${total} pods Ready on ${o.destinations.join(',')}`, () => ready.size >= total && (probe !== undefined), {
      timeoutMs: o.timeoutMs ?? 120_000,
      intervalMs: 100,
    });
    events.prioUp = ((await probe!) - t0) / 1000;
    events.lastScheduled = (Math.max(...scheduled.values()) - t0) / 1000;
    events.lastReady = (Math.max(...ready.values()) - t0) / 1000;
    return events;
  } finally {
    informer.stop();
    await untaint(core, o.source);
  }
}
