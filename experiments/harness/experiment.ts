/**
 * `ulysses experiment failover`: the Table 6.1 comparison of thesis §6.1 (issue 7). Runs every
 * (configuration, DN, pods per node, repetition) of the plan, interleaving configurations inside each
 * repetition so slow drifts of the machine hit all of them alike; appends each repetition to
 * DIR/results.jsonl (resumable: done reps are skipped), returns the cluster to its verified initial
 * state between repetitions, then writes summary.csv, report.md and the figures.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ClusterConfigurator } from './configurator.ts';
import { META_FILE, RESULTS_FILE, writeOutputs, type OutputFiles } from './outputs.ts';
import { ProgressBar, formatDuration, progressLine } from './progress.ts';
import type { ReportMeta } from './report.ts';
import { appendResult, configKey, readResults, repKey, type Cell, type ConfigId, type EventName, type RepResult, type ScenarioName } from './results.ts';
import { captureBaseline, criticalPosition, loadDeployments, prepareScenario, restoreInitialState, runRep, type ScenarioOptions, type Topology } from './scenario.ts';
import type { NodeTrace } from './node-trace.ts';
import type { ApiTrace } from './api-trace.ts';
import { formatOutside, sharedMachine, type CpuWindowProbe, type MachineCpuAudit, type RepCpu } from './cpu-window.ts';
import { FatalError } from '../testbed/processes.ts';
import type { FailureMode } from './profile.ts';
import { criticalPodTolerations } from './upstream-tuned.ts';

export interface ExperimentPlan {
  configs: ConfigId[];
  dns: number[];
  podsPerNode: number[];
  reps: number;
  /**
   * Kubelet policy comparison (thesis §6.1, Fig 6.5): each configuration runs once per kubelet-shim
   * policy named here, overriding its own (e.g. vanilla, fixed, exponential-decay).
   */
  shimPolicies?: string[];
}

export type PlannedRep = Cell & { rep: number };

/**
 * The unrecorded warm-up repetitions before the first recorded one: one per configuration (and
 * kubelet policy) of the plan, in plan order, on the widest DN with the heaviest load. The first
 * pod creations on fresh nodes are slower, and so are the first repetitions of a configuration
 * whose code paths have not run yet in this process (the in-process controller manager's periodic
 * workers and hold, JIT-compiled only once they run): a warm-up of one configuration only left the
 * first repetitions of the others visibly slower to Ready, with more harness CPU in their window.
 */
export function warmupReps(p: ExperimentPlan, family?: (config: ConfigId) => string): PlannedRep[] {
  const one = { ...p, dns: [Math.max(...p.dns)], podsPerNode: [Math.max(...p.podsPerNode)] };
  if (!family) return planReps({ ...one, reps: 1 });
  // families in the order of an odd repetition: the last warm-up is in the family the first recorded repetition starts with
  return planReps({ ...one, reps: 2 }, family)
    .filter((r) => r.rep === 1)
    .map((r) => ({ ...r, rep: 0 }));
}

/**
 * Every repetition of the plan, in run order: rep, then DN, then load, then configuration (then
 * kubelet policy). With `family` (configurations that run without a reinstall between them, kubeadm:
 * upstream | Ulysses), each repetition runs one family's cells, then the next family's, in the
 * reverse family order every other repetition (A B, B A, A B...): one switch per repetition instead of
 * one per cell, and neither family always first after the switch.
 */
export function planReps(p: ExperimentPlan, family?: (config: ConfigId) => string): PlannedRep[] {
  const out: PlannedRep[] = [];
  const policies: Array<string | undefined> = p.shimPolicies?.length ? p.shimPolicies : [undefined];
  const families = family ? [...new Set(p.configs.map(family))] : [undefined];
  for (let rep = 0; rep < p.reps; rep++)
    for (const f of rep % 2 ? [...families].reverse() : families)
      for (const dn of p.dns)
        for (const podsPerNode of p.podsPerNode)
          for (const config of p.configs.filter((c) => f === undefined || family?.(c) === f))
            for (const shimPolicy of policies) out.push({ config, ...(shimPolicy ? { shimPolicy } : {}), dn, podsPerNode, rep });
  return out;
}

