import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { FULL_TIER_FILES, fullTier, testTier } from '../tiers.ts';
import { failureCause } from '../time-reporter.ts';
import { fileTimes, parseClusterLog, renderFailures, renderTable, replaceTable, TABLE_END, TABLE_START, type TimesReport } from '../test-times.ts';

const full = FULL_TIER_FILES[0]!.file;
const clusterLines = [
  JSON.stringify({ kind: 'local', runDir: '/tmp/a', at: 1, ms: 12_000, testFile: 'test/integration/b.int.test.ts' }),
  JSON.stringify({ kind: 'local', runDir: '/tmp/a', at: 2, ms: 8_000, testFile: 'test/integration/b.int.test.ts' }),
  JSON.stringify({ kind: 'kubeadm', runDir: '/tmp/k', at: 3, ms: 60_000, testFile: full }),
  JSON.stringify({ kind: 'reused', runDir: '/tmp/s', at: 4, ms: 3_000, testFile: 'test/integration/b.int.test.ts' }),
  '',
].join('\n');
const report: TimesReport = {
  startedAt: '2026-11-28T10:00:00.000Z',
  seconds: 470,
  files: [
    { file: 'test/unit/a.test.ts', project: 'unit', tests: 2, failed: 0, seconds: 1.5, state: 'passed' },
    { file: 'test/integration/b.int.test.ts', project: 'integration', tests: 1, failed: 0, seconds: 60, state: 'passed' },
    { file: full, project: 'integration', tests: 3, failed: 1, seconds: 400, state: 'failed', failures: [{ test: 'suite > the case', cause: 'expected 1 to be 2\n  at test/integration/x.int.test.ts:3:5' }] },
  ],
  clusters: parseClusterLog(clusterLines),
};

describe('test tiers', () => {
  it('reads the tier from ULYSSES_TEST_TIER, ci unless full, and refuses anything else naming it', () => {
    expect(testTier({})).toBe('ci');
    expect(fullTier({ ULYSSES_TEST_TIER: 'full' })).toBe(true);
    expect(fullTier({ ULYSSES_TEST_TIER: 'ci' })).toBe(false);
    expect(() => testTier({ ULYSSES_TEST_TIER: 'fast' })).toThrow(/ULYSSES_TEST_TIER="fast": ci or full/);
  });
  it('names only integration files that exist, each with what covers it in the ci tier', () => {
    expect(FULL_TIER_FILES.length).toBeGreaterThan(0);
    for (const f of FULL_TIER_FILES) {
      expect(existsSync(f.file), f.file).toBe(true);
      expect(f.file).toMatch(/\.int\.test\.ts$/);
      expect(f.why.length).toBeGreaterThan(20);
    }
  });
  it('the README command is the ci tier and test:all the full one', () => {
    const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };
    expect(pkg.scripts.test).toBe('vitest run');
    expect(pkg.scripts['test:all']).toMatch(/test\/full-tier\.ts/);
    expect(readFileSync('README.md', 'utf8')).toContain('npm run test:all');
  });
});

describe('the per-file time table', () => {
  it('attributes cluster starts, tiers and projects per file, slowest first', () => {
    const t = fileTimes(report);
    expect(t.map((x) => [x.file, x.tier, x.project, x.tests, x.seconds])).toEqual([
      [full, 'full', 'integration', 3, 400],
      ['test/integration/b.int.test.ts', 'ci', 'integration', 1, 60],
      ['test/unit/a.test.ts', 'ci', 'unit', 2, 1.5],
    ]);
    expect(t[1]!.clusters).toEqual({ local: 2, kubeadm: 0, reused: 1, seconds: 23 });
    expect(t[0]!.clusters).toEqual({ local: 0, kubeadm: 1, reused: 0, seconds: 60 });
  });
  it('renders one row per integration file, the unit project as one line, the totals and failures', () => {
    const table = renderTable(fileTimes(report), 'note');
    expect(table).toContain('| b.int.test.ts | ci | 1 | 60 | 2 local, 1 reused | 23 |');
    expect(table).toContain(`| ${full.replace('test/integration/', '')} | full | 3 | 400 | 1 kubeadm | 60 | 1 failed`);
    expect(table).toContain('| **unit project** (1 files) | ci | 2 | 2 | - | - |');
    expect(table).toContain('Integration: 460 s in all, 60 s in the ci tier; 2 local and 1 kubeadm clusters started, 1 shared testbeds reused, 83 s starting or resetting them.');
  });
  it('lists each failed test with its cause, and nothing when none failed', () => {
    expect(renderFailures(report)).toBe(`\nFailed tests:\n- ${full} > suite > the case\n  expected 1 to be 2\n    at test/integration/x.int.test.ts:3:5`);
    expect(renderFailures({ ...report, files: report.files.slice(0, 2) })).toBe('');
  });
  it("a failure's cause is its first error's message and first frame in our code, bounded", () => {
    const stack = ['AssertionError: expected 1 to be 2', '    at /work/main/node_modules/chai/index.js:1:1', '    at /work/main/test/integration/x.int.test.ts:3:5', '    at /work/main/core/kube.ts:9:9'].join('\n');
    expect(failureCause([{ message: 'expected 1 to be 2', stack }, { message: 'second' }])).toBe('expected 1 to be 2\n  at /work/main/test/integration/x.int.test.ts:3:5\n  (and 1 more error(s))');
    expect(failureCause([])).toMatch(/without an error/);
    expect(failureCause([{ message: 'x'.repeat(5000) }]).length).toBeLessThan(1600);
  });
  it('replaces the table between its markers and refuses a document without them', () => {
    const doc = `# x\n${TABLE_START}\nold\n${TABLE_END}\nafter\n`;
    expect(replaceTable(doc, 'new')).toBe(`# x\n${TABLE_START}\nnew\n${TABLE_END}\nafter\n`);
    expect(() => replaceTable('# x\n', 'new')).toThrow(/no <!-- test-times:start/);
    expect(readFileSync('docs/development.md', 'utf8')).toContain(TABLE_START);
  });
  it('refuses a cluster log line without kind, at and ms, naming the line', () => {
    const text = '{"kind":"local","at":1,"ms":1}\n{"kind":"local","ms":2}\n{"kind":';
    expect(() => parseClusterLog(text)).toThrow(/cluster log line 2/);
    const bad: string[] = [];
    expect(parseClusterLog(text, (p) => bad.push(p))).toHaveLength(1);
    expect(bad.map((b) => b.slice(0, 17))).toEqual(['cluster log line ', 'cluster log line ']);
  });
});
