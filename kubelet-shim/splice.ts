/**
 * CRI proxy at the HTTP/2 frame level (`splice`, the default implementation of the kubelet-shim):
 * each kubelet connection on the shim's socket gets one raw connection to the runtime's socket, and
 * the bytes go through as they are — no HTTP/2 session, stream object or gRPC call is built on
 * either side, which is most of the CPU (hence the latency) the other implementations add.
 *
 * - runtime -> kubelet: piped unchanged; only the 9-byte frame headers are read (where a stream
 *   ends, where a frame may be inserted) plus the DATA of the few answers the shim must read.
 * - kubelet -> runtime: cut into frames (FrameReader), every header block decoded with one HPACK
 *   decoder per connection (its dynamic table follows the kubelet's encoder) to learn each stream's
 *   `:path`; every frame forwarded byte for byte at once, EXCEPT the DATA of RunPodSandbox streams:
 *   their HEADERS go through (frame order and HPACK state untouched; the runtime's deadline starts
 *   as the kubelet's did), the DATA frames are held until END_STREAM, the request is decoded (pod
 *   labels -> criticality, thesis §5.3.4) and the frames are released when the {@link PacingGate}
 *   gives the slot. Flow control needs nothing while they wait: the kubelet already spent its
 *   window and the runtime sees the bytes later, within the window it granted. Held DATA that is
 *   discarded (kubelet RST_STREAM, runtime answering first, gate refusal) is credited back to the
 *   kubelet's connection window with a WINDOW_UPDATE.
 * - While a critical pod is tracked (CriticalPathTracker), CreateContainer/StartContainer requests
 *   and their answers are copied (not held) to follow its ids.
 * - 16 MiB (`maxMessageBytes`): the 5-byte gRPC prefixes are scanned in both directions; a longer
 *   message resets its stream (kubelet: RESOURCE_EXHAUSTED; runtime: CANCEL), its DATA not
 *   forwarded and credited back to its sender.
 * - Frames the shim writes itself — RST_STREAM, WINDOW_UPDATE, released DATA, a trailers-only gRPC
 *   status encoded without dynamic-table entries — go in only between frames and never inside a
 *   header block, so neither side's framing or HPACK state is disturbed.
 * - Runtime down: the connect to its socket fails at once and the kubelet's connection is closed:
 *   grpc-go (and grpc-js) fail the calls on it with UNAVAILABLE and reconnect (kubelet: backoff
 *   100 ms .. 3 s), each reconnect trying the runtime again. A runtime connection that closes takes
 *   the kubelet's with it (calls in flight: UNAVAILABLE).
 */
import net from 'node:net';
import * as grpc from '@grpc/grpc-js';
import { objectLogger } from '../core/logging.ts';
import { PacingGate } from './pacing.ts';
import { GrpcFrameScanner, concatChunks, grpcMessage } from './h2proxy.ts';
import {
  CREATE_CONTAINER,
  CriProxyBase,
  RUN_POD_SANDBOX,
  START_CONTAINER,
  closeServerWithGrace,
  listenOn,
  tryDecode,
  type AdmittedSandbox,
  type CriProxyOptions,
  type SandboxInfo,
  type SandboxPacing,
} from './proxy.ts';
import {
  CLIENT_PREFACE,
  ErrorCode,
  FRAME_HEADER_BYTES,
  Flag,
  FrameReader,
  FrameType,
  HeaderBlockAssembler,
  HpackDecoder,
  SETTINGS_HEADER_TABLE_SIZE,
  SETTINGS_INITIAL_WINDOW_SIZE,
  framePayload,
  grpcStatusFrame,
  rstStreamFrame,
  settingsOf,
  windowUpdateFrame,
  type Frame,
} from './h2frames.ts';

type OnAnswer = (message: Buffer | undefined, ok: boolean) => void;

const enum Kind {
  Plain,
  RunPodSandbox,
  Tracked,
}

/** How many recently reset stream ids a connection remembers (to drop and credit their late DATA). */
const RESET_MEMORY = 256;
/** RFC 9113 §6.9.2: initial connection and stream flow-control windows. */
const INITIAL_WINDOW = 65_535;
/**
 * Most a RunPodSandbox request may hold back on its stream: half the runtime's initial stream window
 * (at most 32 KiB). A larger request could not even be sent whole before the runtime grants more
 * window — which it only does for bytes it received — so it is forwarded unpaced (a kubelet's
 * request is 1-3 KiB).
 */
