/**
 * The extender's view of the cluster (nodeCacheCapable: the scheduler sends node NAMES only): node
 * objects and the pods that hold capacity on them, fed by the nodes and pods informers
 * (core/informer.ts) or, in tests and the benchmark, directly through upsertNode/upsertPod.
 *
 * A pod holds capacity on node N while it is not terminal and either is bound to N
 * (`spec.nodeName`) or carries the reservation annotation `ulysses.io/reserved-node: N` written by
 * our bind before the binding (see server.ts). Its reservation is in `ulysses.io/rt-cores` (cores
 * of its server / reservation / EDF tasks) and `ulysses.io/tdma-slots` (slot indices on the network
 * named by its `ulysses.io/tdma`). Everything is rebuilt from those annotations after a restart.
 * Deleted or terminal (Succeeded/Failed) pods release their reservation; a deleted pod's UID is
 * kept (bounded) so that no later object of it, such as a bind's PATCH result that arrives after
 * the delete event, brings the pod and its reservation back.
 *
 * Annotations are parsed once per object version (the parse results are cached on the records), so
 * a filter over 1000 nodes only runs the analyses. What a node offers independently of the pod being
 * placed (its parsed RT pods, sorted; the deferrable-server UIDs per server period) is cached per
 * node version ({@link ClusterState.rtSummary}): an informer event bumps that version only when it
 * changes something the analyses read, which invalidates the summary and every verdict the
 * extender cached for the node (server.ts):
 * - a node: its `ulysses.io/rt-scheduler` and `ulysses.io/tdma-network` labels and its
 *   `ulysses.io/assurance` and `ulysses.io/rt-capacity` annotations ({@link nodeFingerprint}; the
 *   analyses read nothing else of the node object: not its status, allocatable or unschedulable,
 *   which kube-scheduler's own plugins check), or the node appearing / being deleted;
 * - a pod holding capacity: the node it holds capacity on (bound node, else the reservation; none
 *   once terminal), its UID, and its `ulysses.io/rt`, `ulysses.io/rt-cores`, `ulysses.io/tdma`,
 *   `ulysses.io/tdma-slots` annotation texts ({@link podFingerprint}); it bumps the node it leaves
 *   and the node it joins. TDMA networks have their own version, bumped when a pod holding slots
 *   on the network comes, goes or changes those fields.
 * A status-only update (KWOK and the kubelet report pod and node status all the time), or a change
 * of any other label/annotation, only replaces the stored object (the bind reads the latest one),
 * keeping the parses and every cached verdict.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { objectKey } from '../../core/objects.ts';
import { parseAssuranceAnnotation, ASSURANCE_ANNOTATION, type AssuranceVector } from '../assurance/assurance.ts';
import { parseRtAnnotation, parseRtCapacityAnnotation, RT_KINDS, type Parsed, type RtCapacity, type RtKind, type RtPodSpec } from '../realtime/annotations.ts';
import type { ParsedRtPod } from '../realtime/what-if.ts';
import { parseTdmaAnnotation, type TdmaRequest } from '../tdma/tdma.ts';
import {
  RT_ANNOTATION,
  RT_CAPACITY_ANNOTATION,
  RT_CORES_ANNOTATION,
  RT_SCHEDULER_LABEL,
  TDMA_ANNOTATION,
  TDMA_NETWORK_LABEL,
  TDMA_SLOTS_ANNOTATION,
} from '../schedulability.ts';

/** Written by bind together with rt-cores / tdma-slots, before the binding (see header). */
export const RESERVED_NODE_ANNOTATION = 'ulysses.io/reserved-node';

export interface NodeInfo {
  readonly name: string;
  readonly node: V1Node;
  /** The name as JSON text: the verbs' answers are written as text (server.ts AnswerJson). */
  readonly nameJson: string;
  /** `ulysses.io/assurance` (absent = no assurance: every level 0). */
  readonly assurance: Parsed<AssuranceVector>;
  /** The parsed vector as JSON, for messages. */
  readonly assuranceText: string;
  /** null: not an RT node. */
  readonly rtKind: RtKind | null | { readonly error: string };
  readonly rtCapacity: Parsed<RtCapacity>;
  readonly tdmaNetwork: string | undefined;
  /** {@link nodeFingerprint} of `node`: what the analyses read from it. */
  readonly fingerprint: string;
  /** Bumped whenever what the analyses read from the node or the pods holding capacity on it changes (see header). */
  version: number;
}

