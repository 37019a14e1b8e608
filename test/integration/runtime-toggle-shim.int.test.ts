/**
 * `ulysses set kubelet-shim ...` on a real node (thesis §5.3.5): the node's shim watches
 * UlyssesConfig/default, applies its entry live and reports it in status.components["kubelet-shim/<node>"];
 * we observe the behaviour change on the real kubelet's sandbox creations (the shim's
 * "RunPodSandbox forwarded" log lines), not only the status.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import { setAndObserve, useTestbed } from './harness.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { TEST_IMAGES } from '../../experiments/testbed/images/index.ts';
import type { SetOptions } from '../../core/runtime-status.ts';

const runDir = '/tmp/ulysses-it-runtime-shim';
const ns = 'rtshim-it';
const node = 'real-1';
const key = `kubelet-shim/${node}`;
const t = useTestbed(runDir, {
  realNodes: 1,
  namespace: ns,
  kubeletShimConfig: fileURLToPath(new URL('../../kubelet-shim/configs/vanilla.yaml', import.meta.url)),
});

const pod = (name: string): V1Pod => ({
  metadata: { name, namespace: ns, labels: { 'ulysses.io/criticality': 'low', run: 'toggle' } },
  spec: { nodeName: node, terminationGracePeriodSeconds: 0, enableServiceLinks: false, containers: [{ name: 'c', image: TEST_IMAGES.pause.name, imagePullPolicy: 'Never' }] },
});

function forwarded(): Array<{ time: string; key?: string }> {
  const file = join(t.state.realNodes.find((n) => n.name === node)!.dir, 'kubelet-shim.log');
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { time: string; msg: string; key?: string })
    .filter((l) => l.msg === 'RunPodSandbox forwarded');
}

const set = (mode: string, o: SetOptions) => setAndObserve(t.kc, 'kubelet-shim', mode, o, key);

/** Creates `n` low-priority pods at once; returns the shim's forwarding times of their sandboxes. */
async function burst(prefix: string, n: number): Promise<number[]> {
  const from = forwarded().length;
  await Promise.all(Array.from({ length: n }, (_, i) => t.core.createNamespacedPod({ namespace: ns, body: pod(`${prefix}-${i}`) })));
  await pollUntil(`${n} sandboxes of ${prefix} forwarded`, () => forwarded().length - from >= n, { timeoutMs: 60_000 });
  const times = forwarded()
    .slice(from)
    .map((l) => new Date(l.time).getTime())
    .sort((a, b) => a - b);
  await t.core.deleteCollectionNamespacedPod({ namespace: ns, labelSelector: 'run=toggle', gracePeriodSeconds: 0 });
  await pollUntil('pods gone', async () => (await t.core.listNamespacedPod({ namespace: ns, labelSelector: 'run=toggle' })).items.length === 0, { timeoutMs: 90_000 });
  return times;
}

describe('kubelet-shim switched at runtime through UlyssesConfig', () => {
  it('fixed pacing starts at once on the node, vanilla stops it, an unknown parameter is rejected keeping the last good policy', async () => {
    const fixed = await set('fixed', { node, params: { waitMs: 600 } });
    expect(fixed.mode).toBe('fixed(waitMs=600)');
    expect(fixed.conditions[0]).toMatchObject({ type: 'Applied', status: 'True' });
    const paced = await burst('fixed', 4);
    for (let i = 1; i < paced.length; i++) expect(paced[i]! - paced[i - 1]!).toBeGreaterThanOrEqual(595);

    expect((await set('vanilla', { node })).mode).toBe('vanilla');
    const free = await burst('vanilla', 4);
    // without pacing the kubelet's pod workers create the 4 sandboxes together
    expect(free[free.length - 1]! - free[0]!).toBeLessThan(600);
    console.log(`4 low sandboxes: fixed 600 ms gaps ${paced.slice(1).map((x, i) => x - paced[i]!).join('/')} ms; vanilla spread ${free[free.length - 1]! - free[0]!} ms`);

    const rejected = await set('fixed', { node, params: { waitMs: 600, bogusMs: 1 } });
    expect(rejected.conditions[0]).toMatchObject({ status: 'False', reason: 'InvalidConfig' });
    expect(rejected.conditions[0]!.message).toContain('bogusMs');
    expect(rejected.mode).toBe('vanilla');
  });
});
