/**
 * CriticalPathHold (issue 7; an extension of thesis §5.3.1): while a high-criticality pod is on its
 * way to Ready, the periodic workers of every controller serve high-priority keys only, and the
 * low-priority work (the load's evictions, re-creations, status and endpoint updates) waits.
 *
 * Why: the periodic workers already put the critical pod's keys first, but the low-priority syncs
 * they serve meanwhile (one every T/N' per controller) make the apiserver, the scheduler and the
 * kubelets create the load exactly while the critical pod is created; on a small control plane that
 * shared CPU is what is left of the critical pod's delay over its idle time (README, "where the
 * critical pod's time goes"). The same idea as the kubelet-shim's hold of low sandboxes while a
 * high one is in progress (§5.3.4), one level up.
 *
 * "On its way to Ready":
 *  - starting: a high pod, not Ready, not deleting, not terminal, from the moment it is seen so;
 *  - replacing: a high pod with a controller owner is being evicted by the taint-eviction
 *    controller (from the moment it is queued: podEvicting) or got its deletionTimestamp (any
 *    deletion), and no replacement from that owner has been seen yet (the replacement then holds as
 *    starting).
 *  - taint window: for TAINT_WINDOW_MS after any node gets a new NoExecute taint. Failures come in
 *    bursts (a rack, a zone: the KWOK scale run taints 10 nodes at once) and the node that carries
 *    the critical pod may be seen a few ms after the others; without the window the periodic workers
 *    would start evicting the other nodes' low pods first.
 * Each entry holds for at most `maxHoldMs` from its start, so a critical pod that never becomes
 * Ready (image missing, crash loop, unschedulable) cannot starve the rest: bounded priority
 * inversion, like the shim's `holdLowsDuringHighMs`. And the hold as a whole: after `maxHoldMs` of
 * uninterrupted hold (a stream of critical pods starting one after the other) it pauses for
 * `maxHoldMs`, so the low-priority work always gets at least half of the time. `maxHoldMs` 0 switches
 * the hold off.
 *
 * Pure state over pod events and a Clock (unit-tested with FakeClock); the manager feeds it from the
 * shared pod informer and the CriticalityIndex, the WorkerPools ask `active()` at every periodic tick.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Counter, Gauge } from 'prom-client';
import { isTerminalPod } from '../core/criticality.ts';
import { isPodReady } from '../core/objects.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import type { Clock } from './queue/index.ts';

/**
 * The installed controller manager's hold per critical pod: the best measured setting (the critical
 * pod's Ready time stayed within 0.97x of idle at DN 1 x 20 pods with it, 2.06x without;
 * docs/results/2026-11-25-critical-path-hold.md). 0 turns it off (the thesis' behaviour).
 */
export const DEFAULT_CRITICAL_PATH_HOLD_MS = 1500;

export interface CriticalPathHoldOptions {
  /** Longest hold per critical pod (ms); 0 = off. */
  maxHoldMs?: number;
  clock: Clock;
}

/** Low-priority work waits this long after a new NoExecute taint (bounded by maxHoldMs). */
export const TAINT_WINDOW_MS = 200;

let metrics: { starts: Counter<'reason'>; pods: Gauge } | undefined;

/** Created once: active() runs at every periodic tick of every controller. */
function holdMetrics() {
  if (metrics) return metrics;
  const registers = [metricsRegistry()];
  metrics = {
    starts: registeredMetric('ulysses_critical_path_holds_total', () => new Counter({ name: 'ulysses_critical_path_holds_total', help: 'Holds of the low-priority periodic work started, by reason (starting, replacing: a critical pod; taint: a new NoExecute taint).', labelNames: ['reason'], registers })),
    pods: registeredMetric('ulysses_critical_path_hold_pods', () => new Gauge({ name: 'ulysses_critical_path_hold_pods', help: 'Critical pods, pending replacements and taint windows currently holding the low-priority periodic work.', registers })),
  };
  return metrics;
}

const controllerUid = (p: V1Pod) => p.metadata?.ownerReferences?.find((o) => o.controller)?.uid;

