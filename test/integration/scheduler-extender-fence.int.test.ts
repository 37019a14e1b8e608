/**
 * The reservation epoch fence (manifests/base/scheduler-extender/reservation-epoch-policy.yaml) on
 * the testbed's REAL kube-apiserver, the extender's writes made as its ServiceAccount (impersonated,
 * with the RBAC of rbac.yaml):
 *  1. a reservation PATCH carrying an epoch other than the Lease's current spec.leaseTransitions is
 *     refused with the policy's message, the current one admitted; after another holder takes the
 *     Lease (transitions +1) the old epoch is refused; removing a reservation needs no epoch; without
 *     the Lease (parameterNotFoundAction Allow) pods are still created and the extender writes;
 *  2. the late-write window: replica A leads and binds pod X; its reservation PATCH is held right
 *     after its fence check (a client that holds the request, as a process stopped before the
 *     request leaves it) and its Lease renewals stop; B takes the Lease, confirms its epoch, rebuilds
 *     and reserves pod Y on the same TDMA slots; A's PATCH then reaches the apiserver and is refused
 *     by the policy (X's resourceVersion unchanged: its own preconditions would have let it through),
 *     so no slot is booked twice;
 *  3. the same window through the REAL kube-scheduler (the testbed's, configured with the extender
 *     behind a forwarder that, like a Service, sends each new connection to the replica whose
 *     /readyz is 200): kube-scheduler calls A's /filter and /bind for pod X; A's reservation PATCH is
 *     held after its fence check, and A's answer to that /bind with it (a process stopped there
 *     sends neither); A's renewals stop, B takes the Lease and becomes Ready, the forwarder routes to
 *     B, and kube-scheduler schedules pod Y (the same two slots) through B while X's bind is still
 *     in flight (X is only assumed in the scheduler's cache). A then resumes: its PATCH is refused by
 *     the epoch policy (403) and its /bind answers an Error (bind gave up on the PATCH at the
 *     fence's deadline, before the renew deadline: "gave up after N ms ... PATCH ... did not finish
 *     within M ms"; the 403 is the late request's own outcome). What kube-scheduler does with it
 *     (pkg/scheduler/schedule_one.go, v1.36): the extender's bind Error is the binding cycle's
 *     status (extender.go Bind returns `result.Error` as the error; `extendersBinding` returns it
 *     since the extender is not ignorable); handleBindingCycleError runs Unreserve, forgets the
 *     assumed pod and calls the failure handler: a Warning `FailedScheduling` Event with that text,
 *     PodScheduled=False reason SchedulerError, and the pod back in the queue (backoff). Its next
 *     attempt goes to B, whose filter refuses kwok-1 (both slots held by Y): FailedScheduling
 *     "0/1 nodes are available: ..." with the extender's TDMA message, reason Unschedulable, and X
 *     stays Pending, unbound and without a reservation;
 *  4. the epoch on every apiserver: the testbed runs TWO kube-apiservers on its etcd (option
 *     `apiservers: 2`: 10.243.0.1 and 10.243.0.2, both listed in the EndpointSlice default/kubernetes
 *     by their lease endpoint reconcilers); a new leader dry-runs its epoch against both addresses
 *     directly (its `confirmations`, and each apiserver's own apiserver_request_total of dry-run Lease
 *     PATCHes, counted before and after) before it serves. Then the second apiserver is stopped
 *     (SIGSTOP) and another replica takes over: it confirms on the first, does not serve, and its
 *     readiness reason names 10.243.0.2:16443 as pending, until SIGCONT, after which it confirms
 *     there too and serves. A stopped apiserver would leave the list once its endpoint lease (an
 *     etcd key with a 15 s TTL, refreshed every 10 s) expired and the other apiserver's reconciler
 *     ran; the test writes that key again under an etcd lease of its own while the apiserver is
 *     stopped, so it stays listed whatever the time the takeover takes (an apiserver listed but not
 *     answering), and resumes it as soon as the pending reason is seen (no waiting on time). Then
 *     it is stopped again and left to expire: once it has left the list, the next leader serves,
 *     confirmed on the first apiserver only.
 * Cases 1, 2 and 4 call the extender directly: their pods use a scheduler that does not exist.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Event, V1Lease, V1Pod } from '@kubernetes/client-node';
import { useTestbed } from './harness.ts';
import { ApiError, KubeClient } from '../../core/kube.ts';
import { asExtenderClient, createExtenderManifests, refusal, unscheduledPod } from '../extender-admission.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { join } from 'node:path';
import { apiserverOf } from '../../experiments/testbed/testbed.ts';
import { PORTS, httpsGet } from '../../experiments/testbed/controlplane.ts';
import { pkiPaths } from '../../experiments/testbed/pki.ts';
import { APISERVER_SLICE_PATH, apiserversFromSlice } from '../../scheduler-plugins/extender/apiservers.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { silentLogger } from '../../core/logging.ts';
import { ExtenderServer, type BindClient } from '../../scheduler-plugins/extender/server.ts';
import { ExtenderLeadership, RESERVATION_EPOCH_ANNOTATION } from '../../scheduler-plugins/extender/leadership.ts';
import { renderKubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { ReadyForwarder } from '../extender-forwarder.ts';
import { FAST_LEASE } from '../fast-lease.ts';

const runDir = '/tmp/ulysses-it-sched-fence';
const ns = 'sched-fence';
const LEASE_NS = 'ulysses-system';
const LEASE = 'ulysses-scheduler-extender';
const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${LEASE_NS}/leases/${LEASE}`;
/** What the testbed's kube-scheduler calls (case 3): the forwarder in front of the replicas. */
const FRONT = 20460;
/**
 * kube-scheduler's httpTimeout for the extender (and the replicas' httpTimeoutMs): long enough that
 * X's bind, held while B takes over and Y is placed, is answered by A rather than given up by the
 * scheduler (the Lease lapses in 3 s).
 */
