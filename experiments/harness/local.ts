/**
 * The failover experiment on the local testbed (or on any cluster through a kubeconfig): brings up
 * what it needs, starts Ulysses' controller manager in-process and wires the runtime toggles.
 *
 * Local testbed: started once with kube-controller-manager's failover-path controllers disabled
 * (those Ulysses' controller manager implements) and a kubelet-shim on every real node (vanilla
 * policy); configs 1-3 run Ulysses' controller manager in `vanilla` mode, which imitates kcm
 * (FIFO, 5 workers, 20 qps / burst 30), configs 4-5 its multi-priority modes.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import type { KubeConfig } from '@kubernetes/client-node';
import { CONTROLLERS, ControllerManager, type ControllerName } from '../../controller-manager/manager.ts';
import * as testbed from '../testbed/testbed.ts';
import { KWOK_TOLERATION } from '../testbed/kwok.ts';
import { kcmControllersFlag } from './configurator.ts';
import { RuntimeConfigConfigurator } from './runtime-configurator.ts';
import { controllerManagerRuntimeWatcher } from '../../controller-manager/runtime.ts';
import { apfRuntimeWatcher } from '../../apf-configs/runtime.ts';
import { KubeClient } from '../../core/kube.ts';
import { readRuntimeConfig } from '../../core/runtime-config.ts';
import { runExperiment, type ExperimentPlan } from './experiment.ts';
import type { ProgressBar } from './progress.ts';
import type { NodeFailure, Topology } from './scenario.ts';
import type { EventName } from './results.ts';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const SHIM_CONFIGS = join(REPO, 'kubelet-shim', 'configs');
export const DEFAULT_PACED_SHIM_CONFIG = join(SHIM_CONFIGS, 'ulysses-cloud.yaml');
export const VANILLA_SHIM_CONFIG = join(SHIM_CONFIGS, 'vanilla.yaml');
export const CRITICAL_NAMESPACE = 'ulysses-critical';
export const LOAD_NAMESPACE = 'ulysses-load';

/** The Ulysses controllers the experiment runs (all it has); kcm keeps everything else. */
export const ULYSSES_CONTROLLERS: readonly ControllerName[] = CONTROLLERS;

/** Testbed options the experiment needs: 1 source + max DN destinations, kcm without our controllers, shims. */
export function experimentTestbedOptions(runDir: string, maxDn: number): testbed.TestbedOptions {
  return { runDir, realNodes: 1 + maxDn, controllers: kcmControllersFlag(ULYSSES_CONTROLLERS), kubeletShimConfig: VANILLA_SHIM_CONFIG };
}

/** Testbed topology: real-1 fails, real-2 .. real-(DN+1) receive. */
export const testbedTopology = (dn: number): Topology => ({ sources: ['real-1'], destinations: Array.from({ length: dn }, (_, i) => `real-${i + 2}`) });

/**
 * Testbed node failure: SIGSTOP the source node's kubelet right before the taint (its containers keep
 * running, nothing is torn down on the shared CPUs during the measurement), SIGCONT for the cleanup.
 */
export function testbedFrozenKubelet(runDir: string): NodeFailure {
  const pidOf = (node: string) => {
    const p = testbed.readState(runDir)?.processes.find((x) => x.name === `kubelet/${node}`);
    if (!p) throw new Error(`no kubelet of node ${node} in the testbed of ${runDir}`);
    return p.pid;
  };
  return {
    description: "the source node's kubelet is stopped (SIGSTOP) at t=0 and resumed for the cleanup, as a failed machine would not tear its pods down on the destinations' CPUs",
    async freeze(nodes) {
      for (const n of nodes) process.kill(pidOf(n), 'SIGSTOP');
    },
    async thaw(nodes) {
      for (const n of nodes) process.kill(pidOf(n), 'SIGCONT');
    },
  };
}

/**
 * KWOK mode (scale run, issue 7): a control-plane-only testbed of `kwokNodes` KWOK nodes, no real
 * node, no kubelet-shim (KWOK fakes the pod lifecycle, so kubelet pacing has nothing to pace);
 * kcm again without the controllers Ulysses replaces.
 */
