import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { defineConfig } from 'vitest/config';

// In-process component logs (pino) go to a file (test/log-to-file.ts), so the test output stays
// readable; CI prints its tail on failure.
const logFile = process.env.ULYSSES_TEST_LOG_FILE ?? join(tmpdir(), 'ulysses-test-logs', 'components.log');
mkdirSync(dirname(logFile), { recursive: true });
writeFileSync(logFile, ''); // this run's logs only

// Two projects: fast unit tests of pure logic, and integration tests on the real testbed
// (one file at a time: they share the machine's ports, bridges and cgroups).
export default defineConfig({
  test: {
    fileParallelism: false,
    projects: [
      {
        test: {
          name: 'unit',
          env: { ULYSSES_TEST_LOG_FILE: logFile },
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
          env: { ULYSSES_TEST_LOG_FILE: logFile },
          setupFiles: ['test/log-to-file.ts'],
          include: ['test/integration/**/*.test.ts', '**/*.int.test.ts'],
          exclude: ['**/node_modules/**'],
          testTimeout: 600_000,
          hookTimeout: 1_800_000, // the first testbed `up` on a cold machine builds Kubernetes
        },
      },
    ],
  },
});
