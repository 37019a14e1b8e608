import { defineConfig } from 'vitest/config';

// Two projects: fast unit tests of pure logic, and integration tests on the real testbed
// (one file at a time: they share the machine's ports, bridges and cgroups).
export default defineConfig({
  test: {
    fileParallelism: false,
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts', '{core,controller-manager,scheduler-plugins,kubelet-shim,apf-configs,experiments}/**/*.test.ts'],
          exclude: ['**/node_modules/**', '**/*.int.test.ts'],
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts', '**/*.int.test.ts'],
          exclude: ['**/node_modules/**'],
          testTimeout: 600_000,
          hookTimeout: 1_800_000, // the first testbed `up` on a cold machine builds Kubernetes
        },
      },
    ],
  },
});
