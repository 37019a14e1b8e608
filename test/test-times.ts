/**
 * The per-file time table of docs/development.md ("Where the suite's time goes"), written from what
 * test/time-reporter.ts recorded of the last run (vitest.config.ts: ULYSSES_TEST_TIMES).
 *
 *   npm test                                     # or any vitest run: writes the times file
 *   npm run test:times [-- --times FILE] [--write docs/development.md]
 *
 * Without --write it prints the table; with it, the table replaces the one between the markers.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { FULL_TIER_FILES } from './tiers.ts';

/** Where vitest.config.ts has the reporter write the times, unless ULYSSES_TEST_TIMES says otherwise. */
export const DEFAULT_TIMES_FILE = join(tmpdir(), 'ulysses-test-logs', 'times.json');

export const TABLE_START = '<!-- test-times:start (npm run test:times writes this table) -->';
export const TABLE_END = '<!-- test-times:end -->';

/** A cluster a testbed brought up (experiments/testbed/processes.ts recordClusterStart). */
export interface ClusterStart {
  kind: 'local' | 'kubeadm' | 'reused';
  /** when it was up, ms since the epoch */
  at: number;
  ms: number;
  testFile: string | null;
}

/** What test/time-reporter.ts writes of a run. */
export interface TimesReport {
  startedAt: string;
  seconds: number;
  files: { file: string; project: string; tests: number; failed: number; seconds: number; state: string; failures?: { test: string; cause: string }[] }[];
  clusters: ClusterStart[];
}

export interface FileTime {
  file: string;
  tier: 'ci' | 'full';
  project: 'unit' | 'integration';
  tests: number;
  failed: number;
  seconds: number;
  /** clusters started, shared testbeds reused (reset), and the seconds both took */
  clusters: { local: number; kubeadm: number; reused: number; seconds: number };
  state: string;
}

/** The cluster log's lines; a line without kind, at and ms is an error, or skipped and told to `onBad` when given. */
export function parseClusterLog(text: string, onBad?: (problem: string) => void): ClusterStart[] {
  const out: ClusterStart[] = [];
  text.split('\n').forEach((l, i) => {
    if (!l.trim()) return;
    let o: Partial<ClusterStart> | undefined;
    try {
      o = JSON.parse(l) as Partial<ClusterStart>;
    } catch {
      o = undefined;
    }
    if (!o || (o.kind !== 'local' && o.kind !== 'kubeadm' && o.kind !== 'reused') || typeof o.ms !== 'number' || typeof o.at !== 'number') {
      const problem = `cluster log line ${i + 1}: kind, at and ms expected, got ${l.slice(0, 200)}`;
      if (!onBad) throw new Error(problem);
      onBad(problem);
      return;
    }
    out.push({ kind: o.kind, at: o.at, ms: o.ms, testFile: o.testFile ?? null });
  });
  return out;
}

export function fileTimes(report: TimesReport): FileTime[] {
  const full = new Set(FULL_TIER_FILES.map((f) => f.file));
  return report.files
    .map((r) => {
      const mine = report.clusters.filter((c) => c.testFile === r.file);
      return {
        file: r.file,
        tier: full.has(r.file) ? ('full' as const) : ('ci' as const),
        project: r.project === 'unit' ? ('unit' as const) : ('integration' as const),
        tests: r.tests,
        failed: r.failed,
        seconds: r.seconds,
        clusters: {
          local: mine.filter((c) => c.kind === 'local').length,
          kubeadm: mine.filter((c) => c.kind === 'kubeadm').length,
          reused: mine.filter((c) => c.kind === 'reused').length,
          seconds: mine.reduce((a, c) => a + c.ms, 0) / 1000,
        },
        state: r.state,
      };
    })
    .sort((a, b) => b.seconds - a.seconds || a.file.localeCompare(b.file));
}

const s = (x: number) => x.toFixed(0);

