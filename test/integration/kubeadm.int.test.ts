/**
 * The kubeadm testbed (issue 23, section 1): `kubeadm init` + 2 × `kubeadm join` on this machine with
 * locally built images. The control plane runs as static pods, kube-proxy (iptables) on every node,
 * CoreDNS answers for the cluster domain, a pod on a worker answers through its Service's ClusterIP
 * (kube-proxy's DNAT) from the host, the Ulysses image (section 2) runs as a pod on a worker, and
 * `down` (kubeadm reset per node) leaves nothing behind. A failing step (kubeadm's preflight on a taken
 * port) ends `up` with the step's name and log tail.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { Resolver } from 'node:dns/promises';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import * as kubeadm from '../../experiments/testbed/kubeadm.ts';
import { applyDeployment, deployment, ensureNamespace, HTTP_PORT, podReady } from '../../experiments/workloads.ts';
import { grantLabels } from '../../core/claims.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { buildUlyssesImage, importUlyssesImage } from '../../experiments/testbed/ulysses-image.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { CoordinationV1Api, CustomObjectsApi, ApiextensionsV1Api } from '@kubernetes/client-node';
import { execFile } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { EXTENDER_TLS_SECRETS, install, KCM_CONTROLLERS_FLAG, NODE_PATHS, uninstall, type InstallOptions } from '../../manifests/install.ts';
import { CLUSTER_CONFIGURATION_BACKUP_ANNOTATION, clusterConfigurationWithout } from '../../manifests/control-plane.ts';
import { parse as parseYaml, parseDocument } from 'yaml';
import { DUPLICATE_CONTROLLERS_REASON, REPLACED_KCM_CONTROLLERS } from '../../controller-manager/duplicate-controllers.ts';
import { issueLeaf, SCHEDULER_EXTENDER_TLS_FILES } from '../../core/extender-pki.ts';
import { request as httpsRequest } from 'node:https';
import { statusRows } from '../../core/runtime-status.ts';
import type { UlyssesConfig } from '../../core/runtime-config.ts';
import { ECHO_PORT, udpFirstAnswer } from '../../experiments/workloads.ts';
import { REPO_ROOT } from '../../experiments/testbed/ulysses-image.ts';
import { eventsFor, expectInstalled, expectStock, podProcess, stockSnapshot, workloadFingerprint } from '../kubeadm-checks.ts';
import { progressLog } from '../../core/logging.ts';
import { OPERATOR_SCHEDULER_CONFIG } from '../kubeadm-fixtures.ts';

const runDir = '/tmp/ulysses-it-kubeadm';
const CP = kubeadm.CONTROL_PLANE_NAME;
const WORKERS = ['kubeadm-worker-1', 'kubeadm-worker-2'];
let state: kubeadm.KubeadmState | undefined;
let kc: KubeConfig;
let core: CoreV1Api;
let apps: AppsV1Api;
let imageRef = '';

const running = (p: V1Pod | undefined) => p?.status?.phase === 'Running' && podReady(p);

/** A POST over HTTPS verifying the server with `ca`, with a client certificate when given. */
function httpsPost(url: string, body: unknown, ca: string, client?: { cert: string; key: string }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method: 'POST', ca, cert: client?.cert, key: client?.key, agent: false, timeout: 5000, headers: { 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('timeout', () => req.destroy(new Error(`${url}: no answer in 5 s`)));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

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
    imageRef = `ulysses:${img.name.split(':').pop()}`;
  });

  describe('Ulysses installed with `ulysses install` and removed with `ulysses uninstall` (manifests/install.ts)', installTests);

  it('down (kubeadm reset on every node) leaves no process, mount, interface, cgroup, iptables chain or kubeadm file', async () => {
    const s = state!;
    await kubeadm.down({ runDir });
    expect(kubeadm.leftovers(runDir, s)).toEqual([]);
    expect(kubeadm.readKubeadmState(runDir)).toBeUndefined();
    state = undefined;
  });
});

