/**
 * What `ulysses install` changes on kubeadm's control plane and how uninstall gives it back
 * (manifests/README.md "What the install changes"):
 *
 * - **Recorded in kubeadm's own config**, so that `kubeadm upgrade apply|node` (which regenerates the
 *   static pods from the ConfigMap kube-system/kubeadm-config) keeps it: the extraArgs and
 *   extraVolumes of manifests/kubeadm/clusterconfiguration.yaml, set in the cluster's
 *   ClusterConfiguration the way kubeadm applies them (an extraArg replaces kubeadm's flag of that
 *   name). What the ClusterConfiguration was before is kept in an annotation of the ConfigMap.
 * - **Edited in place** in each control-plane node's static pod manifest, never regenerated: the
 *   operator's hand edits and the effect of their own kubeadm patches stay. The manifest as it was is
 *   kept in /etc/kubernetes/ulysses/backup/ and put back byte for byte on uninstall; a manifest that
 *   changed since the install (a `kubeadm upgrade`) gets only Ulysses' entries taken out.
 * - kube-scheduler's `--config`: an operator's KubeSchedulerConfiguration is merged (Ulysses'
 *   extenders appended to theirs, everything else theirs), not replaced.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isMap, isSeq, parse as parseYaml, parseDocument, stringify as stringifyYaml, type Document, type YAMLMap, type YAMLSeq } from 'yaml';
import { MANIFESTS_DIR } from './overlays.ts';

/** kubeadm's (go-yaml's) layout: sequences not indented under their key, long lines kept whole. */
export const KUBEADM_STYLE = { indentSeq: false, lineWidth: 0 } as const;

export type ControlPlaneComponent = 'kube-controller-manager' | 'kube-scheduler';
export const CONTROL_PLANE_COMPONENTS: readonly ControlPlaneComponent[] = ['kube-controller-manager', 'kube-scheduler'];

/** The ClusterConfiguration section of each component. */
const SECTION = { 'kube-controller-manager': 'controllerManager', 'kube-scheduler': 'scheduler' } as const;

/** Where the install keeps the manifests and the ClusterConfiguration as they were. */
export const BACKUP_DIR = '/etc/kubernetes/ulysses/backup';
export const manifestPath = (c: ControlPlaneComponent) => `/etc/kubernetes/manifests/${c}.yaml`;
export const manifestBackupPath = (c: ControlPlaneComponent) => `${BACKUP_DIR}/${c}.yaml`;
/** On ConfigMap kube-system/kubeadm-config: its ClusterConfiguration before the install. */
export const CLUSTER_CONFIGURATION_BACKUP_ANNOTATION = 'ulysses.io/cluster-configuration-before-install';

/** Bound of what is parsed: a ClusterConfiguration, a manifest or a scheduler config larger than this is refused. */
const MAX_TEXT = 1 << 20;

interface ExtraArg { name: string; value: string }
interface ExtraVolume { name: string; hostPath: string; mountPath: string; readOnly?: boolean; pathType?: string }
interface Fragment { extraArgs: ExtraArg[]; extraVolumes: ExtraVolume[] }

let fragment: Record<string, Partial<Fragment> | undefined> | undefined;
/** Ulysses' entries for `c` (manifests/kubeadm/clusterconfiguration.yaml, the one source; read once). */
export function ulyssesEntries(c: ControlPlaneComponent): Fragment {
  fragment ??= parseYaml(readFileSync(join(MANIFESTS_DIR, 'kubeadm', 'clusterconfiguration.yaml'), 'utf8')) as Record<string, Partial<Fragment> | undefined>;
  const s = fragment[SECTION[c]];
  return { extraArgs: s?.extraArgs ?? [], extraVolumes: s?.extraVolumes ?? [] };
}

function parseBounded(text: string, what: string): Document {
  if (text.length > MAX_TEXT) throw new Error(`${what}: ${text.length} bytes, more than the ${MAX_TEXT} this reads`);
  const doc = parseDocument(text);
  if (doc.errors.length) throw new Error(`${what}: not YAML: ${doc.errors[0]!.message}`);
  return doc;
}

const CLUSTER_CONFIGURATION = 'ConfigMap kube-system/kubeadm-config, ClusterConfiguration';

/** The parsed ClusterConfiguration, refused (naming the field) unless kubeadm.k8s.io/v1beta4, whose extraArgs are lists. */
function clusterDoc(text: string): Document {
  const doc = parseBounded(text, CLUSTER_CONFIGURATION);
  const apiVersion = doc.get('apiVersion');
  if (doc.get('kind') !== 'ClusterConfiguration') throw new Error(`${CLUSTER_CONFIGURATION}: kind is ${String(doc.get('kind'))}, not ClusterConfiguration`);
  if (apiVersion !== 'kubeadm.k8s.io/v1beta4') throw new Error(`${CLUSTER_CONFIGURATION}: apiVersion ${String(apiVersion)}; Ulysses edits kubeadm.k8s.io/v1beta4 (kubeadm 1.31 and later)`);
  return doc;
}

