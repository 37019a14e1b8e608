/**
 * Conformance-style comparison (issue 3): the same scenario runs once on the vanilla
 * kube-controller-manager and once with its failover-path controllers disabled
 * (--controllers=*,-replicaset-controller,-deployment-controller,-endpoints-controller,
 * -endpointslice-controller,-taint-eviction-controller) and Ulysses' ControllerManager in their
 * place. Scenario: a scale-up to 30 pods, a rolling update on real kubelets, a Service whose
 * EndpointSlices and Endpoints track the ready pods, a NoExecute taint that evicts pods to the
 * other node. The normalized end states (object counts, owner references, labels, revisions,
 * status, condition types/status/reasons, endpoint sets checked against the ready pods, nodes of
 * the evicted workloads) must be equal. Names that embed random suffixes or the pod-template-hash
 * are normalized (our hash bytes differ from Go's spew dump, its shape does not).
 */
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { V1Deployment, V1EndpointSlice, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { useTestbed, type TestbedContext } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment, taintNoExecute } from '../../experiments/workloads.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const runDir = '/tmp/ulysses-it-cm-conformance';
const ns = 'conf';
const REPLACED = '*,-replicaset-controller,-deployment-controller,-endpoints-controller,-endpointslice-controller,-taint-eviction-controller';
const HASH = /^[bcdfghjklmnpqrstvwxz2456789]{1,10}$/;

const onKwok = (d: V1Deployment) => {
  d.spec!.template.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
  d.spec!.template.spec!.nodeSelector = { type: 'kwok' };
  return d;
};

function complete(d: V1Deployment): boolean {
  const want = d.spec?.replicas;
  return (
    d.status?.observedGeneration === d.metadata?.generation &&
    d.status?.updatedReplicas === want &&
    d.status?.replicas === want &&
    d.status?.availableReplicas === want &&
    !!d.status?.conditions?.some((c) => c.type === 'Progressing' && c.reason === 'NewReplicaSetAvailable')
  );
}

async function scenario(t: TestbedContext): Promise<unknown> {
  const { core, apps, discovery } = t;
  const read = (name: string) => apps.readNamespacedDeployment({ name, namespace: ns });
  const waitComplete = (name: string, generation: number, timeoutMs = 120_000) =>
    pollUntil(`${name} complete (generation ${generation})`, async () => {
      const d = await read(name);
      return (d.metadata?.generation ?? 0) >= generation && complete(d) && d;
    }, { timeoutMs });
  const pods = async (app: string) => (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items;
  const readyIps = async (app: string) => (await pods(app)).filter((p) => !p.metadata?.deletionTimestamp && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')).map((p) => p.status!.podIP!).sort();

  // 1. scale-up to 30 (KWOK nodes)
  await apps.createNamespacedDeployment({ namespace: ns, body: onKwok(deployment({ namespace: ns, name: 'scale', replicas: 1, criticality: 'low', image: 'http-server' })) });
  await waitComplete('scale', 1);
  await apps.patchNamespacedDeployment({ name: 'scale', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 30 }] }, undefined);
  await waitComplete('scale', 2);

  // 2. rolling update on real kubelets, behind a Service
  const web = deployment({ namespace: ns, name: 'web', replicas: 3, criticality: 'low', image: 'http-server', nodes: ['real-1', 'real-2'] });
  web.spec!.template.spec!.containers[0]!.ports = [{ name: 'http', containerPort: 8080, protocol: 'TCP' }];
  web.spec!.strategy = { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1 as never, maxUnavailable: 0 as never } };
  await apps.createNamespacedDeployment({ namespace: ns, body: web });
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'web', labels: { tier: 'front' } }, spec: { selector: { app: 'web' }, ports: [{ name: 'web', port: 80, targetPort: 'http' as never }] } } });
  await waitComplete('web', 1);
  await apps.patchNamespacedDeployment({ name: 'web', namespace: ns, body: [{ op: 'add', path: '/spec/template/metadata/annotations', value: { rollout: '2' } }] }, undefined);
  await waitComplete('web', 2);
  const slicesOf = async () => (await discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: 'kubernetes.io/service-name=web' })).items;
  const sliceIps = (s: V1EndpointSlice[]) => s.flatMap((sl) => (sl.endpoints ?? []).map((e) => e.addresses[0]!)).sort();
  const endpointsIps = async () => ((await core.readNamespacedEndpoints({ name: 'web', namespace: ns }).catch(() => undefined))?.subsets ?? []).flatMap((s) => (s.addresses ?? []).map((a) => a.ip)).sort();
  await pollUntil('EndpointSlices and Endpoints track the 3 ready web pods', async () => {
    const ips = await readyIps('web');
    return ips.length === 3 && JSON.stringify(sliceIps(await slicesOf())) === JSON.stringify(ips) && JSON.stringify(await endpointsIps()) === JSON.stringify(ips);
  }, { timeoutMs: 60_000 });

  // 3. NoExecute taint: victims move from kwok-1 to kwok-2
  await apps.createNamespacedDeployment({ namespace: ns, body: onKwok(deployment({ namespace: ns, name: 'victim', replicas: 4, criticality: 'low', image: 'http-server' })) });
  await waitComplete('victim', 1);
  await taintNoExecute(t.kc, 'kwok-1');
  const settledOnKwok2 = async (app: string) => {
    const ps = await pods(app);
    return ps.length > 0 && ps.every((p) => p.spec?.nodeName === 'kwok-2' && !p.metadata?.deletionTimestamp);
  };
  await pollUntil('every kwok workload evicted to kwok-2 and complete again', async () => (await settledOnKwok2('victim')) && (await settledOnKwok2('scale')) && complete(await read('victim')) && complete(await read('scale')), { timeoutMs: 120_000 });

  return normalize(t, await apps.listNamespacedDeployment({ namespace: ns }).then((l) => l.items), await apps.listNamespacedReplicaSet({ namespace: ns }).then((l) => l.items), (await core.listNamespacedPod({ namespace: ns })).items, await slicesOf(), await readyIps('web'), await endpointsIps());
}