/** Does the pod hold what the analyses count (an RT share or TDMA slots on a node)? */
function holdsAnalysed(rec: PodRecord): boolean {
  return rec.node !== undefined && (rec.rt !== undefined || rec.tdmaSlots !== undefined);
}

export interface PodRecord {
  readonly key: string;
  readonly uid: string;
  readonly name: string;
  readonly pod: V1Pod;
  /** The node the pod holds capacity on (bound, else reserved), if any. */
  readonly node: string | undefined;
  readonly rt: Parsed<RtPodSpec> | undefined;
  readonly rtCores: number[] | undefined;
  readonly tdma: Parsed<TdmaRequest> | undefined;
  readonly tdmaSlots: number[] | undefined;
  /** {@link podFingerprint} of `pod`: what the analyses read from it. */
  readonly fingerprint: string;
}

/**
 * Everything the analyses read from a node object, as one string: two node objects with the same
 * fingerprint get the same verdicts (the node version is bumped only when it changes).
 */
export function nodeFingerprint(node: V1Node): string {
  const labels = node.metadata?.labels ?? {};
  const ann = node.metadata?.annotations ?? {};
  return JSON.stringify([labels[RT_SCHEDULER_LABEL], labels[TDMA_NETWORK_LABEL], ann[ASSURANCE_ANNOTATION], ann[RT_CAPACITY_ANNOTATION]]);
}

/**
 * Everything the analyses read from a pod holding capacity, as one string: where it holds capacity
 * ({@link holdingNode}: bound node, reservation, terminal phase), its UID, and the raw texts of its
 * RT/TDMA annotations and reservations. Its name is part of the record key, so not needed here.
 */
export function podFingerprint(pod: V1Pod): string {
  const ann = pod.metadata?.annotations ?? {};
  return JSON.stringify([holdingNode(pod), pod.metadata?.uid, ann[RT_ANNOTATION], ann[RT_CORES_ANNOTATION], ann[TDMA_ANNOTATION], ann[TDMA_SLOTS_ANNOTATION]]);
}

function intList(text: string | undefined): number[] | undefined {
  if (text === undefined) return undefined;
  try {
    const v = JSON.parse(text) as unknown;
    if (Array.isArray(v) && v.length <= 4096 && v.every((x) => Number.isSafeInteger(x) && x >= 0)) return v as number[];
  } catch {
    /* not a reservation we can use */
  }
  return undefined;
}

export function isTerminal(pod: V1Pod): boolean {
  return pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed';
}

/** The node a pod holds capacity on: bound node, else the reservation annotation. */
export function holdingNode(pod: V1Pod): string | undefined {
  if (isTerminal(pod)) return undefined;
  return pod.spec?.nodeName || pod.metadata?.annotations?.[RESERVED_NODE_ANNOTATION] || undefined;
}

/**
 * A node as the extender reads it (its informers' transform, server.ts): name, UID,
 * resourceVersion, labels and annotations. Status (conditions, heartbeats, allocatable) and spec are
 * read by kube-scheduler's own plugins, not here, so a status update leaves the projection unchanged
 * (and the informer thread does not even hand it over, core/informer-thread.ts).
 */
export function extenderNodeProjection(node: V1Node): V1Node {
  const m = node.metadata ?? {};
  return { metadata: { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels, annotations: m.annotations } };
}

/**
 * A pod as the extender reads it: name, namespace, UID, resourceVersion, labels and annotations
 * (criticality, policies, RT/TDMA demands and reservations), spec.nodeName, spec.priority and
 * priorityClassName (criticality), and status.phase only when terminal ({@link holdingNode}). A
 * kubelet's status update leaves it unchanged.
 */
export function extenderPodProjection(pod: V1Pod): V1Pod {
  const m = pod.metadata ?? {};
  return {
    metadata: { name: m.name, namespace: m.namespace, uid: m.uid, resourceVersion: m.resourceVersion, labels: m.labels, annotations: m.annotations },
    spec: { nodeName: pod.spec?.nodeName, priority: pod.spec?.priority, priorityClassName: pod.spec?.priorityClassName, containers: [] },
    ...(isTerminal(pod) ? { status: { phase: pod.status!.phase } } : {}),
  };
}

