/**
 * Pacing of pod-sandbox creations on a node (thesis §5.3.4, "SLO-aware Kubelet"):
 *
 *   "High-priority requests are immediately served to reduce the latency. Conversely, the SLO-aware
 *    Kubelet introduces a delay between the handling of two low-priority requests, postponing the
 *    processing of the latter. [...] a minimum inter-arrival time of high-priority requests must be
 *    guaranteed [...] if every request has high priority, no request has high priority."
 *
 * Contract of {@link PacingGate}:
 * - two classes: `high` (criticality `high`) and `low` (criticality `low`, `none` or undeclared);
 * - a high request is released at once unless another high one was released less than
 *   `highMinInterArrivalMs` ago; excess highs wait, FIFO, for their slot. Highs never wait for lows:
 *   the two queues are independent and the high one is always served first;
 * - a low request is released once (a) the previous low request reached the runtime (the proxy's
 *   `forwarded`, else its release) at least the policy's gap ago and
 *   (b) it has been held `lowHoldMs` (default 0) since its arrival; FIFO. The gap after each low
 *   release comes from the {@link PacingPolicy} (vanilla / fixed / exponential decay);
 * - both queues are bounded: a request beyond the bound is rejected at once (`RESOURCE_EXHAUSTED`);
 *   lowering a bound at runtime never drops requests that already wait;
 * - a waiting request whose AbortSignal fires is removed (`CANCELLED`) and frees its place;
 * - `setPolicy` / `reconfigure` replace the policy or parameters at runtime; waiting requests stay
 *   queued and are re-timed under the new rule (the new policy continues from the last low release).
 * Time comes from an injectable {@link Clock}, so the rules are unit-tested with a fake clock.
 */
import { z } from 'zod';
import type { Logger } from 'pino';
import type { Criticality } from '../core/criticality.ts';
import { realClock, type Clock, type Timer } from '../core/clock.ts';
import { validateConfig } from '../core/config.ts';
import type { ShimMetrics } from './metrics.ts';

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/**
 * The longest duration any pacing parameter may name (10 minutes). A longer wait holds a pod as good
 * as forever, and past setTimeout's 2^31-1 ms a timer fires at once and re-arms every millisecond;
 * the CRD (manifests/base/crd-ulyssesconfig.yaml) bounds every parameter by the same number.
 */
export const MAX_PACING_DURATION_MS = 600_000;
const ms = z.number().finite().nonnegative().max(MAX_PACING_DURATION_MS);

export const VanillaPolicySchema = z.object({ type: z.literal('vanilla') }).strict();

export const FixedPolicySchema = z
  .object({
    type: z.literal('fixed'),
    /** Constant wait between two low-priority creations (thesis §6.5: 1.2 s). */
    waitMs: ms.default(1200),
  })
  .strict();

export const ExponentialDecayPolicySchema = z
  .object({
    type: z.literal('exponential-decay'),
    /** Wait after the first low-priority creation of a burst (thesis: cloud 700 ms, edge 1.5 s). */
    initialWaitMs: ms.default(700),
    /** Multiplier applied to the wait at each further creation (thesis: cloud 0.5, edge 0.6). */
    factor: z.number().gt(0).lte(1).default(0.5),
    /** Idle time (no low-priority creation) after which the wait is back to `initialWaitMs` (thesis: 5 s). */
    resetAfterMs: ms.default(5000),
    /** Floor of the decayed wait (0: decays towards zero, as in the thesis). */
    minWaitMs: ms.default(0),
  })
  .strict();

/**
 * `adaptive` (Ulysses, beyond the thesis): the wait between two low-priority creations is the output
 * of seed 001's asymmetric feedback controller (Tamiru et al., "Instability in Geo-Distributed
 * Kubernetes Federation", MASCOTS 2020, §V-A Algorithm 1), fed with the creation latency of
 * critical pods on this node instead of KubeFed timeout errors.
 */
