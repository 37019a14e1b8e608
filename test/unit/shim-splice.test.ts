/**
 * The `splice` CRI proxy of the kubelet-shim (kubelet-shim/splice.ts, h2frames.ts):
 * - pure logic on recorded connections (test/unit/fixtures/h2-*.hex, recorded by
 *   fixtures/record-h2-frames.ts from a grpc-go client — the kubelet's gRPC library — and a grpc-js
 *   client making Version, ListPodSandbox, RunPodSandbox, Version on one connection): frame cutting
 *   at every chunk boundary, HPACK decoding of every header block in order (dynamic table), the
 *   RunPodSandbox request out of its DATA frames, HEADERS with PADDED/PRIORITY + CONTINUATION, and
 *   the frames the proxy writes itself;
 * - splice-only behaviour against an in-process grpc-js runtime: held RunPodSandbox bytes never
 *   starve the connection's flow-control window, and a request too large to hold goes unpaced.
 * The behaviour shared with the other implementations is in shim-proxy.test.ts (all implementations).
 */
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import {
  CLIENT_PREFACE,
  ErrorCode,
  Flag,
  FrameReader,
  FrameType,
  HeaderBlockAssembler,
  HpackDecoder,
  framePayload,
  grpcStatusFrame,
  rstStreamFrame,
  settingsOf,
  windowUpdateFrame,
  type Frame,
} from '../../kubelet-shim/h2frames.ts';
import { grpcMessage } from '../../kubelet-shim/h2proxy.ts';
import { RUN_POD_SANDBOX, criMethods, sandboxInfo, type ForwardEvent } from '../../kubelet-shim/proxy.ts';
import { createCriProxy, type CriProxyServer } from '../../kubelet-shim/proxies.ts';
import { PacingGate } from '../../kubelet-shim/pacing.ts';

