/**
 * Workloads and probes shared by the demo, the integration tests and the failover experiments:
 * the critical UDP echo service, low-priority HTTP Deployments, NoExecute taints, and a UDP client
 * that sends a packet every 50 ms until the first answer (thesis §4.3.2 "Prio up").
 */
import dgram from 'node:dgram';
import type { AppsV1Api, CoreV1Api, V1Deployment, V1Node, V1Pod, V1Toleration } from '@kubernetes/client-node';
import { KubeClient, type KubeAccess } from '../core/kube.ts';
import { CRITICALITY_LABEL, type Criticality } from '../core/criticality.ts';
import { GRANT_LABELS, GRANTED } from '../core/claims.ts';
import { isPodReady } from '../core/objects.ts';
import { updateNodeTaint } from '../core/node-taints.ts';
import { TEST_IMAGES } from './testbed/images/index.ts';

export const ECHO_PORT = 5005;
export const HTTP_PORT = 8080;

export interface DeploymentSpec {
  namespace: string;
  name: string;
  replicas: number;
  criticality: Criticality;
  image: 'udp-echo' | 'http-server';
  /** restrict to these nodes (by kubernetes.io/hostname) */
  nodes?: string[];
  /** an extra label on the pods, e.g. to group an experiment's load */
  labels?: Record<string, string>;
  /** spread the replicas evenly over the (untainted) nodes */
  spread?: boolean;
  /** tolerations of the pods (e.g. KWOK_TOLERATION for KWOK nodes) */
  tolerations?: V1Toleration[];
}

export function deployment(s: DeploymentSpec): V1Deployment {
  const labels = { app: s.name, [CRITICALITY_LABEL]: s.criticality, ...s.labels };
  const echo = s.image === 'udp-echo';
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: s.name, namespace: s.namespace, labels: { [CRITICALITY_LABEL]: s.criticality } },
    spec: {
      replicas: s.replicas,
      selector: { matchLabels: { app: s.name } },
      template: {
        metadata: { labels },
        spec: {
          terminationGracePeriodSeconds: 1,
          enableServiceLinks: false,
          automountServiceAccountToken: false,
          affinity: s.nodes
            ? {
                nodeAffinity: {
                  requiredDuringSchedulingIgnoredDuringExecution: {
                    nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: s.nodes }] }],
                  },
                },
              }
            : undefined,
          topologySpreadConstraints: s.spread
            ? [
                {
                  maxSkew: 1,
                  topologyKey: 'kubernetes.io/hostname',
                  whenUnsatisfiable: 'DoNotSchedule',
                  nodeTaintsPolicy: 'Honor', // a tainted (failed) node is not a domain to balance against
                  labelSelector: { matchLabels: { app: s.name } },
                },
              ]
            : undefined,
          tolerations: s.tolerations,
          containers: [
            {
              name: s.image,
              image: echo ? TEST_IMAGES.udpEcho.name : TEST_IMAGES.httpServer.name,
              imagePullPolicy: 'Never',
              ports: [echo ? { containerPort: ECHO_PORT, protocol: 'UDP' } : { containerPort: HTTP_PORT, protocol: 'TCP' }],
              readinessProbe: echo ? undefined : { httpGet: { path: '/', port: HTTP_PORT }, periodSeconds: 1, failureThreshold: 3 },
            },
          ],
        },
      },
    },
  };
}

/**
 * Creates namespace `name` (an existing one is fine) with `labels`, e.g. the grants of the claims its
 * pods make (core/claims.ts grantLabels: without them, where Ulysses' admission policies are
 * installed, a critical, RT or TDMA pod there is refused); an existing namespace gets the labels it
 * lacks. Resolves once the namespace's default ServiceAccount exists.
 */
