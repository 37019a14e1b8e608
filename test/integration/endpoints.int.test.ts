/**
 * Our legacy Endpoints controller replaces kube-controller-manager's (--controllers=*,-endpoints-controller):
 * Endpoints named like the Service list its Ready pods as addresses and the others as
 * notReadyAddresses, with targetRef/nodeName, ports resolved by name, the managed-by label, the
 * trigger-time annotation; they follow a scale-down, and disappear with the Service.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, type V1Endpoints } from '@kubernetes/client-node';
import { reconcileServiceAgain, useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { applyDeployment, deployment } from '../../experiments/workloads.ts';

const ns = 'ep-it';
const t = useSharedTestbed('real-nodes', { realNodes: 2, controllers: '*,-endpoints-controller', namespace: ns, controllerManager: { controllers: ['endpoints'] } });
let core: CoreV1Api, apps: AppsV1Api;
beforeAll(() => ({ core, apps } = t));

const endpointsOf = async (name: string): Promise<V1Endpoints | undefined> => {
  try {
    return await core.readNamespacedEndpoints({ name, namespace: ns });
  } catch {
    return undefined;
  }
};
const ready = (ep?: V1Endpoints) => (ep?.subsets ?? []).flatMap((s) => s.addresses ?? []);
const notReady = (ep?: V1Endpoints) => (ep?.subsets ?? []).flatMap((s) => s.notReadyAddresses ?? []);

describe('legacy Endpoints controller on the real testbed', () => {
  it('lists Ready pods as addresses with targetRef, node and named ports; not-ready ones as notReadyAddresses', async () => {
    const d = deployment({ namespace: ns, name: 'web', replicas: 3, criticality: 'low', image: 'http-server', nodes: ['real-1', 'real-2'] });
    d.spec!.template.spec!.containers[0]!.ports = [{ name: 'http', containerPort: 8080, protocol: 'TCP' }];
    await applyDeployment(apps, d);
    await core.createNamespacedService({
      namespace: ns,
      body: { metadata: { name: 'web', labels: { tier: 'front' } }, spec: { selector: { app: 'web' }, ports: [{ name: 'web', port: 80, targetPort: 'http' as never }, { name: 'raw', port: 81, targetPort: 8080 as never }] } },
    });
    const ep = await pollUntil('3 ready addresses', async () => {
      const e = await endpointsOf('web');
      return ready(e).length === 3 && e;
    }, { timeoutMs: 90_000 });
    expect(ep.metadata?.labels).toMatchObject({ tier: 'front', 'endpoints.kubernetes.io/managed-by': 'endpoint-controller' });
    // as upstream, a sync retried after a conflict (our cache behind our own create) knows no trigger
    // time any more and writes none; when present it is an RFC 3339 time (the values: endpoints.test.ts)
    const trigger = ep.metadata?.annotations?.['endpoints.kubernetes.io/last-change-trigger-time'];
    if (trigger !== undefined) expect(trigger).toMatch(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/);
    expect(ep.subsets).toHaveLength(1);
    expect([...ep.subsets![0]!.ports!].sort((a, b) => a.name!.localeCompare(b.name!))).toEqual([
      { name: 'raw', port: 8080, protocol: 'TCP' },
      { name: 'web', port: 8080, protocol: 'TCP' },
    ]);
    const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' })).items;
    const byName = new Map(pods.map((p) => [p.metadata!.name!, p]));
    for (const a of ready(ep)) {
      const p = byName.get(a.targetRef!.name!)!;
      expect(a.ip).toBe(p.status!.podIP);
      expect(a.nodeName).toBe(p.spec!.nodeName);
      expect(a.targetRef).toMatchObject({ kind: 'Pod', namespace: ns, uid: p.metadata!.uid });
    }

    const bad = deployment({ namespace: ns, name: 'unready', replicas: 1, criticality: 'low', image: 'http-server', nodes: ['real-1'] });
    bad.spec!.template.spec!.containers[0]!.readinessProbe = { httpGet: { path: '/', port: 9999 as never }, periodSeconds: 1 };
    await applyDeployment(apps, bad);
    await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'unready' }, spec: { selector: { app: 'unready' }, ports: [{ port: 80, targetPort: 8080 as never }] } } });
    const ue = await pollUntil('one not-ready address', async () => {
      const e = await endpointsOf('unready');
      return notReady(e).length === 1 && e;
    }, { timeoutMs: 60_000 });
    expect(ready(ue)).toHaveLength(0);
    expect(ue.subsets![0]!.ports).toEqual([{ port: 8080, protocol: 'TCP' }]);
  });

  it('does not rewrite Endpoints whose content did not change', async () => {
    for (const name of ['web', 'unready']) {
      const before = await endpointsOf(name);
      await reconcileServiceAgain(t, 'endpoints', ns, name);
      expect((await endpointsOf(name))!.metadata!.resourceVersion, name).toBe(before!.metadata!.resourceVersion);
    }
  });

  it('follows a scale-down and is deleted with its Service', async () => {
    await apps.patchNamespacedDeploymentScale({ name: 'web', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 1 }] }, undefined);
    await pollUntil('1 address', async () => {
      const e = await endpointsOf('web');
      return ready(e).length === 1 && notReady(e).length === 0;
    }, { timeoutMs: 60_000 });
    await core.deleteNamespacedService({ name: 'web', namespace: ns });
    await pollUntil('Endpoints gone', async () => (await endpointsOf('web')) === undefined, { timeoutMs: 30_000 });
  });
});
