/**
 * The kube-apiservers of a cluster, as the new extender leader must know them to confirm its
 * reservation epoch on each (leadership.ts confirmEpoch): the policy `ulysses-reservation-epoch`
 * reads the Lease from the answering apiserver's own informer cache, so one apiserver admitting the
 * new epoch says nothing about another whose cache still has the old Lease.
 *
 * Where the list comes from (upstream kube-apiserver, pkg/controlplane/reconcilers): every
 * apiserver with `--endpoint-reconciler-type=lease` (the default) keeps a key of its own
 * `--advertise-address` under /masterleases/ in etcd with a TTL of 15 s, refreshed every 10 s
 * (DefaultEndpointReconcilerTTL / DefaultEndpointReconcilerInterval), and on each tick writes the
 * IPs of every unexpired key, with its `--secure-port`, into the Endpoints default/kubernetes and
 * the EndpointSlice default/kubernetes (label kubernetes.io/service-name=kubernetes, one endpoint
 * per IP, written by the apiserver itself, not by the mirroring controller; a dual-stack cluster
 * adds `kubernetes-v4`/`kubernetes-v6` with the same apiservers in the other family). An apiserver
 * that shuts down cleanly removes its key at once; one that stops (crash, SIGSTOP, a dead node)
 * leaves the list once its key expired and another apiserver's reconciler ran: 5 to 25 s. (The
 * kube-system Leases `apiserver-<hash>` are the apiserver identity leases, not this list.)
 *
 * The primary slice (`kubernetes`) is read: its family is the Service's, the one the extender's
 * in-cluster address (the Service's ClusterIP) belongs to; the Endpoints object when there is no
 * slice. Every listed address counts, whatever its conditions (an apiserver marked not ready may
 * still admit writes).
 */
import { Agent as HttpsAgent } from 'node:https';
import { isIP } from 'node:net';
import { plainHeaders, type KubeAccess } from '../../core/kube.ts';

/** More listed apiservers than this is refused as malformed (clusters run 1 to 5). */
export const MAX_APISERVERS = 64;

export const APISERVER_SLICE_PATH = '/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes';
export const APISERVER_ENDPOINTS_PATH = '/api/v1/namespaces/default/endpoints/kubernetes';

interface SliceLike {
  addressType?: string;
  endpoints?: Array<{ addresses?: string[] } | null> | null;
  ports?: Array<{ name?: string | null; port?: number | null } | null> | null;
}
interface EndpointsLike {
  subsets?: Array<{ addresses?: Array<{ ip?: string } | null> | null; notReadyAddresses?: Array<{ ip?: string } | null> | null; ports?: SliceLike['ports'] } | null> | null;
}

/** The origin https://ip:port (brackets for IPv6, no port for 443): the key of one apiserver. */
export function apiserverUrl(ip: string, port: number): string {
  return new URL(`https://${isIP(ip) === 6 ? `[${ip}]` : ip}:${port}`).origin;
}

/** The apiserver port of a port list: the one named `https`, else the only one. */
function httpsPort(ports: SliceLike['ports'], what: string): number {
  const list = (ports ?? []).filter((p): p is NonNullable<typeof p> => !!p);
  const p = list.find((x) => x.name === 'https') ?? (list.length === 1 ? list[0] : undefined);
  if (!p) throw new Error(`${what}: no port named "https" among ${list.length} ports`);
  if (!Number.isInteger(p.port) || p.port! < 1 || p.port! > 65535) throw new Error(`${what}: port ${JSON.stringify(p.name ?? '')} is ${JSON.stringify(p.port)}, not a port number`);
  return p.port!;
}

function checked(ips: string[], port: number, what: string): string[] {
  const urls = new Set<string>();
  for (const ip of ips) {
    if (!isIP(ip)) throw new Error(`${what}: address ${JSON.stringify(ip)} is not an IP address`);
    urls.add(apiserverUrl(ip, port));
  }
  if (urls.size > MAX_APISERVERS) throw new Error(`${what}: ${urls.size} apiserver addresses, more than ${MAX_APISERVERS}`);
  return [...urls].sort();
}

