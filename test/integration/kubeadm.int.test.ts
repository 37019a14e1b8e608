/**
 * The kubeadm testbed (issue 23, section 1): `kubeadm init` + 2 × `kubeadm join` on this machine with
 * locally built images. The control plane runs as static pods, kube-proxy (iptables) on every node,
 * CoreDNS answers for the cluster domain, a pod on a worker answers through its Service's ClusterIP
 * (kube-proxy's DNAT) from the host, the Ulysses image (section 2) runs as a pod on a worker, and
 * `down` (kubeadm reset per node) leaves nothing behind. A failing step (kubeadm's preflight on a taken
 * port) ends `up` with the step's name and log tail.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { Resolver } from 'node:dns/promises';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import * as kubeadm from '../../experiments/testbed/kubeadm.ts';
import { applyDeployment, deployment, ensureNamespace, HTTP_PORT, podReady } from '../../experiments/workloads.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { buildUlyssesImage, importUlyssesImage } from '../../experiments/testbed/ulysses-image.ts';

const runDir = '/tmp/ulysses-it-kubeadm';
const CP = kubeadm.CONTROL_PLANE_NAME;
const WORKERS = ['kubeadm-worker-1', 'kubeadm-worker-2'];
let state: kubeadm.KubeadmState | undefined;
let kc: KubeConfig;
let core: CoreV1Api;
let apps: AppsV1Api;

const running = (p: V1Pod | undefined) => p?.status?.phase === 'Running' && podReady(p);

async function httpGet(url: string): Promise<string> {
  const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
  return res.text();
}

describe('kubeadm testbed: a failing step', () => {
  it('ends `up` with the step name and kubeadm\'s log tail, and leaves nothing behind', async () => {
    await kubeadm.down({ runDir, log: () => undefined }); // a leftover of an aborted run
    const busy = createServer().listen(6443, '0.0.0.0'); // kubeadm's preflight refuses a taken apiserver port
    await once(busy, 'listening');
    let err: unknown;
    try {
      await kubeadm.up({ runDir, workers: 0, log: () => undefined });
    } catch (e) {
      err = e;
    } finally {
      busy.close();
    }
    expect(err).toBeInstanceOf(kubeadm.StepError);
    expect((err as kubeadm.StepError).step).toBe('kubeadm init');
    expect((err as Error).message).toContain('Port-6443');
    expect(kubeadm.leftovers(runDir)).toEqual([]);
  });
});

describe('kubeadm testbed: kubeadm init, 2 workers joined, kube-proxy, CoreDNS', () => {
  beforeAll(async () => {
    await kubeadm.down({ runDir, log: () => undefined }); // a leftover of an aborted run
    state = await kubeadm.up({ runDir, workers: 2 });
    kc = kubeadm.kubeConfigForKubeadm(state);
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
  });
  afterAll(async () => {
    if (kubeadm.readKubeadmState(runDir)) await kubeadm.down({ runDir });
  });

  it('runs the control plane as static pods (mirror pods of /etc/kubernetes/manifests) Running', async () => {
    const pods = (await core.listNamespacedPod({ namespace: 'kube-system' })).items;
    for (const c of ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']) {
      const p = pods.find((x) => x.metadata?.name === `${c}-${CP}`);
      expect(p, c).toBeDefined();
      expect(p!.metadata?.annotations?.['kubernetes.io/config.mirror'], `${c} mirror annotation`).toBeTruthy();
      expect(p!.metadata?.annotations?.['kubernetes.io/config.source']).toBe('file');
      expect(p!.metadata?.ownerReferences?.[0]?.kind).toBe('Node');
      expect(running(p), `${c} Running`).toBe(true);
      expect(existsSync(`/etc/kubernetes/manifests/${c}.yaml`)).toBe(true);
    }
    const cm = await core.readNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system' });
    expect(cm.data?.ClusterConfiguration).toContain(`kubernetesVersion: ${state!.version}`);
  });

  it('joins 2 workers Ready and runs kube-proxy (the DaemonSet kubeadm installs) on every node', async () => {
    const nodes = (await core.listNode()).items;
    const ready = (n: (typeof nodes)[number]) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    expect(nodes.map((n) => n.metadata!.name).sort()).toEqual([CP, ...WORKERS].sort());
    expect(nodes.every(ready)).toBe(true);
    for (const n of nodes) expect(n.status?.nodeInfo?.kubeletVersion).toBe(state!.version);
    expect(nodes.find((n) => n.metadata!.name === CP)?.metadata?.labels).toHaveProperty('node-role.kubernetes.io/control-plane');
    const proxies = (await core.listNamespacedPod({ namespace: 'kube-system', labelSelector: 'k8s-app=kube-proxy' })).items;
    for (const n of [CP, ...WORKERS]) {
      const p = proxies.find((x) => x.spec?.nodeName === n);
      expect(running(p), `kube-proxy on ${n}`).toBe(true);
      expect(p!.metadata?.ownerReferences?.[0]?.kind).toBe('DaemonSet');
    }
  });

  it('answers cluster DNS through the kube-dns ClusterIP (CoreDNS behind kube-proxy)', async (ctx) => {
    if (!state!.coredns) ctx.skip();
    const svc = await core.readNamespacedService({ name: 'kube-dns', namespace: 'kube-system' });
    const resolver = new Resolver({ timeout: 1000, tries: 1 });
    resolver.setServers([svc.spec!.clusterIP!]);
    const answer = await pollUntil('kubernetes.default resolved by CoreDNS', async () => resolver.resolve4('kubernetes.default.svc.cluster.local'), { timeoutMs: 60_000 });
    const kubernetes = await core.readNamespacedService({ name: 'kubernetes', namespace: 'default' });
    expect(answer).toEqual([kubernetes.spec!.clusterIP]);
  });

  it('reaches a pod on a worker through its ClusterIP Service from the host (kube-proxy iptables DNAT)', async () => {
    const ns = 'it-kubeadm';
    await ensureNamespace(core, ns);
    await applyDeployment(apps, deployment({ namespace: ns, name: 'web', replicas: 1, criticality: 'low', image: 'http-server', nodes: [WORKERS[0]!] }));
    await core.createNamespacedService({
      namespace: ns,
      body: { metadata: { name: 'web' }, spec: { selector: { app: 'web' }, ports: [{ port: 80, targetPort: HTTP_PORT, protocol: 'TCP' }] } },
    });
    const pod = await pollUntil('web pod Ready', async () => (await core.listNamespacedPod({ namespace: ns })).items.find((p) => podReady(p)), { timeoutMs: 90_000 });
    expect(pod.spec?.nodeName).toBe(WORKERS[0]);
    const clusterIP = (await core.readNamespacedService({ name: 'web', namespace: ns })).spec!.clusterIP!;
    expect(clusterIP.startsWith('10.')).toBe(true);
    // kube-proxy programs the Service once its EndpointSlice lists the Ready pod
    const body = await pollUntil(`http://${clusterIP}/ answered`, () => httpGet(`http://${clusterIP}/`), { timeoutMs: 60_000 });
    expect(body).toContain(`ok ${pod.metadata!.name}`);
  });

  it('runs the Ulysses image (built without a base image, imported into every node) as a pod', async () => {
    const img = await buildUlyssesImage();
    console.log(`${img.name}: ${(img.bytes / 1e6).toFixed(1)} MB`);
    await importUlyssesImage(img.tar, state!.nodes.map((n) => n.spec.socket));
    const ns = 'it-kubeadm-image';
    await ensureNamespace(core, ns);
    await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name: 'ulysses-help' },
        spec: {
          restartPolicy: 'Never',
          nodeName: WORKERS[1],
          automountServiceAccountToken: false,
          containers: [{ name: 'ulysses', image: `ulysses:${img.name.split(':').pop()}`, imagePullPolicy: 'Never', args: ['ulysses', '--help'] }],
        },
      },
    });
    const done = await pollUntil(
      'ulysses-help pod finished',
      async () => {
        const p = await core.readNamespacedPod({ name: 'ulysses-help', namespace: ns });
        return ['Succeeded', 'Failed'].includes(p.status?.phase ?? '') && p;
      },
      { timeoutMs: 120_000 },
    );
    const logs = await core.readNamespacedPodLog({ name: 'ulysses-help', namespace: ns });
    expect(done.status?.phase, logs).toBe('Succeeded');
    expect(logs).toContain('Usage: ulysses');
  });

  it('down (kubeadm reset on every node) leaves no process, mount, interface, cgroup, iptables chain or kubeadm file', async () => {
    const s = state!;
    await kubeadm.down({ runDir });
    expect(kubeadm.leftovers(runDir, s)).toEqual([]);
    expect(kubeadm.readKubeadmState(runDir)).toBeUndefined();
    state = undefined;
  });
});
