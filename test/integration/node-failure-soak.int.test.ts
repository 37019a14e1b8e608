/**
 * Soak of the fast node-failure detection (issue 39, full tier: 30 minutes by default,
 * ULYSSES_SOAK_MINUTES to change): three real nodes with their node agents, two leader-elected
 * controller-manager processes, critical pods on every node, a CPU hog of twice as many busy
 * processes as the machine has CPUs the whole time (every node shares this machine's CPUs), and
 * the apiserver stalled (SIGSTOP) for 3 s every 30 s, so every API request made then waits. Nothing
 * fails: no node is ever tainted ulysses.io/unreachable (watched throughout), no NodeFailureDetected
 * Event, no failure counted, the critical pods are the ones created before. The guards that fired
 * are printed (a benchmark figure, not asserted).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import type { V1Node } from '@kubernetes/client-node';
import { useTestbed } from './harness.ts';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { pollUntil, stopProcess } from '../../experiments/testbed/processes.ts';
import { ControllerManagers, DETECTION, KCM_WITHOUT_REPLACED, metric, nodeTainted, probedFor } from './node-failure-harness.ts';
import { applyDeployment, deployment, podReady } from '../../experiments/workloads.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { NODE_FAILURE_EVENTS } from '../../controller-manager/node-failure.ts';

const runDir = '/tmp/ulysses-it-node-failure-soak';
const ns = 'node-failure-soak';
const MINUTES = Number(process.env.ULYSSES_SOAK_MINUTES ?? 30);
const t = useTestbed(runDir, { realNodes: 3, kubeletShimConfig: 'kubelet-shim/configs/vanilla.yaml', controllers: KCM_WITHOUT_REPLACED, namespace: ns });
let cms: ControllerManagers;
const hogs: ChildProcess[] = [];
let stall: NodeJS.Timeout | undefined;
beforeAll(() => {
  cms = new ControllerManagers(runDir, t.state.kubeconfig, t.kc);
});
afterAll(async () => {
  clearInterval(stall);
  for (const h of hogs) h.kill('SIGKILL');
  for (const p of cms?.procs ?? []) await stopProcess(p.pid, 2000);
});

describe(`node failure detection, ${MINUTES}-minute soak under a CPU hog and apiserver stalls`, () => {
  it('fails no node', { timeout: MINUTES * 60_000 * 3 + 600_000 }, async () => {
    if (!(MINUTES > 0)) throw new Error(`ULYSSES_SOAK_MINUTES must be a positive number, got ${process.env.ULYSSES_SOAK_MINUTES}`);
    const { core, apps } = t;
    // soak-a leads (started alone: with both started together either may win), soak-b stands by
    const a = cms.start('soak-a');
    await pollUntil('soak-a leads', async () => (await cms.holder()) === 'soak-a', { timeoutMs: 60_000 });
    cms.start('soak-b');
    await pollUntil('soak-a armed the 3 node agents', async () => (await metric(a, 'ulysses_node_agents_armed')) === 3, { timeoutMs: 60_000, intervalMs: 200 });
    await applyDeployment(apps, deployment({ namespace: ns, name: 'upf', replicas: 3, criticality: 'high', image: 'udp-echo', spread: true }));
    const before = await pollUntil('3 critical pods Ready, one per node', async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=upf' })).items.filter(podReady);
      return pods.length === 3 && new Set(pods.map((p) => p.spec?.nodeName)).size === 3 && pods;
    }, { timeoutMs: 120_000 });

    // any ulysses.io/unreachable seen at any moment of the soak, not only at the end
    const tainted = new Set<string>();
    const nodes = new ResilientInformer<V1Node>(t.kc, { path: '/api/v1/nodes' });
    const onNode = (n: V1Node) => nodeTainted(n) && tainted.add(n.metadata!.name!);
    nodes.on('add', onNode);
    nodes.on('update', onNode);
    await nodes.start();

    const busy = 2 * availableParallelism();
    for (let i = 0; i < busy; i++) hogs.push(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
    const apiserver = testbed.readState(runDir)!.processes.find((p) => p.name === 'kube-apiserver')!.pid;
    let stalls = 0;
    let resumed: Promise<void> = Promise.resolve();
    stall = setInterval(() => {
      process.kill(apiserver, 'SIGSTOP');
      stalls++;
      resumed = new Promise((r) =>
        setTimeout(() => {
          process.kill(apiserver, 'SIGCONT');
          r();
        }, 3000),
      );
    }, 30_000);
    // the soak's length in probe windows (progress of the leader's probing, whatever the load does to timers)
    const windows = (MINUTES * 60_000) / DETECTION.windowMs;
    await probedFor(a, 3, windows, `for ${MINUTES} minutes`, MINUTES * 60_000 * 3);
    clearInterval(stall);
    for (const h of hogs.splice(0)) h.kill('SIGKILL');
    await resumed; // the last stall ends
    nodes.stop();

    const guards = {
      lag: await metric(a, 'ulysses_node_failure_guards_total', { guard: 'decider-lag' }),
      kubeletAnswers: await metric(a, 'ulysses_node_failure_guards_total', { guard: 'kubelet-answers' }),
      missed: await metric(a, 'ulysses_node_heartbeats_missed_total'),
      probes: await metric(a, 'ulysses_node_heartbeat_probes_total'),
    };
    console.log(`soak: ${MINUTES} min, ${stalls} apiserver stalls of 3 s, ${busy} busy processes; ${JSON.stringify(guards)}`);
    expect([...tainted]).toEqual([]);
    expect(await metric(a, 'ulysses_node_failures_detected_total')).toBe(0);
    expect((await core.listEventForAllNamespaces({ fieldSelector: `reason=${NODE_FAILURE_EVENTS.detected}` })).items).toEqual([]);
    const after = (await core.listNamespacedPod({ namespace: ns, labelSelector: 'app=upf' })).items;
    expect(after.map((p) => p.metadata!.uid).sort()).toEqual(before.map((p) => p.metadata!.uid).sort());
    expect(after.every((p) => !p.metadata?.deletionTimestamp)).toBe(true);
  });
});