export const AdaptivePolicySchema = z
  .object({
    type: z.literal('adaptive'),
    /** Set point: creation latency of a critical pod (its RunPodSandbox reaching the shim -> its first container started). */
    targetMs: ms.default(2000),
    /** Wait before any feedback. */
    initialWaitMs: ms.default(0),
    /** Bounds of the wait. */
    minWaitMs: ms.default(0),
    maxWaitMs: ms.default(2000),
    /** Positive gain: wait += kp * (latency - targetMs) on each slow critical creation (seed 001: best K_p = 1). */
    kp: z.number().finite().nonnegative().default(0.5),
    /** Negative gain: wait *= (1 - kn) after `cleanIntervals` consecutive intervals without a slow one (seed 001: best K_n = 0.1). */
    kn: z.number().gt(0).lt(1).default(0.1),
    /** Control interval (seed 001: 1 min; the wait here changes without a restart, so it can be short). */
    intervalMs: ms.positive().default(5000),
    /** Consecutive clean intervals before a decrease (seed 001: decrement_period = 3). */
    cleanIntervals: z.number().int().positive().default(3),
  })
  .strict()
  .refine((c) => c.minWaitMs <= c.maxWaitMs, { message: 'minWaitMs must not exceed maxWaitMs', path: ['maxWaitMs'] })
  .refine((c) => c.initialWaitMs >= c.minWaitMs && c.initialWaitMs <= c.maxWaitMs, { message: 'must lie within [minWaitMs, maxWaitMs]', path: ['initialWaitMs'] });

export const PacingPolicySchema = z.discriminatedUnion('type', [VanillaPolicySchema, FixedPolicySchema, ExponentialDecayPolicySchema, AdaptivePolicySchema]);

export type PacingPolicyConfig = z.output<typeof PacingPolicySchema>;
export type PacingPolicyInput = z.input<typeof PacingPolicySchema>;

export const PacingConfigSchema = z
  .object({
    policy: PacingPolicySchema.prefault({ type: 'vanilla' }),
    /** Minimum time between the releases of two high-priority requests. */
    highMinInterArrivalMs: ms.default(100),
    /** Minimum time a low-priority request is held after its arrival, so highs of the same burst go first. */
    lowHoldMs: ms.default(0),
    /** Maximum number of low-priority requests waiting; more are rejected with RESOURCE_EXHAUSTED. */
    maxQueueLength: z.number().int().positive().default(1024),
    /** Maximum number of high-priority requests waiting for their slot. */
    maxHighQueueLength: z.number().int().positive().default(64),
    /**
     * Critical-path protection (Ulysses, beyond the thesis): after a high-priority sandbox is
     * released, low-priority sandboxes wait until that pod's first container has started (reported
     * by the proxy through highDone) or this long at most, so that the critical pod's container
     * creation does not compete with new low-priority sandboxes. 0 = thesis behaviour.
     */
    holdLowsDuringHighMs: ms.default(0),
  })
  .strict();

export type PacingConfig = z.output<typeof PacingConfigSchema>;
export type PacingConfigInput = z.input<typeof PacingConfigSchema>;

/** The thesis' settings (§6.1.1, §6.5). */
export const THESIS_POLICIES = Object.freeze({
  fixed: { type: 'fixed', waitMs: 1200 },
  cloud: { type: 'exponential-decay', initialWaitMs: 700, factor: 0.5, resetAfterMs: 5000, minWaitMs: 0 },
  edge: { type: 'exponential-decay', initialWaitMs: 1500, factor: 0.6, resetAfterMs: 5000, minWaitMs: 0 },
} as const satisfies Record<string, PacingPolicyConfig>);

// ---------------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------------

/** Decides the gap between two consecutive low-priority releases. */
export interface PacingPolicy {
  readonly config: PacingPolicyConfig;
  /**
   * A low-priority request was released at `now` (ms); returns the minimum time (ms) before the
   * next low-priority release. Called exactly once per low release, in time order.
   */
  afterRelease(now: number): number;
  /**
   * Feedback: a critical pod's creation took `latencyMs` (reported at `now`). Returns true when the
   * wait changed, so the gate re-times the next low release. Only feedback policies implement it.
   */
  observeCritical?(latencyMs: number, now: number): boolean;
  /** The wait the policy would apply now (ms), for the gauge; feedback policies only. */
  currentWaitMs?(now: number): number;
}

