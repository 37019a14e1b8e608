/**
 * Operator what-if: "would this RT pod be admitted on these nodes, and why (not)?" — the same
 * per-node tests the scheduler extender runs (thesis §5.3.2 (b)), with every number shown. Pure:
 * the CLI wrapper (reading nodes/pods from a file or the cluster) lives elsewhere.
 *
 * Input: `{ nodes: [{ name, kind, capacity, pods: [{ name, uid?, rt, cores? }] }], pod: { name, uid?, rt } }`
 * where `kind` is 'deferrable-server' | 'budget-period' | 'edf', `capacity` is the value of the node
 * annotation `ulysses.io/rt-capacity` and `rt` the value of the pod annotation `ulysses.io/rt` (both
 * as JSON text or as decoded objects). `cores` optionally pins an existing pod: [core] for a server,
 * one core per cpu for a reservation, [core] or the core of each task (task order) for EDF (the sorted
 * set of cores older extenders wrote is read too, see edfPinnedAssignment); a pin that does not fit
 * the node (a core it does not have) is ignored and reported in `ignored`; unpinned existing pods are
 * placed in the given order by the same rule as a new pod.
 *
 * Per node kind:
 * - deferrable-server: the pod's server goes on the least loaded core (Σ C_S/T_S) where the whole
 *   core stays schedulable (`coreSchedulable`); reported: every server's R_S and every task's exact
 *   worst-case response time on that core (on failure: the analysis on the least loaded core);
 *   maxUtilization, if the node gives one, is an extra cap on Σ C_S/T_S (default 1);
 * - budget-period: `placeReservation` (default maxUtilization 0.95); reported: core utilizations and
 *   the pod's tasks' periodic-resource bounds;
 * - edf: `placeEdfTasks` (bound: maxUtilization, default 1); reported: each task's core,
 *   utilization and density, and which EDF test each core used.
 * Score of a node that admits the pod (thesis: "score by remaining utilization of the least loaded
 * core"): round(10 · (U_max − min_core U_after) / U_max); 0 when the pod does not fit.
 *
 * Never throws: malformed input is reported in `error` (top level) or in a node's `reason`.
 */
import { z } from 'zod';
import { ConfigError, validateConfig } from '../../core/config.ts';
import { parseRtAnnotation, parseRtCapacityAnnotation, RT_KINDS, type RtCapacity, type RtKind, type RtPodSpec } from './annotations.ts';
import { DEFAULT_MAX_UTILIZATION, coreUtilization, placeReservation, type CoreReservation } from './budget-period.ts';
import { coreSchedulable, placeServer, type CoreAnalysis, type DeferrableServer } from './deferrable-server.ts';
import { edfCoreSchedulable, placeEdfTasks, summaryUnits } from './edf.ts';
import { AnalysisBudgetExceeded, relativeDeadline, spend, taskDensity, taskUtilization, type AnalysisBudget, type RtTask } from './task.ts';

export interface WhatIfPod {
  readonly name: string;
  readonly uid?: string;
  /** The `ulysses.io/rt` annotation (JSON text or decoded). */
  readonly rt: unknown;
  /** Pin an existing pod to cores (see header). */
  readonly cores?: readonly number[];
}

export interface WhatIfNode {
  readonly name: string;
  readonly kind: RtKind;
  /** The `ulysses.io/rt-capacity` annotation (JSON text or decoded). */
  readonly capacity: unknown;
  readonly pods?: readonly WhatIfPod[];
}

export interface WhatIfInput {
  readonly nodes: readonly WhatIfNode[];
  readonly pod: WhatIfPod;
}

export interface TaskReport {
  readonly pod: string;
  /** Index in the pod's annotation. */
  readonly task: number;
  readonly core: number | null;
  readonly wcetUs: number;
  readonly periodUs: number;
  readonly deadlineUs: number;
  readonly utilization: number;
  readonly density: number;
  /** Worst-case response time (exact for DS, periodic-resource bound for budget/period, null for EDF). */
  readonly responseTimeUs: number | null;
  readonly schedulable: boolean;
  readonly method: 'exact' | 'periodic-resource-bound' | 'edf-utilization' | 'edf-density';
  readonly reason?: string;
}

