/**
 * WorkerPool: the serving policy of one controller (thesis §5.3.1). A controller supplies only
 * `reconcile(key)` and enqueues keys on `pool.queue`; the pool decides when and by whom each key is
 * served, in one of three modes switchable at runtime (pool-config.ts):
 *
 *  vanilla                  FIFO; N async workers (or vanillaWorkers); each sync waits for a client-side token
 *                           (kcm: 20 qps, burst 30) — throttled regardless of priority.
 *  multi-priority-async     priority order; N async workers (token-gated by default, as the
 *                           thesis' config 4 kept the client rate limit).
 *  multi-priority-periodic  priority order; N' = N - H periodic workers, worker k ticks at
 *                           t0 + k*T/N' + m*T and serves at most one key per tick (nothing if the
 *                           queue is empty: idle slot), so one key every T/N' overall; H async
 *                           workers take high-priority keys the moment they are queued. A tick
 *                           missed while serving is delivered late, further missed ones are dropped
 *                           (Go time.Ticker, as the thesis' prototype). A worker whose tick finds the
 *                           queue empty parks (no timer) until a key is ready, then resumes at its
 *                           next tick phase t0 + k*T/N' + m*T: a key is served at the same tick as
 *                           with ticking workers, and an idle controller costs no CPU.
 *
 * Results: a resolved reconcile forgets the key's backoff, and re-queues it after `requeueAfterMs`
 * if given; a thrown error re-queues it rate-limited (TerminalError: not retried). Re-queues keep
 * the key's priority.
 *
 * Abuse guard: requests to create or raise a high-priority entry pass a token bucket of
 * `highBurst` tokens refilled every `highMinInterArrivalMs`; a request without a token is queued
 * as low ("if every request has high priority, no request has high priority").
 *
 * setMode() retires the current workers (waiting ones stop at once, busy ones finish their key) and
 * starts the new ones; queued keys stay in the queue (its ordering is switched in place), and the
 * queue's processing set guarantees that no key is ever reconciled by two workers at once, old or new.
 */
import { setMaxListeners } from 'node:events';
import type { Logger } from 'pino';
import { componentLogger } from '../../core/logging.ts';
import { realClock, sleepUntil, type Clock } from '../../core/clock.ts';
import { workerMetrics } from './metrics.ts';
import { parseWorkerPoolConfig, WORKER_MODES, type WorkerMode, type WorkerPoolConfig, type WorkerPoolConfigInput } from './pool-config.ts';
import { PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NONE, priorityName, type Priority } from '../../core/priority.ts';
import type { QueueItem } from './queue.ts';
import type { RateLimiter } from './rate-limiters.ts';
import { PriorityWorkQueue } from './rate-limiting.ts';
import { TokenBucket } from '../../core/token-bucket.ts';

/** kube-controller-manager's client-side rate limit defaults (--kube-api-qps, --kube-api-burst): the vanilla mode's gate. */
export const KCM_API_QPS = 20;
export const KCM_API_BURST = 30;

export interface ReconcileResult {
  /** Reconcile the key again after this long (controller-runtime Result.RequeueAfter). */
  requeueAfterMs?: number;
}

export interface ReconcileContext {
  /** Priority the key was served with. */
  readonly priority: Priority;
  readonly mode: WorkerMode;
  /** Aborted when the pool stops. */
  readonly signal: AbortSignal;
}

export type Reconciler<K> = (key: K, ctx: ReconcileContext) => Promise<ReconcileResult | void>;

/** Thrown by a reconcile to report an error that retrying cannot fix: logged, not re-queued. */
export class TerminalError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'TerminalError';
  }
}

