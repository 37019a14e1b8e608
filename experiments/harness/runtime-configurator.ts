/**
 * Table 6.1 configurations through the one runtime toggle of Ulysses (thesis §5.3.5): a single
 * patch of UlyssesConfig/default per configuration, then a wait until every component that must
 * act (the controller manager, the APF host, each node's kubelet-shim) reports in status that it
 * applied that generation (`Applied=True`). Works unchanged on the local testbed and on any
 * cluster where the components are installed (manifests/).
 */
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeClient } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig, type UlyssesConfigSpec } from '../../core/runtime-config.ts';
import { entryFromPacing } from '../../kubelet-shim/runtime.ts';
import { pollUntil } from '../testbed/processes.ts';
import { TABLE_6_1, type ClusterConfigurator } from './configurator.ts';
import { isUlyssesConfig, type ConfigId } from './results.ts';

export interface RuntimeConfiguratorOptions {
  kubeconfig: KubeConfig;
  /** controllers whose mode the configurations switch */
  controllers: readonly string[];
  /** kubelet-shim config file whose `pacing` block is the paced policy (configs 2-5) */
  pacedShimConfig: string;
  criticalNamespace: string;
  /** status keys that must report each generation, e.g. ["controller-manager", "apf", "kubelet-shim/real-1", ...] */
  reporters: () => Promise<string[]> | string[];
  timeoutMs?: number;
  /**
   * Kubelet policy comparison: policy name -> kubelet-shim config file whose `pacing` block that name
   * stands for (e.g. fixed -> configs/fixed.yaml). A name given to apply() must be here.
   */
  shimPolicies?: Record<string, string>;
  /**
   * false: "rate limiting off" (thesis §4.3.3, §6.1 Fig 6.4): every configuration also switches the
   * controller manager's client-side limiter off (spec.controllerManager.apiRateLimit.enabled).
   */
  clientRateLimit?: boolean;
  /**
   * The controller manager's CriticalPathHold (spec.controllerManager.criticalPathHoldMs) in the
   * configurations with periodic workers (5); absent/0: off, as the thesis.
   */
  criticalPathHoldMs?: number;
}

/** A kubelet-shim config file's `pacing` block as a UlyssesConfig kubeletShim entry; errors name the file. */
export function shimEntryFromFile(file: string): ReturnType<typeof entryFromPacing> {
  const parsed = parseYaml(readFileSync(file, 'utf8')) as { pacing?: unknown };
  if (!parsed?.pacing) throw new Error(`kubelet-shim config ${file}: field pacing: missing`);
  return entryFromPacing(parsed.pacing, file);
}

export class RuntimeConfigConfigurator implements ClusterConfigurator {
  private readonly client: KubeClient;
  private readonly paced: ReturnType<typeof entryFromPacing>;
  private readonly policies: Record<string, ReturnType<typeof entryFromPacing>>;

  constructor(private readonly o: RuntimeConfiguratorOptions) {
    this.client = new KubeClient(o.kubeconfig);
    this.paced = shimEntryFromFile(o.pacedShimConfig);
    this.policies = Object.fromEntries(Object.entries(o.shimPolicies ?? {}).map(([name, file]) => [name, shimEntryFromFile(file)]));
  }

  /** The spec of configuration `config` (every field the configurations touch, so the patch is absolute). */
  spec(config: ConfigId, shimPolicy?: string): UlyssesConfigSpec {
    if (!isUlyssesConfig(config)) throw new Error(`configuration ${config}: not a configuration of Ulysses (UlyssesConfig sets 1..5; upstream and upstream-tuned need a cluster configurator that can uninstall Ulysses, see kubeadm-configurator.ts and local-configurator.ts)`);
    const want = TABLE_6_1[config];
    let shim = want.shim === 'vanilla' ? { policy: 'vanilla' } : this.paced;
    if (shimPolicy !== undefined) {
      const entry = this.policies[shimPolicy];
      if (!entry) throw new Error(`kubelet-shim policy "${shimPolicy}": not one of the configured policies (${Object.keys(this.policies).join(', ') || 'none'})`);
      shim = entry;
    }
    // a merge patch merges `params`: every parameter some other policy of the run sets but this one
    // does not is removed explicitly (null), or fixed's waitMs would stay under exponential-decay
    const others = [this.paced, ...Object.values(this.policies)].flatMap((e) => Object.keys(e.params ?? {}));
    const params: Record<string, number | null> = Object.fromEntries(others.map((k) => [k, null]));
    Object.assign(params, shim.params ?? {});
    return {
      controllerManager: {
        controllers: Object.fromEntries(this.o.controllers.map((c) => [c, { mode: want.controllerManager }])),
        // merge patch: null removes the field (the limits the controller manager was started with)
        apiRateLimit: this.o.clientRateLimit === false ? { enabled: false } : null,
        // only where the periodic workers it holds exist; null removes it (0: off)
        criticalPathHoldMs: want.controllerManager === 'multi-priority-periodic' && this.o.criticalPathHoldMs ? this.o.criticalPathHoldMs : null,
      },
      // a merge patch: `params: null` removes the previous policy's parameters when the new one has none
      kubeletShim: { default: { policy: shim.policy, params: Object.values(params).some((v) => v !== null) ? params : null }, nodes: [] },
      apf: { enabled: want.apf, exemptNamespaces: [this.o.criticalNamespace] },
    };
  }

