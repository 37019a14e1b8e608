/**
 * The Ulysses scheduler extender (thesis §5.3.2) as a fastify HTTP server speaking the
 * kube-scheduler extender protocol (wire.ts): POST /filter, /prioritize, /bind, plus GET /metrics
 * and /healthz. nodeCacheCapable: node objects come from a nodes informer, capacity holders from a
 * pods informer (state.ts); the decisions are evaluate.ts.
 *
 * kube-scheduler calls bind only for the pods that request `ulysses.io/reservation` (the bind entry's
 * managedResources, kube-scheduler-config.ts) and binds every other pod itself; filter refuses an
 * RT/TDMA pod that does not request it, which kube-scheduler would otherwise bind unreserved.
 *
 * Bind (thesis: "reserve the slot when the pod is bound"), on the pod as the informer cache has it
 * (no GET): under per-node and per-network locks
 * (so two binds never compute their reservation from the same free slots/cores), re-run the node's
 * test against the current state, write the reservation DURABLY on the pod (JSON patch with a UID
 * precondition: `ulysses.io/reserved-node`, `ulysses.io/rt-cores`, `ulysses.io/tdma-slots`), record
 * it in the cache, then create the pods/binding subresource. If the binding fails the reservation
 * annotations are removed again (best effort; left in place they only over-reserve, never
 * double-book). A restarted extender lists the pods before it answers anything, so it rebuilds every
 * reservation from the annotations.
 *
 * With a {@link ServingGate} (leadership.ts: replicas with leader election) the verbs are answered
 * only while the gate is open: otherwise HTTP 503 with the reason (a standby reached directly, a
 * leader still rebuilding or past its renew deadline), and a bind that loses the gate on its way
 * writes nothing more; each reservation PATCH carries the term's epoch, which the apiserver checks
 * against the Lease (manifests/base/scheduler-extender/reservation-epoch-policy.yaml). GET /readyz
 * is 200 only while the gate is open (and the informers synced); /healthz stays a liveness check,
 * 200 on every replica. `rebuild()` re-lists the pods (a consistent read) into the state: a new
 * leader calls it before it serves.
 *
 * `setConfig(cfg)` applies a new {@link ExtenderConfig} live (all fields except `listen`).
 */
import Fastify, { type FastifyInstance, type FastifyReply } from 'fastify';
import type { KubeConfig, V1Node, V1Pod } from '@kubernetes/client-node';
import { Counter, Histogram } from 'prom-client';
import { ResilientInformer, type Informer, type InformerOptions } from '../../core/informer.ts';
import { InformerThread } from '../../core/informer-thread.ts';
import { EventRecorder, NO_EVENTS, type ComponentEventRecorder } from '../../core/events.ts';
import { ApiError, isNotFound, KubeClient } from '../../core/kube.ts';
import { componentLogger, objectLogger, type Logger } from '../../core/logging.ts';
import { metricsRegistry, metricsText } from '../../core/metrics.ts';
import { requestsReservation, RT_ANNOTATION, RT_CORES_ANNOTATION, TDMA_ANNOTATION, TDMA_SLOTS_ANNOTATION } from '../schedulability.ts';
import { AnalysisBudget } from '../realtime/task.ts';
import type { NewPod, ParsedRtNode } from '../realtime/what-if.ts';
import { RtAnalysisWorker, type FeedSource } from './analysis-worker.ts';
import { RESERVATION_EPOCH_ANNOTATION, type ServingGate } from './leadership.ts';
import { extenderConfig, tdmaNetworks, type ExtenderConfig, type ExtenderConfigInput } from './config.ts';
import { checkListenSecurity, readServingTls, tlsFilesVersion, verbCaller } from './tls.ts';
import {
  evaluateNode,
  evaluateShared,
  MESSAGES,
  missingReservationRequest,
  needsReservation,
  podRequirements,
  verdictFor,
  type NodeVerdict,
  type PodRequirements,
  type RejectionReason,
  type SlotMemo,
} from './evaluate.ts';
import { ClusterState, extenderNodeProjection, extenderPodProjection, nodeInfoOf, RESERVED_NODE_ANNOTATION, nameJson, SLOT_DEFERRABLE_SERVER, SLOT_PLAIN_NAME, type NodeInfo } from './state.ts';
import { Requeuer } from './requeue.ts';
import { DemandVerdicts, FITS, MISS, refusalJson } from './verdict-cache.ts';
import {
  bindingArgsSchema,
  describeIssues,
  extenderArgsSchema,
  fastExtenderArgs,
  type ExtenderArgs,
  type ExtenderBindingArgs,
  type ExtenderBindingResult,
  type ExtenderFilterResult,
  type HostPriority,
} from './wire.ts';

export type Verb = 'filter' | 'prioritize' | 'bind';

/** The extender verb a request URL names (`/filter?...`), if any. */
function verbOf(url: string): Verb | undefined {
  const path = url.split('?')[0]!.slice(1);
  return path === 'filter' || path === 'prioritize' || path === 'bind' ? path : undefined;
}

let requestDuration: Histogram<'verb'> | undefined;
let rejections: Counter<'reason'> | undefined;
/** What a caller without kube-scheduler's client certificate may read (probes, monitors). */
const OPEN_PATHS = new Set(['/healthz', '/readyz', '/metrics']);
/** How often the TLS files are checked for a change (a Secret volume's update reaches the pod within about a minute). */
const TLS_FILES_CHECK_MS = 30_000;
let binds: Counter<'result'> | undefined;
function metrics() {
  const registers = [metricsRegistry()];
  requestDuration ??= new Histogram({
    name: 'ulysses_extender_request_duration_seconds',
    help: 'Time to answer one kube-scheduler extender request, by verb (filter, prioritize, bind).',
    labelNames: ['verb'],
    buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
    registers,
  });
  rejections ??= new Counter({
    name: 'ulysses_extender_rejections_total',
    help: 'Nodes rejected by the filter verb, by reason (malformed, reservation-request, assurance, realtime, tdma, node-annotation, unknown-node), plus rejected binds (bind) and bad request bodies (bad-request).',
    labelNames: ['reason'],
    registers,
  });
  binds ??= new Counter({
    name: 'ulysses_extender_binds_total',
    help: 'Bind verb outcomes (bound, rejected, error).',
    labelNames: ['result'],
    registers,
  });
  return { requestDuration, rejections, binds };
}

/** Waiting for a lock or an API call took longer than the call's deadline (the scheduler's httpTimeout). */
export class DeadlineExceeded extends Error {
  constructor(what: string, ms: number) {
    super(`${what} did not finish within ${ms} ms`);
    this.name = 'DeadlineExceeded';
  }
}

/** Annotations a bind's decision reads or writes on the pod being bound (the epoch: another leader's write is a change). */
const DECISION_ANNOTATIONS = [RT_ANNOTATION, TDMA_ANNOTATION, RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION];

/** Two versions of a pod the same for a bind's decision: same UID, both unbound, same {@link DECISION_ANNOTATIONS}. */
function sameReservation(a: V1Pod, b: V1Pod): boolean {
  if (a.metadata?.uid !== b.metadata?.uid || a.spec?.nodeName || b.spec?.nodeName) return false;
  return DECISION_ANNOTATIONS.every((k) => a.metadata?.annotations?.[k] === b.metadata?.annotations?.[k]);
}

/**
 * A write of bind is sent only with at least this much time left before the Lease's renew deadline
 * (ExtenderServer.fence), or a quarter of the renew deadline if that is less: a healthy leader
 * renews every retry period (2 s) with a 10 s deadline, so it always has far more; less means
 * renewals are failing.
 */
export const LEASE_WRITE_MARGIN_MS = 1000;

/**
 * Bind waits at most this long (and within its deadline) for a pod its informer has not delivered
 * yet (ExtenderServer.cachedPod); past it kube-scheduler's own retry (1 s initial backoff) is as quick.
 */
export const BIND_CACHE_WAIT_MS = 1000;

/** The serving gate closed during a call (leadership lost): the call writes nothing more. */
class NotServing extends Error {
  constructor(reason: string) {
    super(`scheduler extender stopped serving: ${reason}`);
    this.name = 'NotServing';
  }
}

/** `p`, or a DeadlineExceeded once `ms` passed (the work behind `p` is not cancelled: its outcome is unknown). */
export function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  if (ms <= 0) return Promise.reject(new DeadlineExceeded(what, 0));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DeadlineExceeded(what, ms)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * One promise chain per key: `run(keys, fn)` runs fn once it holds every key (taken in sorted order:
 * no deadlock). With `timeoutMs`, waiting for the keys gives up with DeadlineExceeded; the keys
 * already taken are released at once (the queue behind them keeps its order).
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>();

  async run<T>(keys: readonly string[], fn: () => Promise<T>, timeoutMs?: number): Promise<T> {
    const sorted = [...new Set(keys)].sort();
    const releases: Array<() => void> = [];
    const releaseAll = () => {
      for (const r of releases.reverse()) r();
    };
    const started = Date.now();
    for (const k of sorted) {
      const prev = this.tails.get(k) ?? Promise.resolve();
      let release!: () => void;
      const mine = new Promise<void>((r) => (release = r));
      const tail = prev.then(() => mine);
      this.tails.set(k, tail);
      releases.push(() => {
        release();
        if (this.tails.get(k) === tail) this.tails.delete(k);
      });
      try {
        await (timeoutMs === undefined ? prev : withDeadline(prev, timeoutMs - (Date.now() - started), `waiting for lock ${k}`));
      } catch (err) {
        releaseAll();
        throw err;
      }
    }
    try {
      return await fn();
    } finally {
      releaseAll();
    }
  }
}

