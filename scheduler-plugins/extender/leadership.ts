/**
 * High availability of the scheduler extender: replicas elect a leader with a coordination.k8s.io
 * Lease (core/leader-election.ts, the controller manager's implementation), and only the leader
 * answers kube-scheduler. The extender's state (RT cores and TDMA slots reserved) lives in memory,
 * rebuilt from the pods' `ulysses.io` annotations; two replicas answering at once could hand out
 * the same slot, so a standby refuses every verb.
 *
 * {@link LeadershipGate} is the serving state machine, pure (no I/O, clock injected):
 *
 *   standby --became leader--> rebuilding (epoch confirmed, then the list) --state rebuilt--> leading --lost / stepped down--> lost | stopped
 *
 * Only `leading` serves, and only while the Lease was renewed less than the renew deadline ago
 * (`renewedAt` of the elector): a leader whose renewals fail stops answering the moment the
 * deadline passes, before the elector's renew loop even reports the loss, so it has stopped before
 * any standby can acquire the Lease (leaseDuration > renewDeadline). `rebuilding` covers the fresh
 * list of the pods (ExtenderServer.rebuild) that must be in the state before the first answer: the
 * previous leader's last reservations may not have reached this replica's watch yet. `lost` and
 * `stopped` are final: the process exits (main.ts) and comes back as a standby.
 *
 * Reservation epoch: the Lease's spec.leaseTransitions, +1 on every takeover, is the term's fencing
 * token ({@link RESERVATION_EPOCH_ANNOTATION}). Every reservation PATCH carries it and the
 * apiserver's ValidatingAdmissionPolicy `ulysses-reservation-epoch` refuses one whose epoch is not
 * the Lease's current one, which closes what the gate cannot: a leader stopped after its last check
 * but before its request leaves. A new leader, before it lists the pods, waits until a dry run with
 * its epoch is admitted by every kube-apiserver (each reads the Lease from its own cache; the
 * apiservers listed in default/kubernetes, apiservers.ts, and the kubeconfig's server): from then
 * on every one of them refuses every older epoch.
 *
 * {@link ExtenderLeadership} wires the elector, the gate, the rebuild and, in a pod, the routing
 * label: the Service selects `ulysses.io/scheduler-extender-leader: "true"`, which the leader puts
 * on its own pod (after the rebuild) and takes off every other pod of the Deployment; a standby takes
 * it off its own pod when it starts. Routing by a label rather than by readiness keeps both pods
 * Ready (a standby never becoming Ready would stall every rolling update of the Deployment, whose
 * controller waits for the new pods to be available before it removes the last old one).
 */
import { KubeClient } from '../../core/kube.ts';
import { LeaderElector, type LeaderElectionOptions } from '../../core/leader-election.ts';
import type { Logger } from '../../core/logging.ts';
import { ROUTE_RECHECK_MS, publishRoute, type LeaderPod } from './routing.ts';
import { APISERVER_ENDPOINTS_PATH, APISERVER_SLICE_PATH, MAX_APISERVERS, apiserverAccess, apiserversFromEndpoints, apiserversFromSlice, hostPort } from './apiservers.ts';

/** Bound of each request of the epoch confirmation (the list read, each apiserver's dry run). */
export const CONFIRM_TIMEOUT_MS = 5_000;

/** Label of the pod that leads: the Service `ulysses-scheduler-extender` selects it. */
export const LEADER_LABEL = 'ulysses.io/scheduler-extender-leader';

export type LeadershipPhase = 'standby' | 'rebuilding' | 'leading' | 'lost' | 'stopped';

/** What the gate reads of the elector (LeaderElector has all of it). */
export interface LeaseView {
  readonly isLeader: boolean;
  /** Elector clock, ms: last successful acquire/renew while leading (0 when not leading). */
  readonly renewedAt: number;
  readonly renewDeadlineMs: number;
  /** Current leader's identity as last observed ('' if none). */
  readonly leader: string;
  /** spec.leaseTransitions of the Lease while leading: the term's reservation epoch (absent: no epoch). */
  readonly leaseTransitions?: number;
}

