/**
 * `ulysses install` / `ulysses uninstall`: the install guide of manifests/README.md as one script,
 * which users and the tests both run.
 *
 * Cluster steps are kubectl commands on the rendered overlay `overlays/kubeadm` (server-side apply,
 * field manager `ulysses-install`). Node steps go through a {@link NodeAccess}:
 * - control-plane: kcm's `--controllers` and kube-scheduler's `--config` recorded in kubeadm's
 *   ClusterConfiguration (so `kubeadm upgrade` keeps them) and edited in place into each node's static
 *   pod manifest, the operator's changes kept, what was there backed up (manifests/control-plane.ts);
 * - every node: the kubelet-shim as the node service the systemd unit runs (config in /etc/ulysses;
 *   API credential: the node's own kubelet.conf, no token is minted for it), then the kubelet's
 *   `containerRuntimeEndpoint`/`imageServiceEndpoint` in /var/lib/kubelet/config.yaml and a kubelet
 *   restart.
 * Each component is installed while the stock component it replaces still works, then the stock one
 * is switched over; uninstall runs the same steps in reverse and returns the cluster to stock.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { BlockList, isIP } from 'node:net';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { AppsV1Api, CoordinationV1Api, CoreV1Api, CustomObjectsApi, DiscoveryV1Api, KubeConfig, VersionApi, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { fatallyWaitingContainer, isNodeReady, isPodReady } from '../core/objects.ts';
import { FatalError, pollUntil } from '../core/poll.ts';
import type { UlyssesConfig } from '../core/runtime-config.ts';
import { statusRows } from '../core/runtime-status.ts';
import { NODE_UNREACHABLE_TAINT, updateNodeTaint } from '../core/node-taints.ts';
import { KubeClient } from '../core/kube.ts';
import { ADMISSION_OBJECTS, COMPONENT_OBJECTS, kcmControllersFromPatch, MANIFESTS_DIR, objectId, renderOverlay, ULYSSES_CONFIG_NAME, ULYSSES_NAMESPACE, type Component, type K8sObject } from './overlays.ts';
import { progressLog } from '../core/logging.ts';
import { ungrantedClaims } from '../core/claims.ts';
import { issueExtenderPki, pkiProblem, SCHEDULER_EXTENDER_TLS_FILES, type ExtenderPki } from '../core/extender-pki.ts';
import { takenBack } from './kcm-handback.ts';
import { CLUSTER_CONFIGURATION_BACKUP_ANNOTATION, CONTROL_PLANE_COMPONENTS, clusterConfigurationHas, clusterConfigurationWith, clusterConfigurationWithout, flagValues, hostPathOf, manifestBackupPath, manifestPath, manifestWith, manifestWithout, mergedSchedulerConfig, type ControlPlaneComponent } from './control-plane.ts';

/** Install order. */
export const INSTALL_ORDER: readonly Component[] = ['apf', 'controller-manager', 'scheduler-extender', 'kubelet-shim'];
/**
 * Uninstall order: the control plane back to stock first (kube-scheduler without the extender, kcm
 * with all its controllers), so that a node that cannot be reached never leaves the cluster without
 * them; then the nodes; the APF FlowSchema last.
 */
export const UNINSTALL_ORDER: readonly Component[] = ['scheduler-extender', 'controller-manager', 'kubelet-shim', 'apf'];

/** The Kubernetes minor releases Ulysses is built and tested for (experiments/testbed/k8s-versions.txt). */
export const SUPPORTED_MINORS: readonly string[] = ['1.36', '1.37'];

/** The flag manifests/kubeadm/patches/control-plane/kube-controller-manager+json.yaml adds. */
export const KCM_CONTROLLERS_FLAG = `--controllers=${kcmControllersFromPatch()}`;


/** Paths on a node (as the node sees them). */
export const NODE_PATHS = {
  schedulerConfig: '/etc/kubernetes/ulysses/kube-scheduler-config.yaml',
  kubeletConfig: '/var/lib/kubelet/config.yaml',
  shimConfig: '/etc/ulysses/kubelet-shim.yaml',
  /**
   * The kubeconfig the kubelet-shim runs with: the node's own kubelet credential (kubeadm's, user
   * system:node:<node>, its client certificate rotated by the kubelet). Read by the shim, never
   * written or removed by Ulysses (manifests/base/kubelet-shim/rbac.yaml).
   */
  shimKubeconfig: '/etc/kubernetes/kubelet.conf',
  /** Where installs before the node credential kept a ServiceAccount token for the shim: removed. */
  legacyShimKubeconfig: '/etc/ulysses/kubelet-shim.kubeconfig',
  kubeletEndpointsBackup: '/etc/ulysses/kubelet-endpoints.yaml',
  /** The kcm handback's static pod on a control-plane node (manifests/kcm-handback.ts). */
  kcmHandback: '/etc/kubernetes/manifests/ulysses-kcm-handback.yaml',
} as const;
export const SCHEDULER_CONFIG_FLAG = `--config=${NODE_PATHS.schedulerConfig}`;

/**
 * The scheduler extender's TLS (core/extender-pki.ts, manifests/README.md "Security model"): the CA
 * and kube-scheduler's client key pair in a Secret nothing mounts (read by the installer, to renew
 * the leaves and to give a new control-plane node its files), the serving pair and the client CA in
 * the Secret the extender mounts.
 */
export const EXTENDER_TLS_SECRETS = { ca: 'ulysses-scheduler-extender-ca', serving: 'ulysses-scheduler-extender-tls' } as const;

export interface InstallNode {
  name: string;
  controlPlane: boolean;
}

/**
 * What the installer needs on each node. A production cluster's nodes are reached by whatever runs
 * there as root (the systemd unit, `kubeadm`); the kubeadm testbed implements it for its nodes on
 * this machine (experiments/testbed/kubeadm.ts).
 */
export interface NodeAccess {
  nodes(): InstallNode[];
  /** The file `nodePath` (a path as the node sees it); undefined when there is none. */
  readFile(node: string, nodePath: string): Promise<string | undefined>;
  /** Writes the file `nodePath` (parent directories created) with `mode`. */
  writeFile(node: string, nodePath: string, content: string, mode: number): Promise<void>;
  /** Removes `nodePath`, a file or a directory with its contents; nothing there is fine. */
  remove(node: string, nodePath: string): Promise<void>;
  /** Runs kubeadm on the node; rejects with its log tail. */
  kubeadm(node: string, args: string[]): Promise<void>;
  /** `systemctl restart kubelet`. */
  restartKubelet(node: string): Promise<void>;
  /**
   * `systemctl enable --now ulysses-kubelet-shim` (manifests/systemd/ulysses-kubelet-shim.service),
   * `NODE_NAME` the node's name; it reads NODE_PATHS.shimConfig and NODE_PATHS.shimKubeconfig. The
   * fallback guard (ulysses-kubelet-shim-fallback.service, same config file) is started with it.
   */
  startKubeletShim(node: string): Promise<void>;
  /** `systemctl disable --now` the fallback guard, then ulysses-kubelet-shim. */
  stopKubeletShim(node: string): Promise<void>;
  /** containerd's CRI socket on the node (/run/containerd/containerd.sock in production). */
  containerdSocket(node: string): string;
  /** The shim's socket (/run/ulysses/kubelet-shim.sock in production) and metrics port. */
  shimSocket(node: string): string;
  shimMetricsPort(node: string): number;
}