/** Run-wide conditions of an output directory, recorded in every results line. */
export interface RunConditions {
  /** false: "rate limiting off" (thesis §4.3.3 Fig 4.10, §6.1 Fig 6.4) */
  clientRateLimit?: boolean;
  scenario?: ScenarioName;
  /** true: control plane and nodes on separate CPUs (profile pinCpus) */
  pinnedCpus?: boolean;
  /** the controller manager's CriticalPathHold in configuration 5 (profile criticalPathHoldMs) */
  criticalPathHoldMs?: number;
  /** local testbed: what of the failed node is stopped at t = 0 (profile freezeSource; absent in results.jsonl = kubelet, the older runs' setting) */
  sourceFreeze?: 'node' | 'kubelet' | 'none';
  /** t = 0 no earlier than this long after the critical pod's creation (profile minCriticalAgeMs) */
  minCriticalAgeMs?: number;
  /** no request of the harness for this long between the configuration switch and t = 0 (profile quietBeforeFailureSeconds), ms */
  quietBeforeFailureMs?: number;
  /** how the source node fails (profile failure, --failure; absent in results.jsonl = taint) */
  failure?: FailureMode;
  /** scenario 5g: the UPF (eupf; absent in results.jsonl = the UDP echo stand-in of older runs) */
  userPlane?: 'eupf';
}

type ConditionFields = Pick<RepResult, 'clientRateLimit' | 'scenario' | 'pinnedCpus' | 'criticalPathHoldMs' | 'sourceFreeze' | 'minCriticalAgeMs' | 'quietBeforeFailureMs' | 'failure' | 'userPlane'>;

/** The fields a results line carries for these conditions (only the non-default ones). */
export function conditionFields(c: RunConditions = {}): ConditionFields {
  return {
    ...(c.clientRateLimit === false ? { clientRateLimit: false } : {}),
    ...(c.scenario && c.scenario !== 'failover' ? { scenario: c.scenario } : {}),
    ...(c.pinnedCpus ? { pinnedCpus: true } : {}),
    ...(c.criticalPathHoldMs ? { criticalPathHoldMs: c.criticalPathHoldMs } : {}),
    ...(c.sourceFreeze && c.sourceFreeze !== 'kubelet' ? { sourceFreeze: c.sourceFreeze } : {}),
    ...(c.minCriticalAgeMs ? { minCriticalAgeMs: c.minCriticalAgeMs } : {}),
    ...(c.quietBeforeFailureMs ? { quietBeforeFailureMs: c.quietBeforeFailureMs } : {}),
    ...(c.failure && c.failure !== 'taint' ? { failure: c.failure } : {}),
    ...(c.userPlane ? { userPlane: c.userPlane } : {}),
  };
}

/** A results file may only be resumed under the conditions it was started with (ratios compare within one run). */
export function conditionMismatch(existing: readonly RepResult[], c: RunConditions = {}): string | undefined {
  const want = JSON.stringify(conditionFields(c));
  const other = existing.find((r) => JSON.stringify(conditionFields(r)) !== want);
  if (!other) return undefined;
  const show = (f: ConditionFields) =>
    `client rate limit ${f.clientRateLimit === false ? 'off' : 'on'}, scenario ${f.scenario ?? 'failover'}${f.scenario === '5g' ? ` (UPF: ${f.userPlane ?? 'UDP echo stand-in'})` : ''}${f.pinnedCpus ? ', CPUs pinned' : ''}${f.criticalPathHoldMs ? `, critical-path hold ${f.criticalPathHoldMs} ms` : ''}${f.sourceFreeze ? `, source freeze ${f.sourceFreeze}` : ''}${f.minCriticalAgeMs ? `, critical pod at least ${f.minCriticalAgeMs} ms old at t = 0` : ''}${f.quietBeforeFailureMs ? `, ${f.quietBeforeFailureMs} ms quiet before t = 0` : ''}${f.failure ? `, failure ${f.failure}` : ''}`;
  return `it holds repetitions run with ${show(other)}, this run is ${show(conditionFields(c))}: use another --out`;
}

