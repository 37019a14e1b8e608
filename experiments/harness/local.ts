/**
 * The failover experiment on the local testbed (or on any cluster through a kubeconfig): brings up
 * what it needs, starts Ulysses' controller manager in-process and wires the runtime toggles.
 *
 * Local testbed: started once with kube-controller-manager's failover-path controllers disabled
 * (those Ulysses' controller manager implements) and a kubelet-shim on every real node (vanilla
 * policy); configs 1-3 run Ulysses' controller manager in `vanilla` mode, which imitates kcm
 * (FIFO, 5 workers, taint eviction up to 256 at once, 20 qps / burst 30 per controller), configs 4-5
 * its multi-priority modes. Configuration `upstream` (stock Kubernetes) restarts kcm with all its
 * controllers and the kubelets on containerd directly, with the in-process controller manager
 * stopped (local-configurator.ts).
 */
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import type { KubeConfig } from '@kubernetes/client-node';
import { CONTROLLERS, ControllerManager, type ControllerName } from '../../controller-manager/manager.ts';
import type { Logger } from '../../core/logging.ts';
import { DEFAULT_CRITICAL_PATH_HOLD_MS } from '../../controller-manager/critical-path-hold.ts';
import * as testbed from '../testbed/testbed.ts';
import { pollUntil } from '../testbed/processes.ts';
import { KWOK_TOLERATION } from '../testbed/kwok.ts';
import { kcmControllersFlag } from './configurator.ts';
import { RuntimeConfigConfigurator } from './runtime-configurator.ts';
import { controllerManagerRuntimeWatcher } from '../../controller-manager/runtime.ts';
import { recoveryObservations } from '../../controller-manager/recovery-slo.ts';
import { NodeFailureConfigSchema, nodeFailureRuntimeWatcher } from '../../controller-manager/node-failure.ts';
import { validateConfig } from '../../core/config.ts';
import { apfRuntimeWatcher } from '../../apf-configs/runtime.ts';
import { KubeClient } from '../../core/kube.ts';
import { readRuntimeConfig } from '../../core/runtime-config.ts';
import { runExperiment, type ExperimentPlan, type RecoveryObservations } from './experiment.ts';
import { LocalTestbedConfigurator, STOCK_KCM_CONTROLLERS, type ControllerManagerHost } from './local-configurator.ts';
import type { ProgressBar } from './progress.ts';
import { shimLogTracer, type NodeTrace } from './node-trace.ts';
import { auditLogTracer, type ApiTrace } from './api-trace.ts';
import { auditLogPath } from '../testbed/controlplane.ts';
import { CpuWindowProbe, MachineCpuAudit, processState, procPids, withDescendants } from './cpu-window.ts';
import { UPF_NAME, type NodeFailure, type Topology } from './scenario.ts';
import { importEupfImage } from '../5g/eupf.ts';
import { SHIM_POLICY_NAME, UPSTREAM_TUNED, isStockConfig, type EventName, type ScenarioName } from './results.ts';
import { ensureRuntimeConfigCrd } from '../../core/runtime-config.ts';
import { SOURCE_FREEZES, failureFreezeConflict, parseFailureMode, type FailureMode } from './profile.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const SHIM_CONFIGS = join(REPO, 'kubelet-shim', 'configs');
export const DEFAULT_PACED_SHIM_CONFIG = join(SHIM_CONFIGS, 'ulysses-cloud.yaml');
export const VANILLA_SHIM_CONFIG = join(SHIM_CONFIGS, 'vanilla.yaml');
/**
 * Kubelet policy comparison (thesis §6.1, Fig 6.5): the policies by name. exponential-decay is the
 * thesis' cloud-node setting (700 ms, x0.5, reset after 5 s) without Ulysses' additions, fixed the
 * thesis' 1.2 s.
 */
export const SHIM_POLICY_FILES: Record<string, string> = {
  vanilla: VANILLA_SHIM_CONFIG,
  fixed: join(SHIM_CONFIGS, 'fixed.yaml'),
  'exponential-decay': join(SHIM_CONFIGS, 'thesis-cloud.yaml'),
  'exponential-decay-edge': join(SHIM_CONFIGS, 'thesis-edge.yaml'),
  adaptive: join(SHIM_CONFIGS, 'ulysses-adaptive.yaml'),
};

/**
 * `--shim-policies vanilla,fixed,exponential-decay` or `name=file.yaml` items -> name -> config file.
 * Unknown names and bad items are errors naming them.
 */
export function resolveShimPolicies(items: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const item of items) {
    const [name, file, ...rest] = item.split('=');
    if (!name || !SHIM_POLICY_NAME.test(name) || rest.length) throw new Error(`--shim-policies: "${item}" is not a policy name (lowercase, e.g. fixed) or name=config-file`);
    if (out[name]) throw new Error(`--shim-policies: policy "${name}" given twice`);
    const f = file ?? SHIM_POLICY_FILES[name];
    if (!f) throw new Error(`--shim-policies: unknown policy "${name}" (known: ${Object.keys(SHIM_POLICY_FILES).join(', ')}; or name=kubelet-shim-config.yaml)`);
    out[name] = f;
  }
  return out;
}

export const CRITICAL_NAMESPACE = 'ulysses-critical';
export const LOAD_NAMESPACE = 'ulysses-load';

/** The Ulysses controllers the experiment runs (all it has); kcm keeps everything else. */
export const ULYSSES_CONTROLLERS: readonly ControllerName[] = CONTROLLERS;

