import { describe, expect, it } from 'vitest';
import { EventRecorder, EVENT_SPAM_BURST } from '../../core/events.ts';
import { ApiError, type KubeClient } from '../../core/kube.ts';

/** Records the requests; the apiserver side is out of scope of this unit test (see deployment.int.test.ts). */
function fakeClient() {
  const calls: { method: string; path: string; body: any }[] = [];
  let n = 0;
  const client = {
    post: async (path: string, body: any) => {
      calls.push({ method: 'POST', path, body });
      return { ...body, metadata: { ...body.metadata, name: `${body.metadata.generateName}${n++}` } };
    },
    request: async (method: string, path: string, opts: { body?: unknown }) => {
      calls.push({ method, path, body: opts.body });
      if (path.endsWith('gone')) throw new ApiError('not found', 404);
      return {};
    },
  } as unknown as KubeClient;
  return { client, calls };
}

const rs = { apiVersion: 'apps/v1', kind: 'ReplicaSet', metadata: { name: 'web-abc', namespace: 'ns', uid: 'u1' } };

describe('EventRecorder', () => {
  it('writes core/v1 Events with source and reporting component; aggregates identical ones into count', async () => {
    const { client, calls } = fakeClient();
    let now = 1_000_000;
    const rec = new EventRecorder({ client, reportingController: 'ulysses-controller-manager', reportingInstance: 'i1', now: () => now });
    const events = rec.forComponent('replicaset-controller');
    events.event(rs, 'Normal', 'SuccessfulCreate', 'Created pod: web-abc-1');
    events.event(rs, 'Normal', 'SuccessfulCreate', 'Created pod: web-abc-2');
    await rec.flush();
    now += 1000;
    events.event(rs, 'Normal', 'SuccessfulCreate', 'Created pod: web-abc-1');
    await rec.flush();
    expect(calls.map((c) => c.method)).toEqual(['POST', 'POST', 'PATCH']);
    expect(calls[0]!.path).toBe('/api/v1/namespaces/ns/events');
    expect(calls[0]!.body).toMatchObject({
      involvedObject: { kind: 'ReplicaSet', name: 'web-abc', namespace: 'ns', uid: 'u1', apiVersion: 'apps/v1' },
      reason: 'SuccessfulCreate',
      message: 'Created pod: web-abc-1',
      type: 'Normal',
      source: { component: 'replicaset-controller' },
      reportingComponent: 'ulysses-controller-manager',
      reportingInstance: 'i1',
      count: 1,
    });
    expect(calls[2]!.path).toBe('/api/v1/namespaces/ns/events/web-abc.0');
    expect(calls[2]!.body).toMatchObject({ count: 2 });
  });

  it('rate-limits per object (burst 25, then one per 5 min)', async () => {
    const { client, calls } = fakeClient();
    let now = 0;
    const rec = new EventRecorder({ client, reportingController: 'x', now: () => now });
    for (let i = 0; i < 40; i++) rec.event('c', rs, 'Normal', 'R', `m${i}`);
    rec.event('c', { ...rs, metadata: { ...rs.metadata, name: 'other' } }, 'Normal', 'R', 'other object');
    await rec.flush();
    expect(calls).toHaveLength(EVENT_SPAM_BURST + 1);
    now += 5 * 60_000;
    rec.event('c', rs, 'Normal', 'R', 'after refill');
    await rec.flush();
    expect(calls.at(-1)!.body.message).toBe('after refill');
  });

  it('never throws into the caller; a vanished aggregated Event is created again', async () => {
    const { client, calls } = fakeClient();
    const rec = new EventRecorder({ client, reportingController: 'x', now: () => 0 });
    (client as any).post = async (path: string, body: any) => {
      calls.push({ method: 'POST', path, body });
      return { metadata: { name: 'gone' } };
    };
    rec.event('c', rs, 'Warning', 'R', 'm');
    rec.event('c', rs, 'Warning', 'R', 'm');
    await rec.flush();
    expect(calls.map((c) => c.method)).toEqual(['POST', 'PATCH', 'POST']);
    (client as any).post = async () => {
      throw new Error('apiserver down');
    };
    expect(() => rec.event('c', rs, 'Warning', 'R', 'new')).not.toThrow();
    await rec.flush();
  });
});
