/**
 * The RT analyses of heavy requests in a worker thread (core/ts-worker.ts), so that `/healthz` and
 * the other pods' requests never wait behind one pod's analysis. server.ts runs every request's
 * analyses inline first with a small budget (`inlineAnalysisBudget`: the common pod costs far less,
 * and a round trip to the thread would cost more than its analysis); the nodes whose analysis ran
 * past it are analysed again here, with what is left of the request's `analysisBudget`, while the
 * event loop serves other requests. Input and output are the pure analyses' (realtime/what-if.ts
 * `analyzeRtNode` on parsed nodes: structured-clone safe).
 */
import { isMainThread, parentPort, workerData, type Worker } from 'node:worker_threads';
import { setThreadNice, threadNice } from '../../core/thread.ts';
import { tsWorker } from '../../core/ts-worker.ts';
import type { RtPodSpec } from '../realtime/annotations.ts';
import { DEFAULT_MAX_UTILIZATION } from '../realtime/budget-period.ts';
import { AnalysisBudget, taskSetFacts, type RtTask } from '../realtime/task.ts';
import { analyzeRtNode, type NewPod, type NodeReport, type ParsedRtNode, type ParsedRtPod } from '../realtime/what-if.ts';

const WORKER_MARK = 'ulysses-rt-analysis';

/**
 * What the thread is told of the existing RT pods. It keeps every pod it was given (by an id the
 * sender assigns per parsed pod version: same spec object, name, UID and pin) and each node's list
 * of pod ids; a job carries only what the thread does not have yet:
 * - `batch`: the pods new to the thread, packed into one Float64Array (transferred, not cloned) and
 *   their names and UIDs; a node of 64 servers x 256 tasks was 16,000 task objects in a structured
 *   clone (synchronous, on the event loop, ~300 ms for 17 such nodes on this VM), it is 16,000 x 4
 *   numbers copied into a buffer;
 * - per node, the ids of its pods (null: the thread's list of the node is current);
 * - `drop`: ids no node list refers to any more (the thread forgets them: its memory follows the state).
 * So a pod that changed costs that pod, a node that changed its list of ids, and nothing is sent twice.
 */
interface PodBatch {
  readonly ids: Int32Array;
  readonly names: readonly string[];
  readonly uids: readonly string[];
  /** Per pod: kind (0 server, 1 reservation, 2 EDF), its 2 / 3 / 0 parameters, n tasks, n x (wcetUs, periodUs, deadlineUs|NaN, priority|NaN), n cores (-1: none), the cores. */
  readonly numbers: Float64Array;
}

/** A node as sent to the thread: `pods` are ids of pods the thread has, or null when its list is current. */
type SentNode = Omit<ParsedRtNode, 'pods'> & { readonly pods: Int32Array | null };

interface Job {
  readonly id: number;
  readonly nodes: readonly SentNode[];
  readonly pods: readonly NewPod[];
  readonly limit: number;
  readonly requestLimit: number;
  readonly batch: PodBatch | null;
  readonly drop: Int32Array | null;
  /** Forget every pod and node list kept so far (the sender's record of them overflowed). */
  readonly reset?: true;
  /** Node lists to keep (the background feed: no analysis), and nodes whose lists to forget. */
  readonly lists?: ReadonlyArray<{ readonly name: string; readonly ids: Int32Array }>;
  readonly forget?: readonly string[];
  /** Answer with the thread's node lists and pod count instead (tests: the thread's state against the main thread's). */
  readonly snapshot?: true;
}

/** The thread's state as {@link RtAnalysisWorker.snapshot} reports it. */
export interface ThreadSnapshot {
  /** Node lists by node name. */
  readonly lists: ReadonlyMap<string, readonly ParsedRtPod[]>;
  /** Pods kept (referred to by a list, or brought over ahead of their node's list). */
  readonly pods: number;
  /** The thread's nice value (Linux; undefined elsewhere). */
  readonly nice: number | undefined;
}

/**
 * Work units of pods one background feed job brings over (and at most what one request brings
 * over itself while the feed runs): ~8,000 tasks, a few ms of packing on the event loop and of
 * unpacking in the thread, so a request's job never waits long behind a feed job.
 */
export const FEED_CHUNK_UNITS = 8192;

/**
 * Where the background feed reads the nodes' RT pods (server.ts: the ClusterState). `pods(node)`
 * must return the very list object a request's analysis gets for the node (ClusterState.rtSummary),
 * undefined when the node is gone or not an RT node (its list in the thread is forgotten).
 */
