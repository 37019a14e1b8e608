/**
 * Renders the KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) that wires the Ulysses
 * extender into the real kube-scheduler: filter, prioritize and bind verbs, nodeCacheCapable (the
 * scheduler sends node names only; the extender has its own node informer), ignorable=false (a
 * critical pod must never be placed without the RT/TDMA/assurance checks). With `--config`, the
 * scheduler ignores the deprecated --kubeconfig flag: `clientConnection.kubeconfig` must be set here.
 * scheduler-plugins/kube-scheduler-extender.yaml is the same snippet for users.
 */
import { stringify } from 'yaml';

export interface SchedulerConfigOptions {
  /** kubeconfig of the scheduler (clientConnection.kubeconfig). */
  kubeconfig: string;
  /** e.g. http://127.0.0.1:8888 (the verbs are appended as /filter, /prioritize, /bind). */
  extenderUrl: string;
  /** Multiplies the 0..10 score (scaled x10 by the scheduler: MaxNodeScore/MaxExtenderPriority). Default 5. */
  weight?: number;
  /** Default 5s (the scheduler's own default is 5s too). */
  httpTimeout?: string;
  /** Leader election (the testbed runs one scheduler: off). */
  leaderElect?: boolean;
  /** Extender also binds (records reservations before binding). Default true. */
  bind?: boolean;
}

export function kubeSchedulerConfiguration(o: SchedulerConfigOptions): Record<string, unknown> {
  return {
    apiVersion: 'kubescheduler.config.k8s.io/v1',
    kind: 'KubeSchedulerConfiguration',
    clientConnection: { kubeconfig: o.kubeconfig },
    leaderElection: { leaderElect: o.leaderElect ?? false },
    extenders: [
      {
        urlPrefix: o.extenderUrl,
        filterVerb: 'filter',
        prioritizeVerb: 'prioritize',
        ...((o.bind ?? true) ? { bindVerb: 'bind' } : {}),
        weight: o.weight ?? 5,
        enableHTTPS: false,
        nodeCacheCapable: true,
        ignorable: false,
        httpTimeout: o.httpTimeout ?? '5s',
      },
    ],
  };
}

export function renderKubeSchedulerConfiguration(o: SchedulerConfigOptions): string {
  return stringify(kubeSchedulerConfiguration(o));
}
