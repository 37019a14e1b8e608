/**
 * Hand-written SVG plots of the failover experiment, after the thesis' figures:
 * Fig 6.1 (an event vs pods per node, one panel per DN, median with IQR bars, one series per
 * configuration) and Fig 6.5 (distributions of ready times: empirical CDFs per configuration).
 * No dependencies: plain strings, so the output is deterministic and diffable.
 */
import { EVENT_LABELS, compareConfigurations, configKey, configLabel, parseConfigKey, type ConfigId, type ConfigKey, type EventName, type RepResult } from './results.ts';
import type { SummaryIndex } from './stats.ts';

export const CONFIG_COLORS: Record<ConfigId, string> = { upstream: '#000000', 'upstream-tuned': '#7f7f7f', 1: '#d62728', 2: '#ff7f0e', 3: '#9467bd', 4: '#1f77b4', 5: '#2ca02c' };
/** kubelet policy comparison (Fig 6.5): vanilla red, fixed orange, exponential decay green */
export const SHIM_POLICY_COLORS: Record<string, string> = { vanilla: '#d62728', fixed: '#ff7f0e', 'exponential-decay': '#2ca02c', adaptive: '#1f77b4' };
const OTHER_COLORS = ['#8c564b', '#e377c2', '#7f7f7f', '#17becf', '#bcbd22'];

/** One color per configuration key: by kubelet policy when overridden, else by Table 6.1 id. */
export function configColor(key: ConfigKey): string {
  const c = parseConfigKey(key);
  if (!c.shimPolicy) return CONFIG_COLORS[c.config];
  // the policy comparison runs on configuration 1: color by policy; anything else by a stable hash
  if (c.config === 1 && SHIM_POLICY_COLORS[c.shimPolicy]) return SHIM_POLICY_COLORS[c.shimPolicy]!;
  let h = 0;
  for (const ch of key) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return OTHER_COLORS[h % OTHER_COLORS.length]!;
}

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** "Nice" axis ticks (1, 2, 5 x 10^k steps) covering [min, max]. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  if (max <= min) max = min + 1;
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const ticks: number[] = [];
  for (let t = Math.floor(min / step) * step; t <= max + step * 1e-9; t += step) ticks.push(Number(t.toFixed(10)));
  if (ticks[ticks.length - 1]! < max) ticks.push(Number((ticks[ticks.length - 1]! + step).toFixed(10)));
  return ticks;
}

const n = (v: number) => (Math.round(v * 10) / 10).toString();
const tickLabel = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(Math.abs(v) < 1 ? 2 : 1).replace(/0+$/, ''));

export interface Axis {
  x0: number;
  y0: number;
  w: number;
  h: number;
  xTicks: number[];
  yTicks: number[];
}

export const sx = (a: Axis, v: number) => a.x0 + ((v - a.xTicks[0]!) / (a.xTicks[a.xTicks.length - 1]! - a.xTicks[0]!)) * a.w;
export const sy = (a: Axis, v: number) => a.y0 + a.h - ((v - a.yTicks[0]!) / (a.yTicks[a.yTicks.length - 1]! - a.yTicks[0]!)) * a.h;

