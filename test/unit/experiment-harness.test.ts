/**
 * Pure logic of the failover experiment harness: results parsing (errors name line and field),
 * quantiles and the summary, ratios/inflation and the target checks of the report, the plan order,
 * the progress line, the kcm --controllers flag, and the SVG figures.
 */
import { describe, expect, it } from 'vitest';
import { EVENTS, emptyEvents, parseResults, repKey, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { bootstrapQuantileRatio, quantile, SummaryIndex, summarize, summaryCsv } from '../../experiments/harness/stats.ts';
import { checkTargets, renderVerdict, renderReport } from '../../experiments/harness/report.ts';
import { ecdf, ecdfPath, fig61Svg, fig65Svg, niceTicks, type Axis } from '../../experiments/harness/svg.ts';
import { planReps, warmupReps } from '../../experiments/harness/experiment.ts';
import { formatDuration, progressLine } from '../../experiments/harness/progress.ts';
import { kcmControllersFlag, TABLE_6_1 } from '../../experiments/harness/configurator.ts';
import { criticalPosition, loadDeployments } from '../../experiments/harness/scenario.ts';
import { svgToPng } from '../../experiments/harness/png.ts';

const ev = (v: Partial<FailoverEvents>): FailoverEvents => ({ ...emptyEvents(), ...v });
const all = (t: number): FailoverEvents => ({ prioScheduled: t * 0.1, prioReady: t * 0.5, prioUp: t * 0.55, prioEndpointReady: t * 0.6, lastScheduled: t * 0.8, lastReady: t });
const rep = (config: 1 | 5, podsPerNode: number, r: number, events: FailoverEvents, dn = 1): RepResult => ({ config, dn, podsPerNode, rep: r, events });

describe('results.jsonl', () => {
  it('round-trips valid lines and skips blank ones', () => {
    const lines = [rep(1, 5, 0, all(10)), rep(5, 5, 0, ev({ prioUp: 1.5 }))].map((r) => JSON.stringify(r)).join('\n\n');
    const parsed = parseResults(lines);
    expect(parsed).toHaveLength(2);
    expect(parsed[1]!.events.prioReady).toBeNull();
    expect(repKey(parsed[0]!)).toBe('c1/dn1/ppn5/rep0');
  });
  it('names the line and the field of a bad record', () => {
    const good = JSON.stringify(rep(1, 5, 0, all(10)));
    expect(() => parseResults(`${good}\n${JSON.stringify({ ...rep(1, 5, 1, all(10)), config: 7 })}`, 'r.jsonl')).toThrow(/r\.jsonl:2: field config/);
    expect(() => parseResults(JSON.stringify({ ...rep(1, 5, 1, all(10)), events: { ...all(1), prioUp: -1 } }))).toThrow(/:1: field events\.prioUp/);
    expect(() => parseResults(JSON.stringify({ ...rep(1, 5, 1, all(10)), events: { ...all(1), extra: 1 } }))).toThrow(/field events/);
    expect(() => parseResults('{oops')).toThrow(/:1: not JSON/);
  });
});

describe('statistics', () => {
  it('quantile interpolates linearly between ranks (type 7)', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([1, 2, 3, 4], 0.25)).toBe(1.75);
    expect(quantile([10], 0.9)).toBe(10);
    expect(quantile([0, 10], 0.9)).toBe(9);
    expect(quantile([], 0.5)).toBeNaN();
  });
  it('summarizes per cell and event, counting nulls', () => {
    const rows = summarize([rep(1, 5, 0, all(10)), rep(1, 5, 1, all(20)), rep(1, 5, 2, ev({ prioUp: 3 }))]);
    expect(rows).toHaveLength(EVENTS.length);
    const lastReady = rows.find((r) => r.event === 'lastReady')!;
    expect(lastReady).toMatchObject({ n: 3, nulls: 1, median: 15, p25: 12.5, p75: 17.5, p90: 19 });
    const prioUp = rows.find((r) => r.event === 'prioUp')!;
    expect(prioUp.median).toBe(5.5);
    const csv = summaryCsv(rows).trim().split('\n');
    expect(csv[0]).toBe('config,dn,podsPerNode,event,n,nulls,median,p25,p75,p90');
    expect(csv).toContain('1,1,5,lastReady,3,1,15.000,12.500,17.500,19.000');
  });
  it('a cell where an event never happened has null quantiles and an empty CSV field', () => {
    const rows = summarize([rep(1, 0, 0, ev({}))]);
    expect(rows.every((r) => r.median === null && r.nulls === 1)).toBe(true);
    expect(summaryCsv(rows)).toContain('1,1,0,prioUp,1,1,,,,');
  });
});

