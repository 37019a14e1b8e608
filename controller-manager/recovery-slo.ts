/**
 * The critical-recovery SLO, measured by the controller manager itself (issue 24 §3): for each
 * high-criticality pod lost, the time from its loss until a replacement of the same owner serves.
 *
 * Start of a recovery:
 *  - its node got a NoExecute taint the pod does not tolerate forever (no matching toleration, or one
 *    with tolerationSeconds: the taint eviction deletes it then): the moment the taint was observed
 *    on the node watch, or `timeAdded + 1 s` if earlier (timeAdded has whole seconds, so the taint
 *    was added before `timeAdded + 1 s`; a controller manager started after the taint uses it);
 *  - or the pod was deleted / evicted (deletionTimestamp or delete observed) without such a taint,
 *    if its owner will replace it (the owner exists, is not being deleted, and does not have enough
 *    other active pods: a scale-down is no loss).
 *    A taint observed after the deletion of a pod of that node moves the start back to the taint's.
 * End: a pod of the same owner (its controller, or the ReplicaSet's Deployment) that did not exist
 * when the recovery started is Ready and its address is a ready endpoint of an EndpointSlice; if no
 * Service selects it, Ready alone ends the recovery (label until="ready"). Times are the moments the
 * watch events are observed here, in epoch ms, so the harness' watch-based measurement compares.
 * Dropped (with a log line): the taint goes away or becomes tolerated while the pod still runs; the
 * owner is deleted; the recovery is older than `maxAgeMs`; more than `maxOpen` are open (the oldest).
 *
 * Output: the histogram ulysses_critical_recovery_seconds{namespace,owner_kind,until}, a Warning
 * Event CriticalRecoverySLOMissed on the owner when the namespace's SLO (UlyssesConfig spec.slo) is
 * exceeded, and the last recoveries (published into UlyssesConfig status by the manager).
 */
import type { KubernetesObject, V1Deployment, V1EndpointSlice, V1Node, V1OwnerReference, V1Pod, V1ReplicaSet, V1Service, V1Taint, V1Toleration } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { Histogram } from 'prom-client';
import { podCriticality, serviceSelector } from '../core/criticality.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../core/events.ts';
import { isNotFound, type KubeAccess, type KubeClient } from '../core/kube.ts';
import { componentLogger } from '../core/logging.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import { isPodReady } from '../core/objects.ts';
import { RuntimeConfigWatcher, runtimeConfigPath } from '../core/runtime-config.ts';
import { describeSlo, RECOVERY_STATUS_ENTRIES, SloConfigSchema, sloSecondsFor, type RecoveryRecord, type SloConfig } from '../core/slo.ts';
import { toleratesTaint } from './controllers/taint-eviction.ts';

export const RECOVERY_METRIC = 'ulysses_critical_recovery_seconds';
/** 0.1 s .. 120 s */
export const RECOVERY_BUCKETS = [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120];
export const SLO_MISSED_REASON = 'CriticalRecoverySLOMissed';
/** Events' source.component (reportingComponent is the controller manager's) */
export const RECOVERY_EVENT_SOURCE = 'critical-recovery-slo';
export const DEFAULT_MAX_OPEN_RECOVERIES = 1000;
export const DEFAULT_MAX_RECOVERY_AGE_MS = 60 * 60_000;

export function recoveryHistogram(): Histogram<'namespace' | 'owner_kind' | 'until'> {
  return registeredMetric(RECOVERY_METRIC, () =>
    new Histogram({
      name: RECOVERY_METRIC,
      help: 'Critical pods: seconds from the loss (NoExecute taint of the node, or deletion) until a replacement of the same owner is Ready and in an EndpointSlice (until="endpointslice") or, no Service selecting it, Ready (until="ready").',
      labelNames: ['namespace', 'owner_kind', 'until'],
      buckets: RECOVERY_BUCKETS,
      registers: [metricsRegistry()],
    }),
  );
}

