/**
 * A real worker node on this host: its own containerd 2 instance (Debian's runc and CNI plugins), a
 * CNI bridge with a per-node pod subnet (the host is the gateway, so it reaches every pod IP), a
 * cgroup v1 root of its own, and a real kubelet with its own root dir, ports and node name.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmdirSync, writeFileSync, mkdirSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { parse as parseYaml, parseDocument, stringify as stringifyYaml } from 'yaml';
import { binaryPath, binDir } from './binaries.ts';
import { FatalError, isAlive, pidsMatching, pollUntil, startProcess, stopProcess, tailFile, type TrackedProcess } from './processes.ts';

const run = promisify(execFile);

export const CGROUP_V1_ROOT = '/sys/fs/cgroup';
export const POD_NETWORK = '10.244.0.0/16';

export interface RealNodeSpec {
  index: number; // 1-based
  name: string;
  dir: string;
  podSubnet: string; // 10.244.<index>.0/24
  gateway: string; // 10.244.<index>.1, also the node's InternalIP
  bridge: string;
  kubeletPort: number;
  kubeletHealthzPort: number;
  cgroupRoot: string; // "/<name>"
  socket: string;
  /** the kubelet-shim's socket, when the node runs one between kubelet and containerd */
  shimSocket: string;
  shimMetricsPort: number;
}

export function realNodeSpec(runDir: string, index: number): RealNodeSpec {
  const name = `real-${index}`;
  const dir = join(runDir, 'nodes', name);
  return {
    index,
    name,
    dir,
    podSubnet: `10.244.${index}.0/24`,
    gateway: `10.244.${index}.1`,
    bridge: `uly-br${index}`,
    kubeletPort: 21250 + index * 10,
    kubeletHealthzPort: 21251 + index * 10,
    cgroupRoot: `/ulysses-${name}`,
    socket: join(dir, 'containerd', 'containerd.sock'),
    shimSocket: join(dir, 'kubelet-shim.sock'),
    shimMetricsPort: 21252 + index * 10,
  };
}

