/**
 * Writes everything derived from DIR/results.jsonl: summary.csv, report.md, SVG (and, when
 * @resvg/resvg-js is installed, PNG) figures. Pure function of the results file plus meta.json, so
 * `ulysses experiment report --out DIR` regenerates it without re-running anything.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { svgToPng } from './png.ts';
import { renderReport, type ReportMeta } from './report.ts';
import { readResults, type EventName } from './results.ts';
import { SummaryIndex, summarize, summaryCsv } from './stats.ts';
import { fig61Svg, fig65Svg, figPodReadySvg } from './svg.ts';

export const RESULTS_FILE = 'results.jsonl';
export const META_FILE = 'meta.json';

export interface OutputFiles {
  report: string;
  summary: string;
  svgs: string[];
  pngs: string[];
  pngMessage?: string;
}

export function readMeta(dir: string): ReportMeta {
  const f = join(dir, META_FILE);
  return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as ReportMeta) : {};
}

export async function writeOutputs(dir: string, log: (l: string) => void = () => undefined): Promise<OutputFiles> {
  const results = readResults(join(dir, RESULTS_FILE));
  if (!results.length) throw new Error(`${join(dir, RESULTS_FILE)}: no results yet`);
  const rows = summarize(results);
  const index = new SummaryIndex(rows);
  const summary = join(dir, 'summary.csv');
  writeFileSync(summary, summaryCsv(rows));

  const figures: Array<{ file: string; caption: string; svg: string }> = [];
  const fig61Events: EventName[] = ['prioUp', 'prioReady', 'prioEndpointReady', 'prioScheduled', 'lastReady', 'lastScheduled'];
  for (const e of fig61Events) figures.push({ file: `fig6.1-${e}`, caption: `Fig 6.1 style: ${e} vs pods per destination node (median, p25-p75)`, svg: fig61Svg(index, e) });
  const heaviest = Math.max(...index.podsPerNode);
  const panels = index.dns.map((dn) => ({ dn, podsPerNode: heaviest }));
  figures.push({ file: 'fig6.5-ready', caption: `Fig 6.5 style: distribution of Prio ready (solid) and Last ready (dashed) at ${heaviest} pods/node`, svg: fig65Svg(results, panels) });
  if (results.some((r) => r.podReady?.length))
    figures.push({ file: 'fig6.5-pod-ready', caption: `Fig 6.5: distribution of the ready times of every moved pod (all repetitions) at ${heaviest} pods/node`, svg: figPodReadySvg(results, panels) });

  const svgs: string[] = [];
  const pngs: string[] = [];
  let pngMessage: string | undefined;
  for (const f of figures) {
    const svgFile = join(dir, `${f.file}.svg`);
    writeFileSync(svgFile, f.svg);
    svgs.push(svgFile);
    const png = await svgToPng(f.svg);
    if (png instanceof Error) pngMessage = png.message;
    else {
      writeFileSync(join(dir, `${f.file}.png`), png);
      pngs.push(join(dir, `${f.file}.png`));
    }
  }
  if (pngMessage) log(pngMessage);
  const meta = readMeta(dir);
  const report = join(dir, 'report.md');
  const embed = figures.filter((f) => ['fig6.1-prioUp', 'fig6.1-prioReady', 'fig6.1-lastReady', 'fig6.5-ready', 'fig6.5-pod-ready'].includes(f.file));
  writeFileSync(report, renderReport(results, rows, { ...meta, figures: embed.map((f) => ({ file: `${f.file}.svg`, caption: f.caption })) }));
  return { report, summary, svgs, pngs, pngMessage };
}
