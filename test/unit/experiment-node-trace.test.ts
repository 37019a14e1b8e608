/**
 * The critical pod's trace on its node from kubelet-shim log lines (experiments/harness/node-trace.ts)
 * and its table in the report.
 */
import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { criticalNodeTrace, shimLogTracer } from '../../experiments/harness/node-trace.ts';
import { emptyEvents, parseResults, type RepResult } from '../../experiments/harness/results.ts';
import { nodeTraceTable } from '../../experiments/harness/report.ts';

const T0 = 1_700_000_000_000;
const line = (dt: number, msg: string, key: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ level: 30, time: new Date(T0 + dt).toISOString(), component: 'kubelet-shim', kind: 'Pod', key, msg, ...extra });

const node2 = [
  line(-5000, 'RunPodSandbox forwarded', 'ulysses-critical/prio-old', { criticality: 'high', waitedMs: 0 }), // an earlier repetition
  line(80, 'RunPodSandbox forwarded', 'ulysses-load/low-1', { criticality: 'low', waitedMs: 0 }),
  line(90, 'RunPodSandbox forwarded', 'ulysses-load/low-2', { criticality: 'low', waitedMs: 0 }),
  line(100, 'RunPodSandbox done', 'ulysses-load/low-1', { criticality: 'low', runtimeMs: 20 }),
  line(150, 'RunPodSandbox forwarded', 'ulysses-critical/prio-abc', { criticality: 'high', waitedMs: 3 }),
  line(160, 'RunPodSandbox forwarded', 'ulysses-load/low-3', { criticality: 'low', waitedMs: 0 }),
  line(250, 'RunPodSandbox done', 'ulysses-critical/prio-abc', { criticality: 'high', runtimeMs: 100 }),
  line(320, 'critical pod container started: low-priority sandboxes resume', 'ulysses-critical/prio-abc', { ok: true, creationMs: 153 }),
  line(320, 'RunPodSandbox forwarded', 'ulysses-load/low-4', { criticality: 'low', waitedMs: 700 }),
  'not json',
  '{"truncated": ',
].join('\n');

describe('criticalNodeTrace', () => {
  it('lines the critical pod up against the taint and counts the low sandboxes around it', () => {
    const t = criticalNodeTrace([node2, line(10, 'RunPodSandbox forwarded', 'ulysses-load/low-9', { criticality: 'low', waitedMs: 0 })], 'ulysses-critical', T0);
    expect(t).toEqual({
      sandboxArrived: 0.147,
      sandboxForwarded: 0.15,
      sandboxDone: 0.25,
      containerStarted: 0.32,
      lowsForwardedBefore: 3, // low-1, low-2 and low-9 (other node), not the earlier repetition's lines
      lowsInRuntime: 2, // low-2 and low-9 never answered before 150 ms; low-1 done at 100 ms
      lowsForwardedDuring: 1, // low-3 (low-4, released by the container start at the same instant, is not)
    });
  });
  it('is null without a critical sandbox after the taint, and tolerates missing steps', () => {
    expect(criticalNodeTrace([node2], 'ulysses-critical', T0 + 10_000)).toBeNull();
    expect(criticalNodeTrace([node2], 'other-ns', T0)).toBeNull();
    // pino's default epoch-ms time works too
    const partial = criticalNodeTrace([JSON.stringify({ time: T0 + 50, key: 'ulysses-critical/p', criticality: 'high', msg: 'RunPodSandbox forwarded' })], 'ulysses-critical', T0);
    expect(partial).toMatchObject({ sandboxArrived: 0.05, sandboxDone: null, containerStarted: null, lowsForwardedDuring: 0 });
    const iso = criticalNodeTrace([line(50, 'RunPodSandbox forwarded', 'ulysses-critical/p', { criticality: 'high' })], 'ulysses-critical', T0);
    expect(iso).toEqual(partial);
  });
  it('reads each log file from where the previous repetition stopped; a missing file gives no trace', () => {
    const dir = mkdtempSync(join(tmpdir(), 'node-trace-'));
    const f = join(dir, 'kubelet-shim.log');
    writeFileSync(f, node2 + '\n');
    const tracer = shimLogTracer([f, join(dir, 'absent.log')], 'ulysses-critical');
    expect(tracer(T0)?.containerStarted).toBe(0.32);
    // next repetition: only the new lines are read (the old ones would match too if read again)
    appendFileSync(f, line(60_100, 'RunPodSandbox forwarded', 'ulysses-critical/prio-def', { criticality: 'high', waitedMs: 0 }) + '\n');
    const t = tracer(T0 + 60_000);
    expect(t).toMatchObject({ sandboxArrived: 0.1, sandboxDone: null, lowsForwardedBefore: 0 });
    expect(shimLogTracer([join(dir, 'absent.log')], 'ulysses-critical')(T0)).toBeNull();
  });
});

describe('node trace in results and report', () => {
  const rep = (config: 1 | 5, r: number, arrived: number): RepResult => ({
    config,
    dn: 1,
    podsPerNode: 20,
    rep: r,
    events: { ...emptyEvents(), prioScheduled: arrived - 0.05, prioReady: arrived + 0.3 },
    prioNode: { sandboxArrived: arrived, sandboxForwarded: arrived, sandboxDone: arrived + 0.15, containerStarted: arrived + 0.2, lowsForwardedBefore: 2, lowsInRuntime: 1, lowsForwardedDuring: 0 },
  });
  it('round-trips through results.jsonl and renders medians per cell', () => {
    const results = parseResults([rep(1, 0, 2), rep(1, 1, 4), rep(5, 0, 0.2)].map((r) => JSON.stringify(r)).join('\n'));
    expect(results[0]!.prioNode?.lowsInRuntime).toBe(1);
    const table = nodeTraceTable(results)!;
    expect(table).toContain('| 1: vanilla | 1 | 20 | 2 | 2.95 | 3.00 | 3.15 | 3.20 | 3.30 | 1.0 | 2.0 | 0.0 |');
    expect(table.split('\n').filter((l) => l.startsWith('| 5: '))).toHaveLength(1);
    expect(nodeTraceTable([{ ...rep(1, 0, 1), prioNode: undefined }])).toBeUndefined();
  });
  it('rejects a malformed trace naming the field', () => {
    const bad = JSON.stringify({ ...rep(1, 0, 1), prioNode: { ...rep(1, 0, 1).prioNode, lowsInRuntime: -1 } });
    expect(() => parseResults(bad)).toThrow(/prioNode\.lowsInRuntime/);
  });
});