async function sh(cmd: string, args: string[]): Promise<string> {
  try {
    return (await run(cmd, args)).stdout;
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(' ')}: ${e.stderr?.trim() || e.message}`);
  }
}

function cgroupControllers(): string[] {
  return readdirSync(CGROUP_V1_ROOT).filter((c) => c !== 'unified' && existsSync(join(CGROUP_V1_ROOT, c, 'cgroup.procs')));
}

/** The node's cgroup root in every v1 hierarchy (kubelet refuses a cgroupRoot that does not exist). */
export function createCgroupRoot(spec: RealNodeSpec): void {
  for (const c of cgroupControllers()) {
    const dir = join(CGROUP_V1_ROOT, c, spec.cgroupRoot);
    mkdirSync(dir, { recursive: true });
    if (c === 'cpuset') {
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        const v = readFileSync(join(CGROUP_V1_ROOT, c, f), 'utf8').trim();
        writeFileSync(join(dir, f), v);
      }
    }
  }
}

/**
 * Kills every process left in the node's cgroups (its containers), deepest cgroups first, then
 * removes them. A container cgroup left FROZEN (runc freezes one while it updates or kills a
 * container; a runtime stopped in between never thaws it) is thawed first: a frozen process cannot
 * act on SIGKILL, so its cgroup could never be removed.
 */
export async function destroyCgroupRoot(cgroupRoot: string): Promise<void> {
  const all: string[] = [];
  const walk = (d: string) => {
    if (!existsSync(d)) return;
    for (const e of readdirSync(d, { withFileTypes: true })) if (e.isDirectory()) walk(join(d, e.name));
    all.push(d);
  };
  for (const c of cgroupControllers()) walk(join(CGROUP_V1_ROOT, c, cgroupRoot));
  for (const d of all) {
    const state = join(d, 'freezer.state');
    try {
      if (readFileSync(state, 'utf8').trim() !== 'THAWED') writeFileSync(state, 'THAWED');
    } catch {
      /* not the freezer hierarchy, or gone */
    }
  }
  for (let attempt = 0; attempt < 50; attempt++) {
    let alive = 0;
    for (const d of all) {
      let procs: string[] = [];
      try {
        procs = readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      } catch {
        continue;
      }
      for (const pid of procs) {
        alive++;
        try {
          process.kill(Number(pid), 'SIGKILL');
        } catch {
          /* gone */
        }
      }
    }
    if (alive === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const d of all) {
    try {
      rmdirSync(d);
    } catch {
      /* busy or gone: reported by the leak check */
    }
  }
}

/** The bridge `bridge` with these IPv4 addresses (`ip/prefix`), up: idempotent. */
export async function ensureBridge(bridge: string, cidrs: readonly string[]): Promise<void> {
  const links = await sh('ip', ['-o', 'link', 'show']);
  if (!links.includes(` ${bridge}:`)) await sh('ip', ['link', 'add', 'name', bridge, 'type', 'bridge']);
  const addrs = await sh('ip', ['-o', '-4', 'addr', 'show', 'dev', bridge]);
  for (const cidr of cidrs) if (!addrs.includes(` ${cidr} `)) await sh('ip', ['addr', 'add', cidr, 'dev', bridge]);
  await sh('ip', ['link', 'set', bridge, 'up']);
}

export async function createBridge(spec: RealNodeSpec): Promise<void> {
  await ensureBridge(spec.bridge, [`${spec.gateway}/24`]);
  writeFileSync('/proc/sys/net/ipv4/ip_forward', '1');
}

export async function deleteBridge(bridge: string): Promise<void> {
  try {
    await sh('ip', ['link', 'del', bridge]);
  } catch {
    /* absent */
  }
}

function containerdConfig(spec: RealNodeSpec, cdir: string, sandboxImage: string): string {
  return `version = 3
root = "${cdir}/root"
state = "${cdir}/state"
temp = "${cdir}/tmp"

[grpc]
  address = "${spec.socket}"
[ttrpc]
  address = "${spec.socket}.ttrpc"
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "${cdir}/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "${sandboxImage}"
  [plugins.'io.containerd.cri.v1.runtime']
    # CAP_SYS_RESOURCE is missing on these machines: never try to lower oom_score_adj
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    disable_apparmor = true
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "/usr/sbin/runc"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "${cdir}/cni"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
`;
}

function cniConfig(spec: RealNodeSpec): string {
  return JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: `ulysses-${spec.name}`,
      plugins: [
        {
          type: 'bridge',
          bridge: spec.bridge,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: spec.podSubnet, gateway: spec.gateway }]],
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: join(spec.dir, 'cni-ipam'),
          },
        },
      ],
    },
    null,
    2,
  );
}

function kubeletConfig(spec: RealNodeSpec, caCert: string, runtimeSocket: string): string {
  return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: ${spec.cgroupRoot}
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
containerRuntimeEndpoint: unix://${runtimeSocket}
imageServiceEndpoint: unix://${runtimeSocket}
address: ${spec.gateway}
port: ${spec.kubeletPort}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${spec.kubeletHealthzPort}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: ${caCert}
authorization:
  mode: Webhook
registerNode: true
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
resolvConf: ""
podLogsDir: ${join(spec.dir, 'pod-logs')}
volumePluginDir: ${join(spec.dir, 'volume-plugins')}
serializeImagePulls: false
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
  nodefs.inodesFree: "1%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 110
nodeStatusUpdateFrequency: 10s
nodeStatusReportFrequency: 1m
localStorageCapacityIsolation: false
`;
}

/**
 * The CRI endpoint a real node's kubelet talks to: its containerd directly (stock Kubernetes), or
 * Ulysses' kubelet-shim in front of that containerd.
 */
export type KubeletRuntime = 'containerd' | 'kubelet-shim';

/** The kubelet's config file of a real node (containerRuntimeEndpoint and imageServiceEndpoint in it). */
export const kubeletConfigPath = (spec: RealNodeSpec): string => join(spec.dir, 'kubelet-config.yaml');

/** The socket of `runtime` on node `spec`, as a kubelet endpoint (unix://...). */
export function runtimeEndpoint(spec: RealNodeSpec, runtime: KubeletRuntime): string {
  return `unix://${runtime === 'containerd' ? spec.socket : spec.shimSocket}`;
}