export interface RecoveryTrackerDeps {
  /** epoch ms (default Date.now) */
  now?: () => number;
  getPod(key: string): V1Pod | undefined;
  getReplicaSet(key: string): V1ReplicaSet | undefined;
  getDeployment(key: string): V1Deployment | undefined;
  podsOnNode(node: string): V1Pod[];
  podsInNamespace(namespace: string): V1Pod[];
  servicesInNamespace(namespace: string): V1Service[];
  priorityClassThreshold?: number;
  events?: ComponentEventRecorder;
  /** called with the last recoveries (newest first) after each one finishes */
  publish?: (recent: RecoveryRecord[]) => void;
  maxOpen?: number;
  maxAgeMs?: number;
  log?: Logger;
}

interface Owner {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
}

interface OpenRecovery {
  lostUid: string;
  lostName: string;
  namespace: string;
  node: string | undefined;
  tolerations: V1Toleration[];
  owner: Owner;
  startMs: number;
  openedAtMs: number;
  cause: string;
  /** pods of the owner when the recovery started (and replacements of other recoveries): not replacements */
  excluded: Set<string>;
}

/** When a pod of interest was first seen Ready, and first seen as a ready endpoint of a slice. */
interface PodTimes {
  namespace: string;
  readyAt?: number;
  sliceAt?: number;
}

const MAX_POD_TIMES = 4096;

const taintId = (t: V1Taint) => `${t.key}\0${t.value ?? ''}\0${t.effect}`;

/** The moment a taint was added as far as we can tell (see the module comment). */
export function taintStartMs(taint: V1Taint, observedMs: number): number {
  const added = taint.timeAdded ? new Date(taint.timeAdded as unknown as string).getTime() : NaN;
  return Number.isFinite(added) ? Math.min(observedMs, added + 1000) : observedMs;
}

export class RecoveryTracker {
  private readonly now: () => number;
  private readonly log: Logger;
  private readonly events: ComponentEventRecorder;
  private readonly maxOpen: number;
  private readonly maxAgeMs: number;
  /** by lost pod uid, in the order opened */
  private readonly open = new Map<string, OpenRecovery>();
  private readonly openPerNamespace = new Map<string, number>();
  /** per node: its NoExecute taints and when each started */
  private readonly taints = new Map<string, Map<string, { taint: V1Taint; startMs: number }>>();
  private readonly times = new Map<string, PodTimes>();
  private slo: SloConfig | undefined;
  private readonly recentList: RecoveryRecord[] = [];

  constructor(private readonly d: RecoveryTrackerDeps) {
    this.now = d.now ?? Date.now;
    this.log = (d.log ?? componentLogger('controller-manager')).child({ loop: 'recovery-slo' });
    this.events = d.events ?? NO_EVENTS;
    this.maxOpen = d.maxOpen ?? DEFAULT_MAX_OPEN_RECOVERIES;
    this.maxAgeMs = d.maxAgeMs ?? DEFAULT_MAX_RECOVERY_AGE_MS;
    recoveryHistogram();
  }

  setSlo(cfg: SloConfig | undefined): void {
    this.slo = cfg;
  }

  /** The last finished recoveries, newest first. */
  get recent(): readonly RecoveryRecord[] {
    return this.recentList;
  }

  /**
   * Continues the list of finished recoveries from a previous process (UlyssesConfig status), so a
   * restart or a new leader does not wipe what `ulysses status` shows. Ignored once one finished here.
   */
  seedRecent(records: readonly RecoveryRecord[] | undefined): void {
    if (this.recentList.length || !records?.length) return;
    this.recentList.push(...records.slice(0, RECOVERY_STATUS_ENTRIES));
  }

  /** Open recoveries (lost pod "namespace/name" and start, epoch ms). */
  openRecoveries(): Array<{ pod: string; owner: string; startMs: number; cause: string }> {
    return [...this.open.values()].map((r) => ({ pod: `${r.namespace}/${r.lostName}`, owner: `${r.owner.kind}/${r.owner.name}`, startMs: r.startMs, cause: r.cause }));
  }