export interface ServerReport {
  readonly pod: string;
  readonly core: number;
  readonly budgetUs: number;
  readonly periodUs: number;
  /** 0 = highest priority on the core. */
  readonly rank: number;
  readonly responseTimeUs: number | null;
  readonly schedulable: boolean;
  readonly reason?: string;
}

export interface NodeReport {
  readonly node: string;
  readonly kind: RtKind;
  readonly schedulable: boolean;
  readonly reason: string;
  /**
   * Cores given to the pod (null when it does not fit): [core] of a deferrable server, the cores of a
   * reservation (ascending), the core of each EDF task in task order. Bind records it as `ulysses.io/rt-cores`.
   */
  readonly cores: readonly number[] | null;
  /** Per-core utilization (Σ C_S/T_S, Σ Q/P or Σ C/T): after placement when schedulable, else before. */
  readonly coreUtilization: readonly number[];
  readonly maxUtilization: number;
  readonly leastLoadedCoreRemaining: number;
  /** 0..10. */
  readonly score: number;
  readonly servers: readonly ServerReport[];
  readonly tasks: readonly TaskReport[];
  /**
   * Existing pods' reservations that do not fit the node as configured now (a core beyond its
   * cores, a reservation over the wrong number of cores): ignored, the pod placed by the rule as if
   * unpinned (left out if it does not fit that way either); they never make the node unusable.
   */
  readonly ignored?: readonly string[];
  /** Refused because the request's analysis budget ran out (not a property of the node: not to be cached). */
  readonly budgetExceeded?: true;
}

export interface WhatIfResult {
  readonly pod: string;
  readonly kind: RtKind | null;
  readonly nodes: readonly NodeReport[];
  /** Names of the nodes that admit the pod, best score first. */
  readonly schedulableOn: readonly string[];
  readonly error?: string;
}

const podSchema = z.object({
  name: z.string().min(1),
  uid: z.string().min(1).optional(),
  rt: z.unknown(),
  cores: z.array(z.number().int().min(0)).optional(),
});
const inputSchema = z.object({
  nodes: z.array(
    z.object({
      name: z.string().min(1),
      kind: z.enum(RT_KINDS as [RtKind, ...RtKind[]]),
      capacity: z.unknown(),
      pods: z.array(podSchema).default([]),
    }),
  ),
  pod: podSchema,
});

/** round(10 · remaining / bound) of the least loaded core, clamped to 0..10. */
export function leastLoadedCoreScore(coreUtilizations: readonly number[], bound: number): number {
  if (coreUtilizations.length === 0 || !(bound > 0)) return 0;
  const remaining = bound - Math.min(...coreUtilizations);
  return Math.max(0, Math.min(10, Math.round((10 * remaining) / bound)));
}

export function analyze(input: WhatIfInput): WhatIfResult {
  let parsed: z.output<typeof inputSchema>;
  try {
    parsed = validateConfig(inputSchema, input, 'what-if input');
  } catch (err) {
    const msg = err instanceof ConfigError ? err.issues.map((i) => `what-if input: ${i.field}: ${i.message}`).join('; ') : String(err);
    const name = typeof (input as { pod?: { name?: unknown } } | null)?.pod?.name === 'string' ? (input.pod.name as string) : '';
    return { pod: name, kind: null, nodes: [], schedulableOn: [], error: msg };
  }
  const spec = parseRtAnnotation(parsed.pod.rt);
  if (!spec.ok) return { pod: parsed.pod.name, kind: null, nodes: [], schedulableOn: [], error: `pod ${parsed.pod.name}: ${spec.error}` };
  const pod = { name: parsed.pod.name, uid: parsed.pod.uid ?? parsed.pod.name, spec: spec.value };
  const nodes = parsed.nodes.map((n) => {
    try {
      return analyzeNode(n, pod);
    } catch (err) {
      // Defensive: the analyses do not throw on any input the schemas accept.
      return failed(n.name, n.kind, 1, [], `internal error: ${err instanceof Error ? err.message : String(err)}`);
    }
  });
  const schedulableOn = nodes
    .map((n, i) => ({ n, i }))
    .filter(({ n }) => n.schedulable)
    .sort((a, b) => b.n.score - a.n.score || a.i - b.i)
    .map(({ n }) => n.node);
  return { pod: pod.name, kind: pod.spec.kind, nodes, schedulableOn };
}

