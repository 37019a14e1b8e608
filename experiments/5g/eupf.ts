/**
 * eUPF as the 5G failover's critical pod (issue 41; docs/development/eupf.md "eUPF in Kubernetes"):
 * the binary of build-eupf.sh packed as the local OCI image `ulysses.local/eupf:0.7.1` (one layer, no
 * base image, no registry: imported into each node's containerd like the test images), its critical
 * Deployment and Service, and the stand-ins' binaries (build-standin.sh).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { V1Deployment, V1Pod, V1Service, V1Toleration } from '@kubernetes/client-node';
import { cacheDir } from '../testbed/binaries.ts';
import { writeOciImageTar, type OciFile } from '../testbed/images/oci.ts';
import type { BuiltImage } from '../testbed/images/index.ts';
import { importImages } from '../testbed/realnode.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { progressLog } from '../../core/logging.ts';

const HERE = fileURLToPath(new URL('./eupf/', import.meta.url));
export const EUPF_IMAGE = 'ulysses.local/eupf:0.7.1';
/** eUPF's ports as the Deployment sets them: PFCP (N4), GTP-U (N3), its REST API (health) and metrics. */
export const EUPF_PORTS = { pfcp: 8805, gtpu: 2152, api: 8080, metrics: 9090 } as const;
/** Bump when the image's layout or entrypoint changes, to invalidate the cached tar. */
const IMAGE_LAYOUT_VERSION = 1;
const BUSYBOX = '/bin/busybox';

/**
 * The container's entrypoint: bpffs in the container's own mount namespace (eUPF pins its maps there;
 * per pod, so an old and a new UPF never share maps) and forwarding on in the pod's network namespace
 * (N3 and N6 share eth0: without it eUPF forwards nothing), then eUPF with the pod's arguments.
 */
const ENTRYPOINT = `#!/bin/sh
set -e
mount -t bpf bpf /sys/fs/bpf
sysctl -w net.ipv4.ip_forward=1 >/dev/null
exec /eupf "$@"
`;

function script(name: string, args: string[]): string {
  try {
    return execFileSync('bash', [join(HERE, name), ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 16 << 20 }).trim().split('\n').at(-1)!;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`experiments/5g/eupf/${name} failed: ${e.message}\n${(e.stderr ?? '').split('\n').slice(-20).join('\n')}`);
  }
}

/** The eUPF binary (built by build-eupf.sh on first use, minutes; then cached). */
export function eupfBinary(cache = cacheDir()): string {
  return script('build-eupf.sh', [cache]);
}

/** A stand-in's binary (built by build-standin.sh from its sources on first use). */
export function standinBinary(name: 'smf-standin' | 'gnb-standin', cache = cacheDir()): string {
  return script('build-standin.sh', [name, cache]);
}

/** `ulysses.local/eupf:0.7.1` as an OCI image tar in `<cache>/images/eupf.tar`, rebuilt only when its inputs changed. */
export async function buildEupfImage(cache = cacheDir(), log: (line: string) => void = progressLog): Promise<BuiltImage> {
  const binary = readFileSync(eupfBinary(cache));
  const busybox = readFileSync(BUSYBOX);
  const dir = join(cache, 'images');
  mkdirSync(dir, { recursive: true });
  const tar = join(dir, 'eupf.tar');
  const stampFile = join(dir, 'eupf.stamp');
  const key = createHash('sha256').update(JSON.stringify({ v: IMAGE_LAYOUT_VERSION, name: EUPF_IMAGE, ENTRYPOINT })).update(binary).update(busybox).digest('hex');
  if (existsSync(tar) && existsSync(stampFile)) {
    const stamp = JSON.parse(readFileSync(stampFile, 'utf8')) as { key?: string; digest?: string };
    if (stamp.key === key && stamp.digest) return { name: EUPF_IMAGE, tar, short: 'eupf', digest: stamp.digest };
  }
  const files: OciFile[] = [
    { path: '/eupf', content: binary, mode: 0o755 },
    { path: '/entrypoint.sh', content: Buffer.from(ENTRYPOINT), mode: 0o755 },
    { path: BUSYBOX, content: busybox, mode: 0o755 },
    ...['/bin/sh', '/bin/mount', '/sbin/sysctl'].map((path) => ({ path, content: Buffer.alloc(0), mode: 0o777, symlink: BUSYBOX })),
    { path: '/tmp', content: Buffer.alloc(0), mode: 0o1777, directory: true },
  ];
  const { digest } = await writeOciImageTar({ name: EUPF_IMAGE, files, entrypoint: ['/entrypoint.sh'], env: ['GIN_MODE=release'], outFile: tar });
  writeFileSync(stampFile, `${JSON.stringify({ key, digest })}\n`);
  log(`image ${EUPF_IMAGE}: built ${tar} (${digest.slice(0, 19)})`);
  return { name: EUPF_IMAGE, tar, short: 'eupf', digest };
}