/** The API calls bind makes (core/kube.ts KubeClient; a fake in unit tests). */
export type BindClient = Pick<KubeClient, 'request'>;

export interface ExtenderServerOptions {
  config?: ExtenderConfigInput;
  /** API access: informers (nodes, pods) and bind. Without it the state must be fed by hand (tests, bench). */
  kubeconfig?: KubeConfig;
  /** Start the nodes/pods informers (default: when a kubeconfig is given). */
  informers?: boolean;
  /** How often the tls files are checked for a change (default 30 s). */
  tlsFilesCheckMs?: number;
  /**
   * The informers in a worker thread of their own (default true; see extenderInformers), or on the
   * event loop that answers kube-scheduler (false).
   */
  informerThread?: boolean;
  state?: ClusterState;
  log?: Logger;
  /** The API client of bind (default: one for `kubeconfig`). */
  client?: BindClient;
  /** Verbs answered only while it is open (leader election, leadership.ts); none: always. */
  gate?: ServingGate;
  /**
   * Where the Warning Events on pods whose reservation the analyses ignore go (reason
   * {@link RESERVATION_IGNORED}); default: core/events.ts EventRecorder with a client for
   * `kubeconfig`, none without one.
   */
  events?: ComponentEventRecorder;
}

/** Reason of the Warning Event on a pod whose stored reservation does not fit the configuration. */
export const RESERVATION_IGNORED = 'ReservationIgnored';
/** source.component (and reportingComponent) of the extender's Events. */
export const EXTENDER_EVENT_COMPONENT = 'ulysses-scheduler-extender';

/**
 * The pod a skipped entry of a verdict (evaluate.ts NodeVerdict.skipped) is about, when it is an
 * ignored reservation: what state.ts takenSlotsIn and realtime/what-if.ts write, "pod <ns/name>:
 * ulysses.io/tdma-slots slot 7 is not in [0, 5) ...: ignored", "node <n>: existing pod <ns/name>:
 * pinned core 7 does not exist (...): reservation ignored, ..." and "... existing pod <ns/name>:
 * does not fit by the rule either: left out (...)". Unparseable `ulysses.io/rt` of existing pods
 * are skipped too but are no reservation: undefined.
 */
export function ignoredReservationOf(skipped: string): { pod: string; why: string } | undefined {
  const m = /^(?:node [^ :]+: )?(?:existing )?pod ([^ :/]+\/[^ :]+): (.*)$/s.exec(skipped);
  if (!m || !/(reservation ignored|: ignored$|left out)/.test(m[2]!)) return undefined;
  return { pod: m[1]!, why: skipped };
}

const escapePointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/**
 * The extender's informers: nodes, and pods not terminal (a terminal pod leaves the selection and
 * arrives as a delete: its reservation is released). Each object is reduced on arrival to what the
 * extender reads (state.ts extenderNodeProjection, extenderPodProjection: no managedFields, no status,
 * no spec beyond the node name and the priority), which keeps the informers' and ClusterState's
 * memory small. `projection` is the transform's name, for the informer thread to import from state.ts.
 */
export function extenderInformerOptions(log: Logger): { readonly nodes: InformerOptions & { projection: string }; readonly pods: InformerOptions & { projection: string } } {
  return {
    nodes: { path: '/api/v1/nodes', transform: extenderNodeProjection, projection: extenderNodeProjection.name, log },
    pods: {
      path: '/api/v1/pods',
      fieldSelector: 'status.phase!=Succeeded,status.phase!=Failed',
      transform: extenderPodProjection,
      projection: extenderPodProjection.name,
      log,
    },
  };
}

/**
 * The informers on this event loop (`thread: false`) or in a worker thread (core/informer-thread.ts):
 * there the watch traffic (TLS, JSON of every pod and node version) never delays a filter or
 * prioritize, and a status update, which changes no projection, never reaches this thread at all.
 */
function extenderInformers(kc: KubeConfig, log: Logger, thread: boolean): { nodes: Informer<V1Node>; pods: Informer<V1Pod> } {
  const o = extenderInformerOptions(log);
  if (!thread) return { nodes: new ResilientInformer<V1Node>(kc, o.nodes), pods: new ResilientInformer<V1Pod>(kc, o.pods) };
  const worker = new InformerThread({ kubeconfig: kc.exportConfig(), log });
  const module = new URL('./state.ts', import.meta.url).href;
  const threaded = <T extends V1Node | V1Pod>({ transform: _t, log: _l, projection, ...rest }: InformerOptions & { projection: string }) =>
    worker.informer<T>({ ...rest, projection: { module, export: projection } });
  return { nodes: threaded<V1Node>(o.nodes), pods: threaded<V1Pod>(o.pods) };
}

/**
 * A verb's answer written as JSON text, sent as is. At 1000 nodes the answers are tens of KB; the
 * names and messages are written from their JSON texts kept with the node (NodeInfo.nameJson) and
 * the message ({@link ExtenderServer.jsonString}), where an object tree given to JSON.stringify
 * would be built and walked anew for every request (bench:extender: KWOK round trip, issue 26).
 */
export type AnswerJson = string;

/** Texts whose JSON forms are kept (rejection messages: a few per kind of failure, more with pod UIDs in). */
const JSON_STRINGS_KEPT = 4096;

/** Demands whose verdicts are kept (least recently used dropped first). */
const VERDICT_CACHE_DEMANDS = 256;

/** Pods whose filter answer is kept for their prioritize ({@link FilterCycle}; most recent first kept). */
const FILTER_CYCLES_KEPT = 16;

/**
 * One pod's filter answer on the nodeCacheCapable path, kept for the prioritize call kube-scheduler
 * makes next in the same scheduling cycle. That call carries the nodes that passed every filter, a
 * subsequence of this filter's passing nodes in the same order (pkg/scheduler/schedule_one.go
 * findNodesThatPassExtenders keeps the extender's list, prioritizeNodes sends it on): prioritize
 * then reads each node's score by walking both lists, with no look-up per node. Used only while
 * nothing a verdict reads changed (state generation, configuration) and the pod's demand is the same.
 */
interface FilterCycle {
  readonly demand: string;
  readonly generation: number;
  readonly configGen: number;
  /** the passing nodes in the filter's order (the names as the filter's request had them), their slots and scores */
  readonly names: string[];
  readonly slots: number[];
  readonly scores: number[];
}

/** `text` followed by one HostPriority as JSON, the node's name given as JSON. */
function hostPriorityJson(text: string, nameJson: string, score: number): string {
  // a non-finite score as 0: JSON.stringify's null reads as 0 in Go
  return `${text}{"Host":${nameJson},"Score":${Number.isFinite(score) ? score : 0}}`;
}

/** `key` set to `value` as the most recently used entry of `m`, the least recently used dropped past `max`. */
function keepRecent<K, V>(m: Map<K, V>, key: K, value: V, max: number): void {
  m.delete(key);
  m.set(key, value);
  while (m.size > max) m.delete(m.keys().next().value!);
}

export class ExtenderServer {
  readonly app: FastifyInstance;
  readonly state: ClusterState;
  private cfg: ExtenderConfig;
  private networks: ReturnType<typeof tdmaNetworks>;
  private configGen = 0;
  private readonly log: Logger;
  private readonly client: BindClient | undefined;
  private readonly informers: { nodes: Informer<V1Node>; pods: Informer<V1Pod> } | undefined;
  private readonly locks = new KeyedMutex();
  /** pod UID -> last malformed-annotation message logged (log once per pod and message). */
  private readonly reported = new Map<string, string>();
  /**
   * Verdict cache: demand key -> node slot -> tie rank -> verdict (see {@link verdictsFor}). Filter
   * fills it, prioritize of the same pod reads it, and so do the next pods with the same demand
   * (the replicas of a Deployment, a pod retried) on every node whose state did not change in between.
   */
  private readonly verdicts = new Map<string, DemandVerdicts>();
  /** Per-node verdicts answered from the cache (hits) and computed (misses), filter and prioritize together, since start. */
  readonly verdictStats = { hits: 0, misses: 0 };
  /** RT analysis work (realtime/task.ts AnalysisBudget units) since start, and of the last request. */
  readonly analysisWork = { requests: 0, units: 0, last: 0 };
  /** Of that, the work done on the event loop (the inline part of filter and prioritize) since start. */
  readonly inlineWork = { units: 0 };
  /**
   * Demands whose RT analyses ran past the inline budget (least recently used dropped first): the
   * next pods with the same demand (replicas, retries) send their RT nodes to the analysis thread
   * at once, instead of keeping the event loop for another inline attempt that runs out again.
   */
  private readonly threadDemands = new Map<string, true>();
  /** pod UID -> its last filter answer (see {@link FilterCycle}). */
  private readonly cycles = new Map<string, FilterCycle>();
  private analysisWorker: RtAnalysisWorker | undefined;
  private listening: string | undefined;
  private tlsWatch: NodeJS.Timeout | undefined;
  private readonly tlsFilesCheckMs: number;
  /** Verb calls refused for their client identity since the last log line about them (logged at most every 10 s). */
  private refusedCallers = { count: 0, loggedAt: 0 };
  private readonly gate: ServingGate | undefined;
  private readonly events: ComponentEventRecorder;
  private readonly eventRecorder: EventRecorder | undefined;
  /** Wakes the pods refused on a view a release of capacity made stale (requeue.ts). */
  readonly requeuer: Requeuer;
  private readonly stopRelease: () => void;
  private readonly stopPodWake: () => void;