export interface NewPod {
  readonly name: string;
  readonly uid: string;
  readonly spec: RtPodSpec;
}

type InputNode = z.output<typeof inputSchema>['nodes'][number];
type InputPod = z.output<typeof podSchema>;

/** An existing pod whose `ulysses.io/rt` is already parsed (the extender keeps these cached). */
export interface ParsedRtPod {
  readonly name: string;
  readonly uid: string;
  readonly spec: RtPodSpec;
  /** Pin (see header). */
  readonly cores?: readonly number[] | undefined;
}

/** A node whose label/annotations are already parsed. */
export interface ParsedRtNode {
  readonly name: string;
  readonly kind: RtKind;
  readonly capacity: RtCapacity;
  readonly pods: readonly ParsedRtPod[];
}

export interface AnalyzeOptions {
  /**
   * Compute the exact deferrable-server response times of every task even when the cheaper
   * periodic-resource bound already proves it (default true: the what-if reports them; the
   * extender's filter only needs the verdict and passes false).
   */
  readonly exactResponseTimes?: boolean;
  /** Stop each core's analysis at its first failure (the extender: only the verdict matters). */
  readonly stopAtFirstFailure?: boolean;
  /**
   * Work bound (task.ts AnalysisBudget, shared by every node of one request): past it the node is
   * refused with "analysis budget exceeded: N tasks x M servers".
   */
  readonly budget?: AnalysisBudget;
}

type ParsedNode = ParsedRtNode;
type ParsedPod = ParsedRtPod;

function failed(
  node: string,
  kind: RtKind,
  maxUtilization: number,
  util: readonly number[],
  reason: string,
  extra: { servers?: ServerReport[]; tasks?: TaskReport[] } = {},
): NodeReport {
  return {
    node,
    kind,
    schedulable: false,
    reason,
    cores: null,
    coreUtilization: util,
    maxUtilization,
    leastLoadedCoreRemaining: util.length ? maxUtilization - Math.min(...util) : 0,
    score: 0,
    servers: extra.servers ?? [],
    tasks: extra.tasks ?? [],
  };
}

function succeeded(
  node: string,
  kind: RtKind,
  maxUtilization: number,
  util: readonly number[],
  cores: readonly number[],
  reason: string,
  extra: { servers?: ServerReport[]; tasks?: TaskReport[] },
): NodeReport {
  return {
    node,
    kind,
    schedulable: true,
    reason,
    cores,
    coreUtilization: util,
    maxUtilization,
    leastLoadedCoreRemaining: maxUtilization - Math.min(...util),
    score: leastLoadedCoreScore(util, maxUtilization),
    servers: extra.servers ?? [],
    tasks: extra.tasks ?? [],
  };
}

function kindMismatch(spec: RtPodSpec, nodeKind: RtKind): string | undefined {
  if (spec.kind === nodeKind) return undefined;
  const declares = { 'deferrable-server': 'a "server"', 'budget-period': 'a "reservation"', edf: 'only "tasks"' }[spec.kind];
  const needs = { 'deferrable-server': 'a "server"', 'budget-period': 'a "reservation"', edf: 'only "tasks"' }[nodeKind];
  return `the pod's ulysses.io/rt declares ${declares} but ${nodeKind} nodes need ${needs}`;
}