/**
 * The reservation epoch: the Lease's spec.leaseTransitions of the leader that wrote a reservation,
 * a decimal string. Every reservation PATCH of bind carries it; the ValidatingAdmissionPolicy
 * `ulysses-reservation-epoch` (manifests/base/scheduler-extender/reservation-epoch-policy.yaml)
 * admits a write of the extender's ServiceAccount that sets or changes a reservation only if it
 * equals the Lease's current leaseTransitions, so a deposed leader's late write is refused by the
 * apiserver whatever the leader believed when it sent it.
 */
export const RESERVATION_EPOCH_ANNOTATION = 'ulysses.io/reservation-epoch';

export type Serving =
  | {
      readonly ready: true;
      /**
       * How long (ms, the gate's clock) the answer holds without a new renewal: the time left to the
       * renew deadline. A write the leader starts must finish within it (server.ts bind's fence);
       * absent: no Lease behind the gate, no limit.
       */
      readonly validForMs?: number;
      /** The Lease's renew deadline (ms), when there is one. */
      readonly renewDeadlineMs?: number;
      /** The term's reservation epoch ({@link RESERVATION_EPOCH_ANNOTATION}), when the Lease has one. */
      readonly epoch?: string;
    }
  | { readonly ready: false; readonly reason: string };

/** What ExtenderServer asks before it answers a verb (and /readyz). */
export interface ServingGate {
  check(): Serving;
}

const REBUILDING = "rebuilding the reservations from the pods' annotations";

export class LeadershipGate implements ServingGate {
  private state: LeadershipPhase = 'standby';
  /** One number per term of leadership: a rebuild of an earlier term never marks a later one ready. */
  private term = 0;
  private since: number;
  /** What the `rebuilding` phase waits for (its readiness reason). */
  private detail = REBUILDING;

  constructor(
    private readonly lease: LeaseView,
    /** e.g. "Lease ulysses-system/ulysses-scheduler-extender", for the reasons */
    private readonly what: string,
    private readonly now: () => number = Date.now,
  ) {
    this.since = now();
  }

  get phase(): LeadershipPhase {
    return this.state;
  }

  /** This replica acquired the Lease: rebuilding until {@link rebuilt} with the returned term. */
  startLeading(): number {
    if (this.state === 'lost' || this.state === 'stopped') return this.term;
    this.state = 'rebuilding';
    this.since = this.now();
    this.detail = REBUILDING;
    return ++this.term;
  }

  /** What term `term`, still rebuilding, waits for now (e.g. the apiservers yet to confirm its epoch): the readiness reason. */
  progress(term: number, detail: string): void {
    if (term === this.term && this.state === 'rebuilding') this.detail = detail;
  }

  /** The state of `term` is rebuilt: serving, if that term still leads. */
  rebuilt(term: number): boolean {
    if (term !== this.term || this.state !== 'rebuilding') return false;
    this.state = 'leading';
    this.since = this.now();
    return true;
  }

  /** Leadership ended: `lost` (renewals failed past the deadline) or `stopped` (stepped down). Final. */
  stopLeading(reason: 'lost' | 'stopped'): void {
    if (this.state === 'lost') return;
    this.state = reason;
    this.since = this.now();
    this.term++;
  }

