/**
 * Configurations `upstream` and `upstream-tuned` (stock Kubernetes, and stock Kubernetes tuned for
 * node failure) against Ulysses' configurations 1..5 on the local testbed, switched by restarting
 * components, as the kubeadm configurator does by its install steps:
 *
 *   family         | kube-controller-manager                           | Ulysses controller manager | each real node's kubelet
 *   upstream       | --controllers=* (all its controllers)             | stopped (no APF exemption) | on its containerd's socket
 *   upstream-tuned | --controllers=* and the node monitor of           | stopped (no APF exemption) | on its containerd's socket, Lease
 *                  | upstream-tuned.ts (1 s, grace 5 s)                |                            | renewed every 1 s, status every 1 s
 *   ulysses        | --controllers without the ones Ulysses runs       | in the harness' process    | on its kubelet-shim's socket
 *
 * kube-scheduler is the same in all (the experiment testbed runs it without an extender). Within
 * the Ulysses family the configurations switch through UlyssesConfig (runtime-configurator.ts); a
 * change of family restarts kube-controller-manager and every kubelet (testbed.ts
 * restartControllerManager, restartKubelet) and stops or starts the in-process controller manager.
 * Pods keep running across a switch: every kubelet finds its containers again on the same containerd.
 * (upstream-tuned's third setting, the critical pod's tolerations, is the workload's: experiment.ts.)
 */
import { readFileSync, statSync } from 'node:fs';
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { parse as parseYaml } from 'yaml';
import { readApfExemption, removeApfExemption } from '../../apf-configs/apply.ts';
import { ULYSSES_NAMESPACE } from '../../manifests/overlays.ts';
import * as testbed from '../testbed/testbed.ts';
import { kubeletConfigEndpoint, kubeletHeartbeat, runtimeOfEndpoint, type KubeletHeartbeat, type KubeletRuntime } from '../testbed/realnode.ts';
import type { ClusterConfigurator } from './configurator.ts';
import { isStockConfig, isUlyssesConfig, type ConfigId, type RepResult } from './results.ts';
import { familyOf, familySettings, familySetupConfig, kcmHasNodeMonitor, kcmNodeMonitorFlags, kubeletHeartbeatKind, upstreamTunedNote, type Family } from './upstream-tuned.ts';

export { familyOf, type Family } from './upstream-tuned.ts';
const FAMILIES: readonly Family[] = ['upstream', 'upstream-tuned', 'ulysses'];

/** kube-controller-manager's --controllers in stock Kubernetes: all of them. */
export const STOCK_KCM_CONTROLLERS = '*';

/** What a family puts on the failover path of the local testbed. */
export interface FamilyComponents {
  /** kube-controller-manager --controllers */
  kcmControllers: string;
  /** kube-controller-manager's node-monitor flags (`--name=value`; empty: its defaults) */
  kcmFlags: string[];
  /** the CRI endpoint of every real node's kubelet */
  kubelet: KubeletRuntime;
  /** every kubelet's Lease and status period: upstream-tuned's, or stock */
  kubeletHeartbeat: 'tuned' | 'stock';
  /** the Ulysses controller manager (in the harness' process) runs */
  controllerManager: boolean;
}

/** `ulyssesControllers`: kcm's --controllers in the Ulysses family (without the controllers Ulysses runs). */
export function familyComponents(family: Family, ulyssesControllers: string): FamilyComponents {
  const { kcmFlags, kubeletHeartbeat } = familySettings(family);
  const heartbeat = kubeletHeartbeat === 'stock' ? 'stock' : 'tuned';
  return family === 'ulysses'
    ? { kcmControllers: ulyssesControllers, kcmFlags, kubelet: 'kubelet-shim', kubeletHeartbeat: heartbeat, controllerManager: true }
    : { kcmControllers: STOCK_KCM_CONTROLLERS, kcmFlags, kubelet: 'containerd', kubeletHeartbeat: heartbeat, controllerManager: false };
}

