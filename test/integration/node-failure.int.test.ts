/**
 * Fast node-failure detection on real components (issue 39): two real nodes whose kubelet-shims run
 * the node agent, kube-controller-manager without the controllers Ulysses replaces, and Ulysses'
 * controller manager as two leader-elected processes (`npm run start:controller-manager`).
 * Safety first, each an assertion on what happened (no timing):
 *  - a leader killed with SIGKILL: the standby takes over and fails nothing;
 *  - a CPU hog on the machine: nothing failed, nothing evicted;
 *  - the apiserver stopped for 10 s: nothing failed, during or after;
 * then the fast path: a frozen node (kubelet, kubelet-shim, containerd and its shims stopped, the
 * pods' own processes still running, as on a node cut off from the control plane) is tainted
 * ulysses.io/unreachable by the detector (no taint written by the test), its critical pod is
 * replaced on the other node and its endpoint is no longer ready, while its low-priority pod stays
 * (stock behaviour); thawed, the node loses the taint again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type CoreV1Event, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { useTestbed } from './harness.ts';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { isAlive, pollUntil, stopProcess, type TrackedProcess } from '../../experiments/testbed/processes.ts';
import { ControllerManagers, KCM_WITHOUT_REPLACED, metric, metricAt, nodeTainted, probedFor as probedForNodes } from './node-failure-harness.ts';
import { applyDeployment, deployment, ECHO_PORT, podReady, udpFirstAnswer } from '../../experiments/workloads.ts';
import { testbedFrozenNode } from '../../experiments/harness/local.ts';
import { NODE_FAILURE_EVENTS } from '../../controller-manager/node-failure.ts';
import { KubeClient } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig } from '../../core/runtime-config.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';
import { join } from 'node:path';

const runDir = '/tmp/ulysses-it-node-failure';
const ns = 'node-failure-it';
// the shims fence themselves when cut off (vanilla-fencing.yaml): every safety case below must not fence either
const FENCING = { afterMs: 2000, checkMs: 250 };
const t = useTestbed(runDir, { realNodes: 2, kubeletShimConfig: 'kubelet-shim/configs/vanilla-fencing.yaml', controllers: KCM_WITHOUT_REPLACED, namespace: ns });
let kc: KubeConfig, core: CoreV1Api, apps: AppsV1Api, discovery: DiscoveryV1Api;
let cms: ControllerManagers;
const hogs: ChildProcess[] = [];
beforeAll(() => {
  ({ kc, core, apps, discovery } = t);
  cms = new ControllerManagers(runDir, t.state.kubeconfig, kc);
});
afterAll(async () => {
  for (const h of hogs) h.kill('SIGKILL');
  for (const p of cms?.procs ?? []) await stopProcess(p.pid, 2000);
});

/** both nodes probed for `windows` more windows */
const probedFor = (p: TrackedProcess, windows: number, what: string) => probedForNodes(p, 2, windows, what);

async function failureEvents(): Promise<CoreV1Event[]> {
  return (await core.listEventForAllNamespaces({ fieldSelector: `reason=${NODE_FAILURE_EVENTS.detected}` })).items;
}
const appPods = async (app: string) => (await core.listNamespacedPod({ namespace: ns, labelSelector: `app=${app}` })).items;

/** Nothing failed: no Event, no taint, no failure counted, the critical pod is the same, nothing evicted. */
async function expectNothingFailed(leader: TrackedProcess, criticalUid: string): Promise<void> {
  expect(await failureEvents()).toEqual([]);
  expect((await core.listNode()).items.filter(nodeTainted).map((n) => n.metadata!.name)).toEqual([]);
  expect(await metric(leader, 'ulysses_node_failures_detected_total')).toBe(0);
  const pods = await core.listNamespacedPod({ namespace: ns });
  expect(pods.items.filter((p) => p.metadata?.deletionTimestamp).map((p) => p.metadata!.name)).toEqual([]);
  expect((await appPods('upf')).map((p) => p.metadata!.uid)).toEqual([criticalUid]);
}