function existingSpec(p: InputPod): { ok: true; spec: RtPodSpec } | { ok: false; reason: string } {
  const s = parseRtAnnotation(p.rt);
  if (!s.ok) return { ok: false, reason: `existing pod ${p.name}: ${s.error}` };
  return { ok: true, spec: s.value };
}

function badPin(p: ParsedPod, nCores: number): string | undefined {
  const bad = (p.cores ?? []).find((c) => c >= nCores);
  return bad === undefined ? undefined : `existing pod ${p.name}: pinned core ${bad} does not exist (node has ${nCores} cores)`;
}

function analyzeNode(n: InputNode, pod: NewPod): NodeReport {
  const cap = parseRtCapacityAnnotation(n.capacity);
  if (!cap.ok) return failed(n.name, n.kind, 1, [], `node ${n.name}: ${cap.error}`);
  const maxU = cap.value.maxUtilization ?? (n.kind === 'budget-period' ? DEFAULT_MAX_UTILIZATION : 1);
  const mismatch = kindMismatch(pod.spec, n.kind);
  if (mismatch) return failed(n.name, n.kind, maxU, new Array<number>(cap.value.cores).fill(0), mismatch);
  const pods: ParsedRtPod[] = [];
  for (const p of n.pods) {
    const e = existingSpec(p);
    if (!e.ok) return failed(n.name, n.kind, maxU, new Array<number>(cap.value.cores).fill(0), e.reason);
    pods.push({ name: p.name, uid: p.uid ?? p.name, spec: e.spec, cores: p.cores });
  }
  return analyzeRtNode({ name: n.name, kind: n.kind, capacity: cap.value, pods }, pod);
}

/**
 * The per-node test of {@link analyze} on already parsed objects (no validation cost): the
 * extender calls this for every RT node with its cached parses.
 */
export function analyzeRtNode(n: ParsedRtNode, pod: NewPod, options: AnalyzeOptions = {}): NodeReport {
  const { cores } = n.capacity;
  const maxU = n.capacity.maxUtilization ?? (n.kind === 'budget-period' ? DEFAULT_MAX_UTILIZATION : 1);
  const zeros = () => new Array<number>(cores).fill(0);
  const mismatch = kindMismatch(pod.spec, n.kind);
  if (mismatch) return failed(n.name, n.kind, maxU, zeros(), mismatch);
  for (const p of n.pods) {
    const m = kindMismatch(p.spec, n.kind);
    if (m) return failed(n.name, n.kind, maxU, zeros(), `existing pod ${p.name}: ${m}`);
  }
  const ignored: string[] = [];
  const withIgnored = (r: NodeReport): NodeReport => (ignored.length ? { ...r, ignored } : r);
  try {
    options.budget?.spend(1);
    switch (n.kind) {
      case 'deferrable-server':
        return withIgnored(analyzeDsNode(n, pod, cores, maxU, options, ignored));
      case 'budget-period':
        return withIgnored(analyzeBpNode(n, pod, cores, maxU, options.budget, ignored));
      case 'edf':
        return withIgnored(analyzeEdfNode(n, pod, cores, maxU, options.budget, ignored));
    }
  } catch (err) {
    if (!(err instanceof AnalysisBudgetExceeded)) throw err;
    const tasks = n.pods.reduce((sum, p) => sum + p.spec.tasks.length, pod.spec.tasks.length);
    const what = n.kind === 'deferrable-server' ? 'servers' : n.kind === 'budget-period' ? 'reservations' : 'pods';
    return {
      ...failed(n.name, n.kind, maxU, zeros(), `analysis budget exceeded: ${tasks} tasks x ${n.pods.length + 1} ${what} on ${cores} core(s) (budget ${err.budget.requestLimit} work units per request)`),
      budgetExceeded: true,
    };
  }
}

// --- deferrable server ------------------------------------------------------------------------