export interface FeedSource {
  nodes(): Iterable<string>;
  pods(node: string): readonly ParsedRtPod[] | undefined;
}

/**
 * Node lists kept per side (by node name) before both forget everything, without the feed (lists
 * of nodes gone are never forgotten otherwise). With the feed, a node gone or no longer an RT node
 * has its list forgotten, so the lists follow the state's RT nodes and need no cap.
 */
const MAX_KEPT_NODES = 4096;

/**
 * Work units (task.ts AnalysisBudget) charged to the request for bringing one pod into the thread:
 * 1 per pod and 1 per task, the order of what one pass of an analysis over them costs. A node whose
 * pods new to the thread do not fit in what is left of the request's budget is not sent: it is
 * refused with "analysis budget exceeded" (not cached), and a later request brings it over with
 * a budget of its own; pods already sent stay (progress every request).
 */
export function transferUnits(spec: RtPodSpec): number {
  return 1 + spec.tasks.length;
}

const KIND_CODE = { 'deferrable-server': 0, 'budget-period': 1, edf: 2 } as const;

function packedLength(p: ParsedRtPod): number {
  const params = p.spec.kind === 'deferrable-server' ? 2 : p.spec.kind === 'budget-period' ? 3 : 0;
  return 1 + params + 1 + 4 * p.spec.tasks.length + 1 + (p.cores?.length ?? 0);
}

/** Packs `pods` (ids[i] for pods[i]) into one batch (see {@link PodBatch}). */
export function packPods(pods: readonly ParsedRtPod[], ids: readonly number[]): PodBatch {
  let length = 0;
  for (const p of pods) length += packedLength(p);
  const numbers = new Float64Array(length);
  let o = 0;
  for (const p of pods) {
    const s = p.spec;
    numbers[o++] = KIND_CODE[s.kind];
    if (s.kind === 'deferrable-server') {
      numbers[o++] = s.server.budgetUs;
      numbers[o++] = s.server.periodUs;
    } else if (s.kind === 'budget-period') {
      numbers[o++] = s.reservation.runtimeUs;
      numbers[o++] = s.reservation.periodUs;
      numbers[o++] = s.reservation.cpus;
    }
    numbers[o++] = s.tasks.length;
    for (const t of s.tasks) {
      numbers[o++] = t.wcetUs;
      numbers[o++] = t.periodUs;
      numbers[o++] = t.deadlineUs ?? Number.NaN;
      numbers[o++] = t.priority ?? Number.NaN;
    }
    if (p.cores) {
      numbers[o++] = p.cores.length;
      for (const c of p.cores) numbers[o++] = c;
    } else numbers[o++] = -1;
  }
  return { ids: Int32Array.from(ids), names: pods.map((p) => p.name), uids: pods.map((p) => p.uid), numbers };
}

/** The pods of a batch, as they were packed (the analyses see the same objects' shapes). */
export function unpackPods(b: PodBatch): ParsedRtPod[] {
  const out: ParsedRtPod[] = [];
  const n = b.numbers;
  let o = 0;
  for (let i = 0; i < b.ids.length; i++) {
    const kind = n[o++]!;
    let head: { kind: 'deferrable-server'; server: { budgetUs: number; periodUs: number } } | { kind: 'budget-period'; reservation: { runtimeUs: number; periodUs: number; cpus: number } } | { kind: 'edf' };
    if (kind === 0) head = { kind: 'deferrable-server', server: { budgetUs: n[o++]!, periodUs: n[o++]! } };
    else if (kind === 1) head = { kind: 'budget-period', reservation: { runtimeUs: n[o++]!, periodUs: n[o++]!, cpus: n[o++]! } };
    else head = { kind: 'edf' };
    const count = n[o++]!;
    const tasks: RtTask[] = new Array<RtTask>(count);
    for (let k = 0; k < count; k++) {
      const wcetUs = n[o++]!;
      const periodUs = n[o++]!;
      const deadlineUs = n[o++]!;
      const priority = n[o++]!;
      tasks[k] = Number.isNaN(deadlineUs)
        ? Number.isNaN(priority)
          ? { wcetUs, periodUs }
          : { wcetUs, periodUs, priority }
        : Number.isNaN(priority)
          ? { wcetUs, periodUs, deadlineUs }
          : { wcetUs, periodUs, deadlineUs, priority };
    }
    const nCores = n[o++]!;
    let cores: number[] | undefined;
    if (nCores >= 0) {
      cores = new Array<number>(nCores);
      for (let k = 0; k < nCores; k++) cores[k] = n[o++]!;
    }
    out.push({ name: b.names[i]!, uid: b.uids[i]!, spec: { ...head, tasks } as RtPodSpec, cores });
  }
  return out;
}

