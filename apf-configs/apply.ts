/**
 * Runtime toggle of the APF exemption (thesis §5.3.5: each modification can be switched at runtime):
 * server-side apply / delete of the FlowSchema(s) built by flowschemas.ts, and the checks that show
 * what the apiserver actually did with a request (APF response headers and the
 * apiserver_flowcontrol_dispatched_requests_total metric).
 *
 * Both operations are idempotent: re-applying an unchanged FlowSchema is a server-side no-op (same
 * resourceVersion), removing an absent one returns false.
 */
import fetch from 'node-fetch';
import type { V1FlowSchema, V1FlowSchemaList, V1PriorityLevelConfigurationList } from '@kubernetes/client-node';
import { ApiError, apiRequest, fetchInit, isNotFound, type KubeAccess } from '../core/kube.ts';
import { metricSamples } from '../core/metrics.ts';
import {
  COMPONENT_LABEL,
  COMPONENT_VALUE,
  DEFAULT_FLOW_SCHEMA_NAME,
  FLOWCONTROL_API_PATH,
  MANAGED_BY_LABEL,
  MANAGED_BY_VALUE,
  criticalNamespaceFlowSchemas,
  shadowingFlowSchemas,
  type CriticalNamespaceOptionsInput,
} from './flowschemas.ts';

export const FIELD_MANAGER = 'ulysses';
/** Response headers set by the apiserver's APF filter on every classified request. */
export const HEADER_FLOW_SCHEMA_UID = 'X-Kubernetes-PF-FlowSchema-UID';
export const HEADER_PRIORITY_LEVEL_UID = 'X-Kubernetes-PF-PriorityLevel-UID';
export const DISPATCHED_METRIC = 'apiserver_flowcontrol_dispatched_requests_total';

const flowSchemaPath = (name: string) => `${FLOWCONTROL_API_PATH}/flowschemas/${encodeURIComponent(name)}`;

export interface ApplyApfExemptionOptions extends CriticalNamespaceOptionsInput {
  /**
   * Wait (up to this many ms) until the apiserver's APF config controller has written each
   * FlowSchema's `Dangling` status condition. Reliable for a creation; an update of an existing
   * FlowSchema is not observable this way (the condition carries no observedGeneration). A condition
   * still missing when the wait ends is reported in `statusPending`, not an error: the controller
   * classifies by the new spec as soon as it digests it, and only its status write is held back
   * (at most 6 status updates per FlowSchema name a minute, then 30-75 s later: k8s.io/apiserver
   * pkg/util/flowcontrol/apf_controller.go digestConfigObjects/shouldDelayUpdate). Dangling=True
   * (a missing priority level) is an error. 0 / undefined: do not wait.
   */
  waitDigestedMs?: number;
}

export interface ApplyApfExemptionResult {
  /** The FlowSchemas as returned by the apiserver (uid, resourceVersion, ...). */
  flowSchemas: V1FlowSchema[];
  /** Names of existing non-exempt FlowSchemas that could win over ours (should be empty). */
  shadowedBy: string[];
  /** FlowSchemas whose status condition the apiserver had not written when waitDigestedMs ran out. */
  statusPending: string[];
}

/**
 * Server-side applies the exemption FlowSchema(s) (PATCH application/apply-patch+yaml,
 * fieldManager "ulysses", force=true). Options are validated first (ConfigError names the field).
 */
