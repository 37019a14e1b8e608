/**
 * The extender rescue (manifests/extender-rescue.ts): which Pending extender pod a control-plane node
 * takes, and the decision on a fake clock against a recording API (a leader that renews is never
 * rescued, one pod per silence, an unanswering apiserver decides nothing). The real path (both
 * extender pods gone on a kubeadm cluster, kube-scheduler stalled, the rescue binding one and the
 * cluster scheduling again) is in kubeadm-node-shell.int (full tier).
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ExtenderRescue, rescueCandidate } from '../../manifests/extender-rescue.ts';

const log = pino({ level: 'silent' });
const pod = (name: string, o: { created?: string; nodeName?: string; phase?: string; deleting?: boolean; nodeSelector?: Record<string, string>; requiredAffinity?: boolean } = {}) => ({
  metadata: { name, namespace: 'ulysses-system', creationTimestamp: o.created ?? '2026-11-29T10:00:00Z', deletionTimestamp: o.deleting ? '2026-11-29T10:01:00Z' : undefined },
  spec: { nodeName: o.nodeName, nodeSelector: o.nodeSelector, affinity: o.requiredAffinity ? { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } } } : undefined },
  status: { phase: o.phase ?? 'Pending' },
});

describe('rescueCandidate', () => {
  it('the oldest Pending, unbound, not deleted pod the node matches', () => {
    const pods = [pod('b', { created: '2026-11-29T10:00:02Z' }), pod('a', { created: '2026-11-29T10:00:01Z' }), pod('running', { nodeName: 'w1', phase: 'Running', created: '2026-11-29T09:00:00Z' })];
    expect(rescueCandidate(pods, {})?.metadata?.name).toBe('a');
  });

  it('never a bound, deleted or finished pod, one whose nodeSelector the node does not match, or one with a required node affinity', () => {
    expect(rescueCandidate([pod('bound', { nodeName: 'w1' }), pod('deleting', { deleting: true }), pod('failed', { phase: 'Failed' })], {})).toBeUndefined();
    expect(rescueCandidate([pod('elsewhere', { nodeSelector: { 'kubernetes.io/hostname': 'cp-2' } })], { 'kubernetes.io/hostname': 'cp-1' })).toBeUndefined();
    expect(rescueCandidate([pod('here', { nodeSelector: { 'kubernetes.io/hostname': 'cp-1' } })], { 'kubernetes.io/hostname': 'cp-1' })?.metadata?.name).toBe('here');
    expect(rescueCandidate([pod('affinity', { requiredAffinity: true })], {})).toBeUndefined();
  });
});

describe('ExtenderRescue (fake clock, recording API)', () => {
  function api(pods: ReturnType<typeof pod>[]) {
    const calls: string[] = [];
    const state = { holder: 'ext-a', renew: '1', down: false };
    const client = {
      request: async <T>(method: string, path: string, opts: { body?: unknown } = {}): Promise<T> => {
        if (state.down) throw new Error('connect ECONNREFUSED');
        calls.push(`${method} ${path}`);
        if (path.includes('/leases/')) return { spec: { holderIdentity: state.holder, renewTime: state.renew } } as T;
        if (path === '/api/v1/nodes') return { items: [{ metadata: { labels: { 'kubernetes.io/hostname': 'cp-1' } } }] } as T;
        if (path.endsWith('/binding')) {
          const name = path.split('/').at(-2)!;
          const p = pods.find((x) => x.metadata.name === name)!;
          p.spec.nodeName = (opts.body as { target: { name: string } }).target.name;
          return {} as T;
        }
        return { items: pods } as T;
      },
    };
    return { client, calls, state };
  }

  it('a leader that renews is never rescued, however long; silence of afterMs binds one pod to this node, the next silence the next', async () => {
    const pods = [pod('ext-1', { created: '2026-11-29T10:00:01Z' }), pod('ext-2', { created: '2026-11-29T10:00:02Z' })];
    const { client, calls, state } = api(pods);
    let t = 0;
    const rescue = new ExtenderRescue({ client, node: 'cp-1', afterMs: 30_000, log, now: () => t });
    for (; t <= 300_000; t += 2_000) {
      state.renew = String(t);
      expect(await rescue.tick()).toBeUndefined();
    }
    expect(calls.filter((c) => !c.includes('/leases/'))).toEqual([]);
    // the leader is gone: its Lease last changed at lastChange
    const lastChange = t - 2_000;
    for (; t < lastChange + 30_000; t += 2_000) expect(await rescue.tick()).toBeUndefined();
    expect(await rescue.tick()).toBe('ext-1');
    expect(pods[0]!.spec.nodeName).toBe('cp-1');
    expect(calls).toContain('POST /api/v1/namespaces/ulysses-system/pods/ext-1/binding');
    // the next check does not bind again at once; another silence of afterMs binds the next
    t += 2_000;
    expect(await rescue.tick()).toBeUndefined();
    t += 30_000;
    expect(await rescue.tick()).toBe('ext-2');
  });

  it('an apiserver that does not answer decides nothing; its return counts the silence again', async () => {
    const { client, state } = api([pod('ext-1')]);
    let t = 0;
    const rescue = new ExtenderRescue({ client, node: 'cp-1', afterMs: 30_000, log, now: () => t });
    await rescue.tick();
    state.down = true;
    for (t = 2_000; t <= 60_000; t += 2_000) expect(await rescue.tick()).toBeUndefined();
    state.down = false;
    t += 2_000;
    expect(await rescue.tick()).toBeUndefined();
    t += 28_000;
    expect(await rescue.tick()).toBeUndefined();
    t += 2_000;
    expect(await rescue.tick()).toBe('ext-1');
  });

  it('with nothing to bind (the extender not installed, or its pods all placed) it binds nothing', async () => {
    const { client, calls } = api([pod('placed', { nodeName: 'w1', phase: 'Running' })]);
    let t = 0;
    const rescue = new ExtenderRescue({ client, node: 'cp-1', afterMs: 30_000, log, now: () => t });
    for (; t <= 120_000; t += 2_000) expect(await rescue.tick()).toBeUndefined();
    expect(calls.filter((c) => c.startsWith('POST'))).toEqual([]);
  });
});
