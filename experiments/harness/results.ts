/**
 * The failover experiment's data model (thesis §4.3.2, Table 6.1) and its results file: one JSON line
 * per repetition in DIR/results.jsonl, appended as soon as the repetition ends, so an interrupted run
 * resumes where it stopped (reps already in the file are skipped).
 */
import { existsSync, readFileSync, appendFileSync } from 'node:fs';
import { z } from 'zod';
import { NodeTraceSchema } from './node-trace.ts';
import { ApiTraceSchema } from './api-trace.ts';
import { CpuWindowSchema, RepCpuSchema } from './cpu-window.ts';

/** Events of one repetition, seconds after t = 0 (the NoExecute taint, or the frozen node: failure); null if it never happened. */
export const EVENTS = ['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastScheduled', 'lastReady'] as const;
/**
 * Prio up through the critical Service's ClusterIP (kube-proxy's DNAT, as a client reaches the
 * service), measured only where a kube-proxy serves the host (kubeadm clusters); absent elsewhere.
 */
export const SERVICE_EVENT = 'prioUpService' as const;
/**
 * How the cluster found the failure by itself (failure frozen-node only; absent in taint mode):
 * `detected`, the first sign that something decided the node failed (its Ready condition Unknown or
 * False, or a NodeFailureDetected Event); `taint`, its first failure-detection NoExecute taint
 * (failure-detection.ts).
 */
export const DETECTION_EVENTS = ['detected', 'taint'] as const;
export type DetectionEventName = (typeof DETECTION_EVENTS)[number];
/**
 * The 5G user plane's protocol events (scenario 5g, experiments/5g/user-plane.ts; absent otherwise), each
 * about the new UPF pod: the SMF's PFCP association with it, its sessions established (the same UE IP
 * and TEIDs), the gNB switched to its N3 address, and connection restored (the first downlink GTP-U
 * reply through it: thesis §6.1.2's "connection restored").
 */
export const USER_PLANE_EVENTS = ['upfAssociation', 'upfSession', 'gnbUpdated', 'connectionRestored'] as const;
export type UserPlaneEventName = (typeof USER_PLANE_EVENTS)[number];
export type EventName = (typeof EVENTS)[number] | typeof SERVICE_EVENT | DetectionEventName | UserPlaneEventName;
export type FailoverEvents = Record<(typeof EVENTS)[number], number | null> & { prioUpService?: number | null } & Partial<Record<DetectionEventName | UserPlaneEventName, number | null>>;

export const EVENT_LABELS: Record<EventName, string> = {
  detected: 'Detected',
  taint: 'Taint',
  prioScheduled: 'Prio scheduled',
  prioReady: 'Prio ready',
  prioUp: 'Prio up',
  prioUpService: 'Prio up (ClusterIP)',
  prioEndpointReady: 'Prio in EndpointSlice',
  lastScheduled: 'Last scheduled',
  lastReady: 'Last ready',
  upfAssociation: 'PFCP association',
  upfSession: 'PFCP sessions',
  gnbUpdated: 'gNB updated',
  connectionRestored: 'Connection restored',
};

/**
 * The events a set of results holds, in the order of the report and summary.csv: the detection
 * events first (they come first), then EVENTS, then Prio up (ClusterIP), each optional one only
 * when some repetition measured it.
 */
export function resultEvents(results: readonly { events: FailoverEvents }[]): EventName[] {
  const has = (e: EventName) => results.some((r) => r.events[e] !== undefined);
  return [...DETECTION_EVENTS.filter(has), ...EVENTS, ...(has(SERVICE_EVENT) ? [SERVICE_EVENT] : []), ...USER_PLANE_EVENTS.filter(has)];
}

/** Table 6.1 configurations of Ulysses. */
export const ULYSSES_CONFIG_IDS = [1, 2, 3, 4, 5] as const;
export type UlyssesConfigId = (typeof ULYSSES_CONFIG_IDS)[number];
/**
 * `upstream`: stock Kubernetes (kube-controller-manager with all its controllers, kube-scheduler
 * without the extender, kubelets on containerd, no APF exemption; nothing of Ulysses on the path),
 * the baseline on a kubeadm cluster (kubeadm-configurator.ts) and on the local testbed
 * (local-configurator.ts).
 */