function normalize(t: TestbedContext, deps: V1Deployment[], rss: V1ReplicaSet[], pods: V1Pod[], slices: V1EndpointSlice[], webReadyIps: string[], epIps: string[]): unknown {
  void t;
  const byName = <T extends { metadata?: { name?: string } }>(a: T, b: T) => a.metadata!.name!.localeCompare(b.metadata!.name!);
  const rsName = new Map(rss.map((rs) => [rs.metadata!.uid!, rs]));
  const conds = (cs?: { type: string; status: string; reason?: string }[]) => (cs ?? []).map((c) => `${c.type}=${c.status}/${c.reason}`).sort();
  const stripHash = (l?: Record<string, string>) => {
    const { ['pod-template-hash']: h, ...rest } = l ?? {};
    return { ...rest, hasHash: HASH.test(h ?? '') };
  };
  return {
    deployments: [...deps].sort(byName).map((d) => ({
      name: d.metadata!.name,
      revision: d.metadata?.annotations?.['deployment.kubernetes.io/revision'],
      status: {
        replicas: d.status?.replicas,
        updatedReplicas: d.status?.updatedReplicas,
        readyReplicas: d.status?.readyReplicas,
        availableReplicas: d.status?.availableReplicas,
        unavailableReplicas: d.status?.unavailableReplicas ?? 0,
        observedGeneration: d.status?.observedGeneration,
      },
      conditions: conds(d.status?.conditions),
      replicaSets: rss
        .filter((rs) => rs.metadata?.ownerReferences?.[0]?.uid === d.metadata!.uid)
        .sort((a, b) => Number(a.metadata!.annotations!['deployment.kubernetes.io/revision']) - Number(b.metadata!.annotations!['deployment.kubernetes.io/revision']))
        .map((rs) => {
          const hash = rs.metadata!.labels!['pod-template-hash']!;
          return {
            nameIsDeploymentDashHash: rs.metadata!.name === `${d.metadata!.name}-${hash}`,
            selectorHasHash: rs.spec!.selector!.matchLabels!['pod-template-hash'] === hash,
            owner: { ...rs.metadata!.ownerReferences![0], uid: rs.metadata!.ownerReferences![0]!.uid === d.metadata!.uid },
            labels: stripHash(rs.metadata!.labels),
            annotations: Object.fromEntries(Object.entries(rs.metadata!.annotations ?? {}).filter(([k]) => k.startsWith('deployment.kubernetes.io/'))),
            replicas: rs.spec!.replicas,
            status: { replicas: rs.status?.replicas, readyReplicas: rs.status?.readyReplicas ?? 0, availableReplicas: rs.status?.availableReplicas ?? 0, fullyLabeledReplicas: rs.status?.fullyLabeledReplicas ?? 0, observedGeneration: rs.status?.observedGeneration },
          };
        }),
    })),
    pods: Object.entries(
      pods.reduce<Record<string, string[]>>((acc, p) => {
        const owner = p.metadata?.ownerReferences?.[0];
        const rs = owner && rsName.get(owner.uid);
        const key = `${p.metadata!.labels!.app}`;
        const rev = rs?.metadata?.annotations?.['deployment.kubernetes.io/revision'];
        const line = JSON.stringify({ node: p.spec?.nodeName?.startsWith('kwok') ? p.spec.nodeName : 'real', rev, ownerKind: owner?.kind, owner: owner?.controller && owner.blockOwnerDeletion, generateName: p.metadata!.generateName === `${rs?.metadata?.name}-`, labels: stripHash(p.metadata!.labels), phase: p.status?.phase, ready: p.status?.conditions?.find((c) => c.type === 'Ready')?.status });
        (acc[key] ??= []).push(line);
        return acc;
      }, {}),
    )
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([app, lines]) => ({ app, count: lines.length, distinct: [...new Set(lines)].sort() })),
    endpointSlices: slices.map((s) => ({
      labels: s.metadata?.labels,
      owner: { kind: s.metadata?.ownerReferences?.[0]?.kind, name: s.metadata?.ownerReferences?.[0]?.name, controller: s.metadata?.ownerReferences?.[0]?.controller },
      addressType: s.addressType,
      ports: s.ports,
      conditions: [...new Set((s.endpoints ?? []).map((e) => JSON.stringify(e.conditions)))],
      endpoints: s.endpoints?.length,
      targetRefKinds: [...new Set((s.endpoints ?? []).map((e) => e.targetRef?.kind))],
    })),
    slicesEqualReadyPods: JSON.stringify(slices.flatMap((sl) => (sl.endpoints ?? []).map((e) => e.addresses[0])).sort()) === JSON.stringify(webReadyIps),
    endpointsEqualReadyPods: JSON.stringify(epIps) === JSON.stringify(webReadyIps),
  };
}

