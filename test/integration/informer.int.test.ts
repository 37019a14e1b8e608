/**
 * ResilientInformer against the real apiserver: an apiserver restart in the middle of a watch, with
 * writes and an etcd compaction while the watch is broken (forcing 410 Gone -> relist), loses no
 * event after convergence; the inactivity watchdog relists without replaying unchanged objects.
 * ThreadedInformer (the same informer in a worker thread) hands over only changes of its projection,
 * survives the loss of its worker without losing a delete, and its metrics reach /metrics.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { CoreV1Api, type KubeConfig, type V1ConfigMap } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { PORTS } from '../../experiments/testbed/controlplane.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { ResilientInformer, objectKey } from '../../core/informer.ts';
import { metricSamples, metricsRegistry, metricsText } from '../../core/metrics.ts';
import { InformerThread, type ThreadedInformer } from '../../core/informer-thread.ts';

const runDir = SHARED_RUN_DIR;
const ns = 'informer-it';
let state: testbed.TestbedState;
let kc: KubeConfig;
let core: CoreV1Api;

/** The consumer's view, built only from informer events. */
function follow(inf: ResilientInformer<V1ConfigMap> | ThreadedInformer<V1ConfigMap>) {
  const view = new Map<string, string | undefined>();
  const counts = { add: 0, update: 0, delete: 0 };
  inf.on('add', (cm) => {
    counts.add++;
    view.set(objectKey(cm), cm.data?.v);
  });
  inf.on('update', (cm) => {
    counts.update++;
    view.set(objectKey(cm), cm.data?.v);
  });
  inf.on('delete', (cm) => {
    counts.delete++;
    view.delete(objectKey(cm));
  });
  return { view, counts };
}

async function serverView(): Promise<Map<string, string | undefined>> {
  const list = await core.listNamespacedConfigMap({ namespace: ns, labelSelector: 'it=informer' });
  return new Map(list.items.map((cm) => [objectKey(cm), cm.data?.v]));
}

const cm = (name: string, v: string): V1ConfigMap => ({ metadata: { name, namespace: ns, labels: { it: 'informer' } }, data: { v } });

async function restartCount(reason: string): Promise<number> {
  const m = await metricsRegistry().getSingleMetric('ulysses_informer_restarts_total')?.get();
  return m?.values.filter((v) => v.labels.reason === reason).reduce((a, v) => a + v.value, 0) ?? 0;
}