const MAX_HELD_STREAM_BYTES = 32 * 1024;


interface SpliceStream {
  readonly id: number;
  method: string;
  kind: Kind;
  /** performance.now() when its HEADERS arrived. */
  t0: number;
  /** RunPodSandbox: DATA frames held (whole frames, as received) until the gate releases them. */
  held: Buffer[] | undefined;
  heldData: Buffer[] | undefined;
  /** Flow-controlled bytes held (DATA payload lengths), credited back if discarded. */
  heldFlow: number;
  /** Discarded, refused or over: nothing more is done for it. */
  gone: boolean;
  /** The runtime sent response headers. */
  responded: boolean;
  ac: AbortController | undefined;
  /** The pod of a RunPodSandbox being paced. */
  pod: SandboxInfo | undefined;
  upScan: GrpcFrameScanner | undefined;
  downScan: GrpcFrameScanner | undefined;
  /** Copy of the request DATA (CreateContainer/StartContainer while a critical pod is tracked). */
  request: Buffer[] | undefined;
  /** Copy of the response DATA, for `onAnswer`. */
  response: Buffer[] | undefined;
  onAnswer: OnAnswer | undefined;
}

/** Output of one direction for one chunk: runs of the chunk (no copy) and frames the proxy adds. */
class Output {
  private pieces: Buffer[] = [];
  private runBuf: Buffer | undefined;
  private runStart = 0;
  private runEnd = 0;

  add(buf: Buffer, start: number, end: number): void {
    if (buf === this.runBuf && start === this.runEnd) {
      this.runEnd = end;
      return;
    }
    this.cut();
    this.runBuf = buf;
    this.runStart = start;
    this.runEnd = end;
  }

  addFrames(frames: Buffer[]): void {
    this.cut();
    for (const f of frames) this.pieces.push(f);
  }

  take(): Buffer[] {
    this.cut();
    const p = this.pieces;
    this.pieces = [];
    return p;
  }

  private cut(): void {
    const b = this.runBuf;
    if (!b) return;
    this.pieces.push(this.runStart === 0 && this.runEnd === b.length ? b : b.subarray(this.runStart, this.runEnd));
    this.runBuf = undefined;
  }
}

export class SpliceCriProxy extends CriProxyBase {
  protected readonly implementation = 'splice';
  private readonly server: net.Server;
  private readonly connections = new Set<SpliceConnection>();

  constructor(options: CriProxyOptions) {
    super(options);
    this.server = net.createServer((socket) => {
      if (this.closing) {
        socket.destroy();
        return;
      }
      const c = new SpliceConnection(this, socket);
      this.connections.add(c);
      socket.once('close', () => this.connections.delete(c));
    });
  }

  protected bind(path: string): Promise<void> {
    return listenOn(this.server, path);
  }

  protected async shutdown(graceMs: number): Promise<void> {
    await closeServerWithGrace(this.server, this.connections, (c) => c.drain(), (c) => c.destroy(), graceMs);
  }
}

/** One kubelet connection spliced to one runtime connection. */
class SpliceConnection {
  private readonly upstream: net.Socket;
  private readonly streams = new Map<number, SpliceStream>();
  /** Streams the proxy reset: late DATA on them is dropped and credited back to its sender. */
  private readonly resetIds = new Set<number>();
  private readonly hpack = new HpackDecoder();
  private readonly upBlocks = new HeaderBlockAssembler();
  private readonly upReader = new FrameReader();
  private readonly downReader = new FrameReader();
  private readonly upOut = new Output();
  private readonly downOut = new Output();
  /** Frames the proxy adds, waiting for a frame boundary outside a header block. */
  private upQueue: Buffer[] = [];
  private downQueue: Buffer[] = [];
  private upBusy = false;
  private downBusy = false;
  /** Between a runtime HEADERS without END_HEADERS and its last CONTINUATION. */
  private downBlockOpen = false;
  private prefaceSeen = 0;
  /** HPACK state lost: paths no longer learned, every stream passes through. */
  private hpackBroken = false;
  private blockStream: SpliceStream | undefined;
  /** The HEADERS that opened the current header block had END_STREAM (a request without body). */
  private blockEndsStream = false;
  private lastStreamId = 0;
  private connected = false;
  private closed = false;
  private draining = false;
  private upPaused = false;
  private downPaused = false;
  /** Streams whose header block completed in the chunk being processed (added-latency metric). */
  private opened: SpliceStream[] = [];
  private readonly max: number;
  /**
   * Connection-level flow control around held DATA. Held bytes are credited to the kubelet at once
   * (WINDOW_UPDATE), so waiting RunPodSandbox requests never eat the window the kubelet's other calls
   * need; once released, as many bytes of the runtime's next connection WINDOW_UPDATEs are kept back
   * (`debt`). Meanwhile the kubelet may send up to `debt` bytes more than the runtime allows:
   * `serverWindow` (the runtime's connection window as the proxy has used it) holds such DATA back in
   * `upFifo`, with every frame after it, until the runtime grants more.
   */
  private serverWindow = INITIAL_WINDOW;
  private debt = 0;
  private upFifo: Buffer[] = [];
  /** The runtime's SETTINGS_INITIAL_WINDOW_SIZE (stream windows). */
  private streamWindow = INITIAL_WINDOW;

