/**
 * Who binds which pod, on the testbed's real kube-scheduler with the two `extenders` entries of
 * scheduler-plugins/extender/kube-scheduler-config.ts and one REAL kubelet (real-1: a budget-period
 * RT node with 2 cores on TDMA network rtnet0):
 * - a plain pod is filtered by the extender and bound by kube-scheduler itself: no bind request
 *   reaches the extender (kube-scheduler asks the bind entry only for pods requesting
 *   ulysses.io/reservation, pkg/scheduler/schedule_one.go extendersBinding);
 * - a TDMA pod and an RT pod requesting ulysses.io/reservation are bound by the extender, their
 *   reservation recorded, and Running: kube-scheduler does not fit the resource no node advertises
 *   (ignoredByScheduler) and the kubelet drops it at admission
 *   (pkg/kubelet/lifecycle/predicate.go removeMissingExtendedResources);
 * - an RT pod and a TDMA pod without it stay Pending, their FailedScheduling event naming the pod
 *   and what to add; recreated with it, the RT pod is bound with its reservation;
 * - one node: kube-scheduler never calls prioritize (schedule_one.go: "When only one node after
 *   predicate, just use it").
 * The extender's verbs are recorded per pod by wrapping its filter, prioritize and bind methods
 * (the routes call them), and its ulysses_extender_binds_total is read.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { createAndWaitRefused as refusedIn, useTestbed } from './harness.ts';
import { KubeClient } from '../../core/kube.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { TEST_IMAGES } from '../../experiments/testbed/images/index.ts';
import { renderKubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { ExtenderServer, type Verb } from '../../scheduler-plugins/extender/server.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { RESERVATION_RESOURCE, reservationRequest } from '../../scheduler-plugins/schedulability.ts';

const runDir = '/tmp/ulysses-it-sched-binder';
const schedulerConfig = '/tmp/ulysses-it-sched-binder-kube-scheduler.yaml';
const PORT = 20470;
const ns = 'sched-bind';
const NODE = 'real-1';
writeFileSync(schedulerConfig, renderKubeSchedulerConfiguration({ kubeconfig: schedulerKubeconfigPath(runDir), extenderUrl: `http://127.0.0.1:${PORT}`, httpTimeout: '5s' }));
const t = useTestbed(runDir, { realNodes: 1, namespace: ns, schedulerConfig });

let core: CoreV1Api;
let extender: ExtenderServer;
/** Every verb the extender answered, with the pod it was about. */
const calls: Array<{ verb: Verb; pod: string | undefined }> = [];
const verbsOf = (pod: string) => calls.filter((c) => c.pod === pod).map((c) => c.verb);

beforeAll(async () => {
  core = t.core;
  await new KubeClient(t.kc).mergePatch(`/api/v1/nodes/${NODE}`, {
    metadata: { labels: { 'ulysses.io/rt-scheduler': 'budget-period', 'ulysses.io/tdma-network': 'rtnet0' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":2}' } },
  });
  extender = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: PORT }, tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, kubeconfig: t.kc });
  const [filter, prioritize, bind] = [extender.filter.bind(extender), extender.prioritize.bind(extender), extender.bind.bind(extender)];
  extender.filter = (args) => (calls.push({ verb: 'filter', pod: args.Pod.metadata?.name }), filter(args));
  extender.prioritize = (args) => (calls.push({ verb: 'prioritize', pod: args.Pod.metadata?.name }), prioritize(args));
  extender.bind = (args) => (calls.push({ verb: 'bind', pod: args.PodName }), bind(args));
  await extender.start();
  await pollUntil('extender sees the node role', async () => extender.state.node(NODE)?.tdmaNetwork === 'rtnet0' && extender.state.node(NODE)?.rtKind === 'budget-period', { timeoutMs: 30_000 });
});
afterAll(async () => {
  await extender?.stop();
});

function realPod(name: string, annotations: Record<string, string>, o: { reservation: boolean }): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, annotations },
    spec: {
      terminationGracePeriodSeconds: 0,
      enableServiceLinks: false,
      automountServiceAccountToken: false,
      containers: [{ name: 'c', image: TEST_IMAGES.pause.name, imagePullPolicy: 'Never', ...(o.reservation ? { resources: reservationRequest() } : {}) }],
    },
  };
}
const tdma = { 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots: 2 }) };
const rt = { 'ulysses.io/rt': JSON.stringify({ reservation: { runtimeUs: 2000, periodUs: 10_000, cpus: 1 } }) };

const readPod = (name: string) => core.readNamespacedPod({ name, namespace: ns });
const boundByExtender = async () => Number(/ulysses_extender_binds_total\{result="bound"\} (\d+)/.exec(await (await fetch(`http://127.0.0.1:${PORT}/metrics`)).text())?.[1] ?? 0);