describe('informers on the real apiserver', () => {
  const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 0, namespace: ns });
  beforeAll(() => {
    ({ state, kc, core } = t);
  });

  it('loses no event across an apiserver restart with writes and an etcd compaction during the outage', async () => {
    for (let i = 0; i < 20; i++) await core.createNamespacedConfigMap({ namespace: ns, body: cm(`cm-${i}`, 'v0') });
    const inf = new ResilientInformer<V1ConfigMap>(kc, {
      path: `/api/v1/namespaces/${ns}/configmaps`,
      labelSelector: 'it=informer',
      backoffInitialMs: 100,
      backoffMaxMs: 1000,
    });
    const { view, counts } = follow(inf);
    await inf.start();
    expect(inf.synced).toBe(true);
    expect(view).toEqual(await serverView());
    const gone0 = await restartCount('relist_gone');

    // a write the informer sees live, then the apiserver goes down mid-watch
    await core.replaceNamespacedConfigMap({ name: 'cm-0', namespace: ns, body: cm('cm-0', 'live') });
    await pollUntil('live update', () => view.get(`${ns}/cm-0`) === 'live', { timeoutMs: 10_000 });
    await testbed.restartComponent('kube-apiserver', { runDir, downtimeMs: 1500 });

    // writes right after the restart, racing the informer's re-watch
    for (let i = 1; i < 8; i++) await core.replaceNamespacedConfigMap({ name: `cm-${i}`, namespace: ns, body: cm(`cm-${i}`, 'after-restart') });
    for (let i = 8; i < 12; i++) await core.deleteNamespacedConfigMap({ name: `cm-${i}`, namespace: ns });
    for (let i = 20; i < 25; i++) await core.createNamespacedConfigMap({ namespace: ns, body: cm(`cm-${i}`, 'new') });

    // second outage: writes go to etcd while the apiserver is down is impossible, so instead compact
    // etcd past the informer's resourceVersion while its watch is broken: the re-watch must get 410
    const stop = testbed.restartComponent('kube-apiserver', { runDir, downtimeMs: 2000 });
    const rev = await etcdRevision();
    await fetch(`http://127.0.0.1:${PORTS.etcdClient}/v3/kv/compaction`, { method: 'POST', body: JSON.stringify({ revision: String(rev), physical: true }) });
    await stop;
    for (let i = 12; i < 16; i++) await core.replaceNamespacedConfigMap({ name: `cm-${i}`, namespace: ns, body: cm(`cm-${i}`, 'after-compaction') });
    await core.deleteNamespacedConfigMap({ name: 'cm-20', namespace: ns });

    const expected = await serverView();
    await pollUntil('informer view to converge to the server state', async () => JSON.stringify([...view].sort()) === JSON.stringify([...(await serverView())].sort()), {
      timeoutMs: 60_000,
      explain: () => `view: ${JSON.stringify([...view].sort())}`,
    });
    expect(view).toEqual(expected);
    expect(view.get(`${ns}/cm-3`)).toBe('after-restart');
    expect(view.get(`${ns}/cm-13`)).toBe('after-compaction');
    expect(view.has(`${ns}/cm-9`)).toBe(false);
    expect(view.has(`${ns}/cm-20`)).toBe(false);
    expect(counts.delete).toBe(5); // cm-8..cm-11 and cm-20, each seen exactly once
    expect(await restartCount('relist_gone')).toBeGreaterThan(gone0);
    inf.stop();
  });

  it('relists a silent watch through the watchdog without replaying unchanged objects', async () => {
    const inf = new ResilientInformer<V1ConfigMap>(kc, { path: `/api/v1/namespaces/${ns}/configmaps`, labelSelector: 'it=informer', inactivityMs: 1000 });
    const { view, counts } = follow(inf);
    await inf.start();
    const added = counts.add;
    const before = await restartCount('relist_watchdog');
    await pollUntil('watchdog relist', async () => (await restartCount('relist_watchdog')) >= before + 2, { timeoutMs: 15_000 });
    expect(counts.add).toBe(added); // relists diffed against the cache: no duplicate adds
    expect(counts.update).toBe(0);
    // and it still follows changes after the watchdog restarts
    await core.replaceNamespacedConfigMap({ name: 'cm-1', namespace: ns, body: cm('cm-1', 'after-watchdog') });
    await pollUntil('update after watchdog relists', () => view.get(`${ns}/cm-1`) === 'after-watchdog', { timeoutMs: 10_000 });
    inf.stop();
  });

  it('ThreadedInformer hands over only projection changes, resyncs a replaced worker with its deletes, and serves its metrics; two informers share the worker', async () => {
    for (const n of ['cm-t1', 'cm-t2']) await core.createNamespacedConfigMap({ namespace: ns, body: cm(n, 'v0') });
    const thread = new InformerThread({ kubeconfig: kc.exportConfig(), restartDelayMs: 300 });
    const projection = { module: new URL('./informer-projection.ts', import.meta.url).href, export: 'configMapV' };
    const inf = thread.informer<V1ConfigMap>({ path: `/api/v1/namespaces/${ns}/configmaps`, labelSelector: 'it=informer', projection });
    // a second informer in the same worker: its own events, its own resync
    const other = thread.informer<V1ConfigMap>({ path: `/api/v1/namespaces/${ns}/configmaps`, labelSelector: 'it=informer,extra=x', projection });
    const second = follow(other);
    const { view, counts } = follow(inf);
    await Promise.all([inf.start(), other.start()]);
    expect(inf.synced).toBe(true);
    expect(view).toEqual(await serverView());
    expect(second.view.size).toBe(0);
    // the projection is what arrives: data.v only
    const anyCm = inf.list()[0]!;
    expect(Object.keys(anyCm.data ?? {})).toEqual(['v']);
    expect(anyCm.metadata?.labels).toBeUndefined();

    // a change outside the projection (another data key, a label) is not handed over...
    const name = 'cm-t2';
    const before = await core.readNamespacedConfigMap({ name, namespace: ns });
    await core.replaceNamespacedConfigMap({ name, namespace: ns, body: { ...before, metadata: { ...before.metadata, labels: { ...before.metadata!.labels, extra: 'x' } }, data: { ...before.data, other: 'status-like' } } });
    // ...a change of v is; events arrive in order, so once this one is in, the other would be too
    const updates0 = counts.update;
    await core.replaceNamespacedConfigMap({ name: 'cm-t1', namespace: ns, body: cm('cm-t1', 'threaded') });
    await pollUntil('projected update', () => view.get(`${ns}/cm-t1`) === 'threaded', { timeoutMs: 10_000 });
    expect(counts.update).toBe(updates0 + 1);
    // the label change outside inf's projection put cm-t2 into the second informer's selection
    await pollUntil('the second informer sees cm-t2', () => second.view.has(`${ns}/cm-t2`), { timeoutMs: 10_000 });

    // the worker's list and watch requests are in /metrics (rest_client_requests_total of its registry)
    const sumOf = (text: string) => metricSamples(text, new Set(['rest_client_requests_total'])).reduce((a, m) => a + m.value, 0);
    const mainOnly = sumOf(await metricsRegistry().metrics());
    expect(sumOf(await metricsText())).toBeGreaterThan(mainOnly);

    // the worker is replaced; a delete and a create meanwhile still reach the handlers
    const deletes0 = counts.delete;
    const [adds1, updates1] = [counts.add, counts.update];
    thread.restart();
    await core.deleteNamespacedConfigMap({ name: 'cm-t2', namespace: ns });
    await core.createNamespacedConfigMap({ namespace: ns, body: cm('cm-30', 'while-restarting') });
    await pollUntil('resync after the worker was replaced', async () => JSON.stringify([...view].sort()) === JSON.stringify([...(await serverView())].sort()), {
      timeoutMs: 30_000,
      explain: () => `view: ${JSON.stringify([...view].sort())}`,
    });
    expect(view.has(`${ns}/cm-t2`)).toBe(false);
    expect(view.get(`${ns}/cm-30`)).toBe('while-restarting');
    expect(counts.delete).toBe(deletes0 + 1);
    // the new worker's list of the unchanged objects is no update; the new one is an add
    expect(counts.update).toBe(updates1);
    expect(counts.add).toBe(adds1 + 1);
    // the second informer resynced too: cm-t2 (deleted while the worker was replaced) is gone there
    await pollUntil('the second informer resynced', () => !second.view.has(`${ns}/cm-t2`), { timeoutMs: 10_000 });
    expect(second.counts.delete).toBe(1);
    other.stop();
    inf.stop();
  });
});

async function etcdRevision(): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${PORTS.etcdClient}/v3/kv/range`, { method: 'POST', body: JSON.stringify({ key: Buffer.from('/').toString('base64') }) });
  const body = (await res.json()) as { header: { revision: string } };
  return Number(body.header.revision);
}