/** Testbed options the experiment needs: 1 source + max DN destinations, kcm without our controllers, shims. */
export function experimentTestbedOptions(runDir: string, maxDn: number, pinCpus = false): testbed.TestbedOptions {
  return { runDir, realNodes: 1 + maxDn, controllers: kcmControllersFlag(ULYSSES_CONTROLLERS), kubeletShimConfig: VANILLA_SHIM_CONFIG, pinCpus, auditNamespaces: [CRITICAL_NAMESPACE] };
}

/** Testbed topology: real-1 fails, real-2 .. real-(DN+1) receive. */
export const testbedTopology = (dn: number): Topology => ({ sources: ['real-1'], destinations: Array.from({ length: dn }, (_, i) => `real-${i + 2}`) });

export type SourceFreeze = (typeof SOURCE_FREEZES)[number];

/** The profile's freezeSource as given (absent or true: node; false: none) -> what to stop. */
export function sourceFreeze(v: boolean | SourceFreeze | undefined): SourceFreeze {
  if (v === undefined || v === true) return 'node';
  if (v === false) return 'none';
  if (!SOURCE_FREEZES.includes(v)) throw new Error(`freezeSource: "${v}" is not one of ${SOURCE_FREEZES.join(', ')}`);
  return v;
}

/** Pids of the containerd-shims serving the containerd at `socket` (they are daemons: found by their -address). */
export function containerdShimPids(socket: string): number[] {
  const out: number[] = [];
  for (const pid of procPids()) {
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (args[0]?.endsWith('containerd-shim-runc-v2') && args[args.indexOf('-address') + 1] === socket) out.push(pid);
    } catch {
      /* exited meanwhile */
    }
  }
  return out;
}

/**
 * A node's kubelet-shim and its fallback with every process below them (`tracked`: a testbed process
 * by name): the kubeadm testbed runs the shim under its systemd unit's supervisor (unit-supervisor.ts),
 * whose child is the shim itself.
 */
export const shimTree = (tracked: (name: string) => number | undefined): number[] => withDescendants([tracked('kubelet-shim'), tracked('kubelet-shim-fallback')].filter((p): p is number => p !== undefined));

/** The cgroup v1 freezer hierarchy, under which a node's pods are `<cgroupRoot>/kubepods/...` (cgroupfs driver). */
export const FREEZER_CGROUPS = '/sys/fs/cgroup/freezer';

/**
 * Pids of every process of a node's pods: the `cgroup.procs` of its kubepods cgroup and everything
 * below it (QoS classes, pods, containers), except the processes in this machine's own network
 * namespace (hostNetwork pods: kube-proxy on the kubeadm testbed). Every node of this machine shares
 * that namespace and its iptables, so a kube-proxy stopped while holding /run/xtables.lock would stall
 * the destinations' kube-proxies too, which a real failed machine cannot do to other machines.
 */
export function kubepodsPids(cgroupRoot: string, hierarchy = FREEZER_CGROUPS): number[] {
  const top = `${hierarchy}${cgroupRoot}/kubepods`;
  if (!existsSync(top)) throw new Error(`no pod cgroup ${top}: cannot stop the node's pods`);
  const pids: number[] = [];
  const walk = (dir: string) => {
    try {
      for (const line of readFileSync(`${dir}/cgroup.procs`, 'utf8').split('\n')) if (line) pids.push(Number(line));
      for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) walk(`${dir}/${e.name}`);
    } catch {
      /* a pod's cgroup removed meanwhile */
    }
  };
  walk(top);
  const netns = (pid: number | 'self') => {
    try {
      return readlinkSync(`/proc/${pid}/ns/net`);
    } catch {
      return undefined; // exited meanwhile
    }
  };
  const host = netns('self');
  return pids.filter((pid) => netns(pid) !== host);
}

/**
 * The processes of a testbed node, in stop order: the kubelet first (nothing new reaches the
 * runtime), then (`node`) its kubelet-shim, containerd and containerd-shims, then (`all`) every
 * process of its pods (kubepodsPids).
 */
export function testbedNodePids(runDir: string, node: string, what: Exclude<SourceFreeze, 'none'> | 'all'): number[] {
  const state = testbed.readState(runDir);
  const tracked = (name: string) => state?.processes.find((x) => x.name === `${name}/${node}`)?.pid;
  const kubelet = tracked('kubelet');
  if (!kubelet) throw new Error(`no kubelet of node ${node} in the testbed of ${runDir}`);
  if (what === 'kubelet') return [kubelet];
  const spec = state!.realNodes.find((n) => n.name === node);
  const runtime = [...shimTree(tracked), ...[tracked('containerd'), ...(spec ? containerdShimPids(spec.socket) : [])].filter((p): p is number => p !== undefined)];
  if (what === 'node') return [kubelet, ...runtime];
  if (!spec) throw new Error(`no real node ${node} in the testbed of ${runDir}`);
  return [kubelet, ...runtime, ...kubepodsPids(spec.cgroupRoot)];
}

/**
 * Testbed node failure: SIGSTOP the source node's processes right before the taint, SIGCONT for the
 * cleanup, so that nothing the failed node does runs on the CPUs the destinations share (a failed
 * machine would not). `kubelet`: the kubelet only (the node's containerd then keeps working off the
 * setup's pod creations inside the critical pod's window, ~0.1 s of CPU at 20 pods per node); `node` (default): the kubelet, the kubelet-shim, containerd and every
 * containerd-shim of the node. The containers themselves keep running (idle servers).
 */
