/**
 * Configuration `upstream-tuned` (stock Kubernetes tuned for node failure): its key, the settings
 * each configuration gets (kcm's node monitor, every kubelet's heartbeat, the critical pod's
 * tolerations), the kubelet config rewrites and what a switch back restores, the local testbed's
 * switch plans, the kubeadm configurator's steps against a fake cluster, and the report against it.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { compareConfigurations, configKey, emptyEvents, parseConfigKey, parseResults, type ConfigId, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import {
  clusterConfigurationNodeMonitorFlags,
  criticalPodTolerations,
  failureTolerationSeconds,
  familyOf,
  familySetupConfig,
  kcmHasNodeMonitor,
  kcmNodeMonitorFlags,
  kubeletHeartbeatKind,
  stockSettings,
  tuningOf,
  withControllerManagerExtraArgs,
} from '../../experiments/harness/upstream-tuned.ts';
import {
  formatGoDuration,
  goDurationMs,
  kubeletConfigWithHeartbeat,
  kubeletConfigWithoutHeartbeat,
  kubeletHeartbeat,
  kubeletHeartbeatSwitch,
} from '../../experiments/testbed/realnode.ts';
import { familyComponents, pathFamily, STOCK_KCM_CONTROLLERS, switchPlan, type LocalKubelet, type LocalPath } from '../../experiments/harness/local-configurator.ts';
import { KUBELET_HEARTBEAT_BACKUP, KubeadmConfigurator } from '../../experiments/harness/kubeadm-configurator.ts';
import { kcmControllersFlag } from '../../experiments/harness/configurator.ts';
import { ULYSSES_CONTROLLERS } from '../../experiments/harness/local.ts';
import { planReps, warmupReps } from '../../experiments/harness/experiment.ts';
import { renderVerdict, upstreamTable } from '../../experiments/harness/report.ts';
import { SummaryIndex, summarize } from '../../experiments/harness/stats.ts';
import { RuntimeConfigConfigurator } from '../../experiments/harness/runtime-configurator.ts';
import type { NodeAccess } from '../../manifests/install.ts';

const TUNED_FLAGS = ['--node-monitor-period=1s', '--node-monitor-grace-period=5s'];
const TUNED_TOLERATIONS = [
  { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 0 },
  { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 0 },
];

/** The kubelet config the local testbed writes (realnode.ts), its heartbeat fields as they are there. */
const LOCAL_CONFIG = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix:///n/kubelet-shim.sock
port: 21270
maxPods: 110
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 1m
localStorageCapacityIsolation: false
`;
/** What kubeadm writes to /var/lib/kubelet/config.yaml: zero durations, no Lease duration. */
const KUBEADM_CONFIG = `apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
cgroupDriver: cgroupfs
kind: KubeletConfiguration
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
rotateCertificates: true
`;

describe('configuration upstream-tuned', () => {
  it('is a configuration key of its own, ordered after upstream and before 1; a kubelet policy does not apply to it', () => {
    expect(parseConfigKey('upstream-tuned')).toEqual({ config: 'upstream-tuned' });
    expect(configKey({ config: 'upstream-tuned' })).toBe('upstream-tuned');
    expect(() => parseConfigKey('upstream-tuned/fixed')).toThrow(/configuration "upstream-tuned\/fixed"/);
    const sorted = (['upstream-tuned', 5, 'upstream', 1] as ConfigId[]).map((config) => ({ config })).sort(compareConfigurations);
    expect(sorted.map((c) => c.config)).toEqual(['upstream', 'upstream-tuned', 1, 5]);
  });
  it('is a family of its own, set up in itself: one switch per change of family, the order reversed every other repetition', () => {
    expect((['upstream', 'upstream-tuned', 1, 5] as ConfigId[]).map(familyOf)).toEqual(['upstream', 'upstream-tuned', 'ulysses', 'ulysses']);
    expect((['upstream', 'upstream-tuned', 1, 5] as ConfigId[]).map(familySetupConfig)).toEqual(['upstream', 'upstream-tuned', 1, 1]);
    const plan = { configs: ['upstream', 'upstream-tuned', 1, 5] as ConfigId[], dns: [1], podsPerNode: [20], reps: 2 };
    const order = planReps(plan, familyOf);
    expect(order.map((r) => r.config)).toEqual(['upstream', 'upstream-tuned', 1, 5, 1, 5, 'upstream-tuned', 'upstream']);
    expect(warmupReps(plan, familyOf).map((r) => r.config)).toEqual([1, 5, 'upstream-tuned', 'upstream']);
  });
  it('sets kcm flags, kubelet heartbeat and the critical tolerations in upstream-tuned only; every other configuration runs stock', () => {
    expect(stockSettings('upstream-tuned')).toEqual({ kcmFlags: TUNED_FLAGS, kubeletHeartbeat: { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' }, criticalTolerations: TUNED_TOLERATIONS });
    for (const c of ['upstream', 1, 2, 3, 4, 5] as ConfigId[]) {
      expect(stockSettings(c)).toEqual({ kcmFlags: [], kubeletHeartbeat: 'stock', criticalTolerations: [] });
      expect(criticalPodTolerations(c)).toEqual([]);
    }
    expect(criticalPodTolerations('upstream-tuned')).toEqual(TUNED_TOLERATIONS);
    // copies: a caller cannot change the next repetition's tolerations
    criticalPodTolerations('upstream-tuned')[0]!.tolerationSeconds = 300;
    expect(criticalPodTolerations('upstream-tuned')[0]!.tolerationSeconds).toBe(0);
  });
  it("records the critical pod's failure tolerations as admitted: its own 0 s, the admission plugin's 300 s, or a wildcard's for ever", () => {
    expect(failureTolerationSeconds(TUNED_TOLERATIONS)).toEqual({ 'node.kubernetes.io/unreachable': 0, 'node.kubernetes.io/not-ready': 0 });
    const defaults = [
      { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
    ];
    expect(failureTolerationSeconds(defaults)).toEqual({ 'node.kubernetes.io/unreachable': 300, 'node.kubernetes.io/not-ready': 300 });
    expect(failureTolerationSeconds([{ operator: 'Exists' }])).toEqual({ 'node.kubernetes.io/unreachable': null, 'node.kubernetes.io/not-ready': null });
    expect(failureTolerationSeconds([{ key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoSchedule' }])).toEqual({});
  });
  it('round-trips through results.jsonl with what really ran; older lines without it still parse', () => {
    const cluster = {
      kcmControllers: 'all',
      schedulerExtender: false,
      kubeletRuntime: { 'real-1': 'unix:///c.sock' },
      ulyssesControllerManagerPods: 0,
      apfExemption: false,
      kcmNodeMonitorFlags: TUNED_FLAGS,
      kubeletHeartbeat: { 'real-1': { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '1m0s' }, 'real-2': 'unix:///x in /y, written after the kubelet started' },
    };
    const line = { config: 'upstream-tuned', dn: 1, podsPerNode: 5, rep: 0, events: emptyEvents(), cluster, criticalTolerationSeconds: { 'node.kubernetes.io/unreachable': 0, 'node.kubernetes.io/not-ready': 0 } };
    const [r] = parseResults(JSON.stringify(line));
    expect(r!.config).toBe('upstream-tuned');
    expect(r!.cluster!.kcmNodeMonitorFlags).toEqual(TUNED_FLAGS);
    expect(r!.cluster!.kubeletHeartbeat!['real-1']).toEqual({ nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '1m0s' });
    expect(r!.criticalTolerationSeconds).toEqual({ 'node.kubernetes.io/unreachable': 0, 'node.kubernetes.io/not-ready': 0 });
    const { kcmNodeMonitorFlags: _f, kubeletHeartbeat: _h, ...old } = cluster;
    expect(parseResults(JSON.stringify({ ...line, config: 'upstream', cluster: old, criticalTolerationSeconds: undefined }))[0]!.cluster!.kubeletHeartbeat).toBeUndefined();
    expect(() => parseResults(JSON.stringify({ ...line, cluster: { ...cluster, kubeletHeartbeat: { 'real-1': { nodeLeaseDurationSeconds: 0, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '1m' } } } }))).toThrow(/field cluster\.kubeletHeartbeat/);
  });
  it('the runtime configurator refuses it (UlyssesConfig cannot make stock Kubernetes)', () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    const rc = new RuntimeConfigConfigurator({ kubeconfig: kc, controllers: ['replicaset'], pacedShimConfig: 'kubelet-shim/configs/ulysses-cloud.yaml', criticalNamespace: 'ns', reporters: () => [] });
    expect(() => rc.spec('upstream-tuned')).toThrow(/not a configuration of Ulysses/);
  });
});

describe("a kubelet's heartbeat in its config file", () => {
  it('reads Go durations and prints them as Go does', () => {
    expect(['1s', '10s', '1m', '1m30s', '500ms', '0s', '0', '5m0s'].map(goDurationMs)).toEqual([1000, 10_000, 60_000, 90_000, 500, 0, 0, 300_000]);
    expect(goDurationMs('5')).toBeUndefined();
    expect(goDurationMs(5)).toBeUndefined();
    expect([1000, 10_000, 60_000, 300_000, 500, 3_600_000].map(formatGoDuration)).toEqual(['1s', '10s', '1m0s', '5m0s', '500ms', '1h0m0s']);
  });
  it("is what the kubelet defaults it to: Lease 40 s, status every 10s, reported with the update frequency when that is set, else every 5m", () => {
    expect(kubeletHeartbeat(LOCAL_CONFIG)).toEqual({ nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '1m0s' });
    expect(kubeletHeartbeat(KUBEADM_CONFIG)).toEqual({ nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '5m0s' });
    expect(kubeletHeartbeat('kind: KubeletConfiguration\nnodeStatusUpdateFrequency: 4s\n').nodeStatusReportFrequency).toBe('4s');
    expect([LOCAL_CONFIG, KUBEADM_CONFIG].map(kubeletHeartbeatKind)).toEqual(['stock', 'stock']);
    expect(kubeletHeartbeatKind('kind: KubeletConfiguration\nnodeLeaseDurationSeconds: 4\nnodeStatusUpdateFrequency: 1000ms\n')).toBe('tuned');
    expect(kubeletHeartbeatKind('kind: KubeletConfiguration\nnodeLeaseDurationSeconds: 4\n')).toBe('other');
  });
  it("tuned: Lease 4 s and status 1s, the report period pinned where the file left it to follow the update frequency, every other field as it was", () => {
    const tuned = kubeletConfigWithHeartbeat(KUBEADM_CONFIG, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' });
    expect(kubeletHeartbeat(tuned.config)).toEqual({ nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '5m0s' });
    expect(tuned.original).toEqual({ nodeLeaseDurationSeconds: null, nodeStatusUpdateFrequency: '0s', nodeStatusReportFrequency: '0s' });
    expect(parseYaml(tuned.config)).toMatchObject({ cgroupDriver: 'cgroupfs', rotateCertificates: true, authentication: { anonymous: { enabled: false } } });
    const local = kubeletConfigWithHeartbeat(LOCAL_CONFIG, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' });
    expect(kubeletHeartbeat(local.config)).toEqual({ nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '1m0s' });
    expect(local.config).toContain('nodeStatusReportFrequency: 1m\n'); // explicit: untouched
  });
  it('a switch back restores the file exactly, and removes the backup', () => {
    for (const original of [LOCAL_CONFIG, KUBEADM_CONFIG]) {
      const on = kubeletHeartbeatSwitch(original, undefined, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' });
      expect(kubeletHeartbeatKind(on.config)).toBe('tuned');
      expect(typeof on.backup).toBe('string');
      // tuned again (an interrupted switch run again): the backup of the stock values stays
      const again = kubeletHeartbeatSwitch(on.config, on.backup as string, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' });
      expect(again).toEqual({ config: on.config, backup: undefined });
      const off = kubeletHeartbeatSwitch(on.config, on.backup as string, 'stock');
      expect(off).toEqual({ config: original, backup: null });
    }
  });
  it('never keeps tuned values as the ones to restore; without a backup the stock switch falls back to the defaults', () => {
    const tuned = kubeletHeartbeatSwitch(LOCAL_CONFIG, undefined, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' }).config;
    expect(kubeletHeartbeatSwitch(tuned, undefined, { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' }).backup).toBeUndefined();
    const off = kubeletHeartbeatSwitch(tuned, undefined, 'stock');
    expect(off.backup).toBeUndefined();
    expect(kubeletHeartbeat(off.config)).toEqual({ nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '1m0s' });
    expect(kubeletConfigWithoutHeartbeat(tuned)).not.toMatch(/nodeLeaseDurationSeconds|nodeStatusUpdateFrequency/);
    // a stock file without a backup stays as it is
    expect(kubeletHeartbeatSwitch(LOCAL_CONFIG, undefined, 'stock')).toEqual({ config: LOCAL_CONFIG, backup: undefined });
  });
});

describe("kube-controller-manager's node monitor", () => {
  it('reads the --node-monitor-* flags of a command line (the last of each), and compares them as durations with the defaults filled in', () => {
    expect(kcmNodeMonitorFlags(['kube-controller-manager', '--controllers=*', '--node-monitor-grace-period=40s', '--v=1', '--node-monitor-period=1s', '--node-monitor-grace-period=5s'])).toEqual(TUNED_FLAGS);
    expect(kcmNodeMonitorFlags(['kube-controller-manager', '--node-startup-grace-period=1m'])).toEqual([]);
    expect(kcmHasNodeMonitor(['--node-monitor-grace-period=5000ms', '--node-monitor-period=1s'], TUNED_FLAGS)).toBe(true);
    expect(kcmHasNodeMonitor([], ['--node-monitor-grace-period=50s'])).toBe(true);
    expect(kcmHasNodeMonitor(['--node-monitor-grace-period=5s'], TUNED_FLAGS)).toBe(false);
  });
  it('tells a cluster tuned, stock or mixed from its kcm flags and kubelets', () => {
    const tuned = { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '5m0s' };
    const stock = { nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '5m0s' };
    expect(tuningOf(TUNED_FLAGS, { a: tuned, b: tuned })).toBe('tuned');
    expect(tuningOf([], { a: stock, b: stock })).toBe('stock');
    expect(tuningOf(TUNED_FLAGS, { a: tuned, b: stock })).toBeUndefined();
    expect(tuningOf([], { a: tuned })).toBeUndefined();
    expect(tuningOf([], { a: 'not running' })).toBeUndefined();
  });
  it("kubeadm: the flags go into the ClusterConfiguration's controllerManager.extraArgs (v1beta4 list, v1beta3 map), replacing the same names", () => {
    const v4 = 'apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n  - name: bind-address\n    value: 0.0.0.0\n  - name: node-monitor-grace-period\n    value: 40s\nkubernetesVersion: v1.37.2\n';
    const out = parseYaml(withControllerManagerExtraArgs(v4, TUNED_FLAGS));
    expect(out.controllerManager.extraArgs).toEqual([
      { name: 'bind-address', value: '0.0.0.0' },
      { name: 'node-monitor-period', value: '1s' },
      { name: 'node-monitor-grace-period', value: '5s' },
    ]);
    expect(out.kubernetesVersion).toBe('v1.37.2');
    expect(clusterConfigurationNodeMonitorFlags(v4)).toEqual(['--node-monitor-grace-period=40s']);
    expect(parseYaml(withControllerManagerExtraArgs('apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n', TUNED_FLAGS)).controllerManager.extraArgs).toHaveLength(2);
    const v3 = 'apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\ncontrollerManager:\n  extraArgs:\n    bind-address: 0.0.0.0\n';
    expect(parseYaml(withControllerManagerExtraArgs(v3, TUNED_FLAGS)).controllerManager.extraArgs).toEqual({ 'bind-address': '0.0.0.0', 'node-monitor-period': '1s', 'node-monitor-grace-period': '5s' });
    expect(() => withControllerManagerExtraArgs('kind: InitConfiguration\n', TUNED_FLAGS)).toThrow(/ClusterConfiguration/);
  });
});

describe('the local testbed switched to and from upstream-tuned', () => {
  const ULYSSES_KCM = kcmControllersFlag(ULYSSES_CONTROLLERS);
  const k = (runtime: LocalKubelet['runtime'], heartbeat: LocalKubelet['heartbeat']): LocalKubelet => ({ runtime, heartbeat });
  const path = (kcmFlags: string[], kubelet: LocalKubelet, p: Partial<LocalPath> = {}): LocalPath => ({
    kcmControllers: STOCK_KCM_CONTROLLERS,
    kcmFlags,
    kubelets: { 'real-1': kubelet, 'real-2': kubelet },
    controllerManager: false,
    apfExemption: false,
    ...p,
  });
  const upstream = path([], k('containerd', 'stock'));
  const tuned = path(TUNED_FLAGS, k('containerd', 'tuned'));
  const ulysses = path([], k('kubelet-shim', 'stock'), { kcmControllers: ULYSSES_KCM, controllerManager: true });

  it('upstream-tuned is upstream plus the node monitor and the kubelet heartbeat', () => {
    expect(familyComponents('upstream-tuned', ULYSSES_KCM)).toEqual({ kcmControllers: '*', kcmFlags: TUNED_FLAGS, kubelet: 'containerd', kubeletHeartbeat: 'tuned', controllerManager: false });
    expect([upstream, tuned, ulysses].map((p) => pathFamily(p, ULYSSES_KCM))).toEqual(['upstream', 'upstream-tuned', 'ulysses']);
    // a setting left behind is no family
    expect(pathFamily(path(TUNED_FLAGS, k('containerd', 'stock')), ULYSSES_KCM)).toBeUndefined();
    expect(pathFamily(path([], k('containerd', 'tuned')), ULYSSES_KCM)).toBeUndefined();
    expect(pathFamily({ ...ulysses, kcmFlags: TUNED_FLAGS }, ULYSSES_KCM)).toBeUndefined();
    expect(pathFamily({ ...ulysses, kubelets: { 'real-1': k('kubelet-shim', 'tuned'), 'real-2': k('kubelet-shim', 'stock') } }, ULYSSES_KCM)).toBeUndefined();
  });
  it('to upstream-tuned: the kubelets renew every 1 s before kcm fails a node after 5 s', () => {
    expect(switchPlan(upstream, 'upstream-tuned', ULYSSES_KCM)).toEqual([
      { do: 'restart-kubelet', node: 'real-1', runtime: 'containerd', heartbeat: 'tuned' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'tuned' },
      { do: 'restart-kcm', controllers: '*', flags: TUNED_FLAGS },
    ]);
    expect(switchPlan({ ...ulysses, apfExemption: true }, 'upstream-tuned', ULYSSES_KCM)).toEqual([
      { do: 'configuration-1' },
      { do: 'stop-controller-manager' },
      { do: 'remove-apf-exemption' },
      { do: 'restart-kubelet', node: 'real-1', runtime: 'containerd', heartbeat: 'tuned' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'tuned' },
      { do: 'restart-kcm', controllers: '*', flags: TUNED_FLAGS },
    ]);
  });
  it('from upstream-tuned: kcm back to its defaults first, then the kubelets back to stock; nothing left behind', () => {
    expect(switchPlan(tuned, 'upstream', ULYSSES_KCM)).toEqual([
      { do: 'restart-kcm', controllers: '*', flags: [] },
      { do: 'restart-kubelet', node: 'real-1', runtime: 'containerd', heartbeat: 'stock' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'stock' },
    ]);
    expect(switchPlan(tuned, 'ulysses', ULYSSES_KCM)).toEqual([
      { do: 'restart-kcm', controllers: ULYSSES_KCM, flags: [] },
      { do: 'start-controller-manager' },
      { do: 'restart-kubelet', node: 'real-1', runtime: 'kubelet-shim', heartbeat: 'stock' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'kubelet-shim', heartbeat: 'stock' },
    ]);
  });
  it('finishes an interrupted switch: only what differs, nothing restarted twice', () => {
    expect(switchPlan(tuned, 'upstream-tuned', ULYSSES_KCM)).toEqual([]);
    expect(switchPlan({ ...tuned, kubelets: { 'real-1': k('containerd', 'tuned'), 'real-2': k('containerd', 'stock') } }, 'upstream-tuned', ULYSSES_KCM)).toEqual([
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'tuned' },
    ]);
    // kcm back to stock, one kubelet still tuned
    expect(switchPlan({ ...upstream, kubelets: { 'real-1': k('containerd', 'stock'), 'real-2': k('containerd', 'tuned') } }, 'upstream', ULYSSES_KCM)).toEqual([
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'stock' },
    ]);
  });
});

describe('the kubeadm configurator switching to and from upstream-tuned', () => {
  /** A fake apiserver with what the configurator reads, and nodes whose files, kubeadm and kubelet restarts it records. */
  const KCM_BASE = ['kube-controller-manager', '--controllers=*,bootstrapsigner,tokencleaner', '--leader-elect=true'];
  const CLUSTER = 'apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.37.2\n';
  let kcmCommand = [...KCM_BASE];
  let server: Server;
  const kc = new KubeConfig();
  const ops: string[] = [];
  const files = new Map<string, string>();
  const nodeList = [
    { name: 'cp', controlPlane: true },
    { name: 'w1', controlPlane: false },
  ];
  const podOf = (name: string, component: string, command: string[]) => ({
    metadata: { name, namespace: 'kube-system', labels: { component } },
    spec: { containers: [{ name: component, command }] },
    status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }], containerStatuses: [{ name: component, state: { running: {} } }] },
  });
  const nodes: NodeAccess = {
    nodes: () => nodeList,
    readFile: async (n, p) => files.get(`${n}:${p}`),
    writeFile: async (n, p, content) => {
      ops.push(`write ${n} ${p}`);
      files.set(`${n}:${p}`, content);
    },
    remove: async (n, p) => {
      ops.push(`remove ${n} ${p}`);
      files.delete(`${n}:${p}`);
    },
    kubeadm: async (n, args) => {
      ops.push(`kubeadm ${n} ${args.slice(0, 4).join(' ')}`);
      // what kubeadm renders: kcm's command from the ClusterConfiguration's controllerManager.extraArgs
      const docs = parseAllDocuments(files.get(`${n}:${args[args.indexOf('--config') + 1]}`)!).map((d) => d.toJS());
      expect(docs[0]).toEqual({ apiVersion: 'kubeadm.k8s.io/v1beta4', kind: 'InitConfiguration' }); // no patches directory: it may not exist
      const extra = (docs[1].controllerManager?.extraArgs ?? []) as Array<{ name: string; value: string }>;
      kcmCommand = [...KCM_BASE, ...extra.map((a) => `--${a.name}=${a.value}`)];
    },
    restartKubelet: async (n) => void ops.push(`restart kubelet ${n}`),
    startKubeletShim: async () => undefined,
    stopKubeletShim: async () => undefined,
    containerdSocket: (n) => `/run/${n}/containerd.sock`,
    shimSocket: (n) => `/run/${n}/shim.sock`,
    shimMetricsPort: () => 1,
  };

  beforeAll(async () => {
    server = createServer((req, res) => {
      const send = (code: number, body: unknown) => {
        res.writeHead(code, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      const url = req.url!.split('?')[0]!;
      if (url === '/api/v1/namespaces/kube-system/pods') return send(200, { kind: 'PodList', apiVersion: 'v1', metadata: {}, items: [podOf('kube-controller-manager-cp', 'kube-controller-manager', kcmCommand), podOf('kube-scheduler-cp', 'kube-scheduler', ['kube-scheduler'])] });
      if (url === '/api/v1/namespaces/kube-system/pods/kube-controller-manager-cp') return send(200, podOf('kube-controller-manager-cp', 'kube-controller-manager', kcmCommand));
      if (url === '/api/v1/namespaces/kube-system/configmaps/kubeadm-config') return send(200, { metadata: { name: 'kubeadm-config' }, data: { ClusterConfiguration: CLUSTER } });
      if (url.startsWith('/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/')) return send(200, { metadata: { name: url.split('/').pop() }, spec: { renewTime: new Date(Date.now() + 1000).toISOString() } });
      if (url.startsWith('/api/v1/nodes/')) return send(200, { metadata: { name: url.split('/').pop() }, status: { conditions: [{ type: 'Ready', status: 'True' }] } });
      if (url.endsWith('/pods')) return send(200, { kind: 'PodList', apiVersion: 'v1', metadata: {}, items: [] });
      send(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    kc.loadFromOptions({ clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('tunes the kubelets then kcm, records what runs, and a switch back restores every file exactly', async () => {
    for (const n of nodeList) files.set(`${n.name}:/var/lib/kubelet/config.yaml`, KUBEADM_CONFIG);
    const runtime = { apply: async () => undefined, describe: () => [] } as unknown as RuntimeConfigConfigurator;
    const c = new KubeadmConfigurator({ kubeconfig: kc, install: { kubeconfig: '/x', nodes, timeoutMs: 5000 }, runtime, withUpstreamTuned: true });
    expect(await c.detect()).toBe('upstream');
    expect(c.family('upstream-tuned')).toBe('upstream-tuned');
    expect(c.setupConfig('upstream-tuned')).toBe('upstream-tuned');

    await c.apply('upstream-tuned');
    const cfg = '/etc/kubernetes/ulysses-upstream-tuned-kubeadm.yaml';
    expect(ops).toEqual([
      `write cp ${KUBELET_HEARTBEAT_BACKUP}`,
      'write cp /var/lib/kubelet/config.yaml',
      'restart kubelet cp',
      `write w1 ${KUBELET_HEARTBEAT_BACKUP}`,
      'write w1 /var/lib/kubelet/config.yaml',
      'restart kubelet w1',
      `write cp ${cfg}`,
      'kubeadm cp init phase control-plane controller-manager',
      `remove cp ${cfg}`,
    ]);
    expect(c.takeSwitch()).toMatchObject({ to: 'upstream-tuned' });
    const seen = await c.inspect();
    expect(seen.kcmControllers).toBe('all');
    expect(seen.kcmNodeMonitorFlags).toEqual(TUNED_FLAGS);
    expect(seen.kubeletHeartbeat).toEqual({
      cp: { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '5m0s' },
      w1: { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s', nodeStatusReportFrequency: '5m0s' },
    });
    expect(await c.detect()).toBe('upstream-tuned');
    expect(c.describe().join('\n')).toMatch(/configuration upstream-tuned .*--node-monitor-period=1s --node-monitor-grace-period=5s/);

    // within the family nothing restarts
    ops.length = 0;
    await c.apply('upstream-tuned');
    expect(ops).toEqual([]);
    expect(c.takeSwitch()).toBeUndefined();

    await c.apply('upstream');
    expect(ops).toEqual([
      `write cp ${cfg}`,
      'kubeadm cp init phase control-plane controller-manager',
      `remove cp ${cfg}`,
      'write cp /var/lib/kubelet/config.yaml',
      `remove cp ${KUBELET_HEARTBEAT_BACKUP}`,
      'restart kubelet cp',
      'write w1 /var/lib/kubelet/config.yaml',
      `remove w1 ${KUBELET_HEARTBEAT_BACKUP}`,
      'restart kubelet w1',
    ]);
    expect(kcmCommand).toEqual(KCM_BASE);
    for (const n of nodeList) {
      expect(files.get(`${n.name}:/var/lib/kubelet/config.yaml`)).toBe(KUBEADM_CONFIG);
      expect(files.has(`${n.name}:${KUBELET_HEARTBEAT_BACKUP}`)).toBe(false);
    }
    expect(files.has(`cp:${cfg}`)).toBe(false);
    expect(await c.detect()).toBe('upstream');
    // back at stock, restoring again changes nothing
    ops.length = 0;
    await c.restoreStockSettings();
    expect(ops).toEqual([]);
  });
});

describe('the report against upstream and upstream-tuned', () => {
  const ev = (detected: number, prioReady: number, lastReady: number): FailoverEvents => ({
    ...emptyEvents(),
    detected,
    taint: detected + 0.05,
    prioScheduled: prioReady - 0.3,
    prioReady,
    prioUp: prioReady + 0.05,
    prioEndpointReady: prioReady + 0.1,
    lastScheduled: lastReady - 1,
    lastReady,
  });
  const rep = (config: ConfigId, r: number, e: FailoverEvents): RepResult => ({ config, dn: 1, podsPerNode: 5, rep: r, events: e, failure: 'frozen-node' });
  const results = [0, 1, 2].flatMap((r) => [
    rep('upstream', r, ev(50.4 + r * 0.1, 352 + r, 353 + r)),
    rep('upstream-tuned', r, ev(5.5 + r * 0.1, 6.5 + r * 0.1, 306 + r)),
    rep(5, r, ev(0.6, 1.2 + r * 0.01, 306 + r)),
  ]);
  it('the headline table has both stock columns, a ratio of 5 to each, the detection events first, and targets against each', () => {
    const t = upstreamTable(results, new SummaryIndex(summarize(results)))!;
    expect(t).toContain('## Against stock Kubernetes (configurations upstream, upstream-tuned)');
    expect(t).toContain('| DN, pods/node | event | upstream | upstream-tuned | config 5 | 5 : upstream | 90% interval | 5 : upstream-tuned | 90% interval |');
    const rows = t.split('\n').filter((l) => l.startsWith('| DN 1, 5'));
    expect(rows[0]).toMatch(/^\| DN 1, 5 \(n=3\/3\/3\) \| Detected \| 50\.50 \| 5\.60 \| 0\.60 \| 0\.01x \|/);
    expect(t).toMatch(/\| Prio ready \| 353\.00 \| 6\.60 \| 1\.21 \| 0\.00x \| .* \| 0\.18x \|/);
    expect(t).toContain('Targets against upstream at 5 pods/node, per DN:');
    expect(t).toContain('Targets against upstream-tuned at 5 pods/node, per DN:');
    expect(t).toMatch(/\| 1 \| Prio ready: reduction of config 5 vs upstream-tuned \| 81\.7% /);
  });
  it('the verdict gives stock defaults first and the tuned stock beside them', () => {
    const v = renderVerdict(results, summarize(results)).split('\n');
    expect(v[0]).toBe('verdict at DN 1, 5 pods per node, Ulysses vs stock Kubernetes (3 repetitions of configuration 5; medians):');
    expect(v[1]).toMatch(/^  Prio ready   stock \(upstream\) +353\.00 s   Ulysses \(5\) +1\.21 s   0\.00x$/);
    expect(v).toContainEqual(expect.stringMatching(/^  Prio ready   tuned \(upstream-tuned\) +6\.60 s   Ulysses \(5\) +1\.21 s   0\.18x$/));
    expect(v).toContainEqual(expect.stringMatching(/^  \[met\] Prio ready: reduction of config 5 vs upstream-tuned: 82% \(target >= 80%\)$/));
    // upstream-tuned alone is the baseline of its own
    const tunedOnly = results.filter((r) => r.config !== 'upstream');
    expect(renderVerdict(tunedOnly, summarize(tunedOnly)).split('\n')[1]).toMatch(/^  Prio ready   tuned \(upstream-tuned\)/);
  });
});
