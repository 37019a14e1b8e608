import { describe, expect, it } from 'vitest';
import type { CoreV1Api, CoreV1Event, V1Pod } from '@kubernetes/client-node';
import { PodStartWatch, podStartProblems } from '../../experiments/pod-start.ts';
import { FatalError } from '../../experiments/testbed/processes.ts';

const pod = (name: string, o: { ready?: boolean; waiting?: string; message?: string; deleting?: boolean } = {}): V1Pod => ({
  metadata: { name, namespace: 'ns', ...(o.deleting ? { deletionTimestamp: new Date() } : {}) },
  spec: { nodeName: 'real-1', containers: [{ name: 'c' }] },
  status: {
    conditions: [{ type: 'Ready', status: o.ready ? 'True' : 'False' }],
    containerStatuses: [{ name: 'c', image: 'x', imageID: '', ready: !!o.ready, restartCount: 0, state: o.waiting ? { waiting: { reason: o.waiting, message: o.message } } : { running: {} } }],
  },
});

const sandboxEvent = (podName: string, count: number): CoreV1Event => ({
  metadata: { name: `${podName}.1`, namespace: 'ns' },
  involvedObject: { kind: 'Pod', name: podName, namespace: 'ns' },
  reason: 'FailedCreatePodSandBox',
  type: 'Warning',
  count,
  message: 'Failed to create pod sandbox: plugin type="bridge" failed (add): failed to find plugin "bridge" in path [/usr/lib/cni]',
});

describe('pods that cannot start', () => {
  it('names a container waiting for ErrImageNeverPull with its message', () => {
    const problems = podStartProblems([pod('a', { ready: true }), pod('b', { waiting: 'ErrImageNeverPull', message: 'Container image "nope:1" is not present with pull policy of Never' })]);
    expect(problems).toEqual(['pod ns/b on real-1: container c ErrImageNeverPull: Container image "nope:1" is not present with pull policy of Never']);
  });

  it('a slow pod (ContainerCreating) is not a problem', () => {
    expect(podStartProblems([pod('a', { waiting: 'ContainerCreating' })])).toEqual([]);
  });

  it('a sandbox that failed 3 times ends the wait with the CNI message; twice does not', () => {
    expect(podStartProblems([pod('a', { waiting: 'ContainerCreating' })], [sandboxEvent('a', 2)])).toEqual([]);
    const p = podStartProblems([pod('a', { waiting: 'ContainerCreating' })], [sandboxEvent('a', 3)]);
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/^pod ns\/a on real-1: FailedCreatePodSandBox x3: .*failed to find plugin "bridge"/);
  });

  it('events of a Ready or deleted pod, or of another pod, do not count', () => {
    expect(podStartProblems([pod('a', { ready: true }), pod('b', { deleting: true, waiting: 'ContainerCreating' })], [sandboxEvent('a', 5), sandboxEvent('b', 5), sandboxEvent('c', 5)])).toEqual([]);
  });

  it('PodStartWatch lists events at most once per interval and only while a pod waits', async () => {
    let lists = 0;
    const core = { listNamespacedEvent: async () => (lists++, { items: [sandboxEvent('a', 3)] }) } as unknown as CoreV1Api;
    const w = new PodStartWatch(core, ['ns'], 60_000);
    await w.check([pod('x', { ready: true })]);
    expect(lists).toBe(0);
    await expect(w.check([pod('a', { waiting: 'ContainerCreating' })])).rejects.toBeInstanceOf(FatalError);
    await expect(w.check([pod('a', { waiting: 'ContainerCreating' })])).rejects.toThrow(/pods cannot start:\n  pod ns\/a/);
    expect(lists).toBe(1);
  });
});
