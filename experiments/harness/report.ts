/**
 * DIR/report.md of the failover experiment: medians with IQR per event and cell, ratios vs
 * configuration 1 in the same run, the critical-path inflation T(load)/T(idle), and the issue's
 * targets (thesis §6.1: config 5 cuts the critical orchestration time and keeps it flat under load).
 */
import { DETECTION_EVENTS, EVENT_LABELS, SERVICE_EVENT, USER_PLANE_EVENTS, STOCK_CONFIG_IDS, UPSTREAM, UPSTREAM_TUNED, cellKey, isStockConfig, compareConfigurations, configKey, configLabel, parseConfigKey, resultEvents, type Cell, type ConfigId, type ConfigKey, type EventName, type RepResult } from './results.ts';
import { SummaryIndex, bootstrapMedianRatio, cellValues, quantile, ratio, type SummaryRow } from './stats.ts';
import { formatOutside, sharedMachine, type RepCpu } from './cpu-window.ts';
import { API_PATH_LABELS, API_PATH_PARTS, criticalApiPath } from './api-trace.ts';

export interface ReportMeta {
  /** report heading (default: the Table 6.1 failover experiment) */
  title?: string;
  /** machine, testbed, how the configurations are switched, ... (one bullet each) */
  notes?: string[];
  /** command that regenerates the report */
  command?: string;
  /** figure files (relative to the report) to embed */
  figures?: Array<{ file: string; caption: string }>;
  /**
   * Events whose inflation T(load)/T(idle) of config 5 is checked against TARGETS.maxInflation
   * (default Prio ready and Prio up; the KWOK scale run: Prio scheduled and Prio in EndpointSlice).
   */
  inflationTargets?: EventName[];
}

export const TARGETS = {
  /** config 5 at the heaviest load: critical time-to-ready and Prio up at least 80% below config 1 */
  criticalReduction: 0.8,
  /** and within 1.15x of the same pod on an idle cluster */
  maxInflation: 1.15,
  /** Last ready with config 5 no more than 10% slower than config 1 */
  maxLastReadySlowdown: 1.1,
};

const s = (v: number | null | undefined, digits = 2) => (v === null || v === undefined ? '–' : v.toFixed(digits));
const x = (v: number | null) => (v === null ? '–' : `${v.toFixed(2)}x`);

function cellsOf(index: SummaryIndex, withIdle = true): Array<{ dn: number; podsPerNode: number }> {
  const out: Array<{ dn: number; podsPerNode: number }> = [];
  for (const dn of index.dns) for (const p of index.podsPerNode) if (withIdle || p > 0) out.push({ dn, podsPerNode: p });
  return out;
}

const header = (cells: Array<{ dn: number; podsPerNode: number }>, first: string) =>
  [`| ${first} | ${cells.map((c) => `DN ${c.dn}, ${c.podsPerNode} pods/node`).join(' | ')} |`, `|---|${cells.map(() => '---:').join('|')}|`].join('\n');

function eventTable(index: SummaryIndex, event: EventName, origin = 'the taint'): string {
  const cells = cellsOf(index);
  const rows = index.configs.map((key) => {
    const vals = cells.map((c) => {
      const r = index.get({ ...c, ...parseConfigKey(key) }, event);
      if (!r) return '';
      const nulls = r.nulls ? ` (${r.nulls}/${r.n} never)` : '';
      return r.median === null ? `never${nulls}` : `${s(r.median)} [${s(r.p25)}–${s(r.p75)}]${nulls}`;
    });
    return `| ${configLabel(parseConfigKey(key))} | ${vals.join(' | ')} |`;
  });
  return [`**${EVENT_LABELS[event]}** (\`${event}\`): median [p25–p75] s after ${origin}`, '', header(cells, 'configuration'), ...rows].join('\n');
}

function ratioTable(index: SummaryIndex, f: (cell: Cell, e: EventName) => number | null, events: EventName[], configs: ConfigKey[], withIdle: boolean): string {
  const cells = cellsOf(index, withIdle);
  const rows: string[] = [];
  for (const e of events) for (const key of configs) rows.push(`| ${EVENT_LABELS[e]}, config ${key} | ${cells.map((c) => x(f({ ...c, ...parseConfigKey(key) }, e))).join(' | ')} |`);
  return [header(cells, 'event, configuration'), ...rows].join('\n');
}

export interface TargetCheck {
  what: string;
  measured: number | null;
  limit: string;
  met: boolean | null;
  /** 90% bootstrap interval of the measured value (bootstrapMedianRatio), when the repetitions were given */
  ci?: [number, number] | null;
  /** the interval reaches across the limit: the run's repetitions cannot tell met from missed */
  inconclusive?: boolean;
}

/**
 * The event that says the critical service answers again: Prio up (the UDP probe), or in scenario 5g,
 * whose UPF answers GTP-U rather than the probe, connection restored.
 */
export function upEvent(index: SummaryIndex): EventName {
  const measured = (e: EventName) => index.rows.some((r) => r.event === e && r.median !== null);
  return !measured('prioUp') && measured('connectionRestored') ? 'connectionRestored' : 'prioUp';
}
/** `events` with Prio up standing for {@link upEvent}. */
const withUp = (index: SummaryIndex, events: readonly EventName[]): EventName[] => events.map((e) => (e === 'prioUp' ? upEvent(index) : e));

/**
 * The issue's targets at the heaviest load of the run (largest DN, then largest pods per node),
 * configuration 5 against `baseline` (1, Ulysses' vanilla mode, or upstream, stock Kubernetes). With
 * the repetitions (`results`), each check also carries the 90% bootstrap interval of its ratio and
 * whether that interval reaches across the limit.
 */
