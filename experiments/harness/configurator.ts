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
import type { ConfigId, RepResult, UlyssesConfigId } from './results.ts';

export type ShimPolicy = 'vanilla' | 'paced';

export interface ConfigurationSpec {
  shim: ShimPolicy;
  apf: boolean;
  controllerManager: WorkerMode;
}

export const TABLE_6_1: Record<UlyssesConfigId, ConfigurationSpec> = {
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
  /**
   * The configuration a repetition of `config` sets its workload up in with a neutral setup (default
   * 1): a configurator whose switches reinstall components (kubeadm: upstream <-> Ulysses) keeps the
   * setup in the repetition's family, where only its runtime toggles differ.
   */
  setupConfig?(config: ConfigId): ConfigId;
  /**
   * The family of `config`: configurations of one family switch by runtime toggles, a change of
   * family reinstalls components (kubeadm: upstream | ulysses). The run order groups by family
   * ({@link planReps}).
   */
  family?(config: ConfigId): string;
  /** The reinstall the last apply() made, if any (recorded with the repetition), and forgets it. */
  takeSwitch?(): { to: string; seconds: number } | undefined;
  /** What of the cluster is on the failover path now (recorded with each repetition, after its events). */
  inspect?(): Promise<NonNullable<RepResult['cluster']>>;
}

/** kube-controller-manager --controllers that leaves the given controllers to Ulysses (core/controllers.ts). */
export { kcmControllersFlag } from '../../core/controllers.ts';