export interface InstallOptions {
  kubeconfig: string;
  /** the kubectl binary (default: kubectl on PATH) */
  kubectl?: string;
  /** the Ulysses image the workloads run (default: the overlay's, ulysses:<version>) */
  image?: string;
  components?: readonly Component[];
  nodes: NodeAccess;
  log?: (line: string) => void;
  /** bound of each wait (default 180 s) */
  timeoutMs?: number;
  /**
   * A nodeSelector for the Deployments (controller manager, scheduler extender), e.g. the
   * control-plane node's hostname, to keep them off the nodes an experiment fails.
   */
  nodeSelector?: Record<string, string>;
  /**
   * uninstall only: a node whose files cannot be read (NodeAccess fails) is skipped and named at the
   * end instead of stopping the uninstall; `ulysses uninstall --components kubelet-shim` once it is
   * back finishes it (nodes already on containerd are left alone).
   */
  skipUnreachable?: boolean;
  /**
   * uninstall only: take Ulysses off the path but keep its objects, so that `install` puts it back
   * cheaply — the controller manager's Deployment is scaled to 0 instead of deleted, the extender's
   * Deployment, the RBAC, the CRD, the namespace and UlyssesConfig stay (kube-scheduler no longer
   * calls the extender, the kubelets talk to containerd, the kubelet-shims stop, kcm runs all its
   * controllers, the APF FlowSchema is deleted).
   */
  keepObjects?: boolean;
}

/** A failing install/uninstall step: its name and what explains it. */
export class InstallError extends Error {
  constructor(
    readonly step: string,
    message: string,
  ) {
    super(`step "${step}" failed: ${message}`);
  }
}

const FIELD_MANAGER = 'ulysses-install';
const KUBECTL_TIMEOUT_MS = 120_000;
const OUTPUT_LIMIT = 64 << 20;

/** Runs kubectl with `input` on stdin; rejects with its stderr. Output bounded, time bounded. */
export function kubectl(o: Pick<InstallOptions, 'kubeconfig' | 'kubectl'>, args: string[], input?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(o.kubectl ?? 'kubectl', ['--kubeconfig', o.kubeconfig, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), KUBECTL_TIMEOUT_MS);
    child.stdout.on('data', (d: Buffer) => {
      if (out.length < OUTPUT_LIMIT) out += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      if (err.length < 1 << 16) err += d.toString();
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`kubectl ${args[0]}: ${e.message}`));
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`kubectl ${args.join(' ')} exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
    });
    child.stdin.end(input ?? '');
  });
}

const COMMON_KINDS = new Set(['Namespace', 'CustomResourceDefinition', 'UlyssesConfig']);
/** The admission policies of manifests/base/admission (common to every component). */
const isAdmissionObject = (o: K8sObject) => (ADMISSION_OBJECTS as readonly string[]).includes(objectId(o));

/**
 * Preflight of the admission policies (manifests/base/admission): a pod that makes a claim
 * (criticality high, RT, TDMA) its namespace does not grant keeps running once they are installed,
 * but its replacement (a ReplicaSet's next pod after a node failure) is refused. The install stops
 * before it changes anything, naming each such namespace and the command that grants its claims.
 */
export async function checkClaimsGranted(core: CoreV1Api, objects: K8sObject[]): Promise<void> {
  // the namespaces the install itself applies (ulysses-system) count with their rendered labels
  const rendered = new Map(objects.filter((x) => x.kind === 'Namespace').map((x) => [x.metadata.name, x.metadata.labels ?? {}]));
  const existing = new Map((await core.listNamespace()).items.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}]));
  const found = ungrantedClaims((await core.listPodForAllNamespaces()).items, (ns) => ({ ...existing.get(ns), ...rendered.get(ns) }));
  if (!found.length) return;
  throw new Error(
    `${found.length} namespace(s) run pods whose claims the namespace does not grant; once Ulysses' admission policies are installed, ` +
      `their replacements would be refused (manifests/README.md, "Who may claim what"). Grant them (a cluster admin's decision) or remove the claims, then install again:\n` +
      found.map((f) => `  ${f.namespace}: ${f.claims.join(', ')} (pods ${f.pods.join(', ')}): ${f.fix}`).join('\n'),
  );
}
/**
 * Preflight of the extender's fixed ClusterIP (manifests/base/scheduler-extender/service.yaml): it
 * must lie in the cluster's Service subnet(s) (kubeadm's `networking.serviceSubnet`, default
 * 10.96.0.0/12, comma-separated when dual-stack) and no other Service may hold it. The reason when not.
 */
export function clusterIpProblem(ip: string, serviceSubnet: string | undefined, services: readonly { namespace: string; name: string; clusterIPs: readonly string[] }[]): string | undefined {
  const subnets = (serviceSubnet ?? '10.96.0.0/12').split(',').map((x) => x.trim()).filter(Boolean);
  const family = isIP(ip) === 6 ? 'ipv6' : 'ipv4';
  const inSubnet = subnets.some((cidr) => {
    const [base, bits] = cidr.split('/');
    if (!base || isIP(base) !== (family === 'ipv6' ? 6 : 4)) return false;
    const list = new BlockList();
    list.addSubnet(base, Number(bits), family);
    return list.check(ip, family);
  });
  if (!inSubnet) {
    return `the scheduler extender's ClusterIP ${ip} is not in the cluster's Service subnet ${subnets.join(',')}: set a free address of it as clusterIP in manifests/base/scheduler-extender/service.yaml and in urlPrefix of manifests/kubeadm/kube-scheduler-config.yaml`;
  }
  const holder = services.find((x) => x.clusterIPs.includes(ip) && !(x.namespace === ULYSSES_NAMESPACE && x.name === 'ulysses-scheduler-extender'));
  if (holder) return `the scheduler extender's ClusterIP ${ip} is held by Service ${holder.namespace}/${holder.name}: choose a free address (manifests/base/scheduler-extender/service.yaml clusterIP and manifests/kubeadm/kube-scheduler-config.yaml urlPrefix)`;
  return undefined;
}

const minorOf = (version: string | undefined) => /^v?(\d+)\.(\d+)/.exec(version ?? '');

/**
 * Preflight of versions and nodes: the apiserver of a minor release in {@link SUPPORTED_MINORS}
 * (kcm's controller names and the kubeadm layout Ulysses edits are those releases'); with the
 * kubelet-shim, every node Linux with containerd (the shim proxies containerd's CRI) and a kubelet
 * within Kubernetes' version skew (not newer than the apiserver, at most 3 minors older). The problems
 * found, each naming the node and the field.
 */
