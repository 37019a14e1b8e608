/**
 * Statistics of the failover experiment: quantiles per event and cell (DIR/summary.csv), ratios vs
 * configuration 1 and the critical-path inflation T(load)/T(idle) (thesis §6.1: medians with IQR).
 */
import { prng } from '../../core/prng.ts';
import { cellKey, compareConfigurations, configKey, parseConfigKey, resultEvents, type Cell, type ConfigKey, type EventName, type RepResult } from './results.ts';

/** Quantile of sorted values, linear interpolation between closest ranks (R type 7, numpy default). */
export function quantile(sorted: ArrayLike<number>, q: number): number {
  if (!sorted.length) return Number.NaN;
  if (q <= 0) return sorted[0]!;
  if (q >= 1) return sorted[sorted.length - 1]!;
  const h = (sorted.length - 1) * q;
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, sorted.length - 1);
  return sorted[lo]! + (h - lo) * (sorted[hi]! - sorted[lo]!);
}

export interface SummaryRow extends Cell {
  event: EventName;
  /** repetitions in the cell, and how many of them never saw the event */
  n: number;
  nulls: number;
  median: number | null;
  p25: number | null;
  p75: number | null;
  p90: number | null;
}

export function summarize(results: readonly RepResult[]): SummaryRow[] {
  const cells = new Map<string, { cell: Cell; reps: RepResult[] }>();
  for (const r of results) {
    const k = cellKey(r);
    if (!cells.has(k)) cells.set(k, { cell: { config: r.config, ...(r.shimPolicy ? { shimPolicy: r.shimPolicy } : {}), dn: r.dn, podsPerNode: r.podsPerNode }, reps: [] });
    cells.get(k)!.reps.push(r);
  }
  const rows: SummaryRow[] = [];
  const ordered = [...cells.values()].sort((a, b) => a.cell.dn - b.cell.dn || a.cell.podsPerNode - b.cell.podsPerNode || compareConfigurations(a.cell, b.cell));
  const events = resultEvents(results);
  for (const { cell, reps } of ordered) {
    for (const event of events) {
      const values = reps.map((r) => r.events[event] ?? null).filter((v): v is number => v !== null).sort((a, b) => a - b);
      const q = (p: number) => (values.length ? quantile(values, p) : null);
      rows.push({ ...cell, event, n: reps.length, nulls: reps.length - values.length, median: q(0.5), p25: q(0.25), p75: q(0.75), p90: q(0.9) });
    }
  }
  return rows;
}

const fmt = (v: number | null) => (v === null ? '' : v.toFixed(3));

export function summaryCsv(rows: readonly SummaryRow[]): string {
  const head = 'config,dn,podsPerNode,event,n,nulls,median,p25,p75,p90';
  return [head, ...rows.map((r) => [configKey(r), r.dn, r.podsPerNode, r.event, r.n, r.nulls, fmt(r.median), fmt(r.p25), fmt(r.p75), fmt(r.p90)].join(','))].join('\n') + '\n';
}

/** Lookup of summary rows by cell and event. */
export class SummaryIndex {
  private readonly byKey = new Map<string, SummaryRow>();
  /** configuration keys ("1", "5", "1/fixed"), Table 6.1 order then kubelet policies */
  readonly configs: ConfigKey[];
  readonly dns: number[];
  readonly podsPerNode: number[];
  constructor(readonly rows: readonly SummaryRow[]) {
    for (const r of rows) this.byKey.set(`${cellKey(r)}/${r.event}`, r);
    const uniq = <T>(xs: T[]) => [...new Set(xs)].sort((a, b) => Number(a) - Number(b));
    this.configs = [...new Set(rows.map((r) => configKey(r)))].sort((a, b) => compareConfigurations(parseConfigKey(a), parseConfigKey(b)));
    this.dns = uniq(rows.map((r) => r.dn));
    this.podsPerNode = uniq(rows.map((r) => r.podsPerNode));
  }
  get(cell: Cell, event: EventName): SummaryRow | undefined {
    return this.byKey.get(`${cellKey(cell)}/${event}`);
  }
  median(cell: Cell, event: EventName): number | null {
    return this.get(cell, event)?.median ?? null;
  }
  /**
   * The vanilla configuration a cell is compared with: configuration 1, or, in a kubelet policy
   * comparison (no plain 1 in the run), 1 with the vanilla kubelet-shim policy.
   */
  baselineKey(): ConfigKey | undefined {
    return ['1', '1/vanilla'].find((k) => this.configs.includes(k));
  }
  /** median(config c) / median(vanilla baseline) in the same cell */
  ratioVsVanilla(cell: Cell, event: EventName): number | null {
    const base = this.baselineKey();
    return base === undefined ? null : ratio(this.median(cell, event), this.median({ ...cell, ...parseConfigKey(base), ...(base.includes('/') ? {} : { shimPolicy: undefined }) }, event));
  }
  /** critical-path inflation: median at this load / median of the same configuration with podsPerNode 0 */
  inflation(cell: Cell, event: EventName): number | null {
    return ratio(this.median(cell, event), this.median({ ...cell, podsPerNode: 0 }, event));
  }
}

/**
 * Percentile-bootstrap interval (default 90%) of median(a) / median(b) for two independent cells'
 * repetitions ({@link bootstrapQuantileRatio} at 0.5). With 4-8 repetitions per cell it is coarse,
 * but it says whether a ratio near a limit could as well be on the other side of it.
 */
export function bootstrapMedianRatio(a: readonly number[], b: readonly number[], o: { resamples?: number; level?: number; seed?: number } = {}): [number, number] | null {
  return bootstrapQuantileRatio(a, b, 0.5, o);
}

/**
 * Percentile-bootstrap interval (default 90%) of quantile(a, q) / quantile(b, q) for two independent
 * samples: each of `resamples` rounds draws both with replacement, seeded, so a report regenerates
 * identically. null without values or with a zero denominator in every round.
 */
export function bootstrapQuantileRatio(a: readonly number[], b: readonly number[], q: number, o: { resamples?: number; level?: number; seed?: number } = {}): [number, number] | null {
  if (!a.length || !b.length) return null;
  const rnd = prng(o.seed ?? 1);
  const resample = (xs: readonly number[]) => quantile(Float64Array.from(xs, () => xs[Math.floor(rnd() * xs.length)]!).sort(), q);
  const ratios: number[] = [];
  for (let i = 0; i < (o.resamples ?? 2000); i++) {
    const num = resample(a);
    const den = resample(b);
    if (den > 0) ratios.push(num / den);
  }
  if (!ratios.length) return null;
  ratios.sort((p, q) => p - q);
  const tail = (1 - (o.level ?? 0.9)) / 2;
  return [quantile(ratios, tail), quantile(ratios, 1 - tail)];
}

/** The non-null values of an event over the repetitions of a cell. */
export function cellValues(results: readonly RepResult[], cell: Cell, event: EventName): number[] {
  const key = cellKey(cell);
  return results.filter((r) => cellKey(r) === key).flatMap((r) => {
    const v = r.events[event];
    return v === null || v === undefined ? [] : [v];
  });
}

export function ratio(a: number | null, b: number | null): number | null {
  return a === null || b === null || b <= 0 ? null : a / b;
}
