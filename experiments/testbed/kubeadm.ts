/**
 * `ulysses testbed up --kubeadm`: a real kubeadm cluster on this machine, offline.
 *
 * - One node per containerd: a control-plane node and N workers, each with its own containerd 2
 *   (socket, root, state), CNI bridge (the node's InternalIP is the bridge address, the host is the
 *   gateway of every pod subnet), cgroup v1 root and kubelet ports.
 * - The images kubeadm asks for are built from the testbed's binaries (kubeadm-images.ts) and
 *   imported into the nodes' containerds under exactly those names: kubeadm pulls nothing.
 * - `kubeadm init --config`: control plane and etcd as static pods, kube-proxy (iptables) as
 *   kubeadm's DaemonSet, CoreDNS, the kubeadm-config ConfigMap, a bootstrap token.
 * - Workers join through the bootstrap token (`kubeadm join`), each in a mount namespace of its own
 *   where /etc/kubernetes and /var/lib/kubelet are that node's directories.
 * - No systemd here: the testbed starts each kubelet as kubeadm's systemd drop-in would (`--config
 *   /var/lib/kubelet/config.yaml --kubeconfig ... --bootstrap-kubeconfig ... $KUBELET_KUBEADM_ARGS`)
 *   once kubeadm has written those files, and restarts the control-plane kubelet after init
 *   (kubelet-finalize points kubelet.conf at the rotating client certificate).
 * - Every kubeadm run sees /etc/hosts with the node names and an /etc/resolv.conf naming the
 *   control-plane address (where no DNS server listens): no lookup leaves the machine. The kubelets'
 *   resolvConf is that file too, so CoreDNS forwards nothing outside.
 *
 * `down` stops the kubelets, runs `kubeadm reset -f` per node, stops the containerds, and removes
 * what kubeadm, the kubelets and kube-proxy left on the host (mounts, bridges, cgroups, KUBE-*
 * iptables chains, /etc/kubernetes, /var/lib/kubelet, /var/lib/etcd, sysctls it changed).
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { randomBytes, createHash, X509Certificate } from 'node:crypto';
import { chmodSync, closeSync, copyFileSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readlinkSync, renameSync, rmdirSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { KubeConfig, CoreV1Api, AppsV1Api, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { stringify as stringifyYaml } from 'yaml';
import { binaryPath, binDir, cacheDir, ensureBinaries, K8S_VERSION } from './binaries.ts';
import { buildTestImages } from './images/index.ts';
import { buildKubeadmImages } from './kubeadm-images.ts';
import { FatalError, isAlive, pidsMatching, pollUntil, processTracker, recordClusterStart, startProcess, stopProcess, tailFile, type TrackedProcess } from './processes.ts';
import { createBridge, createCgroupRoot, deleteBridge, destroyCgroupRoot, importImages, mountsUnder, startContainerd, unmountUnder, type RealNodeSpec } from './realnode.ts';
import { isNodeReady } from '../../core/objects.ts';
import { BUILD_PREREQUISITES, KUBEADM_PREREQUISITES, ensurePrerequisites } from './prerequisites.ts';
import { downCommand, foreignKubeadmClusterMessage, kubeadmRunDirs, stateKind, ulyssesDirsIn } from './run-dir.ts';
import { NODE_PATHS, type NodeAccess } from '../../manifests/install.ts';
import { ShellNodeAccess } from '../../manifests/node-shell.ts';
import { REPO_ROOT } from './ulysses-image.ts';
import { auditPolicy } from './controlplane.ts';
import { progressLog } from '../../core/logging.ts';

const run = promisify(execFile);

export const HOST_ETC_KUBERNETES = '/etc/kubernetes';
export const HOST_VAR_LIB_KUBELET = '/var/lib/kubelet';
export const HOST_VAR_LIB_ETCD = '/var/lib/etcd';
export const SERVICE_SUBNET = '10.96.0.0/12';
export const POD_SUBNET = '10.244.0.0/16';
export const CONTROL_PLANE_NAME = 'kubeadm-control-plane';
/** Bridges ulykb0 (control plane), ulykb1.. (workers). */
const BRIDGE_PREFIX = 'ulykb';

export interface KubeadmNode {
  spec: RealNodeSpec;
  role: 'control-plane' | 'worker';
  /** this node's /etc/kubernetes and /var/lib/kubelet on the host */
  etcKubernetes: string;
  varLibKubelet: string;
}

export interface KubeadmState {
  kind: 'kubeadm';
  version: string;
  runDir: string;
  kubeconfig: string;
  apiserver: string;
  nodes: KubeadmNode[];
  processes: TrackedProcess[];
  coredns: boolean;
  /** the namespaces kube-apiserver audits (up's auditNamespaces) */
  auditNamespaces?: string[];
  /** host state before `up`, restored by `down` */
  host: { ipForward: string; routeLocalnet: string; created: string[] };
  timingsMs: Record<string, number>;
  startedAt: string;
  ready: boolean;
}

export interface KubeadmUpOptions {
  runDir?: string;
  workers?: number;
  log?: (line: string) => void;
  /** kube-apiserver's audit log of the pod and EndpointSlice writes in these namespaces (controlplane.ts auditPolicy, {@link kubeadmAuditLogPath}) */
  auditNamespaces?: string[];
}

/** The audit log of a kubeadm testbed started with auditNamespaces (JSON lines, experiments/harness/api-trace.ts reads it). */
export const kubeadmAuditLogPath = (runDir: string) => join(kubeadmAuditDir(runDir), 'kube-apiserver-audit.log');
/** The audit policy and log, mounted into kube-apiserver's static pod at the same path. */
const kubeadmAuditDir = (runDir: string) => join(runDir, 'audit');

/** The default run dir when ULYSSES_KUBEADM_RUN_DIR does not name one. */
const DEFAULT_KUBEADM_RUN_DIR = '/tmp/ulysses-testbed-kubeadm';

export function defaultKubeadmRunDir(): string {
  return process.env.ULYSSES_KUBEADM_RUN_DIR ?? DEFAULT_KUBEADM_RUN_DIR;
}

const stateFile = (runDir: string) => join(runDir, 'state.json');

/** The kubeadm testbed's state in `runDir`; a plain testbed's state there is an error naming its `down`. */
export function readKubeadmState(runDir = defaultKubeadmRunDir()): KubeadmState | undefined {
  const f = stateFile(runDir);
  if (!existsSync(f)) return undefined;
  const s: unknown = JSON.parse(readFileSync(f, 'utf8'));
  if (stateKind(s) === 'plain') throw new FatalError(`${f} is a plain testbed's state, not a kubeadm testbed's (\`${downCommand('plain', runDir)}\` takes it down)`);
  return s as KubeadmState;
}

