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
import type { ConfigId } from './results.ts';

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
}

export class RuntimeConfigConfigurator implements ClusterConfigurator {
  private readonly client: KubeClient;
  private readonly paced: ReturnType<typeof entryFromPacing>;

  constructor(private readonly o: RuntimeConfiguratorOptions) {
    this.client = new KubeClient(o.kubeconfig);
    const file = parseYaml(readFileSync(o.pacedShimConfig, 'utf8')) as { pacing?: unknown };
    if (!file?.pacing) throw new Error(`kubelet-shim config ${o.pacedShimConfig}: field pacing: missing`);
    this.paced = entryFromPacing(file.pacing, o.pacedShimConfig);
  }

  /** The spec of configuration `config` (every field the configurations touch, so the patch is absolute). */
  spec(config: ConfigId): UlyssesConfigSpec {
    const want = TABLE_6_1[config];
    return {
      controllerManager: { controllers: Object.fromEntries(this.o.controllers.map((c) => [c, { mode: want.controllerManager }])) },
      // a merge patch: `params: null` removes the paced policy's parameters when going back to vanilla
      kubeletShim: { default: want.shim === 'vanilla' ? { policy: 'vanilla', params: null } : this.paced, nodes: [] },
      apf: { enabled: want.apf, exemptNamespaces: [this.o.criticalNamespace] },
    };
  }

  async apply(config: ConfigId): Promise<void> {
    const obj = await patchRuntimeConfig(this.client, this.spec(config));
    const gen = obj.metadata.generation!;
    const keys = await this.o.reporters();
    let pending: string[] = keys;
    await pollUntil(
      `configuration ${config} (UlyssesConfig generation ${gen}) applied by ${keys.join(', ')}`,
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
      `controllers ${this.o.controllers.join(', ')}: spec.controllerManager (vanilla mode imitates kube-controller-manager: FIFO, 5 workers, 20 qps / burst 30)`,
      `kubelet pacing: spec.kubeletShim.default = vanilla or ${JSON.stringify(this.paced)}`,
      `APF: spec.apf exempting namespace ${this.o.criticalNamespace}`,
    ];
  }
}