export interface WorkerPoolOptions<K> extends WorkerPoolConfigInput {
  /** Controller name: metric label `controller` / `name`, log field `controller`. */
  name: string;
  reconcile: Reconciler<K>;
  clock?: Clock;
  /** Default: a PriorityWorkQueue named `name` on `clock`, with `rateLimiter`. */
  queue?: PriorityWorkQueue<K>;
  rateLimiter?: RateLimiter<K>;
  /**
   * The client-side limiter gating syncs in `rateLimitedModes`. kube-controller-manager has one per
   * controller (each controller's clientset has its own): the default, a private 20 qps / burst 30
   * one. Pools given the same bucket share its rate.
   */
  tokenBucket?: TokenBucket;
  logger?: Logger;
  /** How keys appear in logs (default String). */
  keyToString?: (key: K) => string;
  /**
   * Periodic mode: while this returns true, a tick serves high-priority keys only (the manager's
   * CriticalPathHold: a critical pod is on its way to Ready). Async workers are not affected.
   */
  lowHold?: () => boolean;
}

export interface WorkerPoolStats {
  /** Reconciles started. */
  syncs: number;
  /** Reconciles running now. */
  inFlight: number;
  /** High-priority requests queued as low by the guard. */
  demoted: number;
  /** Periodic ticks that found nothing to serve. */
  idleSlots: number;
  /** Periodic ticks that served nothing because low-priority work was held (lowHold). */
  heldSlots: number;
  /** Times a periodic worker parked (queue empty: no timer until a key is ready). */
  parks: number;
}

interface Generation {
  readonly cfg: WorkerPoolConfig;
  readonly abort: AbortController;
  readonly loops: Promise<void>[];
}

type PoolState = 'idle' | 'running' | 'stopping' | 'stopped';

export class WorkerPool<K = string> {
  readonly name: string;
  readonly queue: PriorityWorkQueue<K>;
  readonly tokenBucket: TokenBucket;
  private readonly reconcile: Reconciler<K>;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly keyToString: (key: K) => string;
  private cfg: WorkerPoolConfig;
  private state: PoolState = 'idle';
  private gen: Generation | undefined;
  private readonly retiring = new Set<Promise<void>>();
  private readonly stopAbort = new AbortController();
  private guard: TokenBucket | undefined;
  private readonly counters: WorkerPoolStats = { syncs: 0, inFlight: 0, demoted: 0, idleSlots: 0, heldSlots: 0, parks: 0 };
  private readonly lowHold: (() => boolean) | undefined;

  constructor(opts: WorkerPoolOptions<K>) {
    const { name, reconcile, clock, queue, rateLimiter, tokenBucket, logger, keyToString, lowHold, ...config } = opts;
    this.lowHold = lowHold;
    this.name = name;
    this.cfg = parseWorkerPoolConfig(config, `worker pool ${name}`);
    this.reconcile = reconcile;
    this.clock = clock ?? realClock;
    this.queue = queue ?? new PriorityWorkQueue<K>({ name, clock: this.clock, rateLimiter });
    this.tokenBucket = tokenBucket ?? new TokenBucket({ qps: KCM_API_QPS, burst: KCM_API_BURST, clock: this.clock });
    this.log = logger ?? componentLogger('controller-manager').child({ controller: name });
    this.keyToString = keyToString ?? String;
    // every waiting worker listens on these signals; more than 10 is normal
    setMaxListeners(0, this.stopAbort.signal);
    this.configureGuard();
    this.queue.setPriorityAdmission((key, requested) => this.admit(key, requested));
    this.queue.setOrdering(orderingOf(this.cfg.mode));
    this.publishMode();
  }

  get mode(): WorkerMode {
    return this.cfg.mode;
  }

  get config(): Readonly<WorkerPoolConfig> {
    return this.cfg;
  }

  stats(): WorkerPoolStats {
    return { ...this.counters };
  }

  /** Starts the workers of the configured mode. */
  start(): void {
    if (this.state !== 'idle') return;
    this.state = 'running';
    this.gen = this.spawn(this.cfg);
    this.log.info({ mode: this.cfg.mode, workers: this.cfg.workers, periodMs: this.cfg.periodMs }, 'worker pool started');
  }