export function testbedFrozenNode(runDir: string, what: Exclude<SourceFreeze, 'none'> = 'node'): NodeFailure {
  const pidsOf = (node: string) => testbedNodePids(runDir, node, what);
  return stoppedNodeFailure({
    description:
      what === 'node'
        ? "the source node's kubelet, kubelet-shim, containerd and containerd-shims are stopped (SIGSTOP) at t=0 and resumed for the cleanup: a failed machine does nothing on the destinations' CPUs"
        : "the source node's kubelet is stopped (SIGSTOP) at t=0 and resumed for the cleanup (profile freezeSource: kubelet; its containerd keeps running)",
    pidsOf,
    unfrozenPids: pidsOf,
  });
}

/** What failure frozen-node does to a testbed node (the report's note). */
export const STOPPED_NODE_DESCRIPTION =
  "every process of the source node is stopped (SIGSTOP): its kubelet, kubelet-shim, containerd, containerd-shims and its pods' processes (its kubepods cgroup), and resumed for the cleanup (the pods and the runtime before the kubelet)";

/**
 * Failure frozen-node on the local testbed: every process of the source node stopped (SIGSTOP) at
 * t = 0 — kubelet, kubelet-shim, containerd, containerd-shims and its pods' processes — and nothing
 * written; resumed for the cleanup, the pods and the runtime before the kubelet.
 */
export function testbedStoppedNode(runDir: string): NodeFailure {
  const pidsOf = (node: string) => testbedNodePids(runDir, node, 'all');
  // a thaw of a node never frozen here (an interrupted run) resumes what there is
  const unfrozenPids = (node: string) => {
    try {
      return pidsOf(node);
    } catch {
      return testbedNodePids(runDir, node, 'node');
    }
  };
  return stoppedNodeFailure({ description: STOPPED_NODE_DESCRIPTION, pidsOf, unfrozenPids, rescan: true });
}

/**
 * A node failure that stops (SIGSTOP) the processes `pidsOf` names for each failed node at t = 0,
 * kubelet first (nothing new reaches the runtime), and resumes them in reverse order for the
 * cleanup (the runtime before the kubelet, which calls it at once). `unfrozenPids`: what a thaw of
 * a node that was never frozen resumes. `rescan`: after the stop, `pidsOf` again until it names no
 * process not stopped yet (one a container process forked meanwhile is stopped too).
 */
export function stoppedNodeFailure(o: {
  description: string;
  pidsOf: (node: string) => number[] | Promise<number[]>;
  unfrozenPids: (node: string) => number[];
  rescan?: boolean;
}): NodeFailure {
  const signal = (pids: number[], sig: NodeJS.Signals) => {
    for (const pid of pids) {
      try {
        process.kill(pid, sig);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err; // a process that exited meanwhile
      }
    }
  };
  const frozen = new Map<string, number[]>();
  return {
    description: o.description,
    async freeze(nodes) {
      // the pids are collected before any is stopped (collecting may need the API)
      for (const n of nodes) frozen.set(n, await o.pidsOf(n));
      for (const n of nodes) signal(frozen.get(n)!, 'SIGSTOP');
      for (let round = 0, fresh = 1; o.rescan && fresh > 0; round++) {
        if (round === 20) throw new Error(`source node processes keep appearing after ${round} rounds of SIGSTOP (${nodes.join(', ')})`);
        fresh = 0;
        for (const n of nodes) {
          const known = new Set(frozen.get(n));
          const added = (await o.pidsOf(n)).filter((p) => !known.has(p));
          frozen.get(n)!.push(...added);
          signal(added, 'SIGSTOP');
          fresh += added.length;
        }
      }
      // SIGSTOP takes effect when each process is next scheduled: t = 0 only once all are stopped
      const all = nodes.flatMap((n) => frozen.get(n) ?? []);
      await pollUntil(`source node processes stopped (${all.join(', ')})`, () => all.every((p) => ['T', 'Z', 'gone'].includes(processState(p))), { timeoutMs: 5_000, intervalMs: 2 });
    },
    async thaw(nodes) {
      for (const n of nodes) signal([...(frozen.get(n) ?? o.unfrozenPids(n))].reverse(), 'SIGCONT');
      for (const n of nodes) frozen.delete(n);
    },
  };
}

/**
 * KWOK mode (scale run, issue 7): a control-plane-only testbed of `kwokNodes` KWOK nodes, no real
 * node, no kubelet-shim (KWOK fakes the pod lifecycle, so kubelet pacing has nothing to pace);
 * kcm again without the controllers Ulysses replaces.
 */
export function kwokExperimentTestbedOptions(runDir: string, kwokNodes: number, pinCpus = false): testbed.TestbedOptions {
  // kwok plays the nodes' kubelets: with pinned CPUs it goes to the nodes' CPU
  return { runDir, realNodes: 0, kwokNodes, controllers: kcmControllersFlag(ULYSSES_CONTROLLERS), pinCpus, kwokCpus: 'nodes', auditNamespaces: [CRITICAL_NAMESPACE] };
}

/**
 * KWOK topology: kwok-1 .. kwok-S fail, kwok-(S+1) .. kwok-(S+DN) receive (the critical pod may only
 * go to kwok-(S+1)). The load of podsPerNode x DN pods starts on the S sources.
 */
export function kwokTopology(sources: number, kwokNodes: number): (dn: number) => Topology {
  if (sources < 1) throw new Error(`--kwok-sources must be at least 1, got ${sources}`);
  return (dn) => {
    if (sources + dn > kwokNodes) throw new Error(`KWOK topology: ${sources} source(s) + DN ${dn} destinations need ${sources + dn} KWOK nodes, --kwok-nodes is ${kwokNodes}`);
    return {
      sources: Array.from({ length: sources }, (_, i) => `kwok-${i + 1}`),
      destinations: Array.from({ length: dn }, (_, i) => `kwok-${sources + i + 1}`),
    };
  };
}

