/**
 * The images a kubeadm cluster runs, built from the testbed's own binaries as one-layer OCI image
 * tars (images/oci.ts) and named exactly as `kubeadm config images list` prints them, so kubeadm
 * (imagePullPolicy: IfNotPresent) and the kubelets never pull:
 *
 *   registry.k8s.io/kube-{apiserver,controller-manager,scheduler,proxy}:<version>  /usr/local/bin/<binary>
 *   registry.k8s.io/etcd:<etcd>-0                                                   /usr/local/bin/etcd
 *   registry.k8s.io/coredns/coredns:<v>                                             /coredns (entrypoint)
 *   registry.k8s.io/pause:<v>                                                       /pause (the testbed's pause)
 *
 * kube-proxy execs iptables: its image also holds the host's iptables (the same backend as the host,
 * nf_tables or legacy), its extensions and the shared libraries they load.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, realpathSync, statSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { binaryPath, builtVersion, cacheDir, k8sRelease, K8S_VERSION, VERSIONS_FILE, type K8sRelease } from './binaries.ts';
import { buildTestImages } from './images/index.ts';
import { writeOciImageTar, type OciFile } from './images/oci.ts';

/** Bump when the image contents change, to invalidate cached tars. */
const KUBEADM_IMAGES_VERSION = 1;

export interface KubeadmImage {
  /** exactly as `kubeadm config images list` prints it */
  name: string;
  /** the component: kube-apiserver, kube-proxy, etcd, coredns, pause, ... */
  component: string;
  tar: string;
}