/** Run dirs other than `runDir` holding a kubeadm testbed's state: the default ones and the temp dir's `ulysses*`. */
function otherKubeadmRunDirs(runDir: string): string[] {
  const env = process.env.ULYSSES_KUBEADM_RUN_DIR;
  return kubeadmRunDirs([DEFAULT_KUBEADM_RUN_DIR, ...(env ? [env] : []), ...ulyssesDirsIn(tmpdir()), ...ulyssesDirsIn('/tmp')], runDir);
}

function saveState(s: KubeadmState): void {
  writeFileSync(stateFile(s.runDir), JSON.stringify(s, null, 2));
}

/** Node `index` (0: control plane): names, addresses, ports, directories. */
export function kubeadmNode(runDir: string, index: number): KubeadmNode {
  const name = index === 0 ? CONTROL_PLANE_NAME : `kubeadm-worker-${index}`;
  const dir = join(runDir, 'nodes', name);
  const octet = 100 + index;
  const spec: RealNodeSpec = {
    index,
    name,
    dir,
    podSubnet: `10.244.${octet}.0/24`,
    gateway: `10.244.${octet}.1`,
    bridge: `${BRIDGE_PREFIX}${index}`,
    // the control plane keeps kubeadm's defaults; workers get ports of their own on the same host
    kubeletPort: index === 0 ? 10250 : 11250 + index * 10,
    kubeletHealthzPort: index === 0 ? 10248 : 11248 + index * 10,
    cgroupRoot: `/ulysses-${name}`,
    socket: join(dir, 'containerd', 'containerd.sock'),
    shimSocket: join(dir, 'kubelet-shim.sock'),
    shimMetricsPort: 11252 + index * 10,
  };
  return index === 0
    ? { spec, role: 'control-plane', etcKubernetes: HOST_ETC_KUBERNETES, varLibKubelet: HOST_VAR_LIB_KUBELET }
    : { spec, role: 'worker', etcKubernetes: join(dir, 'etc-kubernetes'), varLibKubelet: join(dir, 'var-lib-kubelet') };
}

/** A failing step of `up`: its name and the tail of the log that explains it. */
export class StepError extends Error {
  constructor(
    readonly step: string,
    message: string,
  ) {
    super(`kubeadm testbed: step "${step}" failed: ${message}`);
  }
}