/** A running kubelet as read from its process: the runtime it was started on and its heartbeat. */
export interface LocalKubelet {
  /** undefined: another endpoint, or not known (see LocalPath.kubelets) */
  runtime: KubeletRuntime | undefined;
  /** upstream-tuned's Lease and status period, stock (the kubelet's defaults), another, or undefined: not known */
  heartbeat: 'tuned' | 'stock' | 'other' | undefined;
}

/** What of the local testbed is on the failover path now (read from the running processes). */
export interface LocalPath {
  /** the running kube-controller-manager's --controllers; undefined when none runs */
  kcmControllers: string | undefined;
  /** the running kube-controller-manager's --node-monitor-* flags (empty: its defaults) */
  kcmFlags: string[];
  /**
   * per real node, its running kubelet; runtime and heartbeat undefined: a config file changed since
   * the kubelet started (so not what it uses), or no kubelet running
   */
  kubelets: Record<string, LocalKubelet>;
  controllerManager: boolean;
  apfExemption: boolean;
}

/** kcm runs the family's --controllers and node monitor (its flags compared as durations). */
const kcmOf = (p: LocalPath, want: FamilyComponents) => p.kcmControllers === want.kcmControllers && kcmHasNodeMonitor(p.kcmFlags, want.kcmFlags);
/** A kubelet is on the family's runtime with its heartbeat. */
const kubeletOf = (k: LocalKubelet, want: FamilyComponents) => k.runtime === want.kubelet && k.heartbeat === want.kubeletHeartbeat;

/** The family the path is in; undefined when mixed (e.g. a switch interrupted half-way). */
export function pathFamily(p: LocalPath, ulyssesControllers: string): Family | undefined {
  return FAMILIES.find((f) => {
    const want = familyComponents(f, ulyssesControllers);
    return (
      kcmOf(p, want) &&
      Object.values(p.kubelets).every((k) => kubeletOf(k, want)) &&
      p.controllerManager === want.controllerManager &&
      // stock Kubernetes has no exemption; in the Ulysses family the configuration decides
      (f === 'ulysses' || !p.apfExemption)
    );
  });
}

export type SwitchStep =
  | { do: 'configuration-1' }
  | { do: 'stop-controller-manager' }
  | { do: 'remove-apf-exemption' }
  | { do: 'restart-kcm'; controllers: string; flags: string[] }
  | { do: 'start-controller-manager' }
  | { do: 'restart-kubelet'; node: string; runtime: KubeletRuntime; heartbeat: 'tuned' | 'stock' };

/**
 * The steps from path `p` to family `want`, only those whose component differs (a switch interrupted
 * half-way is finished, nothing is restarted twice), in an order that never runs two controllers of
 * one kind: to a stock family the Ulysses controller manager stops (and its APF exemption goes) before
 * kube-controller-manager takes its controllers back; to Ulysses kube-controller-manager drops them
 * before the Ulysses controller manager starts. The kubelets come last, except to upstream-tuned:
 * there they renew their Lease every 1 s before kcm fails a node after 5 s without (so kcm never has
 * the short grace period while a kubelet still renews every 10 s). A controller manager about
 * to stop is put in configuration 1 first: UlyssesConfig then says "no exemption", so the one
 * started by the next switch to Ulysses creates no FlowSchema only to delete it for the setup (the
 * apiserver delays its status for a FlowSchema written more than 5 times a minute).
 */
export function switchPlan(p: LocalPath, want: Family, ulyssesControllers: string): SwitchStep[] {
  const target = familyComponents(want, ulyssesControllers);
  const steps: SwitchStep[] = [];
  if (!target.controllerManager && p.controllerManager) steps.push({ do: 'configuration-1' }, { do: 'stop-controller-manager' });
  if (want !== 'ulysses' && p.apfExemption) steps.push({ do: 'remove-apf-exemption' });
  const kcm: SwitchStep[] = kcmOf(p, target) ? [] : [{ do: 'restart-kcm', controllers: target.kcmControllers, flags: target.kcmFlags }];
  const kubelets: SwitchStep[] = Object.entries(p.kubelets)
    .sort(([a], [b]) => a.localeCompare(b))
    .filter(([, k]) => !kubeletOf(k, target))
    .map(([node]) => ({ do: 'restart-kubelet', node, runtime: target.kubelet, heartbeat: target.kubeletHeartbeat }));
  if (target.kubeletHeartbeat === 'tuned') steps.push(...kubelets, ...kcm);
  else steps.push(...kcm);
  if (target.controllerManager && !p.controllerManager) steps.push({ do: 'start-controller-manager' });
  if (target.kubeletHeartbeat !== 'tuned') steps.push(...kubelets);
  return steps;
}