const HTTP_TIMEOUT_S = 60;
const schedulerConfig = '/tmp/ulysses-it-sched-fence-kube-scheduler.yaml';
writeFileSync(
  schedulerConfig,
  renderKubeSchedulerConfiguration({ kubeconfig: schedulerKubeconfigPath(runDir), extenderUrl: `http://127.0.0.1:${FRONT}`, httpTimeout: `${HTTP_TIMEOUT_S}s` }),
);
const t = useTestbed(runDir, { realNodes: 0, kwokNodes: 1, namespace: ns, schedulerConfig, apiservers: 2 });

/** A pod needing both TDMA slots of rtnet0 (2 slots): two such pods can never both hold them. */
const pod = (name: string) => unscheduledPod(ns, name, { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' });

let admin: KubeClient;
let asExtender: KubeClient;
const podPath = (name: string) => `/api/v1/namespaces/${ns}/pods/${name}`;
const reservation = (epoch?: string) => ({
  metadata: { annotations: { 'ulysses.io/reserved-node': 'kwok-1', 'ulysses.io/tdma-slots': '[0,1]', ...(epoch !== undefined ? { [RESERVATION_EPOCH_ANNOTATION]: epoch } : {}) } },
});
const unreserve = { metadata: { annotations: { 'ulysses.io/reserved-node': null, 'ulysses.io/tdma-slots': null, [RESERVATION_EPOCH_ANNOTATION]: null } } };
const CONFIG = { listen: { host: '127.0.0.1', port: 0 }, tdmaNetworks: { rtnet0: { cycleUs: 2000, slotUs: 1000, slots: 2 } } };

/** `p`, or a failure naming `what` after `ms` (a bound on a wait, not a measurement). */
function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)))]).finally(() => clearTimeout(timer));
}

/** A replica's Lease client whose requests, once paused, go unanswered until their timeout (renewals stop, as in a stopped process). */
function pausableLeaseClient(): { client: KubeClient; pause: () => void } {
  let paused = false;
  const client = {
    kc: asExtender.kc, // the same credentials for the epoch's dry runs against each apiserver
    request: <T>(method: string, path: string, opts: { timeoutMs?: number } = {}): Promise<T> =>
      paused ? new Promise<T>((_, reject) => setTimeout(() => reject(new Error('replica paused')), opts.timeoutMs ?? 1000)) : asExtender.request<T>(method, path, opts),
    put: <T>(path: string, body: unknown): Promise<T> => (paused ? Promise.reject(new Error('replica paused')) : asExtender.put<T>(path, body)),
  } as unknown as KubeClient;
  return { client, pause: () => (paused = true) };
}

/**
 * A replica's bind client whose first PATCH of `path` (the reservation) is held right after the
 * fence let it through: `holding` resolves with its body, and the request leaves the process only
 * on `resume()` (`resumed`; the apiserver's timeout counts from its arrival); `late()` is its outcome.
 */
function heldPatchClient(path: string): { client: BindClient; holding: Promise<unknown>; resume: () => void; resumed: Promise<void>; late: () => Promise<{ ok: true } | { refused: string }> | undefined } {
  let held!: (body: unknown) => void;
  const holding = new Promise<unknown>((r) => (held = r));
  let resume!: () => void;
  const resumed = new Promise<void>((r) => (resume = r));
  let late: Promise<{ ok: true } | { refused: string }> | undefined;
  const client: BindClient = {
    request: (<T>(method: string, p: string, opts: Parameters<KubeClient['request']>[2] = {}): Promise<T> => {
      if (method !== 'PATCH' || p !== path || late) return asExtender.request<T>(method, p, opts);
      held(opts.body);
      late = resumed.then(() => asExtender.request(method, p, opts)).then(
        () => ({ ok: true as const }),
        (err: Error) => ({ refused: err.message }),
      );
      return late.then((r) => ('ok' in r ? ({} as T) : Promise.reject(new ApiError(r.refused, 403))));
    }) as BindClient['request'],
  };
  return { client, holding, resume, resumed, late: () => late };
}

