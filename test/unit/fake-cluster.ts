/**
 * Fakes for controller unit tests: an informer-shaped store (get/list/on + emit), a client that
 * applies POST/PUT/DELETE/PATCH to those stores and records every request, and the ControllerDeps
 * built from them.
 */
import { EventEmitter } from 'node:events';
import type { KubernetesObject } from '@kubernetes/client-node';
import { pino } from 'pino';
import { CriticalityIndex } from '../../core/criticality.ts';
import { ApiError } from '../../core/kube.ts';
import type { ControllerDeps, Enqueue, SharedInformers } from '../../controller-manager/controllers/deps.ts';

export class FakeInformer<T extends KubernetesObject> extends EventEmitter {
  readonly items = new Map<string, T>();
  constructor(objs: T[] = []) {
    super();
    for (const o of objs) this.items.set(key(o), o);
  }
  get(k: string): T | undefined {
    return this.items.get(k);
  }
  list(): T[] {
    return [...this.items.values()];
  }
  upsert(o: T): void {
    const old = this.items.get(key(o));
    this.items.set(key(o), o);
    this.emit(old ? 'update' : 'add', o, old);
  }
  remove(o: T): void {
    this.items.delete(key(o));
    this.emit('delete', o);
  }
}

const key = (o: KubernetesObject) => `${o.metadata?.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata?.name}`;

export interface Call {
  method: string;
  path: string;
  body?: unknown;
}

/** Routes requests by path prefix to stores; `fail` may throw for a call. */
export function fakeClient(routes: Record<string, FakeInformer<KubernetesObject>>, fail?: (c: Call) => unknown) {
  const calls: Call[] = [];
  let n = 0;
  const storeFor = (path: string) => {
    for (const [prefix, store] of Object.entries(routes)) if (path.includes(prefix)) return store;
    throw new Error(`no fake store for ${path}`);
  };
  const request = async <T>(method: string, path: string, opts: { body?: unknown } = {}): Promise<T> => {
    const c = { method, path, body: opts.body };
    calls.push(c);
    const err = fail?.(c);
    if (err) throw err;
    const store = storeFor(path);
    const ns = /namespaces\/([^/]+)/.exec(path)?.[1];
    const parts = path.split('/');
    const sub = parts.at(-1) === 'status' ? 'status' : undefined;
    const last = sub ? parts.at(-2)! : parts.at(-1)!;
    if (method === 'POST') {
      const o = structuredClone(opts.body) as KubernetesObject;
      o.metadata = { ...o.metadata, namespace: ns, name: o.metadata?.name ?? `${o.metadata?.generateName ?? ''}${++n}`, uid: `uid-${++n}`, generation: 1, resourceVersion: String(++n) };
      store.upsert(o);
      return o as T;
    }
    const cur = store.get(`${ns}/${last}`);
    if (!cur) throw new ApiError(`${method} ${path}: 404`, 404, 'NotFound');
    if (method === 'DELETE') {
      store.remove(cur);
      return {} as T;
    }
    if (method === 'PUT') {
      const body = structuredClone(opts.body) as KubernetesObject & { status?: unknown };
      // the status subresource changes only the status, the main resource everything else
      const o = sub ? { ...structuredClone(cur), status: body.status } : { ...body, status: (cur as { status?: unknown }).status };
      o.metadata = { ...(sub ? cur.metadata : body.metadata), generation: (cur.metadata?.generation ?? 1) + (sub ? 0 : 1), resourceVersion: String(++n) };
      store.upsert(o);
      return o as T;
    }
    return cur as T;
  };
  const client = {
    request,
    get: <T>(p: string) => request<T>('GET', p),
    post: <T>(p: string, body: unknown) => request<T>('POST', p, { body }),
    put: <T>(p: string, body: unknown) => request<T>('PUT', p, { body }),
    delete: <T>(p: string, body?: unknown) => request<T>('DELETE', p, { body }),
    jsonPatch: <T>(p: string, body: unknown) => request<T>('PATCH', p, { body }),
    mergePatch: <T>(p: string, body: unknown) => request<T>('PATCH', p, { body }),
  };
  return { client, calls, writes: () => calls.filter((c) => c.method !== 'GET') };
}

/** What a controller unit test gives: fakes shaped like the real parts (informer-like stores, a client-like object). */
export interface FakeDeps extends Omit<ControllerDeps, 'client' | 'informers' | 'criticality' | 'enqueue' | 'log'> {
  client?: object;
  informers?: Partial<Record<keyof SharedInformers, object>>;
  criticality?: CriticalityIndex;
  enqueue?: Enqueue;
  log?: ControllerDeps['log'];
}

/**
 * ControllerDeps for a controller unit test. An informer the test does not give is absent: using it
 * throws, naming it (the controller read an informer the test did not expect it to).
 */
export function controllerDeps(f: FakeDeps = {}): ControllerDeps {
  const absent = (what: string) =>
    new Proxy(
      {},
      {
        get: (_t, prop) => {
          throw new Error(`${what} is not given to this test (read .${String(prop)})`);
        },
      },
    );
  const names: (keyof SharedInformers)[] = ['pods', 'nodes', 'replicaSets', 'deployments', 'services', 'endpointSlices', 'endpoints'];
  const informers = Object.fromEntries(names.map((n) => [n, f.informers?.[n] ?? absent(`informer ${n}`)]));
  return {
    ...f,
    // the fakes have the methods the controllers call, not the real classes' private state
    client: (f.client ?? absent('client')) as ControllerDeps['client'],
    informers: informers as unknown as SharedInformers,
    criticality: f.criticality ?? new CriticalityIndex(),
    enqueue: f.enqueue ?? (() => {}),
    log: f.log ?? pino({ level: 'silent' }),
  };
}
