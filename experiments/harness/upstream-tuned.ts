/**
 * Configuration `upstream-tuned`: stock Kubernetes (as `upstream`: kcm with all its controllers,
 * kube-scheduler without the extender, kubelets on containerd) with the fastest node-failure handling
 * its own settings give, as a user who wants fast failover would set it up. Three settings, each
 * undone by a switch to any other configuration (they run with stock settings):
 *
 *   setting                          | upstream-tuned                          | stock
 *   kube-controller-manager          | --node-monitor-period=1s                | 5s
 *                                    | --node-monitor-grace-period=5s          | 50s
 *   every kubelet (config file)      | nodeLeaseDurationSeconds: 4 (renew 1 s) | 40 (renewed every 10 s)
 *                                    | nodeStatusUpdateFrequency: 1s           | 10s
 *   the critical pod's tolerations   | node.kubernetes.io/unreachable and      | none of its own: the
 *                                    | /not-ready, NoExecute, tolerationSeconds 0 | DefaultTolerationSeconds plugin's 300 s
 *
 * Why these (Kubernetes 1.37.2 source):
 * - kcm's node lifecycle controller checks every --node-monitor-period whether a node's Lease renewTime
 *   (or its Ready heartbeat) moved since the last check, and marks the node Unknown once none did for
 *   --node-monitor-grace-period (tryUpdateNodeHealth), then taints it node.kubernetes.io/unreachable
 *   NoExecute within 100 ms (doNoExecuteTaintingPass, a token bucket of burst 1). kcm validates neither
 *   flag (NodeLifecycleControllerOptions.Validate is empty); the flag's help and the controller's
 *   comment ask for a grace period of "N times" the kubelet's heartbeat period, N the retries a kubelet
 *   makes (nodeStatusUpdateRetry and the Lease controller's maxUpdateRetries: 5), and, since 1.32, more
 *   than the 45 s HTTP/2 health check (read idle 15 s + ping 30 s) so that a kubelet whose connection
 *   died silently has reconnected before its node is failed (issue #127352: the 40 -> 50 s default).
 * - the kubelet renews its Lease every nodeLeaseDurationSeconds x 0.25 (nodeLeaseRenewIntervalFraction;
 *   4 s -> 1 s, jitter 4%) through a heartbeat client whose timeout is min(nodeStatusUpdateFrequency,
 *   nodeLeaseDurationSeconds) (cmd/kubelet/app/server.go): with 1s a hung renewal is given up after
 *   1 s and retried at once (up to 5 times), instead of after 4 s. The only validation is
 *   nodeLeaseDurationSeconds > 0.
 * - so the heartbeat comes every 1 s and N = 5 gives a 5 s grace period: 4 renewals in a row may be
 *   lost before a living node is failed. Detection then takes 4-7 s (the last renewal before the
 *   failure 0-1 s earlier, kcm sees it up to 1 s later, and marks at its first check past 5 s). A lower
 *   grace period fails a living node on one slow second of the apiserver; the 45 s of the HTTP/2 check
 *   cannot be kept by any setting faster than stock (that risk is the price, experiments/README.md).
 * - the DefaultTolerationSeconds admission plugin adds its 300 s tolerations only for a key the pod
 *   does not tolerate yet (plugin/pkg/admission/defaulttolerationseconds), and the taint-eviction
 *   controller deletes a pod at once when a matching toleration has tolerationSeconds <= 0
 *   (getMinTolerationTime). Only the critical pod gets them, as Ulysses' ulysses.io/unreachable taint
 *   applies to critical pods only; the low-priority pods keep the 300 s.
 */
import type { V1Toleration } from '@kubernetes/client-node';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { UPSTREAM, UPSTREAM_TUNED, isStockConfig, type ConfigId } from './results.ts';
import { goDurationMs, KUBELET_DEFAULT_HEARTBEAT, kubeletHasHeartbeat, type KubeletHeartbeat, type KubeletHeartbeatSettings } from '../testbed/realnode.ts';

