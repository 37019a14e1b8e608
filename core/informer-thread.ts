/**
 * ThreadedInformer: a {@link ResilientInformer} run in a worker thread of its own, so the watch
 * traffic (TLS, chunk parsing, JSON.parse of every object version) never runs on the event loop of a
 * latency-critical server. The worker reduces each object to the projection its consumer reads (a
 * function exported by a module: functions do not cross threads) and posts an event only when that
 * projection changes: the kubelet's and KWOK's status updates of pods and nodes, most of a cluster's watch
 * events, stay in the worker. The main thread keeps the projections (list/get) and emits add/update/delete
 * like ResilientInformer, and `synced` once the first list is in.
 *
 * A projection's `metadata.resourceVersion` is that of the last event that changed it. The worker's
 * informer keeps ResilientInformer's behaviour (relist on 410, re-watch with backoff, watchdog,
 * bookmarks). If the worker itself dies, it is restarted; its first list is diffed against the main
 * thread's projections, so the handlers still see every delete. The worker's metrics (rest_client_*,
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

export interface ThreadedInformerOptions extends Omit<InformerOptions, 'transform' | 'log'> {
  /** The kubeconfig as text (client-node's `KubeConfig.exportConfig()`). */
  kubeconfig: string;
  /**
   * What the consumer reads of an object, run in the worker (client-go's informer transform): `module` (a URL, e.g.
   * `new URL('./state.ts', import.meta.url).href`) exports `export` as `(obj) => projection`. Updates that
   * leave the projection unchanged apart from resourceVersion are not posted.
   */
  projection: { module: string; export: string };
  log?: Logger;
  /** Delay before a worker that died is restarted (default 1 s). */
  restartDelayMs?: number;
}

const WORKER_MARK = 'ulysses-informer-thread';
interface WorkerInit extends Omit<ThreadedInformerOptions, 'log' | 'restartDelayMs'> {
  readonly mark: typeof WORKER_MARK;
}
type ToMain =
  | { t: 'event'; type: InformerEvent; obj: KubernetesObject }
  | { t: 'synced' }
  | { t: 'metrics'; id: number; snapshot: MetricsSnapshot };
type ToWorker = { t: 'metrics'; id: number };

/** How long /metrics waits for the worker's series before it serves without them. */
const METRICS_TIMEOUT_MS = 2000;

export class ThreadedInformer<T extends KubernetesObject> extends InformerCache<T> {
  private worker: Worker | undefined;
  private stopped = true;
  /** Keys a restarted worker listed so far (undefined: not resyncing). */
  private resyncSeen: Set<string> | undefined;
  private restartTimer: NodeJS.Timeout | undefined;
  private restarts = 0;
  private readonly log: Logger;
  private readonly metricsWaiters = new Map<number, (s: MetricsSnapshot) => void>();
  private metricsId = 0;
  private removeMetricsSource: (() => void) | undefined;

  constructor(private readonly o: ThreadedInformerOptions) {
    super();
    this.log = (o.log ?? componentLogger('informer')).child({ resource: o.path, thread: 'informer' });
  }

  /** Starts the worker; resolves once its first list is in. */
  async start(): Promise<void> {
    if (this.stopped) {
      this.stopped = false;
      this.removeMetricsSource = addMetricsSource(() => this.workerMetrics());
      this.spawn();
    }
    return this.waitForSync();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.restartTimer);
    this.removeMetricsSource?.();
    const w = this.worker;
    this.worker = undefined;
    if (w) void w.terminate();
  }

  /**
   * Replaces the worker with a new one (as if it had died): its first list is diffed against the
   * projections held here, so nothing that changed meanwhile is lost.
   */
  restartThread(): void {
    void this.worker?.terminate();
  }

  private spawn(): void {
    const { log: _log, restartDelayMs: _delay, ...rest } = this.o;
    const init: WorkerInit = { ...rest, mark: WORKER_MARK };
    const w = tsWorker(import.meta.url, { workerData: init });
    this.worker = w;
    if (this.synced) this.resyncSeen = new Set();
    w.on('message', (m: ToMain) => {
      if (w === this.worker) this.receive(m);
    });
    w.on('error', (err) => {
      if (w === this.worker) this.log.error({ err: err.message }, 'informer thread failed');
    });
    w.on('exit', (code) => {
      if (w !== this.worker || this.stopped) return;
      this.worker = undefined;
      this.restarts++;
      const delay = Math.min(30_000, (this.o.restartDelayMs ?? 1000) * 2 ** Math.min(this.restarts - 1, 5));
      this.log.warn({ code, restartInMs: delay }, 'informer thread exited: restarting it');
      this.restartTimer = setTimeout(() => {
        if (!this.stopped) this.spawn();
      }, delay);
    });
  }

  private receive(m: ToMain): void {
    if (m.t === 'metrics') {
      this.metricsWaiters.get(m.id)?.(m.snapshot);
      return;
    }
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
      this.restarts = 0;
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

/** A projection without its resourceVersion: equal texts, nothing the consumer reads changed. */
function projectionText(o: KubernetesObject): string {
  return JSON.stringify(o, (k, v: unknown) => (k === 'resourceVersion' ? undefined : v));
}

/** The worker's side: the informer, the projection, and only the events that change a projection. */
async function runWorker(init: WorkerInit): Promise<void> {
  const port = parentPort!;
  const log = componentLogger('informer').child({ thread: 'informer' });
  const kc = await kubeAccessFromText(init.kubeconfig, `kubeconfig of the informer thread for ${init.path}`);
  const mod = (await import(init.projection.module)) as Record<string, unknown>;
  const project = mod[init.projection.export];
  if (typeof project !== 'function') throw new Error(`informer thread for ${init.path}: ${init.projection.module} does not export a function ${init.projection.export}`);
  const { mark: _mark, kubeconfig: _kc, projection: _projection, ...options } = init;
  const informer = new ResilientInformer<KubernetesObject>(kc, { ...options, transform: project as (obj: never) => unknown, log });
  const post = (m: ToMain) => port.postMessage(m);
  informer.on('add', (obj) => post({ t: 'event', type: 'add', obj }));
  informer.on('update', (obj, old) => {
    if (!old || projectionText(obj) !== projectionText(old)) post({ t: 'event', type: 'update', obj });
  });
  informer.on('delete', (obj) => post({ t: 'event', type: 'delete', obj }));
  port.on('message', (m: ToWorker) => {
    if (m.t === 'metrics') void metricsRegistry().getMetricsAsJSON().then((snapshot) => post({ t: 'metrics', id: m.id, snapshot: snapshot as MetricsSnapshot }));
  });
  await informer.start();
  post({ t: 'synced' });
}

if (!isMainThread && (workerData as WorkerInit | undefined)?.mark === WORKER_MARK) {
  runWorker(workerData as WorkerInit).catch((err: Error) => {
    componentLogger('informer').error({ err: err.message, resource: (workerData as WorkerInit).path }, 'informer thread could not start');
    process.exit(1);
  });
}
