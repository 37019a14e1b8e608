/**
 * The CRI proxy's Prometheus series, registered once per registry (the process registry of
 * core/metrics.ts by default; tests pass their own Registry to read values in isolation).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { metricsRegistry } from '../core/metrics.ts';

export interface ShimMetrics {
  /** Time a RunPodSandbox spent in the pacing gate, by priority class ("high" | "low"). */
  readonly pacingWait: Histogram<'priority'>;
  /** RunPodSandbox requests waiting in the gate (both classes). */
  readonly queueLength: Gauge;
  /** Time the proxy itself adds to a call (handler work, pacing excluded), by CRI method name. */
  readonly addedLatency: Histogram<'method'>;
  /** Creation latency of critical pods seen by the proxy (RunPodSandbox arrival -> first StartContainer answered). */
  readonly criticalCreation: Histogram;
  /** Current low-priority wait of the `adaptive` policy. */
  readonly lowWait: Gauge;
  /** The self-checks through the shim's own socket, by result (health.ts). */
  readonly selfChecks: Counter<'result'>;
  /** 1 when the last self-check reached the runtime (health.ts, /readyz). */
  readonly ready: Gauge;
}

const byRegistry = new WeakMap<Registry, ShimMetrics>();

/**
 * The per-method children of `ulysses_cri_proxy_added_latency_seconds`, resolved once per method
 * (no label hashing per call); a no-op without metrics.
 */
export function addedLatencyByMethod(metrics: ShimMetrics | undefined): (method: string) => { observe(v: number): void } | undefined {
  const h = metrics?.addedLatency;
  if (!h) return () => undefined;
  const children = new Map<string, { observe(v: number): void }>();
  return (method) => {
    let child = children.get(method);
    if (!child) children.set(method, (child = h.labels({ method })));
    return child;
  };
}

export function shimMetrics(registry: Registry = metricsRegistry()): ShimMetrics {
  const existing = byRegistry.get(registry);
  if (existing) return existing;
  const m: ShimMetrics = {
    pacingWait: new Histogram({
      name: 'ulysses_cri_pacing_wait_seconds',
      help: 'Time a RunPodSandbox request waited in the kubelet-shim pacing gate before being forwarded to the runtime.',
      labelNames: ['priority'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60],
      registers: [registry],
    }),
    queueLength: new Gauge({
      name: 'ulysses_cri_pacing_queue_length',
      help: 'RunPodSandbox requests currently waiting in the kubelet-shim pacing gate.',
      registers: [registry],
    }),
    addedLatency: new Histogram({
      name: 'ulysses_cri_proxy_added_latency_seconds',
      help: 'Latency added by the kubelet-shim proxy handler to a CRI call, excluding pacing waits and the runtime itself.',
      labelNames: ['method'],
      buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05],
      registers: [registry],
    }),
    criticalCreation: new Histogram({
      name: 'ulysses_cri_critical_creation_seconds',
      help: 'Creation latency of high-criticality pods seen by the kubelet-shim: RunPodSandbox arrival to the first StartContainer answered (feedback of the adaptive policy).',
      buckets: [0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 30],
      registers: [registry],
    }),
    lowWait: new Gauge({
      name: 'ulysses_cri_pacing_adaptive_wait_seconds',
      help: 'Current wait between two low-priority RunPodSandbox releases chosen by the adaptive pacing policy.',
      registers: [registry],
    }),
    selfChecks: new Counter({
      name: 'ulysses_kubelet_shim_self_checks_total',
      help: "kubelet-shim self-checks (a CRI Version call through the shim's own socket), by result: ok, error (answered with an error: the runtime is down), timeout (not answered: the shim does not serve).",
      labelNames: ['result'],
      registers: [registry],
    }),
    ready: new Gauge({
      name: 'ulysses_kubelet_shim_ready',
      help: "1 when the last self-check reached the runtime through the shim's socket (the kubelet's path works), else 0.",
      registers: [registry],
    }),
  };
  byRegistry.set(registry, m);
  return m;
}
