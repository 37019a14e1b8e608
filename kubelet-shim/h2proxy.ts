/**
 * CRI proxy at the HTTP/2 stream level (node:http2), the default implementation of the kubelet-shim:
 * every gRPC call of the kubelet is one HTTP/2 stream, forwarded as such to the runtime — request
 * headers (metadata, `grpc-timeout`, so the deadline) as received, DATA frames piped both ways with
 * HTTP/2 flow control, response headers and trailers (status, details, `grpc-status-details-bin`) as
 * the runtime sent them, RST_STREAM propagated both ways. No gRPC message is decoded or re-encoded
 * on the way; the 5-byte gRPC message prefixes are only scanned to enforce the 16 MiB limit.
 *
 * Buffered and decoded, because the shim must inspect them (thesis §5.3.4 and critical-path
 * tracking): RunPodSandbox requests (pod criticality -> {@link PacingGate}; the deadline left after
 * the wait is forwarded as `grpc-timeout`), and, only while a critical pod is being tracked,
 * CreateContainer/StartContainer and the answers of those calls (ids).
 *
 * The other implementation, {@link CriProxy} (grpc-js server + channel, proxy.ts), terminates gRPC on
 * both sides; this one avoids grpc-js' per-call machinery (metadata objects, call stacks, timers),
 * which is most of the latency the proxy adds (see README, experiments/bench/kubelet-shim.ts).
 *
 * A runtime that is down fails calls at once with UNAVAILABLE: the proxy holds no connection queue —
 * each call that finds no live session opens one, and a failed connect fails the calls waiting on it.
 */
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { PacingGate } from './pacing.ts';
import {
  CREATE_CONTAINER,
  CriProxyBase,
  RUN_POD_SANDBOX,
  START_CONTAINER,
  closeServerWithGrace,
  listenOn,
  tryDecode,
  type CriProxyOptions,
  type SandboxPacing,
} from './proxy.ts';

const {
  NGHTTP2_CANCEL,
  NGHTTP2_NO_ERROR,
  NGHTTP2_REFUSED_STREAM,
  HTTP2_HEADER_STATUS,
  HTTP2_HEADER_CONTENT_TYPE,
} = http2.constants;

/** HTTP/2 settings of both sides: windows large enough that a 16 MiB message does not crawl. */
const SETTINGS: http2.Settings = { initialWindowSize: 4 * 1024 * 1024, enablePush: false };
/** MB; node's default (10) rejects sessions with more buffered data, which 16 MiB messages exceed. */
const MAX_SESSION_MEMORY = 128;
const SESSION_WINDOW = 32 * 1024 * 1024;

