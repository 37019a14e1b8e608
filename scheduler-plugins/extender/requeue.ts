/**
 * Puts back in kube-scheduler's queue the pods the extender refused on a view of the cluster that
 * a later release of capacity made stale.
 *
 * kube-scheduler keeps a pod that no node passes in its unschedulable pool and retries it on a
 * cluster event (a pod deleted, a node added or changed), or after podMaxInUnschedulablePodsDuration
 * (5 min). The extender learns of the same event through its own watch. When the scheduler's retry
 * reaches the filter first (the watch event still on its way), the pod is refused on the old view
 * and goes back to the pool, where nothing wakes it before the next event: a TDMA pod waiting for
 * the slots of a deleted pod can wait minutes with the slots free.
 *
 * So each pod refused everywhere is remembered with the release epoch its verdicts were computed
 * in. A release (a pod that held capacity gone, a node added or changed, the configuration
 * changed) starts a new epoch; shortly after it, every pod refused in an older epoch and not asked
 * about since gets one merge patch of {@link REQUEUE_ANNOTATION}. An update of an unschedulable pod
 * other than its status moves it back to the scheduler's queue
 * (pkg/scheduler/backend/queue/scheduling_queue.go, Update and isPodUpdated). The short wait lets the
 * scheduler's own retry come first: a pod asked about after the release leaves the list, so the
 * patch is only written when the race happened (or the scheduler is slow to retry).
 */
import type { Logger } from 'pino';
import { Counter } from 'prom-client';
import { isConflict, isNotFound, type KubeClient } from '../../core/kube.ts';
import { metricsRegistry, registeredMetric } from '../../core/metrics.ts';

/** Written on a refused pod when capacity it may fit in was released: the time of the release. */
export const REQUEUE_ANNOTATION = 'ulysses.io/capacity-released';

/** Refused pods remembered (the least recently refused forgotten first). */
const REFUSED_KEPT = 4096;

/** Patches one sweep writes at most; the rest wait for the next sweep, started at once. */
const PATCHES_PER_SWEEP = 64;

const requeueMetric = () =>
  registeredMetric(
    'ulysses_extender_requeues_total',
    () =>
      new Counter({
        name: 'ulysses_extender_requeues_total',
        help: 'Refused pods put back in the scheduler queue after a release of capacity (result: patched | gone | error)',
        labelNames: ['result'],
        registers: [metricsRegistry()],
      }),
  );

interface Refused {
  readonly namespace: string;
  readonly name: string;
  readonly epoch: number;
}

export interface RequeuerOptions {
  client: Pick<KubeClient, 'request'> | undefined;
  log: Logger;
  /** Wait after a release before the sweep (the scheduler's own retry usually comes first). */
  delayMs: () => number;
  /** Does the pod hold capacity now (bound or reserved)? Such a pod needs no requeue. */
  holdsCapacity: (uid: string) => boolean;
}

export class Requeuer {
  /** The current release epoch. */
  private current = 0;
  /** The epoch that the scheduled sweep requeues refusals older than. */
  private sweepBefore = 0;
  private readonly refused = new Map<string, Refused>();
  private timer: NodeJS.Timeout | undefined;
  /** The sweeps, one after the other. */
  private sweeps: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(private readonly o: RequeuerOptions) {}

  /** The current release epoch: read when a filter starts, handed to {@link refusedEverywhere}. */
  get epoch(): number {
    return this.current;
  }

  /** Pods remembered as refused. */
  get size(): number {
    return this.refused.size;
  }

  /** A release of capacity: pods refused before it are requeued after the delay. */
  released(): void {
    this.current++;
    this.schedule();
  }

  /** The filter passed no node for the pod, with verdicts computed in `epoch`. */
  refusedEverywhere(uid: string, namespace: string, name: string, epoch: number): void {
    this.refused.delete(uid);
    this.refused.set(uid, { namespace, name, epoch });
    if (this.refused.size > REFUSED_KEPT) this.refused.delete(this.refused.keys().next().value!);
    // a release came while its verdicts were computed (the analysis thread): they may be stale
    if (epoch < this.current) this.schedule();
  }

  /** The filter passed some node: the scheduler goes on with the pod. */
  passed(uid: string): void {
    this.refused.delete(uid);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    this.sweepBefore = this.current;
    if (this.timer || this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.sweeps = this.sweeps.then(() => this.sweep()).catch((err: Error) => this.o.log.error({ err: err.message }, 'requeue sweep failed'));
    }, this.o.delayMs());
    this.timer.unref();
  }

  private async sweep(): Promise<void> {
    const before = this.sweepBefore;
    const due: Array<[string, Refused]> = [];
    for (const [uid, r] of this.refused) {
      if (r.epoch >= before) continue;
      if (due.length === PATCHES_PER_SWEEP) {
        this.schedule();
        break;
      }
      due.push([uid, r]);
    }
    const at = new Date().toISOString();
    for (const [uid, r] of due) {
      if (this.stopped) return;
      // asked about again meanwhile, or placed: nothing to wake
      if (this.refused.get(uid) !== r) continue;
      this.refused.delete(uid);
      if (this.o.holdsCapacity(uid) || !this.o.client) continue;
      try {
        // the UID in the patch is a precondition: a pod recreated under the name is not touched
        await this.o.client.request('PATCH', `/api/v1/namespaces/${encodeURIComponent(r.namespace)}/pods/${encodeURIComponent(r.name)}`, {
          body: { metadata: { uid, annotations: { [REQUEUE_ANNOTATION]: at } } },
          contentType: 'application/merge-patch+json',
        });
        requeueMetric().inc({ result: 'patched' });
        this.o.log.info({ kind: 'Pod', key: `${r.namespace}/${r.name}` }, 'refused pod requeued after a release of capacity');
      } catch (err) {
        // 404: deleted; 409/422: the UID differs (recreated under the name)
        const gone = isNotFound(err) || isConflict(err) || (err as { statusCode?: number }).statusCode === 422;
        requeueMetric().inc({ result: gone ? 'gone' : 'error' });
        if (!gone) this.o.log.warn({ kind: 'Pod', key: `${r.namespace}/${r.name}`, err: (err as Error).message }, 'could not requeue a refused pod');
      }
    }
  }
}