/** Brings up (or reuses) the testbed; an existing one with other options is an error, not silently used. */
export async function ensureExperimentTestbed(runDir: string, maxDn: number, kwokNodes?: number, pinCpus = false): Promise<testbed.TestbedState> {
  const want = kwokNodes ? kwokExperimentTestbedOptions(runDir, kwokNodes, pinCpus) : experimentTestbedOptions(runDir, maxDn, pinCpus);
  const existing = testbed.readState(runDir);
  if (existing?.ready && !(await testbed.statusProblems(existing)).length) {
    const problems: string[] = [];
    if (existing.options.realNodes < want.realNodes!) problems.push(`realNodes ${existing.options.realNodes} (need ${want.realNodes} for DN ${maxDn})`);
    if (existing.options.kwokNodes < (want.kwokNodes ?? 0)) problems.push(`kwokNodes ${existing.options.kwokNodes} (need ${want.kwokNodes})`);
    // kcm with all its controllers on a testbed the experiment brought up: an interrupted run left it
    // in configuration upstream or upstream-tuned (kcmExtraArgs), and the run's configurator switches
    // it back (local-configurator.ts)
    const leftStock = !kwokNodes && existing.options.controllers === STOCK_KCM_CONTROLLERS && existing.options.kubeletShimConfig !== undefined && existing.options.auditNamespaces?.includes(CRITICAL_NAMESPACE);
    if (existing.options.controllers !== want.controllers && !leftStock) problems.push(`controllers "${existing.options.controllers}" (need "${want.controllers}")`);
    if (want.kubeletShimConfig && !existing.options.kubeletShimConfig) problems.push('no kubelet-shim on the real nodes');
    if (Boolean(existing.options.pinCpus) !== Boolean(want.pinCpus)) problems.push(existing.options.pinCpus ? 'pinned CPUs (this run: not pinned)' : 'unpinned CPUs (this run: profile pinCpus)');
    else if (want.pinCpus && (existing.options.kwokCpus ?? 'control-plane') !== want.kwokCpus && kwokNodes) problems.push(`kwok on the ${existing.options.kwokCpus ?? 'control-plane'} CPU (need ${want.kwokCpus})`);
    if (problems.length) throw new Error(`testbed in ${runDir} was started with ${problems.join(', ')}: run \`ulysses testbed down --run-dir ${runDir}\` first`);
    return existing;
  }
  return testbed.up(want);
}

export interface FailoverExperimentOptions {
  plan: ExperimentPlan;
  out: string;
  /** local testbed run dir (when no kubeconfig is given) */
  runDir?: string;
  /** external cluster (Ulysses' kubelet-shim installed on the nodes, see manifests/): kubeconfig and nodes */
  kubeconfig?: KubeConfig;
  sources?: string[];
  destinations?: string[];
  pacedShimConfig?: string;
  repTimeoutMs?: number;
  /**
   * local testbed: what of the source node is stopped during the failover (default 'node'; true =
   * 'node', false = 'none'; see testbedFrozenNode)
   */
  freezeSource?: boolean | SourceFreeze;
  /**
   * How the source node fails (default taint: the harness' NoExecute taint at t = 0); frozen-node:
   * every process of it stopped and no taint written (the local and the kubeadm testbed only; default
   * repetition timeout FROZEN_NODE_REP_TIMEOUT_MS)
   */
  failure?: FailureMode;
  /** KWOK mode: a testbed of this many KWOK nodes only (no real node, no UDP client) */
  kwokNodes?: number;
  /**
   * The kubeadm testbed (kubeadm-configurator.ts): Ulysses installed as pods, configuration
   * `upstream` (stock Kubernetes) possible; kubeadmRunDir: its run dir (default ULYSSES_KUBEADM_RUN_DIR)
   */
  kubeadm?: boolean;
  kubeadmRunDir?: string;
  /** with kubeadm: leave a kubeadm testbed the run brought up in place when the run fails (kubeadmRunEnd) */
  keepTestbed?: boolean;
  /** with kubeadm: a kubeadm cluster reached through its kubeconfig and a node shell instead of the testbed */
  cluster?: import('./kubeadm-configurator.ts').KubeadmClusterTarget;
  /** KWOK mode: how many of them fail (default 10) */
  kwokSources?: number;
  command?: string;
  progress?: ProgressBar;
  /** kubelet policy comparison: policy name -> kubelet-shim config file (resolveShimPolicies); names go in plan.shimPolicies */
  shimPolicyFiles?: Record<string, string>;
  /** false: "rate limiting off" run (the controller manager's client-side limiter off in every configuration) */
  clientRateLimit?: boolean;
  /** 5g: the UPF stand-in and a multi-service low-priority app (thesis §6.1.2) */
  scenario?: ScenarioName;
  /** see ExperimentOptions.neutralSetup (default true) */
  neutralSetup?: boolean;
  /** see ExperimentOptions.warmup (default true) */
  warmup?: boolean;
  /**
   * Local testbed: control plane and this process (the in-process controller manager, watches, UDP
   * client) on CPU 0, the nodes (kubelet, kubelet-shim, containerd and what it spawns; kwok in KWOK mode)
   * on CPU 1 — a stand-in for a control-plane machine and worker machines (testbed pinCpus).
   */
  pinCpus?: boolean;
  /** the controller manager's CriticalPathHold in configuration 5 (ms per critical pod; 0: off; default: the installed default) */
  criticalPathHoldMs?: number;
  /** t = 0 no earlier than this long after the critical pod's creation (ScenarioOptions.minCriticalAgeMs) */
  minCriticalAgeMs?: number;
  /** no request of the harness for this long between the configuration switch and t = 0 (ScenarioOptions.quietBeforeFailureMs) */
  quietBeforeFailureMs?: number;
  /** local testbed: CPU time per process group in the first ms after the taint (cpu-window.ts) */
  cpuWindowMs?: number;
  /** with cpuWindowMs: also profile the harness' JavaScript in the window */
  cpuWindowProfile?: boolean;
  /** run a repetition again, at most this many times, when other work shared the machine (default 2) */
  repeatShared?: number;
}

