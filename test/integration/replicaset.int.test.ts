/**
 * Our ReplicaSet controller replaces kube-controller-manager's on the real testbed
 * (--controllers=*,-replicaset-controller): pods created from the template run Ready on real
 * kubelets, status is published, scale down removes the least valuable pods, orphans are adopted,
 * watch lag never produces duplicate pods, and switching the serving mode mid-scale loses nothing.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod, type V1ReplicaSet } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment } from '../../experiments/workloads.ts';
import { ControllerManager } from '../../controller-manager/manager.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const ns = 'rs-it';
const t = useSharedTestbed('real-nodes', {
  realNodes: 2,
  kwokNodes: 4,
  controllers: '*,-replicaset-controller',
  namespace: ns,
  controllerManager: { controllers: ['replicaset'] },
});
let kc: KubeConfig, core: CoreV1Api, apps: AppsV1Api, cm: ControllerManager;
beforeAll(() => {
  ({ kc, core, apps } = t);
  cm = t.cm!;
});

function rsBody(name: string, replicas: number, onKwok: boolean, criticality: 'low' | 'high' = 'low'): V1ReplicaSet {
  const d = deployment({ namespace: ns, name, replicas, criticality, image: 'http-server', nodes: onKwok ? undefined : ['real-1', 'real-2'] });
  const tpl = d.spec!.template;
  if (onKwok) {
    tpl.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
    tpl.spec!.nodeSelector = { type: 'kwok' };
  }
  return { apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: { name, namespace: ns }, spec: { replicas, selector: d.spec!.selector, template: tpl } };
}

const activePods = async (app: string) =>
  (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items.filter((p) => !p.metadata?.deletionTimestamp);

const rsStatus = async (name: string) => (await apps.readNamespacedReplicaSetStatus({ name, namespace: ns })).status;

describe('ReplicaSet controller on the real testbed', () => {

  it('runs a Deployment whose ReplicaSet only Ulysses manages: pods Ready on real kubelets, status published', async () => {
    await apps.createNamespacedDeployment({ namespace: ns, body: deployment({ namespace: ns, name: 'web', replicas: 4, criticality: 'low', image: 'http-server', nodes: ['real-1', 'real-2'] }) });
    const rs = await pollUntil('ReplicaSet of web with 4 available', async () => {
      const list = (await apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: 'app=web' })).items;
      return list.length === 1 && list[0]!.status?.availableReplicas === 4 && list[0];
    }, { timeoutMs: 90_000 });
    expect(rs.status).toMatchObject({ replicas: 4, fullyLabeledReplicas: 4, readyReplicas: 4, availableReplicas: 4, observedGeneration: rs.metadata?.generation });
    const pods = await activePods('web');
    expect(pods).toHaveLength(4);
    for (const p of pods) {
      const ref = p.metadata?.ownerReferences?.find((r) => r.controller);
      expect(ref).toMatchObject({ kind: 'ReplicaSet', name: rs.metadata!.name, uid: rs.metadata!.uid, blockOwnerDeletion: true });
      expect(p.metadata?.generateName).toBe(`${rs.metadata!.name}-`);
    }
    // the Deployment controller (still vanilla) sees our status
    await pollUntil('Deployment available', async () => (await apps.readNamespacedDeployment({ name: 'web', namespace: ns })).status?.availableReplicas === 4, { timeoutMs: 30_000 });
  });

  it('scales up without ever exceeding the desired count, then down', async () => {
    let maxActive = 0;
    const active = new Set<string>();
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods`, labelSelector: 'app=burst' });
    const track = (p: V1Pod) => {
      if (p.metadata?.deletionTimestamp) active.delete(p.metadata!.name!);
      else active.add(p.metadata!.name!);
      maxActive = Math.max(maxActive, active.size);
    };
    watch.on('add', track);
    watch.on('update', track);
    watch.on('delete', (p) => active.delete(p.metadata!.name!));
    await watch.start();
    await apps.createNamespacedReplicaSet({ namespace: ns, body: rsBody('burst', 30, true) });
    await pollUntil('30 burst pods available', async () => (await rsStatus('burst'))?.availableReplicas === 30, { timeoutMs: 120_000 });
    expect((await activePods('burst')).length).toBe(30);
    expect(maxActive).toBe(30); // expectations: no duplicate creations while the watch lags

    await apps.patchNamespacedReplicaSetScale({ name: 'burst', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 7 }] }, undefined);
    await pollUntil('7 burst pods', async () => (await activePods('burst')).length === 7 && (await rsStatus('burst'))?.replicas === 7, { timeoutMs: 60_000 });
    watch.stop();
  });

  it('adopts a matching orphan and deletes the surplus to keep spec.replicas', async () => {
    await apps.createNamespacedReplicaSet({ namespace: ns, body: rsBody('adopt', 2, true) });
    await pollUntil('2 adopt pods', async () => (await rsStatus('adopt'))?.availableReplicas === 2, { timeoutMs: 60_000 });
    const tpl = rsBody('adopt', 2, true).spec!.template!;
    await core.createNamespacedPod({ namespace: ns, body: { metadata: { name: 'orphan', labels: tpl.metadata!.labels }, spec: tpl.spec } });
    const rs = await apps.readNamespacedReplicaSet({ name: 'adopt', namespace: ns });
    await pollUntil('back to 2 pods, all owned', async () => {
      const pods = await activePods('adopt');
      return pods.length === 2 && pods.every((p) => p.metadata?.ownerReferences?.some((r) => r.uid === rs.metadata!.uid && r.controller));
    }, { timeoutMs: 60_000 });
  });

  it('switches to multi-priority-periodic during a scale-up without losing work', async () => {
    await apps.createNamespacedReplicaSet({ namespace: ns, body: rsBody('switch', 1, true) });
    await pollUntil('1 switch pod', async () => (await rsStatus('switch'))?.availableReplicas === 1, { timeoutMs: 60_000 });
    await apps.patchNamespacedReplicaSetScale({ name: 'switch', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 12 }] }, undefined);
    cm.setMode('replicaset', 'multi-priority-periodic');
    expect(cm.pool('replicaset').mode).toBe('multi-priority-periodic');
    await pollUntil('12 switch pods available', async () => (await rsStatus('switch'))?.availableReplicas === 12, { timeoutMs: 90_000 });
    expect((await activePods('switch')).length).toBe(12);
    cm.setMode('replicaset', 'vanilla');
  });

  it('in periodic mode serves a high-criticality ReplicaSet at once while a low-priority backlog drains at T/N', async () => {
    // 4 periodic workers, T = 2 s: one low key every 500 ms; the 5th worker serves high keys at once
    cm.setMode('replicaset', 'multi-priority-periodic', { workers: 5, periodMs: 2000 });
    const firstPodAt = new Map<string, number>();
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods`, labelSelector: 'ulysses.io/experiment=prio' });
    watch.on('add', (p) => {
      const app = p.metadata!.labels!.app!;
      if (!firstPodAt.has(app)) firstPodAt.set(app, Date.now());
    });
    await watch.start();
    const lows = Array.from({ length: 20 }, (_, i) => `low-${i}`);
    const body = (name: string, c: 'low' | 'high') => {
      const rs = rsBody(name, 1, true, c);
      rs.spec!.template!.metadata!.labels!['ulysses.io/experiment'] = 'prio';
      return rs;
    };
    for (const name of lows) await apps.createNamespacedReplicaSet({ namespace: ns, body: body(name, 'low') });
    const highCreated = Date.now();
    await apps.createNamespacedReplicaSet({ namespace: ns, body: body('critical', 'high') });
    await pollUntil('pod of the high-criticality ReplicaSet', () => firstPodAt.has('critical'), { timeoutMs: 30_000 });
    const served = lows.filter((l) => (firstPodAt.get(l) ?? Infinity) < firstPodAt.get('critical')!).length;
    expect(firstPodAt.get('critical')! - highCreated).toBeLessThan(1500);
    expect(served).toBeLessThan(10); // most of the low backlog is still waiting for its slot
    const pool = cm.pool('replicaset');
    expect(pool.queue.len()).toBeGreaterThan(5);
    // and the backlog drains at the periodic rate, not at once
    const t = Date.now();
    await pollUntil('all low ReplicaSets served', () => lows.every((l) => firstPodAt.has(l)), { timeoutMs: 60_000 });
    expect(Date.now() - t).toBeGreaterThan(3000);
    watch.stop();
    cm.setMode('replicaset', 'vanilla');
  });
});
