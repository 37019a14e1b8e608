/**
 * Requeue after a release of capacity (scheduler-plugins/extender/requeue.ts): which refused pods
 * get the merge patch of ulysses.io/capacity-released, when, and which do not. The filter is the
 * server's (fastify inject), the state fed by hand, the API client a recorder; the real
 * kube-scheduler's side is in test/integration/scheduler-extender.int.test.ts.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ApiError } from '../../core/kube.ts';
import { silentLogger } from '../../core/logging.ts';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { REQUEUE_ANNOTATION } from '../../scheduler-plugins/extender/requeue.ts';
import { ClusterState } from '../../scheduler-plugins/extender/state.ts';
import { containersFor, filter } from './extender-calls.ts';

let rv = 0;
const node = (name: string, labels: Record<string, string> = {}): V1Node => ({ metadata: { name, labels, annotations: {}, resourceVersion: String(++rv) } });
function pod(name: string, annotations: Record<string, string> = {}, nodeName?: string): V1Pod {
  return {
    metadata: { name, namespace: 'ns', uid: `uid-${name}`, annotations, resourceVersion: String(++rv) },
    spec: { containers: containersFor(annotations), ...(nodeName ? { nodeName } : {}) },
    status: { phase: nodeName ? 'Running' : 'Pending' },
  };
}
const tdma = (slots: number) => ({ 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots }) });
/** A pod holding all 4 slots of rtnet0 on n1. */
const holder = (name = 'holder') => pod(name, { ...tdma(4), 'ulysses.io/tdma-slots': '[0,1,2,3]' }, 'n1');

const DELAY = 250;
interface Call {
  method: string;
  path: string;
  body: { metadata: { uid: string; annotations: Record<string, string> } };
}

let calls: Call[];
let answer: (c: Call) => Promise<unknown>;
const servers: ExtenderServer[] = [];

beforeEach(() => {
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
  calls = [];
  answer = async () => ({});
});
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
  vi.useRealTimers();
});

function extender(state = new ClusterState()) {
  const client: BindClient = {
    request: (async (method: string, path: string, opts: { body?: unknown }) => {
      const c = { method, path, body: opts.body } as Call;
      calls.push(c);
      return answer(c);
    }) as BindClient['request'],
  };
  const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 4000, slotUs: 1000 } }, requeueDelayMs: DELAY }, log: silentLogger(), state, client });
  servers.push(s);
  state.upsertNode(node('n1', { 'ulysses.io/tdma-network': 'rtnet0' }));
  state.upsertNode(node('n2', { 'ulysses.io/tdma-network': 'rtnet0' }));
  return s;
}

/** An extender whose rtnet0 is full: all its slots held by one pod. */
function withHolder() {
  const s = extender();
  const h = holder();
  s.state.upsertPod(h);
  return { s, h };
}

async function refused(s: ExtenderServer, p: V1Pod) {
  const r = await filter(s, p, ['n1', 'n2']);
  expect(r.NodeNames).toEqual([]);
}

const patched = () => calls.filter((c) => c.method === 'PATCH').map((c) => c.path);

describe('requeue after a release of capacity', () => {
  it('a pod refused before the release gets one patch after the delay, with its UID as precondition', async () => {
    const { s, h } = withHolder();
    const waiting = pod('waiting', tdma(1));
    await refused(s, waiting);
    s.state.deletePod(h);
    await vi.advanceTimersByTimeAsync(DELAY - 1);
    expect(calls).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(calls).toEqual([
      {
        method: 'PATCH',
        path: '/api/v1/namespaces/ns/pods/waiting',
        body: { metadata: { uid: 'uid-waiting', annotations: { [REQUEUE_ANNOTATION]: new Date(Date.now()).toISOString() } } },
      },
    ]);
    // once: a second release finds nothing left to wake
    s.state.upsertNode(node('n3'));
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(patched()).toEqual(['/api/v1/namespaces/ns/pods/waiting']);
  });

  it('no patch when the scheduler asked again after the release (the usual order), whatever the answer', async () => {
    const { s, h } = withHolder();
    const fits = pod('fits', tdma(1));
    const still = pod('still', tdma(4));
    await refused(s, fits);
    await refused(s, still);
    s.state.deletePod(h);
    // the scheduler's own retries on the deletion event: one now fits, one is refused on the new view
    expect((await filter(s, fits, ['n1', 'n2'])).NodeNames).toEqual(['n1', 'n2']);
    s.state.upsertPod(pod('blocker', { ...tdma(1), 'ulysses.io/tdma-slots': '[0]' }, 'n2'));
    await refused(s, still);
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(calls).toEqual([]);
  });

  it('a node added or changed, and a configuration change, are releases; a pod without a reservation gone, a status update of a node are not', async () => {
    const { s, h } = withHolder();
    const waiting = pod('waiting', tdma(1));
    await refused(s, waiting);
    // neither frees anything the analyses count
    s.state.upsertPod(pod('plain', {}, 'n2'));
    s.state.deletePod(pod('plain', {}, 'n2'));
    s.state.upsertNode({ ...node('n1', { 'ulysses.io/tdma-network': 'rtnet0' }), status: { conditions: [{ type: 'Ready', status: 'True' }] } });
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(calls).toEqual([]);
    s.state.upsertNode(node('n3', { 'ulysses.io/tdma-network': 'rtnet0' }));
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(patched()).toEqual(['/api/v1/namespaces/ns/pods/waiting']);
    await refused(s, waiting);
    s.setConfig({ tdmaNetworks: { rtnet0: { cycleUs: 4000, slotUs: 1000 } }, requeueDelayMs: DELAY });
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(patched()).toEqual(['/api/v1/namespaces/ns/pods/waiting', '/api/v1/namespaces/ns/pods/waiting']);
  });

  it('verdicts computed before a release and recorded after its sweep (the analysis thread) are requeued', async () => {
    const s = extender();
    const epoch = s.requeuer.epoch;
    s.state.upsertNode(node('n3'));
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(calls).toEqual([]);
    s.requeuer.refusedEverywhere('uid-slow', 'ns', 'slow', epoch);
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(patched()).toEqual(['/api/v1/namespaces/ns/pods/slow']);
  });

  it('a pod bound meanwhile, deleted, or recreated under its name is not woken, and nothing is lost past the per-sweep bound', async () => {
    const { s, h } = withHolder();
    const names = Array.from({ length: 70 }, (_, i) => `w${i}`);
    for (const n of names) await refused(s, pod(n, tdma(1)));
    // w0 was bound meanwhile (another replica's answer, or the informer is ahead)
    s.state.upsertPod(pod('w0', tdma(1), 'n2'));
    answer = async (c) => {
      if (c.path.endsWith('/w1')) throw new ApiError('PATCH: 404 pods "w1" not found', 404, 'NotFound');
      if (c.path.endsWith('/w2')) throw new ApiError('PATCH: 409 Precondition failed: UID in precondition', 409, 'Conflict');
      return {};
    };
    s.state.deletePod(h);
    await vi.advanceTimersByTimeAsync(DELAY);
    // w0..w63 are due in the first sweep; w0 holds capacity now (no patch)
    expect(patched()).toHaveLength(63);
    await vi.advanceTimersByTimeAsync(DELAY);
    expect(patched().map((p) => p.split('/').pop())).toEqual(names.slice(1));
    expect(s.requeuer.size).toBe(0);
  });
});
