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
import { analyzeRtNode, type NewPod, type NodeReport, type ParsedRtNode } from '../realtime/what-if.ts';

const WORKER_MARK = 'ulysses-rt-analysis';

interface Job {
  readonly id: number;
  readonly nodes: readonly ParsedRtNode[];
  readonly pods: readonly NewPod[];
  readonly limit: number;
  readonly requestLimit: number;
}

export interface AnalysisResult {
  /** One report per node, in order. */
  readonly reports: readonly NodeReport[];
  /** Work spent (task.ts AnalysisBudget units). */
  readonly used: number;
}

if (!isMainThread && (workerData as { mark?: string } | null)?.mark === WORKER_MARK) {
  parentPort!.on('message', (job: Job) => {
    const budget = new AnalysisBudget(job.limit, job.requestLimit);
    const reports = job.nodes.map((n, i) => analyzeRtNode(n, job.pods[i]!, { exactResponseTimes: false, stopAtFirstFailure: true, budget }));
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

  /** Analyses `nodes[i]` for `pods[i]` (the same pod, named as each node's verdict needs), within `limit` work units in all. */
  analyze(nodes: readonly ParsedRtNode[], pods: readonly NewPod[], limit: number, requestLimit = limit): Promise<AnalysisResult> {
    const w = this.thread();
    const id = ++this.seq;
    return new Promise<AnalysisResult>((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      w.postMessage({ id, nodes, pods, limit, requestLimit } satisfies Job);
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = tsWorker(import.meta.url, { workerData: { mark: WORKER_MARK } });
    w.unref();
    w.on('message', (m: AnalysisResult & { id: number }) => {
      const p = this.waiting.get(m.id);
      this.waiting.delete(m.id);
      this.jobs++;
      p?.resolve({ reports: m.reports, used: m.used });
    });
    const fail = (err: Error) => {
      if (this.worker === w) this.worker = undefined;
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
    await w?.terminate();
  }
}
