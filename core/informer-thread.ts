/**
 * InformerThread and ThreadedInformer: {@link ResilientInformer}s run in one worker thread, so the
 * watch traffic (TLS, chunk parsing, JSON.parse of every object version) never runs on the event
 * loop of a latency-critical server. The worker reduces each object to the projection its consumer
 * reads (a function exported by a module: functions do not cross threads) and posts an event only
 * when that projection changes: the kubelet's and KWOK's status updates of pods and nodes, most of a
 * cluster's watch events, stay in the worker. On the main thread each ThreadedInformer keeps its
 * projections (list/get) and emits add/update/delete like ResilientInformer, and `synced` once its
 * first list is in.
 *
 * One worker serves every informer of an InformerThread: a worker thread costs about 50 MiB of RSS
 * (its own V8 isolate, tsx loader and module graph), so the informers of a process share one. A projection's `metadata.resourceVersion` is that of the last
 * event that changed it. The worker's informers keep ResilientInformer's behaviour (relist on 410,
 * re-watch with backoff, watchdog, bookmarks). If the worker itself dies, it is restarted; each
 * informer's first list is then diffed against the main thread's projections, so the handlers still
 * see every delete (and no update for what did not change). The worker's metrics (rest_client_*,
 * ulysses_informer_restarts_total) are served with the process's (core/metrics.ts addMetricsSource).
 */
import { isMainThread, parentPort, workerData, type Worker } from 'node:worker_threads';
import type { KubernetesObject } from '@kubernetes/client-node';
import { InformerCache, ResilientInformer, type InformerEvent, type InformerOptions } from './informer.ts';
import { kubeAccessFromText } from './kubeconfig.ts';
import { componentLogger, type Logger } from './logging.ts';
import { addMetricsSource, metricsRegistry, type MetricsSnapshot } from './metrics.ts';
import { objectKey } from './objects.ts';
import { tsWorker } from './ts-worker.ts';

export interface InformerThreadOptions {
  /** The kubeconfig as text (client-node's `KubeConfig.exportConfig()`). */
  kubeconfig: string;
  log?: Logger;
  /** Delay before a worker that died is restarted (default 1 s, doubling up to 30 s). */
  restartDelayMs?: number;
}

export interface ThreadedInformerOptions extends Omit<InformerOptions, 'transform' | 'log'> {
  /**
   * What the consumer reads of an object, run in the worker (client-go's informer transform):
   * `module` (a URL, e.g. `new URL('./state.ts', import.meta.url).href`) exports `export` as
   * `(obj) => projection`. Updates that leave the projection unchanged apart from resourceVersion
   * are not posted.
   */
  projection: { module: string; export: string };
}

const WORKER_MARK = 'ulysses-informer-thread';
interface WorkerInit {
  readonly mark: typeof WORKER_MARK;
  readonly kubeconfig: string;
}
type ToMain =
  | { t: 'event'; id: number; type: InformerEvent; obj: KubernetesObject }
  | { t: 'synced'; id: number }
  | { t: 'metrics'; id: number; snapshot: MetricsSnapshot };
type ToWorker = { t: 'start'; id: number; options: ThreadedInformerOptions } | { t: 'stop'; id: number } | { t: 'metrics'; id: number };

/** What the thread needs of one of its informers. */
type ThreadMember = Pick<ThreadedInformer<KubernetesObject>, 'id' | 'options' | 'beginResync' | 'receive'>;

/** How long /metrics waits for the worker's series before it serves without them. */
const METRICS_TIMEOUT_MS = 2000;

/** The worker thread of a set of {@link ThreadedInformer}s (one per process is enough). */
export class InformerThread {
  private worker: Worker | undefined;
  private readonly running = new Map<number, ThreadMember>();
  private nextId = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private restarts = 0;
  private readonly log: Logger;
  private readonly metricsWaiters = new Map<number, (s: MetricsSnapshot) => void>();
  private metricsId = 0;
  private removeMetricsSource: (() => void) | undefined;

