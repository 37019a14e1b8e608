/**
 * Our taint eviction controller replaces kube-controller-manager's (with our ReplicaSet controller):
 * untolerated NoExecute taints evict at once with the DisruptionTarget condition, tolerationSeconds
 * delays the eviction, a permanent toleration keeps the pod; and the whole failover path (taint ->
 * eviction -> replacement -> Ready on the other real node, answering over UDP) runs on Ulysses.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod, type V1Toleration } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { applyDeployment, deployment, podReady, taintNoExecute, udpFirstAnswer } from '../../experiments/workloads.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { TEST_IMAGES } from '../../experiments/testbed/images/index.ts';

const ns = 'taint-it';
const t = useSharedTestbed('real-nodes', {
  realNodes: 2,
  kwokNodes: 1,
  controllers: '*,-replicaset-controller,-taint-eviction-controller',
  namespace: ns,
  controllerManager: { controllers: ['replicaset', 'taint-eviction'], pools: { 'taint-eviction': { mode: 'multi-priority-periodic' } } },
});
let kc: KubeConfig, core: CoreV1Api, apps: AppsV1Api;
beforeAll(() => ({ kc, core, apps } = t));

function kwokPod(name: string, extra: V1Toleration[]): V1Pod {
  return {
    metadata: { name, namespace: ns, labels: { 'ulysses.io/criticality': 'low' } },
    spec: {
      nodeName: 'kwok-1',
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }, ...extra],
      containers: [{ name: 'c', image: TEST_IMAGES.httpServer.name, imagePullPolicy: 'Never' }],
    },
  };
}

describe('taint eviction on the real testbed', () => {

  it('evicts untolerated pods at once (DisruptionTarget), tolerationSeconds later, permanent tolerations never', async () => {
    const failure = { key: 'ulysses.io/failure', operator: 'Exists', effect: 'NoExecute' };
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('none', []) });
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('two-seconds', [{ ...failure, tolerationSeconds: 2 }]) });
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('forever', [failure]) });
    const disrupted = new Set<string>();
    const deletedAt = new Map<string, number>();
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods` });
    const onPod = (p: V1Pod) => {
      if (p.status?.conditions?.some((c) => c.type === 'DisruptionTarget' && c.reason === 'DeletionByTaintManager')) disrupted.add(p.metadata!.name!);
      if (p.metadata?.deletionTimestamp && !deletedAt.has(p.metadata.name!)) deletedAt.set(p.metadata.name!, Date.now());
    };
    watch.on('add', onPod);
    watch.on('update', onPod);
    watch.on('delete', (p) => deletedAt.has(p.metadata!.name!) || deletedAt.set(p.metadata!.name!, Date.now()));
    await watch.start();
    await pollUntil('pods running on kwok-1', async () => (await core.listNamespacedPod({ namespace: ns })).items.filter((p) => p.status?.phase === 'Running').length === 3, { timeoutMs: 30_000 });

    const t0 = await taintNoExecute(kc, 'kwok-1');
    await pollUntil('untolerating pod evicted', () => deletedAt.has('none'), { timeoutMs: 10_000 });
    expect(deletedAt.get('none')! - t0).toBeLessThan(1500);
    expect(disrupted.has('none')).toBe(true);
    await pollUntil('pod tolerating 2 s evicted', () => deletedAt.has('two-seconds'), { timeoutMs: 10_000 });
    expect(deletedAt.get('two-seconds')! - t0).toBeGreaterThanOrEqual(2000);
    expect(deletedAt.get('two-seconds')! - t0).toBeLessThan(4000);
    expect(deletedAt.has('forever')).toBe(false);
    expect((await core.readNamespacedPod({ name: 'forever', namespace: ns })).metadata?.deletionTimestamp).toBeUndefined();
    watch.stop();
  });

  it('runs the whole failover path on Ulysses controllers: taint, eviction, replacement Ready on the other real node', async () => {
    await applyDeployment(apps, deployment({ namespace: ns, name: 'echo', replicas: 4, criticality: 'high', image: 'udp-echo', nodes: ['real-1', 'real-2'], spread: true }));
    const ready = async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=echo' })).items.filter((p) => podReady(p) && !p.metadata?.deletionTimestamp);
    const before = await pollUntil('4 echo pods Ready on both nodes', async () => {
      const pods = await ready();
      return pods.length === 4 && new Set(pods.map((p) => p.spec?.nodeName)).size === 2 && pods;
    }, { timeoutMs: 90_000 });
    expect(before.filter((p) => p.spec?.nodeName === 'real-1').length).toBe(2);
    // every echo pod the failover makes or deletes: the ReplicaSet controller acts on the eviction's
    // DELETE response before the watch delivers it, and must still create exactly one replacement
    // per evicted pod (the watch's later events for it must not count it active again)
    const seen = new Set<string>();
    const deleted = new Set<string>();
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods`, labelSelector: 'app=echo' });
    const onPod = (p: V1Pod) => {
      seen.add(p.metadata!.name!);
      if (p.metadata?.deletionTimestamp) deleted.add(p.metadata.name!);
    };
    watch.on('add', onPod);
    watch.on('update', onPod);
    watch.on('delete', (p) => deleted.add(p.metadata!.name!));
    await watch.start();
    await taintNoExecute(kc, 'real-1');
    const after = await pollUntil('4 echo pods Ready on real-2', async () => {
      const pods = await ready();
      return pods.length === 4 && pods.every((p) => p.spec?.nodeName === 'real-2') && pods;
    }, { timeoutMs: 90_000 });
    await Promise.all(after.map((p) => udpFirstAnswer(p.status!.podIP!, undefined, { timeoutMs: 10_000 })));
    // the ReplicaSet is synced with its pods (status written after the last watch event it acted on)
    const rsName = after[0]!.metadata!.ownerReferences![0]!.name;
    await pollUntil('ReplicaSet status: 4 ready replicas', async () => {
      const rs = await apps.readNamespacedReplicaSet({ name: rsName, namespace: ns });
      return rs.status?.replicas === 4 && rs.status.readyReplicas === 4;
    }, { timeoutMs: 30_000 });
    watch.stop();
    expect([...deleted].sort()).toEqual(before.filter((p) => p.spec?.nodeName === 'real-1').map((p) => p.metadata!.name!).sort());
    expect(seen.size).toBe(6); // 4 + 2 replacements, no duplicate
  });
});