  async apply(config: ConfigId, shimPolicy?: string): Promise<void> {
    const spec = this.spec(config, shimPolicy);
    const obj = await patchRuntimeConfig(this.client, spec);
    const stored = (obj.spec?.controllerManager as { apiRateLimit?: { enabled?: boolean } } | undefined)?.apiRateLimit;
    if (this.o.clientRateLimit === false && stored?.enabled !== false)
      throw new Error('UlyssesConfig/default: spec.controllerManager.apiRateLimit was dropped by the apiserver: the UlyssesConfig CRD predates it, reinstall manifests/base/crd-ulyssesconfig.yaml');
    const wantHold = (spec.controllerManager as { criticalPathHoldMs?: number | null }).criticalPathHoldMs;
    if (wantHold && (obj.spec?.controllerManager as { criticalPathHoldMs?: number } | undefined)?.criticalPathHoldMs !== wantHold)
      throw new Error('UlyssesConfig/default: spec.controllerManager.criticalPathHoldMs was dropped by the apiserver: the UlyssesConfig CRD predates it, reinstall manifests/base/crd-ulyssesconfig.yaml');
    const gen = obj.metadata.generation!;
    const keys = await this.o.reporters();
    let pending: string[] = keys;
    await pollUntil(
      `configuration ${config}${shimPolicy ? ` with kubelet-shim ${shimPolicy}` : ''} (UlyssesConfig generation ${gen}) applied by ${keys.join(', ')}`,
      async () => {
        const cur = await readRuntimeConfig(this.client);
        const comps = cur?.status?.components ?? {};
        const failed = keys.filter((k) => comps[k]?.observedGeneration === gen && comps[k]?.conditions?.[0]?.status === 'False');
        if (failed.length) throw new Error(`configuration ${config} rejected: ${failed.map((k) => `${k}: ${comps[k]!.conditions[0]!.message}`).join('; ')}`);
        pending = keys.filter((k) => !(comps[k] && comps[k]!.observedGeneration >= gen && comps[k]!.conditions?.[0]?.status === 'True'));
        return pending.length === 0;
      },
      { timeoutMs: this.o.timeoutMs ?? 30_000, intervalMs: 100, explain: () => `still pending: ${pending.join(', ')}` },
    );
  }

  describe(): string[] {
    return [
      `switched by patching UlyssesConfig/default (runtime toggles, thesis §5.3.5) and waiting until every component reports the generation applied`,
      `controllers ${this.o.controllers.join(', ')}: spec.controllerManager (vanilla mode imitates kube-controller-manager: FIFO queues, 5 workers per controller, taint eviction one goroutine per due eviction (up to 256), a client limiter of 20 qps / burst 30 per controller)`,
      `kubelet pacing: spec.kubeletShim.default = vanilla or ${JSON.stringify(this.paced)}`,
      `APF: spec.apf exempting namespace ${this.o.criticalNamespace}`,
      ...Object.entries(this.policies).map(([name, e]) => `kubelet policy "${name}": spec.kubeletShim.default = ${JSON.stringify(e)}`),
      ...(this.o.criticalPathHoldMs
        ? [`critical-path hold: spec.controllerManager.criticalPathHoldMs = ${this.o.criticalPathHoldMs} in configuration 5 (low-priority periodic work waits while a critical pod is on its way to Ready, at most that long per critical pod)`]
        : []),
      ...(this.o.clientRateLimit === false ? ['rate limiting off: spec.controllerManager.apiRateLimit = {enabled: false} in every configuration (the controller manager\'s client-side limiter never waits)'] : []),
    ];
  }
}
