/**
 * Locates (building on first use) the pinned Kubernetes, etcd, kwok, containerd and CoreDNS binaries. The
 * build itself is build-binaries.sh: a generated wrapper Go module, cached per version under
 * $ULYSSES_CACHE (default ~/.cache/ulysses), never rebuilt once present (except an etcd or CoreDNS of
 * another version than the release's row in k8s-versions.txt asks for).
 */
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync } from 'node:fs';
import { availableParallelism, homedir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { progressLog } from '../../core/logging.ts';

/** One row of k8s-versions.txt: a Kubernetes release and what its kubeadm deploys beside it. */
export interface K8sRelease {
  kubernetes: string;
  /** etcd (Go module version, e.g. v3.6.8); kubeadm's image tag is `<etcd without v>-0` */
  etcd: string;
  /** CoreDNS (Go module version = image tag, e.g. v1.14.2) */
  coredns: string;
  /** kubeadm's pause image tag, e.g. 3.10.2 */
  pause: string;
  isDefault: boolean;
}

export const VERSIONS_FILE = join(dirname(fileURLToPath(import.meta.url)), 'k8s-versions.txt');

/** Parses k8s-versions.txt; a malformed row or not exactly one default is an error naming the line. */
export function parseK8sReleases(text: string, file = VERSIONS_FILE): K8sRelease[] {
  const rows: K8sRelease[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (!line || line.startsWith('#')) return;
    const f = line.split(/\s+/);
    const [kubernetes, etcd, coredns, pause, mark] = f;
    const bad = (what: string) => new Error(`${file}:${i + 1}: ${what} in "${line}" (columns: kubernetes etcd coredns pause default|-)`);
    if (f.length !== 5) throw bad(`${f.length} columns instead of 5`);
    if (!/^v1\.\d+\.\d+$/.test(kubernetes!)) throw bad(`kubernetes "${kubernetes}" is not a release like v1.36.3`);
    if (!/^v3\.\d+\.\d+$/.test(etcd!)) throw bad(`etcd "${etcd}" is not a version like v3.6.8`);
    if (!/^v\d+\.\d+\.\d+$/.test(coredns!)) throw bad(`coredns "${coredns}" is not a version like v1.14.2`);
    if (!/^\d+\.\d+(\.\d+)?$/.test(pause!)) throw bad(`pause "${pause}" is not a tag like 3.10.2`);
    if (mark !== 'default' && mark !== '-') throw bad(`the last column is "${mark}", not "default" or "-"`);
    if (rows.some((r) => r.kubernetes === kubernetes)) throw bad(`a second row for ${kubernetes}`);
    rows.push({ kubernetes: kubernetes!, etcd: etcd!, coredns: coredns!, pause: pause!, isDefault: mark === 'default' });
  });
  const defaults = rows.filter((r) => r.isDefault);
  if (defaults.length !== 1) throw new Error(`${file}: ${defaults.length} rows are marked default, there must be exactly one`);
  return rows;
}

export const K8S_RELEASES: readonly K8sRelease[] = parseK8sReleases(readFileSync(VERSIONS_FILE, 'utf8'));
export const DEFAULT_K8S_VERSION = K8S_RELEASES.find((r) => r.isDefault)!.kubernetes;
export const K8S_VERSION = process.env.K8S_VERSION || DEFAULT_K8S_VERSION;

/**
 * The etcd and CoreDNS `version` needs: its row, overridden by $ETCD_VERSION / $COREDNS_VERSION as
 * build-binaries.sh does; a release without a row and without both overrides is an error.
 */
export function k8sRelease(version = K8S_VERSION, env: NodeJS.ProcessEnv = process.env, releases: readonly K8sRelease[] = K8S_RELEASES): K8sRelease {
  const row = releases.find((r) => r.kubernetes === version);
  if (!row && !(env.ETCD_VERSION && env.COREDNS_VERSION)) {
    throw new Error(
      `K8S_VERSION=${version} has no row in ${VERSIONS_FILE} (known: ${releases.map((r) => r.kubernetes).join(', ')}): ` +
        'add one with the etcd, CoreDNS and pause versions its kubeadm deploys (cmd/kubeadm/app/constants), or set ETCD_VERSION and COREDNS_VERSION',
    );
  }
  return {
    kubernetes: version,
    etcd: env.ETCD_VERSION || row!.etcd,
    coredns: env.COREDNS_VERSION || row!.coredns,
    pause: row?.pause ?? '',
    isDefault: row?.isDefault ?? false,
  };
}
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

/** The version a built etcd or CoreDNS reports ("v3.6.8", "v1.14.2"), '' when it does not run. */
export function builtVersion(name: 'etcd' | 'coredns'): string {
  try {
    const out = execFileSync(binaryPath(name), [name === 'etcd' ? '--version' : '-version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 10_000 });
    const m = name === 'etcd' ? /^etcd Version: (\S+)/m.exec(out) : /^CoreDNS-(\S+)/m.exec(out);
    return m ? `v${m[1]}` : '';
  } catch {
    return '';
  }
}

/** Binaries not built yet, and an etcd or CoreDNS of another version than the release's (rebuilt by the build). */
export function missingBinaries(): Binary[] {
  const absent = BINARIES.filter((b) => !existsSync(binaryPath(b)));
  const release = k8sRelease();
  const stale = (['etcd', 'coredns'] as const).filter((b) => !absent.includes(b) && builtVersion(b) !== release[b]);
  return [...absent, ...stale];
}

/** Builds whatever is missing, streaming the script's progress lines to `log`. */
export async function ensureBinaries(log: (line: string) => void = progressLog): Promise<string> {
  k8sRelease(); // an unknown release fails here, before any build
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
