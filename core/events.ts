/**
 * Kubernetes Events as upstream's record.EventRecorder emits them (core/v1 Event, what
 * `kubectl describe` and `kubectl get events` show), reusable by every Ulysses component:
 *  - source.component is the upstream controller name (e.g. "deployment-controller"), so tools that
 *    filter on it keep working; reportingComponent is the process ("ulysses-controller-manager"),
 *    reportingInstance its identity;
 *  - aggregation as client-go's EventCorrelator, simplified: an event identical to one sent within
 *    the last 10 minutes (same object, type, reason, message) is a PATCH of count and lastTimestamp
 *    of the existing Event, not a new object;
 *  - rate limit as the correlator's spam filter: a token bucket per involved object (burst 25,
 *    one token per 5 minutes); events over it are dropped and counted;
 *  - sending is asynchronous and never fails the caller (a reconcile must not fail because its
 *    Event could not be written): errors are logged and counted.
 * Metric: ulysses_events_total{component,type,reason,result=sent|aggregated|dropped|failed}.
 */
import os from 'node:os';
import type { CoreV1Event, KubernetesObject } from '@kubernetes/client-node';
import { Counter } from 'prom-client';
import { isNotFound, type KubeClient } from './kube.ts';
import { componentLogger, type Logger } from './logging.ts';
import { metricsRegistry } from './metrics.ts';

export type EventType = 'Normal' | 'Warning';

/** client-go EventCorrelator defaults */
export const EVENT_AGGREGATION_WINDOW_MS = 10 * 60_000;
export const EVENT_SPAM_BURST = 25;
export const EVENT_SPAM_REFILL_MS = 5 * 60_000;
/** upstream recorder: queued events beyond this are dropped (incoming channel length 1000) */
const MAX_PENDING = 1000;
const MAX_REMEMBERED = 4096;

let eventsTotal: Counter<'component' | 'type' | 'reason' | 'result'> | undefined;
function eventsCounter() {
  eventsTotal ??= new Counter({
    name: 'ulysses_events_total',
    help: 'Kubernetes Events recorded, by result (sent, aggregated, dropped by the rate limit or a full queue, failed).',
    labelNames: ['component', 'type', 'reason', 'result'],
    registers: [metricsRegistry()],
  });
  return eventsTotal;
}

export interface EventRecorderOptions {
  client: KubeClient;
  /** reportingComponent, e.g. "ulysses-controller-manager" */
  reportingController: string;
  /** reportingInstance; default: hostname */
  reportingInstance?: string;
  log?: Logger;
  now?: () => number;
}

interface Sent {
  namespace: string;
  name: string;
  count: number;
  lastMs: number;
}

interface Pending {
  client: KubeClient;
  component: string;
  object: KubernetesObject;
  type: EventType;
  reason: string;
  message: string;
}

/** One recorder per process; `forComponent(name)` gives each controller its source.component. */
export class EventRecorder {
  private readonly sent = new Map<string, Sent>();
  private readonly spam = new Map<string, { tokens: number; lastMs: number }>();
  private readonly pending: Pending[] = [];
  private draining: Promise<void> | undefined;
  private readonly log: Logger;
  private readonly now: () => number;
  readonly instance: string;

  constructor(private readonly o: EventRecorderOptions) {
    this.log = o.log ?? componentLogger('events');
    this.now = o.now ?? Date.now;
    this.instance = o.reportingInstance ?? os.hostname();
  }

  /**
   * A recorder bound to an upstream component name ("deployment-controller", ...). With `client`,
   * its Events are written with that client (and its limiter), as each kcm controller records
   * Events through its own rate-limited clientset.
   */
  forComponent(component: string, client?: KubeClient): ComponentEventRecorder {
    return { event: (object, type, reason, message) => this.event(component, object, type, reason, message, client) };
  }

