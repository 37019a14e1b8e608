/**
 * Switching the cluster between the configurations of Table 6.1 with runtime toggles (thesis §5.3.5),
 * never by reinstalling. The experiment only sees `ClusterConfigurator.apply(config)`, so the
 * toggles below can later be replaced by the runtime-config CRD.
 *
 *   config | kubelet-shim pacing | APF exemption (critical ns) | Ulysses controller manager
 *   1      | vanilla             | off                          | vanilla (imitates kcm: FIFO, 5 workers, 20 qps / 30 burst)
 *   2      | exponential decay   | off                          | vanilla
 *   3      | exponential decay   | on                           | vanilla
 *   4      | exponential decay   | on                           | multi-priority-async
 *   5      | exponential decay   | on                           | multi-priority-periodic
 */
import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { KubeConfig } from '@kubernetes/client-node';
import { applyApfExemption, removeApfExemption } from '../../apf-configs/apply.ts';
import type { ControllerManager, ControllerName } from '../../controller-manager/manager.ts';
import type { WorkerMode } from '../../controller-manager/queue/index.ts';
import * as testbed from '../testbed/testbed.ts';
import { pollUntil } from '../testbed/processes.ts';
import type { ConfigId } from './results.ts';

export type ShimPolicy = 'vanilla' | 'paced';

export interface ConfigurationSpec {
  shim: ShimPolicy;
  apf: boolean;
  controllerManager: WorkerMode;
}

export const TABLE_6_1: Record<ConfigId, ConfigurationSpec> = {
  1: { shim: 'vanilla', apf: false, controllerManager: 'vanilla' },
  2: { shim: 'paced', apf: false, controllerManager: 'vanilla' },
  3: { shim: 'paced', apf: true, controllerManager: 'vanilla' },
  4: { shim: 'paced', apf: true, controllerManager: 'multi-priority-async' },
  5: { shim: 'paced', apf: true, controllerManager: 'multi-priority-periodic' },
};

export interface ClusterConfigurator {
  /** Puts the cluster into configuration `config`; resolves once every toggle has taken effect. */
  apply(config: ConfigId): Promise<void>;
  /** One line per toggle mechanism, for the report. */
  describe(): string[];
}

/** Switches every real node's kubelet-shim between vanilla and a paced policy. */
export type ShimSwitch = (policy: ShimPolicy) => Promise<void>;

export interface ToggleConfiguratorOptions {
  kubeconfig: KubeConfig;
  /** Ulysses' controller manager, running with every failover-path controller (kcm's disabled) */
  controllerManager: ControllerManager;
  controllers: readonly ControllerName[];
  shim: ShimSwitch;
  shimDescription: string;
  /** namespace of the critical service, exempted from APF in configs 3-5 */
  criticalNamespace: string;
}

/** Runtime toggles: CM setMode per controller, kubelet-shim reload, APF FlowSchema apply/remove. */
export class ToggleConfigurator implements ClusterConfigurator {
  private current: Partial<ConfigurationSpec> = {};
  constructor(private readonly o: ToggleConfiguratorOptions) {}

  async apply(config: ConfigId): Promise<void> {
    const want = TABLE_6_1[config];
    if (this.current.shim !== want.shim) {
      await this.o.shim(want.shim);
      this.current.shim = want.shim;
    }
    if (this.current.apf !== want.apf) {
      if (want.apf) {
        const r = await applyApfExemption(this.o.kubeconfig, { namespaces: [this.o.criticalNamespace], waitDigestedMs: 10_000 });
        if (r.shadowedBy.length) throw new Error(`APF exemption of namespace ${this.o.criticalNamespace} is shadowed by FlowSchema(s) ${r.shadowedBy.join(', ')}`);
      } else {
        await removeApfExemption(this.o.kubeconfig);
      }
      this.current.apf = want.apf;
    }
    if (this.current.controllerManager !== want.controllerManager) {
      for (const c of this.o.controllers) this.o.controllerManager.setMode(c, want.controllerManager);
      this.current.controllerManager = want.controllerManager;
    }
  }

  describe(): string[] {
    return [
      `controllers ${this.o.controllers.join(', ')}: Ulysses' controller manager, in-process, switched with setMode() (vanilla mode imitates kube-controller-manager: FIFO, 5 workers, 20 qps / burst 30)`,
      `kubelet pacing: ${this.o.shimDescription}`,
      `APF: FlowSchema exempting namespace ${this.o.criticalNamespace}, server-side applied / deleted`,
    ];
  }
}

/** The kcm controller names of the Ulysses controllers (kube-controller-manager --controllers). */
export const KCM_NAMES: Record<string, string[]> = {
  replicaset: ['replicaset-controller'],
  deployment: ['deployment-controller'],
  'taint-eviction': ['taint-eviction-controller'],
  endpointslice: ['endpointslice-controller', 'endpoints-controller'],
};

/** kube-controller-manager --controllers that leaves the given controllers to Ulysses. */
export function kcmControllersFlag(ulysses: readonly string[]): string {
  return ['*', ...ulysses.flatMap((c) => KCM_NAMES[c] ?? [`${c}-controller`]).map((c) => `-${c}`)].join(',');
}

/**
 * Shim switch of the local testbed: rewrites each real node's kubelet-shim config and sends SIGHUP
 * (testbed.reconfigureKubeletShim), then waits until every shim logged that it applied it.
 */
export function testbedShimSwitch(runDir: string, pacedConfigFile: string): ShimSwitch {
  const paced = parseYaml(readFileSync(pacedConfigFile, 'utf8')) as { pacing?: unknown };
  if (!paced?.pacing) throw new Error(`kubelet-shim config ${pacedConfigFile}: field pacing: missing`);
  return async (policy) => {
    const state = testbed.readState(runDir);
    if (!state) throw new Error(`no testbed in ${runDir}`);
    const pacing = policy === 'vanilla' ? { policy: { type: 'vanilla' } } : paced.pacing;
    for (const node of state.realNodes) {
      const logFile = join(node.dir, 'kubelet-shim.log');
      const applied = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').filter((l) => l.includes('"pacing reconfigured"')).length : 0);
      const before = applied();
      testbed.reconfigureKubeletShim(node.name, { pacing }, runDir);
      await pollUntil(`kubelet-shim of ${node.name} to apply the ${policy} policy`, () => applied() > before, { timeoutMs: 15_000, intervalMs: 100 });
    }
  };
}