/** Which runtime of node `spec` a kubelet endpoint names; undefined for any other endpoint. */
export function runtimeOfEndpoint(spec: RealNodeSpec, endpoint: string): KubeletRuntime | undefined {
  return (['containerd', 'kubelet-shim'] as const).find((r) => runtimeEndpoint(spec, r) === endpoint);
}

/** A kubelet config (YAML text) with both CRI endpoints set to `endpoint`, every other field as it was. */
export function kubeletConfigWithEndpoint(text: string, endpoint: string): string {
  const doc = parseDocument(text);
  if (doc.errors.length) throw new Error(`kubelet config: ${doc.errors[0]!.message}`);
  doc.set('containerRuntimeEndpoint', endpoint);
  doc.set('imageServiceEndpoint', endpoint);
  return doc.toString();
}

/** The containerRuntimeEndpoint of a kubelet config (YAML text); undefined when it sets none. */
export function kubeletConfigEndpoint(text: string): string | undefined {
  const v = parseDocument(text).get('containerRuntimeEndpoint');
  return typeof v === 'string' ? v : undefined;
}

/**
 * The kubelet config fields that set how often a kubelet heartbeats (KubeletConfiguration v1beta1):
 * its node Lease (renewed every quarter of `nodeLeaseDurationSeconds`, pkg/kubelet
 * nodeLeaseRenewIntervalFraction), its status (computed every `nodeStatusUpdateFrequency`, posted
 * when it changed or every `nodeStatusReportFrequency`).
 */
export const KUBELET_HEARTBEAT_KEYS = ['nodeLeaseDurationSeconds', 'nodeStatusUpdateFrequency', 'nodeStatusReportFrequency'] as const;
export type KubeletHeartbeatKey = (typeof KUBELET_HEARTBEAT_KEYS)[number];

/** What a kubelet runs with after its defaulting; durations as Go prints them (10s, 5m0s). */
export interface KubeletHeartbeat {
  nodeLeaseDurationSeconds: number;
  nodeStatusUpdateFrequency: string;
  nodeStatusReportFrequency: string;
}

