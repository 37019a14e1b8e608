/**
 * The critical pod's way through the API from apiserver audit log lines
 * (experiments/harness/api-trace.ts) and its table in the report.
 */
import { appendFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { auditLogTracer, auditTimeMs, criticalApiPath, criticalApiSteps, criticalApiTrace } from '../../experiments/harness/api-trace.ts';
import { auditPolicy } from '../../experiments/testbed/controlplane.ts';
import { emptyEvents, parseResults, type RepResult } from '../../experiments/harness/results.ts';
import { apiPathTable } from '../../experiments/harness/report.ts';

const T0 = Date.parse('2026-11-26T01:00:00.000Z');
const iso = (ms: number) => {
  // audit timestamps carry microseconds: "...T01:00:00.012345Z"
  const whole = Math.floor(ms);
  const micros = Math.round((ms - whole) * 1000);
  return new Date(whole).toISOString().replace(/\.(\d{3})Z$/, (_, m: string) => `.${m}${String(micros).padStart(3, '0')}Z`);
};
const event = (dt: number, ms: number, verb: string, resource: string, o: { sub?: string; name?: string; ns?: string; user?: string; code?: number; stage?: string } = {}) =>
  JSON.stringify({
    kind: 'Event',
    apiVersion: 'audit.k8s.io/v1',
    level: 'Metadata',
    stage: o.stage ?? 'ResponseComplete',
    verb,
    user: { username: o.user ?? 'system:kube-controller-manager' },
    objectRef: { resource, namespace: o.ns ?? 'ulysses-critical', ...(o.name ? { name: o.name } : {}), ...(o.sub ? { subresource: o.sub } : {}), apiVersion: 'v1' },
    responseStatus: { metadata: {}, code: o.code ?? 200 },
    requestReceivedTimestamp: iso(T0 + dt),
    stageTimestamp: iso(T0 + dt + ms),
  });

const log = [
  event(-4000, 2, 'create', 'pods', { user: 'system:serviceaccount:kube-system:replicaset-controller' }), // setup, before the taint
  event(21.5, 3.25, 'patch', 'pods', { sub: 'status', name: 'prio-a' }),
  event(25, 1, 'patch', 'pods', { sub: 'status', name: 'low-1', ns: 'ulysses-load' }), // another namespace
  event(31, 5.5, 'delete', 'pods', { name: 'prio-a' }),
  event(40, 1, 'create', 'pods', { code: 409 }), // a failed create is not the replacement
  event(45, 4, 'create', 'pods', { user: 'ulysses' }),
  event(60, 0.5, 'create', 'pods', { sub: 'binding', name: 'prio-b', user: 'system:kube-scheduler' }),
  event(62, 1, 'create', 'pods', { sub: 'binding', name: 'prio-b', stage: 'ResponseStarted', user: 'system:kube-scheduler' }),
  'not json',
  '{"truncated": ',
].join('\n');

describe('critical pod API trace', () => {
  it('parses audit timestamps to the microsecond', () => {
    expect(auditTimeMs('2026-11-26T01:00:00.012345Z') - T0).toBeCloseTo(12.345, 3);
    expect(auditTimeMs('2026-11-26T01:00:01Z') - T0).toBe(1000);
    expect(auditTimeMs('yesterday')).toBeNaN();
    expect(auditTimeMs(undefined)).toBeNaN();
  });

  it('keeps the namespace\'s completed requests after the taint, in arrival order, relative to it', () => {
    const trace = criticalApiTrace([log], 'ulysses-critical', T0);
    expect(trace.map((r) => `${r.verb} ${r.resource}`)).toEqual(['patch pods/status', 'delete pods', 'create pods', 'create pods', 'create pods/binding']);
    expect(trace[0]).toEqual({ atMs: 21.5, ms: 3.25, verb: 'patch', resource: 'pods/status', name: 'prio-a', user: 'system:kube-controller-manager', code: 200 });
    expect(criticalApiTrace([log], 'ulysses-critical', T0, 50)).toHaveLength(4); // the window
  });

  it('cuts the path to "scheduled" at the requests: API time and the gaps between them', () => {
    const trace = criticalApiTrace([log], 'ulysses-critical', T0);
    const steps = criticalApiSteps(trace);
    expect(steps.create?.atMs).toBe(45); // the 409 is skipped
    expect(steps.bind?.user).toBe('system:kube-scheduler');
    expect(criticalApiPath(trace, 63)).toEqual({ toStatusPatch: 21.5, statusPatch: 3.25, toDelete: 6.25, delete: 5.5, toCreate: 8.5, create: 4, toBind: 11, bind: 0.5, toSeen: 2.5 });
    // no binding seen: the parts after it are unknown, not 0
    const noBind = criticalApiPath(trace.filter((r) => r.resource !== 'pods/binding'), null);
    expect(noBind.toBind).toBeNull();
    expect(noBind.toSeen).toBeNull();
    expect(criticalApiPath([], 10).delete).toBeNull();
  });

  it('reads the audit log incrementally and the report tabulates the medians per cell', () => {
    const dir = mkdtempSync(join(tmpdir(), 'api-trace-'));
    const file = join(dir, 'audit.log');
    const trace = auditLogTracer(file, 'ulysses-critical');
    expect(trace(T0)).toEqual([]); // no log yet
    writeFileSync(file, `${log}\n`);
    expect(trace(T0)).toHaveLength(5);
    appendFileSync(file, `${event(10_021, 2, 'delete', 'pods', { name: 'prio-b' })}\n`);
    expect(trace(T0 + 10_000)).toEqual([expect.objectContaining({ atMs: 21, verb: 'delete' })]); // only what was appended

    const rep = (config: 1 | 5, podsPerNode: number): RepResult => ({ config, dn: 1, podsPerNode, rep: 0, events: { ...emptyEvents(), prioScheduled: 0.063 }, apiTrace: criticalApiTrace([log], 'ulysses-critical', T0) });
    const [r] = parseResults(JSON.stringify(rep(5, 0))); // the field survives results.jsonl
    expect(r!.apiTrace).toHaveLength(5);
    const table = apiPathTable([rep(5, 0), rep(5, 7)])!;
    expect(table).toContain('## The critical pod through the API (apiserver audit log)');
    expect(table).toContain('| binding (apiserver) | 0.5 | 0.5 |');
    expect(table).toContain('| **Prio scheduled** (watch) | 63.0 | 63.0 |');
    expect(apiPathTable([{ ...rep(5, 0), apiTrace: undefined }])).toBeUndefined();
    expect(table).not.toContain("source's taint"); // runs before criticalTaintWrittenMs was recorded
  });

  it("takes the apiserver's taking in of the failure out of Prio scheduled, with the load/idle ratio", () => {
    const rep = (podsPerNode: number, i: number, writtenMs: number, scheduledS: number): RepResult => ({
      config: 5,
      dn: 1,
      podsPerNode,
      rep: i,
      events: { ...emptyEvents(), prioScheduled: scheduledS },
      criticalTaintWrittenMs: writtenMs,
      apiTrace: criticalApiTrace([log], 'ulysses-critical', T0),
    });
    // idle: taint written at 10-30 ms, scheduled 40 ms after it; load: written later, scheduled 44 ms after it
    const idle = [10, 20, 30].map((w, i) => rep(0, i, w, (w + 40) / 1000));
    const load = [30, 40, 50].map((w, i) => rep(7, i, w, (w + 44) / 1000));
    const [r] = parseResults(JSON.stringify(idle[0]));
    expect(r!.criticalTaintWrittenMs).toBe(10); // the field survives results.jsonl
    const table = apiPathTable([...idle, ...load])!;
    expect(table).toContain("| taint → critical source's taint written (harness PATCH returned) | 20.0 | 40.0 |");
    expect(table).toContain("| **Prio scheduled after the source's taint was written** | 40.0 | 44.0 |");
    expect(table).toMatch(/config 5, DN 1, 7 pods\/node vs idle: \*\*1\.10x\*\* \(90% interval 1\.10-1\.10x\)/);
  });

  it('audits only the writes to pods and EndpointSlices of the given namespaces', () => {
    const p = JSON.parse(auditPolicy(['ulysses-critical']));
    expect(p.kind).toBe('Policy');
    expect(p.rules[0]).toMatchObject({ level: 'Metadata', namespaces: ['ulysses-critical'], verbs: ['create', 'update', 'patch', 'delete'] });
    expect(p.rules.at(-1)).toEqual({ level: 'None' });
    expect(p.rules[0].resources).toHaveLength(2);
    // '*': every write, namespaced or not
    expect(JSON.parse(auditPolicy(['*'])).rules[0]).toEqual({ level: 'Metadata', verbs: ['create', 'update', 'patch', 'delete'] });
  });
});
