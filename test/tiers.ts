/**
 * The test tiers (docs/development.md "Test tiers"). `npm test`, the README's command and what CI
 * runs, is the `ci` tier: every unit test and every integration file except those below. `npm run
 * test:all` is the `full` tier: everything, each release of experiments/testbed/k8s-versions.txt,
 * and the longer variants some files run when `ULYSSES_TEST_TIER=full` (fullTier()). It runs before
 * an issue touching the area of a full-tier check is said resolved. Nothing lives in no tier.
 */

export type TestTier = 'ci' | 'full';

/** The tier of this run: `ULYSSES_TEST_TIER` (ci unless set to full). */
export function testTier(env: NodeJS.ProcessEnv = process.env): TestTier {
  const t = env.ULYSSES_TEST_TIER ?? 'ci';
  if (t !== 'ci' && t !== 'full') throw new Error(`ULYSSES_TEST_TIER=${JSON.stringify(t)}: ci or full`);
  return t;
}

export const fullTier = (env: NodeJS.ProcessEnv = process.env): boolean => testTier(env) === 'full';

/** Integration files only the full tier runs, each with what covers its checks in the ci tier. */
export const FULL_TIER_FILES: readonly { file: string; why: string }[] = [
  {
    file: 'test/integration/kubeadm-node-shell.int.test.ts',
    why: "install, failover and uninstall through a node shell on a kubeadm cluster, and faults of Ulysses' own components there (the kubelet-shim killed and stopped under load, the controller manager gone for good) (~12 min); the ci tier installs and uninstalls through the testbed access in kubeadm.int, node-shell.test covers the shell commands, and shim-fallback.test, kcm-handback.test and extender-routing.test the fallback guard's, the watchdog's, the handback's and the extender routing's decisions",
  },
  {
    file: 'test/integration/failover-upstream.int.test.ts',
    why: "the failover experiment's upstream configuration on kubeadm (~4 min); the ci tier runs configurations 1 and 5 in experiment.int and the kubeadm switch in kubeadm.int",
  },
  {
    file: 'test/integration/node-failure-soak.int.test.ts',
    why: 'no false node failure in a 30-minute soak under a CPU hog and apiserver stalls; the ci tier tries each false-positive case once in node-failure.int (CPU hog, apiserver stopped 10 s, leader killed) and every guard in node-failure.test',
  },
];