  constructor(private readonly o: InformerThreadOptions) {
    this.log = (o.log ?? componentLogger('informer')).child({ thread: 'informer' });
  }

  /** A new informer served by this thread (started by its `start()`). */
  informer<T extends KubernetesObject>(options: ThreadedInformerOptions): ThreadedInformer<T> {
    return new ThreadedInformer<T>(this, ++this.nextId, options);
  }

  /**
   * Replaces the worker with a new one (as if it had died): every informer's first list is diffed
   * against the projections held here, so nothing that changed meanwhile is lost.
   */
  restart(): void {
    void this.worker?.terminate();
  }

  /** @internal ThreadedInformer.start */
  add(inf: ThreadMember): void {
    this.running.set(inf.id, inf);
    if (!this.worker && !this.restartTimer) {
      this.removeMetricsSource ??= addMetricsSource(() => this.workerMetrics());
      this.spawn();
    } else this.worker?.postMessage({ t: 'start', id: inf.id, options: inf.options } satisfies ToWorker);
  }

  /** @internal ThreadedInformer.stop; the worker ends with the last informer. */
  remove(inf: ThreadMember): void {
    if (!this.running.delete(inf.id)) return;
    if (this.running.size) {
      this.worker?.postMessage({ t: 'stop', id: inf.id } satisfies ToWorker);
      return;
    }
    clearTimeout(this.restartTimer);
    this.restartTimer = undefined;
    this.removeMetricsSource?.();
    this.removeMetricsSource = undefined;
    const w = this.worker;
    this.worker = undefined;
    if (w) void w.terminate();
  }

  private spawn(): void {
    this.restartTimer = undefined;
    const w = tsWorker(import.meta.url, { workerData: { mark: WORKER_MARK, kubeconfig: this.o.kubeconfig } satisfies WorkerInit });
    this.worker = w;
    for (const inf of this.running.values()) {
      inf.beginResync();
      w.postMessage({ t: 'start', id: inf.id, options: inf.options } satisfies ToWorker);
    }
    w.on('message', (m: ToMain) => {
      if (w !== this.worker) return;
      if (m.t === 'metrics') this.metricsWaiters.get(m.id)?.(m.snapshot);
      else {
        if (m.t === 'synced') this.restarts = 0;
        this.running.get(m.id)?.receive(m);
      }
    });
    w.on('error', (err) => {
      if (w === this.worker) this.log.error({ err: err.message }, 'informer thread failed');
    });
    w.on('exit', (code) => {
      if (w !== this.worker) return;
      this.worker = undefined;
      if (!this.running.size) return;
      this.restarts++;
      const delay = Math.min(30_000, (this.o.restartDelayMs ?? 1000) * 2 ** Math.min(this.restarts - 1, 5));
      this.log.warn({ code, restartInMs: delay }, 'informer thread exited: restarting it');
      this.restartTimer = setTimeout(() => this.spawn(), delay);
    });
  }

  private workerMetrics(): Promise<MetricsSnapshot> {
    const w = this.worker;
    if (!w) return Promise.resolve([]);
    const id = ++this.metricsId;
    return new Promise((resolve) => {
      const done = (s: MetricsSnapshot) => {
        clearTimeout(timer);
        this.metricsWaiters.delete(id);
        resolve(s);
      };
      const timer = setTimeout(() => done([]), METRICS_TIMEOUT_MS);
      this.metricsWaiters.set(id, done);
      w.postMessage({ t: 'metrics', id } satisfies ToWorker);
    });
  }
}

/** One informer of an {@link InformerThread}: the main thread's side (see the module comment). */
export class ThreadedInformer<T extends KubernetesObject> extends InformerCache<T> {
  private started = false;
  /** Keys a restarted worker listed so far (undefined: not resyncing). */
  private resyncSeen: Set<string> | undefined;

  /** @internal InformerThread.informer */
  constructor(
    private readonly thread: InformerThread,
    readonly id: number,
    readonly options: ThreadedInformerOptions,
  ) {
    super();
  }