  constructor(opts: ExtenderServerOptions = {}) {
    this.cfg = extenderConfig(opts.config ?? {});
    this.networks = tdmaNetworks(this.cfg);
    this.log = opts.log ?? componentLogger('scheduler-extender');
    this.state = opts.state ?? new ClusterState();
    this.client = opts.client ?? (opts.kubeconfig ? new KubeClient(opts.kubeconfig) : undefined);
    this.gate = opts.gate;
    this.tlsFilesCheckMs = opts.tlsFilesCheckMs ?? TLS_FILES_CHECK_MS;
    if (opts.events) this.events = opts.events;
    else if (opts.kubeconfig) {
      this.eventRecorder = new EventRecorder({ client: new KubeClient(opts.kubeconfig), reportingController: EXTENDER_EVENT_COMPONENT, log: this.log });
      this.events = this.eventRecorder.forComponent(EXTENDER_EVENT_COMPONENT);
    } else this.events = NO_EVENTS;
    if (opts.kubeconfig && (opts.informers ?? true)) {
      const { nodes, pods } = extenderInformers(opts.kubeconfig, this.log, opts.informerThread ?? true);
      nodes.on('add', (n) => this.state.upsertNode(n));
      nodes.on('update', (n) => this.state.upsertNode(n));
      nodes.on('delete', (n) => this.state.deleteNode(n));
      pods.on('add', (p) => this.state.upsertPod(p));
      pods.on('update', (p) => this.state.upsertPod(p));
      pods.on('delete', (p) => this.state.deletePod(p));
      this.informers = { nodes, pods };
    }
    this.requeuer = new Requeuer({ client: this.client, log: this.log, delayMs: () => this.cfg.requeueDelayMs, holdsCapacity: (uid) => this.state.holdsCapacity(uid) });
    this.stopRelease = this.state.onRelease(() => this.requeuer.released());
    this.stopPodWake = this.state.onPod((key) => {
      const waiters = this.podWaiters.get(key);
      if (waiters) for (const w of [...waiters]) w();
    });
    this.app = this.buildApp();
  }

  get config(): ExtenderConfig {
    return this.cfg;
  }

  /** Applies a new configuration live (plugins, networks, default policies, weights, limits). `listen` and `tls` need a restart. */
  setConfig(raw: ExtenderConfigInput | ExtenderConfig): void {
    let cfg = extenderConfig(raw, 'setConfig');
    if (this.listening && (cfg.listen.host !== this.cfg.listen.host || cfg.listen.port !== this.cfg.listen.port)) {
      this.log.warn({ listen: cfg.listen, current: this.cfg.listen }, 'listen address changes take effect only after a restart');
    }
    if (JSON.stringify(cfg.tls) !== JSON.stringify(this.cfg.tls)) {
      this.log.warn({ tls: cfg.tls, current: this.cfg.tls }, 'tls changes take effect only after a restart (the files themselves are re-read when they change)');
    }
    // the server was built with its tls
    cfg = { ...cfg, tls: this.cfg.tls };
    this.cfg = cfg;
    this.networks = tdmaNetworks(cfg);
    this.configGen++;
    this.verdicts.clear();
    this.requeuer.released();
    if (this.analysisWorker) this.feed(this.analysisWorker);
    this.log.info({ plugins: cfg.plugins, networks: Object.keys(cfg.tdmaNetworks) }, 'configuration applied');
  }

  /** Starts the informers (waits for their first list: never answer from an empty cache) and listens. */
  async start(): Promise<{ url: string; port: number }> {
    // the analysis thread loads while the informers list (not awaited: a request meanwhile waits for
    // it), and is fed the RT pods as the informers deliver them (a standby's only loads: see feed)
    const worker = this.rtWorker();
    worker?.warm().catch((err: Error) => this.log.warn({ err: err.message }, 'RT analysis thread warm-up failed (it is started again on first use)'));
    if (worker) this.feed(worker);
    checkListenSecurity(this.cfg.listen.host, this.cfg.tls);
    if (this.informers) await Promise.all([this.informers.nodes.start(), this.informers.pods.start()]);
    const address = await this.app.listen({ host: this.cfg.listen.host, port: this.cfg.listen.port });
    this.listening = address;
    this.watchTlsFiles();
    const port = (this.app.server.address() as { port: number }).port;
    this.log.info({ address, tls: this.cfg.tls ? { clientNames: this.cfg.tls.clientNames } : false, nodes: this.state.nodeNames().length, pods: this.state.podCount }, 'scheduler extender listening');
    return { url: `${this.cfg.tls ? 'https' : 'http'}://${this.cfg.listen.host.includes(':') ? `[${this.cfg.listen.host}]` : this.cfg.listen.host}:${port}`, port };
  }