export interface AnalysisResult {
  /** One report per node, in order. */
  readonly reports: readonly NodeReport[];
  /** Work spent (task.ts AnalysisBudget units), bringing pods into the thread included. */
  readonly used: number;
}

if (!isMainThread && (workerData as { mark?: string } | null)?.mark === WORKER_MARK) {
  // below the event loop's priority: a heavy analysis takes the CPU only when the loop does not need it
  // (only ever raised: lowering it below the process's needs CAP_SYS_NICE)
  const { nice } = workerData as { nice: number };
  if (nice > (threadNice() ?? nice)) setThreadNice(nice);
  const pods = new Map<number, ParsedRtPod>();
  const lists = new Map<string, readonly ParsedRtPod[]>();
  const listOf = (name: string, ids: Int32Array): ParsedRtPod[] => {
    const l = new Array<ParsedRtPod>(ids.length);
    for (let k = 0; k < ids.length; k++) {
      const p = pods.get(ids[k]!);
      if (!p) throw new Error(`internal: RT analysis thread has no pod ${ids[k]} of node ${name}`);
      l[k] = p;
    }
    return l;
  };
  parentPort!.on('message', (job: Job) => {
    if (job.snapshot) {
      parentPort!.postMessage({ id: job.id, reports: [], used: 0, snapshot: { lists: new Map(lists), pods: pods.size, nice: threadNice() } });
      return;
    }
    if (job.reset) {
      pods.clear();
      lists.clear();
    }
    if (job.batch) {
      const unpacked = unpackPods(job.batch);
      job.batch.ids.forEach((id, i) => pods.set(id, unpacked[i]!));
      // a feed job (no analysis): the servers' task-set facts the analyses will need, computed now in the background
      if (!job.nodes.length) for (const p of unpacked) if (p.spec.kind === 'deferrable-server') taskSetFacts(p.spec.tasks);
    }
    for (const l of job.lists ?? []) lists.set(l.name, listOf(l.name, l.ids));
    for (const name of job.forget ?? []) lists.delete(name);
    const budget = new AnalysisBudget(job.limit, job.requestLimit);
    const reports = job.nodes.map((sent, i): NodeReport => {
      let list: readonly ParsedRtPod[] | undefined;
      if (sent.pods) lists.set(sent.name, (list = listOf(sent.name, sent.pods)));
      else list = lists.get(sent.name);
      if (!list) throw new Error(`internal: RT analysis thread has no pods list of node ${sent.name}`);
      const r = analyzeRtNode({ ...sent, pods: list }, job.pods[i]!, { exactResponseTimes: false, stopAtFirstFailure: true, budget });
      // only what the verdict reads (evaluate.ts): no per-server and per-task reports back across the thread
      return { ...r, coreUtilization: [], servers: [], tasks: [] };
    });
    if (job.drop) for (const id of job.drop) pods.delete(id);
    parentPort!.postMessage({ id: job.id, reports, used: budget.used });
  });
}

/** The sender's record of one pod version the thread has. */
interface SentPod {
  readonly id: number;
  readonly name: string;
  readonly uid: string;
  readonly cores: readonly number[] | undefined;
  /** Node lists (in the thread) that refer to it; 0 while brought over ahead of its node's list (the feed); -1 once gone from the thread. */
  refs: number;
}

const sameCores = (a: readonly number[] | undefined, b: readonly number[] | undefined) => a === b || (!!a && !!b && a.length === b.length && a.every((c, i) => c === b[i]));

/** Transfer statistics (tests, metrics): what the thread was sent. */
export interface TransferStats {
  /** Node lists sent / left out because the thread's list was current. */
  nodesSent: number;
  nodesReused: number;
  /** Nodes refused because bringing their pods over would pass the request's budget (or its share for bringing pods over). */
  nodesOverBudget: number;
  /** Pods and tasks packed and sent (by requests and by the feed); pods a list referred to that the thread already had. */
  podsSent: number;
  podsReused: number;
  tasksSent: number;
  /** Bytes of the packed numbers and of the node lists' ids (transferred, not cloned). */
  bytes: number;
  /** Work units charged to requests for the transfer ({@link transferUnits}; the feed's are not charged). */
  units: number;
  /** Background feed: jobs posted, pods (of podsSent) and node lists (of nodesSent) it brought over. */
  feedJobs: number;
  podsFed: number;
  nodesFed: number;
}