/**
 * The harness' own Ulysses controller manager (every controller it has, following UlyssesConfig and
 * hosting the APF toggle, as an installed one would), started and stopped as a whole: configuration
 * `upstream` of the local testbed runs without it.
 */
export class InProcessControllerManager implements ControllerManagerHost {
  private cm: ControllerManager | undefined;
  private watchers: Array<{ stop(): Promise<void> }> = [];
  private starts = 0;

  constructor(
    private readonly kc: KubeConfig,
    private readonly log: Logger,
  ) {}

  get running(): boolean {
    return this.cm !== undefined;
  }

  async start(): Promise<void> {
    if (this.cm) return;
    // node failure detection as installed: on, with its defaults
    const nodeFailure = validateConfig(NodeFailureConfigSchema, {}, 'installed defaults');
    const cm = new ControllerManager({ kubeconfig: this.kc, controllers: [...ULYSSES_CONTROLLERS], nodeFailure, log: this.log });
    await cm.start();
    this.cm = cm;
    this.starts++;
    // it follows UlyssesConfig like an installed one (and hosts APF)
    const watchers = [controllerManagerRuntimeWatcher(this.kc, cm, ULYSSES_CONTROLLERS, this.log), apfRuntimeWatcher(this.kc, this.log), ...(cm.nodeFailure ? [nodeFailureRuntimeWatcher(this.kc, cm.nodeFailure, nodeFailure, this.log)] : [])];
    for (const w of watchers) {
      this.watchers.push(w);
      await w.start();
    }
  }

  async stop(): Promise<void> {
    for (const w of this.watchers.splice(0)) await w.stop();
    await this.cm?.stop();
    this.cm = undefined;
  }

  /** Nothing queued or running in any controller and no client-limiter debt; true when it does not run. */
  quiescent(): boolean {
    const cm = this.cm;
    return !cm || (ULYSSES_CONTROLLERS.every((c) => cm.pool(c).queue.len() === 0 && cm.pool(c).stats().inFlight === 0) && [...cm.apiLimiters.values()].every((l) => l.available() >= 1));
  }

  /** Its recovery metric of the critical namespace (`replicas` names the instance: a restart is another); undefined when it does not run. */
  async recovery(): Promise<RecoveryObservations | undefined> {
    if (!this.cm) return undefined;
    return { ...(await recoveryObservations(CRITICAL_NAMESPACE)), replicas: `in-process #${this.starts}` };
  }
}

/** Pins every thread of this process to `cpus` (taskset), so later threads inherit it too. */
function pinThisProcess(cpus: string): void {
  execFileSync('taskset', ['-a', '-cp', cpus, String(process.pid)], { stdio: 'ignore' });
}

