/**
 * CRI v1 pass-through proxy between the kubelet and the container runtime (containerd), listening
 * on a unix socket. Every method of runtime.v1.RuntimeService and runtime.v1.ImageService (read from
 * the proto, not hand-listed) is forwarded with identity (de)serializers: the bytes go through
 * undecoded, with the request metadata, the deadline, the response headers, trailers, status code
 * and details of the runtime unchanged, and cancellation propagated both ways. Only RunPodSandbox
 * is decoded — to read the pod's `ulysses.io/criticality` label, which the kubelet copies into
 * `config.labels` — and held by a {@link PacingGate} before it is forwarded (thesis §5.3.4).
 *
 * Limits as the kubelet's CRI client: 16 MiB messages both ways (grpc-js defaults to 4 MiB). A
 * runtime that is down fails calls fast with UNAVAILABLE (no wait-for-ready; a call that finds the
 * channel still connecting waits at most `connectTimeoutMs`), and the channel reconnects within
 * about a second once the runtime is back.
 */
import { existsSync, lstatSync, mkdirSync, unlinkSync, chmodSync } from 'node:fs';
import { socketPathState } from './socket-path.ts';
import net from 'node:net';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from 'pino';
import { CRITICALITY_LABEL, isCriticality, type Criticality } from '../core/criticality.ts';
import { objectLogger } from '../core/logging.ts';
import { PacingGate, PacingRejection, type Admission } from './pacing.ts';
import { addedLatencyByMethod, type ShimMetrics } from './metrics.ts';
import { CriticalPathTracker } from './critical-path.ts';

export const CRI_PROTO_FILE = fileURLToPath(new URL('./proto/api.proto', import.meta.url));
export const CRI_SERVICES = ['runtime.v1.RuntimeService', 'runtime.v1.ImageService'] as const;
export const RUN_POD_SANDBOX = '/runtime.v1.RuntimeService/RunPodSandbox';
export const CREATE_CONTAINER = '/runtime.v1.RuntimeService/CreateContainer';
export const START_CONTAINER = '/runtime.v1.RuntimeService/StartContainer';
/** The kubelet's CRI client limit (pkg/kubelet/cri/remote: maxMsgSize = 16 MiB). */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// The CRI API, from the proto
// ---------------------------------------------------------------------------------------------

export interface CriMethod {
  /** "runtime.v1.RuntimeService" */
  readonly service: string;
  /** "RunPodSandbox" */
  readonly name: string;
  /** "/runtime.v1.RuntimeService/RunPodSandbox" */
  readonly path: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
  /** Decoding functions of proto-loader (used for RunPodSandbox and by tests/bench clients). */
  readonly definition: protoLoader.MethodDefinition<object, object>;
}

let packageDefinition: protoLoader.PackageDefinition | undefined;

