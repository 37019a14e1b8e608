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
 *
 * Further scenarios, one per divergence of issue 25 that an end state shows: hostname of pods whose
 * subdomain is a headless Service (EndpointSlices and Endpoints), a named targetPort found on a native
 * sidecar, a Service that loses its selector (slices and Endpoints stay), a Service with two ports and
 * publishNotReadyAddresses, creation blocked by a ResourceQuota (ReplicaFailure on the ReplicaSet and
 * the Deployment, unavailableReplicas from spec), scale-down choosing the pod with the lowest
 * controller.kubernetes.io/pod-deletion-cost, and a NoExecute taint matched by two tolerations (the
 * first one's tolerationSeconds counts). Ulysses runs them in each serving mode: the mode may change
 * when things happen, never what.
 */
import { writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { V1Deployment, V1Endpoints, V1EndpointSlice, V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { useTestbed, type TestbedContext } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment, ensureNamespace, taintNoExecute, untaint } from '../../experiments/workloads.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const runDir = '/tmp/ulysses-it-cm-conformance';
const ns = 'conf';
const REPLACED = '*,-replicaset-controller,-deployment-controller,-endpoints-controller,-endpointslice-controller,-taint-eviction-controller';
const HASH = /^[bcdfghjklmnpqrstvwxz2456789]{1,10}$/;

/** NoExecute taint of the two-tolerations scenario: every other kwok workload tolerates it forever */
const TOL_KEY = 'conf.ulysses.io/tolerated';

const onKwok = (d: V1Deployment) => {
  d.spec!.template.spec!.tolerations = [
    { key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' },
    { key: TOL_KEY, operator: 'Exists', effect: 'NoExecute' },
  ];
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

  const extra = await extraScenarios(t);
  const base = normalize(t, await apps.listNamespacedDeployment({ namespace: ns }).then((l) => l.items), await apps.listNamespacedReplicaSet({ namespace: ns }).then((l) => l.items), (await core.listNamespacedPod({ namespace: ns })).items, await slicesOf(), await readyIps('web'), await endpointsIps());
  return { ...(base as object), extra };
}

const isReady = (p: V1Pod) => !p.metadata?.deletionTimestamp && !!p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');

/** A Service's EndpointSlices and Endpoints, without names, IPs or times. */
function normalizeService(allSlices: V1EndpointSlice[], ep: V1Endpoints | undefined, pods: V1Pod[]) {
  // slices of the EndpointSlice controller; others (the mirroring controller's) are only counted
  const slices = allSlices.filter((s) => s.metadata?.labels?.['endpointslice.kubernetes.io/managed-by'] === 'endpointslice-controller.k8s.io');
  const readyIps = pods.filter(isReady).map((p) => p.status!.podIP!).sort();
  const allIps = pods.filter((p) => p.status?.podIP && !p.metadata?.deletionTimestamp).map((p) => p.status!.podIP!).sort();
  const sliceIps = slices.flatMap((s) => (s.endpoints ?? []).flatMap((e) => e.addresses)).sort();
  const epIps = (ep?.subsets ?? []).flatMap((s) => [...(s.addresses ?? []), ...(s.notReadyAddresses ?? [])].map((a) => a.ip)).sort();
  const sortJson = <T>(xs: T[]) => xs.map((x) => JSON.stringify(x)).sort();
  return {
    slices: sortJson(
      slices.map((s) => ({
        addressType: s.addressType,
        labels: s.metadata?.labels,
        ports: sortJson(s.ports ?? []),
        endpoints: (s.endpoints ?? []).length,
        conditions: [...new Set((s.endpoints ?? []).map((e) => JSON.stringify(e.conditions)))].sort(),
        hostnames: [...new Set((s.endpoints ?? []).map((e) => e.hostname ?? ''))].sort(),
      })),
    ),
    endpoints: ep
      ? {
          labels: ep.metadata?.labels,
          overCapacity: ep.metadata?.annotations?.['endpoints.kubernetes.io/over-capacity'],
          subsets: sortJson(
            (ep.subsets ?? []).map((s) => ({
              ports: sortJson(s.ports ?? []),
              ready: (s.addresses ?? []).length,
              notReady: (s.notReadyAddresses ?? []).length,
              hostnames: [...new Set([...(s.addresses ?? []), ...(s.notReadyAddresses ?? [])].map((a) => a.hostname ?? ''))].sort(),
            })),
          ),
        }
      : null,
    otherSlices: allSlices.length - slices.length,
    servingEqualsReady: slices.reduce((n, s) => n + (s.endpoints ?? []).filter((e) => e.conditions?.serving).length, 0) === readyIps.length,
    slicesHoldAllPodIps: JSON.stringify(sliceIps) === JSON.stringify(allIps),
    endpointsHoldAllPodIps: JSON.stringify(epIps) === JSON.stringify(allIps),
    readyPods: readyIps.length,
  };
}

async function extraScenarios(t: TestbedContext): Promise<Record<string, unknown>> {
  const { core, apps, discovery } = t;
  const out: Record<string, unknown> = {};
  const pods = async (app: string, namespace = ns) => (await core.listNamespacedPod({ namespace, labelSelector: `app=${app}` })).items;
  const slicesOf = async (svc: string) => (await discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: `kubernetes.io/service-name=${svc}` })).items;
  const endpointsOf = (svc: string) => core.readNamespacedEndpoints({ name: svc, namespace: ns }).catch(() => undefined);
  const service = async (svc: string, app = svc) => normalizeService(await slicesOf(svc), await endpointsOf(svc), await pods(app));
  const kwokApp = (name: string, replicas: number, mutate: (d: V1Deployment) => void = () => {}) => {
    const d = onKwok(deployment({ namespace: ns, name, replicas, criticality: 'low', image: 'http-server' }));
    d.spec!.template.spec!.containers[0]!.ports = [{ name: 'http', containerPort: 8080, protocol: 'TCP' }];
    mutate(d);
    return apps.createNamespacedDeployment({ namespace: ns, body: d });
  };
  /** the Service's slices and Endpoints hold every (non-terminating) pod of the app, which has n ready pods */
  const settled = (svc: string, n: number, app = svc) =>
    pollUntil(`${svc}: ${n} ready pods in its EndpointSlices and Endpoints`, async () => {
      const s = await service(svc, app);
      return s.readyPods === n && s.servingEqualsReady && s.slicesHoldAllPodIps && s.endpointsHoldAllPodIps && s;
    }, { timeoutMs: 90_000 });

  // hostname: pods with spec.hostname and spec.subdomain = a headless Service's name
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'hn' }, spec: { clusterIP: 'None', selector: { app: 'hn' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never }] } } });
  await kwokApp('hn', 2, (d) => Object.assign(d.spec!.template.spec!, { hostname: 'member', subdomain: 'hn' }));
  out.hostname = await settled('hn', 2);

  // named targetPort on a native sidecar (init container with restartPolicy Always)
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'side' }, spec: { selector: { app: 'side' }, ports: [{ name: 'proxy', port: 80, targetPort: 'proxy' as never }] } } });
  await kwokApp('side', 2, (d) => {
    d.spec!.template.spec!.initContainers = [{ name: 'proxy', image: d.spec!.template.spec!.containers[0]!.image, restartPolicy: 'Always', ports: [{ name: 'proxy', containerPort: 15001, protocol: 'TCP' }] }];
  });
  out.sidecarPort = await settled('side', 2);

  // two ports (one by name, one by number), publishNotReadyAddresses
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'multi', labels: { tier: 'back' } }, spec: { publishNotReadyAddresses: true, selector: { app: 'multi' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never }, { name: 'admin', port: 81, targetPort: 9000 as never }] } } });
  await kwokApp('multi', 3);
  out.multiPort = await settled('multi', 3);

  // a Service that loses its selector: kcm leaves its EndpointSlices and Endpoints alone
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'nosel' }, spec: { selector: { app: 'nosel' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never }] } } });
  await kwokApp('nosel', 2);
  await settled('nosel', 2);
  await core.patchNamespacedService({ name: 'nosel', namespace: ns, body: [{ op: 'remove', path: '/spec/selector' }] }, undefined);
  // barrier: a later Service change handled by the same controllers
  await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'barrier' }, spec: { selector: { app: 'nosel' }, ports: [{ name: 'http', port: 80, targetPort: 'http' as never }] } } });
  await settled('barrier', 2, 'nosel');
  out.selectorRemoved = await service('nosel');

  // scale-down: the pod with the lowest pod-deletion-cost goes first
  await kwokApp('cost', 4);
  const costPods = await pollUntil('4 ready cost pods', async () => {
    const ps = (await pods('cost')).filter(isReady);
    return ps.length === 4 && ps;
  }, { timeoutMs: 90_000 });
  const cheap = costPods.sort((a, b) => a.metadata!.name!.localeCompare(b.metadata!.name!))[2]!;
  for (const p of costPods) {
    const cost = p === cheap ? '-100' : '100';
    await core.patchNamespacedPod({ name: p.metadata!.name!, namespace: ns, body: [{ op: 'add', path: '/metadata/annotations', value: { 'controller.kubernetes.io/pod-deletion-cost': cost } }] }, undefined);
  }
  await apps.patchNamespacedDeployment({ name: 'cost', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 3 }] }, undefined);
  const left = await pollUntil('cost scaled down to 3', async () => {
    const ps = (await pods('cost')).filter((p) => !p.metadata?.deletionTimestamp);
    return ps.length === 3 && ps;
  }, { timeoutMs: 60_000 });
  out.deletionCost = { cheapestDeleted: !left.some((p) => p.metadata!.uid === cheap.metadata!.uid), left: left.length };

  // creation blocked by a ResourceQuota: ReplicaFailure, unavailableReplicas from the ReplicaSets' spec
  const qns = `${ns}-quota`;
  await ensureNamespace(core, qns);
  await core.createNamespacedResourceQuota({ namespace: qns, body: { metadata: { name: 'pods' }, spec: { hard: { pods: '2' } } } });
  await pollUntil('quota status computed', async () => !!(await core.readNamespacedResourceQuota({ name: 'pods', namespace: qns })).status?.hard, { timeoutMs: 30_000 });
  const q = onKwok(deployment({ namespace: qns, name: 'quota', replicas: 3, criticality: 'low', image: 'http-server' }));
  await apps.createNamespacedDeployment({ namespace: qns, body: q });
  const conds = (cs?: { type: string; status: string; reason?: string }[]) => (cs ?? []).map((c) => `${c.type}=${c.status}/${c.reason}`).sort();
  out.quota = await pollUntil('quota: 2 pods available, ReplicaFailure on the ReplicaSet and the Deployment', async () => {
    const d = await apps.readNamespacedDeployment({ name: 'quota', namespace: qns });
    const rss = (await apps.listNamespacedReplicaSet({ namespace: qns })).items;
    const ok = d.status?.availableReplicas === 2 && d.status.conditions?.some((c) => c.type === 'ReplicaFailure') && rss[0]?.status?.conditions?.some((c) => c.type === 'ReplicaFailure');
    return (
      ok && {
        deployment: { replicas: d.status?.replicas, updatedReplicas: d.status?.updatedReplicas, availableReplicas: d.status?.availableReplicas, unavailableReplicas: d.status?.unavailableReplicas, conditions: conds(d.status?.conditions) },
        replicaSets: rss.map((rs) => ({ replicas: rs.spec?.replicas, status: rs.status?.replicas, conditions: conds(rs.status?.conditions) })),
      }
    );
  }, { timeoutMs: 90_000 });

  // a NoExecute taint two tolerations match: the first one (1 h) counts, not the smaller second (1 s)
  const tolNode = (await pods('cost'))[0]!.spec!.nodeName!;
  await kwokApp('tol', 2, (d) => {
    d.spec!.template.spec!.tolerations = [
      { key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' },
      { key: TOL_KEY, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 3600 },
      { key: TOL_KEY, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 1 },
    ];
    d.spec!.template.spec!.nodeSelector = { 'kubernetes.io/hostname': tolNode };
  });
  const tolPods = await pollUntil('2 ready tol pods', async () => {
    const ps = (await pods('tol')).filter(isReady);
    return ps.length === 2 && ps;
  }, { timeoutMs: 90_000 });
  // the reference: a bare pod tolerating the taint for 2 s; once it is gone, 1 s has passed for the others too
  await core.createNamespacedPod({
    namespace: ns,
    body: {
      metadata: { name: 'tolref', labels: { app: 'tolref' } },
      spec: {
        nodeName: tolNode,
        tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }, { key: TOL_KEY, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 2 }],
        containers: [{ name: 'c', image: q.spec!.template.spec!.containers[0]!.image }],
      },
    },
  });
  await pollUntil('tolref ready', async () => (await pods('tolref')).some(isReady), { timeoutMs: 60_000 });
  await taintNoExecute(t.kc, tolNode, TOL_KEY);
  await pollUntil('tolref evicted after its 2 s', async () => (await pods('tolref')).length === 0, { timeoutMs: 60_000 });
  const tolAfter = await pods('tol');
  out.twoTolerations = {
    keptPods: tolAfter.filter((p) => !p.metadata?.deletionTimestamp && tolPods.some((o) => o.metadata!.uid === p.metadata!.uid)).length,
    disruptionTargets: tolAfter.filter((p) => p.status?.conditions?.some((c) => c.type === 'DisruptionTarget')).length,
  };
  await untaint(t.kc, tolNode, TOL_KEY);
  return out;
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

