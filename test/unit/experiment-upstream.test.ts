/**
 * Configuration `upstream` (stock Kubernetes on a kubeadm cluster) in the failover harness: its key
 * in results and plans, Prio up through the ClusterIP as an optional event, the report's table
 * against upstream and the fidelity verdict on configuration 1, the switch durations, and the
 * nodeSelector the installer puts on the Ulysses Deployments.
 */
import { describe, expect, it } from 'vitest';
import { configKey, emptyEvents, repKey, parseConfigKey, parseResults, type ConfigId, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { SummaryIndex, summarize, summaryCsv } from '../../experiments/harness/stats.ts';
import { fidelityTable, renderReport, switchTable, upstreamTable } from '../../experiments/harness/report.ts';
import { planReps, warmupReps } from '../../experiments/harness/experiment.ts';
import { awaitedEvents } from '../../experiments/harness/scenario.ts';
import { RuntimeConfigConfigurator } from '../../experiments/harness/runtime-configurator.ts';
import { DEFAULT_PACED_SHIM_CONFIG } from '../../experiments/harness/local.ts';
import { KubeConfig } from '@kubernetes/client-node';

const events = (prioReady: number, lastReady: number, service?: number): FailoverEvents => ({
  ...emptyEvents(),
  prioScheduled: prioReady / 2,
  prioReady,
  prioUp: prioReady * 1.1,
  prioEndpointReady: prioReady * 1.2,
  lastScheduled: lastReady / 2,
  lastReady,
  ...(service === undefined ? {} : { prioUpService: service }),
});
const rep = (config: ConfigId, r: number, e: FailoverEvents, extra: Partial<RepResult> = {}): RepResult => ({ config, dn: 1, podsPerNode: 5, rep: r, events: e, ...extra });

describe('configuration upstream', () => {
  it('is a configuration key of its own, ordered first; a kubelet policy does not apply to it', () => {
    expect(parseConfigKey('upstream')).toEqual({ config: 'upstream' });
    expect(configKey({ config: 'upstream' })).toBe('upstream');
    expect(() => parseConfigKey('upstream/fixed')).toThrow(/configuration "upstream\/fixed"/);
    expect(() => parseConfigKey('6')).toThrow(/"upstream", "upstream-tuned" or a Table 6.1 id/);
    const plan = planReps({ configs: [5, 'upstream', 1], dns: [1], podsPerNode: [5], reps: 2 });
    expect(plan.map((p) => p.config)).toEqual([5, 'upstream', 1, 5, 'upstream', 1]);
  });
  it('groups a repetition by family (one switch per repetition), the family order alternating; warm-ups end in the family the first repetition starts with', () => {
    const family = (c: ConfigId) => (c === 'upstream' ? 'upstream' : 'ulysses');
    const plan = { configs: ['upstream', 1, 5] as ConfigId[], dns: [1, 2], podsPerNode: [0, 20], reps: 3 };
    const order = planReps(plan, family);
    expect(order).toHaveLength(3 * 3 * 2 * 2);
    expect(order.slice(0, 12).map((r) => [r.config, r.dn, r.podsPerNode, r.rep])).toEqual([
      ['upstream', 1, 0, 0], ['upstream', 1, 20, 0], ['upstream', 2, 0, 0], ['upstream', 2, 20, 0],
      [1, 1, 0, 0], [5, 1, 0, 0], [1, 1, 20, 0], [5, 1, 20, 0], [1, 2, 0, 0], [5, 2, 0, 0], [1, 2, 20, 0], [5, 2, 20, 0],
    ]);
    // a switch (change of family) between consecutive repetitions: once per repetition
    const switches = order.slice(1).filter((r, i) => family(r.config) !== family(order[i]!.config)).length;
    expect(switches).toBe(3);
    expect(order.slice(12, 24).map((r) => family(r.config))).toEqual([...Array(8).fill('ulysses'), ...Array(4).fill('upstream')]);
    // the same cells as without families
    expect(new Set(order.map(repKey))).toEqual(new Set(planReps(plan).map(repKey)));
    const warm = warmupReps(plan, family);
    expect(warm.map((r) => r.config)).toEqual([1, 5, 'upstream']);
    expect(warm.every((r) => r.dn === 2 && r.podsPerNode === 20 && r.rep === 0)).toBe(true);
  });
  it('round-trips through results.jsonl with Prio up (ClusterIP) and the switch; older lines without them still parse', () => {
    const line = JSON.stringify(rep('upstream', 0, events(1, 2, 1.3), { configSwitch: { to: 'upstream', seconds: 31.5 } }));
    const [r] = parseResults(line);
    expect(r!.config).toBe('upstream');
    expect(r!.events.prioUpService).toBe(1.3);
    expect(r!.configSwitch).toEqual({ to: 'upstream', seconds: 31.5 });
    expect(parseResults(JSON.stringify(rep(1, 0, events(1, 2))))[0]!.events.prioUpService).toBeUndefined();
    expect(() => parseResults(JSON.stringify({ ...rep('upstream', 0, events(1, 2)), config: 'stock' }))).toThrow(/field config/);
  });
  it('the runtime configurator refuses it (UlyssesConfig cannot make stock Kubernetes)', () => {
    const kc = new KubeConfig();
    kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    const rc = new RuntimeConfigConfigurator({ kubeconfig: kc, controllers: ['replicaset'], pacedShimConfig: DEFAULT_PACED_SHIM_CONFIG, criticalNamespace: 'ns', reporters: () => [] });
    expect(() => rc.spec('upstream')).toThrow(/not a configuration of Ulysses/);
  });
  it('awaits Prio up (ClusterIP) only when the Service is probed', () => {
    expect(awaitedEvents(true, true)).toContain('prioUpService');
    expect(awaitedEvents(true)).not.toContain('prioUpService');
  });
});

describe('report against upstream', () => {
  const results = [0, 1, 2, 3].flatMap((i) => [
    rep('upstream', i, events(2 + i * 0.1, 10 + i * 0.1, 2.5 + i * 0.1), i === 0 ? { configSwitch: { to: 'upstream', seconds: 30 + i } } : {}),
    rep(1, i, events(3 + i * 0.1, 10.5 + i * 0.1, 3.5), i === 0 ? { configSwitch: { to: 'ulysses', seconds: 40 } } : {}),
    rep(5, i, events(0.3 + i * 0.01, 10.8 + i * 0.1, 0.5)),
  ]);
  const index = new SummaryIndex(summarize(results));

  it('the summary has the ClusterIP event only when some repetition measured it', () => {
    expect(summaryCsv(summarize(results))).toContain('prioUpService');
    expect(summaryCsv(summarize([rep(1, 0, events(1, 2))]))).not.toContain('prioUpService');
  });
  it('the headline table gives upstream, 1 and 5 with the ratio 5 : upstream, its interval, and the targets', () => {
    const t = upstreamTable(results, index)!;
    expect(t).toContain('| upstream | config 1 | config 5 | 5 : upstream | 90% interval |');
    expect(t).toMatch(/\| DN 1, 5 \(n=4\/4\/4\) \| Prio ready \| 2\.15 \| 3\.15 \| 0\.32 \| 0\.15x \| 0\.14–0\.16x \|/);
    expect(t).toContain('Prio up (ClusterIP)');
    expect(t).toMatch(/Prio ready: reduction of config 5 vs upstream \| 85\.3% .* met/);
    expect(t).toMatch(/Last ready: config 5 \/ upstream \| 1\.08x .* met/);
  });
  it('gives the targets per DN at the heaviest load, with config 5 at that load against config 5 idle when the run has the idle cell', () => {
    const cells = [1, 2].flatMap((dn) => [0, 20].flatMap((podsPerNode) => [0, 1, 2].flatMap((i) => [
      { ...rep('upstream', i, events(2 * dn + i * 0.1, 10 * dn)), dn, podsPerNode },
      { ...rep(5, i, events(podsPerNode ? 0.4 * dn : 0.2 * dn, 10 * dn)), dn, podsPerNode },
    ])));
    const t = upstreamTable(cells, new SummaryIndex(summarize(cells)))!;
    expect(t).toContain('Targets against upstream at 20 pods/node, per DN; and config 5 at that load against config 5 idle');
    expect(t).toMatch(/\| 1 \| Prio ready: reduction of config 5 vs upstream \| 81\.0% \| 80\.0%–81\.8% /);
    expect(t).toMatch(/\| 2 \| Prio ready: reduction of config 5 vs upstream \| 80\.5% /);
    expect(t).toMatch(/\| 2 \| Prio ready: config 5 at load \/ config 5 idle \| 2\.00x .* \*\*missed\*\* \|/);
    expect(t).toMatch(/\| 1 \| Last ready: config 5 \/ upstream \| 1\.00x .* met \|/);
    const noIdle = cells.filter((r) => r.podsPerNode > 0);
    expect(upstreamTable(noIdle, new SummaryIndex(summarize(noIdle)))).not.toContain('idle');
  });
  it('the fidelity table says configuration 1 is not stock Kubernetes when Prio ready differs by more than 15%', () => {
    const f = fidelityTable(results, index)!;
    expect(f).toContain('**Configuration 1 is not stock Kubernetes**');
    expect(f).toMatch(/Prio ready at DN 1, 5 pods\/node: 1\.47x/);
    const close = results.map((r) => (r.config === 1 ? { ...r, events: events(r.events.prioReady! - 0.9, r.events.lastReady!) } : r));
    const g = fidelityTable(close, new SummaryIndex(summarize(close)))!;
    expect(g).toContain('agrees with upstream within 15%');
    expect(g).not.toContain('Inconclusive');
    // one repetition of config 1 far off: the median stays close, the interval reaches past 15%
    const spread = close.map((r) => (r.config === 1 && r.rep === 0 ? { ...r, events: events(6, 10) } : r));
    expect(fidelityTable(spread, new SummaryIndex(summarize(spread)))).toMatch(/Inconclusive: the 90% interval of Prio ready at DN 1, 5 pods\/node/);
  });
  it('the report carries both tables and the switch durations; runs without upstream have neither', () => {
    const md = renderReport(results, summarize(results));
    expect(md).toContain('## Against stock Kubernetes (configuration upstream)');
    expect(md).toContain('## Fidelity: configuration 1 (vanilla mode) against upstream');
    expect(switchTable(results)).toMatch(/\| ulysses \| 1 \| 40\.0 \|/);
    const without = results.filter((r) => r.config !== 'upstream');
    const md2 = renderReport(without, summarize(without));
    expect(md2).not.toContain('Against stock Kubernetes');
    expect(md2).not.toContain('Fidelity');
  });
});
