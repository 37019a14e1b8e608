/**
 * Runtime toggling through UlyssesConfig/default on the real testbed (thesis §5.3.5): the
 * components watch it and apply it live; we observe the new behaviour, not only the status:
 * - controller manager: switched to multi-priority-periodic, ReplicaSet syncs come one per T/N;
 *   back to vanilla, they come in a burst; a switch in the middle of a burst loses no key;
 * - APF: `set apf on` makes the critical namespace's requests exempt (response headers), `off`
 *   reverts; an invalid section is rejected (status condition + Warning Event naming the field)
 *   and the last good configuration stays in force;
 * - the CRD schema rejects a bad mode enum at the apiserver.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { V1Pod, V1ReplicaSet } from '@kubernetes/client-node';
import { observeRuntimeConfig, useSharedTestbed } from './harness.ts';
import { ApfProbe, configMapsPath } from './apf-probe.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment, taintNoExecute, untaint } from '../../experiments/workloads.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { ApiError, KubeClient, apiRequest } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig, runtimeConfigPath, RuntimeConfigWatcher } from '../../core/runtime-config.ts';
import { z } from 'zod';
import { setPatch, statusRows } from '../../core/runtime-status.ts';
import { controllerManagerRuntimeWatcher } from '../../controller-manager/runtime.ts';
import { apfRuntimeWatcher } from '../../apf-configs/runtime.ts';
import { EXEMPT_PRIORITY_LEVEL } from '../../apf-configs/flowschemas.ts';

const ns = 'rtcfg-it';
const CRIT = 'ulysses-critical';
const t = useSharedTestbed('control-plane', {
  realNodes: 0,
  kwokNodes: 2,
  controllers: '*,-replicaset-controller,-taint-eviction-controller',
  namespace: ns,
  controllerManager: { controllers: ['replicaset', 'taint-eviction'] },
});

let client: KubeClient;
let cmWatcher: Pick<RuntimeConfigWatcher<never>, "start" | "stop">;
let apfWatcher: Pick<RuntimeConfigWatcher<never>, "start" | "stop">;
let podInformer: ResilientInformer<V1Pod>;
const podSeen = new Map<string, number>(); // pod name -> local time its ADDED event arrived
let apf: ApfProbe;

beforeAll(async () => {
  client = new KubeClient(t.kc);
  cmWatcher = controllerManagerRuntimeWatcher(t.kc, t.cm!, ['replicaset', 'taint-eviction']);
  apfWatcher = apfRuntimeWatcher(t.kc);
  await cmWatcher.start();
  await apfWatcher.start();
  podInformer = new ResilientInformer<V1Pod>(t.kc, { path: `/api/v1/namespaces/${ns}/pods` });
  podInformer.on('add', (p) => podSeen.set(p.metadata!.name!, performance.now()));
  await podInformer.start();
  apf = new ApfProbe(t.kc, t.state);
  await apf.setup(CRIT);
});
afterAll(async () => {
  podInformer?.stop();
  await cmWatcher?.stop();
  await apfWatcher?.stop();
});

/** `ulysses set` as a library call; returns the generation the components must observe. */
async function set(component: string, mode: string, o: Parameters<typeof setPatch>[2] = {}): Promise<number> {
  const cur = await readRuntimeConfig(client);
  const obj = await patchRuntimeConfig(client, setPatch(component, mode, o, cur?.spec));
  return obj.metadata.generation!;
}

const observed = (key: string, generation: number) => observeRuntimeConfig(t.kc, key, generation);

function rs(name: string, replicas = 1, criticality: 'low' | 'high' = 'low'): V1ReplicaSet {
  const d = deployment({ namespace: ns, name, replicas, criticality, image: 'http-server' });
  const tpl = d.spec!.template;
  tpl.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
  tpl.spec!.nodeSelector = { type: 'kwok' };
  return { apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: { name, namespace: ns }, spec: { replicas, selector: d.spec!.selector, template: tpl } };
}

/** Creates `n` one-replica ReplicaSets at once; resolves with their pods' arrival times (ms, sorted). */
async function burst(prefix: string, n: number, during?: (seen: () => number) => Promise<void>): Promise<number[]> {
  const names = Array.from({ length: n }, (_, i) => `${prefix}-${i}`);
  await Promise.all(names.map((name) => t.apps.createNamespacedReplicaSet({ namespace: ns, body: rs(name) })));
  const mine = () => [...podSeen.entries()].filter(([p]) => names.some((r) => p.startsWith(`${r}-`)));
  if (during) await during(() => mine().length);
  await pollUntil(`${n} pods of ${prefix}`, async () => mine().length >= n, { timeoutMs: 60_000, intervalMs: 50, explain: () => `${mine().length} seen` });
  // exactly one pod per ReplicaSet: nothing lost, nothing duplicated
  for (const r of names) expect(mine().filter(([p]) => p.startsWith(`${r}-`)), r).toHaveLength(1);
  return mine()
    .map(([, at]) => at)
    .sort((a, b) => a - b);
}
const spread = (times: number[]) => times[times.length - 1]! - times[0]!;