/** The CRI proto (Kubernetes 1.37, k8s.io/cri-api v0.37.2; a wire superset of 1.36's), loaded once; field names as in the proto. */
export function criPackageDefinition(): protoLoader.PackageDefinition {
  packageDefinition ??= protoLoader.loadSync(CRI_PROTO_FILE, { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  return packageDefinition;
}

/** Every method of the two CRI services, in proto order (decoding per `pkg`, default: the proxy's). */
export function criMethods(pkg: protoLoader.PackageDefinition = criPackageDefinition()): CriMethod[] {
  const out: CriMethod[] = [];
  for (const service of CRI_SERVICES) {
    const def = pkg[service] as protoLoader.ServiceDefinition | undefined;
    if (!def) throw new Error(`${CRI_PROTO_FILE}: service ${service} not found`);
    for (const [name, m] of Object.entries(def)) {
      out.push({ service, name, path: m.path, requestStream: m.requestStream, responseStream: m.responseStream, definition: m as protoLoader.MethodDefinition<object, object> });
    }
  }
  return out;
}

/** Decoders of the messages the proxies inspect (RunPodSandbox, CreateContainer, StartContainer). */
export type CriDecoders = Record<'runPodSandbox' | 'sandboxResponse' | 'createRequest' | 'createResponse' | 'startRequest', (b: Buffer) => Record<string, unknown>>;

export function criDecoders(methods: CriMethod[] = criMethods()): CriDecoders {
  const def = (path: string) => {
    const m = methods.find((x) => x.path === path);
    if (!m) throw new Error(`${CRI_PROTO_FILE}: no ${path} method`);
    return m.definition as unknown as { requestDeserialize: (b: Buffer) => Record<string, unknown>; responseDeserialize: (b: Buffer) => Record<string, unknown> };
  };
  return {
    runPodSandbox: def(RUN_POD_SANDBOX).requestDeserialize,
    sandboxResponse: def(RUN_POD_SANDBOX).responseDeserialize,
    createRequest: def(CREATE_CONTAINER).requestDeserialize,
    createResponse: def(CREATE_CONTAINER).responseDeserialize,
    startRequest: def(START_CONTAINER).requestDeserialize,
  };
}

/** Decodes `b` with `decode`, undefined when it is not such a message. */
export function tryDecode(decode: (b: Buffer) => Record<string, unknown>, b: Buffer): Record<string, unknown> | undefined {
  try {
    return decode(b);
  } catch {
    return undefined;
  }
}

/** What the proxy reads of a RunPodSandboxRequest. */
export interface SandboxInfo {
  /** "namespace/name" of the pod. */
  readonly key: string;
  readonly uid: string | undefined;
  readonly criticality: Criticality;
  /** The label's value when it is present but not a valid level. */
  readonly invalidLabel?: string;
}

interface RunPodSandboxRequestShape {
  config?: {
    metadata?: { name?: string; uid?: string; namespace?: string };
    labels?: Record<string, string>;
  };
}

/** Decodes the pod identity and criticality of a serialized RunPodSandboxRequest. */
export function sandboxInfo(decode: (b: Buffer) => object, request: Buffer): SandboxInfo {
  const req = decode(request) as RunPodSandboxRequestShape;
  const labels = req.config?.labels ?? {};
  const meta = req.config?.metadata ?? {};
  const namespace = meta.namespace || labels['io.kubernetes.pod.namespace'] || '';
  const name = meta.name || labels['io.kubernetes.pod.name'] || '';
  const uid = meta.uid || labels['io.kubernetes.pod.uid'] || undefined;
  const raw = labels[CRITICALITY_LABEL];
  const key = `${namespace}/${name}`;
  if (raw === undefined) return { key, uid, criticality: 'none' };
  if (isCriticality(raw)) return { key, uid, criticality: raw };
  return { key, uid, criticality: 'none', invalidLabel: raw };
}

// ---------------------------------------------------------------------------------------------
// Metadata and status helpers
// ---------------------------------------------------------------------------------------------

const identity = (b: Buffer): Buffer => b;

/** Response headers that grpc-js sets itself on the proxy's side and must not be copied. */
const RESERVED_RESPONSE_HEADERS = ['content-type', 'grpc-encoding', 'grpc-accept-encoding', 'accept-encoding', 'te', 'user-agent'];

/** Strips, in place, the headers grpc-js sets itself (the runtime's Metadata object is ours to change). */
function responseHeaders(md: grpc.Metadata): grpc.Metadata {
  for (const k of RESERVED_RESPONSE_HEADERS) md.remove(k);
  return md;
}

function deadlineMs(d: grpc.Deadline): number {
  return d instanceof Date ? d.getTime() : d;
}

function statusError(code: grpc.status, details: string, metadata?: grpc.Metadata): grpc.ServerErrorResponse {
  return Object.assign(new Error(details), { code, details, metadata: metadata ?? new grpc.Metadata() });
}

// ---------------------------------------------------------------------------------------------
// The proxy
// ---------------------------------------------------------------------------------------------

/** A RunPodSandbox leaving the gate for the runtime (for experiments and tests). */
export interface ForwardEvent {
  readonly info: SandboxInfo;
  readonly admission: Admission;
  /** performance.now() when the request was sent to the runtime. */
  readonly at: number;
}

/** A RunPodSandbox at the pacing gate ({@link CriProxyBase.paceSandbox}). */
export type SandboxPacing =
  /** not a decodable RunPodSandboxRequest: forward it as it is */
  | { readonly outcome: 'unpaced' }
  /** refused by the gate, or the caller gave up: answer with this status unless the caller is gone */
  | { readonly outcome: 'refused'; readonly pod: SandboxInfo; readonly code: grpc.status; readonly message: string }
  | AdmittedSandbox;

export interface AdmittedSandbox {
  readonly outcome: 'admitted';
  readonly pod: SandboxInfo;
  readonly admission: Admission;
  readonly podLog: Logger | undefined;
}

export interface ForwardedSandbox {
  /** performance.now() of the forward */
  readonly at: number;
  /** The runtime answered: `ok` (status 0), its response message, fields describing a failure. */
  done(ok: boolean, response?: Buffer, failure?: Record<string, unknown>): void;
}

export interface CriProxyOptions {
  /** Unix socket path the kubelet connects to (containerRuntimeEndpoint / imageServiceEndpoint). */
  listen: string;
  /** Unix socket path of the runtime (containerd's grpc.address). */
  backend: string;
  /** Pacing of RunPodSandbox; default: a vanilla gate (no wait). */
  gate?: PacingGate;
  log?: Logger;
  metrics?: ShimMetrics;
  /** Default 16 MiB, both directions, both sides. */
  maxMessageBytes?: number;
  /** How long a call waits for a connecting runtime before failing UNAVAILABLE (default 1000 ms). */
  connectTimeoutMs?: number;
  /** Mode of the socket file (default 0o660). */
  socketMode?: number;
  onForward?: (ev: ForwardEvent) => void;
}

/** The options of a proxy with their defaults filled in. */
export type ResolvedCriProxyOptions = Required<Pick<CriProxyOptions, 'maxMessageBytes' | 'connectTimeoutMs' | 'socketMode'>> & CriProxyOptions;

/**
 * What every CRI proxy implementation (grpc-js, http2, splice) shares: options with defaults, the
 * pacing gate and the critical-path tracker, the decoders of the inspected messages, the per-method
 * added-latency histogram, the socket's lifecycle (stale socket removed, bound, mode set; unlinked
 * on close), the stop order (gate closed first so paced waiters are rejected, then the
 * implementation's graceful shutdown) and the runtime-reachability log (once per transition).
 */
export abstract class CriProxyBase {
  readonly gate: PacingGate;
  readonly opts: ResolvedCriProxyOptions;
  readonly log: Logger | undefined;
  /** Critical-path tracking (highDone / criticalCreation of the gate). */
  readonly critical: CriticalPathTracker;
  readonly decode: CriDecoders;
  /** The per-method child of the added-latency histogram. */
  readonly latencyOf: (method: string) => { observe(v: number): void } | undefined;
  private readonly methodNames = new Map<string, string>();
  private started = false;
  closing = false;
  private backendDown = false;
  protected abstract readonly implementation: string;

  constructor(options: CriProxyOptions) {
    this.opts = { maxMessageBytes: MAX_MESSAGE_BYTES, connectTimeoutMs: 1000, socketMode: 0o660, ...options };
    this.gate = options.gate ?? new PacingGate({ log: options.log, metrics: options.metrics });
    this.log = options.log;
    this.critical = new CriticalPathTracker(() => this.gate, options.log);
    const methods = criMethods();
    this.decode = criDecoders(methods);
    this.latencyOf = addedLatencyByMethod(options.metrics);
    for (const m of methods) this.methodNames.set(m.path, m.name);
  }

  /** Binds the server to the unix socket at `path`. */
  protected abstract bind(path: string): Promise<void>;
  /** Stops the server: running calls get `graceMs` to finish, then are cut. */
  protected abstract shutdown(graceMs: number): Promise<void>;

  /** "RunPodSandbox" for "/runtime.v1.RuntimeService/RunPodSandbox" ("unknown" if not a CRI method). */
  methodOf(path: string): string {
    return this.methodNames.get(path) ?? 'unknown';
  }

  /** Unlinks a stale socket, binds, sets the socket's mode; rejects if another server answers there. */
  async start(): Promise<void> {
    const path = this.opts.listen;
    mkdirSync(dirname(path), { recursive: true });
    await removeStaleSocket(path, this.opts.backend);
    await this.bind(path);
    chmodSync(path, this.opts.socketMode);
    this.started = true;
    this.log?.info({ listen: path, backend: this.opts.backend, pacing: this.gate.config, implementation: this.implementation }, 'kubelet-shim CRI proxy listening');
  }

  /** Stops accepting calls, rejects paced waiters, lets running calls finish for `graceMs`, then cuts them. */
  async close(graceMs = 2000): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    this.gate.close();
    await this.shutdown(graceMs);
    if (this.started) {
      try {
        unlinkSync(this.opts.listen);
      } catch {
        /* already gone */
      }
    }
  }

  /**
   * The RunPodSandbox admission of every implementation: decodes the request (`message`, the
   * serialized RunPodSandboxRequest; undefined when the implementation could not cut one out),
   * warns about an invalid criticality label, tells `onPod` the pod, then waits in the gate until
   * the request is admitted, refused (queue full, gate closed) or `signal` aborts (the kubelet gave
   * up). A request that does not decode is not paced: the runtime rejects it with its own error.
   */
  async paceSandbox(message: Buffer | undefined, signal: AbortSignal, onPod?: (pod: SandboxInfo) => void): Promise<SandboxPacing> {
    let pod: SandboxInfo | undefined;
    let decodeError: string | undefined;
    try {
      if (message) pod = sandboxInfo(this.decode.runPodSandbox, message);
    } catch (err) {
      decodeError = (err as Error).message;
    }
    if (!pod) {
      this.log?.warn(decodeError === undefined ? {} : { err: decodeError }, 'RunPodSandbox request not decodable; forwarded unpaced');
      return { outcome: 'unpaced' };
    }
    const podLog = this.log && objectLogger(this.log, 'Pod', pod.key);
    if (pod.invalidLabel !== undefined) podLog?.warn({ value: pod.invalidLabel }, `invalid ${CRITICALITY_LABEL} label value; treated as "none"`);
    onPod?.(pod);
    try {
      const admission = await this.gate.acquire({ key: pod.key, criticality: pod.criticality }, signal);
      return { outcome: 'admitted', pod, admission, podLog };
    } catch (err) {
      const r = err instanceof PacingRejection ? err : new PacingRejection('UNAVAILABLE', String(err));
      return { outcome: 'refused', pod, code: grpc.status[r.code], message: r.message };
    }
  }

  /**
   * An admitted RunPodSandbox goes to the runtime now: the gate counts the next low-priority gap
   * from here ({@link PacingGate.forwarded}), the `onForward` hook is told and the pod's log gets
   * "RunPodSandbox forwarded". Returns the time of the forward and `done`, to call with the
   * runtime's answer: logs the outcome and, for a high-priority pod, records the sandbox on its
   * critical path (`t0`: when the request arrived).
   */
  sandboxForwarded(admitted: AdmittedSandbox, t0: number): ForwardedSandbox {
    const { pod, admission, podLog } = admitted;
    this.gate.forwarded(admission);
    const at = performance.now();
    this.opts.onForward?.({ info: pod, admission, at });
    const waitedMs = Math.round(admission.waitedMs);
    podLog?.info({ criticality: pod.criticality, waitedMs }, 'RunPodSandbox forwarded');
    const done = (ok: boolean, response?: Buffer, failure?: Record<string, unknown>) => {
      const outcome = { criticality: pod.criticality, waitedMs, runtimeMs: Math.round(performance.now() - at) };
      if (ok) podLog?.info(outcome, 'RunPodSandbox done');
      else podLog?.warn({ ...outcome, ...failure }, 'RunPodSandbox failed');
      if (admission.priority === 'high') {
        const id = ok && response ? tryDecode(this.decode.sandboxResponse, response)?.pod_sandbox_id : undefined;
        this.critical.sandboxDone(pod.key, t0, typeof id === 'string' && id ? id : undefined);
      }
    };
    return { at, done };
  }

  /** Logs that the runtime became unreachable (once, not every reconnect attempt or failed call). */
  backendUnreachable(err?: Error): void {
    if (!this.backendDown && !this.closing) {
      this.backendDown = true;
      this.log?.warn({ backend: this.opts.backend, err: err?.message }, 'runtime unreachable: CRI calls fail with UNAVAILABLE until it is back');
    }
  }

  /** Logs that the runtime is reachable again (once per outage). */
  backendReachable(): void {
    if (this.backendDown) {
      this.backendDown = false;
      this.log?.info({ backend: this.opts.backend }, 'runtime reachable again');
    }
  }
}

/** Binds a net/http2 server to a unix socket; rejects with the listen error (EADDRINUSE, EACCES, ...). */
export function listenOn(server: net.Server, path: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/**
 * Graceful stop of a net/http2 server: stop listening, `drain` each connection (finish running
 * calls, accept no new ones), `destroy` them if they are still open after `graceMs`.
 */
export async function closeServerWithGrace<C>(server: { close(cb: () => void): unknown }, connections: Iterable<C>, drain: (c: C) => void, destroy: (c: C) => void, graceMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  for (const c of connections) drain(c);
  const force = setTimeout(() => {
    for (const c of connections) destroy(c);
  }, graceMs);
  await closed;
  clearTimeout(force);
}

export class CriProxy extends CriProxyBase {
  protected readonly implementation = 'grpc-js';
  private readonly server: grpc.Server;
  private readonly client: grpc.Client;
  private readonly channel: ReturnType<grpc.Client['getChannel']>;

  constructor(options: CriProxyOptions) {
    super(options);
    const max = this.opts.maxMessageBytes;
    // channelz bookkeeping costs per call and nobody reads it here
    this.server = new grpc.Server({ 'grpc.max_receive_message_length': max, 'grpc.max_send_message_length': max, 'grpc.enable_channelz': 0 });
    this.client = new grpc.Client(`unix://${options.backend}`, grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': max,
      'grpc.max_send_message_length': max,
      // reconnect within ~1 s of the runtime's return (grpc-js backs off up to 120 s by default)
      'grpc.initial_reconnect_backoff_ms': 100,
      'grpc.max_reconnect_backoff_ms': 1000,
      'grpc.enable_channelz': 0,
    });
    this.channel = this.client.getChannel();
    for (const m of criMethods()) this.register(m);
  }

  protected async bind(path: string): Promise<void> {
    await new Promise<void>((resolve, reject) =>
      this.server.bindAsync(`unix://${path}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
    );
  }

  override async start(): Promise<void> {
    await super.start();
    this.watchBackend(this.channel.getConnectivityState(true));
  }

  protected async shutdown(graceMs: number): Promise<void> {
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
    this.client.close();
  }

  // -------------------------------------------------------------------------------------------

  private register(m: CriMethod): void {
    if (m.requestStream) throw new Error(`kubelet-shim: client-streaming CRI method ${m.path} is not supported`);
    if (m.responseStream) {
      this.server.register(m.path, (call: grpc.ServerWritableStream<Buffer, Buffer>) => this.forwardStream(m, call), identity, identity, 'serverStream');
    } else if (m.path === RUN_POD_SANDBOX) {
      const handler = (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
        this.runPodSandbox(m, call, cb).catch((err: Error) => {
          this.log?.error({ err: err.stack ?? err.message }, 'RunPodSandbox handler failed');
          cb(statusError(grpc.status.INTERNAL, `kubelet-shim: ${err.message}`));
        });
      this.server.register(m.path, handler, identity, identity, 'unary');
    } else if (m.path === CREATE_CONTAINER || m.path === START_CONTAINER) {
      this.server.register(
        m.path,
        (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
          this.forwardUnary(m, call, this.trackCriticalStart(m.path, call.request, cb), performance.now(), 0),
        identity,
        identity,
        'unary',
      );
    } else {
      this.server.register(
        m.path,
        (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => this.forwardUnary(m, call, cb, performance.now(), 0),
        identity,
        identity,
        'unary',
      );
    }
  }

  /** Pace (the shared admission), then forward. */
  private async runPodSandbox(m: CriMethod, call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>): Promise<void> {
    const t0 = performance.now();
    // the kubelet giving up (cancel, or its deadline: grpc-js then answers DEADLINE_EXCEEDED itself
    // and reports the call cancelled) takes the request out of the gate
    const ac = new AbortController();
    const onCancel = () => ac.abort();
    call.on('cancelled', onCancel);
    let paced: SandboxPacing;
    try {
      paced = await this.paceSandbox(call.request, ac.signal);
    } finally {
      call.off('cancelled', onCancel);
    }
    if (paced.outcome === 'unpaced') return this.forwardUnary(m, call, callback, t0, 0);
    if (paced.outcome === 'refused') return callback(statusError(paced.code, paced.message));
    if (call.cancelled) return;
    const forwarded = this.sandboxForwarded(paced, t0);
    const done: grpc.sendUnaryData<Buffer> = (err, value, trailer) => {
      const failure = err ? { code: grpc.status[(err as { code?: number }).code ?? grpc.status.UNKNOWN], details: (err as { details?: string }).details } : undefined;
      forwarded.done(!err, value ?? undefined, failure);
      callback(err, value, trailer);
    };
    this.forwardUnary(m, call, done, t0, paced.admission.waitedMs);
  }

  /**
   * While a critical pod is starting, follow its CreateContainer (sandbox id -> container id) and
   * its first StartContainer ({@link CriticalPathTracker}). Only decodes when a critical pod is being
   * tracked; everything else stays pass-through.
   */
  private trackCriticalStart(path: string, request: Buffer, cb: grpc.sendUnaryData<Buffer>): grpc.sendUnaryData<Buffer> {
    if (path === CREATE_CONTAINER) {
      if (!this.critical.wantsCreate) return cb;
      const tracked = this.critical.createFor(tryDecode(this.decode.createRequest, request)?.pod_sandbox_id);
      if (!tracked) return cb;
      return (err, value, trailer) => {
        const id = !err && value ? tryDecode(this.decode.createResponse, value)?.container_id : undefined;
        this.critical.containerCreated(tracked, typeof id === 'string' ? id : undefined);
        cb(err, value, trailer);
      };
    }
    if (!this.critical.wantsStart) return cb;
    const tracked = this.critical.startFor(tryDecode(this.decode.startRequest, request)?.container_id);
    if (!tracked) return cb;
    return (err, value, trailer) => {
      this.critical.finish(tracked, !err);
      cb(err, value, trailer);
    };
  }


  /**
   * Unary pass-through on the channel's call interface (below grpc-js' client wrappers: messages are
   * the raw bytes, no per-call interceptor stack). `pacedMs` is the time spent in the gate, excluded
   * from the added latency. The answer goes out with the runtime's status, so its trailers go along.
   */
  private forwardUnary(m: CriMethod, call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>, t0: number, pacedMs: number): void {
    const send = (): void => {
      if (call.cancelled) return;
      const tSent = performance.now();
      const backend = this.channel.createCall(m.path, call.getDeadline(), undefined, null, undefined);
      const onCancel = () => backend.cancelWithStatus(grpc.status.CANCELLED, 'Cancelled by the kubelet');
      call.on('cancelled', onCancel);
      let response: Buffer | undefined;
      backend.start(call.metadata, {
        onReceiveMetadata: (md: grpc.Metadata) => call.sendMetadata(responseHeaders(md)),
        onReceiveMessage: (msg: Buffer) => {
          response = msg;
        },
        onReceiveStatus: (s: grpc.StatusObject) => {
          const tBack = performance.now();
          call.off('cancelled', onCancel);
          if (s.code === grpc.status.OK && response !== undefined) callback(null, response, s.metadata);
          else if (s.code === grpc.status.OK) callback(statusError(grpc.status.UNIMPLEMENTED, 'No message received', s.metadata));
          else callback(statusError(s.code, s.details, s.metadata));
          this.opts.metrics?.addedLatency.observe({ method: m.name }, Math.max(0, tSent - t0 - pacedMs + (performance.now() - tBack)) / 1000);
        },
      });
      backend.sendMessageWithContext({}, call.request);
      backend.halfClose();
      backend.startRead();
    };
    this.whenBackendReady(call.getDeadline(), send, (details) => callback(statusError(grpc.status.UNAVAILABLE, details)));
  }

  /**
   * Server-streaming pass-through with flow control: the next message is read from the runtime only
   * once the kubelet's side has taken the previous one (a slow kubelet slows the runtime's stream).
   */
  private forwardStream(m: CriMethod, call: grpc.ServerWritableStream<Buffer, Buffer>): void {
    const t0 = performance.now();
    const send = (): void => {
      if (call.cancelled) return;
      this.opts.metrics?.addedLatency.observe({ method: m.name }, (performance.now() - t0) / 1000);
      const backend = this.channel.createCall(m.path, call.getDeadline(), undefined, null, undefined);
      const onCancel = () => backend.cancelWithStatus(grpc.status.CANCELLED, 'Cancelled by the kubelet');
      call.on('cancelled', onCancel);
      backend.start(call.metadata, {
        onReceiveMetadata: (md: grpc.Metadata) => call.sendMetadata(responseHeaders(md)),
        onReceiveMessage: (msg: Buffer) => {
          if (call.write(msg)) backend.startRead();
          else call.once('drain', () => backend.startRead());
        },
        // grpc-js delivers the status after the last message has been read
        onReceiveStatus: (s: grpc.StatusObject) => {
          call.off('cancelled', onCancel);
          if (s.code === grpc.status.OK) call.end(s.metadata);
          else call.emit('error', statusError(s.code, s.details, s.metadata));
        },
      });
      backend.sendMessageWithContext({}, call.request);
      backend.halfClose();
      backend.startRead();
    };
    this.whenBackendReady(call.getDeadline(), send, (details) => call.emit('error', statusError(grpc.status.UNAVAILABLE, details)));
  }

  /**
   * Runs `send` at once when the runtime channel is READY or has failed (grpc-js then fails the call
   * fast with UNAVAILABLE and the connection error); while the channel is idle or connecting, waits
   * for it at most `connectTimeoutMs` (and never past the call's deadline).
   */
  private whenBackendReady(callDeadline: grpc.Deadline, send: () => void, fail: (details: string) => void): void {
    const settled = (s: grpc.connectivityState) => s === grpc.connectivityState.READY || s === grpc.connectivityState.TRANSIENT_FAILURE;
    const go = (): void => {
      if (this.closing) return fail('kubelet-shim shutting down');
      try {
        send();
      } catch (err) {
        fail(`kubelet-shim: ${(err as Error).message}`);
      }
    };
    if (this.closing) return go();
    let state = this.channel.getConnectivityState(true);
    if (settled(state)) return go();
    const limit = Math.min(Date.now() + this.opts.connectTimeoutMs, deadlineMs(callDeadline));
    const step = (): void => {
      this.channel.watchConnectivityState(state, limit, (err) => {
        if (this.closing) return go();
        if (err) return fail(`kubelet-shim: runtime unix://${this.opts.backend} not reachable within ${this.opts.connectTimeoutMs} ms`);
        state = this.channel.getConnectivityState(true);
        if (settled(state)) go();
        else step();
      });
    };
    step();
  }

  /** Logs when the runtime becomes unreachable and when it is back (not every reconnect attempt or failed call). */
  private watchBackend(from: grpc.connectivityState): void {
    if (this.closing) return;
    this.channel.watchConnectivityState(from, Infinity, () => {
      if (this.closing) return;
      const to = this.channel.getConnectivityState(false);
      if (to === grpc.connectivityState.TRANSIENT_FAILURE) this.backendUnreachable();
      else if (to === grpc.connectivityState.READY) this.backendReachable();
      this.watchBackend(to);
    });
  }
}

/**
 * Removes a leftover socket file at `path` (grpc-js does not), or the fallback guard's symlink to the
 * runtime's socket `backend` (fallback.ts: the shim takes its path back); refuses if a server answers there.
 */
export async function removeStaleSocket(path: string, backend?: string): Promise<void> {
  if (backend !== undefined && socketPathState(path, backend) === 'fallback') {
    unlinkSync(path);
    return;
  }
  const st = lstatSync(path, { throwIfNoEntry: false });
  if (!st) return;
  if (!st.isSocket()) throw new Error(`${path} exists and is not a socket`);
  const alive = await new Promise<boolean>((resolve) => {
    const s = net.connect(path);
    const done = (v: boolean) => {
      s.destroy();
      resolve(v);
    };
    s.once('connect', () => done(true));
    s.once('error', () => done(false));
    s.setTimeout(500, () => done(false));
  });
  if (alive) throw new Error(`${path}: another server is listening on this socket`);
  unlinkSync(path);
}
