/**
 * The two CRI proxy implementations behind one interface: `http2` (h2proxy.ts, HTTP/2 stream-level
 * pass-through, the default: lower added latency, see README) and `grpc-js` (proxy.ts, gRPC
 * terminated on both sides with identity codecs).
 */
import type { PacingGate } from './pacing.ts';
import { CriProxy, type CriProxyOptions } from './proxy.ts';
import { H2CriProxy } from './h2proxy.ts';

export const PROXY_IMPLEMENTATIONS = ['http2', 'grpc-js'] as const;
export type ProxyImplementation = (typeof PROXY_IMPLEMENTATIONS)[number];

export interface CriProxyServer {
  readonly gate: PacingGate;
  /** Binds the socket (stale socket replaced, mode set). */
  start(): Promise<void>;
  /** Stops accepting calls, rejects paced waiters, lets running calls finish for `graceMs`, then cuts them. */
  close(graceMs?: number): Promise<void>;
}

export function createCriProxy(options: CriProxyOptions & { implementation?: ProxyImplementation }): CriProxyServer {
  const { implementation = 'http2', ...opts } = options;
  return implementation === 'grpc-js' ? new CriProxy(opts) : new H2CriProxy(opts);
}
