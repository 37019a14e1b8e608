/**
 * The kubelet-shim's section of UlyssesConfig (`spec.kubeletShim`), applied live per node (thesis
 * §5.3.5: the SLO-aware kubelet modification is switched at runtime, per node or node group).
 * The node's entry (the first of `nodes` whose nodeSelector matches the node's labels, else
 * `default`) is `{policy, params}`; params are split into the policy's own parameters and the
 * gate's (highMinInterArrivalMs, maxQueueLength, ...) and validated with the shim's PacingConfigSchema,
 * so an unknown parameter is rejected naming it and the last good pacing stays in force.
 */
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import type { Logger } from '../core/logging.ts';
import { ResilientInformer } from '../core/informer.ts';
import { RuntimeConfigWatcher } from '../core/runtime-config.ts';
import { HOSTNAME_LABEL, shimSectionForNode, type ShimEntry } from '../core/runtime-status.ts';
import { PacingConfigSchema, type PacingConfig, type PacingConfigInput } from './pacing.ts';
import type { RunningShim } from './main.ts';

const GATE_PARAMS = new Set(Object.keys(PacingConfigSchema.shape).filter((k) => k !== 'policy'));

/** `{policy, params}` of the spec -> the shim's pacing block (`{policy: {type, ...}, gate params}`). */
export function pacingFromEntry(entry: ShimEntry | undefined): PacingConfigInput {
  const policy: Record<string, unknown> = { type: entry?.policy ?? 'vanilla' };
  const pacing: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(entry?.params ?? {})) (GATE_PARAMS.has(k) ? pacing : policy)[k] = v;
  return { ...pacing, policy } as PacingConfigInput;
}

/** "exponential-decay(initialWaitMs=700,factor=0.5,resetAfterMs=5000,minWaitMs=0)" */
export function describePacing(p: PacingConfig): string {
  const { type, ...params } = p.policy as { type: string } & Record<string, unknown>;
  const args = Object.entries(params).map(([k, v]) => `${k}=${v}`);
  return args.length ? `${type}(${args.join(',')})` : type;
}

export interface ShimRuntime {
  start(): Promise<void>;
  stop(): Promise<void>;
  readonly watcher: RuntimeConfigWatcher<typeof PacingConfigSchema>;
}

/**
 * Watches UlyssesConfig/default and the node object (its labels choose the entry) and applies the
 * node's pacing to the running shim. Until the node is registered its labels are taken as
 * {kubernetes.io/hostname: nodeName}, which is what the kubelet will set.
 */
export function shimRuntime(kc: KubeConfig, shim: RunningShim, nodeName: string, log?: Logger): ShimRuntime {
  const nodes = new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', fieldSelector: `metadata.name=${nodeName}`, log });
  const labels = () => nodes.get(nodeName)?.metadata?.labels ?? { [HOSTNAME_LABEL]: nodeName };
  const watcher = new RuntimeConfigWatcher({
    kc,
    statusKey: `kubelet-shim/${nodeName}`,
    field: 'kubeletShim',
    select: (section) => pacingFromEntry(shimSectionForNode(section, labels())),
    schema: PacingConfigSchema,
    apply: (pacing) => describePacing(shim.applyPacing(pacing).pacing),
    log,
  });
  let lastLabels = '';
  const onNode = (n: V1Node) => {
    const now = JSON.stringify(n.metadata?.labels ?? {});
    if (now !== lastLabels) {
      lastLabels = now;
      void watcher.resync();
    }
  };
  nodes.on('add', onNode);
  nodes.on('update', onNode);
  return {
    watcher,
    async start() {
      await nodes.start();
      lastLabels = JSON.stringify(nodes.get(nodeName)?.metadata?.labels ?? {});
      await watcher.start();
    },
    async stop() {
      nodes.stop();
      await watcher.stop();
    },
  };
}

/** The inverse of {@link pacingFromEntry}: a shim config file's `pacing` block as a spec entry. */
export function entryFromPacing(pacing: unknown, source = 'pacing'): ShimEntry {
  const p = PacingConfigSchema.safeParse(pacing);
  if (!p.success) throw new Error(`${source}: ${p.error.issues.map((i) => `pacing.${i.path.join('.')}: ${i.message}`).join('; ')}`);
  const raw = pacing as { policy?: Record<string, unknown> } & Record<string, unknown>;
  const { type, ...policyParams } = (raw.policy ?? { type: 'vanilla' }) as { type: string } & Record<string, number>;
  const gate = Object.fromEntries(Object.entries(raw).filter(([k]) => k !== 'policy')) as Record<string, number>;
  const params = { ...policyParams, ...gate };
  return Object.keys(params).length ? { policy: type, params } : { policy: type };
}
