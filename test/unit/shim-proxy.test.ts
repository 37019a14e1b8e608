/**
 * kubelet-shim CRI proxy against an in-process fake runtime (a grpc-js server on a unix socket that
 * answers every CRI method with bytes derived from the request): byte-exact pass-through of every
 * method, metadata/trailers/status/deadline/cancellation propagation, 16 MiB messages, fast
 * UNAVAILABLE and recovery, and RunPodSandbox pacing by criticality. The real-containerd test is
 * test/integration/shim-proxy.int.test.ts.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { Registry } from 'prom-client';
import { CRI_PROTO_FILE, RUN_POD_SANDBOX, criMethods, sandboxInfo, type CriProxyOptions, type ForwardEvent } from '../../kubelet-shim/proxy.ts';
import { GrpcFrameScanner, formatGrpcTimeout, grpcMessage, parseGrpcTimeout } from '../../kubelet-shim/h2proxy.ts';
import { PROXY_IMPLEMENTATIONS, createCriProxy, type CriProxyServer, type ProxyImplementation } from '../../kubelet-shim/proxies.ts';
import { PacingGate } from '../../kubelet-shim/pacing.ts';
import { shimMetrics } from '../../kubelet-shim/metrics.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';

const identity = (b: Buffer) => b;
const MiB = 1024 * 1024;

interface Seen {
  path: string;
  metadata: grpc.Metadata;
  deadline: grpc.Deadline;
  request: Buffer;
}

type UnaryBehaviour = (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => void;
type StreamBehaviour = (call: grpc.ServerWritableStream<Buffer, Buffer>) => void;

/** A fake runtime: by default answers `<path>|<request bytes>` (streams: 3 such messages). */
class FakeRuntime {
  readonly server = new grpc.Server({ 'grpc.max_receive_message_length': 64 * MiB, 'grpc.max_send_message_length': 64 * MiB });
  readonly seen: Seen[] = [];
  readonly unary = new Map<string, UnaryBehaviour>();
  readonly streams = new Map<string, StreamBehaviour>();
  constructor(readonly socket: string) {
    for (const m of criMethods()) {
      if (m.responseStream) {
        this.server.register(
          m.path,
          (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
            this.seen.push({ path: m.path, metadata: call.metadata, deadline: call.getDeadline(), request: call.request });
            const custom = this.streams.get(m.path);
            if (custom) return custom(call);
            for (let i = 0; i < 3; i++) call.write(Buffer.concat([Buffer.from(`${m.path}|${i}|`), call.request]));
            call.end();
          },
          identity,
          identity,
          'serverStream',
        );
      } else {
        this.server.register(
          m.path,
          (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
            this.seen.push({ path: m.path, metadata: call.metadata, deadline: call.getDeadline(), request: call.request });
            const custom = this.unary.get(m.path);
            if (custom) return custom(call, cb);
            cb(null, Buffer.concat([Buffer.from(`${m.path}|`), call.request]));
          },
          identity,
          identity,
          'unary',
        );
      }
    }
  }
  start(): Promise<void> {
    return new Promise((resolve, reject) =>
      this.server.bindAsync(`unix://${this.socket}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
    );
  }
  stop(): void {
    this.server.forceShutdown();
    rmSync(this.socket, { force: true });
  }
}

/** A raw (identity) client, as a kubelet that sends bytes. */
function rawClient(socket: string, maxBytes = 64 * MiB): grpc.Client {
  return new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure(), {
    'grpc.max_receive_message_length': maxBytes,
    'grpc.max_send_message_length': maxBytes,
  });
}

function rawUnary(
  client: grpc.Client,
  path: string,
  req: Buffer,
  opts: { metadata?: grpc.Metadata; deadline?: number } = {},
): Promise<{ value: Buffer; headers?: grpc.Metadata; trailers: grpc.Metadata }> {
  return new Promise((resolve, reject) => {
    let headers: grpc.Metadata | undefined;
    let value: Buffer | undefined;
    let error: grpc.ServiceError | undefined;
    const call = client.makeUnaryRequest(path, identity, identity, req, opts.metadata ?? new grpc.Metadata(), opts.deadline ? { deadline: opts.deadline } : {}, (err, v) => {
      error = err ?? undefined;
      value = v ?? undefined;
    });
    call.on('metadata', (md) => (headers = md));
    call.on('status', (s) => (error ? reject(error) : resolve({ value: value!, headers, trailers: s.metadata })));
  });
}

function rawStream(client: grpc.Client, path: string, req: Buffer, metadata = new grpc.Metadata()): Promise<{ messages: Buffer[]; status: grpc.StatusObject }> {
  return new Promise((resolve) => {
    const messages: Buffer[] = [];
    const call = client.makeServerStreamRequest(path, identity, identity, req, metadata);
    call.on('data', (b: Buffer) => messages.push(b));
    call.on('error', () => undefined);
    call.on('status', (status) => {
      // let buffered data drain before resolving
      setImmediate(() => resolve({ messages, status }));
    });
  });
}

async function waitFor<T>(what: string, check: () => T | undefined | false, timeoutMs = 3000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function runPodSandboxRequest(namespace: string, name: string, criticality?: string, extra: Record<string, string> = {}): Buffer {
  const m = criMethods().find((x) => x.path === RUN_POD_SANDBOX)!;
  const labels: Record<string, string> = { 'io.kubernetes.pod.namespace': namespace, 'io.kubernetes.pod.name': name, ...extra };
  if (criticality !== undefined) labels['ulysses.io/criticality'] = criticality;
  return (m.definition.requestSerialize as (v: object) => Buffer)({ config: { metadata: { name, namespace, uid: `uid-${name}` }, labels } });
}

let dir: string;
let runtime: FakeRuntime;
let proxy: CriProxyServer | undefined;
let implementation: ProxyImplementation = 'http2';
const newProxy = (opts: CriProxyOptions) => createCriProxy({ ...opts, implementation });
let client: grpc.Client | undefined;
let registry: Registry;
let forwarded: ForwardEvent[];

async function startProxy(gate?: PacingGate, extra: Partial<CriProxyOptions> = {}): Promise<string> {
  const listen = join(dir, `proxy-${Math.random().toString(36).slice(2, 8)}.sock`);
  registry = new Registry();
  forwarded = [];
  proxy = newProxy({ listen, backend: runtime.socket, gate, metrics: shimMetrics(registry), onForward: (e) => forwarded.push(e), ...extra });
  await proxy.start();
  client = rawClient(listen);
  return listen;
}

describe.each(PROXY_IMPLEMENTATIONS)('kubelet-shim CRI proxy, %s implementation (fake runtime)', (impl) => {
  beforeAll(async () => {
    implementation = impl;
    dir = mkdtempSync(join(tmpdir(), 'uly-shim-'));
    runtime = new FakeRuntime(join(dir, 'runtime.sock'));
    await runtime.start();
  });
  afterEach(async () => {
    client?.close();
    client = undefined;
    await proxy?.close(100);
    proxy = undefined;
    runtime.seen.length = 0;
    runtime.unary.clear();
    runtime.streams.clear();
  });
  afterAll(() => {
    runtime.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('enumerates every rpc of the proto, for both services', () => {
    const proto = readFileSync(CRI_PROTO_FILE, 'utf8');
    const declared = [...proto.matchAll(/^\s*rpc\s+(\w+)\s*\(/gm)].map((m) => m[1]);
    const methods = criMethods();
    expect(methods.map((m) => m.name)).toEqual(declared);
    expect(methods.length).toBeGreaterThanOrEqual(40);
    expect(new Set(methods.map((m) => m.service))).toEqual(new Set(['runtime.v1.RuntimeService', 'runtime.v1.ImageService']));
    const streaming = methods.filter((m) => m.responseStream).map((m) => m.name);
    expect(streaming).toContain('GetContainerEvents');
    expect(streaming).toContain('StreamPodSandboxes');
    expect(methods.some((m) => m.requestStream)).toBe(false);
  });

  it('forwards every method byte for byte, unary and server-streaming', async () => {
    await startProxy();
    for (const m of criMethods()) {
      const req = m.path === RUN_POD_SANDBOX ? runPodSandboxRequest('ns', 'p') : Buffer.from([0x0a, 0x03, 0x01, 0x02, 0xff, 0x00, 0x7f]);
      if (m.responseStream) {
        const { messages, status } = await rawStream(client!, m.path, req);
        expect(status.code, m.path).toBe(grpc.status.OK);
        expect(messages.map((b) => b.toString('latin1')), m.path).toEqual([0, 1, 2].map((i) => `${m.path}|${i}|${req.toString('latin1')}`));
      } else {
        const { value } = await rawUnary(client!, m.path, req);
        expect(value.equals(Buffer.concat([Buffer.from(`${m.path}|`), req])), m.path).toBe(true);
      }
    }
    expect(runtime.seen.map((s) => s.path)).toEqual(criMethods().map((m) => m.path));
    // the added latency is recorded per method
    const values = (await registry.getSingleMetric('ulysses_cri_proxy_added_latency_seconds')!.get()).values;
    const count = values.find((v) => (v as { metricName?: string }).metricName === 'ulysses_cri_proxy_added_latency_seconds_count' && v.labels.method === 'Version');
    expect(count?.value).toBe(1);
  });

  it('propagates request metadata and deadline, and returns headers, trailers, status code and details unchanged', async () => {
    await startProxy();
    const path = '/runtime.v1.RuntimeService/ContainerStatus';
    const details = Buffer.from([8, 5, 18, 4, 110, 111, 112, 101]); // a google.rpc.Status, opaque to us
    runtime.unary.set(path, (call, cb) => {
      const headers = new grpc.Metadata();
      headers.set('x-runtime-header', 'h1');
      call.sendMetadata(headers);
      const trailers = new grpc.Metadata();
      trailers.set('x-runtime-trailer', 't1');
      trailers.set('grpc-status-details-bin', details);
      cb({ code: grpc.status.NOT_FOUND, details: 'container "abc" not found', metadata: trailers });
    });
    const md = new grpc.Metadata();
    md.set('x-kubelet-trace', 'abc123');
    md.set('x-bin-bin', Buffer.from([1, 2, 3]));
    const deadline = Date.now() + 7000;
    const err = await rawUnary(client!, path, Buffer.from('x'), { metadata: md, deadline }).then(
      () => undefined,
      (e: grpc.ServiceError) => e,
    );
    expect(err?.code).toBe(grpc.status.NOT_FOUND);
    expect(err?.details).toBe('container "abc" not found');
    expect(err?.metadata.get('x-runtime-trailer')).toEqual(['t1']);
    expect((err?.metadata.get('grpc-status-details-bin')[0] as Buffer).equals(details)).toBe(true);
    const seen = runtime.seen.find((s) => s.path === path)!;
    expect(seen.metadata.get('x-kubelet-trace')).toEqual(['abc123']);
    expect((seen.metadata.get('x-bin-bin')[0] as Buffer).equals(Buffer.from([1, 2, 3]))).toBe(true);
    const seenDeadline = seen.deadline instanceof Date ? seen.deadline.getTime() : seen.deadline;
    expect(Math.abs(seenDeadline - deadline)).toBeLessThan(200);

    // success: headers and trailers too
    runtime.unary.set(path, (call, cb) => {
      const headers = new grpc.Metadata();
      headers.set('x-runtime-header', 'h2');
      call.sendMetadata(headers);
      const trailers = new grpc.Metadata();
      trailers.set('x-runtime-trailer', 't2');
      cb(null, Buffer.from('ok'), trailers);
    });
    const ok = await rawUnary(client!, path, Buffer.from('x'));
    expect(ok.value.toString()).toBe('ok');
    expect(ok.headers?.get('x-runtime-header')).toEqual(['h2']);
    expect(ok.trailers.get('x-runtime-trailer')).toEqual(['t2']);
    // no deadline from the kubelet: none towards the runtime either
    expect(runtime.seen.at(-1)!.deadline).toBe(Infinity);
  });

  it('passes a runtime error status of a stream through, after the messages sent before it', async () => {
    await startProxy();
    const path = '/runtime.v1.RuntimeService/GetContainerEvents';
    runtime.streams.set(path, (call) => {
      call.write(Buffer.from('e1'));
      call.write(Buffer.from('e2'));
      setTimeout(() => call.emit('error', { code: grpc.status.FAILED_PRECONDITION, details: 'events channel closed' }), 20);
    });
    const { messages, status } = await rawStream(client!, path, Buffer.alloc(0));
    expect(messages.map(String)).toEqual(['e1', 'e2']);
    expect(status.code).toBe(grpc.status.FAILED_PRECONDITION);
    expect(status.details).toBe('events channel closed');
  });

  it('propagates cancellation from the kubelet to the runtime (unary and stream) and from the runtime to the kubelet', async () => {
    await startProxy();
    const unaryPath = '/runtime.v1.RuntimeService/ExecSync';
    let unaryCancelled = false;
    runtime.unary.set(unaryPath, (call) => call.on('cancelled', () => (unaryCancelled = true))); // never answers
    const uc = client!.makeUnaryRequest(unaryPath, identity, identity, Buffer.from('x'), new grpc.Metadata(), {}, () => undefined);
    await waitFor('runtime to receive ExecSync', () => runtime.seen.some((s) => s.path === unaryPath));
    uc.cancel();
    await waitFor('runtime to see the unary cancellation', () => unaryCancelled);

    const streamPath = '/runtime.v1.RuntimeService/GetContainerEvents';
    let streamCancelled = false;
    runtime.streams.set(streamPath, (call) => {
      call.write(Buffer.from('first'));
      call.on('cancelled', () => (streamCancelled = true));
    });
    const sc = client!.makeServerStreamRequest(streamPath, identity, identity, Buffer.alloc(0), new grpc.Metadata());
    sc.on('error', () => undefined);
    await new Promise<void>((resolve) => sc.once('data', () => resolve()));
    sc.cancel();
    await waitFor('runtime to see the stream cancellation', () => streamCancelled);

    // the runtime cancels: the kubelet sees CANCELLED
    runtime.unary.set(unaryPath, (_call, cb) => cb({ code: grpc.status.CANCELLED, details: 'runtime gave up' }));
    const err = await rawUnary(client!, unaryPath, Buffer.from('x')).catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.CANCELLED);
    expect((err as grpc.ServiceError).details).toBe('runtime gave up');
  });

  it('carries messages up to 16 MiB both ways (grpc-js defaults to 4 MiB) and refuses larger ones', async () => {
    await startProxy();
    const path = '/runtime.v1.ImageService/ListImages';
    const big = Buffer.alloc(6 * MiB, 0x61);
    runtime.unary.set(path, (call, cb) => cb(null, Buffer.concat([call.request, call.request]))); // 12 MiB answer
    const { value } = await rawUnary(client!, path, big);
    expect(value.length).toBe(12 * MiB);
    const tooBig = Buffer.alloc(16 * MiB + 1024);
    const err = await rawUnary(client!, path, tooBig).catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  });

  it('fails fast with UNAVAILABLE while the runtime is down, and recovers when it is back', async () => {
    const downSock = join(dir, 'down.sock');
    const downRuntime = new FakeRuntime(downSock);
    const listen = join(dir, 'p-down.sock');
    proxy = newProxy({ listen, backend: downSock });
    await proxy.start();
    client = rawClient(listen);
    const t0 = Date.now();
    const err = await rawUnary(client, '/runtime.v1.RuntimeService/Version', Buffer.alloc(0)).catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.UNAVAILABLE);
    expect(Date.now() - t0).toBeLessThan(2000);
    await downRuntime.start();
    try {
      let ok: Buffer | undefined;
      const t1 = Date.now();
      while (!ok && Date.now() - t1 < 5000) {
        ok = await rawUnary(client, '/runtime.v1.RuntimeService/Version', Buffer.alloc(0)).then(
          (r) => r.value,
          () => undefined,
        );
        if (!ok) await new Promise((r) => setTimeout(r, 50));
      }
      expect(ok?.toString()).toBe('/runtime.v1.RuntimeService/Version|');
      expect(Date.now() - t1).toBeLessThan(2000);
    } finally {
      downRuntime.stop();
    }
  });

  it('every call ends (never a hang) when the runtime stops abruptly or gracefully under load, and calls succeed again after', async () => {
    for (const mode of ['force', 'graceful'] as const) {
      const sock = join(dir, `load-${mode}.sock`);
      let rt = new FakeRuntime(sock);
      rt.unary.set('/runtime.v1.ImageService/ImageStatus', (_call, cb) => setTimeout(() => cb(null, Buffer.from('ok')), 5));
      await rt.start();
      const listen = join(dir, `p-load-${mode}.sock`);
      proxy = newProxy({ listen, backend: sock });
      await proxy.start();
      client = rawClient(listen);
      const outcomes: Array<{ code: string; ms: number }> = [];
      let stop = false;
      const call = () =>
        new Promise<{ code: string; ms: number }>((resolve) => {
          const t0 = Date.now();
          client!.makeUnaryRequest('/runtime.v1.ImageService/ImageStatus', identity, identity, Buffer.from('x'), new grpc.Metadata(), { deadline: Date.now() + 4000 }, (err) =>
            resolve({ code: err ? grpc.status[err.code] : 'OK', ms: Date.now() - t0 }),
          );
        });
      const workers = Array.from({ length: 20 }, async () => {
        while (!stop) outcomes.push(await call());
      });
      await waitFor('calls flowing', () => outcomes.length > 50);
      if (mode === 'force') rt.server.forceShutdown();
      else rt.server.tryShutdown(() => undefined);
      await new Promise((r) => setTimeout(r, 300));
      rt.stop();
      rt = new FakeRuntime(sock);
      await rt.start();
      const back = outcomes.length;
      await waitFor('calls succeed again', () => outcomes.slice(back).some((o) => o.code === 'OK'), 3000);
      stop = true;
      await Promise.all(workers);
      rt.stop();
      // UNAVAILABLE for calls the runtime never answered; CANCELLED where it reset the stream (as grpc-go maps RST_STREAM CANCEL)
      const codes = new Set(outcomes.map((o) => o.code));
      expect(codes.has('OK') && codes.has('UNAVAILABLE'), `${mode}: ${[...codes]}`).toBe(true);
      expect([...codes].filter((c) => !['OK', 'UNAVAILABLE', 'CANCELLED'].includes(c)), mode).toEqual([]);
      expect(outcomes.filter((o) => o.ms > 1000), mode).toEqual([]);
      client.close();
      client = undefined;
      await proxy.close(100);
      proxy = undefined;
    }
  });

  it('decodes the criticality and pod key of a RunPodSandbox request', () => {
    const m = criMethods().find((x) => x.path === RUN_POD_SANDBOX)!;
    const decode = m.definition.requestDeserialize as (b: Buffer) => object;
    expect(sandboxInfo(decode, runPodSandboxRequest('prod', 'upf-0', 'high'))).toEqual({ key: 'prod/upf-0', uid: 'uid-upf-0', criticality: 'high' });
    expect(sandboxInfo(decode, runPodSandboxRequest('prod', 'web-1'))).toEqual({ key: 'prod/web-1', uid: 'uid-web-1', criticality: 'none' });
    expect(sandboxInfo(decode, runPodSandboxRequest('prod', 'x', 'HIGH'))).toEqual({ key: 'prod/x', uid: 'uid-x', criticality: 'none', invalidLabel: 'HIGH' });
  });

  it('paces RunPodSandbox: high forwarded at once, lows spaced by the policy, the bytes unchanged', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'fixed', waitMs: 150 }, lowHoldMs: 30 } });
    await startProxy(gate);
    const reqs = [
      runPodSandboxRequest('ns', 'low-0', 'low'),
      runPodSandboxRequest('ns', 'low-1'),
      runPodSandboxRequest('ns', 'low-2', 'low'),
      runPodSandboxRequest('ns', 'crit', 'high'),
    ];
    const results = await Promise.all(reqs.map((r) => rawUnary(client!, RUN_POD_SANDBOX, r)));
    results.forEach((r, i) => expect(r.value.equals(Buffer.concat([Buffer.from(`${RUN_POD_SANDBOX}|`), reqs[i]!]))).toBe(true));
    expect(forwarded.map((f) => f.info.key)).toEqual(['ns/crit', 'ns/low-0', 'ns/low-1', 'ns/low-2']);
    expect(forwarded[0]!.admission.priority).toBe('high');
    const lowAt = forwarded.slice(1).map((f) => f.at);
    expect(lowAt[1]! - lowAt[0]!).toBeGreaterThanOrEqual(145);
    expect(lowAt[2]! - lowAt[1]!).toBeGreaterThanOrEqual(145);
  });

  it('forwards an undecodable RunPodSandbox unpaced (the runtime rejects it, not the gate)', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'fixed', waitMs: 60_000 } } });
    await startProxy(gate);
    await rawUnary(client!, RUN_POD_SANDBOX, runPodSandboxRequest('ns', 'first', 'low')); // opens a 60 s gap
    const garbage = Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f]); // field 1, length beyond the buffer
    const t0 = Date.now();
    const { value } = await rawUnary(client!, RUN_POD_SANDBOX, garbage);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(value.equals(Buffer.concat([Buffer.from(`${RUN_POD_SANDBOX}|`), garbage]))).toBe(true);
    expect(forwarded.map((f) => f.info.key)).toEqual(['ns/first']);
  });

  it('maps a full pacing queue to RESOURCE_EXHAUSTED and removes a cancelled or expired waiting call', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'fixed', waitMs: 60_000 }, maxQueueLength: 2 } });
    await startProxy(gate);
    const pending = [0, 1, 2].map((i) => {
      const c = client!.makeUnaryRequest(RUN_POD_SANDBOX, identity, identity, runPodSandboxRequest('ns', `l${i}`, 'low'), new grpc.Metadata(), {}, () => undefined);
      c.on('error', () => undefined);
      return c;
    });
    await waitFor('two waiting', () => gate.queueLength === 2);
    const err = await rawUnary(client!, RUN_POD_SANDBOX, runPodSandboxRequest('ns', 'l3', 'low')).catch((e: grpc.ServiceError) => e);
    expect((err as grpc.ServiceError).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    // the kubelet gives up on one waiting call: it leaves the queue and never reaches the runtime
    pending[1]!.cancel();
    await waitFor('cancelled call removed', () => gate.queueLength === 1);
    expect(gate.snapshot().waitingLow).toEqual(['ns/l2']);
    // a waiting call whose deadline passes is removed and answered DEADLINE_EXCEEDED
    const expired = await rawUnary(client!, RUN_POD_SANDBOX, runPodSandboxRequest('ns', 'l4', 'low'), { deadline: Date.now() + 200 }).catch(
      (e: grpc.ServiceError) => e,
    );
    expect((expired as grpc.ServiceError).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    await waitFor('expired call removed', () => gate.queueLength === 1);
    expect(runtime.seen.filter((s) => s.path === RUN_POD_SANDBOX)).toHaveLength(1); // only l0
    pending[0]!.cancel();
    pending[2]!.cancel();
  });

  it('creates the socket with mode 0660, replaces a stale one and refuses a live one', async () => {
    const listen = join(dir, 'stale.sock');
    // a stale socket: its server was SIGKILLed, so nobody unlinked it
    const child = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(listen)}, () => console.log('up'))`], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((r) => child.stdout!.once('data', () => r()));
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    expect(statSync(listen).isSocket()).toBe(true);
    proxy = newProxy({ listen, backend: runtime.socket });
    await proxy.start();
    expect(statSync(listen).mode & 0o777).toBe(0o660);
    client = rawClient(listen);
    expect((await rawUnary(client, '/runtime.v1.RuntimeService/Version', Buffer.alloc(0))).value.toString()).toContain('Version');
    const second = newProxy({ listen, backend: runtime.socket });
    await expect(second.start()).rejects.toThrow(/another server is listening/);
  });

