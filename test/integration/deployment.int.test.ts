/**
 * Our Deployment controller (with our ReplicaSet controller) replaces kube-controller-manager's
 * (--controllers=*,-replicaset-controller,-deployment-controller): a non-critical Deployment on real
 * kubelets gets its `<name>-<pod-template-hash>` ReplicaSet, rolls out a new template within
 * maxSurge/maxUnavailable to the right end state (revisions, status, conditions, old RS at 0), scales,
 * and a Recreate Deployment never runs old and new pods together.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Deployment, type V1Pod, type V1ReplicaSet } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment } from '../../experiments/workloads.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const ns = 'deploy-it';
const t = useSharedTestbed('real-nodes', {
  realNodes: 2,
  kwokNodes: 2,
  controllers: '*,-replicaset-controller,-deployment-controller',
  namespace: ns,
  controllerManager: { controllers: ['deployment', 'replicaset'], autoHoldMs: 1500 },
});
let kc: KubeConfig, core: CoreV1Api, apps: AppsV1Api;
beforeAll(() => ({ kc, core, apps } = t));

const rsOf = async (app: string) => (await apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: `app=${app}` })).items;
const podsOf = async (app: string) => (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
const read = (name: string) => apps.readNamespacedDeployment({ name, namespace: ns });
const complete = (d: V1Deployment) =>
  d.status?.observedGeneration === d.metadata?.generation &&
  d.status?.updatedReplicas === d.spec?.replicas &&
  d.status?.replicas === d.spec?.replicas &&
  d.status?.availableReplicas === d.spec?.replicas &&
  d.status?.conditions?.some((c) => c.type === 'Progressing' && c.reason === 'NewReplicaSetAvailable');

describe('Deployment controller on the real testbed', () => {
  it('creates <name>-<hash>, rolls out a new template within maxSurge/maxUnavailable, ends in the upstream state', async () => {
    const body = deployment({ namespace: ns, name: 'web', replicas: 4, criticality: 'low', image: 'http-server', nodes: ['real-1', 'real-2'] });
    body.spec!.strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1 as never, maxUnavailable: 0 as never } };
    await apps.createNamespacedDeployment({ namespace: ns, body });
    const d1 = await pollUntil('web complete', async () => {
      const d = await read('web');
      return complete(d) && d;
    }, { timeoutMs: 120_000 });
    const [rs1] = await rsOf('web');
    const hash1 = rs1!.metadata!.labels!['pod-template-hash']!;
    expect(hash1).toMatch(/^[bcdfghjklmnpqrstvwxz2456789]+$/);
    expect(rs1!.metadata!.name).toBe(`web-${hash1}`);
    expect(rs1!.spec!.selector!.matchLabels).toEqual({ app: 'web', 'pod-template-hash': hash1 });
    expect(rs1!.spec!.template!.metadata!.labels!['pod-template-hash']).toBe(hash1);
    expect(rs1!.metadata!.annotations).toMatchObject({ 'deployment.kubernetes.io/revision': '1', 'deployment.kubernetes.io/desired-replicas': '4', 'deployment.kubernetes.io/max-replicas': '5' });
    expect(rs1!.metadata!.ownerReferences![0]).toMatchObject({ kind: 'Deployment', name: 'web', uid: d1.metadata!.uid, controller: true });
    expect(d1.metadata!.annotations!['deployment.kubernetes.io/revision']).toBe('1');
    expect(d1.status!.conditions!.find((c) => c.type === 'Available')).toMatchObject({ status: 'True', reason: 'MinimumReplicasAvailable' });

    // watch every ReplicaSet and pod of the rollout: total desired never above replicas + maxSurge,
    // available (from the ReplicaSets' status) never below replicas - maxUnavailable
    let maxTotal = 0;
    let minAvailable = Infinity;
    const rsWatch = new ResilientInformer<V1ReplicaSet>(kc, { path: `/apis/apps/v1/namespaces/${ns}/replicasets`, labelSelector: 'app=web' });
    // every state seen, for the failure message: "name spec/available@resourceVersion" per RS
    const history: string[] = [];
    const observe = () => {
      const all = rsWatch.list();
      history.push(all.map((rs) => `${rs.metadata!.name} ${rs.spec?.replicas ?? 0}/${rs.status?.availableReplicas ?? 0}@${rs.metadata!.resourceVersion}`).join(', '));
      maxTotal = Math.max(maxTotal, all.reduce((n, rs) => n + (rs.spec?.replicas ?? 0), 0));
      minAvailable = Math.min(minAvailable, all.reduce((n, rs) => n + (rs.status?.availableReplicas ?? 0), 0));
    };
    rsWatch.on('add', observe);
    rsWatch.on('update', observe);
    await rsWatch.start();

    await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { rollout: '2' } }] }, undefined);
    const d2 = await pollUntil('web rolled out', async () => {
      const d = await read('web');
      return d.metadata!.generation === 2 && complete(d) && (await rsOf('web')).every((rs) => rs.metadata!.labels!['pod-template-hash'] !== hash1 || (rs.spec?.replicas === 0 && (rs.status?.replicas ?? 0) === 0)) && d;
    }, { timeoutMs: 180_000 });
    rsWatch.stop();
    expect(maxTotal, history.join('\n')).toBeLessThanOrEqual(5);
    expect(minAvailable, history.join('\n')).toBeGreaterThanOrEqual(4);

    const rss = await rsOf('web');
    expect(rss).toHaveLength(2);
    const old = rss.find((rs) => rs.metadata!.name === `web-${hash1}`)!;
    const nw = rss.find((rs) => rs !== old)!;
    const hash2 = nw.metadata!.labels!['pod-template-hash']!;
    expect(hash2).not.toBe(hash1);
    expect(nw.metadata!.name).toBe(`web-${hash2}`);
    expect(old.spec!.replicas).toBe(0);
    expect(old.metadata!.annotations!['deployment.kubernetes.io/revision']).toBe('1');
    expect(nw.metadata!.annotations!['deployment.kubernetes.io/revision']).toBe('2');
    expect(nw.spec!.replicas).toBe(4);
    expect(d2.metadata!.annotations!['deployment.kubernetes.io/revision']).toBe('2');
    expect(d2.status).toMatchObject({ replicas: 4, updatedReplicas: 4, readyReplicas: 4, availableReplicas: 4, observedGeneration: 2 });
    expect(d2.status!.unavailableReplicas ?? 0).toBe(0);
    expect(d2.status!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({ status: 'True', reason: 'NewReplicaSetAvailable', message: `ReplicaSet "web-${hash2}" has successfully progressed.` });
    const pods = await podsOf('web');
    expect(pods).toHaveLength(4);
    for (const p of pods) {
      expect(p.metadata!.labels!['pod-template-hash']).toBe(hash2);
      expect(p.metadata!.annotations!.rollout).toBe('2');
      expect(p.metadata!.ownerReferences![0]).toMatchObject({ kind: 'ReplicaSet', name: `web-${hash2}`, uid: nw.metadata!.uid });
    }
    // Events as upstream, reported by Ulysses
    const events = await pollUntil('ScalingReplicaSet and SuccessfulCreate events', async () => {
      const ev = (await core.listNamespacedEvent({ namespace: ns })).items.filter((e) => e.reportingComponent === 'ulysses-controller-manager');
      return ev.some((e) => e.reason === 'ScalingReplicaSet' && e.message === `Scaled down replica set web-${hash1} from 1 to 0`) && ev.some((e) => e.reason === 'SuccessfulCreate') && ev;
    }, { timeoutMs: 15_000 });
    const scaling = events.find((e) => e.reason === 'ScalingReplicaSet')!;
    expect(scaling).toMatchObject({ type: 'Normal', source: { component: 'deployment-controller' }, involvedObject: { kind: 'Deployment', name: 'web', uid: d2.metadata!.uid } });
    expect(events.find((e) => e.reason === 'SuccessfulCreate')).toMatchObject({ source: { component: 'replicaset-controller' }, involvedObject: { kind: 'ReplicaSet' } });
  });

  it('scales up and down; the desired-replicas annotation follows', async () => {
    await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 6 }] }, undefined);
    await pollUntil('web at 6', async () => complete(await read('web')) && (await podsOf('web')).length === 6, { timeoutMs: 120_000 });
    const [rs] = (await rsOf('web')).filter((r) => (r.spec?.replicas ?? 0) > 0);
    expect(rs!.metadata!.annotations!['deployment.kubernetes.io/desired-replicas']).toBe('6');
    await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 2 }] }, undefined);
    await pollUntil('web at 2', async () => complete(await read('web')) && (await podsOf('web')).length === 2, { timeoutMs: 60_000 });
  });

  it('Recreate: the new ReplicaSet gets pods only after every old pod is gone', async () => {
    const body = deployment({ namespace: ns, name: 'rec', replicas: 3, criticality: 'low', image: 'http-server' });
    body.spec!.strategy = { type: 'Recreate' };
    body.spec!.template.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
    body.spec!.template.spec!.nodeSelector = { type: 'kwok' };
    await apps.createNamespacedDeployment({ namespace: ns, body });
    await pollUntil('rec complete', async () => complete(await read('rec')), { timeoutMs: 60_000 });
    const hash1 = (await rsOf('rec'))[0]!.metadata!.labels!['pod-template-hash'];
    const live = new Map<string, string>();
    let overlap = 0;
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods`, labelSelector: 'app=rec' });
    watch.on('add', (p) => {
      const h = p.metadata!.labels!['pod-template-hash']!;
      if (h !== hash1 && [...live.values()].includes(hash1!)) overlap++;
      live.set(p.metadata!.name!, h);
    });
    watch.on('delete', (p) => live.delete(p.metadata!.name!));
    await watch.start();
    await apps.patchNamespacedDeployment({ name: 'rec', namespace: ns, body: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { rollout: '2' } }] }, undefined);
    await pollUntil('rec rolled out', async () => {
      const d = await read('rec');
      return d.metadata!.generation === 2 && complete(d);
    }, { timeoutMs: 90_000 });
    watch.stop();
    expect(overlap).toBe(0);
    expect([...live.values()].filter((h) => h !== hash1)).toHaveLength(3);
    expect((await read('rec')).metadata!.annotations!['deployment.kubernetes.io/revision']).toBe('2');
  });

  it('auto mode: vanilla while only low pods exist, periodic while a high-criticality Deployment runs (and it still rolls out), vanilla after', async () => {
    const cm = t.cm!;
    cm.setMode('deployment', 'auto', { periodMs: 100 });
    cm.setMode('replicaset', 'auto', { periodMs: 100 });
    expect(cm.modeOf('deployment')).toBe('auto');
    expect(cm.pool('deployment').mode).toBe('vanilla');
    const body = deployment({ namespace: ns, name: 'crit', replicas: 2, criticality: 'high', image: 'http-server' });
    body.spec!.template.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
    body.spec!.template.spec!.nodeSelector = { type: 'kwok' };
    await apps.createNamespacedDeployment({ namespace: ns, body });
    await pollUntil('crit complete', async () => complete(await read('crit')), { timeoutMs: 60_000 });
    expect(cm.pool('deployment').mode).toBe('multi-priority-periodic');
    expect(cm.pool('replicaset').mode).toBe('multi-priority-periodic');
    expect(cm.pool('deployment').config.periodMs).toBe(100);
    // a rollout of the low Deployment is served by the periodic workers
    await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: [{ op: 'add', path: '/spec/template/metadata/annotations/rollout', value: '3' }] }, undefined);
    await pollUntil('web rolled out in periodic mode', async () => {
      const d = await read('web');
      return d.metadata!.generation! >= 5 && complete(d) && d.metadata!.annotations!['deployment.kubernetes.io/revision'] === '3';
    }, { timeoutMs: 120_000 });
    expect(cm.pool('deployment').mode).toBe('multi-priority-periodic');
    // no high pod left: back to vanilla after the hold
    await apps.patchNamespacedDeployment({ name: 'crit', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 0 }] }, undefined);
    await pollUntil('no crit pod', async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=crit' })).items.length === 0, { timeoutMs: 60_000 });
    await pollUntil('auto back to vanilla', () => cm.pool('deployment').mode === 'vanilla' && cm.pool('replicaset').mode === 'vanilla', { timeoutMs: 10_000 });
    expect(cm.modeOf('deployment')).toBe('auto');
  });
});
