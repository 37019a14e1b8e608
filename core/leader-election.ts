/**
 * Leader election with a coordination.k8s.io/v1 Lease, as client-go's leaderelection package
 * (LeaseLock + LeaderElector), reusable by every Ulysses component that runs with replicas:
 *  - acquire: create the Lease, or take it over when its holder is empty or has not renewed it for
 *    leaseDurationSeconds *as observed on our own clock* (client-go's observedTime: remote clocks
 *    are never compared with ours); leaseTransitions+1 and acquireTime on a takeover;
 *  - renew every retryPeriod; if no renewal succeeded within renewDeadline the lease is lost:
 *    onStoppedLeading runs (kube-controller-manager exits there, and so does our main.ts);
 *  - every write is a PUT with the observed resourceVersion, so two candidates never both win;
 *  - stop(): a leader releases the Lease (empty holderIdentity, leaseDurationSeconds 1, as client-go
 *    ReleaseOnCancel) so a standby takes over at its next retry instead of after leaseDuration.
 * Defaults are client-go's / kube-controller-manager's: 15 s / 10 s / 2 s (must satisfy
 * leaseDuration > renewDeadline > retryPeriod * 1.2, as client-go checks). Retries are jittered
 * (factor 1.2) like wait.JitterUntil.
 * Metric: ulysses_leader{component} 1 while this process leads.
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import type { V1Lease } from '@kubernetes/client-node';
import { Gauge } from 'prom-client';
import { ApiError, isNotFound, type KubeClient } from './kube.ts';
import { componentLogger, type Logger } from './logging.ts';
import { metricsRegistry } from './metrics.ts';

export const DEFAULT_LEASE_DURATION_S = 15;
export const DEFAULT_RENEW_DEADLINE_S = 10;
export const DEFAULT_RETRY_PERIOD_S = 2;
const JITTER = 1.2;

export interface LeaderElectionOptions {
  client: KubeClient;
  /** Lease namespace/name, e.g. kube-system/ulysses-controller-manager */
  namespace?: string;
  name: string;
  /** holderIdentity; default `${hostname}_${uuid}` as kube-controller-manager */
  identity?: string;
  /** metric label */
  component?: string;
  leaseDurationSeconds?: number;
  renewDeadlineSeconds?: number;
  retryPeriodSeconds?: number;
  /** called once when this candidate becomes leader; `signal` aborts when leadership ends */
  onStartedLeading: (signal: AbortSignal) => void | Promise<void>;
  /** called once when leadership ends (lost or released by stop()) */
  onStoppedLeading?: (reason: 'lost' | 'stopped') => void | Promise<void>;
  /** called when the observed leader changes (including to ourselves) */
  onNewLeader?: (identity: string) => void;
  log?: Logger;
  now?: () => number;
}

export function defaultIdentity(): string {
  return `${os.hostname()}_${randomUUID()}`;
}

/** MicroTime as the apiserver parses it (RFC3339 with exactly 6 fractional digits). */
export function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** Validation as client-go NewLeaderElector: clear errors naming the setting. */
export function validateLeaderElection(o: { leaseDurationSeconds: number; renewDeadlineSeconds: number; retryPeriodSeconds: number }): void {
  const { leaseDurationSeconds: ld, renewDeadlineSeconds: rd, retryPeriodSeconds: rp } = o;
  if (!(rp > 0)) throw new Error(`leader election: retryPeriodSeconds must be > 0 (got ${rp})`);
  if (!(ld > rd)) throw new Error(`leader election: leaseDurationSeconds (${ld}) must be greater than renewDeadlineSeconds (${rd})`);
  if (!(rd > JITTER * rp)) throw new Error(`leader election: renewDeadlineSeconds (${rd}) must be greater than retryPeriodSeconds*${JITTER} (${JITTER * rp})`);
}

let leaderGauge: Gauge<'component'> | undefined;
function leaderMetric(): Gauge<'component'> {
  leaderGauge ??=
    (metricsRegistry().getSingleMetric('ulysses_leader') as Gauge<'component'> | undefined) ??
    new Gauge({ name: 'ulysses_leader', help: 'Whether this process currently holds its component leader Lease (1) or not (0).', labelNames: ['component'], registers: [metricsRegistry()] });
  return leaderGauge;
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });

