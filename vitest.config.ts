import { existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { defineConfig } from 'vitest/config';
import { FULL_TIER_FILES, fullTier } from './test/tiers.ts';
import FamilySequencer from './test/sequencer.ts';

// In-process component logs (pino) and the lab's progress lines (testbed up, install steps) go to a
// file (test/log-to-file.ts), so the test output stays readable; CI prints its tail on failure.
const logFile = process.env.ULYSSES_TEST_LOG_FILE ?? join(tmpdir(), 'ulysses-test-logs', 'components.log');
mkdirSync(dirname(logFile), { recursive: true });
writeFileSync(logFile, ''); // this run's logs only
// Where the time goes (npm run test:times): test/time-reporter.ts writes the run's per-file times
// and the clusters the testbeds recorded, one line each in the cluster log (kept across runs, up
// to 1 MB; the reporter takes the lines of its own run).
process.env.ULYSSES_TEST_TIMES ??= join(dirname(logFile), 'times.json');
const clusterLog = (process.env.ULYSSES_CLUSTER_LOG ??= join(dirname(logFile), 'clusters.jsonl'));
if (existsSync(clusterLog) && statSync(clusterLog).size > 1_000_000) writeFileSync(clusterLog, '');
const env = { ULYSSES_TEST_LOG_FILE: logFile };

// Two projects: fast unit tests of pure logic, and integration tests on the real testbed
// (one file at a time: they share the machine's ports, bridges and cgroups). The ci tier (npm test)
// leaves out the integration files of the full tier (test/tiers.ts; npm run test:all runs them).
export default defineConfig({
  test: {
    fileParallelism: false,
    // the files of a shared-testbed family one after another (test/integration/shared-testbed.ts)
    sequence: { sequencer: FamilySequencer },
    // a test's console output is printed when it fails, not when it passes
    silent: 'passed-only',
    reporters: ['default', './test/time-reporter.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          env,
          setupFiles: ['test/log-to-file.ts'],
          include: ['test/unit/**/*.test.ts', '{core,controller-manager,scheduler-plugins,kubelet-shim,apf-configs,experiments}/**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/*.int.test.ts'],
          // a bound for a busy machine (tests that start a child node process), not a speed expectation
          testTimeout: 60_000,
        },
      },
      {
        test: {
          name: 'integration',
          env,
          setupFiles: ['test/log-to-file.ts', 'test/integration/shared-testbed-setup.ts'],
          globalSetup: ['test/integration/shared-testbed-teardown.ts'],
          include: ['test/integration/**/*.test.ts', '**/*.int.test.ts'],
          exclude: ['**/node_modules/**', ...(fullTier() ? [] : FULL_TIER_FILES.map((f) => f.file))],
          testTimeout: 600_000,
          hookTimeout: 1_800_000, // the first testbed `up` on a cold machine builds Kubernetes
        },
      },
    ],
  },
});