function dsReports(core: number, analysis: CoreAnalysis, servers: readonly DeferrableServer[], names: ReadonlyMap<string, string>) {
  const serverReports: ServerReport[] = [];
  const taskReports: TaskReport[] = [];
  for (const sa of analysis.servers) {
    const s = servers[sa.index]!;
    const name = names.get(s.podUid) ?? s.podUid;
    serverReports.push({
      pod: name,
      core,
      budgetUs: s.budgetUs,
      periodUs: s.periodUs,
      rank: sa.rank,
      responseTimeUs: sa.server.responseTimeUs,
      schedulable: sa.server.schedulable,
      ...(sa.server.reason ? { reason: sa.server.reason } : {}),
    });
    sa.tasks.forEach((r, k) => taskReports.push(taskReport(name, k, core, s.tasks[k]!, r.responseTimeUs, r.schedulable, r.method, r.reason)));
  }
  return { servers: serverReports, tasks: taskReports };
}

function taskReport(
  pod: string,
  task: number,
  core: number | null,
  t: RtTask,
  responseTimeUs: number | null,
  schedulable: boolean,
  method: TaskReport['method'],
  reason?: string,
): TaskReport {
  return {
    pod,
    task,
    core,
    wcetUs: t.wcetUs,
    periodUs: t.periodUs,
    deadlineUs: relativeDeadline(t),
    utilization: taskUtilization(t),
    density: taskDensity(t),
    responseTimeUs,
    schedulable,
    method,
    ...(reason ? { reason } : {}),
  };
}

function analyzeDsNode(n: ParsedNode, pod: NewPod, nCores: number, maxU: number, options: AnalyzeOptions, ignored: string[]): NodeReport {
  const exactResponseTimes = options.exactResponseTimes ?? true;
  const { budget, stopAtFirstFailure } = options;
  const coreServers: DeferrableServer[][] = Array.from({ length: nCores }, () => []);
  const names = new Map<string, string>();
  const util = () => coreServers.map((c) => c.reduce((u, s) => u + s.budgetUs / s.periodUs, 0));
  for (const p of n.pods) {
    const e = p;
    if (e.spec.kind !== 'deferrable-server') continue; // unreachable: kind checked
    const uid = p.uid;
    names.set(uid, p.name);
    const server: DeferrableServer = { podUid: uid, ...e.spec.server, tasks: e.spec.tasks };
    const pin = badPin(p, nCores);
    if (pin) ignored.push(`${pin}: reservation ignored, the pod placed by the rule`);
    else if (p.cores?.length) {
      coreServers[p.cores[0]!]!.push(server);
      continue;
    }
    const placed = placeServer(coreServers, server, { maxUtilization: maxU, stopAtFirstFailure: true, ...(budget ? { budget } : {}) });
    if (!placed.ok && pin) {
      ignored.push(`existing pod ${p.name}: does not fit by the rule either: left out (${placed.reason})`);
      continue;
    }
    if (!placed.ok) return failed(n.name, n.kind, maxU, util(), `node already overloaded: existing pod ${p.name} does not fit (${placed.reason})`);
    coreServers[placed.core]!.push(server);
  }
  if (pod.spec.kind !== 'deferrable-server') return failed(n.name, n.kind, maxU, util(), 'kind mismatch');
  names.set(pod.uid, pod.name);
  const server: DeferrableServer = { podUid: pod.uid, ...pod.spec.server, tasks: pod.spec.tasks };
  const before = util();
  const placed = placeServer(coreServers, server, { maxUtilization: maxU, exactResponseTimes, ...(stopAtFirstFailure ? { stopAtFirstFailure } : {}), ...(budget ? { budget } : {}) });
  if (!placed.ok) {
    const least = before.map((_, i) => i).sort((a, b) => before[a]! - before[b]! || a - b)[0]!;
    const reports = placed.analysis ? dsReports(least, placed.analysis, [...coreServers[least]!, server], names) : {};
    return failed(n.name, n.kind, maxU, before, `does not fit on any core: ${placed.reason}`, reports);
  }
  coreServers[placed.core]!.push(server);
  const after = util();
  const reports = dsReports(placed.core, placed.analysis, coreServers[placed.core]!, names);
  const nTasks = reports.tasks.length;
  return succeeded(
    n.name,
    n.kind,
    maxU,
    after,
    [placed.core],
    `fits on core ${placed.core}: ${reports.servers.length} server(s) and ${nTasks} task(s) meet their deadlines (core utilization ${after[placed.core]!.toFixed(4)})`,
    reports,
  );
}