export function axes(a: Axis, title: string, xLabel: string, yLabel: string): string {
  const out: string[] = [`<rect x="${n(a.x0)}" y="${n(a.y0)}" width="${n(a.w)}" height="${n(a.h)}" fill="none" stroke="#333"/>`];
  for (const t of a.yTicks) {
    const y = sy(a, t);
    out.push(`<line x1="${n(a.x0)}" y1="${n(y)}" x2="${n(a.x0 + a.w)}" y2="${n(y)}" stroke="#ddd"/>`);
    out.push(`<text x="${n(a.x0 - 6)}" y="${n(y + 4)}" text-anchor="end">${tickLabel(t)}</text>`);
  }
  for (const t of a.xTicks) {
    const x = sx(a, t);
    out.push(`<line x1="${n(x)}" y1="${n(a.y0 + a.h)}" x2="${n(x)}" y2="${n(a.y0 + a.h + 4)}" stroke="#333"/>`);
    out.push(`<text x="${n(x)}" y="${n(a.y0 + a.h + 17)}" text-anchor="middle">${tickLabel(t)}</text>`);
  }
  out.push(`<text x="${n(a.x0 + a.w / 2)}" y="${n(a.y0 - 8)}" text-anchor="middle" font-weight="bold">${escapeXml(title)}</text>`);
  out.push(`<text x="${n(a.x0 + a.w / 2)}" y="${n(a.y0 + a.h + 34)}" text-anchor="middle">${escapeXml(xLabel)}</text>`);
  const ly = a.y0 + a.h / 2;
  out.push(`<text x="${n(a.x0 - 38)}" y="${n(ly)}" text-anchor="middle" transform="rotate(-90 ${n(a.x0 - 38)} ${n(ly)})">${escapeXml(yLabel)}</text>`);
  return out.join('\n');
}

export function legend(x: number, y: number, items: Array<{ label: string; color: string; dash?: string }>): string {
  return items
    .map((it, i) => {
      const yy = y + i * 16;
      const dash = it.dash ? ` stroke-dasharray="${it.dash}"` : '';
      return `<line x1="${n(x)}" y1="${n(yy)}" x2="${n(x + 22)}" y2="${n(yy)}" stroke="${it.color}" stroke-width="2"${dash}/><text x="${n(x + 28)}" y="${n(yy + 4)}">${escapeXml(it.label)}</text>`;
    })
    .join('\n');
}

export function document(width: number, height: number, body: string): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    body,
    '</svg>\n',
  ].join('\n');
}

const PANEL_W = 300;
const PANEL_H = 220;
const MARGIN = { left: 60, top: 40, right: 20, bottom: 50 };
const LEGEND_W = 270;
/** Legend column wide enough for its longest label (11 px font: ~5.8 px per character). */
const legendWidth = (keys: readonly ConfigKey[]) => Math.max(LEGEND_W, 45 + Math.ceil(5.8 * Math.max(0, ...keys.map((k) => configLabel(parseConfigKey(k)).length))));

/**
 * Fig 6.1: `event` (seconds after the taint) vs pods per destination node, one panel per DN, one
 * series per configuration: median with p25-p75 bars.
 */