export function nodeInfoOf(node: V1Node, version = 0): NodeInfo {
  const labels = node.metadata?.labels ?? {};
  const ann = node.metadata?.annotations ?? {};
  const kindLabel = labels[RT_SCHEDULER_LABEL];
  const rtKind: NodeInfo['rtKind'] =
    kindLabel === undefined
      ? null
      : (RT_KINDS as readonly string[]).includes(kindLabel)
        ? (kindLabel as RtKind)
        : { error: `label ${RT_SCHEDULER_LABEL}: unknown kind ${JSON.stringify(kindLabel)} (expected ${RT_KINDS.join(', ')})` };
  const assurance: Parsed<AssuranceVector> = ann[ASSURANCE_ANNOTATION] === undefined ? { ok: true, value: {} } : parseAssuranceAnnotation(ann[ASSURANCE_ANNOTATION]);
  const name = node.metadata?.name ?? '';
  return {
    name,
    nameJson: JSON.stringify(name),
    node,
    assurance,
    assuranceText: assurance.ok ? JSON.stringify(assurance.value) : '(malformed)',
    rtKind,
    // a node of an RT kind without the capacity annotation has one core
    rtCapacity: ann[RT_CAPACITY_ANNOTATION] === undefined ? { ok: true, value: { cores: 1 } } : parseRtCapacityAnnotation(ann[RT_CAPACITY_ANNOTATION]),
    tdmaNetwork: labels[TDMA_NETWORK_LABEL] || undefined,
    fingerprint: nodeFingerprint(node),
    version,
  };
}

export function podRecordOf(pod: V1Pod): PodRecord {
  const ann = pod.metadata?.annotations ?? {};
  return {
    key: objectKey(pod),
    uid: pod.metadata?.uid ?? objectKey(pod),
    name: objectKey(pod),
    pod,
    node: holdingNode(pod),
    rt: ann[RT_ANNOTATION] === undefined ? undefined : parseRtAnnotation(ann[RT_ANNOTATION]),
    rtCores: intList(ann[RT_CORES_ANNOTATION]),
    tdma: ann[TDMA_ANNOTATION] === undefined ? undefined : parseTdmaAnnotation(ann[TDMA_ANNOTATION]),
    tdmaSlots: intList(ann[TDMA_SLOTS_ANNOTATION]),
    fingerprint: podFingerprint(pod),
  };
}

/** What the RT analyses need from a node's pods, independent of the pod being placed (see header). */
export interface RtSummary {
  /** The node version it was computed at. */
  readonly version: number;
  /** Parsed RT pods holding capacity on the node, sorted by UID. */
  readonly pods: readonly ParsedRtPod[];
  /** Pods whose ulysses.io/rt does not parse (ignored by the analyses). */
  readonly skipped: readonly string[];
  /** UIDs of every pod in pods or skipped. */
  readonly uids: ReadonlySet<string>;
  /** Deferrable-server pods' UIDs per server period, sorted (ties of the rate-monotonic order are broken by UID). */
  readonly dsUidsByPeriod: ReadonlyMap<number, readonly string[]>;
}

/** Deleted pods' UIDs remembered (ClusterState tombstones). */
export const TOMBSTONES = 10_000;

/** Is resourceVersion `a` older than `b`? (etcd revisions are integers; opaque ones never compare as older) */
function olderThan(a: string | undefined, b: string | undefined): boolean {
  if (!a || !b || !/^\d{1,30}$/.test(a) || !/^\d{1,30}$/.test(b)) return false;
  return BigInt(a) < BigInt(b);
}

/** {@link NodeSlots} flag: the node is a deferrable-server node (a deferrable-server pod's verdict there depends on its tie rank). */
export const SLOT_DEFERRABLE_SERVER = 1;
/** {@link NodeSlots} flag: the node's name is its own JSON text between quotes (no character to escape). */
export const SLOT_PLAIN_NAME = 2;

/** `a` in a new array of at least `n` entries (its length doubled), the new entries `fill`. */
export function grown<A extends Float64Array | Int32Array | Uint8Array>(a: A, n: number, fill = 0): A {
  const b = new (a.constructor as new (length: number) => A)(Math.max(n, a.length * 2, 64));
  b.fill(fill, a.length);
  b.set(a);
  return b;
}

/** A node's name as JSON text: between quotes for a name with nothing to escape ({@link SLOT_PLAIN_NAME}). */
export function nameJson(name: string, plain: number): string {
  return plain ? `"${name}"` : JSON.stringify(name);
}