/** kcm's node-monitor flags this file sets, with kcm's defaults (pkg/controller/nodelifecycle/config/v1alpha1/defaults.go). */
export const KCM_NODE_MONITOR_DEFAULTS = { 'node-monitor-period': '5s', 'node-monitor-grace-period': '50s' } as const;
export type KcmNodeMonitorFlag = keyof typeof KCM_NODE_MONITOR_DEFAULTS;
export const KCM_NODE_MONITOR_FLAGS = Object.keys(KCM_NODE_MONITOR_DEFAULTS) as KcmNodeMonitorFlag[];

/** upstream-tuned's kube-controller-manager flags: its node monitor every 1 s, a node failed after 5 s without a heartbeat. */
export const TUNED_KCM_NODE_MONITOR: Record<KcmNodeMonitorFlag, string> = { 'node-monitor-period': '1s', 'node-monitor-grace-period': '5s' };

/** upstream-tuned's kubelet settings: the node Lease renewed every 1 s, the status computed every 1 s (heartbeat client timeout 1 s). */
export const TUNED_KUBELET_HEARTBEAT: Required<KubeletHeartbeatSettings> = { nodeLeaseDurationSeconds: 4, nodeStatusUpdateFrequency: '1s' };

/** The node failure taints of kcm's node lifecycle controller, which the critical pod tolerates for 0 s in upstream-tuned. */
export const KCM_FAILURE_TAINT_KEYS = ['node.kubernetes.io/unreachable', 'node.kubernetes.io/not-ready'] as const;

/** upstream-tuned's tolerations of the critical pod: evicted as soon as kcm taints its node. */
export const TUNED_CRITICAL_TOLERATIONS: readonly V1Toleration[] = KCM_FAILURE_TAINT_KEYS.map((key) => ({ key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 0 }));

/** What a configuration sets besides its components: kcm's extra flags, every kubelet's heartbeat, the critical pod's own tolerations. */
export interface StockSettings {
  /** kube-controller-manager flags after the usual ones (`--name=value`); empty: kcm's defaults */
  kcmFlags: string[];
  /** each kubelet's Lease and status period; 'stock': as its config file had them before any tuning */
  kubeletHeartbeat: Required<KubeletHeartbeatSettings> | 'stock';
  /** tolerations the critical Deployment's pod template gets (empty: none; the admission plugin adds its 300 s ones) */
  criticalTolerations: V1Toleration[];
}

/** kcm flags `--name=value` of node-monitor settings, in the order of KCM_NODE_MONITOR_FLAGS. */
export const nodeMonitorFlags = (settings: Partial<Record<KcmNodeMonitorFlag, string>>): string[] =>
  KCM_NODE_MONITOR_FLAGS.filter((f) => settings[f] !== undefined).map((f) => `--${f}=${settings[f]}`);

/** The settings of configuration `config`: upstream-tuned's, or stock for every other one. */
export function stockSettings(config: ConfigId): StockSettings {
  return config === UPSTREAM_TUNED
    ? { kcmFlags: nodeMonitorFlags(TUNED_KCM_NODE_MONITOR), kubeletHeartbeat: { ...TUNED_KUBELET_HEARTBEAT }, criticalTolerations: TUNED_CRITICAL_TOLERATIONS.map((t) => ({ ...t })) }
    : { kcmFlags: [], kubeletHeartbeat: 'stock', criticalTolerations: [] };
}

/** The tolerations the critical pod gets in `config` (only upstream-tuned has any). */
export const criticalPodTolerations = (config: ConfigId): V1Toleration[] => stockSettings(config).criticalTolerations;