/** The kubelet's defaults of the Lease duration and the status period (pkg/kubelet/apis/config/v1beta1/defaults.go). */
export const KUBELET_DEFAULT_HEARTBEAT = { nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s' } as const;

/** Settings of the Lease and the status period to give a kubelet; an absent one stays as it is. */
export type KubeletHeartbeatSettings = Partial<Pick<KubeletHeartbeat, 'nodeLeaseDurationSeconds' | 'nodeStatusUpdateFrequency'>>;

/** The values a kubelet config file had for the heartbeat fields before they were changed; null: the file did not set it. */
export type KubeletHeartbeatOriginal = Record<KubeletHeartbeatKey, string | number | null>;

const GO_DURATION_UNITS_MS: Record<string, number> = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds of a Go duration string ("1m30s", "500ms", "0s"); undefined when it is not one. */
export function goDurationMs(v: unknown): number | undefined {
  if (typeof v !== 'string' || !/^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$|^0$/.test(v)) return undefined;
  let ms = 0;
  for (const [, n, unit] of v.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) ms += Number(n) * GO_DURATION_UNITS_MS[unit!]!;
  return ms;
}

/** A duration as Go's time.Duration prints it: 1s, 10s, 1m0s, 5m0s, 500ms. */
export function formatGoDuration(ms: number): string {
  if (ms === 0) return '0s';
  if (ms < 1000) return `${ms}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const sec = (ms % 60_000) / 1000;
  return `${h ? `${h}h` : ''}${h || m ? `${m}m` : ''}${sec}s`;
}

/**
 * The heartbeat a kubelet runs with for this config file (YAML text), as the kubelet defaults it
 * (pkg/kubelet/apis/config/v1beta1/defaults.go): an absent or zero nodeLeaseDurationSeconds is 40,
 * nodeStatusUpdateFrequency 10s, nodeStatusReportFrequency the update frequency when that is set,
 * else 5m.
 */
export function kubeletHeartbeat(text: string): KubeletHeartbeat {
  const doc = parseDocument(text);
  if (doc.errors.length) throw new Error(`kubelet config: ${doc.errors[0]!.message}`);
  const lease = doc.get('nodeLeaseDurationSeconds');
  const update = goDurationMs(doc.get('nodeStatusUpdateFrequency')) || 0;
  const report = goDurationMs(doc.get('nodeStatusReportFrequency')) || 0;
  return {
    nodeLeaseDurationSeconds: typeof lease === 'number' && lease > 0 ? lease : KUBELET_DEFAULT_HEARTBEAT.nodeLeaseDurationSeconds,
    nodeStatusUpdateFrequency: formatGoDuration(update || goDurationMs(KUBELET_DEFAULT_HEARTBEAT.nodeStatusUpdateFrequency)!),
    nodeStatusReportFrequency: formatGoDuration(report || update || 300_000),
  };
}

/** The config has the heartbeat `settings` already (as the kubelet reads it). */
export function kubeletHasHeartbeat(text: string, settings: KubeletHeartbeatSettings): boolean {
  const h = kubeletHeartbeat(text);
  return (
    (settings.nodeLeaseDurationSeconds === undefined || h.nodeLeaseDurationSeconds === settings.nodeLeaseDurationSeconds) &&
    (settings.nodeStatusUpdateFrequency === undefined || goDurationMs(h.nodeStatusUpdateFrequency) === goDurationMs(settings.nodeStatusUpdateFrequency))
  );
}

/**
 * A kubelet config (YAML text) with the heartbeat `settings`, every other field as it was, and the
 * values the heartbeat fields had (`original`, to restore them). The status report period is pinned to
 * the one the kubelet ran with when the file left it to the default, which would otherwise follow the
 * new nodeStatusUpdateFrequency (kubeadm writes `nodeStatusReportFrequency: 0s`: a 1 s update frequency
 * would post the node status every second).
 */
export function kubeletConfigWithHeartbeat(text: string, settings: KubeletHeartbeatSettings): { config: string; original: KubeletHeartbeatOriginal } {
  const doc = parseDocument(text);
  if (doc.errors.length) throw new Error(`kubelet config: ${doc.errors[0]!.message}`);
  const before = kubeletHeartbeat(text);
  const original = Object.fromEntries(KUBELET_HEARTBEAT_KEYS.map((k) => [k, doc.has(k) ? ((doc.get(k) as string | number | null) ?? null) : null])) as KubeletHeartbeatOriginal;
  if (settings.nodeLeaseDurationSeconds !== undefined) doc.set('nodeLeaseDurationSeconds', settings.nodeLeaseDurationSeconds);
  if (settings.nodeStatusUpdateFrequency !== undefined) doc.set('nodeStatusUpdateFrequency', settings.nodeStatusUpdateFrequency);
  if (!goDurationMs(doc.get('nodeStatusReportFrequency'))) doc.set('nodeStatusReportFrequency', before.nodeStatusReportFrequency);
  return { config: doc.toString(), original };
}

/**
 * A kubelet config (YAML text) with the heartbeat fields back at `original` (a field the file did not
 * set is removed again), every other field as it is. Without `original`: nodeLeaseDurationSeconds and
 * nodeStatusUpdateFrequency removed (the kubelet's defaults, 40 and 10s), the report period kept.
 */
export function kubeletConfigWithoutHeartbeat(text: string, original?: KubeletHeartbeatOriginal): string {
  const doc = parseDocument(text);
  if (doc.errors.length) throw new Error(`kubelet config: ${doc.errors[0]!.message}`);
  const want: Partial<KubeletHeartbeatOriginal> = original ?? { nodeLeaseDurationSeconds: null, nodeStatusUpdateFrequency: null };
  for (const k of KUBELET_HEARTBEAT_KEYS) {
    if (!(k in want)) continue;
    const v = want[k];
    if (v === null || v === undefined) doc.delete(k);
    else doc.set(k, v);
  }
  return doc.toString();
}

/**
 * One step of a kubelet's heartbeat switch, on the text of its config file and of the file keeping
 * the values from before (`backup`, YAML of {@link KubeletHeartbeatOriginal}; undefined: none):
 * `settings` applied (the originals kept in a new backup, unless one is kept already or the file has
 * the settings already), or `'stock'`, the originals written back and the backup removed. Returns the
 * config to write and what becomes of the backup: its new text, null to remove it, undefined to leave it.
 */
export function kubeletHeartbeatSwitch(config: string, backup: string | undefined, target: KubeletHeartbeatSettings | 'stock'): { config: string; backup: string | null | undefined } {
  if (target === 'stock') {
    // nothing kept and nothing changed: the file stays as it is
    if (backup === undefined && kubeletHasHeartbeat(config, KUBELET_DEFAULT_HEARTBEAT)) return { config, backup: undefined };
    const original = backup === undefined ? undefined : (parseYaml(backup, { maxAliasCount: 0 }) as KubeletHeartbeatOriginal);
    return { config: kubeletConfigWithoutHeartbeat(config, original), backup: backup === undefined ? undefined : null };
  }
  const already = kubeletHasHeartbeat(config, target);
  const { config: out, original } = kubeletConfigWithHeartbeat(config, target);
  return { config: out, backup: backup === undefined && !already ? stringifyYaml(original) : undefined };
}

/** Where the local testbed keeps a kubelet's heartbeat fields from before a switch (kubeletHeartbeatSwitch). */
export const kubeletHeartbeatBackupPath = (spec: RealNodeSpec): string => join(spec.dir, 'kubelet-config.heartbeat-backup.yaml');

export interface RealNodeHandles {
  containerd: TrackedProcess;
  shim?: TrackedProcess;
  kubelet: TrackedProcess;
}

const REPO_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * A kubelet-shim config of node `spec` with its node agent on the node's address (the testbed's
 * nodes share this machine, so each agent binds its own InternalIP), unless the config sets one.
 */
export function withNodeAgent(spec: RealNodeSpec, config: Record<string, unknown>): Record<string, unknown> {
  const agent = (config.nodeAgent ?? {}) as Record<string, unknown>;
  return { ...config, nodeAgent: { ...agent, address: agent.address ?? spec.gateway } };
}

/** Starts the kubelet-shim (CRI proxy) of a node between its kubelet and its containerd. */
/**
 * Starts the node's kubelet-shim. With `runtimeKubeconfig` it also watches UlyssesConfig/default
 * (spec.kubeletShim) for this node and reports in its status.
 */
export async function startKubeletShim(spec: RealNodeSpec, configFile: string, cpus?: string, runtimeKubeconfig?: string): Promise<TrackedProcess> {
  const nodeConfig = join(spec.dir, 'kubelet-shim.yaml');
  // per node, so a test can rewrite it and send SIGHUP; the node agent on the node's own address
  writeFileSync(nodeConfig, stringifyYaml(withNodeAgent(spec, parseYaml(readFileSync(configFile, 'utf8')) ?? {})));
  const p = startProcess({
    name: `kubelet-shim/${spec.name}`,
    // one node process (not the tsx wrapper, which does not relay SIGHUP): `node --import tsx main.ts`
    cmd: process.execPath,
    args: [
      '--import',
      pathToFileURL(join(REPO_ROOT, 'node_modules', 'tsx', 'dist', 'loader.mjs')).href,
      join(REPO_ROOT, 'kubelet-shim', 'main.ts'),
      '--listen',
      spec.shimSocket,
      '--backend',
      spec.socket,
      '--config',
      nodeConfig,
      '--metrics-port',
      String(spec.shimMetricsPort),
      '--node-name',
      spec.name,
      ...(runtimeKubeconfig ? ['--kubeconfig', runtimeKubeconfig] : []),
    ],
    logFile: join(spec.dir, 'kubelet-shim.log'),
    env: { ULYSSES_NODE: spec.name },
    cpus,
  });
  await pollUntil(`kubelet-shim socket of ${spec.name}`, () => {
    if (!isAlive(p.pid)) throw new FatalError(`kubelet-shim of ${spec.name} exited:\n${tailFile(p.logFile)}`);
    return existsSync(spec.shimSocket);
  }, { timeoutMs: 30_000, explain: () => tailFile(p.logFile) });
  return p;
}

/** Starts the node's containerd; `sandboxImage` is its pause image (the testbed's own by default). */
export async function startContainerd(spec: RealNodeSpec, cpus?: string, sandboxImage = 'ulysses.local/pause:1'): Promise<TrackedProcess> {
  const cdir = join(spec.dir, 'containerd');
  for (const d of ['root', 'state', 'tmp', 'opt', 'cni']) await mkdir(join(cdir, d), { recursive: true });
  await writeFile(join(cdir, 'config.toml'), containerdConfig(spec, cdir, sandboxImage));
  await writeFile(join(cdir, 'cni', '10-ulysses.conflist'), cniConfig(spec));
  const p = startProcess({
    name: `containerd/${spec.name}`,
    cmd: binaryPath('containerd'),
    args: ['--config', join(cdir, 'config.toml')],
    logFile: join(spec.dir, 'containerd.log'),
    env: { PATH: `${binDir()}:${process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin'}` },
    cpus,
  });
  await pollUntil('containerd socket', () => existsSync(spec.socket), { timeoutMs: 30_000, explain: () => tailFile(p.logFile) });
  return p;
}