/** `kubeadm config images list`: the image names this kubeadm uses for `version`. */
export function kubeadmImageNames(version = K8S_VERSION): string[] {
  const out = execFileSync(binaryPath('kubeadm'), ['config', 'images', 'list', '--kubernetes-version', version], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  return out.split('\n').map((l) => l.trim()).filter(Boolean);
}

/** The component of an image name: the last path element without the tag. */
export function imageComponent(name: string): string {
  const last = name.slice(name.lastIndexOf('/') + 1);
  return last.includes(':') ? last.slice(0, last.indexOf(':')) : last;
}

/** The tag of an image name (after the last ':' of its last path element), '' without one. */
export function imageTag(name: string): string {
  const last = name.slice(name.lastIndexOf('/') + 1);
  return last.includes(':') ? last.slice(last.indexOf(':') + 1) : '';
}

/**
 * Where `kubeadm config images list` disagrees with the release's row of k8s-versions.txt (etcd
 * `3.6.8-0` for v3.6.8, CoreDNS `v1.14.2`, pause `3.10.2`): one line per image, empty when they agree.
 */
export function releaseMismatches(names: string[], release: K8sRelease): string[] {
  const want: Record<string, string> = { etcd: `${release.etcd.slice(1)}-0`, coredns: release.coredns, ...(release.pause ? { pause: release.pause } : {}) };
  const out: string[] = [];
  for (const [component, tag] of Object.entries(want)) {
    const name = names.find((n) => imageComponent(n) === component);
    if (!name) out.push(`kubeadm ${release.kubernetes} lists no ${component} image (expected tag ${tag})`);
    else if (imageTag(name) !== tag) out.push(`kubeadm ${release.kubernetes} deploys ${name}, the row says ${component} ${tag}`);
  }
  return out;
}

function file(path: string, source: string, mode = 0o755): OciFile {
  return { path, content: readFileSync(source), mode };
}

/** Shared libraries `ldd` lists for the given ELF files (path inside the image = path on the host). */
function sharedLibraries(elfs: string[]): string[] {
  const libs = new Set<string>();
  for (const elf of elfs) {
    let out = '';
    try {
      out = execFileSync('ldd', [elf], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
    } catch {
      continue; // static, or not an ELF file
    }
    for (const line of out.split('\n')) {
      const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
      if (m) libs.add(m[1]!);
    }
  }
  return [...libs];
}

/** The host's iptables (multi-call binary under each name kube-proxy runs), extensions and libraries. */
function iptablesFiles(): OciFile[] {
  const multi = realpathSync('/usr/sbin/iptables');
  const names = ['iptables', 'iptables-save', 'iptables-restore', 'ip6tables', 'ip6tables-save', 'ip6tables-restore'];
  const files: OciFile[] = names.map((n) => file(`/usr/sbin/${n}`, multi));
  const extDir = ['/usr/lib/x86_64-linux-gnu/xtables', '/usr/lib/aarch64-linux-gnu/xtables', '/usr/lib/xtables'].find((d) => existsSync(d));
  const exts = extDir ? readdirSync(extDir).filter((f) => f.endsWith('.so')).map((f) => join(extDir, f)) : [];
  for (const e of exts) files.push(file(e, e, 0o644));
  const nft = existsSync('/usr/sbin/nft') ? ['/usr/sbin/nft'] : [];
  for (const n of nft) files.push(file(n, n));
  for (const lib of sharedLibraries([multi, ...exts, ...nft])) files.push(file(lib, realpathSync(lib)));
  if (existsSync('/etc/protocols')) files.push(file('/etc/protocols', '/etc/protocols', 0o644));
  return files;
}

function imageContent(component: string, pauseBinary: string): { files: OciFile[]; entrypoint: string[] } {
  switch (component) {
    case 'kube-apiserver':
    case 'kube-controller-manager':
    case 'kube-scheduler':
    case 'etcd':
      return { files: [file(`/usr/local/bin/${component}`, binaryPath(component))], entrypoint: [`/usr/local/bin/${component}`] };
    case 'kube-proxy':
      return { files: [file('/usr/local/bin/kube-proxy', binaryPath('kube-proxy')), ...iptablesFiles()], entrypoint: ['/usr/local/bin/kube-proxy'] };
    case 'coredns':
      return { files: [file('/coredns', binaryPath('coredns'))], entrypoint: ['/coredns'] };
    case 'pause':
      return { files: [file('/pause', pauseBinary)], entrypoint: ['/pause'] };
    default:
      throw new Error(`kubeadm asks for image ${component}, which the testbed cannot build`);
  }
}

/** Inputs that decide an image's bytes: its name, the size and mtime of every source file. */
function stampKey(name: string, sources: string[]): string {
  const h = createHash('sha256').update(JSON.stringify({ v: KUBEADM_IMAGES_VERSION, name }));
  for (const s of sources) {
    const st = statSync(s);
    h.update(`\0${s}\0${st.size}\0${st.mtimeMs}`);
  }
  return h.digest('hex');
}

/**
 * Builds (or reuses) one OCI tar per image kubeadm asks for, in
 * ${cacheDir}/images/kubeadm-<version>/. Images kubeadm lists but `skip` names (e.g. coredns when it
 * is not built) are left out.
 */
export async function buildKubeadmImages(log: (line: string) => void, skip: string[] = []): Promise<KubeadmImage[]> {
  const names = kubeadmImageNames();
  const release = k8sRelease();
  const mismatches = releaseMismatches(names, release);
  if (mismatches.length) throw new Error(`${mismatches.join('; ')}: correct the ${K8S_VERSION} row of ${VERSIONS_FILE} (from cmd/kubeadm/app/constants of that release), then rebuild with experiments/testbed/build-binaries.sh`);
  const built: Array<'etcd' | 'coredns'> = skip.includes('coredns') ? ['etcd'] : ['etcd', 'coredns'];
  for (const b of built) {
    const got = builtVersion(b);
    if (got !== release[b]) throw new Error(`${binaryPath(b)} is ${got || 'of unknown version'}, kubeadm ${K8S_VERSION} deploys ${release[b]}: run K8S_VERSION=${K8S_VERSION} bash experiments/testbed/build-binaries.sh`);
  }
  const dir = join(cacheDir(), 'images', `kubeadm-${K8S_VERSION}`);
  await mkdir(dir, { recursive: true });
  const pause = join(cacheDir(), 'images', 'pause');
  if (!existsSync(pause)) await buildTestImages(cacheDir(), log);
  const out: KubeadmImage[] = [];
  for (const name of names) {
    const component = imageComponent(name);
    if (skip.includes(component)) continue;
    const tar = join(dir, `${component}.tar`);
    const stampFile = `${tar}.stamp`;
    const sources = component === 'pause' ? [pause] : component === 'kube-proxy' ? [binaryPath('kube-proxy'), '/usr/sbin/iptables'] : [binaryPath(component as never)];
    const key = stampKey(name, sources.map((s) => realpathSync(s)));
    if (existsSync(tar) && existsSync(stampFile) && readFileSync(stampFile, 'utf8').trim() === key) {
      out.push({ name, component, tar });
      continue;
    }
    const t0 = Date.now();
    const { files, entrypoint } = imageContent(component, pause);
    await writeOciImageTar({ name, files, entrypoint, outFile: tar });
    writeFileSync(stampFile, `${key}\n`);
    log(`image ${name}: built ${tar} (${(statSync(tar).size / 1e6).toFixed(1)} MB, ${Date.now() - t0} ms)`);
    out.push({ name, component, tar });
  }
  return out;
}