/**
 * The nodes by slot, a small integer per node (a deleted node's slot is given to the next new
 * node), with per slot the node's stamp and flags in typed arrays. A stamp is the state's
 * generation at the node's last version bump, so no two changes of any nodes share one: a verdict
 * cached under a slot's stamp (server.ts DemandVerdicts) is valid exactly while the stamp is the
 * same, also after the slot went to another node. The verbs' per-node loop reads these contiguous
 * arrays instead of a NodeInfo and the objects a cached verdict is made of, each a cache miss of
 * its own when a request finds the CPU caches cold (the idle gap a binding leaves between two
 * scheduling cycles).
 */
export interface NodeSlots {
  readonly index: ReadonlyMap<string, number>;
  readonly infos: ReadonlyArray<NodeInfo | undefined>;
  /** replaced (grown) when nodes are added: read it again after any change of the state */
  readonly stamps: Float64Array;
  readonly flags: Uint8Array;
}

export class ClusterState {
  private readonly nodes = new Map<string, NodeInfo>();
  private readonly slotIndex = new Map<string, number>();
  private readonly slotInfos: Array<NodeInfo | undefined> = [];
  private slotStamps = new Float64Array(64).fill(-1);
  private slotFlags = new Uint8Array(64);
  private readonly freeSlots: number[] = [];
  private readonly pods = new Map<string, PodRecord>();
  private readonly podsByNode = new Map<string, Set<string>>();
  private readonly tdmaPods = new Set<string>();
  private readonly networkVersions = new Map<string, number>();
  private readonly nodeVersions = new Map<string, number>();
  private readonly rtSummaries = new Map<string, RtSummary>();
  /** UID -> number of records holding capacity somewhere (a pod being placed that already holds some is excluded from the analyses). */
  private readonly holders = new Map<string, number>();
  /**
   * UIDs of deleted pods (oldest dropped past {@link TOMBSTONES}): an object of such a UID is never
   * taken in again. A bind's PATCH result can arrive after the pod's delete event was handled; taken
   * in, it would hold its slots and cores until a restart (the informers' relist knows nothing of
   * it). The apiserver never gives a deleted pod's UID to another pod, so the set needs no clearing.
   */
  private readonly tombstones = new Set<string>();

  node(name: string): NodeInfo | undefined {
    return this.nodes.get(name);
  }

  /** The nodes by slot (see {@link NodeSlots}). */
  get slots(): NodeSlots {
    return { index: this.slotIndex, infos: this.slotInfos, stamps: this.slotStamps, flags: this.slotFlags };
  }

  /** The node's slot, or undefined for a node the state does not have. */
  slotOf(name: string): number | undefined {
    return this.slotIndex.get(name);
  }

  /** The stamp of the node in `slot` (see {@link NodeSlots}). */
  stampOf(slot: number): number {
    return this.slotStamps[slot]!;
  }

  /** `info` stored as its node's, in the node's slot (a free one, or a new one, for a new node). */
  private setNode(info: NodeInfo): void {
    this.nodes.set(info.name, info);
    let slot = this.slotIndex.get(info.name);
    if (slot === undefined) {
      slot = this.freeSlots.pop() ?? this.slotInfos.length;
      if (slot >= this.slotStamps.length) {
        this.slotStamps = grown(this.slotStamps, slot + 1, -1);
        this.slotFlags = grown(this.slotFlags, slot + 1);
      }
      this.slotIndex.set(info.name, slot);
    }
    this.slotInfos[slot] = info;
    this.slotFlags[slot] = (info.rtKind === 'deferrable-server' ? SLOT_DEFERRABLE_SERVER : 0) | (info.nameJson === `"${info.name}"` ? SLOT_PLAIN_NAME : 0);
  }

  nodeNames(): string[] {
    return [...this.nodes.keys()];
  }

  pod(key: string): PodRecord | undefined {
    return this.pods.get(key);
  }

  get podCount(): number {
    return this.pods.size;
  }

  private changes = 0;

  /** Bumped with every node and network version: equal values mean no verdict can have changed in between. */
  get generation(): number {
    return this.changes;
  }

