/**
 * Pods that cannot start, told apart from pods that are merely slow: a container waiting for a
 * reason that no retry fixes here (no image registry: ErrImageNeverPull, image pull errors; bad
 * config), or a sandbox that failed again and again (FailedCreatePodSandBox: a missing CNI plugin or
 * runc). Waits for pods call {@link PodStartWatch.check} on every poll and end at once with the
 * reason, instead of timing out minutes later.
 */
import type { CoreV1Api, CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { fatallyWaitingContainer, isPodReady } from '../core/objects.ts';
import { FatalError } from './testbed/processes.ts';

export { FATAL_WAITING_REASONS } from '../core/objects.ts';

/** Warning events that end the wait once a pod has had this many of them. */
export const FATAL_EVENT_REASONS: Readonly<Record<string, number>> = { FailedCreatePodSandBox: 3 };

const podKey = (ns: string | undefined, name: string | undefined) => `${ns ?? ''}/${name ?? ''}`;

/**
 * Why these pods cannot start, one line per pod (empty if none is stuck). `events` are the Warning
 * events of their namespaces; an event counts for the pod it names (involvedObject), with its count.
 */
export function podStartProblems(pods: readonly V1Pod[], events: readonly CoreV1Event[] = []): string[] {
  const waiting = new Set(pods.filter((p) => !isPodReady(p) && !p.metadata?.deletionTimestamp).map((p) => podKey(p.metadata?.namespace, p.metadata?.name)));
  const out: string[] = [];
  for (const p of pods) {
    const key = podKey(p.metadata?.namespace, p.metadata?.name);
    if (!waiting.has(key)) continue;
    const stuck = fatallyWaitingContainer(p);
    if (stuck) out.push(`pod ${key} on ${p.spec?.nodeName ?? '(unscheduled)'}: container ${stuck.name} ${stuck.state!.waiting!.reason}: ${stuck.state!.waiting!.message ?? ''}`.trimEnd());
  }
  const counted = new Map<string, { n: number; reason: string; message: string }>();
  for (const e of events) {
    const limit = FATAL_EVENT_REASONS[e.reason ?? ''];
    if (!limit || e.involvedObject?.kind !== 'Pod') continue;
    const key = podKey(e.involvedObject.namespace, e.involvedObject.name);
    if (!waiting.has(key)) continue;
    const c = counted.get(key) ?? { n: 0, reason: e.reason!, message: '' };
    c.n += Math.max(e.count ?? 1, e.series?.count ?? 1);
    c.message = e.message ?? c.message;
    counted.set(key, c);
    if (c.n >= limit && !out.some((l) => l.startsWith(`pod ${key} `))) {
      const pod = pods.find((p) => podKey(p.metadata?.namespace, p.metadata?.name) === key);
      out.push(`pod ${key} on ${pod?.spec?.nodeName ?? '(unscheduled)'}: ${c.reason} x${c.n}: ${c.message}`);
    }
  }
  return out;
}

/**
 * Checks pods for {@link podStartProblems} during a wait. Events are listed (one LIST of Warning
 * events per namespace) at most every `eventsEveryMs`, and only while some pod is not Ready.
 */
export class PodStartWatch {
  private lastEventsAt = -Infinity;
  private events: CoreV1Event[] = [];

  constructor(
    private readonly core: CoreV1Api,
    private readonly namespaces: readonly string[],
    private readonly eventsEveryMs = 2_000,
  ) {}

  /** Throws a FatalError naming each stuck pod and its reason. */
  async check(pods: readonly V1Pod[]): Promise<void> {
    if (pods.every((p) => isPodReady(p) || p.metadata?.deletionTimestamp)) return;
    if (Date.now() - this.lastEventsAt >= this.eventsEveryMs) {
      this.lastEventsAt = Date.now();
      const lists = await Promise.all(this.namespaces.map((namespace) => this.core.listNamespacedEvent({ namespace, fieldSelector: 'type=Warning' })));
      this.events = lists.flatMap((l) => l.items);
    }
    const problems = podStartProblems(pods, this.events);
    if (problems.length) throw new FatalError(`pods cannot start:\n  ${problems.slice(0, 10).join('\n  ')}${problems.length > 10 ? `\n  ... and ${problems.length - 10} more` : ''}`);
  }
}