// --- budget / period --------------------------------------------------------------------------

function analyzeBpNode(n: ParsedNode, pod: NewPod, nCores: number, maxU: number, budget: AnalysisBudget | undefined, ignored: string[]): NodeReport {
  const coreRes: CoreReservation[][] = Array.from({ length: nCores }, () => []);
  const util = () => coreRes.map(coreUtilization);
  for (const p of n.pods) {
    const e = p;
    if (e.spec.kind !== 'budget-period') continue;
    const { runtimeUs, periodUs, cpus } = e.spec.reservation;
    const pin = badPin(p, nCores) ?? (p.cores?.length && new Set(p.cores).size !== cpus ? `existing pod ${p.name}: cores must list ${cpus} distinct core(s), got ${JSON.stringify(p.cores)}` : undefined);
    if (pin) ignored.push(`${pin}: reservation ignored, the pod placed by the rule`);
    else if (p.cores?.length) {
      for (const c of p.cores) coreRes[c]!.push({ runtimeUs, periodUs, podUid: p.uid });
      continue;
    }
    const placed = placeReservation(coreRes, { ...e.spec.reservation, podUid: p.uid }, { maxUtilization: maxU, budget });
    if (!placed.ok && pin) {
      ignored.push(`existing pod ${p.name}: does not fit by the rule either: left out (${placed.reason})`);
      continue;
    }
    if (!placed.ok) return failed(n.name, n.kind, maxU, util(), `node already overloaded: existing pod ${p.name} does not fit (${placed.reason})`);
    for (const c of placed.cores) coreRes[c]!.push({ runtimeUs, periodUs, podUid: p.uid });
  }
  if (pod.spec.kind !== 'budget-period') return failed(n.name, n.kind, maxU, util(), 'kind mismatch');
  const spec = pod.spec;
  const placed = placeReservation(coreRes, { ...spec.reservation, podUid: pod.uid, tasks: spec.tasks }, { maxUtilization: maxU, budget });
  const tasks = (placed.tasks ?? []).map((r, k) =>
    taskReport(pod.name, k, placed.ok ? placed.cores[0]! : null, spec.tasks[k]!, r.responseTimeUs, r.schedulable, r.method, r.reason),
  );
  if (!placed.ok) return failed(n.name, n.kind, maxU, util(), placed.reason, { tasks });
  const { runtimeUs, periodUs } = spec.reservation;
  return succeeded(
    n.name,
    n.kind,
    maxU,
    placed.utilizationAfter,
    placed.cores,
    `fits on core(s) ${placed.cores.join(', ')}: ${runtimeUs}/${periodUs} per core, utilization after ` +
      placed.cores.map((c) => placed.utilizationAfter[c]!.toFixed(4)).join(', ') +
      ` <= ${maxU}` +
      (tasks.length ? `; ${tasks.length} task(s) meet their deadlines inside the reservation` : ''),
    { tasks },
  );
}

// --- EDF --------------------------------------------------------------------------------------

