/**
 * ResilientInformer: list+watch with a local cache and add/update/delete handlers, hardened for the
 * ways @kubernetes/client-node's informer fails in practice (ulysses-spec.md §6):
 *  - 410 Gone (resourceVersion too old) -> relist; the relist is diffed against the cache so the
 *    handlers see every add/update/delete that happened while the watch was broken;
 *  - any other error or a dropped connection (e.g. an apiserver restart) -> re-watch from the last
 *    resourceVersion with exponential backoff (client-node would stop its informer here);
 *  - silent stalls (client-node #364, #596) -> an inactivity watchdog aborts a watch that has sent
 *    nothing, not even a bookmark, for `inactivityMs` and relists;
 *  - bookmarks requested (allowWatchBookmarks) so an idle watch keeps a fresh resourceVersion;
 *  - `synced` / `waitForSync()` once the first list is in the cache (client-go's HasSynced).
 */
import { EventEmitter } from 'node:events';
import type { KubeConfig, KubernetesObject } from '@kubernetes/client-node';
// the module alone: the package index (and its config.js) loads the whole generated API (~80 MiB RSS)
import { Watch } from '@kubernetes/client-node/dist/watch.js';
import { Counter } from 'prom-client';
import { apiRequest, ApiError, type KubeAccess } from './kube.ts';
import { componentLogger, type Logger } from './logging.ts';
import { metricsRegistry } from './metrics.ts';
import { objectKey } from './objects.ts';

export interface InformerOptions {
  /** Collection path, e.g. "/api/v1/pods" or "/apis/apps/v1/namespaces/ns/replicasets". */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Abort a watch that delivered nothing for this long and relist (default 5 min). */
  inactivityMs?: number;
  /** Server-side watch timeout; renewed like client-go's reflector (default 5-10 min, randomized). */
  watchTimeoutSeconds?: number;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  pageSize?: number;
  /**
   * Applied to every listed/watched object before it is cached and handed to handlers (client-go's
   * informer transform), e.g. {@link stripManagedFields} to save memory.
   */
  transform?: (obj: never) => unknown;
  log?: Logger;
}

/** Transform dropping metadata.managedFields (large, and no controller reads them). */
export function stripManagedFields<T extends KubernetesObject>(obj: T): T {
  if (obj.metadata?.managedFields) delete obj.metadata.managedFields;
  return obj;
}

export type InformerEvent = 'add' | 'update' | 'delete';

/** What consumers use of an informer: {@link ResilientInformer}, or core/informer-thread.ts's ThreadedInformer. */
export interface Informer<T extends KubernetesObject> {
  on(event: InformerEvent, fn: (obj: T, old?: T) => void): this;
  readonly synced: boolean;
  start(): Promise<void>;
  stop(): void;
  list(): T[];
  get(key: string): T | undefined;
}

interface ListResponse<T> {
  metadata?: { resourceVersion?: string; continue?: string };
  items: T[];
}

let restarts: Counter<'resource' | 'reason'> | undefined;
function restartCounter() {
  restarts ??= new Counter({
    name: 'ulysses_informer_restarts_total',
    help: 'Informer list/watch restarts by reason (relist_gone, relist_watchdog, watch_error, watch_closed).',
    labelNames: ['resource', 'reason'],
    registers: [metricsRegistry()],
  });
  return restarts;
}

export { objectKey };

/**
 * What both informers share: the cache of objects by key, the add/update/delete events and the
 * synced state (client-go's HasSynced) with its waiters.
 */
export abstract class InformerCache<T extends KubernetesObject> extends EventEmitter implements Informer<T> {
  protected readonly cache = new Map<string, T>();
  private hasSynced = false;
  private syncWaiters: Array<() => void> = [];

  abstract start(): Promise<void>;
  abstract stop(): void;

  override on(event: InformerEvent, fn: (obj: T, old?: T) => void): this;
  override on(event: 'error', fn: (err: Error) => void): this;
  override on(event: string, fn: (...args: never[]) => void): this {
    return super.on(event, fn as (...args: unknown[]) => void);
  }

  get synced(): boolean {
    return this.hasSynced;
  }