export interface ExperimentOptions extends ScenarioOptions {
  kubeconfig: KubeConfig;
  configurator: ClusterConfigurator;
  plan: ExperimentPlan;
  /** source and destination nodes for a given DN */
  topology: (dn: number) => Topology;
  out: string;
  /** lines for the report (machine, testbed, ...) besides the configurator's */
  notes?: string[];
  /** see ReportMeta.inflationTargets */
  inflationTargets?: EventName[];
  command?: string;
  repTimeoutMs?: number;
  /** how long the setup of a repetition may take (workload Ready on the sources; default 180 s) */
  setupTimeoutMs?: number;
  /** give up after this many repetitions that failed outright in a row (not timeouts: errors) */
  maxConsecutiveFailures?: number;
  progress?: ProgressBar;
  conditions?: RunConditions;
  /**
   * Set the workload up in configuration 1 (vanilla) and switch to the repetition's configuration
   * only once it runs on the sources, right before t=0 (default true). Otherwise the configuration
   * under test also shapes the setup: e.g. a paced kubelet-shim starts the critical pod first on the
   * source, so its status is updated first, which puts it first in the vanilla taint-eviction
   * controller's per-node order (the critical pod is then evicted and recreated first by luck, not
   * by the configuration's merit). false: the configuration is applied before the setup (runs up to
   * issue 7's DN 1 / DN 3 / KWOK results).
   */
  neutralSetup?: boolean;
  /** report heading */
  title?: string;
  /**
   * The critical pod's steps on its node for a repetition whose taint was at `taintAtMs` (local
   * testbed: from the kubelet-shims' logs, see node-trace.ts); absent on other clusters.
   */
  nodeTrace?: (taintAtMs: number) => NodeTrace | null;
  /** the critical namespace's API writes after the taint at `taintAtMs` (local testbed: the apiserver's audit log, api-trace.ts) */
  apiTrace?: (taintAtMs: number) => ApiTrace;
  /**
   * The controller manager's ulysses_critical_recovery_seconds for the critical namespace (count and
   * sum; `replicas`: which processes were scraped, when they can change between two readings):
   * each repetition compares its observation with Prio in EndpointSlice
   * ({@link RECOVERY_METRIC_TOLERANCE_MS}). Undefined: no controller manager runs (upstream).
   */
  recoveryMetric?: () => Promise<RecoveryObservations | undefined>;
  /** CPU time per process group in the first ms after the taint (local testbed, profile cpuWindowMs) */
  cpuWindow?: CpuWindowProbe;
  /** the machine's CPU from the taint to the last event, ours and everyone else's (local testbed) */
  cpuAudit?: MachineCpuAudit;
  /**
   * With cpuAudit: a repetition that shared the machine with other work (sharedMachine) is run again,
   * at most this many times (default 2); the last run is recorded, with `sharedRepeats`.
   */
  repeatShared?: number;
  /**
   * Unrecorded warm-up repetitions before the first recorded one ({@link warmupReps}; default true):
   * the first pod creations on freshly started nodes are slower (the first idle cells of a run on a
   * new testbed took 0.42-0.62 s to Ready against 0.3-0.4 s later), and so are the first repetitions
   * of each configuration, which would inflate whichever cell runs first.
   */
  warmup?: boolean;
}

/** The controller manager's recovery metric and the harness' Prio in EndpointSlice must agree within this (issue 24). */
export const RECOVERY_METRIC_TOLERANCE_MS = 50;

/**
 * The recovery metric's observation during a repetition (the difference of two snapshots; null
 * unless exactly one recovery was observed) and its difference to the harness' Prio in EndpointSlice.
 */
export interface RecoveryObservations {
  count: number;
  sum: number;
  replicas?: string;
}