describe('node failure detection on real nodes', () => {
  let leader: TrackedProcess;
  let critical: V1Pod;

  it('a killed leader: the standby takes over, hears every agent and fails nothing', async () => {
    const a = cms.start('cm-a');
    await pollUntil('cm-a leads', async () => (await cms.holder()) === 'cm-a', { timeoutMs: 60_000 });
    await pollUntil('cm-a armed both node agents', async () => (await metric(a, 'ulysses_node_agents_armed')) === 2, { timeoutMs: 60_000, intervalMs: 200 });
    const b = cms.start('cm-b');
    await pollUntil('cm-b is a standby that sees cm-a', () => readFileSync(b.logFile, 'utf8').includes('"leader":"cm-a"'), { timeoutMs: 60_000 });

    // the critical pod and one low-priority pod per node
    await applyDeployment(apps, deployment({ namespace: ns, name: 'upf', replicas: 1, criticality: 'high', image: 'udp-echo' }));
    await applyDeployment(apps, deployment({ namespace: ns, name: 'web', replicas: 2, criticality: 'low', image: 'http-server', spread: true }));
    await core.createNamespacedService({ namespace: ns, body: { metadata: { name: 'upf' }, spec: { selector: { app: 'upf' }, ports: [{ name: 'echo', protocol: 'UDP', port: ECHO_PORT, targetPort: ECHO_PORT }] } } });
    critical = await pollUntil('the critical pod and 2 low pods Ready', async () => {
      const up = (await appPods('upf')).filter(podReady);
      const web = (await appPods('web')).filter(podReady);
      return up.length === 1 && web.length === 2 && up[0];
    }, { timeoutMs: 90_000 });

    process.kill(-a.pid, 'SIGKILL');
    await pollUntil('cm-a gone', () => !isAlive(a.pid), { timeoutMs: 10_000 });
    await pollUntil('cm-b took over the lease', async () => (await cms.holder()) === 'cm-b', { timeoutMs: 60_000 });
    await pollUntil('cm-b armed both node agents', async () => (await metric(b, 'ulysses_node_agents_armed')) === 2, { timeoutMs: 60_000, intervalMs: 200 });
    await probedFor(b, 3, 'after the takeover');
    leader = b;
    await expectNothingFailed(leader, critical.metadata!.uid!);
  });

  it('a CPU hog on the machine fails nothing', async () => {
    // more busy processes than CPUs, for 10 windows of probes
    for (let i = 0; i < 4; i++) hogs.push(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
    await probedFor(leader, 10, 'under the CPU hog');
    for (const h of hogs.splice(0)) h.kill('SIGKILL');
    await probedFor(leader, 2, 'after the CPU hog');
    await expectNothingFailed(leader, critical.metadata!.uid!);
    console.log(`guards fired under the hog: ${JSON.stringify({ lag: await metric(leader, 'ulysses_node_failure_guards_total', { guard: 'decider-lag' }), kubelet: await metric(leader, 'ulysses_node_failure_guards_total', { guard: 'kubelet-answers' }) })}`);
  });

  it('the apiserver stopped for 10 s fails nothing, during the outage or after', async () => {
    const before = await metric(leader, 'ulysses_node_heartbeat_probes_total');
    await testbed.restartComponent('kube-apiserver', { runDir, downtimeMs: 10_000 });
    // the detector probed on through the outage (heartbeats do not go through the apiserver)
    expect(await metric(leader, 'ulysses_node_heartbeat_probes_total')).toBeGreaterThan(before + 2 * 100);
    await probedFor(leader, 5, 'after the apiserver came back');
    await expectNothingFailed(leader, critical.metadata!.uid!);
    expect(isAlive(leader.pid)).toBe(true);
  });

  it('a frozen node: its critical pod is replaced through the detection, its endpoint leaves the Service, its low pod stays; thawed, the taint goes', async () => {
    const source = critical.spec!.nodeName!;
    const other = (await core.listNode()).items.map((n) => n.metadata!.name!).find((n) => n !== source)!;
    const lowOnSource = (await appPods('web')).find((p) => p.spec?.nodeName === source)!;
    const failure = testbedFrozenNode(runDir, 'node');
    await failure.freeze([source]);
    try {
      const replacement = await pollUntil(`a critical pod Ready on ${other}`, async () => (await appPods('upf')).find((p) => p.spec?.nodeName === other && podReady(p)), {
        // far below kcm's 50 s + 300 s: only the fast path can pass
        timeoutMs: 40_000,
      });
      const node = await core.readNode({ name: source });
      expect(nodeTainted(node)).toBe(true);
      const events = (await failureEvents()).filter((e) => e.involvedObject.name === source);
      expect(events).toHaveLength(1);
      expect(events[0]!.message).toMatch(/node agent silent for \d+ ms .* kubelet silent/);
      // the old pod: deleted (DisruptionTarget), its endpoint not ready in the Service's slice
      const old = await core.readNamespacedPod({ name: critical.metadata!.name!, namespace: ns });
      expect(old.metadata?.deletionTimestamp).toBeDefined();
      expect(old.status?.conditions?.find((c) => c.type === 'DisruptionTarget')?.reason).toBe('DeletionByTaintManager');
      const endpoints = await pollUntil('the Service slice lists the replacement ready and the old pod not ready', async () => {
        const slices = (await discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: 'kubernetes.io/service-name=upf' })).items;
        const eps = slices.flatMap((s) => s.endpoints ?? []);
        const byPod = (uid: string | undefined, name: string) => eps.find((e) => e.targetRef?.name === name && (!uid || e.targetRef.uid === uid));
        const mine = byPod(replacement.metadata!.uid, replacement.metadata!.name!);
        const gone = byPod(critical.metadata!.uid, critical.metadata!.name!);
        return mine?.conditions?.ready === true && (!gone || gone.conditions?.ready === false) && { mine, gone };
      }, { timeoutMs: 30_000 });
      if (endpoints.gone) expect(endpoints.gone.conditions?.terminating).toBe(true);
      // the cut-off node's pod itself runs on (its processes were not stopped), unreachable through the Service only
      await udpFirstAnswer(critical.status!.podIP!, ECHO_PORT, { timeoutMs: 10_000 });
      // low-priority pods follow stock Kubernetes: kcm's 50 s + 300 s, not this taint
      const low = await core.readNamespacedPod({ name: lowOnSource.metadata!.name!, namespace: ns });
      expect(low.metadata?.deletionTimestamp).toBeUndefined();
      expect((await core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.name=${critical.metadata!.name!},reason=NodeFailureEviction` })).items).toHaveLength(1);
    } finally {
      await failure.thaw([source]);
    }
    await pollUntil(`${source} answers again: taint removed`, async () => !nodeTainted(await core.readNode({ name: source })), { timeoutMs: 60_000 });
    await pollUntil('the old critical pod is gone', async () => !(await appPods('upf')).some((p) => p.metadata!.uid === critical.metadata!.uid), { timeoutMs: 60_000 });
    expect((await core.listEventForAllNamespaces({ fieldSelector: `reason=${NODE_FAILURE_EVENTS.recovered},involvedObject.name=${source}` })).items).toHaveLength(1);
    expect(await metric(leader, 'ulysses_node_failures_detected_total')).toBe(1);
  });

  it('UlyssesConfig spec.nodeFailure: a bad window is refused naming the field and the last good configuration stays; a good one applies', async () => {
    const client = new KubeClient(kc);
    const status = async () => (await readRuntimeConfig(client))?.status?.components?.['node-failure'];
    // the object without a nodeFailure section: the file's configuration is reported
    const first = (await patchRuntimeConfig(client, {})).metadata.generation!;
    await pollUntil('node-failure reports the file configuration', async () => {
      const st = await status();
      return !!st && st.observedGeneration >= first && st.mode === 'on period=100ms window=600ms confirm=400ms scope=critical';
    }, { timeoutMs: 30_000, intervalMs: 200 });
    const bad = (await patchRuntimeConfig(client, { nodeFailure: { periodMs: 100, windowMs: 200 } })).metadata.generation!;
    const refused = await pollUntil('node-failure reports the bad generation', async () => {
      const st = await status();
      return st && st.observedGeneration >= bad && st;
    }, { timeoutMs: 30_000, intervalMs: 200 });
    expect(refused!.conditions[0]).toMatchObject({ status: 'False', reason: 'InvalidConfig' });
    expect(refused!.conditions[0]!.message).toMatch(/spec\.nodeFailure.*windowMs.*at least 3 periods/);
    // the last good configuration (the file's) still runs
    expect(refused!.mode).toBe('on period=100ms window=600ms confirm=400ms scope=critical');
    await probedFor(leader, 2, 'with the last good configuration');
    const good = (await patchRuntimeConfig(client, { nodeFailure: { periodMs: 200, windowMs: 1000, confirmTimeoutMs: 500 } })).metadata.generation!;
    const applied = await pollUntil('node-failure applies the good generation', async () => {
      const st = await status();
      return st && st.observedGeneration >= good && st.conditions[0]?.status === 'True' && st;
    }, { timeoutMs: 30_000, intervalMs: 200 });
    expect(applied!.mode).toBe('on period=200ms window=1000ms confirm=500ms scope=critical');
    await expectNothingFailedSince(1);
  });

  it('self-fencing: no node fenced by any case above; decider stopped, apiserver answering: none; apiserver stopped too: the critical sandbox stopped and kept down; back: running again', async () => {
    const nodes = testbed.readState(runDir)!.realNodes;
    const shimMetric = (node: (typeof nodes)[number], name: string, labels: Record<string, string> = {}) => metricAt(node.shimMetricsPort, name, labels);
    // none of the safety cases above (leader killed, CPU hog, apiserver stopped 10 s, a node frozen and thawed) fenced a node
    for (const n of nodes) expect(await shimMetric(n, 'ulysses_node_agent_fenced_sandboxes_total'), n.name).toBe(0);
    // no decider any more: no probe reaches the agents
    for (const p of cms.procs) await stopProcess(p.pid, 2000);
    const upf = (await appPods('upf')).find((p) => podReady(p) && !p.metadata?.deletionTimestamp)!;
    const node = nodes.find((n) => n.name === upf.spec!.nodeName)!;
    const containerd = new CriClient(node.socket);
    const criticalSandboxes = async () =>
      ((await containerd.call<{ items?: { id: string; state: string }[] }>('ListPodSandbox', { filter: { label_selector: { [CRITICALITY_LABEL]: 'high' } } })).items ?? []).map((x) => x.state);
    const checks = (apiserver: string) => shimMetric(node, 'ulysses_node_agent_fencing_checks_total', { apiserver });
    const apiserver = testbed.readState(runDir)!.processes.find((p) => p.name === 'kube-apiserver')!.pid;
    let stopped = false;
    try {
      await pollUntil('no probe for longer than afterMs', async () => (await shimMetric(node, 'ulysses_node_agent_seconds_since_probe')) * 1000 > FENCING.afterMs, { timeoutMs: 60_000, intervalMs: 200 });
      const before = await checks('reachable');
      await pollUntil('3 windows more of checks, the apiserver answering', async () => (await checks('reachable')) >= before + (3 * FENCING.afterMs) / FENCING.checkMs, { timeoutMs: 60_000, intervalMs: 200 });
      expect(await shimMetric(node, 'ulysses_node_agent_fenced')).toBe(0);
      expect(await criticalSandboxes()).toContain('SANDBOX_READY');

      // cut off: the apiserver stopped as well
      process.kill(apiserver, 'SIGSTOP');
      stopped = true;
      // the sandbox leaves READY while the fencer's StopPodSandbox is still running: its count comes when the call returns
      await pollUntil(
        'the node fenced, its critical sandbox stopped by the fencer',
        async () => (await shimMetric(node, 'ulysses_node_agent_fenced')) === 1 && (await shimMetric(node, 'ulysses_node_agent_fenced_sandboxes_total')) >= 1 && !(await criticalSandboxes()).includes('SANDBOX_READY'),
        { timeoutMs: 60_000, intervalMs: 100 },
      );
      const fenced = await checks('unreachable');
      await pollUntil('2 windows of checks while fenced', async () => (await checks('unreachable')) >= fenced + (2 * FENCING.afterMs) / FENCING.checkMs, { timeoutMs: 60_000, intervalMs: 100 });
      expect(await criticalSandboxes()).not.toContain('SANDBOX_READY');

      process.kill(apiserver, 'SIGCONT');
      stopped = false;
      await pollUntil('fencing lifted', async () => (await shimMetric(node, 'ulysses_node_agent_fenced')) === 0, { timeoutMs: 60_000, intervalMs: 100 });
      await pollUntil('the critical pod running and Ready again', async () => (await criticalSandboxes()).includes('SANDBOX_READY') && (await appPods('upf')).some(podReady), { timeoutMs: 120_000, intervalMs: 200 });
      const log = readFileSync(join(node.dir, 'kubelet-shim.log'), 'utf8');
      expect(log).toContain('node cut off from the control plane: fencing, stopping its critical pods');
      expect(log).toContain('fencing lifted');
    } finally {
      if (stopped) process.kill(apiserver, 'SIGCONT');
      containerd.client.close();
    }
  });
});

/** No further failure than the `count` already counted, and no node tainted. */
async function expectNothingFailedSince(count: number): Promise<void> {
  expect((await core.listNode()).items.filter(nodeTainted).map((n) => n.metadata!.name)).toEqual([]);
  expect((await failureEvents()).length).toBe(count);
}