  constructor(
    private readonly proxy: SpliceCriProxy,
    private readonly client: net.Socket,
  ) {
    this.max = proxy.opts.maxMessageBytes;
    const backend = proxy.opts.backend;
    const up = (this.upstream = net.connect(backend));
    const timer = setTimeout(() => up.destroy(new Error(`runtime unix://${backend} not reachable within ${proxy.opts.connectTimeoutMs} ms`)), proxy.opts.connectTimeoutMs);
    up.once('connect', () => {
      clearTimeout(timer);
      this.connected = true;
      proxy.backendReachable();
    });
    up.on('error', (err) => {
      if (!this.connected) proxy.backendUnreachable(err);
      else proxy.log?.debug({ err: err.message }, 'runtime-side connection error');
    });
    up.on('close', () => {
      clearTimeout(timer);
      // not connected: the kubelet's connection is dropped at once — its calls fail UNAVAILABLE
      this.shutdown(!this.connected);
    });
    up.on('data', (chunk: Buffer) => this.fromServer(chunk));
    client.on('data', (chunk: Buffer) => this.fromClient(chunk));
    client.on('error', (err) => proxy.log?.debug({ err: err.message }, 'kubelet-side connection error'));
    client.on('close', () => this.shutdown(false));
  }

  /** Proxy closing: end the connection once no call is running on it. */
  drain(): void {
    this.draining = true;
    if (this.streams.size === 0) this.shutdown(false);
  }

  destroy(): void {
    this.shutdown(true);
  }

  // ---------------------------------------------------------------- kubelet -> runtime

  private fromClient(chunk: Buffer): void {
    if (this.closed) return;
    let buf = chunk;
    if (this.prefaceSeen < CLIENT_PREFACE.length) {
      const take = Math.min(CLIENT_PREFACE.length - this.prefaceSeen, buf.length);
      if (!buf.subarray(0, take).equals(CLIENT_PREFACE.subarray(this.prefaceSeen, this.prefaceSeen + take))) {
        return this.loseFraming(new Error('the kubelet-side connection does not start with the HTTP/2 client preface'));
      }
      this.prefaceSeen += take;
      this.upOut.add(buf, 0, take);
      buf = buf.subarray(take);
    }
    const t0 = performance.now();
    this.upBusy = true;
    try {
      this.upReader.push(buf, (f) => this.clientFrame(f));
    } catch (err) {
      this.upBusy = false;
      return this.loseFraming(err as Error);
    }
    this.upBusy = false;
    this.flushQueue(this.upOut, 'up');
    this.write(this.upstream, this.upOut.take(), true);
    if (this.opened.length) {
      const s = (performance.now() - t0) / 1000;
      for (const st of this.opened) this.proxy.latencyOf(st.method)?.observe(s);
      this.opened = [];
    }
  }

  private clientFrame(f: Frame): void {
    if (this.upBlocks.open) {
      // RFC 9113 §6.10: nothing but its CONTINUATIONs inside a header block
      if (f.type !== FrameType.CONTINUATION) throw new Error(`frame type ${f.type} on stream ${f.streamId} inside a header block`);
    } else if (this.upQueue.length) this.injectNow(this.takeQueue('up'));
    switch (f.type) {
      case FrameType.DATA:
        return this.clientData(f);
      case FrameType.HEADERS:
      case FrameType.CONTINUATION:
        return this.clientHeaders(f);
      case FrameType.RST_STREAM:
        this.forwardUp(f.buf, f.start, f.end);
        return this.clientReset(f.streamId);
      default:
        this.forwardUp(f.buf, f.start, f.end);
    }
  }