async function step<T>(name: string, timings: Record<string, number>, log: (l: string) => void, fn: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  log(`[${name}]`);
  try {
    const v = await fn();
    timings[name] = Date.now() - t0;
    log(`[${name}] done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    return v;
  } catch (err) {
    if (err instanceof StepError) throw err;
    throw new StepError(name, (err as Error).message);
  }
}

function token(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  const pick = (n: number) => Array.from(randomBytes(n), (b) => alphabet[b % alphabet.length]).join('');
  return `${pick(6)}.${pick(16)}`;
}

/** kubeadm's --discovery-token-ca-cert-hash: sha256 of the CA's SubjectPublicKeyInfo. */
export function caCertHash(caPem: string): string {
  const spki = new X509Certificate(caPem).publicKey.export({ type: 'spki', format: 'der' });
  return `sha256:${createHash('sha256').update(spki).digest('hex')}`;
}

/** KUBELET_KUBEADM_ARGS of kubeadm-flags.env as an argument list. */
export function parseKubeadmFlags(env: string): string[] {
  const m = /KUBELET_KUBEADM_ARGS="([^"]*)"/.exec(env);
  if (!m) throw new Error(`no KUBELET_KUBEADM_ARGS in kubeadm-flags.env: ${env.trim()}`);
  return m[1]!.split(/\s+/).filter(Boolean);
}

const cri = (n: KubeadmNode) => `unix://${n.spec.socket}`;
const kubeadmPatchesDir = (n: KubeadmNode) => join(n.spec.dir, 'patches');

/** Per-node KubeletConfiguration (kubeadm's own --patches mechanism): cgroup root, ports, paths. */
function kubeletPatch(n: KubeadmNode): Record<string, unknown> {
  const patch: Record<string, unknown> = {
    cgroupRoot: n.spec.cgroupRoot,
    podLogsDir: join(n.spec.dir, 'pod-logs'),
  };
  if (n.role === 'worker') {
    Object.assign(patch, {
      port: n.spec.kubeletPort,
      healthzPort: n.spec.kubeletHealthzPort,
      staticPodPath: join(n.etcKubernetes, 'manifests'),
      authentication: { x509: { clientCAFile: join(n.etcKubernetes, 'pki', 'ca.crt') } },
    });
  }
  return patch;
}

function kubeletConfiguration(runDir: string): Record<string, unknown> {
  return {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    cgroupDriver: 'cgroupfs',
    failCgroupV1: false,
    failSwapOn: false,
    // the images exist only locally: never garbage-collect them, never evict on a full-ish disk
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%', 'nodefs.inodesFree': '1%' },
    resolvConf: join(runDir, 'resolv.conf'),
  };
}

function extraArgs(n: KubeadmNode): Array<{ name: string; value: string }> {
  const args = [{ name: 'node-ip', value: n.spec.gateway }];
  if (n.role === 'worker') {
    args.push({ name: 'root-dir', value: n.varLibKubelet }, { name: 'cert-dir', value: join(n.varLibKubelet, 'pki') });
  }
  return args;
}

/**
 * kube-apiserver's audit flags through kubeadm (ClusterConfiguration apiServer): the policy and the
 * log in `<run dir>/audit`, mounted into the static pod at the same path.
 */
function auditApiServer(runDir: string): Record<string, unknown> {
  const dir = kubeadmAuditDir(runDir);
  return {
    extraArgs: [
      { name: 'audit-policy-file', value: join(dir, 'policy.json') },
      { name: 'audit-log-path', value: kubeadmAuditLogPath(runDir) },
      { name: 'audit-log-format', value: 'json' },
      { name: 'audit-log-maxsize', value: '0' },
    ],
    extraVolumes: [{ name: 'ulysses-audit', hostPath: dir, mountPath: dir, readOnly: false, pathType: 'DirectoryOrCreate' }],
  };
}

export function initConfig(runDir: string, cp: KubeadmNode, bootstrapToken: string, coredns: boolean, auditNamespaces: readonly string[] = []): string {
  const docs: Array<Record<string, unknown>> = [
    {
      apiVersion: 'kubeadm.k8s.io/v1beta4',
      kind: 'InitConfiguration',
      bootstrapTokens: [{ token: bootstrapToken, ttl: '2h0m0s', groups: ['system:bootstrappers:kubeadm:default-node-token'], usages: ['signing', 'authentication'] }],
      localAPIEndpoint: { advertiseAddress: cp.spec.gateway, bindPort: 6443 },
      nodeRegistration: {
        name: cp.spec.name,
        criSocket: cri(cp),
        imagePullPolicy: 'IfNotPresent',
        kubeletExtraArgs: extraArgs(cp),
        // cgroup v1 is the only fatal preflight finding on these machines
        ignorePreflightErrors: ['SystemVerification'],
      },
      patches: { directory: kubeadmPatchesDir(cp) },
    },
    {
      apiVersion: 'kubeadm.k8s.io/v1beta4',
      kind: 'ClusterConfiguration',
      clusterName: 'ulysses-kubeadm',
      kubernetesVersion: K8S_VERSION,
      controlPlaneEndpoint: `${cp.spec.gateway}:6443`,
      networking: { serviceSubnet: SERVICE_SUBNET, podSubnet: POD_SUBNET, dnsDomain: 'cluster.local' },
      ...(coredns ? {} : { dns: { disabled: true } }),
      ...(auditNamespaces.length ? { apiServer: auditApiServer(runDir) } : {}),
    },
    kubeletConfiguration(runDir),
    {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      mode: 'iptables',
      // no conntrack sysctl writes (not permitted here), no route_localnet
      conntrack: { maxPerCore: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
      iptables: { localhostNodePorts: false },
    },
  ];
  return docs.map((d) => stringifyYaml(d)).join('---\n');
}

export function joinConfig(n: KubeadmNode, cp: KubeadmNode, bootstrapToken: string, caHash: string): string {
  return stringifyYaml({
    apiVersion: 'kubeadm.k8s.io/v1beta4',
    kind: 'JoinConfiguration',
    discovery: { bootstrapToken: { apiServerEndpoint: `${cp.spec.gateway}:6443`, token: bootstrapToken, caCertHashes: [caHash] } },
    nodeRegistration: {
      name: n.spec.name,
      criSocket: cri(n),
      imagePullPolicy: 'IfNotPresent',
      kubeletExtraArgs: extraArgs(n),
      // the control plane's kubelet holds 10250 and its CA file on this shared host
      ignorePreflightErrors: ['SystemVerification', 'Port-10250', 'FileAvailable--etc-kubernetes-pki-ca.crt'],
    },
    patches: { directory: kubeadmPatchesDir(n) },
  });
}

/** Bind mounts a kubeadm run of node `n` sees: hosts and resolv.conf of the testbed, the node's own dirs. */
function bindsFor(runDir: string, n: KubeadmNode | undefined): Array<[string, string]> {
  const binds: Array<[string, string]> = [
    [join(runDir, 'hosts'), '/etc/hosts'],
    [join(runDir, 'resolv.conf'), '/etc/resolv.conf'],
  ];
  if (n?.role === 'worker') binds.push([n.etcKubernetes, HOST_ETC_KUBERNETES], [n.varLibKubelet, HOST_VAR_LIB_KUBELET]);
  return binds;
}

/**
 * The words that run a command in a private mount namespace with `binds` ([host path, path seen
 * there]) mounted; the command's words follow. A missing source or target directory is created.
 */
function inMountNamespace(binds: Array<[string, string]>): string[] {
  const script = 'set -e; while [ "$1" != "--" ]; do [ -e "$1" ] || mkdir -p "$1"; [ -e "$2" ] || mkdir -p "$2"; mount --bind "$1" "$2"; shift 2; done; shift; exec "$@"';
  return ['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', script, 'sh', ...binds.flat(), '--'];
}

/** The testbed's node `name`. */
function nodeNamed(state: KubeadmState, name: string): KubeadmNode {
  const n = state.nodes.find((x) => x.spec.name === name);
  if (!n) throw new Error(`no node ${name} in the kubeadm testbed`);
  return n;
}

/** The nodes as the installer sees them. */
const installNodes = (state: KubeadmState) => state.nodes.map((n) => ({ name: n.spec.name, controlPlane: n.role === 'control-plane' }));

/**
 * Where a node's own directories lie on this machine: [the path the node sees, the host directory]
 * (the control plane's /etc/kubernetes and /var/lib/kubelet are the host's).
 */
function nodeDirs(n: KubeadmNode): Array<[string, string]> {
  return [
    [HOST_ETC_KUBERNETES, n.etcKubernetes],
    [HOST_VAR_LIB_KUBELET, n.varLibKubelet],
    ['/etc/ulysses', join(n.spec.dir, 'etc-ulysses')],
    ['/etc/systemd/system', join(n.spec.dir, 'etc-systemd-system')],
  ];
}

/** Runs kubeadm in a private mount namespace with `binds`; returns its exit code. */
function spawnKubeadm(args: string[], binds: Array<[string, string]>, logFile: string) {
  const [cmd, ...prefix] = inMountNamespace(binds);
  const fd = openSync(logFile, 'a');
  const child = spawn(cmd!, [...prefix, binaryPath('kubeadm'), ...args], {
    stdio: ['ignore', fd, fd],
    // kubeadm's preflight runs `kubelet --version` from PATH
    env: { ...process.env, PATH: `${binDir()}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` },
  });
  closeSync(fd);
  const exited = new Promise<number>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1))));
  return { child, exited };
}

/**
 * Runs one kubeadm command to its end while `tick` runs every 200 ms (it starts the kubelet once
 * kubeadm has written its files) and the node's processes are watched: a dead containerd or
 * kubelet, or a timeout, ends the run at once with the log tails.
 */