export function checkTargets(
  index: SummaryIndex,
  inflationTargets: readonly EventName[] = ['prioReady', 'prioUp'],
  results?: readonly RepResult[],
  baseline: ConfigId = 1,
): { cell: { dn: number; podsPerNode: number } | undefined; checks: TargetCheck[] } {
  const dn = Math.max(...index.dns);
  const podsPerNode = Math.max(...index.podsPerNode);
  // without the baseline (a configuration-5-only run, e.g. more repetitions for a pool) only the inflation checks
  const withBase = index.configs.includes(String(baseline));
  if (!index.configs.includes('5') || podsPerNode <= 0 || (!withBase && !index.podsPerNode.includes(0))) return { cell: undefined, checks: [] };
  const c5: Cell = { config: 5, dn, podsPerNode };
  const cBase: Cell = { ...c5, config: baseline };
  const idle5: Cell = { ...c5, podsPerNode: 0 };
  const base = isStockConfig(baseline) ? baseline : `config ${baseline}`;
  const vsBase = (e: EventName) => (baseline === 1 ? index.ratioVsVanilla(c5, e) : ratio(index.median(c5, e), index.median(cBase, e)));
  const interval = (num: Cell, den: Cell, e: EventName) => (results ? bootstrapMedianRatio(cellValues(results, num, e), cellValues(results, den, e)) : undefined);
  /** a check of `measured` against `ok`, its interval (if any) inconclusive when its two ends disagree on `ok` */
  const check = (what: string, measured: number | null, limit: string, ok: (v: number) => boolean, ci: [number, number] | null | undefined): TargetCheck => ({
    what,
    measured,
    limit,
    met: measured === null ? null : ok(measured),
    ...(ci !== undefined ? { ci, inconclusive: ci !== null && ok(ci[0]) !== ok(ci[1]) } : {}),
  });
  const checks: TargetCheck[] = [];
  for (const e of withBase ? withUp(index, ['prioReady', 'prioUp']) : []) {
    const r = vsBase(e);
    const ci = interval(c5, cBase, e);
    checks.push(check(`${EVENT_LABELS[e]}: reduction of config 5 vs ${base}`, r === null ? null : 1 - r, `>= ${TARGETS.criticalReduction * 100}%`, (v) => v >= TARGETS.criticalReduction, ci && [1 - ci[1], 1 - ci[0]]));
  }
  for (const e of withUp(index, inflationTargets)) {
    checks.push(check(`${EVENT_LABELS[e]}: config 5 at load / config 5 idle`, index.inflation(c5, e), `<= ${TARGETS.maxInflation}x`, (v) => v <= TARGETS.maxInflation, interval(c5, idle5, e)));
  }
  if (withBase)
    checks.push(check(`Last ready: config 5 / ${base}`, vsBase('lastReady'), `<= ${TARGETS.maxLastReadySlowdown}x`, (v) => v <= TARGETS.maxLastReadySlowdown, interval(c5, cBase, 'lastReady')));
  return { cell: { dn, podsPerNode }, checks };
}

export function renderReport(results: readonly RepResult[], rows: readonly SummaryRow[], meta: ReportMeta = {}): string {
  const index = new SummaryIndex(rows);
  const reps = new Map<string, number>();
  for (const r of results) reps.set(configKey(r), (reps.get(configKey(r)) ?? 0) + 1);
  const out: string[] = [`# ${meta.title ?? 'Failover experiment (thesis §4.3.2, Table 6.1)'}`, ''];
  const frozenNode = results.some((r) => r.failure === 'frozen-node');
  out.push(
    `${results.length} repetitions; configurations ${index.configs.join(', ')}; DN ${index.dns.join(', ')}; pods per destination node ${index.podsPerNode.join(', ')} ` +
      `(0 = idle: the critical pod alone). ` +
      (frozenNode
        ? 'Times in seconds after t = 0, the moment every process of the source node was stopped (failure frozen-node: the harness writes no taint; Detected and Taint are the cluster finding the failure itself).'
        : 'Times in seconds after the NoExecute taint of the source node (t = 0).'),
  );
  for (const n of meta.notes ?? []) out.push(`- ${n}`);
  if (meta.command) out.push('', `Regenerate: \`${meta.command}\``);
  out.push('', '## Configurations (Table 6.1)', '', ...index.configs.map((c) => `- **${c}** ${configLabel(parseConfigKey(c)).slice(c.length + 2)} (${reps.get(c) ?? 0} repetitions)`));

  const upstream = upstreamTable(results, index);
  if (upstream) out.push('', upstream);
  const userPlane = userPlaneTable(results, index);
  if (userPlane) out.push('', userPlane);
  const fidelity = fidelityTable(results, index);
  if (fidelity) out.push('', fidelity);
  const { cell, checks } = checkTargets(index, meta.inflationTargets, results);
  if (cell) {
    out.push('', `## Targets at the heaviest load (DN ${cell.dn}, ${cell.podsPerNode} pods/node${upstream && index.configs.includes('1') ? ', against configuration 1' : ''})`, '', '| target | measured | 90% interval | limit | |', '|---|---:|---:|---:|---|');
    for (const c of checks) {
      const pct = c.what.includes('reduction');
      const v = (m: number) => (pct ? `${(m * 100).toFixed(1)}%` : `${m.toFixed(2)}x`);
      const verdict = c.met === null ? 'n/a' : (c.met ? 'met' : '**missed**') + (c.inconclusive ? ' (inconclusive)' : '');
      out.push(`| ${c.what} | ${c.measured === null ? '–' : v(c.measured)} | ${c.ci ? `${v(c.ci[0])}–${v(c.ci[1])}` : '–'} | ${c.limit} | ${verdict} |`);
    }
    out.push(
      '',
      '90% interval: percentile bootstrap of the ratio of medians (2000 resamples of each cell\'s repetitions, seeded). ' +
        '"inconclusive": the interval reaches across the limit — with this many repetitions the run cannot tell met from missed; more repetitions decide.',
    );
  }

  out.push('', '## Events per configuration and load', '');
  // Prio up only where the UDP probe ran (not in scenario 5g)
  for (const e of resultEvents(results).filter((ev) => ev !== 'prioUp' || upEvent(index) === 'prioUp')) out.push(eventTable(index, e, frozenNode ? 't = 0' : undefined), '');

  const base = index.baselineKey();
  const others = index.configs.filter((c) => c !== base);
  if (base && others.length) {
    out.push(`## Ratios vs configuration ${base} (median / median of config ${base}, same cell, same run)`, '');
    out.push(ratioTable(index, (c, e) => index.ratioVsVanilla(c, e), withUp(index, ['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastReady']), others, true), '');
  }
  if (index.podsPerNode.includes(0) && index.podsPerNode.some((p) => p > 0)) {
    out.push('## Critical-path inflation T(load) / T(idle) (same configuration, idle = 0 pods/node)', '');
    out.push(ratioTable(index, (c, e) => index.inflation(c, e), withUp(index, ['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady']), index.configs, false), '');
  }
  const api = apiPathTable(results);
  if (api) out.push(api, '');
  const trace = nodeTraceTable(results);
  if (trace) out.push(trace, '');
  const cpu = cpuWindowTable(results);
  if (cpu) out.push(cpu, '');
  const idleCpu = idleCpuTable(results);
  if (idleCpu) out.push(idleCpu, '');
  const machine = machineTable(results);
  if (machine) out.push(machine, '');
  const switches = switchTable(results);
  if (switches) out.push(switches, '');
  const metric = recoveryMetricTable(results);
  if (metric) out.push(metric, '');
  const failed = results.filter((r) => r.error);
  if (failed.length) {
    out.push('## Repetitions with missing events', '');
    for (const r of failed) out.push(`- config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: ${r.error}`);
    out.push('');
  }
  if (meta.figures?.length) {
    out.push('## Figures', '');
    for (const f of meta.figures) out.push(`![${f.caption}](${f.file})`, '', `*${f.caption}*`, '');
  }
  return out.join('\n').replace(/\n{3,}/g, '\n\n') + '\n';
}

