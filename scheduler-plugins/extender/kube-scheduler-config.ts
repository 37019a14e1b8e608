/**
 * Renders the KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) that wires the Ulysses
 * extender into the real kube-scheduler, as two `extenders` entries at the same URL:
 * - filter + prioritize for every pod (no managedResources), nodeCacheCapable (the scheduler sends
 *   node names only; the extender has its own node informer);
 * - bind only: `managedResources: [{name: ulysses.io/reservation, ignoredByScheduler: true}]`, so
 *   kube-scheduler hands the extender the binding of the pods that request that extended resource
 *   (the RT/TDMA pods, whose reservation bind records first) and binds every other pod itself
 *   (pkg/scheduler/schedule_one.go extendersBinding: `IsBinder() && IsInterested(pod)`;
 *   pkg/scheduler/extender.go IsInterested). `ignoredByScheduler` makes NodeResourcesFit skip the
 *   resource no node advertises (pkg/scheduler/scheduler.go buildExtenders -> IgnoredResources).
 * Both ignorable=false: a critical pod is never placed without the RT/TDMA/assurance checks, nor an
 * RT/TDMA pod bound without its reservation. kube-scheduler accepts at most one entry with a
 * bindVerb (pkg/scheduler/apis/config/validation validateExtenders). With `--config`, the scheduler
 * ignores the deprecated --kubeconfig flag: `clientConnection.kubeconfig` must be set here.
 * scheduler-plugins/kube-scheduler-extender.yaml and manifests/kubeadm/kube-scheduler-config*.yaml
 * are the same entries for users.
 */
import { stringify } from 'yaml';
import { RESERVATION_RESOURCE } from '../schedulability.ts';

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
  /**
   * HTTPS with kube-scheduler's client certificate (extender/tls.ts): the files on the scheduler's
   * node (its `tlsConfig`: certFile, keyFile, caFile). Without it plain HTTP (loopback only).
   */
  tls?: { certFile: string; keyFile: string; caFile: string };
}


/** The two `extenders` entries (see the header). */
export function extenderEntries(o: Pick<SchedulerConfigOptions, 'extenderUrl' | 'weight' | 'httpTimeout' | 'tls'>): Array<Record<string, unknown>> {
  const https = o.tls ? { enableHTTPS: true, tlsConfig: { ...o.tls } } : { enableHTTPS: false };
  const common = { urlPrefix: o.extenderUrl, ...https, ignorable: false, httpTimeout: o.httpTimeout ?? '5s' };
  return [
    { ...common, filterVerb: 'filter', prioritizeVerb: 'prioritize', weight: o.weight ?? 5, nodeCacheCapable: true },
    { ...common, bindVerb: 'bind', managedResources: [{ name: RESERVATION_RESOURCE, ignoredByScheduler: true }] },
  ];
}

export function kubeSchedulerConfiguration(o: SchedulerConfigOptions): Record<string, unknown> {
  return {
    apiVersion: 'kubescheduler.config.k8s.io/v1',
    kind: 'KubeSchedulerConfiguration',
    clientConnection: { kubeconfig: o.kubeconfig },
    leaderElection: { leaderElect: o.leaderElect ?? false },
    extenders: extenderEntries(o),
  };
}

export function renderKubeSchedulerConfiguration(o: SchedulerConfigOptions): string {
  return stringify(kubeSchedulerConfiguration(o));
}
