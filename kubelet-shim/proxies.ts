/**
 * The CRI proxy implementations behind one interface: `splice` (splice.ts, HTTP/2 frame-level
 * splice of the two sockets, the default: least added latency, see README), `http2` (h2proxy.ts, HTTP/2 stream-level pass-through with
 * node:http2) and `grpc-js` (proxy.ts, gRPC terminated on both sides with identity codecs).
 */
import type { PacingGate } from './pacing.ts';
import { CriProxy, type CriProxyOptions } from './proxy.ts';
import { H2CriProxy } from './h2proxy.ts';
import { SpliceCriProxy } from './splice.ts';

export const PROXY_IMPLEMENTATIONS = ['http2', 'grpc-js', 'splice'] as const;
export type ProxyImplementation = (typeof PROXY_IMPLEMENTATIONS)[number];

export interface CriProxyServer {
  readonly gate: PacingGate;
  /** Binds the socket (stale socket replaced, mode set). */
  start(): Promise<void>;
  /** Stops accepting calls, rejects paced waiters, lets running calls finish for `graceMs`, then cuts them. */
  close(graceMs?: number): Promise<void>;
}

export function createCriProxy(options: CriProxyOptions & { implementation?: ProxyImplementation }): CriProxyServer {
  const { implementation = 'splice', ...opts } = options;
  if (implementation === 'grpc-js') return new CriProxy(opts);
  if (implementation === 'splice') return new SpliceCriProxy(opts);
  return new H2CriProxy(opts);
}