export function versionProblems(serverVersion: string, nodes: readonly V1Node[], withShim: boolean): string[] {
  const problems: string[] = [];
  const server = minorOf(serverVersion);
  if (!server || !SUPPORTED_MINORS.includes(`${server[1]}.${server[2]}`)) {
    problems.push(`the apiserver is ${serverVersion}; this Ulysses supports Kubernetes ${SUPPORTED_MINORS.join(' and ')}`);
  }
  if (!withShim) return problems;
  for (const n of nodes) {
    const name = n.metadata?.name ?? '(unnamed)';
    const info = n.status?.nodeInfo;
    if (info?.operatingSystem !== 'linux') problems.push(`node ${name}: status.nodeInfo.operatingSystem is ${info?.operatingSystem ?? 'unknown'}; the kubelet-shim runs on linux nodes only`);
    if (!info?.containerRuntimeVersion?.startsWith('containerd://')) problems.push(`node ${name}: status.nodeInfo.containerRuntimeVersion is ${info?.containerRuntimeVersion || 'unknown'}; the kubelet-shim proxies containerd's CRI only`);
    const kubelet = minorOf(info?.kubeletVersion);
    if (server && kubelet) {
      const skew = (Number(server[1]) - Number(kubelet[1])) * 100 + Number(server[2]) - Number(kubelet[2]);
      if (skew < 0 || skew > 3) problems.push(`node ${name}: status.nodeInfo.kubeletVersion ${info?.kubeletVersion} is outside the skew Kubernetes supports with apiserver ${serverVersion} (the same minor down to 3 older)`);
    } else if (!kubelet) problems.push(`node ${name}: status.nodeInfo.kubeletVersion is ${info?.kubeletVersion || 'unknown'}`);
  }
  return problems;
}