export function kwokExperimentTestbedOptions(runDir: string, kwokNodes: number): testbed.TestbedOptions {
  return { runDir, realNodes: 0, kwokNodes, controllers: kcmControllersFlag(ULYSSES_CONTROLLERS) };
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
export async function ensureExperimentTestbed(runDir: string, maxDn: number, kwokNodes?: number): Promise<testbed.TestbedState> {
  const want = kwokNodes ? kwokExperimentTestbedOptions(runDir, kwokNodes) : experimentTestbedOptions(runDir, maxDn);
  const existing = testbed.readState(runDir);
  if (existing?.ready && !(await testbed.statusProblems(existing)).length) {
    const problems: string[] = [];
    if (existing.options.realNodes < want.realNodes!) problems.push(`realNodes ${existing.options.realNodes} (need ${want.realNodes} for DN ${maxDn})`);
    if (existing.options.kwokNodes < (want.kwokNodes ?? 0)) problems.push(`kwokNodes ${existing.options.kwokNodes} (need ${want.kwokNodes})`);
    if (existing.options.controllers !== want.controllers) problems.push(`controllers "${existing.options.controllers}" (need "${want.controllers}")`);
    if (want.kubeletShimConfig && !existing.options.kubeletShimConfig) problems.push('no kubelet-shim on the real nodes');
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
  /** local testbed: stop the source kubelet during the failover (default true) */
  freezeSource?: boolean;
  /** KWOK mode: a testbed of this many KWOK nodes only (no real node, no UDP client) */
  kwokNodes?: number;
  /** KWOK mode: how many of them fail (default 10) */
  kwokSources?: number;
  command?: string;
  progress?: ProgressBar;
}

export async function runFailoverExperiment(o: FailoverExperimentOptions) {
  const maxDn = Math.max(...o.plan.dns);
  const pacedConfig = o.pacedShimConfig ?? DEFAULT_PACED_SHIM_CONFIG;
  let kc: KubeConfig;
  let topology: (dn: number) => Topology;
  let shimNodes: () => Promise<string[]>;
  let failure: NodeFailure | undefined;
  const notes: string[] = [];
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
    const state = await ensureExperimentTestbed(runDir, maxDn, o.kwokNodes);
    kc = testbed.kubeConfigFor(state);
    shimNodes = async () => []; // no kubelet-shim: configs differ only in APF and the controller manager
    notes.push(
      `local KWOK testbed (control plane only: ${state.kwokNodes.length} KWOK nodes, pod lifecycle faked by kwok; sources kwok-1..kwok-${sources}, destinations kwok-${sources + 1}..kwok-${sources + maxDn}); ` +
        `kube-controller-manager --controllers=${state.options.controllers}`,
      'KWOK mode: no kubelet, so no kubelet-shim pacing (configurations differ in APF and the controller manager only) and no UDP client (Prio up is not measured)',
    );
  } else {
    const runDir = o.runDir ?? testbed.defaultRunDir();
    const state = await ensureExperimentTestbed(runDir, maxDn);
    kc = testbed.kubeConfigFor(state);
    topology = testbedTopology;
    shimNodes = async () => state.realNodes.map((n) => n.name);
    if (o.freezeSource ?? true) failure = testbedFrozenKubelet(runDir);
    notes.push(
      `local testbed (${state.realNodes.length} real nodes: kubelet ${state.version} + containerd via kubelet-shim; source real-1, destinations real-2..real-${maxDn + 1}); ` +
        `kube-controller-manager --controllers=${state.options.controllers}`,
    );
  }
  const cmLog = pino({ level: process.env.ULYSSES_LOG_LEVEL ?? 'info' }, pino.destination({ dest: join(o.out, 'controller-manager.log'), mkdir: true, sync: false }));
  const cm = new ControllerManager({ kubeconfig: kc, controllers: [...ULYSSES_CONTROLLERS], log: cmLog });
  await cm.start();
  // the in-process controller manager follows UlyssesConfig like an installed one (and hosts APF)
  const watchers = [controllerManagerRuntimeWatcher(kc, cm, ULYSSES_CONTROLLERS, cmLog), apfRuntimeWatcher(kc, cmLog)];
  for (const w of watchers) await w.start();
  const configurator = new RuntimeConfigConfigurator({
    kubeconfig: kc,
    controllers: ULYSSES_CONTROLLERS,
    pacedShimConfig: pacedConfig,
    criticalNamespace: CRITICAL_NAMESPACE,
    reporters: async () => ['controller-manager', 'apf', ...(await shimNodes()).map((n) => `kubelet-shim/${n}`)],
  });
  // interrupted (Ctrl-C): never leave a source kubelet stopped behind
  const onSignal = (sig: NodeJS.Signals) => {
    void (failure?.thaw(topology(maxDn).sources) ?? Promise.resolve()).finally(() => process.exit(sig === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    return await runExperiment({
      kubeconfig: kc,
      configurator,
      plan: o.plan,
      topology,
      out: o.out,
      criticalNamespace: CRITICAL_NAMESPACE,
      loadNamespace: LOAD_NAMESPACE,
      failure,
      // KWOK: the scale target of issue 7 is on scheduling and the EndpointSlice (no data plane to probe)
      ...(o.kwokNodes ? { tolerations: [{ ...KWOK_TOLERATION }], udpProbe: false, inflationTargets: ['prioScheduled', 'prioEndpointReady'] as EventName[], setupTimeoutMs: 600_000 } : {}),
      notes: [
        ...notes,
        `node failure: NoExecute taint${failure ? `; ${failure.description}` : o.kwokNodes ? ' only (kwok removes the evicted pods)' : ' only (the source kubelet keeps running and kills its pods)'}`,
      ],
      command: o.command,
      repTimeoutMs: o.repTimeoutMs,
      progress: o.progress,
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    // leave the cluster in configuration 1 (no pacing, no exemption) for whoever uses it next
    await configurator.apply(1).catch((err: Error) => o.progress?.log(`could not reset to configuration 1: ${err.message}`));
    for (const w of watchers) await w.stop();
    await cm.stop();
    cmLog.flush();
  }
}
