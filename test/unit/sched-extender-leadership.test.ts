/**
 * High availability of the scheduler extender, the pure parts: the serving state machine
 * (leadership.ts LeadershipGate: standby / rebuilding / leading / lost, the renew deadline), the
 * server's answers through it (503 with the reason on every verb, /readyz, /healthz), a bind that
 * loses the gate midway writing nothing more, the rebuild from a fresh pod list
 * (ClusterState.resyncPods), and the elector's renew deadline with a hanging API (fake client).
 * The real takeover under kube-scheduler is test/integration/scheduler-extender-ha.int.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { LeadershipGate, type LeaseView } from '../../scheduler-plugins/extender/leadership.ts';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { ClusterState } from '../../scheduler-plugins/extender/state.ts';
import { LeaderElector } from '../../core/leader-election.ts';
import type { KubeClient } from '../../core/kube.ts';
import { ApiError } from '../../core/kube.ts';
import { silentLogger } from '../../core/logging.ts';

function lease(o: Partial<LeaseView> = {}): LeaseView & { isLeader: boolean; renewedAt: number; leader: string } {
  return { isLeader: false, renewedAt: 0, renewDeadlineMs: 10_000, leader: '', ...o };
}

describe('LeadershipGate: only a leader with a fresh Lease and a rebuilt state serves', () => {
  it('standby -> rebuilding -> leading -> past the renew deadline -> renewed -> lost (final)', () => {
    let now = 1_000_000;
    const l = lease({ leader: 'other-replica' });
    const g = new LeadershipGate(l, 'Lease ulysses-system/ulysses-scheduler-extender', () => now);
    expect(g.phase).toBe('standby');
    const s0 = g.check();
    expect(s0.ready).toBe(false);
    expect(!s0.ready && s0.reason).toMatch(/standby replica: Lease ulysses-system\/ulysses-scheduler-extender is held by "other-replica"/);

    // acquired: not serving until the state is rebuilt
    l.isLeader = true;
    l.renewedAt = now;
    l.leader = 'me';
    const term = g.startLeading();
    expect(g.phase).toBe('rebuilding');
    now += 40;
    const s1 = g.check();
    expect(!s1.ready && s1.reason).toMatch(/leader since 40 ms, rebuilding the reservations/);
    expect(g.rebuilt(term)).toBe(true);
    expect(g.check()).toEqual({ ready: true });

    // renewals stop: serving until just before the deadline, not at it
    now = l.renewedAt + 9_999;
    expect(g.check().ready).toBe(true);
    now = l.renewedAt + 10_000;
    const s2 = g.check();
    expect(!s2.ready && s2.reason).toMatch(/last renewed 10000 ms ago, past the renew deadline of 10000 ms: not serving/);
    // a renewal within the lease (the elector has not given up yet) opens it again
    l.renewedAt = now;
    expect(g.check().ready).toBe(true);

    // the elector reports the loss: final, a later term cannot reopen it
    l.isLeader = false;
    l.renewedAt = 0;
    g.stopLeading('lost');
    const s3 = g.check();
    expect(!s3.ready && s3.reason).toMatch(/lost Lease .* not serving/);
    g.startLeading();
    expect(g.phase).toBe('lost');
    expect(g.check().ready).toBe(false);
  });

  it('a rebuild that finishes after leadership ended (or for an earlier term) opens nothing', () => {
    const l = lease({ isLeader: true, renewedAt: Date.now() });
    const g = new LeadershipGate(l, 'Lease x/y');
    const t1 = g.startLeading();
    g.stopLeading('stopped');
    expect(g.rebuilt(t1)).toBe(false);
    expect(g.phase).toBe('stopped');
    const s = g.check();
    expect(!s.ready && s.reason).toMatch(/stepped down from Lease x\/y/);

    const g2 = new LeadershipGate(l, 'Lease x/y');
    const a = g2.startLeading();
    const b = g2.startLeading(); // a second term without a stop in between: only its own rebuild counts
    expect(g2.rebuilt(a)).toBe(false);
    expect(g2.check().ready).toBe(false);
    expect(g2.rebuilt(b)).toBe(true);
    expect(g2.check().ready).toBe(true);
  });

  it('leading but the elector no longer holds the Lease: not serving', () => {
    const l = lease({ isLeader: true, renewedAt: Date.now() });
    const g = new LeadershipGate(l, 'Lease x/y');
    g.rebuilt(g.startLeading());
    expect(g.check().ready).toBe(true);
    l.isLeader = false;
    const s = g.check();
    expect(!s.ready && s.reason).toMatch(/no longer holds Lease x\/y/);
  });
});

let seq = 0;
const tdmaNode = (name: string): V1Node => ({ metadata: { name, resourceVersion: String(++seq), labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
const tdmaPod = (name: string, extra: Record<string, string> = {}, rv = String(++seq)): V1Pod => ({
  metadata: { name, namespace: 'ns', uid: `uid-${name}`, resourceVersion: rv, annotations: { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}', ...extra } },
  spec: { containers: [] },
});
const filterBody = (p: V1Pod) => ({ Pod: p, NodeNames: ['n1'] });

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});

/** A gate whose answer the test sets. */
function switchGate() {
  const g = { open: false, check: () => (g.open ? ({ ready: true } as const) : ({ ready: false, reason: 'standby replica: test' } as const)) };
  return g;
}