export interface EupfOptions {
  namespace: string;
  /** Deployment and Service name, and the pods' `app` label; default `upf` */
  name?: string;
  /** the nodes it may run on (kubernetes.io/hostname), default any */
  nodes?: string[];
  /** more labels on the Deployment, its pods and the Service (e.g. the harness' experiment label) */
  labels?: Record<string, string>;
  tolerations?: V1Toleration[];
  /** the interface eUPF attaches XDP to (N3 and N6), default the pod's eth0 */
  iface?: string;
}

/** The image built (or taken from the cache) and imported into each node's containerd (their CRI sockets). */
export async function importEupfImage(sockets: readonly string[], log: (line: string) => void = progressLog): Promise<BuiltImage> {
  const image = await buildEupfImage(cacheDir(), log);
  for (const socket of sockets) await importImages(socket, [image.tar]);
  return image;
}

/**
 * The UPF as the critical Deployment (thesis §6.1.2: one replica, `Recreate`, criticality high):
 * privileged (XDP attach, the bpffs mount, the ip_forward write), XDP in generic mode on the pod's
 * eth0 for N3 and N6, PFCP and node ID on the pod IP (downward API), Ready when its health API
 * answers (period 1 s, the minimum).
 */
export function eupfDeployment(o: EupfOptions): V1Deployment {
  const name = o.name ?? 'upf';
  const labels = { ...o.labels, app: name, [CRITICALITY_LABEL]: 'high' };
  const podIp = '$(POD_IP)';
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: o.namespace, labels },
    spec: {
      replicas: 1,
      strategy: { type: 'Recreate' },
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels },
        spec: {
          terminationGracePeriodSeconds: 5,
          ...(o.tolerations?.length ? { tolerations: o.tolerations } : {}),
          ...(o.nodes
            ? { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [{ matchExpressions: [{ key: 'kubernetes.io/hostname', operator: 'In', values: o.nodes }] }] } } } }
            : {}),
          containers: [
            {
              name: 'eupf',
              image: EUPF_IMAGE,
              imagePullPolicy: 'Never',
              args: ['--iface', o.iface ?? 'eth0', '--attach', 'generic', '--paddr', `${podIp}:${EUPF_PORTS.pfcp}`, '--nodeid', podIp, '--n3addr', podIp, '--aaddr', `0.0.0.0:${EUPF_PORTS.api}`, '--maddr', `0.0.0.0:${EUPF_PORTS.metrics}`, '--config', '/nonexistent'],
              env: [{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }],
              securityContext: { privileged: true },
              // a failed start (XDP attach, bpffs mount) puts eUPF's last log lines in the container's status
              terminationMessagePolicy: 'FallbackToLogsOnError',
              ports: [
                { name: 'pfcp', containerPort: EUPF_PORTS.pfcp, protocol: 'UDP' },
                { name: 'gtpu', containerPort: EUPF_PORTS.gtpu, protocol: 'UDP' },
                { name: 'api', containerPort: EUPF_PORTS.api, protocol: 'TCP' },
              ],
              readinessProbe: { httpGet: { path: '/api/v1/health', port: EUPF_PORTS.api as never }, periodSeconds: 1, failureThreshold: 1 },
            },
          ],
        },
      },
    },
  };
}

/**
 * The Service whose EndpointSlice tells the SMF the current UPF's pod IP. N4 and N3 go to that IP,
 * never to the ClusterIP: GTP-U uses port 2152 on both sides, so conntrack would keep a flow
 * through the ClusterIP pinned to the old endpoint.
 */
export function eupfService(o: EupfOptions): V1Service {
  const name = o.name ?? 'upf';
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace: o.namespace, ...(o.labels ? { labels: o.labels } : {}) },
    spec: {
      selector: { app: name },
      ports: [
        { name: 'pfcp', port: EUPF_PORTS.pfcp, targetPort: EUPF_PORTS.pfcp as never, protocol: 'UDP' },
        { name: 'gtpu', port: EUPF_PORTS.gtpu, targetPort: EUPF_PORTS.gtpu as never, protocol: 'UDP' },
      ],
    },
  };
}

/**
 * Why an eUPF pod cannot run, from its container's status: eUPF exited with an error (a failed XDP
 * attach, a bpffs mount, a bad flag), with the last lines it logged (terminationMessagePolicy
 * FallbackToLogsOnError); undefined while it runs or has not started yet.
 */
export function eupfStartProblem(pod: V1Pod): string | undefined {
  const c = pod.status?.containerStatuses?.find((s) => s.name === 'eupf');
  const t = c?.state?.terminated ?? c?.lastState?.terminated;
  if (!t || t.exitCode === 0) return undefined;
  const lines = (t.message ?? '').trim().split('\n').filter(Boolean).slice(-5);
  return `eUPF in pod ${pod.metadata?.namespace}/${pod.metadata?.name} on ${pod.spec?.nodeName ?? '?'} exited with ${t.exitCode}${t.reason ? ` (${t.reason})` : ''}${lines.length ? `: ${lines.join(' | ')}` : ''}`;
}