const RBAC_KINDS = new Set(['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
/** The kubelet-shim runs as the node service; its DaemonSet is the alternative for users who want it. */
const NOT_INSTALLED = new Set(['DaemonSet/ulysses-kubelet-shim']);

/** The objects of `overlays/kubeadm` rendered by kubectl, with `image` set on every Ulysses container. */
export async function renderInstall(o: Pick<InstallOptions, 'kubectl' | 'image' | 'nodeSelector'>): Promise<K8sObject[]> {
  const { objects } = await renderOverlay('kubeadm', o.kubectl ?? 'kubectl');
  if (o.nodeSelector) {
    for (const obj of objects) {
      if (obj.kind !== 'Deployment') continue;
      const spec = (obj as { spec?: { template?: { spec?: { nodeSelector?: Record<string, string> } } } }).spec?.template?.spec;
      if (spec) spec.nodeSelector = { ...spec.nodeSelector, ...o.nodeSelector };
    }
  }
  if (o.image) {
    for (const obj of objects) {
      const spec = (obj as { spec?: { template?: { spec?: { containers?: Array<{ image?: string }> } } } }).spec?.template?.spec;
      for (const c of spec?.containers ?? []) if (c.image?.split(':')[0]?.endsWith('ulysses')) c.image = o.image;
    }
  }
  return objects;
}

/** The Ulysses image the rendered workloads run (the install's probe pods run it too). */
/** The kcm handback's static pod (manifests/kubeadm/static-pods/ulysses-kcm-handback.yaml) with the installed image. */
export function kcmHandbackPod(image: string): string {
  return readFileSync(join(MANIFESTS_DIR, 'kubeadm', 'static-pods', 'ulysses-kcm-handback.yaml'), 'utf8').replace(/^(\s+image: ).*$/m, `$1${image}`);
}

export function ulyssesImage(objects: K8sObject[]): string {
  for (const obj of objects) {
    const spec = (obj as { spec?: { template?: { spec?: { containers?: Array<{ image?: string }> } } } }).spec?.template?.spec;
    const image = spec?.containers?.find((c) => c.image?.split(':')[0]?.endsWith('ulysses'))?.image;
    if (image) return image;
  }
  throw new Error('the rendered manifests run no Ulysses image');
}

/** The objects of `component` (manifests/base/<component>) among `objects`. */
export function componentObjects(objects: K8sObject[], component: Component): K8sObject[] {
  const ids = new Set<string>(COMPONENT_OBJECTS[component]);
  return objects.filter((o) => ids.has(objectId(o)) && !NOT_INSTALLED.has(objectId(o)));
}

const toYaml = (objects: K8sObject[]) => objects.map((o) => stringifyYaml(o)).join('---\n');

class Installer {
  readonly log: (line: string) => void;
  readonly timeoutMs: number;
  readonly core: CoreV1Api;
  readonly apps: AppsV1Api;
  readonly leases: CoordinationV1Api;
  readonly discovery: DiscoveryV1Api;
  readonly custom: CustomObjectsApi;
  readonly client: KubeClient;
  readonly components: readonly Component[];

  constructor(readonly o: InstallOptions) {
    this.log = o.log ?? progressLog;
    this.timeoutMs = o.timeoutMs ?? 180_000;
    const kc = new KubeConfig();
    kc.loadFromFile(o.kubeconfig);
    this.core = kc.makeApiClient(CoreV1Api);
    this.apps = kc.makeApiClient(AppsV1Api);
    this.leases = kc.makeApiClient(CoordinationV1Api);
    this.discovery = kc.makeApiClient(DiscoveryV1Api);
    this.custom = kc.makeApiClient(CustomObjectsApi);
    this.client = new KubeClient(kc);
    const unknown = (o.components ?? []).filter((c) => !INSTALL_ORDER.includes(c));
    if (unknown.length) throw new Error(`unknown component(s) ${unknown.join(', ')} (known: ${INSTALL_ORDER.join(', ')})`);
    this.components = INSTALL_ORDER.filter((c) => !o.components || o.components.includes(c));
  }

  async step<T>(name: string, fn: () => Promise<T>): Promise<T> {
    const t0 = Date.now();
    this.log(`[${name}]`);
    try {
      const v = await fn();
      this.log(`[${name}] done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return v;
    } catch (err) {
      throw err instanceof InstallError ? err : new InstallError(name, (err as Error).message);
    }
  }

  apply(objects: K8sObject[]): Promise<string> {
    return kubectl(this.o, ['apply', '--server-side', `--field-manager=${FIELD_MANAGER}`, '--force-conflicts', '-f', '-'], toYaml(objects));
  }

  delete(objects: K8sObject[]): Promise<string> {
    return kubectl(this.o, ['delete', '--ignore-not-found', '--wait=true', '-f', '-'], toYaml(objects));
  }

  controlPlaneNodes(): InstallNode[] {
    const cps = this.o.nodes.nodes().filter((n) => n.controlPlane);
    if (!cps.length) throw new Error('no control-plane node');
    return cps;
  }

  write(node: string, nodePath: string, content: string, mode = 0o644): Promise<void> {
    return this.o.nodes.writeFile(node, nodePath, content, mode);
  }

  remove(node: string, nodePath: string): Promise<void> {
    return this.o.nodes.remove(node, nodePath);
  }

  /** ConfigMap kube-system/kubeadm-config and its ClusterConfiguration. */
  async kubeadmConfig() {
    const cm = await this.core.readNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system' });
    const text = cm.data?.ClusterConfiguration;
    if (!text) throw new Error('ConfigMap kube-system/kubeadm-config has no ClusterConfiguration: is this a kubeadm cluster?');
    return { cm, text };
  }

  /**
   * Records (`install`) or takes out Ulysses' entries of `c` in the cluster's ClusterConfiguration,
   * which `kubeadm upgrade` regenerates the static pods from. Its text of before the install is kept
   * in an annotation of the ConfigMap until no entry of Ulysses is left. Guarded by resourceVersion.
   */
  async recordInClusterConfiguration(c: ControlPlaneComponent, install: boolean): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const { cm, text } = await this.kubeadmConfig();
      const annotations = { ...cm.metadata?.annotations };
      const before = annotations[CLUSTER_CONFIGURATION_BACKUP_ANNOTATION];
      const next = install ? clusterConfigurationWith(text, c) : clusterConfigurationWithout(text, before, c);
      if (install && before === undefined) {
        annotations[CLUSTER_CONFIGURATION_BACKUP_ANNOTATION] = CONTROL_PLANE_COMPONENTS.reduce((t, x) => (clusterConfigurationHas(t, x) ? clusterConfigurationWithout(t, undefined, x) : t), text);
      }
      if (!install && !CONTROL_PLANE_COMPONENTS.some((x) => clusterConfigurationHas(next, x))) delete annotations[CLUSTER_CONFIGURATION_BACKUP_ANNOTATION];
      if (next === text && JSON.stringify(annotations) === JSON.stringify({ ...cm.metadata?.annotations })) return;
      cm.data!.ClusterConfiguration = next;
      cm.metadata!.annotations = annotations;
      try {
        await this.core.replaceNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system', body: cm });
        return;
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || attempt >= 5) throw err;
      }
    }
  }

  /**
   * The static pod manifest of `c` on `node` as it was before the install: the backup, else the
   * manifest now with any entry of Ulysses taken out (an install before the backups existed).
   */
  async manifestBefore(node: string, c: ControlPlaneComponent): Promise<{ current: string; before: string; backedUp: boolean }> {
    const current = await this.o.nodes.readFile(node, manifestPath(c));
    if (current === undefined) throw new Error(`${manifestPath(c)} not found on ${node}: not a kubeadm control-plane node`);
    const backup = await this.o.nodes.readFile(node, manifestBackupPath(c));
    if (backup !== undefined) return { current, before: backup, backedUp: true };
    return { current, before: manifestWithout(current, undefined, c), backedUp: false };
  }

  /** Edits Ulysses' entries of `c` into `node`'s static pod manifest in place, the manifest of before backed up first. */
  async editStaticPodIn(node: string, c: ControlPlaneComponent): Promise<void> {
    const { current, before, backedUp } = await this.manifestBefore(node, c);
    if (!backedUp) await this.write(node, manifestBackupPath(c), before, 0o600);
    const next = manifestWith(current, c);
    if (next !== current) await this.write(node, manifestPath(c), next, 0o600);
  }

  /** Takes Ulysses' entries of `c` out of `node`'s static pod manifest: the backup byte for byte when nothing else changed. */
  async editStaticPodOut(node: string, c: ControlPlaneComponent): Promise<void> {
    const current = await this.o.nodes.readFile(node, manifestPath(c));
    const backup = await this.o.nodes.readFile(node, manifestBackupPath(c));
    if (current !== undefined) {
      // a kcm the handback gave the controllers to: first as the install left it (annotation gone)
      const installed = c === 'kube-controller-manager' ? (takenBack(current, KCM_CONTROLLERS_FLAG) ?? current) : current;
      const next = manifestWithout(installed, backup, c);
      if (next !== current) await this.write(node, manifestPath(c), next, 0o600);
      if (backup !== undefined && next !== backup) this.log(`${node}: ${manifestPath(c)} changed since the install (a kubeadm upgrade?): only Ulysses' entries taken out, the rest kept`);
    }
    await this.remove(node, manifestBackupPath(c));
  }

  /**
   * kube-scheduler's configuration on `node`: Ulysses' (manifests/kubeadm/kube-scheduler-config.yaml),
   * merged into the operator's when the scheduler ran with a `--config` of its own before the install.
   */
  async schedulerConfigFor(node: string): Promise<string> {
    const { before } = await this.manifestBefore(node, 'kube-scheduler');
    const ours = readFileSync(join(MANIFESTS_DIR, 'kubeadm', 'kube-scheduler-config.yaml'), 'utf8');
    const kubeconfig = flagValues(before, 'kube-scheduler', 'kubeconfig').at(-1);
    const theirPath = flagValues(before, 'kube-scheduler', 'config').at(-1);
    if (!theirPath || theirPath === NODE_PATHS.schedulerConfig) return mergedSchedulerConfig(ours, undefined, kubeconfig, '');
    const host = hostPathOf(before, 'kube-scheduler', theirPath);
    const source = `${node}:${manifestPath('kube-scheduler')} --config=${theirPath}`;
    if (!host) throw new Error(`${source}: no hostPath volume of the pod holds it, so Ulysses cannot read it to merge its extenders in`);
    const theirs = await this.o.nodes.readFile(node, host);
    if (theirs === undefined) throw new Error(`${source}: ${host} not found on the node`);
    return mergedSchedulerConfig(ours, theirs, kubeconfig, `${node}:${host}`);
  }

  /** Waits for the static pod `<component>-<node>` to run with (or without) `flag`, Ready. */
  async staticPodWith(component: 'kube-controller-manager' | 'kube-scheduler', node: string, flag: string, present: boolean): Promise<void> {
    const name = `${component}-${node}`;
    let last = '';
    await pollUntil(
      `${name} ${present ? 'with' : 'without'} ${flag}, Ready`,
      async () => {
        const p = await this.core.readNamespacedPod({ name, namespace: 'kube-system' });
        const has = (p.spec?.containers?.[0]?.command ?? []).includes(flag);
        last = `flag ${has ? 'present' : 'absent'}, ${podState(p)}`;
        return has === present && isPodReady(p) && !(p.status?.containerStatuses ?? []).some((c) => !c.state?.running);
      },
      { timeoutMs: this.timeoutMs, intervalMs: 500, explain: () => `last seen: ${last}` },
    );
  }

  /** Scales a Deployment of the namespace to 0 and waits until none of its pods is left. */
  async scaleToZero(name: string): Promise<void> {
    try {
      await this.apps.patchNamespacedDeploymentScale({ name, namespace: ULYSSES_NAMESPACE, body: [{ op: 'replace', path: '/spec/replicas', value: 0 }] });
    } catch (err) {
      if ((err as { code?: number }).code !== 404) throw err; // never installed: nothing to scale
    }
    let left = 0;
    await pollUntil(
      `no pod of Deployment ${ULYSSES_NAMESPACE}/${name}`,
      async () => {
        left = (await this.core.listNamespacedPod({ namespace: ULYSSES_NAMESPACE, labelSelector: `app.kubernetes.io/name=${name}` })).items.length;
        return left === 0;
      },
      { timeoutMs: this.timeoutMs, intervalMs: 250, explain: () => `${left} pod(s) left` },
    );
  }

  /** Waits for the Deployment's pods, updated, `minAvailable` of them available (default: all). */
  async deploymentAvailable(name: string, minAvailable?: number): Promise<void> {
    let last = '';
    await pollUntil(
      `Deployment ${ULYSSES_NAMESPACE}/${name} available`,
      async () => {
        const d = await this.apps.readNamespacedDeployment({ name, namespace: ULYSSES_NAMESPACE });
        const want = d.spec?.replicas ?? 1;
        last = `${d.status?.updatedReplicas ?? 0} updated, ${d.status?.availableReplicas ?? 0}/${want} available`;
        const pods = (await this.core.listNamespacedPod({ namespace: ULYSSES_NAMESPACE, labelSelector: `app.kubernetes.io/name=${name}` })).items;
        const stuck = pods.map(stuckReason).filter(Boolean);
        if (stuck.length) throw new FatalError(`pods of ${name} cannot start: ${stuck.join('; ')}`);
        return (d.status?.observedGeneration ?? 0) >= (d.metadata?.generation ?? 1) && (d.status?.updatedReplicas ?? 0) === want && (d.status?.availableReplicas ?? 0) >= (minAvailable ?? want);
      },
      { timeoutMs: this.timeoutMs, intervalMs: 500, explain: () => `last seen: ${last}` },
    );
  }

}

function podState(p: V1Pod): string {
  const waiting = (p.status?.containerStatuses ?? []).map((c) => c.state?.waiting?.reason).filter(Boolean);
  return `${p.status?.phase ?? 'no phase'}${isPodReady(p) ? ', Ready' : ''}${waiting.length ? ` (${waiting.join(', ')})` : ''}`;
}

function stuckReason(p: V1Pod): string | undefined {
  const fatal = fatallyWaitingContainer(p);
  if (fatal) return `${p.metadata?.name}: ${fatal.state!.waiting!.reason}: ${fatal.state!.waiting!.message ?? ''}`.trim();
  const looping = (p.status?.containerStatuses ?? []).find((c) => c.state?.waiting?.reason === 'CrashLoopBackOff' && (c.restartCount ?? 0) >= 3);
  if (looping) return `${p.metadata?.name}: CrashLoopBackOff (${looping.restartCount} restarts; kubectl -n ${ULYSSES_NAMESPACE} logs ${p.metadata?.name} --previous)`;
  return undefined;
}

type CriEndpoints = { containerRuntimeEndpoint?: string; imageServiceEndpoint?: string };

/** The kubelet's config.yaml with these CRI endpoints (an absent one is removed: the kubelet's default). */
export function withRuntimeEndpoints(kubeletConfig: string, endpoints: CriEndpoints): { config: string; previous: CriEndpoints } {
  const cfg = parseYaml(kubeletConfig, { maxAliasCount: 0 }) as Record<string, unknown> | null;
  if (!cfg || cfg.kind !== 'KubeletConfiguration') throw new Error(`${NODE_PATHS.kubeletConfig}: kind is not KubeletConfiguration`);
  const previous: CriEndpoints = {};
  for (const k of ['containerRuntimeEndpoint', 'imageServiceEndpoint'] as const) {
    if (typeof cfg[k] === 'string') previous[k] = cfg[k];
    if (endpoints[k] === undefined) delete cfg[k];
    else cfg[k] = endpoints[k];
  }
  return { config: stringifyYaml(cfg), previous };
}

/** The UIDs of the `Starting` Events the kubelets of `node` recorded ("Starting kubelet.": one new Event per kubelet process). */
async function kubeletStarts(i: Installer, node: string): Promise<Set<string>> {
  const events = await i.core.listNamespacedEvent({ namespace: 'default', fieldSelector: `involvedObject.kind=Node,involvedObject.name=${node},reason=Starting` });
  return new Set(events.items.filter((e) => (e.source?.component ?? e.reportingComponent) === 'kubelet').map((e) => e.metadata!.uid!));
}

/** The probe pod's name on `node` (a DNS label: the node name cut and hashed when too long). */
export function probePodName(node: string): string {
  const base = `ulysses-install-probe-${node}`.toLowerCase().replace(/[^a-z0-9.-]/g, '-');
  if (base.length <= 63) return base;
  return `${base.slice(0, 54).replace(/[.-]+$/, '')}-${createHash('sha256').update(node).digest('hex').slice(0, 8)}`;
}

/**
 * Proves the node's pod path after its kubelet restarted: a new kubelet process announced itself
 * (a `Starting` Event the node's earlier kubelets did not record: no clock is compared, the node's
 * may be skewed), the node is Ready, and a pod placed on it (the Ulysses image, `ulysses --help`)
 * ran to completion through whatever runtime endpoint the kubelet now uses. Throws what is missing.
 */
async function provePodPath(i: Installer, node: string, startsBefore: Set<string>, image: string, namespace: string): Promise<void> {
  let last = '';
  await pollUntil(
    `a new kubelet on ${node} (its Starting Event), node Ready`,
    async () => {
      const fresh = [...(await kubeletStarts(i, node))].filter((u) => !startsBefore.has(u));
      const ready = isNodeReady(await i.core.readNode({ name: node }));
      last = `${fresh.length ? 'restarted' : 'no new kubelet Starting Event'}, ${ready ? 'Ready' : 'not Ready'}`;
      return fresh.length > 0 && ready;
    },
    { timeoutMs: i.timeoutMs, intervalMs: 500, explain: () => `last seen: ${last}` },
  );
  await runProbePod(i, probePodName(node), image, namespace, node);
}

/**
 * A pod of the Ulysses image (`ulysses --help`) run to completion in `namespace`, on `node` or,
 * without one, wherever kube-scheduler (and so the extender) places it; deleted afterwards.
 */
async function runProbePod(i: Installer, name: string, image: string, namespace: string, node?: string): Promise<void> {
  let last = '';
  await i.core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
  await pollUntil(`no earlier probe pod ${name}`, async () => !(await i.core.listNamespacedPod({ namespace, fieldSelector: `metadata.name=${name}` })).items.length, { timeoutMs: i.timeoutMs, intervalMs: 250 });
  await i.core.createNamespacedPod({
    namespace,
    body: {
      metadata: { name, labels: { 'app.kubernetes.io/name': 'ulysses-install-probe', 'app.kubernetes.io/part-of': 'ulysses' } },
      spec: {
        ...(node ? { nodeName: node } : {}),
        restartPolicy: 'Never',
        terminationGracePeriodSeconds: 0,
        enableServiceLinks: false,
        automountServiceAccountToken: false,
        tolerations: [{ operator: 'Exists' }],
        securityContext: { runAsNonRoot: true, runAsUser: 1000, seccompProfile: { type: 'RuntimeDefault' } },
        containers: [{ name: 'probe', image, imagePullPolicy: 'IfNotPresent', args: ['ulysses', '--help'], securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } } }],
      },
    },
  });
  try {
    await pollUntil(
      `probe pod ${namespace}/${name} ${node ? `run to completion on ${node}` : 'scheduled and run to completion'}`,
      async () => {
        const p = await i.core.readNamespacedPod({ name, namespace });
        last = podState(p);
        if (p.status?.phase === 'Failed') throw new FatalError(`probe pod ${name} failed: ${JSON.stringify(p.status.containerStatuses?.[0]?.state ?? {})}`);
        const stuck = stuckReason(p);
        if (stuck) throw new FatalError(`probe pod cannot start: ${stuck}`);
        if (!p.spec?.nodeName) {
          const why = (await i.core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},reason=FailedScheduling` })).items.at(-1)?.message;
          last = `not scheduled${why ? `: ${why}` : ''}`;
        }
        return p.status?.phase === 'Succeeded';
      },
      { timeoutMs: i.timeoutMs, intervalMs: 250, explain: () => `last seen: ${last}` },
    );
  } finally {
    await i.core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
  }
}

/**
 * Points the node's kubelet at the shim (`toShim`, the endpoints it had are kept in
 * /etc/ulysses/kubelet-endpoints.yaml) or back at what it had, restarts it, and proves the pod path
 * ({@link provePodPath}). When the switch to the shim cannot be proven the node is switched back (its
 * kubelet config as before, restarted) and the install stops naming the node and what failed.
 */
async function switchKubelet(i: Installer, node: string, toShim: boolean, image: string): Promise<void> {
  const current = await i.o.nodes.readFile(node, NODE_PATHS.kubeletConfig);
  if (current === undefined) throw new Error(`${NODE_PATHS.kubeletConfig} not found on ${node}`);
  const backup = await i.o.nodes.readFile(node, NODE_PATHS.kubeletEndpointsBackup);
  const shim = `unix://${i.o.nodes.shimSocket(node)}`;
  if (!toShim && (parseYaml(current, { maxAliasCount: 0 }) as CriEndpoints | null)?.containerRuntimeEndpoint !== shim) {
    // never switched (or already back): its kubelet config and kubelet stay as they are
    i.log(`${node}: the kubelet is not on the kubelet-shim: left alone`);
    return;
  }
  let target: CriEndpoints;
  if (toShim) target = { containerRuntimeEndpoint: shim, imageServiceEndpoint: shim };
  else if (backup !== undefined) target = parseYaml(backup, { maxAliasCount: 0 }) as CriEndpoints;
  else target = { containerRuntimeEndpoint: `unix://${i.o.nodes.containerdSocket(node)}` };
  const { config, previous } = withRuntimeEndpoints(current, target);
  if (toShim && previous.containerRuntimeEndpoint !== shim) await i.write(node, NODE_PATHS.kubeletEndpointsBackup, stringifyYaml(previous));
  await i.write(node, NODE_PATHS.kubeletConfig, config);
  const starts = await kubeletStarts(i, node);
  await i.o.nodes.restartKubelet(node);
  try {
    // uninstall's probe runs in kube-system: ulysses-system may be gone already (a node finished later)
    await provePodPath(i, node, starts, image, toShim ? ULYSSES_NAMESPACE : 'kube-system');
  } catch (err) {
    if (!toShim) throw err;
    // per-node rollback: the kubelet config as it was (every other field too), restarted
    i.log(`${node}: the kubelet on the shim is not proven (${(err as Error).message}); switching it back`);
    await i.write(node, NODE_PATHS.kubeletConfig, current);
    await i.o.nodes.restartKubelet(node);
    throw new Error(`the kubelet of ${node} on the kubelet-shim: ${(err as Error).message}. Rolled back: ${node}'s kubelet config is as before and its kubelet restarted (the shim service still runs: see its log)`);
  }
}

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: string | undefined) => (s === undefined ? undefined : Buffer.from(s, 'base64').toString());

/** The Secrets that hold `pki` (see {@link EXTENDER_TLS_SECRETS}). */
export function extenderTlsSecrets(pki: ExtenderPki): K8sObject[] {
  const secret = (name: string, data: Record<string, string>) =>
    ({ apiVersion: 'v1', kind: 'Secret', type: 'Opaque', metadata: { name, namespace: ULYSSES_NAMESPACE, labels: { 'app.kubernetes.io/name': 'ulysses-scheduler-extender' } }, data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, b64(v)])) }) as unknown as K8sObject;
  return [
    secret(EXTENDER_TLS_SECRETS.ca, { 'ca.crt': pki.ca.cert, 'ca.key': pki.ca.key, 'scheduler-client.crt': pki.client.cert, 'scheduler-client.key': pki.client.key }),
    secret(EXTENDER_TLS_SECRETS.serving, { 'tls.crt': pki.serving.cert, 'tls.key': pki.serving.key, 'ca.crt': pki.ca.cert }),
  ];
}

/**
 * The extender's PKI for the Service's `clusterIp`: the kept one when it still serves (a re-install
 * changes nothing), else the leaves re-issued from the kept CA (or everything new), with the reason.
 */
async function extenderPki(i: Installer, clusterIp: string): Promise<ExtenderPki> {
  const read = async (name: string) => {
    try {
      return (await i.core.readNamespacedSecret({ name, namespace: ULYSSES_NAMESPACE })).data ?? {};
    } catch (err) {
      if ((err as { code?: number }).code === 404) return undefined;
      throw err;
    }
  };
  const [ca, serving] = [await read(EXTENDER_TLS_SECRETS.ca), await read(EXTENDER_TLS_SECRETS.serving)];
  const kept = ca && serving ? { ca: { cert: unb64(ca['ca.crt']) ?? '', key: unb64(ca['ca.key']) ?? '' }, client: { cert: unb64(ca['scheduler-client.crt']) ?? '', key: unb64(ca['scheduler-client.key']) ?? '' }, serving: { cert: unb64(serving['tls.crt']) ?? '', key: unb64(serving['tls.key']) ?? '' } } : undefined;
  const problem = kept ? pkiProblem(kept, clusterIp) : 'none issued yet';
  if (kept && !problem) {
    i.log('the kept certificates serve: unchanged');
    return kept;
  }
  // the CA is kept while it is valid (kube-scheduler's files on other nodes keep working), else replaced
  const caOk = kept && !/does not parse|the CA expires/.test(problem!);
  i.log(`issuing ${caOk ? 'new serving and client certificates from the kept CA' : 'a new CA with serving and client certificates'} (${problem})`);
  const pki = await issueExtenderPki(clusterIp, caOk ? kept.ca : undefined);
  await i.apply(extenderTlsSecrets(pki));
  return pki;
}

/** kube-scheduler's files on a control-plane node: the client pair (key 0600) and the CA that signs the extender's certificate. */
async function writeSchedulerTls(i: Installer, node: string, pki: ExtenderPki): Promise<void> {
  await i.write(node, SCHEDULER_EXTENDER_TLS_FILES.caFile, pki.ca.cert, 0o644);
  await i.write(node, SCHEDULER_EXTENDER_TLS_FILES.certFile, pki.client.cert, 0o644);
  await i.write(node, SCHEDULER_EXTENDER_TLS_FILES.keyFile, pki.client.key, 0o600);
}

/** Installs the components of `o.components` (default all) in INSTALL_ORDER. */
export async function install(o: InstallOptions): Promise<void> {
  const i = new Installer(o);
  const t0 = Date.now();
  const objects = await i.step('render', () => renderInstall(o));
  await i.step('preflight: Kubernetes version and nodes', async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(o.kubeconfig);
    const version = (await kc.makeApiClient(VersionApi).getCode()).gitVersion;
    const problems = versionProblems(version, (await i.core.listNode()).items, i.components.includes('kubelet-shim'));
    if (problems.length) throw new Error(`nothing changed:\n  ${problems.join('\n  ')}`);
  });
  const controlPlane = CONTROL_PLANE_COMPONENTS.filter((c) => i.components.includes(c === 'kube-controller-manager' ? 'controller-manager' : 'scheduler-extender'));
  if (controlPlane.length) {
    await i.step("preflight: kubeadm's ClusterConfiguration, the static pod manifests and any scheduler config of the operator's can take Ulysses' entries", async () => {
      const cluster = (await i.kubeadmConfig()).text;
      for (const c of controlPlane) clusterConfigurationWith(cluster, c);
      for (const n of i.controlPlaneNodes()) {
        for (const c of controlPlane) manifestWith((await i.manifestBefore(n.name, c)).current, c);
        if (controlPlane.includes('kube-scheduler')) await i.schedulerConfigFor(n.name);
      }
    });
  }
  await i.step('preflight: every claim granted by its namespace', () => checkClaimsGranted(i.core, objects));
  if (i.components.includes('scheduler-extender')) {
    await i.step("preflight: the extender's ClusterIP in the Service subnet and free", async () => {
      const ip = (objects.find((x) => objectId(x) === 'Service/ulysses-scheduler-extender') as { spec?: { clusterIP?: string } } | undefined)?.spec?.clusterIP;
      if (!ip) throw new Error('Service ulysses-scheduler-extender has no fixed clusterIP in the rendered manifests');
      const cluster = (await i.core.readNamespacedConfigMap({ name: 'kubeadm-config', namespace: 'kube-system' })).data?.ClusterConfiguration;
      const subnet = (parseYaml(cluster ?? '{}', { maxAliasCount: 0 }) as { networking?: { serviceSubnet?: string } } | null)?.networking?.serviceSubnet;
      const services = (await i.core.listServiceForAllNamespaces()).items.map((x) => ({ namespace: x.metadata!.namespace!, name: x.metadata!.name!, clusterIPs: x.spec?.clusterIPs ?? (x.spec?.clusterIP ? [x.spec.clusterIP] : []) }));
      const problem = clusterIpProblem(ip, subnet, services);
      if (problem) throw new Error(problem);
    });
  }
  await i.step('namespace and CRD', async () => {
    await i.apply(objects.filter((x) => COMMON_KINDS.has(x.kind) && x.kind !== 'UlyssesConfig'));
    await kubectl(o, ['wait', '--for', 'condition=Established', '--timeout=60s', 'crd/ulyssesconfigs.ulysses.io']);
    // an existing UlyssesConfig keeps the modes users chose: a re-install does not reset them
    const existing = await kubectl(o, ['get', 'ulyssesconfigs', ULYSSES_CONFIG_NAME, '--ignore-not-found', '-o', 'name']);
    if (!existing.trim()) {
      const cfg = objects.find((x) => x.kind === 'UlyssesConfig')!;
      if (!i.components.includes('apf')) ((cfg as { spec?: { apf?: { enabled?: boolean } } }).spec ?? {}).apf = { enabled: false };
      await i.apply([cfg]);
    }
  });
  await i.step('admission policies: claims and node attributes', () => i.apply(objects.filter(isAdmissionObject)));
  for (const c of i.components) {
    const own = componentObjects(objects, c);
    switch (c) {
      case 'apf':
        await i.step('apf: FlowSchema', () => i.apply(own));
        break;
      case 'controller-manager':
        await i.step('controller-manager: Deployment', async () => {
          await i.apply(own);
          await i.deploymentAvailable('ulysses-controller-manager');
          await pollUntil('a controller-manager leader (Lease ulysses-controller-manager)', async () => (await i.leases.readNamespacedLease({ name: 'ulysses-controller-manager', namespace: ULYSSES_NAMESPACE })).spec?.holderIdentity, { timeoutMs: i.timeoutMs, intervalMs: 500 });
        });
        await i.step('controller-manager: --controllers recorded in kubeadm-config (kubeadm upgrade keeps it)', () => i.recordInClusterConfiguration('kube-controller-manager', true));
        for (const n of i.controlPlaneNodes()) {
          await i.step(`controller-manager: kube-controller-manager --controllers on ${n.name}`, async () => {
            await i.editStaticPodIn(n.name, 'kube-controller-manager');
            await i.staticPodWith('kube-controller-manager', n.name, KCM_CONTROLLERS_FLAG, true);
          });
          await i.step(`controller-manager: kcm handback static pod on ${n.name}`, async () => {
            await i.write(n.name, NODE_PATHS.kcmHandback, kcmHandbackPod(ulyssesImage(objects)), 0o600);
            await pollUntil(`kube-system/ulysses-kcm-handback-${n.name} Ready`, async () => {
              const p = await i.core.readNamespacedPod({ name: `ulysses-kcm-handback-${n.name}`, namespace: 'kube-system' }).catch(() => undefined);
              return p && isPodReady(p);
            }, { timeoutMs: i.timeoutMs, intervalMs: 500 });
          });
        }
        break;
      case 'scheduler-extender': {
        const service = own.find((x) => objectId(x) === 'Service/ulysses-scheduler-extender') as { spec?: { clusterIP?: string } } | undefined;
        const clusterIp = service?.spec?.clusterIP;
        if (!clusterIp) throw new InstallError('scheduler-extender: certificates', 'Service ulysses-scheduler-extender has no fixed clusterIP in the rendered manifests');
        const pki = await i.step('scheduler-extender: certificates (its own CA; serving, and kube-scheduler\'s client)', () => extenderPki(i, clusterIp));
        await i.step('scheduler-extender: Deployment', async () => {
          await i.apply(own);
          // only the leader of the extender's replicas is Ready (it alone serves kube-scheduler)
          await i.deploymentAvailable('ulysses-scheduler-extender', 1);
          await pollUntil(
            'a ready endpoint of Service ulysses-scheduler-extender',
            async () => {
              const slices = await i.discovery.listNamespacedEndpointSlice({ namespace: ULYSSES_NAMESPACE, labelSelector: 'kubernetes.io/service-name=ulysses-scheduler-extender' });
              return slices.items.some((sl) => sl.endpoints.some((e) => e.conditions?.ready));
            },
            { timeoutMs: i.timeoutMs, intervalMs: 500 },
          );
        });
        await i.step('scheduler-extender: --config recorded in kubeadm-config (kubeadm upgrade keeps it)', () => i.recordInClusterConfiguration('kube-scheduler', true));
        for (const n of i.controlPlaneNodes()) {
          await i.step(`scheduler-extender: kube-scheduler --config on ${n.name}`, async () => {
            await writeSchedulerTls(i, n.name, pki);
            await i.write(n.name, NODE_PATHS.schedulerConfig, await i.schedulerConfigFor(n.name));
            await i.editStaticPodIn(n.name, 'kube-scheduler');
            await i.staticPodWith('kube-scheduler', n.name, SCHEDULER_CONFIG_FLAG, true);
          });
        }
        break;
      }
      case 'kubelet-shim': {
        await i.step('kubelet-shim: RBAC', () => i.apply(own));
        for (const n of o.nodes.nodes()) {
          await i.step(`kubelet-shim: node service and kubelet endpoint on ${n.name}`, async () => {
            const socket = o.nodes.shimSocket(n.name);
            // the shim runs with the node's kubelet credential (NODE_PATHS.shimKubeconfig): no token
            // of its own; an earlier install's ServiceAccount token goes
            await i.remove(n.name, NODE_PATHS.legacyShimKubeconfig);
            // the node agent listens on the address the controller manager probes: the node's InternalIP
            const address = (await i.core.readNode({ name: n.name })).status?.addresses?.find((a) => a.type === 'InternalIP' && !a.address.includes(':'))?.address;
            await i.write(
              n.name,
              NODE_PATHS.shimConfig,
              stringifyYaml({
                listen: socket,
                backend: o.nodes.containerdSocket(n.name),
                socketMode: '0660',
                pacing: { policy: { type: 'vanilla' } },
                metrics: { port: o.nodes.shimMetricsPort(n.name), host: '127.0.0.1' },
                ...(address ? { nodeAgent: { address } } : {}),
              }),
            );
            await o.nodes.startKubeletShim(n.name);
            await switchKubelet(i, n.name, true, ulyssesImage(objects));
          });
        }
        break;
      }
    }
  }
  await i.step('every component reporting in UlyssesConfig/default', async () => {
    const expected = [
      ...(i.components.includes('controller-manager') ? ['controller-manager'] : []),
      // the APF toggle is applied by the controller manager
      ...(i.components.includes('apf') && i.components.includes('controller-manager') ? ['apf'] : []),
      ...(i.components.includes('scheduler-extender') ? ['scheduler-extender'] : []),
      ...(i.components.includes('kubelet-shim') ? o.nodes.nodes().map((n) => `kubelet-shim/${n.name}`) : []),
    ];
    let last = '';
    await pollUntil(
      `${expected.join(', ')} applying the current generation`,
      async () => {
        const cfg = (await i.custom.getClusterCustomObject({ group: 'ulysses.io', version: 'v1alpha1', plural: 'ulyssesconfigs', name: ULYSSES_CONFIG_NAME })) as UlyssesConfig;
        const rows = statusRows(cfg);
        const missing = expected.filter((k) => !rows.some((r) => r.component === k && r.upToDate));
        last = missing.map((k) => `${k}: ${rows.find((r) => r.component === k)?.message ?? 'no status yet'}`).join('; ');
        return missing.length === 0;
      },
      { timeoutMs: i.timeoutMs, intervalMs: 500, explain: () => `not yet: ${last}` },
    );
  });
  // the scheduling path as users will find it: kube-scheduler, through the extender over its TLS
  if (i.components.includes('scheduler-extender')) {
    await i.step('smoke test: a pod scheduled by kube-scheduler (through the extender) and run', () => runProbePod(i, 'ulysses-install-smoke', ulyssesImage(objects), ULYSSES_NAMESPACE));
  }
  i.log(`Ulysses installed (${i.components.join(', ')}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}

/** Returns the cluster to stock: the steps of `install` in reverse, then every Ulysses object deleted. */
export async function uninstall(o: InstallOptions): Promise<void> {
  const i = new Installer(o);
  const t0 = Date.now();
  const objects = await i.step('render', () => renderInstall(o));
  const skipped: string[] = [];
  for (const c of UNINSTALL_ORDER.filter((x) => i.components.includes(x))) {
    const own = componentObjects(objects, c);
    switch (c) {
      case 'kubelet-shim':
        for (const n of o.nodes.nodes()) {
          const unreachable = await o.nodes.readFile(n.name, NODE_PATHS.kubeletConfig).then(
            () => undefined,
            (err: Error) => err.message,
          );
          if (unreachable !== undefined) {
            if (!o.skipUnreachable) throw new InstallError(`kubelet-shim: kubelet back to containerd on ${n.name}`, `${n.name} cannot be reached (${unreachable}); kcm and kube-scheduler are already stock. Give --skip-unreachable to go on without it`);
            i.log(`${n.name} cannot be reached (${unreachable}): skipped`);
            skipped.push(n.name);
            continue;
          }
          await i.step(`kubelet-shim: kubelet back to containerd on ${n.name}`, async () => {
            await switchKubelet(i, n.name, false, ulyssesImage(objects));
            await i.remove(n.name, NODE_PATHS.kubeletEndpointsBackup);
            await o.nodes.stopKubeletShim(n.name);
            await i.remove(n.name, NODE_PATHS.shimConfig);
            // never NODE_PATHS.shimKubeconfig: it is the kubelet's own
            await i.remove(n.name, NODE_PATHS.legacyShimKubeconfig);
          });
        }
        if (!o.keepObjects) await i.step('kubelet-shim: RBAC', () => i.delete(own));
        break;
      case 'scheduler-extender':
        await i.step('scheduler-extender: --config out of kubeadm-config', () => i.recordInClusterConfiguration('kube-scheduler', false));
        for (const n of i.controlPlaneNodes()) {
          await i.step(`scheduler-extender: stock kube-scheduler on ${n.name}`, async () => {
            await i.editStaticPodOut(n.name, 'kube-scheduler');
            await i.staticPodWith('kube-scheduler', n.name, SCHEDULER_CONFIG_FLAG, false);
            await i.remove(n.name, NODE_PATHS.schedulerConfig);
            await i.remove(n.name, dirname(SCHEDULER_EXTENDER_TLS_FILES.keyFile));
          });
        }
        if (!o.keepObjects) {
          await i.step('scheduler-extender: objects', async () => {
            await i.delete(own);
            await kubectl(o, ['delete', '--ignore-not-found', '-n', ULYSSES_NAMESPACE, 'secret', EXTENDER_TLS_SECRETS.ca, EXTENDER_TLS_SECRETS.serving]);
          });
        } else {
          // off the path means not running either: idle replicas would still watch every pod and node
          await i.step('scheduler-extender: Deployment scaled to 0', () => i.scaleToZero('ulysses-scheduler-extender'));
        }
        break;
      case 'controller-manager':
        await i.step('controller-manager: --controllers out of kubeadm-config', () => i.recordInClusterConfiguration('kube-controller-manager', false));
        for (const n of i.controlPlaneNodes()) {
          await i.step(`controller-manager: stock kube-controller-manager on ${n.name}`, async () => {
            // the handback first: it would edit the manifest being restored
            await i.remove(n.name, NODE_PATHS.kcmHandback);
            await i.editStaticPodOut(n.name, 'kube-controller-manager');
            await i.staticPodWith('kube-controller-manager', n.name, KCM_CONTROLLERS_FLAG, false);
          });
        }
        if (o.keepObjects) await i.step('controller-manager: Deployment scaled to 0', () => i.scaleToZero('ulysses-controller-manager'));
        else await i.step('controller-manager: objects', () => i.delete(own));
        // the node failure detection's taints go with the controller manager that would remove them
        await i.step(`controller-manager: ${NODE_UNREACHABLE_TAINT} taints removed`, async () => {
          for (const n of (await i.core.listNode()).items) await updateNodeTaint(i.client, n.metadata!.name!, NODE_UNREACHABLE_TAINT);
        });
        break;
      case 'apf':
        await i.step('apf: FlowSchema', () => i.delete(own));
        break;
    }
  }
  if (i.components.length === INSTALL_ORDER.length && !o.keepObjects) {
    await i.step('CRD and namespace', async () => {
      await i.delete(objects.filter((x) => COMMON_KINDS.has(x.kind) || isAdmissionObject(x)).reverse());
      for (const n of o.nodes.nodes().filter((x) => x.controlPlane)) {
        // the directory of the scheduler config, the extender's client files and the backups
        await i.remove(n.name, dirname(NODE_PATHS.schedulerConfig));
      }
    });
  }
  i.log(`Ulysses ${o.keepObjects ? 'taken off the path' : 'uninstalled'} (${i.components.join(', ')}) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  if (skipped.length) {
    i.log(`not reached, still on the kubelet-shim: ${skipped.join(', ')}. Once they are back: ulysses uninstall --components kubelet-shim (nodes already on containerd are left alone)`);
  }
}
