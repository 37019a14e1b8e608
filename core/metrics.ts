/**
 * One prom-client Registry per process, served on /metrics. Names follow Kubernetes
 * (workqueue_*, rest_client_*) and `ulysses_*` for our own series.
 */
import http from 'node:http';
import { isMainThread } from 'node:worker_threads';
import { AggregatorRegistry, Registry, collectDefaultMetrics, type Metric, type MetricObjectWithValues, type MetricValue } from 'prom-client';

let registry: Registry | undefined;

/**
 * The registry of this thread. The process metrics (process_*, nodejs_*) are collected on the main
 * thread only: a worker thread's registry reaches /metrics through {@link addMetricsSource}.
 */
export function metricsRegistry(): Registry {
  if (!registry) {
    registry = new Registry();
    if (isMainThread) collectDefaultMetrics({ register: registry });
  }
  return registry;
}

export type MetricsSnapshot = MetricObjectWithValues<MetricValue<string>>[];
const sources = new Set<() => Promise<MetricsSnapshot>>();

/**
 * Adds the metrics of another registry (a worker thread's `getMetricsAsJSON()`, core/informer-thread.ts)
 * to what /metrics serves; series of the same name and labels are summed. Returns the remover.
 */
export function addMetricsSource(source: () => Promise<MetricsSnapshot>): () => void {
  sources.add(source);
  return () => void sources.delete(source);
}

/** The exposition text of /metrics: this thread's registry and every {@link addMetricsSource}. */
export async function metricsText(): Promise<string> {
  const reg = metricsRegistry();
  if (!sources.size) return reg.metrics();
  // a source that does not answer (a worker being restarted) is left out of this scrape
  const others = await Promise.all([...sources].map((s) => s().catch((): MetricsSnapshot => [])));
  return AggregatorRegistry.aggregate([(await reg.getMetricsAsJSON()) as MetricsSnapshot, ...others]).metrics();
}

/** One sample of a /metrics page (Prometheus text format): `name{label="value",...} value`. */
export interface MetricSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const INFINITIES: Record<string, number> = { '+Inf': Infinity, '-Inf': -Infinity };

/** The largest /metrics page {@link metricSamples} reads. */
export const MAX_METRICS_TEXT = 16 * 1024 * 1024;

/**
 * The samples named in `names` (sample names as exposed, e.g. `workqueue_depth`,
 * `foo_seconds_count`) of a /metrics page; comments and other series are skipped. Throws on a page
 * over {@link MAX_METRICS_TEXT} characters or a selected line that is not a sample.
 */
export function metricSamples(text: string, names: ReadonlySet<string>): MetricSample[] {
  if (text.length > MAX_METRICS_TEXT) throw new Error(`metrics page of ${text.length} characters: more than ${MAX_METRICS_TEXT}`);
  const out: MetricSample[] = [];
  for (const line of text.split('\n')) {
    const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line)?.[0];
    if (!name || !names.has(name)) continue;
    const m = /^(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?\s+(\S+)/.exec(line.slice(name.length));
    const value = m ? (INFINITIES[m[2]!] ?? Number(m[2])) : NaN;
    if (!m || (Number.isNaN(value) && m[2] !== 'NaN')) throw new Error(`metrics line ${JSON.stringify(line.slice(0, 200))}: not a sample of ${name}`);
    const labels: Record<string, string> = {};
    for (const l of (m[1] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    out.push({ name, labels, value });
  }
  return out;
}

/** The metric `name` of the shared registry, created by `make` the first time (metrics are process-wide singletons). */
export function registeredMetric<T extends Metric<string>>(name: string, make: () => T): T {
  return (metricsRegistry().getSingleMetric(name) as T | undefined) ?? make();
}

/**
 * Serves GET /metrics and /healthz (the process answers) on host:port, and /readyz when `readiness`
 * is given (200 or 503 with its detail); resolves with the bound port.
 */
export async function serveMetrics(
  port: number,
  host = '0.0.0.0',
  readiness?: () => { ready: boolean; detail: string },
): Promise<{ port: number; close: () => Promise<void> }> {
  const reg = metricsRegistry();
  const server = http.createServer(async (req, res) => {
    if (req.url === '/metrics') {
      res.setHeader('Content-Type', reg.contentType);
      res.end(await metricsText());
    } else if (req.url === '/healthz') {
      res.end('ok');
    } else if (req.url === '/readyz' && readiness) {
      const r = readiness();
      res.statusCode = r.ready ? 200 : 503;
      res.end(r.detail);
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address();
  return {
    port: typeof addr === 'object' && addr ? addr.port : port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