describe('report', () => {
  const results = [
    ...[0, 1, 2].map((r) => rep(1, 0, r, all(2))),
    ...[0, 1, 2].map((r) => rep(5, 0, r, all(2))),
    ...[0, 1, 2].map((r) => rep(1, 20, r, all(20 + r))),
    ...[0, 1, 2].map((r) => rep(5, 20, r, { ...all(21 + r), prioReady: 1.1, prioUp: 1.2 })),
  ];
  const index = new SummaryIndex(summarize(results));
  it('ratios vs config 1 and inflation vs idle', () => {
    expect(index.ratioVsVanilla({ config: 5, dn: 1, podsPerNode: 20 }, 'lastReady')).toBeCloseTo(22 / 21);
    expect(index.inflation({ config: 5, dn: 1, podsPerNode: 20 }, 'prioReady')).toBeCloseTo(1.1 / 1);
    expect(index.inflation({ config: 1, dn: 1, podsPerNode: 20 }, 'prioReady')).toBeCloseTo(10.5 / 1);
  });
  it('checks the issue targets at the heaviest load, naming misses', () => {
    const { cell, checks } = checkTargets(index);
    expect(cell).toEqual({ dn: 1, podsPerNode: 20 });
    const byWhat = Object.fromEntries(checks.map((c) => [c.what, c]));
    expect(byWhat['Prio ready: reduction of config 5 vs config 1']!.measured).toBeCloseTo(1 - 1.1 / 10.5);
    expect(byWhat['Prio ready: reduction of config 5 vs config 1']!.met).toBe(true);
    expect(byWhat['Prio up: config 5 at load / config 5 idle']!.measured).toBeCloseTo(1.2 / 1.1);
    expect(byWhat['Prio up: config 5 at load / config 5 idle']!.met).toBe(true);
    expect(byWhat['Last ready: config 5 / config 1']!.met).toBe(true);
    const md = renderReport(results, index.rows, { notes: ['machine: test'], command: 'regen' });
    expect(md).toContain('## Targets at the heaviest load (DN 1, 20 pods/node)');
    expect(md).toContain('| Prio ready: config 5 at load / config 5 idle | 1.10x | 1.10x–1.10x | <= 1.15x | met |');
    expect(md).toContain('90% interval: percentile bootstrap');
    expect(md).toContain('| 5: + CM multi-priority periodic | 1.10 [1.10–1.10] |'.slice(0, 20));
    expect(md).toContain('- machine: test');
    expect(md).toContain('Regenerate: `regen`');
  });
  it('the demo verdict: medians of 1 and 5 at the heaviest cell, then each target', () => {
    const v = renderVerdict(results, index.rows);
    expect(v.split('\n')).toEqual([
      'verdict at DN 1, 20 pods per node (3 repetitions of configuration 5; medians):',
      '  Prio ready   vanilla (1)  10.50 s   Ulysses (5)   1.10 s   0.10x',
      expect.stringMatching(/^  Prio up /),
      expect.stringMatching(/^  Last ready .* 1\.05x$/),
      expect.stringMatching(/^  \[met\] Prio ready: reduction of config 5 vs config 1: 90% \(target >= 80%\)$/),
      expect.stringMatching(/^  \[met\] Prio up: reduction/),
      expect.stringMatching(/^  \[met\] Prio ready: config 5 at load \/ config 5 idle: 1\.10x \(target <= 1\.15x\)$/),
      expect.stringMatching(/^  \[met\] Prio up: config 5 at load/),
      // 3 repetitions: the interval of 1.05x reaches across 1.1x
      '  [inconclusive] Last ready: config 5 / config 1: 1.05x (target <= 1.1x)',
    ]);
    expect(renderVerdict(results.filter((r) => r.podsPerNode === 0), summarize(results.filter((r) => r.podsPerNode === 0)))).toMatch(/no loaded cell/);
  });

  it('reports a missed target and never-seen events', () => {
    const slow = [...results.filter((r) => r.config === 1), ...[0, 1, 2].map((r) => rep(5, 0, r, all(2))), ...[0, 1].map((r) => rep(5, 20, r, all(40))), rep(5, 20, 2, ev({}))];
    const rows = summarize(slow);
    const md = renderReport(slow, rows);
    expect(md).toMatch(/Last ready: config 5 \/ config 1 \| 1\.90x \| 1\.82x–2\.00x \| <= 1\.1x \| \*\*missed\*\* \|/);
    expect(md).toContain('(1/3 never)');
    const { checks } = checkTargets(new SummaryIndex(rows));
    expect(checks.filter((c) => c.met === false).length).toBeGreaterThanOrEqual(3);
  });
  it('bootstraps the interval of a ratio of tail quantiles (p99 of one sample / p99 of another)', () => {
    const base = Array.from({ length: 1000 }, (_, i) => 5 + (i % 100) / 100);
    // every value twice the baseline's: the p99 ratio is 2 in every resample
    const [lo, hi] = bootstrapQuantileRatio(base.map((x) => 2 * x), base, 0.99)!;
    expect(lo).toBeCloseTo(2, 1);
    expect(hi).toBeCloseTo(2, 1);
    // the same body plus 15 slow rounds: the point p99 is a slow one, but resamples with fewer of them land on the body
    const tailed = [...base.slice(15), ...Array.from({ length: 15 }, () => 9)];
    const iv = bootstrapQuantileRatio(tailed, base, 0.99)!;
    const p99 = (xs: number[]) => quantile([...xs].sort((a, b) => a - b), 0.99);
    expect(p99(tailed) / p99(base)).toBeGreaterThan(1.3);
    expect(iv[0]).toBeLessThan(1.3);
    expect(iv[1]).toBeGreaterThan(1.3);
    expect(bootstrapQuantileRatio([], base, 0.99)).toBeNull();
    // seeded: the same interval every time
    expect(bootstrapQuantileRatio(tailed, base, 0.99)).toEqual(iv);
  });
  it('gives each target a bootstrap interval and calls a verdict inconclusive when the interval crosses the limit', () => {
    // idle 1.0 s every time; at load 0.9-1.4 s: median 1.1x (met) but a resample can be 1.4x
    const noisy = [...results.filter((r) => r.podsPerNode === 0 || r.config === 1), ...[0.9, 1.0, 1.1, 1.2, 1.4].map((t, r) => rep(5, 20, r, { ...all(21), prioReady: t, prioUp: 1.05 }))];
    const { checks } = checkTargets(new SummaryIndex(summarize(noisy)), ['prioReady', 'prioUp'], noisy);
    const ready = checks.find((c) => c.what === 'Prio ready: config 5 at load / config 5 idle')!;
    expect(ready.measured).toBeCloseTo(1.1);
    expect(ready.met).toBe(true);
    expect(ready.ci![0]).toBeLessThanOrEqual(1.1);
    expect(ready.ci![1]).toBeGreaterThan(1.15);
    expect(ready.inconclusive).toBe(true);
    const up = checks.find((c) => c.what === 'Prio up: config 5 at load / config 5 idle')!;
    expect(up.ci![0]).toBeCloseTo(1.05 / 1.1); // every repetition the same: a point
    expect(up.ci![1]).toBeCloseTo(1.05 / 1.1);
    expect(up.inconclusive).toBe(false);
    // a reduction's interval is 1 - the ratio's, lower end first
    const red = checks.find((c) => c.what === 'Prio ready: reduction of config 5 vs config 1')!;
    expect(red.ci![0]).toBeLessThanOrEqual(red.measured!);
    expect(red.ci![1]).toBeGreaterThanOrEqual(red.measured!);
    expect(renderReport(noisy, summarize(noisy))).toContain('| <= 1.15x | met (inconclusive) |');
    // without the repetitions: no interval
    expect(checkTargets(new SummaryIndex(summarize(noisy))).checks[0]!.ci).toBeUndefined();
  });
  it('has no target section without configuration 5, and only the inflation checks without configuration 1', () => {
    expect(checkTargets(new SummaryIndex(summarize(results.filter((r) => r.config === 1)))).checks).toEqual([]);
    const only5 = results.filter((r) => r.config === 5);
    const { cell, checks } = checkTargets(new SummaryIndex(summarize(only5)), ['prioReady', 'prioUp'], only5);
    expect(cell).toEqual({ dn: 1, podsPerNode: 20 });
    expect(checks.map((c) => c.what)).toEqual(['Prio ready: config 5 at load / config 5 idle', 'Prio up: config 5 at load / config 5 idle']);
    expect(checks[0]!.measured).toBeCloseTo(1.1);
    // and none without an idle cell to compare with
    expect(checkTargets(new SummaryIndex(summarize(only5.filter((r) => r.podsPerNode > 0)))).checks).toEqual([]);
  });
});

