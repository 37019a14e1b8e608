/**
 * Pure logic of the experiment variants of issue 7 beyond Table 6.1: the kubelet policy comparison
 * (configuration keys "1/fixed", plan, grouping, baseline 1/vanilla, policy -> config file), the
 * "rate limiting off" runs (UlyssesConfig spec, the controller manager's limiter, run conditions
 * of a results directory), the 5g scenario's names, and the Fig 6.5 pod-ready figure.
 */
import { describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { configKey, parseConfigKey, parseResults, repKey, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { SummaryIndex, summarize, summaryCsv } from '../../experiments/harness/stats.ts';
import { renderReport } from '../../experiments/harness/report.ts';
import { configColor, figPodReadySvg } from '../../experiments/harness/svg.ts';
import { conditionFields, conditionMismatch, planReps } from '../../experiments/harness/experiment.ts';
import { RuntimeConfigConfigurator } from '../../experiments/harness/runtime-configurator.ts';
import { DEFAULT_PACED_SHIM_CONFIG, SHIM_POLICY_FILES, resolveShimPolicies } from '../../experiments/harness/local.ts';
import { TRAIN_TICKET_SERVICES, criticalName, loadNames } from '../../experiments/harness/scenario.ts';
import { ControllerManagerRuntimeSchema, applyControllerManagerRuntime } from '../../controller-manager/runtime.ts';
import { FakeClock, TokenBucket } from '../../controller-manager/queue/index.ts';
import { CriticalPathHold } from '../../controller-manager/critical-path-hold.ts';
import { ControllerManager } from '../../controller-manager/manager.ts';

const all = (t: number): FailoverEvents => ({ prioScheduled: t * 0.1, prioReady: t * 0.5, prioUp: t * 0.55, prioEndpointReady: t * 0.6, lastScheduled: t * 0.8, lastReady: t });
const rep = (shimPolicy: string | undefined, podsPerNode: number, r: number, events: FailoverEvents, extra: Partial<RepResult> = {}): RepResult => ({
  config: 1,
  ...(shimPolicy ? { shimPolicy } : {}),
  dn: 1,
  podsPerNode,
  rep: r,
  events,
  ...extra,
});

describe('configuration keys', () => {
  it('round-trip a Table 6.1 id with an optional kubelet-shim policy', () => {
    expect(configKey({ config: 5 })).toBe('5');
    expect(configKey({ config: 1, shimPolicy: 'fixed' })).toBe('1/fixed');
    expect(parseConfigKey('1/exponential-decay')).toEqual({ config: 1, shimPolicy: 'exponential-decay' });
    expect(parseConfigKey('3')).toEqual({ config: 3 });
    expect(() => parseConfigKey('7')).toThrow(/configuration "7"/);
    expect(() => parseConfigKey('1/Fixed')).toThrow(/configuration "1\/Fixed"/);
    expect(() => parseConfigKey('1/a/b')).toThrow(/configuration/);
  });
  it('results lines carry the policy, the conditions and the pod ready times; bad values name the field', () => {
    const line = rep('fixed', 10, 0, all(5), { podReady: [0.5, 1.2], clientRateLimit: false, scenario: '5g' });
    const [parsed] = parseResults(JSON.stringify(line));
    expect(parsed).toMatchObject({ shimPolicy: 'fixed', podReady: [0.5, 1.2], clientRateLimit: false, scenario: '5g' });
    expect(repKey(parsed!)).toBe('c1/fixed/dn1/ppn10/rep0');
    expect(repKey(rep(undefined, 10, 0, all(5)))).toBe('c1/dn1/ppn10/rep0'); // unchanged for Table 6.1 runs
    expect(() => parseResults(JSON.stringify({ ...line, shimPolicy: 'Not A Name' }))).toThrow(/:1: field shimPolicy/);
    expect(() => parseResults(JSON.stringify({ ...line, podReady: [-1] }))).toThrow(/:1: field podReady\.0/);
    expect(() => parseResults(JSON.stringify({ ...line, scenario: '6g' }))).toThrow(/:1: field scenario/);
  });
});

describe('kubelet policy comparison', () => {
  it('plans every policy of every configuration inside each repetition', () => {
    const plan = planReps({ configs: [1], dns: [1], podsPerNode: [0, 20], reps: 2, shimPolicies: ['vanilla', 'fixed', 'exponential-decay'] });
    expect(plan).toHaveLength(12);
    expect(plan.slice(0, 4).map(configKey)).toEqual(['1/vanilla', '1/fixed', '1/exponential-decay', '1/vanilla']);
    expect(plan[3]).toMatchObject({ podsPerNode: 20, rep: 0 });
    expect(new Set(plan.map(repKey)).size).toBe(12);
    expect(planReps({ configs: [1, 5], dns: [1], podsPerNode: [0], reps: 1, shimPolicies: [] }).map(configKey)).toEqual(['1', '5']);
  });
  it('summarizes per policy, compares with 1/vanilla and reports the policies', () => {
    const results = [0, 1, 2].flatMap((r) => [
      rep('vanilla', 20, r, all(10), { podReady: [1, 2, 10] }),
      rep('fixed', 20, r, all(25), { podReady: [0.5, 12, 25] }),
      rep('exponential-decay', 20, r, all(12), { podReady: [0.5, 6, 12] }),
    ]);
    const rows = summarize(results);
    const index = new SummaryIndex(rows);
    expect(index.configs).toEqual(['1/vanilla', '1/fixed', '1/exponential-decay']);
    expect(index.baselineKey()).toBe('1/vanilla');
    expect(index.ratioVsVanilla({ config: 1, shimPolicy: 'fixed', dn: 1, podsPerNode: 20 }, 'lastReady')).toBeCloseTo(2.5);
    expect(summaryCsv(rows)).toContain('1/fixed,1,20,lastReady,3,0,25.000,25.000,25.000,25.000');
    const md = renderReport(results, rows, { title: 'Kubelet policy comparison' });
    expect(md.startsWith('# Kubelet policy comparison\n')).toBe(true);
    expect(md).toContain('## Ratios vs configuration 1/vanilla');
    expect(md).toContain('| 1/fixed: vanilla, kubelet-shim fixed |');
    expect(md).toContain('| Last ready, config 1/exponential-decay | 1.20x |');
    expect(md).not.toContain('## Targets'); // no configuration 5
    // Table 6.1 runs keep configuration 1 as the baseline
    expect(new SummaryIndex(summarize([rep(undefined, 0, 0, all(1)), { ...rep(undefined, 0, 0, all(2)), config: 5 }])).baselineKey()).toBe('1');
  });
  it('draws one pod-ready distribution per policy', () => {
    const results = [rep('vanilla', 20, 0, all(10), { podReady: [1, 2, 10] }), rep('fixed', 20, 0, all(25), { podReady: [0.5, 12, 25] })];
    const svg = figPodReadySvg(results, [{ dn: 1, podsPerNode: 20 }]);
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg).toContain('config 1/fixed: 3 pods');
    expect(svg).toContain(configColor('1/vanilla'));
    expect(configColor('1/vanilla')).not.toBe(configColor('1/fixed'));
    expect(configColor('5')).toBe('#2ca02c');
  });
  it('maps policy names to kubelet-shim config files, naming bad items', () => {
    expect(resolveShimPolicies(['vanilla', 'fixed', 'exponential-decay'])).toEqual({ vanilla: SHIM_POLICY_FILES.vanilla, fixed: SHIM_POLICY_FILES.fixed, 'exponential-decay': SHIM_POLICY_FILES['exponential-decay'] });
    expect(SHIM_POLICY_FILES['exponential-decay']).toMatch(/thesis-cloud\.yaml$/);
    expect(resolveShimPolicies(['mine=/x/y.yaml'])).toEqual({ mine: '/x/y.yaml' });
    expect(() => resolveShimPolicies(['turbo'])).toThrow(/unknown policy "turbo"/);
    expect(() => resolveShimPolicies(['fixed', 'fixed'])).toThrow(/"fixed" given twice/);
    expect(() => resolveShimPolicies(['Fixed'])).toThrow(/"Fixed" is not a policy name/);
  });
});

describe('UlyssesConfig spec of a configuration', () => {
  const kc = new KubeConfig();
  kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  const make = (o: { clientRateLimit?: boolean } = {}) =>
    new RuntimeConfigConfigurator({
      kubeconfig: kc,
      controllers: ['replicaset'],
      pacedShimConfig: DEFAULT_PACED_SHIM_CONFIG,
      criticalNamespace: 'crit',
      reporters: () => [],
      shimPolicies: resolveShimPolicies(['vanilla', 'fixed', 'exponential-decay']),
      ...o,
    });
  it('overrides the kubelet-shim entry with the named policy (parameters from its file)', () => {
    const c = make();
    // a merge patch: the parameters of the other policies of the run are removed (null), their own set
    const removed = { initialWaitMs: null, factor: null, resetAfterMs: null, maxQueueLength: null, holdLowsDuringHighMs: null };
    expect(c.spec(1, 'fixed').kubeletShim).toEqual({ default: { policy: 'fixed', params: { ...removed, waitMs: 1200, highMinInterArrivalMs: 100 } }, nodes: [] });
    expect(c.spec(1, 'exponential-decay').kubeletShim).toMatchObject({ default: { policy: 'exponential-decay', params: { waitMs: null, initialWaitMs: 700, factor: 0.5, resetAfterMs: 5000 } } });
    // vanilla drops the previous policy's parameters (merge patch null)
    expect(c.spec(1, 'vanilla').kubeletShim).toEqual({ default: { policy: 'vanilla', params: null }, nodes: [] });
    expect(c.spec(1).kubeletShim).toEqual({ default: { policy: 'vanilla', params: null }, nodes: [] });
    expect(() => c.spec(1, 'adaptive')).toThrow(/kubelet-shim policy "adaptive": not one of the configured policies \(vanilla, fixed, exponential-decay\)/);
  });
  it('switches the controller manager client limiter off in every configuration of a "rate limiting off" run', () => {
    const off = make({ clientRateLimit: false });
    for (const config of [1, 5] as const) expect(off.spec(config).controllerManager).toMatchObject({ apiRateLimit: { enabled: false } });
    expect(make().spec(5).controllerManager).toMatchObject({ apiRateLimit: null, controllers: { replicaset: { mode: 'multi-priority-periodic' } } });
    expect(off.describe().join('\n')).toContain('rate limiting off');
  });
  it('the critical-path hold goes in configuration 5 only (the periodic workers it holds), null elsewhere', () => {
    const hold = new RuntimeConfigConfigurator({ kubeconfig: new KubeConfig(), controllers: ['replicaset'], pacedShimConfig: DEFAULT_PACED_SHIM_CONFIG, criticalNamespace: 'c', reporters: () => [], criticalPathHoldMs: 1000 });
    expect(hold.spec(5).controllerManager).toMatchObject({ criticalPathHoldMs: 1000 });
    for (const c of [1, 2, 3, 4] as const) expect(hold.spec(c).controllerManager).toMatchObject({ criticalPathHoldMs: null });
    expect(hold.describe().join('\n')).toContain('criticalPathHoldMs = 1000');
  });
});

describe('rate limiting off in the controller manager', () => {
  const fakeCm = () => {
    const modes: string[] = [];
    const limiter = new TokenBucket({ qps: 20, burst: 30 });
    const cm = {
      setApiRate: (qps: number, burst: number) => limiter.setRate(qps, burst),
      criticalPathHold: new CriticalPathHold({ clock: new FakeClock(0) }),
      setMode: (name: string, mode: string) => modes.push(`${name}=${mode}`),
    };
    return { cm: cm as unknown as ControllerManager, limiter, hold: cm.criticalPathHold, modes };
  };
  it('criticalPathHoldMs switches the CriticalPathHold at runtime; absent restores the start setting', () => {
    const { cm, hold } = fakeCm();
    const start = { qps: 20, burst: 30 };
    expect(applyControllerManagerRuntime(cm, ControllerManagerRuntimeSchema.parse({ criticalPathHoldMs: 800 }), ['replicaset'], start, 0)).toBe('replicaset=vanilla,critical-path-hold=800ms');
    expect(hold.holdMs).toBe(800);
    applyControllerManagerRuntime(cm, ControllerManagerRuntimeSchema.parse({}), ['replicaset'], start, 250);
    expect(hold.holdMs).toBe(250);
    const bad = ControllerManagerRuntimeSchema.safeParse({ criticalPathHoldMs: -1 });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(['criticalPathHoldMs']);
  });
  it('apiRateLimit.enabled false makes the limiter never wait; absent restores the start rate', () => {
    const { cm, limiter } = fakeCm();
    const start = { qps: 20, burst: 30 };
    const off = ControllerManagerRuntimeSchema.parse({ controllers: {}, apiRateLimit: { enabled: false } });
    expect(applyControllerManagerRuntime(cm, off, ['replicaset'], start)).toBe('replicaset=vanilla,api-rate-limit=off');
    for (let i = 0; i < 1000; i++) expect(limiter.reserve()).toBe(0);
    expect(applyControllerManagerRuntime(cm, ControllerManagerRuntimeSchema.parse({}), ['replicaset'], start)).toBe('replicaset=vanilla');
    expect(limiter.rate).toEqual(start);
    for (let i = 0; i < 30; i++) limiter.reserve(); // the burst
    expect(limiter.reserve()).toBeGreaterThan(0);
    const custom = ControllerManagerRuntimeSchema.parse({ apiRateLimit: { qps: 50, burst: 100 } });
    expect(applyControllerManagerRuntime(cm, custom, ['replicaset'], start)).toBe('replicaset=vanilla,api-rate-limit=50qps/100');
    expect(limiter.rate).toEqual({ qps: 50, burst: 100 });
  });
  it('gives every controller a limiter of its own, as kube-controller-manager gives each its own client; a rate change reaches all', async () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    const real = new ControllerManager({ kubeconfig: kc, controllers: ['replicaset', 'taint-eviction'] });
    try {
      const rs = real.apiLimiters.get('replicaset')!;
      const te = real.apiLimiters.get('taint-eviction')!;
      expect(rs).not.toBe(te);
      // vanilla taint eviction overlaps evictions as kcm's goroutine per pod does; the others keep --concurrent-*-syncs
      expect(real.pool('taint-eviction').config.vanillaWorkers).toBe(256);
      expect(real.pool('replicaset').config.vanillaWorkers).toBeUndefined();
      for (let i = 0; i < 30; i++) rs.reserve(); // the ReplicaSet controller spends its burst
      expect(rs.reserve()).toBeGreaterThan(0);
      expect(te.reserve()).toBe(0); // the taint-eviction controller's deletes do not wait for it
      applyControllerManagerRuntime(real, ControllerManagerRuntimeSchema.parse({ apiRateLimit: { qps: 50, burst: 100 } }), ['replicaset', 'taint-eviction'], { qps: 20, burst: 30 });
      expect(rs.rate).toEqual({ qps: 50, burst: 100 });
      expect(te.rate).toEqual({ qps: 50, burst: 100 });
      expect(real.apiRate).toEqual({ qps: 50, burst: 100 });
    } finally {
      await real.stop();
    }
  });
  it('rejects bad limits naming the field', () => {
    const r = ControllerManagerRuntimeSchema.safeParse({ apiRateLimit: { qps: 0 } });
    expect(r.success).toBe(false);
    expect(r.error!.issues[0]!.path).toEqual(['apiRateLimit', 'qps']);
    expect(ControllerManagerRuntimeSchema.safeParse({ apiRateLimit: { enabled: false, turbo: 1 } }).success).toBe(false);
  });
  it('a results directory is resumed only under the conditions it was started with', () => {
    expect(conditionFields({ clientRateLimit: true, scenario: 'failover' })).toEqual({});
    expect(conditionFields({ clientRateLimit: false, scenario: '5g' })).toEqual({ clientRateLimit: false, scenario: '5g' });
    const onLimited = [rep(undefined, 0, 0, all(1))];
    expect(conditionMismatch(onLimited, {})).toBeUndefined();
    expect(conditionMismatch(onLimited, { clientRateLimit: false })).toMatch(/client rate limit on, scenario failover, this run is client rate limit off/);
    expect(conditionMismatch([rep(undefined, 0, 0, all(1), { scenario: '5g' })], { scenario: '5g' })).toBeUndefined();
    // CPU layout (profile pinCpus) is a condition too: pinned and unpinned repetitions never mix
    expect(conditionFields({ pinnedCpus: true })).toEqual({ pinnedCpus: true });
    expect(conditionMismatch(onLimited, { pinnedCpus: true })).toMatch(/this run is client rate limit on, scenario failover, CPUs pinned/);
    expect(conditionMismatch([rep(undefined, 0, 0, all(1), { pinnedCpus: true })], { pinnedCpus: true })).toBeUndefined();
    // and so is the critical pod's minimum age at t = 0
    expect(conditionFields({ minCriticalAgeMs: 35_000 })).toEqual({ minCriticalAgeMs: 35_000 });
    expect(conditionMismatch(onLimited, { minCriticalAgeMs: 35_000 })).toMatch(/critical pod at least 35000 ms old at t = 0/);
  });
});

