/**
 * The testbed's own acceptance test (issue "Foundation"): 2 real nodes + 10 KWOK nodes, a
 * Deployment of 4 UDP echo pods on the real nodes answering from the host, a NoExecute taint on one
 * real node and the pods respawned Ready on the other, then a teardown that leaves nothing behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppsV1Api, CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { K8S_VERSION } from '../../experiments/testbed/binaries.ts';
import { applyDeployment, deployment, ensureNamespace, podReady, taintNoExecute, udpFirstAnswer } from '../../experiments/workloads.ts';
import { FatalError, pollUntil } from '../../experiments/testbed/processes.ts';
import { PodStartWatch } from '../../experiments/pod-start.ts';

const runDir = '/tmp/ulysses-it-testbed';
let state: testbed.TestbedState;
let kc: KubeConfig;
let core: CoreV1Api;
let apps: AppsV1Api;

describe('testbed: 2 real nodes + 10 KWOK nodes', () => {
  beforeAll(async () => {
    await testbed.down({ runDir, log: () => undefined }); // a leftover of an aborted run
    state = await testbed.up({ runDir, realNodes: 2, kwokNodes: 10 });
    kc = testbed.kubeConfigFor(state);
    core = kc.makeApiClient(CoreV1Api);
    apps = kc.makeApiClient(AppsV1Api);
  });
  afterAll(async () => {
    if (state) await testbed.down({ runDir });
  });

  it('registers every node Ready, real ones with their own kubelet and containerd', async () => {
    const nodes = (await core.listNode()).items;
    const ready = (n: (typeof nodes)[number]) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
    const real = nodes.filter((n) => n.metadata?.labels?.['ulysses.io/testbed-node'] === 'real');
    const kwok = nodes.filter((n) => n.metadata?.labels?.['ulysses.io/testbed-node'] === 'kwok');
    expect(real.map((n) => n.metadata!.name).sort()).toEqual(['real-1', 'real-2']);
    expect(kwok).toHaveLength(10);
    expect([...real, ...kwok].every(ready)).toBe(true);
    for (const n of real) {
      expect(n.status?.nodeInfo?.kubeletVersion).toBe(K8S_VERSION);
      expect(n.status?.nodeInfo?.containerRuntimeVersion).toMatch(/^containerd:\/\/2\./);
    }
  });

  it('runs echo pods on the real nodes, answers over UDP from the host, and respawns them after a NoExecute taint', async () => {
    const ns = 'it-testbed';
    await ensureNamespace(core, ns);
    await applyDeployment(apps, deployment({ namespace: ns, name: 'echo', replicas: 4, criticality: 'high', image: 'udp-echo', nodes: ['real-1', 'real-2'], spread: true }));
    const readyPods = async (): Promise<V1Pod[]> =>
      (await core.listNamespacedPod({ namespace: ns })).items.filter((p) => podReady(p) && !p.metadata?.deletionTimestamp);
    const before = await pollUntil('4 echo pods Ready', async () => {
      const pods = await readyPods();
      return pods.length === 4 && pods;
    }, { timeoutMs: 90_000 });
    expect(new Set(before.map((p) => p.spec?.nodeName))).toEqual(new Set(['real-1', 'real-2']));
    // every pod answers over UDP on its own IP from the host (the CNI bridge is the gateway)
    await Promise.all(before.map((p) => udpFirstAnswer(p.status!.podIP!, undefined, { timeoutMs: 10_000 })));

    await taintNoExecute(kc, 'real-1');
    const after = await pollUntil('4 echo pods Ready on real-2 only', async () => {
      const pods = (await core.listNamespacedPod({ namespace: ns })).items;
      const ready = pods.filter((p) => podReady(p) && !p.metadata?.deletionTimestamp);
      const gone = pods.every((p) => p.spec?.nodeName !== 'real-1');
      return gone && ready.length === 4 && ready.every((p) => p.spec?.nodeName === 'real-2') && ready;
    }, { timeoutMs: 120_000 });
    await Promise.all(after.map((p) => udpFirstAnswer(p.status!.podIP!, undefined, { timeoutMs: 10_000 })));
    expect(after.every((p) => p.status!.podIP!.startsWith('10.244.2.'))).toBe(true);
  });

  it('a pod that cannot start ends the wait at once with the kubelet\'s reason, not a timeout', async () => {
    const ns = 'it-testbed-stuck';
    await ensureNamespace(core, ns);
    await core.createNamespacedPod({
      namespace: ns,
      body: {
        metadata: { name: 'no-image' },
        // real-2: the test before tainted real-1 NoExecute, which would evict the pod
        spec: { nodeName: 'real-2', containers: [{ name: 'c', image: 'ulysses.local/not-built:1', imagePullPolicy: 'Never' }] },
      },
    });
    const watch = new PodStartWatch(core, [ns]);
    let err: unknown;
    try {
      // the wait's own timeout is far beyond the kubelet's first sync: only the reason can end it early
      await pollUntil('the pod Ready', async () => {
        const pod = await core.readNamespacedPod({ name: 'no-image', namespace: ns });
        await watch.check([pod]);
        return podReady(pod);
      }, { timeoutMs: 300_000 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FatalError);
    expect((err as Error).message).toMatch(/pod it-testbed-stuck\/no-image on real-2: container c ErrImageNeverPull: .*ulysses\.local\/not-built:1/);
    await core.deleteNamespacedPod({ name: 'no-image', namespace: ns, gracePeriodSeconds: 0 });
  });

  it('reports a crashed component with its log tail', async () => {
    const sched = state.processes.find((p) => p.name === 'kube-scheduler')!;
    process.kill(sched.pid, 'SIGKILL');
    const s = await pollUntil('status to notice the dead scheduler', async () => {
      const st = await testbed.status(runDir);
      return !st.up && st;
    }, { timeoutMs: 10_000 });
    expect(s.problems.join('\n')).toMatch(/kube-scheduler \(pid \d+\) is not running; last log lines/);
  });

  it('tears down leaving no process, mount, interface or cgroup behind, a container left frozen included; down twice is safe', async () => {
    const snapshot = testbed.readState(runDir)!;
    // a container cgroup left FROZEN, as when a runtime stops while runc has it frozen: its
    // processes cannot die until it is thawed
    const leaves: string[] = [];
    const walk = (d: string) => {
      const subs = readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory());
      if (!subs.length && readFileSync(join(d, 'cgroup.procs'), 'utf8').trim()) leaves.push(d);
      for (const e of subs) walk(join(d, e.name));
    };
    for (const n of snapshot.realNodes) walk(join('/sys/fs/cgroup/freezer', n.cgroupRoot, 'kubepods'));
    expect(leaves.length, 'a running container on a real node').toBeGreaterThan(0);
    writeFileSync(join(leaves[0]!, 'freezer.state'), 'FROZEN');
    await pollUntil('the container frozen', () => readFileSync(join(leaves[0]!, 'freezer.state'), 'utf8').trim() === 'FROZEN', { timeoutMs: 10_000, intervalMs: 50 });
    await testbed.down({ runDir });
    expect(testbed.leftovers(runDir, snapshot)).toEqual([]);
    await testbed.down({ runDir }); // idempotent
    expect(testbed.readState(runDir)).toBeUndefined();
    state = undefined as never;
  });
});
