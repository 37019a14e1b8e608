import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { defineConfig } from 'vitest/config';
import { FULL_TIER_FILES, fullTier } from './test/tiers.ts';

// In-process component logs (pino) and the lab's progress lines (testbed up, install steps) go to a
// file (test/log-to-file.ts), so the test output stays readable; CI prints its tail on failure.
const logFile = process.env.ULYSSES_TEST_LOG_FILE ?? join(tmpdir(), 'ulysses-test-logs', 'components.log');
mkdirSync(dirname(logFile), { recursive: true });
writeFileSync(logFile, ''); // this run's logs only
// one line per cluster a test file brings up (test/test-times.ts counts them per file)
const clusterLog = process.env.ULYSSES_CLUSTER_LOG ?? join(dirname(logFile), 'clusters.jsonl');
writeFileSync(clusterLog, '');
const env = { ULYSSES_TEST_LOG_FILE: logFile, ULYSSES_CLUSTER_LOG: clusterLog };

// Two projects: fast unit tests of pure logic, and integration tests on the real testbed
// (one file at a time: they share the machine's ports, bridges and cgroups). The ci tier (npm test)
// leaves out the integration files of the full tier (test/tiers.ts; npm run test:all runs them).
export default defineConfig({
  test: {
    fileParallelism: false,
    // a test's console output is printed when it fails, not when it passes
    silent: 'passed-only',
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
          setupFiles: ['test/log-to-file.ts'],
          include: ['test/integration/**/*.test.ts', '**/*.int.test.ts'],
          exclude: ['**/node_modules/**', ...(fullTier() ? [] : FULL_TIER_FILES.map((f) => f.file))],
          testTimeout: 600_000,
          hookTimeout: 1_800_000, // the first testbed `up` on a cold machine builds Kubernetes
        },
      },
    ],
  },
});