  private clientHeaders(f: Frame): void {
    this.forwardUp(f.buf, f.start, f.end);
    if (f.type === FrameType.HEADERS) {
      let st = this.streams.get(f.streamId);
      if (!st && f.streamId > this.lastStreamId) {
        this.lastStreamId = f.streamId;
        st = newStream(f.streamId);
        this.streams.set(f.streamId, st);
      }
      this.blockStream = st;
      this.blockEndsStream = (f.flags & Flag.END_STREAM) !== 0;
    }
    const block = this.upBlocks.push(f);
    if (!block || this.hpackBroken) return;
    const st = this.blockStream;
    this.blockStream = undefined;
    let path: string | undefined;
    try {
      path = this.hpack.decode(block);
    } catch (err) {
      this.hpackBroken = true;
      this.proxy.log?.error({ err: (err as Error).message }, 'kubelet-side HPACK block not decodable: this connection is passed through without inspection (no pacing)');
      return;
    }
    if (!st || st.method !== '' || path === undefined) return; // trailers, or a request without :path
    st.method = this.proxy.methodOf(path);
    this.opened.push(st);
    if (this.blockEndsStream) return; // no body
    if (path === RUN_POD_SANDBOX) {
      st.kind = Kind.RunPodSandbox;
      st.held = [];
      st.heldData = [];
    } else if ((path === CREATE_CONTAINER && this.proxy.critical.wantsCreate) || (path === START_CONTAINER && this.proxy.critical.wantsStart)) {
      st.kind = Kind.Tracked;
      st.request = [];
    }
  }

  private clientData(f: Frame): void {
    const st = this.streams.get(f.streamId);
    if (!st) {
      if (this.resetIds.has(f.streamId)) return this.credit('down', f.length);
      return this.forwardUp(f.buf, f.start, f.end);
    }
    const data = framePayload(f);
    const over = (st.upScan ??= new GrpcFrameScanner(this.max)).feed(data);
    if (over !== undefined) {
      this.credit('down', f.length);
      return this.tooLarge(st, over);
    }
    const end = (f.flags & Flag.END_STREAM) !== 0;
    if (st.held) {
      st.held.push(f.buf.subarray(f.start, f.end));
      st.heldData!.push(data);
      st.heldFlow += f.length;
      this.credit('down', f.length);
      if (end) void this.pace(st);
      else if (st.heldFlow > Math.min(MAX_HELD_STREAM_BYTES, this.streamWindow / 2)) {
        this.proxy.log?.warn({ heldBytes: st.heldFlow }, 'RunPodSandbox request too large to hold within its stream window; forwarded unpaced');
        this.release(st, undefined);
      }
      return;
    }
    this.forwardUp(f.buf, f.start, f.end);
    if (st.request) {
      st.request.push(data);
      if (end) this.trackRequest(st, concatChunks(st.request));
    }
  }

  private clientReset(id: number): void {
    const st = this.streams.get(id);
    if (!st) return;
    this.discard(st, false);
    this.settle(st, false);
    this.forget(st);
  }

  // ---------------------------------------------------------------- runtime -> kubelet

  private fromServer(chunk: Buffer): void {
    if (this.closed) return;
    this.downBusy = true;
    try {
      this.downReader.push(chunk, (f) => this.serverFrame(f));
    } catch (err) {
      this.downBusy = false;
      return this.loseFraming(err as Error);
    }
    this.downBusy = false;
    this.flushQueue(this.downOut, 'down');
    this.write(this.client, this.downOut.take(), false);
  }

