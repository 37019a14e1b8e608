// The testbed's container images: three static C programs (src/*.c), each packed as a one-layer OCI
// image-layout tar for `ctr -n k8s.io images import`. No registry and no container engine involved.
//
//   pause        ulysses.local/pause:1        sandbox process: sleeps, reaps zombies, exits on SIGTERM
//   udp-echo     ulysses.local/udp-echo:1     UDP echo on $ECHO_PORT (5005)
//   http-server  ulysses.local/http-server:1  HTTP/1.0 "ok <hostname>" on $HTTP_PORT (8080)
//
// buildTestImages(cacheDir) compiles into ${cacheDir}/images/ and writes ${cacheDir}/images/<short>.tar.
// A tar is rebuilt only when its stamp (<short>.stamp: hash of the C source, compiler flags, image
// metadata and the builder version) no longer matches.

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { access, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { writeOciImageTar } from './oci.ts';

const execFileAsync = promisify(execFile);

/** Bump when oci.ts output changes, to invalidate cached tars. */
const BUILDER_VERSION = 1;
const CC = process.env.CC ?? 'gcc';
const CFLAGS = ['-static', '-O2', '-s'];
export const IMAGES_SRC_DIR = fileURLToPath(new URL('./src/', import.meta.url));

export interface TestImage {
  /** File stem: src/<short>.c, images/<short>, images/<short>.tar. */
  short: string;
  /** Full image reference as kubelet/containerd see it. */
  name: string;
  entrypoint: string[];
  env?: string[];
  /** Port the program listens on by default, if any. */
  port?: { protocol: 'UDP' | 'TCP'; number: number; env: string };
}

export const TEST_IMAGES = {
  pause: { short: 'pause', name: 'ulysses.local/pause:1', entrypoint: ['/pause'] },
  udpEcho: {
    short: 'udp-echo',
    name: 'ulysses.local/udp-echo:1',
    entrypoint: ['/udp-echo'],
    port: { protocol: 'UDP', number: 5005, env: 'ECHO_PORT' },
  },
  httpServer: {
    short: 'http-server',
    name: 'ulysses.local/http-server:1',
    entrypoint: ['/http-server'],
    port: { protocol: 'TCP', number: 8080, env: 'HTTP_PORT' },
  },
} as const satisfies Record<string, TestImage>;

export interface BuiltImage {
  name: string;
  /** Absolute path of the OCI image-layout tar. */
  tar: string;
  short: string;
  /** Manifest digest ("sha256:..."), what containerd reports as the image digest. */
  digest: string;
}

interface Stamp {
  key: string;
  digest: string;
}

async function exists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}

async function readStamp(p: string): Promise<Stamp | undefined> {
  try {
    const s = JSON.parse(await readFile(p, 'utf8')) as Partial<Stamp>;
    return typeof s.key === 'string' && typeof s.digest === 'string' ? { key: s.key, digest: s.digest } : undefined;
  } catch {
    return undefined;
  }
}

async function compile(src: string, out: string): Promise<void> {
  const tmp = `${out}.tmp-${process.pid}`;
  try {
    await execFileAsync(CC, [...CFLAGS, '-o', tmp, src], { maxBuffer: 16 * 1024 * 1024 });
  } catch (err) {
    await rm(tmp, { force: true });
    const e = err as NodeJS.ErrnoException & { stderr?: string; code?: unknown };
    if (e.code === 'ENOENT') throw new Error(`cannot compile ${src}: compiler "${CC}" not found (install gcc)`);
    const stderr = (e.stderr ?? '').trim();
    throw new Error(`${CC} ${[...CFLAGS, '-o', out, src].join(' ')} failed${stderr ? `:\n${stderr}` : `: ${e.message}`}`);
  }
  await rename(tmp, out);
}

async function buildOne(img: TestImage, dir: string, log: (msg: string) => void): Promise<BuiltImage> {
  const src = join(IMAGES_SRC_DIR, `${img.short}.c`);
  const bin = join(dir, img.short);
  const tar = join(dir, `${img.short}.tar`);
  const stampFile = join(dir, `${img.short}.stamp`);
  const source = await readFile(src);
  const key = createHash('sha256')
    .update(JSON.stringify({ v: BUILDER_VERSION, cc: CC, cflags: CFLAGS, img }))
    .update('\0')
    .update(source)
    .digest('hex');

  const stamp = await readStamp(stampFile);
  if (stamp?.key === key && (await exists(tar))) {
    log(`image ${img.name}: cached (${tar})`);
    return { name: img.name, tar, short: img.short, digest: stamp.digest };
  }

  const t0 = Date.now();
  await compile(src, bin);
  const { digest } = await writeOciImageTar({
    name: img.name,
    files: [{ path: `/${img.short}`, content: await readFile(bin), mode: 0o755 }],
    entrypoint: [...img.entrypoint],
    ...(img.env ? { env: [...img.env] } : {}),
    outFile: tar,
  });
  await writeFile(stampFile, `${JSON.stringify({ key, digest } satisfies Stamp)}\n`);
  log(`image ${img.name}: built ${tar} (${digest.slice(0, 19)}, ${Date.now() - t0} ms)`);
  return { name: img.name, tar, short: img.short, digest };
}

/** Compiles and packs every TEST_IMAGES entry into ${cacheDir}/images/, reusing up-to-date tars. */
export async function buildTestImages(cacheDir: string, log: (msg: string) => void = () => {}): Promise<BuiltImage[]> {
  const dir = join(resolve(cacheDir), 'images');
  await mkdir(dir, { recursive: true });
  const out: BuiltImage[] = [];
  for (const img of Object.values(TEST_IMAGES) as TestImage[]) out.push(await buildOne(img, dir, log));
  return out;
}