/** Releases A's held reservation PATCH of `pod`: the apiserver refuses it (403) for its old epoch, B (epoch +1) holding the Lease. */
async function expectLateWriteRefused(held: ReturnType<typeof heldPatchClient>, pod: string, epochA: number): Promise<void> {
  held.resume();
  const outcome = await held.late();
  expect(outcome).toHaveProperty('refused');
  const refused = (outcome as { refused: string }).refused;
  expect(refused).toMatch(new RegExp(`^PATCH /api/v1/namespaces/sched-fence/pods/${pod}: 403 `));
  expect(refused).toContain(`reservation epoch "${epochA}" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is ${epochA + 1} (holder "ext-b")`);
}

/** One extender replica (an ExtenderServer behind its ExtenderLeadership), stopped at the end of the test through `stops`. */
function fenceReplica(id: string, leaseClient: KubeClient, bindClient: BindClient, config: object, stops: Array<() => Promise<void>>) {
  let serving!: () => void;
  const served = new Promise<void>((r) => (serving = r));
  let server!: ExtenderServer;
  const leadership = new ExtenderLeadership({
    client: leaseClient,
    namespace: LEASE_NS,
    name: LEASE,
    identity: id,
    ...FAST_LEASE,
    log: silentLogger(),
    rebuild: async (signal) => {
      await server.rebuild(signal);
    },
    onServing: () => serving(),
    onStopped: () => undefined,
  });
  server = new ExtenderServer({ config, kubeconfig: t.kc, informerThread: false, client: bindClient, gate: leadership.gate, log: silentLogger() });
  stops.push(async () => {
    await leadership.stop();
    await server.stop();
  });
  return { server, leadership, served };
}

/** Sets the Lease (as another holder, e.g. a replica of another process) to `transitions`. */
async function setLease(holder: string, transitions: number): Promise<void> {
  const spec = { holderIdentity: holder, leaseDurationSeconds: 1, leaseTransitions: transitions, renewTime: new Date().toISOString().replace(/\.(\d{3})Z$/, '.$1000Z') };
  try {
    const cur = await admin.get<V1Lease>(leasePath);
    await admin.put(leasePath, { ...cur, spec: { ...cur.spec, ...spec } });
  } catch (err) {
    if (!(err instanceof ApiError && err.statusCode === 404)) throw err;
    await admin.post(`/apis/coordination.k8s.io/v1/namespaces/${LEASE_NS}/leases`, { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: LEASE, namespace: LEASE_NS }, spec });
  }
}

/**
 * The Lease as the install creates it (rbac.yaml): empty, so the first leader's takeover makes the
 * first epoch 1. (A Lease missing altogether is re-created by the leader with a PUT to its name,
 * transitions 0; the tests start from the install's state.)
 */
async function recreateLease(): Promise<void> {
  await admin.post(`/apis/coordination.k8s.io/v1/namespaces/${LEASE_NS}/leases`, { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: LEASE, namespace: LEASE_NS } });
}

beforeAll(async () => {
  admin = new KubeClient(t.kc);
  asExtender = asExtenderClient(t.kc);
  await ensureNamespace(t.core, LEASE_NS);
  await createExtenderManifests(admin, ['rbac.yaml', 'reservation-policy.yaml', 'reservation-epoch-policy.yaml']);
  await admin.mergePatch('/api/v1/nodes/kwok-1', { metadata: { labels: { 'ulysses.io/tdma-network': 'rtnet0' } } });
}, 120_000);

