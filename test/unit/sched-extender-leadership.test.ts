/**
 * High availability of the scheduler extender, the pure parts: the serving state machine
 * (leadership.ts LeadershipGate: standby / rebuilding / leading / lost, the renew deadline), the
 * server's answers through it (503 with the reason on every verb, /readyz, /healthz), a bind that
 * loses the gate midway writing nothing more, the rebuild from a fresh pod list
 * (ClusterState.resyncPods), and the elector's renew deadline with a hanging API (fake client).
 * The reservation epoch (the Lease's leaseTransitions as a fencing token): on every reservation
 * PATCH, confirmed by a dry run before a new leader serves, an admission refusal an Error with
 * nothing left behind, and the policy file consistent with the code.
 * The real takeover under kube-scheduler is test/integration/scheduler-extender-ha.int.test.ts; the
 * epoch against the real apiserver is test/integration/scheduler-extender-fence.int.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { APISERVER_ENDPOINTS_PATH, APISERVER_SLICE_PATH } from '../../scheduler-plugins/extender/apiservers.ts';
import { ExtenderLeadership, LeadershipGate, RESERVATION_EPOCH_ANNOTATION, type LeaseView } from '../../scheduler-plugins/extender/leadership.ts';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { ClusterState } from '../../scheduler-plugins/extender/state.ts';
import { LeaderElector } from '../../core/leader-election.ts';
import type { KubeClient } from '../../core/kube.ts';
import { ApiError } from '../../core/kube.ts';
import { silentLogger } from '../../core/logging.ts';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import type { Socket } from 'node:net';
import { parseAllDocuments } from 'yaml';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { reservationRequest, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import { testLeadership } from '../fast-lease.ts';

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
    // ready, for what is left before the renew deadline
    expect(g.check()).toEqual({ ready: true, validForMs: 9960, renewDeadlineMs: 10_000 });

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
  spec: { containers: [{ name: 'c', resources: reservationRequest() }] },
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

  it('over a kept-alive connection: a verb answered while the gate is closed ends the connection (the next call reconnects, to the leader); while open it stays', async () => {
    const gate = switchGate();
    const s = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), gate });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const { port } = await s.start();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    /** One POST on the agent: status, Connection header, and the socket it used (and whether that socket closed after). */
    const post = (verb: string, body: unknown) =>
      new Promise<{ status: number; connection: string | undefined; socket: Socket; closed: Promise<void> }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port, path: `/${verb}`, method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
          const socket = res.socket;
          const closed = new Promise<void>((r) => socket.once('close', () => r()));
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, socket, closed }));
        });
        req.on('error', reject);
        req.end(JSON.stringify(body));
      });
    try {
      gate.open = true;
      const first = await post('filter', filterBody(tdmaPod('a')));
      expect([first.status, first.connection]).toEqual([200, 'keep-alive']);
      const second = await post('filter', filterBody(tdmaPod('a')));
      expect(second.socket).toBe(first.socket);

      gate.open = false;
      const refused = await post('filter', filterBody(tdmaPod('a')));
      expect([refused.status, refused.connection]).toEqual([503, 'close']);
      expect(refused.socket).toBe(first.socket);
      await refused.closed;
      gate.open = true;
      const after = await post('filter', filterBody(tdmaPod('a')));
      expect(after.status).toBe(200);
      expect(after.socket).not.toBe(first.socket);
    } finally {
      agent.destroy();
    }
  });

  it('without a gate (leader election off) it serves and /readyz is 200', async () => {
    const s = new ExtenderServer({ log: silentLogger() });
    servers.push(s);
    expect((await s.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('a bind whose gate closes while it waits for the pod to reach its cache: no reservation PATCH, no binding', async () => {
    const gate = switchGate();
    gate.open = true;
    const calls: string[] = [];
    const client: BindClient = {
      request: (<T>(method: string, path: string) => {
        calls.push(`${method} ${path}`);
        return Promise.reject(new Error('must not be called')) as Promise<T>;
      }) as BindClient['request'],
    };
    const s = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 } } }, log: silentLogger(), gate, client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const pending = s.bind({ PodName: 'b', PodNamespace: 'ns', PodUID: 'uid-b', Node: 'n1' });
    gate.open = false; // leadership lost while the pod's watch event is on its way
    s.state.upsertPod(tdmaPod('b'));
    const r = await pending;
    expect(r.Error).toMatch(/scheduler extender stopped serving: standby replica: test/);
    expect(calls).toEqual([]);
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

/**
 * A fake apiserver for one namespace's pods, as bind uses it: GET, JSON patch (its `test` ops
 * enforced: 422 as kube-apiserver answers a failed test), the binding subresource (its
 * metadata.resourceVersion a precondition: 409), resourceVersion bumped on every write. `before`
 * runs first on every request (the test moves the clock there).
 */
function fakePodApi(before: (method: string, path: string) => void = () => undefined) {
  const pods = new Map<string, V1Pod>();
  let rv = 100;
  const calls: Array<{ method: string; path: string; timeoutMs?: number; query?: Record<string, unknown>; body?: unknown }> = [];
  const unescape = (t: string) => t.replace(/~1/g, '/').replace(/~0/g, '~');
  const client: BindClient = {
    request: (async (method: string, path: string, opts: { body?: unknown; timeoutMs?: number; query?: Record<string, unknown> } = {}) => {
      calls.push({ method, path, timeoutMs: opts.timeoutMs, query: opts.query, body: opts.body });
      before(method, path);
      const name = path.split('/')[6]!;
      const pod = pods.get(name);
      if (!pod) throw new ApiError(`${method} ${path}: 404 not found`, 404, 'NotFound');
      if (method === 'GET') return structuredClone(pod);
      if (method === 'PATCH') {
        const next = structuredClone(pod);
        for (const op of opts.body as Array<{ op: string; path: string; value?: unknown }>) {
          const at = op.path.split('/').slice(1).map(unescape);
          if (op.op === 'test') {
            const cur = at.reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], next);
            if (cur !== op.value) throw new ApiError(`PATCH ${path}: 422 testing value ${op.path} failed`, 422);
          } else if (at[1] === 'annotations' && at.length === 2) next.metadata!.annotations = { ...(op.value as Record<string, string>) };
          else if (op.op === 'add') next.metadata!.annotations![at[2]!] = op.value as string;
          else if (op.op === 'remove') delete next.metadata!.annotations![at[2]!];
        }
        next.metadata!.resourceVersion = String(++rv);
        pods.set(name, next);
        return structuredClone(next);
      }
      if (method === 'POST' && path.endsWith('/binding')) {
        const b = opts.body as { metadata: { resourceVersion?: string }; target: { name: string } };
        if (b.metadata.resourceVersion && b.metadata.resourceVersion !== pod.metadata!.resourceVersion) {
          throw new ApiError(`POST ${path}: 409 Operation cannot be fulfilled on pods "${name}": the object has been modified`, 409, 'Conflict');
        }
        pods.set(name, { ...pod, metadata: { ...pod.metadata, resourceVersion: String(++rv) }, spec: { containers: [], ...pod.spec, nodeName: b.target.name } });
        return {};
      }
      throw new Error(`unexpected ${method} ${path}`);
    }) as BindClient['request'],
  };
  return { pods, calls, client, bump: (name: string) => pods.set(name, { ...pods.get(name)!, metadata: { ...pods.get(name)!.metadata, resourceVersion: String(++rv) } }) };
}

describe("bind's writes are fenced by the Lease", () => {
  const tdma = { tdmaNetworks: { rtnet0: { cycleUs: 20_000, slotUs: 1000, slots: 20 } } };
  /** A leading gate on a fake clock: renewed at `t0`, renew deadline 10 s. */
  function leader() {
    const clock = { now: 5_000_000 };
    const l = lease({ isLeader: true, renewedAt: clock.now, leader: 'me' });
    const gate = new LeadershipGate(l, 'Lease ulysses-system/ulysses-scheduler-extender', () => clock.now);
    gate.rebuilt(gate.startLeading());
    return { clock, lease: l, gate };
  }
  const bindBody = (name: string) => ({ PodName: name, PodNamespace: 'ns', PodUID: `uid-${name}`, Node: 'n1' });
  async function bind(s: ExtenderServer, name: string): Promise<string> {
    const r = await s.app.inject({ method: 'POST', url: '/bind', payload: bindBody(name) });
    expect(r.statusCode).toBe(200);
    return (r.json() as { Error: string }).Error;
  }
  /** A bind started while its pod is not in the cache yet: `pause` runs while it waits (the process stopped), then the pod arrives. */
  async function bindPaused(s: ExtenderServer, pod: V1Pod, pause: () => void): Promise<string> {
    const pending = s.bind(bindBody(pod.metadata!.name!));
    pause();
    s.state.upsertPod(pod);
    return (await pending).Error;
  }

  it('paused past the renew deadline before the PATCH: no reservation written, no binding, HTTP 200 with the Error', async () => {
    const { clock, gate } = leader();
    const api = fakePodApi();
    api.pods.set('a', tdmaPod('a', {}, '7'));
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    // the process stops for 10.5 s while it waits for the pod's watch event
    const error = await bindPaused(s, tdmaPod('a', {}, '7'), () => (clock.now += 10_500));
    expect(error).toMatch(/^ulysses: bind ns\/a to n1: scheduler extender stopped serving: Lease ulysses-system\/ulysses-scheduler-extender last renewed 10500 ms ago, past the renew deadline of 10000 ms: not serving$/);
    expect(api.calls).toEqual([]);
    expect(api.pods.get('a')!.metadata!.annotations).toEqual(tdmaPod('a').metadata!.annotations);
    expect(s.state.takenSlots('rtnet0', 'none')).toEqual([]);
  });

  it('leadership about to expire (500 ms to the renew deadline): the PATCH is not sent', async () => {
    const { clock, gate } = leader();
    const api = fakePodApi();
    api.pods.set('b', tdmaPod('b', {}, '7'));
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    expect(gate.check().ready).toBe(true);
    const error = await bindPaused(s, tdmaPod('b', {}, '7'), () => (clock.now += 9_500));
    expect(error).toMatch(/stopped serving: PATCH \/api\/v1\/namespaces\/ns\/pods\/b not sent: the Lease's renew deadline is 500 ms away, less than the 1000 ms a write needs$/);
    expect(api.calls).toEqual([]);
    expect(s.state.takenSlots('rtnet0', 'none')).toEqual([]);
  });

  it('the PATCH is given up (by us and the apiserver) before the renew deadline; the Lease lapsing while it is out: no binding', async () => {
    const { clock, gate } = leader();
    const api = fakePodApi((method) => {
      if (method === 'PATCH') clock.now += 3_000; // the renew deadline reached while the PATCH was out
    });
    api.pods.set('c', tdmaPod('c', {}, '7'));
    const s = new ExtenderServer({ config: { ...tdma, httpTimeoutMs: 60_000, bindTimeoutMs: 10_000 }, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const error = await bindPaused(s, tdmaPod('c', {}, '7'), () => (clock.now += 7_000)); // 3 s left
    const patch = api.calls.find((c) => c.method === 'PATCH')!;
    expect({ timeoutMs: patch.timeoutMs, query: patch.query }).toEqual({ timeoutMs: 3_000, query: { timeout: '3000ms' } });
    // conditional on the version the decision saw
    expect(patch.body).toContainEqual({ op: 'test', path: '/metadata/resourceVersion', value: '7' });
    expect(error).toMatch(/stopped serving: .*past the renew deadline of 10000 ms: not serving$/);
    expect(api.calls.map((c) => c.method)).toEqual(['PATCH']);
    expect(api.pods.get('c')!.spec!.nodeName).toBeUndefined();
  });

  it('writes conditional on the pod version: a successor\'s reservation made meanwhile fails the PATCH (422) or the binding (409) with an Error and stays; a status-only change is retried once', async () => {
    const { gate } = leader();
    /** What happens to the pod right before our next PATCH / binding: a successor reserves it, or its status changes. */
    const next: { PATCH?: 'successor' | 'status'; POST?: 'successor' | 'status' } = {};
    const api = fakePodApi((method, path) => {
      const what = next[method as 'PATCH' | 'POST'];
      if (!what) return;
      delete next[method as 'PATCH' | 'POST'];
      const name = path.split('/')[6]!;
      if (what === 'successor') {
        const p = api.pods.get(name)!;
        api.pods.set(name, { ...p, metadata: { ...p.metadata, annotations: { ...p.metadata!.annotations, 'ulysses.io/reserved-node': 'n1', 'ulysses.io/tdma-slots': '[3,4]' } } });
      }
      api.bump(name);
    });
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    const start = (name: string) => {
      api.pods.set(name, tdmaPod(name, {}, '7'));
      s.state.upsertPod(tdmaPod(name, {}, '7'));
      api.calls.length = 0;
    };
    const methods = () => api.calls.map((c) => c.method);

    // the extender's view of d is version 7; another replica reserves d before our PATCH lands
    start('d');
    next.PATCH = 'successor';
    expect(await bind(s, 'd')).toMatch(/^ulysses: bind ns\/d to n1: the pod is no longer the version the reservation was decided on \(uid uid-d, resourceVersion 7\): nothing written \(PATCH .*: 422 testing value \/metadata\/resourceVersion failed\)$/);
    expect(methods()).toEqual(['PATCH', 'GET']);
    expect(api.pods.get('d')!.metadata!.annotations!['ulysses.io/tdma-slots']).toBe('[3,4]');
    expect(api.pods.get('d')!.spec!.nodeName).toBeUndefined();

    // only its status changed (the cache behind): the PATCH is retried on the latest version and the pod bound
    start('g');
    next.PATCH = 'status';
    expect(await bind(s, 'g')).toBe('');
    expect(methods()).toEqual(['PATCH', 'GET', 'PATCH', 'POST']);
    expect(api.pods.get('g')!.spec!.nodeName).toBe('n1');

    // another replica re-reserves e between our PATCH and the binding: not bound, its reservation stays
    start('e');
    next.POST = 'successor';
    expect(await bind(s, 'e')).toMatch(/^ulysses: bind ns\/e to n1: the pod changed after its reservation was written \(resourceVersion \d+\): not bound \(POST .*: 409 /);
    expect(api.pods.get('e')!.spec!.nodeName).toBeUndefined();
    expect(api.pods.get('e')!.metadata!.annotations!['ulysses.io/tdma-slots']).toBe('[3,4]');
    const binding = api.calls.find((c) => c.method === 'POST')!;
    expect((binding.body as { metadata: { resourceVersion?: string } }).metadata.resourceVersion).toMatch(/^\d+$/);

    // a status change between our PATCH and the binding: bound as the latest version still holding our reservation
    start('f');
    next.POST = 'status';
    expect(await bind(s, 'f')).toBe('');
    expect(methods()).toEqual(['PATCH', 'POST', 'GET', 'POST']);
    expect(api.pods.get('f')!.spec!.nodeName).toBe('n1');
    expect(api.pods.get('f')!.metadata!.annotations!['ulysses.io/reserved-node']).toBe('n1');
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

describe('reservation epoch: the Lease\'s leaseTransitions on every reservation, checked by the apiserver', () => {
  const tdma = { tdmaNetworks: { rtnet0: { cycleUs: 20_000, slotUs: 1000, slots: 20 } } };
  const epochOp = (value: string) => ({ op: 'add', path: `/metadata/annotations/${RESERVATION_EPOCH_ANNOTATION.replace('/', '~1')}`, value });

  it('every reservation PATCH carries the epoch of the gate (the Lease\'s leaseTransitions); without a Lease behind the gate, none', async () => {
    const l = lease({ isLeader: true, renewedAt: Date.now(), leader: 'me', leaseTransitions: 7 });
    const gate = new LeadershipGate(l, 'Lease ulysses-system/ulysses-scheduler-extender');
    gate.rebuilt(gate.startLeading());
    expect(gate.check()).toMatchObject({ ready: true, epoch: '7' });
    const api = fakePodApi();
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    for (const name of ['a', 'b']) api.pods.set(name, tdmaPod(name, {}, '7'));
    // b carries an older leader's epoch from an earlier reservation: replaced
    api.pods.set('b', tdmaPod('b', { [RESERVATION_EPOCH_ANNOTATION]: '6' }, '7'));
    for (const p of api.pods.values()) s.state.upsertPod(structuredClone(p));
    for (const name of ['a', 'b']) expect(await s.bind({ PodName: name, PodNamespace: 'ns', PodUID: `uid-${name}`, Node: 'n1' })).toEqual({ Error: '' });
    const patches = api.calls.filter((c) => c.method === 'PATCH');
    expect(patches).toHaveLength(2);
    for (const p of patches) expect(p.body).toContainEqual(epochOp('7'));
    for (const name of ['a', 'b']) expect(api.pods.get(name)!.metadata!.annotations![RESERVATION_EPOCH_ANNOTATION]).toBe('7');

    // leader election off (no Lease): no epoch written
    const plain = fakePodApi();
    plain.pods.set('c', tdmaPod('c', {}, '7'));
    const s2 = new ExtenderServer({ config: tdma, log: silentLogger(), client: plain.client });
    servers.push(s2);
    s2.state.upsertNode(tdmaNode('n1'));
    s2.state.upsertPod(tdmaPod('c', {}, '7'));
    expect(await s2.bind({ PodName: 'c', PodNamespace: 'ns', PodUID: 'uid-c', Node: 'n1' })).toEqual({ Error: '' });
    expect(plain.pods.get('c')!.metadata!.annotations).not.toHaveProperty(RESERVATION_EPOCH_ANNOTATION);
  });

  it('a PATCH the apiserver refuses (the epoch policy: another leader took over) is an Error over HTTP 200; nothing reserved, nothing bound, the state as before', async () => {
    const l = lease({ isLeader: true, renewedAt: Date.now(), leader: 'me', leaseTransitions: 3 });
    const gate = new LeadershipGate(l, 'Lease ulysses-system/ulysses-scheduler-extender');
    gate.rebuilt(gate.startLeading());
    const refusal =
      'PATCH /api/v1/namespaces/ns/pods/x: 403 pods "x" is forbidden: ValidatingAdmissionPolicy \'ulysses-reservation-epoch\' with binding \'ulysses-reservation-epoch\' denied request: reservation epoch "3" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is 4 (holder "b")';
    const api = fakePodApi((method) => {
      if (method === 'PATCH') throw new ApiError(refusal, 403, 'Forbidden');
    });
    api.pods.set('x', tdmaPod('x', {}, '7'));
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    s.state.upsertPod(tdmaPod('x', {}, '7'));
    const r = await s.app.inject({ method: 'POST', url: '/bind', payload: { PodName: 'x', PodNamespace: 'ns', PodUID: 'uid-x', Node: 'n1' } });
    expect(r.statusCode).toBe(200);
    expect((r.json() as { Error: string }).Error).toBe(`ulysses: bind ns/x to n1: ${refusal}`);
    // one PATCH (a refusal is not a precondition failure: not retried), no binding, no release
    expect(api.calls.map((c) => c.method)).toEqual(['PATCH']);
    expect(api.calls[0]!.body).toContainEqual(epochOp('3'));
    expect(api.pods.get('x')!.metadata!.annotations).toEqual(tdmaPod('x').metadata!.annotations);
    expect(api.pods.get('x')!.spec!.nodeName).toBeUndefined();
    // the slots assumed for the PATCH are given back
    expect(s.state.takenSlots('rtnet0', 'none')).toEqual([]);
    expect(s.state.pod('ns/x')!.pod.metadata!.annotations).not.toHaveProperty(RESERVATION_EPOCH_ANNOTATION);
  });

  it('the release after a failed binding removes the epoch with the reservation', async () => {
    const l = lease({ isLeader: true, renewedAt: Date.now(), leader: 'me', leaseTransitions: 2 });
    const gate = new LeadershipGate(l, 'Lease x/y');
    gate.rebuilt(gate.startLeading());
    let released!: () => void;
    const done = new Promise<void>((r) => (released = r));
    const api = fakePodApi((method, path) => {
      if (method === 'POST') throw new ApiError(`POST ${path}: 500 etcd unavailable`, 500);
      if (method === 'PATCH' && api.calls.filter((c) => c.method === 'PATCH').length === 2) queueMicrotask(released);
    });
    api.pods.set('r', tdmaPod('r', {}, '7'));
    const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate, client: api.client });
    servers.push(s);
    s.state.upsertNode(tdmaNode('n1'));
    s.state.upsertPod(tdmaPod('r', {}, '7'));
    expect((await s.bind({ PodName: 'r', PodNamespace: 'ns', PodUID: 'uid-r', Node: 'n1' })).Error).toMatch(/500 etcd unavailable/);
    await done;
    await new Promise((r) => setImmediate(r));
    const release = api.calls.filter((c) => c.method === 'PATCH')[1]!;
    expect(release.body).toContainEqual({ op: 'remove', path: `/metadata/annotations/${RESERVATION_EPOCH_ANNOTATION.replace('/', '~1')}` });
    expect(api.pods.get('r')!.metadata!.annotations).toEqual(tdmaPod('r').metadata!.annotations);
  });

  it('a new leader serves only once the apiserver admits its epoch (a dry run, refused while its cache has the old Lease), and only then lists the pods', async () => {
    const order: string[] = [];
    // a released Lease (holder empty) after 4 takeovers: ours is the 5th
    let stored: Record<string, any> = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'ulysses-scheduler-extender', namespace: 'ulysses-system', resourceVersion: '1' },
      spec: { holderIdentity: '', leaseDurationSeconds: 1, leaseTransitions: 4 },
    };
    let refusals = 2;
    const dryRuns: Array<{ query?: Record<string, unknown>; body?: unknown; contentType?: string }> = [];
    const leaseApi = {
      request: async (method: string, path: string, opts: { body?: any; query?: Record<string, unknown>; contentType?: string } = {}) => {
        // a cluster whose apiserver lists itself nowhere (--endpoint-reconciler-type=none): the kubeconfig's server only
        if (method === 'GET' && (path === APISERVER_SLICE_PATH || path === APISERVER_ENDPOINTS_PATH)) throw new ApiError(`GET ${path}: 404 not found`, 404, 'NotFound');
        expect(path).toMatch(/^\/apis\/coordination\.k8s\.io\/v1\/namespaces\/ulysses-system\/leases/);
        if (method === 'GET') return structuredClone(stored);
        if (method === 'PUT') {
          stored = { ...opts.body, metadata: { ...opts.body.metadata, resourceVersion: String(Number(stored.metadata.resourceVersion) + 1) } };
          return structuredClone(stored);
        }
        if (method === 'PATCH') {
          dryRuns.push(opts);
          if (refusals-- > 0) {
            order.push('dry run refused');
            throw new ApiError(`PATCH ${path}: 403 reservation epoch "5" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is 4`, 403, 'Forbidden');
          }
          order.push('dry run admitted');
          return structuredClone(stored);
        }
        throw new Error(`unexpected ${method} ${path}`);
      },
    } as unknown as KubeClient;
    let serving!: () => void;
    const served = new Promise<void>((r) => (serving = r));
    const leadership = new ExtenderLeadership({
      client: leaseApi,
      ...testLeadership('me'),
      rebuild: async () => {
        order.push(`rebuild (gate ready: ${leadership.gate.check().ready})`);
      },
      onServing: () => serving(),
    });
    leadership.start();
    try {
      await served;
      expect(order).toEqual(['dry run refused', 'dry run refused', 'dry run admitted', 'rebuild (gate ready: false)']);
      expect(stored.spec.leaseTransitions).toBe(5);
      for (const d of dryRuns) {
        expect(d.query).toEqual({ dryRun: 'All' });
        expect(d.contentType).toBe('application/merge-patch+json');
        expect(d.body).toEqual({ metadata: { annotations: { [RESERVATION_EPOCH_ANNOTATION]: '5' } } });
      }
      // the first bind writes that epoch
      expect(leadership.gate.check()).toMatchObject({ ready: true, epoch: '5' });
      const api = fakePodApi();
      api.pods.set('a', tdmaPod('a', {}, '7'));
      const s = new ExtenderServer({ config: tdma, log: silentLogger(), gate: leadership.gate, client: api.client });
      servers.push(s);
      s.state.upsertNode(tdmaNode('n1'));
      s.state.upsertPod(tdmaPod('a', {}, '7'));
      expect(await s.bind({ PodName: 'a', PodNamespace: 'ns', PodUID: 'uid-a', Node: 'n1' })).toEqual({ Error: '' });
      expect(api.pods.get('a')!.metadata!.annotations![RESERVATION_EPOCH_ANNOTATION]).toBe('5');
    } finally {
      await leadership.stop();
    }
  });

  it('LeaderElector: leaseTransitions +1 on every takeover (also of a released Lease), kept on renewals, 0 for the Lease it creates', async () => {
    let stored: Record<string, any> | undefined;
    const client = {
      request: async (method: string, _path: string, opts: { body?: any } = {}) => {
        if (method === 'GET') {
          if (!stored) throw new ApiError('not found', 404, 'NotFound');
          return structuredClone(stored);
        }
        stored = { ...opts.body, metadata: { name: 'l', namespace: 'ns', resourceVersion: String(++seq) } };
        return structuredClone(stored);
      },
      put: async (_path: string, body: any) => {
        stored = { ...body, metadata: { ...body.metadata, resourceVersion: String(++seq) } };
        return structuredClone(stored);
      },
    } as unknown as KubeClient;
    const term = async (identity: string) => {
      let seen: number | undefined;
      let renewed: number | undefined;
      const e: LeaderElector = new LeaderElector({
        client,
        namespace: 'ns',
        name: 'l',
        identity,
        leaseDurationSeconds: 0.6,
        renewDeadlineSeconds: 0.4,
        retryPeriodSeconds: 0.1,
        log: silentLogger(),
        onStartedLeading: async (signal) => {
          seen = e.leaseTransitions;
          // one renewal later, the same number
          const before = e.renewedAt;
          while (e.renewedAt === before && !signal.aborted) await new Promise((r) => setTimeout(r, 20));
          renewed = e.leaseTransitions;
          void e.stop();
        },
      });
      await e.run();
      expect(e.leaseTransitions).toBeUndefined();
      return { seen, renewed };
    };
    expect(await term('a')).toEqual({ seen: 0, renewed: 0 });
    // a released its Lease on stop (holder empty): b's takeover is a transition, and so is a's return
    expect(stored!.spec.holderIdentity).toBe('');
    expect(await term('b')).toEqual({ seen: 1, renewed: 1 });
    expect(await term('a')).toEqual({ seen: 2, renewed: 2 });
  });
});

describe('the reservation epoch policy (manifests/base/scheduler-extender/reservation-epoch-policy.yaml)', () => {
  const dir = 'manifests/base/scheduler-extender';
  const docs = parseAllDocuments(readFileSync(`${dir}/reservation-epoch-policy.yaml`, 'utf8')).map((d) => d.toJS() as Record<string, any>);
  const policy = docs.find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
  const binding = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!;
  it("takes the extender's Lease as its parameter (Allow when missing: the lookup precedes matchConditions), names the code's annotations and the ServiceAccount; the Role allows the dry run", () => {
    expect(policy.spec.paramKind).toEqual({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease' });
    const args = (readFileSync(`${dir}/deployment.yaml`, 'utf8').match(/--leader-elect-resource-(namespace|name)=\S+/g) ?? []).map((a) => a.split('=')[1]);
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, paramRef: { namespace: args[0], name: args[1], parameterNotFoundAction: 'Allow' }, validationActions: ['Deny'] });
    expect(policy.spec.matchConstraints.resourceRules[1]).toMatchObject({ apiGroups: ['coordination.k8s.io'], resources: ['leases'], resourceNames: [args[1]] });
    const rbac = parseAllDocuments(readFileSync(`${dir}/rbac.yaml`, 'utf8')).map((d) => d.toJS());
    const sa = rbac.find((d) => d.kind === 'ServiceAccount');
    expect(policy.spec.matchConditions[0].expression).toBe(`request.userInfo.username == 'system:serviceaccount:${sa.metadata.namespace}:${sa.metadata.name}'`);
    const keys = /\[('ulysses\.io[^\]]+)\]/.exec(policy.spec.matchConditions[1].expression)![1]!;
    expect(JSON.parse(`[${keys.replace(/'/g, '"')}]`)).toEqual([RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION]);
    const text = readFileSync(`${dir}/reservation-epoch-policy.yaml`, 'utf8');
    expect(text.match(/'ulysses\.io\/[a-z-]+'/g)!.every((k) => [RESERVED_NODE_ANNOTATION, RT_CORES_ANNOTATION, TDMA_SLOTS_ANNOTATION, RESERVATION_EPOCH_ANNOTATION].includes(k.slice(1, -1)))).toBe(true);
    // refusals are 403 (Forbidden): bind retries a 422 as a precondition failure
    for (const v of policy.spec.validations) expect(v.reason).toBe('Forbidden');
    const role = rbac.find((d) => d.kind === 'Role');
    expect(role.rules.find((r: { resources: string[] }) => r.resources.includes('leases')).verbs).toContain('patch');
  });
});