export function fig61Svg(index: SummaryIndex, event: EventName, origin = 'taint'): string {
  const dns = index.dns;
  const xs = index.podsPerNode;
  let yMax = 0;
  for (const r of index.rows) if (r.event === event) yMax = Math.max(yMax, r.p75 ?? 0, r.median ?? 0);
  const yTicks = niceTicks(0, yMax || 1);
  const xTicks = niceTicks(Math.min(...xs, 0), Math.max(...xs, 1));
  const width = dns.length * (PANEL_W + MARGIN.left + MARGIN.right) + legendWidth(index.configs);
  const height = PANEL_H + MARGIN.top + MARGIN.bottom + 20;
  const body: string[] = [];
  dns.forEach((dn, i) => {
    const a: Axis = { x0: i * (PANEL_W + MARGIN.left + MARGIN.right) + MARGIN.left, y0: MARGIN.top + 10, w: PANEL_W, h: PANEL_H, xTicks, yTicks };
    body.push(axes(a, `${EVENT_LABELS[event]}, DN = ${dn}`, 'pods per destination node', `seconds after ${origin}`));
    const offsetStep = index.configs.length > 1 ? 6 / (index.configs.length - 1) : 0;
    index.configs.forEach((config, ci) => {
      const color = configColor(config);
      const dx = (ci - (index.configs.length - 1) / 2) * offsetStep; // dodge the IQR bars
      const pts: string[] = [];
      for (const x of xs) {
        const r = index.get({ ...parseConfigKey(config), dn, podsPerNode: x }, event);
        if (!r || r.median === null) continue;
        const px = sx(a, x) + dx;
        pts.push(`${n(px)},${n(sy(a, r.median))}`);
        body.push(`<line x1="${n(px)}" y1="${n(sy(a, r.p25!))}" x2="${n(px)}" y2="${n(sy(a, r.p75!))}" stroke="${color}" stroke-width="1.5"/>`);
        for (const q of [r.p25!, r.p75!]) body.push(`<line x1="${n(px - 3)}" y1="${n(sy(a, q))}" x2="${n(px + 3)}" y2="${n(sy(a, q))}" stroke="${color}"/>`);
        body.push(`<circle cx="${n(px)}" cy="${n(sy(a, r.median))}" r="3" fill="${color}"><title>config ${config}, ${x} pods/node: median ${r.median.toFixed(3)} s (IQR ${r.p25!.toFixed(3)}-${r.p75!.toFixed(3)}, n=${r.n - r.nulls})</title></circle>`);
      }
      if (pts.length > 1) body.push(`<polyline points="${pts.join(' ')}" fill="none" stroke="${color}" stroke-width="1.5"/>`);
    });
  });
  const lx = dns.length * (PANEL_W + MARGIN.left + MARGIN.right) + 10;
  body.push(legend(lx, MARGIN.top + 20, index.configs.map((c) => ({ label: configLabel(parseConfigKey(c)), color: configColor(c) }))));
  body.push(`<text x="${n(lx)}" y="${n(MARGIN.top + 30 + index.configs.length * 16)}" fill="#555">dot: median, bar: p25-p75</text>`);
  return document(width, height, body.join('\n'));
}

/** Empirical CDF steps of a sample: [x, fraction <= x]. */
export function ecdf(values: readonly number[]): Array<[number, number]> {
  const s = [...values].sort((a, b) => a - b);
  return s.map((v, i) => [v, (i + 1) / s.length]);
}

/**
 * Fig 6.5: distributions of the critical pod's ready time (solid) and the last pod's ready time
 * (dashed) per configuration, as empirical CDFs; one panel per (DN, pods per node) load given.
 */
export function fig65Svg(results: readonly RepResult[], panels: Array<{ dn: number; podsPerNode: number }>, events: [EventName, EventName] = ['prioReady', 'lastReady'], origin = 'taint'): string {
  const configs = configKeysOf(results);
  const inPanel = (p: { dn: number; podsPerNode: number }) => results.filter((r) => r.dn === p.dn && r.podsPerNode === p.podsPerNode);
  let xMax = 0;
  for (const p of panels) for (const r of inPanel(p)) for (const e of events) xMax = Math.max(xMax, r.events[e] ?? 0);
  const eventLegend = [
    { label: EVENT_LABELS[events[0]], color: '#333' },
    { label: EVENT_LABELS[events[1]], color: '#333', dash: '5 3' },
  ];
  return cdfFigure(panels, configs, xMax, eventLegend, (a, p, body) => {
    body.push(axes(a, `DN = ${p.dn}, ${p.podsPerNode} pods/node`, `seconds after ${origin}`, 'fraction of repetitions'));
    for (const config of configs) {
      const reps = inPanel(p).filter((r) => configKey(r) === config);
      events.forEach((e, ei) => {
        const d = ecdfPath(a, reps.map((r) => r.events[e]).filter((v): v is number => v !== null));
        if (!d) return;
        const dash = ei === 1 ? ' stroke-dasharray="5 3"' : '';
        body.push(`<path d="${d}" fill="none" stroke="${configColor(config)}" stroke-width="1.5"${dash}><title>config ${config} ${EVENT_LABELS[e]}</title></path>`);
      });
    }
  });
}

/**
 * Panels of empirical CDFs side by side (one per load), the configuration legend at the right and
 * `extraLegend` below it; `draw` fills a panel given its axis.
 */