/** A trailers-only gRPC answer (no message): `:status 200`, grpc-status and grpc-message. */
function statusHeaders(code: grpc.status, message: string): OutgoingHttpHeaders {
  return { [HTTP2_HEADER_STATUS]: 200, [HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc', 'grpc-status': String(code), 'grpc-message': encodeURIComponent(message) };
}

/** Trailers with a status (after response headers were sent). */
function statusTrailers(code: grpc.status, message: string): OutgoingHttpHeaders {
  return { 'grpc-status': String(code), 'grpc-message': encodeURIComponent(message) };
}

const TIMEOUT_UNITS_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** `grpc-timeout` ("1999875u", "5S", ...) in ms; undefined when absent or malformed. */
export function parseGrpcTimeout(v: string | string[] | undefined): number | undefined {
  if (typeof v !== 'string') return undefined;
  const m = /^(\d{1,8})([HMSmun])$/.exec(v);
  return m ? Number(m[1]) * TIMEOUT_UNITS_MS[m[2]!]! : undefined;
}

/** A `grpc-timeout` value for `ms` (at most 8 digits, as the spec requires). */
export function formatGrpcTimeout(ms: number): string {
  const us = Math.max(1, Math.ceil(ms * 1000));
  if (us < 1e8) return `${us}u`;
  const milli = Math.ceil(ms);
  if (milli < 1e8) return `${milli}m`;
  return `${Math.min(99_999_999, Math.ceil(ms / 1000))}S`;
}

/**
 * Scans the gRPC length-prefixed messages of a DATA stream, chunk by chunk, without copying them:
 * returns the length of the first message above `max`, else undefined.
 */
export class GrpcFrameScanner {
  /** Bytes of the current 5-byte prefix seen (0 = expecting a new message). */
  private have = 0;
  private len = 0;
  private remaining = 0;
  constructor(private readonly max: number) {}

  feed(chunk: Buffer): number | undefined {
    let off = 0;
    const n = chunk.length;
    while (off < n) {
      if (this.remaining > 0) {
        const take = Math.min(this.remaining, n - off);
        this.remaining -= take;
        off += take;
        continue;
      }
      const b = chunk[off++]!;
      if (this.have > 0) this.len = this.len * 256 + b; // byte 0 is the compressed flag
      if (++this.have === 5) {
        const len = this.len;
        this.have = 0;
        this.len = 0;
        if (len > this.max) return len;
        this.remaining = len;
      }
    }
    return undefined;
  }
}

/** The message of a buffered unary gRPC body (one uncompressed length-prefixed message), else undefined. */
export function grpcMessage(body: Buffer): Buffer | undefined {
  if (body.length < 5 || body[0] !== 0) return undefined;
  const len = body.readUInt32BE(1);
  return body.length === 5 + len ? body.subarray(5) : undefined;
}

/** One buffer of received chunks (no copy for one chunk). */
export function concatChunks(chunks: Buffer[]): Buffer {
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

/** What to do with the answer of a forwarded call (critical-path tracking needs some decoded). */
type OnAnswer = (message: Buffer | undefined, ok: boolean) => void;

export class H2CriProxy extends CriProxyBase {
  protected readonly implementation = 'http2';
  private readonly server: http2.Http2Server;
  private readonly sessions = new Set<ServerHttp2Session>();
  private backend: ClientHttp2Session | undefined;

  constructor(options: CriProxyOptions) {
    super(options);
    this.server = http2.createServer({ settings: SETTINGS, maxSessionMemory: MAX_SESSION_MEMORY });
    this.server.on('session', (s) => {
      this.sessions.add(s);
      s.on('close', () => this.sessions.delete(s));
      s.on('error', (err) => this.log?.debug({ err: err.message }, 'kubelet-side HTTP/2 session error'));
      try {
        s.setLocalWindowSize(SESSION_WINDOW); // connection-level window for what the kubelet sends
      } catch (err) {
        this.log?.debug({ err: (err as Error).message }, 'kubelet-side session window not set');
      }
    });
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
  }

  protected bind(path: string): Promise<void> {
    return listenOn(this.server, path);
  }

  protected async shutdown(graceMs: number): Promise<void> {
    await closeServerWithGrace(this.server, this.sessions, (s) => s.close(), (s) => s.destroy(), graceMs);
    this.backend?.destroy();
    this.backend = undefined;
  }

  // -------------------------------------------------------------------------------------------

  private onStream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
    const t0 = performance.now();
    const path = headers[':path'] ?? '';
    stream.on('error', (err) => this.log?.debug({ path, err: err.message }, 'kubelet-side stream error'));
    if (path === RUN_POD_SANDBOX) {
      this.buffered(stream, (body) =>
        this.runPodSandbox(stream, headers, body, t0).catch((err: Error) => {
          this.log?.error({ err: err.stack ?? err.message }, 'RunPodSandbox handler failed');
          this.refuse(stream, grpc.status.INTERNAL, `kubelet-shim: ${err.message}`);
        }),
      );
    } else if (path === CREATE_CONTAINER && this.critical.wantsCreate) {
      this.buffered(stream, (body) => {
        const msg = grpcMessage(body);
        const tracked = msg && this.critical.createFor(tryDecode(this.decode.createRequest, msg)?.pod_sandbox_id);
        const onAnswer: OnAnswer | undefined = tracked
          ? (m, ok) => {
              const id = ok && m ? tryDecode(this.decode.createResponse, m)?.container_id : undefined;
              this.critical.containerCreated(tracked, typeof id === 'string' && id ? id : undefined);
            }
          : undefined;
        this.forward(stream, headers, body, t0, 0, onAnswer);
      });
    } else if (path === START_CONTAINER && this.critical.wantsStart) {
      this.buffered(stream, (body) => {
        const msg = grpcMessage(body);
        const tracked = msg && this.critical.startFor(tryDecode(this.decode.startRequest, msg)?.container_id);
        this.forward(stream, headers, body, t0, 0, tracked ? (_m, ok) => this.critical.finish(tracked, ok) : undefined);
      });
    } else {
      this.forward(stream, headers, undefined, t0, 0, undefined);
    }
  }

  /** Reads a whole request body (bounded by the message limit), then calls `then`. */
  private buffered(stream: ServerHttp2Stream, then: (body: Buffer) => void): void {
    const chunks: Buffer[] = [];
    const scanner = new GrpcFrameScanner(this.opts.maxMessageBytes);
    let failed = false;
    stream.on('data', (c: Buffer) => {
      if (failed) return;
      const over = scanner.feed(c);
      if (over !== undefined) {
        failed = true;
        this.refuse(stream, grpc.status.RESOURCE_EXHAUSTED, `kubelet-shim: received message larger than max (${over} vs. ${this.opts.maxMessageBytes})`);
        return;
      }
      chunks.push(c);
    });
    stream.once('end', () => {
      if (!failed && !stream.destroyed) then(concatChunks(chunks));
    });
  }

  /** Pace (the shared admission, thesis §5.3.4), then forward. */
  private async runPodSandbox(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, body: Buffer, t0: number): Promise<void> {
    // the kubelet giving up (RST_STREAM) or its deadline passing takes the request out of the gate
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    const ac = new AbortController();
    let expired = false;
    const onClose = () => ac.abort();
    stream.once('close', onClose);
    const timer =
      timeoutMs !== undefined
        ? setTimeout(() => {
            expired = true;
            ac.abort();
          }, timeoutMs)
        : undefined;
    let paced: SandboxPacing;
    try {
      paced = await this.paceSandbox(grpcMessage(body), ac.signal);
    } finally {
      clearTimeout(timer);
      stream.off('close', onClose);
    }
    if (paced.outcome === 'unpaced') return this.forward(stream, headers, body, t0, 0, undefined);
    if (paced.outcome === 'refused') {
      if (expired) return this.refuse(stream, grpc.status.DEADLINE_EXCEEDED, 'Deadline Exceeded (while waiting in the kubelet-shim pacing gate)');
      return this.refuse(stream, paced.code, paced.message);
    }
    if (stream.closed || stream.destroyed) return;
    const forwarded = this.sandboxForwarded(paced, t0);
    if (timeoutMs !== undefined) headers = { ...headers, 'grpc-timeout': formatGrpcTimeout(timeoutMs - (forwarded.at - t0)) };
    this.forward(stream, headers, body, t0, paced.admission.waitedMs, (answer, ok) => forwarded.done(ok, answer));
  }

  /** Answers a call with a status and no message (trailers-only), unless the kubelet is gone. */
  private refuse(stream: ServerHttp2Stream, code: grpc.status, message: string): void {
    if (stream.destroyed || stream.closed) return;
    if (stream.headersSent) {
      stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      return;
    }
    stream.respond(statusHeaders(code, message), { endStream: true });
  }

  /** The session to the runtime, opened on demand (a new one after the old closed or got GOAWAY). */
  private session(): ClientHttp2Session {
    const live = this.backend;
    if (live && !live.closed && !live.destroyed) return live;
    const backendPath = this.opts.backend;
    const s = http2.connect('http://localhost', {
      createConnection: () => net.connect(backendPath),
      settings: SETTINGS,
      maxSessionMemory: MAX_SESSION_MEMORY,
    });
    this.backend = s;
    const connectTimer = setTimeout(() => {
      s.destroy(new Error(`runtime unix://${backendPath} not reachable within ${this.opts.connectTimeoutMs} ms`));
    }, this.opts.connectTimeoutMs);
    s.once('connect', () => {
      clearTimeout(connectTimer);
      s.setLocalWindowSize(SESSION_WINDOW);
      this.backendReachable();
    });
    s.on('error', (err) => this.backendUnreachable(err));
    const drop = () => {
      clearTimeout(connectTimer);
      if (this.backend === s) this.backend = undefined;
    };
    s.once('goaway', drop);
    s.once('close', drop);
    return s;
  }

  /**
   * Forwards one call as an HTTP/2 stream. `body`: the request already read (buffered calls), else
   * the request DATA is piped. `pacedMs` (time in the gate) is excluded from the added latency.
   * `onAnswer` (inspected calls): gets the response message (buffered while forwarded) and whether
   * the call ended with grpc-status 0.
   */
  private forward(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, body: Buffer | undefined, t0: number, pacedMs: number, onAnswer: OnAnswer | undefined): void {
    if (stream.destroyed || stream.closed) return;
    if (this.closing) return this.refuse(stream, grpc.status.UNAVAILABLE, 'kubelet-shim shutting down');
    const path = headers[':path'] ?? '';
    const method = this.methodOf(path);
    let upstream: ClientHttp2Stream;
    try {
      upstream = this.session().request(headers as OutgoingHttpHeaders, { endStream: false });
    } catch (err) {
      return this.refuse(stream, grpc.status.UNAVAILABLE, `kubelet-shim: runtime unix://${this.opts.backend}: ${(err as Error).message}`);
    }
    const tSent = performance.now();
    const max = this.opts.maxMessageBytes;
    let responded = false; // response headers sent to the kubelet
    let finished = false; // the runtime's side is over (trailers or error)
    let trailers: OutgoingHttpHeaders | undefined;
    const answerChunks: Buffer[] | undefined = onAnswer ? [] : undefined;
    let tBack = 0;

    const observe = () => {
      this.latencyOf(method)?.observe(Math.max(0, tSent - t0 - pacedMs + (performance.now() - tBack)) / 1000);
    };
    const settle = (ok: boolean) => {
      if (!onAnswer) return;
      const cb = onAnswer;
      onAnswer = undefined;
      cb(ok && answerChunks ? grpcMessage(concatChunks(answerChunks)) : undefined, ok);
    };
    // the runtime failed the call or vanished: a status for the kubelet, in whatever form is still possible
    const fail = (code: grpc.status, message: string) => {
      if (finished) return;
      finished = true;
      settle(false);
      if (stream.destroyed || stream.closed) return;
      if (!responded) {
        responded = true;
        stream.respond(statusHeaders(code, message), { endStream: true });
      } else {
        trailers = statusTrailers(code, message);
        if (!stream.writableEnded) stream.end();
      }
    };

    // kubelet -> runtime
    stream.on('close', () => {
      if (!finished && !upstream.destroyed) upstream.close(stream.rstCode && stream.rstCode !== NGHTTP2_NO_ERROR ? stream.rstCode : NGHTTP2_CANCEL);
    });
    if (body) {
      upstream.end(body);
    } else {
      const scanner = new GrpcFrameScanner(max);
      stream.on('data', (c: Buffer) => {
        const over = scanner.feed(c);
        if (over !== undefined) {
          upstream.close(NGHTTP2_CANCEL);
          fail(grpc.status.RESOURCE_EXHAUSTED, `kubelet-shim: received message larger than max (${over} vs. ${max})`);
          return;
        }
        if (!upstream.write(c)) {
          stream.pause();
          upstream.once('drain', () => stream.resume());
        }
      });
      stream.once('end', () => {
        if (!upstream.destroyed) upstream.end();
      });
    }

    // runtime -> kubelet
    upstream.once('response', (h, flags) => {
      tBack = performance.now();
      if (stream.destroyed || stream.closed) return;
      responded = true;
      if (flags & http2.constants.NGHTTP2_FLAG_END_STREAM) {
        // trailers-only answer (an error status, usually)
        finished = true;
        settle(h['grpc-status'] === '0');
        stream.respond(h as OutgoingHttpHeaders, { endStream: true });
        observe();
        return;
      }
      stream.respond(h as OutgoingHttpHeaders, { waitForTrailers: true });
    });
    stream.on('wantTrailers', () => {
      stream.sendTrailers(trailers ?? statusTrailers(grpc.status.UNAVAILABLE, 'kubelet-shim: runtime response ended without trailers'));
    });
    const scanner = new GrpcFrameScanner(max);
    upstream.on('data', (c: Buffer) => {
      if (finished) return;
      const over = scanner.feed(c);
      if (over !== undefined) {
        upstream.close(NGHTTP2_CANCEL);
        fail(grpc.status.RESOURCE_EXHAUSTED, `kubelet-shim: received message larger than max (${over} vs. ${max})`);
        return;
      }
      answerChunks?.push(c);
      if (!stream.write(c)) {
        upstream.pause();
        stream.once('drain', () => upstream.resume());
      }
    });
    upstream.once('trailers', (t) => {
      trailers = t as OutgoingHttpHeaders;
    });
    upstream.once('end', () => {
      tBack = performance.now();
      if (finished) return;
      // the runtime's side ended without response headers: its connection went away (e.g. a
      // forced shutdown) — without this the kubelet's call would hang until its deadline
      if (!responded) return fail(grpc.status.UNAVAILABLE, `kubelet-shim: runtime unix://${this.opts.backend} closed the call without answering`);
      finished = true;
      // no trailers: the connection went away in the middle of the answer
      trailers ??= statusTrailers(grpc.status.UNAVAILABLE, `kubelet-shim: runtime unix://${this.opts.backend} closed the call before its status`);
      settle(trailers['grpc-status'] === '0');
      if (!stream.destroyed && !stream.closed && !stream.writableEnded) stream.end();
      observe();
    });
    upstream.on('error', (err: Error & { code?: string }) => {
      this.log?.debug({ path, err: err.message }, 'runtime-side stream error');
      fail(grpc.status.UNAVAILABLE, `kubelet-shim: runtime unix://${this.opts.backend} unavailable: ${err.message}`);
    });
    upstream.once('close', () => {
      if (finished) return;
      // RST_STREAM from the runtime (or the session went away) before the end of its answer
      const code = upstream.rstCode;
      if (code === NGHTTP2_CANCEL) {
        if (!responded && !stream.destroyed && !stream.closed) fail(grpc.status.CANCELLED, 'kubelet-shim: call cancelled by the runtime');
        else if (!stream.destroyed) {
          finished = true;
          settle(false);
          stream.close(NGHTTP2_CANCEL);
        }
      } else if (code === NGHTTP2_REFUSED_STREAM) fail(grpc.status.UNAVAILABLE, 'kubelet-shim: stream refused by the runtime');
      else fail(grpc.status.UNAVAILABLE, `kubelet-shim: runtime unix://${this.opts.backend} closed the call (HTTP/2 code ${code})`);
    });
  }
}