describe('plan, progress, topology helpers', () => {
  it('interleaves configurations inside each repetition', () => {
    const plan = planReps({ configs: [1, 5], dns: [1, 2], podsPerNode: [0, 10], reps: 2 });
    expect(plan).toHaveLength(16);
    expect(plan.slice(0, 3)).toEqual([
      { config: 1, dn: 1, podsPerNode: 0, rep: 0 },
      { config: 5, dn: 1, podsPerNode: 0, rep: 0 },
      { config: 1, dn: 1, podsPerNode: 10, rep: 0 },
    ]);
    expect(new Set(plan.map(repKey)).size).toBe(16);
  });
  it('warms up every configuration and kubelet policy of the plan once, on the widest DN with the heaviest load', () => {
    expect(warmupReps({ configs: [1, 5], dns: [1, 3, 2], podsPerNode: [0, 20, 10], reps: 4 })).toEqual([
      { config: 1, dn: 3, podsPerNode: 20, rep: 0 },
      { config: 5, dn: 3, podsPerNode: 20, rep: 0 },
    ]);
    expect(warmupReps({ configs: [5], shimPolicies: ['vanilla', 'fixed'], dns: [1], podsPerNode: [5], reps: 1 }).map(repKey)).toEqual(
      planReps({ configs: [5], shimPolicies: ['vanilla', 'fixed'], dns: [1], podsPerNode: [5], reps: 1 }).map(repKey),
    );
  });
  it('formats the progress line with ETA', () => {
    expect(formatDuration(59.6)).toBe('1m00s');
    expect(formatDuration(3725)).toBe('1h02m');
    expect(progressLine({ done: 5, total: 10, skipped: 2, meanRepS: 30, width: 10, what: 'x' })).toBe('[#####-----] 5/10 reps (2 already done)  ETA 2m30s  x');
    expect(progressLine({ done: 0, total: 4, skipped: 0, width: 4 })).toBe('[----] 0/4 reps  ETA ?');
  });
  it('builds the kcm --controllers flag from the Ulysses controllers', () => {
    expect(kcmControllersFlag(['replicaset', 'taint-eviction', 'endpointslice', 'endpoints'])).toBe('*,-replicaset-controller,-taint-eviction-controller,-endpointslice-controller,-endpoints-controller');
    expect(kcmControllersFlag(['deployment'])).toBe('*,-deployment-controller');
    expect(() => kcmControllersFlag(['replicaset', 'nope'])).toThrow('unknown controller "nope"');
    expect(kcmControllersFlag(['replicaset', 'deployment', 'taint-eviction', 'endpointslice', 'endpoints'])).toBe(
      '*,-replicaset-controller,-deployment-controller,-taint-eviction-controller,-endpointslice-controller,-endpoints-controller',
    );
  });
  it('Table 6.1 adds one modification per configuration', () => {
    expect(TABLE_6_1[1]).toEqual({ shim: 'vanilla', apf: false, controllerManager: 'vanilla' });
    expect(TABLE_6_1[5]).toEqual({ shim: 'paced', apf: true, controllerManager: 'multi-priority-periodic' });
  });
  it('places the critical Deployment pseudo-randomly but reproducibly among the load', () => {
    const positions = Array.from({ length: 200 }, (_, seed) => criticalPosition(seed, 10));
    expect(positions.every((p) => p >= 0 && p <= 10)).toBe(true);
    expect(new Set(positions).size).toBe(11); // every place occurs
    expect(criticalPosition(42, 10)).toBe(criticalPosition(42, 10));
    expect(criticalPosition(7, 0)).toBe(0);
  });
  it('splits the load in Deployments of 2 pods', () => {
    expect(loadDeployments(5)).toEqual([2, 2, 1]);
    expect(loadDeployments(0)).toEqual([]);
    expect(loadDeployments(4)).toEqual([2, 2]);
  });
});

