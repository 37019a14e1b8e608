/**
 * The node heartbeat's wire format, shared by the decider (the controller manager's leader,
 * controller-manager/node-failure.ts) and the node agent (kubelet-shim/node-agent.ts). Heartbeats
 * are UDP datagrams between those two processes only: they never touch the apiserver or etcd.
 *
 * The decider probes, the agent answers (a reply echoes the probe):
 *   magic "ULHB" | version 1 | type (1 probe, 2 reply) | nonce (8 bytes, the decider instance's) |
 *   seq (u32) | node-name length (u8) | node name (UTF-8, at most 253 bytes)
 * An agent answers only a probe naming its own node, so a probe sent to the wrong address can never
 * keep another node "alive". A reply is never larger than the probe (no amplification).
 */
export const HEARTBEAT_MAGIC = 0x554c4842; // "ULHB"
export const HEARTBEAT_VERSION = 1;
/** Default UDP port of the node agent (next to the kubelet's 10250 and Ulysses' metrics 10357). */
export const DEFAULT_NODE_AGENT_PORT = 10362;
/** Node names are DNS subdomains: at most 253 bytes. */
const MAX_NODE_NAME = 253;
const HEADER = 4 + 1 + 1 + 8 + 4 + 1;
/** Largest valid datagram; anything longer is rejected before it is parsed. */
export const MAX_HEARTBEAT_BYTES = HEADER + MAX_NODE_NAME;

export type HeartbeatType = 'probe' | 'reply';

export interface Heartbeat {
  type: HeartbeatType;
  /** 8 bytes chosen by the decider instance: replies to an earlier leader's probes are not counted */
  nonce: Buffer;
  seq: number;
  node: string;
}

export function encodeHeartbeat(h: Heartbeat): Buffer {
  const name = Buffer.from(h.node, 'utf8');
  if (name.length === 0 || name.length > MAX_NODE_NAME) throw new Error(`heartbeat: node name of ${name.length} bytes (1-${MAX_NODE_NAME})`);
  if (h.nonce.length !== 8) throw new Error(`heartbeat: nonce of ${h.nonce.length} bytes (8)`);
  const b = Buffer.allocUnsafe(HEADER + name.length);
  b.writeUInt32BE(HEARTBEAT_MAGIC, 0);
  b.writeUInt8(HEARTBEAT_VERSION, 4);
  b.writeUInt8(h.type === 'probe' ? 1 : 2, 5);
  h.nonce.copy(b, 6);
  b.writeUInt32BE(h.seq >>> 0, 14);
  b.writeUInt8(name.length, 18);
  name.copy(b, HEADER);
  return b;
}

/** The heartbeat in `b`, or why it is not one (bounded work: the length is checked first). */
export function decodeHeartbeat(b: Buffer): Heartbeat | { error: string } {
  if (b.length < HEADER || b.length > MAX_HEARTBEAT_BYTES) return { error: `length ${b.length} outside ${HEADER}-${MAX_HEARTBEAT_BYTES}` };
  if (b.readUInt32BE(0) !== HEARTBEAT_MAGIC) return { error: 'bad magic' };
  if (b.readUInt8(4) !== HEARTBEAT_VERSION) return { error: `version ${b.readUInt8(4)}` };
  const t = b.readUInt8(5);
  if (t !== 1 && t !== 2) return { error: `type ${t}` };
  const len = b.readUInt8(18);
  if (len === 0 || HEADER + len !== b.length) return { error: `node name length ${len} does not match the datagram` };
  return { type: t === 1 ? 'probe' : 'reply', nonce: Buffer.from(b.subarray(6, 14)), seq: b.readUInt32BE(14), node: b.toString('utf8', HEADER) };
}
