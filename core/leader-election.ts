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
 * (factor 1.2) like wait.JitterUntil. Every Lease request of a leader gives up at its renew deadline
 * (client-go runs the renew loop under a RenewDeadline context), so a hanging apiserver connection
 * never keeps a leader believing it leads past the deadline; `renewedAt` tells a server that must
 * stop the moment the deadline passes (e.g. the scheduler extender) when the last renewal succeeded.
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

/** "15s", "1500ms", "2m" or a plain number of seconds, as kube-controller-manager's duration flags. */
export function parseDurationSeconds(flag: string, v: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(v.trim());
  if (!m) throw new Error(`--${flag}: invalid duration ${JSON.stringify(v)} (e.g. 15s, 500ms)`);
  const n = Number(m[1]);
  return m[2] === 'ms' ? n / 1000 : m[2] === 'm' ? n * 60 : n;
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
  /** our clock, ms: when the last acquire/renew succeeded while leading (0: not leading) */
  private renewed = 0;
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

  /**
   * When (this elector's clock, ms) the Lease was last acquired or renewed while leading; 0 when not
   * leading. A leader that has not renewed for renewDeadlineSeconds has lost the Lease even before
   * the renew loop notices (its request may still be waiting for its timeout).
   */
  get renewedAt(): number {
    return this.renewed;
  }

  /** renewDeadlineSeconds in ms. */
  get renewDeadlineMs(): number {
    return this.rd * 1000;
  }

  /**
   * spec.leaseTransitions of the Lease while this candidate leads (undefined otherwise): the number
   * of takeovers, +1 on each (client-go's tryAcquireOrRenew: kept on a renewal, old+1 when another
   * holder, or none, is replaced), so it is the same for one term and larger for every later leader:
   * a fencing token (the scheduler extender's reservation epoch).
   */
  get leaseTransitions(): number | undefined {
    if (!this.leading) return undefined;
    const t = this.observed?.spec?.leaseTransitions;
    return typeof t === 'number' ? t : undefined;
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
    let acquiredAt = 0;
    while (!stop.aborted) {
      const attempt = this.now();
      // an acquire that takes longer than the renew deadline is not trusted: the next try decides
      if (await this.tryAcquireOrRenew(attempt + this.rd * 1000)) {
        acquiredAt = attempt;
        break;
      }
      await sleep(this.jittered(), stop);
    }
    if (stop.aborted) return;
    this.leading = true;
    // the Lease was written no earlier than the attempt started: count the deadline from there
    this.renewed = acquiredAt;
    leaderMetric().set({ component: this.component }, 1);
    this.log.info('became leader');
    this.leaderCtrl = new AbortController();
    void Promise.resolve()
      .then(() => this.o.onStartedLeading(this.leaderCtrl!.signal))
      .catch((err: Error) => this.log.error({ err: err.message }, 'onStartedLeading failed'));
    // renew: each round retries every retryPeriod until success or renewDeadline since the last renewal
    let lastRenew = acquiredAt;
    let reason: 'lost' | 'stopped' = 'stopped';
    while (!stop.aborted) {
      await sleep(this.rp * 1000, stop);
      if (stop.aborted) break;
      const attempt = this.now();
      if (await this.tryAcquireOrRenew(lastRenew + this.rd * 1000)) {
        lastRenew = attempt;
        this.renewed = attempt;
        continue;
      }
      if (!this.leading || this.now() - lastRenew >= this.rd * 1000) {
        reason = 'lost';
        break;
      }
    }
    this.leading = false;
    this.renewed = 0;
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

  /**
   * client-go tryAcquireOrRenew; true when we hold the lease after the call. Every request gives up
   * at `deadline` (this elector's clock, ms).
   */
  private async tryAcquireOrRenew(deadline: number): Promise<boolean> {
    const now = this.now();
    const timeoutMs = () => Math.max(1, deadline - this.now());
    if (deadline <= now) return false;
    const spec = (acquireTime: string, transitions: number) => ({
      holderIdentity: this.identity,
      leaseDurationSeconds: this.ld,
      acquireTime,
      renewTime: microTime(now),
      leaseTransitions: transitions,
    });
    let current: V1Lease;
    try {
      current = await this.o.client.request<V1Lease>('GET', `${this.path}/${this.o.name}`, { timeoutMs: timeoutMs() });
    } catch (err) {
      if (!isNotFound(err)) {
        this.log.warn({ err: (err as Error).message }, 'error retrieving lease');
        return false;
      }
      try {
        // PUT by name creates a missing Lease (coordination/lease strategy AllowCreateOnUpdate) and
        // is authorized as `create` of that name, which RBAC can grant by resourceNames (a POST
        // carries no name); without a resourceVersion it never overwrites one another candidate
        // created meanwhile (AllowUnconditionalUpdate false: a conflict)
        const created = await this.o.client.request<V1Lease>('PUT', `${this.path}/${this.o.name}`, {
          body: {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name: this.o.name, namespace: this.ns },
            spec: spec(microTime(now), 0),
          },
          timeoutMs: timeoutMs(),
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
      const updated = await this.o.client.request<V1Lease>('PUT', `${this.path}/${this.o.name}`, { body, timeoutMs: timeoutMs() });
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