describe('SVG figures', () => {
  const results = [0, 1, 2].flatMap((r) => [rep(1, 0, r, all(2)), rep(5, 0, r, all(2)), rep(1, 10, r, all(10 + r)), rep(5, 10, r, all(9 + r)), rep(1, 10, r, all(10 + r), 2), rep(5, 10, r, all(11), 2)]);
  const index = new SummaryIndex(summarize(results));
  it('nice ticks cover the range with 1-2-5 steps', () => {
    expect(niceTicks(0, 10)).toEqual([0, 2, 4, 6, 8, 10]);
    expect(niceTicks(0, 0.37)).toEqual([0, 0.1, 0.2, 0.3, 0.4]);
    const t = niceTicks(0, 23);
    expect(t[0]).toBe(0);
    expect(t[t.length - 1]).toBeGreaterThanOrEqual(23);
  });
  it('ecdf is a step function reaching 1', () => {
    expect(ecdf([3, 1, 2])).toEqual([[1, 1 / 3], [2, 2 / 3], [3, 1]]);
  });
  it('ecdf path: one horizontal and one vertical segment per distinct x at 0.1 px (ties and near-ties share a step)', () => {
    const a: Axis = { x0: 0, y0: 0, w: 100, h: 100, xTicks: [0, 10], yTicks: [0, 1] }; // 10 px per second, 100 px per unit
    expect(ecdfPath(a, [])).toBeUndefined();
    // 1 and 1.001 fall on the same tenth of a pixel: one step from 0 to 0.5
    expect(ecdfPath(a, [2, 1.001, 1, 2])).toBe('M10,100 V50 H20 V0');
    expect(ecdfPath(a, [5])).toBe('M50,100 V0');
  });
  it('Fig 6.1 has one panel per DN, a series per configuration, IQR bars and valid XML', () => {
    const svg = fig61Svg(index, 'prioUp');
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.match(/Prio up, DN = \d/g)).toEqual(['Prio up, DN = 1', 'Prio up, DN = 2']);
    // DN 1: idle + 10 pods for both configs (a line each); DN 2: one load only (points, no line)
    expect(svg.match(/<polyline /g)!.length).toBe(2);
    expect(svg.match(/<circle /g)!.length).toBe(6);
    expect(svg).toContain('config 5, 10 pods/node: median');
    expect(svg).not.toMatch(/NaN|undefined/);
    // balanced tags
    const open = (svg.match(/<(?!\/)[a-z]+[^>]*[^/]>/g) ?? []).filter((t) => !t.startsWith('<?')).length;
    const close = (svg.match(/<\/[a-z]+>/g) ?? []).length;
    expect(open).toBe(close);
  });
  it('Fig 6.5 draws one CDF per configuration and event per panel', () => {
    const svg = fig65Svg(results, [{ dn: 1, podsPerNode: 10 }, { dn: 2, podsPerNode: 10 }]);
    expect(svg.match(/<path /g)!.length).toBe(8);
    expect(svg).toContain('stroke-dasharray="5 3"');
    expect(svg).not.toMatch(/NaN|undefined/);
  });
  it('PNG rendering either works or explains how to get it', async () => {
    const png = await svgToPng(fig61Svg(index, 'prioReady'));
    if (png instanceof Error) expect(png.message).toMatch(/@resvg\/resvg-js.*npm install @resvg\/resvg-js@2\.6\.2/);
    else expect(Buffer.from(png.subarray(1, 4)).toString()).toBe('PNG');
  });
});
