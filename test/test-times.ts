/**
 * The per-file time table of docs/development.md ("Where the suite's time goes"), written from a
 * vitest JSON report and the cluster starts the run recorded (vitest.config.ts: ULYSSES_CLUSTER_LOG).
 *
 *   npm test -- --reporter=default --reporter=json --outputFile=/tmp/npm-test.json
 *   npm run test:times -- /tmp/npm-test.json [--clusters FILE] [--write docs/development.md]
 *
 * Without --write it prints the table; with it, the table replaces the one between the markers.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { FULL_TIER_FILES } from './tiers.ts';

export const TABLE_START = '<!-- test-times:start (npm run test:times writes this table) -->';
export const TABLE_END = '<!-- test-times:end -->';

/** The parts of vitest's JSON report read here. */
export interface VitestJsonReport {
  startTime: number;
  numPassedTests: number;
  numFailedTests: number;
  testResults: { name: string; startTime: number; endTime: number; status: string; assertionResults: unknown[] }[];
}

export interface ClusterStart {
  kind: 'local' | 'kubeadm';
  ms: number;
  testFile: string | null;
}

export interface FileTime {
  file: string;
  tier: 'ci' | 'full';
  project: 'unit' | 'integration';
  tests: number;
  seconds: number;
  clusters: { local: number; kubeadm: number; seconds: number };
  status: string;
}

const isIntegration = (file: string) => file.endsWith('.int.test.ts') || file.startsWith('test/integration/');

export function parseClusterLog(text: string): ClusterStart[] {
  return text
    .split('\n')
    .filter((l) => l.trim())
    .map((l, i) => {
      const o = JSON.parse(l) as Partial<ClusterStart>;
      if ((o.kind !== 'local' && o.kind !== 'kubeadm') || typeof o.ms !== 'number') throw new Error(`cluster log line ${i + 1}: kind and ms expected, got ${l.slice(0, 200)}`);
      return { kind: o.kind, ms: o.ms, testFile: o.testFile ?? null };
    });
}

export function fileTimes(report: VitestJsonReport, clusters: readonly ClusterStart[], root: string): FileTime[] {
  const full = new Set(FULL_TIER_FILES.map((f) => f.file));
  return report.testResults
    .map((r) => {
      const file = relative(root, r.name);
      const mine = clusters.filter((c) => c.testFile === file);
      return {
        file,
        tier: full.has(file) ? ('full' as const) : ('ci' as const),
        project: isIntegration(file) ? ('integration' as const) : ('unit' as const),
        tests: r.assertionResults.length,
        seconds: Math.max(0, r.endTime - r.startTime) / 1000,
        clusters: {
          local: mine.filter((c) => c.kind === 'local').length,
          kubeadm: mine.filter((c) => c.kind === 'kubeadm').length,
          seconds: mine.reduce((a, c) => a + c.ms, 0) / 1000,
        },
        status: r.status,
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
    [t.clusters.local ? `${t.clusters.local} local` : '', t.clusters.kubeadm ? `${t.clusters.kubeadm} kubeadm` : ''].filter(Boolean).join(', ') || '-';
  const rows = integration.map((t) => `| ${t.file.replace(/^test\/integration\//, '')} | ${t.tier} | ${t.tests} | ${s(t.seconds)} | ${clusterCell(t)} | ${t.clusters.seconds ? s(t.clusters.seconds) : '-'} |${t.status === 'passed' ? '' : ` ${t.status}`}`);
  const ci = integration.filter((t) => t.tier === 'ci');
  return [
    note,
    '',
    '| integration file | tier | tests | s | clusters started | s starting them |',
    '| --- | --- | ---: | ---: | --- | ---: |',
    ...rows,
    `| **unit project** (${unit.length} files) | ci | ${sum(unit, (t) => t.tests)} | ${s(sum(unit, (t) => t.seconds))} | - | - |`,
    '',
    `Integration: ${s(sum(integration, (t) => t.seconds))} s in all, ${s(sum(ci, (t) => t.seconds))} s in the ci tier; ` +
      `${sum(integration, (t) => t.clusters.local)} local and ${sum(integration, (t) => t.clusters.kubeadm)} kubeadm clusters started, ` +
      `${s(sum(integration, (t) => t.clusters.seconds))} s starting them.`,
  ].join('\n');
}

/** `doc` with the text between the markers replaced by `table` (the markers must be there). */
export function replaceTable(doc: string, table: string): string {
  const a = doc.indexOf(TABLE_START);
  const b = doc.indexOf(TABLE_END);
  if (a < 0 || b < a) throw new Error(`the document has no ${TABLE_START} ... ${TABLE_END} block`);
  return `${doc.slice(0, a + TABLE_START.length)}\n${table}\n${doc.slice(b)}`;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { clusters: { type: 'string' }, write: { type: 'string' }, note: { type: 'string' } },
  });
  if (positionals.length !== 1) throw new Error('usage: npm run test:times -- REPORT.json [--clusters FILE] [--write docs/development.md] [--note TEXT]');
  const report = JSON.parse(readFileSync(positionals[0]!, 'utf8')) as VitestJsonReport;
  if (!Array.isArray(report.testResults)) throw new Error(`${positionals[0]}: not a vitest JSON report (no testResults)`);
  const clusterFile = values.clusters ?? process.env.ULYSSES_CLUSTER_LOG ?? join(tmpdir(), 'ulysses-test-logs', 'clusters.jsonl');
  const clusters = parseClusterLog(readFileSync(clusterFile, 'utf8'));
  const when = new Date(report.startTime).toISOString().slice(0, 10);
  const note = values.note ?? `Run of ${when}: ${report.numPassedTests} passed, ${report.numFailedTests} failed.`;
  const table = renderTable(fileTimes(report, clusters, process.cwd()), note);
  if (values.write) writeFileSync(values.write, replaceTable(readFileSync(values.write, 'utf8'), table));
  else console.log(table);
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) {
  main().catch((err: Error) => {
    console.error(err.message);
    process.exit(2);
  });
}
