/**
 * `npm run test:all`, the full tier (test/tiers.ts): the whole suite with ULYSSES_TEST_TIER=full on
 * the default release, then the kubeadm integration test on every other release of
 * experiments/testbed/k8s-versions.txt (the binaries its kubeadm testbed runs are built first, into
 * the same cache). Arguments are passed to the first vitest run (e.g. a file filter). Exit status:
 * 1 if any run failed. The first run's times (test/time-reporter.ts) are where `npm run test:times`
 * reads them by default; the other runs' go to $ULYSSES_TEST_REPORTS (default a temp dir).
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DEFAULT_K8S_VERSION, K8S_RELEASES } from '../experiments/testbed/binaries.ts';

/** What the kubeadm testbed and `ulysses install` run: all a second release needs built. */
export const KUBEADM_BINARIES = ['kube-apiserver', 'kube-scheduler', 'kube-controller-manager', 'kubelet', 'kubeadm', 'kubectl', 'kube-proxy', 'etcd', 'containerd', 'containerd-shim-runc-v2', 'ctr', 'coredns'] as const;

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const reports = process.env.ULYSSES_TEST_REPORTS ?? mkdtempSync(join(tmpdir(), 'ulysses-test-all-'));
mkdirSync(reports, { recursive: true });

function run(title: string, cmd: string, args: string[], env: NodeJS.ProcessEnv): boolean {
  console.log(`\n== ${title}`);
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...env } });
  if (r.error) console.error(`${cmd}: ${r.error.message}`);
  return r.status === 0;
}

const vitest = join(root, 'node_modules', '.bin', 'vitest');
const timesOf = (name: string) => ({ ULYSSES_TEST_TIMES: join(reports, `times-${name}.json`) });
const failed: string[] = [];
const tier = { ULYSSES_TEST_TIER: 'full' };

if (!run(`full tier on Kubernetes ${DEFAULT_K8S_VERSION}`, vitest, ['run', ...process.argv.slice(2)], { ...tier, K8S_VERSION: DEFAULT_K8S_VERSION })) failed.push(`full tier on ${DEFAULT_K8S_VERSION}`);
for (const r of K8S_RELEASES.filter((x) => !x.isDefault)) {
  const env = { ...tier, K8S_VERSION: r.kubernetes };
  if (!run(`Kubernetes ${r.kubernetes} binaries for the kubeadm testbed`, 'bash', ['experiments/testbed/build-binaries.sh'], { ...env, ULYSSES_BUILD_ONLY: KUBEADM_BINARIES.join(' ') })) {
    failed.push(`building ${r.kubernetes}`);
    continue;
  }
  if (!run(`kubeadm integration test on Kubernetes ${r.kubernetes}`, vitest, ['run', '--project', 'integration', 'test/integration/kubeadm.int.test.ts', ], { ...env, ...timesOf(`kubeadm-${r.kubernetes}`) })) failed.push(`kubeadm on ${r.kubernetes}`);
}
console.log(`\n== full tier: ${failed.length ? `FAILED: ${failed.join('; ')}` : 'passed'} (npm run test:times: the table of the ${DEFAULT_K8S_VERSION} run; the other releases' times in ${reports})`);
process.exit(failed.length ? 1 : 0);