export async function applyApfExemption(kc: KubeAccess, opts: ApplyApfExemptionOptions): Promise<ApplyApfExemptionResult> {
  const { waitDigestedMs, ...fsOpts } = opts;
  const desired = criticalNamespaceFlowSchemas(fsOpts);
  const applied: V1FlowSchema[] = [];
  for (const fs of desired) {
    applied.push(
      await apiRequest<V1FlowSchema>(kc, 'PATCH', flowSchemaPath(fs.metadata!.name!), {
        query: { fieldManager: FIELD_MANAGER, force: true },
        body: fs, // JSON is YAML: valid for application/apply-patch+yaml
        contentType: 'application/apply-patch+yaml',
      }),
    );
  }
  const statusPending: string[] = [];
  if (waitDigestedMs) {
    for (const fs of applied) if (!(await waitDigested(kc, fs.metadata!.name!, waitDigestedMs))) statusPending.push(fs.metadata!.name!);
  }
  const all = await apiRequest<V1FlowSchemaList>(kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas`);
  const shadowedBy = new Set<string>();
  for (const fs of desired) for (const s of shadowingFlowSchemas(fs, all.items)) shadowedBy.add(s.metadata!.name!);
  return { flowSchemas: applied, shadowedBy: [...shadowedBy].sort(), statusPending };
}

/** True once the apiserver wrote Dangling=False, false if it had not by the deadline; Dangling=True throws. */
async function waitDigested(kc: KubeAccess, name: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const fs = await apiRequest<V1FlowSchema>(kc, 'GET', flowSchemaPath(name));
    const dangling = fs.status?.conditions?.find((c) => c.type === 'Dangling');
    if (dangling?.status === 'False') return true;
    if (dangling?.status === 'True') throw new Error(`FlowSchema ${name} is dangling: ${dangling.message ?? dangling.reason ?? ''}`);
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The exemption FlowSchema `name`, or undefined when it does not exist. */
export async function readApfExemption(kc: KubeAccess, name: string = DEFAULT_FLOW_SCHEMA_NAME): Promise<V1FlowSchema | undefined> {
  try {
    return await apiRequest<V1FlowSchema>(kc, 'GET', flowSchemaPath(name));
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * Deletes the exemption FlowSchema `name`. Returns false when it does not exist (idempotent).
 * Refuses to delete a FlowSchema not labelled as ours (app.kubernetes.io/managed-by=ulysses), and
 * deletes with a UID precondition so a concurrently re-created object is left alone.
 */
export async function removeApfExemption(kc: KubeAccess, name: string = DEFAULT_FLOW_SCHEMA_NAME): Promise<boolean> {
  const fs = await readApfExemption(kc, name);
  if (!fs) return false;
  const labels = fs.metadata?.labels ?? {};
  if (labels[MANAGED_BY_LABEL] !== MANAGED_BY_VALUE || labels[COMPONENT_LABEL] !== COMPONENT_VALUE) {
    throw new Error(`refusing to delete FlowSchema ${name}: not managed by ulysses (labels ${JSON.stringify(labels)})`);
  }
  try {
    await apiRequest(kc, 'DELETE', flowSchemaPath(name), {
      body: { apiVersion: 'v1', kind: 'DeleteOptions', preconditions: { uid: fs.metadata!.uid } },
    });
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw err;
  }
}

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  text: string;
}

/**
 * A request through kc's credentials (client certs or bearer token, CA) that exposes the response
 * headers, which core/kube.ts apiRequest hides. Never throws on HTTP errors.
 */
export async function rawRequest(kc: KubeAccess, method: string, path: string, opts: { timeoutMs?: number } = {}): Promise<RawResponse> {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('kubeconfig has no current cluster');
  const init = await fetchInit(kc, method);
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), opts.timeoutMs ?? 30_000);
  init.signal = ctrl.signal as never;
  try {
    const res = await fetch(cluster.server + path, init);
    const headers: Record<string, string> = {};
    res.headers.forEach((v, k) => (headers[k.toLowerCase()] = v));
    return { status: res.status, headers, text: await res.text() };
  } finally {
    clearTimeout(timer);
  }
}

export interface ObservedClassification {
  /** HTTP status of the probe request (APF classifies before authorization: a 403 is classified too). */
  status: number;
  /** X-Kubernetes-PF-FlowSchema-UID, absent if the request was not classified (e.g. 401). */
  flowSchemaUID?: string;
  /** X-Kubernetes-PF-PriorityLevel-UID. */
  priorityLevelUID?: string;
}

/**
 * Issues GET `path` with kc's identity and returns how APF classified it (the response headers).
 * APF classifies by the request's user and namespace, so use the identity whose traffic you want
 * to check (an admin in system:masters always matches the built-in `exempt` FlowSchema).
 */
export async function observedPriorityLevel(kc: KubeAccess, path: string): Promise<ObservedClassification> {
  const res = await rawRequest(kc, 'GET', path);
  return {
    status: res.status,
    flowSchemaUID: res.headers[HEADER_FLOW_SCHEMA_UID.toLowerCase()],
    priorityLevelUID: res.headers[HEADER_PRIORITY_LEVEL_UID.toLowerCase()],
  };
}

/** Maps the UIDs of an observation to FlowSchema / PriorityLevelConfiguration names (needs list rights). */
export async function classificationNames(kc: KubeAccess, obs: ObservedClassification): Promise<{ flowSchema?: string; priorityLevel?: string }> {
  const [fss, pls] = await Promise.all([
    apiRequest<V1FlowSchemaList>(kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas`),
    apiRequest<V1PriorityLevelConfigurationList>(kc, 'GET', `${FLOWCONTROL_API_PATH}/prioritylevelconfigurations`),
  ]);
  return {
    flowSchema: fss.items.find((f) => f.metadata?.uid === obs.flowSchemaUID)?.metadata?.name,
    priorityLevel: pls.items.find((p) => p.metadata?.uid === obs.priorityLevelUID)?.metadata?.name,
  };
}

/**
 * Sum of apiserver_flowcontrol_dispatched_requests_total over the samples matching the given labels,
 * read from the apiserver's /metrics (kc needs GET on the /metrics non-resource URL).
 */
export async function dispatchedRequests(kc: KubeAccess, match: { flowSchema?: string; priorityLevel?: string }): Promise<number> {
  const res = await rawRequest(kc, 'GET', '/metrics');
  if (res.status !== 200) throw new ApiError(`GET /metrics: ${res.status}`, res.status);
  return metricSamples(res.text, new Set([DISPATCHED_METRIC]))
    .filter((s) => (match.flowSchema === undefined || s.labels.flow_schema === match.flowSchema) && (match.priorityLevel === undefined || s.labels.priority_level === match.priorityLevel))
    .reduce((a, s) => a + s.value, 0);
}