/** No pacing: every request is forwarded at once (the vanilla kubelet). */
export class VanillaPolicy implements PacingPolicy {
  readonly config = { type: 'vanilla' } as const;
  afterRelease(_now: number): number {
    return 0;
  }
}

/** A constant wait between two low-priority creations (thesis §5.3.4 "fixed", 1.2 s in §6.5). */
export class FixedPolicy implements PacingPolicy {
  constructor(readonly config: z.output<typeof FixedPolicySchema>) {}
  afterRelease(_now: number): number {
    return this.config.waitMs;
  }
}

/**
 * Thesis §5.3.4 "exponential decay": "the waiting time between requests varies accordingly to a
 * decreasing geometric progression, and it is reset after a period of inactivity" — it protects the
 * first requests of a burst, the ones the control plane prioritized. Gaps after the 1st, 2nd, 3rd
 * ... low release of a burst: initial, initial·factor, initial·factor², ... (never below
 * `minWaitMs`); a release at least `resetAfterMs` after the previous one starts a new burst.
 * §6.1.1: cloud 700 ms ×0.5, edge 1.5 s ×0.6, reset after 5 s.
 */
export class ExponentialDecayPolicy implements PacingPolicy {
  private releasesInBurst = 0;
  private lastRelease: number | undefined;

  constructor(readonly config: z.output<typeof ExponentialDecayPolicySchema>) {}

  afterRelease(now: number): number {
    const { initialWaitMs, factor, resetAfterMs, minWaitMs } = this.config;
    if (this.lastRelease === undefined || now - this.lastRelease >= resetAfterMs) this.releasesInBurst = 0;
    this.lastRelease = now;
    const gap = initialWaitMs * factor ** this.releasesInBurst;
    this.releasesInBurst++;
    return Math.max(minWaitMs, gap);
  }
}

/**
 * `adaptive`: seed 001's asymmetric controller (Tamiru et al. 2020, Algorithm 1) on the low-priority
 * wait W, with PV = a critical pod's creation latency and SP = `targetMs`:
 *   - on a slow critical creation (e = latency - targetMs > 0): W := min(maxWaitMs, W + kp * e), and
 *     the clean-interval count restarts (t := decrement_period);
 *   - after `cleanIntervals` consecutive control intervals without a slow creation:
 *     W := max(minWaitMs, (1 - kn) * W), and the count restarts.
 * The increase is applied at once (the observation is the event; Algorithm 1 samples every minute
 * only because changing KubeFed's timeout needed a restart); intervals are evaluated lazily from the
 * clock, so the controller needs no timer of its own.
 */
export class AdaptivePolicy implements PacingPolicy {
  private waitMs: number;
  private intervalStart: number | undefined;
  /** A slow creation was seen in the current interval. */
  private slowInInterval = false;
  /** Consecutive clean intervals since the last change (Algorithm 1's decrement_period - t). */
  private clean = 0;

  constructor(
    readonly config: z.output<typeof AdaptivePolicySchema>,
    private readonly log?: Logger,
  ) {
    this.waitMs = config.initialWaitMs;
  }

  afterRelease(now: number): number {
    this.advance(now);
    return this.waitMs;
  }

  currentWaitMs(now: number): number {
    this.advance(now);
    return this.waitMs;
  }

  observeCritical(latencyMs: number, now: number): boolean {
    this.advance(now);
    const error = latencyMs - this.config.targetMs;
    if (error <= 0) return false;
    this.slowInInterval = true;
    this.clean = 0;
    const before = this.waitMs;
    this.waitMs = Math.min(this.config.maxWaitMs, this.waitMs + this.config.kp * error);
    this.log?.info({ latencyMs: Math.round(latencyMs), targetMs: this.config.targetMs, waitMs: Math.round(this.waitMs), beforeMs: Math.round(before) }, 'adaptive pacing: critical creation slow, low-priority wait raised');
    return this.waitMs !== before;
  }