export const UPSTREAM = 'upstream' as const;
/**
 * `upstream-tuned`: stock Kubernetes as `upstream`, with the fastest node-failure handling its own
 * settings give (kcm's node monitor, every kubelet's Lease and status period, tolerationSeconds 0 on
 * the critical pod; upstream-tuned.ts has the values and why).
 */
export const UPSTREAM_TUNED = 'upstream-tuned' as const;
/** The configurations of stock Kubernetes (nothing of Ulysses on the path). */
export const STOCK_CONFIG_IDS = [UPSTREAM, UPSTREAM_TUNED] as const;
export type StockConfigId = (typeof STOCK_CONFIG_IDS)[number];
export const CONFIG_IDS = [...STOCK_CONFIG_IDS, ...ULYSSES_CONFIG_IDS] as const;
export type ConfigId = (typeof CONFIG_IDS)[number];
export const isStockConfig = (c: ConfigId | string): c is StockConfigId => (STOCK_CONFIG_IDS as readonly unknown[]).includes(c);
export const isUlyssesConfig = (c: ConfigId): c is UlyssesConfigId => !isStockConfig(c);

export const CONFIG_LABELS: Record<ConfigId, string> = {
  upstream: 'stock Kubernetes (kcm, kube-scheduler, kubelets on containerd)',
  'upstream-tuned': 'stock Kubernetes tuned for node failure (kcm node monitor 1 s / grace 5 s, kubelet Lease renewed every 1 s, critical pod tolerationSeconds 0)',
  1: 'vanilla',
  2: '+ kubelet pacing',
  3: '+ APF exemption',
  4: '+ CM multi-priority async',
  5: '+ CM multi-priority periodic',
};

export const emptyEvents = (): FailoverEvents => ({
  prioScheduled: null,
  prioReady: null,
  prioUp: null,
  prioEndpointReady: null,
  lastScheduled: null,
  lastReady: null,
});

const seconds = z.number().finite().nonnegative().nullable();

/**
 * A kubelet-shim policy that overrides the configuration's own (the kubelet policy comparison of
 * thesis §6.1, Fig 6.5: vanilla / fixed 1.2 s / exponential decay on one node). A configuration is
 * then identified by its Table 6.1 id plus this name: key "1/fixed" (just "1" without override).
 */
export const SHIM_POLICY_NAME = /^[a-z][a-z0-9-]*$/;

/** Run-wide conditions of an output directory (one value per directory; recorded in every line). */
export const SCENARIOS = ['failover', '5g'] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