/** The named-entry list at `path` ({name: ...} items), created when absent. */
function namedList(doc: Document, path: string[]): YAMLSeq {
  const existing = doc.getIn(path);
  if (isSeq(existing)) return existing;
  if (existing !== undefined && existing !== null) throw new Error(`${CLUSTER_CONFIGURATION}: ${path.join('.')} is not a list`);
  doc.setIn(path, doc.createNode([]));
  return doc.getIn(path) as YAMLSeq;
}

const itemName = (x: unknown) => (isMap(x) ? (x as YAMLMap).get('name') : undefined);

/** `text` with `entries` at `path`: an entry replaces the one of the same name, else is appended. */
function setNamed(doc: Document, path: string[], entries: readonly object[]): void {
  if (!entries.length) return;
  const seq = namedList(doc, path);
  // kubeadm's `scheduler: {}` is a flow map: what goes in is written in block style, as kubeadm does
  for (let i = 1; i < path.length; i++) {
    const parent = doc.getIn(path.slice(0, i));
    if (isMap(parent)) parent.flow = false;
  }
  seq.flow = false;
  for (const e of entries) {
    const name = (e as { name: string }).name;
    const node = doc.createNode(e);
    const i = seq.items.findIndex((x) => itemName(x) === name);
    if (i >= 0) seq.items[i] = node;
    else seq.items.push(node);
  }
}

/** The ClusterConfiguration with Ulysses' extraArgs/extraVolumes of `c` (idempotent). */
export function clusterConfigurationWith(text: string, c: ControlPlaneComponent): string {
  const doc = clusterDoc(text);
  const ours = ulyssesEntries(c);
  setNamed(doc, [SECTION[c], 'extraArgs'], ours.extraArgs);
  setNamed(doc, [SECTION[c], 'extraVolumes'], ours.extraVolumes);
  return doc.toString(KUBEADM_STYLE);
}

/**
 * The ClusterConfiguration without Ulysses' entries of `c`: `before` (the text of before the install)
 * when nothing else changed since, else each of Ulysses' entries replaced by `before`'s entry of that
 * name or removed.
 */
export function clusterConfigurationWithout(text: string, before: string | undefined, c: ControlPlaneComponent): string {
  if (!carriesEntries(clusterDoc(text), c)) return text;
  if (before !== undefined) {
    // exactly what the install made of `before` (with or without the other component's entries,
    // added in install order): what it was made from
    const other = CONTROL_PLANE_COMPONENTS.find((x) => x !== c)!;
    const withOther = clusterConfigurationWith(before, other);
    const installed = (base: string) => (CONTROL_PLANE_COMPONENTS.indexOf(c) < CONTROL_PLANE_COMPONENTS.indexOf(other) ? clusterConfigurationWith(clusterConfigurationWith(base, c), other) : clusterConfigurationWith(clusterConfigurationWith(base, other), c));
    if (text === clusterConfigurationWith(before, c)) return before;
    if (text === installed(before)) return withOther;
  }
  const doc = clusterDoc(text);
  const prior = before === undefined ? undefined : clusterDoc(before);
  const ours = ulyssesEntries(c);
  for (const [key, entries] of [['extraArgs', ours.extraArgs], ['extraVolumes', ours.extraVolumes]] as const) {
    const path = [SECTION[c], key];
    const seq = doc.getIn(path);
    if (!isSeq(seq)) continue;
    const priorSeq = prior?.getIn(path);
    for (const e of entries) {
      // only Ulysses' own entry: an extraArg of that name with another value is someone else's
      const i = seq.items.findIndex((x) => itemName(x) === e.name && (key === 'extraVolumes' || (x as YAMLMap).get('value') === (e as ExtraArg).value));
      if (i < 0) continue;
      const old = isSeq(priorSeq) ? priorSeq.items.find((x) => itemName(x) === e.name) : undefined;
      if (old) seq.items[i] = doc.createNode((old as YAMLMap).toJSON());
      else seq.items.splice(i, 1);
    }
    // a list or section emptied goes, unless it was there before
    if (!seq.items.length && prior?.getIn(path) === undefined) doc.deleteIn(path);
  }
  const section = doc.get(SECTION[c]);
  if (isMap(section) && !section.items.length && !prior?.has(SECTION[c])) doc.delete(SECTION[c]);
  return doc.toString(KUBEADM_STYLE);
}