  // ---- inputs (informer events) -------------------------------------------------------------

  nodeChanged(node: V1Node): void {
    const name = node.metadata?.name;
    if (!name) return;
    this.sweep();
    const now = this.now();
    const current = (node.spec?.taints ?? []).filter((t) => t.effect === 'NoExecute');
    const known = this.taints.get(name) ?? new Map<string, { taint: V1Taint; startMs: number }>();
    const next = new Map<string, { taint: V1Taint; startMs: number }>();
    const added: Array<{ taint: V1Taint; startMs: number }> = [];
    for (const t of current) {
      const id = taintId(t);
      const e = known.get(id) ?? { taint: t, startMs: taintStartMs(t, now) };
      if (!known.has(id)) added.push(e);
      next.set(id, e);
    }
    const changed = added.length > 0 || next.size !== known.size;
    if (next.size) this.taints.set(name, next);
    else this.taints.delete(name);
    if (!changed) return;
    // deleted pods of this node whose taint is seen only now: the loss started at the taint
    for (const r of this.open.values()) {
      if (r.node !== name) continue;
      for (const e of added) {
        if (this.untoleratedForever(r.tolerations, e.taint) && e.startMs < r.startMs) {
          r.startMs = e.startMs;
          r.cause = `taint ${e.taint.key}`;
        }
      }
    }
    for (const pod of this.d.podsOnNode(name)) this.checkTaints(pod);
  }

  nodeDeleted(node: V1Node): void {
    if (node.metadata?.name) this.taints.delete(node.metadata.name);
  }

  podChanged(pod: V1Pod): void {
    this.sweep();
    const uid = pod.metadata?.uid;
    if (!uid) return;
    this.checkTaints(pod);
    if (pod.metadata?.deletionTimestamp) this.openFor(pod, this.now(), 'deleted');
    const ns = pod.metadata?.namespace ?? 'default';
    if (!this.openPerNamespace.get(ns)) return;
    if (isPodReady(pod) && !pod.metadata?.deletionTimestamp) {
      const t = this.timesOf(uid, ns);
      t.readyAt ??= this.now();
      this.tryComplete(pod);
    }
  }

  podDeleted(pod: V1Pod): void {
    this.sweep();
    if (!pod.metadata?.uid) return;
    this.checkTaints(pod, true);
    this.openFor(pod, this.now(), 'deleted');
    if (pod.metadata?.uid) this.times.delete(pod.metadata.uid);
  }

  sliceChanged(slice: V1EndpointSlice): void {
    const ns = slice.metadata?.namespace ?? 'default';
    if (!this.openPerNamespace.get(ns)) return;
    const now = this.now();
    for (const ep of slice.endpoints ?? []) {
      const ref = ep.targetRef;
      if (!ep.conditions?.ready || ref?.kind !== 'Pod' || !ref.uid || !ref.name) continue;
      const t = this.timesOf(ref.uid, ns);
      if (t.sliceAt !== undefined) continue;
      t.sliceAt = now;
      const pod = this.d.getPod(`${ref.namespace ?? ns}/${ref.name}`);
      if (pod?.metadata?.uid === ref.uid) this.tryComplete(pod);
    }
  }

  /** A ReplicaSet or Deployment (or any owner) deleted: its open recoveries end without a result. */
  ownerDeleted(owner: V1ReplicaSet | V1Deployment | KubernetesObject): void {
    const uid = owner.metadata?.uid;
    for (const r of [...this.open.values()]) {
      if (r.owner.uid === uid) this.drop(r, `owner ${r.owner.kind}/${r.owner.name} deleted`);
    }
  }

  // ---- the logic ---------------------------------------------------------------------------

  private isCritical(pod: V1Pod): boolean {
    return podCriticality(pod, { priorityClassThreshold: this.d.priorityClassThreshold }).level === 'high';
  }

