/**
 * Tables, CSV, report.md and figures of the §6.2 experiments (placement simulation and
 * schedulability study). Figures use the project's SVG primitives (experiments/harness/svg.ts); PNG
 * copies only when asked (`--png`: experiments/harness/png.ts).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFigureFiles } from '../harness/png.ts';
import { axes, document, escapeXml, legend, niceTicks, sx, sy, type Axis } from '../harness/svg.ts';
import { CRITICALITY_AWARE_WEIGHTS, POLICIES, type PolicyName, type PolicyResult, type RunResult } from './placement.ts';
import type { StudyResult } from './schedulability.ts';

const POLICY_COLORS: Record<PolicyName, string> = {
  LeastAllocated: '#1f77b4',
  MostAllocated: '#ff7f0e',
  RequestedToCapacityRatio: '#9467bd',
  CriticalityAware: '#2ca02c',
};
const GREEN = '#2ca02c';
const RED = '#d62728';

const mean = (xs: readonly number[]) => {
  const v = xs.filter((x) => Number.isFinite(x));
  return v.length ? v.reduce((a, b) => a + b, 0) / v.length : Number.NaN;
};
const pct = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)} %` : 'n/a');

// --- placement ---------------------------------------------------------------------------------

export interface PlacementRow {
  readonly policy: PolicyName;
  readonly acceptance: number;
  readonly acceptanceHigh: number;
  readonly acceptanceLow: number;
  readonly acceptanceNone: number;
  /** Thesis AR (time average). */
  readonly meanAcceptanceRate: number;
  /** Thesis Ā (time average, RT nodes). */
  readonly meanClusterAssurance: number;
  readonly assuranceHigh: number;
  readonly cpuUtilization: number;
}

export function placementRows(runs: readonly RunResult[]): PlacementRow[] {
  return POLICIES.map((policy) => {
    const rs = runs.map((r) => r.policies.find((p) => p.policy === policy)).filter((p): p is PolicyResult => !!p);
    return {
      policy,
      acceptance: mean(rs.map((p) => p.acceptance)),
      acceptanceHigh: mean(rs.map((p) => p.acceptanceBy.high)),
      acceptanceLow: mean(rs.map((p) => p.acceptanceBy.low)),
      acceptanceNone: mean(rs.map((p) => p.acceptanceBy.none)),
      meanAcceptanceRate: mean(rs.map((p) => p.meanAcceptanceRate)),
      meanClusterAssurance: mean(rs.map((p) => p.meanClusterAssurance)),
      assuranceHigh: mean(rs.map((p) => p.assuranceAtPlacement.high)),
      cpuUtilization: mean(rs.map((p) => p.meanCpuUtilization)),
    };
  });
}

export type Metric = 'acceptance' | 'acceptanceHigh' | 'meanClusterAssurance';
const METRIC_OF: Record<Metric, (p: PolicyResult) => number> = {
  acceptance: (p) => p.acceptance,
  acceptanceHigh: (p) => p.acceptanceBy.high,
  meanClusterAssurance: (p) => p.meanClusterAssurance,
};
export const METRIC_LABELS: Record<Metric, string> = {
  acceptance: 'acceptance (all pods)',
  acceptanceHigh: 'acceptance of HI pods',
  meanClusterAssurance: 'cluster assurance Ā',
};

/** Criticality-aware minus the best vanilla policy, per run (Fig 6.7's green/red). */
export function advantage(run: RunResult, metric: Metric): number {
  const f = METRIC_OF[metric];
  const ca = run.policies.find((p) => p.policy === 'CriticalityAware');
  const vanilla = run.policies.filter((p) => p.policy !== 'CriticalityAware').map(f).filter(Number.isFinite);
  if (!ca || !vanilla.length || !Number.isFinite(f(ca))) return Number.NaN;
  return f(ca) - Math.max(...vanilla);
}

export interface WinCount {
  readonly metric: Metric;
  readonly better: number;
  readonly equal: number;
  readonly worse: number;
  readonly meanDiff: number;
}