export function recoveryMetricCheck(before: RecoveryObservations, after: RecoveryObservations, prioEndpointReady: number | null): { recoveryMetricS: number | null; recoveryMetricDiffMs?: number; problem?: string } {
  if (before.replicas !== after.replicas) return { recoveryMetricS: null, problem: `the controller manager's replicas changed during the repetition (${before.replicas} -> ${after.replicas}): no comparison with the recovery metric` };
  const n = after.count - before.count;
  if (n !== 1) return { recoveryMetricS: null, problem: `the controller manager's ulysses_critical_recovery_seconds observed ${n} recoveries in the critical namespace (expected 1)` };
  const metric = Math.round((after.sum - before.sum) * 1e6) / 1e6;
  if (prioEndpointReady === null) return { recoveryMetricS: metric, problem: 'Prio in EndpointSlice not seen: no comparison with the recovery metric' };
  const diff = Math.round((prioEndpointReady - metric) * 1e4) / 10;
  return {
    recoveryMetricS: metric,
    recoveryMetricDiffMs: diff,
    ...(Math.abs(diff) > RECOVERY_METRIC_TOLERANCE_MS ? { problem: `recovery metric ${metric.toFixed(3)} s and Prio in EndpointSlice ${prioEndpointReady.toFixed(3)} s differ by ${diff} ms (> ${RECOVERY_METRIC_TOLERANCE_MS} ms)` } : {}),
  };
}

export function machineNote(): string {
  const c = cpus();
  return `machine: ${c.length} CPU(s) ${c[0]?.model ?? ''}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB RAM, Node ${process.version}`;
}