  private bumpNode(name: string | undefined): void {
    if (!name) return;
    this.changes++;
    const v = (this.nodeVersions.get(name) ?? 0) + 1;
    this.nodeVersions.set(name, v);
    const info = this.nodes.get(name);
    if (info) info.version = v;
    const slot = this.slotIndex.get(name);
    if (slot !== undefined) this.slotStamps[slot] = this.changes;
    for (const l of this.nodeListeners) l(name);
  }

  private readonly nodeListeners = new Set<(node: string) => void>();

  /**
   * Calls `listener(node)` whenever the node's version is bumped (what the analyses read of the
   * node or of its pods changed), synchronously inside the change: it should only take note.
   * Returns the function that removes it.
   */
  onNodeChange(listener: (node: string) => void): () => void {
    this.nodeListeners.add(listener);
    return () => this.nodeListeners.delete(listener);
  }

  private readonly releaseListeners = new Set<() => void>();

  /**
   * Calls `listener()` whenever capacity may have been released: a pod that held capacity is gone,
   * or a node was added or changed what the analyses read of it. Synchronously inside the change,
   * after it: it should only take note. Returns the function that removes it.
   */
  onRelease(listener: () => void): () => void {
    this.releaseListeners.add(listener);
    return () => this.releaseListeners.delete(listener);
  }

  private release(): void {
    for (const l of this.releaseListeners) l();
  }

  private readonly podListeners = new Set<(key: string) => void>();

  /**
   * Calls `listener(key)` after a pod was taken in (upsertPod, assumePod), synchronously: it should
   * only take note. Returns the function that removes it.
   */
  onPod(listener: (key: string) => void): () => void {
    this.podListeners.add(listener);
    return () => this.podListeners.delete(listener);
  }

  private bumpNetwork(rec: PodRecord | undefined): void {
    if (!rec?.tdma?.ok) return;
    this.changes++;
    this.networkVersions.set(rec.tdma.value.network, (this.networkVersions.get(rec.tdma.value.network) ?? 0) + 1);
  }

  nodeVersion(name: string): number {
    return this.nodeVersions.get(name) ?? 0;
  }

  networkVersion(network: string): number {
    return this.networkVersions.get(network) ?? 0;
  }

  upsertNode(node: V1Node): void {
    const name = node.metadata?.name;
    if (!name) return;
    const old = this.nodes.get(name);
    if (old && old.node.metadata?.resourceVersion === node.metadata?.resourceVersion && old.node.metadata?.resourceVersion) return;
    if (old && old.fingerprint === nodeFingerprint(node)) {
      // nothing the analyses read changed (e.g. a status update): keep the parses and the version
      this.setNode({ ...old, node });
      return;
    }
    this.setNode(nodeInfoOf(node));
    this.bumpNode(name);
    this.release();
  }

  deleteNode(node: V1Node | string): void {
    const name = typeof node === 'string' ? node : node.metadata?.name;
    if (!name) return;
    this.nodes.delete(name);
    this.bumpNode(name);
    const slot = this.slotIndex.get(name);
    if (slot === undefined) return;
    this.slotIndex.delete(name);
    this.slotInfos[slot] = undefined;
    this.slotFlags[slot] = 0;
    this.freeSlots.push(slot);
  }

  /**
   * Adds/updates a pod; an object older than the cached one (e.g. a late watch event after our own
   * patch, or after {@link resyncPods}) is ignored. resourceVersions of one key are ordered even
   * across UIDs (a pod recreated under the same name is a later write).
   */
  upsertPod(pod: V1Pod): void {
    const key = objectKey(pod);
    if (pod.metadata?.uid && this.tombstones.has(pod.metadata.uid)) return;
    const old = this.pods.get(key);
    if (old && olderThan(pod.metadata?.resourceVersion, old.pod.metadata?.resourceVersion)) return;
    if (old && old.pod.metadata?.resourceVersion && old.pod.metadata.resourceVersion === pod.metadata?.resourceVersion && old.uid === pod.metadata?.uid) return;
    this.put(key, old, pod);
  }

  /**
   * Takes `pod` as the pod's state even at the resourceVersion already cached: bind's reservation
   * assumed before its PATCH is answered (server.ts), or the record restored when the apiserver
   * refused the PATCH. The next informer event of a newer version replaces it with the truth.
   * A deleted pod (tombstone) is not brought back.
   */
  assumePod(pod: V1Pod): void {
    const key = objectKey(pod);
    if (pod.metadata?.uid && this.tombstones.has(pod.metadata.uid)) return;
    this.put(key, this.pods.get(key), pod);
  }