export async function ensureNamespace(core: CoreV1Api, name: string, labels: Record<string, string> = {}): Promise<void> {
  try {
    await core.createNamespace({ body: { metadata: { name, labels } } });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
    const ns = await core.readNamespace({ name });
    if (Object.entries(labels).some(([k, v]) => ns.metadata?.labels?.[k] !== v)) {
      // a replace with the read resourceVersion: a concurrent change is a conflict, not lost
      await core.replaceNamespace({ name, body: { ...ns, metadata: { ...ns.metadata, labels: { ...ns.metadata?.labels, ...labels } } } });
      // the apiserver's admission reads namespaces from its informer cache: a critical pod created
      // before the cache has the grant would be refused, so wait until a dry run of one is admitted
      if (labels[GRANT_LABELS.criticality] === GRANTED) await grantAdmitted(core, name);
    }
  }
  // pods need the namespace's default ServiceAccount (created by kube-controller-manager)
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await core.readNamespacedServiceAccount({ name: 'default', namespace: name });
      return;
    } catch (err) {
      if (Date.now() > deadline) throw new Error(`namespace ${name}: default ServiceAccount never appeared`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** Polls a server-side dry run of a critical pod in `namespace` until admission no longer refuses it (403). */
async function grantAdmitted(core: CoreV1Api, namespace: string): Promise<void> {
  const probe = { metadata: { generateName: 'grant-probe-', labels: { [CRITICALITY_LABEL]: 'high' } }, spec: { containers: [{ name: 'c', image: 'pause' }] } };
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await core.createNamespacedPod({ namespace, body: probe, dryRun: 'All' });
      return;
    } catch (err) {
      if ((err as { code?: number }).code !== 403) throw err;
      if (Date.now() > deadline) throw new Error(`namespace ${namespace}: critical pods still refused 30 s after the grant ${GRANT_LABELS.criticality}=${GRANTED}: ${(err as Error).message}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export async function applyDeployment(apps: AppsV1Api, d: V1Deployment): Promise<void> {
  await apps.createNamespacedDeployment({ namespace: d.metadata!.namespace!, body: d });
}

/** A node's taints without `key`. */
const taintsWithout = (n: V1Node, key: string) => (n.spec?.taints ?? []).filter((t) => t.key !== key);

/** Sets a node's taint list (a JSON merge patch replaces the list whole, whether the node has one or not). */
const setTaints = (client: KubeClient, node: string, taints: NonNullable<V1Node['spec']>['taints']) => client.mergePatch(`/api/v1/nodes/${node}`, { spec: { taints } });

/**
 * Adds a NoExecute taint (the thesis' simulated node failure) to `nodes`, all at once (one PATCH
 * each, concurrently). `sentAtMs`: t = 0, the epoch ms at which the first PATCH was sent;
 * `writtenAtMs`: per node, when its PATCH's response arrived (the apiserver had stored the taint).
 * Through the shared core's keep-alive client (core/kube.ts): the nodes are read first, which opens
 * the connections, so the PATCHes go out on warm connections (client-node's API classes make a TLS
 * handshake per request: 10 sources cost 20 handshakes in the process that also hosts the
 * experiment's controller manager, right at t = 0).
 */
export async function taintNoExecuteTimed(kc: KubeAccess, nodes: string | string[], key = 'ulysses.io/failure'): Promise<{ sentAtMs: number; writtenAtMs: Record<string, number> }> {
  const client = new KubeClient(kc);
  const current = await Promise.all([nodes].flat().map((name) => client.get<V1Node>(`/api/v1/nodes/${name}`)));
  const writtenAtMs: Record<string, number> = {};
  const sent = await Promise.all(
    current.map(async (n) => {
      const t = Date.now();
      await setTaints(client, n.metadata!.name!, [...taintsWithout(n, key), { key, value: 'true', effect: 'NoExecute' }]);
      writtenAtMs[n.metadata!.name!] = Date.now();
      return t;
    }),
  );
  return { sentAtMs: Math.min(...sent), writtenAtMs };
}

/** {@link taintNoExecuteTimed}, returning the time the first PATCH was sent (epoch ms). */
export async function taintNoExecute(kc: KubeAccess, nodes: string | string[], key = 'ulysses.io/failure'): Promise<number> {
  return (await taintNoExecuteTimed(kc, nodes, key)).sentAtMs;
}

/** Removes the taints with `key` from `node`; writes nothing when it has none, and never over another owner's concurrent change (core/node-taints.ts). */
export async function untaint(kc: KubeAccess, node: string, key = 'ulysses.io/failure'): Promise<void> {
  await updateNodeTaint(new KubeClient(kc), node, key);
}

/** Pod readiness as the controllers see it (core/objects.ts). */
export const podReady: (p: V1Pod) => boolean = isPodReady;

/**
 * Sends a datagram to ip:port every `intervalMs` until one is echoed back; resolves with the time
 * (Date.now()) of the first answer. Rejects after `timeoutMs`. `freshSourcePort`: every datagram
 * from a socket of its own (closed after `socketTtlMs`), so each is a new conntrack flow and a
 * Service's ClusterIP routes it by kube-proxy's rules of that moment, not to the backend an earlier
 * datagram of the flow was pinned to; otherwise one socket for all (a pod IP).
 */
export function udpFirstAnswer(ip: string, port = ECHO_PORT, opts: { intervalMs?: number; timeoutMs?: number; freshSourcePort?: boolean; socketTtlMs?: number } = {}): Promise<number> {
  return new Promise((resolve, reject) => {
    const payload = Buffer.from(`ulysses-probe ${process.pid}`);
    const open = new Set<dgram.Socket>();
    let done = false;
    const finish = (err: Error | undefined, t?: number) => {
      if (done) return;
      done = true;
      clearInterval(timer);
      clearTimeout(deadline);
      for (const s of open) s.close();
      open.clear();
      if (err) reject(err);
      else resolve(t!);
    };
    const deadline = setTimeout(() => finish(new Error(`no UDP echo ${opts.freshSourcePort ? 'through' : 'from'} ${ip}:${port} within ${opts.timeoutMs ?? 60_000} ms`)), opts.timeoutMs ?? 60_000);
    /** A socket bound to a port of its own, listening for the echo. */
    const bound = (): Promise<dgram.Socket> =>
      new Promise((ready) => {
        const sock = dgram.createSocket('udp4');
        open.add(sock);
        sock.on('message', (msg) => {
          if (msg.equals(payload)) finish(undefined, Date.now());
        });
        sock.on('error', () => undefined); // ICMP unreachable while the pod is not up yet: keep sending
        sock.bind(0, () => ready(sock));
      });
    let shared: Promise<dgram.Socket> | undefined;
    const send = () => {
      const sock = opts.freshSourcePort ? bound() : (shared ??= bound());
      void sock.then((s) => {
        if (open.has(s)) s.send(payload, port, ip, () => undefined); // not closed meanwhile
        if (opts.freshSourcePort)
          setTimeout(() => {
            if (open.delete(s)) s.close();
          }, opts.socketTtlMs ?? 1000).unref();
      });
    };
    send();
    const timer = setInterval(send, opts.intervalMs ?? 50);
  });
}