  /** Closes the control intervals that ended before `now`, decaying the wait after each run of clean ones. */
  private advance(now: number): void {
    const { intervalMs, cleanIntervals, kn, minWaitMs } = this.config;
    if (this.intervalStart === undefined) {
      this.intervalStart = now;
      return;
    }
    const ended = Math.floor((now - this.intervalStart) / intervalMs);
    if (ended <= 0) return;
    this.intervalStart += ended * intervalMs;
    // the interval in progress until now, then ended-1 intervals without any observation
    let left = ended;
    if (this.slowInInterval) {
      this.slowInInterval = false;
      left--;
    }
    const before = this.waitMs;
    for (; left > 0 && this.waitMs > minWaitMs; left--) {
      if (++this.clean < cleanIntervals) continue;
      this.clean = 0;
      this.waitMs = Math.max(minWaitMs, (1 - kn) * this.waitMs);
      if (this.waitMs - minWaitMs < 0.01) this.waitMs = minWaitMs;
    }
    if (left > 0) this.clean = (this.clean + left) % cleanIntervals; // at the floor: only the count moves
    if (this.waitMs !== before) this.log?.debug({ waitMs: Math.round(this.waitMs), beforeMs: Math.round(before) }, 'adaptive pacing: clean intervals, low-priority wait decayed');
  }
}

/** Validates a policy's configuration (ConfigError naming the field) and builds the policy. */
export function createPolicy(config: PacingPolicyInput, log?: Logger): PacingPolicy {
  return policyOf(validateConfig(PacingPolicySchema, config, 'pacing policy'), log);
}

/** The policy of an already validated configuration. */
function policyOf(c: PacingPolicyConfig, log?: Logger): PacingPolicy {
  switch (c.type) {
    case 'vanilla':
      return new VanillaPolicy();
    case 'fixed':
      return new FixedPolicy(c);
    case 'exponential-decay':
      return new ExponentialDecayPolicy(c);
    case 'adaptive':
      return new AdaptivePolicy(c, log);
  }
}

// ---------------------------------------------------------------------------------------------
// Gate
// ---------------------------------------------------------------------------------------------

export type PriorityClass = 'high' | 'low';

export function priorityClassOf(criticality: Criticality | undefined): PriorityClass {
  return criticality === 'high' ? 'high' : 'low';
}

export interface PacingRequest {
  /** "namespace/name" of the pod, for logs. */
  readonly key: string;
  readonly criticality: Criticality;
}

export interface Admission {
  readonly priority: PriorityClass;
  /** Time spent waiting in the gate (ms). */
  readonly waitedMs: number;
  /** Clock time of the release. */
  readonly releasedAt: number;
}

export type PacingRejectionCode = 'RESOURCE_EXHAUSTED' | 'CANCELLED' | 'UNAVAILABLE';

/** Why the gate did not admit a request; the proxy maps `code` to the gRPC status of the same name. */
export class PacingRejection extends Error {
  constructor(
    readonly code: PacingRejectionCode,
    message: string,
  ) {
    super(message);
    this.name = 'PacingRejection';
  }
}