  /** Records an Event about `object` (fire and forget). */
  event(component: string, object: KubernetesObject, type: EventType, reason: string, message: string, client: KubeClient = this.o.client): void {
    if (!object.metadata?.name) return;
    if (!this.admit(component, object)) {
      eventsCounter().inc({ component, type, reason, result: 'dropped' });
      return;
    }
    if (this.pending.length >= MAX_PENDING) {
      eventsCounter().inc({ component, type, reason, result: 'dropped' });
      return;
    }
    this.pending.push({ client, component, object, type, reason, message });
    this.draining ??= this.drain().finally(() => (this.draining = undefined));
  }

  /** Resolves when every queued Event was written (for tests and clean shutdown). */
  async flush(): Promise<void> {
    while (this.draining) await this.draining;
  }

  /** The spam filter: a token bucket per (source, involved object). */
  private admit(component: string, object: KubernetesObject): boolean {
    const key = `${component}\0${object.kind}\0${object.metadata?.namespace}\0${object.metadata?.name}`;
    const now = this.now();
    const b = this.spam.get(key) ?? { tokens: EVENT_SPAM_BURST, lastMs: now };
    b.tokens = Math.min(EVENT_SPAM_BURST, b.tokens + (now - b.lastMs) / EVENT_SPAM_REFILL_MS);
    b.lastMs = now;
    this.spam.set(key, b);
    if (this.spam.size > MAX_REMEMBERED) this.spam.delete(this.spam.keys().next().value!);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  private async drain(): Promise<void> {
    for (let e = this.pending.shift(); e; e = this.pending.shift()) {
      try {
        const result = await this.write(e);
        eventsCounter().inc({ component: e.component, type: e.type, reason: e.reason, result });
      } catch (err) {
        eventsCounter().inc({ component: e.component, type: e.type, reason: e.reason, result: 'failed' });
        this.log.warn({ key: `${e.object.metadata?.namespace}/${e.object.metadata?.name}`, reason: e.reason, err: (err as Error).message }, 'could not write event');
      }
    }
  }

  private async write(e: Pending): Promise<'sent' | 'aggregated'> {
    const meta = e.object.metadata!;
    const namespace = meta.namespace ?? 'default';
    const id = [e.component, e.object.kind, namespace, meta.name, meta.uid, e.type, e.reason, e.message].join('\0');
    const now = this.now();
    const ts = new Date(now).toISOString();
    const prev = this.sent.get(id);
    if (prev && now - prev.lastMs < EVENT_AGGREGATION_WINDOW_MS) {
      try {
        await e.client.request('PATCH', `/api/v1/namespaces/${prev.namespace}/events/${prev.name}`, {
          body: { count: prev.count + 1, lastTimestamp: ts },
          contentType: 'application/merge-patch+json',
        });
        prev.count++;
        prev.lastMs = now;
        return 'aggregated';
      } catch (err) {
        if (!isNotFound(err)) throw err;
        this.sent.delete(id); // expired or deleted: create a new one
      }
    }
    const body: CoreV1Event = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${meta.name}.`, namespace },
      involvedObject: {
        apiVersion: e.object.apiVersion,
        kind: e.object.kind,
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resourceVersion: meta.resourceVersion,
      },
      reason: e.reason,
      message: e.message,
      type: e.type,
      source: { component: e.component },
      firstTimestamp: ts as never,
      lastTimestamp: ts as never,
      count: 1,
      reportingComponent: this.o.reportingController,
      reportingInstance: this.instance,
    };
    const created = await e.client.post<CoreV1Event>(`/api/v1/namespaces/${namespace}/events`, body);
    this.sent.set(id, { namespace, name: created.metadata!.name!, count: 1, lastMs: now });
    if (this.sent.size > MAX_REMEMBERED) this.sent.delete(this.sent.keys().next().value!);
    return 'sent';
  }
}

export interface ComponentEventRecorder {
  event(object: KubernetesObject, type: EventType, reason: string, message: string): void;
}

/** A recorder that records nothing (unit tests, components run without events). */
export const NO_EVENTS: ComponentEventRecorder = { event: () => undefined };