export async function runExperiment(o: ExperimentOptions): Promise<OutputFiles & { ran: number; skipped: number }> {
  mkdirSync(o.out, { recursive: true });
  const resultsFile = join(o.out, RESULTS_FILE);
  const existing = readResults(resultsFile);
  const mismatch = conditionMismatch(existing, o.conditions);
  if (mismatch) throw new Error(`${resultsFile}: ${mismatch}`);
  const done = new Set(existing.map(repKey));
  const family = o.configurator.family?.bind(o.configurator);
  const all = planReps(o.plan, family);
  const todo = all.filter((r) => !done.has(repKey(r)));
  const bar = o.progress ?? new ProgressBar();
  const setupNote =
    (o.neutralSetup ?? true)
      ? "setup in configuration 1 (vanilla); the repetition's configuration is switched on once the workload runs on the sources, its Deployments' status is up to date and the controllers are idle, right before the taint"
      : "setup in the repetition's configuration (profile neutralSetup: false; a paced kubelet-shim then starts the critical pod first on the source, which can put it first in the vanilla taint-eviction order)";
  const warmup = o.warmup ?? true;
  const maxDn = Math.max(...o.plan.dns);
  const warmups = warmupReps(o.plan, family);
  // a plan of both families switches between them (kubeadm: kube-scheduler, kcm and the kubelets restarted; local testbed: kcm and the kubelets)
  const switching = family !== undefined && new Set(o.plan.configs.map(family)).size > 1;
  const warmupNote = warmup
    ? `each invocation of the run starts with ${warmups.length} unrecorded warm-up repetition(s), one per configuration (${warmups.map(configKey).join(', ')}) on DN ${maxDn} with ${warmups[0]?.podsPerNode} pods per node: the first pod creations on fresh nodes, and the first repetitions of a configuration, are slower${switching ? '; the first repetition after each switch of family (upstream, upstream-tuned, Ulysses: components restarted) is unrecorded too and run again' : ''}`
    : `no warm-up repetition (profile warmup: false)${switching ? ': the repetitions right after a switch of family (upstream, upstream-tuned, Ulysses) run on freshly restarted components' : ''}`;
  const meta: ReportMeta = { title: o.title, notes: [machineNote(), ...(o.notes ?? []), setupNote, warmupNote, ...o.configurator.describe()], command: o.command, inflationTargets: o.inflationTargets };
  writeFileSync(join(o.out, META_FILE), JSON.stringify(meta, null, 2));

  const wide = o.topology(maxDn);
  const scope = { ...o, topology: wide, log: o.log ?? ((l: string) => bar.log(l)) };
  let ran = 0;
  const durations: number[] = [];
  if (todo.length) {
    await prepareScenario(o.kubeconfig, o);
    await restoreInitialState(o.kubeconfig, scope); // leftovers of an interrupted run
    const baseline = await captureBaseline(o.kubeconfig, scope);
    let failuresInRow = 0;
    const neutral = o.neutralSetup ?? true;
    const execute = async (r: PlannedRep) => {
      const applyRep = () => o.configurator.apply(r.config, r.shimPolicy);
      o.configurator.takeSwitch?.();
      await (neutral ? o.configurator.apply(o.configurator.setupConfig?.(r.config) ?? 1) : applyRep());
      const configSwitch = o.configurator.takeSwitch?.();
      // the critical Deployment's place in creation order: pseudo-random per (DN, load, rep), same for every configuration
      const prioPosition = criticalPosition(r.rep * 10_007 + r.dn * 101 + r.podsPerNode, loadDeployments(r.podsPerNode * r.dn).length);
      let criticalRepCpu: RepCpu | null | undefined;
      const outcome = await runRep(o.kubeconfig, {
        ...o,
        topology: o.topology(r.dn),
        podsPerNode: r.podsPerNode,
        timeoutMs: o.repTimeoutMs,
        setupTimeoutMs: o.setupTimeoutMs,
        criticalPosition: prioPosition,
        // upstream-tuned's third setting is the workload's: the critical pod's own tolerations
        criticalTolerations: criticalPodTolerations(r.config),
        beforeFailure: neutral ? applyRep : undefined,
        atFailure: () => {
          // one /proc reading before t = 0 serves both probes
          const before = o.cpuAudit?.arm();
          o.cpuWindow?.arm(before);
        },
        // frozen-node: the audit covers the critical path only; the low pods' Last ready then waits
        // out stock's 300 s tolerations, a timer that other work on the machine does not delay
        atCriticalPath: () => {
          if (o.conditions?.failure === 'frozen-node') criticalRepCpu = o.cpuAudit?.finish() ?? null;
        },
      });
      const repCpu = criticalRepCpu ?? o.cpuAudit?.finish() ?? null;
      return { outcome, prioPosition, repCpu, configSwitch: configSwitch ?? o.configurator.takeSwitch?.(), cluster: await o.configurator.inspect?.() };
    };
    for (const w of warmup ? warmups : []) {
      bar.update(progressLine({ done: all.length - todo.length, total: all.length, skipped: all.length - todo.length, what: `warm-up (config ${configKey(w)}, DN ${w.dn}, ${w.podsPerNode} pods/node, not recorded)` }));
      try {
        const { outcome } = await execute(w);
        if (outcome.error) bar.log(`warm-up repetition (config ${configKey(w)}): ${outcome.error}`);
      } catch (err) {
        if (err instanceof FatalError) throw err; // pods that cannot start: no repetition will do better
        bar.log(`warm-up repetition (config ${configKey(w)}) failed (not recorded): ${(err as Error).message}`);
      }
      await restoreInitialState(o.kubeconfig, scope, baseline);
    }
    const queue = [...todo];
    const repeats = new Map<string, number>();
    // the reinstall a repetition run again after it (warm-up after a switch) is recorded with
    let carriedSwitch: { to: string; seconds: number } | undefined;
    for (let r = queue.shift(); r; r = queue.shift()) {
      const mean = durations.length ? durations.reduce((a, b) => a + b, 0) / durations.length : undefined;
      bar.update(progressLine({ done: all.length - todo.length + ran, total: all.length, skipped: all.length - todo.length, meanRepS: mean, what: `config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep + 1}/${o.plan.reps}` }));
      const started = Date.now();
      try {
        const metricBefore = await o.recoveryMetric?.();
        const { outcome, prioPosition, repCpu, configSwitch: switched, cluster } = await execute(r);
        if (switched && warmup) {
          // a reinstall (kubeadm: upstream <-> Ulysses) restarts kube-scheduler, kcm and every kubelet:
          // the first repetition on them is as cold as the first of a run, so it is a warm-up too
          bar.log(`config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: first repetition after the switch to ${switched.to} (${switched.seconds} s), not recorded: running it again`);
          carriedSwitch = switched;
          await restoreInitialState(o.kubeconfig, scope, baseline);
          queue.unshift(r);
          continue;
        }
        const configSwitch = switched ?? carriedSwitch;
        carriedSwitch = undefined;
        const result: RepResult = { ...r, ...conditionFields(o.conditions), events: outcome.events, prioPosition, startedAt: new Date(started).toISOString(), durationS: 0, taintAt: new Date(outcome.taintAtMs).toISOString(), podReady: outcome.podReady };
        if (configSwitch) result.configSwitch = configSwitch;
        if (cluster) result.cluster = cluster;
        const metricAfter = metricBefore && (await o.recoveryMetric?.());
        if (metricBefore) {
          const { problem, ...check } = recoveryMetricCheck(metricBefore, metricAfter ?? { count: 0, sum: 0, replicas: 'none' }, outcome.events.prioEndpointReady);
          Object.assign(result, check);
          if (problem) bar.log(`config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: ${problem}`);
        }
        if (outcome.criticalTaintWrittenMs !== undefined) result.criticalTaintWrittenMs = outcome.criticalTaintWrittenMs;
        if (outcome.criticalTolerationSeconds) result.criticalTolerationSeconds = outcome.criticalTolerationSeconds;
        if (outcome.quietCpu) result.quietCpu = outcome.quietCpu;
        const trace = o.nodeTrace?.(outcome.taintAtMs);
        if (trace) result.prioNode = trace;
        const api = o.apiTrace?.(outcome.taintAtMs);
        if (api?.length) result.apiTrace = api;
        const cpu = o.cpuWindow?.result();
        if (cpu) result.cpuWindow = cpu;
        if (repCpu) {
          result.repCpu = repCpu;
          const repeated = repeats.get(repKey(r)) ?? 0;
          if (repeated) result.sharedRepeats = repeated;
          if (sharedMachine(repCpu)) {
            const again = repeated < (o.repeatShared ?? 2);
            bar.log(`config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: shared the machine, ${repCpu.outsideCpuS.toFixed(2)} CPU-s outside the testbed (${formatOutside(repCpu)})${again ? ': running it again' : ''}`);
            if (again) {
              repeats.set(repKey(r), repeated + 1);
              await restoreInitialState(o.kubeconfig, scope, baseline);
              queue.unshift(r);
              continue;
            }
          }
        }
        if (outcome.error) {
          result.error = outcome.error;
          bar.log(`config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep}: ${outcome.error}`);
        }
        await restoreInitialState(o.kubeconfig, scope, baseline);
        result.durationS = Math.round((Date.now() - started) / 100) / 10;
        appendResult(resultsFile, result);
        durations.push(result.durationS);
        ran++;
        failuresInRow = 0;
      } catch (err) {
        if (err instanceof FatalError) throw err;
        failuresInRow++;
        bar.log(`config ${configKey(r)}, DN ${r.dn}, ${r.podsPerNode} pods/node, rep ${r.rep} failed (not recorded, rerun resumes it): ${(err as Error).message}`);
        await restoreInitialState(o.kubeconfig, scope, baseline);
        if (failuresInRow >= (o.maxConsecutiveFailures ?? 3)) throw new Error(`${failuresInRow} repetitions failed in a row; last: ${(err as Error).message}`);
      }
    }
    bar.update(progressLine({ done: all.length - todo.length + ran, total: all.length, skipped: all.length - todo.length, meanRepS: 0, what: `done in ${formatDuration(durations.reduce((a, b) => a + b, 0))}` }));
    bar.done();
  } else {
    bar.log(`all ${all.length} repetitions already in ${resultsFile}: only regenerating the outputs`);
  }
  const files = await writeOutputs(o.out, (l) => bar.log(l));
  return { ...files, ran, skipped: all.length - todo.length };
}
