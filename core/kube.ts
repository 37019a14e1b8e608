/**
 * Kubernetes API access shared by every component: a raw JSON request helper (used for paginated
 * lists and resources without a typed client), instrumented with the client-go metric names
 * rest_client_requests_total and rest_client_request_duration_seconds. Kubeconfig loading is in
 * core/kubeconfig.ts; this module does not load @kubernetes/client-node (its index costs ~80 MiB RSS).
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import fetch from 'node-fetch';
import { Counter, Histogram } from 'prom-client';
import { criticalWrites } from './critical-writes.ts';
import { Http2Transport } from './http2-transport.ts';
import { metricsRegistry } from './metrics.ts';

/**
 * What the request paths of the shared core need of a kubeconfig: client-node's KubeConfig, or
 * core/kubeconfig.ts's LightKubeConfig in processes that must not load client-node (memory).
 */
export interface KubeAccess {
  getCurrentCluster(): { server: string } | null;
  applyToFetchOptions(opts: object): Promise<object>;
}

let requestsTotal: Counter<'code' | 'method' | 'host'> | undefined;
let requestDuration: Histogram<'verb' | 'host'> | undefined;
function restMetrics() {
  const registers = [metricsRegistry()];
  requestsTotal ??= new Counter({
    name: 'rest_client_requests_total',
    help: 'Number of HTTP requests, partitioned by status code, method, and host.',
    labelNames: ['code', 'method', 'host'],
    registers,
  });
  requestDuration ??= new Histogram({
    name: 'rest_client_request_duration_seconds',
    help: 'Request latency in seconds. Broken down by verb and host.',
    labelNames: ['verb', 'host'],
    buckets: [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
    registers,
  });
  return { requestsTotal, requestDuration };
}

/**
 * Headers from applyToFetchOptions as a plain object: LightKubeConfig gives one, client-node's
 * KubeConfig a Headers instance (whose entries a spread would drop).
 */
export function plainHeaders(h: unknown): Record<string, string> {
  if (!h) return {};
  if (typeof (h as { forEach?: unknown }).forEach === 'function' && !Array.isArray(h)) {
    const out: Record<string, string> = {};
    (h as { forEach(cb: (v: string, k: string) => void): void }).forEach((v, k) => (out[k] = v));
    return out;
  }
  return { ...(h as Record<string, string>) };
}

/** TLS identity of an agent: a new keep-alive agent is made only when one of these changes (rotated client certificates). */
const TLS_OPTIONS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized', 'servername'] as const;
const keepAliveAgents = new WeakMap<object, { options: Record<string, unknown>; agent: HttpAgent }>();
/** The TLS identity an agent was made with (the options of TLS_OPTIONS it sets). */
function tlsIdentity(agent: HttpAgent): Record<string, unknown> {
  const options = (agent as HttpAgent & { options?: Record<string, unknown> }).options ?? {};
  return Object.fromEntries(TLS_OPTIONS.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]));
}
/** Whether two TLS identities are the same (client-node reads the certificate files again for every request: equal contents, new Buffers). */
const sameTlsIdentity = (x: Record<string, unknown>, y: Record<string, unknown>) =>
  TLS_OPTIONS.every((k) => {
    const [a, b] = [x[k], y[k]];
    return Buffer.isBuffer(a) && Buffer.isBuffer(b) ? a.equals(b) : a === b || JSON.stringify(a) === JSON.stringify(b);
  });

/**
 * One keep-alive agent per kubeconfig, so that requests reuse their connections to the apiserver
 * (client-go keeps one HTTP/2 connection per host). client-node's KubeConfig hands out a new
 * agent per request: a new TLS context (CA store, certificate and key parsed again) and a new TLS
 * handshake for every call, ~10-15 ms of CPU each on both ends — in the failover experiment's
 * critical-pod window that was most of the controller manager's CPU. An agent that already keeps
 * connections alive (LightKubeConfig's) is used as it is.
 */
export function keepAliveAgent(kc: object, agent: unknown): unknown {
  if (!(agent instanceof HttpAgent)) return agent;
  if ((agent as HttpAgent & { keepAlive?: boolean }).keepAlive) return agent;
  const tls = tlsIdentity(agent);
  const cached = keepAliveAgents.get(kc);
  const https = agent instanceof HttpsAgent;
  if (cached && cached.agent instanceof HttpsAgent === https && sameTlsIdentity(cached.options, tls)) return cached.agent;
  const fresh = https ? new HttpsAgent({ ...tls, keepAlive: true }) : new HttpAgent({ keepAlive: true });
  if (cached) setTimeout(() => cached.agent.destroy(), 60_000).unref(); // after the old agent's requests (30 s timeout)
  keepAliveAgents.set(kc, { options: tls, agent: fresh });
  return fresh;
}

const http2Transports = new WeakMap<object, { tls: Record<string, unknown>; transport: Http2Transport }>();

/** Requests over one HTTP/2 session per apiserver identity (core/http2-transport.ts): `ULYSSES_KUBE_HTTP2=1`. */
export const http2Enabled = () => process.env.ULYSSES_KUBE_HTTP2 === '1';

/**
 * The HTTP/2 transport of kubeconfig `kc` for `origin`, with the TLS identity of its https agent; a
 * new one (the old closed once its requests are done) when the identity changed (rotated
 * certificates). Undefined for a plain-http server.
 */
export function http2TransportFor(kc: object, origin: string, agent: unknown): Http2Transport | undefined {
  if (!(agent instanceof HttpsAgent)) return undefined;
  const tls = tlsIdentity(agent);
  const cached = http2Transports.get(kc);
  if (cached && cached.transport.origin === origin && sameTlsIdentity(cached.tls, tls)) return cached.transport;
  if (cached) setTimeout(() => cached.transport.close(), 60_000).unref();
  const transport = new Http2Transport(origin, tls);
  http2Transports.set(kc, { tls, transport });
  return transport;
}

