/**
 * The controller manager's CriticalPathHold (controller-manager/critical-path-hold.ts) against the
 * real apiserver, kube-scheduler and kwok: while a critical pod is on its way to Ready, Ulysses'
 * ReplicaSet controller in periodic mode does not create the pods of a low-priority ReplicaSet; once
 * the critical pod is Ready it does. Control in the same run: with the hold switched off at runtime,
 * the low pods are created while a critical pod is still Pending.
 *
 * Ordered by events, not by time: the critical pod is kept Pending (its nodeSelector asks for a
 * label no node has) until the test has seen the ReplicaSet's key held in the periodic queue
 * (ulysses_worker_held_slots_total grows while the ReplicaSet is in the controller's cache); only
 * then does the node get the label, kube-scheduler binds the pod and kwok makes it Ready.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { AppsV1Api, CoreV1Api, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import type { ControllerManager } from '../../controller-manager/manager.ts';
import { KubeClient } from '../../core/kube.ts';

const ns = 'cph-it';
const GATE = 'ulysses.io/cph-gate';
const t = useSharedTestbed('control-plane', {
  realNodes: 0,
  kwokNodes: 1,
  controllers: '*,-replicaset-controller',
  namespace: ns,
  controllerManager: {
    controllers: ['replicaset'],
    pools: { replicaset: { mode: 'multi-priority-periodic', periodMs: 100 } },
    // long enough that only the critical pod's Ready can end the hold within the test
    criticalPathHoldMs: 60_000,
  },
});
let core: CoreV1Api, apps: AppsV1Api, cm: ControllerManager;
beforeAll(() => {
  ({ core, apps } = t);
  cm = t.cm!;
});

const onKwok = { tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }] };

function criticalPod(name: string, gate: string): V1Pod {
  return {
    metadata: { name, namespace: ns, labels: { app: name, [CRITICALITY_LABEL]: 'high' } },
    spec: { ...onKwok, nodeSelector: { type: 'kwok', [GATE]: gate }, containers: [{ name: 'c', image: 'pause' }] },
  };
}

function lowReplicaSet(name: string, replicas: number): V1ReplicaSet {
  const labels = { app: name, [CRITICALITY_LABEL]: 'low' };
  return {
    metadata: { name, namespace: ns, labels },
    spec: { replicas, selector: { matchLabels: { app: name } }, template: { metadata: { labels }, spec: { ...onKwok, nodeSelector: { type: 'kwok' }, containers: [{ name: 'c', image: 'pause' }] } } },
  };
}

const podsOf = async (app: string) => (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items;
const readyCondition = (p: V1Pod) => p.status?.conditions?.find((c) => c.type === 'Ready' && c.status === 'True');

describe('CriticalPathHold on the testbed', () => {
  it('holds a low ReplicaSet’s pod creations while a critical pod is not Ready, releases them once it is', async () => {
    await core.createNamespacedPod({ namespace: ns, body: criticalPod('crit', 'open') });
    await pollUntil('the controller manager holding for the Pending critical pod', () => cm.criticalPathHold.active(), { timeoutMs: 30_000, intervalMs: 50 });
    await apps.createNamespacedReplicaSet({ namespace: ns, body: lowReplicaSet('low', 3) });
    await pollUntil('the low ReplicaSet in the controller manager’s cache', () => cm.informers.replicaSets.get(`${ns}/low`), { timeoutMs: 30_000, intervalMs: 50 });
    // the ReplicaSet's key is queued: periodic ticks now find it and hold it
    const heldBefore = cm.pool('replicaset').stats().heldSlots;
    await pollUntil('20 held periodic ticks', () => cm.pool('replicaset').stats().heldSlots >= heldBefore + 20, { timeoutMs: 30_000, intervalMs: 50 });
    expect(await podsOf('low')).toHaveLength(0);

    // open the node: the critical pod is bound, kwok makes it Ready, the hold ends
    const node = (await core.listNode()).items[0]!.metadata!.name!;
    await new KubeClient(t.kc).mergePatch(`/api/v1/nodes/${node}`, { metadata: { labels: { [GATE]: 'open' } } });
    const low = await pollUntil('3 low pods created', async () => {
      const pods = await podsOf('low');
      return pods.length === 3 && pods;
    }, { timeoutMs: 60_000, intervalMs: 100 });
    const crit = await core.readNamespacedPod({ name: 'crit', namespace: ns });
    const ready = readyCondition(crit);
    expect(ready, 'critical pod Ready').toBeDefined();
    // none of them was created before the critical pod was Ready (both server clocks, 1 s granularity)
    for (const p of low) expect(new Date(p.metadata!.creationTimestamp!).getTime()).toBeGreaterThanOrEqual(new Date(ready!.lastTransitionTime!).getTime());
    expect(cm.criticalPathHold.active()).toBe(false);
  });

  it('control: switched off at runtime, the same low ReplicaSet gets its pods while a critical pod is still Pending', async () => {
    cm.criticalPathHold.setMaxHoldMs(0);
    await core.createNamespacedPod({ namespace: ns, body: criticalPod('crit-2', 'never') });
    await apps.createNamespacedReplicaSet({ namespace: ns, body: lowReplicaSet('low-2', 3) });
    await pollUntil('3 low-2 pods created', async () => (await podsOf('low-2')).length === 3, { timeoutMs: 60_000, intervalMs: 100 });
    const crit = await core.readNamespacedPod({ name: 'crit-2', namespace: ns });
    expect(crit.spec?.nodeName).toBeFalsy();
    expect(readyCondition(crit)).toBeUndefined();
  });
});
