/**
 * metricSamples (core/metrics.ts): the samples of a /metrics page the failover harness reads from an
 * installed controller manager, checked on prom-client's own exposition text.
 */
import { describe, expect, it } from 'vitest';
import { Histogram, Gauge, Registry } from 'prom-client';
import { MAX_METRICS_TEXT, metricSamples } from '../../core/metrics.ts';

describe('metricSamples', () => {
  it("reads a labelled histogram's _count and _sum and a gauge from prom-client's text, skipping other series", async () => {
    const r = new Registry();
    const h = new Histogram({ name: 'x_seconds', help: 'h', labelNames: ['namespace', 'until'], buckets: [1, 2], registers: [r] });
    h.observe({ namespace: 'a', until: 'endpointslice' }, 1.5);
    h.observe({ namespace: 'b', until: 'ready' }, 0.5);
    h.observe({ namespace: 'b', until: 'ready' }, 0.25);
    const g = new Gauge({ name: 'workqueue_depth', help: 'd', labelNames: ['name'], registers: [r] });
    g.set({ name: 'say "hi"\\there' }, 3);
    const text = await r.metrics();
    const s = metricSamples(text, new Set(['x_seconds_count', 'x_seconds_sum', 'workqueue_depth']));
    expect(s.filter((x) => x.name === 'x_seconds_count')).toEqual([
      { name: 'x_seconds_count', labels: { namespace: 'a', until: 'endpointslice' }, value: 1 },
      { name: 'x_seconds_count', labels: { namespace: 'b', until: 'ready' }, value: 2 },
    ]);
    expect(s.filter((x) => x.name === 'x_seconds_sum').map((x) => x.value)).toEqual([1.5, 0.75]);
    expect(s.find((x) => x.name === 'workqueue_depth')).toEqual({ name: 'workqueue_depth', labels: { name: 'say "hi"\\there' }, value: 3 });
    expect(s.some((x) => x.name === 'x_seconds_bucket')).toBe(false);
  });
  it('reads +Inf/-Inf/NaN and unlabelled samples; refuses a malformed selected line and an oversized page', () => {
    const s = metricSamples('# HELP a x\na 1\nb{le="+Inf"} +Inf\nb -Inf\nc NaN\n', new Set(['a', 'b', 'c']));
    expect(s.map((x) => x.value)).toEqual([1, Infinity, -Infinity, NaN]);
    expect(() => metricSamples('a{x="1"} one\n', new Set(['a']))).toThrow(/metrics line "a\{x=\\"1\\"\} one": not a sample of a/);
    expect(metricSamples('zz garbage\n', new Set(['a']))).toEqual([]);
    expect(() => metricSamples('a 1\n'.padEnd(MAX_METRICS_TEXT + 1, '#'), new Set(['a']))).toThrow(/more than/);
  });
});
