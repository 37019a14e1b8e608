// The testbed images (experiments/testbed/images): compiled from C with the local gcc and packed as
// OCI image-layout tars. Checks the layout containerd's `ctr images import` relies on, blob digests,
// the layer content, caching and byte-for-byte determinism.

import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestImages, TEST_IMAGES, type BuiltImage } from '../../experiments/testbed/images/index.ts';
import { writeOciImageTar } from '../../experiments/testbed/images/oci.ts';

interface Entry {
  name: string;
  type: string;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
  content: Buffer;
}

async function readTar(data: Buffer): Promise<Entry[]> {
  const out: Entry[] = [];
  const ex = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', () => {
        out.push({
          name: header.name,
          type: header.type,
          mode: header.mode,
          uid: header.uid,
          gid: header.gid,
          mtime: header.mtime.getTime(),
          content: Buffer.concat(chunks),
        });
        next();
      });
      stream.on('error', reject);
    });
    ex.on('finish', () => resolve());
    ex.on('error', reject);
  });
  Readable.from([data]).pipe(ex);
  await done;
  return out;
}

const sha = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

interface Parsed {
  entries: Entry[];
  index: { schemaVersion: number; manifests: Descriptor[] };
  manifest: { schemaVersion: number; mediaType: string; config: Descriptor; layers: Descriptor[] };
  config: {
    architecture: string;
    os: string;
    config: { Entrypoint: string[]; Env: string[] };
    rootfs: { type: string; diff_ids: string[] };
  };
  layer: Entry[];
  blob: (digest: string) => Buffer;
}

async function parseImage(file: string): Promise<Parsed> {
  const entries = await readTar(await readFile(file));
  const byName = new Map(entries.map((e) => [e.name, e]));
  const get = (name: string): Buffer => {
    const e = byName.get(name);
    if (!e) throw new Error(`${file}: missing ${name}`);
    return e.content;
  };
  const blob = (digest: string): Buffer => {
    const b = get(`blobs/sha256/${digest.replace(/^sha256:/, '')}`);
    expect(sha(b)).toBe(digest);
    return b;
  };
  const index = JSON.parse(get('index.json').toString()) as Parsed['index'];
  expect(index.manifests).toHaveLength(1);
  const md = index.manifests[0]!;
  const manifestBuf = blob(md.digest);
  expect(manifestBuf.length).toBe(md.size);
  const manifest = JSON.parse(manifestBuf.toString()) as Parsed['manifest'];
  const configBuf = blob(manifest.config.digest);
  expect(configBuf.length).toBe(manifest.config.size);
  const config = JSON.parse(configBuf.toString()) as Parsed['config'];
  expect(manifest.layers).toHaveLength(1);
  const layerBuf = blob(manifest.layers[0]!.digest);
  expect(layerBuf.length).toBe(manifest.layers[0]!.size);
  return { entries, index, manifest, config, layer: await readTar(layerBuf), blob };
}