/** kcm's --controllers as results.jsonl records it: "all", "all but a,b" (as on kubeadm), "only a,b", "not running". */
export function describeKcmControllers(flag: string | undefined): string {
  if (flag === undefined) return 'not running';
  const items = flag.split(',').map((c) => c.trim()).filter(Boolean);
  const disabled = items.filter((c) => c.startsWith('-')).map((c) => c.slice(1));
  if (!items.includes('*')) return `only ${items.join(',')}`;
  return disabled.length ? `all but ${disabled.join(',')}` : 'all';
}

/** The value of `--name=` in a command line (the last one, as Go's flag parsing keeps). */
export function flagValue(args: readonly string[], name: string): string | undefined {
  return args.filter((a) => a.startsWith(`--${name}=`)).map((a) => a.slice(name.length + 3)).pop();
}

/** The command line of process `pid`; undefined when it is gone. */
function cmdline(pid: number | undefined): string[] | undefined {
  if (pid === undefined) return undefined;
  try {
    const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return args.at(-1) === '' ? args.slice(0, -1) : args;
  } catch {
    return undefined;
  }
}

/** Epoch ms at which process `pid` started (its start after boot in /proc/<pid>/stat plus /proc/stat's btime; 10 ms ticks). */
function processStartMs(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const startTicks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]); // field 22, starttime
    const btime = Number(/^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1]);
    return Number.isFinite(startTicks) && Number.isFinite(btime) ? btime * 1000 + startTicks * 10 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The config the running kubelet `pid` uses: the config file its command line names, provided the
 * file was last written before the process started (btime has whole seconds: 1 s of slack), with its
 * CRI endpoint (containerRuntimeEndpoint) and heartbeat; otherwise why that cannot be told.
 */
function kubeletLiveConfig(pid: number | undefined): { endpoint?: string; heartbeat?: KubeletHeartbeat; text?: string; problem?: string } {
  const args = cmdline(pid);
  if (!args || pid === undefined) return { problem: 'not running' };
  const file = flagValue(args, 'config');
  if (!file) return { problem: 'started without --config' };
  const text = readFileSync(file, 'utf8');
  const endpoint = kubeletConfigEndpoint(text);
  if (!endpoint) return { problem: `${file} sets no containerRuntimeEndpoint` };
  const started = processStartMs(pid);
  if (started === undefined || statSync(file).mtimeMs > started + 1000) return { problem: `${endpoint} in ${file}, written after the kubelet started` };
  return { endpoint, heartbeat: kubeletHeartbeat(text), text };
}

/** kube-scheduler runs with an extender: its --config names a KubeSchedulerConfiguration with extenders. */
function schedulerHasExtender(pid: number | undefined): boolean {
  const file = flagValue(cmdline(pid) ?? [], 'config');
  if (!file) return false;
  const cfg = parseYaml(readFileSync(file, 'utf8')) as { extenders?: unknown[] } | null;
  return (cfg?.extenders?.length ?? 0) > 0;
}

/** The in-process Ulysses controller manager, as the configurator starts and stops it. */
export interface ControllerManagerHost {
  readonly running: boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface LocalTestbedConfiguratorOptions {
  kubeconfig: KubeConfig;
  runDir: string;
  /** kube-controller-manager --controllers in the Ulysses family */
  ulyssesControllers: string;
  /** the configurations 1..5 through UlyssesConfig, once the Ulysses family is on the path */
  runtime: ClusterConfigurator;
  controllerManager: ControllerManagerHost;
  /** the run's plan has configuration upstream or upstream-tuned (describe() explains the switch only then) */
  withUpstream: boolean;
  /** the run's plan has configuration upstream-tuned (describe() gives its settings) */
  withUpstreamTuned?: boolean;
}

export class LocalTestbedConfigurator implements ClusterConfigurator {
  /** the family on the path; undefined: not known or mixed (the next apply() runs every step it needs) */
  private mode: Family | undefined;
  private pending: { to: Family; seconds: number } | undefined;
  readonly switches: Array<{ to: Family; seconds: number }> = [];