/** Whether any of Ulysses' entries of `c` (an extraArg with its name and value, an extraVolume of its name) is in the document. */
function carriesEntries(doc: Document, c: ControlPlaneComponent): boolean {
  const ours = ulyssesEntries(c);
  const items = (key: string) => {
    const seq = doc.getIn([SECTION[c], key]);
    return isSeq(seq) ? seq.items : [];
  };
  return (
    items('extraArgs').some((x) => ours.extraArgs.some((a) => itemName(x) === a.name && (x as YAMLMap).get('value') === a.value)) ||
    items('extraVolumes').some((x) => ours.extraVolumes.some((v) => itemName(x) === v.name))
  );
}

/** True when the ClusterConfiguration carries Ulysses' entries of `c`. */
export function clusterConfigurationHas(text: string, c: ControlPlaneComponent): boolean {
  return JSON.stringify(clusterDoc(clusterConfigurationWith(text, c)).toJS({ maxAliasCount: 0 })) === JSON.stringify(clusterDoc(text).toJS({ maxAliasCount: 0 }));
}

// --- static pod manifests ---

const flagName = (arg: string) => /^--([^=]+)=/.exec(arg)?.[1];

function manifestDoc(text: string, c: ControlPlaneComponent): { doc: Document; command: YAMLSeq } {
  const doc = parseBounded(text, manifestPath(c));
  const command = doc.getIn(['spec', 'containers', 0, 'command']);
  if (doc.get('kind') !== 'Pod' || !isSeq(command)) throw new Error(`${manifestPath(c)}: not a static pod with a container command`);
  return { doc, command };
}

/** The container's flags `--name=value` of `name`, in order. */
export function flagValues(manifest: string, c: ControlPlaneComponent, name: string): string[] {
  const { command } = manifestDoc(manifest, c);
  return command.items.map((x) => String((x as { value?: unknown }).value ?? x)).filter((a) => flagName(a) === name).map((a) => a.slice(name.length + 3));
}

/** Sets `--name=value` where the first flag of that name is (other occurrences removed), else appends it; `value` undefined removes them. */
function setFlag(command: YAMLSeq, doc: Document, name: string, values: readonly string[]): void {
  const at = command.items.findIndex((x) => flagName(String((x as { value?: unknown }).value ?? x)) === name);
  command.items = command.items.filter((x) => flagName(String((x as { value?: unknown }).value ?? x)) !== name);
  const nodes = values.map((v) => doc.createNode(`--${name}=${v}`));
  if (at >= 0) command.items.splice(at, 0, ...nodes);
  else command.items.push(...nodes);
}

/** Sets (replacing the same name) or removes the named item of the list at `path`. */
function setItem(doc: Document, path: (string | number)[], name: string, value: object | undefined): void {
  let seq = doc.getIn(path);
  if (!isSeq(seq)) {
    if (value === undefined) return;
    doc.setIn(path, doc.createNode([]));
    seq = doc.getIn(path);
  }
  const list = seq as YAMLSeq;
  const i = list.items.findIndex((x) => itemName(x) === name);
  if (value === undefined) {
    if (i >= 0) list.items.splice(i, 1);
  } else if (i >= 0) list.items[i] = doc.createNode(value);
  else list.items.push(doc.createNode(value));
}

/** The manifest's volume and volumeMount of an extraVolume (what kubeadm writes for it). */
const volumeOf = (v: ExtraVolume) => ({ name: v.name, hostPath: { path: v.hostPath, ...(v.pathType ? { type: v.pathType } : {}) } });
const mountOf = (v: ExtraVolume) => ({ name: v.name, mountPath: v.mountPath, ...(v.readOnly ? { readOnly: true } : {}) });

/** The manifest as kubeadm writes it with Ulysses' extraArgs/extraVolumes of `c`, edited in place (idempotent). */
export function manifestWith(text: string, c: ControlPlaneComponent): string {
  const { doc, command } = manifestDoc(text, c);
  const ours = ulyssesEntries(c);
  for (const a of ours.extraArgs) setFlag(command, doc, a.name, [a.value]);
  for (const v of ours.extraVolumes) {
    setItem(doc, ['spec', 'volumes'], v.name, volumeOf(v));
    setItem(doc, ['spec', 'containers', 0, 'volumeMounts'], v.name, mountOf(v));
  }
  return doc.toString(KUBEADM_STYLE);
}

/**
 * The manifest without Ulysses' entries of `c`: `before` byte for byte when the manifest is still
 * what the install made of it, else each of Ulysses' flags set back to `before`'s (or removed) and
 * its volumes removed.
 */