const execFileP = promisify(execFile);
const SHIM_COMPONENT = 'ulysses-controller-manager';
const CRITICAL_NS = 'it-kubeadm-critical';

/** The Ulysses CLI as a user runs it. */
async function cli(args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await execFileP(join(REPO_ROOT, 'node_modules', '.bin', 'tsx'), [join(REPO_ROOT, 'cli', 'ulysses.ts'), ...args], { env: { ...process.env, KUBECONFIG: state!.kubeconfig }, maxBuffer: 16 << 20 });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

const KCM_MANIFEST = '/etc/kubernetes/manifests/kube-controller-manager.yaml';
const SCHEDULER_MANIFEST = '/etc/kubernetes/manifests/kube-scheduler.yaml';

/** The static pod `<component>-<CP>` running `flag` (or not), Ready. */
async function staticPodWith(core: CoreV1Api, component: string, flag: string, present = true): Promise<V1Pod> {
  return pollUntil(`${component} ${present ? 'with' : 'without'} ${flag}, Ready`, async () => {
    const p = await core.readNamespacedPod({ name: `${component}-${CP}`, namespace: 'kube-system' }).catch(() => undefined);
    return p && (p.spec?.containers?.[0]?.command ?? []).includes(flag) === present && podReady(p) && p;
  }, { timeoutMs: 120_000, intervalMs: 500 });
}

/**
 * What an operator changed before Ulysses came: a hand edit of kcm's manifest (--v=2, also recorded
 * in kubeadm-config), and kube-scheduler run with a config of their own mounted from the node.
 */
async function operatorChanges(core: CoreV1Api, access: InstallOptions['nodes']): Promise<void> {
  const edit = async (path: string, fn: (doc: ReturnType<typeof parseDocument>) => void) => {
    const doc = parseDocument((await access.readFile(CP, path))!);
    fn(doc);
    await access.writeFile(CP, path, doc.toString({ indentSeq: false, lineWidth: 0 }), 0o600);
  };
  await edit(KCM_MANIFEST, (d) => (d.getIn(['spec', 'containers', 0, 'command']) as { add(x: unknown): void }).add('--v=2'));
  await access.writeFile(CP, '/etc/kubernetes/operator-scheduler/config.yaml', OPERATOR_SCHEDULER_CONFIG, 0o644);
  await edit(SCHEDULER_MANIFEST, (d) => {
    (d.getIn(['spec', 'containers', 0, 'command']) as { add(x: unknown): void }).add('--config=/etc/operator-scheduler/config.yaml');
    (d.getIn(['spec', 'volumes']) as { add(x: unknown): void }).add(d.createNode({ name: 'operator-scheduler', hostPath: { path: '/etc/kubernetes/operator-scheduler', type: 'Directory' } }));
    (d.getIn(['spec', 'containers', 0, 'volumeMounts']) as { add(x: unknown): void }).add(d.createNode({ name: 'operator-scheduler', mountPath: '/etc/operator-scheduler', readOnly: true }));
  });
  const cm = await core.readNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system' });
  const cc = parseDocument(cm.data!.ClusterConfiguration!);
  cc.setIn(['controllerManager', 'extraArgs'], cc.createNode([{ name: 'v', value: '2' }]));
  cm.data!.ClusterConfiguration = cc.toString();
  await core.replaceNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system', body: cm });
  await staticPodWith(core, 'kube-controller-manager', '--v=2');
  await staticPodWith(core, 'kube-scheduler', '--config=/etc/operator-scheduler/config.yaml');
}

const clusterConfigMap = (core: CoreV1Api) => core.readNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system' });

function installTests(): void {
  let opts: InstallOptions;
  let before: Record<string, string>;
  let stock: ReturnType<typeof stockSnapshot>;
  let clusterBefore = '';
  let criticalNode = '';

  beforeAll(() => {
    opts = { kubeconfig: state!.kubeconfig, kubectl: binaryPath('kubectl'), image: imageRef, nodes: kubeadm.kubeadmNodeAccess(state!), log: (l) => / in [\d.]+ s$/.test(l) && !l.startsWith('[') && console.log(l) };
  });

  it("installs every component: controller manager and extender pods Running, the shim on every node, kcm and kube-scheduler switched, the operator's changes kept and recorded for kubeadm upgrade; running pods untouched", async () => {
    expect(imageRef).not.toBe('');
    await operatorChanges(core, opts.nodes);
    clusterBefore = (await clusterConfigMap(core)).data!.ClusterConfiguration!;
    before = await workloadFingerprint(core, ['it-kubeadm', 'kube-system', CRITICAL_NS]);
    stock = stockSnapshot(state!);
    await install(opts);

    // the operator's hand edit and scheduler config kept (merged), the change recorded in kubeadm-config
    const kcmCommand = (await core.readNamespacedPod({ name: `kube-controller-manager-${CP}`, namespace: 'kube-system' })).spec!.containers[0]!.command!;
    expect(kcmCommand).toContain('--v=2');
    expect(kcmCommand.filter((a) => a.startsWith('--controllers='))).toEqual([KCM_CONTROLLERS_FLAG]);
    const merged = parseYaml((await opts.nodes.readFile(CP, NODE_PATHS.schedulerConfig))!) as { percentageOfNodesToScore: number; profiles: unknown[]; extenders: unknown[] };
    expect(merged.percentageOfNodesToScore).toBe(77);
    expect(merged.profiles).toEqual((parseYaml(OPERATOR_SCHEDULER_CONFIG) as { profiles: unknown[] }).profiles);
    expect(merged.extenders).toHaveLength(2);
    const recorded = await clusterConfigMap(core);
    const cc = parseYaml(recorded.data!.ClusterConfiguration!) as { controllerManager: { extraArgs: { name: string; value: string }[] }; scheduler: { extraArgs: { name: string; value: string }[] } };
    expect(cc.controllerManager.extraArgs.map((a) => a.name)).toEqual(['v', 'controllers']);
    expect(cc.scheduler.extraArgs).toEqual([{ name: 'config', value: NODE_PATHS.schedulerConfig }]);
    expect(recorded.metadata?.annotations?.[CLUSTER_CONFIGURATION_BACKUP_ANNOTATION]).toBe(clusterBefore);

    for (const name of ['ulysses-controller-manager', 'ulysses-scheduler-extender']) {
      const d = await apps.readNamespacedDeployment({ name, namespace: 'ulysses-system' });
      expect(d.status?.availableReplicas, name).toBe(d.spec?.replicas);
    }
    expect((await apps.readNamespacedDeployment({ name: 'ulysses-controller-manager', namespace: 'ulysses-system' })).spec?.replicas).toBe(2);
    await expectInstalled(core, runDir);
    // every component reports the generation it applied in UlyssesConfig/default's status
    const custom = kc.makeApiClient(CustomObjectsApi);
    const cfg = (await custom.getClusterCustomObject({ group: 'ulysses.io', version: 'v1alpha1', plural: 'ulyssesconfigs', name: 'default' })) as UlyssesConfig;
    const rows = statusRows(cfg);
    const keys = rows.map((r) => r.component);
    for (const k of ['controller-manager', 'scheduler-extender', 'apf', ...state!.nodes.map((n) => `kubelet-shim/${n.spec.name}`)]) expect(keys, k).toContain(k);
    expect(rows.filter((r) => !r.upToDate)).toEqual([]);
    const status = await cli(['status']);
    expect(status.code, status.out).toBe(0);
    for (const k of keys) expect(status.out).toContain(k);
    // the kubelet restarts onto the shim, and the static-pod regeneration, left every other pod alone
    const after = await workloadFingerprint(core, ['it-kubeadm', 'kube-system', CRITICAL_NS]);
    for (const [k, v] of Object.entries(before)) expect(after[k], k).toBe(v);
  });

  it("the extender answers kube-scheduler's client certificate only: over its ClusterIP, no certificate or another identity is refused", async () => {
    const access = kubeadm.kubeadmNodeAccess(state!);
    const file = async (path: string) => (await access.readFile(CP, path)) ?? expect.fail(`${path} missing on ${CP}`);
    const ca = await file(SCHEDULER_EXTENDER_TLS_FILES.caFile);
    const scheduler = { cert: await file(SCHEDULER_EXTENDER_TLS_FILES.certFile), key: await file(SCHEDULER_EXTENDER_TLS_FILES.keyFile) };
    const filterArgs = { Pod: { metadata: { name: 'nobody', namespace: 'default', uid: 'x' }, spec: { containers: [{ name: 'c' }] } }, NodeNames: [CP] };
    const asScheduler = await httpsPost('https://10.96.0.250:8888/filter', filterArgs, ca, scheduler);
    expect(asScheduler.status, asScheduler.body).toBe(200);
    expect(JSON.parse(asScheduler.body).NodeNames).toEqual([CP]);
    const bindArgs = { PodName: 'nobody', PodNamespace: 'default', PodUID: 'x', Node: CP };
    const anonymous = await httpsPost('https://10.96.0.250:8888/bind', bindArgs, ca);
    expect(anonymous.status).toBe(403);
    expect(anonymous.body).toContain('answers kube-scheduler only');
    // a certificate of the extender's own CA for another name (the CA key stays in a Secret nothing mounts)
    const caSecret = await core.readNamespacedSecret({ name: EXTENDER_TLS_SECRETS.ca, namespace: 'ulysses-system' });
    const caPair = { cert: Buffer.from(caSecret.data!['ca.crt']!, 'base64').toString(), key: Buffer.from(caSecret.data!['ca.key']!, 'base64').toString() };
    const intruder = await issueLeaf(caPair, { cn: 'system:serviceaccount:default:default', usage: 'client' });
    expect((await httpsPost('https://10.96.0.250:8888/filter', filterArgs, ca, intruder)).status).toBe(403);
    // the key on the node is root's only
    expect(statSync(join(state!.nodes.find((n) => n.spec.name === CP)!.etcKubernetes, 'ulysses', 'pki', 'extender-client.key')).mode & 0o777).toBe(0o600);
  });

  it('fails over a critical Deployment on a NoExecute taint, handled by the controller manager pods; reachable over its ClusterIP', async () => {
    await ensureNamespace(core, CRITICAL_NS, grantLabels(['criticality'])); // the admission policies are installed: the admin's grant
    // the worker without the extender or the leading controller manager: the taint must not take the
    // scheduling path (extender, ignorable: false) down with the critical pod
    const ulyssesPods = (await core.listNamespacedPod({ namespace: 'ulysses-system' })).items;
    const busy = (n: string) => ulyssesPods.filter((p) => p.spec?.nodeName === n).length;
    criticalNode = [...WORKERS].sort((a, b) => busy(a) - busy(b))[0]!;
    const other = WORKERS.find((w) => w !== criticalNode)!;
    await core.patchNode({ name: other, body: [{ op: 'add', path: '/spec/unschedulable', value: true }] }); // place it on criticalNode first
    await applyDeployment(apps, deployment({ namespace: CRITICAL_NS, name: 'upf', replicas: 1, criticality: 'high', image: 'udp-echo', nodes: WORKERS }));
    await core.createNamespacedService({ namespace: CRITICAL_NS, body: { metadata: { name: 'upf' }, spec: { selector: { app: 'upf' }, ports: [{ port: ECHO_PORT, targetPort: ECHO_PORT, protocol: 'UDP' }] } } });
    const first = await pollUntil('upf Ready', async () => (await core.listNamespacedPod({ namespace: CRITICAL_NS })).items.find((p) => podReady(p)), { timeoutMs: 120_000 });
    expect(first.spec?.nodeName).toBe(criticalNode);
    await core.patchNode({ name: other, body: [{ op: 'add', path: '/spec/unschedulable', value: false }] });
    const clusterIP = (await core.readNamespacedService({ name: 'upf', namespace: CRITICAL_NS })).spec!.clusterIP!;
    await udpFirstAnswer(clusterIP, ECHO_PORT, { timeoutMs: 60_000 });

    const tainted = Date.now();
    await core.patchNode({ name: criticalNode, body: [{ op: 'add', path: '/spec/taints', value: [{ key: 'it.ulysses.io/failover', effect: 'NoExecute' }] }] });
    const replacement = await pollUntil(
      'a replacement upf pod Ready on the other worker',
      async () => (await core.listNamespacedPod({ namespace: CRITICAL_NS })).items.find((p) => p.metadata!.uid !== first.metadata!.uid && podReady(p) && !p.metadata?.deletionTimestamp),
      { timeoutMs: 120_000 },
    );
    expect(replacement.spec?.nodeName).toBe(other);
    const answered = await udpFirstAnswer(clusterIP, ECHO_PORT, { timeoutMs: 60_000 });
    console.log(`critical pod back through its ClusterIP ${((answered - tainted) / 1000).toFixed(2)} s after the taint (kube-proxy, Ulysses controller manager pods, vanilla mode)`);
    // the eviction and the replacement were the Ulysses controller manager's work (kcm's are disabled)
    const evicted = await pollUntil('the eviction Event of the first pod', async () => (await eventsFor(core, CRITICAL_NS, 'Pod', first.metadata!.name!)).find((e) => e.reason === 'TaintManagerEviction'), { timeoutMs: 30_000 });
    expect(evicted.reportingComponent).toBe(SHIM_COMPONENT);
    const rs = replacement.metadata!.ownerReferences![0]!.name;
    const created = (await eventsFor(core, CRITICAL_NS, 'ReplicaSet', rs)).filter((e) => e.reason === 'SuccessfulCreate');
    expect(created.length).toBeGreaterThan(0);
    for (const e of created) expect(e.reportingComponent).toBe(SHIM_COMPONENT);
    await core.patchNode({ name: criticalNode, body: [{ op: 'add', path: '/spec/taints', value: [] }] });
  });

  it('a kubelet that does not come back on the shim stops the install, naming the node, and is switched back (not accepted on a Lease renewal)', async () => {
    // worker-2's kubelet is "restarted" by a node access that does nothing: the old kubelet keeps
    // renewing its Lease and the node stays Ready, which the check of Lease times accepted
    const node = WORKERS[1]!;
    const real = opts.nodes;
    const restarts: string[] = [];
    const nodes: InstallOptions['nodes'] = Object.assign(Object.create(real) as InstallOptions['nodes'], {
      nodes: () => real.nodes().filter((n) => n.name === node),
      restartKubelet: async (name: string) => void restarts.push(name),
    });
    const config = await real.readFile(node, '/var/lib/kubelet/config.yaml');
    const err = await install({ ...opts, nodes, components: ['kubelet-shim'], timeoutMs: 20_000, log: () => undefined }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(new RegExp(`kubelet-shim: node service and kubelet endpoint on ${node}.*the kubelet of ${node} on the kubelet-shim: .*no new kubelet Starting Event.*Rolled back`, 's'));
    expect(restarts).toEqual([node, node]); // the switch, then the rollback
    expect(await real.readFile(node, '/var/lib/kubelet/config.yaml')).toBe(config);
    // the real kubelet was never touched: still Ready, and no probe pod left behind
    expect((await core.listNamespacedPod({ namespace: 'ulysses-system', labelSelector: 'app.kubernetes.io/name=ulysses-install-probe' })).items).toEqual([]);
  });

  it('`ulysses set` switches the controller manager and a node\'s kubelet-shim at runtime', async () => {
    const set = await cli(['set', 'controller-manager', 'multi-priority-periodic']);
    expect(set.code, set.out).toBe(0);
    const shim = await cli(['set', 'kubelet-shim', 'fixed', '--node', WORKERS[0]!, '--param', 'waitMs=200']);
    expect(shim.code, shim.out).toBe(0);
    const custom = kc.makeApiClient(CustomObjectsApi);
    const rows = await pollUntil(
      'controller-manager and the shim applying the new generation',
      async () => {
        const r = statusRows((await custom.getClusterCustomObject({ group: 'ulysses.io', version: 'v1alpha1', plural: 'ulyssesconfigs', name: 'default' })) as UlyssesConfig);
        const cm = r.find((x) => x.component === 'controller-manager');
        const sh = r.find((x) => x.component === `kubelet-shim/${WORKERS[0]}`);
        return cm?.upToDate && sh?.upToDate && r;
      },
      { timeoutMs: 60_000 },
    );
    expect(rows.find((x) => x.component === 'controller-manager')!.observed).toContain('replicaset=multi-priority-periodic');
    expect(rows.find((x) => x.component === `kubelet-shim/${WORKERS[0]}`)!.observed).toContain('fixed');
    expect(rows.find((x) => x.component === `kubelet-shim/${WORKERS[1]}`)!.observed).toContain('vanilla');
  });

  it('kill -9 of the leading controller manager\'s process: leadership moves on and the controllers keep working', async () => {
    const leases = kc.makeApiClient(CoordinationV1Api);
    const lease = await leases.readNamespacedLease({ name: 'ulysses-controller-manager', namespace: 'ulysses-system' });
    const holder = lease.spec!.holderIdentity!;
    const leaderPod = holder.split('_')[0]!;
    const pid = podProcess(leaderPod, 'controller-manager');
    expect(pid, `the process of ${leaderPod}`).toBeDefined();
    const killed = Date.now();
    process.kill(Number(pid), 'SIGKILL');
    const next = await pollUntil(
      'a new Lease holder',
      async () => {
        const l = await leases.readNamespacedLease({ name: 'ulysses-controller-manager', namespace: 'ulysses-system' });
        return l.spec?.holderIdentity && l.spec.holderIdentity !== holder ? l.spec : undefined;
      },
      { timeoutMs: 90_000 },
    );
    const newPod = next.holderIdentity!.split('_')[0]!;
    progressLog(`leader ${leaderPod} killed; ${newPod === leaderPod ? 'its restarted process' : `the standby ${newPod}`} leads ${((Date.now() - killed) / 1000).toFixed(1)} s later (lease duration 15 s), transitions ${lease.spec?.leaseTransitions ?? 0} -> ${next.leaseTransitions}`);
    expect(next.leaseTransitions ?? 0).toBeGreaterThan(lease.spec?.leaseTransitions ?? 0);
    // the new leader's ReplicaSet controller creates the pod of a scale-up
    await apps.patchNamespacedDeployment({ name: 'upf', namespace: CRITICAL_NS, body: [{ op: 'replace', path: '/spec/replicas', value: 2 }] });
    const pods = await pollUntil('2 upf pods Ready', async () => {
      const ready = (await core.listNamespacedPod({ namespace: CRITICAL_NS })).items.filter((p) => podReady(p) && !p.metadata?.deletionTimestamp);
      return ready.length === 2 && ready;
    }, { timeoutMs: 120_000 });
    const rs = pods[0]!.metadata!.ownerReferences![0]!.name;
    const creates = (await eventsFor(core, CRITICAL_NS, 'ReplicaSet', rs)).filter((e) => e.reason === 'SuccessfulCreate' && e.reportingInstance?.startsWith(newPod));
    expect(creates.length, 'a SuccessfulCreate Event from the new leader').toBeGreaterThan(0);
  });

  it("kubeadm upgrade keeps Ulysses' --controllers (recorded in kubeadm-config); a kcm regenerated without it runs the replaced controllers again, and the controller manager reports each duplicate on kcm's pod", async () => {
    const access = kubeadm.kubeadmNodeAccess(state!);
    const kcmPod = `kube-controller-manager-${CP}`;
    const kcm = () => core.readNamespacedPod({ name: kcmPod, namespace: 'kube-system' });
    const duplicates = async () => (await core.listNamespacedEvent({ namespace: 'kube-system', fieldSelector: `involvedObject.name=${kcmPod},reason=${DUPLICATE_CONTROLLERS_REASON}` })).items;
    // the install itself ran both for a moment (the controller manager before kcm's switch): that
    // kcm pod was reported; the one running now is not
    const installed = (await kcm()).metadata?.uid;
    expect((await duplicates()).filter((e) => e.involvedObject.uid === installed)).toEqual([]);
    const manifest = (await access.readFile(CP, KCM_MANIFEST))!;
    const cluster = (await clusterConfigMap(core)).data!.ClusterConfiguration!;
    const regenerate = async (clusterConfiguration: string) => {
      await access.writeFile(CP, '/etc/kubernetes/it-kubeadm-upgrade.yaml', clusterConfiguration, 0o600);
      await access.kubeadm(CP, ['init', 'phase', 'control-plane', 'controller-manager', '--config', '/etc/kubernetes/it-kubeadm-upgrade.yaml']);
    };
    try {
      // what `kubeadm upgrade` does to kcm's static pod: regenerated from the cluster's ClusterConfiguration
      await regenerate(cluster);
      const upgraded = (await access.readFile(CP, KCM_MANIFEST))!;
      expect(upgraded).not.toBe(manifest);
      expect((parseYaml(upgraded) as V1Pod).spec!.containers[0]!.command!.filter((a) => a.startsWith('--controllers='))).toEqual([KCM_CONTROLLERS_FLAG]);
      await staticPodWith(core, 'kube-controller-manager', KCM_CONTROLLERS_FLAG);
      // regenerated from a ClusterConfiguration without it (an operator's old copy)
      await regenerate(clusterConfigurationWithout(cluster, undefined, 'kube-controller-manager'));
      const reported = await pollUntil(
        'a DuplicateControllers Event on the regenerated kcm',
        async () => {
          const uid = (await kcm()).metadata?.uid;
          return (await duplicates()).find((e) => e.involvedObject.uid === uid);
        },
        { timeoutMs: 120_000, intervalMs: 500 },
      );
      expect(reported.type).toBe('Warning');
      for (const c of Object.keys(REPLACED_KCM_CONTROLLERS)) expect(reported.message).toContain(c);
      expect(reported.reportingComponent ?? reported.source?.component).toBeTruthy();
    } finally {
      await access.remove(CP, '/etc/kubernetes/it-kubeadm-upgrade.yaml');
      // kcm as the install left it (the uninstall test restores that exactly)
      await access.writeFile(CP, KCM_MANIFEST, manifest, 0o600);
    }
    await staticPodWith(core, 'kube-controller-manager', '--v=2');
    expect((await kcm()).spec!.containers[0]!.command).toContain(KCM_CONTROLLERS_FLAG);
  });

  it("uninstall returns the cluster to stock, control plane first: a node that cannot be reached stops it after kcm and kube-scheduler are back (or is skipped with --skip-unreachable, finished later); manifests and kubeadm-config as the operator had them, kubelets on containerd, kcm handles a scale-up, no Ulysses object left, pods untouched", async () => {
    const beforeUninstall = await workloadFingerprint(core, ['it-kubeadm', 'kube-system', CRITICAL_NS]);
    const unreachable = WORKERS[1]!;
    const real = opts.nodes;
    const cut: InstallOptions['nodes'] = Object.assign(Object.create(real) as InstallOptions['nodes'], {
      readFile: (node: string, path: string) => (node === unreachable ? Promise.reject(new Error(`ssh: connect to host ${node} port 22: No route to host`)) : real.readFile(node, path)),
    });
    const lines: string[] = [];
    const err = await uninstall({ ...opts, nodes: cut, log: (l) => lines.push(l) }).then(() => undefined, (e: Error) => e);
    expect(err?.message).toContain(`${unreachable} cannot be reached (ssh: connect to host ${unreachable} port 22: No route to host); kcm and kube-scheduler are already stock. Give --skip-unreachable`);
    for (const c of ['kube-controller-manager', 'kube-scheduler']) expect(readFileSync(`/etc/kubernetes/manifests/${c}.yaml`, 'utf8'), c).toBe(stock.manifests[c]);
    await uninstall({ ...opts, nodes: cut, skipUnreachable: true, log: (l) => lines.push(l) });
    expect(lines.join('\n')).toContain(`not reached, still on the kubelet-shim: ${unreachable}`);
    // the nodes switched back by the first run were left alone by the second
    expect(lines.filter((l) => l.endsWith('the kubelet is not on the kubelet-shim: left alone'))).toHaveLength(state!.nodes.length - 1);
    // the node is back: the same command for the shim finishes it
    await uninstall({ ...opts, components: ['kubelet-shim'] });
    expectStock(runDir, stock);
    const cm = await clusterConfigMap(core);
    expect(cm.data!.ClusterConfiguration).toBe(clusterBefore);
    expect(cm.metadata?.annotations?.[CLUSTER_CONFIGURATION_BACKUP_ANNOTATION]).toBeUndefined();
    // kube-controller-manager's own ReplicaSet controller handles a scale-up again
    await apps.patchNamespacedDeployment({ name: 'upf', namespace: CRITICAL_NS, body: [{ op: 'replace', path: '/spec/replicas', value: 3 }] });
    const pods = await pollUntil('3 upf pods Ready', async () => {
      const ready = (await core.listNamespacedPod({ namespace: CRITICAL_NS })).items.filter((p) => podReady(p) && !p.metadata?.deletionTimestamp);
      return ready.length === 3 && ready;
    }, { timeoutMs: 120_000 });
    const rs = pods[0]!.metadata!.ownerReferences![0]!.name;
    const kcmCreate = await pollUntil('a SuccessfulCreate Event from kube-controller-manager', async () => (await eventsFor(core, CRITICAL_NS, 'ReplicaSet', rs)).find((e) => e.reason === 'SuccessfulCreate' && e.reportingComponent === 'replicaset-controller'), { timeoutMs: 30_000 });
    expect(kcmCreate.source?.component).toBe('replicaset-controller');
    // nothing of Ulysses is left
    const crds = await kc.makeApiClient(ApiextensionsV1Api).listCustomResourceDefinition();
    expect(crds.items.filter((c) => c.spec.group === 'ulysses.io').map((c) => c.metadata!.name)).toEqual([]);
    expect((await core.listNamespace()).items.map((n) => n.metadata!.name)).not.toContain('ulysses-system');
    const leftover = await execFileP(binaryPath('kubectl'), ['--kubeconfig', state!.kubeconfig, 'get', 'clusterroles,clusterrolebindings,flowschemas,validatingadmissionpolicies,validatingadmissionpolicybindings', '-l', 'app.kubernetes.io/part-of=ulysses', '-o', 'name']);
    expect(leftover.stdout.trim()).toBe('');
    const after = await workloadFingerprint(core, ['it-kubeadm', 'kube-system', CRITICAL_NS]);
    for (const [k, v] of Object.entries(beforeUninstall)) expect(after[k], k).toBe(v);
  });
}