  private serverFrame(f: Frame): void {
    if (this.downQueue.length && !this.downBlockOpen) this.downOut.addFrames(this.takeQueue('down'));
    const st = f.streamId ? this.streams.get(f.streamId) : undefined;
    switch (f.type) {
      case FrameType.DATA: {
        if (!st) {
          if (this.resetIds.has(f.streamId)) return this.credit('up', f.length);
          return this.downOut.add(f.buf, f.start, f.end);
        }
        const data = framePayload(f);
        const over = (st.downScan ??= new GrpcFrameScanner(this.max)).feed(data);
        if (over !== undefined) {
          this.credit('up', f.length);
          return this.tooLarge(st, over);
        }
        this.downOut.add(f.buf, f.start, f.end);
        st.response?.push(data);
        if (f.flags & Flag.END_STREAM) this.serverEnded(st, false);
        return;
      }
      case FrameType.HEADERS:
        this.downOut.add(f.buf, f.start, f.end);
        this.downBlockOpen = !(f.flags & Flag.END_HEADERS);
        if (st) {
          st.responded = true;
          if (f.flags & Flag.END_STREAM) this.serverEnded(st, false);
        }
        return;
      case FrameType.CONTINUATION:
        this.downOut.add(f.buf, f.start, f.end);
        this.downBlockOpen = !(f.flags & Flag.END_HEADERS);
        return;
      case FrameType.RST_STREAM:
        this.downOut.add(f.buf, f.start, f.end);
        if (st) this.serverEnded(st, true);
        return;
      case FrameType.SETTINGS:
        if (!(f.flags & Flag.ACK)) {
          for (const [id, value] of settingsOf(f)) {
            if (id === SETTINGS_HEADER_TABLE_SIZE) this.hpack.setMaxTableSize(value);
            else if (id === SETTINGS_INITIAL_WINDOW_SIZE) this.streamWindow = value;
          }
        }
        this.downOut.add(f.buf, f.start, f.end);
        return;
      case FrameType.WINDOW_UPDATE: {
        if (f.streamId !== 0 || f.length !== 4) return this.downOut.add(f.buf, f.start, f.end);
        const increment = f.buf.readUInt32BE(f.start + 9) & 0x7fffffff;
        this.serverWindow += increment;
        const kept = Math.min(this.debt, increment);
        this.debt -= kept;
        if (kept === 0) this.downOut.add(f.buf, f.start, f.end);
        else if (increment > kept) this.downOut.addFrames([windowUpdateFrame(0, increment - kept)]);
        if (this.upFifo.length) this.drainFifo();
        return;
      }
      default:
        this.downOut.add(f.buf, f.start, f.end);
    }
  }

  /** The runtime ended (or reset) a stream. */
  private serverEnded(st: SpliceStream, reset: boolean): void {
    const held = st.held !== undefined;
    // it answered before the request was released (its deadline, an error): the wait is over
    if (held) this.discard(st, true);
    this.settle(st, !reset);
    this.forget(st, held);
  }

  // ---------------------------------------------------------------- inspected calls

  /** Pace (the shared admission, thesis §5.3.4), then release. */
  private async pace(st: SpliceStream): Promise<void> {
    const ac = (st.ac = new AbortController());
    let paced: SandboxPacing;
    try {
      paced = await this.proxy.paceSandbox(grpcMessage(concatChunks(st.heldData!)), ac.signal, (pod) => (st.pod = pod));
    } finally {
      st.ac = undefined;
    }
    if (st.gone) return; // the kubelet or the runtime ended the call, or the connection closed
    if (paced.outcome === 'unpaced') return this.release(st, undefined);
    if (paced.outcome === 'refused') return this.refuse(st, paced.code, paced.message);
    this.release(st, paced);
  }

  /** Sends the held DATA frames on, as they were received; follows the answer of an admitted sandbox. */
  private release(st: SpliceStream, admitted: AdmittedSandbox | undefined): void {
    const frames = st.held!;
    this.debt += st.heldFlow; // credited while held: kept back from the runtime's next WINDOW_UPDATEs
    st.held = undefined;
    st.heldData = undefined;
    st.heldFlow = 0;
    if (admitted) {
      const forwarded = this.proxy.sandboxForwarded(admitted, st.t0);
      st.response = [];
      st.onAnswer = (answer, ok) => forwarded.done(ok, answer);
    }
    this.inject('up', frames);
  }