export function manifestWithout(text: string, before: string | undefined, c: ControlPlaneComponent): string {
  if (before !== undefined && text === manifestWith(before, c)) return before;
  const { doc, command } = manifestDoc(text, c);
  const ours = ulyssesEntries(c);
  // only flags that carry Ulysses' value: a manifest without them (never installed, or given back
  // already) is left as it is
  if (!ours.extraArgs.some((a) => flagValues(text, c, a.name).includes(a.value)) && !ours.extraVolumes.some((v) => hostPathOf(text, c, v.mountPath) === v.hostPath)) return text;
  for (const a of ours.extraArgs) {
    if (flagValues(text, c, a.name).includes(a.value)) setFlag(command, doc, a.name, before === undefined ? [] : flagValues(before, c, a.name));
  }
  for (const v of ours.extraVolumes) {
    setItem(doc, ['spec', 'volumes'], v.name, undefined);
    setItem(doc, ['spec', 'containers', 0, 'volumeMounts'], v.name, undefined);
  }
  return doc.toString(KUBEADM_STYLE);
}

/**
 * The host path of `containerPath` in the static pod (through the hostPath volume mounted at it or
 * at a directory above it); undefined when no hostPath volume holds it.
 */
export function hostPathOf(manifest: string, c: ControlPlaneComponent, containerPath: string): string | undefined {
  const pod = manifestDoc(manifest, c).doc.toJS({ maxAliasCount: 0 }) as { spec?: { volumes?: { name: string; hostPath?: { path: string } }[]; containers?: { volumeMounts?: { name: string; mountPath: string }[] }[] } };
  const mounts = [...(pod.spec?.containers?.[0]?.volumeMounts ?? [])].sort((a, b) => b.mountPath.length - a.mountPath.length);
  for (const m of mounts) {
    const dir = m.mountPath.replace(/\/+$/, '');
    if (containerPath !== dir && !containerPath.startsWith(`${dir}/`)) continue;
    const host = pod.spec?.volumes?.find((v) => v.name === m.name)?.hostPath?.path;
    if (!host) return undefined;
    return host.replace(/\/+$/, '') + containerPath.slice(dir.length);
  }
  return undefined;
}

// --- kube-scheduler's configuration ---

interface SchedulerConfig { apiVersion?: string; kind?: string; clientConnection?: { kubeconfig?: string }; extenders?: { urlPrefix?: string }[]; [k: string]: unknown }

/**
 * kube-scheduler's configuration with Ulysses' extenders (`ours`, manifests/kubeadm/kube-scheduler-config.yaml):
 * - no operator config: `ours`, its `clientConnection.kubeconfig` the scheduler's `--kubeconfig` flag
 *   (kube-scheduler ignores that flag once it has `--config`);
 * - the operator's (`theirs`, read from `source`): theirs with Ulysses' extenders appended (an
 *   extender of theirs at one of Ulysses' URLs replaced), every other field theirs, the kubeconfig
 *   theirs or else the flag's.
 */
export function mergedSchedulerConfig(ours: string, theirs: string | undefined, kubeconfigFlag: string | undefined, source: string): string {
  const own = parseYaml(ours, { maxAliasCount: 0 }) as SchedulerConfig;
  if (theirs === undefined) {
    if (!kubeconfigFlag || own.clientConnection?.kubeconfig === kubeconfigFlag) return ours;
    const doc = parseDocument(ours);
    doc.setIn(['clientConnection', 'kubeconfig'], kubeconfigFlag);
    return doc.toString();
  }
  const cfg = parseBounded(theirs, source).toJS({ maxAliasCount: 0 }) as SchedulerConfig | null;
  if (!cfg || cfg.kind !== 'KubeSchedulerConfiguration') throw new Error(`${source}: kind is ${String(cfg?.kind)}, not KubeSchedulerConfiguration`);
  if (cfg.apiVersion !== own.apiVersion) throw new Error(`${source}: apiVersion ${String(cfg.apiVersion)}; Ulysses merges its extenders into ${own.apiVersion} (convert it first)`);
  if (cfg.extenders !== undefined && !Array.isArray(cfg.extenders)) throw new Error(`${source}: extenders is not a list`);
  const urls = new Set((own.extenders ?? []).map((e) => e.urlPrefix));
  const merged: SchedulerConfig = {
    ...cfg,
    clientConnection: { ...cfg.clientConnection, kubeconfig: cfg.clientConnection?.kubeconfig ?? kubeconfigFlag ?? own.clientConnection?.kubeconfig },
    extenders: [...(cfg.extenders ?? []).filter((e) => !urls.has(e.urlPrefix)), ...(own.extenders ?? [])],
  };
  return `# ${source} with the Ulysses scheduler extender's entries appended (manifests/kubeadm/kube-scheduler-config.yaml); written by ulysses install\n${stringifyYaml(merged)}`;
}