  private put(key: string, old: PodRecord | undefined, pod: V1Pod): void {
    this.store(key, old, pod);
    for (const l of this.podListeners) l(key);
  }

  private store(key: string, old: PodRecord | undefined, pod: V1Pod): void {
    if (old && old.fingerprint === podFingerprint(pod)) {
      // nothing the analyses read changed (e.g. a status update): keep the parses, the indexes and the versions
      this.pods.set(key, { ...old, pod });
      return;
    }
    const rec = podRecordOf(pod);
    if (old) this.unindex(old);
    // what it held may be less now (terminal, a reservation dropped or moved)
    const released = old !== undefined && holdsAnalysed(old);
    this.pods.set(key, rec);
    if (rec.node) {
      let set = this.podsByNode.get(rec.node);
      if (!set) this.podsByNode.set(rec.node, (set = new Set()));
      set.add(key);
      this.holders.set(rec.uid, (this.holders.get(rec.uid) ?? 0) + 1);
      this.bumpNode(rec.node);
    }
    if (rec.tdmaSlots && rec.node) {
      this.tdmaPods.add(key);
      this.bumpNetwork(rec);
    }
    if (released) this.release();
  }

  /**
   * Takes in a fresh, consistent list of the pods that can hold capacity (non-terminal, as the
   * informer selects them), listed at resourceVersion `listRv`: every listed pod is upserted (a
   * newer version already cached wins), and every cached pod last seen at a version older than the
   * list that the list does not have is gone (deleted or terminal at `listRv`) and is removed. A
   * cached pod at a version at or after the list (an informer event newer than it) stays. This is
   * how a new leader makes sure its view holds every reservation the previous leader wrote, however
   * far behind its watch was.
   */
  resyncPods(pods: readonly V1Pod[], listRv: string): { listed: number; removed: number } {
    const listed = new Set<string>();
    for (const p of pods) {
      listed.add(objectKey(p));
      this.upsertPod(p);
    }
    let removed = 0;
    for (const [key, rec] of [...this.pods]) {
      if (listed.has(key) || !olderThan(rec.pod.metadata?.resourceVersion, listRv)) continue;
      this.deletePod(rec.pod);
      removed++;
    }
    return { listed: listed.size, removed };
  }

  deletePod(pod: V1Pod): void {
    const key = objectKey(pod);
    const uid = pod.metadata?.uid;
    if (uid) {
      this.tombstones.add(uid);
      if (this.tombstones.size > TOMBSTONES) this.tombstones.delete(this.tombstones.values().next().value!);
    }
    const old = this.pods.get(key);
    if (!old || (uid && old.uid !== uid)) return;
    this.unindex(old);
    this.pods.delete(key);
    if (holdsAnalysed(old)) this.release();
  }

  private unindex(rec: PodRecord): void {
    if (rec.node) {
      this.podsByNode.get(rec.node)?.delete(rec.key);
      const n = (this.holders.get(rec.uid) ?? 1) - 1;
      if (n > 0) this.holders.set(rec.uid, n);
      else this.holders.delete(rec.uid);
      this.bumpNode(rec.node);
    }
    if (this.tdmaPods.delete(rec.key)) this.bumpNetwork(rec);
  }

  /** Pods holding capacity on `node`, sorted by UID (deterministic order for unpinned placement). */
  podsOn(node: string): PodRecord[] {
    const out: PodRecord[] = [];
    for (const key of this.podsByNode.get(node) ?? []) {
      const r = this.pods.get(key);
      if (r) out.push(r);
    }
    return out.sort((a, b) => (a.uid < b.uid ? -1 : a.uid > b.uid ? 1 : 0));
  }

  /**
   * The RT pods already on `node` (parsed), except `excludeUid` (the pod being placed: its own old
   * reservation must not count against it). Pods whose `ulysses.io/rt` does not parse are skipped
   * and returned in `skipped` (they were not placed by this extender).
   */
  rtPodsOn(node: string, excludeUid: string): { pods: readonly ParsedRtPod[]; skipped: readonly string[] } {
    const s = this.rtSummary(node);
    if (!s.uids.has(excludeUid)) return s;
    return this.computeRtPods(node, excludeUid);
  }

  /** Was a pod of this UID deleted (a tombstone is kept)? */
  isDeleted(uid: string): boolean {
    return this.tombstones.has(uid);
  }