export async function runFailoverExperiment(o: FailoverExperimentOptions) {
  if (o.kubeadm) return (await import('./kubeadm-configurator.ts')).runKubeadmFailoverExperiment(o);
  const stock = o.plan.configs.filter(isStockConfig);
  const withUpstream = stock.length > 0;
  const withUpstreamTuned = stock.includes(UPSTREAM_TUNED);
  if (withUpstream && (o.kubeconfig || o.kwokNodes))
    throw new Error(`configuration ${stock.join(', ')} (stock Kubernetes) needs a cluster whose components the harness can switch: the local testbed with real nodes, or a kubeadm cluster (--kubeadm, --kubeconfig of the kubeadm testbed, or --kubeconfig with --node-shell)`);
  if (withUpstream && o.plan.shimPolicies?.length) throw new Error(`--shim-policies: configuration ${stock.join(', ')} has no kubelet-shim (compare the policies among configurations 1..5)`);
  if (o.plan.shimPolicies?.length && o.kwokNodes) throw new Error('--shim-policies compares kubelet pacing: KWOK nodes have no kubelet-shim');
  if (o.scenario === '5g' && (o.kwokNodes || o.kubeconfig))
    throw new Error(`--scenario 5g runs eUPF on real nodes and the SMF, gNB and data network on this machine, which must reach the pod IPs: the local testbed with real nodes or the kubeadm testbed, not ${o.kwokNodes ? '--kwok-nodes' : '--kubeconfig'}`);
  const maxDn = Math.max(...o.plan.dns);
  const freeze = sourceFreeze(o.freezeSource); // a bad value is an error before anything starts
  const mode = failureMode(o);
  if (mode === 'frozen-node' && (o.kwokNodes || o.kubeconfig))
    throw new Error(`failure frozen-node stops every process of the source node on this machine: it needs the local testbed with real nodes or the kubeadm testbed (--kubeadm), not ${o.kwokNodes ? '--kwok-nodes' : '--kubeconfig'}`);
  let kc: KubeConfig;
  let topology: (dn: number) => Topology;
  let shimNodes: () => Promise<string[]>;
  let failure: NodeFailure | undefined;
  let nodeTrace: ((taintAtMs: number) => NodeTrace | null) | undefined;
  let apiTrace: ((taintAtMs: number) => ApiTrace) | undefined;
  /** the local testbed with real nodes, whose components the configurator switches */
  let localRunDir: string | undefined;
  const notes: string[] = [];
  // the critical namespace's API writes, from the audit log of a testbed started with it (api-trace.ts)
  const audited = (state: testbed.TestbedState) => {
    if (state.options.auditNamespaces?.includes(CRITICAL_NAMESPACE)) apiTrace = auditLogTracer(auditLogPath(state.runDir), CRITICAL_NAMESPACE);
    else notes.push(`testbed in ${state.runDir} started without the apiserver audit log: no API trace of the critical pod (take it down to get one)`);
  };
  if (o.kubeconfig) {
    kc = o.kubeconfig;
    if (!o.sources?.length || !o.destinations?.length) throw new Error('--kubeconfig needs --sources and --destinations (node names)');
    if (o.destinations.length < maxDn) throw new Error(`--destinations lists ${o.destinations.length} node(s) but --dn asks for ${maxDn}`);
    topology = (dn) => ({ sources: o.sources!, destinations: o.destinations!.slice(0, dn) });
    // the nodes whose kubelet-shim reports in UlyssesConfig status (installed with manifests/)
    shimNodes = async () => {
      const comps = (await readRuntimeConfig(new KubeClient(kc)))?.status?.components ?? {};
      return Object.keys(comps).filter((k) => k.startsWith('kubelet-shim/')).map((k) => k.slice('kubelet-shim/'.length));
    };
    notes.push(`cluster: ${kc.getCurrentCluster()?.server}; kube-controller-manager must run with --controllers=${kcmControllersFlag(ULYSSES_CONTROLLERS)}`);
  } else if (o.kwokNodes) {
    const runDir = o.runDir ?? testbed.defaultRunDir();
    const sources = o.kwokSources ?? 10;
    topology = kwokTopology(sources, o.kwokNodes);
    topology(maxDn); // a plan that does not fit is an error before anything starts
    const state = await ensureExperimentTestbed(runDir, maxDn, o.kwokNodes, o.pinCpus);
    kc = testbed.kubeConfigFor(state);
    audited(state);
    shimNodes = async () => []; // no kubelet-shim: configs differ only in APF and the controller manager
    notes.push(
      `local KWOK testbed (control plane only: ${state.kwokNodes.length} KWOK nodes, pod lifecycle faked by kwok; sources kwok-1..kwok-${sources}, destinations kwok-${sources + 1}..kwok-${sources + maxDn}); ` +
        `kube-controller-manager --controllers=${state.options.controllers}`,
      'KWOK mode: no kubelet, so no kubelet-shim pacing (configurations differ in APF and the controller manager only) and no UDP client (Prio up is not measured)',
    );
  } else {
    const runDir = o.runDir ?? testbed.defaultRunDir();
    const state = await ensureExperimentTestbed(runDir, maxDn, undefined, o.pinCpus);
    kc = testbed.kubeConfigFor(state);
    audited(state);
    // a testbed brought up by an older checkout: the CRD must know every field the configurations set
    await ensureRuntimeConfigCrd(new KubeClient(kc));
    topology = testbedTopology;
    shimNodes = async () => state.realNodes.map((n) => n.name);
    if (o.scenario === '5g') await importEupfImage(state.realNodes.map((n) => n.socket), (l) => o.progress?.log(l));
    if (mode === 'frozen-node') failure = testbedStoppedNode(runDir);
    else if (freeze !== 'none') failure = testbedFrozenNode(runDir, freeze);
    nodeTrace = shimLogTracer(state.realNodes.map((n) => join(n.dir, 'kubelet-shim.log')), CRITICAL_NAMESPACE);
    localRunDir = runDir;
    notes.push(
      `local testbed (${state.realNodes.length} real nodes: kubelet ${state.version} + containerd via kubelet-shim${withUpstream ? `, directly in configuration ${stock.join(' and ')}` : ''}; source real-1, destinations real-2..real-${maxDn + 1}); ` +
        `kube-controller-manager --controllers=${kcmControllersFlag(ULYSSES_CONTROLLERS)}${withUpstream ? ` (${STOCK_KCM_CONTROLLERS} in configuration ${stock.join(' and ')})` : ''}`,
    );
  }
  if (o.cpuWindowProfile && o.cpuWindowMs === undefined) throw new Error('cpuWindowProfile needs cpuWindowMs');
  if (o.cpuWindowMs !== undefined && o.kubeconfig) throw new Error("profile cpuWindowMs reads this machine's /proc: it needs the local testbed, not --kubeconfig");
  if (o.pinCpus) {
    if (o.kubeconfig) throw new Error('profile pinCpus pins the local testbed: do not combine it with --kubeconfig');
    pinThisProcess('0');
    notes.push(
      `CPUs pinned (profile pinCpus): control plane and the harness (in-process controller manager, watches, UDP client) on CPU 0; ${o.kwokNodes ? 'kwok' : 'every node (kubelet, kubelet-shim, containerd, containerd-shim, runc, CNI; not the idle processes inside the containers)'} on CPU 1 — a stand-in for separate control-plane and worker machines`,
    );
  }
  const cmLog = pino({ level: process.env.ULYSSES_LOG_LEVEL ?? 'info' }, pino.destination({ dest: join(o.out, 'controller-manager.log'), mkdir: true, sync: false }));
  const cm = new InProcessControllerManager(kc, cmLog);
  const runtime = new RuntimeConfigConfigurator({
    ...runtimeConfiguratorOptions(o, kc),
    reporters: async () => ['controller-manager', 'apf', ...(await shimNodes()).map((n) => `kubelet-shim/${n}`)],
    shimPolicies: o.shimPolicyFiles ?? (o.plan.shimPolicies?.length ? resolveShimPolicies(o.plan.shimPolicies) : undefined),
  });
  // on the local testbed with real nodes the configurator also switches to stock Kubernetes and back
  const local = localRunDir ? new LocalTestbedConfigurator({ kubeconfig: kc, runDir: localRunDir, ulyssesControllers: kcmControllersFlag(ULYSSES_CONTROLLERS), runtime, controllerManager: cm, withUpstream, withUpstreamTuned }) : undefined;
  const configurator = local ?? runtime;
  try {
    if (local) await local.init();
    else await cm.start();
    return await thawOnInterrupt(failure, topology(maxDn).sources, () => runExperiment({
      ...failoverRunOptions(o, o.kwokNodes || o.kubeconfig ? undefined : freeze),
      kubeconfig: kc,
      configurator,
      topology,
      failure,
      // KWOK: the scale target of issue 7 is on scheduling and the EndpointSlice (no data plane to probe)
      ...(o.kwokNodes ? { tolerations: [{ ...KWOK_TOLERATION }], udpProbe: false, inflationTargets: ['prioScheduled', 'prioEndpointReady'] as EventName[], setupTimeoutMs: 600_000 } : {}),
      notes: [
        ...notes,
        ...runNotes(o),
        mode === 'frozen-node'
          ? frozenNodeNote(failure!)
          : `node failure: NoExecute taint${failure ? `; ${failure.description}` : o.kwokNodes ? ' only (kwok removes the evicted pods)' : ' only (the source kubelet keeps running and kills its pods)'}`,
      ],
      nodeTrace,
      apiTrace,
      // the in-process controller manager's own recovery measurement, checked against Prio in EndpointSlice
      recoveryMetric: () => cm.recovery(),
      cpuWindow: o.cpuWindowMs !== undefined ? new CpuWindowProbe(o.cpuWindowMs, o.cpuWindowProfile) : undefined,
      cpuAudit: o.kubeconfig ? undefined : new MachineCpuAudit(),
      repeatShared: o.repeatShared,
      // t=0 only once the in-process controller manager has worked off the setup (queues empty,
      // nothing running, no client-limiter debt): the failover must not queue behind it
      quiescent: () => cm.quiescent(),
      title: `${experimentTitle(o)}${withUpstream ? `, against stock Kubernetes (${stock.join(', ')}) on the local testbed` : ''}`,
    }));
  } finally {
    // leave the cluster in configuration 1 (no pacing, no exemption; on the testbed kcm without
    // Ulysses' controllers and the kubelets on their shims) for whoever uses it next
    await (local ? local.restore() : runtime.apply(1)).catch((err: Error) => o.progress?.log(`could not reset to configuration 1: ${err.message}`));
    await cm.stop();
    cmLog.flush();
  }
}

