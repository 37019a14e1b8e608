/**
 * Locates (building on first use) the pinned Kubernetes, etcd, kwok, containerd and CoreDNS binaries. The
 * build itself is build-binaries.sh: a generated wrapper Go module, cached per version under
 * $ULYSSES_CACHE (default ~/.cache/ulysses), never rebuilt once present.
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { availableParallelism, homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

export const K8S_VERSION = process.env.K8S_VERSION ?? 'v1.36.3';
export const BINARIES = [
  'kube-apiserver',
  'kube-scheduler',
  'kube-controller-manager',
  'kubelet',
  'kubectl',
  'kubeadm',
  'kube-proxy',
  'etcd',
  'kwok',
  'containerd',
  'containerd-shim-runc-v2',
  'ctr',
  'coredns',
] as const;
export type Binary = (typeof BINARIES)[number];

export function cacheDir(): string {
  return process.env.ULYSSES_CACHE ?? join(homedir(), '.cache', 'ulysses');
}

export function binDir(): string {
  return join(cacheDir(), 'bin', `k8s-${K8S_VERSION}`);
}

export function binaryPath(name: Binary): string {
  return join(binDir(), name);
}

export function missingBinaries(): Binary[] {
  return BINARIES.filter((b) => !existsSync(binaryPath(b)));
}

/** Builds whatever is missing, streaming the script's progress lines to `log`. */
export async function ensureBinaries(log: (line: string) => void = (l) => process.stderr.write(l + '\n')): Promise<string> {
  if (missingBinaries().length === 0) return binDir();
  const script = join(dirname(fileURLToPath(import.meta.url)), 'build-binaries.sh');
  // a cold build of everything measured about 18 minutes on 2 cores (~36 CPU-minutes)
  const minutes = Math.max(2, Math.round(36 / Math.max(1, availableParallelism())));
  log(`building ${missingBinaries().join(', ')} into ${binDir()}: first run only, about ${minutes} minutes on ${availableParallelism()} cores for all of them; cached afterwards`);
  await new Promise<void>((resolve, reject) => {
    const child = spawn('bash', [script, cacheDir()], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, K8S_VERSION } });
    let tail = '';
    const onData = (buf: Buffer) => {
      for (const line of buf.toString().split('\n')) {
        if (!line) continue;
        tail = (tail + line + '\n').slice(-4000);
        if (line.startsWith('[ulysses build]')) log(line);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`building binaries failed (exit ${code}):\n${tail}`))));
  });
  const still = missingBinaries();
  if (still.length) throw new Error(`build finished but binaries are missing: ${still.join(', ')}`);
  return binDir();
}

/**
 * A one-file Go program of ours (a bench client made of the kubelet's or kube-scheduler's own client
 * code) built on first use, one binary per version of its source (`<name>-<sha256>` beside the
 * binaries), inside the wrapper module build-binaries.sh made for the Kubernetes binaries: the same
 * k8s.io/kubernetes release as the testbed's, and its packages already compiled.
 */
export function buildGoTool(name: string, source: string, log: (line: string) => void): string {
  const hash = createHash('sha256').update(readFileSync(source)).digest('hex').slice(0, 12);
  const bin = join(binDir(), `${name}-${hash}`);
  if (existsSync(bin)) return bin;
  const mod = join(cacheDir(), 'build', `k8s-${K8S_VERSION}`);
  if (!existsSync(join(mod, 'go.sum'))) throw new Error(`${name}: ${mod}/go.sum is missing: build the Kubernetes binaries first (experiments/testbed/build-binaries.sh)`);
  mkdirSync(join(mod, name), { recursive: true });
  copyFileSync(source, join(mod, name, 'main.go'));
  log(`building ${bin} from ${source} (k8s.io/kubernetes ${K8S_VERSION})`);
  execFileSync('go', ['build', '-trimpath', '-o', `${bin}.tmp`, `./${name}`], {
    cwd: mod,
    stdio: ['ignore', 'inherit', 'inherit'],
    env: { ...process.env, GOFLAGS: '-mod=mod', GOTOOLCHAIN: 'local', CGO_ENABLED: '0' },
  });
  renameSync(`${bin}.tmp`, bin);
  return bin;
}