export type FetchInit = NonNullable<Parameters<typeof fetch>[1]> & { headers: Record<string, string> };

/** node-fetch options for one request with kc's credentials, over its keep-alive agent. */
export async function fetchInit(kc: KubeAccess, method: string): Promise<FetchInit> {
  const applied = (await kc.applyToFetchOptions({})) as { agent?: unknown; headers?: unknown };
  return { method, headers: plainHeaders(applied.headers), agent: keepAliveAgent(kc, applied.agent) as HttpAgent | undefined };
}

/** Error from the apiserver, carrying the HTTP status and the Status object's reason. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly statusCode: number,
    readonly reason?: string,
    readonly body?: unknown,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export async function apiRequest<T = unknown>(
  kc: KubeAccess,
  method: string,
  path: string,
  opts: { query?: Record<string, string | number | boolean | undefined>; body?: unknown; contentType?: string; timeoutMs?: number } = {},
): Promise<T> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const url = new URL(cluster.server + path);
  for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
  const init = await fetchInit(kc, method);
  if (opts.body !== undefined) {
    init.body = JSON.stringify(opts.body);
    init.headers['Content-Type'] = opts.contentType ?? 'application/json';
  }
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  init.signal = ctrl.signal as never;
  const { requestsTotal, requestDuration } = restMetrics();
  const end = requestDuration.startTimer({ verb: method, host: url.host });
  const h2 = url.protocol === 'https:' && http2Enabled() ? http2TransportFor(kc, url.origin, init.agent) : undefined;
  try {
    const res = h2
      ? await h2.request(method, url.pathname + url.search, init.headers, init.body as string | undefined, timeoutMs)
      : await fetch(url.toString(), init).then(async (r) => ({ status: r.status, text: await r.text(), statusText: r.statusText }));
    requestsTotal.inc({ code: String(res.status), method, host: url.host });
    const text = res.text;
    const body = parseBody(text);
    if (res.status >= 300) {
      // a path no API group serves answers with plain text ("404 page not found"), not a Status
      const st = typeof body === 'object' ? (body as { message?: string; reason?: string } | null) : undefined;
      const message = st?.message ?? (typeof body === 'string' ? excerpt(body) : 'statusText' in res ? res.statusText : String(res.status));
      throw new ApiError(`${method} ${path}: ${res.status} ${message}`, res.status, st?.reason, body);
    }
    if (typeof body === 'string') throw new ApiError(`${method} ${path}: ${res.status} answered with text, not JSON: ${excerpt(body)}`, res.status, undefined, body);
    return body as T;
  } catch (err) {
    if (!(err instanceof ApiError)) requestsTotal.inc({ code: '<error>', method, host: url.host });
    throw err;
  } finally {
    clearTimeout(timer);
    end();
  }
}

/** The JSON body, or the text itself when it is not JSON (an error page, a proxy's answer). */
function parseBody(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
}

const excerpt = (text: string) => (text.length > 200 ? `${text.slice(0, 200)}…` : text).trim();

/** Something that admits one request at a time, e.g. kube-controller-manager's 20 qps / burst 30 token bucket. */
export interface RequestLimiter {
  wait(signal?: AbortSignal): Promise<void>;
}

/**
 * A client for one component: `apiRequest` behind an optional client-side limiter (client-go's
 * rest.Config QPS/Burst). The limiter can be swapped at runtime (e.g. removed when a controller
 * switches to the periodic mode, whose workers already pace the requests).
 */
export class KubeClient {
  constructor(
    readonly kc: KubeAccess,
    public limiter?: RequestLimiter,
  ) {}

  /**
   * `critical`: a write on the critical path (core/critical-writes.ts); the process' other writes
   * wait while one is in flight. Reads never wait.
   */
  async request<T = unknown>(method: string, path: string, opts: Parameters<typeof apiRequest>[3] & { signal?: AbortSignal; critical?: boolean } = {}): Promise<T> {
    await this.limiter?.wait(opts.signal);
    if (opts.critical) return criticalWrites.critical(() => apiRequest<T>(this.kc, method, path, opts));
    if (method !== 'GET' && criticalWrites.busy) await criticalWrites.clear();
    return apiRequest<T>(this.kc, method, path, opts);
  }

  get<T>(path: string, query?: Record<string, string | number | boolean | undefined>): Promise<T> {
    return this.request<T>('GET', path, { query });
  }
  post<T>(path: string, body: unknown, o: { critical?: boolean } = {}): Promise<T> {
    return this.request<T>('POST', path, { body, critical: o.critical });
  }
  put<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>('PUT', path, { body });
  }
  delete<T>(path: string, body?: unknown, o: { critical?: boolean } = {}): Promise<T> {
    return this.request<T>('DELETE', path, { body, critical: o.critical });
  }
  jsonPatch<T>(path: string, ops: unknown[]): Promise<T> {
    return this.request<T>('PATCH', path, { body: ops, contentType: 'application/json-patch+json' });
  }
  mergePatch<T>(path: string, patch: unknown): Promise<T> {
    return this.request<T>('PATCH', path, { body: patch, contentType: 'application/merge-patch+json' });
  }
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ApiError && err.statusCode === 404;
}
/** A 404 without a Status object: the apiserver serves no such resource (e.g. a CRD not installed). */
export function isNotServed(err: unknown): boolean {
  return isNotFound(err) && typeof (err as ApiError).body !== 'object';
}
export function isConflict(err: unknown): boolean {
  return err instanceof ApiError && err.statusCode === 409;
}