  /**
   * Switches the serving mode (and optionally other settings) at runtime, without losing queued
   * keys. Returns the new configuration; throws ConfigError on invalid settings (nothing changes).
   */
  setMode(mode: WorkerMode, overrides: Omit<WorkerPoolConfigInput, 'mode'> = {}): WorkerPoolConfig {
    const next = parseWorkerPoolConfig({ ...this.cfg, ...overrides, mode }, `worker pool ${this.name}`);
    if (sameConfig(next, this.cfg)) return this.cfg;
    const previous = this.cfg.mode;
    this.cfg = next;
    this.configureGuard();
    this.queue.setOrdering(orderingOf(next.mode));
    this.publishMode();
    if (this.state === 'running' && this.gen && !sameWorkers(next, this.gen.cfg)) {
      const old = this.gen;
      old.abort.abort();
      const retired = Promise.all(old.loops).then(() => undefined);
      this.retiring.add(retired);
      void retired.then(() => this.retiring.delete(retired));
      this.gen = this.spawn(next);
    }
    this.log.info({ from: previous, mode: next.mode, workers: next.workers, periodMs: next.periodMs, queued: this.queue.len() }, 'worker pool mode set');
    return next;
  }

  /**
   * Stops the pool. drain=false: stop taking keys now; running reconciles finish (their signal is
   * aborted), token waits are abandoned. drain=true: ignore new keys, serve every queued key under
   * the current mode's pacing, then stop. Delayed (addAfter) keys are dropped either way.
   */
  async stop(opts: { drain?: boolean } = {}): Promise<void> {
    if (this.state === 'stopped' || this.state === 'stopping') return;
    const wasRunning = this.state === 'running';
    this.state = 'stopping';
    if (opts.drain && wasRunning) await this.queue.shutDownWithDrain();
    else this.queue.shutDown();
    this.stopAbort.abort();
    this.gen?.abort.abort();
    await Promise.all([...(this.gen?.loops ?? []), ...this.retiring]);
    this.state = 'stopped';
    this.log.info(this.counters, 'worker pool stopped');
  }

  // ------------------------------------------------------------------------------ workers

  private spawn(cfg: WorkerPoolConfig): Generation {
    const gen: Generation = { cfg, abort: new AbortController(), loops: [] };
    setMaxListeners(0, gen.abort.signal);
    if (cfg.mode === 'multi-priority-periodic') {
      const periodic = cfg.workers - cfg.highPriorityWorkers;
      const t0 = this.clock.now();
      for (let k = 0; k < periodic; k++) gen.loops.push(this.periodicWorker(gen, k, periodic, t0));
      for (let j = 0; j < cfg.highPriorityWorkers; j++) gen.loops.push(this.asyncWorker(gen, PRIORITY_HIGH));
    } else {
      const n = cfg.mode === 'vanilla' ? (cfg.vanillaWorkers ?? cfg.workers) : cfg.workers;
      for (let j = 0; j < n; j++) gen.loops.push(this.asyncWorker(gen, PRIORITY_NONE));
    }
    return gen;
  }

  private async asyncWorker(gen: Generation, minPriority: Priority): Promise<void> {
    while (!gen.abort.signal.aborted) {
      const item = await this.queue.get({ minPriority, signal: gen.abort.signal });
      if (!item) return;
      await this.serve(item, gen);
    }
  }

  /** Worker k of n: ticks at t0 + k*T/n + m*T, serving at most one key per tick. */
  private async periodicWorker(gen: Generation, k: number, n: number, t0: number): Promise<void> {
    const period = gen.cfg.periodMs;
    let next = t0 + (k * period) / n;
    for (;;) {
      if (!(await sleepUntil(this.clock, next, gen.abort.signal))) return;
      if (this.queue.isShutDown()) return;
      const held = this.lowHold?.() ?? false;
      const item = held ? this.queue.tryGet(PRIORITY_HIGH) : this.queue.tryGet();
      if (item) {
        await this.serve(item, gen);
      } else if (held && this.queue.len() > 0) {
        this.counters.heldSlots++;
        workerMetrics().heldSlots.inc({ controller: this.name });
      } else {
        this.counters.idleSlots++;
        workerMetrics().idleSlots.inc({ controller: this.name });
        if (this.queue.len() === 0) {
          this.counters.parks++;
          if (!(await this.queue.whenReady(gen.abort.signal))) return;
          // resume on this worker's phase: the first tick at or after the key's arrival
          const now = this.clock.now();
          next += Math.max(1, Math.ceil((now - next) / period)) * period;
          continue;
        }
      }
      next += period;
      const now = this.clock.now();
      if (next < now) next += Math.floor((now - next) / period) * period;
    }
  }