describe('reservation epoch: the apiserver admits a reservation only with the Lease\'s current leaseTransitions', () => {
  it('an old epoch is refused with the policy\'s message, the current one admitted; a takeover moves it; removal needs none; no Lease: nothing blocked', async () => {
    await setLease('someone', 5);
    await admin.post(`/api/v1/namespaces/${ns}/pods`, pod('p'));
    // the policy takes effect once compiled and its parameter cached: poll until the old epoch is
    // refused (each try sets the reservation anew: a write that changes nothing is not matched)
    const setAnew = async (epoch: string) => {
      await asExtender.mergePatch(podPath('p'), unreserve);
      return refusal(asExtender.mergePatch(podPath('p'), reservation(epoch)));
    };
    const old = await pollUntil('epoch 4 refused while the Lease is at 5', () => setAnew('4'), { timeoutMs: 30_000, intervalMs: 200 });
    expect(old).toContain("ValidatingAdmissionPolicy 'ulysses-reservation-epoch'");
    expect(old).toContain('reservation epoch "4" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is 5 (holder "someone")');
    expect(await refusal(asExtender.mergePatch(podPath('p'), reservation()))).toContain('reservation epoch (annotation ulysses.io/reservation-epoch missing) is not the current one');
    // the current epoch: admitted
    await asExtender.mergePatch(podPath('p'), reservation('5'));
    expect((await admin.get<V1Pod>(podPath('p'))).metadata?.annotations).toMatchObject({ 'ulysses.io/tdma-slots': '[0,1]', [RESERVATION_EPOCH_ANNOTATION]: '5' });
    // other writes of the extender (the routing label) are not matched
    await asExtender.mergePatch(podPath('p'), { metadata: { labels: { 'ulysses.io/scheduler-extender-leader': 'true' } } });

    // another holder takes the Lease: 5 is refused from the moment the apiserver has seen it. Dry runs
    // (admission, nothing stored) until then: a real PATCH admitted before the apiserver's copy of the
    // Lease caught up would store [1,0], and the same PATCH again would change nothing and never be matched
    await setLease('other', 6);
    const epoch5 = { metadata: { annotations: { 'ulysses.io/tdma-slots': '[1,0]', [RESERVATION_EPOCH_ANNOTATION]: '5' } } };
    await pollUntil('epoch 5 refused after the takeover (dry run)', () => refusal(asExtender.request('PATCH', podPath('p'), { query: { dryRun: 'All' }, body: epoch5, contentType: 'application/merge-patch+json' })), {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    const moved = await refusal(asExtender.mergePatch(podPath('p'), epoch5));
    expect(moved).toContain('reservation epoch "5" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is 6 (holder "other")');
    expect((await admin.get<V1Pod>(podPath('p'))).metadata?.annotations?.['ulysses.io/tdma-slots']).toBe('[0,1]');
    // a dry run with the new epoch (the new leader's confirmation) is admitted and stores nothing
    await asExtender.request('PATCH', leasePath, { query: { dryRun: 'All' }, body: { metadata: { annotations: { [RESERVATION_EPOCH_ANNOTATION]: '6' } } }, contentType: 'application/merge-patch+json' });
    expect(await refusal(asExtender.request('PATCH', leasePath, { query: { dryRun: 'All' }, body: { metadata: { annotations: { [RESERVATION_EPOCH_ANNOTATION]: '5' } } }, contentType: 'application/merge-patch+json' }))).toContain(
      'spec.leaseTransitions is 6',
    );
    expect((await admin.get<V1Lease>(leasePath)).metadata?.annotations?.[RESERVATION_EPOCH_ANNOTATION]).toBeUndefined();
    // removing the reservation needs no epoch (conditional on the pod's version in bind's release)
    await asExtender.mergePatch(podPath('p'), unreserve);
    expect(Object.keys((await admin.get<V1Pod>(podPath('p'))).metadata?.annotations ?? {}).filter((k) => k !== 'ulysses.io/tdma')).toEqual([]);

    // no Lease (a fresh install before the first leader): nothing to fence, and nothing blocked (with
    // Deny, the parameter lookup, which precedes matchConditions, refused every pod write of the cluster)
    await admin.delete(leasePath);
    await pollUntil('a reservation admitted without the Lease', async () => (await setAnew('6')) === undefined, { timeoutMs: 30_000, intervalMs: 200 });
    await admin.post(`/api/v1/namespaces/${ns}/pods`, pod('q'));
    await asExtender.mergePatch(podPath('p'), unreserve);
    await asExtender.mergePatch(podPath('p'), { metadata: { labels: { 'ulysses.io/scheduler-extender-leader': null } } });
  });

  it('the late write of a paused leader: B takes over and reserves pod Y on slots [0,1]; A\'s PATCH for pod X on the same slots is refused; no slot booked twice', async () => {
    await admin.post(`/api/v1/namespaces/${ns}/pods`, pod('x'));
    await admin.post(`/api/v1/namespaces/${ns}/pods`, pod('y'));
    const stops: Array<() => Promise<void>> = [];
    try {
      const aLease = pausableLeaseClient();
      // A's reservation PATCH of x: held right after the fence let it through, until resumed
      const aBind = heldPatchClient(podPath('x'));
      const replica = (id: 'ext-a' | 'ext-b', leaseClient: KubeClient, bindClient: BindClient) => fenceReplica(id, leaseClient, bindClient, CONFIG, stops);

      // the first test deleted the Lease: back as the install creates it, empty
      await recreateLease();
      const a = replica('ext-a', aLease.client, aBind.client);
      await a.server.start();
      a.leadership.start();
      await a.served;
      // A took over the empty Lease: the first epoch is 1
      const epochA = (await admin.get<V1Lease>(leasePath)).spec?.leaseTransitions ?? -1;
      expect(epochA).toBe(1);
      expect(a.leadership.gate.check()).toMatchObject({ ready: true, epoch: String(epochA) });
      const b = replica('ext-b', asExtender, asExtender);
      await b.server.start();
      b.leadership.start();
      await pollUntil('B sees A as the leader', () => b.leadership.elector.leader === 'ext-a', { timeoutMs: 10_000 });

      await pollUntil('A has x in its state', () => a.server.state.pod(`${ns}/x`), { timeoutMs: 30_000 });
      const xBefore = await admin.get<V1Pod>(podPath('x'));
      const bindA = a.server.bind({ PodName: 'x', PodNamespace: ns, PodUID: xBefore.metadata!.uid!, Node: 'kwok-1' });
      await aBind.holding; // A's PATCH passed the fence and is on its way out: the process stops here
      aLease.pause();

      await b.served;
      expect(b.leadership.gate.check()).toMatchObject({ ready: true, epoch: String(epochA + 1) });
      const lease = await admin.get<V1Lease>(leasePath);
      expect(lease.spec).toMatchObject({ holderIdentity: 'ext-b', leaseTransitions: epochA + 1 });
      await pollUntil('B has y in its state', () => b.server.state.pod(`${ns}/y`), { timeoutMs: 30_000 });
      const y0 = await admin.get<V1Pod>(podPath('y'));
      expect(await b.server.bind({ PodName: 'y', PodNamespace: ns, PodUID: y0.metadata!.uid!, Node: 'kwok-1' })).toEqual({ Error: '' });

      // A resumes: its PATCH (epoch 0, preconditions on x's unchanged version) reaches the apiserver
      expect((await admin.get<V1Pod>(podPath('x'))).metadata?.resourceVersion).toBe(xBefore.metadata?.resourceVersion);
      // 403 (reason Forbidden): bind does not take it for a precondition failure (422) and retry
      await expectLateWriteRefused(aBind, 'x', epochA);
      expect((await bindA).Error).toMatch(/^ulysses: bind sched-fence\/x to kwok-1: /);

      const x = await admin.get<V1Pod>(podPath('x'));
      const y = await admin.get<V1Pod>(podPath('y'));
      expect(x.spec?.nodeName).toBeUndefined();
      expect(x.metadata?.annotations).toEqual(pod('x').metadata!.annotations);
      expect(y.spec?.nodeName).toBe('kwok-1');
      expect(y.metadata?.annotations).toMatchObject({ 'ulysses.io/reserved-node': 'kwok-1', 'ulysses.io/tdma-slots': '[0,1]', [RESERVATION_EPOCH_ANNOTATION]: String(epochA + 1) });
      // from the API: every slot held by one pod at most
      const holders = new Map<number, string[]>();
      for (const p of (await admin.get<{ items: V1Pod[] }>(`/api/v1/namespaces/${ns}/pods`)).items) {
        const slots = p.metadata?.annotations?.['ulysses.io/tdma-slots'];
        for (const s of slots ? (JSON.parse(slots) as number[]) : []) holders.set(s, [...(holders.get(s) ?? []), p.metadata!.name!]);
      }
      expect(Object.fromEntries(holders)).toEqual({ 0: ['y'], 1: ['y'] });
    } finally {
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
    }
  });

  it('the late write through the real kube-scheduler: A binds X for the scheduler, is paused, B takes over and the scheduler places Y through B; A\'s PATCH is refused, X stays Pending with the extender\'s message', async () => {
    // a clean slate: the earlier cases' pods (y holds both slots) and Lease
    await admin.request('DELETE', `/api/v1/namespaces/${ns}/pods`, { query: { gracePeriodSeconds: 0 } });
    await pollUntil('the earlier pods gone', async () => (await admin.get<{ items: V1Pod[] }>(`/api/v1/namespaces/${ns}/pods`)).items.length === 0, { timeoutMs: 60_000 });
    await admin.request('DELETE', leasePath).catch((err: unknown) => {
      if (!(err instanceof ApiError && err.statusCode === 404)) throw err;
    });
    await recreateLease();
    /** A pod of the testbed's kube-scheduler needing both TDMA slots of rtnet0, for the KWOK node. */
    const scheduledPod = (name: string): V1Pod => ({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name, namespace: ns, annotations: { 'ulysses.io/tdma': '{"network":"rtnet0","slots":2}' } },
      spec: {
        // bound by the extender (which records the slots) only because it requests ulysses.io/reservation
        containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', resources: reservationRequest() }],
        tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
        nodeSelector: { type: 'kwok' },
      },
    });
    const ports: Record<string, number> = {};
    const forwarder = new ReadyForwarder(FRONT, () => ports);
    const stops: Array<() => Promise<void>> = [forwarder.close.bind(forwarder)];
    try {
      const aLease = pausableLeaseClient();
      // A's reservation PATCH of sx: held right after the fence let it through, until resumed
      const aBind = heldPatchClient(podPath('sx'));

      const replica = (id: 'ext-a' | 'ext-b', leaseClient: KubeClient, bindClient: BindClient) => {
        const { server, leadership, served } = fenceReplica(id, leaseClient, bindClient, { ...CONFIG, httpTimeoutMs: HTTP_TIMEOUT_S * 1000 }, stops);
        // the binds kube-scheduler sent this replica (its /bind route calls server.bind), as answered
        const binds: Array<{ pod: string; node: string; error: string }> = [];
        const bind = server.bind.bind(server);
        let answer: Promise<void> = Promise.resolve();
        server.bind = async (args) => {
          const r = await bind(args);
          await answer;
          binds.push({ pod: args.PodName, node: args.Node, error: r.Error ?? '' });
          return r;
        };
        return { server, leadership, served, binds, holdAnswers: (until: Promise<void>) => (answer = until) };
      };

      const a = replica('ext-a', aLease.client, aBind.client);
      // A's /bind answers wait for A to resume too: a stopped process sends neither its PATCH nor its
      // answer; the answer after the PATCH's outcome (the order of a process that resumes: the
      // PATCH was on its way out), so kube-scheduler's reaction to it (X's status) cannot reach the
      // apiserver first and fail the PATCH's resourceVersion test instead of the epoch policy
      a.holdAnswers(aBind.resumed.then(() => aBind.late()).then(() => undefined));
      ports['ext-a'] = (await a.server.start()).port;
      a.leadership.start();
      await a.served;
      await pollUntil('the forwarder routes to ext-a', () => forwarder.ready === 'ext-a', { timeoutMs: 10_000 });
      // A took over the empty Lease: the first epoch is 1
      const epochA = (await admin.get<V1Lease>(leasePath)).spec?.leaseTransitions ?? -1;
      expect(epochA).toBe(1);
      const b = replica('ext-b', asExtender, asExtender);
      ports['ext-b'] = (await b.server.start()).port;
      b.leadership.start();
      await pollUntil('B sees A as the leader', () => b.leadership.elector.leader === 'ext-a', { timeoutMs: 10_000 });
      expect(forwarder.ready).toBe('ext-a');

      // kube-scheduler schedules sx: filter, then bind, both at A; A's PATCH passes the fence and is held
      const sx = await admin.post<V1Pod>(`/api/v1/namespaces/${ns}/pods`, scheduledPod('sx'));
      const patch = (await withTimeout(aBind.holding, 60_000, 'A holding the reservation PATCH of sx (kube-scheduler never called A\'s /bind?)')) as Array<{ op: string; path: string; value?: unknown }>;
      aLease.pause(); // the process stops here: no renewal, no answer
      expect(patch).toContainEqual({ op: 'add', path: `/metadata/annotations/${RESERVATION_EPOCH_ANNOTATION.replace('/', '~1')}`, value: String(epochA) });

      await b.served;
      expect(b.leadership.gate.check()).toMatchObject({ ready: true, epoch: String(epochA + 1) });
      expect((await admin.get<V1Lease>(leasePath)).spec).toMatchObject({ holderIdentity: 'ext-b', leaseTransitions: epochA + 1 });
      await pollUntil('the forwarder routes to ext-b', () => forwarder.ready === 'ext-b', { timeoutMs: 10_000 });

      // kube-scheduler places sy through B while sx's bind at A is still in flight
      await admin.post(`/api/v1/namespaces/${ns}/pods`, scheduledPod('sy'));
      const y = await pollUntil(
        'sy bound through B',
        async () => {
          const p = await admin.get<V1Pod>(podPath('sy'));
          return p.spec?.nodeName ? p : undefined;
        },
        { timeoutMs: 60_000 },
      );
      expect(y.spec?.nodeName).toBe('kwok-1');
      expect(y.metadata?.annotations).toMatchObject({ 'ulysses.io/reserved-node': 'kwok-1', 'ulysses.io/tdma-slots': '[0,1]', [RESERVATION_EPOCH_ANNOTATION]: String(epochA + 1) });
      expect(b.binds).toEqual([{ pod: 'sy', node: 'kwok-1', error: '' }]);
      expect(a.binds).toEqual([]); // A's answer for sx is still held (sent once A resumes)

      // A resumes: its PATCH (epoch 0) reaches the apiserver; its own preconditions (sx's version) still hold
      const rvTest = patch.find((op) => op.op === 'test' && op.path === '/metadata/resourceVersion');
      expect(rvTest?.value).toBe((await admin.get<V1Pod>(podPath('sx'))).metadata?.resourceVersion);
      await expectLateWriteRefused(aBind, 'sx', epochA);
      // kube-scheduler really sent sx's bind to A, and A answered it with an Error
      await pollUntil('A answered the bind of sx', () => a.binds.length > 0, { timeoutMs: 10_000 });
      expect(a.binds).toEqual([{ pod: 'sx', node: 'kwok-1', error: expect.stringMatching(/^ulysses: bind sched-fence\/sx to kwok-1: /) }]);

      // what kube-scheduler made of it: the bind Error as a FailedScheduling Event, then (retried
      // through B) unschedulable with the extender's TDMA message
      const events = async () =>
        (await admin.request<{ items: CoreV1Event[] }>('GET', `/api/v1/namespaces/${ns}/events`, { query: { fieldSelector: `involvedObject.uid=${sx.metadata!.uid!}` } })).items.filter(
          (e) => e.reason === 'FailedScheduling',
        );
      const bindError = await pollUntil('FailedScheduling of sx with A\'s bind Error', async () => (await events()).find((e) => e.message?.includes('ulysses: bind sched-fence/sx to kwok-1: ')), { timeoutMs: 30_000 });
      expect(bindError.type).toBe('Warning');
      const unschedulable = await pollUntil('FailedScheduling of sx: no slots left (B\'s filter)', async () => (await events()).find((e) => e.message?.includes('ulysses: ulysses.io/tdma: ')), {
        timeoutMs: 60_000,
      });
      expect(unschedulable.message).toMatch(/^0\/1 nodes are available: /);
      const x = await pollUntil(
        'sx Pending, PodScheduled=False Unschedulable',
        async () => {
          const p = await admin.get<V1Pod>(podPath('sx'));
          return p.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable') ? p : undefined;
        },
        { timeoutMs: 30_000 },
      );
      expect(x.spec?.nodeName).toBeUndefined();
      expect(x.status?.phase).toBe('Pending');
      // A's last answer (sent after its gate closed) ended its connection: the scheduler's next call
      // for sx opened a new one, routed to B, rather than reaching the deposed A (a 503)
      expect((await events()).map((e) => e.message).filter((m) => m?.includes('code 503'))).toEqual([]);
      expect(x.metadata?.annotations).toEqual(scheduledPod('sx').metadata!.annotations);
      expect(b.binds.map((r) => r.pod)).toEqual(['sy']);
      expect(a.binds).toHaveLength(1);

      // from the API: every slot held by one pod at most, and only sy bound
      const holders = new Map<number, string[]>();
      const pods = (await admin.get<{ items: V1Pod[] }>(`/api/v1/namespaces/${ns}/pods`)).items;
      for (const p of pods) {
        const slots = p.metadata?.annotations?.['ulysses.io/tdma-slots'];
        for (const s of slots ? (JSON.parse(slots) as number[]) : []) holders.set(s, [...(holders.get(s) ?? []), p.metadata!.name!]);
      }
      expect(Object.fromEntries(holders)).toEqual({ 0: ['sy'], 1: ['sy'] });
      expect(Object.fromEntries(pods.map((p) => [p.metadata!.name!, p.spec?.nodeName ?? null]))).toEqual({ sx: null, sy: 'kwok-1' });
    } finally {
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
    }
  });
});

/** Dry-run Lease PATCHes apiserver `url` admitted, from its own metrics (apiserver_request_total, code 200). */
async function admittedDryRuns(url: string): Promise<number> {
  const pki = pkiPaths(join(runDir, 'pki'));
  const [status, body] = await httpsGet(`${url}/metrics`, { ca: pki.caCert, ...pki.client('admin') });
  if (status !== 200) throw new Error(`GET ${url}/metrics: ${status}`);
  let n = 0;
  for (const line of body.split('\n')) {
    if (!line.startsWith('apiserver_request_total{')) continue;
    if (['code="200"', 'dry_run="All"', 'resource="leases"', 'verb="PATCH"'].every((l) => line.includes(l))) n += Number(line.split(' ').pop());
  }
  return n;
}

/** etcd's JSON gateway (v3 API: keys and values base64). */
async function etcd<T>(path: string, body: object): Promise<T> {
  const res = await fetch(`http://127.0.0.1:${PORTS.etcdClient}/v3/${path}`, { method: 'POST', body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`etcd ${path}: HTTP ${res.status}: ${await res.text()}`);
  return (await res.json()) as T;
}

/** The etcd key of apiserver `ip`'s endpoint lease, which its lease reconciler refreshes (TTL 15 s, every 10 s). */
const endpointLeaseKey = (ip: string) => Buffer.from(`/registry/masterleases/${ip}`).toString('base64');

/**
 * Keeps apiserver `ip` listed while it is stopped: its endpoint lease's key written again, same
 * value, under an etcd lease of the test's own (10 min), as if it still refreshed it: an apiserver
 * that is listed but does not answer (hung, or cut off from this client), for as long as the test
 * needs. Once resumed, its reconciler's next refresh puts the key under its own lease again.
 */
async function holdEndpointLease(ip: string): Promise<string> {
  const value = (await endpointLease(ip))?.value;
  if (!value) throw new Error(`apiserver ${ip} has no endpoint lease in etcd: not listed`);
  const { ID } = await etcd<{ ID: string }>('lease/grant', { TTL: 600 });
  await etcd('kv/put', { key: endpointLeaseKey(ip), value, lease: ID });
  return ID;
}

/** The key of apiserver `ip`'s endpoint lease: its value and the etcd lease it is held under. */
async function endpointLease(ip: string): Promise<{ value: string; lease?: string } | undefined> {
  return (await etcd<{ kvs?: Array<{ value: string; lease?: string }> }>('kv/range', { key: endpointLeaseKey(ip) })).kvs?.[0];
}

describe('reservation epoch on every apiserver (two kube-apiservers on one etcd)', () => {
  it('a new leader dry-runs its epoch on both listed apiservers; with the second stopped it does not serve (readiness names it) until it resumes', async () => {
    const first = apiserverOf(0, runDir);
    const second = apiserverOf(1, runDir);
    expect([first.address, second.address]).toEqual(['10.243.0.1', '10.243.0.2']);
    // both listed by the apiservers' own reconcilers (each adds itself within its 10 s interval)
    await pollUntil('both apiservers in EndpointSlice default/kubernetes', async () => JSON.stringify(apiserversFromSlice(await admin.get(APISERVER_SLICE_PATH))) === JSON.stringify([first.url, second.url]), {
      timeoutMs: 60_000,
      intervalMs: 200,
    });
    const stops: Array<() => Promise<void>> = [];
    let stopped = false;
    try {
      const replica = (id: string) => {
        let serving = false;
        let served!: () => void;
        const servedP = new Promise<void>((r) => (served = r));
        const leadership = new ExtenderLeadership({
          client: asExtender,
          namespace: LEASE_NS,
          name: LEASE,
          identity: id,
          ...FAST_LEASE,
          log: silentLogger(),
          rebuild: async () => undefined,
          onServing: () => {
            serving = true;
            served();
          },
          onStopped: () => undefined,
        });
        stops.push(() => leadership.stop());
        leadership.start();
        return { leadership, served: servedP, serving: () => serving };
      };
      const before = { first: await admittedDryRuns(first.url), second: await admittedDryRuns(second.url) };
      const c = replica('ext-c');
      await c.served;
      const epochC = Number((await admin.get<V1Lease>(leasePath)).spec?.leaseTransitions);
      expect(c.leadership.confirmations).toEqual(
        expect.arrayContaining([
          { apiserver: '10.243.0.1:16443', epoch: epochC, kubeconfigServer: true },
          { apiserver: '10.243.0.2:16443', epoch: epochC, kubeconfigServer: false },
        ]),
      );
      expect(c.leadership.confirmations).toHaveLength(2);
      // each apiserver itself admitted a dry run of the Lease (the kubeconfig's server is the first: one request each)
      expect(await admittedDryRuns(first.url)).toBeGreaterThan(before.first);
      expect(await admittedDryRuns(second.url)).toBeGreaterThan(before.second);
      await c.leadership.stop();

      // stop the second apiserver and keep it listed (its endpoint lease held by the test): listed, not answering
      process.kill(second.pid, 'SIGSTOP');
      stopped = true;
      const held = await holdEndpointLease(second.address);
      const d = replica('ext-d');
      const pendingReason = await pollUntil(
        'the new leader confirmed on the first apiserver and waits for the second',
        () => {
          const g = d.leadership.gate.check();
          return !g.ready && g.reason.includes('10.243.0.2:16443') && !g.reason.includes('10.243.0.1:16443') ? g.reason : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 20 },
      );
      const epochD = Number((await admin.get<V1Lease>(leasePath)).spec?.leaseTransitions);
      expect(epochD).toBe(epochC + 1);
      expect(pendingReason).toMatch(new RegExp(`confirming reservation epoch ${epochD} .* on 2 apiserver\\(s\\); pending: 10\\.243\\.0\\.2:16443: `));
      expect(d.serving()).toBe(false);
      expect(d.leadership.confirmations).toEqual([{ apiserver: '10.243.0.1:16443', epoch: epochD, kubeconfigServer: true }]);
      // still listed: the leader waits for it, not for the list
      expect(apiserversFromSlice(await admin.get(APISERVER_SLICE_PATH))).toContain(second.url);

      process.kill(second.pid, 'SIGCONT');
      stopped = false;
      await d.served;
      expect(d.leadership.confirmations).toEqual([
        { apiserver: '10.243.0.1:16443', epoch: epochD, kubeconfigServer: true },
        { apiserver: '10.243.0.2:16443', epoch: epochD, kubeconfigServer: false },
      ]);
      expect(d.leadership.gate.check()).toMatchObject({ ready: true, epoch: String(epochD) });

      // an apiserver that stays stopped leaves the list (its endpoint lease expires: 5-25 s), and a
      // new leader then serves without it: first the resumed apiserver holds its key again itself
      await pollUntil('the resumed apiserver refreshed its endpoint lease', async () => (await endpointLease(second.address))?.lease !== held, { timeoutMs: 60_000, intervalMs: 200 });
      await d.leadership.stop();
      process.kill(second.pid, 'SIGSTOP');
      stopped = true;
      const e = replica('ext-e');
      await pollUntil('the stopped apiserver left EndpointSlice default/kubernetes', async () => !apiserversFromSlice(await admin.get(APISERVER_SLICE_PATH)).includes(second.url), {
        timeoutMs: 120_000,
        intervalMs: 200,
      });
      await withTimeout(e.served, 60_000, 'the new leader serving once the stopped apiserver left the list');
      const epochE = Number((await admin.get<V1Lease>(leasePath)).spec?.leaseTransitions);
      expect(epochE).toBe(epochD + 1);
      expect(e.leadership.confirmations).toEqual([{ apiserver: '10.243.0.1:16443', epoch: epochE, kubeconfigServer: true }]);
    } finally {
      if (stopped) process.kill(second.pid, 'SIGCONT');
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
    }
  });
});

afterAll(async () => {
  await admin?.request('DELETE', leasePath).catch(() => undefined);
});
