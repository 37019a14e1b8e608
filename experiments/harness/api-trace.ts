/**
 * The critical pod's way through the API server, from the testbed apiserver's audit log: which
 * write requests on the critical namespace's pods the failover caused, when each reached the
 * apiserver and how long the apiserver took, relative to the taint. It splits the "Prio scheduled"
 * critical path of thesis §4.3.2 into API time and the time in between (watch delivery plus the
 * controller's or the scheduler's own work):
 *
 *   taint -> DisruptionTarget status patch -> delete (taint eviction, controller manager)
 *         -> replacement pod created (ReplicaSet controller) -> binding (kube-scheduler) -> seen bound (watch)
 *
 * Only the local testbed writes an audit log (kube-apiserver --audit-policy-file: `auditPolicy` in
 * experiments/testbed/controlplane.ts); on other clusters the trace is absent.
 */
import { z } from 'zod';
import { appendedText } from './node-trace.ts';

export const ApiRequestSchema = z.object({
  /** ms after the taint the request reached the apiserver */
  atMs: z.number(),
  /** ms the apiserver took (received to response complete) */
  ms: z.number().nonnegative(),
  verb: z.string(),
  /** resource[/subresource], e.g. pods/binding */
  resource: z.string(),
  name: z.string().optional(),
  /** the requester's user name (system:kube-scheduler, ...) */
  user: z.string(),
  code: z.number().int().optional(),
});
export type ApiRequest = z.infer<typeof ApiRequestSchema>;
export const ApiTraceSchema = z.array(ApiRequestSchema);
export type ApiTrace = z.infer<typeof ApiTraceSchema>;

interface AuditEvent {
  stage?: string;
  verb?: string;
  objectRef?: { resource?: string; subresource?: string; namespace?: string; name?: string };
  user?: { username?: string };
  responseStatus?: { code?: number };
  requestReceivedTimestamp?: string;
  stageTimestamp?: string;
}

/** Epoch ms with the µs of an audit timestamp ("2026-11-26T00:41:12.345678Z"); NaN if unparsable. */
export function auditTimeMs(t: string | undefined): number {
  if (!t) return Number.NaN;
  const m = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(t);
  if (!m) return Number.NaN;
  const whole = Date.parse(`${m[1]}${m[3]}`);
  return whole + (m[2] ? Number(`0.${m[2]}`) * 1000 : 0);
}

const round = (ms: number) => Math.round(ms * 100) / 100;

/**
 * The audited requests on `namespace` from `texts` (audit log lines, JSON) that reached the
 * apiserver from the taint (`taintAtMs`, epoch ms) to `windowMs` after it, in arrival order.
 * Lines that are not audit events at ResponseComplete are skipped.
 */
export function criticalApiTrace(texts: readonly string[], namespace: string, taintAtMs: number, windowMs = 10_000): ApiTrace {
  const out: ApiTrace = [];
  for (const text of texts)
    for (const line of text.split('\n')) {
      if (!line.startsWith('{')) continue;
      let e: AuditEvent;
      try {
        e = JSON.parse(line) as AuditEvent;
      } catch {
        continue;
      }
      if (e.stage !== 'ResponseComplete' || e.objectRef?.namespace !== namespace || !e.verb || !e.objectRef.resource) continue;
      const received = auditTimeMs(e.requestReceivedTimestamp);
      const complete = auditTimeMs(e.stageTimestamp);
      if (!Number.isFinite(received) || !Number.isFinite(complete)) continue;
      const atMs = received - taintAtMs;
      if (atMs < 0 || atMs > windowMs) continue;
      out.push({
        atMs: round(atMs),
        ms: round(Math.max(0, complete - received)),
        verb: e.verb,
        resource: e.objectRef.subresource ? `${e.objectRef.resource}/${e.objectRef.subresource}` : e.objectRef.resource,
        ...(e.objectRef.name ? { name: e.objectRef.name } : {}),
        user: e.user?.username ?? '',
        ...(e.responseStatus?.code !== undefined ? { code: e.responseStatus.code } : {}),
      });
    }
  return out.sort((a, b) => a.atMs - b.atMs);
}

/** `apiTrace` of ExperimentOptions on the local testbed: the trace from the apiserver's audit log `file`. */
export function auditLogTracer(file: string, namespace: string): (taintAtMs: number) => ApiTrace {
  const read = appendedText([file]);
  return (taintAtMs) => criticalApiTrace(read(), namespace, taintAtMs);
}

/** The failover's steps on the API of one repetition, ms after the taint (null: not in the trace). */
export interface CriticalApiSteps {
  /** the taint eviction's DisruptionTarget condition (PATCH pods/status) */
  statusPatch: ApiRequest | null;
  /** the eviction itself (DELETE pods) */
  delete: ApiRequest | null;
  /** the ReplicaSet controller's replacement (POST pods) */
  create: ApiRequest | null;
  /** kube-scheduler's binding (POST pods/binding) */
  bind: ApiRequest | null;
}

/**
 * The first request of each step. The critical namespace holds only the critical Deployment's pod,
 * so the first pod creation and binding after the taint are its replacement's.
 */
export function criticalApiSteps(trace: ApiTrace): CriticalApiSteps {
  const ok = (r: ApiRequest) => r.code === undefined || r.code < 300;
  const first = (verb: string, resource: string) => trace.find((r) => r.verb === verb && r.resource === resource && ok(r)) ?? null;
  return {
    statusPatch: first('patch', 'pods/status') ?? first('update', 'pods/status'),
    delete: first('delete', 'pods'),
    create: first('create', 'pods'),
    bind: first('create', 'pods/binding'),
  };
}

/**
 * The critical path of one repetition cut at the API requests, ms: each request's time in the
 * apiserver, and the gaps between them (watch delivery + the next component's own work).
 * `scheduledMs`: the harness saw the pod bound (Prio scheduled). A part is null when a request
 * it needs is missing.
 */
export function criticalApiPath(trace: ApiTrace, scheduledMs: number | null): Record<ApiPathPart, number | null> {
  const st = criticalApiSteps(trace);
  const end = (r: ApiRequest | null) => (r ? r.atMs + r.ms : null);
  const gap = (a: number | null, b: ApiRequest | null) => (a === null || !b ? null : round(b.atMs - a));
  return {
    toStatusPatch: st.statusPatch ? st.statusPatch.atMs : null,
    statusPatch: st.statusPatch?.ms ?? null,
    toDelete: gap(end(st.statusPatch), st.delete),
    delete: st.delete?.ms ?? null,
    toCreate: gap(end(st.delete), st.create),
    create: st.create?.ms ?? null,
    toBind: gap(end(st.create), st.bind),
    bind: st.bind?.ms ?? null,
    toSeen: scheduledMs === null || !st.bind ? null : round(scheduledMs - end(st.bind)!),
  };
}

export const API_PATH_PARTS = ['toStatusPatch', 'statusPatch', 'toDelete', 'delete', 'toCreate', 'create', 'toBind', 'bind', 'toSeen'] as const;
export type ApiPathPart = (typeof API_PATH_PARTS)[number];

export const API_PATH_LABELS: Record<ApiPathPart, string> = {
  toStatusPatch: 'taint → status patch sent',
  statusPatch: 'status patch (apiserver)',
  toDelete: '→ delete sent',
  delete: 'delete (apiserver)',
  toCreate: '→ replacement create sent',
  create: 'create (apiserver)',
  toBind: '→ binding sent (scheduler)',
  bind: 'binding (apiserver)',
  toSeen: '→ seen bound (watch)',
};