export const RepResultSchema = z.object({
  config: z.union(CONFIG_IDS.map((c) => z.literal(c)) as unknown as [z.ZodLiteral<ConfigId>, z.ZodLiteral<ConfigId>, ...z.ZodLiteral<ConfigId>[]]),
  dn: z.number().int().min(1),
  podsPerNode: z.number().int().min(0),
  rep: z.number().int().min(0),
  events: z
    .object({
      ...(Object.fromEntries(EVENTS.map((e) => [e, seconds])) as Record<(typeof EVENTS)[number], typeof seconds>),
      [SERVICE_EVENT]: seconds.optional(),
      detected: seconds.optional(),
      taint: seconds.optional(),
      ...(Object.fromEntries(USER_PLANE_EVENTS.map((e) => [e, seconds.optional()])) as Record<UserPlaneEventName, ReturnType<typeof seconds.optional>>),
    })
    .strict(),
  /** the critical Deployment's position among the load Deployments in creation order */
  prioPosition: z.number().int().min(0).optional(),
  /** ISO time the repetition started, wall-clock seconds it took (setup + failover + cleanup) */
  startedAt: z.string().optional(),
  durationS: z.number().optional(),
  /** ISO time (ms) of t = 0 (the taint; failure frozen-node: every process of the source stopped): lines the events up with component logs (kubelet-shim, controller manager) */
  taintAt: z.string().optional(),
  /** the critical pod's sandbox/container steps on its node, from the kubelet-shim's log (local testbed) */
  prioNode: NodeTraceSchema.optional(),
  /** ms after t = 0 when the PATCH tainting the critical pod's source node returned: the apiserver had stored the failure */
  criticalTaintWrittenMs: z.number().finite().nonnegative().optional(),
  /** the critical namespace's pod and EndpointSlice writes after the taint, from the apiserver's audit log (local testbed) */
  apiTrace: ApiTraceSchema.optional(),
  /** CPU time per process group in the first windowMs after the taint (local testbed, profile cpuWindowMs) */
  cpuWindow: CpuWindowSchema.optional(),
  /** CPU per process group over the quiet spell before t = 0 (profile quietBeforeFailureSeconds): the idle cluster's cost per component */
  quietCpu: CpuWindowSchema.optional(),
  /** the machine from the taint to the last event: busy, stolen, testbed's and everyone else's CPU (local testbed) */
  repCpu: RepCpuSchema.optional(),
  /** times this repetition was run again because other work shared the machine (the recorded run is the last) */
  sharedRepeats: z.number().int().min(1).optional(),
  /**
   * the switch between upstream and Ulysses before this repetition's setup (kubeadm: the
   * manifests/install.ts steps; local testbed: kcm and the kubelets restarted) and how long it took,
   * s; absent when the repetition ran in the family of the one before
   */
  configSwitch: z.object({ to: z.string(), seconds: z.number().finite().nonnegative() }).strict().optional(),
  /**
   * what was on the failover path in this repetition, read after its events (the configurator's
   * inspect(), kubeadm and the local testbed): kcm's --controllers ("all": stock), kube-scheduler with
   * the extender, each kubelet's CRI endpoint, the running Ulysses controller manager pods, (local
   * testbed) whether the harness' in-process controller manager ran, the APF exemption FlowSchema
   */
  cluster: z
    .object({
      kcmControllers: z.string(),
      schedulerExtender: z.boolean(),
      kubeletRuntime: z.record(z.string(), z.string()),
      ulyssesControllerManagerPods: z.number().int().min(0),
      controllerManagerInProcess: z.boolean().optional(),
      apfExemption: z.boolean(),
      /**
       * kcm's node-monitor flags (--node-monitor-period, --node-monitor-grace-period) on its live
       * command line, in order; empty: kcm's defaults (5 s, 50 s). Absent in lines before upstream-tuned.
       */
      kcmNodeMonitorFlags: z.array(z.string()).optional(),
      /**
       * per node, the Lease and status periods its kubelet runs with (as the kubelet defaults its config
       * file: 40 s, 10 s, 5m unless set), or why they cannot be told (e.g. the file changed after the
       * kubelet started). Absent in lines before upstream-tuned.
       */
      kubeletHeartbeat: z
        .record(
          z.string(),
          z.union([z.object({ nodeLeaseDurationSeconds: z.number().int().positive(), nodeStatusUpdateFrequency: z.string(), nodeStatusReportFrequency: z.string() }).strict(), z.string()]),
        )
        .optional(),
    })
    .strict()
    .optional(),
  /**
   * the critical pod's NoExecute tolerations of node.kubernetes.io/not-ready and /unreachable as the
   * apiserver admitted it (its own, or the DefaultTolerationSeconds plugin's 300 s): key -> seconds,
   * null when it tolerates for ever
   */
  criticalTolerationSeconds: z.record(z.string(), z.number().int().nullable()).optional(),
  /** why some event stayed null (e.g. a timeout) */
  error: z.string().optional(),
  /** kubelet-shim policy overriding the configuration's (kubelet policy comparison) */
  shimPolicy: z.string().regex(SHIM_POLICY_NAME).optional(),
  /** false: "rate limiting off" run (the controller manager's client-side limiter disabled) */
  clientRateLimit: z.boolean().optional(),
  /** the scenario ("5g": the UPF + multi-service low-priority app); absent: failover */
  scenario: z.enum(SCENARIOS).optional(),
  /**
   * scenario 5g: what the UPF is. "eupf": eUPF with PFCP and GTP-U from the stand-ins (the user-plane
   * events); absent: the UDP echo stand-in of the older 5g runs
   */
  userPlane: z.enum(['eupf']).optional(),
  /** true: control plane and nodes on separate CPUs (profile pinCpus) */
  pinnedCpus: z.boolean().optional(),
  /**
   * how the source node failed (profile failure, --failure): "frozen-node", every process of it stopped
   * at t = 0 and no taint written by the harness; absent: the harness' NoExecute taint at t = 0
   */
  failure: z.enum(['frozen-node']).optional(),
  /** local testbed: what of the failed node was stopped at t = 0 (profile freezeSource); absent: its kubelet only */
  sourceFreeze: z.enum(['node', 'none']).optional(),
  /** the controller manager's CriticalPathHold in configuration 5, ms (profile criticalPathHoldMs) */
  criticalPathHoldMs: z.number().int().positive().optional(),
  /** t = 0 no earlier than this long after the critical pod's creation, ms (profile minCriticalAgeMs) */
  minCriticalAgeMs: z.number().int().positive().optional(),
  /** no request of the harness for this long between the configuration switch and t = 0, ms (profile quietBeforeFailureSeconds) */
  quietBeforeFailureMs: z.number().int().positive().optional(),
  /**
   * the controller manager's own measurement of the critical pod's recovery (ulysses_critical_recovery_seconds,
   * taint observed -> replacement Ready and in the EndpointSlice), s; null: it observed no single recovery
   */
  recoveryMetricS: z.number().finite().nonnegative().nullable().optional(),
  /** Prio in EndpointSlice (this harness' watch) minus recoveryMetricS, ms: the two must agree within 50 ms */
  recoveryMetricDiffMs: z.number().finite().optional(),
  /** seconds after the taint at which each of the moved pods became Ready, sorted (Fig 6.5 distributions) */
  podReady: z.array(z.number().finite().nonnegative()).optional(),
});
export type RepResult = z.infer<typeof RepResultSchema> & { config: ConfigId };