export class LeaderElector {
  readonly identity: string;
  private readonly ns: string;
  private readonly path: string;
  private readonly ld: number;
  private readonly rd: number;
  private readonly rp: number;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly component: string;
  /** the record as last seen, and when (our clock) it last changed */
  private observed: V1Lease | undefined;
  private observedRaw = '';
  private observedAt = 0;
  private lastLeader = '';
  private leading = false;
  private readonly stopCtrl = new AbortController();
  private leaderCtrl: AbortController | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly o: LeaderElectionOptions) {
    this.identity = o.identity ?? defaultIdentity();
    this.ns = o.namespace ?? 'kube-system';
    this.path = `/apis/coordination.k8s.io/v1/namespaces/${this.ns}/leases`;
    this.ld = o.leaseDurationSeconds ?? DEFAULT_LEASE_DURATION_S;
    this.rd = o.renewDeadlineSeconds ?? DEFAULT_RENEW_DEADLINE_S;
    this.rp = o.retryPeriodSeconds ?? DEFAULT_RETRY_PERIOD_S;
    validateLeaderElection({ leaseDurationSeconds: this.ld, renewDeadlineSeconds: this.rd, retryPeriodSeconds: this.rp });
    this.component = o.component ?? o.name;
    this.log = (o.log ?? componentLogger('leader-election')).child({ lease: `${this.ns}/${o.name}`, identity: this.identity });
    this.now = o.now ?? Date.now;
    leaderMetric().set({ component: this.component }, 0);
  }

  get isLeader(): boolean {
    return this.leading;
  }

  /** The identity of the current leader as last observed ('' if none). */
  get leader(): string {
    return this.lastLeader;
  }

  /** Starts campaigning; resolves when leadership ended (lost or stopped) or stop() was called. */
  run(): Promise<void> {
    this.running ??= this.loop();
    return this.running;
  }

  /** Stops campaigning; a leader releases the Lease first. */
  async stop(): Promise<void> {
    if (this.stopCtrl.signal.aborted) return this.running;
    this.stopCtrl.abort();
    await this.running;
  }

  private jittered(): number {
    return this.rp * 1000 * (1 + Math.random() * (JITTER - 1));
  }

  private async loop(): Promise<void> {
    const stop = this.stopCtrl.signal;
    // acquire
    while (!stop.aborted) {
      if (await this.tryAcquireOrRenew()) break;
      await sleep(this.jittered(), stop);
    }
    if (stop.aborted) return;
    this.leading = true;
    leaderMetric().set({ component: this.component }, 1);
    this.log.info('became leader');
    this.leaderCtrl = new AbortController();
    void Promise.resolve()
      .then(() => this.o.onStartedLeading(this.leaderCtrl!.signal))
      .catch((err: Error) => this.log.error({ err: err.message }, 'onStartedLeading failed'));
    // renew: each round retries every retryPeriod until success or renewDeadline since the last renewal
    let lastRenew = this.now();
    let reason: 'lost' | 'stopped' = 'stopped';
    while (!stop.aborted) {
      await sleep(this.rp * 1000, stop);
      if (stop.aborted) break;
      if (await this.tryAcquireOrRenew()) {
        lastRenew = this.now();
        continue;
      }
      if (!this.leading || this.now() - lastRenew >= this.rd * 1000) {
        reason = 'lost';
        break;
      }
    }
    this.leading = false;
    leaderMetric().set({ component: this.component }, 0);
    this.leaderCtrl.abort();
    this.log.warn({ reason }, reason === 'lost' ? 'leader election lost' : 'stepping down');
    // the work stops before the lease is released, so a successor never overlaps with it
    try {
      await this.o.onStoppedLeading?.(reason);
    } finally {
      if (reason === 'stopped') await this.release();
    }
  }

  /** client-go tryAcquireOrRenew; true when we hold the lease after the call. */
  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = this.now();
    const spec = (acquireTime: string, transitions: number) => ({
      holderIdentity: this.identity,
      leaseDurationSeconds: this.ld,
      acquireTime,
      renewTime: microTime(now),
      leaseTransitions: transitions,
    });
    let current: V1Lease;
    try {
      current = await this.o.client.get<V1Lease>(`${this.path}/${this.o.name}`);
    } catch (err) {
      if (!isNotFound(err)) {
        this.log.warn({ err: (err as Error).message }, 'error retrieving lease');
        return false;
      }
      try {
        const created = await this.o.client.post<V1Lease>(this.path, {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.o.name, namespace: this.ns },
          spec: spec(microTime(now), 0),
        });
        this.observe(created, now);
        return true;
      } catch (e) {
        this.log.debug({ err: (e as Error).message }, 'lease create failed');
        return false;
      }
    }
    this.observe(current, now);
    const holder = current.spec?.holderIdentity ?? '';
    const mine = holder === this.identity;
    const duration = (current.spec?.leaseDurationSeconds ?? this.ld) * 1000;
    if (holder !== '' && !mine && this.observedAt + duration > now) return false;
    // raw JSON: MicroTimes stay the apiserver's strings
    const body = {
      ...current,
      spec: mine
        ? spec(String(current.spec?.acquireTime ?? microTime(now)), current.spec?.leaseTransitions ?? 0)
        : spec(microTime(now), (current.spec?.leaseTransitions ?? 0) + 1),
    };
    try {
      const updated = await this.o.client.put<V1Lease>(`${this.path}/${this.o.name}`, body);
      this.observe(updated, now);
      return true;
    } catch (err) {
      if (!(err instanceof ApiError && err.statusCode === 409)) this.log.warn({ err: (err as Error).message }, 'lease update failed');
      return false;
    }
  }

  private observe(lease: V1Lease, now: number): void {
    const raw = JSON.stringify(lease.spec ?? {});
    if (raw !== this.observedRaw) {
      this.observedRaw = raw;
      this.observedAt = now;
    }
    this.observed = lease;
    const holder = lease.spec?.holderIdentity ?? '';
    if (holder !== this.lastLeader) {
      this.lastLeader = holder;
      if (holder) {
        this.log.info({ leader: holder }, 'new leader observed');
        this.o.onNewLeader?.(holder);
      }
    }
  }

  /** client-go release(): empty holder, 1 s duration, so a standby need not wait leaseDuration. */
  private async release(): Promise<void> {
    const cur = this.observed;
    if (!cur || cur.spec?.holderIdentity !== this.identity) return;
    const now = microTime(this.now());
    try {
      await this.o.client.put(`${this.path}/${this.o.name}`, {
        ...cur,
        spec: { ...cur.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: now, acquireTime: now },
      });
      this.log.info('released lease');
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'could not release lease');
    }
  }
}