  /** CreateContainer/StartContainer of a tracked critical pod: follow its answer. */
  private trackRequest(st: SpliceStream, body: Buffer): void {
    st.request = undefined;
    const proxy = this.proxy;
    const msg = grpcMessage(body);
    if (!msg) return;
    if (st.method === 'CreateContainer') {
      const tracked = proxy.critical.createFor(tryDecode(proxy.decode.createRequest, msg)?.pod_sandbox_id);
      if (!tracked) return;
      st.response = [];
      st.onAnswer = (m, ok) => {
        const id = ok && m ? tryDecode(proxy.decode.createResponse, m)?.container_id : undefined;
        proxy.critical.containerCreated(tracked, typeof id === 'string' && id ? id : undefined);
      };
    } else {
      const tracked = proxy.critical.startFor(tryDecode(proxy.decode.startRequest, msg)?.container_id);
      if (!tracked) return;
      st.response = [];
      st.onAnswer = (_m, ok) => proxy.critical.finish(tracked, ok);
    }
  }

  /**
   * The answer of an inspected call is over. A unary gRPC server sends a message only with status OK
   * (grpc-go, grpc-js), so "a message came and the stream ended normally" is success — the answer's
   * trailers are not HPACK-decoded (that would cost a second decoder on every call).
   */
  private settle(st: SpliceStream, endedNormally: boolean): void {
    const cb = st.onAnswer;
    if (!cb) return;
    st.onAnswer = undefined;
    const message = endedNormally && st.response?.length ? grpcMessage(concatChunks(st.response)) : undefined;
    cb(message, message !== undefined);
  }

  /** Drops held DATA (already credited to the kubelet), leaves the gate; `resetRuntime`: RST_STREAM towards the runtime. */
  private discard(st: SpliceStream, resetRuntime: boolean): void {
    st.gone = true;
    st.ac?.abort();
    st.held = undefined;
    st.heldData = undefined;
    st.heldFlow = 0;
    if (resetRuntime) this.inject('up', [rstStreamFrame(st.id, ErrorCode.CANCEL)]);
  }

  /** Answers a held call with a gRPC status (trailers-only) and resets it towards the runtime. */
  private refuse(st: SpliceStream, code: grpc.status, message: string): void {
    if (st.gone || this.closed) return;
    this.discard(st, true);
    this.inject('down', [grpcStatusFrame(st.id, code, message)]);
    this.forget(st, true);
  }

  /** A message above `maxMessageBytes` (either direction): reset the stream both ways. */
  private tooLarge(st: SpliceStream, over: number): void {
    const message = `kubelet-shim: received message larger than max (${over} vs. ${this.max})`;
    this.discard(st, true);
    this.inject('down', [st.responded ? rstStreamFrame(st.id, ErrorCode.ENHANCE_YOUR_CALM) : grpcStatusFrame(st.id, grpc.status.RESOURCE_EXHAUSTED, message)]);
    this.settle(st, false);
    this.forget(st, true);
  }

  private forget(st: SpliceStream, reset = false): void {
    this.streams.delete(st.id);
    if (reset) {
      this.resetIds.add(st.id);
      if (this.resetIds.size > RESET_MEMORY) this.resetIds.delete(this.resetIds.values().next().value!);
    }
    if (this.draining && this.streams.size === 0) this.shutdown(false);
  }

  // ---------------------------------------------------------------- plumbing of the two sockets

  /** Connection-level WINDOW_UPDATE for DATA the proxy dropped: `down` to the kubelet, `up` to the runtime. */
  private credit(dir: 'up' | 'down', bytes: number): void {
    if (bytes > 0) this.inject(dir, [windowUpdateFrame(0, bytes)]);
  }

  /** A frame towards the runtime: written (with the chunk's other frames), or queued behind the runtime's window. */
  private forwardUp(buf: Buffer, start: number, end: number): void {
    if (this.upFifo.length === 0) {
      if (buf[start + 3] !== FrameType.DATA) return this.upOut.add(buf, start, end);
      const len = end - start - FRAME_HEADER_BYTES;
      if (len <= this.serverWindow) {
        this.serverWindow -= len;
        return this.upOut.add(buf, start, end);
      }
    }
    this.upFifo.push(buf.subarray(start, end));
  }

  /** The proxy's own frames towards the runtime, at the current boundary. */
  private injectNow(frames: Buffer[]): void {
    for (const b of frames) this.forwardUp(b, 0, b.length);
  }

  /** The runtime granted window: send what waited for it, in order. */
  private drainFifo(): void {
    let n = 0;
    for (const b of this.upFifo) {
      if (b[3] === FrameType.DATA) {
        const len = b.length - FRAME_HEADER_BYTES;
        if (len > this.serverWindow) break;
        this.serverWindow -= len;
      }
      n++;
    }
    if (n === 0) return;
    const out = this.upFifo.slice(0, n);
    this.upFifo = this.upFifo.slice(n);
    this.write(this.upstream, out, true);
  }

