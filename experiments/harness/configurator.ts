/**
 * The configurations of Table 6.1 and the interface the experiment switches them through
 * (`ClusterConfigurator.apply(config)`; implemented with the UlyssesConfig runtime toggles in
 * runtime-configurator.ts, never by reinstalling).
 *
 *   config | kubelet-shim pacing | APF exemption (critical ns) | Ulysses controller manager
 *   1      | vanilla             | off                          | vanilla (imitates kcm: FIFO, 5 workers, taint eviction up to 256 at once, 20 qps / 30 burst per controller)
 *   2      | exponential decay   | off                          | vanilla
 *   3      | exponential decay   | on                           | vanilla
 *   4      | exponential decay   | on                           | multi-priority-async
 *   5      | exponential decay   | on                           | multi-priority-periodic
 */
import type { WorkerMode } from '../../controller-manager/queue/index.ts';
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
  /**
   * Puts the cluster into configuration `config` (with the kubelet-shim policy `shimPolicy` instead
   * of the configuration's own, for the kubelet policy comparison); resolves once every toggle has
   * taken effect.
   */
  apply(config: ConfigId, shimPolicy?: string): Promise<void>;
  /** One line per toggle mechanism, for the report. */
  describe(): string[];
}

/** The kcm controller names of the Ulysses controllers (kube-controller-manager --controllers). */
export const KCM_NAMES: Record<string, string[]> = {
  replicaset: ['replicaset-controller'],
  deployment: ['deployment-controller'],
  'taint-eviction': ['taint-eviction-controller'],
  endpointslice: ['endpointslice-controller'],
  endpoints: ['endpoints-controller'],
};

/** kube-controller-manager --controllers that leaves the given controllers to Ulysses. */
export function kcmControllersFlag(ulysses: readonly string[]): string {
  return ['*', ...new Set(ulysses.flatMap((c) => KCM_NAMES[c] ?? [`${c}-controller`]))].map((c, i) => (i ? `-${c}` : c)).join(',');
}