  /** A renewed certificate (the mounted Secret updated) is served to new connections without a restart. */
  private watchTlsFiles(): void {
    const tls = this.cfg.tls;
    if (!tls) return;
    let version = tlsFilesVersion(tls);
    this.tlsWatch = setInterval(() => {
      const now = tlsFilesVersion(tls);
      if (now === version) return;
      try {
        const serving = readServingTls(tls);
        (this.app.server as unknown as { setSecureContext(o: object): void }).setSecureContext({ key: serving.key, cert: serving.cert, ca: serving.ca });
        version = now;
        this.log.info({ certFile: tls.certFile }, 'TLS files changed: serving the new certificate');
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'TLS files changed but cannot be loaded: still serving the previous certificate');
      }
    }, this.tlsFilesCheckMs);
    this.tlsWatch.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.tlsWatch);
    this.stopRelease();
    this.stopPodWake();
    this.requeuer.stop();
    this.informers?.nodes.stop();
    this.informers?.pods.stop();
    await this.app.close();
    // Events still queued get a moment, not a say in how long stopping takes (the apiserver may be gone)
    if (this.eventRecorder) await withDeadline(this.eventRecorder.flush(), 2000, 'writing queued Events').catch(() => undefined);
    this.listening = undefined;
  }

  private buildApp(): FastifyInstance {
    const tls = this.cfg.tls;
    const serving = tls ? readServingTls(tls) : undefined;
    // requestCert without rejectUnauthorized: the probes and monitors (no client certificate) reach
    // /healthz, /readyz and /metrics; the verbs check the verified certificate (tls.ts verbCaller)
    const app = (
      serving
        ? Fastify({ logger: false, bodyLimit: this.cfg.bodyLimitBytes, https: { key: serving.key, cert: serving.cert, ca: serving.ca, requestCert: true, rejectUnauthorized: false, minVersion: 'TLSv1.2' } })
        : Fastify({ logger: false, bodyLimit: this.cfg.bodyLimitBytes })
    ) as unknown as FastifyInstance;
    if (tls) {
      app.addHook('onRequest', async (req, reply) => {
        // everything but the open reads needs the caller (whatever path the router would decode a verb from)
        if ((req.method === 'GET' || req.method === 'HEAD') && OPEN_PATHS.has(req.url.split('?')[0]!)) return;
        const caller = verbCaller(req.raw.socket, tls);
        if (caller.ok) return;
        metrics().rejections.inc({ reason: 'unauthenticated' });
        const r = this.refusedCallers;
        r.count++;
        if (Date.now() - r.loggedAt >= 10_000) {
          this.log.warn({ url: req.url, remote: req.ip, reason: caller.reason, refusedSinceLastLog: r.count }, 'call refused: not kube-scheduler');
          r.count = 0;
          r.loggedAt = Date.now();
        }
        return reply.code(403).header('connection', 'close').send({ error: `ulysses: the scheduler extender answers kube-scheduler only (client certificate, CN ${tls.clientNames.join(' or ')}): ${caller.reason}` });
      });
    }
    app.addHook('onClose', async () => {
      this.stopFeed?.();
      this.stopFeed = undefined;
      await this.analysisWorker?.stop();
      this.analysisWorker = undefined;
    });
    // a replica that may not answer (standby, rebuilding, past its renew deadline): 503 with the reason
    app.addHook('onRequest', async (req, reply) => {
      if (req.method !== 'POST' || !this.gate || !verbOf(req.url)) return;
      const g = this.gate.check();
      if (g.ready) return;
      metrics().rejections.inc({ reason: 'not-serving' });
      return reply.code(503).send({ error: `ulysses: scheduler extender not serving: ${g.reason}` });
    });
    // a replica that does not serve keeps no connection of the scheduler: kube-scheduler's client
    // reuses a kept-alive connection for every later call, and an established connection stays with
    // the pod it was routed to (kube-proxy) when the Service moves to the new leader; `Connection:
    // close` on the 503, and on an answer finished after the gate closed (a deposed leader's last
    // bind), makes its next call open a new connection, which the Service routes to the leader
    app.addHook('onSend', async (req, reply) => {
      if (req.method === 'POST' && this.gate && verbOf(req.url) && !this.gate.check().ready) reply.header('connection', 'close');
    });
    const timed = <T>(verb: Verb, fn: () => T | Promise<T>) => async () => {
      const end = metrics().requestDuration.startTimer({ verb });
      try {
        return await fn();
      } finally {
        end();
      }
    };
    // an answer written as JSON text (AnswerJson) goes out as is, anything else through fastify's serializer
    const answer = async (reply: FastifyReply, out: Promise<unknown>) => {
      const body = await out;
      if (typeof body === 'string') reply.type('application/json; charset=utf-8');
      return body;
    };
    for (const verb of ['filter', 'prioritize'] as const) {
      app.post(`/${verb}`, async (req, reply) =>
        answer(
          reply,
          timed(verb, () => {
            const args = this.args(req.body);
            return typeof args === 'string' ? this.refused(verb, args, req.id) : verb === 'filter' ? this.filter(args) : this.prioritize(args);
          })(),
        ),
      );
    }
    app.post('/bind', async (req) =>
      timed('bind', () => {
        const parsed = bindingArgsSchema.safeParse(req.body);
        if (!parsed.success) return this.refused('bind', describeIssues(parsed.error, 'ExtenderBindingArgs'), req.id);
        return this.bind(parsed.data);
      })(),
    );
    app.get('/healthz', async (_req, reply) => {
      const synced = !this.informers || (this.informers.nodes.synced && this.informers.pods.synced);
      return reply.code(synced ? 200 : 503).type('text/plain').send(synced ? 'ok' : 'informers not synced');
    });
    app.get('/readyz', async (_req, reply) => {
      const r = this.readiness();
      return reply.code(r.ready ? 200 : 503).type('text/plain').send(r.ready ? 'ok' : r.reason);
    });
    app.get('/metrics', async (_req, reply) => reply.type(metricsRegistry().contentType).send(await metricsText()));
    // framework errors (bad JSON, wrong content type, body too large): on a verb, the verb's refusal
    // (HTTP 200: kube-scheduler reads no other body); anything else is an internal error: 500, logged with the request id
    app.setErrorHandler((err: { statusCode?: number; message: string; stack?: string }, req, reply) => {
      const client = err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500;
      const verb = verbOf(req.url);
      if (client && verb && !reply.sent) {
        return reply.code(200).send(this.refused(verb, `${req.method} /${verb}: ${err.message}`, req.id));
      }
      if (client) {
        metrics().rejections.inc({ reason: 'bad-request' });
        return reply.code(err.statusCode!).send({ error: err.message });
      }
      this.log.error({ requestId: req.id, url: req.url, err: err.stack ?? err.message }, 'internal error');
      return reply.code(500).send({ error: `ulysses: internal error (request ${req.id}): ${err.message}`, requestId: req.id });
    });
    return app;
  }

  /** Ready to answer kube-scheduler: informers synced and the gate (if any) open. */
  readiness(): { ready: true } | { ready: false; reason: string } {
    if (this.informers && !(this.informers.nodes.synced && this.informers.pods.synced)) return { ready: false, reason: 'informers not synced' };
    return this.gate?.check() ?? { ready: true };
  }

  /**
   * Lists the pods that can hold capacity afresh (a consistent read from the apiserver, paginated,
   * the informer's selection and projection) into the state (ClusterState.resyncPods): afterwards
   * the state has every reservation written before the list, whatever the informer has delivered
   * yet. A new leader runs it before it serves.
   */
  async rebuild(signal?: AbortSignal): Promise<{ listed: number; removed: number; ms: number }> {
    if (!this.client) throw new Error('rebuild: the extender has no API client');
    const started = Date.now();
    // a new leader: the analysis thread is fed from now on, while the list runs
    this.takingOver = true;
    const worker = this.rtWorker();
    if (worker) this.feed(worker);
    const { pods } = extenderInformerOptions(this.log);
    const items: V1Pod[] = [];
    let cont: string | undefined;
    let rv = '';
    do {
      if (signal?.aborted) throw new Error('rebuild aborted');
      const page = await this.client.request<{ metadata?: { resourceVersion?: string; continue?: string }; items: V1Pod[] }>('GET', pods.path, {
        query: { fieldSelector: pods.fieldSelector, limit: 500, continue: cont },
        timeoutMs: 30_000,
      });
      for (const p of page.items) items.push(extenderPodProjection(p));
      cont = page.metadata?.continue || undefined;
      rv = page.metadata?.resourceVersion ?? rv;
    } while (cont);
    if (signal?.aborted) throw new Error('rebuild aborted');
    const r = this.state.resyncPods(items, rv);
    this.verdicts.clear();
    const ms = Date.now() - started;
    this.log.info({ ...r, resourceVersion: rv, ms }, 'state rebuilt from a fresh list of the pods');
    return { ...r, ms };
  }

  /** The validated ExtenderArgs, or the 400 message naming the field. */
  private args(body: unknown): ExtenderArgs | string {
    const fast = fastExtenderArgs(body);
    if (fast) return fast;
    const parsed = extenderArgsSchema.safeParse(body);
    return parsed.success ? (parsed.data as unknown as ExtenderArgs) : describeIssues(parsed.error, 'ExtenderArgs');
  }

  /**
   * The answer to a request that cannot be served (a malformed body): HTTP 200 with the verb's own
   * failure, since kube-scheduler reads no non-200 body (pkg/scheduler/extender.go `send`) and shows
   * a filter's or bind's `Error` in the pod's FailedScheduling event; prioritize has no error field
   * (and its errors are ignored by the scheduler): no scores. Logged once per message with the request id.
   */
  private refused(verb: Verb, message: string, requestId: string): ExtenderFilterResult | HostPriority[] | ExtenderBindingResult {
    metrics().rejections.inc({ reason: 'bad-request' });
    const text = `ulysses: bad ${verb} request: ${message}`;
    if (this.remember(`bad:${verb}`, text)) this.log.warn({ requestId, verb }, text);
    if (verb === 'prioritize') return [];
    if (verb === 'bind') return { Error: text };
    return { FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: text };
  }

  private readonly jsonStrings = new Map<string, string>();

  /** `text` as a JSON string, kept: the same rejection messages recur on every request. */
  private jsonString(text: string): string {
    let j = this.jsonStrings.get(text);
    if (j === undefined) {
      if (this.jsonStrings.size >= JSON_STRINGS_KEPT) this.jsonStrings.clear();
      this.jsonStrings.set(text, (j = JSON.stringify(text)));
    }
    return j;
  }

  /** True the first time `key` is seen with `message` (bounded memory: the oldest entries are forgotten). */
  private remember(key: string, message: string): boolean {
    if (this.reported.get(key) === message) return false;
    this.reported.set(key, message);
    if (this.reported.size > 10_000) this.reported.delete(this.reported.keys().next().value!);
    return true;
  }

  private requirements(pod: V1Pod) {
    const r = podRequirements(pod, this.cfg, this.networks);
    if (!r.ok) {
      const uid = pod.metadata?.uid ?? `${pod.metadata?.namespace}/${pod.metadata?.name}`;
      if (this.remember(uid, r.message)) {
        objectLogger(this.log, 'Pod', `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`).warn({ uid, reason: r.reason }, r.message);
      }
    }
    return r;
  }

  /**
   * The verdict map of the pod's demand. A node's verdict depends on the pod only through its
   * demand (PodRequirements.demand: policy, `ulysses.io/rt` and `ulysses.io/tdma` texts), except
   * that (1) a pod that already holds capacity is left out of the analyses of its own
   * node/network, (2) deferrable servers of equal period are ranked by UID, and (3) a rejection by
   * the deferrable-server test may name the pod's own server ("server of pod <uid>"). (1): such a
   * pod gets a cache of its own (keyed by UID too); (2): the verdicts of a node are kept per rank of
   * the pod among the node's equal-period servers ({@link tieRank}); (3): the cached verdict names
   * the pod by a mark, replaced by the asking pod's UID (evaluate.ts evaluateShared). The verdicts
   * are of the current version of the demand's TDMA network.
   */
  private verdictsFor(req: PodRequirements): DemandVerdicts {
    const key = this.state.holdsCapacity(req.uid) ? `uid:${req.uid}\u0000${req.demand}` : req.demand;
    const m = this.verdicts.get(key) ?? new DemandVerdicts();
    keepRecent(this.verdicts, key, m, VERDICT_CACHE_DEMANDS);
    m.syncNetwork(this.networkVersionOf(req));
    return m;
  }

  private networkVersionOf(req: PodRequirements): number {
    return req.network ? this.state.networkVersion(req.network.name) : 0;
  }

  /**
   * The pod's rank among the node's deferrable servers of its period (ClusterState.dsTieRank; 0
   * unless a deferrable-server pod meets a deferrable-server node): pods with random UIDs rank
   * differently on the same node, each rank has its own verdict.
   */
  private tieRank(req: PodRequirements, info: NodeInfo): number {
    return req.rt?.kind === 'deferrable-server' && info.rtKind === 'deferrable-server' ? this.state.dsTieRank(info.name, req.rt.server.periodUs, req.uid) : 0;
  }

  /** The node's verdict for the pod; with `cache` (the node in the state, in `slot`), from and into the demand's verdicts at the pod's tie rank there. */
  private evaluate(
    req: PodRequirements,
    info: NodeInfo,
    slot: number | undefined,
    cache: DemandVerdicts | undefined,
    memo: SlotMemo,
    budget: AnalysisBudget,
    rank?: number,
  ): NodeVerdict {
    if (!cache || slot === undefined) return this.computed(evaluateNode(req, info, this.state, this.cfg, memo, budget), info);
    const stamp = this.state.stampOf(slot);
    const tieRank = rank ?? this.tieRank(req, info);
    const hit = cache.get(slot, tieRank, stamp);
    if (hit) {
      this.verdictStats.hits++;
      return verdictFor(hit, req.uid);
    }
    const shared = evaluateShared(req, info, this.state, this.cfg, memo, budget);
    // a verdict naming this pod in a way POD_MARK cannot stand for stays uncached (evaluate.ts evaluateShared)
    cache.set(slot, tieRank, stamp, shared.shareable ? shared : undefined);
    return this.computed(verdictFor(shared, req.uid), info);
  }

  /** The work bound of one request's RT analyses (config analysisBudget). */
  private budget(): AnalysisBudget {
    return new AnalysisBudget(this.cfg.analysisBudget);
  }

  /** The inline part of a request's budget: inlineAnalysisBudget, none for a demand that ran past it before. */
  private inlineBudget(req: PodRequirements): AnalysisBudget {
    const total = this.cfg.analysisBudget;
    return new AnalysisBudget(this.threadDemands.has(req.demand) ? 0 : Math.min(this.cfg.inlineAnalysisBudget, total), total);
  }

  /** The inline work of a filter or prioritize; a demand whose analyses ran past it goes to the thread next time. */
  private inlineSpent(req: PodRequirements, budget: AnalysisBudget, deferred: number): void {
    this.inlineWork.units += budget.used;
    if (deferred) keepRecent(this.threadDemands, req.demand, true, VERDICT_CACHE_DEMANDS);
  }

  /** Counts the request's analysis work; an exhausted budget (`exceededLimit`) is logged once per pod. */
  private budgetSpent(work: number, exceededLimit: number | undefined, req: PodRequirements): void {
    if (work > 0 || exceededLimit === undefined) {
      this.analysisWork.requests++;
      this.analysisWork.units += work;
      this.analysisWork.last = work;
    }
    if (exceededLimit !== undefined && this.remember(`budget:${req.uid}`, String(exceededLimit))) {
      this.log.warn({ pod: req.key, uid: req.uid, budget: exceededLimit }, 'RT analysis budget exceeded: pod refused on the RT nodes left (config analysisBudget)');
    }
  }

  /**
   * A verdict just computed (not from the cache): counted, its ignored existing pods logged once,
   * and each pod whose reservation was ignored told so by a Warning Event ({@link reportIgnored}).
   */
  private computed(verdict: NodeVerdict, info: NodeInfo): NodeVerdict {
    this.verdictStats.misses++;
    if (!verdict.skipped?.length) return verdict;
    const byPod = new Map<string, string[]>();
    for (const s of verdict.skipped) {
      if (this.remember(`skip:${s}`, s)) this.log.warn({ node: info.name }, `ignored by the analyses: ${s}`);
      const r = ignoredReservationOf(s);
      if (r) byPod.set(r.pod, [...(byPod.get(r.pod) ?? []), r.why]);
    }
    for (const [pod, why] of byPod) this.reportIgnored(pod, why);
    return verdict;
  }

  /** Resolves once every Event recorded so far was written (tests, shutdown). */
  async flushEvents(): Promise<void> {
    await this.eventRecorder?.flush();
  }

  /**
   * One Warning Event `ReservationIgnored` on the pod, naming its reservation annotations (with
   * their values and node) and why the analyses ignore them. Deduplicated per pod UID, reservation
   * (the annotation values) and configuration: a verdict computed again (another pod placed, a
   * relist, a restart of the informers) reports nothing new; a new configuration or a changed
   * reservation reports once more. The EventRecorder's aggregation and per-object rate limit apply
   * on top.
   */
  private reportIgnored(key: string, why: readonly string[]): void {
    const rec = this.state.pod(key);
    if (!rec) return;
    const ann = rec.pod.metadata?.annotations ?? {};
    const held = [RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION].filter((k) => k in ann).map((k) => `${k}=${ann[k]}`);
    if (!this.remember(`ignored-event:${rec.uid}`, `${this.configGen}\0${held.join('\0')}\0${rec.node ?? ''}`)) return;
    const message = `ulysses: the scheduler extender ignores this pod's reservation (${held.join(', ')}${rec.node ? ` on node ${rec.node}` : ''}): it does not fit the current configuration, so it holds nothing and blocks no other pod: ${why.join('; ')}`;
    this.events.event(
      { apiVersion: 'v1', kind: 'Pod', metadata: { name: rec.pod.metadata?.name, namespace: rec.pod.metadata?.namespace, uid: rec.uid, resourceVersion: rec.pod.metadata?.resourceVersion } },
      'Warning',
      RESERVATION_IGNORED,
      message.length > 1024 ? `${message.slice(0, 1021)}...` : message,
    );
  }

  /**
   * The filter verb. The analyses run inline on a budget of `inlineAnalysisBudget`; with
   * `analysisThread` (and node names, the nodeCacheCapable path) the nodes whose analysis ran past
   * it are analysed again in the analysis thread (analysis-worker.ts) with what is left of
   * `analysisBudget`, and the answer is a promise: the event loop serves /healthz and other pods
   * meanwhile. Their verdicts are cached under the node stamps and network version of before the thread
   * ran (a change meanwhile makes them stale, not wrong).
   */
  filter(args: ExtenderArgs): ExtenderFilterResult | AnswerJson | Promise<ExtenderFilterResult | AnswerJson> {
    const out: ExtenderFilterResult = { FailedNodes: {}, FailedAndUnresolvableNodes: {}, Error: '' };
    const names = args.NodeNames;
    // nodeCacheCapable (the scheduler sends names): no per-node objects on this path
    const sent = names ? undefined : (args.Nodes?.items ?? []);
    const count = names ? names.length : sent!.length;
    const m = metrics();
    // a pod-level refusal: every node, unresolvable (no preemption can help), the same message
    const refuseEverywhere = (reason: RejectionReason, message: string): ExtenderFilterResult => {
      for (let i = 0; i < count; i++) out.FailedAndUnresolvableNodes[names ? names[i]! : sent![i]!.metadata!.name!] = message;
      if (count) m.rejections.inc({ reason }, count);
      if (names) out.NodeNames = [];
      else out.Nodes = { items: [] };
      return out;
    };
    // an internal error propagates: HTTP 500, logged with the request id (the error handler)
    const r = this.requirements(args.Pod);
    if (!r.ok) return refuseEverywhere(r.reason, r.message);
    // kube-scheduler would bind it itself (the bind entry's managedResources): no reservation would be recorded
    if (needsReservation(r.req) && !requestsReservation(args.Pod)) {
      const message = missingReservationRequest(r.req);
      if (this.remember(`reservation:${r.req.uid}`, message)) objectLogger(this.log, 'Pod', r.req.key).warn({ uid: r.req.uid, reason: 'reservation-request' }, message);
      return refuseEverywhere('reservation-request', message);
    }
    const epoch = this.requeuer.epoch;
    const cache = names ? this.verdictsFor(r.req) : undefined;
    // the verdicts below are of this generation (a thread's, cached under the stamps of before it ran, as well)
    const generation = this.state.generation;
    const memo: SlotMemo = new Map();
    const worker = names ? this.rtWorker() : undefined;
    const budget = worker ? this.inlineBudget(r.req) : this.budget();
    // per node: its verdict as a code (verdict-cache.ts: FITS with its score, a refusal of the
    // demand, or MISS: the verdict is in `verdicts`), and on the names path its slot (-1: a node the
    // state does not have) and whether its name is its own JSON text between quotes
    const codes = new Int32Array(count);
    const scores = new Float64Array(count);
    const slots = new Int32Array(count);
    const plain = new Uint8Array(count);
    const verdicts: Array<NodeVerdict | undefined> = new Array<NodeVerdict | undefined>(count);
    const deferred: Array<{ index: number; info: NodeInfo; slot: number }> = [];
    if (names) {
      const { index, infos, stamps, flags } = this.state.slots;
      // a deferrable-server pod's verdict on a deferrable-server node is that of its tie rank there
      const ranked = r.req.rt?.kind === 'deferrable-server' ? SLOT_DEFERRABLE_SERVER : 0;
      let hits = 0;
      for (let i = 0; i < count; i++) {
        const slot = index.get(names[i]!);
        if (slot === undefined) {
          slots[i] = -1;
          continue;
        }
        slots[i] = slot;
        plain[i] = flags[slot]! & SLOT_PLAIN_NAME;
        const info = infos[slot]!;
        const rank = flags[slot]! & ranked ? this.tieRank(r.req, info) : 0;
        const code = cache!.code(slot, stamps[slot]!, rank);
        codes[i] = code;
        if (code !== MISS) {
          if (code === FITS) scores[i] = cache!.score(slot, rank);
          hits++;
          continue;
        }
        const v = this.evaluate(r.req, info, slot, cache, memo, budget, rank);
        if (worker && !v.fits && v.budgetExceeded) deferred.push({ index: i, info, slot });
        else verdicts[i] = v;
      }
      this.verdictStats.hits += hits;
    } else {
      for (let i = 0; i < count; i++) {
        codes[i] = MISS;
        verdicts[i] = this.evaluate(r.req, nodeInfoOf(sent![i]!), undefined, undefined, memo, budget);
      }
    }
    if (worker) this.inlineSpent(r.req, budget, deferred.length);
    const finish = (work: number): ExtenderFilterResult | AnswerJson => {
      const counts = new Map<RejectionReason, number>();
      const count1 = (reason: RejectionReason) => counts.set(reason, (counts.get(reason) ?? 0) + 1);
      let answer: ExtenderFilterResult | AnswerJson;
      let passed: number;
      if (names) {
        // nodeCacheCapable, the scheduler's path at scale: written as JSON text (see AnswerJson), the
        // pieces joined once (flat text, where appending piece by piece leaves a tree of strings to flatten)
        const passing: string[] = [];
        const refused: string[] = [];
        // the messages naming this pod, once per request
        const podJson: string[] = [];
        let unknown = '';
        const cycle: FilterCycle = { demand: r.req.demand, generation, configGen: this.configGen, names: passing, slots: [], scores: [] };
        for (let i = 0; i < count; i++) {
          const name = names[i]!;
          if (slots[i]! < 0) {
            unknown += `${unknown ? ',' : ''}${JSON.stringify(name)}:${this.jsonString(MESSAGES.unknownNode)}`;
            count1('unknown-node');
            continue;
          }
          const code = codes[i]!;
          const v = code === MISS ? verdicts[i]! : undefined;
          if (code === FITS || v?.fits) {
            passing.push(name);
            cycle.slots.push(slots[i]!);
            cycle.scores.push(v?.fits ? v.score : scores[i]!);
          } else {
            const json = nameJson(name, plain[i]!);
            if (v) {
              refused.push(`${json}:${this.jsonString(v.message)}`);
              count1(v.reason);
            } else {
              const f = cache!.refusal(code);
              refused.push(`${json}:${typeof f.json === 'string' ? f.json : (podJson[code] ??= refusalJson(f, r.req.uid))}`);
              count1(f.reason);
            }
          }
        }
        answer = `{"NodeNames":${JSON.stringify(passing)},"FailedNodes":{${unknown}},"FailedAndUnresolvableNodes":{${refused.join(',')}},"Error":""}`;
        keepRecent(this.cycles, r.req.uid, cycle, FILTER_CYCLES_KEPT);
        passed = passing.length;
      } else {
        const passingNodes: V1Node[] = [];
        for (let i = 0; i < count; i++) {
          const v = verdicts[i]!;
          if (v.fits) passingNodes.push(sent![i]!);
          else {
            out.FailedAndUnresolvableNodes[sent![i]!.metadata!.name!] = v.message;
            count1(v.reason);
          }
        }
        out.Nodes = { items: passingNodes };
        answer = out;
        passed = passingNodes.length;
      }
      for (const [reason, n] of counts) m.rejections.inc({ reason }, n);
      if (passed) this.requeuer.passed(r.req.uid);
      else if (count) this.requeuer.refusedEverywhere(r.req.uid, args.Pod.metadata?.namespace ?? '', args.Pod.metadata?.name ?? '', epoch);
      this.budgetSpent(work, budget.exceeded && !deferred.length ? budget.limit : undefined, r.req);
      return answer;
    };
    if (!deferred.length || !worker) return finish(budget.used);
    return this.analyzeDeferred(r.req, deferred, cache!, memo, worker, this.cfg.analysisBudget - budget.used).then(({ results, used, exceeded }) => {
      for (const [k, d] of deferred.entries()) verdicts[d.index] = results[k];
      if (exceeded) this.budgetSpent(0, this.cfg.analysisBudget, r.req);
      return finish(budget.used + used);
    });
  }

  /** The analysis thread's part of a filter (see {@link filter}). */
  private async analyzeDeferred(
    req: PodRequirements,
    deferred: ReadonlyArray<{ index: number; info: NodeInfo; slot: number }>,
    cache: DemandVerdicts,
    memo: SlotMemo,
    worker: RtAnalysisWorker,
    limit: number,
  ): Promise<{ results: NodeVerdict[]; used: number; exceeded: boolean }> {
    const collected = { nodes: [] as ParsedRtNode[], pods: [] as NewPod[] };
    const COLLECTED = new Error('collected');
    const network = this.networkVersionOf(req);
    const before = deferred.map(({ info, slot }) => {
      const key = { stamp: this.state.stampOf(slot), tieRank: this.tieRank(req, info) };
      try {
        evaluateShared(req, info, this.state, this.cfg, memo, undefined, (n, p) => {
          collected.nodes.push(n);
          collected.pods.push(p);
          throw COLLECTED;
        });
      } catch (err) {
        if (err !== COLLECTED) throw err;
      }
      return key;
    });
    if (collected.nodes.length !== deferred.length) throw new Error('internal: a deferred node did not reach its RT analysis');
    this.feed(worker);
    const res = await worker.analyze(collected.nodes, collected.pods, Math.max(limit, 1), this.cfg.analysisBudget);
    let exceeded = false;
    // kept under the stamps of before the thread ran, unless the demand's verdicts moved on to another network version meanwhile
    const keep = cache.ofNetwork(network);
    const results = deferred.map(({ info, slot }, k) => {
      const shared = evaluateShared(req, info, this.state, this.cfg, memo, undefined, () => res.reports[k]!);
      if (!shared.verdict.fits && shared.verdict.budgetExceeded) exceeded = true;
      const { stamp, tieRank } = before[k]!;
      if (keep) cache.set(slot, tieRank, stamp, shared.shareable ? shared : undefined);
      return this.computed(verdictFor(shared, req.uid), info);
    });
    return { results, used: res.used, exceeded };
  }

  /** Jobs the analysis thread answered since start. */
  get analysisThreadJobs(): number {
    return this.analysisWorker?.jobs ?? 0;
  }

  /** The analysis thread (config analysisThread), started on first use. */
  private rtWorker(): RtAnalysisWorker | undefined {
    if (!this.cfg.analysisThread) return undefined;
    return (this.analysisWorker ??= new RtAnalysisWorker(this.cfg.analysisThreadNice));
  }

  private stopFeed: (() => void) | undefined;

  /** Set by {@link rebuild}: this replica is taking over (or leads). */
  private takingOver = false;

  /** Behind a closed gate and not taking over: a standby replica (leadership.ts), which keeps only its state warm. */
  private standby(): boolean {
    return this.gate !== undefined && !this.takingOver && !this.gate.check().ready;
  }

  /**
   * Feeds the analysis thread in the background (config analysisThreadFeed) from start(), or from
   * its first use when the server is not started: every RT node's pods now, then every node whose
   * version the state bumps (an informer event that changed what the analyses read), as they come.
   * Not on a standby ({@link standby}): it answers nothing, so it would pack and analyse every RT
   * pod change for no request; it starts feeding when it takes over ({@link rebuild}), in parallel
   * with the list, and until the feed has caught up a request brings over what it needs itself
   * (at most FEED_CHUNK_UNITS of pods, charged to its budget).
   */
  private feed(worker: RtAnalysisWorker): void {
    if (!this.cfg.analysisThreadFeed) {
      if (worker.feedActive) worker.feedFrom(undefined);
      return;
    }
    if (worker.feedActive || this.standby()) return;
    this.stopFeed ??= this.state.onNodeChange((node) => this.analysisWorker?.changed(node));
    worker.feedFrom(this.feedSource);
  }

  /** What the feed brings over: per RT node the very list of pods a request's analysis gets (ClusterState.rtSummary). */
  private readonly feedSource: FeedSource = {
    nodes: () => this.state.nodeNames(),
    pods: (name) => {
      const info = this.state.node(name);
      if (!info || typeof info.rtKind !== 'string' || !info.rtCapacity.ok) return undefined;
      return this.state.rtSummary(name).pods;
    },
  };

  /** Resolves once the analysis thread's background feed has caught up with the state (tests, benches). */
  analysisThreadFeedIdle(): Promise<void> {
    return this.analysisWorker?.feedIdle() ?? Promise.resolve();
  }

  prioritize(args: ExtenderArgs): AnswerJson | Promise<AnswerJson> {
    const names = args.NodeNames;
    const sent = names ? undefined : (args.Nodes?.items ?? []);
    const count = names ? names.length : sent!.length;
    const nameAt = (i: number) => (names ? names[i]! : sent![i]!.metadata!.name!);
    const scores = new Array<number>(count).fill(0);
    const infos: Array<NodeInfo | undefined> = new Array<NodeInfo | undefined>(count);
    // the HostPriorityList as JSON text (see AnswerJson); a node's name as its NodeInfo has it written
    const answer = (): AnswerJson => {
      let text = '[';
      for (let i = 0; i < count; i++) {
        if (i) text += ',';
        text = hostPriorityJson(text, infos[i]?.nameJson ?? JSON.stringify(nameAt(i)), scores[i]!);
      }
      return `${text}]`;
    };
    const r = podRequirements(args.Pod, this.cfg, this.networks);
    if (r.ok && names) {
      const fromFilter = this.scoresFromFilter(r.req, names);
      if (fromFilter !== undefined) return fromFilter;
    }
    const cache = r.ok && names ? this.verdictsFor(r.req) : undefined;
    const memo: SlotMemo = new Map();
    // as filter: inline on inlineAnalysisBudget, the nodes past it in the analysis thread
    const worker = r.ok && names ? this.rtWorker() : undefined;
    const budget = worker && r.ok ? this.inlineBudget(r.req) : this.budget();
    const deferred: Array<{ index: number; info: NodeInfo; slot: number }> = [];
    const slotInfos = this.state.slots.infos;
    for (let i = 0; i < count; i++) {
      const slot = r.ok && names ? this.state.slotOf(names[i]!) : undefined;
      const info = !r.ok ? undefined : names ? (slot === undefined ? undefined : slotInfos[slot]) : nodeInfoOf(sent![i]!);
      infos[i] = info;
      const v = r.ok && info ? this.evaluate(r.req, info, slot, cache, memo, budget) : undefined;
      if (worker && info && v && !v.fits && v.budgetExceeded) deferred.push({ index: i, info, slot: slot! });
      if (v?.fits) scores[i] = v.score;
    }
    if (!r.ok) return answer();
    const req = r.req;
    if (worker) this.inlineSpent(req, budget, deferred.length);
    if (!deferred.length || !worker) {
      this.budgetSpent(budget.used, budget.exceeded ? budget.limit : undefined, req);
      return answer();
    }
    return this.analyzeDeferred(req, deferred, cache!, memo, worker, this.cfg.analysisBudget - budget.used).then(({ results, used, exceeded }) => {
      for (const [k, d] of deferred.entries()) scores[d.index] = results[k]!.fits ? results[k]!.score : 0;
      this.budgetSpent(budget.used + used, exceeded ? this.cfg.analysisBudget : undefined, req);
      return answer();
    });
  }

  /**
   * The prioritize answer from the pod's filter answer of this scheduling cycle ({@link FilterCycle}),
   * or undefined when it cannot serve: no such answer, something changed since, or a node the
   * filter did not pass (or not in its order) is asked for.
   */
  private scoresFromFilter(req: PodRequirements, names: readonly string[]): AnswerJson | undefined {
    const c = this.cycles.get(req.uid);
    if (!c || c.generation !== this.state.generation || c.configGen !== this.configGen || c.demand !== req.demand) return undefined;
    // the same generation: the filter's nodes are in the same slots
    const { flags } = this.state.slots;
    let text = '[';
    let j = 0;
    for (let i = 0; i < names.length; i++) {
      const name = names[i]!;
      while (j < c.names.length && c.names[j] !== name) j++;
      if (j === c.names.length) return undefined;
      if (i) text += ',';
      const slot = c.slots[j]!;
      text = hostPriorityJson(text, nameJson(name, flags[slot]! & SLOT_PLAIN_NAME), c.scores[j]!);
      j++;
    }
    this.verdictStats.hits += names.length;
    return `${text}]`;
  }

  /**
   * Bind's re-check of the node (under its locks): inline on inlineAnalysisBudget; with the
   * analysis thread, a node whose RT analysis runs past it is analysed there with what is left of
   * analysisBudget (the event loop meanwhile serves /healthz and the other pods), within `left()` ms.
   * The locks keep other binds off the node and network; if an informer event changed either
   * meanwhile, the thread's report is dropped and the node evaluated again inline (bounded by
   * analysisBudget).
   */
  private async recheck(req: PodRequirements, info: NodeInfo, left: () => number): Promise<NodeVerdict> {
    const total = this.cfg.analysisBudget;
    const worker = this.rtWorker();
    const budget = worker ? new AnalysisBudget(Math.min(this.cfg.inlineAnalysisBudget, total), total) : new AnalysisBudget(total);
    const v = evaluateNode(req, info, this.state, this.cfg, new Map(), budget);
    if (!worker || v.fits || !v.budgetExceeded) {
      this.budgetSpent(budget.used, budget.exceeded ? total : undefined, req);
      return v;
    }
    const networkVersion = () => (req.network ? this.state.networkVersion(req.network.name) : 0);
    const before = { node: info.version, network: networkVersion() };
    let collected: { node: ParsedRtNode; pod: NewPod } | undefined;
    const COLLECTED = new Error('collected');
    try {
      evaluateNode(req, info, this.state, this.cfg, new Map(), undefined, (node, pod) => {
        collected = { node, pod };
        throw COLLECTED;
      });
    } catch (err) {
      if (err !== COLLECTED) throw err;
    }
    if (!collected) throw new Error('internal: bind re-check did not reach its RT analysis');
    this.feed(worker);
    const res = await withDeadline(worker.analyze([collected.node], [collected.pod], Math.max(total - budget.used, 1), total), left(), 'the RT analysis in the analysis thread');
    this.bindThreadJobs++;
    const now = this.state.node(info.name);
    if (!now || now.version !== before.node || networkVersion() !== before.network) {
      const again = new AnalysisBudget(total);
      const inline = now ? evaluateNode(req, now, this.state, this.cfg, new Map(), again) : v;
      this.budgetSpent(budget.used + res.used + again.used, again.exceeded ? total : undefined, req);
      return inline;
    }
    const report = res.reports[0]!;
    this.budgetSpent(budget.used + res.used, report.budgetExceeded ? total : undefined, req);
    return evaluateNode(req, now, this.state, this.cfg, new Map(), undefined, () => report);
  }

  /** Bind re-checks answered with the analysis thread's help since start. */
  bindThreadJobs = 0;

  /**
   * How long one call may take: the scheduler's httpTimeout less a margin for the HTTP round trip
   * (a tenth of it, at most 500 ms). Past it kube-scheduler has given up on the answer.
   */
  private callDeadlineMs(): number {
    const t = this.cfg.httpTimeoutMs;
    return t - Math.min(500, Math.floor(t / 10));
  }

  /**
   * The pod comes from the informer cache ({@link cachedPod}), never from a GET. Every step (the
   * wait for the cache, the locks, the re-check, the PATCH
   * of the reservation, the binding POST) finishes or gives up inside {@link callDeadlineMs}; the
   * locks are released when it gives up. A PATCH whose outcome is unknown (it gave up waiting)
   * leaves the intended reservation assumed in the state (ClusterState.assumePod) until the
   * informer brings the pod's real state: over-reservation meanwhile, never a slot or core booked
   * twice. A PATCH the apiserver refused restores the previous record.
   * Writes are fenced: each is sent only while leadership is held with time to spare and given up
   * before the Lease could lapse ({@link fence}); the PATCH is conditional on the pod's
   * resourceVersion the decision saw and the binding on the one the PATCH made (each retried once on
   * a later version that changed nothing the decision read), so a write based on a stale view fails
   * (an Error for the scheduler) instead of overwriting another replica's reservation. The PATCH
   * also carries the term's reservation epoch (leadership.ts RESERVATION_EPOCH_ANNOTATION): a
   * leader that lost the Lease after its fence check has its late PATCH refused by the apiserver
   * (the epoch policy, HTTP 403): an Error, nothing reserved or bound.
   */
  async bind(args: ExtenderBindingArgs): Promise<ExtenderBindingResult> {
    const key = `${args.PodNamespace}/${args.PodName}`;
    const log = objectLogger(this.log, 'Pod', key);
    const m = metrics();
    const started = Date.now();
    const total = this.callDeadlineMs();
    const left = () => total - (Date.now() - started);
    const perRequest = () => Math.max(1, Math.min(this.cfg.bindTimeoutMs, left()));
    const fail = (result: 'rejected' | 'error', message: string): ExtenderBindingResult => {
      m.binds.inc({ result });
      if (result === 'rejected') m.rejections.inc({ reason: 'bind' });
      log.warn({ node: args.Node }, message);
      return { Error: message };
    };
    if (!this.client) return fail('error', `ulysses: bind ${key}: the extender has no API client`);
    const client = this.client;
    const call = <T>(method: string, path: string, what: string, opts: { body?: unknown; contentType?: string } = {}): Promise<T> =>
      withDeadline(client.request<T>(method, path, { ...opts, timeoutMs: perRequest() }), left(), what);
    const write = <T>(method: string, path: string, what: string, opts: { body?: unknown; contentType?: string }): Promise<T> =>
      this.fencedWrite<T>(method, path, what, opts, perRequest(), left());
    const podPath = `/api/v1/namespaces/${encodeURIComponent(args.PodNamespace)}/pods/${encodeURIComponent(args.PodName)}`;
    /** What our PATCH wrote, once it was written (for the release after a failed binding). */
    let reserved: { values: Record<string, string>; resourceVersion: string | undefined } | undefined;
    let uid: string | undefined;
    try {
      if (args.PodUID && this.state.isDeleted(args.PodUID)) return fail('rejected', `ulysses: bind ${key}: pod ${args.PodUID} was deleted`);
      const pod = await this.cachedPod(key, args.PodUID || undefined, Math.min(BIND_CACHE_WAIT_MS, left()));
      if (!pod) {
        const cached = this.state.pod(key)?.uid;
        return fail(
          'error',
          `ulysses: bind ${key}: not in the extender's pod cache${args.PodUID ? ` as uid ${args.PodUID}` : ''}${cached ? ` (it has uid ${cached})` : ''} after ${Date.now() - started} ms: nothing written, kube-scheduler retries the pod`,
        );
      }
      uid = pod.metadata!.uid!;
      const podUid = uid;
      const r = this.requirements(pod);
      if (!r.ok) return fail('rejected', r.message);
      if (needsReservation(r.req)) {
        const keys = [`node:${args.Node}`, ...(r.req.network ? [`net:${r.req.network.name}`] : [])];
        const rejection = await this.locks.run(
          keys,
          async () => {
            const info = this.state.node(args.Node);
            if (!info) return `ulysses: bind ${key}: node ${args.Node} is not in the extender's node cache`;
            const v = await this.recheck(r.req, info, left);
            if (!v.fits) return `ulysses: bind ${key} to ${args.Node}: ${v.message}`;
            const latest = this.state.pod(key)?.pod;
            const current = latest?.metadata?.uid === podUid ? latest : pod;
            const values: Record<string, string> = { [RESERVED_NODE_ANNOTATION]: args.Node };
            if (v.cores) values[RT_CORES_ANNOTATION] = JSON.stringify(v.cores);
            if (v.slots) values[TDMA_SLOTS_ANNOTATION] = JSON.stringify(v.slots);
            // the fencing token: the apiserver admits the write only while this term's epoch is the Lease's (reservation-epoch-policy.yaml)
            const epoch = this.epoch();
            if (epoch !== undefined) values[RESERVATION_EPOCH_ANNOTATION] = epoch;
            // conditional on the pod being the version the decision saw: a write based on a stale view
            // of it (a successor reserved it meanwhile) fails instead of overwriting
            const opsFor = (base: V1Pod) => {
              const ann = base.metadata?.annotations ?? {};
              const ops: unknown[] = [{ op: 'test', path: '/metadata/uid', value: podUid }];
              if (base.metadata?.resourceVersion) ops.push({ op: 'test', path: '/metadata/resourceVersion', value: base.metadata.resourceVersion });
              if (!base.metadata?.annotations) ops.push({ op: 'add', path: '/metadata/annotations', value: values });
              else for (const [k, val] of Object.entries(values)) ops.push({ op: 'add', path: `/metadata/annotations/${escapePointer(k)}`, value: val });
              // a stale reservation of a plugin that no longer applies must not stay
              const stale = [RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION].filter((k) => !(k in values) && k in ann);
              for (const k of stale) ops.push({ op: 'remove', path: `/metadata/annotations/${escapePointer(k)}` });
              const intended = Object.fromEntries(Object.entries({ ...ann, ...values }).filter(([k]) => !stale.includes(k)));
              return { ops, intended };
            };
            let base = current;
            let patched: V1Pod | undefined;
            for (let attempt = 1; !patched; attempt++) {
              const { ops, intended } = opsFor(base);
              // assumed before the PATCH is sent: whatever becomes of it, no other bind takes these cores/slots meanwhile
              this.state.assumePod({ ...base, metadata: { ...base.metadata, annotations: intended } });
              try {
                // fenced here: nothing awaited between this check and the request
                patched = await write<V1Pod>('PATCH', podPath, `PATCH ${podPath}`, { body: ops, contentType: 'application/json-patch+json' });
              } catch (err) {
                // refused by the apiserver: nothing was written, the previous record is the truth; unknown: stay assumed
                if (err instanceof ApiError || err instanceof NotServing) this.state.assumePod(base);
                if (!(err instanceof ApiError && (err.statusCode === 409 || err.statusCode === 422))) throw err;
                // a precondition failed. Once, on the pod's latest version if it changed nothing the
                // decision read (unbound, same demand and reservation annotations: e.g. a status update
                // the cache had not seen); anything else, such as another replica's reservation, stays
                if (attempt === 1) {
                  const fresh = await call<V1Pod>('GET', podPath, `GET ${podPath}`);
                  if (sameReservation(fresh, base)) {
                    base = fresh;
                    continue;
                  }
                }
                throw new Error(
                  `the pod is no longer the version the reservation was decided on (uid ${podUid}, resourceVersion ${base.metadata?.resourceVersion ?? 'unknown'}): nothing written (${err.message})`,
                );
              }
            }
            this.state.upsertPod(patched);
            reserved = { values, resourceVersion: patched.metadata?.resourceVersion };
            log.info({ node: args.Node, cores: v.cores, slots: v.slots }, 'reservation recorded');
            return undefined;
          },
          left(),
        );
        if (rejection) return fail('rejected', rejection);
      }
      // a reserved pod is bound only as a version holding our reservation (the apiserver checks the
      // Binding's resourceVersion): the one our PATCH made, or (once) a later one that still holds it,
      // unbound; if anyone changed the reservation since, e.g. another replica, nothing is bound
      const bindAs = (resourceVersion: string | undefined) =>
        write('POST', `${podPath}/binding`, `POST ${podPath}/binding`, {
          body: {
            apiVersion: 'v1',
            kind: 'Binding',
            metadata: { name: args.PodName, namespace: args.PodNamespace, uid, ...(resourceVersion ? { resourceVersion } : {}) },
            target: { apiVersion: 'v1', kind: 'Node', name: args.Node },
          },
        });
      const conflict = (err: unknown) => err instanceof ApiError && err.statusCode === 409;
      try {
        await bindAs(reserved?.resourceVersion);
      } catch (err) {
        if (!reserved?.resourceVersion || !conflict(err)) throw err;
        const changed = (e: unknown) => new Error(`the pod changed after its reservation was written (resourceVersion ${reserved!.resourceVersion}): not bound (${(e as Error).message})`);
        const fresh = await call<V1Pod>('GET', podPath, `GET ${podPath}`);
        const ann = fresh.metadata?.annotations ?? {};
        const ours = !fresh.spec?.nodeName && fresh.metadata?.uid === uid && Object.entries(reserved.values).every(([k, v]) => ann[k] === v);
        if (!ours || !fresh.metadata?.resourceVersion) throw changed(err);
        try {
          await bindAs(fresh.metadata.resourceVersion);
        } catch (again) {
          throw conflict(again) ? changed(again) : again;
        }
      }
      m.binds.inc({ result: 'bound' });
      log.info({ node: args.Node }, 'bound');
      return { Error: '' };
    } catch (err) {
      // the binding failed (or its outcome is unknown): release the reservation in the background, never past the deadline
      // not after losing the gate: the successor may be reserving for this very pod (over-reservation, never double-booking)
      if (reserved && uid && !(err instanceof NotServing)) void this.releaseReservation(podPath, uid, reserved.values, log);
      if (isNotFound(err)) return fail('rejected', `ulysses: bind ${key}: pod not found`);
      if (err instanceof NotServing) return fail('error', `ulysses: bind ${key} to ${args.Node}: ${err.message}`);
      if (err instanceof DeadlineExceeded) {
        return fail('error', `ulysses: bind ${key} to ${args.Node}: gave up after ${Date.now() - started} ms (httpTimeoutMs ${this.cfg.httpTimeoutMs}): ${err.message}`);
      }
      return fail('error', `ulysses: bind ${key} to ${args.Node}: ${(err as Error).message}`);
    }
  }

  /**
   * The pod of a bind, from the informer cache only (no GET). kube-scheduler sends the bind right
   * after its own informer delivered the pod and the filter passed it; ours may be a few ms behind,
   * so a miss waits for the watch (woken by ClusterState.onPod, no polling), at most `ms`.
   * Undefined if the pod did not come: bind answers an Error before writing anything, and
   * kube-scheduler un-assumes the pod and retries it after its backoff
   * (pkg/scheduler/schedule_one.go handleBindingCycleError), by when the watch has delivered it.
   * With `uid`, only a pod of that UID counts (a pod recreated under the name).
   */
  private cachedPod(key: string, uid: string | undefined, ms: number): Promise<V1Pod | undefined> {
    const find = () => {
      const p = this.state.pod(key)?.pod;
      return p && (!uid || p.metadata?.uid === uid) ? p : undefined;
    };
    const now = find();
    if (now || ms <= 0) return Promise.resolve(now);
    return new Promise((resolve) => {
      let waiters = this.podWaiters.get(key);
      if (!waiters) this.podWaiters.set(key, (waiters = new Set()));
      const done = (p: V1Pod | undefined) => {
        clearTimeout(timer);
        const w = this.podWaiters.get(key);
        w?.delete(check);
        if (w?.size === 0) this.podWaiters.delete(key);
        resolve(p);
      };
      const check = () => {
        const p = find();
        if (p) done(p);
      };
      const timer = setTimeout(() => done(undefined), ms);
      waiters.add(check);
    });
  }

  /** Binds waiting for their pod to reach the cache, by pod key ({@link cachedPod}). */
  private readonly podWaiters = new Map<string, Set<() => void>>();

  /**
   * Best effort: the binding failed, so the pod holds no node; drop its reservation annotations,
   * only if the pod is still unbound (a binding whose answer was lost may have succeeded) and still
   * holds the reservation this bind wrote (`written`; another one, e.g. a successor's, is not ours
   * to drop). Fenced as bind's writes, and conditional on the version read.
   */
  private async releaseReservation(podPath: string, uid: string, written: Record<string, string>, log: Logger): Promise<void> {
    const timeoutMs = this.cfg.bindTimeoutMs;
    try {
      const current = await withDeadline(this.client!.request<V1Pod>('GET', podPath, { timeoutMs }), timeoutMs, `GET ${podPath}`);
      const ann = current.metadata?.annotations ?? {};
      if (current.spec?.nodeName || current.metadata?.uid !== uid) return;
      if (Object.entries(written).some(([k, v]) => ann[k] !== v)) return;
      const ops: unknown[] = [{ op: 'test', path: '/metadata/uid', value: uid }];
      if (current.metadata?.resourceVersion) ops.push({ op: 'test', path: '/metadata/resourceVersion', value: current.metadata.resourceVersion });
      // the epoch goes with the reservation (a removal needs none: the policy fences only setting or changing one)
      const removes = [RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION].filter((k) => k in ann);
      for (const k of removes) ops.push({ op: 'remove', path: `/metadata/annotations/${escapePointer(k)}` });
      if (removes.length) {
        this.state.upsertPod(await this.fencedWrite<V1Pod>('PATCH', podPath, `PATCH ${podPath}`, { body: ops, contentType: 'application/json-patch+json' }, timeoutMs));
      }
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not release the reservation after a failed binding (it stays: over-reservation, never double-booking)');
    }
  }

  /**
   * A write of the leader: fenced ({@link fence}) right before it is sent, and given up (by us and by
   * the apiserver, its `timeout` parameter) within `maxMs` and before the Lease could pass its renew
   * deadline; `deadlineMs` bounds the wait further (the rest of the scheduler's call).
   */
  private fencedWrite<T>(method: string, path: string, what: string, opts: { body?: unknown; contentType?: string }, maxMs: number, deadlineMs = Infinity): Promise<T> {
    const ms = Math.max(1, Math.floor(Math.min(maxMs, this.fence(what))));
    return withDeadline(this.client!.request<T>(method, path, { ...opts, timeoutMs: ms, query: { timeout: `${ms}ms` } }), Math.min(deadlineMs, ms), what);
  }

  /** This term's reservation epoch (the gate's, i.e. the Lease's spec.leaseTransitions); none without a Lease behind the gate. */
  private epoch(): string | undefined {
    const g = this.gate?.check();
    return g?.ready ? g.epoch : undefined;
  }

  /**
   * The leader's write fence: right before each write of bind (the reservation PATCH, the binding,
   * the release), leadership must still be held and not about to expire: the gate open with at
   * least {@link LEASE_WRITE_MARGIN_MS} (or a quarter of the renew deadline) left before the renew
   * deadline. Returns the ms the write may take (its timeout, ours and the apiserver's: it is given
   * up before the Lease could lapse; Infinity without a Lease behind the gate); throws NotServing
   * otherwise, so a leader cut off from the apiserver or paused past its lease writes nothing more
   * (bind answers the Error).
   */
  private fence(what: string): number {
    const g = this.gate?.check();
    if (!g) return Number.POSITIVE_INFINITY;
    if (!g.ready) throw new NotServing(g.reason);
    const valid = g.validForMs ?? Number.POSITIVE_INFINITY;
    const margin = Math.min(LEASE_WRITE_MARGIN_MS, (g.renewDeadlineMs ?? Number.POSITIVE_INFINITY) / 4);
    if (valid < margin) {
      throw new NotServing(`${what} not sent: the Lease's renew deadline is ${valid} ms away, less than the ${margin} ms a write needs`);
    }
    return valid;
  }
}
