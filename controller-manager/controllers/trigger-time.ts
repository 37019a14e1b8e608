/**
 * The endpoints.kubernetes.io/last-change-trigger-time annotation, computed as upstream's
 * TriggerTimeTracker (k8s.io/endpointslice/util) does for the EndpointSlice and Endpoints
 * controllers: per Service, the trigger time of each selected pod (its Ready condition's
 * lastTransitionTime) and of the Service (its creationTimestamp) seen at the previous sync; a sync
 * returns the earliest of the trigger times that moved forward since then, or the Service's
 * creationTimestamp at the first sync of a Service. No time (undefined): the annotation is removed.
 */
import type { V1Pod, V1Service } from '@kubernetes/client-node';
import { podReadyCondition } from '../../core/objects.ts';

export const LAST_CHANGE_TRIGGER_TIME_ANNOTATION = 'endpoints.kubernetes.io/last-change-trigger-time';

interface ServiceState {
  service: number;
  pods: Map<string, number>;
}

const ms = (t: Date | string | undefined): number => {
  if (t === undefined || t === null) return 0;
  const v = new Date(t).getTime();
  return Number.isFinite(v) ? v : 0;
};

export class TriggerTimeTracker {
  private readonly states = new Map<string, ServiceState>();

  /** Trigger time (ms) for this sync of `svc` with the pods its selector matches; records the state. */
  compute(svc: V1Service, pods: readonly V1Pod[]): number | undefined {
    const key = `${svc.metadata?.namespace}/${svc.metadata?.name}`;
    const prev = this.states.get(key);
    let min = 0;
    const podTimes = new Map<string, number>();
    for (const p of pods) {
      const t = ms(podReadyCondition(p)?.lastTransitionTime);
      if (!t) continue;
      podTimes.set(p.metadata!.name!, t);
      if (t > (prev?.pods.get(p.metadata!.name!) ?? 0) && (min === 0 || t < min)) min = t;
    }
    const svcTime = ms(svc.metadata?.creationTimestamp);
    if (svcTime > (prev?.service ?? 0) && (min === 0 || svcTime < min)) min = svcTime;
    this.states.set(key, { service: svcTime, pods: podTimes });
    if (!prev) return svcTime || undefined;
    return min || undefined;
  }

  deleteService(key: string): void {
    this.states.delete(key);
  }
}

/** Go's time.RFC3339Nano in UTC: fractional seconds without trailing zeros ("...T10:00:00Z"). */
export function rfc3339Nano(t: number): string {
  return new Date(t).toISOString().replace(/\.?0+Z$/, 'Z');
}

/** Sets or removes the annotation on `annotations`. */
export function setTriggerTime(annotations: Record<string, string>, t: number | undefined): void {
  if (t) annotations[LAST_CHANGE_TRIGGER_TIME_ANNOTATION] = rfc3339Nano(t);
  else delete annotations[LAST_CHANGE_TRIGGER_TIME_ANNOTATION];
}