async function createAndWaitRunning(p: V1Pod): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: ns, body: p });
  return pollUntil(`pod ${p.metadata!.name} Running`, async () => {
    const cur = await readPod(p.metadata!.name!);
    return cur.status?.phase === 'Running' ? cur : undefined;
  }, { timeoutMs: 120_000 });
}

const createAndWaitRefused = (p: V1Pod, re: RegExp) => refusedIn(core, ns, p, re);

describe('kube-scheduler binds every pod but those requesting ulysses.io/reservation, which the extender binds', () => {
  it('a plain pod: filtered by the extender, bound by kube-scheduler itself (no bind reaches the extender), Running', async () => {
    const before = await boundByExtender();
    const p = await createAndWaitRunning(realPod('plain', {}, { reservation: false }));
    expect(p.spec?.nodeName).toBe(NODE);
    expect(verbsOf('plain')).toContain('filter');
    expect(verbsOf('plain')).not.toContain('bind');
    // one feasible node: no prioritize (schedule_one.go)
    expect(verbsOf('plain')).not.toContain('prioritize');
    expect(p.metadata?.annotations ?? {}).not.toHaveProperty(RESERVED_NODE_ANNOTATION);
    expect(await boundByExtender()).toBe(before);
  });

  it('a TDMA pod and an RT pod requesting ulysses.io/reservation: bound by the extender, reservation recorded, admitted and Running on the real kubelet', async () => {
    const before = await boundByExtender();
    const t1 = await createAndWaitRunning(realPod('tdma-1', tdma, { reservation: true }));
    const r1 = await createAndWaitRunning(realPod('rt-1', rt, { reservation: true }));
    expect(t1.metadata?.annotations).toMatchObject({ [RESERVED_NODE_ANNOTATION]: NODE, 'ulysses.io/tdma-slots': '[0,1]' });
    expect(r1.metadata?.annotations?.[RESERVED_NODE_ANNOTATION]).toBe(NODE);
    expect(r1.metadata?.annotations?.['ulysses.io/rt-cores']).toMatch(/^\[[01]\]$/);
    for (const name of ['tdma-1', 'rt-1']) {
      expect(verbsOf(name).filter((v) => v === 'bind')).toEqual(['bind']);
      expect(verbsOf(name)).not.toContain('prioritize');
    }
    expect(await boundByExtender()).toBe(before + 2);
    // the node advertises no such resource: kube-scheduler did not fit it, the kubelet admitted the pod without it
    expect(t1.spec?.containers[0]!.resources?.limits?.[RESERVATION_RESOURCE]).toBe('1');
    expect((await core.readNode({ name: NODE })).status?.allocatable ?? {}).not.toHaveProperty(RESERVATION_RESOURCE);
    expect(t1.status?.containerStatuses?.[0]?.state?.running).toBeTruthy();
  });

  it('an RT pod and a TDMA pod without it: Pending, FailedScheduling naming the pod and what to add, nothing bound; recreated with it, the RT pod is bound with its reservation', async () => {
    const before = await boundByExtender();
    const rtMsg = await createAndWaitRefused(realPod('rt-unmarked', rt, { reservation: false }), /requests no ulysses\.io\/reservation/);
    expect(rtMsg).toContain(
      `0/1 nodes are available: 1 ulysses: pod ${ns}/rt-unmarked has ulysses.io/rt but requests no ulysses.io/reservation, so kube-scheduler would bind it without recording its reservation: add resources.limits["ulysses.io/reservation"]: 1 to one container (of its template) and recreate the pod`,
    );
    const tdmaMsg = await createAndWaitRefused(realPod('tdma-unmarked', tdma, { reservation: false }), /requests no ulysses\.io\/reservation/);
    expect(tdmaMsg).toContain(`1 ulysses: pod ${ns}/tdma-unmarked has ulysses.io/tdma but requests no ulysses.io/reservation`);
    for (const name of ['rt-unmarked', 'tdma-unmarked']) {
      expect(verbsOf(name)).not.toContain('bind');
      expect((await readPod(name)).metadata?.annotations ?? {}).not.toHaveProperty(RESERVED_NODE_ANNOTATION);
    }
    expect(await boundByExtender()).toBe(before);

    // the fix the message names
    await core.deleteNamespacedPod({ name: 'rt-unmarked', namespace: ns, gracePeriodSeconds: 0 });
    const fixed = await createAndWaitRunning(realPod('rt-fixed', rt, { reservation: true }));
    expect(fixed.metadata?.annotations?.[RESERVED_NODE_ANNOTATION]).toBe(NODE);
    expect(fixed.metadata?.annotations?.['ulysses.io/rt-cores']).toMatch(/^\[[01]\]$/);
    expect(verbsOf('rt-fixed')).toContain('bind');
    expect(await boundByExtender()).toBe(before + 1);
  });
});