/** Imports OCI image tars into the containerd at `socket`, namespace k8s.io (where the CRI looks); an error names the tar and the socket. */
export async function importImages(socket: string, tars: readonly string[]): Promise<void> {
  for (const tar of tars) await sh(binaryPath('ctr'), ['-a', socket, '-n', 'k8s.io', 'images', 'import', '--platform', 'linux/amd64', tar]);
}

export async function startRealNode(
  spec: RealNodeSpec,
  opts: { kubeconfig: string; caCert: string; imageTars: string[]; cpus?: string; kubeletShimConfig?: string; shimRuntimeKubeconfig?: string },
): Promise<RealNodeHandles> {
  await mkdir(spec.dir, { recursive: true });
  createCgroupRoot(spec);
  await createBridge(spec);
  const containerd = await startContainerd(spec, opts.cpus);
  await importImages(spec.socket, opts.imageTars);
  const shim = opts.kubeletShimConfig ? await startKubeletShim(spec, opts.kubeletShimConfig, opts.cpus, opts.shimRuntimeKubeconfig) : undefined;
  const kdir = join(spec.dir, 'kubelet');
  await mkdir(kdir, { recursive: true });
  await writeFile(kubeletConfigPath(spec), kubeletConfig(spec, opts.caCert, shim ? spec.shimSocket : spec.socket));
  const kubelet = startProcess({
    name: `kubelet/${spec.name}`,
    cmd: binaryPath('kubelet'),
    args: [
      `--config=${kubeletConfigPath(spec)}`,
      `--kubeconfig=${opts.kubeconfig}`,
      `--root-dir=${kdir}`,
      `--cert-dir=${join(kdir, 'pki')}`,
      `--hostname-override=${spec.name}`,
      `--node-ip=${spec.gateway}`,
      `--node-labels=ulysses.io/testbed-node=real`,
      '--v=2',
    ],
    logFile: join(spec.dir, 'kubelet.log'),
    cpus: opts.cpus,
  });
  return { containerd, shim, kubelet };
}

