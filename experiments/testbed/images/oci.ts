// Writes a single-layer container image as an OCI image-layout tarball, without a registry or a
// container engine. The result can be loaded with `ctr -n k8s.io images import FILE.tar`.
//
// Layout of the outer tar (all entries mtime 0, uid/gid 0, fixed order):
//   oci-layout                       {"imageLayoutVersion":"1.0.0"}
//   blobs/ , blobs/sha256/
//   blobs/sha256/<layer>             uncompressed layer tar (application/vnd.oci.image.layer.v1.tar)
//   blobs/sha256/<config>            image config (application/vnd.oci.image.config.v1+json)
//   blobs/sha256/<manifest>          image manifest (application/vnd.oci.image.manifest.v1+json)
//   index.json                       one manifest descriptor annotated with the image name
//
// The same inputs always give byte-identical output (no timestamps, fixed JSON key order).

import { createHash } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, posix } from 'node:path';
import * as tar from 'tar-stream';

export const MEDIA_TYPE_LAYER = 'application/vnd.oci.image.layer.v1.tar';
export const MEDIA_TYPE_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const MEDIA_TYPE_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const MEDIA_TYPE_INDEX = 'application/vnd.oci.image.index.v1+json';
export const ANNOTATION_CONTAINERD_NAME = 'io.containerd.image.name';
export const ANNOTATION_REF_NAME = 'org.opencontainers.image.ref.name';

const DEFAULT_PATH = 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const EPOCH = new Date(0);

export interface OciFile {
  /** Absolute or relative path inside the image, e.g. "/udp-echo" or "etc/hosts". */
  path: string;
  content: Buffer;
  /** Permission bits, e.g. 0o755. */
  mode: number;
  /** A symbolic link to this target instead of a regular file (`content` is then ignored). */
  symlink?: string;
  /** A directory with this `mode` (e.g. /tmp with 0o1777) instead of a regular file. */
  directory?: boolean;
}

export interface OciImageOptions {
  /** Full reference, e.g. "ulysses.local/udp-echo:1". */
  name: string;
  files: OciFile[];
  entrypoint: string[];
  /** Default arguments of the entrypoint (the image config's Cmd). */
  cmd?: string[];
  /** The user the process runs as, e.g. "1000:1000" (the image config's User). */
  user?: string;
  /** "KEY=value" entries; a PATH is added unless one is given. */
  env?: string[];
  outFile: string;
  /** Defaults to the host architecture (Go naming: amd64, arm64), which is what a local gcc targets. */
  architecture?: string;
}

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture: string; os: string };
}

export function sha256(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

export function hostArchitecture(): string {
  switch (process.arch) {
    case 'x64':
      return 'amd64';
    case 'ia32':
      return '386';
    case 'arm':
      return 'arm';
    default:
      return process.arch; // arm64, ppc64, s390x, riscv64 already match Go's names
  }
}

/** Splits "registry/repo:tag" (or "repo@sha256:...") into its tag; "latest" when there is none. */
export function refTag(name: string): string {
  if (name.includes('@')) throw new Error(`image name must be tagged, not digested: ${name}`);
  const lastSlash = name.lastIndexOf('/');
  const colon = name.lastIndexOf(':');
  return colon > lastSlash ? name.slice(colon + 1) : 'latest';
}

function normalizePath(p: string): string {
  const n = posix.normalize(p.replace(/^\/+/, ''));
  if (n === '.' || n === '' || n.startsWith('..')) throw new Error(`invalid image file path: ${p}`);
  return n.replace(/\/+$/, '');
}

type TarHeader = Partial<tar.Header> & Pick<tar.Header, 'name'>;

interface TarEntry {
  header: TarHeader;
  content?: Buffer;
}

/** Packs entries into an in-memory tar; headers get mtime 0, uid/gid 0 and empty user/group names. */
export async function packTar(entries: TarEntry[]): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  const done = new Promise<Buffer>((resolve, reject) => {
    pack.on('data', (c: unknown) => chunks.push(c as Buffer));
    pack.on('end', () => resolve(Buffer.concat(chunks)));
    pack.on('error', reject);
  });
  for (const e of entries) {
    const header: TarHeader = { mtime: EPOCH, uid: 0, gid: 0, uname: '', gname: '', ...e.header };
    await new Promise<void>((resolve, reject) => {
      const cb = (err?: Error | null) => (err ? reject(err) : resolve());
      if (e.content !== undefined) pack.entry(header, e.content, cb);
      else pack.entry(header, cb);
    });
  }
  pack.finalize();
  return done;
}

