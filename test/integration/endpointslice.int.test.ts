/**
 * Our EndpointSlice controller replaces kube-controller-manager's (--controllers=*,-endpointslice-controller):
 * slices for a Service track its ready pods on real kubelets (conditions, targetRef, node, resolved
 * named ports), follow scale-down and not-ready pods, split at 100 endpoints, and keep one empty
 * slice for a Service without endpoints.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type V1EndpointSlice } from '@kubernetes/client-node';
import { reconcileServiceAgain, useSharedTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { applyDeployment, deployment } from '../../experiments/workloads.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const ns = 'eps-it';
const t = useSharedTestbed('real-nodes', {
  realNodes: 2,
  kwokNodes: 2,
  controllers: '*,-endpointslice-controller',
  namespace: ns,
  controllerManager: { controllers: ['endpointslice'] },
});
let core: CoreV1Api, apps: AppsV1Api, discovery: DiscoveryV1Api;
beforeAll(() => ({ core, apps, discovery } = t));

const slicesOf = async (svc: string): Promise<V1EndpointSlice[]> =>
  (await discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: `kubernetes.io/service-name=${svc}` })).items;

async function service(name: string, app: string, targetPort: number | string): Promise<void> {
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name }, spec: { selector: { app }, ports: [{ name: 'web', port: 80, targetPort: targetPort as never, protocol: 'TCP' }] } } });
}

describe('EndpointSlice controller on the real testbed', () => {

  it('publishes the ready pods of a Service, with conditions, targetRef, node and the resolved named port', async () => {
    const d = deployment({ namespace: ns, name: 'web', replicas: 4, criticality: 'high', image: 'http-server', nodes: ['real-1', 'real-2'] });
    d.spec!.template.spec!.containers[0]!.ports = [{ name: 'http', containerPort: 8080, protocol: 'TCP' }];
    await applyDeployment(apps, d);
    await service('web', 'web', 'http');
    const slice = await pollUntil('one slice with 4 ready endpoints', async () => {
      const s = await slicesOf('web');
      return s.length === 1 && s[0]!.endpoints?.filter((e) => e.conditions?.ready).length === 4 && s[0];
    }, { timeoutMs: 90_000 });
    const svc = await core.readNamespacedService({ name: 'web', namespace: ns });
    expect(slice.metadata?.labels).toMatchObject({ 'kubernetes.io/service-name': 'web', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' });
    expect(slice.metadata?.ownerReferences?.[0]).toMatchObject({ kind: 'Service', name: 'web', uid: svc.metadata!.uid, controller: true });
    expect(slice.addressType).toBe('IPv4');
    expect(slice.ports).toEqual([{ name: 'web', port: 8080, protocol: 'TCP' }]);
    const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=web' })).items;
    const byName = new Map(pods.map((p) => [p.metadata!.name!, p]));
    for (const e of slice.endpoints!) {
      const p = byName.get(e.targetRef!.name!)!;
      expect(e.addresses).toEqual([p.status!.podIP]);
      expect(e.nodeName).toBe(p.spec!.nodeName);
      expect(e.targetRef).toMatchObject({ kind: 'Pod', namespace: ns, uid: p.metadata!.uid });
      expect(e.conditions).toEqual({ ready: true, serving: true, terminating: false });
    }
  });

  it('does not rewrite a slice whose content did not change', async () => {
    const before = (await slicesOf('web'))[0]!;
    await reconcileServiceAgain(t, 'endpointslice', ns, 'web');
    const after = (await slicesOf('web'))[0]!;
    expect(after.metadata!.resourceVersion).toBe(before.metadata!.resourceVersion);
  });

  it('follows a scale-down and a pod that is not ready', async () => {
    await apps.patchNamespacedDeploymentScale({ name: 'web', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 2 }] }, undefined);
    await pollUntil('2 ready endpoints', async () => {
      const s = await slicesOf('web');
      return s.length === 1 && s[0]!.endpoints?.filter((e) => e.conditions?.ready).length === 2 && s[0]!.endpoints.length <= 2;
    }, { timeoutMs: 60_000 });
    // a pod whose readiness probe never passes is listed, not ready
    const bad = deployment({ namespace: ns, name: 'unready', replicas: 1, criticality: 'low', image: 'http-server', nodes: ['real-1'] });
    bad.spec!.template.spec!.containers[0]!.readinessProbe = { httpGet: { path: '/', port: 9999 as never }, periodSeconds: 1 };
    await applyDeployment(apps, bad);
    await service('unready', 'unready', 8080);
    const s = await pollUntil('endpoint listed as not ready', async () => {
      const sl = await slicesOf('unready');
      return sl.length === 1 && sl[0]!.endpoints?.length === 1 && sl[0];
    }, { timeoutMs: 60_000 });
    expect(s.endpoints![0]!.conditions).toEqual({ ready: false, serving: false, terminating: false });
  });

  it('splits at 100 endpoints per slice and keeps one empty slice for a Service without pods', async () => {
    const big = deployment({ namespace: ns, name: 'big', replicas: 150, criticality: 'low', image: 'http-server' });
    big.spec!.template.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
    big.spec!.template.spec!.nodeSelector = { type: 'kwok' };
    big.spec!.template.spec!.containers[0]!.readinessProbe = undefined;
    await applyDeployment(apps, big);
    await service('big', 'big', 8080);
    const slices = await pollUntil('150 ready endpoints in 2 slices', async () => {
      const s = await slicesOf('big');
      const ready = s.reduce((n, sl) => n + (sl.endpoints ?? []).filter((e) => e.conditions?.ready).length, 0);
      return ready === 150 && s;
    }, { timeoutMs: 120_000 });
    expect(slices.length).toBe(2);
    expect(slices.every((s) => (s.endpoints?.length ?? 0) <= 100)).toBe(true);
    const ips = slices.flatMap((s) => s.endpoints!.map((e) => e.addresses[0]));
    expect(new Set(ips).size).toBe(150); // no duplicates across slices

    await service('empty', 'nothing-matches', 8080);
    const empty = await pollUntil('one empty slice', async () => {
      const s = await slicesOf('empty');
      return s.length === 1 && s[0];
    }, { timeoutMs: 30_000 });
    expect(empty.endpoints ?? []).toEqual([]);
  });
});