function cdfFigure(
  panels: ReadonlyArray<{ dn: number; podsPerNode: number }>,
  configs: readonly ConfigKey[],
  xMax: number,
  extraLegend: Array<{ label: string; color: string; dash?: string }>,
  draw: (a: Axis, p: { dn: number; podsPerNode: number }, body: string[]) => void,
): string {
  const xTicks = niceTicks(0, xMax || 1);
  const yTicks = [0, 0.25, 0.5, 0.75, 1];
  const width = panels.length * (PANEL_W + MARGIN.left + MARGIN.right) + legendWidth(configs);
  const height = PANEL_H + MARGIN.top + MARGIN.bottom + 20;
  const body: string[] = [];
  panels.forEach((p, i) => {
    draw({ x0: i * (PANEL_W + MARGIN.left + MARGIN.right) + MARGIN.left, y0: MARGIN.top + 10, w: PANEL_W, h: PANEL_H, xTicks, yTicks }, p, body);
  });
  const lx = panels.length * (PANEL_W + MARGIN.left + MARGIN.right) + 10;
  body.push(legend(lx, MARGIN.top + 20, configs.map((c) => ({ label: configLabel(parseConfigKey(c)), color: configColor(c) }))));
  if (extraLegend.length) body.push(legend(lx, MARGIN.top + 30 + configs.length * 16, extraLegend));
  return document(width, height, body.join('\n'));
}

/** The configuration keys present in some results, in report order. */
export function configKeysOf(results: readonly RepResult[]): ConfigKey[] {
  return [...new Set(results.map((r) => configKey(r)))].sort((a, b) => compareConfigurations(parseConfigKey(a), parseConfigKey(b)));
}

/**
 * Empirical CDF path of a sample on an axis (steps), or undefined for an empty sample. At the
 * figures' 0.1 px resolution: a horizontal segment to each distinct x and one vertical segment up to
 * the last fraction at that x, so thousands of pods that became ready within the same tenth of a
 * pixel draw one step (the same picture; the pod-ready figure of a KWOK run was 0.8 MB of no-op
 * segments before).
 */
export function ecdfPath(a: Axis, values: readonly number[]): string | undefined {
  const steps = ecdf(values);
  if (!steps.length) return undefined;
  const xs = steps.map(([v]) => n(sx(a, v)));
  let d = `M${xs[0]},${n(sy(a, 0))}`;
  steps.forEach(([, f], i) => {
    if (i > 0 && xs[i] !== xs[i - 1]) d += ` H${xs[i]}`;
    if (xs[i + 1] !== xs[i]) d += ` V${n(sy(a, f))}`;
  });
  return d;
}

/**
 * Fig 6.5 as in the thesis: the distribution of the ready times of every pod that moved (the
 * critical one and the load, pooled over the repetitions), one empirical CDF per configuration, one
 * panel per (DN, pods per node) given. Needs `podReady` in the results (older runs have none).
 */
export function figPodReadySvg(results: readonly RepResult[], panels: Array<{ dn: number; podsPerNode: number }>, origin = 'taint'): string {
  const configs = configKeysOf(results);
  const inPanel = (p: { dn: number; podsPerNode: number }, key: ConfigKey) =>
    results.filter((r) => r.dn === p.dn && r.podsPerNode === p.podsPerNode && configKey(r) === key).flatMap((r) => r.podReady ?? []);
  let xMax = 0;
  for (const p of panels) for (const c of configs) for (const v of inPanel(p, c)) xMax = Math.max(xMax, v);
  return cdfFigure(panels, configs, xMax, [], (a, p, body) => {
    body.push(axes(a, `Pod ready times, DN = ${p.dn}, ${p.podsPerNode} pods/node`, `seconds after ${origin}`, 'fraction of pods'));
    for (const c of configs) {
      const values = inPanel(p, c);
      const d = ecdfPath(a, values);
      if (d) body.push(`<path d="${d}" fill="none" stroke="${configColor(c)}" stroke-width="1.5"><title>config ${c}: ${values.length} pods</title></path>`);
    }
  });
}
