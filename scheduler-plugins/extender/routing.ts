/**
 * How kube-scheduler reaches the extender's leader without Ulysses' own controllers: the Service
 * `ulysses-scheduler-extender` has no selector, and the leader writes the Service's one EndpointSlice
 * itself, its own pod IP as the only endpoint. kube-proxy (stock) routes the ClusterIP by it. With a
 * selector, the slice would be written by the EndpointSlice controller, which Ulysses' controller
 * manager runs in place of kcm's: with the controller manager down, an extender takeover would never
 * reach kube-scheduler, and nothing would be scheduled (`ignorable: false`), the controller
 * manager's own replacement pods included (issue 42 item 7).
 *
 * Writes are guarded by resourceVersion (PUT of what was read): a deposed leader that wakes up after
 * its successor wrote gets 409 and, no longer leading, stops. The leader re-reads the slice every
 * {@link ROUTE_RECHECK_MS} and puts itself back if anything else is there. Slices of the Service that
 * another manager wrote (the EndpointSlice controller, when the Service still had its selector) are
 * deleted, so that no other endpoint stays behind.
 */
import type { KubeClient } from '../../core/kube.ts';
import type { Logger } from '../../core/logging.ts';

export const EXTENDER_SERVICE = 'ulysses-scheduler-extender';
/** The leader's EndpointSlice of {@link EXTENDER_SERVICE} (named like it). */
export const ROUTE_SLICE = EXTENDER_SERVICE;
/** endpointslice.kubernetes.io/managed-by of the leader's slice. */
export const ROUTE_MANAGER = 'scheduler-extender.ulysses.io';
export const ROUTE_RECHECK_MS = 10_000;
/** The extender's container ports (deployment.yaml), as the Service's ports name them. */
export const ROUTE_PORTS = [
  { name: 'http', port: 8888, protocol: 'TCP' },
  { name: 'metrics', port: 10358, protocol: 'TCP' },
] as const;

export interface LeaderPod {
  namespace: string;
  name: string;
  uid: string;
  ip: string;
  nodeName?: string;
}

interface Slice {
  metadata: { name: string; namespace: string; resourceVersion?: string; labels?: Record<string, string>; ownerReferences?: Array<{ apiVersion: string; kind: string; name: string; uid: string }> };
  addressType: string;
  endpoints: Array<{ addresses: string[]; conditions?: { ready?: boolean }; targetRef?: { kind: string; namespace: string; name: string; uid: string }; nodeName?: string }>;
  ports?: Array<{ name?: string; port?: number; protocol?: string }>;
}

/** The slice that routes the Service to `pod`. */
export function routeSlice(pod: LeaderPod, resourceVersion?: string): Slice {
  return {
    metadata: {
      name: ROUTE_SLICE,
      namespace: pod.namespace,
      ...(resourceVersion ? { resourceVersion } : {}),
      labels: { 'kubernetes.io/service-name': EXTENDER_SERVICE, 'endpointslice.kubernetes.io/managed-by': ROUTE_MANAGER },
      // owned by the leader's pod: gone with it (uninstall, a deleted leader) through the garbage collector
      ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: pod.name, uid: pod.uid }],
    },
    addressType: pod.ip.includes(':') ? 'IPv6' : 'IPv4',
    endpoints: [
      {
        addresses: [pod.ip],
        conditions: { ready: true },
        targetRef: { kind: 'Pod', namespace: pod.namespace, name: pod.name, uid: pod.uid },
        ...(pod.nodeName ? { nodeName: pod.nodeName } : {}),
      },
    ],
    ports: ROUTE_PORTS.map((p) => ({ ...p })),
  };
}

/** Whether `slice` already routes to `pod` alone. */
export function routesTo(slice: Slice | undefined, pod: LeaderPod): boolean {
  const e = slice?.endpoints ?? [];
  return e.length === 1 && e[0]!.addresses.length === 1 && e[0]!.addresses[0] === pod.ip && e[0]!.targetRef?.uid === pod.uid && e[0]!.conditions?.ready === true;
}

const status = (err: unknown) => (err as { statusCode?: number }).statusCode;

/**
 * Makes the Service route to `pod` (one GET, then a create or a resourceVersion-guarded PUT when
 * needed), and deletes the Service's slices of other managers. Returns whether a write was made.
 * Throws on a conflict (someone wrote in between) or any API error: the caller retries while it leads.
 */
export async function publishRoute(client: Pick<KubeClient, 'request'>, pod: LeaderPod, log: Logger): Promise<boolean> {
  const base = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(pod.namespace)}/endpointslices`;
  const slices = await client.request<{ items: Slice[] }>('GET', base, { query: { labelSelector: `kubernetes.io/service-name=${EXTENDER_SERVICE}` }, timeoutMs: 10_000 });
  for (const s of slices.items) {
    if (s.metadata.labels?.['endpointslice.kubernetes.io/managed-by'] === ROUTE_MANAGER) continue;
    await client.request('DELETE', `${base}/${encodeURIComponent(s.metadata.name)}`, { timeoutMs: 10_000 }).catch((err: unknown) => {
      if (status(err) !== 404) throw err;
    });
    log.info({ slice: s.metadata.name, managedBy: s.metadata.labels?.['endpointslice.kubernetes.io/managed-by'] }, 'leader: removed an EndpointSlice of the extender Service written by another manager');
  }
  const own = slices.items.find((s) => s.metadata.name === ROUTE_SLICE);
  if (routesTo(own, pod)) return false;
  if (own) await client.request('PUT', `${base}/${ROUTE_SLICE}`, { body: routeSlice(pod, own.metadata.resourceVersion), timeoutMs: 10_000 });
  else await client.request('POST', base, { body: routeSlice(pod), timeoutMs: 10_000 });
  log.info({ slice: ROUTE_SLICE, ip: pod.ip, replaced: own ? (own.endpoints[0]?.addresses[0] ?? 'none') : 'created' }, 'leader: the extender Service routes to this pod');
  return true;
}
