/**
 * The scheduler's side of `npm run bench:extender`: one scheduling round as kube-scheduler makes it
 * with a nodeCacheCapable extender — POST /filter with the node names, then POST /prioritize with
 * the nodes that passed — over a kept-alive HTTP connection, timed by the caller.
 *
 * extender.ts calls {@link round} on the extender's event loop, or, with profile `client: worker`, in a
 * worker thread ({@link RoundClient}): kube-scheduler is another process, whose JSON and HTTP work
 * and garbage are not the extender's. `client: go` ({@link GoRoundClient}) is that process, made
 * of kube-scheduler's own extender client. With `pinCpus` the worker thread stays on CPU 1 with the
 * extender's main thread (CPU 0 is the testbed's: there the client's timing measured the testbed's
 * load, p99 8-20 ms at 100 nodes). Measurements: extender.ts's header.
 */
import http from 'node:http';
import { readFileSync } from 'node:fs';
import { threadId } from '../../core/thread.ts';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort } from 'node:worker_threads';
import { tsWorker } from '../../core/ts-worker.ts';
import { buildGoTool } from '../testbed/binaries.ts';
import { JsonLinesProcess } from '../testbed/processes.ts';
import type { ExtenderFilterResult, HostPriority } from '../../scheduler-plugins/extender/wire.ts';

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/** One POST over a kept-alive connection (as the scheduler's Go http.Client does). */
export function post<T>(url: string, body: unknown): Promise<T> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode !== 200) reject(new Error(`${url}: HTTP ${res.statusCode}: ${text}`));
        else resolve(JSON.parse(text) as T);
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** Involuntary context switches of the calling thread so far (Linux; 0 elsewhere): how often the kernel took its CPU away. */
export function preemptions(): number {
  try {
    return Number(/nonvoluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync('/proc/thread-self/status', 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** One timed round; start/end on the Unix-epoch millisecond scale (performance.timeOrigin + now()), comparable across threads. */
export interface Round {
  startMs: number;
  endMs: number;
  feasible: number;
  /** in a worker thread: that thread's involuntary context switches during the round (on the extender's loop the caller counts them) */
  clientPreempted?: number;
}

/** filter + prioritize, timed where it is made. */
export async function round(url: string, pod: unknown, names: string[]): Promise<Round> {
  const t0 = performance.now();
  const f = await post<ExtenderFilterResult>(`${url}/filter`, { Pod: pod, NodeNames: names });
  await post<HostPriority[]>(`${url}/prioritize`, { Pod: pod, NodeNames: f.NodeNames ?? [] });
  const t1 = performance.now();
  return { startMs: performance.timeOrigin + t0, endMs: performance.timeOrigin + t1, feasible: f.NodeNames?.length ?? 0 };
}

/** {@link round} with the calling (worker) thread's preemptions counted. */
async function countedRound(url: string, pod: unknown, names: string[]): Promise<Round> {
  const c0 = preemptions();
  const r = await round(url, pod, names);
  return { ...r, clientPreempted: preemptions() - c0 };
}

type Request = { kind: 'thread-id' } | { kind: 'names'; names: string[] } | { kind: 'round'; url: string; pod: unknown };
type Reply = { ok: true; value?: unknown } | { ok: false; error: string };

/** The client in a worker thread of its own; the node names are sent once, a pod per round. */
export class RoundClient implements RoundRunner {
  // this module in the worker (core/ts-worker.ts)
  private readonly worker = tsWorker(import.meta.url);
  private names: string[] | undefined;

  /** The worker thread's Linux thread id (/proc/thread-self), undefined elsewhere. */
  async threadId(): Promise<string | undefined> {
    return (await this.call({ kind: 'thread-id' })) as string | undefined;
  }

  async round(url: string, pod: unknown, names: string[]): Promise<Round> {
    if (this.names !== names) {
      await this.call({ kind: 'names', names });
      this.names = names;
    }
    return (await this.call({ kind: 'round', url, pod })) as Round;
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }

  private call(req: Request): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.worker.once('error', onError);
      this.worker.once('message', (r: Reply) => {
        this.worker.off('error', onError);
        if (r.ok) resolve(r.value);
        else reject(new Error(r.error));
      });
      this.worker.postMessage(req);
    });
  }
}

/** What runs the scheduler's side of each round: {@link round} on this loop, a {@link RoundClient} worker or a {@link GoRoundClient}. */
export interface RoundRunner {
  round(url: string, pod: unknown, names: string[]): Promise<Round>;
  close(): Promise<void>;
}

const GO_SOURCE = join(dirname(fileURLToPath(import.meta.url)), 'extender-client-go', 'main.go');

/** The Go client (extender-client-go/main.go: kube-scheduler's own HTTPExtender), built on first use (binaries.ts buildGoTool). */
export function buildGoClient(log: (line: string) => void): string {
  return buildGoTool('extender-bench-client', GO_SOURCE, log);
}

/**
 * The scheduler's side in a process of its own made of kube-scheduler's code (`client: go`):
 * the Go client of {@link buildGoClient}, started on `cpus` (taskset) when given; one JSON line per
 * request and per reply (its protocol: extender-client-go/main.go).
 */
export class GoRoundClient implements RoundRunner {
  private readonly proc: JsonLinesProcess;
  private names: string[] | undefined;

  /** `gcBetweenRounds`: the client's garbage collected after each round, outside the timed part (main.go -gc-between-rounds). */
  constructor(bin: string, cpus?: string, gcBetweenRounds = false) {
    this.proc = new JsonLinesProcess(bin, gcBetweenRounds ? ['-gc-between-rounds'] : [], { cpus });
  }

  async round(url: string, pod: unknown, names: string[]): Promise<Round> {
    if (this.names !== names) {
      await this.proc.call({ names });
      this.names = names;
    }
    return this.proc.call<Round>({ url, pod });
  }

  /** The Go client's pid (to change its scheduling policy, profile `clientSchedFifo`). */
  get pid(): number | undefined {
    return this.proc.pid;
  }

  close(): Promise<void> {
    return this.proc.close();
  }
}

// the worker thread's side
if (!isMainThread && parentPort) {
  const port = parentPort;
  let names: string[] = [];
  const reply = (p: Promise<unknown>) =>
    p.then(
      (value) => port.postMessage({ ok: true, value } satisfies Reply),
      (err: Error) => port.postMessage({ ok: false, error: err.message } satisfies Reply),
    );
  port.on('message', (req: Request) => {
    if (req.kind === 'thread-id') void reply(Promise.resolve(threadId()?.toString()));
    else if (req.kind === 'names') {
      names = req.names;
      void reply(Promise.resolve());
    } else void reply(countedRound(req.url, req.pod, names));
  });
}