export function winCounts(runs: readonly RunResult[]): WinCount[] {
  return (Object.keys(METRIC_OF) as Metric[]).map((metric) => {
    const d = runs.map((r) => advantage(r, metric)).filter(Number.isFinite);
    return { metric, better: d.filter((x) => x > 1e-9).length, equal: d.filter((x) => Math.abs(x) <= 1e-9).length, worse: d.filter((x) => x < -1e-9).length, meanDiff: mean(d) };
  });
}

export function placementTable(runs: readonly RunResult[]): string {
  const rows = placementRows(runs);
  const head = '| policy | accepted (all) | HI | LOW | NO | AR (time avg) | Ā (time avg) | assurance of HI pods | CPU utilization |';
  const lines = [head, '| --- | --- | --- | --- | --- | --- | --- | --- | --- |'];
  for (const r of rows) {
    lines.push(
      `| ${r.policy} | ${pct(r.acceptance)} | ${pct(r.acceptanceHigh)} | ${pct(r.acceptanceLow)} | ${pct(r.acceptanceNone)} | ${pct(r.meanAcceptanceRate)} | ${pct(r.meanClusterAssurance)} | ${pct(r.assuranceHigh)} | ${pct(r.cpuUtilization)} |`,
    );
  }
  lines.push('', '| criticality-aware vs best vanilla, per run | better | equal | worse | mean difference |', '| --- | --- | --- | --- | --- |');
  for (const w of winCounts(runs)) lines.push(`| ${METRIC_LABELS[w.metric]} | ${w.better} | ${w.equal} | ${w.worse} | ${(100 * w.meanDiff).toFixed(1)} pts |`);
  return lines.join('\n');
}