describe('runtime toggling through UlyssesConfig', () => {
  it('controller manager: periodic workers pace ReplicaSet syncs at T/N, vanilla serves them at once', async () => {
    // 5 workers = 4 periodic + 1 high-priority async: one low-priority key every 1000/4 = 250 ms
    const g1 = await set('controller-manager', 'multi-priority-periodic', { controllers: ['replicaset'], periodMs: 1000, workers: 5 });
    const st = await observed('controller-manager', g1);
    expect(st.mode).toBe('replicaset=multi-priority-periodic/1000ms,taint-eviction=vanilla');
    expect(st.conditions[0]).toMatchObject({ type: 'Applied', status: 'True' });
    expect(t.cm!.pool('replicaset').mode).toBe('multi-priority-periodic');
    const periodic = await burst('periodic', 8);
    // 8 keys, one per 250 ms: >= 7 * 250 ms nominal; allow jitter of the watch
    expect(spread(periodic)).toBeGreaterThanOrEqual(1400);

    const g2 = await set('controller-manager', 'vanilla', { controllers: ['replicaset'] });
    expect((await observed('controller-manager', g2)).mode).toBe('replicaset=vanilla,taint-eviction=vanilla');
    const vanilla = await burst('vanilla', 8);
    // 5 async workers, token bucket 20 qps / burst 30: the burst goes through at once
    expect(spread(vanilla)).toBeLessThan(1000);
    console.log(`ReplicaSet burst of 8: periodic spread ${spread(periodic).toFixed(0)} ms, vanilla spread ${spread(vanilla).toFixed(0)} ms`);
  });

  it('a mode switch in the middle of a burst loses no key', async () => {
    await observed('controller-manager', await set('controller-manager', 'multi-priority-periodic', { controllers: ['replicaset'], periodMs: 2000, workers: 3 }));
    await burst('switch', 10, async (seen) => {
      await pollUntil('first pods of the paced burst', async () => seen() >= 2, { timeoutMs: 30_000, intervalMs: 20 });
      expect(seen()).toBeLessThan(10);
      await set('controller-manager', 'vanilla', { controllers: ['replicaset'] });
    });
  });

  it('switching modes back and forth during a failover loses no work: every pod evicted from the failed node is replaced exactly once', async () => {
    const core = t.core;
    const sets = [...Array.from({ length: 6 }, (_, i) => ({ name: `fo-${i}`, replicas: 3, c: 'low' as const })), { name: 'fo-crit', replicas: 1, c: 'high' as const }];
    const total = sets.reduce((n, r) => n + r.replicas, 0);
    const onNode = async (node: string) =>
      (await core.listNamespacedPod({ namespace: ns, labelSelector: 'ulysses.io/criticality' })).items.filter((p) => p.metadata?.name?.startsWith('fo-') && p.spec?.nodeName === node && !p.metadata.deletionTimestamp);
    // everything starts on kwok-1
    await core.patchNode({ name: 'kwok-2', body: [{ op: 'replace', path: '/spec/unschedulable', value: true }] }, undefined);
    for (const r of sets) await t.apps.createNamespacedReplicaSet({ namespace: ns, body: rs(r.name, r.replicas, r.c) });
    await pollUntil(`${total} pods running on kwok-1`, async () => (await onNode('kwok-1')).filter((p) => p.status?.phase === 'Running').length === total, { timeoutMs: 60_000 });
    const before = new Set([...podSeen.keys()].filter((n) => n.startsWith('fo-')));
    expect(before.size).toBe(total);
    await core.patchNode({ name: 'kwok-2', body: [{ op: 'replace', path: '/spec/unschedulable', value: false }] }, undefined);

    // the failure, then the controller manager flipped while it evicts and recreates
    await taintNoExecute(t.kc, 'kwok-1');
    const both = ['replicaset', 'taint-eviction'];
    await set('controller-manager', 'multi-priority-periodic', { controllers: both, periodMs: 400, workers: 3 });
    await set('controller-manager', 'vanilla', { controllers: both });
    await set('controller-manager', 'multi-priority-async', { controllers: both });
    const last = await set('controller-manager', 'multi-priority-periodic', { controllers: both, periodMs: 200 });
    expect((await observed('controller-manager', last)).mode).toBe('replicaset=multi-priority-periodic/200ms,taint-eviction=multi-priority-periodic/200ms');

    await pollUntil(`${total} pods running on kwok-2, none left on kwok-1`, async () => {
      const [a, b] = await Promise.all([onNode('kwok-1'), onNode('kwok-2')]);
      return a.length === 0 && b.filter((p) => p.status?.phase === 'Running').length === total;
    }, { timeoutMs: 90_000 });
    for (const r of sets) {
      // status follows the pods (one more sync of the ReplicaSet)
      await pollUntil(`${r.name} status replicas ${r.replicas}`, async () => (await t.apps.readNamespacedReplicaSetStatus({ name: r.name, namespace: ns })).status?.replicas === r.replicas, { timeoutMs: 30_000 });
      // exactly one replacement per evicted pod: no key lost (a missing pod), none served twice (an extra one)
      const created = [...podSeen.keys()].filter((n) => n.startsWith(`${r.name}-`) && !before.has(n));
      expect(created, r.name).toHaveLength(r.replicas);
    }
    await untaint(t.kc, 'kwok-1');
    await set('controller-manager', 'vanilla', { controllers: both });
  });

  it('APF: on makes the critical namespace exempt, an invalid section is rejected and the last good one kept, off reverts', async () => {
    const path = configMapsPath(CRIT);
    const before = await apf.probe(CRIT, path);
    expect(before.priorityLevel).not.toBe(EXEMPT_PRIORITY_LEVEL);

    const g1 = await set('apf', 'on', { namespaces: [CRIT] });
    expect((await observed('apf', g1)).mode).toBe(`exempt ${CRIT}`);
    await apf.waitClassified('critical namespace exempt after `set apf on`', CRIT, path, (o) => o.priorityLevel === EXEMPT_PRIORITY_LEVEL);

    // valid for the CRD schema (an integer), invalid for the component (must be > 1 and < 100)
    const g2 = (await patchRuntimeConfig(client, { apf: { matchingPrecedence: 500 } })).metadata.generation!;
    const rejected = await observed('apf', g2);
    expect(rejected.conditions[0]).toMatchObject({ status: 'False', reason: 'InvalidConfig' });
    expect(rejected.conditions[0]!.message).toContain('spec.apf: matchingPrecedence');
    expect(rejected.mode).toBe(`exempt ${CRIT}`); // the last good configuration is still applied
    expect((await apf.probe(CRIT, path)).priorityLevel).toBe(EXEMPT_PRIORITY_LEVEL);
    const events = await apiRequest<{ items: Array<{ type: string; reason: string; message: string; involvedObject: { kind: string } }> }>(t.kc, 'GET', '/api/v1/namespaces/default/events');
    const warning = events.items.find((e) => e.involvedObject.kind === 'UlyssesConfig' && e.reason === 'InvalidConfig');
    expect(warning?.type).toBe('Warning');
    expect(warning?.message).toContain('matchingPrecedence');
    expect(events.items.some((e) => e.involvedObject.kind === 'UlyssesConfig' && e.reason === 'ConfigApplied')).toBe(true);
    const rows = statusRows(await readRuntimeConfig(client));
    expect(rows.find((r) => r.component === 'apf')?.upToDate).toBe(false);

    await patchRuntimeConfig(client, { apf: { matchingPrecedence: null } });
    const g3 = await set('apf', 'off');
    expect((await observed('apf', g3)).mode).toBe('off');
    await apf.waitClassified('critical namespace limited again after `set apf off`', CRIT, path, (o) => !!o.priorityLevel && o.priorityLevel !== EXEMPT_PRIORITY_LEVEL);
    expect(statusRows(await readRuntimeConfig(client)).every((r) => r.upToDate)).toBe(true);
  });

  it('a failed apply is tried again for the same generation until it succeeds (no edit of the object needed)', async () => {
    const generation = await set('controller-manager', 'vanilla');
    let calls = 0;
    const events: string[] = [];
    const probe = new RuntimeConfigWatcher({
      kc: t.kc,
      statusKey: 'retry-probe',
      field: 'apf',
      schema: z.unknown(),
      apply: () => {
        calls++;
        if (calls === 1) throw new Error('the first apply fails (a slow apiserver)');
        return 'applied';
      },
    });
    probe.on('rejected', () => events.push('rejected')).on('applied', () => events.push('applied'));
    try {
      await probe.start();
      const status = await observeRuntimeConfig(t.kc, 'retry-probe', generation);
      expect(status.observedGeneration).toBe(generation);
      await pollUntil('the probe applied after its failure', () => events.includes('applied'), { timeoutMs: 30_000, intervalMs: 50, explain: () => JSON.stringify(events) });
      expect(events).toEqual(['rejected', 'applied']);
      expect(calls).toBe(2);
      const now = (await readRuntimeConfig(client))!;
      expect(now.metadata.generation).toBe(generation); // nobody edited the object
      expect(now.status?.components?.['retry-probe']?.conditions?.[0]).toMatchObject({ status: 'True', reason: 'Applied' });
    } finally {
      await probe.stop();
    }
  });

  it('the apiserver rejects a mode outside the enum, naming the field', async () => {
    const err = await client.mergePatch(runtimeConfigPath(), { spec: { controllerManager: { controllers: { replicaset: { mode: 'turbo' } } } } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).statusCode).toBe(422);
    expect((err as ApiError).message).toContain('spec.controllerManager.controllers.replicaset.mode');
  });
});