/** The family of a configuration: a change of family restarts components (upstream, upstream-tuned: kcm and kubelets; Ulysses: its install). */
export type Family = 'upstream' | 'upstream-tuned' | 'ulysses';
export const familyOf = (config: ConfigId): Family => (config === UPSTREAM ? 'upstream' : config === UPSTREAM_TUNED ? 'upstream-tuned' : 'ulysses');
/** The configuration a family's repetitions set up in: the stock ones in themselves, Ulysses' in 1 (vanilla). */
export const familySetupConfig = (config: ConfigId): ConfigId => (isStockConfig(config) ? config : 1);
/** The settings of a family (upstream-tuned's, else stock). */
export const familySettings = (family: Family): StockSettings => stockSettings(family === 'upstream-tuned' ? UPSTREAM_TUNED : UPSTREAM);

/** The --node-monitor-* flags of a kcm command line, in order (`--name=value`; a flag given twice: the last, as Go's flag parsing keeps). */
export function kcmNodeMonitorFlags(args: readonly string[]): string[] {
  const last = new Map<KcmNodeMonitorFlag, string>();
  for (const a of args) for (const f of KCM_NODE_MONITOR_FLAGS) if (a.startsWith(`--${f}=`)) last.set(f, a.slice(f.length + 3));
  return nodeMonitorFlags(Object.fromEntries(last));
}

/** kcm's node monitor as it runs with these flags (`--name=value`), kcm's defaults where absent, in ms. */
export function kcmNodeMonitor(flags: readonly string[]): Record<KcmNodeMonitorFlag, number | undefined> {
  const given = new Map(flags.map((a) => [a.slice(2, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]));
  return Object.fromEntries(KCM_NODE_MONITOR_FLAGS.map((f) => [f, goDurationMs(given.get(f) ?? KCM_NODE_MONITOR_DEFAULTS[f])])) as Record<KcmNodeMonitorFlag, number | undefined>;
}

/** kcm runs with the node monitor of `settings` (its flags, or [] for kcm's defaults), compared as durations. */
export function kcmHasNodeMonitor(flags: readonly string[], settings: readonly string[]): boolean {
  const have = kcmNodeMonitor(flags);
  const want = kcmNodeMonitor(settings);
  return KCM_NODE_MONITOR_FLAGS.every((f) => have[f] !== undefined && have[f] === want[f]);
}

/** Which heartbeat a kubelet config (YAML text) gives: upstream-tuned's, stock (the kubelet's defaults), or another. */
export function kubeletHeartbeatKind(text: string): 'tuned' | 'stock' | 'other' {
  if (kubeletHasHeartbeat(text, TUNED_KUBELET_HEARTBEAT)) return 'tuned';
  if (kubeletHasHeartbeat(text, KUBELET_DEFAULT_HEARTBEAT)) return 'stock';
  return 'other';
}

/** The critical pod's NoExecute tolerations of kcm's failure taints: key -> tolerationSeconds (null: for ever); a key it does not tolerate is absent. */
export function failureTolerationSeconds(tolerations: readonly V1Toleration[] | undefined): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const key of KCM_FAILURE_TAINT_KEYS) {
    const t = (tolerations ?? []).find((x) => (x.key === key || (!x.key && x.operator === 'Exists')) && (!x.effect || x.effect === 'NoExecute'));
    if (t) out[key] = t.tolerationSeconds ?? null;
  }
  return out;
}

/** The report's line on configuration upstream-tuned; `how`: how the cluster at hand applies the settings. */
export function upstreamTunedNote(how: string): string {
  const flags = nodeMonitorFlags(TUNED_KCM_NODE_MONITOR).join(' ');
  return (
    `configuration upstream-tuned (stock Kubernetes tuned for node failure): as upstream, with kube-controller-manager ${flags} (defaults 5s, 50s), every kubelet's nodeLeaseDurationSeconds ${TUNED_KUBELET_HEARTBEAT.nodeLeaseDurationSeconds} (its Lease renewed every ${TUNED_KUBELET_HEARTBEAT.nodeLeaseDurationSeconds / 4} s; default 40, every 10 s) and nodeStatusUpdateFrequency ${TUNED_KUBELET_HEARTBEAT.nodeStatusUpdateFrequency} (default 10s; its status report period kept), ` +
    `and the critical pod's own NoExecute tolerations of ${KCM_FAILURE_TAINT_KEYS.join(' and ')} with tolerationSeconds 0 (so the DefaultTolerationSeconds plugin adds no 300 s ones; the low-priority pods keep them); on ${how}; every other configuration runs with the stock settings`
  );
}