/** The Markdown table: integration files one row each, the unit project one line, totals. */
export function renderTable(times: readonly FileTime[], note: string): string {
  const integration = times.filter((t) => t.project === 'integration');
  const unit = times.filter((t) => t.project === 'unit');
  const sum = (xs: readonly FileTime[], f: (t: FileTime) => number) => xs.reduce((a, t) => a + f(t), 0);
  const clusterCell = (t: FileTime) =>
    [t.clusters.local ? `${t.clusters.local} local` : '', t.clusters.kubeadm ? `${t.clusters.kubeadm} kubeadm` : '', t.clusters.reused ? `${t.clusters.reused} reused` : ''].filter(Boolean).join(', ') || '-';
  const rows = integration.map((t) => `| ${t.file.replace(/^test\/integration\//, '')} | ${t.tier} | ${t.tests} | ${s(t.seconds)} | ${clusterCell(t)} | ${t.clusters.seconds ? s(t.clusters.seconds) : '-'} |${t.failed ? ` ${t.failed} failed` : t.state === 'passed' ? '' : ` ${t.state}`}`);
  const ci = integration.filter((t) => t.tier === 'ci');
  return [
    note,
    '',
    '| integration file | tier | tests | s | clusters started or reused | s starting or resetting them |',
    '| --- | --- | ---: | ---: | --- | ---: |',
    ...rows,
    `| **unit project** (${unit.length} files) | ci | ${sum(unit, (t) => t.tests)} | ${s(sum(unit, (t) => t.seconds))} | - | - |`,
    '',
    `Integration: ${s(sum(integration, (t) => t.seconds))} s in all, ${s(sum(ci, (t) => t.seconds))} s in the ci tier; ` +
      `${sum(integration, (t) => t.clusters.local)} local and ${sum(integration, (t) => t.clusters.kubeadm)} kubeadm clusters started, ` +
      `${sum(integration, (t) => t.clusters.reused)} shared testbeds reused, ${s(sum(integration, (t) => t.clusters.seconds))} s starting or resetting them.`,
  ].join('\n');
}

/** Each failed test with its cause, for the end of CI's output (where a reader looks first); empty when none failed. */
export function renderFailures(report: TimesReport): string {
  const lines = report.files.flatMap((f) => (f.failures ?? []).map((x) => `- ${f.file} > ${x.test}\n  ${x.cause.replace(/\n/g, '\n  ')}`));
  return lines.length ? ['', 'Failed tests:', ...lines].join('\n') : '';
}

/** `doc` with the text between the markers replaced by `table` (the markers must be there). */
export function replaceTable(doc: string, table: string): string {
  const a = doc.indexOf(TABLE_START);
  const b = doc.indexOf(TABLE_END);
  if (a < 0 || b < a) throw new Error(`the document has no ${TABLE_START} ... ${TABLE_END} block`);
  return `${doc.slice(0, a + TABLE_START.length)}\n${table}\n${doc.slice(b)}`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { times: { type: 'string' }, write: { type: 'string' }, note: { type: 'string' } } });
  const file = values.times ?? process.env.ULYSSES_TEST_TIMES ?? DEFAULT_TIMES_FILE;
  const report = JSON.parse(readFileSync(file, 'utf8')) as TimesReport;
  if (!Array.isArray(report.files) || !Array.isArray(report.clusters)) throw new Error(`${file}: not a times report of test/time-reporter.ts (files, clusters)`);
  const times = fileTimes(report);
  const count = (f: (t: FileTime) => number) => times.reduce((a, t) => a + f(t), 0);
  const note = values.note ?? `Run of ${report.startedAt.slice(0, 10)}, ${(report.seconds / 60).toFixed(1)} min: ${times.length} files, ${count((t) => t.tests)} tests, ${count((t) => t.failed)} failed.`;
  const table = renderTable(times, note);
  if (values.write) writeFileSync(values.write, replaceTable(readFileSync(values.write, 'utf8'), table));
  else console.log(`${table}${renderFailures(report)}`);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().catch((err: Error) => {
    console.error(err.message);
    process.exit(2);
  });
}