function analyzeEdfNode(n: ParsedNode, pod: NewPod, nCores: number, maxU: number, budget: AnalysisBudget | undefined, ignored: string[]): NodeReport {
  const coreTasks: RtTask[][] = Array.from({ length: nCores }, () => []);
  const owner: Array<Array<{ pod: string; task: number }>> = Array.from({ length: nCores }, () => []);
  // per-core summaries are work too (1 unit per core and per task, as a core test): counted
  const util = () => {
    spend(budget, summaryUnits(coreTasks));
    return coreTasks.map((c) => c.reduce((u, t) => u + taskUtilization(t), 0));
  };
  for (const p of n.pods) {
    const e = p;
    const tasks = e.spec.tasks;
    const pin = badPin(p, nCores);
    if (pin) ignored.push(`${pin}: reservation ignored, the pod placed by the rule`);
    let assignment: readonly number[];
    if (p.cores?.length && !pin) {
      assignment = edfPinnedAssignment(coreTasks, tasks, p.cores, maxU, budget);
    } else {
      const placed = placeEdfTasks(coreTasks, tasks, maxU, budget);
      if (!placed.ok && pin) {
        ignored.push(`existing pod ${p.name}: does not fit by the rule either: left out (${placed.reason})`);
        continue;
      }
      if (!placed.ok) return failed(n.name, n.kind, maxU, util(), `node already overloaded: existing pod ${p.name} does not fit (${placed.reason})`);
      assignment = placed.assignment;
    }
    tasks.forEach((t, k) => {
      coreTasks[assignment[k]!]!.push(t);
      owner[assignment[k]!]!.push({ pod: p.name, task: k });
    });
  }
  const placed = placeEdfTasks(coreTasks, pod.spec.tasks, maxU, budget);
  if (!placed.ok) {
    const method = (t: RtTask) => (relativeDeadline(t) < t.periodUs ? 'edf-density' : 'edf-utilization');
    const tasks = pod.spec.tasks.map((t, k) => taskReport(pod.name, k, null, t, null, false, method(t), placed.reason));
    return failed(n.name, n.kind, maxU, util(), placed.reason, { tasks });
  }
  pod.spec.tasks.forEach((t, k) => {
    coreTasks[placed.assignment[k]!]!.push(t);
    owner[placed.assignment[k]!]!.push({ pod: pod.name, task: k });
  });
  const used = [...new Set(placed.assignment)].sort((a, b) => a - b);
  // recorded (ulysses.io/rt-cores) as the core of each task, in task order
  const tasks: TaskReport[] = [];
  spend(budget, summaryUnits(used.map((c) => coreTasks[c]!)));
  const results = used.map((c) => edfCoreSchedulable(coreTasks[c]!, maxU));
  used.forEach((c, k) => {
    const result = results[k]!;
    const method = result.test === 'utilization' ? 'edf-utilization' : 'edf-density';
    coreTasks[c]!.forEach((t, i) => tasks.push(taskReport(owner[c]![i]!.pod, owner[c]![i]!.task, c, t, null, result.schedulable, method)));
  });
  const tests = used.map((c, k) => {
    const r = results[k]!;
    return `core ${c}: ${r.test} ${r.load.toFixed(4)} <= ${r.bound} (${r.exact ? 'exact' : 'sufficient'})`;
  });
  return succeeded(n.name, n.kind, maxU, util(), placed.assignment, `fits: ${tests.join('; ')}`, { tasks });
}

/**
 * The core of each task of an EDF pod pinned by its `ulysses.io/rt-cores`: one core per task, in
 * task order (what bind writes); one core for every task; or (the record older extenders wrote:
 * the sorted set of the cores used, fewer entries than tasks) the tasks placed again by the same
 * worst-fit-decreasing rule onto those cores only, over the bound if they must (the pod runs there:
 * its load counts). A set with exactly one core per task cannot be told from the per-task record
 * and is read as one.
 */
function edfPinnedAssignment(
  coreTasks: readonly (readonly RtTask[])[],
  tasks: readonly RtTask[],
  pinned: readonly number[],
  maxU: number,
  budget: AnalysisBudget | undefined,
): readonly number[] {
  if (pinned.length === tasks.length) return pinned;
  if (pinned.length === 1) return tasks.map(() => pinned[0]!);
  const set = [...new Set(pinned)];
  const sub = set.map((c) => coreTasks[c]!);
  let placed = placeEdfTasks(sub, tasks, maxU, budget);
  if (!placed.ok) placed = placeEdfTasks(sub, tasks, Number.POSITIVE_INFINITY, budget);
  return placed.ok ? placed.assignment.map((i) => set[i]!) : tasks.map((_, k) => set[k % set.length]!);
}