type Reply = AnalysisResult & { readonly snapshot?: ThreadSnapshot };

/**
 * One analysis thread, started on first use; a crashed thread fails its jobs and is started again
 * on the next (with a feed: at once, and again after 0.1, 0.2, ... up to 30 s while it keeps
 * crashing before a feed job is answered).
 *
 * With a {@link FeedSource} ({@link feedFrom}) the thread is fed in the background: every node the
 * source reports changed ({@link changed}) is brought up to date — its new pods packed and sent,
 * then its list of ids — in jobs of at most {@link FEED_CHUNK_UNITS} units of pods, one job out at
 * a time (the next one posted when the thread has answered it), so a request's job queues behind
 * at most one small feed job, and the event loop packs a few ms at a time. Pods are sent once per
 * version whoever brings them (the same records as the requests'); a request that still finds some
 * of a node's pods missing brings over at most {@link FEED_CHUNK_UNITS} units itself and refuses
 * the nodes past that (the feed brings them). Pods brought over ahead of their node's list that no
 * list uses once the feed has caught up (the node changed meanwhile) are dropped then.
 */
export class RtAnalysisWorker {
  /** @param nice the thread's nice value (config analysisThreadNice; 0 keeps the process's) */
  constructor(private readonly nice: number) {}
  private worker: Worker | undefined;
  private seq = 0;
  private nextPodId = 0;
  private readonly waiting = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  /** Jobs answered (for tests and metrics; the warm-up, feed and snapshot jobs not counted). */
  jobs = 0;
  /** What the thread was sent since this object was made (see {@link TransferStats}). */
  readonly transfer: TransferStats = { nodesSent: 0, nodesReused: 0, nodesOverBudget: 0, podsSent: 0, podsReused: 0, tasksSent: 0, bytes: 0, units: 0, feedJobs: 0, podsFed: 0, nodesFed: 0 };

  /** Node lists the thread keeps, by node name: the list object they were made from and its pods. */
  private readonly lists = new Map<string, { readonly from: readonly ParsedRtPod[]; readonly pods: readonly SentPod[] }>();
  /** Pod versions the thread keeps, by their parsed spec (one spec object per pod version, state.ts). */
  private readonly podsBySpec = new WeakMap<RtPodSpec, SentPod>();

  // the background feed
  private source: FeedSource | undefined;
  /** Nodes the feed still has to bring up to date. */
  private readonly dirty = new Set<string>();
  /** Pods the feed brought over whose node list was not sent yet (dropped when unused once it caught up). */
  private readonly pending = new Set<SentPod>();
  private feeding = false;
  private pumpScheduled = false;
  private restartTimer: NodeJS.Timeout | undefined;
  private restartDelayMs = 0;
  private idleWaiters: Array<() => void> = [];

  /**
   * Feeds the thread from `source` in the background (see the class comment), starting with every
   * node it has; undefined stops feeding. The thread is started by the first feed job if needed.
   */
  feedFrom(source: FeedSource | undefined): void {
    this.source = source;
    this.dirty.clear();
    if (source) this.markAll();
    else this.settle();
  }

  /** The node's RT pods or the node may have changed (ClusterState.onNodeChange): the feed brings it up to date. */
  changed(node: string): void {
    if (!this.source) return;
    this.dirty.add(node);
    this.schedulePump();
  }

  /** Is the thread fed in the background? */
  get feedActive(): boolean {
    return !!this.source;
  }