  /** The cached objects (a snapshot). */
  list(): T[] {
    return [...this.cache.values()];
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  waitForSync(): Promise<void> {
    if (this.hasSynced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /** The first list is in the cache: `synced`, and every waiter released. */
  protected markSynced(): void {
    if (this.hasSynced) return;
    this.hasSynced = true;
    for (const w of this.syncWaiters.splice(0)) w();
  }
}

export class ResilientInformer<T extends KubernetesObject> extends InformerCache<T> {
  private resourceVersion = '';
  private stopped = true;
  private watchCtrl: AbortController | undefined;
  private watchdog: NodeJS.Timeout | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private lastActivity = 0;
  private failures = 0;
  private readonly log: Logger;
  private readonly o: Required<Omit<InformerOptions, 'labelSelector' | 'fieldSelector' | 'log' | 'watchTimeoutSeconds' | 'transform'>> &
    Pick<InformerOptions, 'labelSelector' | 'fieldSelector' | 'watchTimeoutSeconds'>;
  private readonly transform: ((obj: T) => T) | undefined;
  /** Increments on every (re)start of the loop so stale callbacks of an old watch are ignored. */
  private generation = 0;

  constructor(
    private readonly kc: KubeAccess,
    opts: InformerOptions,
  ) {
    super();
    this.o = {
      path: opts.path,
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      inactivityMs: opts.inactivityMs ?? 5 * 60_000,
      watchTimeoutSeconds: opts.watchTimeoutSeconds,
      backoffInitialMs: opts.backoffInitialMs ?? 200,
      backoffMaxMs: opts.backoffMaxMs ?? 30_000,
      pageSize: opts.pageSize ?? 500,
    };
    this.log = (opts.log ?? componentLogger('informer')).child({ resource: opts.path });
    this.transform = opts.transform as ((obj: T) => T) | undefined;
  }

  /** Starts the loop; resolves once the first list is cached. */
  async start(): Promise<void> {
    if (!this.stopped) return this.waitForSync();
    this.stopped = false;
    void this.relist('start');
    return this.waitForSync();
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    this.watchCtrl?.abort();
    clearInterval(this.watchdog);
    clearTimeout(this.retryTimer);
  }

  private async listAll(): Promise<ListResponse<T>> {
    const items: T[] = [];
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await apiRequest<ListResponse<T>>(this.kc, 'GET', this.o.path, {
        query: { labelSelector: this.o.labelSelector, fieldSelector: this.o.fieldSelector, limit: this.o.pageSize, continue: cont },
      });
      // transformed page by page: the raw objects of a large list are never all alive at once
      for (const item of page.items) items.push(this.transform ? this.transform(item) : item);
      cont = page.metadata?.continue || undefined;
      rv = page.metadata?.resourceVersion ?? rv;
    } while (cont);
    return { items, metadata: { resourceVersion: rv } };
  }

  /** Lists everything and reconciles the cache with it, emitting the differences as events. */
  private async relist(reason: string): Promise<void> {
    const gen = ++this.generation;
    this.watchCtrl?.abort();
    if (reason !== 'start') restartCounter().inc({ resource: this.o.path, reason: `relist_${reason}` });
    let list: ListResponse<T>;
    try {
      list = await this.listAll();
    } catch (err) {
      if (gen !== this.generation || this.stopped) return;
      this.fail(err as Error, () => void this.relist(reason));
      return;
    }
    if (gen !== this.generation || this.stopped) return;
    const seen = new Set<string>();
    for (const item of list.items) {
      const key = objectKey(item);
      seen.add(key);
      if (!this.behindDeletion(item)) this.store(item);
    }
    for (const [key, old] of this.cache) {
      if (!seen.has(key)) {
        this.cache.delete(key);
        this.deletionsAhead.delete(key);
        this.emit('delete', old);
      }
    }
    this.resourceVersion = list.metadata?.resourceVersion ?? '';
    this.failures = 0;
    this.markSynced();
    this.log.debug({ items: list.items.length, resourceVersion: this.resourceVersion, reason }, 'listed');
    void this.watch(gen);
  }

  private upsert(raw: T): void {
    if (this.behindDeletion(raw)) return;
    this.store(this.transform ? this.transform(raw) : raw);
  }

  /** Objects (key -> uid) whose DELETE response was cached ahead of the watch ({@link observeDeletion}). */
  private readonly deletionsAhead = new Map<string, string | undefined>();

  /**
   * Whether `obj` from the watch or a list is a version from before a deletion already cached by
   * observeDeletion: same uid and not yet marked for deletion. Such a version is skipped, or the
   * cache would go back to "not terminating" until the watch catches up.
   */
  private behindDeletion(obj: T): boolean {
    const key = objectKey(obj);
    if (!this.deletionsAhead.has(key)) return false;
    if (this.deletionsAhead.get(key) === obj.metadata?.uid && !obj.metadata?.deletionTimestamp) return true;
    this.deletionsAhead.delete(key); // the watch caught up (or the name is another object's now)
    return false;
  }

  /**
   * A DELETE's response this process got: the object marked for deletion (`deletionTimestamp`), cached
   * and emitted as an update now instead of when the watch delivers it (a critical pod's eviction:
   * the ReplicaSet controller creates the replacement without waiting for the watch). Why it is safe:
   * `deletionTimestamp` is set once and never removed, so the response is newer than a cached version
   * without it, and any version without it that the watch or a relist still delivers is older and is
   * skipped ({@link behindDeletion}); the watch's own event for the response's resourceVersion
   * changes nothing and emits nothing (store() compares resourceVersions). Returns whether the cache
   * changed: not for an object it does not hold (same uid), one already marked, or a response that is
   * not marked (deleted at once, or a Status).
   */
  observeDeletion(raw: T): boolean {
    const key = objectKey(raw);
    const cached = this.cache.get(key);
    if (!raw.metadata?.deletionTimestamp || !cached || cached.metadata?.uid !== raw.metadata.uid || cached.metadata?.deletionTimestamp) return false;
    this.deletionsAhead.set(key, raw.metadata.uid);
    this.store(this.transform ? this.transform(raw) : raw);
    return true;
  }

  /** Caches an already transformed object and emits add/update. */
  private store(obj: T): void {
    const key = objectKey(obj);
    const old = this.cache.get(key);
    this.cache.set(key, obj);
    if (!old) this.emit('add', obj);
    else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion) this.emit('update', obj, old);
  }

  private async watch(gen: number): Promise<void> {
    if (gen !== this.generation || this.stopped) return;
    this.lastActivity = Date.now();
    clearInterval(this.watchdog);
    this.watchdog = setInterval(() => {
      if (gen !== this.generation || this.stopped) return clearInterval(this.watchdog);
      if (Date.now() - this.lastActivity > this.o.inactivityMs) {
        this.log.warn({ inactiveMs: Date.now() - this.lastActivity }, 'watch silent for too long: relisting');
        void this.relist('watchdog');
      }
    }, Math.max(50, Math.min(this.o.inactivityMs / 4, 10_000)));
    const timeout = this.o.watchTimeoutSeconds ?? Math.floor(300 + Math.random() * 300);
    let gone = false;
    // Watch only calls getCurrentCluster() and applyToFetchOptions() (client-node 1.4 dist/watch.js)
    const w = new Watch(this.kc as KubeConfig);
    try {
      this.watchCtrl = await w.watch(
        this.o.path,
        {
          resourceVersion: this.resourceVersion,
          allowWatchBookmarks: true,
          timeoutSeconds: timeout,
          labelSelector: this.o.labelSelector,
          fieldSelector: this.o.fieldSelector,
        },
        (phase: string, obj: T & { code?: number; kind?: string }) => {
          if (gen !== this.generation) return;
          this.lastActivity = Date.now();
          switch (phase) {
            case 'ADDED':
            case 'MODIFIED':
              this.upsert(obj);
              break;
            case 'DELETED': {
              const key = objectKey(obj);
              this.deletionsAhead.delete(key);
              const old = this.cache.get(key);
              this.cache.delete(key);
              this.emit('delete', old ?? (this.transform ? this.transform(obj) : obj));
              break;
            }
            case 'BOOKMARK':
              break;
            case 'ERROR':
              if (obj.code === 410) gone = true;
              else this.log.warn({ status: obj }, 'watch error event');
              return;
          }
          const rv = obj.metadata?.resourceVersion;
          if (rv) this.resourceVersion = rv;
        },
        (err: unknown) => {
          if (gen !== this.generation || this.stopped) return;
          if (gone || (err as ApiError | undefined)?.statusCode === 410) {
            this.log.info('watch expired (410 Gone): relisting');
            void this.relist('gone');
          } else if (err) {
            restartCounter().inc({ resource: this.o.path, reason: 'watch_error' });
            this.fail(err as Error, () => void this.rewatch());
          } else {
            // normal end (server timeout) or a connection closed by a restarting apiserver
            restartCounter().inc({ resource: this.o.path, reason: 'watch_closed' });
            this.failures = Math.min(this.failures, 1); // retry soon, but do not spin if it keeps closing
            this.retryTimer = setTimeout(() => void this.rewatch(), this.failures * this.o.backoffInitialMs);
            this.failures++;
          }
        },
      );
    } catch (err) {
      if (gen === this.generation && !this.stopped) this.fail(err as Error, () => void this.rewatch());
    }
  }

  private rewatch(): void {
    if (this.stopped) return;
    const gen = ++this.generation;
    void this.watch(gen);
  }

  private fail(err: Error, retry: () => void): void {
    this.failures++;
    const delay = Math.min(this.o.backoffMaxMs, this.o.backoffInitialMs * 2 ** Math.min(this.failures - 1, 20));
    const jittered = delay / 2 + Math.random() * (delay / 2);
    this.log.warn({ err: err.message, attempt: this.failures, retryInMs: Math.round(jittered) }, 'list/watch failed: retrying');
    if (this.listenerCount('error')) this.emit('error', err);
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(retry, jittered);
  }
}
