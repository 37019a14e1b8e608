/**
 * Bind finishes or gives up inside the scheduler's httpTimeout (config httpTimeoutMs) and releases
 * its locks, whatever the API does: a stalled fake API client (pure logic; the real apiserver path
 * is the integration test's). A PATCH whose outcome is unknown keeps its reservation assumed, so no
 * other bind takes the same slots; a PATCH the apiserver refused frees them again. The pod comes
 * from the informer cache only: a miss waits for the watch, never GETs the pod.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { DeadlineExceeded, ExtenderServer, KeyedMutex, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { ApiError } from '../../core/kube.ts';
import { silentLogger } from '../../core/logging.ts';

let seq = 0;
const node = (name: string): V1Node => ({ metadata: { name, resourceVersion: String(++seq), labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
const pod = (name: string): V1Pod => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: String(++seq), annotations: { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' } },
  spec: { containers: [{ name: 'c' }] },
});

type Call = { method: string; path: string; body?: unknown; timeoutMs?: number };
/** A fake API: each call is recorded and answered by `answer` (a promise that may never settle). */
function fakeClient(answer: (c: Call) => Promise<unknown>): BindClient & { calls: Call[] } {
  const calls: Call[] = [];
  return {
    calls,
    request: (<T>(method: string, path: string, opts: { body?: unknown; timeoutMs?: number } = {}) => {
      const c = { method, path, body: opts.body, timeoutMs: opts.timeoutMs };
      calls.push(c);
      return answer(c) as Promise<T>;
    }) as BindClient['request'],
  };
}
const never = () => new Promise<never>(() => {});
/** The PATCH answer: the pod with the patch's annotation values applied. */
function patched(p: V1Pod, body: unknown): V1Pod {
  const ann = { ...p.metadata!.annotations };
  for (const op of body as Array<{ op: string; path: string; value?: string }>) {
    if (op.op === 'add' && op.path.startsWith('/metadata/annotations/')) ann[op.path.slice('/metadata/annotations/'.length).replace(/~1/g, '/')] = op.value!;
  }
  return { ...p, metadata: { ...p.metadata, annotations: ann, resourceVersion: String(++seq) } };
}
const slotsOf = (c: Call | undefined) => (c?.body as Array<{ path: string; value?: string }> | undefined)?.find((o) => o.path.endsWith('tdma-slots'))?.value;

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});
function extender(client: BindClient) {
  const s = new ExtenderServer({ config: { httpTimeoutMs: 300, tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), client });
  servers.push(s);
  s.state.upsertNode(node('n1'));
  return s;
}
const bindArgs = (name: string) => ({ PodName: name, PodNamespace: 'ns', PodUID: `uid-${name}`, Node: 'n1' });

describe('bind from the informer cache, no GET', () => {
  it('a pod the cache does not have yet: bind sends nothing until the watch delivers it, then reserves and binds it', async () => {
    const late = pod('late');
    const client = fakeClient((c) => Promise.resolve(c.method === 'PATCH' ? patched(late, c.body) : {}));
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), client });
    servers.push(s);
    s.state.upsertNode(node('n1'));
    const pending = s.bind(bindArgs('late'));
    await new Promise((r) => setImmediate(r));
    expect(client.calls).toEqual([]);
    s.state.upsertPod(late); // the informer's add event
    expect((await pending).Error).toBe('');
    expect(client.calls.map((c) => `${c.method} ${c.path}`)).toEqual(['PATCH /api/v1/namespaces/ns/pods/late', 'POST /api/v1/namespaces/ns/pods/late/binding']);
    expect(slotsOf(client.calls[0])).toBe('[0,1]');
  });

  it('a pod the cache never gets: an Error within the deadline naming the cache, no request at all (kube-scheduler retries the pod)', async () => {
    const client = fakeClient(() => Promise.reject(new Error('must not be called')));
    const s = extender(client);
    const r = await s.bind(bindArgs('lost'));
    expect(r.Error).toMatch(/^ulysses: bind ns\/lost: not in the extender's pod cache as uid uid-lost after \d+ ms: nothing written, kube-scheduler retries the pod$/);
    expect(client.calls).toEqual([]);
    const metrics = await (await s.app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(metrics).toMatch(/ulysses_extender_binds_total\{result="error"\} [1-9]/);
  });

  it('the cache has an older pod of the name (recreated): bind waits for the scheduler\'s UID, never reserves for the old one', async () => {
    const old = pod('again');
    const fresh: V1Pod = { ...pod('again'), metadata: { ...pod('again').metadata, uid: 'uid-again-2' } };
    const client = fakeClient((c) => Promise.resolve(c.method === 'PATCH' ? patched(fresh, c.body) : {}));
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), client });
    servers.push(s);
    s.state.upsertNode(node('n1'));
    s.state.upsertPod(old);
    const pending = s.bind({ ...bindArgs('again'), PodUID: 'uid-again-2' });
    await new Promise((r) => setImmediate(r));
    expect(client.calls).toEqual([]);
    s.state.deletePod(old);
    s.state.upsertPod(fresh);
    expect((await pending).Error).toBe('');
    const ops = client.calls[0]!.body as Array<{ op: string; path: string; value?: string }>;
    expect(ops[0]).toEqual({ op: 'test', path: '/metadata/uid', value: 'uid-again-2' });
    // the binding names the new pod
    expect((client.calls[1]!.body as { metadata: { uid: string } }).metadata.uid).toBe('uid-again-2');
  });

  it('a pod whose delete the cache has seen: refused at once, nothing sent', async () => {
    const client = fakeClient(() => Promise.reject(new Error('must not be called')));
    const s = extender(client);
    const gone = pod('gone');
    s.state.upsertPod(gone);
    s.state.deletePod(gone);
    expect((await s.bind(bindArgs('gone'))).Error).toBe('ulysses: bind ns/gone: pod uid-gone was deleted');
    expect(client.calls).toEqual([]);
  });
});