  constructor(private readonly o: LocalTestbedConfiguratorOptions) {}

  /**
   * Reads the path at the start of a run: a testbed whose kcm and kubelets are in the Ulysses family
   * (as `up` brings it) gets its controller manager started, which is no switch; one left in another
   * state (e.g. stock, by an interrupted run) is switched by the first apply().
   */
  async init(): Promise<Family | undefined> {
    const p = await this.path();
    const ulysses = familyComponents('ulysses', this.o.ulyssesControllers);
    if (kcmOf(p, ulysses) && Object.values(p.kubelets).every((k) => kubeletOf(k, ulysses))) {
      if (!this.o.controllerManager.running) await this.o.controllerManager.start();
      this.mode = 'ulysses';
    } else this.mode = pathFamily(p, this.o.ulyssesControllers);
    return this.mode;
  }

  setupConfig(config: ConfigId): ConfigId {
    return familySetupConfig(config);
  }

  family(config: ConfigId): Family {
    return familyOf(config);
  }

  takeSwitch(): { to: Family; seconds: number } | undefined {
    const s = this.pending;
    this.pending = undefined;
    return s;
  }

  async apply(config: ConfigId, shimPolicy?: string): Promise<void> {
    if (isStockConfig(config) && shimPolicy !== undefined) throw new Error(`configuration ${config} has no kubelet-shim: a kubelet-shim policy does not apply`);
    const want = familyOf(config);
    if (this.mode !== want) {
      const t0 = Date.now();
      await this.switchTo(want);
      const sw = { to: want, seconds: Math.round((Date.now() - t0) / 100) / 10 };
      this.switches.push(sw);
      this.pending = sw;
    }
    if (isUlyssesConfig(config)) await this.o.runtime.apply(config, shimPolicy);
  }

  /** Back to the testbed's own state at the end of a run: the Ulysses family in configuration 1 (not recorded as a switch). */
  async restore(): Promise<void> {
    if (this.mode !== 'ulysses') await this.switchTo('ulysses');
    await this.o.runtime.apply(1);
  }

  /** Runs the steps from the path now to `want` (the kubelets side by side), then checks the path is there. */
  private async switchTo(want: Family): Promise<void> {
    this.mode = undefined; // until the path is verified
    const steps = switchPlan(await this.path(), want, this.o.ulyssesControllers);
    const kubelets = steps.filter((s): s is Extract<SwitchStep, { do: 'restart-kubelet' }> => s.do === 'restart-kubelet');
    for (const s of steps) {
      if (s.do === 'configuration-1') await this.o.runtime.apply(1);
      else if (s.do === 'stop-controller-manager') await this.o.controllerManager.stop();
      else if (s.do === 'remove-apf-exemption') await removeApfExemption(this.o.kubeconfig);
      else if (s.do === 'restart-kcm') await testbed.restartControllerManager(s.controllers, this.o.runDir, s.flags);
      else if (s.do === 'start-controller-manager') await this.o.controllerManager.start();
      // the kubelets side by side, where the plan has the first of them
      else if (s === kubelets[0]) await Promise.all(kubelets.map((k) => testbed.restartKubelet(k.node, k.runtime, this.o.runDir, k.heartbeat === 'tuned' ? familySettings('upstream-tuned').kubeletHeartbeat : 'stock')));
    }
    const now = await this.path();
    if (pathFamily(now, this.o.ulyssesControllers) !== want) throw new Error(`switch to ${want}: the path is not there after ${steps.map((s) => s.do).join(', ')}: ${JSON.stringify(now)}`);
    this.mode = want;
  }

  /** The path as the planning needs it. */
  async path(): Promise<LocalPath> {
    const { path } = await this.read();
    return path;
  }

