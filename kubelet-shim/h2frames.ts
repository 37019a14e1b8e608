/**
 * HTTP/2 at the frame level (RFC 9113), the pure logic of the `splice` CRI proxy (splice.ts): an
 * incremental frame reader over a byte stream, header-block assembly (HEADERS with PADDED/PRIORITY,
 * CONTINUATION), the request-side HPACK decoder (RFC 7541, hpack.js) that keeps the dynamic table in
 * step with the client's encoder to learn each stream's `:path`, and the few frames the proxy writes
 * itself (RST_STREAM, WINDOW_UPDATE, a trailers-only gRPC status encoded without touching either
 * side's dynamic table).
 */
import hpack from 'hpack.js';

export const CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
export const FRAME_HEADER_BYTES = 9;

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

export const Flag = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  /** grpc-go and grpc-js map it to RESOURCE_EXHAUSTED. */
  ENHANCE_YOUR_CALM: 0xb,
} as const;

export const SETTINGS_HEADER_TABLE_SIZE = 0x1;
export const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
/** RFC 7541 §4.2 / RFC 9113 §6.5.2: the initial SETTINGS_HEADER_TABLE_SIZE. */
export const DEFAULT_HEADER_TABLE_SIZE = 4096;

/** One complete frame: its 9-byte header at `buf[start]`, its payload up to `end`. */
export interface Frame {
  readonly buf: Buffer;
  readonly start: number;
  readonly end: number;
  readonly length: number;
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
}

/**
 * Cuts a byte stream into complete frames. Frames inside one chunk are returned as views of it (no
 * copy); a frame split across chunks is assembled (one copy) once its last byte arrived — a partial
 * frame is never handed out, so whatever the proxy writes always ends on a frame boundary.
 */
export class FrameReader {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Total size of the frame being assembled (0: its header is not complete yet). */
  private pendingTotal = 0;

  /** True when no partial frame is buffered. */
  get atBoundary(): boolean {
    return this.pendingBytes === 0;
  }

  /** Calls `onFrame` for every frame completed by `chunk`, in order. */
  push(chunk: Buffer, onFrame: (f: Frame) => void): void {
    let off = 0;
    const n = chunk.length;
    if (this.pendingBytes > 0) {
      if (this.pendingTotal === 0) {
        const take = Math.min(FRAME_HEADER_BYTES - this.pendingBytes, n);
        this.pending.push(chunk.subarray(0, take));
        this.pendingBytes += take;
        off = take;
        if (this.pendingBytes < FRAME_HEADER_BYTES) return;
        const head = Buffer.concat(this.pending, FRAME_HEADER_BYTES);
        this.pending = [head];
        this.pendingTotal = FRAME_HEADER_BYTES + head.readUIntBE(0, 3);
      }
      const take = Math.min(this.pendingTotal - this.pendingBytes, n - off);
      if (take > 0) {
        this.pending.push(chunk.subarray(off, off + take));
        this.pendingBytes += take;
        off += take;
      }
      if (this.pendingBytes < this.pendingTotal) return;
      const buf = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingTotal);
      this.pending = [];
      this.pendingBytes = 0;
      this.pendingTotal = 0;
      onFrame(frameAt(buf, 0));
    }
    while (off + FRAME_HEADER_BYTES <= n) {
      const len = chunk.readUIntBE(off, 3);
      const end = off + FRAME_HEADER_BYTES + len;
      if (end > n) break;
      onFrame(frameAt(chunk, off));
      off = end;
    }
    if (off < n) {
      const rest = chunk.subarray(off);
      this.pending = [rest];
      this.pendingBytes = rest.length;
      this.pendingTotal = rest.length >= FRAME_HEADER_BYTES ? FRAME_HEADER_BYTES + rest.readUIntBE(0, 3) : 0;
    }
  }
}

function frameAt(buf: Buffer, start: number): Frame {
  const length = buf.readUIntBE(start, 3);
  return {
    buf,
    start,
    end: start + FRAME_HEADER_BYTES + length,
    length,
    type: buf[start + 3]!,
    flags: buf[start + 4]!,
    streamId: buf.readUInt32BE(start + 5) & 0x7fffffff,
  };
}

/** The payload of a frame without its padding (DATA, HEADERS) and priority fields (HEADERS); a view. */
export function framePayload(f: Frame): Buffer {
  let from = f.start + FRAME_HEADER_BYTES;
  let to = f.end;
  if ((f.type === FrameType.DATA || f.type === FrameType.HEADERS) && f.flags & Flag.PADDED) {
    if (f.length < 1) throw new Error(`HTTP/2 frame type ${f.type} on stream ${f.streamId}: PADDED without a pad length`);
    const pad = f.buf[from]!;
    from += 1;
    to -= pad;
  }
  if (f.type === FrameType.HEADERS && f.flags & Flag.PRIORITY) from += 5;
  if (to < from) throw new Error(`HTTP/2 frame type ${f.type} on stream ${f.streamId}: padding longer than the payload`);
  return f.buf.subarray(from, to);
}

/** The (id, value) pairs of a SETTINGS frame (not an ACK). */
export function settingsOf(f: Frame): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let o = f.start + FRAME_HEADER_BYTES; o + 6 <= f.end; o += 6) out.push([f.buf.readUInt16BE(o), f.buf.readUInt32BE(o + 2)]);
  return out;
}

/**
 * Assembles header blocks: HEADERS (+ CONTINUATION until END_HEADERS). `push` returns the complete
 * block when the frame ends it, else undefined. `open` is true between a HEADERS without END_HEADERS
 * and its last CONTINUATION: no other frame may be written into the stream there (RFC 9113 §6.10).
 */
export class HeaderBlockAssembler {
  private parts: Buffer[] = [];
  private stream = 0;
  open = false;