describe('bind within the scheduler httpTimeout', () => {

  it('a PATCH that never answers: bind gives up, its locks are released, its slots stay assumed (the next bind gets others)', async () => {
    const stalled = pod('stalled');
    const next = pod('next');
    const client = fakeClient((c) => {
      if (c.method === 'PATCH' && c.path.endsWith('/stalled')) return never();
      if (c.method === 'PATCH') return Promise.resolve(patched(next, c.body));
      return Promise.resolve({});
    });
    const s = extender(client);
    s.state.upsertPod(stalled);
    s.state.upsertPod(next);
    const first = await s.bind(bindArgs('stalled'));
    expect(first.Error).toMatch(/gave up after \d+ ms \(httpTimeoutMs 300\): PATCH \/api\/v1\/namespaces\/ns\/pods\/stalled did not finish/);
    expect(s.state.takenSlots('rtnet0', 'nobody')).toEqual([0, 1]); // assumed: the PATCH may still land
    // the node and network locks are free: the next bind runs, on other slots, and binds
    const second = await s.bind(bindArgs('next'));
    expect(second.Error).toBe('');
    expect(slotsOf(client.calls.find((c) => c.method === 'PATCH' && c.path.endsWith('/next')))).toBe('[2,3]');
    expect(client.calls.filter((c) => c.method === 'POST').map((c) => c.path)).toEqual(['/api/v1/namespaces/ns/pods/next/binding']);
  });

  it('a PATCH the apiserver refuses restores the record: its slots are free for the next bind', async () => {
    const refused = pod('refused');
    const next = pod('next');
    const client = fakeClient((c) => {
      if (c.method === 'PATCH' && c.path.endsWith('/refused')) return Promise.reject(new ApiError('PATCH: 422 the test failed', 422));
      if (c.method === 'PATCH') return Promise.resolve(patched(next, c.body));
      return Promise.resolve({});
    });
    const s = extender(client);
    s.state.upsertPod(refused);
    s.state.upsertPod(next);
    expect((await s.bind(bindArgs('refused'))).Error).toContain('422 the test failed');
    expect(s.state.takenSlots('rtnet0', 'nobody')).toEqual([]);
    expect((await s.bind(bindArgs('next'))).Error).toBe('');
    expect(slotsOf(client.calls.find((c) => c.method === 'PATCH' && c.path.endsWith('/next')))).toBe('[0,1]');
  });

  it('a binding POST that never answers: bind gives up, the reservation release runs in the background', async () => {
    const p = pod('slow');
    const client = fakeClient((c) => {
      if (c.method === 'PATCH') return Promise.resolve(patched(p, c.body));
      if (c.method === 'POST') return never();
      return never(); // the release's GET: still no answer, bind does not wait for it
    });
    const s = extender(client);
    s.state.upsertPod(p);
    const r = await s.bind(bindArgs('slow'));
    expect(r.Error).toMatch(/gave up after \d+ ms \(httpTimeoutMs 300\): POST \/api\/v1\/namespaces\/ns\/pods\/slow\/binding did not finish/);
    expect(client.calls.map((c) => c.method)).toEqual(['PATCH', 'POST', 'GET']);
  });

  it('KeyedMutex: waiting for a key gives up at the deadline without breaking the order of the others', async () => {
    const m = new KeyedMutex();
    let releaseFirst!: () => void;
    const order: string[] = [];
    const first = m.run(['a'], () => new Promise<void>((r) => (releaseFirst = () => (order.push('first'), r()))));
    await expect(m.run(['a', 'b'], async () => order.push('gave-up'), 20)).rejects.toBeInstanceOf(DeadlineExceeded);
    // the one that gave up holds nothing: b is free, a is still first's
    await m.run(['b'], async () => order.push('b'));
    const third = m.run(['a'], async () => order.push('third'));
    releaseFirst();
    await Promise.all([first, third]);
    expect(order).toEqual(['b', 'first', 'third']);
  });
});
