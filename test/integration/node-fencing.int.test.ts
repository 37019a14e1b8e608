/**
 * Optional self-fencing (issue 39, kubelet-shim/fencing.ts) on a real node: its kubelet-shim with
 * `nodeAgent.fencing` on (afterMs 2 s), a critical pod (udp-echo, criticality high) on it, no
 * controller manager (so no heartbeat probe ever comes).
 *  - The decider gone but the apiserver answering (a decider restart or leader change): nothing is
 *    fenced, the critical sandbox keeps running, over several windows of checks.
 *  - The apiserver stopped too (the node cut off from the control plane): the shim stops the
 *    critical sandbox (seen in containerd, not through the stopped apiserver) and the kubelet's
 *    attempts to start it again are refused while fenced.
 *  - The apiserver back: fencing lifted, the kubelet runs the pod again.
 * Assertions on what happened (sandbox states, the shim's metrics), no timing.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify as stringifyYaml } from 'yaml';
import { useTestbed } from './harness.ts';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { applyDeployment, deployment, podReady } from '../../experiments/workloads.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';
import { metricSamples } from '../../core/metrics.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';

const runDir = '/tmp/ulysses-it-node-fencing';
const ns = 'node-fencing-it';
const AFTER_MS = 2000;
const CHECK_MS = 250;
const shimConfig = '/tmp/ulysses-it-node-fencing-shim.yaml';
writeFileSync(shimConfig, stringifyYaml({ pacing: { policy: { type: 'vanilla' } }, nodeAgent: { fencing: { enabled: true, afterMs: AFTER_MS, checkMs: CHECK_MS } } }));
const t = useTestbed(runDir, { realNodes: 1, kubeletShimConfig: shimConfig, namespace: ns });
let apiserverPid = 0;
afterAll(() => {
  if (apiserverPid) process.kill(apiserverPid, 'SIGCONT');
});

describe('self-fencing of a node cut off from the control plane', () => {
  it('never fences while the apiserver answers; cut off, stops the critical pod and refuses it; back, runs it again', async () => {
    const state = testbed.readState(runDir)!;
    const node = state.realNodes[0]!;
    const shimMetric = async (name: string, labels: Record<string, string> = {}) => {
      const text = await (await fetch(`http://127.0.0.1:${node.shimMetricsPort}/metrics`)).text();
      return metricSamples(text, new Set([name])).filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
    };
    const containerd = new CriClient(node.socket);
    const critical = async () =>
      ((await containerd.call<{ items?: { id: string; state: string; labels?: Record<string, string> }[] }>('ListPodSandbox', { filter: { label_selector: { [CRITICALITY_LABEL]: 'high' } } })).items ?? []).map((s) => ({ id: s.id, state: s.state }));
    try {
      await applyDeployment(t.apps, deployment({ namespace: ns, name: 'upf', replicas: 1, criticality: 'high', image: 'udp-echo' }));
      await pollUntil('the critical pod Ready', async () => (await t.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=upf' })).items.some(podReady), { timeoutMs: 120_000 });
      const [running] = (await critical()).filter((s) => s.state === 'SANDBOX_READY');
      expect(running).toBeDefined();

      // no decider (no probe ever), the apiserver answering: several windows of checks, nothing fenced
      await pollUntil('no probe for longer than afterMs', async () => (await shimMetric('ulysses_node_agent_seconds_since_probe')) * 1000 > AFTER_MS, { timeoutMs: 60_000, intervalMs: 200 });
      const checked = await shimMetric('ulysses_node_agent_fencing_checks_total', { apiserver: 'reachable' });
      await pollUntil('3 windows more of checks', async () => (await shimMetric('ulysses_node_agent_fencing_checks_total', { apiserver: 'reachable' })) >= checked + (3 * AFTER_MS) / CHECK_MS, { timeoutMs: 60_000, intervalMs: 200 });
      expect(await shimMetric('ulysses_node_agent_fenced')).toBe(0);
      expect(await shimMetric('ulysses_node_agent_fenced_sandboxes_total')).toBe(0);
      expect(await critical()).toContainEqual({ id: running!.id, state: 'SANDBOX_READY' });

      // cut off: the apiserver stopped as well
      apiserverPid = state.processes.find((p) => p.name === 'kube-apiserver')!.pid;
      process.kill(apiserverPid, 'SIGSTOP');
      await pollUntil('the node fenced and its critical sandbox stopped', async () => (await shimMetric('ulysses_node_agent_fenced')) === 1 && (await critical()).every((s) => s.state !== 'SANDBOX_READY'), { timeoutMs: 60_000, intervalMs: 100 });
      expect(await shimMetric('ulysses_node_agent_fenced_sandboxes_total')).toBeGreaterThanOrEqual(1);
      // while fenced, whatever the kubelet retries stays down: several more windows of checks
      const fencedChecks = await shimMetric('ulysses_node_agent_fencing_checks_total', { apiserver: 'unreachable' });
      await pollUntil('2 windows of checks while fenced', async () => (await shimMetric('ulysses_node_agent_fencing_checks_total', { apiserver: 'unreachable' })) >= fencedChecks + (2 * AFTER_MS) / CHECK_MS, { timeoutMs: 60_000, intervalMs: 100 });
      expect((await critical()).filter((s) => s.state === 'SANDBOX_READY')).toEqual([]);

      // the apiserver back: lifted, and the kubelet runs the critical pod again
      process.kill(apiserverPid, 'SIGCONT');
      apiserverPid = 0;
      await pollUntil('fencing lifted', async () => (await shimMetric('ulysses_node_agent_fenced')) === 0, { timeoutMs: 60_000, intervalMs: 100 });
      await pollUntil('the critical pod running again', async () => (await critical()).some((s) => s.state === 'SANDBOX_READY'), { timeoutMs: 120_000, intervalMs: 200 });
      await pollUntil('the critical pod Ready again', async () => (await t.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=upf' })).items.some(podReady), { timeoutMs: 120_000 });
      const log = readFileSync(join(node.dir, 'kubelet-shim.log'), 'utf8');
      expect(log).toContain('node cut off from the control plane: fencing, stopping its critical pods');
      expect(log).toContain('fencing lifted');
    } finally {
      if (apiserverPid) process.kill(apiserverPid, 'SIGCONT');
      apiserverPid = 0;
      containerd.client.close();
    }
  });
});
