/**
 * Small pure helpers on Kubernetes objects shared by every component: the cache key and pod
 * readiness/activity as upstream's podutil defines them.
 */
import type { KubernetesObject, V1Node, V1Pod } from '@kubernetes/client-node';

/** Cache key as client-go's MetaNamespaceKeyFunc: "namespace/name", or "name" for cluster-scoped objects. */
export function objectKey(o: KubernetesObject): string {
  const ns = o.metadata?.namespace;
  return ns ? `${ns}/${o.metadata?.name}` : (o.metadata?.name ?? '');
}

export function podReadyCondition(p: V1Pod) {
  return p.status?.conditions?.find((c) => c.type === 'Ready');
}

/** The node's Ready condition is True. */
export function isNodeReady(n: V1Node): boolean {
  return n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
}

/** The pod's Ready condition is True (upstream podutil.IsPodReady). */
export function isPodReady(p: V1Pod): boolean {
  return podReadyCondition(p)?.status === 'True';
}

/** Not Succeeded/Failed and not being deleted (upstream controller.IsPodActive). */
export function isPodActive(p: V1Pod): boolean {
  return p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed' && !p.metadata?.deletionTimestamp;
}

/** Ready for at least minReadySeconds (upstream podutil.IsPodAvailable). */
export function isPodAvailable(p: V1Pod, minReadySeconds: number, now: number): boolean {
  const c = podReadyCondition(p);
  if (c?.status !== 'True') return false;
  if (minReadySeconds <= 0) return true;
  const since = c.lastTransitionTime ? new Date(c.lastTransitionTime).getTime() : 0;
  return since > 0 && since + minReadySeconds * 1000 <= now;
}

/** Container waiting reasons that no retry fixes by itself (the image is missing, the config is wrong). */
export const FATAL_WAITING_REASONS: ReadonlySet<string> = new Set([
  'ErrImageNeverPull',
  'ErrImagePull',
  'ImagePullBackOff',
  'InvalidImageName',
  'CreateContainerConfigError',
  'CreateContainerError',
]);

/** The first container (init containers included) of `p` waiting for a {@link FATAL_WAITING_REASONS} reason. */
export function fatallyWaitingContainer(p: V1Pod) {
  return [...(p.status?.initContainerStatuses ?? []), ...(p.status?.containerStatuses ?? [])].find((s) => s.state?.waiting?.reason && FATAL_WAITING_REASONS.has(s.state.waiting.reason));
}