  /** Resolves once the feed has nothing left to bring over and no feed job is out (tests, benches). */
  feedIdle(): Promise<void> {
    if (this.idle()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private idle(): boolean {
    return !this.source || (!this.feeding && !this.pumpScheduled && !this.restartTimer && this.dirty.size === 0 && this.pending.size === 0);
  }

  private settle(): void {
    if (!this.idle()) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  private markAll(): void {
    if (!this.source) return;
    for (const n of this.source.nodes()) this.dirty.add(n);
    // lists kept from before (requests without the feed): forgotten if their node is gone
    for (const n of this.lists.keys()) this.dirty.add(n);
    this.schedulePump();
  }

  private schedulePump(): void {
    if (this.pumpScheduled || this.feeding || this.restartTimer || !this.source) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  /** A pod version the thread does not have yet: its record (no references yet), queued in `newPods`/`newIds` for the job's batch. */
  private register(p: ParsedRtPod, newPods: ParsedRtPod[], newIds: number[]): SentPod {
    const r: SentPod = { id: ++this.nextPodId, name: p.name, uid: p.uid, cores: p.cores, refs: 0 };
    this.podsBySpec.set(p.spec, r);
    newPods.push(p);
    newIds.push(r.id);
    this.transfer.podsSent++;
    this.transfer.tasksSent += p.spec.tasks.length;
    return r;
  }

  /** Posts the next feed job (at most FEED_CHUNK_UNITS of pods, the node lists made complete by it). */
  private pump(): void {
    const src = this.source;
    if (this.feeding || this.restartTimer || !src) return this.settle();
    const newPods: ParsedRtPod[] = [];
    const newIds: number[] = [];
    const lists: Array<{ name: string; ids: Int32Array }> = [];
    const forget: string[] = [];
    const drop: number[] = [];
    let units = 0;
    let full = false;
    for (const name of this.dirty) {
      const pods = src.pods(name);
      const kept = this.lists.get(name);
      if (!pods) {
        // gone, or no longer an RT node: the thread forgets its list
        if (kept) {
          this.release(kept.pods, drop);
          this.lists.delete(name);
          forget.push(name);
        }
        this.dirty.delete(name);
        continue;
      }
      if (kept && kept.from === pods) {
        this.dirty.delete(name);
        continue;
      }
      for (const p of pods) {
        if (this.kept(p)) continue;
        const cost = transferUnits(p.spec);
        if (units > 0 && units + cost > FEED_CHUNK_UNITS) {
          full = true;
          break;
        }
        this.pending.add(this.register(p, newPods, newIds));
        units += cost;
        this.transfer.podsFed++;
      }
      if (full) break;
      // every pod of the node is in the thread or in this job: its list goes with it
      const list = pods.map((p) => {
        const r = this.kept(p)!;
        r.refs++;
        this.pending.delete(r);
        return r;
      });
      if (kept) this.release(kept.pods, drop);
      this.lists.set(name, { from: pods, pods: list });
      lists.push({ name, ids: Int32Array.from(list, (r) => r.id) });
      this.transfer.nodesSent++;
      this.transfer.nodesFed++;
      this.dirty.delete(name);
      if (units >= FEED_CHUNK_UNITS) break;
    }
    if (this.dirty.size === 0) {
      // caught up: pods brought over for a list that changed before it was sent are not needed
      for (const r of this.pending) {
        if (r.refs === 0) {
          r.refs = -1;
          drop.push(r.id);
        }
      }
      this.pending.clear();
    }
    if (!newPods.length && !lists.length && !forget.length && !drop.length) return this.settle();
    const w = this.thread();
    const batch = newPods.length ? packPods(newPods, newIds) : null;
    const transfer: ArrayBuffer[] = lists.map((l) => l.ids.buffer as ArrayBuffer);
    if (batch) transfer.push(batch.numbers.buffer as ArrayBuffer, batch.ids.buffer as ArrayBuffer);
    const dropIds = drop.length ? Int32Array.from(drop) : null;
    if (dropIds) transfer.push(dropIds.buffer as ArrayBuffer);
    this.transfer.bytes += lists.reduce((b, l) => b + l.ids.byteLength, 0) + (batch ? batch.numbers.byteLength + batch.ids.byteLength : 0);
    this.transfer.feedJobs++;
    const id = ++this.seq;
    this.uncounted.add(id);
    this.feeding = true;
    this.waiting.set(id, {
      resolve: () => {
        this.feeding = false;
        this.restartDelayMs = 0;
        this.schedulePump();
        this.settle();
      },
      reject: () => {
        this.feeding = false;
      },
    });
    const job: Job = { id, nodes: [], pods: [], limit: 0, requestLimit: 0, batch, drop: dropIds, ...(lists.length ? { lists } : {}), ...(forget.length ? { forget } : {}) };
    this.post(w, job, transfer);
  }

  /** Releases a replaced list's references; pods no list refers to any more are dropped from the thread. */
  private release(pods: readonly SentPod[], drop: number[]): void {
    for (const old of pods) {
      if (--old.refs === 0) {
        old.refs = -1; // gone from the thread: never referred to again
        drop.push(old.id);
      }
    }
  }

  /**
   * Analyses `nodes[i]` for `pods[i]` (the same pod, named as each node's verdict needs), within
   * `limit` work units in all, bringing the thread's copy of the nodes' pods up to date first
   * (charged to `limit`, see {@link transferUnits}; while the thread is fed in the background, at
   * most {@link FEED_CHUNK_UNITS} of it).
   */
  analyze(nodes: readonly ParsedRtNode[], pods: readonly NewPod[], limit: number, requestLimit = limit): Promise<AnalysisResult> {
    const w = this.thread();
    const id = ++this.seq;
    let reset: true | undefined;
    if (!this.source && this.lists.size + nodes.length > MAX_KEPT_NODES) {
      this.forget();
      reset = true;
    }
    const share = this.source ? Math.min(limit, FEED_CHUNK_UNITS) : limit;
    const newPods: ParsedRtPod[] = [];
    const newIds: number[] = [];
    const drop: number[] = [];
    let units = 0;
    let listBytes = 0;
    const overBudget = new Map<number, NodeReport>();
    const sent: SentNode[] = [];
    const transfer: ArrayBuffer[] = [];
    nodes.forEach((n, i) => {
      const kept = this.lists.get(n.name);
      if (kept && kept.from === n.pods) {
        this.transfer.nodesReused++;
        sent.push({ ...n, pods: null });
        return;
      }
      // what this node's list needs that the thread does not have, and its cost
      let cost = 0;
      let tasks = 0;
      const missing = new Set<ParsedRtPod>();
      n.pods.forEach((p) => {
        if (this.kept(p) || missing.has(p)) return;
        missing.add(p);
        cost += transferUnits(p.spec);
        tasks += p.spec.tasks.length;
      });
      if (units + cost > share) {
        this.transfer.nodesOverBudget++;
        overBudget.set(i, notInThread(n, missing.size, tasks, cost, share - units, requestLimit, this.source ? share : undefined));
        sent.push({ ...n, pods: null });
        return;
      }
      units += cost;
      // the new list's references first, then the old one's released: a pod in both stays
      const list = n.pods.map((p) => {
        let r = this.kept(p);
        if (r) this.transfer.podsReused++;
        else r = this.register(p, newPods, newIds);
        r.refs++;
        return r;
      });
      if (kept) this.release(kept.pods, drop);
      this.lists.set(n.name, { from: n.pods, pods: list });
      const ids = Int32Array.from(list, (r) => r.id);
      listBytes += ids.byteLength;
      transfer.push(ids.buffer as ArrayBuffer);
      this.transfer.nodesSent++;
      sent.push({ ...n, pods: ids });
    });
    const batch = newPods.length ? packPods(newPods, newIds) : null;
    if (batch) transfer.push(batch.numbers.buffer as ArrayBuffer, batch.ids.buffer as ArrayBuffer);
    this.transfer.units += units;
    this.transfer.bytes += listBytes + (batch ? batch.numbers.byteLength + batch.ids.byteLength : 0);
    // the nodes over the budget are answered here, the others by the thread
    const toThread = sent.filter((_, i) => !overBudget.has(i));
    const podsToThread = pods.filter((_, i) => !overBudget.has(i));
    const merge = (r: AnalysisResult): AnalysisResult => {
      let k = 0;
      return { reports: nodes.map((_, i) => overBudget.get(i) ?? r.reports[k++]!), used: r.used + units };
    };
    const job: Job = {
      id,
      nodes: toThread,
      pods: podsToThread,
      limit: Math.max(0, limit - units),
      requestLimit,
      batch,
      drop: drop.length ? Int32Array.from(drop) : null,
      ...(reset ? { reset } : {}),
    };
    if (job.drop) transfer.push(job.drop.buffer as ArrayBuffer);
    return new Promise<AnalysisResult>((resolve, reject) => {
      this.waiting.set(id, { resolve: (r) => resolve(merge(r)), reject });
      this.post(w, job, transfer);
    });
  }

  /**
   * The thread's node lists and the number of pods it keeps, as it has them once every job posted
   * so far is done (tests: the thread's state against the main thread's).
   */
  snapshot(): Promise<ThreadSnapshot> {
    const w = this.thread();
    const id = ++this.seq;
    this.uncounted.add(id);
    return new Promise<ThreadSnapshot>((resolve, reject) => {
      this.waiting.set(id, { resolve: (r) => resolve(r.snapshot!), reject });
      this.post(w, { id, nodes: [], pods: [], limit: 0, requestLimit: 0, batch: null, drop: null, snapshot: true }, []);
    });
  }

  /** The thread's record of this pod version, if it has it. */
  private kept(p: ParsedRtPod): SentPod | undefined {
    const r = this.podsBySpec.get(p.spec);
    return r && r.refs >= 0 && r.name === p.name && r.uid === p.uid && sameCores(r.cores, p.cores) ? r : undefined;
  }

  /** Posts one job (its buffers transferred). */
  private post(w: Worker, job: Job, transfer: ArrayBuffer[]): void {
    w.postMessage(job, transfer);
  }

  /**
   * Starts the thread and runs one trivial analysis in it, so the first heavy request does not
   * wait for the thread's start (loading the analysis code took seconds on a loaded 2-vCPU machine).
   * Not counted in {@link jobs}.
   */
  async warm(): Promise<void> {
    this.uncounted.add(this.seq + 1); // the id analyze gives this job
    await this.analyze([{ name: '\u0000warm-up', kind: 'edf', capacity: { cores: 1 }, pods: [] }], [{ name: 'warm-up', uid: 'warm-up', spec: { kind: 'edf', tasks: [{ wcetUs: 1, periodUs: 10 }] } }], 1000);
  }

  private readonly uncounted = new Set<number>();

  /** Forgets what the thread keeps (a new thread keeps nothing; an overflow resets both sides). */
  private forget(): void {
    for (const l of this.lists.values()) for (const r of l.pods) r.refs = -1;
    for (const r of this.pending) r.refs = -1;
    this.lists.clear();
    this.pending.clear();
  }

  /** After a crash: every node brought over again by a new thread, at once the first time, then backing off. */
  private refeed(): void {
    if (!this.source) return;
    const delay = this.restartDelayMs;
    this.restartDelayMs = Math.min(Math.max(100, delay * 2), 30_000);
    for (const n of this.source.nodes()) this.dirty.add(n);
    if (delay === 0) return this.schedulePump();
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      this.schedulePump();
    }, delay);
    this.restartTimer.unref();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = tsWorker(import.meta.url, { workerData: { mark: WORKER_MARK, nice: this.nice } });
    w.unref();
    w.on('message', (m: Reply & { id: number }) => {
      const p = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (!this.uncounted.delete(m.id)) this.jobs++;
      p?.resolve(m);
    });
    const fail = (err: Error) => {
      const current = this.worker === w;
      if (current) {
        this.worker = undefined;
        this.forget();
      }
      for (const p of this.waiting.values()) p.reject(err);
      this.waiting.clear();
      if (current) this.refeed();
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`RT analysis thread exited (code ${code})`)));
    this.worker = w;
    return w;
  }