export class CriticalPathHold {
  private maxHoldMs: number;
  /** pod key -> since: high pods not Ready yet */
  private readonly starting = new Map<string, number>();
  /** controller owner UID -> since: a high pod of it is being deleted, its replacement not seen yet */
  private readonly replacing = new Map<string, number>();
  /** keys whose deletion already opened a `replacing` entry (one per pod) */
  private readonly deletionSeen = new Set<string>();
  /** end of the taint window */
  private taintWindowUntil = -Infinity;
  /** start of the current uninterrupted hold */
  private heldSince: number | undefined;
  /** after a maxHoldMs-long hold: no hold before this time */
  private pausedUntil = -Infinity;

  constructor(private readonly o: CriticalPathHoldOptions) {
    this.maxHoldMs = o.maxHoldMs ?? 0;
  }

  get holdMs(): number {
    return this.maxHoldMs;
  }

  /** Runtime toggle (UlyssesConfig spec.controllerManager.criticalPathHoldMs); 0 = off. */
  setMaxHoldMs(ms: number): void {
    this.maxHoldMs = ms;
  }

  /** A pod was added or updated; `high`: its criticality level is high (CriticalityIndex). */
  podChanged(key: string, pod: V1Pod, high: boolean): void {
    if (!high || isTerminalPod(pod)) {
      this.starting.delete(key);
      return;
    }
    const owner = controllerUid(pod);
    if (pod.metadata?.deletionTimestamp) {
      this.starting.delete(key);
      this.openReplacing(key, owner);
      return;
    }
    if (isPodReady(pod)) {
      this.starting.delete(key);
      return;
    }
    if (!this.starting.has(key)) {
      this.starting.set(key, this.o.clock.now());
      holdMetrics().starts.inc({ reason: 'starting' });
    }
    // the replacement exists: it holds on its own account from now on
    if (owner) this.replacing.delete(owner);
  }

  /**
   * A high pod is about to be evicted (taint eviction): its owner's replacement is on the way, so the
   * hold starts now, before the deletion comes back through the watch. Idempotent per pod.
   */
  podEvicting(key: string, pod: V1Pod): void {
    this.starting.delete(key);
    this.openReplacing(key, controllerUid(pod));
  }

  private openReplacing(key: string, owner: string | undefined): void {
    if (!owner || this.deletionSeen.has(key)) return;
    this.deletionSeen.add(key);
    this.replacing.set(owner, this.o.clock.now());
    holdMetrics().starts.inc({ reason: 'replacing' });
  }

  /** A node got a new NoExecute taint: hold for the taint window (TAINT_WINDOW_MS, at most maxHoldMs). */
  nodeTainted(): void {
    const now = this.o.clock.now();
    const until = now + Math.min(TAINT_WINDOW_MS, this.maxHoldMs);
    if (until > this.taintWindowUntil) {
      if (this.taintWindowUntil < now) holdMetrics().starts.inc({ reason: 'taint' });
      this.taintWindowUntil = until;
    }
  }

  podDeleted(key: string): void {
    this.starting.delete(key);
    this.deletionSeen.delete(key);
  }

  /** Is the low-priority periodic work held now? Drops entries older than maxHoldMs (in replacing). */
  active(): boolean {
    if (this.maxHoldMs <= 0) return false;
    const now = this.o.clock.now();
    let holding = 0;
    // starting entries stay until Ready/deleted (a pod holds once per way to Ready), but only hold while young
    for (const since of this.starting.values()) if (now - since < this.maxHoldMs) holding++;
    for (const [owner, since] of this.replacing) {
      if (now - since < this.maxHoldMs) holding++;
      else this.replacing.delete(owner);
    }
    if (now < this.taintWindowUntil) holding++;
    holdMetrics().pods.set(holding);
    if (holding === 0 || now < this.pausedUntil) {
      this.heldSince = undefined;
      return false;
    }
    this.heldSince ??= now;
    if (now - this.heldSince >= this.maxHoldMs) {
      // held for maxHoldMs in a row: the low-priority work gets the next maxHoldMs
      this.pausedUntil = now + this.maxHoldMs;
      this.heldSince = undefined;
      return false;
    }
    return true;
  }
}
