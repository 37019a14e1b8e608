/**
 * Writes everything derived from DIR/results.jsonl: summary.csv, report.md, SVG figures (PNG
 * copies only when asked: `--png`). Pure function of the results file plus meta.json, so
 * `ulysses experiment report --out DIR` regenerates it without re-running anything.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeFigureFiles, type FigureFiles } from './png.ts';
import { renderReport, type ReportMeta } from './report.ts';
import { readResults, type EventName } from './results.ts';
import { SummaryIndex, summarize, summaryCsv } from './stats.ts';
import { fig61Svg, fig65Svg, figPodReadySvg } from './svg.ts';

export const RESULTS_FILE = 'results.jsonl';
export const META_FILE = 'meta.json';

export interface OutputFiles extends FigureFiles {
  report: string;
  summary: string;
}

export interface OutputOptions {
  /** also a PNG copy of each figure (experiments/results keeps the SVGs only) */
  png?: boolean;
}

export function readMeta(dir: string): ReportMeta {
  const f = join(dir, META_FILE);
  return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as ReportMeta) : {};
}

export async function writeOutputs(dir: string, log: (l: string) => void = () => undefined, opts: OutputOptions = {}): Promise<OutputFiles> {
  const results = readResults(join(dir, RESULTS_FILE));
  if (!results.length) throw new Error(`${join(dir, RESULTS_FILE)}: no results yet`);
  const rows = summarize(results);
  const index = new SummaryIndex(rows);
  const summary = join(dir, 'summary.csv');
  writeFileSync(summary, summaryCsv(rows));

  const figures: Array<{ file: string; caption: string; svg: string }> = [];
  // the figures' time axis: from the taint, or from the frozen node (failure frozen-node)
  const origin = results.some((r) => r.failure === 'frozen-node') ? 't = 0' : 'taint';
  // the events the report discusses; the others are in summary.csv and the report's tables
  const fig61Events: EventName[] = ['prioUp', 'prioReady', 'lastReady'];
  // scenario 5g: no UDP probe, its figure is connection restored's (below)
  const fiveG = results.some((r) => r.events.connectionRestored != null) && !results.some((r) => r.events.prioUp != null);
  for (const e of fig61Events.filter((ev) => ev !== 'prioUp' || !fiveG)) figures.push({ file: `fig6.1-${e}`, caption: `Fig 6.1 style: ${e} vs pods per destination node (median, p25-p75)`, svg: fig61Svg(index, e, origin) });
  const heaviest = Math.max(...index.podsPerNode);
  const panels = index.dns.map((dn) => ({ dn, podsPerNode: heaviest }));
  figures.push({ file: 'fig6.5-ready', caption: `Fig 6.5 style: distribution of Prio ready (solid) and Last ready (dashed) at ${heaviest} pods/node`, svg: fig65Svg(results, panels, undefined, origin) });
  // scenario 5g (thesis Fig 6.6: the UPF's events and connection restored)
  if (fiveG) {
    figures.push({ file: 'fig6.1-connectionRestored', caption: 'Fig 6.1 style: connection restored (first GTP-U reply through the new UPF) vs pods per destination node (median, p25-p75)', svg: fig61Svg(index, 'connectionRestored', origin) });
    figures.push({ file: 'fig6.6-upf', caption: `Fig 6.6 style: distribution of UPF ready (solid) and connection restored (dashed) at ${heaviest} pods/node`, svg: fig65Svg(results, panels, ['prioReady', 'connectionRestored'], origin) });
  }
  if (results.some((r) => r.podReady?.length))
    figures.push({ file: 'fig6.5-pod-ready', caption: `Fig 6.5: distribution of the ready times of every moved pod (all repetitions) at ${heaviest} pods/node`, svg: figPodReadySvg(results, panels, origin) });

  const written = await writeFigureFiles(dir, figures, opts.png);
  if (written.pngMessage) log(written.pngMessage);
  const meta = readMeta(dir);
  const report = join(dir, 'report.md');
  writeFileSync(report, renderReport(results, rows, { ...meta, figures: figures.map((f) => ({ file: `${f.file}.svg`, caption: f.caption })) }));
  return { report, summary, ...written };
}