  /** The pod's node has a NoExecute taint it does not tolerate forever: whether it can be tolerated at all. */
  private untoleratedForever(tolerations: V1Toleration[], taint: V1Taint): boolean {
    const used = tolerations.find((t) => toleratesTaint(t, taint));
    return !used || (used.tolerationSeconds !== undefined && used.tolerationSeconds !== null);
  }

  /** Opens (taint that evicts the pod) or drops (no such taint any more, pod still running) a recovery. */
  private checkTaints(pod: V1Pod, gone = false): void {
    const uid = pod.metadata!.uid!;
    const node = pod.spec?.nodeName;
    const taints = node ? this.taints.get(node) : undefined;
    let start = Infinity;
    let cause = '';
    for (const e of taints?.values() ?? []) {
      if (this.untoleratedForever(pod.spec?.tolerations ?? [], e.taint) && e.startMs < start) {
        start = e.startMs;
        cause = `taint ${e.taint.key}`;
      }
    }
    const open = this.open.get(uid);
    if (start !== Infinity) this.openFor(pod, start, cause);
    else if (open && !gone && open.cause.startsWith('taint ') && !pod.metadata?.deletionTimestamp && (pod.status?.phase === 'Running' || pod.status?.phase === 'Pending')) {
      this.drop(open, 'the NoExecute taint is gone or tolerated and the pod still runs');
    }
  }

  /** The pod's owner for recovery purposes: its controller, or the ReplicaSet's Deployment. */
  private ownerOf(pod: V1Pod): { owner: Owner; rs?: V1ReplicaSet; ownerObject?: KubernetesObject | null } | undefined {
    const ref = controllerRef(pod.metadata?.ownerReferences);
    if (!ref) return undefined;
    const ns = pod.metadata?.namespace ?? 'default';
    const base = toOwner(ref);
    if (ref.kind !== 'ReplicaSet') return { owner: base };
    const rs = this.d.getReplicaSet(`${ns}/${ref.name}`);
    if (!rs || rs.metadata?.uid !== ref.uid) return { owner: base, ownerObject: null };
    const dref = controllerRef(rs.metadata?.ownerReferences);
    if (dref?.kind === 'Deployment') {
      const dep = this.d.getDeployment(`${ns}/${dref.name}`);
      return { owner: toOwner(dref), rs, ownerObject: dep && dep.metadata?.uid === dref.uid ? dep : null };
    }
    return { owner: base, rs, ownerObject: rs };
  }

  private openFor(pod: V1Pod, startMs: number, cause: string): void {
    const uid = pod.metadata?.uid;
    if (!uid) return;
    const existing = this.open.get(uid);
    if (existing) {
      if (startMs < existing.startMs) {
        existing.startMs = startMs;
        existing.cause = cause;
      }
      return;
    }
    if (!this.isCritical(pod)) return;
    const ns = pod.metadata?.namespace ?? 'default';
    const key = `${ns}/${pod.metadata?.name}`;
    const o = this.ownerOf(pod);
    if (!o) {
      this.log.debug({ key }, 'critical pod lost without a controller: nothing replaces it, no recovery measured');
      return;
    }
    if (o.ownerObject === null || (o.ownerObject && o.ownerObject.metadata?.deletionTimestamp)) return; // owner gone or going
    if (cause === 'deleted' && o.rs) {
      // a scale-down (or the old ReplicaSet of a rollout) deletes pods it will not replace
      const want = o.rs.spec?.replicas ?? 1;
      const others = this.d.podsInNamespace(ns).filter((p) => p.metadata?.uid !== uid && p.metadata?.ownerReferences?.some((r) => r.uid === o.rs!.metadata?.uid) && !p.metadata?.deletionTimestamp && !isTerminal(p));
      if (others.length >= want) return;
    }
    if (this.open.size >= this.maxOpen) {
      const oldest = this.open.values().next().value!;
      this.drop(oldest, `more than ${this.maxOpen} open recoveries: the oldest is no longer measured`, 'warn');
    }
    const excluded = new Set<string>([uid]);
    for (const p of this.d.podsInNamespace(ns)) {
      const pu = p.metadata?.uid;
      if (pu && this.ownerOf(p)?.owner.uid === o.owner.uid) excluded.add(pu);
    }
    const r: OpenRecovery = {
      lostUid: uid,
      lostName: pod.metadata?.name ?? '',
      namespace: ns,
      node: pod.spec?.nodeName || undefined,
      tolerations: pod.spec?.tolerations ?? [],
      owner: o.owner,
      startMs,
      openedAtMs: this.now(),
      cause,
      excluded,
    };
    this.open.set(uid, r);
    this.openPerNamespace.set(ns, (this.openPerNamespace.get(ns) ?? 0) + 1);
    this.log.info({ key, owner: `${o.owner.kind}/${o.owner.name}`, cause, startedMsAgo: this.now() - startMs }, 'critical pod lost: recovery started');
    // replacements already serving (events seen before the recovery could be told apart) are not counted:
    // every pod of the owner existing now is excluded above
  }