  check(): Serving {
    switch (this.state) {
      case 'standby': {
        const leader = this.lease.leader;
        return { ready: false, reason: `standby replica: ${this.what} is held by ${leader ? JSON.stringify(leader) : 'no one yet'}; only the leader answers` };
      }
      case 'rebuilding':
        return { ready: false, reason: `leader since ${this.now() - this.since} ms, ${this.detail}; not serving yet` };
      case 'lost':
        return { ready: false, reason: `lost ${this.what} (not renewed within the renew deadline): not serving` };
      case 'stopped':
        return { ready: false, reason: `stepped down from ${this.what}: not serving` };
      case 'leading': {
        if (!this.lease.isLeader) return { ready: false, reason: `no longer holds ${this.what}: not serving` };
        const age = this.now() - this.lease.renewedAt;
        if (age >= this.lease.renewDeadlineMs) {
          return { ready: false, reason: `${this.what} last renewed ${age} ms ago, past the renew deadline of ${this.lease.renewDeadlineMs} ms: not serving` };
        }
        const t = this.lease.leaseTransitions;
        return { ready: true, validForMs: this.lease.renewDeadlineMs - age, renewDeadlineMs: this.lease.renewDeadlineMs, ...(t !== undefined ? { epoch: String(t) } : {}) };
      }
    }
  }
}

export interface ExtenderLeadershipOptions extends Omit<LeaderElectionOptions, 'onStartedLeading' | 'onStoppedLeading' | 'onNewLeader' | 'component'> {
  /** Rebuilds the state from a fresh list (ExtenderServer.rebuild); leadership serves only after it. */
  rebuild: (signal: AbortSignal) => Promise<void>;
  /** Called once the rebuilt state is served (main.ts starts the updater and the rescheduler). */
  onServing?: () => void | Promise<void>;
  /** Called once leadership ended (main.ts exits: lost -> status 1). */
  onStopped: (reason: 'lost' | 'stopped') => void | Promise<void>;
  /** The pod this process runs in (downward API POD_NAMESPACE/POD_NAME): the routing label is kept on it. */
  pod?: { namespace: string; name: string };
  /**
   * Before the rebuild, wait until every apiserver admits this term's reservation epoch (default
   * true; see ExtenderLeadership.confirmEpoch).
   */
  confirmEpoch?: boolean;
  /** The client for one apiserver's own address (default: the client's credentials aimed there, apiservers.ts apiserverAccess). */
  apiserverClient?: (url: string) => Pick<KubeClient, 'request'>;
  log: Logger;
}

/** The elector, the gate, the rebuild and the routing label of one extender process (see the header). */
export class ExtenderLeadership {
  readonly gate: LeadershipGate;
  readonly elector: LeaderElector;
  private readonly client: KubeClient;
  private readonly directClients = new Map<string, Pick<KubeClient, 'request'>>();
  /**
   * Every apiserver that admitted an epoch of this process (host:port, the epoch, whether it was the
   * kubeconfig's server), in order: what the log says, for tests and diagnosis.
   */
  readonly confirmations: Array<{ apiserver: string; epoch: number; kubeconfigServer: boolean }> = [];
  /** our clock, ms: when this replica became leader (for the log) */
  private tookOverAt = 0;

  constructor(private readonly o: ExtenderLeadershipOptions) {
    this.client = o.client;
    this.elector = new LeaderElector({
      ...o,
      component: 'scheduler-extender',
      onStartedLeading: (signal) => this.lead(signal),
      onStoppedLeading: async (reason) => {
        this.gate.stopLeading(reason);
        o.log.warn({ reason }, reason === 'lost' ? 'lost the Lease: not serving' : 'stepped down: not serving');
        await o.onStopped(reason);
      },
    });
    this.gate = new LeadershipGate(this.elector, `Lease ${o.namespace ?? 'kube-system'}/${o.name}`);
  }

  /** Campaigns; a standby first takes the routing label off its own pod (left by an earlier process of it). */
  start(): void {
    if (this.o.pod) void this.setLabel(this.o.pod.name, false, new AbortController().signal, 'standby: routing label removed from own pod');
    void this.elector.run();
  }

  /** Steps down (releases the Lease) and stops campaigning. */
  stop(): Promise<void> {
    return this.elector.stop();
  }