/** A configuration of a run: a Table 6.1 id, optionally with the kubelet-shim policy overridden. */
export interface Configuration {
  config: ConfigId;
  shimPolicy?: string;
}

export interface Cell extends Configuration {
  dn: number;
  podsPerNode: number;
}

/** "1", "5", "1/fixed": a configuration's key (summary.csv's config column, report rows). */
export type ConfigKey = string;
export const configKey = (c: Configuration): ConfigKey => (c.shimPolicy ? `${c.config}/${c.shimPolicy}` : `${c.config}`);

export function parseConfigKey(key: ConfigKey): Configuration {
  const [id, shimPolicy, ...rest] = key.split('/');
  const config: ConfigId | undefined = CONFIG_IDS.find((c) => String(c) === id);
  if (config === undefined || rest.length || (shimPolicy !== undefined && (!SHIM_POLICY_NAME.test(shimPolicy) || isStockConfig(config))))
    throw new Error(`configuration "${key}": expected "upstream", "upstream-tuned" or a Table 6.1 id 1..5, optionally "/<kubelet-shim policy>" (e.g. 1/fixed)`);
  return shimPolicy ? { config: config as ConfigId, shimPolicy } : { config: config as ConfigId };
}

/** "1: vanilla", "1/fixed: vanilla, kubelet-shim fixed" */
export const configLabel = (c: Configuration): string => `${configKey(c)}: ${CONFIG_LABELS[c.config]}${c.shimPolicy ? `, kubelet-shim ${c.shimPolicy}` : ''}`;

/** Known policies first in the thesis' order (vanilla, fixed, exponential decay), then by name. */
const POLICY_ORDER = ['vanilla', 'fixed', 'exponential-decay'];
export function compareConfigurations(a: Configuration, b: Configuration): number {
  const rank = (p?: string) => (p === undefined ? -1 : POLICY_ORDER.includes(p) ? POLICY_ORDER.indexOf(p) : POLICY_ORDER.length);
  const order = (c: ConfigId) => (c === UPSTREAM ? -1 : c === UPSTREAM_TUNED ? 0 : c);
  return order(a.config) - order(b.config) || rank(a.shimPolicy) - rank(b.shimPolicy) || (a.shimPolicy ?? '').localeCompare(b.shimPolicy ?? '');
}

export const repKey = (r: Cell & { rep: number }) => `c${configKey(r)}/dn${r.dn}/ppn${r.podsPerNode}/rep${r.rep}`;
export const cellKey = (c: Cell) => `c${configKey(c)}/dn${c.dn}/ppn${c.podsPerNode}`;

/** Parses results.jsonl; a bad line is an error naming the file, the line and the field. */
export function parseResults(text: string, source = 'results.jsonl'): RepResult[] {
  const out: RepResult[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new Error(`${source}:${i + 1}: not JSON (${(err as Error).message})`);
    }
    const r = RepResultSchema.safeParse(raw);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new Error(`${source}:${i + 1}: field ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    }
    out.push(r.data as RepResult);
  });
  return out;
}

export function readResults(file: string): RepResult[] {
  return existsSync(file) ? parseResults(readFileSync(file, 'utf8'), file) : [];
}

export function appendResult(file: string, r: RepResult): void {
  RepResultSchema.parse(r);
  appendFileSync(file, `${JSON.stringify(r)}\n`);
}