const MODES = ['vanilla', 'multi-priority-async', 'multi-priority-periodic'] as const;
const CONTROLLERS = ['replicaset', 'deployment', 'endpoints', 'endpointslice', 'taint-eviction'] as const;
const results: Record<string, unknown> = {};

describe('vanilla kube-controller-manager', () => {
  const t = useTestbed(runDir, { realNodes: 2, kwokNodes: 2, namespace: ns });
  it('runs the scenario', async () => {
    results.kcm = await scenario(t);
  }, 420_000);
});

for (const mode of MODES) {
  describe(`Ulysses controllers in place of the vanilla ones, ${mode} mode`, () => {
    const t = useTestbed(runDir, {
      realNodes: 2,
      kwokNodes: 2,
      namespace: ns,
      controllers: REPLACED,
      controllerManager: { controllers: [...CONTROLLERS], pools: Object.fromEntries(CONTROLLERS.map((c) => [c, { mode }])) },
    });
    it('runs the scenario', async () => {
      results[mode] = await scenario(t);
    }, 420_000);
  });
}

describe('comparison', () => {
  it.each(MODES)('Ulysses in %s mode reaches the same normalized end state as kube-controller-manager', (mode) => {
    expect(results.kcm).toBeDefined();
    expect(results[mode]).toBeDefined();
    writeFileSync(`${runDir}-normalized.json`, JSON.stringify(results, null, 2));
    expect(results[mode]).toEqual(results.kcm);
  });

  it('the compared state is the scenarios\' (kcm shows what each scenario is about)', () => {
    expect(results.kcm).toBeDefined();
    const u = results.kcm as { deployments: { name: string; revision: string; replicaSets: unknown[] }[]; pods: { app: string; count: number; distinct: string[] }[]; endpointSlices: unknown[]; slicesEqualReadyPods: boolean; endpointsEqualReadyPods: boolean; extra: Record<string, any> };
    expect(u.deployments.map((d) => [d.name, d.revision, d.replicaSets.length])).toEqual([['cost', '1', 1], ['hn', '1', 1], ['multi', '1', 1], ['nosel', '1', 1], ['scale', '1', 1], ['side', '1', 1], ['tol', '1', 1], ['victim', '1', 1], ['web', '2', 2]]);
    expect(u.endpointSlices).toHaveLength(1);
    expect(u.slicesEqualReadyPods).toBe(true);
    expect(u.endpointsEqualReadyPods).toBe(true);
    const x = u.extra;
    expect(x.hostname.slices[0]).toContain('"hostnames":["member"]');
    expect(x.hostname.endpoints.subsets[0]).toContain('"hostnames":["member"]');
    expect(x.sidecarPort.slices[0]).toContain('15001');
    expect(x.selectorRemoved.slicesHoldAllPodIps && x.selectorRemoved.endpointsHoldAllPodIps).toBe(true);
    expect(x.deletionCost).toEqual({ cheapestDeleted: true, left: 3 });
    expect(x.quota.deployment.unavailableReplicas).toBe(1);
    expect(x.quota.deployment.conditions.some((c: string) => c.startsWith('ReplicaFailure=True'))).toBe(true);
    expect(x.twoTolerations).toEqual({ keptPods: 2, disruptionTargets: 0 });
  });
});
