/**
 * Extender rescue (manifests/README.md "Failure modes"): kube-scheduler calls the scheduler extender
 * for every pod with `ignorable: false`, so while no extender replica leads nothing is scheduled,
 * the extender's own replacement pods included: a cluster whose two extender pods are gone at once
 * would never schedule again. Run by the kcm handback's static pod on every control-plane node (the
 * kubelet runs it; nothing of Ulysses has to be scheduled for it to work).
 *
 * When the Lease ulysses-system/ulysses-scheduler-extender has not changed (holder, renewTime) for
 * `afterMs` on this process' clock (the observedTime rule, as the kcm handback), the oldest Pending,
 * unbound extender pod that may run on this node (its nodeSelector matches the node's labels; a pod
 * with a required node affinity is left to kube-scheduler) is bound to this node: only Ulysses' own
 * extender pods, never a tenant's, and never while a leader renews (the standby takes a dead leader's
 * Lease within its lease duration, 15 s, shorter than `afterMs`). The bound pod starts, takes the
 * Lease, routes the Service to itself, and kube-scheduler places the other replica as usual. Another
 * `afterMs` of silence (the bound pod could not start) binds the next one.
 */
import { Counter } from 'prom-client';
import type { Logger } from '../core/logging.ts';
import type { KubeClient } from '../core/kube.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import { HandbackDecider, observeLease } from './lease-silence.ts';

export const EXTENDER_LEASE = { namespace: 'ulysses-system', name: 'ulysses-scheduler-extender' } as const;
export const EXTENDER_POD_SELECTOR = 'app.kubernetes.io/name=ulysses-scheduler-extender';

interface PodLike {
  metadata?: { name?: string; namespace?: string; creationTimestamp?: string | Date; deletionTimestamp?: string | Date; labels?: Record<string, string> };
  spec?: { nodeName?: string; nodeSelector?: Record<string, string>; affinity?: { nodeAffinity?: { requiredDuringSchedulingIgnoredDuringExecution?: unknown } } };
  status?: { phase?: string };
}

/**
 * The pod to bind to a node labelled `nodeLabels`: the oldest Pending, unbound, not deleted one whose
 * nodeSelector the node matches and that has no required node affinity; undefined when none.
 */
export function rescueCandidate(pods: readonly PodLike[], nodeLabels: Record<string, string>): PodLike | undefined {
  const time = (p: PodLike) => new Date(p.metadata?.creationTimestamp ?? 0).getTime();
  return pods
    .filter((p) => !p.spec?.nodeName && !p.metadata?.deletionTimestamp && (p.status?.phase ?? 'Pending') === 'Pending')
    .filter((p) => !p.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution)
    .filter((p) => Object.entries(p.spec?.nodeSelector ?? {}).every(([k, v]) => nodeLabels[k] === v))
    .sort((a, b) => time(a) - time(b) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''))[0];
}

export interface ExtenderRescueOptions {
  client: Pick<KubeClient, 'request'>;
  /** this control-plane node */
  node: string;
  afterMs: number;
  log: Logger;
  lease?: { namespace: string; name: string };
  now?: () => number;
}

export class ExtenderRescue {
  private readonly decider: HandbackDecider;
  private readonly lease: { namespace: string; name: string };
  private readonly rescues = registeredMetric(
    'ulysses_extender_rescues_total',
    () => new Counter({ name: 'ulysses_extender_rescues_total', help: 'Pending scheduler extender pods bound to this control-plane node because no extender replica had led for --extender-after (result: bound, none = no pod to bind, failed).', labelNames: ['result'], registers: [metricsRegistry()] }),
  );

  constructor(private readonly o: ExtenderRescueOptions) {
    this.lease = o.lease ?? EXTENDER_LEASE;
    this.decider = new HandbackDecider(o.afterMs, this.now(), false);
  }

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  /** One check; returns the name of the pod bound, if any. */
  async tick(): Promise<string | undefined> {
    const decision = this.decider.observe(await observeLease(this.o.client, this.lease, this.o.log), this.now());
    if (decision !== 'handBack') return undefined;
    // the silence counts again from here: one pod per afterMs of silence
    this.decider.takenBack(this.now());
    const { namespace } = this.lease;
    try {
      const pods = await this.o.client.request<{ items: PodLike[] }>('GET', `/api/v1/namespaces/${namespace}/pods`, { query: { labelSelector: EXTENDER_POD_SELECTOR }, timeoutMs: 5000 });
      const nodes = await this.o.client.request<{ items: { metadata?: { labels?: Record<string, string> } }[] }>('GET', '/api/v1/nodes', { query: { fieldSelector: `metadata.name=${this.o.node}` }, timeoutMs: 5000 });
      const pod = rescueCandidate(pods.items, nodes.items[0]?.metadata?.labels ?? {});
      if (!pod) {
        this.rescues.inc({ result: 'none' });
        this.o.log.warn({ lease: `${namespace}/${this.lease.name}`, afterMs: this.o.afterMs, pods: pods.items.length }, 'no scheduler extender has led: no Pending extender pod this node can take');
        return undefined;
      }
      const name = pod.metadata!.name!;
      await this.o.client.request('POST', `/api/v1/namespaces/${namespace}/pods/${name}/binding`, {
        body: { apiVersion: 'v1', kind: 'Binding', metadata: { name, namespace }, target: { apiVersion: 'v1', kind: 'Node', name: this.o.node } },
        timeoutMs: 5000,
      });
      this.rescues.inc({ result: 'bound' });
      this.o.log.error({ pod: `${namespace}/${name}`, node: this.o.node, afterMs: this.o.afterMs }, 'no scheduler extender has led, so kube-scheduler schedules nothing: the Pending extender pod bound to this node');
      return name;
    } catch (err) {
      this.rescues.inc({ result: 'failed' });
      this.o.log.error({ err: (err as Error).message }, 'extender rescue failed (tried again after another silence)');
      return undefined;
    }
  }
}