  private async lead(signal: AbortSignal): Promise<void> {
    const term = this.gate.startLeading();
    this.tookOverAt = Date.now();
    const log = this.o.log;
    // first the epoch, then the list: once the apiserver admits the new epoch it refuses every
    // reservation write of an older one, so the list below holds every reservation it will ever admit from them
    if (this.o.confirmEpoch !== false && !(await this.confirmEpoch(signal, term))) return;
    log.info('leader: rebuilding the reservations from the pods before serving');
    // until it succeeds or leadership ends: a leader that cannot list serves nothing
    for (let attempt = 1; !signal.aborted; attempt++) {
      try {
        await this.o.rebuild(signal);
        break;
      } catch (err) {
        log.warn({ err: (err as Error).message, attempt }, 'rebuild failed: retrying');
        await new Promise((r) => setTimeout(r, Math.min(2000, 100 * 2 ** attempt)));
      }
    }
    if (signal.aborted || !this.gate.rebuilt(term)) return;
    log.info({ rebuildMs: Date.now() - this.tookOverAt, epoch: this.elector.leaseTransitions }, 'leader: state rebuilt, serving');
    try {
      await this.o.onServing?.();
    } catch (err) {
      log.error({ err: (err as Error).message }, 'starting the leader-only work failed');
    }
    if (this.o.pod) await this.route(this.o.pod, signal);
  }