  it('decodes responses with the proto for a typed client (CriClient)', async () => {
    const listen = await startProxy();
    runtime.unary.set('/runtime.v1.RuntimeService/Version', (_call, cb) => {
      const m = criMethods().find((x) => x.name === 'Version')!;
      cb(null, (m.definition.responseSerialize as (v: object) => Buffer)({ version: '0.1.0', runtime_name: 'fake', runtime_version: '9', runtime_api_version: 'v1' }));
    });
    const cri = new CriClient(listen);
    try {
      const v = await cri.call('Version', { version: 'v1' });
      expect(v).toMatchObject({ runtime_name: 'fake', runtime_version: '9', runtime_api_version: 'v1' });
    } finally {
      cri.close();
    }
  });
});

describe('gRPC framing helpers of the http2 proxy', () => {
  it('scans length prefixes across arbitrary chunk boundaries and reports the first oversized message', () => {
    const msg = (len: number) => Buffer.concat([Buffer.from([0, (len >>> 24) & 255, (len >>> 16) & 255, (len >>> 8) & 255, len & 255]), Buffer.alloc(len, 7)]);
    const stream = Buffer.concat([msg(3), msg(0), msg(300), msg(1000), msg(5)]);
    for (const size of [1, 2, 4, 5, 6, 7, 64, stream.length]) {
      const ok = new GrpcFrameScanner(1000);
      for (let i = 0; i < stream.length; i += size) expect(ok.feed(stream.subarray(i, i + size)), `chunk ${size}`).toBeUndefined();
      const strict = new GrpcFrameScanner(999);
      const found: Array<number | undefined> = [];
      for (let i = 0; i < stream.length; i += size) found.push(strict.feed(stream.subarray(i, i + size)));
      expect(found.find((x) => x !== undefined), `chunk ${size}`).toBe(1000);
    }
    expect(new GrpcFrameScanner(16 * MiB).feed(Buffer.from([0, 0x01, 0x00, 0x00, 0x01]))).toBe(16 * MiB + 1);
  });

  it('extracts the message of a buffered unary body, and refuses compressed or truncated ones', () => {
    const body = Buffer.from([0, 0, 0, 0, 2, 0xaa, 0xbb]);
    expect(grpcMessage(body)).toEqual(Buffer.from([0xaa, 0xbb]));
    expect(grpcMessage(Buffer.from([1, 0, 0, 0, 2, 0xaa, 0xbb]))).toBeUndefined();
    expect(grpcMessage(body.subarray(0, 6))).toBeUndefined();
    expect(grpcMessage(Buffer.alloc(3))).toBeUndefined();
  });

  it('parses and formats grpc-timeout', () => {
    expect(parseGrpcTimeout('1999875u')).toBeCloseTo(1999.875, 6);
    expect(parseGrpcTimeout('5S')).toBe(5000);
    expect(parseGrpcTimeout('2M')).toBe(120_000);
    expect(parseGrpcTimeout('100000000m')).toBeUndefined(); // 9 digits: not a valid timeout
    expect(parseGrpcTimeout('5x')).toBeUndefined();
    expect(parseGrpcTimeout(undefined)).toBeUndefined();
    expect(formatGrpcTimeout(1999.875)).toBe('1999875u');
    expect(formatGrpcTimeout(0)).toBe('1u');
    expect(formatGrpcTimeout(120_000)).toBe('120000m');
    for (const ms of [0.5, 1500, 99_999, 100_000, 3_600_000, 1e12]) expect(formatGrpcTimeout(ms)).toMatch(/^\d{1,8}[HMSmun]$/);
  });
});