/**
 * Failure frozen-node's default repetition timeout: under stock settings a frozen node is marked
 * unreachable after kcm's 50 s node-monitor grace period and its pods are evicted once their 300 s
 * default tolerations run out (the replacement was Ready at 352 s on the testbed, 2026-11-28).
 */
export const FROZEN_NODE_REP_TIMEOUT_MS = 420_000;

/**
 * The run's failure mode (options.failure, default taint); a bad value, or a freezeSource that
 * contradicts frozen-node, is an error naming the field.
 */
export function failureMode(o: Pick<FailoverExperimentOptions, 'failure' | 'freezeSource'>): FailureMode {
  const mode = parseFailureMode(o.failure ?? 'taint', 'failure');
  const conflict = failureFreezeConflict(mode, o.freezeSource);
  if (conflict) throw new Error(conflict);
  return mode;
}

/** The report's line on the node failure of failure frozen-node, `failure` being what stops the node. */
export function frozenNodeNote(failure: NodeFailure): string {
  return (
    `node failure frozen-node: ${failure.description}; the harness writes no taint: t = 0 is the moment every one of those processes is stopped (each seen in state T in /proc), and the cluster has to find the failure itself. ` +
    'Detected: the first sign that something decided the node failed, the earlier of its Ready condition Unknown/False in the harness\' Node watch and a NodeFailureDetected Event about it (its MicroTime, else its arrival); ' +
    'Taint: the first NoExecute taint ulysses.io/unreachable, node.kubernetes.io/unreachable or node.kubernetes.io/not-ready on it in the Node watch. ' +
    `Default repetition timeout ${FROZEN_NODE_REP_TIMEOUT_MS / 1000} s (stock Kubernetes: kcm's 50 s node-monitor grace period plus the 300 s default tolerations)`
  );
}

/**
 * What every failover run gives runExperiment from its options, on whichever cluster it runs: the
 * plan, the namespaces, the report's inputs and the run conditions recorded with each repetition.
 */