async function runKubeadm(
  what: string,
  args: string[],
  binds: Array<[string, string]>,
  logFile: string,
  watch: () => TrackedProcess[],
  tick: () => Promise<void> | void,
  timeoutMs: number,
): Promise<void> {
  const { child, exited } = spawnKubeadm(args, binds, logFile);
  let code: number | undefined;
  void exited.then((c) => (code = c));
  const deadline = Date.now() + timeoutMs;
  const kill = () => {
    try {
      child.kill('SIGKILL');
    } catch {
      /* gone */
    }
  };
  for (;;) {
    if (code !== undefined) break;
    const dead = watch().filter((p) => !isAlive(p.pid));
    if (dead.length) {
      kill();
      throw new Error(`${dead.map((p) => `${p.name} exited:\n${tailFile(p.logFile, 15)}`).join('\n')}\n--- ${what} log:\n${tailFile(logFile, 15)}`);
    }
    if (Date.now() > deadline) {
      kill();
      throw new Error(`${what} did not finish within ${timeoutMs / 1000} s:\n${tailFile(logFile, 20)}\n${watch().map((p) => `--- ${p.name}:\n${tailFile(p.logFile, 10)}`).join('\n')}`);
    }
    try {
      await tick();
    } catch (err) {
      kill();
      throw err;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  if (code !== 0) throw new Error(`${what} exited with ${code}:\n${tailFile(logFile, 25)}`);
}

/** The kubelet command line kubeadm's systemd drop-in would run, from the files kubeadm wrote. */
function kubeletArgs(n: KubeadmNode): string[] | undefined {
  const cfg = join(n.varLibKubelet, 'config.yaml');
  const flags = join(n.varLibKubelet, 'kubeadm-flags.env');
  const kc = join(n.etcKubernetes, 'kubelet.conf');
  const bkc = join(n.etcKubernetes, 'bootstrap-kubelet.conf');
  if (!existsSync(cfg) || !existsSync(flags) || !(existsSync(kc) || existsSync(bkc))) return undefined;
  if (!readFileSync(cfg, 'utf8').includes('kind: KubeletConfiguration')) return undefined;
  const env = readFileSync(flags, 'utf8');
  if (!/KUBELET_KUBEADM_ARGS="[^"]*"/.test(env)) return undefined;
  return [`--config=${cfg}`, `--kubeconfig=${kc}`, `--bootstrap-kubeconfig=${bkc}`, ...parseKubeadmFlags(env)];
}

function startKubelet(n: KubeadmNode, args: string[]): TrackedProcess {
  return startProcess({ name: `kubelet/${n.spec.name}`, cmd: binaryPath('kubelet'), args, logFile: join(n.spec.dir, 'kubelet.log') });
}

function readSysctl(path: string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
}

const IP_FORWARD = '/proc/sys/net/ipv4/ip_forward';
const ROUTE_LOCALNET = '/proc/sys/net/ipv4/conf/all/route_localnet';
/** Host paths the pods' hostPath volumes or kubeadm create when missing; `down` removes the ones `up` created. */
const HOST_PATHS_CREATED = ['/usr/lib/modules', '/run/xtables.lock', HOST_ETC_KUBERNETES, HOST_VAR_LIB_KUBELET, HOST_VAR_LIB_ETCD, '/etc/ulysses'];


const podRunning = (p: V1Pod) => p.status?.phase === 'Running' && (p.status.containerStatuses ?? []).every((c) => c.ready);

export function kubeConfigForKubeadm(state: KubeadmState): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(state.kubeconfig);
  return kc;
}

/** Brings the kubeadm cluster up; a healthy one already up is returned as is. */
export async function up(opts: KubeadmUpOptions = {}): Promise<KubeadmState> {
  const log = opts.log ?? progressLog;
  const runDir = opts.runDir ?? defaultKubeadmRunDir();
  const existing = readKubeadmState(runDir);
  if (existing) {
    const problems = statusProblems(existing);
    if (existing.ready && problems.length === 0) {
      log(`kubeadm testbed already up in ${runDir} (${existing.nodes.length} nodes)`);
      return existing;
    }
    log(`found a stale or broken kubeadm testbed in ${runDir} (${problems.join('; ') || 'not ready'}): tearing it down first`);
    await down({ runDir, log });
  }
  const workers = opts.workers ?? 2;
  if (!Number.isInteger(workers) || workers < 0 || workers > 20) throw new Error(`--workers must be an integer from 0 to 20, got ${workers}`);
  const t0 = Date.now();
  const timings: Record<string, number> = {};
  const nodes = Array.from({ length: workers + 1 }, (_, i) => kubeadmNode(runDir, i));
  const cp = nodes[0]!;

  await step('prerequisites', timings, log, async () => {
    const needed = ['kubeadm', 'kubelet', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kube-proxy', 'etcd', 'containerd', 'containerd-shim-runc-v2', 'ctr'] as const;
    const toBuild = needed.some((b) => !existsSync(binaryPath(b)));
    ensurePrerequisites([...KUBEADM_PREREQUISITES, ...(toBuild ? BUILD_PREREQUISITES : [])], { log });
    const leftovers = [join(HOST_ETC_KUBERNETES, 'manifests'), join(HOST_ETC_KUBERNETES, 'admin.conf'), join(HOST_VAR_LIB_ETCD, 'member')].filter((p) => existsSync(p));
    if (leftovers.length) throw new Error(foreignKubeadmClusterMessage(leftovers, otherKubeadmRunDirs(runDir)));
    if (toBuild) await ensureBinaries(log);
  });
  const coredns = existsSync(binaryPath('coredns'));
  const images = await step('images', timings, log, () => buildKubeadmImages(log, coredns ? [] : ['coredns']));
  // the testbed's workload images (udp-echo, http-server), for tests and demos on this cluster
  const testImages = await buildTestImages(cacheDir(), () => undefined);

  const host = { ipForward: readSysctl(IP_FORWARD), routeLocalnet: readSysctl(ROUTE_LOCALNET), created: HOST_PATHS_CREATED.filter((p) => !existsSync(p)) };
  await mkdir(join(runDir, 'logs'), { recursive: true });
  const state: KubeadmState = {
    kind: 'kubeadm',
    version: K8S_VERSION,
    runDir,
    kubeconfig: join(runDir, 'admin.kubeconfig'),
    apiserver: `https://${cp.spec.gateway}:6443`,
    nodes,
    processes: [],
    coredns,
    ...(opts.auditNamespaces?.length ? { auditNamespaces: opts.auditNamespaces } : {}),
    host,
    timingsMs: timings,
    startedAt: new Date().toISOString(),
    ready: false,
  };
  saveState(state);
  const track = processTracker(state, saveState);
  const proc = (name: string) => state.processes.find((p) => p.name === name);

  try {
    // what kubeadm and the kubelets resolve: the node names, nothing else (no DNS server answers there)
    const hostsFile = ['127.0.0.1 localhost', ...nodes.map((n) => `${n.spec.gateway} ${n.spec.name}`)].join('\n') + '\n';
    writeFileSync(join(runDir, 'hosts'), hostsFile);
    writeFileSync(join(runDir, 'resolv.conf'), `nameserver ${cp.spec.gateway}\n`);
    const bootstrapToken = token();
    for (const n of nodes) {
      mkdirSync(kubeadmPatchesDir(n), { recursive: true });
      writeFileSync(join(kubeadmPatchesDir(n), 'kubeletconfiguration+merge.yaml'), stringifyYaml(kubeletPatch(n)));
      if (n.role === 'worker') for (const d of [n.etcKubernetes, n.varLibKubelet]) mkdirSync(d, { recursive: true });
    }
    if (opts.auditNamespaces?.length) {
      mkdirSync(kubeadmAuditDir(runDir), { recursive: true });
      writeFileSync(join(kubeadmAuditDir(runDir), 'policy.json'), auditPolicy(opts.auditNamespaces));
    }
    writeFileSync(join(runDir, 'kubeadm-init.yaml'), initConfig(runDir, cp, bootstrapToken, coredns, opts.auditNamespaces));

    await step('containerd', timings, log, async () => {
      await Promise.all(
        nodes.map(async (n) => {
          await mkdir(n.spec.dir, { recursive: true });
          createCgroupRoot(n.spec);
          await createBridge(n.spec);
          const pause = images.find((i) => i.component === 'pause')!.name;
          track(await startContainerd(n.spec, undefined, pause));
          // the service CIDR routes to the control plane's bridge: a ClusterIP kube-proxy has not
          // programmed (yet) goes nowhere instead of to the host's default gateway (gone with the bridge)
          if (n.role === 'control-plane') await run('ip', ['route', 'replace', SERVICE_SUBNET, 'dev', n.spec.bridge, 'src', n.spec.gateway]);
          // the control plane runs every image; workers only what runs on every node or anywhere
          await importImages(n.spec.socket, (n.role === 'control-plane' ? images : images.filter((i) => ['pause', 'kube-proxy', 'coredns'].includes(i.component))).map((i) => i.tar));
          await importImages(n.spec.socket, testImages.map((i) => i.tar));
        }),
      );
    });

    await step('kubeadm init', timings, log, async () => {
      await runKubeadm(
        'kubeadm init',
        ['init', '--config', join(runDir, 'kubeadm-init.yaml'), '--v=1'],
        bindsFor(runDir, undefined),
        join(runDir, 'logs', 'kubeadm-init.log'),
        () => state.processes.filter((p) => p.name.endsWith(`/${cp.spec.name}`)),
        () => {
          if (proc(`kubelet/${cp.spec.name}`)) return;
          const args = kubeletArgs(cp);
          if (args) track(startKubelet(cp, args));
        },
        5 * 60_000,
      );
      if (!proc(`kubelet/${cp.spec.name}`)) throw new Error(`kubeadm init finished but never wrote the kubelet's files:\n${tailFile(join(runDir, 'logs', 'kubeadm-init.log'))}`);
    });
    copyFileSync(join(HOST_ETC_KUBERNETES, 'admin.conf'), state.kubeconfig);

    await step('kubelet restart', timings, log, async () => {
      const old = proc(`kubelet/${cp.spec.name}`)!;
      await stopProcess(old.pid, 5000);
      state.processes = state.processes.filter((p) => p !== old);
      track(startKubelet(cp, old.args));
    });

    const caHash = caCertHash(readFileSync(join(HOST_ETC_KUBERNETES, 'pki', 'ca.crt'), 'utf8'));
    const workerNodes = nodes.filter((n) => n.role === 'worker');
    await step('kubeadm join', timings, log, async () => {
      await Promise.all(
        workerNodes.map(async (n) => {
          const cfg = join(n.spec.dir, 'kubeadm-join.yaml');
          writeFileSync(cfg, joinConfig(n, cp, bootstrapToken, caHash));
          try {
            await runKubeadm(
              `kubeadm join (${n.spec.name})`,
              ['join', '--config', cfg, '--v=1'],
              bindsFor(runDir, n),
              join(runDir, 'logs', `kubeadm-join-${n.spec.name}.log`),
              () => state.processes.filter((p) => p.name.endsWith(`/${n.spec.name}`)),
              () => {
                if (proc(`kubelet/${n.spec.name}`)) return;
                const args = kubeletArgs(n);
                if (args) track(startKubelet(n, args));
              },
              4 * 60_000,
            );
          } catch (err) {
            throw new StepError(`kubeadm join ${n.spec.name}`, (err as Error).message);
          }
        }),
      );
    });

    await step('cluster ready', timings, log, async () => {
      const kc = kubeConfigForKubeadm(state);
      const core = kc.makeApiClient(CoreV1Api);
      const apps = kc.makeApiClient(AppsV1Api);
      const names = nodes.map((n) => n.spec.name);
      let last = '';
      await pollUntil(
        'nodes Ready, static control plane, kube-proxy on every node' + (coredns ? ', CoreDNS' : ''),
        async () => {
          const dead = state.processes.filter((p) => !isAlive(p.pid));
          if (dead.length) throw new FatalError(dead.map((p) => `${p.name} exited:\n${tailFile(p.logFile, 15)}`).join('\n'));
          const ready = new Set((await core.listNode()).items.filter(isNodeReady).map((n) => n.metadata!.name!));
          const pods = (await core.listNamespacedPod({ namespace: 'kube-system' })).items;
          const missing: string[] = names.filter((n) => !ready.has(n)).map((n) => `node ${n}`);
          for (const c of ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler']) {
            const p = pods.find((x) => x.metadata?.name === `${c}-${cp.spec.name}`);
            if (!p || !podRunning(p)) missing.push(c);
          }
          const proxies = pods.filter((p) => p.metadata?.labels?.['k8s-app'] === 'kube-proxy' && podRunning(p)).map((p) => p.spec?.nodeName);
          for (const n of names) if (!proxies.includes(n)) missing.push(`kube-proxy on ${n}`);
          if (coredns) {
            const d = await apps.readNamespacedDeployment({ name: 'coredns', namespace: 'kube-system' });
            if ((d.status?.availableReplicas ?? 0) < (d.spec?.replicas ?? 1)) missing.push('coredns');
          }
          last = missing.join(', ');
          return missing.length === 0;
        },
        { timeoutMs: 180_000, intervalMs: 500, explain: () => `not yet: ${last}\n${nodes.map((n) => `--- kubelet ${n.spec.name}:\n${tailFile(join(n.spec.dir, 'kubelet.log'), 8)}`).join('\n')}` },
      );
    });
    state.ready = true;
    timings.total = Date.now() - t0;
    saveState(state);
    recordClusterStart('kubeadm', runDir, timings.total);
    log(`kubeadm testbed up in ${(timings.total / 1000).toFixed(1)} s (${nodes.length} nodes): kubeconfig ${state.kubeconfig}`);
    return state;
  } catch (err) {
    log(`kubeadm testbed up failed: ${(err as Error).message}`);
    log(`logs kept in ${join(runDir, 'logs')}; tearing down what was started`);
    await down({ runDir, log });
    throw err;
  }
}

/**
 * The installer's access to this cluster's nodes (manifests/install.ts): what the node's root
 * user and systemd do on a production node, done here for nodes that share this machine.
 * - Paths: /etc/kubernetes and /var/lib/kubelet are the node's directories (the host's for the
 *   control plane), /etc/ulysses is `<node dir>/etc-ulysses`.
 * - kubeadm runs in the node's mount namespace as in `up`.
 * - The kubelet restart is the tracked process stopped and started with the same flags (systemd's
 *   `restart`); the kubelet-shim node service is a tracked process running what
 *   manifests/systemd/ulysses-kubelet-shim.service runs (`manifests/entrypoint.sh kubelet-shim --config ...`).
 * - Sockets differ per node (nodes share /run): containerd's and the shim's are in the node's directory.
 */
/** Where a node's kubelet-shim unit keeps its supervisor's files (unit-supervisor.ts: main.pid, notify.sock, supervisor.log). */
export const shimUnitDir = (n: { spec: { dir: string } }) => join(n.spec.dir, 'kubelet-shim-unit');

/** The pid of a node's kubelet-shim process (the unit's MainPID), read from its supervisor. */
export function shimMainPid(state: KubeadmState, name: string): number {
  const file = join(shimUnitDir(nodeNamed(state, name)), 'main.pid');
  const pid = existsSync(file) ? Number(readFileSync(file, 'utf8').trim()) : NaN;
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no kubelet-shim main pid on ${name} (${file})`);
  return pid;
}

export interface KubeadmNodeAccess extends NodeAccess {
  startFallbackGuard(node: string): Promise<void>;
  stopFallbackGuard(node: string): Promise<void>;
}

/**
 * Changes the tracked processes of the testbed in `state.runDir` on disk (read, changed, written
 * back), the in-memory `state` following: node accesses made from different copies of the state (a
 * test's, the node shell's `systemctl`) never write back each other's stale list, which left a
 * process untracked (an orphan kubelet after `down`).
 */
export function changeTrackedProcesses(state: KubeadmState, change: (processes: TrackedProcess[]) => TrackedProcess[]): void {
  const disk = readKubeadmState(state.runDir) ?? state;
  disk.processes = change(disk.processes);
  saveState(disk);
  state.processes = disk.processes;
}

export function kubeadmNodeAccess(state: KubeadmState, log: (line: string) => void = () => undefined): KubeadmNodeAccess {
  const node = (name: string) => nodeNamed(state, name);
  const track = (p: TrackedProcess) => {
    changeTrackedProcesses(state, (ps) => [...ps, p]);
    return p;
  };
  const hostPath = (name: string, nodePath: string) => {
    const roots = nodeDirs(node(name));
    for (const [root, local] of roots) if (nodePath === root || nodePath.startsWith(`${root}/`)) return local + nodePath.slice(root.length);
    throw new Error(`${nodePath} on ${name}: not a path the kubeadm testbed maps (${roots.map((r) => r[0]).join(', ')})`);
  };
  const untrack = async (name: string) => {
    const p = (readKubeadmState(state.runDir) ?? state).processes.find((x) => x.name === name);
    if (!p) return undefined;
    await stopProcess(p.pid, 10_000);
    changeTrackedProcesses(state, (ps) => ps.filter((x) => !(x.name === p.name && x.pid === p.pid)));
    return p;
  };
  const access: KubeadmNodeAccess = {
    nodes: () => installNodes(state),
    async readFile(name, nodePath) {
      const p = hostPath(name, nodePath);
      return existsSync(p) ? readFileSync(p, 'utf8') : undefined;
    },
    async writeFile(name, nodePath, content, mode) {
      // whole or not at all, as the node shell writes (a kubelet watching a manifest directory never
      // reads half a file; a hidden name it ignores)
      const p = hostPath(name, nodePath);
      const tmp = join(dirname(p), `.${basename(p)}.ulysses-tmp`);
      mkdirSync(dirname(p), { recursive: true });
      writeFileSync(tmp, content, { mode });
      chmodSync(tmp, mode);
      renameSync(tmp, p);
    },
    async remove(name, nodePath) {
      rmSync(hostPath(name, nodePath), { recursive: true, force: true });
    },
    async kubeadm(name, args) {
      const logFile = join(state.runDir, 'logs', `kubeadm-${args.slice(0, 4).join('-')}-${name}.log`);
      const { exited } = spawnKubeadm([...args, '--v=1'], bindsFor(state.runDir, node(name)), logFile);
      const code = await exited;
      if (code !== 0) throw new Error(`kubeadm ${args.join(' ')} on ${name} exited with ${code}:\n${tailFile(logFile, 20)}`);
    },
    async restartKubelet(name) {
      const old = await untrack(`kubelet/${name}`);
      if (!old) throw new Error(`no kubelet of ${name} is tracked`);
      track(startKubelet(node(name), old.args));
      log(`kubelet on ${name} restarted`);
    },
    async startKubeletShim(name) {
      const n = node(name);
      await untrack(`kubelet-shim/${name}`);
      rmSync(n.spec.shimSocket, { force: true });
      mkdirSync(shimUnitDir(n), { recursive: true });
      // under the unit's own supervision settings (Type=notify, WatchdogSec, Restart=always): unit-supervisor.ts
      const p = track(
        startProcess({
          name: `kubelet-shim/${name}`,
          cmd: join(REPO_ROOT, 'node_modules', '.bin', 'tsx'),
          args: [
            join(REPO_ROOT, 'experiments', 'testbed', 'unit-supervisor.ts'),
            '--unit', join(REPO_ROOT, 'manifests', 'systemd', 'ulysses-kubelet-shim.service'),
            '--dir', shimUnitDir(n),
            '--', join(REPO_ROOT, 'manifests', 'entrypoint.sh'), 'kubelet-shim', '--config', hostPath(name, NODE_PATHS.shimConfig),
          ],
          env: { NODE_NAME: name, KUBECONFIG: hostPath(name, NODE_PATHS.shimKubeconfig) },
          logFile: join(n.spec.dir, 'kubelet-shim.log'),
        }),
      );
      await pollUntil(`kubelet-shim on ${name} listening on ${n.spec.shimSocket}`, () => {
        if (!isAlive(p.pid)) throw new FatalError(`kubelet-shim on ${name} exited:\n${tailFile(p.logFile, 15)}`);
        return existsSync(n.spec.shimSocket);
      }, { timeoutMs: 60_000, intervalMs: 200, explain: () => tailFile(p.logFile, 10) });
      await access.startFallbackGuard(name);
    },
    async stopKubeletShim(name) {
      await access.stopFallbackGuard(name);
      await untrack(`kubelet-shim/${name}`);
      rmSync(node(name).spec.shimSocket, { force: true });
    },
    /** ulysses-kubelet-shim-fallback.service: kubelet-shim/fallback.ts on the shim's config, `systemctl` the testbed's. */
    async startFallbackGuard(name) {
      const n = node(name);
      await untrack(`kubelet-shim-fallback/${name}`);
      track(
        startProcess({
          name: `kubelet-shim-fallback/${name}`,
          cmd: join(REPO_ROOT, 'manifests', 'entrypoint.sh'),
          args: ['kubelet-shim-fallback', '--config', hostPath(name, NODE_PATHS.shimConfig)],
          env: {
            PATH: `${join(REPO_ROOT, 'experiments', 'testbed', 'node-bin')}:${process.env.PATH ?? '/usr/bin:/bin'}`,
            ULYSSES_REPO: REPO_ROOT, ULYSSES_TESTBED_RUN_DIR: state.runDir, ULYSSES_TESTBED_NODE: name, ULYSSES_TESTBED_HOST_MNT: '/proc/self/ns/mnt',
          },
          logFile: join(n.spec.dir, 'kubelet-shim-fallback.log'),
        }),
      );
    },
    async stopFallbackGuard(name) {
      await untrack(`kubelet-shim-fallback/${name}`);
    },
    containerdSocket: (name) => node(name).spec.socket,
    shimSocket: (name) => node(name).spec.shimSocket,
    shimMetricsPort: (name) => node(name).spec.shimMetricsPort,
  };
  return access;
}

/**
 * What `ssh root@<node>` is on a real node, for the nodes of this testbed (manifests/node-shell.ts):
 * the words that run a script "on" a node. The script runs in a mount namespace of its own where
 * /etc/kubernetes, /var/lib/kubelet, /etc/ulysses and /etc/systemd/system are the node's
 * directories (the paths {@link kubeadmNodeAccess} maps), with the testbed's kubeadm on PATH and a
 * `systemctl` (experiments/testbed/node-bin/systemctl) that does to the node's tracked processes what
 * systemd does to the units: `restart kubelet`, `enable|disable --now ulysses-kubelet-shim`,
 * `kill --signal=SIG kubelet`, `daemon-reload`. It acts from this process' mount namespace, where the
 * testbed's processes run.
 */
export function kubeadmNodeShell(state: KubeadmState): (node: string) => string[] {
  return (name) => {
    const n = nodeNamed(state, name);
    // /etc/hosts and /etc/resolv.conf as kubeadm sees them, and the node's own directories
    const binds: Array<[string, string]> = [...bindsFor(state.runDir, undefined), ...nodeDirs(n).filter(([seen, host]) => seen !== host).map(([seen, host]): [string, string] => [host, seen])];
    return [
      ...inMountNamespace(binds),
      'env', `PATH=${join(REPO_ROOT, 'experiments', 'testbed', 'node-bin')}:${binDir()}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      `ULYSSES_REPO=${REPO_ROOT}`, `ULYSSES_TESTBED_RUN_DIR=${state.runDir}`, `ULYSSES_TESTBED_NODE=${name}`, `ULYSSES_TESTBED_HOST_MNT=/proc/${process.pid}/ns/mnt`,
      'sh', '-c',
    ];
  };
}