/** A kubelet's heartbeat (as recorded: its effective values, or why they are not known) has these settings. */
export function heartbeatIs(h: KubeletHeartbeat | string | undefined, settings: Required<KubeletHeartbeatSettings>): boolean {
  return typeof h === 'object' && h.nodeLeaseDurationSeconds === settings.nodeLeaseDurationSeconds && goDurationMs(h.nodeStatusUpdateFrequency) === goDurationMs(settings.nodeStatusUpdateFrequency);
}

/**
 * Whether a cluster runs upstream-tuned's settings (kcm's node-monitor flags, every kubelet's
 * heartbeat), the stock ones, or a mix of them (undefined: e.g. a switch interrupted half-way).
 */
export function tuningOf(kcmFlags: readonly string[], kubelets: Record<string, KubeletHeartbeat | string>): 'tuned' | 'stock' | undefined {
  const hs = Object.values(kubelets);
  if (kcmHasNodeMonitor(kcmFlags, nodeMonitorFlags(TUNED_KCM_NODE_MONITOR)) && hs.every((h) => heartbeatIs(h, TUNED_KUBELET_HEARTBEAT))) return 'tuned';
  if (kcmHasNodeMonitor(kcmFlags, []) && hs.every((h) => heartbeatIs(h, KUBELET_DEFAULT_HEARTBEAT))) return 'stock';
  return undefined;
}

/** A kubeadm ClusterConfiguration (YAML) with these kube-controller-manager flags in controllerManager.extraArgs (v1beta4: a list of name/value; v1beta3: a map), replacing the same names. */
export function withControllerManagerExtraArgs(clusterConfiguration: string, flags: readonly string[]): string {
  const cfg = parseYaml(clusterConfiguration, { maxAliasCount: 0 }) as Record<string, unknown> | null;
  if (!cfg || cfg.kind !== 'ClusterConfiguration') throw new Error('not a kubeadm ClusterConfiguration');
  const args = flags.map((f) => {
    const m = /^--([a-z0-9-]+)=(.*)$/.exec(f);
    if (!m) throw new Error(`kube-controller-manager flag ${f}: not --name=value`);
    return { name: m[1]!, value: m[2]! };
  });
  const names = new Set(args.map((a) => a.name));
  const cm = { ...((cfg.controllerManager as Record<string, unknown> | undefined) ?? {}) };
  if (cfg.apiVersion === 'kubeadm.k8s.io/v1beta3') {
    const old = (cm.extraArgs as Record<string, string> | undefined) ?? {};
    cm.extraArgs = { ...Object.fromEntries(Object.entries(old).filter(([k]) => !names.has(k))), ...Object.fromEntries(args.map((a) => [a.name, a.value])) };
  } else {
    const old = (cm.extraArgs as Array<{ name: string; value: string }> | undefined) ?? [];
    cm.extraArgs = [...old.filter((a) => !names.has(a.name)), ...args];
  }
  return stringifyYaml({ ...cfg, controllerManager: cm });
}

/** The --node-monitor-* flags a kubeadm ClusterConfiguration (YAML) gives kube-controller-manager (its controllerManager.extraArgs). */
export function clusterConfigurationNodeMonitorFlags(clusterConfiguration: string): string[] {
  const cfg = parseYaml(clusterConfiguration, { maxAliasCount: 0 }) as { controllerManager?: { extraArgs?: unknown } } | null;
  const extra = cfg?.controllerManager?.extraArgs;
  const pairs: Array<[string, string]> = Array.isArray(extra) ? extra.map((a: { name: string; value: string }) => [a.name, a.value]) : Object.entries((extra as Record<string, string> | undefined) ?? {});
  return kcmNodeMonitorFlags(pairs.map(([k, v]) => `--${k}=${v}`));
}