describe('ExtenderServer behind a gate', () => {
  it('closed: every verb is HTTP 503 with the reason, /readyz 503, /healthz 200; open: served', async () => {
    const gate = switchGate();
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), gate });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const p = tdmaPod('a');
    for (const verb of ['filter', 'prioritize', 'bind']) {
      const body = verb === 'bind' ? { PodName: 'a', PodNamespace: 'ns', PodUID: 'uid-a', Node: 'n1' } : filterBody(p);
      const r = await s.app.inject({ method: 'POST', url: `/${verb}`, payload: body });
      expect(r.statusCode, verb).toBe(503);
      expect(r.json()).toEqual({ error: 'ulysses: scheduler extender not serving: standby replica: test' });
    }
    expect((await s.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    expect((await s.app.inject({ method: 'GET', url: '/readyz' })).body).toBe('standby replica: test');
    expect((await s.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);

    gate.open = true;
    const f = await s.app.inject({ method: 'POST', url: '/filter', payload: filterBody(p) });
    expect(f.statusCode).toBe(200);
    expect(f.json().NodeNames).toEqual(['n1']);
    expect((await s.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    expect((await s.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
  });

  it('without a gate (leader election off) it serves and /readyz is 200', async () => {
    const s = new ExtenderServer({ log: silentLogger() });
    servers.push(s);
    expect((await s.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('a bind whose gate closes while it waits for the pod: no reservation PATCH, no binding', async () => {
    const gate = switchGate();
    gate.open = true;
    const calls: string[] = [];
    let answerGet!: (p: V1Pod) => void;
    const client: BindClient = {
      request: (<T>(method: string, path: string) => {
        calls.push(`${method} ${path}`);
        if (method === 'GET') return new Promise<T>((r) => (answerGet = r as (p: V1Pod) => void));
        return Promise.reject(new Error('must not be called'));
      }) as BindClient['request'],
    };
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), gate, client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const pending = s.bind({ PodName: 'b', PodNamespace: 'ns', PodUID: 'uid-b', Node: 'n1' });
    await new Promise((r) => setImmediate(r));
    gate.open = false; // leadership lost while the GET is on its way
    answerGet(tdmaPod('b'));
    const r = await pending;
    expect(r.Error).toMatch(/scheduler extender stopped serving: standby replica: test/);
    expect(calls).toEqual(['GET /api/v1/namespaces/ns/pods/b']);
    expect(s.state.takenSlots('rtnet0', 'none')).toEqual([]);
  });

  it('rebuild(): a consistent list of the pods brings in reservations the watch has not delivered, drops pods gone before the list', async () => {
    const state = new ClusterState();
    state.upsertNode(tdmaNode('n1'));
    // the informer knows: gone (deleted since), kept (a version newer than the list), stale (an older version of listed)
    state.upsertPod(tdmaPod('gone', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[4]' }, '10'));
    state.upsertPod(tdmaPod('stale', {}, '11'));
    state.upsertPod(tdmaPod('newer', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[2,3]' }, '60'));
    const listed = [tdmaPod('stale', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[0,1]' }, '40')];
    const paths: string[] = [];
    const client: BindClient = {
      request: (<T>(_m: string, path: string, opts: { query?: Record<string, unknown> } = {}) => {
        paths.push(`${path}?${new URLSearchParams(opts.query as Record<string, string>).toString()}`);
        return Promise.resolve({ metadata: { resourceVersion: '50' }, items: listed } as T);
      }) as BindClient['request'],
    };
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), state, client });
    servers.push(s);
    const r = await s.rebuild();
    expect(r).toMatchObject({ listed: 1, removed: 1 });
    expect(paths[0]).toContain('fieldSelector=status.phase%21%3DSucceeded%2Cstatus.phase%21%3DFailed');
    expect(state.takenSlots('rtnet0', 'none').sort()).toEqual([0, 1, 2, 3]);
    // a late watch event of a version before the list changes nothing
    state.upsertPod(tdmaPod('stale', {}, '30'));
    expect(state.takenSlots('rtnet0', 'none').sort()).toEqual([0, 1, 2, 3]);
    // and the removed pod never comes back
    state.upsertPod(tdmaPod('gone', { 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[4]' }, '10'));
    expect(state.pod('ns/gone')).toBeUndefined();
  });
});

describe('LeaderElector renew deadline', () => {
  it('a renewal that hangs: every Lease request gives up by the deadline, renewedAt stops, leadership is lost', async () => {
    const timeouts: number[] = [];
    let lease: Record<string, unknown> | undefined;
    let hang = false;
    const answer = <T>(v: unknown) => Promise.resolve(JSON.parse(JSON.stringify(v)) as T);
    const client = {
      request: <T>(method: string, _path: string, opts: { body?: unknown; timeoutMs?: number } = {}): Promise<T> => {
        timeouts.push(opts.timeoutMs ?? Infinity);
        if (hang) return new Promise<T>((_, reject) => setTimeout(() => reject(new Error('timeout')), opts.timeoutMs ?? 60_000));
        if (method === 'GET') return lease ? answer<T>(lease) : Promise.reject(new ApiError('not found', 404));
        lease = { ...(opts.body as object), metadata: { name: 'l', namespace: 'ns', resourceVersion: String(++seq) } };
        return answer<T>(lease);
      },
    } as unknown as KubeClient;
    const events: string[] = [];
    let renewedWhenLeading = 0;
    const e = new LeaderElector({
      client,
      namespace: 'ns',
      name: 'l',
      identity: 'me',
      leaseDurationSeconds: 0.6,
      renewDeadlineSeconds: 0.4,
      retryPeriodSeconds: 0.1,
      log: silentLogger(),
      onStartedLeading: () => {
        events.push('started');
        renewedWhenLeading = e.renewedAt;
        hang = true;
      },
      onStoppedLeading: (reason) => void events.push(`stopped:${reason}`),
    });
    await e.run();
    expect(events).toEqual(['started', 'stopped:lost']);
    expect(renewedWhenLeading).toBeGreaterThan(0);
    expect(e.renewedAt).toBe(0);
    expect(e.renewDeadlineMs).toBe(400);
    expect(Math.max(...timeouts)).toBeLessThanOrEqual(400);
  });
});