/** Builds the uncompressed layer: the files plus every parent directory (0755), sorted by path. */
export async function buildLayer(files: OciFile[]): Promise<Buffer> {
  const dirs = new Set<string>();
  const dirModes = new Map<string, number>();
  const byPath = new Map<string, OciFile>();
  for (const f of files) {
    const p = normalizePath(f.path);
    if (f.directory) {
      dirs.add(p);
      dirModes.set(p, f.mode & 0o7777);
      for (let d = posix.dirname(p); d !== '.'; d = posix.dirname(d)) dirs.add(d);
      continue;
    }
    if (byPath.has(p)) throw new Error(`duplicate image file path: ${f.path}`);
    byPath.set(p, f);
    for (let d = posix.dirname(p); d !== '.'; d = posix.dirname(d)) dirs.add(d);
  }
  for (const d of dirs) if (byPath.has(d)) throw new Error(`image path is both a file and a directory: ${d}`);
  const entries: Array<{ path: string; entry: TarEntry }> = [];
  for (const d of dirs) entries.push({ path: d, entry: { header: { name: `${d}/`, type: 'directory', mode: dirModes.get(d) ?? 0o755 } } });
  for (const [p, f] of byPath) {
    entries.push({
      path: p,
      entry:
        f.symlink !== undefined
          ? { header: { name: p, type: 'symlink', linkname: f.symlink, mode: 0o777 } }
          : { header: { name: p, type: 'file', mode: f.mode & 0o7777, size: f.content.length }, content: f.content },
    });
  }
  // Byte-wise order, so a parent directory ("a") always precedes its children ("a/b").
  entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return packTar(entries.map((e) => e.entry));
}

function json(value: unknown): Buffer {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

export async function writeOciImageTar(opts: OciImageOptions): Promise<{ digest: string }> {
  if (opts.entrypoint.length === 0) throw new Error('entrypoint must not be empty');
  const tag = refTag(opts.name);
  const architecture = opts.architecture ?? hostArchitecture();
  const env = [...(opts.env ?? [])];
  if (!env.some((e) => e.startsWith('PATH='))) env.unshift(DEFAULT_PATH);

  const layer = await buildLayer(opts.files);
  const layerDigest = sha256(layer);

  // Key order is fixed by construction; no "created" timestamp, for determinism.
  const config = json({
    architecture,
    os: 'linux',
    config: { ...(opts.user ? { User: opts.user } : {}), Env: env, Entrypoint: opts.entrypoint, ...(opts.cmd ? { Cmd: opts.cmd } : {}) },
    rootfs: { type: 'layers', diff_ids: [layerDigest] },
  });
  const configDigest = sha256(config);

  const manifest = json({
    schemaVersion: 2,
    mediaType: MEDIA_TYPE_MANIFEST,
    config: { mediaType: MEDIA_TYPE_CONFIG, digest: configDigest, size: config.length },
    layers: [{ mediaType: MEDIA_TYPE_LAYER, digest: layerDigest, size: layer.length }],
  });
  const manifestDigest = sha256(manifest);

  const manifestDescriptor: Descriptor = {
    mediaType: MEDIA_TYPE_MANIFEST,
    digest: manifestDigest,
    size: manifest.length,
    annotations: { [ANNOTATION_CONTAINERD_NAME]: opts.name, [ANNOTATION_REF_NAME]: tag },
    platform: { architecture, os: 'linux' },
  };
  const index = json({ schemaVersion: 2, mediaType: MEDIA_TYPE_INDEX, manifests: [manifestDescriptor] });

  const blob = (digest: string, content: Buffer): TarEntry => ({
    header: { name: `blobs/sha256/${digest.slice('sha256:'.length)}`, type: 'file', mode: 0o644 },
    content,
  });
  const seen = new Set<string>();
  const blobs: TarEntry[] = [];
  for (const [d, c] of [
    [layerDigest, layer],
    [configDigest, config],
    [manifestDigest, manifest],
  ] as const) {
    if (!seen.has(d)) blobs.push(blob(d, c));
    seen.add(d);
  }
  const image = await packTar([
    { header: { name: 'oci-layout', type: 'file', mode: 0o644 }, content: json({ imageLayoutVersion: '1.0.0' }) },
    { header: { name: 'blobs/', type: 'directory', mode: 0o755 } },
    { header: { name: 'blobs/sha256/', type: 'directory', mode: 0o755 } },
    ...blobs,
    { header: { name: 'index.json', type: 'file', mode: 0o644 }, content: index },
  ]);

  await mkdir(dirname(opts.outFile), { recursive: true });
  const tmp = `${opts.outFile}.tmp-${process.pid}`;
  try {
    await writeFile(tmp, image);
    await rename(tmp, opts.outFile);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  return { digest: manifestDigest };
}
