/**
 * One HTTP/2 session per apiserver identity for core/kube.ts's requests, as client-go keeps one
 * multiplexed HTTP/2 connection per host (issue 40): requests sent at the same moment (the critical
 * create, an EndpointSlice, an Event) go out as streams of one connection instead of queueing for
 * sockets of a keep-alive pool, and a PING every `pingIntervalMs` keeps the connection from going
 * idle, so the first failover after a quiet spell pays no TLS handshake (kube-apiserver closes idle
 * connections).
 *
 * Connection handling (what client-go's x/net/http2 transport does, carried over as behaviour):
 * - a session that received GOAWAY, closed, failed or missed a PING answer is dropped; the next
 *   request opens a new one;
 * - a request the server did not process (the stream refused, or above GOAWAY's last stream id) is
 *   sent again once on a new session; anything else fails with the method and path;
 * - a request's timeout cancels its stream only, never the session.
 *
 * Used when `ULYSSES_KUBE_HTTP2=1` (core/kube.ts apiRequest), for https servers; HTTP/1.1 otherwise.
 */
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type IncomingHttpStatusHeader, type OutgoingHttpHeaders } from 'node:http2';
import type { SecureContextOptions } from 'node:tls';
import { Counter } from 'prom-client';
import { metricsRegistry, registeredMetric } from './metrics.ts';

const sessionsMetric = () =>
  registeredMetric('ulysses_kube_http2_sessions_total', () => new Counter({ name: 'ulysses_kube_http2_sessions_total', help: 'HTTP/2 sessions opened to the apiserver by core/http2-transport.ts (one per identity; more after GOAWAY, errors, unanswered PINGs).', labelNames: ['host'], registers: [metricsRegistry()] }));

export interface Http2Response {
  status: number;
  text: string;
}

export interface Http2TransportOptions {
  /** a PING this often on an idle session (default 30 s; kube-apiserver closes connections idle for 90 s) */
  pingIntervalMs?: number;
  /** a PING not answered in this long drops the session (default 15 s) */
  pingTimeoutMs?: number;
  /** bound of a response body (default 64 MiB) */
  maxBodyBytes?: number;
}

export type Http2Tls = Pick<SecureContextOptions, 'ca' | 'cert' | 'key'> & { rejectUnauthorized?: boolean; servername?: string };

/** An error of the transport, naming the request. `unprocessed`: the server never saw it (safe to send again). */
export class Http2RequestError extends Error {
  constructor(
    message: string,
    readonly unprocessed = false,
  ) {
    super(message);
    this.name = 'Http2RequestError';
  }
}

export class Http2Transport {
  private session: ClientHttp2Session | undefined;
  private pinger: NodeJS.Timeout | undefined;
  /** sessions opened so far (tests and the connection metric read it) */
  sessionsOpened = 0;
  private readonly o: Required<Http2TransportOptions>;

  constructor(
    readonly origin: string,
    private readonly tls: Http2Tls,
    o: Http2TransportOptions = {},
  ) {
    this.o = { pingIntervalMs: 30_000, pingTimeoutMs: 15_000, maxBodyBytes: 64 << 20, ...o };
  }