  /** What was on the failover path (recorded with each repetition after its events). */
  async inspect(): Promise<NonNullable<RepResult['cluster']>> {
    const { cluster } = await this.read();
    return cluster;
  }

  private async read(): Promise<{ path: LocalPath; cluster: NonNullable<RepResult['cluster']> }> {
    const state = testbed.readState(this.o.runDir);
    if (!state) throw new Error(`no testbed in ${this.o.runDir}`);
    const pid = (name: string) => state.processes.find((p) => p.name === name)?.pid;
    const kcm = cmdline(pid('kube-controller-manager'));
    const kcmControllers = kcm ? (flagValue(kcm, 'controllers') ?? STOCK_KCM_CONTROLLERS) : undefined;
    const kcmFlags = kcmNodeMonitorFlags(kcm ?? []);
    const kubelets: LocalPath['kubelets'] = {};
    const kubeletRuntime: Record<string, string> = {};
    const heartbeats: NonNullable<NonNullable<RepResult['cluster']>['kubeletHeartbeat']> = {};
    for (const n of state.realNodes) {
      const { endpoint, heartbeat, text, problem } = kubeletLiveConfig(pid(`kubelet/${n.name}`));
      kubelets[n.name] = { runtime: endpoint === undefined || problem ? undefined : runtimeOfEndpoint(n, endpoint), heartbeat: text === undefined ? undefined : kubeletHeartbeatKind(text) };
      kubeletRuntime[n.name] = problem ?? endpoint!;
      heartbeats[n.name] = heartbeat ?? problem!;
    }
    const apfExemption = (await readApfExemption(this.o.kubeconfig)) !== undefined;
    // an installed controller manager (manifests/) would be on the path too
    const pods = (await this.o.kubeconfig.makeApiClient(CoreV1Api).listNamespacedPod({ namespace: ULYSSES_NAMESPACE, labelSelector: 'app.kubernetes.io/name=ulysses-controller-manager' })).items;
    const controllerManager = this.o.controllerManager.running;
    return {
      path: { kcmControllers, kcmFlags, kubelets, controllerManager, apfExemption },
      cluster: {
        kcmControllers: describeKcmControllers(kcmControllers),
        ...(kcm ? { kcmNodeMonitorFlags: kcmFlags } : {}),
        kubeletHeartbeat: heartbeats,
        schedulerExtender: schedulerHasExtender(pid('kube-scheduler')),
        kubeletRuntime,
        ulyssesControllerManagerPods: pods.filter((p) => p.status?.phase === 'Running' && !p.metadata?.deletionTimestamp).length,
        controllerManagerInProcess: controllerManager,
        apfExemption,
      },
    };
  }

  describe(): string[] {
    return [
      ...(this.o.withUpstream
        ? [
            `configuration upstream (stock Kubernetes on the testbed): kube-controller-manager restarted with --controllers=${STOCK_KCM_CONTROLLERS} (all its controllers), the in-process Ulysses controller manager stopped and no APF exemption, kube-scheduler as the testbed runs it (no extender), every kubelet restarted on its containerd's socket directly (the kubelet-shims keep running, unused); nothing of Ulysses on the path`,
            ...(this.o.withUpstreamTuned ? [upstreamTunedNote('the testbed: kube-controller-manager and every kubelet restarted with them; the kubelets before kcm to upstream-tuned, kcm first from it')] : []),
            `Ulysses configurations: kube-controller-manager --controllers=${this.o.ulyssesControllers}, the in-process Ulysses controller manager, every kubelet on its node's kubelet-shim; the configuration then switched through UlyssesConfig`,
            "run order: each repetition runs every cell of one family (upstream, upstream-tuned, or the Ulysses configurations), then of the next, the family order reversed every other repetition; a switch (kube-controller-manager and every kubelet restarted, the in-process controller manager stopped or started) runs once per change of family, before the repetition's setup (its duration in results.jsonl configSwitch and the report); what was on the path is read from the running processes after each repetition's events (results.jsonl cluster: kcm's --controllers and --node-monitor-* flags, each kubelet's CRI endpoint and Lease/status periods)",
          ]
        : []),
      ...this.o.runtime.describe(),
    ];
  }
}