  /** Stops the thread and the feed. */
  async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.source = undefined;
    this.dirty.clear();
    if (this.restartTimer) clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    this.forget();
    this.feeding = false;
    this.settle();
    await w?.terminate();
  }
}

/** The refusal of a node whose pods could not be brought into the thread within the request's budget (or its share for bringing pods over, `share`, while the thread is fed in the background). */
function notInThread(n: ParsedRtNode, pods: number, tasks: number, cost: number, left: number, requestLimit: number, share: number | undefined): NodeReport {
  const maxUtilization = n.capacity.maxUtilization ?? (n.kind === 'budget-period' ? DEFAULT_MAX_UTILIZATION : 1);
  return {
    node: n.name,
    kind: n.kind,
    schedulable: false,
    reason:
      `analysis budget exceeded: ${pods} pod(s) with ${tasks} tasks on the node are not in the analysis thread yet, ` +
      `bringing them there costs ${cost} work units and ${Math.max(0, left)} are left (budget ${requestLimit} work units per request; ` +
      (share === undefined ? 'the next requests bring them over)' : `a request brings over at most ${share} work units of pods, the rest are being brought over in the background)`),
    cores: null,
    coreUtilization: [],
    maxUtilization,
    leastLoadedCoreRemaining: 0,
    score: 0,
    servers: [],
    tasks: [],
    budgetExceeded: true,
  };
}
