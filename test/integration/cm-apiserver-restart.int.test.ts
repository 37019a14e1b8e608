/**
 * kube-apiserver restart in the middle of a failover run entirely by Ulysses' controllers
 * (ReplicaSet, Deployment, EndpointSlice, Endpoints, taint eviction; kcm's disabled), in the
 * `auto` mode (periodic, since a high-criticality Deployment runs): the NoExecute taint is applied,
 * the apiserver is down for 2 s while the controllers evict and respawn; afterwards everything
 * converges: the critical and the low Deployments complete on the other node with the right
 * counts (no duplicates), the Service's EndpointSlices and Endpoints list exactly the ready pods,
 * the critical pods answer over UDP.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type V1Deployment } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { applyDeployment, deployment, podReady, taintNoExecute, udpFirstAnswer } from '../../experiments/workloads.ts';

const runDir = SHARED_RUN_DIR;
const ns = 'restart-it';
const t = useSharedTestbed('real-nodes', {
  realNodes: 2,
  namespace: ns,
  controllers: '*,-replicaset-controller,-deployment-controller,-endpoints-controller,-endpointslice-controller,-taint-eviction-controller',
  controllerManager: {
    controllers: ['replicaset', 'deployment', 'endpoints', 'endpointslice', 'taint-eviction'],
    auto: ['replicaset', 'deployment', 'endpoints', 'endpointslice', 'taint-eviction'],
  },
});
let core: CoreV1Api, apps: AppsV1Api, discovery: DiscoveryV1Api;
beforeAll(() => ({ core, apps, discovery } = t));

const complete = (d: V1Deployment) =>
  d.status?.observedGeneration === d.metadata?.generation && d.status?.updatedReplicas === d.spec?.replicas && d.status?.replicas === d.spec?.replicas && d.status?.availableReplicas === d.spec?.replicas;

describe('apiserver restart during a failover on Ulysses controllers', () => {
  it('converges: Deployments complete on the surviving node, endpoints = ready pods, no duplicate pod', async () => {
    await applyDeployment(apps, deployment({ namespace: ns, name: 'prio', replicas: 2, criticality: 'high', image: 'udp-echo', nodes: ['real-1', 'real-2'] }));
    await applyDeployment(apps, deployment({ namespace: ns, name: 'low', replicas: 4, criticality: 'low', image: 'http-server', nodes: ['real-1', 'real-2'] }));
    await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'prio' }, spec: { selector: { app: 'prio' }, ports: [{ name: 'echo', port: 5005, protocol: 'UDP', targetPort: 5005 as never }] } } });
    await pollUntil('both Deployments complete', async () => complete(await apps.readNamespacedDeployment({ name: 'prio', namespace: ns })) && complete(await apps.readNamespacedDeployment({ name: 'low', namespace: ns })), { timeoutMs: 120_000 });
    expect(t.cm!.pool('replicaset').mode).toBe('multi-priority-periodic'); // auto: a high pod exists

    await taintNoExecute(t.kc, 'real-1');
    await testbed.restartComponent('kube-apiserver', { runDir, downtimeMs: 2000 });

    const onReal2 = async (app: string, n: number) => {
      const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items;
      return pods.length === n && pods.every((p) => p.spec?.nodeName === 'real-2' && podReady(p) && !p.metadata?.deletionTimestamp) && pods;
    };
    const prio = await pollUntil('prio and low Ready on real-2 only, exact counts', async () => {
      const p = await onReal2('prio', 2);
      return p && (await onReal2('low', 4)) && complete(await apps.readNamespacedDeployment({ name: 'prio', namespace: ns })) && complete(await apps.readNamespacedDeployment({ name: 'low', namespace: ns })) && p;
    }, { timeoutMs: 180_000 });
    const ips = prio.map((p) => p.status!.podIP!).sort();
    await pollUntil('EndpointSlices and Endpoints list exactly the ready prio pods', async () => {
      const slices = (await discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: 'kubernetes.io/service-name=prio' })).items;
      const sliceIps = slices.flatMap((s) => (s.endpoints ?? []).filter((e) => e.conditions?.ready).map((e) => e.addresses[0])).sort();
      const all = slices.flatMap((s) => s.endpoints ?? []).length;
      const ep = await core.readNamespacedEndpoints({ name: 'prio', namespace: ns }).catch(() => undefined);
      const epIps = (ep?.subsets ?? []).flatMap((s) => (s.addresses ?? []).map((a) => a.ip)).sort();
      return all === 2 && JSON.stringify(sliceIps) === JSON.stringify(ips) && JSON.stringify(epIps) === JSON.stringify(ips);
    }, { timeoutMs: 60_000 });
    await Promise.all(ips.map((ip) => udpFirstAnswer(ip, undefined, { timeoutMs: 10_000 })));
    // each Deployment has one ReplicaSet (no template change), sized exactly
    for (const app of ['prio', 'low']) {
      const rss = (await apps.listNamespacedReplicaSet({ namespace: ns, labelSelector: `app=${app}` })).items;
      expect(rss).toHaveLength(1);
      expect(rss[0]!.status?.replicas).toBe(app === 'prio' ? 2 : 4);
    }
  });
});