  /** Adds frames of the proxy's own to a direction, at the next frame boundary outside a header block. */
  private inject(dir: 'up' | 'down', frames: Buffer[]): void {
    if (this.closed) return;
    if (dir === 'up') {
      this.upQueue.push(...frames);
      if (!this.upBusy && !this.upBlocks.open) {
        this.injectNow(this.takeQueue('up'));
        this.write(this.upstream, this.upOut.take(), true);
      }
    } else {
      this.downQueue.push(...frames);
      if (!this.downBusy && !this.downBlockOpen) this.write(this.client, this.takeQueue('down'), false);
    }
  }

  private flushQueue(out: Output, dir: 'up' | 'down'): void {
    if (dir === 'up') {
      if (!this.upBlocks.open && this.upQueue.length) this.injectNow(this.takeQueue('up'));
    } else if (!this.downBlockOpen && this.downQueue.length) out.addFrames(this.takeQueue('down'));
  }

  private takeQueue(dir: 'up' | 'down'): Buffer[] {
    if (dir === 'up') {
      const q = this.upQueue;
      this.upQueue = [];
      return q;
    }
    const q = this.downQueue;
    this.downQueue = [];
    return q;
  }

  /** Writes to one side; backpressure pauses the other side's reading. */
  private write(to: net.Socket, pieces: Buffer[], up: boolean): void {
    if (pieces.length === 0 || this.closed || to.destroyed) return;
    let ok: boolean;
    if (pieces.length === 1) ok = to.write(pieces[0]!);
    else {
      to.cork();
      for (const p of pieces) to.write(p);
      to.uncork();
      ok = to.writableLength < to.writableHighWaterMark;
    }
    if (ok) return;
    const from = up ? this.client : this.upstream;
    if (up ? this.upPaused : this.downPaused) return;
    if (up) this.upPaused = true;
    else this.downPaused = true;
    from.pause();
    to.once('drain', () => {
      if (up) this.upPaused = false;
      else this.downPaused = false;
      from.resume();
    });
  }

  /**
   * Not HTTP/2 as a conforming peer sends it (no preface, a frame inside a header block, bad
   * padding): the runtime would end the connection with a protocol error anyway; the proxy closes
   * both sides at once (the kubelet reconnects, its calls fail UNAVAILABLE).
   */
  private loseFraming(err: Error): void {
    this.proxy.log?.error({ err: err.message }, 'kubelet-shim splice: HTTP/2 protocol error on a connection: closed');
    this.upOut.take();
    this.downOut.take();
    this.shutdown(true);
  }

  /** One side closed (or the proxy ends): close the other, end every waiting call. */
  private shutdown(now: boolean): void {
    if (this.closed) {
      if (now) {
        this.client.destroy();
        this.upstream.destroy();
      }
      return;
    }
    this.closed = true;
    const log = this.proxy.log;
    for (const st of this.streams.values()) {
      if (st.held && st.pod && log) {
        // waiting in the gate: the kubelet sees UNAVAILABLE (its connection closes) and retries the pod later
        objectLogger(log, 'Pod', st.pod.key).warn(
          { criticality: st.pod.criticality, waitedMs: Math.round(performance.now() - st.t0), reason: this.connected ? 'connection closed' : 'runtime unreachable' },
          'RunPodSandbox failed',
        );
      }
      st.gone = true;
      st.ac?.abort();
      st.held = undefined;
      this.settle(st, false);
    }
    this.streams.clear();
    if (now) {
      this.client.destroy();
      this.upstream.destroy();
      return;
    }
    // let what was written reach its reader, then close
    this.client.end();
    this.upstream.end();
    setTimeout(() => {
      this.client.destroy();
      this.upstream.destroy();
    }, 1000).unref();
  }
}

function newStream(id: number): SpliceStream {
  return {
    id,
    method: '',
    kind: Kind.Plain,
    t0: performance.now(),
    held: undefined,
    heldData: undefined,
    heldFlow: 0,
    gone: false,
    responded: false,
    ac: undefined,
    pod: undefined,
    upScan: undefined,
    downScan: undefined,
    request: undefined,
    response: undefined,
    onAnswer: undefined,
  };
}
