/**
 * Ulysses on a kubeadm cluster reached only through its admin kubeconfig and a node shell
 * (manifests/node-shell.ts; `ssh root@{node}` on real nodes, the testbed's kubeadmNodeShell here:
 * a mount namespace with the node's directories and a `systemctl` acting on the node's processes).
 * Install, the failover experiment against stock Kubernetes (configuration upstream) with the
 * source's kubelet stopped through the shell, and uninstall — every node step through the shell,
 * nothing through the testbed's direct access. No timing thresholds.
 *
 * On the installed cluster, before the uninstall, faults of Ulysses' own components (issue 42 items
 * 6 and 7), each while pods are being created; what must hold is asserted, the times are logged to
 * the components log:
 * - the kubelet-shim killed (-9) or stopped (SIGSTOP) on a node: restarted under its unit's
 *   supervision settings (unit-supervisor.ts reads manifests/systemd/ulysses-kubelet-shim.service),
 *   the fallback guard keeps the kubelet on containerd meanwhile and moves it back; the node stays
 *   Ready, every pod runs in one sandbox, nothing running is touched;
 * - the controller manager gone for good (both pods frozen, then deleted): the extender's standby
 *   routes its Service itself and a pod is scheduled meanwhile; the kcm handback gives
 *   kube-controller-manager the controllers back, whose ReplicaSet controller recreates the
 *   controller manager, which takes them back.
 * - both extender replicas gone (frozen, then deleted): kube-scheduler places nothing until the
 *   extender rescue of the kcm handback's static pod binds a replacement to the control-plane node;
 *   a renewing leader is never rescued.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ApiextensionsV1Api, AppsV1Api, CoordinationV1Api, CoreV1Api, DiscoveryV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { applyDeployment, deployment, podReady } from '../../experiments/workloads.ts';
import { pollUntil } from '../../core/poll.ts';
import { isAlive } from '../../experiments/testbed/processes.ts';
import { TEST_IMAGES } from '../../experiments/testbed/images/index.ts';
import { NODE_PATHS } from '../../manifests/install.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';
import { markerPath, socketPathState } from '../../kubelet-shim/socket-path.ts';
import { KCM_HANDBACK_ANNOTATION } from '../../core/kcm.ts';
import { progressLog } from '../../core/logging.ts';
import { replacedControllersRunning } from '../../controller-manager/duplicate-controllers.ts';
import { ROUTE_SLICE } from '../../scheduler-plugins/extender/routing.ts';
import { eventsFor, podProcess, workloadFingerprint } from '../kubeadm-checks.ts';
import { metricAt } from './node-failure-harness.ts';
import * as kubeadm from '../../experiments/testbed/kubeadm.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { buildUlyssesImage, importUlyssesImage, REPO_ROOT } from '../../experiments/testbed/ulysses-image.ts';
import { install, uninstall, type InstallOptions } from '../../manifests/install.ts';
import { expectInstalled, expectStock, kubeletEndpoints, stockSnapshot } from '../kubeadm-checks.ts';
import { runFailoverExperiment } from '../../experiments/harness/local.ts';
import { EVENTS, readResults, type RepResult } from '../../experiments/harness/results.ts';

const runDir = '/tmp/ulysses-it-kubeadm-shell';
const out = '/tmp/ulysses-it-kubeadm-shell-failover';
let state: kubeadm.KubeadmState | undefined;
let kc: KubeConfig;
let core: CoreV1Api;
let opts: InstallOptions;
let imageRef = '';
let stock: ReturnType<typeof stockSnapshot>;
let apps: AppsV1Api;
const unitDir = (node: kubeadm.KubeadmNode) => join(node.spec.dir, 'etc-systemd-system');
const CP = kubeadm.CONTROL_PLANE_NAME;
const WORKERS = ['kubeadm-worker-1', 'kubeadm-worker-2'];
const CM_COMPONENT = 'ulysses-controller-manager';
const LOAD = 'shim-fault';
const running = (p: V1Pod | undefined) => p?.status?.phase === 'Running' && podReady(p);

describe('a kubeadm cluster reached through a node shell', () => {
  beforeAll(async () => {
    await kubeadm.down({ runDir, log: () => undefined }); // a leftover of an aborted run
    rmSync(out, { recursive: true, force: true });
    state = await kubeadm.up({ runDir, workers: 2, log: () => undefined });
    kc = kubeadm.kubeConfigForKubeadm(state);
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
    await core.createNamespace({ body: { metadata: { name: 'it-kubeadm' } } });
    const img = await buildUlyssesImage({ log: () => undefined });
    await importUlyssesImage(img.tar, state.nodes.map((n) => n.spec.socket));
    imageRef = `ulysses:${img.name.split(':').pop()}`;
    opts = {
      kubeconfig: state.kubeconfig,
      kubectl: binaryPath('kubectl'),
      image: imageRef,
      nodes: kubeadm.kubeadmShellAccess(state),
      nodeSelector: { 'node-role.kubernetes.io/control-plane': '' },
      log: () => undefined,
    };
  });
  afterAll(async () => {
    if (kubeadm.readKubeadmState(runDir)) await kubeadm.down({ runDir });
  });

  it('installs every component through the node shell: kcm and kube-scheduler edited in place (kept for uninstall), the shim as a systemd unit, each kubelet on it', async () => {
    stock = stockSnapshot(state!);
    await install(opts);
    // the shims started by each node's `systemctl enable --now ulysses-kubelet-shim`
    await expectInstalled(core, runDir);
    for (const n of kubeadm.readKubeadmState(runDir)!.nodes) {
      // the unit of manifests/systemd with the shim program, a drop-in naming the node, the kubelet's drop-in: in the node's /etc/systemd/system
      const unit = readFileSync(join(unitDir(n), 'ulysses-kubelet-shim.service'), 'utf8');
      expect(unit).toContain(`ExecStart=${join(REPO_ROOT, 'manifests', 'entrypoint.sh')} kubelet-shim --config /etc/ulysses/kubelet-shim.yaml`);
      expect(readFileSync(join(unitDir(n), 'ulysses-kubelet-shim.service.d', '20-ulysses-node.conf'), 'utf8')).toContain(`Environment=NODE_NAME=${n.spec.name}`);
      expect(readFileSync(join(unitDir(n), 'kubelet.service.d', '10-ulysses-kubelet-shim.conf'), 'utf8')).toContain('After=ulysses-kubelet-shim.service');
      expect(readFileSync(join(unitDir(n), 'ulysses-kubelet-shim-fallback.service'), 'utf8')).toContain(`ExecStart=${join(REPO_ROOT, 'manifests', 'entrypoint.sh')} kubelet-shim-fallback --config /etc/ulysses/kubelet-shim.yaml`);
      // the shim's files in the node's own /etc/ulysses, not another node's
      expect(readFileSync(join(n.spec.dir, 'etc-ulysses', 'kubelet-shim.yaml'), 'utf8')).toContain(n.spec.shimSocket);
    }
    // kcm's manifest of before, kept for uninstall
    expect(existsSync('/etc/kubernetes/ulysses/backup/kube-controller-manager.yaml')).toBe(true);
  });

  let results: RepResult[] = [];
  let report = '';
  it('runs the failover experiment against upstream through the node shell: the switches and the kubelet failure on the nodes, the cluster left as found', async () => {
    const nodes = kubeadm.kubeadmShellAccess(state!);
    await runFailoverExperiment({
      kubeadm: true,
      cluster: { kubeconfig: state!.kubeconfig, nodes, image: imageRef, sources: ['kubeadm-worker-1'], destinations: ['kubeadm-worker-2'], shellDescription: 'kubeadmNodeShell (kubeadm testbed)' },
      plan: { configs: ['upstream', 5], dns: [1], podsPerNode: [2], reps: 1 },
      warmup: false,
      out,
      repTimeoutMs: 120_000,
    });
    results = readResults(join(out, 'results.jsonl'));
    report = readFileSync(join(out, 'report.md'), 'utf8');
    expect(results.map((r) => r.config).sort()).toEqual([5, 'upstream']);
    for (const r of results) {
      expect(r.error, `config ${r.config}`).toBeUndefined();
      for (const e of EVENTS) expect(r.events[e], `config ${r.config} ${e}`).not.toBeNull();
    }
    const up = results.find((r) => r.config === 'upstream')!;
    const five = results.find((r) => r.config === 5)!;
    // inspected through the shell: the kubelets' endpoints read from each node's config
    for (const n of state!.nodes) {
      expect(up.cluster!.kubeletRuntime[n.spec.name], n.spec.name).toBe(`unix://${n.spec.socket}`);
      expect(five.cluster!.kubeletRuntime[n.spec.name], n.spec.name).toBe(`unix://${n.spec.shimSocket}`);
    }
    expect(up.cluster!.kcmControllers).toBe('all');
    expect(five.cluster!.schedulerExtender).toBe(true);
    // Ulysses was installed when the run began: a switch to upstream, and back to Ulysses for 5 or for the cleanup
    expect(results.some((r) => r.configSwitch?.to === 'upstream')).toBe(true);
    expect(report).toContain('systemctl kill --signal=SIGSTOP kubelet');
    expect(report).toContain('kubeadmNodeShell (kubeadm testbed)');
    // the source kubelet runs again (SIGCONT through the shell) and Ulysses is back on the path
    const fresh = kubeadm.readKubeadmState(runDir)!;
    const kubelet = fresh.processes.find((p) => p.name === 'kubelet/kubeadm-worker-1')!;
    expect(readFileSync(`/proc/${kubelet.pid}/stat`, 'utf8').split(') ')[1]![0]).not.toBe('T');
    for (const n of fresh.nodes) expect(kubeletEndpoints(n).runtime, n.spec.name).toBe(`unix://${n.spec.shimSocket}`);
  });

  describe('kubelet-shim faults under load (issue 42 item 6): the unit restarts it, the fallback guard keeps the kubelet on a runtime', () => {
    const node = WORKERS[1]!;
    const spec = () => state!.nodes.find((n) => n.spec.name === node)!.spec;
    const LOAD = 'shim-fault';
    const readyCondition = async () => (await core.readNode({ name: node })).status!.conditions!.find((c) => c.type === 'Ready')!;
    const loadPods = async (n: number) =>
      pollUntil(`${n} ${LOAD} pods Running and Ready on ${node}`, async () => {
        const items = (await core.listNamespacedPod({ namespace: 'it-kubeadm', labelSelector: `app=${LOAD}` })).items.filter((p) => !p.metadata?.deletionTimestamp);
        return items.length === n && items.every((p) => running(p) && p.spec?.nodeName === node) && items;
      }, { timeoutMs: 240_000, intervalMs: 250 });
    const scale = (replicas: number) => apps.patchNamespacedDeployment({ name: LOAD, namespace: 'it-kubeadm', body: [{ op: 'replace', path: '/spec/replicas', value: replicas }] });
    const newShimPid = (old: number) =>
      pollUntil(`a new kubelet-shim process on ${node}`, () => {
        try {
          const pid = kubeadm.shimMainPid(state!, node);
          return pid !== old && isAlive(pid) && pid;
        } catch {
          return false;
        }
      }, { timeoutMs: 60_000, intervalMs: 50 });
    const shimReady = () =>
      pollUntil(`the kubelet-shim on ${node} ready (/readyz)`, async () => (await fetch(`http://127.0.0.1:${spec().shimMetricsPort}/readyz`).then((r) => r.status, () => 0)) === 200, { timeoutMs: 60_000, intervalMs: 50 });
    /** Every pod of `pods` runs in exactly one READY sandbox in the node's containerd, and no sandbox runs twice. */
    const expectEachOnce = async (pods: V1Pod[]) => {
      const cri = new CriClient(spec().socket);
      try {
        const r = await cri.call<{ items?: Array<{ labels?: Record<string, string> }> }>('ListPodSandbox', { filter: { state: { state: 'SANDBOX_READY' } } }, { deadline: Date.now() + 10_000 });
        const count = new Map<string, number>();
        for (const sb of r.items ?? []) {
          const uid = sb.labels?.['io.kubernetes.pod.uid'] ?? '?';
          count.set(uid, (count.get(uid) ?? 0) + 1);
        }
        for (const p of pods) expect(count.get(p.metadata!.uid!), p.metadata!.name).toBe(1);
        for (const [uid, n] of count) expect(n, `sandboxes of pod ${uid}`).toBe(1);
      } finally {
        cri.close();
      }
    };
    /** The node never left Ready, every pod runs in one sandbox, nothing that ran before the fault changed. */
    const expectUndisturbed = async (pods: V1Pod[]) => {
      const ready = await readyCondition();
      expect(ready.status).toBe('True');
      expect(ready.lastTransitionTime).toEqual(readyBefore.lastTransitionTime);
      await expectEachOnce(pods);
      const after = await workloadFingerprint(core, ['it-kubeadm', 'kube-system']);
      for (const [k, v] of Object.entries(before)) expect(after[k], k).toBe(v);
    };
    const kubeletStarts = async () => (await eventsFor(core, 'default', 'Node', node)).filter((e) => e.reason === 'Starting' && e.source?.component === 'kubelet').map((e) => e.metadata!.uid!);
    let readyBefore: { lastTransitionTime?: Date; status: string };
    let before: Record<string, string>;

    beforeAll(async () => {
      // the state on disk: the node shell's systemctl restarted kubelets from other processes (a stale copy would track dead pids)
      state = kubeadm.readKubeadmState(runDir)!;
      readyBefore = await readyCondition();
      await applyDeployment(apps, deployment({ namespace: 'it-kubeadm', name: LOAD, replicas: 0, criticality: 'low', image: 'http-server', nodes: [node] }));
    });
    afterAll(async () => {
      // the guard restarted this node's kubelet from its own process: the testbed's state is on disk
      state = kubeadm.readKubeadmState(runDir)!;
      opts.nodes = kubeadm.kubeadmShellAccess(state);
    });

    it('kill -9 while 8 pods are being created: restarted by the unit, the node stays Ready, every pod runs once, nothing running is touched', async () => {
      expect(readyBefore.status).toBe('True');
      before = await workloadFingerprint(core, ['it-kubeadm', 'kube-system']);
      const pid = kubeadm.shimMainPid(state!, node);
      await scale(8);
      await pollUntil(`the first ${LOAD} pod bound to ${node}`, async () => (await core.listNamespacedPod({ namespace: 'it-kubeadm', labelSelector: `app=${LOAD}` })).items.some((p) => p.spec?.nodeName), { timeoutMs: 60_000, intervalMs: 20 });
      const t0 = Date.now();
      process.kill(pid, 'SIGKILL');
      await newShimPid(pid);
      await shimReady();
      const tShim = Date.now();
      const pods = await loadPods(8);
      progressLog(`kubelet-shim kill -9 on ${node}: a new shim ready ${((tShim - t0) / 1000).toFixed(2)} s after, 8 pods Ready ${((Date.now() - t0) / 1000).toFixed(2)} s after`);
      await expectUndisturbed(pods);
    });

    it('SIGSTOP while 4 more pods are being created: the guard puts the kubelet on containerd, the watchdog restarts the shim, the guard moves the kubelet back; the node stays Ready, every pod runs once', async () => {
      // return after 5 s instead of 30 s: the node's config, the guard restarted on it
      const access = kubeadm.kubeadmNodeAccess(state!);
      const config = (await access.readFile(node, NODE_PATHS.shimConfig))!;
      await access.writeFile(node, NODE_PATHS.shimConfig, `${config}fallback:\n  returnAfterMs: 5000\n`, 0o644);
      await access.startFallbackGuard(node);
      before = await workloadFingerprint(core, ['it-kubeadm', 'kube-system']);
      const starts = await kubeletStarts();
      const socket = spec().shimSocket;
      const pid = kubeadm.shimMainPid(state!, node);
      await scale(12);
      const t0 = Date.now();
      process.kill(pid, 'SIGSTOP');
      await pollUntil(`the guard pointing ${socket} at containerd`, () => socketPathState(socket, spec().socket) === 'fallback', { timeoutMs: 60_000, intervalMs: 50 });
      const tFallback = Date.now();
      await newShimPid(pid);
      const tRestart = Date.now();
      expect(isAlive(pid), 'the stopped shim is gone (watchdog: SIGABRT, then SIGKILL)').toBe(false);
      expect(readFileSync(join(kubeadm.shimUnitDir({ spec: spec() }), 'supervisor.log'), 'utf8')).toContain('watchdog timeout');
      await pollUntil(`the shim on ${socket} again`, () => socketPathState(socket, spec().socket) === 'shim', { timeoutMs: 60_000, intervalMs: 50 });
      await pollUntil('the kubelet restarted onto the shim by the guard (a new Starting Event)', async () => (await kubeletStarts()).some((u) => !starts.includes(u)) && !existsSync(markerPath(socket)), { timeoutMs: 120_000, intervalMs: 250 });
      const tBack = Date.now();
      const pods = await loadPods(12);
      progressLog(`kubelet-shim SIGSTOP on ${node}: kubelet on containerd ${((tFallback - t0) / 1000).toFixed(2)} s after, shim restarted by the watchdog ${((tRestart - t0) / 1000).toFixed(2)} s, kubelet back on the shim ${((tBack - t0) / 1000).toFixed(2)} s, 12 pods Ready ${((Date.now() - t0) / 1000).toFixed(2)} s`);
      await expectUndisturbed(pods);
      // the kubelet's calls go through the shim again: one more pod is created through it
      const port = spec().shimMetricsPort;
      const runs = await metricAt(port, 'ulysses_cri_proxy_added_latency_seconds_count', { method: 'RunPodSandbox' });
      await scale(13);
      await loadPods(13);
      expect(await metricAt(port, 'ulysses_cri_proxy_added_latency_seconds_count', { method: 'RunPodSandbox' })).toBeGreaterThan(runs);
    });
  });

  it("the controller manager gone for good (both pods frozen, then deleted): the extender still fails over and schedules, kcm gets the controllers back after the handback and recreates the controller manager, which takes them back", async () => {
    const access = kubeadm.kubeadmNodeAccess(kubeadm.readKubeadmState(runDir)!);
    const handbackPod = `ulysses-kcm-handback-${CP}`;
    const kcmPod = () => core.readNamespacedPod({ name: `kube-controller-manager-${CP}`, namespace: 'kube-system' });
    const kcmCommand = (p: V1Pod) => [...(p.spec?.containers[0]?.command ?? []), ...(p.spec?.containers[0]?.args ?? [])];
    const cmPods = async () => (await core.listNamespacedPod({ namespace: 'ulysses-system', labelSelector: 'app.kubernetes.io/name=ulysses-controller-manager' })).items.filter((p) => !p.metadata?.deletionTimestamp);
    const leases = kc.makeApiClient(CoordinationV1Api);
    const holderOf = async (name: string) => (await leases.readNamespacedLease({ name, namespace: 'ulysses-system' })).spec?.holderIdentity ?? '';
    // the handback after 20 s instead of 60 s: its static pod rewritten, the kubelet restarts it
    const manifest = (await access.readFile(CP, NODE_PATHS.kcmHandback))!;
    expect(manifest).toContain('--after=60s');
    await access.writeFile(CP, NODE_PATHS.kcmHandback, manifest.replace('--after=60s', '--after=20s'), 0o600);
    await pollUntil(`${handbackPod} running with --after=20s`, async () => {
      const p = await core.readNamespacedPod({ name: handbackPod, namespace: 'kube-system' }).catch(() => undefined);
      return p && running(p) && p.spec?.containers[0]?.args?.includes('--after=20s');
    }, { timeoutMs: 90_000, intervalMs: 500 });
    expect(replacedControllersRunning(kcmCommand(await kcmPod()))).toEqual([]);

    // both controller manager processes frozen, then their pods deleted: no ReplicaSet controller is left to replace them
    const pods = await cmPods();
    expect(pods).toHaveLength(2);
    const pids = pods.map((p) => podProcess(p.metadata!.name!, 'controller-manager') ?? expect.fail(`no process of ${p.metadata!.name}`));
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    const t0 = Date.now();
    for (const p of pods) await core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: 'ulysses-system', gracePeriodSeconds: 0 });
    await pollUntil('both controller manager processes gone', () => pids.every((pid) => !isAlive(pid)), { timeoutMs: 60_000, intervalMs: 200 });

    // the extender's leader goes too: its standby routes the Service to itself, no controller manager needed
    const extLeader = (await holderOf('ulysses-scheduler-extender')).split('_')[0]!;
    await core.deleteNamespacedPod({ name: extLeader, namespace: 'ulysses-system', gracePeriodSeconds: 0 });
    const routed = await pollUntil('the extender Service routed to the standby', async () => {
      const sl = await kc.makeApiClient(DiscoveryV1Api).readNamespacedEndpointSlice({ name: ROUTE_SLICE, namespace: 'ulysses-system' }).catch(() => undefined);
      const target = sl?.endpoints?.[0]?.targetRef?.name;
      return target && target !== extLeader && target;
    }, { timeoutMs: 120_000, intervalMs: 250 });
    const tRouted = Date.now();
    await core.createNamespacedPod({ namespace: 'it-kubeadm', body: { metadata: { name: 'while-cm-down' }, spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'web', image: TEST_IMAGES.httpServer.name, imagePullPolicy: 'Never' }] } } });
    const scheduled = await pollUntil('a new pod scheduled (through the new extender leader) and Running while no controller manager runs', async () => {
      const p = await core.readNamespacedPod({ name: 'while-cm-down', namespace: 'it-kubeadm' });
      return running(p) && p;
    }, { timeoutMs: 120_000, intervalMs: 250 });
    expect(scheduled.spec?.nodeName).toBeTruthy();
    expect(await cmPods()).toEqual([]);

    // only the handback brings the controllers back: kcm runs them, and its ReplicaSet controller recreates the controller manager
    await pollUntil('kcm with the replaced controllers (handed back)', async () => {
      const p = await kcmPod();
      return p.metadata?.annotations?.[KCM_HANDBACK_ANNOTATION] && running(p) && replacedControllersRunning(kcmCommand(p)).length === 5;
    }, { timeoutMs: 120_000, intervalMs: 250 });
    const tHanded = Date.now();
    const recreated = await pollUntil('2 controller manager pods Running again', async () => {
      const ps = await cmPods();
      return ps.length === 2 && ps.every(running) && ps;
    }, { timeoutMs: 180_000, intervalMs: 500 });
    const rs = recreated[0]!.metadata!.ownerReferences![0]!.name;
    const creates = (await eventsFor(core, 'ulysses-system', 'ReplicaSet', rs)).filter((e) => e.reason === 'SuccessfulCreate' && new Date(e.lastTimestamp ?? e.eventTime ?? 0).getTime() >= t0 - 1000);
    expect(creates.length, 'the controller manager pods created after the handback').toBeGreaterThan(0);
    for (const e of creates) expect(e.reportingComponent, 'created by kcm, not by Ulysses').not.toBe(CM_COMPONENT);

    // a leader again: the handback takes the controllers from kcm, and the leader starts them only then
    await pollUntil('kcm without the replaced controllers again (taken back), Ready', async () => {
      const p = await kcmPod();
      return !p.metadata?.annotations?.[KCM_HANDBACK_ANNOTATION] && running(p) && replacedControllersRunning(kcmCommand(p)).length === 0;
    }, { timeoutMs: 180_000, intervalMs: 250 });
    const tTaken = Date.now();
    const leader = (await holderOf('ulysses-controller-manager')).split('_')[0]!;
    expect(recreated.map((p) => p.metadata!.name)).toContain(leader);
    const log = await pollUntil("the new leader's log: it waited for kcm, then started the controllers", async () => {
      const text = await core.readNamespacedPodLog({ name: leader, namespace: 'ulysses-system' });
      return text.includes('kube-controller-manager gave the replaced controllers up') && text;
    }, { timeoutMs: 60_000, intervalMs: 500 });
    expect(log).toContain('still runs the replaced controllers: waiting before starting them');
    // its ReplicaSet controller works: a Deployment scaled up gets its pod from the Ulysses controller manager
    await apps.patchNamespacedDeployment({ name: LOAD, namespace: 'it-kubeadm', body: [{ op: 'replace', path: '/spec/replicas', value: 14 }] });
    await pollUntil(`${LOAD} scaled to 14 by the Ulysses controller manager`, async () => {
      const rs = (await apps.listNamespacedReplicaSet({ namespace: 'it-kubeadm', labelSelector: `app=${LOAD}` })).items[0];
      const creates = rs ? (await eventsFor(core, 'it-kubeadm', 'ReplicaSet', rs.metadata!.name!)).filter((e) => e.reason === 'SuccessfulCreate' && e.reportingComponent === CM_COMPONENT && new Date(e.lastTimestamp ?? e.eventTime ?? 0).getTime() >= tTaken - 1000) : [];
      return creates.length > 0;
    }, { timeoutMs: 120_000, intervalMs: 500 });
    progressLog(`controller manager gone at 0 s: extender routed to its standby ${routed} at ${((tRouted - t0) / 1000).toFixed(1)} s, a pod scheduled and Running meanwhile; kcm ran the controllers at ${((tHanded - t0) / 1000).toFixed(1)} s (handback after 20 s), controller manager pods recreated, kcm gave them up at ${((tTaken - t0) / 1000).toFixed(1)} s`);
    await core.deleteNamespacedPod({ name: 'while-cm-down', namespace: 'it-kubeadm' });
    await access.writeFile(CP, NODE_PATHS.kcmHandback, manifest, 0o600);
  });

  it('both extender replicas gone (frozen, then deleted): kube-scheduler schedules nothing, the rescue binds a replacement to the control-plane node, it leads and the cluster schedules again; never while a leader renews', async () => {
    const access = kubeadm.kubeadmNodeAccess(kubeadm.readKubeadmState(runDir)!);
    const handbackPod = `ulysses-kcm-handback-${CP}`;
    const extPods = async () => (await core.listNamespacedPod({ namespace: 'ulysses-system', labelSelector: 'app.kubernetes.io/name=ulysses-scheduler-extender' })).items.filter((p) => !p.metadata?.deletionTimestamp);
    const RESCUED = 'the Pending extender pod bound to this node';
    // the rescue after 20 s instead of 30 s: the handback's static pod rewritten, the kubelet restarts it
    const manifest = (await access.readFile(CP, NODE_PATHS.kcmHandback))!;
    expect(manifest).toContain('--extender-after=30s');
    await access.writeFile(CP, NODE_PATHS.kcmHandback, manifest.replace('--extender-after=30s', '--extender-after=20s'), 0o600);
    const handback = await pollUntil(`${handbackPod} running with --extender-after=20s`, async () => {
      const p = await core.readNamespacedPod({ name: handbackPod, namespace: 'kube-system' }).catch(() => undefined);
      return p && running(p) && p.spec?.containers[0]?.args?.includes('--extender-after=20s') && p;
    }, { timeoutMs: 90_000, intervalMs: 500 });
    try {
      // a leader that renews is never rescued: 30 s of observation (more than the 20 s), nothing bound
      const started = new Date(handback.status?.containerStatuses?.[0]?.state?.running?.startedAt ?? Date.now()).getTime();
      await pollUntil('the rescue watching a renewing leader for 30 s', () => Date.now() - started >= 30_000, { timeoutMs: 60_000, intervalMs: 1000 });
      expect(await core.readNamespacedPodLog({ name: handbackPod, namespace: 'kube-system' })).not.toContain(RESCUED);

      const pods = await extPods();
      expect(pods.length).toBeGreaterThan(0);
      const pids = pods.map((p) => podProcess(p.metadata!.name!, 'scheduler-plugins/extender') ?? expect.fail(`no process of ${p.metadata!.name}`));
      for (const pid of pids) process.kill(pid, 'SIGSTOP');
      const t0 = Date.now();
      for (const p of pods) await core.deleteNamespacedPod({ name: p.metadata!.name!, namespace: 'ulysses-system', gracePeriodSeconds: 0 });
      await pollUntil('the extender processes gone', () => pids.every((pid) => !isAlive(pid)), { timeoutMs: 60_000, intervalMs: 200 });
      await core.createNamespacedPod({ namespace: 'it-kubeadm', body: { metadata: { name: 'while-extender-down' }, spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'web', image: TEST_IMAGES.httpServer.name, imagePullPolicy: 'Never' }] } } });
      // nothing places the replacements but the rescue: one bound to the control-plane node, leading
      const rescued = await pollUntil('a replacement extender pod bound to the control-plane node by the rescue, Running', async () => {
        const p = (await extPods()).find((x) => !pods.some((o) => o.metadata!.uid === x.metadata!.uid) && x.spec?.nodeName === CP && running(x));
        return p;
      }, { timeoutMs: 180_000, intervalMs: 500 });
      const tRescued = Date.now();
      const log = await core.readNamespacedPodLog({ name: handbackPod, namespace: 'kube-system' });
      expect(log).toContain(RESCUED);
      expect(log).toContain(rescued.metadata!.name!);
      const tenant = await pollUntil('the pod created meanwhile scheduled (through the rescued extender) and Running', async () => {
        const p = await core.readNamespacedPod({ name: 'while-extender-down', namespace: 'it-kubeadm' });
        return running(p) && p;
      }, { timeoutMs: 120_000, intervalMs: 250 });
      expect(tenant.spec?.nodeName).toBeTruthy();
      // it was kube-scheduler's work, through the extender: a Scheduled Event from default-scheduler
      const scheduledBy = (await eventsFor(core, 'it-kubeadm', 'Pod', 'while-extender-down')).find((e) => e.reason === 'Scheduled');
      expect(scheduledBy?.reportingComponent || scheduledBy?.source?.component).toBe('default-scheduler');
      const tScheduled = Date.now();
      progressLog(`both extender replicas gone at 0 s: the rescue bound ${rescued.metadata!.name} to ${CP}, Running at ${((tRescued - t0) / 1000).toFixed(1)} s (rescue after 20 s); a pod created meanwhile scheduled and Running at ${((tScheduled - t0) / 1000).toFixed(1)} s`);
    } finally {
      await core.deleteNamespacedPod({ name: 'while-extender-down', namespace: 'it-kubeadm' }).catch(() => undefined);
      await access.writeFile(CP, NODE_PATHS.kcmHandback, manifest, 0o600);
    }
  });

  it('uninstalls through the node shell: manifests as kubeadm wrote them, kubelets on containerd, no shim, unit and files gone, no Ulysses object', async () => {
    await uninstall(opts);
    expectStock(runDir, stock);
    for (const n of kubeadm.readKubeadmState(runDir)!.nodes) {
      expect(existsSync(join(unitDir(n), 'ulysses-kubelet-shim.service')), n.spec.name).toBe(false);
      expect(existsSync(join(unitDir(n), 'ulysses-kubelet-shim.service.d')), n.spec.name).toBe(false);
      expect(existsSync(join(unitDir(n), 'ulysses-kubelet-shim-fallback.service')), n.spec.name).toBe(false);
      expect(existsSync(join(unitDir(n), 'kubelet.service.d', '10-ulysses-kubelet-shim.conf')), n.spec.name).toBe(false);
      expect(existsSync(join(n.spec.dir, 'etc-ulysses', 'kubelet-shim.yaml')), n.spec.name).toBe(false);
    }
    const crds = await kc.makeApiClient(ApiextensionsV1Api).listCustomResourceDefinition();
    expect(crds.items.filter((c) => c.spec.group === 'ulysses.io')).toEqual([]);
    expect((await core.listNamespace()).items.map((n) => n.metadata!.name)).not.toContain('ulysses-system');
  });
});