  /** Does a pod with this UID hold capacity (bound or reserved) on some node? */
  holdsCapacity(uid: string): boolean {
    return this.holders.has(uid);
  }

  /** The node's RT pods, computed once per node version (see header). */
  rtSummary(node: string): RtSummary {
    const version = this.nodeVersion(node);
    const cached = this.rtSummaries.get(node);
    if (cached && cached.version === version) return cached;
    const { pods, skipped } = this.computeRtPods(node, undefined);
    const uids = new Set<string>();
    const dsUidsByPeriod = new Map<number, string[]>();
    for (const r of this.podsByNode.get(node) ?? []) {
      const rec = this.pods.get(r);
      if (rec?.rt) uids.add(rec.uid);
    }
    for (const p of pods) {
      if (p.spec.kind !== 'deferrable-server') continue;
      const list = dsUidsByPeriod.get(p.spec.server.periodUs);
      if (list) list.push(p.uid);
      else dsUidsByPeriod.set(p.spec.server.periodUs, [p.uid]);
    }
    // pods are sorted by UID already, so every list is too
    const summary: RtSummary = { version, pods, skipped, uids, dsUidsByPeriod };
    if (this.nodes.has(node) || this.podsByNode.get(node)?.size) this.rtSummaries.set(node, summary);
    else this.rtSummaries.delete(node);
    return summary;
  }

  /**
   * Position of a new deferrable-server pod (server period `periodUs`, UID `uid`) among the node's
   * servers of the same period: the number of them with a smaller UID. Together with the node
   * version it fixes the pod's rate-monotonic rank on every core (deferrable-server.ts
   * serverPriorityOrder), the only way a pod's UID influences the node's analysis.
   */
  dsTieRank(node: string, periodUs: number, uid: string): number {
    const list = this.rtSummary(node).dsUidsByPeriod.get(periodUs);
    if (!list) return 0;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[mid]! < uid) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private computeRtPods(node: string, excludeUid: string | undefined): { pods: ParsedRtPod[]; skipped: string[] } {
    const pods: ParsedRtPod[] = [];
    const skipped: string[] = [];
    for (const r of this.podsOn(node)) {
      if (!r.rt || r.uid === excludeUid) continue;
      if (!r.rt.ok) {
        skipped.push(`${r.name}: ${r.rt.error}`);
        continue;
      }
      pods.push({ name: r.name, uid: r.uid, spec: r.rt.value, cores: r.rtCores });
    }
    return { pods, skipped };
  }

  /** Slots reserved on `network` by pods holding capacity somewhere, except `excludeUid`. */
  takenSlots(network: string, excludeUid: string): number[] {
    const out: number[] = [];
    for (const key of this.tdmaPods) {
      const r = this.pods.get(key);
      if (!r || r.uid === excludeUid || !r.tdma?.ok || r.tdma.value.network !== network) continue;
      out.push(...(r.tdmaSlots ?? []));
    }
    return out;
  }

  /**
   * {@link takenSlots} of a network of `slotCount` slots, the reservations outside [0, slotCount)
   * (a slot index no configured network has: written by hand, or the network shrank) left out and
   * named in `ignored`: they never block a placement.
   */
  takenSlotsIn(network: string, excludeUid: string, slotCount: number): { slots: number[]; ignored: string[] } {
    const slots: number[] = [];
    const ignored: string[] = [];
    for (const key of this.tdmaPods) {
      const r = this.pods.get(key);
      if (!r || r.uid === excludeUid || !r.tdma?.ok || r.tdma.value.network !== network) continue;
      for (const s of r.tdmaSlots ?? []) {
        if (s < slotCount) slots.push(s);
        else ignored.push(`pod ${r.name}: ${TDMA_SLOTS_ANNOTATION} slot ${s} is not in [0, ${slotCount}) of network ${network}: ignored`);
      }
    }
    return { slots, ignored };
  }

  /** Every (pod, slot) reservation per network: for checks that no slot is held twice. */
  slotHolders(network: string): Map<number, string[]> {
    const m = new Map<number, string[]>();
    for (const key of this.tdmaPods) {
      const r = this.pods.get(key);
      if (!r?.tdma?.ok || r.tdma.value.network !== network) continue;
      for (const s of r.tdmaSlots ?? []) m.set(s, [...(m.get(s) ?? []), r.name]);
    }
    return m;
  }
}
