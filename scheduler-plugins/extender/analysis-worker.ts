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
import { tsWorker } from '../../core/ts-worker.ts';
import { AnalysisBudget } from '../realtime/task.ts';
import { analyzeRtNode, type NewPod, type NodeReport, type ParsedRtNode, type ParsedRtPod } from '../realtime/what-if.ts';

const WORKER_MARK = 'ulysses-rt-analysis';

/**
 * A node as sent to the thread: its pods left out (null) when the thread already has this very
 * pods list of the node (the extender's per-node-version list, state.ts rtSummary: the same array
 * while nothing on the node changed). A node with 64 servers x 256 tasks is 16,000 task objects:
 * cloned into every request (and out again in the reports) it cost more than the analysis itself,
 * on the event loop (structured clone is synchronous) and in the thread.
 */
type SentNode = Omit<ParsedRtNode, 'pods'> & { readonly pods: readonly ParsedRtPod[] | null };

interface Job {
  readonly id: number;
  readonly nodes: readonly SentNode[];
  readonly pods: readonly NewPod[];
  readonly limit: number;
  readonly requestLimit: number;
  /** Forget every node's pods list kept so far (the sender's record of them overflowed). */
  readonly reset?: true;
}

/** Node pods lists kept per side (by node name) before both forget them all. */
const MAX_KEPT_NODES = 4096;

export interface AnalysisResult {
  /** One report per node, in order. */
  readonly reports: readonly NodeReport[];
  /** Work spent (task.ts AnalysisBudget units). */
  readonly used: number;
}

if (!isMainThread && (workerData as { mark?: string } | null)?.mark === WORKER_MARK) {
  const kept = new Map<string, readonly ParsedRtPod[]>();
  parentPort!.on('message', (job: Job) => {
    if (job.reset) kept.clear();
    const budget = new AnalysisBudget(job.limit, job.requestLimit);
    const reports = job.nodes.map((sent, i): NodeReport => {
      let pods = sent.pods;
      if (pods) kept.set(sent.name, pods);
      else pods = kept.get(sent.name) ?? null;
      if (!pods) throw new Error(`internal: RT analysis thread has no pods list of node ${sent.name}`);
      const r = analyzeRtNode({ ...sent, pods }, job.pods[i]!, { exactResponseTimes: false, stopAtFirstFailure: true, budget });
      // only what the verdict reads (evaluate.ts): no per-server and per-task reports back across the thread
      return { ...r, coreUtilization: [], servers: [], tasks: [] };
    });
    parentPort!.postMessage({ id: job.id, reports, used: budget.used });
  });
}

/** One analysis thread, started on first use; a crashed thread fails its jobs and is started again on the next. */
export class RtAnalysisWorker {
  private worker: Worker | undefined;
  private seq = 0;
  private readonly waiting = new Map<number, { resolve: (r: AnalysisResult) => void; reject: (e: Error) => void }>();
  /** Jobs answered (for tests and metrics). */
  jobs = 0;
  /** Nodes handed to the thread with their pods lists, and with the list the thread already had. */
  readonly nodes = { sent: 0, reused: 0 };

  /** Analyses `nodes[i]` for `pods[i]` (the same pod, named as each node's verdict needs), within `limit` work units in all. */
  analyze(nodes: readonly ParsedRtNode[], pods: readonly NewPod[], limit: number, requestLimit = limit): Promise<AnalysisResult> {
    const w = this.thread();
    const id = ++this.seq;
    let reset: true | undefined;
    if (this.sent.size + nodes.length > MAX_KEPT_NODES) {
      this.sent.clear();
      reset = true;
    }
    const sent = nodes.map((n): SentNode => {
      if (this.sent.get(n.name) === n.pods) {
        this.nodes.reused++;
        return { ...n, pods: null };
      }
      this.sent.set(n.name, n.pods);
      this.nodes.sent++;
      return n;
    });
    return new Promise<AnalysisResult>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      w.postMessage({ id, nodes: sent, pods, limit, requestLimit, ...(reset ? { reset } : {}) } satisfies Job);
    });
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

  /** Nodes sent since this thread started with full pods lists, by name: the list it keeps for each. */
  private readonly sent = new Map<string, readonly ParsedRtPod[]>();

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = tsWorker(import.meta.url, { workerData: { mark: WORKER_MARK } });
    w.unref();
    w.on('message', (m: AnalysisResult & { id: number }) => {
      const p = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      if (!this.uncounted.delete(m.id)) this.jobs++;
      p?.resolve({ reports: m.reports, used: m.used });
    });
    const fail = (err: Error) => {
      if (this.worker === w) {
        this.worker = undefined;
        this.sent.clear(); // a new thread keeps nothing
      }
      for (const p of this.waiting.values()) p.reject(err);
      this.waiting.clear();
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(new Error(`RT analysis thread exited (code ${code})`)));
    this.worker = w;
    return w;
  }

  async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.sent.clear();
    await w?.terminate();
  }
}