interface Waiter {
  readonly req: PacingRequest;
  readonly priority: PriorityClass;
  readonly arrivedAt: number;
  readonly resolve: (a: Admission) => void;
  readonly reject: (e: PacingRejection) => void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

export interface PacingGateOptions {
  config?: PacingConfigInput;
  clock?: Clock;
  log?: Logger;
  metrics?: ShimMetrics;
}

export interface PacingSnapshot {
  readonly policy: PacingPolicyConfig;
  readonly waitingHigh: readonly string[];
  readonly waitingLow: readonly string[];
}

export class PacingGate {
  private cfg: PacingConfig;
  private policy: PacingPolicy;
  private readonly clock: Clock;
  private readonly log: Logger | undefined;
  private readonly metrics: ShimMetrics | undefined;
  private readonly high: Waiter[] = [];
  private readonly low: Waiter[] = [];
  private lastHighRelease: number | undefined;
  private lastLowRelease: number | undefined;
  /** The last low-priority admission, until its request reaches the runtime ({@link forwarded}). */
  private lastLowAdmission: Admission | undefined;
  /** Earliest time of the next low release allowed by the policy. */
  private nextLowAt = -Infinity;
  private timer: Timer | undefined;
  private timerDue = Infinity;
  private closed = false;
  /** Why critical pods are refused (self-fencing, fencing.ts); undefined while the node is not fenced. */
  private fencedReason: string | undefined;
  /** high-priority pods released and not yet started: key -> hold deadline for low releases */
  private readonly highInFlight = new Map<string, number>();

  constructor(opts: PacingGateOptions = {}) {
    this.cfg = validateConfig(PacingConfigSchema, opts.config ?? {}, 'pacing');
    this.clock = opts.clock ?? realClock;
    this.log = opts.log;
    this.metrics = opts.metrics;
    this.policy = policyOf(this.cfg.policy, this.log);
  }

  get config(): PacingConfig {
    return this.cfg;
  }

  /**
   * Self-fencing (fencing.ts): with a reason, every critical pod's RunPodSandbox is refused (the
   * kubelet retries it with backoff), and the critical ones waiting are refused now; undefined lifts it.
   */
  fence(reason: string | undefined): void {
    this.fencedReason = reason;
    if (reason === undefined) return;
    for (const w of this.high.filter((x) => x.req.criticality === 'high')) {
      this.high.splice(this.high.indexOf(w), 1);
      if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort);
      w.reject(new PacingRejection('UNAVAILABLE', `kubelet-shim: critical pod ${w.req.key} not started: ${reason}`));
    }
    this.updateGauge();
  }

  get fenced(): string | undefined {
    return this.fencedReason;
  }

  /** Requests waiting (both classes). */
  get queueLength(): number {
    return this.high.length + this.low.length;
  }

  snapshot(): PacingSnapshot {
    return {
      policy: this.cfg.policy,
      waitingHigh: this.high.map((w) => w.req.key),
      waitingLow: this.low.map((w) => w.req.key),
    };
  }

  /**
   * Resolves when `req` may be forwarded to the runtime; rejects with a {@link PacingRejection}
   * when the queue of its class is full, when `signal` aborts while it waits, or when the gate closes.
   */
  acquire(req: PacingRequest, signal?: AbortSignal): Promise<Admission> {
    const priority = priorityClassOf(req.criticality);
    if (this.closed) return Promise.reject(new PacingRejection('UNAVAILABLE', 'pacing gate closed'));
    if (signal?.aborted) return Promise.reject(new PacingRejection('CANCELLED', `${req.key}: cancelled before pacing`));
    if (this.fencedReason !== undefined && req.criticality === 'high') return Promise.reject(new PacingRejection('UNAVAILABLE', `kubelet-shim: critical pod ${req.key} not started: ${this.fencedReason}`));
    const queue = priority === 'high' ? this.high : this.low;
    const now = this.clock.now();
    // Fast path: nothing ahead of it and its slot is open.
    if (queue.length === 0 && now >= this.dueOf(priority, now)) {
      return Promise.resolve(this.admit(req, priority, now, now));
    }
    const bound = priority === 'high' ? this.cfg.maxHighQueueLength : this.cfg.maxQueueLength;
    if (queue.length >= bound) {
      this.log?.warn({ key: req.key, priority, waiting: queue.length }, 'pacing queue full: request rejected');
      return Promise.reject(new PacingRejection('RESOURCE_EXHAUSTED', `kubelet-shim: ${priority}-priority pacing queue full (${bound} waiting)`));
    }
    return new Promise<Admission>((resolve, reject) => {
      const w: Waiter = { req, priority, arrivedAt: now, resolve, reject, signal, onAbort: undefined };
      if (signal) {
        w.onAbort = () => this.cancel(w);
        signal.addEventListener('abort', w.onAbort, { once: true });
      }
      queue.push(w);
      this.updateGauge();
      this.log?.debug({ key: req.key, priority, waiting: queue.length }, 'pacing: request queued');
      this.pump();
    });
  }