  push(f: Frame): Buffer | undefined {
    if (f.type === FrameType.HEADERS) {
      if (this.open) throw new Error(`HTTP/2: HEADERS on stream ${f.streamId} inside the header block of stream ${this.stream}`);
      const fragment = framePayload(f);
      if (f.flags & Flag.END_HEADERS) return fragment;
      this.parts = [Buffer.from(fragment)]; // copied: the chunk may be long gone when the block ends
      this.stream = f.streamId;
      this.open = true;
      return undefined;
    }
    if (f.type === FrameType.CONTINUATION) {
      if (!this.open || f.streamId !== this.stream) throw new Error(`HTTP/2: CONTINUATION on stream ${f.streamId} without an open header block`);
      this.parts.push(Buffer.from(framePayload(f)));
      if (!(f.flags & Flag.END_HEADERS)) return undefined;
      this.open = false;
      const block = Buffer.concat(this.parts);
      this.parts = [];
      return block;
    }
    if (this.open) throw new Error(`HTTP/2: frame type ${f.type} inside the header block of stream ${this.stream}`);
    return undefined;
  }
}

/**
 * HPACK decoder of one direction of a connection (RFC 7541), fed with every header block in order so
 * that its dynamic table stays identical to the encoder's. Built from hpack.js' table and bit decoder
 * directly (its Decompressor wraps them in a stream, which costs more than the decoding itself).
 * Returns `:path`; `all` (tests) receives every field.
 */
export class HpackDecoder {
  private readonly table = hpack.table.create({ maxSize: DEFAULT_HEADER_TABLE_SIZE });

  /** The decoding side advertised SETTINGS_HEADER_TABLE_SIZE = `size`: the encoder may now use up to it. */
  setMaxTableSize(size: number): void {
    this.table.protocolMaxSize = size;
  }

  get dynamicTableSize(): number {
    return this.table.size;
  }

  decode(block: Buffer, all?: Array<[string, string]>): string | undefined {
    const d = hpack.decoder.create();
    const t = this.table;
    const str = hpack.utils.stringify;
    d.push(block);
    let path: string | undefined;
    let first = true;
    while (!d.isEmpty()) {
      let name: string;
      let value: string;
      if (d.decodeBit()) {
        // §6.1 indexed header field
        const e = t.lookup(d.decodeInt());
        name = e.name;
        value = e.value;
      } else {
        const incremental = d.decodeBit();
        if (!incremental) {
          if (d.decodeBit()) {
            // §6.3 dynamic table size update: only at the start of a block
            if (!first) throw new Error('HPACK: dynamic table size update after the first field of a block');
            t.updateSize(d.decodeInt());
            continue;
          }
          d.decodeBit(); // never-indexed flag: same decoding
        }
        const index = d.decodeInt();
        let nameSize: number;
        if (index === 0) {
          const raw = d.decodeStr();
          nameSize = raw.length;
          name = str(raw);
        } else {
          const e = t.lookup(index);
          nameSize = e.nameSize;
          name = e.name;
        }
        const raw = d.decodeStr();
        value = str(raw);
        if (incremental) t.add(name, value, nameSize, raw.length);
      }
      first = false;
      if (name === ':path') path = value;
      all?.push([name, value]);
    }
    return path;
  }
}

// ---------------------------------------------------------------------------------------------
// Frames the proxy writes itself
// ---------------------------------------------------------------------------------------------

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const b = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  b.writeUIntBE(payload.length, 0, 3);
  b[3] = type;
  b[4] = flags;
  b.writeUInt32BE(streamId & 0x7fffffff, 5);
  payload.copy(b, FRAME_HEADER_BYTES);
  return b;
}

export function rstStreamFrame(streamId: number, code: number): Buffer {
  const p = Buffer.allocUnsafe(4);
  p.writeUInt32BE(code, 0);
  return frame(FrameType.RST_STREAM, 0, streamId, p);
}

export function windowUpdateFrame(streamId: number, increment: number): Buffer {
  const p = Buffer.allocUnsafe(4);
  p.writeUInt32BE(increment & 0x7fffffff, 0);
  return frame(FrameType.WINDOW_UPDATE, 0, streamId, p);
}

/** RFC 7541 §5.1 integer with an N-bit prefix (first byte's high bits `mask`). */
function hpackInt(out: number[], value: number, prefixBits: number, mask: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(mask | value);
    return;
  }
  out.push(mask | max);
  value -= max;
  while (value >= 128) {
    out.push((value % 128) + 128);
    value = Math.floor(value / 128);
  }
  out.push(value);
}

/** §6.2.2 literal header field without indexing, new name, no Huffman: the receiver's table is not touched. */
function literalWithoutIndexing(out: number[], name: string, value: string): void {
  out.push(0x00);
  for (const s of [name, value]) {
    const bytes = Buffer.from(s, 'latin1');
    hpackInt(out, bytes.length, 7, 0x00);
    for (const b of bytes) out.push(b);
  }
}

/**
 * A trailers-only gRPC answer on `streamId` (HEADERS, END_STREAM|END_HEADERS): `:status 200`
 * (static table index 8), content-type, grpc-status, grpc-message — encoded without dynamic-table
 * entries, so it can be put between the runtime's own header blocks without changing the state of
 * the kubelet's decoder.
 */
export function grpcStatusFrame(streamId: number, code: number, message: string): Buffer {
  const block: number[] = [0x88];
  literalWithoutIndexing(block, 'content-type', 'application/grpc');
  literalWithoutIndexing(block, 'grpc-status', String(code));
  literalWithoutIndexing(block, 'grpc-message', encodeURIComponent(message.slice(0, 1000)));
  return frame(FrameType.HEADERS, Flag.END_STREAM | Flag.END_HEADERS, streamId, Buffer.from(block));
}