/** The apiserver URLs of the EndpointSlice default/kubernetes, sorted, without duplicates. */
export function apiserversFromSlice(slice: SliceLike): string[] {
  const what = 'EndpointSlice default/kubernetes';
  if (slice.addressType !== 'IPv4' && slice.addressType !== 'IPv6') throw new Error(`${what}: addressType ${JSON.stringify(slice.addressType)} (IPv4 or IPv6 expected)`);
  const ips = (slice.endpoints ?? []).flatMap((e, i) => {
    if (!e || !Array.isArray(e.addresses)) throw new Error(`${what}: endpoints[${i}].addresses missing`);
    return e.addresses;
  });
  if (ips.length === 0) return [];
  return checked(ips, httpsPort(slice.ports, `${what} ports`), what);
}

/** The apiserver URLs of the Endpoints default/kubernetes (ready and not-ready addresses), sorted. */
export function apiserversFromEndpoints(ep: EndpointsLike): string[] {
  const what = 'Endpoints default/kubernetes';
  const urls = new Set<string>();
  (ep.subsets ?? []).forEach((s, i) => {
    if (!s) return;
    const ips = [...(s.addresses ?? []), ...(s.notReadyAddresses ?? [])].map((a) => a?.ip ?? '');
    if (ips.length === 0) return;
    for (const u of checked(ips, httpsPort(s.ports, `${what} subsets[${i}].ports`), what)) urls.add(u);
  });
  if (urls.size > MAX_APISERVERS) throw new Error(`${what}: ${urls.size} apiserver addresses, more than ${MAX_APISERVERS}`);
  return [...urls].sort();
}

/** host:port of a URL, for logs and reasons. */
export function hostPort(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
}

/** TLS material of an agent that identifies the client and the CA (not the server name: that is per address). */
const TLS_KEYS = ['ca', 'cert', 'key', 'pfx', 'passphrase', 'rejectUnauthorized'] as const;

/**
 * `kc`'s credentials (headers, client certificate) aimed at one apiserver's own address instead of
 * the kubeconfig's server. The certificate chain is verified against the kubeconfig's CA as before;
 * the name checked is the address itself (its IP SAN: kubeadm puts every control-plane node's
 * advertise address into its apiserver certificate), not the kubeconfig's tls-server-name, which
 * names the kubeconfig's server (a load balancer, the Service). Verification is never turned off
 * here (a kubeconfig with insecure-skip-tls-verify keeps its own setting).
 */
export function apiserverAccess(kc: KubeAccess, url: string): KubeAccess {
  let cached: { tls: Record<string, unknown>; agent: HttpsAgent } | undefined;
  const same = (a: unknown, b: unknown) => (Buffer.isBuffer(a) && Buffer.isBuffer(b) ? a.equals(b) : a === b || JSON.stringify(a) === JSON.stringify(b));
  return {
    getCurrentCluster: () => ({ server: url }),
    applyToFetchOptions: async () => {
      const applied = (await kc.applyToFetchOptions({})) as { agent?: unknown; headers?: unknown };
      const options = ((applied.agent as { options?: Record<string, unknown> } | undefined)?.options ?? {}) as Record<string, unknown>;
      const tls = Object.fromEntries(TLS_KEYS.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]));
      // one keep-alive agent per address while the credentials stay the same (rotated: a new one)
      if (!cached || !TLS_KEYS.every((k) => same(cached!.tls[k], tls[k]))) {
        cached?.agent.destroy();
        cached = { tls, agent: new HttpsAgent({ ...tls, keepAlive: true }) };
      }
      return { agent: cached.agent, headers: plainHeaders(applied.headers) };
    },
  };
}