  private current(): ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    const s = connect(this.origin, { ...this.tls, ALPNProtocols: ['h2'] });
    this.sessionsOpened++;
    sessionsMetric().inc({ host: new URL(this.origin).host });
    const drop = () => {
      if (this.session === s) {
        this.session = undefined;
        clearInterval(this.pinger);
      }
    };
    s.on('goaway', () => {
      drop();
      s.close(); // streams in flight finish; no new ones
    });
    s.on('close', drop);
    s.on('error', () => {
      drop();
      s.destroy();
    });
    s.on('frameError', drop);
    // the session alone never keeps the process alive (informers and servers do)
    s.unref();
    this.session = s;
    clearInterval(this.pinger);
    this.pinger = setInterval(() => this.ping(s), this.o.pingIntervalMs);
    this.pinger.unref();
    return s;
  }

  /** One PING; no answer in pingTimeoutMs (or an error) drops and destroys the session. */
  private ping(s: ClientHttp2Session): void {
    if (s.closed || s.destroyed) return;
    const timer = setTimeout(() => {
      if (this.session === s) this.session = undefined;
      s.destroy(new Error('PING not answered'));
    }, this.o.pingTimeoutMs);
    timer.unref();
    const sent = s.ping((err) => {
      clearTimeout(timer);
      if (err) {
        if (this.session === s) this.session = undefined;
        s.destroy();
      }
    });
    if (!sent) clearTimeout(timer);
  }

  /** Sends a request; one more try on a new session when the server did not process it. */
  async request(method: string, pathAndQuery: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number): Promise<Http2Response> {
    try {
      return await this.once(method, pathAndQuery, headers, body, timeoutMs);
    } catch (err) {
      if (err instanceof Http2RequestError && err.unprocessed) return this.once(method, pathAndQuery, headers, body, timeoutMs);
      throw err;
    }
  }

  private once(method: string, pathAndQuery: string, headers: Record<string, string>, body: string | undefined, timeoutMs: number): Promise<Http2Response> {
    const what = `${method} ${pathAndQuery.split('?')[0]}`;
    return new Promise((resolve, reject) => {
      let stream: ClientHttp2Stream;
      const session = this.current();
      const h: OutgoingHttpHeaders = { ...lowerCase(headers), [constants.HTTP2_HEADER_METHOD]: method, [constants.HTTP2_HEADER_PATH]: pathAndQuery };
      try {
        stream = session.request(h, { endStream: body === undefined });
      } catch (err) {
        // the session closed between current() and here (GOAWAY): nothing was sent
        this.session = undefined;
        reject(new Http2RequestError(`${what}: ${(err as Error).message}`, true));
        return;
      }
      let status = 0;
      const chunks: Buffer[] = [];
      let size = 0;
      let settled = false;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        fn();
      };
      stream.setTimeout(timeoutMs, () => {
        stream.close(constants.NGHTTP2_CANCEL);
        settle(() => reject(new Http2RequestError(`${what}: no answer in ${timeoutMs} ms`)));
      });
      stream.on('response', (res: IncomingHttpHeaders & IncomingHttpStatusHeader) => (status = Number(res[constants.HTTP2_HEADER_STATUS] ?? 0)));
      stream.on('data', (d: Buffer) => {
        size += d.length;
        if (size > this.o.maxBodyBytes) {
          stream.close(constants.NGHTTP2_CANCEL);
          settle(() => reject(new Http2RequestError(`${what}: response larger than ${this.o.maxBodyBytes} bytes`)));
          return;
        }
        chunks.push(d);
      });
      let ended = false;
      stream.on('end', () => (ended = true));
      // the answer counts once the stream closed cleanly: a reset after part of the body (which some
      // Node.js versions report with an 'end' first) is an error, never a truncated answer
      stream.on('close', () => {
        const code = stream.rstCode;
        if (ended && status && (code === undefined || code === constants.NGHTTP2_NO_ERROR)) {
          settle(() => resolve({ status, text: Buffer.concat(chunks).toString('utf8') }));
          return;
        }
        // closed without a response: refused by the server, or cut by GOAWAY/an error before it was processed
        const unprocessed = status === 0 && (code === constants.NGHTTP2_REFUSED_STREAM || (session.closed && code === constants.NGHTTP2_CANCEL));
        settle(() => reject(new Http2RequestError(`${what}: stream closed${status ? '' : ' before a response'} (code ${code})`, unprocessed)));
      });
      stream.on('error', (err: Error & { code?: string }) => {
        const unprocessed = status === 0 && (err.code === 'ERR_HTTP2_GOAWAY_SESSION' || err.code === 'ERR_HTTP2_STREAM_CANCEL' || /REFUSED_STREAM/.test(err.message));
        settle(() => reject(new Http2RequestError(`${what}: ${err.message}`, unprocessed)));
      });
      if (body !== undefined) stream.end(body);
    });
  }

  /** Closes the session (requests in flight finish). */
  close(): void {
    clearInterval(this.pinger);
    this.session?.close();
    this.session = undefined;
  }
}

/** HTTP/2 header names are lower case; hop-by-hop headers of HTTP/1.1 are not allowed. */
function lowerCase(headers: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) {
    const name = k.toLowerCase();
    if (name === 'connection' || name === 'keep-alive' || name === 'transfer-encoding' || name === 'host') continue;
    out[name] = v;
  }
  return out;
}