  /**
   * The proxy forwarded the request of `admission` to the runtime. For the last low-priority
   * admission, the policy's gap is re-counted from now: the thesis' wait is between two creations
   * reaching the runtime, and between the gate's release and the forward the event loop can be
   * busy for tens of ms (36-38 ms seen under the full test suite), which would bring two forwards
   * closer than the wait.
   */
  forwarded(admission: Admission): void {
    if (admission !== this.lastLowAdmission) return;
    this.lastLowAdmission = undefined;
    const now = this.clock.now();
    const delay = now - admission.releasedAt;
    if (delay <= 0) return;
    this.lastLowRelease = now;
    this.nextLowAt += delay;
    this.pump();
  }

  /** The high-priority pod `key` has its first container started (or failed): stop holding lows for it. */
  highDone(key: string): void {
    if (this.highInFlight.delete(key)) {
      this.log?.debug({ key }, 'pacing: critical pod started, low-priority releases resume');
      this.pump();
    }
  }

  /**
   * Feedback from the proxy's critical-path tracking: the critical pod `key` took `latencyMs` from
   * its RunPodSandbox to its first started container. A feedback policy (`adaptive`) adjusts the
   * low-priority wait; the next low release is re-timed from the last one under the new wait.
   */
  criticalCreation(key: string, latencyMs: number): void {
    const now = this.clock.now();
    this.metrics?.criticalCreation.observe(latencyMs / 1000);
    if (!this.policy.observeCritical?.(latencyMs, now)) return;
    if (this.lastLowRelease !== undefined) this.nextLowAt = this.lastLowRelease + (this.policy.currentWaitMs?.(now) ?? 0);
    this.log?.debug({ key, latencyMs: Math.round(latencyMs) }, 'pacing: low-priority wait re-timed after critical feedback');
    this.updateGauge();
    this.pump();
  }

  /** The current wait of a feedback policy (ms), undefined for the others. */
  get adaptiveWaitMs(): number | undefined {
    return this.policy.currentWaitMs?.(this.clock.now());
  }

  /** Keys of high-priority pods whose start currently holds low-priority releases. */
  get highsInFlight(): string[] {
    return [...this.highInFlight.keys()];
  }

  /** Replaces the low-priority policy; waiting requests stay queued and are re-timed under it. */
  setPolicy(config: PacingPolicyInput): void {
    this.apply({ ...this.cfg, policy: validateConfig(PacingPolicySchema, config, 'pacing policy') });
  }

  /** Validates and replaces the whole pacing configuration (policy and parameters) without losing waiting requests. */
  reconfigure(config: PacingConfigInput): void {
    this.apply(validateConfig(PacingConfigSchema, config, 'pacing'));
  }

  /** {@link reconfigure} with a configuration its caller has validated already (each update is validated once). */
  apply(cfg: PacingConfig): void {
    const policyChanged = JSON.stringify(cfg.policy) !== JSON.stringify(this.cfg.policy);
    this.cfg = cfg;
    if (policyChanged) {
      this.policy = policyOf(cfg.policy, this.log);
      // The new policy continues from the last low release, as if that release had happened under it.
      this.nextLowAt = this.lastLowRelease === undefined ? -Infinity : this.lastLowRelease + this.policy.afterRelease(this.lastLowRelease);
    }
    this.log?.info({ pacing: cfg, waiting: this.queueLength }, 'pacing reconfigured');
    this.pump();
  }