  private async serve(item: QueueItem<K>, gen: Generation): Promise<void> {
    const { key, priority } = item;
    const mode = gen.cfg.mode;
    if (this.cfg.rateLimitedModes.includes(mode)) {
      try {
        await this.tokenBucket.wait(this.stopAbort.signal);
      } catch {
        this.queue.done(key); // stopping: the key is not served
        return;
      }
    }
    const started = this.clock.now();
    this.counters.syncs++;
    this.counters.inFlight++;
    const keyText = this.keyToString(key);
    try {
      const result = await this.reconcile(key, { priority, mode, signal: this.stopAbort.signal });
      this.queue.forget(key);
      const after = result?.requeueAfterMs;
      if (after !== undefined && after > 0) this.queue.addAfter(key, after, priority);
    } catch (err) {
      if (err instanceof TerminalError) {
        this.queue.forget(key);
        this.log.error({ key: keyText, priority: priorityName(priority), mode, err }, 'reconcile failed with a terminal error; not retried');
      } else {
        this.queue.addRateLimited(key, priority);
        this.log.warn({ key: keyText, priority: priorityName(priority), mode, err, requeues: this.queue.numRequeues(key) }, 'reconcile failed; requeued with backoff');
      }
    } finally {
      const seconds = Math.max(0, this.clock.now() - started) / 1000;
      this.counters.inFlight--;
      workerMetrics().syncDuration.observe({ controller: this.name, priority: priorityName(priority), mode }, seconds);
      this.queue.done(key);
      this.log.debug({ key: keyText, priority: priorityName(priority), mode, durationMs: seconds * 1000 }, 'synced');
    }
  }

  // ------------------------------------------------------------------------------ guard, mode

  private configureGuard(): void {
    const { highMinInterArrivalMs: ms, highBurst } = this.cfg;
    if (ms <= 0) {
      this.guard = undefined;
    } else if (this.guard) {
      this.guard.setRate(1000 / ms, highBurst);
    } else {
      this.guard = new TokenBucket({ qps: 1000 / ms, burst: highBurst, clock: this.clock });
    }
  }

  private admit(key: K, requested: Priority): Priority {
    if (requested !== PRIORITY_HIGH || !this.guard || this.guard.tryAccept()) return requested;
    this.counters.demoted++;
    workerMetrics().demoted.inc({ controller: this.name });
    this.log.debug({ key: this.keyToString(key) }, 'high-priority request over the inter-arrival bound; queued as low');
    return PRIORITY_LOW;
  }

  private publishMode(): void {
    const gauge = workerMetrics().mode;
    for (const m of WORKER_MODES) gauge.set({ controller: this.name, mode: m }, m === this.cfg.mode ? 1 : 0);
  }
}

function orderingOf(mode: WorkerMode): 'fifo' | 'priority' {
  return mode === 'vanilla' ? 'fifo' : 'priority';
}

function sameConfig(a: WorkerPoolConfig, b: WorkerPoolConfig): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Settings that need new workers when they change (the guard and gating apply on the fly). */
function sameWorkers(a: WorkerPoolConfig, b: WorkerPoolConfig): boolean {
  return a.mode === b.mode && a.workers === b.workers && a.vanillaWorkers === b.vanillaWorkers && a.highPriorityWorkers === b.highPriorityWorkers && a.periodMs === b.periodMs;
}
