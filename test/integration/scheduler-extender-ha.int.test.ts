/**
 * High availability of the scheduler extender with the REAL kube-scheduler (testbed, KWOK nodes):
 * two extender processes (`scheduler-plugins/extender/main.ts`, leader election with a short
 * Lease) behind one address, a TCP forwarder that, like a Service, sends each new connection to the
 * replica whose /readyz is 200 (polled as a kubelet readiness probe would). kube-scheduler calls
 * that address (filter, prioritize, bind; ignorable: false).
 *
 * A burst of pods needing TDMA slots and RT cores, exactly as many as the cluster has, is being
 * scheduled when the leader gets SIGKILL; a second wave is created while no replica leads. The
 * standby takes the Lease, rebuilds its reservations from a fresh list of the pods, becomes Ready,
 * and the scheduler places every pod: each slot and each core held by exactly one pod (from the API,
 * not from a cache). The takeover time (SIGKILL -> the standby Ready) is printed, not asserted. The
 * killed replica, started again, comes back as a standby (503 on the verbs and /readyz, 200 on
 * /healthz).
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CoordinationV1Api, type V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { KubeClient } from '../../core/kube.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { isAlive, pollUntil, startProcess, stopProcess, type TrackedProcess } from '../../experiments/testbed/processes.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { renderKubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';
import { ReadyForwarder } from '../extender-forwarder.ts';

const runDir = SHARED_RUN_DIR;
const schedulerConfig = '/tmp/ulysses-it-sched-extender-ha-kube-scheduler.yaml';
const FRONT = 20450; // the "Service": what kube-scheduler calls
const PORTS = { 'ext-a': 20451, 'ext-b': 20452 } as const;
type Replica = keyof typeof PORTS;
const ns = 'sched-ext-ha';
const SLOTS = 12; // TDMA slots of rtnet0
const CORES = 4; // cores of the budget-period node
writeFileSync(
  schedulerConfig,
  renderKubeSchedulerConfiguration({ kubeconfig: schedulerKubeconfigPath(runDir), extenderUrl: `http://127.0.0.1:${FRONT}`, weight: 10, httpTimeout: '5s' }),
);
const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 3, namespace: ns, schedulerConfig });

const NODES: Record<string, { labels?: Record<string, string>; annotations?: Record<string, string> }> = {
  'kwok-1': { labels: { 'ulysses.io/rt-scheduler': 'budget-period' }, annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores: CORES }) } },
  'kwok-2': { labels: { 'ulysses.io/tdma-network': 'rtnet0' } },
  'kwok-3': { labels: { 'ulysses.io/tdma-network': 'rtnet0' } },
};
const LEASE = ['--leader-elect-lease-duration', '3s', '--leader-elect-renew-deadline', '2s', '--leader-elect-retry-period', '500ms'];

const procs = new Map<Replica, TrackedProcess>();
let forwarder: ReadyForwarder | undefined;

function startReplica(id: Replica): TrackedProcess {
  const cfgFile = join(runDir, `${id}.yaml`);
  writeFileSync(cfgFile, JSON.stringify({ tdmaNetworks: { rtnet0: { cycleUs: 12_000, slotUs: 1000, slots: SLOTS } } }));
  const logFile = join(runDir, 'logs', `${id}.log`);
  rmSync(logFile, { force: true });
  // node itself (not npm): the pid is the extender's, SIGKILL kills exactly it
  const p = startProcess({
    name: id,
    cmd: process.execPath,
    args: ['--import', 'tsx', 'scheduler-plugins/extender/main.ts', '--kubeconfig', t.state.kubeconfig, '--config', cfgFile, '--host', '127.0.0.1', '--port', String(PORTS[id]), '--identity', id, '--no-runtime-config', ...LEASE],
    logFile,
    env: { ULYSSES_LOG_LEVEL: 'info' },
  });
  procs.set(id, p);
  return p;
}

async function probe(id: Replica, path: string): Promise<{ status: number; body: string } | undefined> {
  try {
    const r = await fetch(`http://127.0.0.1:${PORTS[id]}${path}`, { signal: AbortSignal.timeout(1000) });
    return { status: r.status, body: await r.text() };
  } catch {
    return undefined;
  }
}

const holder = async () => {
  try {
    return (await t.kc.makeApiClient(CoordinationV1Api).readNamespacedLease({ name: 'ulysses-scheduler-extender', namespace: 'kube-system' })).spec?.holderIdentity ?? '';
  } catch {
    return undefined;
  }
};

beforeAll(async () => {
  mkdirSync(join(runDir, 'logs'), { recursive: true });
  for (const [name, role] of Object.entries(NODES)) {
    await new KubeClient(t.kc).mergePatch(`/api/v1/nodes/${name}`, { metadata: { labels: role.labels ?? {}, annotations: role.annotations ?? {} } });
  }
  forwarder = new ReadyForwarder(FRONT, () => PORTS);
});
afterAll(async () => {
  await forwarder?.close();
  for (const p of procs.values()) await stopProcess(p.pid, 3000);
});

/** An RT/TDMA pod for the KWOK nodes, requesting ulysses.io/reservation: the extender binds it. */
function kwokPod(name: string, annotations: Record<string, string>): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, annotations, labels: { app: 'ha' } },
    spec: {
      containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', resources: reservationRequest() }],
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
      nodeSelector: { type: 'kwok' },
    },
  };
}
const tdmaPod = (name: string) => kwokPod(name, { 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots: 1 }) });
// 0.6 of a core: one such reservation per core
const rtPod = (name: string) => kwokPod(name, { 'ulysses.io/rt': JSON.stringify({ reservation: { runtimeUs: 6000, periodUs: 10_000, cpus: 1 } }) });