export function failoverRunOptions(o: FailoverExperimentOptions, sourceFreeze: SourceFreeze | undefined) {
  const failure = failureMode(o);
  return {
    plan: o.plan,
    out: o.out,
    criticalNamespace: CRITICAL_NAMESPACE,
    loadNamespace: LOAD_NAMESPACE,
    minCriticalAgeMs: o.minCriticalAgeMs,
    quietBeforeFailureMs: o.quietBeforeFailureMs,
    command: o.command,
    repTimeoutMs: o.repTimeoutMs ?? (failure === 'frozen-node' ? FROZEN_NODE_REP_TIMEOUT_MS : undefined),
    progress: o.progress,
    scenario: o.scenario,
    ...(o.scenario === '5g' ? { userPlaneDir: join(o.out, 'user-plane') } : {}),
    ...(failure === 'frozen-node' ? { failureMode: failure } : {}),
    conditions: { clientRateLimit: o.clientRateLimit, scenario: o.scenario, ...(o.scenario === '5g' ? { userPlane: 'eupf' as const } : {}), pinnedCpus: o.pinCpus, criticalPathHoldMs: o.criticalPathHoldMs ?? DEFAULT_CRITICAL_PATH_HOLD_MS, minCriticalAgeMs: o.minCriticalAgeMs, quietBeforeFailureMs: o.quietBeforeFailureMs, sourceFreeze, failure },
    neutralSetup: o.neutralSetup,
    warmup: o.warmup,
  };
}

/** The runtime configurator's settings every failover run shares (the paced shim config, the hold, the rate limit). */
export function runtimeConfiguratorOptions(o: FailoverExperimentOptions, kubeconfig: KubeConfig) {
  return {
    kubeconfig,
    controllers: ULYSSES_CONTROLLERS,
    pacedShimConfig: o.pacedShimConfig ?? DEFAULT_PACED_SHIM_CONFIG,
    criticalNamespace: CRITICAL_NAMESPACE,
    clientRateLimit: o.clientRateLimit,
    criticalPathHoldMs: o.criticalPathHoldMs ?? DEFAULT_CRITICAL_PATH_HOLD_MS,
  };
}

/**
 * Runs `run` so that an interrupt (Ctrl-C, SIGTERM) first resumes the stopped source nodes: a run
 * never leaves a frozen kubelet or containerd behind.
 */
export async function thawOnInterrupt<T>(failure: NodeFailure | undefined, sources: string[], run: () => Promise<T>): Promise<T> {
  const onSignal = (sig: NodeJS.Signals) => {
    void (failure?.thaw(sources) ?? Promise.resolve()).finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await run();
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

export function experimentTitle(o: Pick<FailoverExperimentOptions, 'plan' | 'clientRateLimit' | 'scenario'>): string {
  const parts = [o.scenario === '5g' ? '5G failover (thesis §6.1.2; UPF = eUPF, PFCP and GTP-U from stand-ins)' : o.plan.shimPolicies?.length ? 'Kubelet policy comparison (thesis §6.1, Fig 6.5)' : 'Failover experiment (thesis §4.3.2, Table 6.1)'];
  if (o.clientRateLimit === false) parts.push('rate limiting off');
  return parts.join(', ');
}

export function runNotes(o: Pick<FailoverExperimentOptions, 'plan' | 'clientRateLimit' | 'scenario' | 'minCriticalAgeMs' | 'quietBeforeFailureMs'>): string[] {
  const notes: string[] = [
    `the critical pod's events (Prio scheduled, Prio ready) also from a watch of the namespace ${CRITICAL_NAMESPACE} of its own: in the watch of every experiment pod its binding queues behind the low pods' events, an observer's delay that grows with the load`,
  ];
  if (o.minCriticalAgeMs)
    notes.push(
      `t = 0 no earlier than ${o.minCriticalAgeMs / 1000} s after the critical pod's creation (profile minCriticalAgeMs): a failure in steady state, in every cell; right after a short setup (the idle cells) the apiserver's LimitRanger still had the critical namespace's live lookup cached (30 s), so the idle replacement's creation skipped a LIST of LimitRanges that the load cells' creation paid`,
    );
  if (o.quietBeforeFailureMs)
    notes.push(
      `${o.quietBeforeFailureMs / 1000} s without a request of the harness between the configuration switch and t = 0 (profile quietBeforeFailureSeconds; its watches stay open): the first failover after a quiet spell, when the apiserver has closed connections a component did not use`,
    );
  if (o.plan.shimPolicies?.length) notes.push(`kubelet policy comparison: each configuration runs with the kubelet-shim policies ${o.plan.shimPolicies.join(', ')} (configuration key "<config>/<policy>"), switched at runtime through spec.kubeletShim`);
  if (o.clientRateLimit === false)
    notes.push(
      "rate limiting off: the controller manager's client-side limiter (kcm --kube-api-qps 20 / --kube-api-burst 30) is off in every configuration; the kubelets' (50 qps) and the scheduler's (50 qps) client limits are unchanged (not switchable at runtime; not reached at this scale), APF as the configuration says",
    );
  if (o.scenario === '5g')
    notes.push(
      `5G scenario: the UPF is eUPF v0.7.1 (Deployment/Service ${UPF_NAME} in ${CRITICAL_NAMESPACE}; real: PFCP, GTP-U, XDP forwarding), Ready through its health API; on the host, stand-ins for the SMF (PFCP association and one session, the UPF found through the Service's EndpointSlice, re-established on the new UPF with the same UE IP and TEIDs), the gNB/UE (uplink G-PDUs every 20 ms; N2 stands in as a UDP message from the SMF) and the data network (a UDP echo; N6 routing as a host route to the UE pool via the UPF pod, set by the SMF). Connection restored: the first downlink GTP-U reply through the new UPF. Not real: AMF, NAS/NGAP, UE registration, the SMF's control logic. The low-priority load is a multi-service app (Deployments of 2 pods named after train-ticket services, each with its own Service)`,
    );
  return notes;
}
