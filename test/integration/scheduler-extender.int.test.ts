/**
 * The Ulysses extender wired into the REAL kube-scheduler of the testbed (KubeSchedulerConfiguration
 * with filter/prioritize for every pod, bind for the pods requesting ulysses.io/reservation,
 * nodeCacheCapable, ignorable=false) on KWOK nodes labelled and
 * annotated as RT / TDMA / assurance nodes: pods are placed exactly where the analyses say,
 * infeasible ones stay Pending with the extender's message in their FailedScheduling event,
 * reservations are written on the pods before binding and released on deletion, and a restarted
 * extender rebuilds its state from those annotations without double-booking a slot or a core.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { createAndWaitRefused as refusedIn, setAndObserve, useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { KubeClient } from '../../core/kube.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { renderKubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { reservationRequest, RT_ANNOTATION, TDMA_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import { extenderConfig as parseExtenderConfig, type ExtenderConfigInput } from '../../scheduler-plugins/extender/config.ts';
import { extenderRuntimeWatcher } from '../../scheduler-plugins/extender/runtime.ts';
import { BASE_ASSURANCE_ANNOTATION, NodeAssuranceUpdater } from '../../scheduler-plugins/assurance/updater.ts';
import { AssuranceRescheduler } from '../../scheduler-plugins/assurance/rescheduler.ts';

const runDir = SHARED_RUN_DIR;
const schedulerConfig = '/tmp/ulysses-it-sched-extender-kube-scheduler.yaml';
const PORT = 20410;
const ns = 'sched-ext';
writeFileSync(
  schedulerConfig,
  renderKubeSchedulerConfiguration({ kubeconfig: schedulerKubeconfigPath(runDir), extenderUrl: `http://127.0.0.1:${PORT}`, weight: 10, httpTimeout: '5s' }),
);
const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 6, namespace: ns, schedulerConfig });

const extenderConfig: ExtenderConfigInput = {
  listen: { host: '127.0.0.1', port: PORT },
  tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } },
  defaultAssurancePolicies: { high: { policy: 'threshold', min: { cpu: 3 } } },
};

/** Node roles (labels + annotations on the KWOK nodes). */
const NODES: Record<string, { labels?: Record<string, string>; annotations?: Record<string, string> }> = {
  'kwok-1': { labels: { 'ulysses.io/rt-scheduler': 'deferrable-server' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":1}', 'ulysses.io/assurance': '{"cpu":3,"memory":3}' } },
  'kwok-2': { labels: { 'ulysses.io/rt-scheduler': 'budget-period' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":2}', 'ulysses.io/assurance': '{"cpu":1}' } },
  'kwok-3': { labels: { 'ulysses.io/tdma-network': 'rtnet0' }, annotations: { 'ulysses.io/assurance': '{"cpu":2}' } },
  'kwok-4': { labels: { 'ulysses.io/tdma-network': 'rtnet0' }, annotations: { 'ulysses.io/assurance': '{"cpu":5,"memory":5}' } },
  'kwok-5': { annotations: { 'ulysses.io/assurance': '{"cpu":1}' } },
  'kwok-6': {},
};

let core: CoreV1Api;
let extender: ExtenderServer;

beforeAll(async () => {
  core = t.core;
  for (const [name, role] of Object.entries(NODES)) {
    await new KubeClient(t.kc).mergePatch(`/api/v1/nodes/${name}`, { metadata: { labels: role.labels ?? {}, annotations: role.annotations ?? {} } });
  }
  extender = new ExtenderServer({ config: extenderConfig, kubeconfig: t.kc });
  await extender.start();
  // the extender's cache has the roles
  await pollUntil('extender sees the node roles', async () => extender.state.node('kwok-2')?.rtKind === 'budget-period' && extender.state.node('kwok-4')?.tdmaNetwork === 'rtnet0', { timeoutMs: 30_000 });
});
afterAll(async () => {
  await extender?.stop();
});

/** A pod for the KWOK nodes; an RT/TDMA one requests ulysses.io/reservation, as its users must (the extender binds it). */
function kwokPod(name: string, annotations: Record<string, string> = {}, labels: Record<string, string> = {}): V1Pod {
  const reserves = RT_ANNOTATION in annotations || TDMA_ANNOTATION in annotations;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, annotations, labels: { app: 'sched-ext', ...labels } },
    spec: {
      containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', ...(reserves ? { resources: reservationRequest() } : {}) }],
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
      nodeSelector: { type: 'kwok' },
    },
  };
}

const readPod = (name: string) => core.readNamespacedPod({ name, namespace: ns });
const extenderMetrics = async () => (await fetch(`http://127.0.0.1:${PORT}/metrics`)).text();

async function createAndWaitBound(p: V1Pod): Promise<V1Pod> {
  await core.createNamespacedPod({ namespace: ns, body: p });
  return pollUntil(`pod ${p.metadata!.name} bound`, async () => {
    const cur = await readPod(p.metadata!.name!);
    return cur.spec?.nodeName ? cur : undefined;
  }, { timeoutMs: 60_000 });
}

const createAndWaitRefused = (p: V1Pod, re: RegExp) => refusedIn(core, ns, p, re);

const ds = (budgetUs: number) => JSON.stringify({ server: { budgetUs, periodUs: 10000 }, tasks: [{ wcetUs: Math.floor(budgetUs / 2), periodUs: 10000, deadlineUs: 10000, priority: 1 }] });
const bp = (runtimeUs: number) => JSON.stringify({ reservation: { runtimeUs, periodUs: 10000, cpus: 1 } });
const tdma = (slots: number) => JSON.stringify({ network: 'rtnet0', slots });

async function allPods(): Promise<V1Pod[]> {
  return (await core.listNamespacedPod({ namespace: ns })).items.filter((p) => !p.metadata?.deletionTimestamp);
}

/** Each TDMA slot held by at most one pod; each RT core within its bound (from the API, not the cache). */
async function assertNoDoubleBooking(): Promise<Map<number, string>> {
  const holders = new Map<number, string>();
  for (const p of await allPods()) {
    const slots = p.metadata?.annotations?.['ulysses.io/tdma-slots'];
    if (!slots || !(p.spec?.nodeName || p.metadata?.annotations?.[RESERVED_NODE_ANNOTATION])) continue;
    for (const s of JSON.parse(slots) as number[]) {
      expect(holders.get(s), `slot ${s} held by ${holders.get(s)} and ${p.metadata!.name}`).toBeUndefined();
      holders.set(s, p.metadata!.name!);
    }
  }
  const coreLoad = new Map<string, number>();
  for (const p of await allPods()) {
    const rt = p.metadata?.annotations?.['ulysses.io/rt'];
    const cores = p.metadata?.annotations?.['ulysses.io/rt-cores'];
    if (!rt || !cores || !p.spec?.nodeName) continue;
    const spec = JSON.parse(rt) as { server?: { budgetUs: number; periodUs: number }; reservation?: { runtimeUs: number; periodUs: number } };
    const u = spec.server ? spec.server.budgetUs / spec.server.periodUs : spec.reservation!.runtimeUs / spec.reservation!.periodUs;
    for (const c of JSON.parse(cores) as number[]) coreLoad.set(`${p.spec.nodeName}/${c}`, (coreLoad.get(`${p.spec.nodeName}/${c}`) ?? 0) + u);
  }
  for (const [c, u] of coreLoad) expect(u, `core ${c}`).toBeLessThanOrEqual(1 + 1e-9);
  return holders;
}

describe('kube-scheduler with the Ulysses extender (testbed, KWOK nodes)', () => {
  it('assurance: explicit policy and the criticality default place pods on the node that just satisfies them', async () => {
    const a = await createAndWaitBound(kwokPod('assured', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":3}}' }));
    expect(a.spec?.nodeName).toBe('kwok-1'); // kwok-1 (cpu 3) and kwok-4 (cpu 5) satisfy; kwok-1 offers less excess
    const c = await createAndWaitBound(kwokPod('critical', {}, { 'ulysses.io/criticality': 'high' }));
    expect(c.spec?.nodeName).toBe('kwok-1');
    const w = await createAndWaitBound(kwokPod('weighted', { 'ulysses.io/assurance-policy': '{"policy":"weighted","weights":{"cpu":1,"memory":1},"threshold":8}' }));
    expect(w.spec?.nodeName).toBe('kwok-4');
    // six nodes, five different assurance vectors, one reason: kube-scheduler counts the extender's identical messages
    await createAndWaitRefused(kwokPod('too-demanding', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":9}}' }), /0\/6 nodes are available: 6 ulysses: node assurance below the pod's policy\./);
  });

  it('RT: deferrable-server and budget/period pods only on their nodes, within capacity; the overflow stays Pending', async () => {
    const d1 = await createAndWaitBound(kwokPod('ds-1', { 'ulysses.io/rt': ds(6000) }));
    expect(d1.spec?.nodeName).toBe('kwok-1');
    expect(d1.metadata?.annotations).toMatchObject({ 'ulysses.io/rt-cores': '[0]', [RESERVED_NODE_ANNOTATION]: 'kwok-1' });
    const msg = await createAndWaitRefused(kwokPod('ds-2', { 'ulysses.io/rt': ds(6000) }), /ulysses: deferrable-server: does not fit/);
    expect(msg).toContain('4 ulysses: not a real-time node');
    expect(msg).toContain('1 ulysses: budget-period node, pod needs deferrable-server');

    const b1 = await createAndWaitBound(kwokPod('bp-1', { 'ulysses.io/rt': bp(5000) }));
    const b2 = await createAndWaitBound(kwokPod('bp-2', { 'ulysses.io/rt': bp(5000) }));
    expect([b1.spec?.nodeName, b2.spec?.nodeName]).toEqual(['kwok-2', 'kwok-2']);
    // worst-fit: the second reservation goes to the other core
    expect(new Set([b1.metadata?.annotations?.['ulysses.io/rt-cores'], b2.metadata?.annotations?.['ulysses.io/rt-cores']])).toEqual(new Set(['[0]', '[1]']));
    await createAndWaitRefused(kwokPod('bp-3', { 'ulysses.io/rt': bp(5000) }), /ulysses: budget-period: .*> 0\.95/);
    await assertNoDoubleBooking();
  });

  it('TDMA: slots reserved network-wide before binding; the pod that does not fit waits and gets the slots once released', async () => {
    const t1 = await createAndWaitBound(kwokPod('tdma-1', { 'ulysses.io/tdma': tdma(2) }));
    const t2 = await createAndWaitBound(kwokPod('tdma-2', { 'ulysses.io/tdma': tdma(2) }));
    for (const p of [t1, t2]) expect(['kwok-3', 'kwok-4']).toContain(p.spec?.nodeName);
    expect(t1.spec?.nodeName).toBe('kwok-3'); // less assurance offered than kwok-4
    expect(t1.metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[0,1]');
    expect(t2.metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[2,3]');
    await createAndWaitRefused(kwokPod('tdma-3', { 'ulysses.io/tdma': tdma(2) }), /rtnet0: 1 free slot\(s\), 2 needed/);
    await assertNoDoubleBooking();

    // release: deleting tdma-1 frees slots 0 and 1; with slot 4 they form one free run 4,0,1
    // (the cycle wraps), and best-fit takes its start: slots 4 and 0, contiguous across the wrap
    await core.deleteNamespacedPod({ name: 'tdma-1', namespace: ns, gracePeriodSeconds: 0 });
    const t3 = await pollUntil('tdma-3 bound after the release', async () => {
      const p = await readPod('tdma-3');
      return p.spec?.nodeName ? p : undefined;
    }, { timeoutMs: 90_000 });
    expect(t3.metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[0,4]');
    await assertNoDoubleBooking();
  });

  it('malformed annotations: Pending on every node with a message naming the annotation and the field', async () => {
    const msg = await createAndWaitRefused(kwokPod('bad-rt', { 'ulysses.io/rt': '{"server":{"budgetUs":0,"periodUs":10000}}' }), /ulysses\.io\/rt: server\.budgetUs: must be > 0/);
    expect(msg).toMatch(/6 ulysses: pod sched-ext\/bad-rt/);
    await createAndWaitRefused(kwokPod('bad-tdma', { 'ulysses.io/tdma': '{"network":"rtnet9","slots":1}' }), /ulysses\.io\/tdma: network: "rtnet9" is not configured/);
  });

  it('survives an extender restart: state rebuilt from the annotations, no slot or core booked twice', async () => {
    await extender.stop();
    // while it is down, the scheduler cannot place anything (ignorable: false)
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('tdma-4', { 'ulysses.io/tdma': tdma(1) }) });
    // a short-period server: rate-monotonic priority above ds-1's, so ds-1 still meets its deadline
    // (ds-1 R_S = 9000 <= 10000, its task 9000 exact); an equal-period 0.3 server would not fit next
    // to ds-1 at all (deferrable-server jitter T - C)
    const ds3 = JSON.stringify({ server: { budgetUs: 1000, periodUs: 5000 }, tasks: [{ wcetUs: 500, periodUs: 5000 }] });
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('ds-3', { 'ulysses.io/rt': ds3 }) });
    await pollUntil('FailedScheduling while the extender is down', async () => {
      const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=tdma-4,reason=FailedScheduling' });
      return events.items.some((e) => /connection refused|ECONNREFUSED|extender/i.test(e.message ?? ''));
    }, { timeoutMs: 60_000 });
    expect((await readPod('tdma-4')).spec?.nodeName).toBeFalsy();

    extender = new ExtenderServer({ config: extenderConfig, kubeconfig: t.kc });
    await extender.start();
    // rebuilt before answering: slots 0, 4 held by tdma-3 and 2, 3 by tdma-2, kwok-1's core by ds-1
    expect(extender.state.takenSlots('rtnet0', 'none').sort((a, b) => a - b)).toEqual([0, 2, 3, 4]);
    const t4 = await pollUntil('tdma-4 bound by the new extender', async () => {
      const p = await readPod('tdma-4');
      return p.spec?.nodeName ? p : undefined;
    }, { timeoutMs: 90_000 });
    expect(t4.metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[1]');
    // ds-3 (0.2) fits next to ds-1 (0.6) on kwok-1's only core
    const d3 = await pollUntil('ds-3 bound', async () => {
      const p = await readPod('ds-3');
      return p.spec?.nodeName ? p : undefined;
    }, { timeoutMs: 90_000 });
    expect(d3.spec?.nodeName).toBe('kwok-1');
    const holders = await assertNoDoubleBooking();
    expect([...holders.keys()].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4]);
    // still refused after the restart
    expect((await readPod('ds-2')).spec?.nodeName).toBeFalsy();
    expect((await readPod('bp-3')).spec?.nodeName).toBeFalsy();

    const metrics = await extenderMetrics();
    expect(metrics).toMatch(/ulysses_extender_request_duration_seconds_count\{verb="bind"\} [1-9]/);
    expect(metrics).toMatch(/ulysses_extender_rejections_total\{reason="tdma"\} [1-9]/);
  });

  it('a burst of TDMA pods bound concurrently: every slot at most once, the surplus Pending', async () => {
    for (const p of await allPods()) if (p.metadata?.annotations?.['ulysses.io/tdma']) await core.deleteNamespacedPod({ name: p.metadata.name!, namespace: ns, gracePeriodSeconds: 0 });
    await pollUntil('TDMA pods gone', async () => (await core.listNamespacedPod({ namespace: ns })).items.every((p) => !p.metadata?.annotations?.['ulysses.io/tdma']), { timeoutMs: 60_000 });
    const names = Array.from({ length: 7 }, (_, i) => `burst-${i}`);
    await Promise.all(names.map((n) => core.createNamespacedPod({ namespace: ns, body: kwokPod(n, { 'ulysses.io/tdma': tdma(1) }) })));
    await pollUntil('5 burst pods bound, 2 refused', async () => {
      const pods = await Promise.all(names.map(readPod));
      const bound = pods.filter((p) => p.spec?.nodeName).length;
      const refused = await core.listNamespacedEvent({ namespace: ns, fieldSelector: 'reason=FailedScheduling' });
      const refusedNames = new Set(refused.items.filter((e) => /rtnet0: 0 free slot/.test(e.message ?? '')).map((e) => e.involvedObject.name));
      return bound === 5 && names.filter((n) => refusedNames.has(n)).length >= 2;
    }, { timeoutMs: 90_000 });
    const holders = await assertNoDoubleBooking();
    expect([...holders.keys()].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4]);
    expect([...holders.values()].every((n) => n.startsWith('burst-'))).toBe(true);
  });

  it('a release the extender learns of after the scheduler retried: the refused pod is requeued (ulysses.io/capacity-released) and bound', async () => {
    for (const p of await allPods()) if (p.metadata?.annotations?.['ulysses.io/tdma']) await core.deleteNamespacedPod({ name: p.metadata.name!, namespace: ns, gracePeriodSeconds: 0 });
    await pollUntil('no TDMA slot held in the extender', async () => extender.state.takenSlots('rtnet0', 'none').length === 0, { timeoutMs: 60_000 });
    await createAndWaitBound(kwokPod('late-1', { 'ulysses.io/tdma': tdma(5) }));
    await createAndWaitRefused(kwokPod('late-2', { 'ulysses.io/tdma': tdma(1) }), /rtnet0: 0 free slot\(s\), 1 needed/);

    // the extender's watch delivers late-1's deletion only after kube-scheduler retried late-2 on it
    // (what a slow watch does): held back here, the scheduler's retry is refused on the old view
    const state = extender.state;
    const deletePod = state.deletePod.bind(state);
    const held: V1Pod[] = [];
    state.deletePod = (p: V1Pod) => (p.metadata?.name === 'late-1' ? void held.push(p) : deletePod(p));
    try {
      const tdmaRefusals = async () => Number(/ulysses_extender_rejections_total\{reason="tdma"\} (\d+)/.exec(await extenderMetrics())?.[1] ?? 0);
      const before = await tdmaRefusals();
      await core.deleteNamespacedPod({ name: 'late-1', namespace: ns, gracePeriodSeconds: 0 });
      await pollUntil('late-1 deletion delivered to the extender and held back', async () => held.length === 1, { timeoutMs: 60_000 });
      await pollUntil('kube-scheduler retried late-2 on the deletion and the extender refused it', async () => (await tdmaRefusals()) > before, { timeoutMs: 60_000 });
      expect((await readPod('late-2')).spec?.nodeName).toBeFalsy();
    } finally {
      state.deletePod = deletePod;
    }
    // the deletion reaches the state: the slots are free, and late-2, refused before, is requeued
    deletePod(held[0]!);
    const bound = await pollUntil('late-2 bound after the requeue', async () => {
      const p = await readPod('late-2');
      return p.spec?.nodeName ? p : undefined;
    }, { timeoutMs: 60_000 });
    expect(bound.metadata?.annotations?.['ulysses.io/capacity-released']).toMatch(/^\d{4}-\d\d-\d\dT/);
    expect(bound.metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[0]');
    const metrics = await extenderMetrics();
    expect(metrics).toMatch(/ulysses_extender_requeues_total\{result="patched"\} [1-9]/);
    await assertNoDoubleBooking();
  });

  it('node-assurance updater + opt-in rescheduler: a degraded node loses assurance, its controlled pod is evicted and placed on a node that satisfies it', async () => {
    const apps = t.apps;
    const updater = new NodeAssuranceUpdater(t.kc, { rules: [{ taint: 'ulysses.io/degraded', gamma: 0.5 }] });
    const rescheduler = new AssuranceRescheduler(t.kc, { enabled: true, evictionsPerMinute: 60, burst: 1, intervalMs: 300 }, extenderConfig);
    try {
      await updater.start();
      // adoption: the current vector becomes the base, the effective one is unchanged
      await pollUntil('kwok-1 base assurance adopted', async () => (await core.readNode({ name: 'kwok-1' })).metadata?.annotations?.[BASE_ASSURANCE_ANNOTATION] === '{"cpu":3,"memory":3}', { timeoutMs: 30_000 });
      const tpl = kwokPod('guarded', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":3}}' }, { app: 'guarded' });
      await apps.createNamespacedDeployment({
        namespace: ns,
        body: {
          metadata: { name: 'guarded', namespace: ns },
          spec: { replicas: 1, selector: { matchLabels: { app: 'guarded' } }, template: { metadata: { labels: tpl.metadata!.labels, annotations: tpl.metadata!.annotations }, spec: tpl.spec! } },
        },
      });
      const first = await pollUntil('guarded pod bound', async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=guarded' })).items.find((p) => p.spec?.nodeName), { timeoutMs: 60_000 });
      expect(first.spec?.nodeName).toBe('kwok-1'); // just satisfies cpu >= 3
      await rescheduler.start();

      // degrade kwok-1: gamma 0.5 -> {"cpu":1,"memory":1}; the rescheduler evicts the guarded pod, its
      // ReplicaSet recreates it, and the scheduler + extender place it on kwok-4 (cpu 5)
      await new KubeClient(t.kc).jsonPatch('/api/v1/nodes/kwok-1', [{ op: 'add', path: '/spec/taints/-', value: { key: 'ulysses.io/degraded', value: 'true', effect: 'PreferNoSchedule' } }]);
      await pollUntil('kwok-1 effective assurance lowered', async () => (await core.readNode({ name: 'kwok-1' })).metadata?.annotations?.['ulysses.io/assurance'] === '{"cpu":1,"memory":1}', { timeoutMs: 30_000 });
      const moved = await pollUntil('guarded pod rescheduled to kwok-4', async () => (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=guarded' })).items.find((p) => p.spec?.nodeName === 'kwok-4' && !p.metadata?.deletionTimestamp), { timeoutMs: 90_000 });
      expect(moved.metadata?.uid).not.toBe(first.metadata?.uid);
      // bare pods that no longer fit are reported, not evicted
      expect((await readPod('assured')).spec?.nodeName).toBe('kwok-1');
      expect((await readPod('assured')).metadata?.deletionTimestamp).toBeFalsy();

      // recovery restores the base
      const taints = (await core.readNode({ name: 'kwok-1' })).spec?.taints ?? [];
      await new KubeClient(t.kc).mergePatch('/api/v1/nodes/kwok-1', { spec: { taints: taints.filter((x) => x.key !== 'ulysses.io/degraded') } });
      await pollUntil('kwok-1 assurance restored', async () => (await core.readNode({ name: 'kwok-1' })).metadata?.annotations?.['ulysses.io/assurance'] === '{"cpu":3,"memory":3}', { timeoutMs: 30_000 });
    } finally {
      rescheduler.stop();
      updater.stop();
    }
  });
  it('runtime toggle: `ulysses set scheduler-extender off --plugins assurance` stops assurance filtering live, `on` restores it', async () => {
    // what main.ts does: spec.schedulerExtender over the file configuration, applied to the running server
    const watcher = extenderRuntimeWatcher(t.kc, async (cfg) => extender.setConfig(cfg), () => parseExtenderConfig(extenderConfig));
    await watcher.start();
    try {
      const client = new KubeClient(t.kc);
      await client.mergePatch('/api/v1/nodes/kwok-6', { metadata: { labels: { 'toggle-target': 'yes' } } });
      // kwok-6 offers no assurance: a pod that needs cpu >= 2 and may only go there is refused ...
      const pod = kwokPod('toggle', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' });
      pod.spec!.nodeSelector = { type: 'kwok', 'toggle-target': 'yes' };
      await createAndWaitRefused(pod, /ulysses: node assurance below the pod's policy/);
      // ... until the assurance plugin is switched off at runtime
      const off = await setAndObserve(t.kc, 'scheduler-extender', 'off', { plugins: ['assurance'] });
      expect(off.mode).toBe('assurance=off,realtime=on,tdma=on');
      expect(extender.config.plugins.assurance).toBe(false);
      // the configuration change is a release: the extender requeues the pod it refused (requeue.ts)
      const bound = await pollUntil('pod bound once assurance filtering is off', async () => (await readPod('toggle')).spec?.nodeName, { timeoutMs: 60_000 });
      expect(bound).toBe('kwok-6');
      const on = await setAndObserve(t.kc, 'scheduler-extender', 'on', { plugins: ['assurance'] });
      expect(on.mode).toBe('assurance=on,realtime=on,tdma=on');
      await createAndWaitRefused({ ...pod, metadata: { ...pod.metadata, name: 'toggle-2' } }, /ulysses: node assurance below the pod's policy/);
    } finally {
      await watcher.stop();
    }
  });
});