describe('scheduler extender HA: two replicas, one Lease, the real kube-scheduler', () => {
  it('kill -9 of the leader during a burst: the standby takes over, every pod is placed, no slot or core is booked twice', async () => {
    const log = (id: Replica) => readFileSync(procs.get(id)!.logFile, 'utf8');
    const explain = (id: Replica) => () => `${id} log tail:\n${log(id).split('\n').slice(-15).join('\n')}`;
    startReplica('ext-a');
    await pollUntil('ext-a leads and is Ready', async () => (await holder()) === 'ext-a' && (await probe('ext-a', '/readyz'))?.status === 200, { timeoutMs: 60_000, explain: explain('ext-a') });
    startReplica('ext-b');
    await pollUntil('ext-b is up as a standby', async () => (await probe('ext-b', '/healthz'))?.status === 200, { timeoutMs: 60_000, explain: explain('ext-b') });
    await pollUntil('ext-b observed the leader', () => log('ext-b').includes('"leader":"ext-a"'), { timeoutMs: 30_000, explain: explain('ext-b') });

    // the standby: alive, not Ready, and refuses a verb that reaches it directly
    const ready = await probe('ext-b', '/readyz');
    expect(ready?.status).toBe(503);
    expect(ready?.body).toMatch(/standby replica: Lease kube-system\/ulysses-scheduler-extender is held by "ext-a"/);
    const direct = await fetch(`http://127.0.0.1:${PORTS['ext-b']}/filter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ Pod: tdmaPod('x'), NodeNames: ['kwok-2'] }) });
    expect(direct.status).toBe(503);
    expect(((await direct.json()) as { error: string }).error).toMatch(/not serving: standby replica/);
    await pollUntil('the forwarder routes to ext-a', () => forwarder!.ready === 'ext-a', { timeoutMs: 10_000 });

    // every pod the namespace ever had bound, as seen by a watch
    const bound = new Map<string, { at: number; node: string }>();
    const watch = new ResilientInformer<V1Pod>(t.kc, { path: `/api/v1/namespaces/${ns}/pods` });
    const track = (p: V1Pod) => {
      if (p.spec?.nodeName && !bound.has(p.metadata!.name!)) bound.set(p.metadata!.name!, { at: Date.now(), node: p.spec.nodeName });
    };
    watch.on('add', track);
    watch.on('update', track);
    await watch.start();
    try {
      // wave 1: half the capacity; the leader is killed at the first binding seen
      const wave1 = [...Array.from({ length: SLOTS / 2 }, (_, i) => tdmaPod(`tdma-${i}`)), ...Array.from({ length: CORES / 2 }, (_, i) => rtPod(`rt-${i}`))];
      const wave2 = [...Array.from({ length: SLOTS / 2 }, (_, i) => tdmaPod(`tdma-${SLOTS / 2 + i}`)), ...Array.from({ length: CORES / 2 }, (_, i) => rtPod(`rt-${CORES / 2 + i}`))];
      await Promise.all(wave1.map((body) => t.core.createNamespacedPod({ namespace: ns, body })));
      await pollUntil('a first pod of the burst bound', () => bound.size > 0, { timeoutMs: 60_000, intervalMs: 5 });
      const a = procs.get('ext-a')!;
      process.kill(a.pid, 'SIGKILL');
      const killedAt = Date.now();
      const boundAtKill = bound.size;
      await pollUntil('ext-a gone', () => !isAlive(a.pid), { timeoutMs: 10_000, intervalMs: 10 });
      // wave 2: created while no replica leads (the scheduler's calls are refused until the takeover)
      await Promise.all(wave2.map((body) => t.core.createNamespacedPod({ namespace: ns, body })));
      const pendingDuringTakeover = (await t.core.listNamespacedPod({ namespace: ns })).items.filter((p) => !p.spec?.nodeName).length;

      await pollUntil('ext-b leads and is Ready', async () => (await probe('ext-b', '/readyz'))?.status === 200, { timeoutMs: 60_000, intervalMs: 20, explain: explain('ext-b') });
      const takeoverMs = Date.now() - killedAt;
      expect(await holder()).toBe('ext-b');
      // the replica logs asynchronously: the line may reach its file just after /readyz answers
      await pollUntil('ext-b logged its rebuild', () => /state rebuilt from a fresh list of the pods/.test(log('ext-b')), { timeoutMs: 10_000, intervalMs: 20, explain: explain('ext-b') });

      const all = [...wave1, ...wave2].map((p) => p.metadata!.name!);
      await pollUntil(`all ${all.length} pods bound`, () => all.every((n) => bound.has(n)), { timeoutMs: 120_000, explain: explain('ext-b') });
      const firstAfter = Math.min(...[...bound.values()].map((b) => b.at).filter((at) => at > killedAt));
      console.log(
        `[extender HA] takeover (SIGKILL -> standby Ready): ${takeoverMs} ms; first binding after the kill: ${firstAfter - killedAt} ms; ` +
          `bound at the kill: ${boundAtKill}/${wave1.length} of wave 1; pending during the takeover: ${pendingDuringTakeover}; ` +
          `all ${all.length} bound ${Math.max(...[...bound.values()].map((b) => b.at)) - killedAt} ms after the kill`,
      );

      // from the API: every slot of rtnet0 and every core of kwok-1 held by exactly one pod
      const pods = (await t.core.listNamespacedPod({ namespace: ns })).items;
      const slots = new Map<number, string[]>();
      const cores = new Map<number, string[]>();
      for (const p of pods) {
        const ann = p.metadata?.annotations ?? {};
        const name = p.metadata!.name!;
        expect(p.spec?.nodeName, name).toBeTruthy();
        expect(ann['ulysses.io/reserved-node'], name).toBe(p.spec?.nodeName);
        if (ann['ulysses.io/tdma']) {
          expect(['kwok-2', 'kwok-3']).toContain(p.spec?.nodeName);
          for (const s of JSON.parse(ann['ulysses.io/tdma-slots']!) as number[]) slots.set(s, [...(slots.get(s) ?? []), name]);
        } else {
          expect(p.spec?.nodeName, name).toBe('kwok-1');
          for (const c of JSON.parse(ann['ulysses.io/rt-cores']!) as number[]) cores.set(c, [...(cores.get(c) ?? []), name]);
        }
      }
      for (const [s, holders] of slots) expect(holders, `slot ${s}`).toHaveLength(1);
      for (const [c, holders] of cores) expect(holders, `core ${c}`).toHaveLength(1);
      expect([...slots.keys()].sort((x, y) => x - y)).toEqual(Array.from({ length: SLOTS }, (_, i) => i));
      expect([...cores.keys()].sort((x, y) => x - y)).toEqual(Array.from({ length: CORES }, (_, i) => i));
    } finally {
      watch.stop();
    }

    // the killed replica comes back as a standby
    startReplica('ext-a');
    await pollUntil('ext-a is up again', async () => (await probe('ext-a', '/healthz'))?.status === 200, { timeoutMs: 60_000, explain: explain('ext-a') });
    await pollUntil('ext-a observed ext-b as the leader', () => log('ext-a').includes('"leader":"ext-b"'), { timeoutMs: 30_000, explain: explain('ext-a') });
    const again = await probe('ext-a', '/readyz');
    expect(again?.status).toBe(503);
    expect(again?.body).toMatch(/held by "ext-b"/);
    expect(forwarder!.ready).toBe('ext-b');
  });
});
