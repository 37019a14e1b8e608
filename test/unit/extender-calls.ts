/**
 * kube-scheduler's two extender calls against an in-process ExtenderServer (fastify inject), for the
 * extender's unit tests: POST /filter and /prioritize with the pod and node names, as with
 * nodeCacheCapable.
 */
import { expect } from 'vitest';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import type { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { reservationRequest, RT_ANNOTATION, TDMA_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import type { ExtenderFilterResult, HostPriority } from '../../scheduler-plugins/extender/wire.ts';

/**
 * A pod's containers as its users write them: one, which requests ulysses.io/reservation when the
 * pod has `ulysses.io/rt` or `ulysses.io/tdma` (the filter refuses such a pod without it).
 */
export function containersFor(annotations: Record<string, string> = {}): V1Container[] {
  return [{ name: 'c', ...(RT_ANNOTATION in annotations || TDMA_ANNOTATION in annotations ? { resources: reservationRequest() } : {}) }];
}

export async function filter(s: ExtenderServer, p: V1Pod, names: string[]) {
  const res = await s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: p, NodeNames: names } });
  expect(res.statusCode).toBe(200);
  return res.json() as ExtenderFilterResult;
}
export async function prioritize(s: ExtenderServer, p: V1Pod, names: string[]) {
  const res = await s.app.inject({ method: 'POST', url: '/prioritize', payload: { Pod: p, NodeNames: names } });
  expect(res.statusCode).toBe(200);
  return Object.fromEntries((res.json() as HostPriority[]).map((h) => [h.Host, h.Score]));
}