/** The installer's shell access to this testbed's nodes: {@link kubeadmNodeShell} with the nodes' own sockets, port and shim program. */
export function kubeadmShellAccess(state: KubeadmState): ShellNodeAccess {
  const spec = (name: string) => nodeNamed(state, name).spec;
  return new ShellNodeAccess({
    shell: kubeadmNodeShell(state),
    nodes: installNodes(state),
    containerdSocket: (n) => spec(n).socket,
    shimSocket: (n) => spec(n).shimSocket,
    shimMetricsPort: (n) => spec(n).shimMetricsPort,
    shimProgram: join(REPO_ROOT, 'manifests', 'entrypoint.sh'),
  });
}

/** Processes of a cluster that claims to be up that are no longer running. */
export function statusProblems(state: KubeadmState): string[] {
  return state.processes.filter((p) => !isAlive(p.pid)).map((p) => `${p.name} (pid ${p.pid}) is not running; last log lines:\n${tailFile(p.logFile, 10)}`);
}

/** Removes every KUBE-* chain (kube-proxy's, the kubelet's) and the jumps to them, IPv4 and IPv6. */
export async function removeKubeIptables(): Promise<void> {
  for (const family of ['iptables', 'ip6tables']) {
    let saved: string;
    try {
      saved = (await run(`${family}-save`, [], { maxBuffer: 64 << 20 })).stdout;
    } catch {
      continue;
    }
    const input: string[] = [];
    let table = '';
    let body: string[] = [];
    const chains: string[] = [];
    const flush = () => {
      if (table && (body.length || chains.length)) input.push(`*${table}`, ...body, ...chains.map((c) => `-F ${c}`), ...chains.map((c) => `-X ${c}`), 'COMMIT');
      body = [];
      chains.length = 0;
    };
    for (const line of saved.split('\n')) {
      if (line.startsWith('*')) {
        flush();
        table = line.slice(1).trim();
      } else if (line.startsWith(':KUBE-')) chains.push(line.slice(1).split(' ')[0]!);
      else if (line.startsWith('-A ') && !line.startsWith('-A KUBE-') && / -j KUBE-/.test(line)) body.push(`-D ${line.slice(3)}`);
    }
    flush();
    if (!input.length) continue;
    await new Promise<void>((resolve, reject) => {
      const child = spawn(`${family}-restore`, ['--noflush'], { stdio: ['pipe', 'ignore', 'pipe'] });
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${family}-restore: ${err.trim()}`))));
      child.stdin.end(input.join('\n') + '\n');
    });
  }
}

/** KUBE-* chains still present (iptables-save), for the leak check. */
export function kubeIptablesChains(): string[] {
  const out: string[] = [];
  for (const family of ['iptables', 'ip6tables']) {
    try {
      const saved = execFileSync(`${family}-save`, { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'ignore'] });
      for (const line of saved.split('\n')) if (line.startsWith(':KUBE-')) out.push(`${family} ${line.slice(1).split(' ')[0]}`);
    } catch {
      /* family not available */
    }
  }
  return out;
}

/** Stops the kubelets, `kubeadm reset -f` per node, then removes everything else `up` left. */
export async function down(opts: { runDir?: string; log?: (line: string) => void } = {}): Promise<void> {
  const log = opts.log ?? progressLog;
  const runDir = opts.runDir ?? defaultKubeadmRunDir();
  const state = readKubeadmState(runDir);
  if (!state) {
    log(`no kubeadm testbed in ${runDir}`);
    return;
  }
  const t0 = Date.now();
  const byName = (prefix: string) => state.processes.filter((p) => p.name.startsWith(prefix));
  for (const p of byName('kubelet/')) await stopProcess(p.pid, 5000);
  // the pods' volume mounts of the host's mount namespace: kubeadm reset runs in a private one
  for (const n of state.nodes) await unmountUnder(n.varLibKubelet);
  // workers first (their reset reads the cluster's kubeadm-config), then the control plane
  const resets = async (nodes: KubeadmNode[]) =>
    Promise.all(
      nodes.map(async (n) => {
        if (!existsSync(n.spec.socket) || !existsSync(binaryPath('kubeadm'))) return;
        if (n.role === 'worker' && !existsSync(n.etcKubernetes)) return;
        const logFile = join(runDir, 'logs', `kubeadm-reset-${n.spec.name}.log`);
        const { exited } = spawnKubeadm(['reset', '-f', '--cri-socket', cri(n)], bindsFor(runDir, n), logFile);
        let timer: NodeJS.Timeout | undefined;
        const code = await Promise.race([exited, new Promise<number>((r) => (timer = setTimeout(() => r(-1), 120_000)))]);
        clearTimeout(timer);
        if (code !== 0) log(`kubeadm reset on ${n.spec.name} exited with ${code} (continuing the cleanup):\n${tailFile(logFile, 8)}`);
      }),
    );
  await resets(state.nodes.filter((n) => n.role === 'worker'));
  await resets(state.nodes.filter((n) => n.role === 'control-plane'));
  for (const n of state.nodes) {
    await destroyCgroupRoot(n.spec.cgroupRoot);
    for (const pid of pidsMatching(n.spec.socket)) await stopProcess(pid, 1000); // containerd-shim-runc-v2 -address <socket>
  }
  for (const p of byName('containerd/')) await stopProcess(p.pid, 5000);
  for (const pid of pidsMatching(runDir)) await stopProcess(pid, 1000);
  for (const n of state.nodes) {
    await destroyCgroupRoot(n.spec.cgroupRoot);
    await unmountUnder(n.spec.dir);
    await deleteBridge(n.spec.bridge);
  }
  await unmountUnder(HOST_VAR_LIB_KUBELET);
  try {
    await removeKubeIptables();
  } catch (err) {
    log(`removing KUBE-* iptables chains: ${(err as Error).message}`);
  }
  // what kubeadm reset leaves by design (the directories themselves), and host paths up created
  for (const p of [HOST_ETC_KUBERNETES, HOST_VAR_LIB_KUBELET, HOST_VAR_LIB_ETCD]) await rm(p, { recursive: true, force: true });
  for (const p of state.host.created) {
    try {
      if (!existsSync(p)) continue;
      if (statSync(p).isDirectory()) rmdirSync(p); // only when empty: anything inside is someone else's
      else unlinkSync(p);
    } catch {
      /* not empty */
    }
  }
  removeDanglingContainerLogLinks(runDir);
  if (state.host.routeLocalnet && readSysctl(ROUTE_LOCALNET) !== state.host.routeLocalnet) writeFileSync(ROUTE_LOCALNET, state.host.routeLocalnet);
  if (state.host.ipForward && readSysctl(IP_FORWARD) !== state.host.ipForward) writeFileSync(IP_FORWARD, state.host.ipForward);
  // keep the logs: node logs are moved next to kubeadm's
  for (const n of state.nodes) {
    for (const f of ['kubelet.log', 'containerd.log']) {
      const src = join(n.spec.dir, f);
      if (existsSync(src)) writeFileSync(join(runDir, 'logs', `${n.spec.name}-${f}`), readFileSync(src));
    }
  }
  for (const entry of existsSync(runDir) ? readdirSync(runDir) : []) if (entry !== 'logs') await rm(join(runDir, entry), { recursive: true, force: true });
  log(`kubeadm testbed down in ${((Date.now() - t0) / 1000).toFixed(1)} s (logs kept in ${join(runDir, 'logs')})`);
}

/** The kubelets link every container log into /var/log/containers; drop links into the run dir. */
function removeDanglingContainerLogLinks(runDir: string): void {
  const dir = '/var/log/containers';
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir)) {
    try {
      const target = readlinkSync(join(dir, e));
      if (target.startsWith(runDir) || !existsSync(join(dir, e))) rmSync(join(dir, e), { force: true });
    } catch {
      /* not a link */
    }
  }
}

/** What a clean `down` must leave: no process, mount, interface, cgroup, KUBE-* chain or kubeadm file. */
export function leftovers(runDir = defaultKubeadmRunDir(), state?: KubeadmState): string[] {
  const out: string[] = [];
  for (const pid of pidsMatching(runDir)) out.push(`process ${pid} still refers to ${runDir}`);
  for (const needle of ['/etc/kubernetes/', '/var/lib/kube-proxy/', '/etc/coredns/Corefile']) for (const pid of pidsMatching(needle)) out.push(`process ${pid} still refers to ${needle}`);
  for (const p of state?.processes ?? []) if (isAlive(p.pid)) out.push(`${p.name} (pid ${p.pid}) still running`);
  for (const m of [...mountsUnder(runDir), ...mountsUnder(HOST_VAR_LIB_KUBELET)]) out.push(`mount ${m}`);
  for (const p of [HOST_ETC_KUBERNETES, HOST_VAR_LIB_KUBELET, HOST_VAR_LIB_ETCD]) if (existsSync(p)) out.push(`path ${p}`);
  for (const i of existsSync('/sys/class/net') ? readdirSync('/sys/class/net') : []) if (i.startsWith(BRIDGE_PREFIX)) out.push(`interface ${i}`);
  for (const n of state?.nodes ?? []) if (existsSync(join('/sys/fs/cgroup/pids', n.spec.cgroupRoot))) out.push(`cgroup ${n.spec.cgroupRoot}`);
  for (const c of kubeIptablesChains()) out.push(`iptables chain ${c}`);
  return out;
}