/** Repetitions per cell, cells ordered by DN, load, configuration. */
function repsByCell(results: readonly RepResult[]): Map<string, RepResult[]> {
  const cells = new Map<string, RepResult[]>();
  for (const r of [...results].sort((a, b) => a.dn - b.dn || a.podsPerNode - b.podsPerNode || compareConfigurations(a, b))) {
    const k = cellKey(r);
    cells.set(k, [...(cells.get(k) ?? []), r]);
  }
  return cells;
}

/** Median of numbers (0 for none). */
const medianNum = (values: number[]): number => (values.length ? quantile([...values].sort((a, b) => a - b), 0.5) : 0);
/** {@link medianNum}, null for no values. */
const medianOrNull = (values: number[]): number | null => (values.length ? medianNum(values) : null);

/** Median of the numbers among `values`, formatted; "–" when there is none. */
function med(values: Array<number | null | undefined>, digits = 2): string {
  const v = values.filter((x): x is number => typeof x === 'number');
  return v.length ? medianNum(v).toFixed(digits) : '–';
}

/**
 * Who used the CPUs in the first ms after the taint (results' `cpuWindow`, profile cpuWindowMs):
 * one column per cell, one row per process group (the `rows` largest by their largest median, then
 * per-node totals), medians of CPU milliseconds over the cell's repetitions (0 where a repetition
 * did not see the group). Shows what a load adds on the machine while the critical pod starts.
 */