const fixture = (name: string) => Buffer.from(readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8').trim(), 'hex');
const CLIENTS = ['grpc-go', 'grpc-js'] as const;
const PATHS = ['/runtime.v1.RuntimeService/Version', '/runtime.v1.RuntimeService/ListPodSandbox', RUN_POD_SANDBOX, '/runtime.v1.RuntimeService/Version'];

/** A copy of every frame of a byte stream, cut by a FrameReader fed `size`-byte chunks. */
function frames(bytes: Buffer, size: number): Array<Frame & { bytes: Buffer }> {
  const r = new FrameReader();
  const out: Array<Frame & { bytes: Buffer }> = [];
  for (let i = 0; i < bytes.length; i += size) r.push(bytes.subarray(i, i + size), (f) => out.push({ ...f, bytes: Buffer.from(f.buf.subarray(f.start, f.end)) }));
  expect(r.atBoundary).toBe(true);
  return out;
}

function upFrames(client: string, size = 1 << 20): Array<Frame & { bytes: Buffer }> {
  const up = fixture(`h2-${client}.up.hex`);
  expect(up.subarray(0, CLIENT_PREFACE.length).equals(CLIENT_PREFACE)).toBe(true);
  return frames(up.subarray(CLIENT_PREFACE.length), size);
}

/** Decodes every header block of a recorded direction in order; per block: stream, :path, fields. */
function decodeAll(fs: Frame[], decoder = new HpackDecoder()): Array<{ stream: number; path?: string; fields: Array<[string, string]> }> {
  const asm = new HeaderBlockAssembler();
  const out: Array<{ stream: number; path?: string; fields: Array<[string, string]> }> = [];
  for (const f of fs) {
    const block = asm.push(f);
    if (!block) continue;
    const fields: Array<[string, string]> = [];
    out.push({ stream: f.streamId, path: decoder.decode(block, fields), fields });
  }
  return out;
}

describe('HTTP/2 frames of recorded gRPC connections (splice proxy logic)', () => {
  it.each(CLIENTS)('%s: cuts the stream into the same frames at every chunk size, byte for byte', (client) => {
    const up = fixture(`h2-${client}.up.hex`).subarray(CLIENT_PREFACE.length);
    const whole = frames(up, up.length);
    expect(whole.length).toBeGreaterThan(10);
    expect(Buffer.concat(whole.map((f) => f.bytes)).equals(up)).toBe(true);
    for (const size of [1, 2, 3, 7, 8, 9, 10, 13, 64, 100]) {
      const cut = frames(up, size);
      expect(cut.map((f) => [f.type, f.flags, f.streamId, f.length]), `chunks of ${size}`).toEqual(whole.map((f) => [f.type, f.flags, f.streamId, f.length]));
      expect(Buffer.concat(cut.map((f) => f.bytes)).equals(up), `chunks of ${size}`).toBe(true);
    }
    const down = fixture(`h2-${client}.down.hex`);
    expect(Buffer.concat(frames(down, 5).map((f) => f.bytes)).equals(down)).toBe(true);
  });

  it.each(CLIENTS)('%s: decodes every request header block in order and learns each stream\'s :path', (client) => {
    const blocks = decodeAll(upFrames(client));
    expect(blocks.map((b) => b.path)).toEqual(PATHS);
    expect(blocks.map((b) => b.stream)).toEqual([1, 3, 5, 7]);
    const field = (i: number, name: string) => blocks[i]!.fields.find(([n]) => n === name)?.[1];
    for (let i = 0; i < 4; i++) {
      expect(field(i, ':method')).toBe('POST');
      expect(field(i, 'content-type')).toBe('application/grpc');
      expect(field(i, 'te')).toBe('trailers');
      expect(field(i, 'user-agent')).toMatch(client === 'grpc-go' ? /^grpc-go\// : /^grpc-node-js\//);
    }
    expect(field(2, 'x-trace')).toBe('abc');
    expect(field(2, 'grpc-timeout')).toMatch(/^\d{1,8}[HMSmun]$/);
    // the second Version is mostly references to the dynamic table: a much shorter block
    const asm = new HeaderBlockAssembler();
    const sizes = upFrames(client)
      .map((f) => asm.push(f)?.length)
      .filter((n) => n !== undefined);
    expect(sizes[3]!).toBeLessThan(sizes[0]! / 2);
  });

  it('needs every block: a decoder that missed the first block gets later ones wrong (why every HEADERS is decoded)', () => {
    const fs = upFrames('grpc-go');
    const asm = new HeaderBlockAssembler();
    const blocks = fs.map((f) => asm.push(f)).filter((b): b is Buffer => b !== undefined);
    const d = new HpackDecoder();
    const paths: Array<string | undefined> = [];
    for (const b of blocks.slice(1)) {
      try {
        paths.push(d.decode(b));
      } catch {
        paths.push('<error>');
      }
    }
    expect(paths).not.toEqual(PATHS.slice(1));
  });

  it.each(CLIENTS)('%s: reassembles the RunPodSandbox request from its DATA frames and decodes the pod', (client) => {
    const fs = upFrames(client);
    const rps = fs.filter((f) => f.type === FrameType.DATA && f.streamId === 5);
    expect(rps.at(-1)!.flags & Flag.END_STREAM).toBe(Flag.END_STREAM);
    const msg = grpcMessage(Buffer.concat(rps.map((f) => framePayload(f))))!;
    const decode = criMethods().find((m) => m.path === RUN_POD_SANDBOX)!.definition.requestDeserialize as (b: Buffer) => object;
    expect(sandboxInfo(decode, msg)).toEqual({ key: 'prod/web-0', uid: 'uid-web-0', criticality: 'high' });
  });

  it.each(CLIENTS)('%s: reads where each answer ends in the runtime\'s direction (END_STREAM), and its SETTINGS', (client) => {
    const fs = frames(fixture(`h2-${client}.down.hex`), 11);
    expect(fs[0]!.type).toBe(FrameType.SETTINGS);
    expect(Array.isArray(settingsOf(fs[0]!))).toBe(true);
    const ended = fs.filter((f) => (f.type === FrameType.HEADERS || f.type === FrameType.DATA) && f.flags & Flag.END_STREAM).map((f) => f.streamId);
    expect(ended).toEqual([1, 3, 5, 7]);
    const answer = fs.filter((f) => f.type === FrameType.DATA && f.streamId === 1).map((f) => framePayload(f));
    expect(grpcMessage(Buffer.concat(answer))!.subarray(0, 3).toString()).toBe('ok|');
  });

  it('assembles a header block from HEADERS with PADDED and PRIORITY plus CONTINUATIONs, and refuses a frame inside a block', () => {
    const fs = upFrames('grpc-go');
    const blocks: Buffer[] = [];
    const asm = new HeaderBlockAssembler();
    for (const f of fs) {
      const b = asm.push(f);
      if (b) blocks.push(Buffer.from(b));
    }
    const block = blocks[0]!;
    const a = block.subarray(0, 10);
    const b = block.subarray(10, 20);
    const c = block.subarray(20);
    const raw = (type: number, flags: number, stream: number, payload: Buffer) => {
      const h = Buffer.alloc(9);
      h.writeUIntBE(payload.length, 0, 3);
      h[3] = type;
      h[4] = flags;
      h.writeUInt32BE(stream, 5);
      return Buffer.concat([h, payload]);
    };
    const pad = 5;
    const headers = raw(FrameType.HEADERS, Flag.PADDED | Flag.PRIORITY, 1, Buffer.concat([Buffer.from([pad]), Buffer.from([0, 0, 0, 0, 15]), a, Buffer.alloc(pad)]));
    const bytes = Buffer.concat([headers, raw(FrameType.CONTINUATION, 0, 1, b), raw(FrameType.CONTINUATION, Flag.END_HEADERS, 1, c)]);
    const cut = frames(bytes, 4);
    const asm2 = new HeaderBlockAssembler();
    expect(asm2.push(cut[0]!)).toBeUndefined();
    expect(asm2.open).toBe(true);
    expect(asm2.push(cut[1]!)).toBeUndefined();
    const assembled = asm2.push(cut[2]!)!;
    expect(asm2.open).toBe(false);
    expect(assembled.equals(block)).toBe(true);
    expect(new HpackDecoder().decode(assembled)).toBe(PATHS[0]);

    const asm3 = new HeaderBlockAssembler();
    asm3.push(cut[0]!);
    const ping = frames(raw(FrameType.PING, 0, 0, Buffer.alloc(8)), 100)[0]!;
    expect(() => asm3.push(ping)).toThrow(/inside the header block of stream 1/);
    expect(() => new HeaderBlockAssembler().push(cut[1]!)).toThrow(/CONTINUATION on stream 1 without an open header block/);
    const badPad = frames(raw(FrameType.HEADERS, Flag.PADDED | Flag.END_HEADERS, 3, Buffer.from([200, 1, 2])), 100)[0]!;
    expect(() => framePayload(badPad)).toThrow(/padding longer than the payload/);
  });

  it('applies dynamic table size updates only at the start of a block and within the advertised maximum', () => {
    const d = new HpackDecoder();
    // 0x3f 0xe1 0x1f = size update to 4096; 0x20 = size update to 0
    expect(d.decode(Buffer.from([0x20, 0x82]))).toBeUndefined(); // size 0, then :method GET
    expect(() => d.decode(Buffer.from([0x82, 0x20]))).toThrow(/size update after the first field/);
    expect(() => new HpackDecoder().decode(Buffer.from([0x3f, 0xe1, 0x3f]))).toThrow(/bigger than maximum/); // 8192 > 4096
    const big = new HpackDecoder();
    big.setMaxTableSize(8192);
    expect(() => big.decode(Buffer.from([0x3f, 0xe1, 0x3f]))).not.toThrow();
  });

  it('decodes multi-octet integer lengths and references to the entries it added', () => {
    const enc = (n: number, mask: number) => {
      const out: number[] = [];
      if (n < 127) return [mask | n];
      out.push(mask | 127);
      n -= 127;
      while (n >= 128) {
        out.push((n % 128) + 128);
        n = Math.floor(n / 128);
      }
      out.push(n);
      return out;
    };
    const value = 'y'.repeat(3000);
    // literal with incremental indexing, new name "x-long" (6), value 3000 bytes; then index 62 (that entry)
    const block = Buffer.concat([Buffer.from([0x40, 6]), Buffer.from('x-long'), Buffer.from(enc(3000, 0)), Buffer.from(value), Buffer.from([0x80 | 62])]);
    const d = new HpackDecoder();
    const fields: Array<[string, string]> = [];
    d.decode(block, fields);
    expect(fields).toEqual([
      ['x-long', value],
      ['x-long', value],
    ]);
    expect(d.dynamicTableSize).toBe(6 + 3000 + 32);
  });

  it('writes a trailers-only gRPC status that does not touch the kubelet\'s dynamic table, between the runtime\'s own blocks', () => {
    const status = frames(grpcStatusFrame(9, grpc.status.RESOURCE_EXHAUSTED, 'queue full: 5 waiting (ns/p)'), 100)[0]!;
    expect(status.type).toBe(FrameType.HEADERS);
    expect(status.flags).toBe(Flag.END_STREAM | Flag.END_HEADERS);
    expect(status.streamId).toBe(9);
    const d = new HpackDecoder();
    const fields: Array<[string, string]> = [];
    d.decode(framePayload(status), fields);
    expect(fields).toEqual([
      [':status', '200'],
      ['content-type', 'application/grpc'],
      ['grpc-status', '8'],
      ['grpc-message', encodeURIComponent('queue full: 5 waiting (ns/p)')],
    ]);
    expect(d.dynamicTableSize).toBe(0);
    // inserted between the runtime's header blocks (as the proxy does), the kubelet decodes them all the same
    const down = frames(fixture('h2-grpc-go.down.hex'), 1 << 20);
    const plain = decodeAll(down).map((b) => b.fields);
    const withStatus = decodeAll([down[0]!, status, ...down.slice(1)]).map((b) => b.fields);
    expect(withStatus.filter((f) => f.some(([, v]) => v === encodeURIComponent('queue full: 5 waiting (ns/p)'))).length).toBe(1);
    expect(withStatus.filter((f) => !f.some(([, v]) => v === encodeURIComponent('queue full: 5 waiting (ns/p)')))).toEqual(plain);
    expect(plain.some((f) => f.some(([n, v]) => n === 'grpc-status' && v === '0'))).toBe(true);
  });

  it('builds RST_STREAM and WINDOW_UPDATE frames', () => {
    expect(rstStreamFrame(7, ErrorCode.CANCEL).toString('hex')).toBe('000004030000000007' + '00000008');
    expect(windowUpdateFrame(0, 70_000).toString('hex')).toBe('000004080000000000' + '00011170');
  });
});

// ---------------------------------------------------------------------------------------------

const identity = (b: Buffer) => b;
const MiB = 1024 * 1024;

function runPodSandboxRequest(name: string, criticality: string, padding = 0): Buffer {
  const m = criMethods().find((x) => x.path === RUN_POD_SANDBOX)!;
  const labels: Record<string, string> = { 'io.kubernetes.pod.namespace': 'ns', 'io.kubernetes.pod.name': name, 'ulysses.io/criticality': criticality };
  const annotations = padding ? { pad: 'x'.repeat(padding) } : {};
  return (m.definition.requestSerialize as (v: object) => Buffer)({ config: { metadata: { name, namespace: 'ns', uid: `uid-${name}` }, labels, annotations } });
}

describe('splice proxy against an in-process grpc-js runtime', () => {
  let dir: string;
  let runtime: grpc.Server;
  let runtimeSock: string;
  const seen: string[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'uly-splice-'));
    runtimeSock = join(dir, 'runtime.sock');
    runtime = new grpc.Server({ 'grpc.max_receive_message_length': 64 * MiB });
    for (const m of criMethods()) {
      if (m.responseStream) continue;
      runtime.register(
        m.path,
        (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
          seen.push(m.name);
          cb(null, Buffer.from(`${m.name}|${call.request.length}`));
        },
        identity,
        identity,
        'unary',
      );
    }
    await new Promise<void>((res, rej) => runtime.bindAsync(`unix://${runtimeSock}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? rej(e) : res())));
  });
  afterAll(() => {
    runtime.forceShutdown();
    rmSync(dir, { recursive: true, force: true });
  });

  async function withProxy(gate: PacingGate, test: (client: grpc.Client, forwarded: ForwardEvent[], listen: string) => Promise<void>): Promise<void> {
    const listen = join(dir, `p-${Math.random().toString(36).slice(2, 8)}.sock`);
    const forwarded: ForwardEvent[] = [];
    const proxy: CriProxyServer = createCriProxy({ implementation: 'splice', listen, backend: runtimeSock, gate, onForward: (e) => forwarded.push(e) });
    await proxy.start();
    const client = new grpc.Client(`unix://${listen}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': 64 * MiB });
    try {
      await test(client, forwarded, listen);
    } finally {
      client.close();
      await proxy.close(100);
    }
  }

  const unary = (client: grpc.Client, path: string, req: Buffer, deadline = Date.now() + 5000) =>
    new Promise<Buffer>((resolve, reject) => client.makeUnaryRequest(path, identity, identity, req, new grpc.Metadata(), { deadline }, (e, v) => (e ? reject(e) : resolve(v!))));

  it('held RunPodSandbox bytes are credited to the kubelet: 20 x 6 KiB waiting lows (beyond the 64 KiB connection window) do not stall other calls, and all go through once released', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'fixed', waitMs: 60_000 } } });
    await withProxy(gate, async (client, forwarded) => {
      await unary(client, RUN_POD_SANDBOX, runPodSandboxRequest('first', 'low', 100)); // opens a 60 s gap
      const lows = Array.from({ length: 20 }, (_, i) =>
        unary(client, RUN_POD_SANDBOX, runPodSandboxRequest(`low-${i}`, 'low', 6000), Date.now() + 20_000).then(
          (v) => v.toString(),
          (e: grpc.ServiceError) => grpc.status[e.code],
        ),
      );
      const end = Date.now() + 5000;
      while (gate.queueLength < 20 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      expect(gate.queueLength).toBe(20); // all 120 KiB held, none refused
      // the connection's other calls still flow, bodies included, while the lows wait
      for (let i = 0; i < 3; i++) expect((await unary(client, '/runtime.v1.ImageService/ImageStatus', Buffer.alloc(40 * 1024, 1))).toString()).toBe(`ImageStatus|${40 * 1024}`);
      const t0 = Date.now();
      await unary(client, RUN_POD_SANDBOX, runPodSandboxRequest('crit', 'high'));
      expect(Date.now() - t0).toBeLessThan(1000);
      // released together: the runtime's window is respected (no FLOW_CONTROL_ERROR), every call answered
      gate.setPolicy({ type: 'vanilla' });
      const results = await Promise.all(lows);
      expect(results.every((r) => /^RunPodSandbox\|6\d{3}$/.test(r)), results.join(',')).toBe(true);
      expect(forwarded.length).toBe(22);
      // and the connection still works, in both directions, with big bodies
      for (let i = 0; i < 3; i++) expect((await unary(client, '/runtime.v1.ImageService/ImageStatus', Buffer.alloc(200 * 1024, 1))).toString()).toBe(`ImageStatus|${200 * 1024}`);
    });
  });

  it('a connection that is not HTTP/2 (or breaks its framing) is closed; the proxy keeps serving the others', async () => {
    const gate = new PacingGate();
    await withProxy(gate, async (client, _forwarded, listen) => {
      for (const junk of [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), Buffer.concat([CLIENT_PREFACE, Buffer.from('000005010000000001', 'hex'), Buffer.from([0x82, 0x86, 0x84, 0x41, 0x00]), Buffer.from('000008060000000000', 'hex'), Buffer.alloc(8)])]) {
        const sock = net.connect(listen);
        sock.on('error', () => undefined);
        sock.write(junk); // HTTP/1.1; then a PING inside the header block of stream 1
        const closed = await new Promise<boolean>((resolve) => {
          const t = setTimeout(() => resolve(false), 3000);
          sock.once('close', () => (clearTimeout(t), resolve(true)));
        });
        expect(closed).toBe(true);
      }
      expect((await unary(client, '/runtime.v1.RuntimeService/Version', Buffer.from('v'))).toString()).toBe('Version|1');
    });
  });

  it('a RunPodSandbox too large to hold within its stream window is forwarded unpaced (no deadlock)', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'fixed', waitMs: 60_000 } } });
    await withProxy(gate, async (client, forwarded) => {
      await unary(client, RUN_POD_SANDBOX, runPodSandboxRequest('first', 'low'));
      const t0 = Date.now();
      const reply = await unary(client, RUN_POD_SANDBOX, runPodSandboxRequest('huge', 'low', 5 * MiB), Date.now() + 20_000);
      expect(reply.toString()).toMatch(/^RunPodSandbox\|52\d{5}$/);
      expect(Date.now() - t0).toBeLessThan(10_000);
      expect(forwarded.map((f) => f.info.key)).toEqual(['ns/first']); // not through the gate
    });
  });
});