describe('testbed OCI images', () => {
  let dirA: string;
  let dirB: string;
  let built: BuiltImage[];

  beforeAll(async () => {
    dirA = await mkdtemp(join(tmpdir(), 'ulysses-images-a-'));
    dirB = await mkdtemp(join(tmpdir(), 'ulysses-images-b-'));
    built = await buildTestImages(dirA);
  }, 120_000);

  afterAll(async () => {
    await rm(dirA, { recursive: true, force: true });
    await rm(dirB, { recursive: true, force: true });
  });

  it('builds one tar per TEST_IMAGES entry under <cacheDir>/images', () => {
    expect(built.map((b) => b.name).sort()).toEqual(
      ['ulysses.local/http-server:1', 'ulysses.local/pause:1', 'ulysses.local/udp-echo:1'].sort(),
    );
    for (const b of built) expect(b.tar).toBe(join(dirA, 'images', `${b.short}.tar`));
  });

  for (const img of Object.values(TEST_IMAGES)) {
    it(`${img.name}: valid OCI layout with matching digests and a 0755 static binary`, async () => {
      const b = built.find((x) => x.name === img.name)!;
      const p = await parseImage(b.tar);

      expect(p.entries[0]!.name).toBe('oci-layout');
      expect(JSON.parse(p.entries[0]!.content.toString())).toEqual({ imageLayoutVersion: '1.0.0' });
      for (const e of p.entries) {
        expect([e.uid, e.gid, e.mtime]).toEqual([0, 0, 0]);
      }

      expect(p.index.schemaVersion).toBe(2);
      const md = p.index.manifests[0]!;
      expect(md.mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
      expect(md.digest).toBe(b.digest);
      expect(md.annotations).toEqual({
        'io.containerd.image.name': img.name,
        'org.opencontainers.image.ref.name': '1',
      });

      expect(p.manifest.schemaVersion).toBe(2);
      expect(p.manifest.mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
      expect(p.manifest.config.mediaType).toBe('application/vnd.oci.image.config.v1+json');
      expect(p.manifest.layers[0]!.mediaType).toBe('application/vnd.oci.image.layer.v1.tar');

      expect(p.config.os).toBe('linux');
      expect(p.config.architecture).toBe(process.arch === 'x64' ? 'amd64' : process.arch);
      expect(p.config.config.Entrypoint).toEqual(img.entrypoint);
      expect(p.config.config.Env.some((e) => e.startsWith('PATH=/'))).toBe(true);
      // Uncompressed layer: its diff_id is its own digest.
      expect(p.config.rootfs).toEqual({ type: 'layers', diff_ids: [p.manifest.layers[0]!.digest] });

      const binName = img.entrypoint[0]!.replace(/^\//, '');
      expect(p.layer.map((e) => e.name)).toEqual([binName]);
      const bin = p.layer[0]!;
      expect(bin.type).toBe('file');
      expect(bin.mode).toBe(0o755);
      expect([bin.uid, bin.gid, bin.mtime]).toEqual([0, 0, 0]);
      expect(bin.content.subarray(0, 4)).toEqual(Buffer.from([0x7f, 0x45, 0x4c, 0x46])); // ELF
      expect(bin.content.includes(Buffer.from('/lib64/ld-linux'))).toBe(false); // static: no interpreter
      expect(bin.content.equals(await readFile(join(dirA, 'images', img.short)))).toBe(true); // Buffer.equals: toEqual is slow on 600 KiB
    });
  }

  it('reuses cached tars on a second build in the same directory', async () => {
    const before = await Promise.all(built.map(async (b) => (await stat(b.tar)).mtimeMs));
    const again = await buildTestImages(dirA);
    expect(again).toEqual(built);
    const after = await Promise.all(again.map(async (b) => (await stat(b.tar)).mtimeMs));
    expect(after).toEqual(before);
  });

  it('is deterministic: a fresh build elsewhere gives byte-identical tars and the same digests', async () => {
    const other = await buildTestImages(dirB);
    for (const b of built) {
      const o = other.find((x) => x.name === b.name)!;
      expect(o.digest).toBe(b.digest);
      expect((await parseImage(o.tar)).index.manifests[0]!.digest).toBe(b.digest);
      expect(sha(await readFile(o.tar))).toBe(sha(await readFile(b.tar)));
    }
  }, 120_000);

  it('writeOciImageTar adds parent directories and is deterministic for identical inputs', async () => {
    const opts = {
      name: 'ulysses.local/demo:2',
      files: [
        { path: '/usr/local/bin/tool', content: Buffer.from('#!/bin/sh\necho hi\n'), mode: 0o755 },
        { path: '/etc/demo.conf', content: Buffer.from('x=1\n'), mode: 0o644 },
      ],
      entrypoint: ['/usr/local/bin/tool'],
      env: ['FOO=bar'],
    };
    const f1 = join(dirB, 'demo1.tar');
    const f2 = join(dirB, 'demo2.tar');
    const r1 = await writeOciImageTar({ ...opts, outFile: f1 });
    const r2 = await writeOciImageTar({ ...opts, files: [...opts.files].reverse(), outFile: f2 });
    expect(r2.digest).toBe(r1.digest);
    expect((await readFile(f2)).equals(await readFile(f1))).toBe(true);

    const p = await parseImage(f1);
    expect(p.index.manifests[0]!.annotations!['org.opencontainers.image.ref.name']).toBe('2');
    expect(p.config.config.Env).toEqual([expect.stringMatching(/^PATH=/), 'FOO=bar']);
    expect(p.layer.map((e) => [e.name, e.type, e.mode])).toEqual([
      ['etc/', 'directory', 0o755],
      ['etc/demo.conf', 'file', 0o644],
      ['usr/', 'directory', 0o755],
      ['usr/local/', 'directory', 0o755],
      ['usr/local/bin/', 'directory', 0o755],
      ['usr/local/bin/tool', 'file', 0o755],
    ]);
  });
});