  /** Starts it in the thread's worker; resolves once its first list is in. */
  async start(): Promise<void> {
    if (!this.started) {
      this.started = true;
      this.thread.add(this);
    }
    return this.waitForSync();
  }

  stop(): void {
    this.started = false;
    this.thread.remove(this);
  }

  /** @internal a new worker is about to list again */
  beginResync(): void {
    if (this.synced) this.resyncSeen = new Set();
  }

  /** @internal a message of the worker for this informer */
  receive(m: Extract<ToMain, { t: 'event' | 'synced' }>): void {
    if (m.t === 'synced') {
      if (this.resyncSeen) {
        // the restarted worker's first list is complete: what it did not list is gone
        for (const [key, old] of this.cache) {
          if (this.resyncSeen.has(key)) continue;
          this.cache.delete(key);
          this.emit('delete', old);
        }
        this.resyncSeen = undefined;
      }
      this.markSynced();
      return;
    }
    const obj = m.obj as T;
    const key = objectKey(obj);
    const old = this.cache.get(key);
    if (m.type === 'delete') {
      this.cache.delete(key);
      this.emit('delete', old ?? obj);
      return;
    }
    this.cache.set(key, obj);
    if (this.resyncSeen) {
      this.resyncSeen.add(key);
      // a restarted worker lists everything again: what did not change is no update
      if (old && projectionText(old) === projectionText(obj)) return;
    }
    if (old) this.emit('update', obj, old);
    else this.emit('add', obj);
  }
}

/** A projection without its resourceVersion: equal texts, nothing the consumer reads changed. */
function projectionText(o: KubernetesObject): string {
  return JSON.stringify(o, (k, v: unknown) => (k === 'resourceVersion' ? undefined : v));
}

/** The worker's side: the informers, their projections, and only the events that change a projection. */
async function runWorker(init: WorkerInit): Promise<void> {
  const port = parentPort!;
  const log = componentLogger('informer').child({ thread: 'informer' });
  const post = (m: ToMain) => port.postMessage(m);
  const kc = await kubeAccessFromText(init.kubeconfig, 'kubeconfig of the informer thread');
  const informers = new Map<number, ResilientInformer<KubernetesObject>>();
  const start = async (id: number, o: ThreadedInformerOptions) => {
    const mod = (await import(o.projection.module)) as Record<string, unknown>;
    const project = mod[o.projection.export];
    if (typeof project !== 'function') throw new Error(`informer thread for ${o.path}: ${o.projection.module} does not export a function ${o.projection.export}`);
    const { projection: _projection, ...options } = o;
    const informer = new ResilientInformer<KubernetesObject>(kc, { ...options, transform: project as (obj: never) => unknown, log });
    informers.set(id, informer);
    informer.on('add', (obj) => post({ t: 'event', id, type: 'add', obj }));
    informer.on('update', (obj, old) => {
      if (!old || projectionText(obj) !== projectionText(old)) post({ t: 'event', id, type: 'update', obj });
    });
    informer.on('delete', (obj) => post({ t: 'event', id, type: 'delete', obj }));
    await informer.start();
    if (informers.get(id) === informer) post({ t: 'synced', id });
  };
  port.on('message', (m: ToWorker) => {
    if (m.t === 'metrics') void metricsRegistry().getMetricsAsJSON().then((snapshot) => post({ t: 'metrics', id: m.id, snapshot: snapshot as MetricsSnapshot }));
    else if (m.t === 'stop') {
      informers.get(m.id)?.stop();
      informers.delete(m.id);
    } else
      start(m.id, m.options).catch((err: Error) => {
        // a projection that cannot be loaded is a programming error: end the thread, the main side logs and retries
        log.error({ err: err.message, resource: m.options.path }, 'informer thread could not start an informer');
        process.exit(1);
      });
  });
}

if (!isMainThread && (workerData as WorkerInit | undefined)?.mark === WORKER_MARK) {
  runWorker(workerData as WorkerInit).catch((err: Error) => {
    componentLogger('informer').error({ err: err.message }, 'informer thread could not start');
    process.exit(1);
  });
}