/** Stops a real node: kubelet, its containers (by cgroup), shims, containerd; unmounts; removes the bridge. */
export async function stopRealNode(spec: RealNodeSpec, pids: number[]): Promise<void> {
  for (const pid of pids) await stopProcess(pid, 3000); // kubelet first, then containerd
  await destroyCgroupRoot(spec.cgroupRoot);
  for (const pid of pidsMatching(spec.socket)) await stopProcess(pid, 1000); // containerd-shim-runc-v2 -address <socket>
  await unmountUnder(spec.dir);
  await deleteBridge(spec.bridge);
}

/** Unmounts every mount point under `dir`, deepest first (overlay rootfs, netns, shm, kubelet volumes). */
export async function unmountUnder(dir: string): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const mounts = mountsUnder(dir);
    if (mounts.length === 0) return;
    for (const m of mounts.sort((a, b) => b.length - a.length)) {
      try {
        await run('umount', [m]);
      } catch {
        await run('umount', ['-l', m]).catch(() => undefined);
      }
    }
  }
}

export function mountsUnder(dir: string): string[] {
  const text = readFileSync('/proc/self/mountinfo', 'utf8');
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const mp = line.split(' ')[4];
    if (mp && (mp === dir || mp.startsWith(dir + '/'))) out.push(mp.replace(/\\040/g, ' '));
  }
  return out;
}
