/**
 * The reservation ValidatingAdmissionPolicy (manifests/base/scheduler-extender/reservation-policy.yaml)
 * on the testbed's REAL kube-apiserver: a user (here the testbed admin) can neither create a pod
 * with a reservation annotation nor add, change or remove one; the extender's ServiceAccount
 * (impersonated, with the RBAC of rbac.yaml) can, and the extender's bind through it records the
 * reservation and binds the pod; a bogus reservation the extender itself once wrote (a slot beyond
 * the network) does not block the next TDMA pod.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { KubeClient } from '../../core/kube.ts';
import { asExtenderClient, createExtenderManifests, refusal, unscheduledPod } from '../extender-admission.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import type { ExtenderFilterResult } from '../../scheduler-plugins/extender/wire.ts';

const ns = 'sched-vap';
const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 1, namespace: ns });

const pod = (name: string, annotations: Record<string, string> = {}) => unscheduledPod(ns, name, annotations);

let admin: KubeClient;
let asExtender: KubeClient;
let extender: ExtenderServer;
const podPath = (name: string) => `/api/v1/namespaces/${ns}/pods/${name}`;

beforeAll(async () => {
  admin = new KubeClient(t.kc);
  asExtender = asExtenderClient(t.kc);
  await ensureNamespace(t.core, 'ulysses-system');
  await createExtenderManifests(admin, ['rbac.yaml', 'reservation-policy.yaml']);
  await admin.mergePatch('/api/v1/nodes/kwok-1', { metadata: { labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
  // the policy takes effect once the apiserver has compiled it: probe until a reservation is refused
  let probe = 0;
  await pollUntil(
    'the reservation policy refuses a probe',
    async () => {
      const name = `probe-${probe++}`;
      const r = await refusal(admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod(name, { 'ulysses.io/tdma-slots': '[0]' }) }));
      if (r === undefined) await admin.request('DELETE', podPath(name));
      return r;
    },
    { timeoutMs: 30_000, intervalMs: 500 },
  );
  extender = new ExtenderServer({
    config: { listen: { host: '127.0.0.1', port: 0 }, tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } },
    kubeconfig: t.kc,
    client: asExtender,
  });
  await extender.start();
}, 120_000);
afterAll(async () => {
  await extender?.stop();
});

describe('reservation annotations: only the extender writes them', () => {
  it('a user can neither create a pod with one nor add, change or remove one; the extender can', async () => {
    const created = await refusal(admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('squat', { 'ulysses.io/tdma-slots': '[0,1]', 'ulysses.io/reserved-node': 'kwok-1' }) }));
    expect(created).toContain('are written only by the Ulysses scheduler extender');
    expect(created).toContain('may not set, change or remove them');
    // the demand is the user's to write; other annotations too
    await admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('p1', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' }) });
    await admin.mergePatch(podPath('p1'), { metadata: { annotations: { 'example.com/note': 'fine' } } });
    expect(await refusal(admin.mergePatch(podPath('p1'), { metadata: { annotations: { 'ulysses.io/rt-cores': '[0]' } } }))).toContain('written only by the Ulysses scheduler extender');

    // the extender's bind (as its ServiceAccount) records the reservation and binds
    await pollUntil('the extender sees p1', () => extender.state.pod(`${ns}/p1`), { timeoutMs: 30_000 });
    const p1 = await admin.get<V1Pod>(podPath('p1'));
    const bound = await extender.bind({ PodName: 'p1', PodNamespace: ns, PodUID: p1.metadata!.uid!, Node: 'kwok-1' });
    expect(bound.Error).toBe('');
    const after = await admin.get<V1Pod>(podPath('p1'));
    expect(after.spec?.nodeName).toBe('kwok-1');
    expect(after.metadata?.annotations).toMatchObject({ 'ulysses.io/reserved-node': 'kwok-1', 'ulysses.io/tdma-slots': '[0,1]' });
    // a user may not release or move it
    expect(await refusal(admin.mergePatch(podPath('p1'), { metadata: { annotations: { 'ulysses.io/tdma-slots': '[3,4]' } } }))).toContain('written only by');
    expect(await refusal(admin.mergePatch(podPath('p1'), { metadata: { annotations: { 'ulysses.io/tdma-slots': null } } }))).toContain('written only by');
  });

  it('a user cannot set one through a Binding (its annotations are copied onto the pod); a plain Binding still binds', async () => {
    await admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('via-binding') });
    await admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('plain-binding') });
    const binding = (name: string, annotations?: Record<string, string>) => ({ apiVersion: 'v1', kind: 'Binding', metadata: { name, ...(annotations ? { annotations } : {}) }, target: { apiVersion: 'v1', kind: 'Node', name: 'kwok-1' } });
    const refused = await refusal(admin.request('POST', `${podPath('via-binding')}/binding`, { body: binding('via-binding', { 'ulysses.io/tdma-slots': '[0,1,2,3,4]' }) }));
    expect(refused).toContain('are written only by the Ulysses scheduler extender');
    const stillUnbound = await admin.get<V1Pod>(podPath('via-binding'));
    expect(stillUnbound.spec?.nodeName).toBeUndefined();
    expect(stillUnbound.metadata?.annotations?.['ulysses.io/tdma-slots']).toBeUndefined();
    await admin.request('POST', `${podPath('plain-binding')}/binding`, { body: binding('plain-binding') });
    expect((await admin.get<V1Pod>(podPath('plain-binding'))).spec?.nodeName).toBe('kwok-1');
  });

  it('a bogus reservation already stored (a slot beyond the network) does not block the next TDMA pod', async () => {
    // only the extender's identity can write it (as an old extender, or before the network shrank, would have)
    await admin.request('POST', `/api/v1/namespaces/${ns}/pods`, { body: pod('bogus', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' }) });
    await asExtender.mergePatch(podPath('bogus'), { metadata: { annotations: { 'ulysses.io/tdma-slots': '[7]', 'ulysses.io/reserved-node': 'kwok-1' } } });
    await pollUntil('the extender sees the bogus reservation', () => extender.state.pod(`${ns}/bogus`)?.tdmaSlots?.[0] === 7, { timeoutMs: 30_000 });
    const res = await extender.app.inject({
      method: 'POST',
      url: '/filter',
      payload: { Pod: pod('next', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' }), NodeNames: ['kwok-1'] },
    });
    const r = res.json() as ExtenderFilterResult;
    expect(r.NodeNames).toEqual(['kwok-1']);
    expect(r.Error).toBe('');
    // the pod holding it is told, with a Warning Event naming the annotation and why
    const ignored = async () => (await t.core.listNamespacedEvent({ namespace: ns, fieldSelector: 'involvedObject.name=bogus,reason=ReservationIgnored' })).items;
    const [event] = await pollUntil('ReservationIgnored event on the bogus pod', async () => ((await ignored()).length ? ignored() : undefined), { timeoutMs: 30_000 });
    expect(event!.type).toBe('Warning');
    expect(event!.message).toContain('ulysses.io/tdma-slots=[7]');
    expect(event!.message).toContain('slot 7 is not in [0, 5) of network rtnet0: ignored');
    expect(event!.involvedObject.uid).toBe((await admin.get<V1Pod>(podPath('bogus'))).metadata!.uid);
    // other pods placed against it and a relist of the pods: no further Event
    for (const name of ['next-2', 'next-3']) {
      await extender.app.inject({ method: 'POST', url: '/filter', payload: { Pod: pod(name, { 'ulysses.io/tdma': '{"network":"rtnet0","slots":1}' }), NodeNames: ['kwok-1'] } });
    }
    await extender.rebuild();
    await extender.app.inject({ method: 'POST', url: '/filter', payload: { Pod: pod('next-4', { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' }), NodeNames: ['kwok-1'] } });
    await extender.flushEvents();
    const after = await ignored();
    expect(after).toHaveLength(1);
    expect(after[0]!.count ?? 1).toBe(1);
  });
});