  /**
   * Waits until EVERY kube-apiserver admits a write carrying this term's reservation epoch (the
   * Lease's spec.leaseTransitions): a server-side dry run (`?dryRun=All`, nothing stored) of a merge
   * PATCH of the Lease itself setting {@link RESERVATION_EPOCH_ANNOTATION}, which the policy
   * `ulysses-reservation-epoch` checks against its parameter, this same Lease, as read from the
   * answering apiserver's informer cache. Refused (403, the policy's message) while that cache still
   * has the previous epoch. Admitted means that apiserver refuses every older epoch from now on; each
   * apiserver has its own cache, so the dry run goes to each of them directly:
   *  - the kubeconfig's server (the one the reservation writes go to; behind it may be an apiserver
   *    that is listed nowhere, e.g. `--endpoint-reconciler-type=none`), and
   *  - every address of the apiservers' own list, the EndpointSlice (else Endpoints)
   *    default/kubernetes (apiservers.ts), re-read every round: an apiserver that cannot be reached
   *    holds the leader back until it confirms or leaves the list (a stopped apiserver leaves it
   *    5-25 s after it stopped). Same credentials; TLS verified against the kubeconfig's CA with the
   *    address as the server name (apiservers.ts apiserverAccess).
   * Every round is bounded (list read and each dry run: {@link CONFIRM_TIMEOUT_MS}), confirmations
   * are kept across rounds, and the readiness reason names the apiservers still pending. An
   * extender that cannot reach the listed addresses (run outside the cluster's network) does not
   * serve as the leader: that is the safe side, the reason says which address it could not reach.
   * A cache without the Lease admits the dry run (parameterNotFoundAction Allow; a Lease just created
   * has no earlier term), and so does a cluster without the policy. True once confirmed.
   */
  private async confirmEpoch(signal: AbortSignal, term: number): Promise<boolean> {
    const ns = this.o.namespace ?? 'kube-system';
    const what = `Lease ${ns}/${this.o.name}`;
    const path = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(ns)}/leases/${encodeURIComponent(this.o.name)}`;
    const log = this.o.log;
    const started = Date.now();
    const server = this.client.kc?.getCurrentCluster()?.server;
    const own = server ? new URL(server).origin : '(kubeconfig server)';
    /** apiserver URL -> the epoch it admitted */
    const confirmed = new Map<string, number>();
    let last = '';
    for (let attempt = 1; !signal.aborted; attempt++) {
      const t = this.elector.leaseTransitions;
      let why: string;
      if (t === undefined) why = `${what} has no spec.leaseTransitions (the reservation epoch): cannot fence the reservations`;
      else {
        let listed: string[] | undefined;
        let listError = '';
        try {
          listed = await this.listApiservers();
        } catch (err) {
          listError = `cannot read the apiservers' list (EndpointSlice default/kubernetes): ${(err as Error).message}`;
        }
        const targets = [own, ...(listed ?? []).filter((u) => u !== own)];
        const pending = new Map<string, string>();
        for (const u of targets) if (confirmed.get(u) !== t) pending.set(u, 'no answer yet');
        const show = () => {
          const items = [...pending].map(([u, r]) => `${hostPort(u)}${u === own ? ' (kubeconfig server)' : ''}: ${r}`);
          return `confirming reservation epoch ${t} (${what} spec.leaseTransitions) on ${targets.length} apiserver(s); pending: ${items.join('; ') || 'none'}${listError ? `; ${listError}` : ''}`;
        };
        this.gate.progress(term, show());
        await Promise.all(
          [...pending.keys()].map(async (u) => {
            try {
              const client = u === own ? this.client : this.direct(u);
              await client.request('PATCH', path, {
                query: { dryRun: 'All' },
                body: { metadata: { annotations: { [RESERVATION_EPOCH_ANNOTATION]: String(t) } } },
                contentType: 'application/merge-patch+json',
                timeoutMs: CONFIRM_TIMEOUT_MS,
              });
              confirmed.set(u, t);
              pending.delete(u);
              this.confirmations.push({ apiserver: hostPort(u), epoch: t, kubeconfigServer: u === own });
              log.info({ epoch: t, apiserver: hostPort(u), attempts: attempt }, `leader: apiserver ${hostPort(u)} admits reservation epoch ${t}`);
            } catch (err) {
              const e = err as Error & { statusCode?: number; code?: string; type?: string };
              pending.set(u, e.name === 'AbortError' || e.type === 'aborted' ? `no answer within ${CONFIRM_TIMEOUT_MS} ms` : e.statusCode !== undefined ? `refused: ${e.message}` : `unreachable: ${e.message}`);
            }
            if (!signal.aborted) this.gate.progress(term, show());
          }),
        );
        if (pending.size === 0 && listed !== undefined) {
          log.info({ epoch: t, apiservers: targets.map(hostPort), attempts: attempt, ms: Date.now() - started }, `leader: every apiserver admits reservation epoch ${t} (${what} spec.leaseTransitions)`);
          this.gate.progress(term, REBUILDING);
          return true;
        }
        why = show();
      }
      this.gate.progress(term, why);
      // every distinct reason once (timeouts told apart by nothing but their length are one), then every 20th attempt
      const kind = why.replace(/within \d+ ms/g, '');
      if (kind !== last || attempt % 20 === 0) log.warn({ attempt }, `leader: not serving yet: ${why}`);
      last = kind;
      await new Promise((r) => setTimeout(r, Math.min(1000, 25 * 2 ** attempt)));
    }
    return false;
  }

  /** The apiservers' own list (apiservers.ts), read through the kubeconfig's server. */
  private async listApiservers(): Promise<string[]> {
    try {
      return apiserversFromSlice(await this.client.request('GET', APISERVER_SLICE_PATH, { timeoutMs: CONFIRM_TIMEOUT_MS }));
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
    try {
      return apiserversFromEndpoints(await this.client.request('GET', APISERVER_ENDPOINTS_PATH, { timeoutMs: CONFIRM_TIMEOUT_MS }));
    } catch (err) {
      // neither object: a cluster whose apiservers list themselves nowhere; the kubeconfig's server is all there is
      if ((err as { statusCode?: number }).statusCode === 404) return [];
      throw err;
    }
  }

  /** A client for one apiserver's own address (kept per address: one keep-alive connection each). */
  private direct(url: string): Pick<KubeClient, 'request'> {
    let c = this.directClients.get(url);
    if (!c) {
      if (this.directClients.size >= MAX_APISERVERS * 2) this.directClients.clear();
      if (!this.o.apiserverClient && !this.client.kc) throw new Error(`no kubeconfig behind the Lease client: cannot reach apiserver ${hostPort(url)} directly`);
      c = this.o.apiserverClient?.(url) ?? new KubeClient(apiserverAccess(this.client.kc, url));
      this.directClients.set(url, c);
    }
    return c;
  }

  /**
   * Routing: the Service's EndpointSlice to our pod (routing.ts; then kept so every
   * ROUTE_RECHECK_MS while leading), the leader label on our pod, then off every other pod that
   * still has it (a dead or deposed leader).
   */
  private async route(pod: { namespace: string; name: string }, signal: AbortSignal): Promise<void> {
    const self = await this.ownPod(pod, signal);
    if (self) {
      const keep = async (first: boolean) => {
        try {
          await publishRoute(this.client, self, this.o.log);
        } catch (err) {
          this.o.log.warn({ err: (err as Error).message }, 'could not route the extender Service to this pod: retrying');
          if (first && !signal.aborted) await new Promise((r) => setTimeout(r, 1000));
          return false;
        }
        return true;
      };
      while (!signal.aborted && !(await keep(true)));
      void (async () => {
        while (!signal.aborted) {
          await new Promise((r) => setTimeout(r, ROUTE_RECHECK_MS).unref());
          if (!signal.aborted && this.gate.check().ready) await keep(false);
        }
      })();
    }
    await this.setLabel(pod.name, true, signal, 'leader: routing label set on own pod');
    while (!signal.aborted) {
      try {
        const others = await this.client.request<{ items: Array<{ metadata?: { name?: string } }> }>('GET', `/api/v1/namespaces/${encodeURIComponent(pod.namespace)}/pods`, {
          query: { labelSelector: `${LEADER_LABEL}=true` },
          timeoutMs: 10_000,
        });
        for (const p of others.items) {
          const name = p.metadata?.name;
          if (name && name !== pod.name) await this.setLabel(name, false, signal, 'leader: routing label removed from a former leader');
        }
        return;
      } catch (err) {
        this.o.log.warn({ err: (err as Error).message }, 'could not list the pods holding the routing label: retrying');
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  /** Our pod's uid, IP and node, read until known (the IP is there once the pod runs) or `signal` aborts. */
  private async ownPod(pod: { namespace: string; name: string }, signal: AbortSignal): Promise<LeaderPod | undefined> {
    const path = `/api/v1/namespaces/${encodeURIComponent(pod.namespace)}/pods/${encodeURIComponent(pod.name)}`;
    while (!signal.aborted) {
      try {
        const p = await this.client.request<{ metadata?: { uid?: string }; spec?: { nodeName?: string }; status?: { podIP?: string } }>('GET', path, { timeoutMs: 10_000 });
        if (p.metadata?.uid && p.status?.podIP) return { ...pod, uid: p.metadata.uid, ip: p.status.podIP, nodeName: p.spec?.nodeName };
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode === 404) {
          this.o.log.error({ pod: pod.name }, 'this pod does not exist: the extender Service is not routed to it');
          return undefined;
        }
        this.o.log.warn({ err: (err as Error).message }, 'could not read this pod for routing: retrying');
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
    return undefined;
  }

  /** Sets or removes the routing label on a pod of our namespace; retried until done or `signal` aborts (a pod that is gone needs nothing). */
  private async setLabel(name: string, on: boolean, signal: AbortSignal, done: string): Promise<void> {
    const path = `/api/v1/namespaces/${encodeURIComponent(this.o.pod!.namespace)}/pods/${encodeURIComponent(name)}`;
    for (let attempt = 1; !signal.aborted; attempt++) {
      try {
        await this.client.request('PATCH', path, { body: { metadata: { labels: { [LEADER_LABEL]: on ? 'true' : null } } }, contentType: 'application/merge-patch+json', timeoutMs: 10_000 });
        this.o.log.info({ pod: name }, done);
        return;
      } catch (err) {
        if ((err as { statusCode?: number }).statusCode === 404) return;
        if (attempt >= 30) {
          this.o.log.error({ pod: name, err: (err as Error).message }, 'giving up on the routing label');
          return;
        }
        await new Promise((r) => setTimeout(r, Math.min(5000, 200 * attempt)));
      }
    }
  }
}
