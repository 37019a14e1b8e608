/**
 * Configuration `upstream` (stock Kubernetes) on the local testbed: the families and the run order,
 * the steps of a switch from whatever is on the path, which family a path is in, the kcm flag and
 * the kubelet endpoints each family selects, what results.jsonl records of the path, and the demo's
 * verdict against upstream.
 */
import { describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import {
  describeKcmControllers,
  familyComponents,
  familyOf,
  flagValue,
  LocalTestbedConfigurator,
  pathFamily,
  STOCK_KCM_CONTROLLERS,
  switchPlan,
  type LocalKubelet,
  type LocalPath,
} from '../../experiments/harness/local-configurator.ts';
import { kubeletConfigEndpoint, kubeletConfigWithEndpoint, realNodeSpec, runtimeEndpoint, runtimeOfEndpoint } from '../../experiments/testbed/realnode.ts';
import { kcmControllersFlag } from '../../experiments/harness/configurator.ts';
import { ULYSSES_CONTROLLERS, runFailoverExperiment } from '../../experiments/harness/local.ts';
import { planReps, warmupReps } from '../../experiments/harness/experiment.ts';
import { checkTargets, renderReport, renderVerdict, switchTable } from '../../experiments/harness/report.ts';
import { SummaryIndex, summarize } from '../../experiments/harness/stats.ts';
import { emptyEvents, parseResults, type ConfigId, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';

const ULYSSES_KCM = kcmControllersFlag(ULYSSES_CONTROLLERS);
const nodes = ['real-1', 'real-2'];
const k = (runtime: LocalKubelet['runtime'], heartbeat: LocalKubelet['heartbeat'] = 'stock'): LocalKubelet => ({ runtime, heartbeat });
const path = (p: Partial<LocalPath> = {}): LocalPath => ({
  kcmControllers: ULYSSES_KCM,
  kcmFlags: [],
  kubelets: Object.fromEntries(nodes.map((n) => [n, k('kubelet-shim')])),
  controllerManager: true,
  apfExemption: false,
  ...p,
});
const stock = path({ kcmControllers: STOCK_KCM_CONTROLLERS, kubelets: { 'real-1': k('containerd'), 'real-2': k('containerd') }, controllerManager: false });

const kc = new KubeConfig();
kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
const configurator = (withUpstream = true) =>
  new LocalTestbedConfigurator({
    kubeconfig: kc,
    runDir: '/nonexistent',
    ulyssesControllers: ULYSSES_KCM,
    runtime: { apply: async () => undefined, describe: () => ['runtime toggles'] },
    controllerManager: { running: false, start: async () => undefined, stop: async () => undefined },
    withUpstream,
  });

describe('the local testbed switched between stock Kubernetes and Ulysses', () => {
  it('upstream is a family of its own, set up in itself; the Ulysses configurations set up in 1', () => {
    const c = configurator();
    expect((['upstream', 1, 2, 3, 4, 5] as ConfigId[]).map((x) => c.family(x))).toEqual(['upstream', 'ulysses', 'ulysses', 'ulysses', 'ulysses', 'ulysses']);
    expect(c.setupConfig('upstream')).toBe('upstream');
    expect(c.setupConfig(5)).toBe(1);
    expect(familyOf('upstream')).toBe('upstream');
  });
  it("the demo's plan (upstream, 5; idle and loaded; 2 repetitions): one switch per repetition, the family order alternating, warm-ups ending in the first repetition's family", () => {
    const c = configurator();
    const plan = { configs: ['upstream', 5] as ConfigId[], dns: [1], podsPerNode: [0, 10], reps: 2 };
    const order = planReps(plan, (x) => c.family(x));
    expect(order.map((r) => [r.config, r.podsPerNode, r.rep])).toEqual([
      ['upstream', 0, 0], ['upstream', 10, 0], [5, 0, 0], [5, 10, 0],
      [5, 0, 1], [5, 10, 1], ['upstream', 0, 1], ['upstream', 10, 1],
    ]);
    expect(warmupReps(plan, (x) => c.family(x)).map((r) => r.config)).toEqual([5, 'upstream']);
  });
  it('each family selects its kcm --controllers, kubelet endpoint and controller manager', () => {
    expect(familyComponents('upstream', ULYSSES_KCM)).toEqual({ kcmControllers: '*', kcmFlags: [], kubelet: 'containerd', kubeletHeartbeat: 'stock', controllerManager: false });
    expect(familyComponents('ulysses', ULYSSES_KCM)).toEqual({ kcmControllers: ULYSSES_KCM, kcmFlags: [], kubelet: 'kubelet-shim', kubeletHeartbeat: 'stock', controllerManager: true });
    const n = realNodeSpec('/tmp/rd', 2);
    expect(runtimeEndpoint(n, 'containerd')).toBe('unix:///tmp/rd/nodes/real-2/containerd/containerd.sock');
    expect(runtimeEndpoint(n, 'kubelet-shim')).toBe('unix:///tmp/rd/nodes/real-2/kubelet-shim.sock');
    expect(runtimeOfEndpoint(n, runtimeEndpoint(n, 'kubelet-shim'))).toBe('kubelet-shim');
    expect(runtimeOfEndpoint(n, 'unix:///run/containerd/containerd.sock')).toBeUndefined();
    expect(runtimeOfEndpoint(realNodeSpec('/tmp/rd', 3), runtimeEndpoint(n, 'containerd'))).toBeUndefined(); // another node's socket
  });
  it("rewrites both CRI endpoints of a kubelet config and nothing else", () => {
    const text = 'apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncontainerRuntimeEndpoint: unix:///a/shim.sock\nimageServiceEndpoint: unix:///a/shim.sock\nport: 21270\nevictionHard:\n  memory.available: "100Mi"\n';
    const out = kubeletConfigWithEndpoint(text, 'unix:///a/containerd.sock');
    expect(kubeletConfigEndpoint(out)).toBe('unix:///a/containerd.sock');
    expect(out).toContain('imageServiceEndpoint: unix:///a/containerd.sock');
    expect(out.replaceAll('containerd.sock', 'shim.sock')).toBe(text);
    expect(kubeletConfigEndpoint('kind: KubeletConfiguration\n')).toBeUndefined();
    expect(() => kubeletConfigWithEndpoint('a: [', 'unix:///x')).toThrow(/kubelet config/);
  });
  it('tells the family of the path, and a mixed path from both', () => {
    expect(pathFamily(path(), ULYSSES_KCM)).toBe('ulysses');
    expect(pathFamily(path({ apfExemption: true }), ULYSSES_KCM)).toBe('ulysses'); // configurations 3-5
    expect(pathFamily(stock, ULYSSES_KCM)).toBe('upstream');
    expect(pathFamily({ ...stock, apfExemption: true }, ULYSSES_KCM)).toBeUndefined(); // stock Kubernetes exempts nothing
    expect(pathFamily({ ...stock, kubelets: { 'real-1': k('containerd'), 'real-2': k('kubelet-shim') } }, ULYSSES_KCM)).toBeUndefined();
    expect(pathFamily(path({ controllerManager: false }), ULYSSES_KCM)).toBeUndefined(); // nobody runs the ReplicaSet controller
    expect(pathFamily(path({ kcmControllers: undefined }), ULYSSES_KCM)).toBeUndefined();
    expect(pathFamily(path({ kubelets: { 'real-1': k('kubelet-shim'), 'real-2': k(undefined, undefined) } }), ULYSSES_KCM)).toBeUndefined();
  });
  it('plans a switch: to upstream the controller manager goes to configuration 1 and stops, and its exemption goes, before kcm takes its controllers back; to Ulysses the reverse; kubelets last', () => {
    expect(switchPlan(path({ apfExemption: true }), 'upstream', ULYSSES_KCM)).toEqual([
      { do: 'configuration-1' },
      { do: 'stop-controller-manager' },
      { do: 'remove-apf-exemption' },
      { do: 'restart-kcm', controllers: '*', flags: [] },
      { do: 'restart-kubelet', node: 'real-1', runtime: 'containerd', heartbeat: 'stock' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'stock' },
    ]);
    expect(switchPlan(stock, 'ulysses', ULYSSES_KCM)).toEqual([
      { do: 'restart-kcm', controllers: ULYSSES_KCM, flags: [] },
      { do: 'start-controller-manager' },
      { do: 'restart-kubelet', node: 'real-1', runtime: 'kubelet-shim', heartbeat: 'stock' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'kubelet-shim', heartbeat: 'stock' },
    ]);
    // nothing to do where the family is; a switch interrupted half-way is finished, nothing restarted twice
    expect(switchPlan(path({ apfExemption: true }), 'ulysses', ULYSSES_KCM)).toEqual([]);
    expect(switchPlan(stock, 'upstream', ULYSSES_KCM)).toEqual([]);
    expect(switchPlan({ ...stock, kubelets: { 'real-1': k('containerd'), 'real-2': k('kubelet-shim') } }, 'upstream', ULYSSES_KCM)).toEqual([{ do: 'restart-kubelet', node: 'real-2', runtime: 'containerd', heartbeat: 'stock' }]);
    // the testbed as `up` leaves it (no controller manager yet), and a kubelet whose config changed since it started
    expect(switchPlan(path({ controllerManager: false, kubelets: { 'real-1': k('kubelet-shim'), 'real-2': k(undefined, undefined) } }), 'ulysses', ULYSSES_KCM)).toEqual([
      { do: 'start-controller-manager' },
      { do: 'restart-kubelet', node: 'real-2', runtime: 'kubelet-shim', heartbeat: 'stock' },
    ]);
  });
  it("records kcm's --controllers as kubeadm runs do, from the last flag of its command line", () => {
    expect(describeKcmControllers('*')).toBe('all');
    expect(describeKcmControllers('*,-replicaset-controller,-taint-eviction-controller')).toBe('all but replicaset-controller,taint-eviction-controller');
    expect(describeKcmControllers('replicaset-controller')).toBe('only replicaset-controller');
    expect(describeKcmControllers(undefined)).toBe('not running');
    expect(flagValue(['kcm', '--controllers=*', '--v=1', '--controllers=*,-a'], 'controllers')).toBe('*,-a');
    expect(flagValue(['kcm', '--v=1'], 'controllers')).toBeUndefined();
  });
  it('records whether the in-process controller manager ran; older lines without it still parse', () => {
    const cluster = { kcmControllers: 'all', schedulerExtender: false, kubeletRuntime: { 'real-1': 'unix:///x' }, ulyssesControllerManagerPods: 0, apfExemption: false };
    const line = (c: object) => JSON.stringify({ config: 'upstream', dn: 1, podsPerNode: 0, rep: 0, events: emptyEvents(), cluster: c });
    expect(parseResults(line({ ...cluster, controllerManagerInProcess: false }))[0]!.cluster!.controllerManagerInProcess).toBe(false);
    expect(parseResults(line(cluster))[0]!.cluster!.controllerManagerInProcess).toBeUndefined();
  });
  it('refuses a kubelet-shim policy in upstream, and upstream where nothing can be switched', async () => {
    await expect(configurator().apply('upstream', 'fixed')).rejects.toThrow(/upstream has no kubelet-shim/);
    const plan = { configs: ['upstream', 5] as ConfigId[], dns: [1], podsPerNode: [0], reps: 1 };
    await expect(runFailoverExperiment({ plan, out: '/nonexistent', kubeconfig: kc, sources: ['a'], destinations: ['b'] })).rejects.toThrow(/upstream .* needs a cluster whose components the harness can switch/);
    await expect(runFailoverExperiment({ plan, out: '/nonexistent', kwokNodes: 20 })).rejects.toThrow(/the local testbed with real nodes, or a kubeadm cluster/);
    await expect(runFailoverExperiment({ plan: { ...plan, shimPolicies: ['fixed'] }, out: '/nonexistent' })).rejects.toThrow(/--shim-policies: configuration upstream has no kubelet-shim/);
  });
  it('describes the switch only when the plan has upstream', () => {
    expect(configurator().describe().join('\n')).toMatch(/configuration upstream \(stock Kubernetes on the testbed\): kube-controller-manager restarted with --controllers=\*/);
    expect(configurator(false).describe()).toEqual(['runtime toggles']);
  });
});

describe('the verdict against stock Kubernetes', () => {
  const ev = (prioReady: number, lastReady: number): FailoverEvents => ({ ...emptyEvents(), prioScheduled: prioReady / 2, prioReady, prioUp: prioReady + 0.05, prioEndpointReady: prioReady + 0.1, lastScheduled: lastReady / 2, lastReady });
  const rep = (config: ConfigId, podsPerNode: number, r: number, e: FailoverEvents): RepResult => ({ config, dn: 1, podsPerNode, rep: r, events: e });
  const results = [0, 1, 2].flatMap((r) => [
    rep('upstream', 0, r, ev(0.5, 0.5)),
    rep('upstream', 10, r, ev(3 + r * 0.1, 4 + r * 0.1)),
    rep(5, 0, r, ev(0.45, 0.45)),
    rep(5, 10, r, ev(0.5, 4.2 + r * 0.1)),
  ]);
  it('compares configuration 5 with upstream: medians, ratio, and each target against upstream', () => {
    const v = renderVerdict(results, summarize(results));
    expect(v.split('\n')).toEqual([
      'verdict at DN 1, 10 pods per node, Ulysses vs stock Kubernetes (3 repetitions of configuration 5; medians):',
      '  Prio ready   stock (upstream)   3.10 s   Ulysses (5)   0.50 s   0.16x',
      '  Prio up      stock (upstream)   3.15 s   Ulysses (5)   0.55 s   0.17x',
      '  Last ready   stock (upstream)   4.10 s   Ulysses (5)   4.30 s   1.05x',
      '  [met] Prio ready: reduction of config 5 vs upstream: 84% (target >= 80%)',
      '  [met] Prio up: reduction of config 5 vs upstream: 83% (target >= 80%)',
      '  [met] Prio ready: config 5 at load / config 5 idle: 1.11x (target <= 1.15x)',
      '  [met] Prio up: config 5 at load / config 5 idle: 1.10x (target <= 1.15x)',
      expect.stringMatching(/^  \[(met|inconclusive)\] Last ready: config 5 \/ upstream: 1\.05x \(target <= 1\.1x\)$/),
    ]);
  });
  it('takes upstream as the baseline when the run also has configuration 1; the report keeps its targets against 1', () => {
    const with1 = [...results, ...[0, 1, 2].flatMap((r) => [rep(1, 0, r, ev(0.6, 0.6)), rep(1, 10, r, ev(5, 5))])];
    expect(renderVerdict(with1, summarize(with1))).toMatch(/Prio ready   stock \(upstream\)   3\.10 s   Ulysses \(5\)   0\.50 s   0\.16x/);
    const index = new SummaryIndex(summarize(with1));
    expect(checkTargets(index, undefined, with1).checks[0]!.what).toBe('Prio ready: reduction of config 5 vs config 1');
    expect(checkTargets(index, undefined, with1, 'upstream').checks[0]!.measured).toBeCloseTo(1 - 0.5 / 3.1);
    // without upstream the verdict is against configuration 1, as before
    const without = with1.filter((r) => r.config !== 'upstream');
    expect(renderVerdict(without, summarize(without)).split('\n')[1]).toBe('  Prio ready   vanilla (1)   5.00 s   Ulysses (5)   0.50 s   0.10x');
  });
  it('a report of upstream and 5 only names no configuration 1 in its targets', () => {
    const md = renderReport(results, summarize(results));
    expect(md).toContain('## Targets at the heaviest load (DN 1, 10 pods/node)\n');
    expect(md).toMatch(/\| 1 \| Prio ready: reduction of config 5 vs upstream \| 83\.9% /);
  });
  it("the switch table names the local testbed's restarts", () => {
    const sw = [{ ...results[1]!, configSwitch: { to: 'upstream', seconds: 9.2 } }];
    expect(switchTable(sw)).toContain('on the local testbed kube-controller-manager and every kubelet restarted');
    expect(switchTable(sw)).toMatch(/\| upstream \| 1 \| 9\.2 \|/);
  });
});