  /** Rejects every waiting request (UNAVAILABLE) and refuses new ones. */
  close(): void {
    this.closed = true;
    this.cancelTimer();
    for (const w of [...this.high.splice(0), ...this.low.splice(0)]) {
      this.detach(w);
      w.reject(new PacingRejection('UNAVAILABLE', 'kubelet-shim shutting down'));
    }
    this.updateGauge();
  }

  // -------------------------------------------------------------------------------------------

  /** Earliest release time of the head of `priority`'s queue (or of a newcomer when it is empty). */
  private dueOf(priority: PriorityClass, now: number, head?: Waiter): number {
    if (priority === 'high') {
      return this.lastHighRelease === undefined ? -Infinity : this.lastHighRelease + this.cfg.highMinInterArrivalMs;
    }
    const arrived = head?.arrivedAt ?? now;
    let hold = -Infinity;
    for (const [key, until] of this.highInFlight) {
      if (until <= now) this.highInFlight.delete(key);
      else hold = Math.max(hold, until);
    }
    return Math.max(this.nextLowAt, arrived + this.cfg.lowHoldMs, hold);
  }

  private admit(req: PacingRequest, priority: PriorityClass, arrivedAt: number, now: number): Admission {
    if (priority === 'high') {
      this.lastHighRelease = now;
      if (this.cfg.holdLowsDuringHighMs > 0) this.highInFlight.set(req.key, now + this.cfg.holdLowsDuringHighMs);
    } else {
      this.lastLowRelease = now;
      this.nextLowAt = now + this.policy.afterRelease(now);
    }
    const waitedMs = now - arrivedAt;
    this.metrics?.pacingWait.observe({ priority }, waitedMs / 1000);
    this.log?.debug({ key: req.key, criticality: req.criticality, priority, waitedMs: Math.round(waitedMs) }, 'pacing: sandbox creation released');
    const admission: Admission = { priority, waitedMs, releasedAt: now };
    if (priority === 'low') this.lastLowAdmission = admission;
    return admission;
  }

  /** Releases every head whose time has come, then arms the timer for the next due head. */
  private pump(): void {
    if (this.closed) return;
    const now = this.clock.now();
    for (const [priority, queue] of [['high', this.high], ['low', this.low]] as const) {
      while (queue.length > 0 && now >= this.dueOf(priority, now, queue[0])) {
        const w = queue.shift()!;
        this.detach(w);
        w.resolve(this.admit(w.req, priority, w.arrivedAt, now));
      }
    }
    this.updateGauge();
    let due = Infinity;
    if (this.high.length > 0) due = Math.min(due, this.dueOf('high', now, this.high[0]));
    if (this.low.length > 0) due = Math.min(due, this.dueOf('low', now, this.low[0]));
    if (due === this.timerDue) return;
    this.cancelTimer();
    if (due === Infinity) return;
    this.timerDue = due;
    this.timer = this.clock.setTimer(() => {
      this.timer = undefined;
      this.timerDue = Infinity;
      this.pump();
    }, due - now);
  }

  private cancel(w: Waiter): void {
    const queue = w.priority === 'high' ? this.high : this.low;
    const i = queue.indexOf(w);
    if (i < 0) return; // already released
    queue.splice(i, 1);
    this.detach(w);
    this.log?.info({ key: w.req.key, priority: w.priority, waitedMs: Math.round(this.clock.now() - w.arrivedAt) }, 'pacing: waiting request cancelled');
    w.reject(new PacingRejection('CANCELLED', `${w.req.key}: cancelled while waiting for pacing`));
    this.pump();
  }

  private detach(w: Waiter): void {
    if (w.signal && w.onAbort) w.signal.removeEventListener('abort', w.onAbort);
    w.onAbort = undefined;
  }

  private cancelTimer(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.timerDue = Infinity;
  }

  private updateGauge(): void {
    if (!this.metrics) return;
    this.metrics.queueLength.set(this.queueLength);
    const w = this.policy.currentWaitMs?.(this.clock.now());
    if (w !== undefined) this.metrics.lowWait.set(w / 1000);
  }
}