export function cpuWindowTable(results: readonly RepResult[], rows = 14): string | undefined {
  const measured = results.filter((r) => r.cpuWindow);
  if (!measured.length) return undefined;
  const cells = [...repsByCell(measured).values()];
  const medianMs = (reps: RepResult[], pick: (g: Record<string, number>) => number) => medianNum(reps.map((r) => pick(r.cpuWindow!.byGroup)));
  const groups = [...new Set(measured.flatMap((r) => Object.keys(r.cpuWindow!.byGroup)))];
  const largest = (g: string) => Math.max(...cells.map((reps) => medianMs(reps, (b) => b[g] ?? 0)));
  const top = groups.map((g) => [g, largest(g)] as const).filter(([, ms]) => ms > 0).sort((a, b) => b[1] - a[1]).slice(0, rows).map(([g]) => g);
  const nodes = [...new Set(groups.map((g) => /^(real-\d+)\//.exec(g)?.[1]).filter((n): n is string => Boolean(n)))].sort();
  const nodeTotal = (n: string) => (b: Record<string, number>) => Object.entries(b).filter(([g]) => g.startsWith(`${n}/`)).reduce((a, [, ms]) => a + ms, 0);
  const windows = [...new Set(measured.map((r) => r.cpuWindow!.windowMs))].join(', ');
  const row = (label: string, pick: (g: Record<string, number>) => number) => `| ${label} | ${cells.map((reps) => medianMs(reps, pick).toFixed(0)).join(' | ')} |`;
  return [
    `## CPU in the first ${windows} ms after the taint (by process group)`,
    '',
    'Medians over the repetitions of each cell, CPU milliseconds (/proc snapshots right before the taint and at the end of the window; short-lived children such as runc and CNI plugins count in their parent). ' +
      '`real-N/...` are a node\'s processes (kubelet, kubelet-shim, containerd, containerd-shim, the containers), `harness` is this process (in-process controller manager, watches, UDP client).',
    '',
    `| process group | ${cells.map((reps) => `config ${configKey(reps[0]!)}, DN ${reps[0]!.dn}, ${reps[0]!.podsPerNode} pods/node (n=${reps.length})`).join(' | ')} |`,
    `|---|${cells.map(() => '---:').join('|')}|`,
    `| machine busy (all CPUs) | ${cells.map((reps) => med(reps.map((r) => r.cpuWindow!.busyCpuS * 1000), 0)).join(' | ')} |`,
    ...top.map((g) => row(g, (b) => b[g] ?? 0)),
    ...nodes.map((n) => row(`${n} (all)`, nodeTotal(n))),
    ...harnessProfileRows(cells),
  ].join('\n');
}

/** Process groups that place and control pods: kcm and kube-scheduler in every configuration, Ulysses' components beside them in its configurations. */
export const POD_CONTROL_GROUPS = ['kube-controller', 'kube-scheduler', 'controller-manager', 'extender', 'kubelet-shim', 'kcm-handback'] as const;
/** Stock's pod control: a Ulysses process still running in `upstream` (the testbed keeps the extender's Deployment) is off its path. */
const STOCK_POD_CONTROL_GROUPS = ['kube-controller', 'kube-scheduler'] as const;
const podControlGroups = (r: RepResult): readonly string[] => (String(r.config).startsWith('upstream') ? STOCK_POD_CONTROL_GROUPS : POD_CONTROL_GROUPS);
/** The rest of the control plane and the nodes' own processes, shown beside them (what Ulysses' watches and writes cost the others). */
const IDLE_OTHER_GROUPS = ['kube-apiserver', 'etcd', 'kubelet', 'containerd'] as const;

/**
 * The idle cluster's CPU per component (results' `quietCpu`, over the quiet spell before t = 0;
 * issue 40: Ulysses' idle CPU against kcm + kube-scheduler's): medians per cell of % of one CPU,
 * the pod-control sum ({@link POD_CONTROL_GROUPS}) and its ratio to stock's (`upstream`) at the same
 * DN and load.
 */
export function idleCpuTable(results: readonly RepResult[]): string | undefined {
  const measured = results.filter((r) => r.quietCpu);
  if (!measured.length) return undefined;
  const cells = [...repsByCell(measured).values()];
  const pct = (r: RepResult, groups: readonly string[]) => (groups.reduce((a, g) => a + (r.quietCpu!.byGroup[g] ?? 0), 0) / r.quietCpu!.windowMs) * 100;
  const medPct = (reps: RepResult[], groups: readonly string[]) => medianNum(reps.map((r) => pct(r, groups)));
  const row = (label: string, groups: readonly string[]) => `| ${label} | ${cells.map((reps) => medPct(reps, groups).toFixed(2)).join(' | ')} |`;
  const podControl = (reps: RepResult[]) => medPct(reps, podControlGroups(reps[0]!));
  const stock = (reps: RepResult[]) => cells.find((c) => c[0]!.config === 'upstream' && c[0]!.dn === reps[0]!.dn && c[0]!.podsPerNode === reps[0]!.podsPerNode);
  const ratio = (reps: RepResult[]) => {
    const base = stock(reps);
    const b = base && podControl(base);
    return b ? `${(podControl(reps) / b).toFixed(2)}x` : '–';
  };
  const seconds = [...new Set(measured.map((r) => Math.round(r.quietCpu!.windowMs / 1000)))].join(', ');
  return [
    `## CPU of the idle cluster (the ${seconds} s quiet spell before t = 0, by component)`,
    '',
    'Medians over the repetitions of each cell, % of one CPU (/proc snapshots at the start and the end of the quiet spell; every process of a component summed, e.g. both controller-manager replicas and every node\'s kubelet-shim). ' +
      `Pod control = ${POD_CONTROL_GROUPS.join(' + ')}: what places and controls pods in each configuration (kcm runs without the failover-path controllers beside Ulysses); in \`upstream\` ${STOCK_POD_CONTROL_GROUPS.join(' + ')} only (a Ulysses process the testbed keeps running there is off stock's path).`,
    '',
    `| process group | ${cells.map((reps) => `config ${configKey(reps[0]!)}, DN ${reps[0]!.dn}, ${reps[0]!.podsPerNode} pods/node (n=${reps.length})`).join(' | ')} |`,
    `|---|${cells.map(() => '---:').join('|')}|`,
    ...[...POD_CONTROL_GROUPS, ...IDLE_OTHER_GROUPS].map((g) => row(g, [g])),
    `| **pod control (sum)** | ${cells.map((reps) => podControl(reps).toFixed(2)).join(' | ')} |`,
    `| pod control : upstream's | ${cells.map(ratio).join(' | ')} |`,
    `| machine busy (all CPUs) | ${cells.map((reps) => medianNum(reps.map((r) => (r.quietCpu!.busyCpuS * 1e5) / r.quietCpu!.windowMs)).toFixed(2)).join(' | ')} |`,
  ].join('\n');
}

/**
 * The machine from the taint to each repetition's last event (results' `repCpu`, local testbed):
 * medians per cell of its busy, stolen, testbed's and everyone else's CPU-seconds, and the
 * repetitions that shared the CPUs with other work ({@link sharedMachine}) — their figures are not
 * the configuration's alone.
 */
export function machineTable(results: readonly RepResult[]): string | undefined {
  const audited = results.filter((r) => r.repCpu);
  if (!audited.length) return undefined;
  const rows = [...repsByCell(audited).values()].map((reps) => {
    const c = (f: (x: RepCpu) => number) => med(reps.map((r) => f(r.repCpu!)));
    const maxOutside = Math.max(...reps.map((r) => r.repCpu!.outsideCpuS));
    return `| ${configLabel(reps[0]!)} | ${reps[0]!.dn} | ${reps[0]!.podsPerNode} | ${reps.length} | ${c((x) => x.seconds)} | ${c((x) => x.busyCpuS)} | ${c((x) => x.stealCpuS)} | ${c((x) => x.testbedCpuS)} | ${c((x) => x.outsideCpuS)} / ${maxOutside.toFixed(2)} | ${reps.filter((r) => sharedMachine(r.repCpu!)).length} |`;
  });
  const shared = audited.filter((r) => sharedMachine(r.repCpu!));
  const repeated = audited.filter((r) => r.sharedRepeats);
  return [
    '## The machine during the repetitions (taint to last event)',
    '',
    'Medians, CPU-seconds (/proc at the taint and at the last event): the machine busy on all CPUs, stolen by the hypervisor, used by the testbed (control plane, nodes, harness), and used by anything else (median / max). ' +
      'A repetition shares the machine when the rest used more than 1% of a CPU over it (at least 0.1 CPU-s).',
    '',
    '| configuration | DN | pods/node | n | seconds | busy | steal | testbed | outside (median / max) | shared |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
    '',
    shared.length
      ? `**${shared.length} of ${audited.length} repetitions shared the machine** (their events include other work's CPU): ${shared.map((r) => `config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: ${r.repCpu!.outsideCpuS.toFixed(2)} CPU-s (${formatOutside(r.repCpu!)})`).join('; ')}.`
      : `No repetition shared the machine: outside the testbed at most ${Math.max(...audited.map((r) => r.repCpu!.outsideCpuS)).toFixed(2)} CPU-s per repetition.`,
    ...(repeated.length ? ['', `${repeated.length} repetition(s) were run again because other work shared the machine (profile repeatShared; the recorded run is the last): ${repeated.map((r) => `config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep} (${r.sharedRepeats}x)`).join('; ')}.`] : []),
  ].join('\n');
}

/** With the profile's cpuWindowProfile: the harness' self time per code origin, medians per cell ("–": no profiled repetition). */
function harnessProfileRows(cells: RepResult[][], rows = 8): string[] {
  const profiles = cells.map((reps) => reps.flatMap((r) => (r.cpuWindow?.harnessProfile ? [r.cpuWindow.harnessProfile.byPackage] : [])));
  const origins = [...new Set(profiles.flat().flatMap((p) => Object.keys(p)))];
  if (!origins.length) return [];
  const medianOf = (ps: Array<Record<string, number>>, o: string) => medianNum(ps.map((p) => p[o] ?? 0));
  const top = origins.map((o) => [o, Math.max(...profiles.map((ps) => medianOf(ps, o)))] as const).sort((a, b) => b[1] - a[1]).slice(0, rows);
  return top.map(([o]) => `| harness: ${o} (profile) | ${profiles.map((ps) => (ps.length ? medianOf(ps, o).toFixed(0) : '–')).join(' | ')} |`);
}

/**
 * The critical pod's way to "scheduled" through the API (results' `apiTrace`, the local testbed's
 * audit log): one column per cell, one row per part (api-trace.ts criticalApiPath), medians in ms
 * over the cell's repetitions that have the part. Shows whether a load inflates the apiserver's
 * requests or the work between them.
 */
export function apiPathTable(results: readonly RepResult[]): string | undefined {
  const traced = results.filter((r) => r.apiTrace?.length);
  if (!traced.length) return undefined;
  const byCell = repsByCell(traced);
  const cells = [...byCell.values()];
  const scheduledMs = (r: RepResult) => (r.events.prioScheduled === null ? null : r.events.prioScheduled * 1000);
  const paths = cells.map((reps) => reps.map((r) => criticalApiPath(r.apiTrace!, scheduledMs(r))));
  const head = cells.map((reps) => `config ${configKey(reps[0]!)}, DN ${reps[0]!.dn}, ${reps[0]!.podsPerNode} pods/node (n=${reps.length})`);
  const rows = API_PATH_PARTS.map((part) => `| ${API_PATH_LABELS[part]} | ${paths.map((ps) => med(ps.map((p) => p[part]), 1)).join(' | ')} |`);
  const sched = `| **Prio scheduled** (watch) | ${cells.map((reps) => med(reps.map(scheduledMs), 1)).join(' | ')} |`;
  // the failure as the apiserver took it in (the harness' taint PATCH of the critical pod's source
  // returned), and the critical path after it: the part of Prio scheduled that is ours
  const afterTaint = (r: RepResult) => {
    const s = scheduledMs(r);
    return s === null || r.criticalTaintWrittenMs === undefined ? null : s - r.criticalTaintWrittenMs;
  };
  const hasWritten = traced.some((r) => r.criticalTaintWrittenMs !== undefined);
  const written = hasWritten
    ? [
        `| taint → critical source's taint written (harness PATCH returned) | ${cells.map((reps) => med(reps.map((r) => r.criticalTaintWrittenMs), 1)).join(' | ')} |`,
      ]
    : [];
  const after = hasWritten ? [`| **Prio scheduled after the source's taint was written** | ${cells.map((reps) => med(reps.map(afterTaint), 1)).join(' | ')} |`] : [];
  const ratios = hasWritten
    ? cells.flatMap((reps) => {
        const r0 = reps[0]!;
        const idle = r0.podsPerNode > 0 ? byCell.get(cellKey({ ...r0, podsPerNode: 0 })) : undefined;
        if (!idle) return [];
        const values = (c: RepResult[]) => c.map(afterTaint).filter((x): x is number => x !== null);
        const [a, b] = [values(reps), values(idle)];
        if (!a.length || !b.length) return [];
        const ci = bootstrapMedianRatio(a, b);
        return [
          `- Prio scheduled after the source's taint was written, config ${configKey(r0)}, DN ${r0.dn}, ${r0.podsPerNode} pods/node vs idle: ` +
            `**${(medianNum(a) / medianNum(b)).toFixed(2)}x**${ci ? ` (90% interval ${ci[0].toFixed(2)}-${ci[1].toFixed(2)}x)` : ''} (not a target: t = 0 stays the first taint PATCH sent; this leaves out the apiserver taking the failure in, which is the same work at any load)`,
        ];
      })
    : [];
  return [
    '## The critical pod through the API (apiserver audit log)',
    '',
    "Medians, ms: each write request's time in the apiserver (received to response complete) and the gaps between them " +
      "(watch delivery plus the next component's own work): taint eviction's DisruptionTarget status patch and delete (controller manager), " +
      "the replacement's creation (ReplicaSet controller), its binding (kube-scheduler), the harness' watch seeing it bound. " +
      'Parts are medians of their own, so they need not add up to the Prio scheduled median.',
    '',
    `| part | ${head.join(' | ')} |`,
    `|---|${head.map(() => '---:').join('|')}|`,
    ...written,
    ...rows,
    sched,
    ...after,
    ...(ratios.length ? ['', ...ratios] : []),
  ].join('\n');
}

/**
 * The critical pod's way through its node, from the kubelet-shim's log (results' `prioNode`, local
 * testbed only): medians per cell of each step, seconds after the taint, and the low-priority
 * sandboxes the runtime was creating alongside. Shows which part of the critical path a load inflates.
 */
export function nodeTraceTable(results: readonly RepResult[]): string | undefined {
  const traced = results.filter((r) => r.prioNode);
  if (!traced.length) return undefined;
  const cells = repsByCell(traced);
  const rows = [...cells.values()].map((reps) => {
    const r0 = reps[0]!;
    const t = (f: (r: RepResult) => number | null | undefined) => med(reps.map(f));
    return `| ${configLabel(r0)} | ${r0.dn} | ${r0.podsPerNode} | ${reps.length} | ${t((r) => r.events.prioScheduled)} | ${t((r) => r.prioNode!.sandboxArrived)} | ${t((r) => r.prioNode!.sandboxDone)} | ${t((r) => r.prioNode!.containerStarted)} | ${t((r) => r.events.prioReady)} | ${med(reps.map((r) => r.prioNode!.lowsInRuntime), 1)} | ${med(reps.map((r) => r.prioNode!.lowsForwardedBefore), 1)} | ${med(reps.map((r) => r.prioNode!.lowsForwardedDuring), 1)} |`;
  });
  return [
    '## The critical pod on its node (kubelet-shim log)',
    '',
    'Medians, seconds after the taint: bound to the node (watch), its RunPodSandbox reaching the shim, the sandbox created, its first container started (shim), Ready (watch); ' +
      'low-priority sandboxes still being created by the runtime when the critical one was forwarded, forwarded before it, and forwarded while it was between sandbox and first container start.',
    '',
    '| configuration | DN | pods/node | n | scheduled | sandbox requested | sandbox created | container started | Ready | lows in runtime | lows before | lows during |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows,
  ].join('\n');
}

/**
 * The few lines a person reads first: at the run's heaviest cell, the critical pod's and the last
 * pod's medians for the baseline and configuration 5 with their ratio, then each target check. The
 * baseline is stock Kubernetes (upstream) when the run has it, else configuration 1. The full report
 * stays in report.md.
 */
export function renderVerdict(results: readonly RepResult[], rows: readonly SummaryRow[]): string {
  const index = new SummaryIndex(rows);
  // stock defaults first; stock tuned for node failure (upstream-tuned) beside them when the run has both
  const stock = STOCK_CONFIG_IDS.filter((c) => index.configs.includes(c));
  const baselines: ConfigId[] = stock.length ? stock : [1];
  const { cell } = checkTargets(index, ['prioReady', 'prioUp'], results, baselines[0]);
  if (!cell) return 'verdict: the run has no loaded cell with configuration 5 to judge';
  const reps = results.filter((r) => r.dn === cell.dn && r.podsPerNode === cell.podsPerNode && String(r.config) === '5').length;
  const sec = (v: number | null) => (v === null ? '–' : `${s(v)} s`);
  const names: Record<string, string> = { [UPSTREAM]: 'stock (upstream)', [UPSTREAM_TUNED]: 'tuned (upstream-tuned)', 1: 'vanilla (1)' };
  const what = stock.length ? ', Ulysses vs stock Kubernetes' : '';
  const out = [`verdict at DN ${cell.dn}, ${cell.podsPerNode} pods per node${what} (${reps} repetitions of configuration 5; medians):`];
  baselines.forEach((baseline, i) => {
    const { checks } = checkTargets(index, i === 0 ? ['prioReady', 'prioUp'] : [], results, baseline);
    for (const e of withUp(index, ['prioReady', 'prioUp', 'lastReady'])) {
      const c5 = index.median({ config: 5, ...cell }, e);
      const cb = index.median({ config: baseline, ...cell }, e);
      out.push(`  ${EVENT_LABELS[e].padEnd(12)} ${names[String(baseline)]} ${sec(cb).padStart(8)}   Ulysses (5) ${sec(c5).padStart(8)}   ${x(ratio(c5, cb))}`);
    }
    for (const c of checks) {
      const v = c.measured === null ? '–' : c.limit.endsWith('%') ? `${(c.measured * 100).toFixed(0)}%` : `${c.measured.toFixed(2)}x`;
      const verdict = c.met === null ? 'no data' : c.inconclusive ? 'inconclusive' : c.met ? 'met' : 'missed';
      out.push(`  [${verdict}] ${c.what}: ${v} (target ${c.limit})`);
    }
  });
  return out.join('\n');
}

/**
 * The controller manager's own recovery measurement (ulysses_critical_recovery_seconds) against this
 * harness' Prio in EndpointSlice, per configuration: they must agree within 50 ms (issue 24).
 */
export function recoveryMetricTable(results: readonly RepResult[]): string | undefined {
  const withMetric = results.filter((r) => r.recoveryMetricS !== undefined);
  if (!withMetric.length) return undefined;
  const byConfig = new Map<string, RepResult[]>();
  for (const r of withMetric) byConfig.set(configKey(r), [...(byConfig.get(configKey(r)) ?? []), r]);
  const lines = [
    '## Recovery metric of the controller manager vs Prio in EndpointSlice',
    '',
    'ulysses_critical_recovery_seconds (taint observed by the controller manager -> replacement Ready and in the EndpointSlice) against this harness\' watch (taint PATCH sent -> in the EndpointSlice); difference = harness - metric.',
    '',
    '| config | compared | within 50 ms | median difference (ms) | max abs difference (ms) | no single observation |',
    '|---|---:|---:|---:|---:|---:|',
  ];
  for (const [c, rs] of [...byConfig].sort(([a], [b]) => a.localeCompare(b))) {
    const d = rs.map((r) => r.recoveryMetricDiffMs).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
    const median = medianOrNull(d);
    const maxAbs = d.length ? Math.max(...d.map(Math.abs)) : null;
    lines.push(`| ${c} | ${d.length} | ${d.filter((x) => Math.abs(x) <= 50).length} | ${median === null ? '–' : median.toFixed(1)} | ${maxAbs === null ? '–' : maxAbs.toFixed(1)} | ${rs.filter((r) => r.recoveryMetricS === null).length} |`);
  }
  return lines.join('\n');
}

/** Scenario 5g (issue 41): connection restored no later than this after the UPF pod is Ready, median over repetitions. */
export const MAX_RESTORED_AFTER_READY_S = 0.2;

/**
 * Scenario 5g: per configuration and cell, the median of connection restored − UPF ready (each
 * repetition's own difference: what the user plane adds once Kubernetes has the pod Ready) against
 * its limit, and the median of PFCP association − UPF ready.
 */
export function userPlaneTable(results: readonly RepResult[], index: SummaryIndex): string | undefined {
  if (!results.some((r) => r.events.connectionRestored !== undefined)) return undefined;
  const lines = [
    '## User plane after the UPF pod is Ready (scenario 5g)',
    '',
    `Medians over repetitions of each one's own difference, seconds. Target: connection restored within ${MAX_RESTORED_AFTER_READY_S} s of UPF ready.`,
    '',
    '| DN, pods/node | configuration | n | PFCP association − UPF ready | connection restored − UPF ready | |',
    '|---|---|---:|---:|---:|---|',
  ];
  for (const c of cellsOf(index))
    for (const k of index.configs) {
      const cell = { ...c, ...parseConfigKey(k) };
      const rs = results.filter((r) => cellKey(r) === cellKey(cell));
      const diff = (e: EventName) => rs.flatMap((r) => (r.events[e] != null && r.events.prioReady != null ? [r.events[e]! - r.events.prioReady] : []));
      const restored = medianOrNull(diff('connectionRestored'));
      const verdict = restored === null ? 'n/a' : restored <= MAX_RESTORED_AFTER_READY_S ? 'met' : '**missed**';
      if (rs.length) lines.push(`| DN ${c.dn}, ${c.podsPerNode} | ${k} | ${diff('connectionRestored').length} | ${s(medianOrNull(diff('upfAssociation')), 3)} | ${s(restored, 3)} | ${verdict} |`);
    }
  return lines.join('\n');
}

/** Configuration 1 differs from upstream by more than this on Prio ready or Last ready: it is not stock Kubernetes. */
export const FIDELITY_LIMIT = 0.15;

/** Events of the table against upstream (Prio up through the ClusterIP where it was measured). */
function upstreamEvents(index: SummaryIndex): EventName[] {
  const withService = index.rows.some((r) => r.event === SERVICE_EVENT && r.median !== null);
  // failure frozen-node: how long the cluster took to find the failure comes first
  const detection = DETECTION_EVENTS.filter((e) => index.rows.some((r) => r.event === e));
  // scenario 5g: the user plane's protocol events after the pod's
  const userPlane = USER_PLANE_EVENTS.filter((e) => index.rows.some((r) => r.event === e && r.median !== null));
  const probed = index.rows.some((r) => r.event === 'prioUp' && r.median !== null);
  return [...detection, 'prioScheduled', 'prioReady', ...(probed ? ['prioUp'] : []), ...(withService ? [SERVICE_EVENT] : []), 'prioEndpointReady', ...userPlane, 'lastReady'] as EventName[];
}

const ci = (v: [number, number] | null | undefined) => (v ? `${v[0].toFixed(2)}–${v[1].toFixed(2)}x` : '–');

/**
 * The headline of a run with configuration `upstream` (stock Kubernetes, kubeadm or local testbed)
 * and/or `upstream-tuned` (stock Kubernetes tuned for node failure): per cell and event the medians
 * of those, 1 and 5, the ratio 5 : each of them and its 90% bootstrap interval; then the issue's
 * targets against each of them at the heaviest load.
 */
export function upstreamTable(results: readonly RepResult[], index: SummaryIndex): string | undefined {
  const baselines = STOCK_CONFIG_IDS.filter((c) => index.configs.includes(c));
  if (!baselines.length) return undefined;
  const shown = [...baselines, '1', '5'].filter((c) => index.configs.includes(c));
  const has5 = index.configs.includes('5');
  const name = (c: string) => (isStockConfig(c) ? c : `config ${c}`);
  const lines = [
    `## Against stock Kubernetes (configuration${baselines.length > 1 ? 's' : ''} ${baselines.join(', ')})`,
    '',
    `Medians in seconds after ${results.some((r) => r.failure === 'frozen-node') ? 't = 0 (the source node stopped)' : 'the taint'} (n = repetitions per cell); ${baselines.map((b) => `ratio 5 : ${b}`).join(', ')} with its 90% interval (percentile bootstrap of the ratio of medians, 2000 resamples).`,
    '',
    `| DN, pods/node | event | ${shown.map(name).join(' | ')} | ${baselines.map((b) => `5 : ${b} | 90% interval`).join(' | ')} |`,
    `|---|---|${shown.map(() => '---:').join('|')}|${baselines.map(() => '---:|---:').join('|')}|`,
  ];
  for (const c of cellsOf(index)) {
    const n = (k: string) => index.get({ ...c, ...parseConfigKey(k) }, 'prioReady')?.n ?? 0;
    for (const e of upstreamEvents(index)) {
      const five: Cell = { ...c, config: 5 };
      const vs = baselines.map((b) => {
        const up: Cell = { ...c, config: b };
        const r = has5 ? ratio(index.median(five, e), index.median(up, e)) : null;
        const interval = has5 ? bootstrapMedianRatio(cellValues(results, five, e), cellValues(results, up, e)) : null;
        return `${x(r)} | ${ci(interval)}`;
      });
      lines.push(`| DN ${c.dn}, ${c.podsPerNode} (n=${shown.map(n).join('/')}) | ${EVENT_LABELS[e]} | ${shown.map((k) => s(index.median({ ...c, ...parseConfigKey(k) }, e))).join(' | ')} | ${vs.join(' | ')} |`);
    }
  }
  const podsPerNode = Math.max(...index.podsPerNode);
  if (has5) {
    const idle = podsPerNode > 0 && index.podsPerNode.includes(0);
    baselines.forEach((b, i) => {
      const withIdle = idle && i === 0;
      lines.push('', `Targets against ${b} at ${podsPerNode} pods/node, per DN${withIdle ? '; and config 5 at that load against config 5 idle (0 pods/node)' : ''}:`, '', '| DN | target | measured | 90% interval | limit | |', '|---|---|---:|---:|---:|---|');
      for (const dn of index.dns) {
        const five: Cell = { config: 5, dn, podsPerNode };
        const up: Cell = { config: b, dn, podsPerNode };
        const idle5: Cell = { ...five, podsPerNode: 0 };
        const row = (what: string, measured: number | null, interval: [number, number] | null, limit: string, ok: (v: number) => boolean, pct: boolean) => {
          const v = (m: number) => (pct ? `${(m * 100).toFixed(1)}%` : `${m.toFixed(2)}x`);
          const verdict = measured === null ? 'n/a' : (ok(measured) ? 'met' : '**missed**') + (interval && ok(interval[0]) !== ok(interval[1]) ? ' (inconclusive)' : '');
          lines.push(`| ${dn} | ${what} | ${measured === null ? '–' : v(measured)} | ${interval ? `${v(interval[0])}–${v(interval[1])}` : '–'} | ${limit} | ${verdict} |`);
        };
        for (const e of [...withUp(index, ['prioReady', 'prioUp']), ...upstreamEvents(index).filter((x) => x === SERVICE_EVENT)]) {
          const r = ratio(index.median(five, e), index.median(up, e));
          const iv = bootstrapMedianRatio(cellValues(results, five, e), cellValues(results, up, e));
          row(`${EVENT_LABELS[e]}: reduction of config 5 vs ${b}`, r === null ? null : 1 - r, iv && [1 - iv[1], 1 - iv[0]], `>= ${TARGETS.criticalReduction * 100}%`, (v) => v >= TARGETS.criticalReduction, true);
        }
        row(`Last ready: config 5 / ${b}`, ratio(index.median(five, 'lastReady'), index.median(up, 'lastReady')), bootstrapMedianRatio(cellValues(results, five, 'lastReady'), cellValues(results, up, 'lastReady')), `<= ${TARGETS.maxLastReadySlowdown}x`, (v) => v <= TARGETS.maxLastReadySlowdown, false);
        if (withIdle)
          for (const e of withUp(index, ['prioReady', 'prioUp']))
            row(`${EVENT_LABELS[e]}: config 5 at load / config 5 idle`, index.inflation(five, e), bootstrapMedianRatio(cellValues(results, five, e), cellValues(results, idle5, e)), `<= ${TARGETS.maxInflation}x`, (v) => v <= TARGETS.maxInflation, false);
      }
    });
  }
  return lines.join('\n');
}

/**
 * How faithful configuration 1 (Ulysses' vanilla mode, which imitates kube-controller-manager) is to
 * stock Kubernetes: per cell and event, the medians of upstream and 1, their ratio and its 90%
 * interval; more than 15% apart on Prio ready or Last ready in some cell and the report says that
 * configuration 1 is not stock Kubernetes.
 */
export function fidelityTable(results: readonly RepResult[], index: SummaryIndex): string | undefined {
  if (!index.configs.includes(UPSTREAM) || !index.configs.includes('1')) return undefined;
  const lines = [
    '## Fidelity: configuration 1 (vanilla mode) against upstream',
    '',
    '| DN, pods/node | event | upstream | config 1 | 1 : upstream | 90% interval |',
    '|---|---|---:|---:|---:|---:|',
  ];
  const off: string[] = [];
  const unsure: string[] = [];
  const within = (v: number) => Math.abs(v - 1) <= FIDELITY_LIMIT;
  for (const c of cellsOf(index)) {
    for (const e of upstreamEvents(index).concat(['lastScheduled'])) {
      const up: Cell = { ...c, config: UPSTREAM };
      const one: Cell = { ...c, config: 1 };
      const r = ratio(index.median(one, e), index.median(up, e));
      const interval = bootstrapMedianRatio(cellValues(results, one, e), cellValues(results, up, e));
      lines.push(`| DN ${c.dn}, ${c.podsPerNode} | ${EVENT_LABELS[e]} | ${s(index.median(up, e))} | ${s(index.median(one, e))} | ${x(r)} | ${ci(interval)} |`);
      if ((e !== 'prioReady' && e !== 'lastReady') || r === null) continue;
      if (!within(r)) off.push(`${EVENT_LABELS[e]} at DN ${c.dn}, ${c.podsPerNode} pods/node: ${x(r)}`);
      // the interval reaches past a bound the median is on the other side of
      if (interval && (within(interval[0]) !== within(r) || within(interval[1]) !== within(r))) unsure.push(`${EVENT_LABELS[e]} at DN ${c.dn}, ${c.podsPerNode} pods/node (${ci(interval)})`);
    }
  }
  lines.push(
    '',
    off.length
      ? `**Configuration 1 is not stock Kubernetes**: it differs from upstream by more than ${FIDELITY_LIMIT * 100}% on ${off.join('; ')}. Comparisons with stock Kubernetes must name configuration upstream, not configuration 1.`
      : `Configuration 1 agrees with upstream within ${FIDELITY_LIMIT * 100}% on Prio ready and Last ready in every cell (medians).`,
  );
  if (unsure.length) lines.push('', `Inconclusive: the 90% interval of ${unsure.join('; ')} reaches across ±${FIDELITY_LIMIT * 100}%; more repetitions decide.`);
  return lines.join('\n');
}

/** How long the switches between the families (upstream, upstream-tuned, Ulysses) took (results' configSwitch). */
export function switchTable(results: readonly RepResult[]): string | undefined {
  const sw = results.filter((r) => r.configSwitch).map((r) => r.configSwitch!);
  if (!sw.length) return undefined;
  const lines = [
    '## Switches between upstream and Ulysses',
    '',
    "Once before each repetition that changes family: on kubeadm the manifests/install.ts steps (install; uninstall keeping the objects), on the local testbed kube-controller-manager and every kubelet restarted and the in-process controller manager stopped or started; to or from upstream-tuned also its settings (kcm's node monitor, every kubelet's heartbeat, each restarted).",
    '',
    '| to | switches | median s | min s | max s |',
    '|---|---:|---:|---:|---:|',
  ];
  for (const to of [...new Set(sw.map((w) => w.to))].sort()) {
    const v = sw.filter((w) => w.to === to).map((w) => w.seconds);
    lines.push(`| ${to} | ${v.length} | ${med(v, 1)} | ${Math.min(...v).toFixed(1)} | ${Math.max(...v).toFixed(1)} |`);
  }
  return lines.join('\n');
}