  private timesOf(uid: string, namespace: string): PodTimes {
    let t = this.times.get(uid);
    if (!t) {
      if (this.times.size >= MAX_POD_TIMES) this.times.delete(this.times.keys().next().value!);
      t = { namespace };
      this.times.set(uid, t);
    }
    return t;
  }

  private tryComplete(pod: V1Pod): void {
    const uid = pod.metadata!.uid!;
    const ns = pod.metadata?.namespace ?? 'default';
    const t = this.times.get(uid);
    if (t?.readyAt === undefined || pod.metadata?.deletionTimestamp || !isPodReady(pod)) return;
    const o = this.ownerOf(pod);
    if (!o) return;
    let target: OpenRecovery | undefined;
    for (const r of this.open.values()) {
      if (r.owner.uid === o.owner.uid && !r.excluded.has(uid) && (!target || r.startMs < target.startMs)) target = r;
    }
    if (!target) return;
    const selected = this.d.servicesInNamespace(ns).some((svc) => serviceSelector(svc)(pod.metadata?.labels));
    if (selected && t.sliceAt === undefined) return;
    const endMs = selected ? Math.max(t.readyAt, t.sliceAt!) : t.readyAt;
    this.finish(target, pod, endMs, selected ? 'endpointslice' : 'ready');
  }

  private finish(r: OpenRecovery, replacement: V1Pod, endMs: number, until: 'endpointslice' | 'ready'): void {
    this.close(r);
    const uid = replacement.metadata!.uid!;
    for (const other of this.open.values()) if (other.owner.uid === r.owner.uid) other.excluded.add(uid);
    const seconds = Math.max(0, endMs - r.startMs) / 1000;
    recoveryHistogram().observe({ namespace: r.namespace, owner_kind: r.owner.kind, until }, seconds);
    const slo = sloSecondsFor(this.slo, r.namespace);
    const missed = slo !== undefined && seconds > slo;
    const record: RecoveryRecord = {
      namespace: r.namespace,
      owner: `${r.owner.kind}/${r.owner.name}`,
      pod: r.lostName,
      replacement: replacement.metadata?.name ?? '',
      cause: r.cause,
      seconds: Math.round(seconds * 1000) / 1000,
      sloSeconds: slo ?? null,
      missed,
      until,
      finishedAt: new Date(endMs).toISOString(),
    };
    this.log.info({ key: `${r.namespace}/${r.lostName}`, ...record }, missed ? 'critical pod recovered: SLO missed' : 'critical pod recovered');
    if (missed) {
      const what = until === 'endpointslice' ? 'Ready and in an EndpointSlice' : 'Ready (no Service selects it)';
      this.events.event(
        { apiVersion: r.owner.apiVersion, kind: r.owner.kind, metadata: { name: r.owner.name, namespace: r.namespace, uid: r.owner.uid } },
        'Warning',
        SLO_MISSED_REASON,
        `critical pod ${r.lostName} lost (${r.cause}); replacement ${record.replacement} ${what} after ${record.seconds.toFixed(3)} s, over the SLO of ${slo} s`,
      );
    }
    this.recentList.unshift(record);
    this.recentList.length = Math.min(this.recentList.length, RECOVERY_STATUS_ENTRIES);
    this.d.publish?.([...this.recentList]);
  }

