/**
 * A vitest reporter (vitest.config.ts) that writes where a run's time went, for `npm run
 * test:times` (test/test-times.ts): per test file its project, tests, state and wall time with its
 * hooks (a testbed brought up in beforeAll included, which vitest's JSON report leaves out), and the
 * clusters the testbeds recorded during the run (ULYSSES_CLUSTER_LOG, experiments/testbed/processes.ts
 * recordClusterStart). Written to $ULYSSES_TEST_TIMES (default beside the components log).
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';
import { parseClusterLog, type TimesReport } from './test-times.ts';

/** What a failed test's first error says: its message and the first frame in a test or source file, bounded. */
export function failureCause(errors: readonly { message?: string; stack?: string }[]): string {
  const e = errors[0];
  if (!e) return 'failed without an error (a hook or a timeout)';
  const frame = (e.stack ?? '').split('\n').find((l) => /^\s*at .*\/(test|core|controller-manager|scheduler-plugins|kubelet-shim|experiments|manifests|cli)\//.test(l) && !l.includes('node_modules'));
  const text = `${(e.message ?? String(e)).trim()}${frame ? `\n  ${frame.trim()}` : ''}${errors.length > 1 ? `\n  (and ${errors.length - 1} more error(s))` : ''}`;
  return text.length > 1500 ? `${text.slice(0, 1500)} ...` : text;
}

export default class TimeReporter implements Reporter {
  private startedAt = Date.now();
  private readonly files: TimesReport['files'] = [];

  onTestRunStart(): void {
    this.startedAt = Date.now();
    this.files.length = 0;
  }

  onTestModuleEnd(m: TestModule): void {
    const d = m.diagnostic();
    const tests = [...m.children.allTests()];
    this.files.push({
      file: relative(process.cwd(), m.moduleId),
      project: m.project.name,
      tests: tests.length,
      failed: tests.filter((t) => t.result().state === 'failed').length,
      seconds: (d.setupDuration + d.collectDuration + d.duration) / 1000,
      state: m.state(),
      failures: tests
        .filter((t) => t.result().state === 'failed')
        .map((t) => ({ test: t.fullName, cause: failureCause(t.result().errors ?? []) })),
    });
  }

  onTestRunEnd(): void {
    const out = process.env.ULYSSES_TEST_TIMES;
    const clusterLog = process.env.ULYSSES_CLUSTER_LOG;
    if (!out) return;
    // lines of an older format, or cut short by a killed run, are skipped: the log outlives runs
    const clusters = clusterLog && existsSync(clusterLog) ? parseClusterLog(readFileSync(clusterLog, 'utf8'), () => undefined).filter((c) => c.at >= this.startedAt) : [];
    const report: TimesReport = { startedAt: new Date(this.startedAt).toISOString(), seconds: (Date.now() - this.startedAt) / 1000, files: this.files, clusters };
    writeFileSync(out, `${JSON.stringify(report, null, 1)}\n`);
  }
}