const results: Record<'vanilla' | 'ulysses', unknown> = { vanilla: undefined, ulysses: undefined };

describe('vanilla kube-controller-manager', () => {
  const t = useTestbed(runDir, { realNodes: 2, kwokNodes: 2, namespace: ns });
  it('runs the scenario', async () => {
    results.vanilla = await scenario(t);
  }, 240_000);
});

describe('Ulysses controllers in place of the vanilla ones', () => {
  const t = useTestbed(runDir, {
    realNodes: 2,
    kwokNodes: 2,
    namespace: ns,
    controllers: REPLACED,
    controllerManager: { controllers: ['replicaset', 'deployment', 'endpoints', 'endpointslice', 'taint-eviction'] },
  });
  it('runs the scenario', async () => {
    results.ulysses = await scenario(t);
  }, 240_000);
});

describe('comparison', () => {
  it('reaches the same normalized end state', () => {
    expect(results.vanilla).toBeDefined();
    expect(results.ulysses).toBeDefined();
    writeFileSync(`${runDir}-normalized.json`, JSON.stringify(results, null, 2));
    expect(results.ulysses).toEqual(results.vanilla);
    // and the compared state is the scenario's, not an empty one
    const u = results.ulysses as { deployments: { name: string; revision: string; replicaSets: unknown[] }[]; pods: { app: string; count: number; distinct: string[] }[]; endpointSlices: unknown[]; slicesEqualReadyPods: boolean; endpointsEqualReadyPods: boolean };
    expect(u.deployments.map((d) => [d.name, d.revision, d.replicaSets.length])).toEqual([['scale', '1', 1], ['victim', '1', 1], ['web', '2', 2]]);
    expect(u.pods.map((p) => [p.app, p.count, p.distinct.length])).toEqual([['scale', 30, 1], ['victim', 4, 1], ['web', 3, 1]]);
    expect(u.endpointSlices).toHaveLength(1);
    expect(u.slicesEqualReadyPods).toBe(true);
    expect(u.endpointsEqualReadyPods).toBe(true);
  });
});
