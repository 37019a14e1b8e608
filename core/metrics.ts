/**
 * One prom-client Registry per process, served on /metrics. Names follow Kubernetes
 * (workqueue_*, rest_client_*) and `ulysses_*` for our own series.
 */
import http from 'node:http';
import { Registry, collectDefaultMetrics, type Metric } from 'prom-client';

let registry: Registry | undefined;

export function metricsRegistry(): Registry {
  if (!registry) {
    registry = new Registry();
    collectDefaultMetrics({ register: registry });
  }
  return registry;
}

/** The metric `name` of the shared registry, created by `make` the first time (metrics are process-wide singletons). */
export function registeredMetric<T extends Metric<string>>(name: string, make: () => T): T {
  return (metricsRegistry().getSingleMetric(name) as T | undefined) ?? make();
}

/** Serves GET /metrics (and /healthz) on host:port; resolves with the bound port. */
export async function serveMetrics(port: number, host = '0.0.0.0'): Promise<{ port: number; close: () => Promise<void> }> {
  const reg = metricsRegistry();
  const server = http.createServer(async (req, res) => {
    if (req.url === '/metrics') {
      res.setHeader('Content-Type', reg.contentType);
      res.end(await reg.metrics());
    } else if (req.url === '/healthz') {
      res.end('ok');
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
