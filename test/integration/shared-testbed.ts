/**
 * One local testbed shared by the integration files that can use the same one (docs/development.md
 * "Shared testbeds"): a file takes it over when it has the same shape (what a reset cannot change:
 * real nodes, their kubelet-shim, apiservers, audit, CPU pinning, KWOK delays), and the cluster is
 * first reset to what a fresh `testbed up` gives, so every file starts as on its own testbed:
 *
 * - every namespace the cluster did not have when it came up deleted (its pods deleted at once,
 *   finalizers removed) and waited for; every cluster-scoped object, every object in `default` and
 *   every Lease in kube-system that it did not have deleted (the snapshot of UIDs taken at `up`);
 * - the nodes: KWOK nodes `kwok-1..N` as the file asks (created or deleted), any other extra node
 *   deleted, each node's labels, annotations, taints and unschedulable as at `up` (KWOK ones as
 *   experiments/testbed/kwok.ts creates them);
 * - kube-controller-manager and kube-scheduler restarted with the file's `--controllers` and
 *   `--config` (fresh caches, metrics and timers), then every node Ready and schedulable again.
 *
 * Anything a reset finds it cannot undo (a process of the testbed dead, a namespace that does not go
 * away, a node that does not come back) makes it bring up a fresh testbed instead: sharing changes
 * how long a file waits, never what it starts with. A file that does not share takes the shared
 * testbed down first (shared-testbed-setup.ts: the ports are fixed), and so does the end of the run
 * (shared-testbed-teardown.ts); test/sequencer.ts runs the files of a family next to each other.
 */
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CoreV1Api, type V1Node, type V1Taint } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { createKwokNodes, kwokNode } from '../../experiments/testbed/kwok.ts';
import { isAlive, pollUntil, recordClusterStart } from '../../experiments/testbed/processes.ts';
import { ApiError, KubeClient } from '../../core/kube.ts';
import { progressLog } from '../../core/logging.ts';

export const SHARED_RUN_DIR = '/tmp/ulysses-it-shared';
const metaFile = () => join(SHARED_RUN_DIR, 'shared.json');

export type SharedTestbedOptions = Omit<testbed.TestbedOptions, 'runDir' | 'log' | 'nodesReadyTimeoutMs'>;

/** What a node looked like at `up`: what a reset puts back. */
interface NodeMeta {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  taints: V1Taint[];
  unschedulable: boolean;
}

/** What the shared testbed's run dir records beside state.json. */
interface SharedMeta {
  shape: string;
  /** namespaces at `up` */
  namespaces: string[];
  /** UIDs of the objects at `up` a reset may delete others of (see {@link resettableCollections}) */
  uids: string[];
  /** real nodes at `up` */
  realNodes: Record<string, NodeMeta>;
}

/** A file's sharing, declared when its module is loaded (useSharedTestbed): the setup file reads it. */
let declared: string | undefined;
export const declareSharing = (family: string): void => void (declared = family);
export const sharingDeclared = (): string | undefined => declared;

/** What has to be equal for a file to take the testbed over: what a reset does not change. */
export function shapeOf(o: SharedTestbedOptions): string {
  return JSON.stringify({
    realNodes: o.realNodes ?? 2,
    kubeletShimConfig: o.kubeletShimConfig ? resolve(o.kubeletShimConfig) : null,
    apiservers: o.apiservers ?? 1,
    auditNamespaces: [...(o.auditNamespaces ?? [])].sort(),
    pinCpus: o.pinCpus ?? false,
    kwokCpus: o.kwokCpus ?? 'control-plane',
    kwokDelays: o.kwokDelays ?? null,
  });
}