  private drop(r: OpenRecovery, why: string, level: 'info' | 'warn' = 'info'): void {
    this.close(r);
    this.log[level]({ key: `${r.namespace}/${r.lostName}`, owner: `${r.owner.kind}/${r.owner.name}`, cause: r.cause }, `recovery dropped: ${why}`);
  }

  private close(r: OpenRecovery): void {
    this.open.delete(r.lostUid);
    const n = (this.openPerNamespace.get(r.namespace) ?? 1) - 1;
    if (n > 0) {
      this.openPerNamespace.set(r.namespace, n);
      return;
    }
    this.openPerNamespace.delete(r.namespace);
    for (const [uid, t] of this.times) if (t.namespace === r.namespace) this.times.delete(uid);
  }

  /** Drops recoveries open for longer than maxAgeMs (their replacement never came). */
  private sweep(): void {
    const now = this.now();
    for (const r of this.open.values()) {
      if (now - r.openedAtMs <= this.maxAgeMs) break; // in the order opened
      this.drop(r, `no replacement within ${this.maxAgeMs / 1000} s`);
    }
  }
}

function controllerRef(refs: V1OwnerReference[] | undefined): V1OwnerReference | undefined {
  return refs?.find((r) => r.controller);
}

function toOwner(ref: V1OwnerReference): Owner {
  return { apiVersion: ref.apiVersion, kind: ref.kind, name: ref.name, uid: ref.uid };
}

function isTerminal(p: V1Pod): boolean {
  return p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed';
}

/** UlyssesConfig spec.slo, applied live to a tracker (status key `slo`). */
export function sloRuntimeWatcher(kc: KubeAccess, tracker: RecoveryTracker, log?: Logger): RuntimeConfigWatcher<typeof SloConfigSchema> {
  return new RuntimeConfigWatcher({
    kc,
    statusKey: 'slo',
    field: 'slo',
    schema: SloConfigSchema,
    apply: (cfg) => {
      tracker.setSlo(cfg);
      return describeSlo(cfg);
    },
    log,
  });
}

/**
 * Writes the last recoveries into UlyssesConfig/default status.components.controller-manager.recoveries
 * (a JSON merge patch of that field only; the runtime-config watcher's reports leave it alone).
 * Writes are coalesced: at most one in flight, the newest list wins. No UlyssesConfig: nothing written.
 */
export function recoveryStatusPublisher(client: KubeClient, log: Logger, statusKey = 'controller-manager'): { publish: (recent: RecoveryRecord[]) => void; flush: () => Promise<void> } {
  let pending: RecoveryRecord[] | undefined;
  let running: Promise<void> | undefined;
  const run = async () => {
    while (pending) {
      const recoveries = pending;
      pending = undefined;
      try {
        await client.mergePatch(`${runtimeConfigPath()}/status`, { status: { components: { [statusKey]: { recoveries } } } });
      } catch (err) {
        if (!isNotFound(err)) log.warn({ err: (err as Error).message }, 'could not report recoveries in UlyssesConfig status');
      }
    }
  };
  return {
    publish: (recent) => {
      pending = recent;
      running ??= run().finally(() => (running = undefined));
    },
    flush: async () => {
      while (running) await running;
    },
  };
}

/** Count and sum of ulysses_critical_recovery_seconds over the series of a namespace (this process' registry). */
export async function recoveryObservations(namespace: string): Promise<{ count: number; sum: number }> {
  const m = await recoveryHistogram().get();
  let count = 0;
  let sum = 0;
  for (const v of m.values) {
    if (v.labels.namespace !== namespace) continue;
    if (v.metricName === `${RECOVERY_METRIC}_count`) count += v.value;
    else if (v.metricName === `${RECOVERY_METRIC}_sum`) sum += v.value;
  }
  return { count, sum };
}