export function placementCsv(runs: readonly RunResult[]): string {
  const cols = ['seed', 'nodes', 'added_nodes', 'pods', 'load', 'policy', 'arrived_high', 'arrived_low', 'arrived_none', 'placed_high', 'placed_low', 'placed_none', 'acceptance', 'acceptance_high', 'acceptance_low', 'acceptance_none', 'mean_acceptance_rate', 'mean_cluster_assurance', 'assurance_high', 'assurance_low', 'assurance_none', 'cpu_utilization', 'mean_wait'];
  const lines = [cols.join(',')];
  const f = (x: number) => (Number.isFinite(x) ? x.toFixed(6) : '');
  for (const r of runs) {
    for (const p of r.policies) {
      lines.push(
        [r.seed, r.nodes, r.addedNodes, r.pods, f(r.load), p.policy, p.arrived.high, p.arrived.low, p.arrived.none, p.placed.high, p.placed.low, p.placed.none, f(p.acceptance), f(p.acceptanceBy.high), f(p.acceptanceBy.low), f(p.acceptanceBy.none), f(p.meanAcceptanceRate), f(p.meanClusterAssurance), f(p.assuranceAtPlacement.high), f(p.assuranceAtPlacement.low), f(p.assuranceAtPlacement.none), f(p.meanCpuUtilization), f(p.meanWait)].join(','),
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

const PANEL_W = 300;
const PANEL_H = 220;
const M = { left: 60, top: 40, right: 20, bottom: 50 };

/**
 * Fig 6.7 style: one panel per metric, one dot per run at (initial nodes, pods), green where the
 * criticality-aware policy beats the best vanilla policy, red where it is worse, grey when equal;
 * the dot's area grows with the difference.
 */
export function fig67Svg(runs: readonly RunResult[]): string {
  const metrics = Object.keys(METRIC_OF) as Metric[];
  const xTicks = niceTicks(3, 11);
  const yTicks = niceTicks(200, 1100);
  const width = metrics.length * (PANEL_W + M.left + M.right) + 290;
  const height = PANEL_H + M.top + M.bottom + 20;
  const body: string[] = [];
  metrics.forEach((metric, i) => {
    const a: Axis = { x0: i * (PANEL_W + M.left + M.right) + M.left, y0: M.top + 10, w: PANEL_W, h: PANEL_H, xTicks, yTicks };
    body.push(axes(a, METRIC_LABELS[metric], 'initial nodes', 'pods'));
    for (const r of runs) {
      const d = advantage(r, metric);
      if (!Number.isFinite(d)) continue;
      const color = d > 1e-9 ? GREEN : d < -1e-9 ? RED : '#999';
      const radius = 2.5 + Math.min(9, 60 * Math.abs(d));
      const jitter = ((r.seed * 2654435761) % 1000) / 1000 - 0.5; // runs with the same node count side by side
      body.push(
        `<circle cx="${sx(a, r.nodes + 0.6 * jitter).toFixed(1)}" cy="${sy(a, r.pods).toFixed(1)}" r="${radius.toFixed(1)}" fill="${color}" fill-opacity="0.6"><title>seed ${r.seed}: ${r.nodes} nodes, ${r.pods} pods: ${(100 * d).toFixed(1)} pts</title></circle>`,
      );
    }
  });
  const lx = metrics.length * (PANEL_W + M.left + M.right) + 10;
  body.push(legend(lx, M.top + 20, [
    { label: 'criticality-aware better', color: GREEN },
    { label: 'criticality-aware worse', color: RED },
    { label: 'equal', color: '#999' },
  ]));
  body.push(`<text x="${lx}" y="${M.top + 80}" fill="#555">vs the best of LeastAllocated,</text><text x="${lx}" y="${M.top + 94}" fill="#555">MostAllocated, RequestedToCapacityRatio;</text><text x="${lx}" y="${M.top + 108}" fill="#555">dot area ~ difference</text>`);
  return document(width, height, body.join('\n'));
}

/** Grouped bars: rows of values (one group per category, one bar per series), y in 0..1. */
export function groupedBarsSvg(title: string, categories: readonly string[], series: ReadonlyArray<{ label: string; color: string; values: readonly number[] }>, yLabel: string, yMax = 1): string {
  const w = Math.max(PANEL_W, categories.length * (series.length * 16 + 30));
  const a: Axis = { x0: M.left, y0: M.top + 10, w, h: PANEL_H, xTicks: [0, categories.length], yTicks: niceTicks(0, yMax) };
  const body: string[] = [];
  // Axes without numeric x ticks: frame, y grid, titles.
  body.push(axes({ ...a, xTicks: [0, categories.length] }, title, '', yLabel).replace(/<line x1="[\d.]+" y1="[\d.]+" x2="[\d.]+" y2="[\d.]+" stroke="#333"\/>\n<text x="[\d.]+" y="[\d.]+" text-anchor="middle">\d+<\/text>/g, ''));
  const groupW = w / categories.length;
  const barW = Math.min(16, (groupW - 20) / series.length);
  categories.forEach((c, gi) => {
    const gx = a.x0 + gi * groupW + (groupW - barW * series.length) / 2;
    series.forEach((s, si) => {
      const v = s.values[gi]!;
      if (!Number.isFinite(v)) return;
      const y = sy(a, v);
      body.push(`<rect x="${(gx + si * barW).toFixed(1)}" y="${y.toFixed(1)}" width="${(barW - 1).toFixed(1)}" height="${(a.y0 + a.h - y).toFixed(1)}" fill="${s.color}"><title>${escapeXml(`${s.label}, ${c}: ${v.toFixed(3)}`)}</title></rect>`);
    });
    body.push(`<text x="${(a.x0 + (gi + 0.5) * groupW).toFixed(1)}" y="${(a.y0 + a.h + 17).toFixed(1)}" text-anchor="middle">${escapeXml(c)}</text>`);
  });
  body.push(legend(a.x0 + w + 20, M.top + 20, series.map((s) => ({ label: s.label, color: s.color }))));
  return document(M.left + w + 240, PANEL_H + M.top + M.bottom + 20, body.join('\n'));
}

export function acceptanceBarsSvg(runs: readonly RunResult[]): string {
  const rows = placementRows(runs);
  const cats: Array<[string, (r: PlacementRow) => number]> = [
    ['HI', (r) => r.acceptanceHigh],
    ['LOW', (r) => r.acceptanceLow],
    ['NO', (r) => r.acceptanceNone],
    ['all', (r) => r.acceptance],
    ['Ā', (r) => r.meanClusterAssurance],
  ];
  return groupedBarsSvg(
    `Acceptance per criticality and cluster assurance (mean of ${runs.length} runs)`,
    cats.map(([c]) => c),
    rows.map((r) => ({ label: r.policy, color: POLICY_COLORS[r.policy], values: cats.map(([, f]) => f(r)) })),
    'fraction',
  );
}

// --- schedulability ----------------------------------------------------------------------------

export interface SensitivityRow {
  readonly dsCores: number;
  readonly vanilla: number;
  readonly ulysses: number;
  readonly rejectedByDs: number;
  readonly rejectedByBudgetPeriod: number;
  readonly rejectedByBoth: number;
}

export function schedulabilityTable(r: StudyResult): string {
  const n = r.sets.length;
  const bpSure = r.sets.filter((s) => s.bpOverFullCapacity).length;
  const bpFfd = r.sets.filter((s) => s.bpNoPartitionAt100).length;
  const checked = r.dsChecks.length;
  const missed = r.dsChecks.filter((c) => c.missed).length;
  const missedOwn = r.dsChecks.filter((c) => c.missesOwnWorkload > 0).length;
  const scen = r.dsChecks.map((c) => c.scenarios);
  return [
    `| | sets accepted (of ${n}) |`,
    '| --- | --- |',
    `| vanilla Kubernetes (NodeResourcesFit + LeastAllocated, no RT check) | ${r.vanillaAccepted} |`,
    `| Ulysses (extender: deferrable-server RTA, budget/period) | ${r.ulyssesAccepted} |`,
    `| rejected by the hierarchical deferrable-server test | ${r.rejectedByDs} |`,
    `| rejected by the budget/period (EDF) utilization bound | ${r.rejectedByBudgetPeriod} |`,
    `| rejected by both | ${r.rejectedByBoth} |`,
    '',
    `Check of the rejections: ${checked} DS-rejected set(s) simulated (scheduler-plugins/realtime/simulator.ts: the core the failing pod would get, ` +
      `the analysis' critical instant, the co-located servers using what their reservations allow): ${missed} of ${checked} show a deadline miss; ` +
      `${missedOwn} of ${checked} already miss in the simulator's ${scen.length ? `${Math.min(...scen)}-${Math.max(...scen)}` : 0} adversarial scenarios with every pod running only its own task. ` +
      `Budget/period rejections: ${bpSure} of ${r.rejectedByBudgetPeriod} ask for more than the budget/period cores in total (a miss is certain); ` +
      `for ${r.rejectedByBudgetPeriod - bpFfd} of ${r.rejectedByBudgetPeriod} a first-fit-decreasing packing at 100 % per core succeeds, i.e. they are refused by the 0.95 per-core ` +
      `admission bound of SCHED_DEADLINE (with the online worst-fit placement), not certain misses.`,
  ].join('\n');
}

export function sensitivityTable(rows: readonly SensitivityRow[], sets: number): string {
  const lines = [`| DS node cores | vanilla | Ulysses | rejected by DS | by budget/period | by both |`, '| --- | --- | --- | --- | --- | --- |'];
  for (const r of rows) lines.push(`| ${r.dsCores} | ${r.vanilla}/${sets} | ${r.ulysses}/${sets} | ${r.rejectedByDs} | ${r.rejectedByBudgetPeriod} | ${r.rejectedByBoth} |`);
  return lines.join('\n');
}

export function schedulabilityCsv(r: StudyResult): string {
  const cols = ['set', 'high_pods', 'total_utilization', 'vanilla_accepted', 'ulysses_accepted', 'rejected_by_ds', 'rejected_by_budget_period', 'failed_pods', 'bp_over_full_capacity', 'bp_no_partition_at_100'];
  const lines = [cols.join(',')];
  for (const s of r.sets) {
    lines.push([s.index, s.highCount, s.totalUtilization.toFixed(6), s.vanillaAccepted, s.ulyssesAccepted, s.rejectedByDs, s.rejectedByBudgetPeriod, s.failedPods, s.bpOverFullCapacity, s.bpNoPartitionAt100].join(','));
  }
  return `${lines.join('\n')}\n`;
}

export function dsChecksCsv(r: StudyResult): string {
  const lines = ['set,pod,core,servers_on_core,core_utilization,failing_servers,critical_instant_misses,worst_lateness_us,scenarios,misses_own_workload,missed'];
  for (const c of r.dsChecks) lines.push([c.set, c.pod, c.core, c.servers, c.coreUtilization.toFixed(6), c.failingServers, c.criticalInstantMisses, c.worstLatenessUs, c.scenarios, c.missesOwnWorkload, c.missed].join(','));
  return `${lines.join('\n')}\n`;
}

export function schedulabilitySvg(r: StudyResult, sensitivity: readonly SensitivityRow[]): string {
  const n = r.sets.length;
  const cats = sensitivity.map((s) => `${s.dsCores} cores${s.dsCores === r.options.dsCores ? ' *' : ''}`);
  return groupedBarsSvg(
    `Schedulable pod sets (of ${n}) vs DS node size (* = default)`,
    cats,
    [
      { label: 'vanilla accepted', color: '#d62728', values: sensitivity.map((s) => s.vanilla / n) },
      { label: 'Ulysses accepted', color: '#2ca02c', values: sensitivity.map((s) => s.ulysses / n) },
      { label: 'rejected by DS test', color: '#1f77b4', values: sensitivity.map((s) => s.rejectedByDs / n) },
      { label: 'rejected by budget/period', color: '#ff7f0e', values: sensitivity.map((s) => s.rejectedByBudgetPeriod / n) },
    ],
    'fraction of pod sets',
  );
}

// --- outputs -----------------------------------------------------------------------------------

export interface Written {
  readonly files: string[];
  readonly pngMessage?: string;
}

async function writeFigures(dir: string, figures: ReadonlyArray<{ file: string; svg: string }>, files: string[], png = false): Promise<string | undefined> {
  const written = await writeFigureFiles(dir, figures, png);
  files.push(...written.svgs, ...written.pngs);
  return written.pngMessage;
}

export interface ReportContext {
  readonly seed: number;
  readonly command: string;
  /** also a PNG copy of each figure (default: SVG only) */
  readonly png?: boolean;
}

export async function writePlacementOutputs(dir: string, runs: readonly RunResult[], ctx: ReportContext): Promise<Written> {
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  writeFileSync(join(dir, 'placement.csv'), placementCsv(runs));
  writeFileSync(join(dir, 'placement-summary.csv'), summaryCsv(placementRows(runs)));
  files.push(join(dir, 'placement.csv'), join(dir, 'placement-summary.csv'));
  const pngMessage = await writeFigures(dir, [
    { file: 'fig6.7-placement', svg: fig67Svg(runs) },
    { file: 'placement-acceptance', svg: acceptanceBarsSvg(runs) },
  ], files, ctx.png);
  const W = CRITICALITY_AWARE_WEIGHTS;
  const md = [
    '# §6.2 placement simulation',
    '',
    `Seed ${ctx.seed}, ${runs.length} runs (run r uses seed ${ctx.seed} + r); ${Math.min(...runs.map((r) => r.nodes))}-${Math.max(...runs.map((r) => r.nodes))} initial nodes, ` +
      `${Math.min(...runs.map((r) => r.pods))}-${Math.max(...runs.map((r) => r.pods))} pods. Criticality-aware weights ${W.acceptance}/${W.assurance}/${W.residual}.`,
    `Command: \`${ctx.command}\``,
    '',
    'Means over runs (acceptance = placed / arrived; AR and Ā as defined in §6.2, time-averaged):',
    '',
    placementTable(runs),
    '',
    '![Fig 6.7 style](fig6.7-placement.svg)',
    '',
    '![acceptance per criticality](placement-acceptance.svg)',
    '',
  ].join('\n');
  files.push(...writeSection(dir, 'placement.md', md));
  return { files, ...(pngMessage ? { pngMessage } : {}) };
}

/** DIR/<section> and DIR/report.md = every §6.2 section present in DIR (both commands may share DIR). */
function writeSection(dir: string, section: string, md: string): string[] {
  writeFileSync(join(dir, section), md);
  const parts = SECTIONS.filter((f) => existsSync(join(dir, f))).map((f) => readFileSync(join(dir, f), 'utf8'));
  writeFileSync(join(dir, 'report.md'), parts.join('\n'));
  return [join(dir, section), join(dir, 'report.md')];
}
const SECTIONS = ['placement.md', 'schedulability.md'];

function summaryCsv(rows: readonly PlacementRow[]): string {
  const cols = ['policy', 'acceptance', 'acceptance_high', 'acceptance_low', 'acceptance_none', 'mean_acceptance_rate', 'mean_cluster_assurance', 'assurance_high', 'cpu_utilization'] as const;
  const keys: Array<keyof PlacementRow> = ['policy', 'acceptance', 'acceptanceHigh', 'acceptanceLow', 'acceptanceNone', 'meanAcceptanceRate', 'meanClusterAssurance', 'assuranceHigh', 'cpuUtilization'];
  return `${[cols.join(','), ...rows.map((r) => keys.map((k) => (typeof r[k] === 'number' ? (r[k] as number).toFixed(6) : r[k])).join(','))].join('\n')}\n`;
}

export async function writeSchedulabilityOutputs(dir: string, r: StudyResult, sensitivity: readonly SensitivityRow[], ctx: ReportContext): Promise<Written> {
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  writeFileSync(join(dir, 'schedulability.csv'), schedulabilityCsv(r));
  writeFileSync(join(dir, 'schedulability-ds-checks.csv'), dsChecksCsv(r));
  writeFileSync(join(dir, 'schedulability-sensitivity.csv'), `ds_cores,vanilla,ulysses,rejected_by_ds,rejected_by_budget_period,rejected_by_both\n${sensitivity.map((s) => [s.dsCores, s.vanilla, s.ulysses, s.rejectedByDs, s.rejectedByBudgetPeriod, s.rejectedByBoth].join(',')).join('\n')}\n`);
  files.push(join(dir, 'schedulability.csv'), join(dir, 'schedulability-ds-checks.csv'), join(dir, 'schedulability-sensitivity.csv'));
  const pngMessage = await writeFigures(dir, [{ file: 'schedulability', svg: schedulabilitySvg(r, sensitivity) }], files, ctx.png);
  const o = r.options;
  const md = [
    '# §6.2 schedulability study',
    '',
    `Seed ${r.seed}, ${r.sets.length} pod sets; ${o.nonRtNodes} non-RT nodes (${o.nonRtCores} cores), ${o.budgetPeriodNodes} budget/period nodes (${o.budgetPeriodCores} cores), ` +
      `1 deferrable-server node (${o.dsCores} cores); each set: 30 best-effort pods (8-25 %), 30 medium RT pods (8-25 %), 6-12 high RT pods at ${Math.round(100 * o.highTotalUtilization)} % total (randfixedsum).`,
    `Command: \`${ctx.command}\``,
    '',
    schedulabilityTable(r),
    '',
    'Sensitivity to the size of the deferrable-server node (same pod sets):',
    '',
    sensitivityTable(sensitivity, r.sets.length),
    '',
    '![schedulability](schedulability.svg)',
    '',
  ].join('\n');
  files.push(...writeSection(dir, 'schedulability.md', md));
  return { files, ...(pngMessage ? { pngMessage } : {}) };
}