/** Annotations other components keep on nodes: a reset leaves them as they are. */
const SYSTEM_NODE_ANNOTATIONS = [/^node\.alpha\.kubernetes\.io\//, /^volumes\.kubernetes\.io\//, /^kwok\.x-k8s\.io\//, /^csi\.volume\.kubernetes\.io\//];

const nodeMeta = (n: V1Node): NodeMeta => ({
  labels: { ...(n.metadata?.labels ?? {}) },
  annotations: Object.fromEntries(Object.entries(n.metadata?.annotations ?? {}).filter(([k]) => !SYSTEM_NODE_ANNOTATIONS.some((re) => re.test(k)))),
  taints: (n.spec?.taints ?? []).map(({ key, value, effect }) => ({ key, value, effect })),
  unschedulable: n.spec?.unschedulable ?? false,
});

/**
 * The JSON merge patch that gives node `n` the metadata `want` (null when it has it): keys of
 * others (SYSTEM_NODE_ANNOTATIONS) kept, every other label or annotation not in `want` removed.
 */
export function nodeResetPatch(n: V1Node, want: NodeMeta): object | null {
  const have = nodeMeta(n);
  const diff = (h: Record<string, string>, w: Record<string, string>) => {
    const out: Record<string, string | null> = {};
    for (const k of Object.keys(h)) if (!(k in w)) out[k] = null;
    for (const [k, v] of Object.entries(w)) if (h[k] !== v) out[k] = v;
    return out;
  };
  const labels = diff(have.labels, want.labels);
  const annotations = diff(have.annotations, want.annotations);
  const sameTaints = JSON.stringify(have.taints) === JSON.stringify(want.taints);
  const patch: { metadata?: object; spec?: object } = {};
  if (Object.keys(labels).length || Object.keys(annotations).length) patch.metadata = { labels, annotations };
  if (!sameTaints || have.unschedulable !== want.unschedulable) patch.spec = { taints: want.taints.length ? want.taints : null, unschedulable: want.unschedulable || null };
  return patch.metadata || patch.spec ? patch : null;
}

interface Collection {
  path: string;
  resource: string;
  deleteCollection?: boolean;
  /** apps and batch: their controllers create pods */
  createsPods?: boolean;
}
interface ApiResource {
  name: string;
  namespaced: boolean;
  verbs: string[];
}

/** Objects kube-controller-manager keeps in `default` whenever they are missing: never deleted. */
const KEPT = new Set(['configmaps/kube-root-ca.crt', 'serviceaccounts/default']);

/** Kept out of a reset: the apiserver's and controllers' own (recreated from the objects they follow). */
const NEVER_DELETED = new Set(['events', 'nodes', 'namespaces', 'apiservices', 'ipaddresses', 'servicecidrs', 'componentstatuses', 'csinodes', 'endpoints', 'endpointslices', 'leases']);

/**
 * The collections a reset cleans: every cluster-scoped resource and every namespaced one in
 * `default` that can be listed and deleted (but NEVER_DELETED), and the Leases of kube-system (the
 * ones of leader-electing components that tests start).
 */
async function resettableCollections(client: KubeClient): Promise<Collection[]> {
  const bases = await apiBases(client);
  const out: Collection[] = [{ path: '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases', resource: 'leases' }];
  for (const base of bases) {
    const list = await client.get<{ resources: ApiResource[] }>(base);
    for (const r of list.resources) {
      if (r.name.includes('/') || NEVER_DELETED.has(r.name) || !r.verbs.includes('list') || !r.verbs.includes('delete')) continue;
      out.push({ path: r.namespaced ? `${base}/namespaces/default/${r.name}` : `${base}/${r.name}`, resource: r.name });
    }
  }
  return out;
}

/** Every namespaced collection that can be listed and deleted, as a path with NAMESPACE in it. */
async function namespacedCollections(client: KubeClient): Promise<Collection[]> {
  const out: Collection[] = [];
  for (const base of await apiBases(client)) {
    for (const r of (await client.get<{ resources: ApiResource[] }>(base)).resources) {
      if (r.name.includes('/') || !r.namespaced || !r.verbs.includes('list') || !r.verbs.includes('delete')) continue;
      out.push({ path: `${base}/namespaces/NAMESPACE/${r.name}`, resource: r.name, deleteCollection: r.verbs.includes('deletecollection'), createsPods: /^\/apis\/(apps|batch)\//.test(base) });
    }
  }
  return out;
}

async function apiBases(client: KubeClient): Promise<string[]> {
  const groups = await client.get<{ groups: { preferredVersion: { groupVersion: string } }[] }>('/apis');
  return ['/api/v1', ...groups.groups.map((g) => `/apis/${g.preferredVersion.groupVersion}`)];
}

/** Every object of `collections`, each with its collection. */
async function objectsIn(client: KubeClient, collections: readonly Collection[]): Promise<{ uid: string; name: string; c: Collection }[]> {
  const lists = await Promise.all(
    collections.map(async (c) => (await client.get<{ items: { metadata: { uid: string; name: string } }[] }>(c.path)).items.map((o) => ({ uid: o.metadata.uid, name: o.metadata.name, c }))),
  );
  return lists.flat();
}

const ignoreGone = (err: unknown) => {
  if (err instanceof ApiError && (err.statusCode === 404 || err.statusCode === 409)) return;
  throw err;
};

async function snapshot(state: testbed.TestbedState, shape: string): Promise<SharedMeta> {
  const kc = testbed.kubeConfigFor(state);
  const client = new KubeClient(kc);
  const uids = (await objectsIn(client, await resettableCollections(client))).map((o) => o.uid);
  const namespaces = (await kc.makeApiClient(CoreV1Api).listNamespace()).items.map((n) => n.metadata!.name!);
  const real = new Set(state.realNodes.map((n) => n.name));
  const nodes = (await kc.makeApiClient(CoreV1Api).listNode()).items.filter((n) => real.has(n.metadata!.name!));
  return { shape, namespaces, uids, realNodes: Object.fromEntries(nodes.map((n) => [n.metadata!.name!, nodeMeta(n)])) };
}

const kwokNames = (n: number) => Array.from({ length: n }, (_, i) => `kwok-${i + 1}`);

/** Puts the running testbed back as `snapshot` had it, for a file asking for `opts`; throws what it cannot undo. */
async function reset(state: testbed.TestbedState, meta: SharedMeta, opts: SharedTestbedOptions, phase: (name: string) => void): Promise<void> {
  const dead = state.processes.filter((p) => !isAlive(p.pid));
  if (dead.length) throw new Error(`not running: ${dead.map((p) => p.name).join(', ')}`);
  const kc = testbed.kubeConfigFor(state);
  const client = new KubeClient(kc);
  const core = kc.makeApiClient(CoreV1Api);
  // an apiserver an earlier file restarted may still be filling a watch cache (429): wait for it
  let busy = '';
  const collections = await pollUntil(
    'the apiserver serving every collection a reset reads',
    async () => {
      try {
        const cs = await resettableCollections(client);
        await objectsIn(client, cs);
        return cs;
      } catch (err) {
        if (!(err instanceof ApiError) || (err.statusCode !== 429 && err.statusCode !== 503)) throw err;
        busy = err.message;
        return undefined;
      }
    },
    { timeoutMs: 60_000, intervalMs: 250, explain: () => busy },
  );

  // the namespaces of earlier files, emptied here and finalized (what the namespace controller does,
  // without its 5 s wait for HA apiservers): workload controllers first so that nothing creates pods
  // again, pods at once (a finalizer of a stopped controller removed), then everything else
  const known = new Set(meta.namespaces);
  const extra = (await core.listNamespace()).items.map((n) => n.metadata!.name!).filter((n) => !known.has(n));
  for (const ns of extra) await client.delete(`/api/v1/namespaces/${ns}`).catch(ignoreGone);
  const inNamespace = extra.length ? await namespacedCollections(client) : [];
  const contents = new Map<string, string[]>();
  const emptyOut = async (ns: string): Promise<boolean> => {
    const found: string[] = [];
    const empty = async (c: Collection) => {
      const path = c.path.replace('NAMESPACE', ns);
      const query = { gracePeriodSeconds: 0, propagationPolicy: c.resource === 'pods' ? undefined : 'Orphan' };
      if (c.deleteCollection) await client.request('DELETE', path, { query }).catch(ignoreGone);
      for (const o of (await client.get<{ items: { metadata: { name: string; finalizers?: string[] } }[] }>(path)).items) {
        found.push(`${c.resource}/${o.metadata.name}`);
        if (o.metadata.finalizers?.length) await client.mergePatch(`${path}/${o.metadata.name}`, { metadata: { finalizers: null } }).catch(ignoreGone);
        if (!c.deleteCollection) await client.request('DELETE', `${path}/${o.metadata.name}`, { query }).catch(ignoreGone);
      }
    };
    // what creates pods first, then the rest side by side
    await Promise.all(inNamespace.filter((c) => c.createsPods).map(empty));
    await Promise.all(inNamespace.filter((c) => !c.createsPods).map(empty));
    contents.set(ns, found);
    return found.length === 0;
  };
  let remaining = extra;
  await pollUntil(
    `namespaces of earlier files gone (${extra.join(', ') || 'none'})`,
    async () => {
      const now = new Map((await core.listNamespace()).items.map((n) => [n.metadata!.name!, n]));
      remaining = extra.filter((n) => now.has(n));
      for (const ns of remaining) {
        if (!(await emptyOut(ns))) continue;
        const cur = now.get(ns)!;
        await client.put(`/api/v1/namespaces/${ns}/finalize`, { ...cur, spec: { ...cur.spec, finalizers: [] } }).catch(ignoreGone);
      }
      return remaining.length === 0;
    },
    { timeoutMs: 90_000, intervalMs: 250, explain: () => `still there: ${remaining.map((n) => `${n} (${(contents.get(n) ?? []).slice(0, 10).join(', ')})`).join('; ')}` },
  );
  phase('namespaces');
  // cluster-scoped objects, those in default and kube-system's Leases that `up` did not leave, waited
  // for (a CustomResourceDefinition goes once its objects are gone)
  const before = new Set(meta.uids);
  const newer = async () => (await objectsIn(client, collections)).filter((o) => !before.has(o.uid) && !KEPT.has(`${o.c.resource}/${o.name}`));
  for (const o of await newer()) {
    await client.request('DELETE', `${o.c.path}/${o.name}`, { query: o.c.resource === 'pods' ? { gracePeriodSeconds: 0 } : { propagationPolicy: 'Background' } }).catch(ignoreGone);
  }
  let left: string[] = [];
  await pollUntil(
    'objects of earlier files gone',
    async () => {
      left = (await newer()).map((o) => `${o.c.path}/${o.name}`);
      return left.length === 0;
    },
    { timeoutMs: 60_000, intervalMs: 250, explain: () => `still there: ${left.join(', ')}` },
  );

  phase('objects');
  // the nodes the file asks for, as `up` left them
  const real = new Set(state.realNodes.map((n) => n.name));
  const kwok = kwokNames(opts.kwokNodes ?? 0);
  const wanted = new Set([...real, ...kwok]);
  const nodes = (await core.listNode()).items;
  for (const n of nodes) {
    const name = n.metadata!.name!;
    if (wanted.has(name)) continue;
    await core.deleteNode({ name }).catch(ignoreGone);
    // its Lease, which would otherwise name the deleted node as owner if a later file created it again
    await client.delete(`/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${name}`).catch(ignoreGone);
  }
  for (const n of nodes.filter((x) => wanted.has(x.metadata!.name!))) {
    const name = n.metadata!.name!;
    const want = real.has(name) ? meta.realNodes[name] : nodeMeta(kwokNode(name));
    if (!want) throw new Error(`no record of real node ${name} at up`);
    const patch = nodeResetPatch(n, want);
    if (patch) await client.mergePatch(`/api/v1/nodes/${name}`, patch);
  }
  const present = new Set(nodes.map((n) => n.metadata!.name!));
  await createKwokNodes(core, kwok.filter((n) => !present.has(n)));

  phase('nodes');
  // fresh controllers and scheduler with the file's flags, each logging to a file of its own as
  // after `up` (the earlier ones' logs kept beside it)
  for (const name of ['kube-controller-manager', 'kube-scheduler']) {
    const log = state.processes.find((p) => p.name === name)?.logFile;
    if (log && existsSync(log)) renameSync(log, log.replace(/\.log$/, `.until-${Date.now()}.log`));
  }
  await testbed.restartControllerManager(opts.controllers ?? '*', SHARED_RUN_DIR, []);
  phase('kube-controller-manager');
  await testbed.restartScheduler(opts.schedulerConfig, SHARED_RUN_DIR);
  phase('kube-scheduler');

  let notReady: string[] = [];
  await pollUntil(
    `nodes Ready and schedulable (${wanted.size})`,
    async () => {
      const ready = new Set((await core.listNode()).items.filter(testbed.nodeSchedulable).map((n) => n.metadata!.name!));
      notReady = [...wanted].filter((n) => !ready.has(n));
      return notReady.length === 0;
    },
    { timeoutMs: 60_000, intervalMs: 250, explain: () => `not Ready or not schedulable: ${notReady.join(', ')}` },
  );
  phase('nodes ready');
}

function readMeta(): SharedMeta | undefined {
  return existsSync(metaFile()) ? (JSON.parse(readFileSync(metaFile(), 'utf8')) as SharedMeta) : undefined;
}

/**
 * The shared testbed for a file asking for `opts`: the running one reset when it has the same shape,
 * else a fresh one (the running one taken down first).
 */
export async function acquireSharedTestbed(opts: SharedTestbedOptions, log: (line: string) => void = progressLog): Promise<testbed.TestbedState> {
  const shape = shapeOf(opts);
  const state = testbed.readState(SHARED_RUN_DIR);
  const meta = readMeta();
  if (state?.ready && meta?.shape === shape) {
    const t0 = Date.now();
    const phases: string[] = [];
    let last = t0;
    const phase = (name: string) => {
      phases.push(`${name} ${((Date.now() - last) / 1000).toFixed(1)} s`);
      last = Date.now();
    };
    try {
      await reset(state, meta, opts, phase);
      recordClusterStart('reused', SHARED_RUN_DIR, Date.now() - t0);
      log(`shared testbed reset in ${((Date.now() - t0) / 1000).toFixed(1)} s (${phases.join(', ')})`);
      return testbed.readState(SHARED_RUN_DIR)!;
    } catch (err) {
      log(`shared testbed could not be reset (${(err as Error).message}): bringing up a fresh one`);
    }
  } else if (state) {
    log(`shared testbed has another shape (${meta?.shape ?? 'none recorded'}, wanted ${shape}): bringing up a fresh one`);
  }
  await releaseSharedTestbed(log);
  // `down` keeps the logs, and a component started again appends to its log: the earlier testbed's
  // logs go aside (removed by the next `down`), so a file reads only its own components' lines
  const logs = join(SHARED_RUN_DIR, 'logs');
  if (existsSync(logs)) renameSync(logs, `${logs}-until-${Date.now()}`);
  // kwok always runs (a later file of the family may want KWOK nodes); the nodes are the file's
  const fresh = await testbed.up({ ...opts, runDir: SHARED_RUN_DIR, kwokNodes: Math.max(opts.kwokNodes ?? 0, 1) });
  if (!opts.kwokNodes) await testbed.kubeConfigFor(fresh).makeApiClient(CoreV1Api).deleteNode({ name: 'kwok-1' });
  writeFileSync(metaFile(), JSON.stringify(await snapshot(fresh, shape)));
  return fresh;
}

/** Takes the shared testbed down, if one is up. */
export async function releaseSharedTestbed(log: (line: string) => void = () => undefined): Promise<void> {
  if (existsSync(join(SHARED_RUN_DIR, 'state.json'))) await testbed.down({ runDir: SHARED_RUN_DIR, log });
}