describe('5g scenario', () => {
  it('names the critical service upf and the load after train-ticket services', () => {
    expect(criticalName('5g')).toBe('upf');
    expect(criticalName()).toBe('prio');
    expect(loadNames(3)).toEqual(['low-0', 'low-1', 'low-2']);
    const names = loadNames(TRAIN_TICKET_SERVICES.length + 2, '5g');
    expect(names.slice(0, 2)).toEqual(['ts-auth', 'ts-user']);
    expect(names.slice(-2)).toEqual(['ts-auth-2', 'ts-user-2']);
    expect(new Set(names).size).toBe(names.length);
    for (const n of names) expect(n).toMatch(/^[a-z]([-a-z0-9]*[a-z0-9])?$/); // DNS-1035 Service names
  });
});



describe('ulysses set controller-manager --api-rate-limit', () => {
  it('patches spec.controllerManager.apiRateLimit (off: disabled, on: removed), rejecting other values', async () => {
    const { setPatch } = await import('../../core/runtime-status.ts');
    expect(setPatch('controller-manager', 'vanilla', { controllers: ['replicaset'], apiRateLimit: 'off' })).toEqual({ controllerManager: { controllers: { replicaset: { mode: 'vanilla' } }, apiRateLimit: { enabled: false } } });
    expect(setPatch('controller-manager', 'vanilla', { controllers: ['replicaset'], apiRateLimit: 'on' })).toMatchObject({ controllerManager: { apiRateLimit: null } });
    expect(setPatch('controller-manager', 'vanilla', { controllers: ['replicaset'] })).toEqual({ controllerManager: { controllers: { replicaset: { mode: 'vanilla' } } } });
    expect(() => setPatch('controller-manager', 'vanilla', { apiRateLimit: 'maybe' as 'on' })).toThrow(/--api-rate-limit must be "on" or "off", got "maybe"/);
  });
});

describe('setup settled before t=0', () => {
  it('a Deployment is settled when its status reports every replica updated, ready and available for its generation', async () => {
    const { deploymentSettled } = await import('../../experiments/harness/scenario.ts');
    const d = (status: Record<string, number>, generation = 2) => ({ metadata: { generation }, spec: { replicas: 2 }, status }) as never;
    const done = { observedGeneration: 2, replicas: 2, updatedReplicas: 2, readyReplicas: 2, availableReplicas: 2 };
    expect(deploymentSettled(d(done))).toBe(true);
    expect(deploymentSettled(d({ ...done, availableReplicas: 1 }))).toBe(false); // status update still queued
    expect(deploymentSettled(d({ ...done, observedGeneration: 1 }))).toBe(false);
    expect(deploymentSettled(d({}))).toBe(false);
  });
});
