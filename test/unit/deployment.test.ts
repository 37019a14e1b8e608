import { describe, expect, it } from 'vitest';
import type { V1Deployment, V1ReplicaSet } from '@kubernetes/client-node';
import { controllerDeps } from './fake-cluster.ts';
import {
  computeHash,
  equalIgnoreHash,
  maxSurge,
  maxUnavailable,
  newRSNewReplicas,
  planOldReplicaSets,
  proportionalSizes,
  resolveFenceposts,
  safeEncodeString,
  scaledValue,
  setCondition,
} from '../../controller-manager/controllers/deployment.ts';

const dep = (replicas: number, maxSurge?: number | string, maxUnavailable?: number | string, type = 'RollingUpdate'): V1Deployment => ({
  metadata: { name: 'd', namespace: 'ns', uid: 'u' },
  spec: {
    replicas,
    selector: { matchLabels: { app: 'a' } },
    strategy: { type, rollingUpdate: type === 'RollingUpdate' ? { maxSurge: maxSurge as never, maxUnavailable: maxUnavailable as never } : undefined },
    template: { metadata: { labels: { app: 'a' } }, spec: { containers: [{ name: 'c', image: 'i' }] } },
  },
});
const rs = (name: string, replicas: number, created: string, maxReplicas?: number): V1ReplicaSet => ({
  metadata: { name, creationTimestamp: new Date(created), annotations: maxReplicas ? { 'deployment.kubernetes.io/max-replicas': String(maxReplicas) } : {} },
  spec: { replicas, selector: {} },
});

describe('deployment helpers', () => {
  it('hash: upstream alphabet, stable under key order, changes with the template and the collision count', () => {
    const t = dep(1).spec!.template;
    const h = computeHash(t);
    expect(h).toMatch(/^[bcdfghjklmnpqrstvwxz2456789]{6,10}$/);
    expect(computeHash({ spec: t.spec, metadata: t.metadata })).toBe(h);
    expect(computeHash({ ...t, spec: { containers: [{ name: 'c', image: 'j' }] } })).not.toBe(h);
    expect(computeHash(t, 1)).not.toBe(h);
    expect(safeEncodeString('0')).toBe('4'); // '0' = 48, 48 % 27 = 21 -> alphabet[21]
  });

  it('equalIgnoreHash ignores only pod-template-hash', () => {
    const t = dep(1).spec!.template;
    const withHash = { ...t, metadata: { labels: { ...t.metadata!.labels, 'pod-template-hash': 'abc' } } };
    expect(equalIgnoreHash(t, withHash)).toBe(true);
    expect(equalIgnoreHash({ spec: t.spec }, { metadata: { labels: { 'pod-template-hash': 'x' } }, spec: t.spec })).toBe(true);
    expect(equalIgnoreHash(t, { ...withHash, metadata: { labels: { app: 'b', 'pod-template-hash': 'abc' } } })).toBe(false);
  });

  it('fenceposts: percent surge rounds up, unavailable down, both 0 -> 1 unavailable; defaults 25%/25%', () => {
    expect(resolveFenceposts(dep(10, '25%', '25%'))).toEqual({ surge: 3, unavailable: 2 });
    expect(resolveFenceposts(dep(10))).toEqual({ surge: 3, unavailable: 2 });
    expect(resolveFenceposts(dep(1, 0, '10%'))).toEqual({ surge: 0, unavailable: 1 });
    expect(maxUnavailable(dep(2, 0, 5))).toBe(2);
    expect(maxSurge(dep(3, 0, 0, 'Recreate'))).toBe(0);
    expect(maxUnavailable(dep(3, 0, 0, 'Recreate'))).toBe(0);
    expect(() => scaledValue('abc', 10, true, 'Deployment ns/d: spec.strategy.rollingUpdate.maxSurge')).toThrow(/Deployment ns\/d: spec.strategy.rollingUpdate.maxSurge: invalid value "abc"/);
  });

  it('newRSNewReplicas respects maxSurge over all ReplicaSets', () => {
    const d = dep(4, 1, 0);
    const old = rs('old', 4, '2020-01-01');
    const nw = rs('new', 0, '2020-01-02');
    expect(newRSNewReplicas(d, [old, nw], nw)).toBe(1);
    expect(newRSNewReplicas(d, [{ ...old, spec: { replicas: 3, selector: {} } }, { ...nw, spec: { replicas: 1, selector: {} } }], { ...nw, spec: { replicas: 1, selector: {} } })).toBe(2);
    expect(newRSNewReplicas(dep(4, 0, 0, 'Recreate'), [old, nw], nw)).toBe(4);
  });

  it('proportional scaling distributes by size, leftovers to the largest', () => {
    // 10 replicas (surge 3): old 8 + new 5 = 13 = 10+3; scale to 20 (surge 5) -> 25 allowed
    const d = dep(20, '25%', '25%');
    d.status = { replicas: 13 };
    const sizes = proportionalSizes(d, [rs('old', 8, '2020-01-01', 13), rs('new', 5, '2020-01-02', 13)]);
    expect(sizes.get('old')! + sizes.get('new')!).toBe(25);
    expect(sizes.get('old')).toBeGreaterThan(sizes.get('new')!);
    const down = proportionalSizes(dep(0), [rs('old', 8, '2020-01-01', 13), rs('new', 5, '2020-01-02', 13)]);
    expect([...down.values()]).toEqual([0, 0]);
  });

  it('proportional scaling: the rolling update of the conformance scenario (10 -> 20, 25 % surge) gives old 15, new 10', () => {
    // 10 replicas, surge ceil(2.5) = 3: the rollout stops at old 8 + new 5 (max-replicas 13); at 20 (surge 5): 25
    // allowed, 12 to add, old round(8 * 25 / 13) = 15, new round(5 * 25 / 13) = 10
    const d = dep(20, '25%', '25%');
    const sizes = proportionalSizes(d, [rs('old', 8, '2020-01-01', 13), rs('new', 5, '2020-01-02', 13)]);
    expect(Object.fromEntries(sizes)).toEqual({ old: 15, new: 10 });
  });

  // upstream TestScale (pkg/controller/deployment/sync_test.go), the cases that reach proportional
  // scaling (two or more active ReplicaSets, the new one not saturated): the old Deployment's size and
  // surge give each ReplicaSet's max-replicas annotation; newDeployment's surge and unavailable default to 0.
  it.each([
    // name, [old replicas, old surge], [new replicas, new surge], RSs newest first [name, size], expected sizes
    ['proportional scaling: 5 -> 10', [5, 0], [10, 0], [['foo-v2', 2], ['foo-v1', 3]], { 'foo-v2': 4, 'foo-v1': 6 }],
    ['proportional scaling: 5 -> 3', [5, 0], [3, 0], [['foo-v2', 2], ['foo-v1', 3]], { 'foo-v2': 1, 'foo-v1': 2 }],
    ['proportional scaling: 9 -> 4', [9, 0], [4, 0], [['foo-v2', 8], ['foo-v1', 1]], { 'foo-v2': 4, 'foo-v1': 0 }],
    ['proportional scaling: 7 -> 10', [7, 0], [10, 0], [['foo-v3', 2], ['foo-v2', 3], ['foo-v1', 2]], { 'foo-v3': 3, 'foo-v2': 4, 'foo-v1': 3 }],
    ['proportional scaling: 13 -> 8', [13, 0], [8, 0], [['foo-v3', 2], ['foo-v2', 8], ['foo-v1', 3]], { 'foo-v3': 1, 'foo-v2': 5, 'foo-v1': 2 }],
    ['leftover distribution: 3 -> 4', [3, 0], [4, 0], [['foo-v3', 1], ['foo-v2', 1], ['foo-v1', 1]], { 'foo-v3': 2, 'foo-v2': 1, 'foo-v1': 1 }],
    ['leftover distribution: 3 -> 2', [3, 0], [2, 0], [['foo-v3', 1], ['foo-v2', 1], ['foo-v1', 1]], { 'foo-v3': 1, 'foo-v2': 1, 'foo-v1': 0 }],
    ['proportional scaling (no new rs): 4 -> 5', [4, 0], [5, 0], [['foo-v2', 2], ['foo-v1', 2]], { 'foo-v2': 3, 'foo-v1': 2 }],
    ['proportional scaling: 6 -> 0', [6, 0], [0, 0], [['foo-v3', 3], ['foo-v2', 2], ['foo-v1', 1]], { 'foo-v3': 0, 'foo-v2': 0, 'foo-v1': 0 }],
    ['deployment with surge pods', [10, 2], [20, 2], [['foo-v2', 6], ['foo-v1', 6]], { 'foo-v2': 11, 'foo-v1': 11 }],
    ['change both surge and size', [10, 3], [50, 6], [['foo-v2', 5], ['foo-v1', 8]], { 'foo-v2': 22, 'foo-v1': 34 }],
    ['change both size and template', [10, 0], [14, 0], [['foo-v2', 7], ['foo-v1', 3]], { 'foo-v2': 10, 'foo-v1': 4 }],
  ] as const)('upstream TestScale: %s', (_name, [oldReplicas, oldSurge], [replicas, surge], sets, expected) => {
    const days = sets.length;
    const all = sets.map(([name, size], i) => rs(name, size, `2016-05-${String(20 + days - i).padStart(2, '0')}`, oldReplicas + oldSurge));
    expect(Object.fromEntries(proportionalSizes(dep(replicas, surge, 0), all))).toEqual(expected);
  });

  it('old ReplicaSets of a rolling update: unhealthy replicas first, then available ones beyond minAvailable, oldest first; never scaled up', () => {
    const withStatus = (r: V1ReplicaSet, available: number) => ({ ...r, status: { replicas: r.spec!.replicas!, availableReplicas: available } });
    const d = dep(4, 1, 0);
    const sizes = (p: ReturnType<typeof planOldReplicaSets>) => ('sizes' in p ? Object.fromEntries(p.sizes) : p);
    // 4 + 1 surge, the new pod available: one old replica goes
    expect(sizes(planOldReplicaSets(d, [withStatus(rs('old', 4, '2026-01-01'), 4)], withStatus(rs('new', 1, '2026-01-02'), 1)))).toEqual({ old: 3 });
    // the new pod not available yet: nothing may go (maxUnavailable 0)
    expect(sizes(planOldReplicaSets(d, [withStatus(rs('old', 4, '2026-01-01'), 4)], withStatus(rs('new', 1, '2026-01-02'), 0)))).toEqual({});
    // the CI case: old scaled 4 -> 3 by us, its status still says 4 available; new 2/2 available.
    // a cleanup computing min(1, 3 - 4) = -1 from the stale status would scale the old ReplicaSet back UP to 4 (6 in total)
    const stale = withStatus(rs('old', 3, '2026-01-01'), 4);
    expect(planOldReplicaSets(d, [stale], withStatus(rs('new', 2, '2026-01-02'), 2))).toEqual({ staleStatus: stale });
    // unhealthy old replicas are cleaned up within what the new ReplicaSet's unavailable pods leave
    const d1 = dep(4, 1, 1);
    expect(sizes(planOldReplicaSets(d1, [withStatus(rs('old', 4, '2026-01-01'), 2)], withStatus(rs('new', 1, '2026-01-02'), 0)))).toEqual({ old: 3 });
    // several old ReplicaSets: the oldest is scaled down first
    const d2 = dep(4, 0, 2);
    expect(sizes(planOldReplicaSets(d2, [withStatus(rs('b', 2, '2026-01-02'), 2), withStatus(rs('a', 2, '2026-01-01'), 2)], withStatus(rs('new', 0, '2026-01-03'), 0)))).toEqual({ a: 0 });
    // random states: a plan never raises a size and never goes below 0
    let seed = 7;
    const rnd = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let i = 0; i < 2000; i++) {
      const want = 1 + rnd(6);
      const dd = dep(want, rnd(3), rnd(3));
      const olds = Array.from({ length: 1 + rnd(3) }, (_, k) => {
        const n = rnd(want + 2);
        return withStatus(rs(`o${k}`, n, `2026-01-0${k + 1}`), rnd(n + 2));
      });
      const n = rnd(want + 1);
      const nw = withStatus(rs('new', n, '2026-02-01'), rnd(n + 1));
      const plan = planOldReplicaSets(dd, olds, nw);
      if ('staleStatus' in plan) {
        expect(plan.staleStatus.status!.availableReplicas!).toBeGreaterThan(plan.staleStatus.spec!.replicas!);
        continue;
      }
      for (const o of olds) {
        const size = plan.sizes.get(o.metadata!.name!) ?? o.spec!.replicas!;
        expect(size).toBeLessThanOrEqual(o.spec!.replicas!);
        expect(size).toBeGreaterThanOrEqual(0);
      }
    }
  });
  it('setCondition keeps lastTransitionTime while the status holds', () => {
    const s = { conditions: [{ type: 'Progressing', status: 'True', reason: 'A', lastTransitionTime: new Date('2020-01-01') }] };
    setCondition(s, { type: 'Progressing', status: 'True', reason: 'B', lastTransitionTime: new Date('2021-01-01') });
    expect(s.conditions[0]).toMatchObject({ reason: 'B', lastTransitionTime: new Date('2020-01-01') });
  });
});

describe('deployment status (upstream calculateStatus)', () => {
  it('unavailableReplicas = sum of the ReplicaSets spec.replicas minus available (pods that cannot be created are unavailable)', async () => {
    const { DeploymentController } = await import('../../controller-manager/controllers/deployment.ts');
    const c = new DeploymentController(controllerDeps({ now: () => 0 }));
    const d = dep(5);
    // quota blocks creation: the new RS wants 5, has 2 pods, 2 available
    const newRS = { ...rs('new', 5, '2026-01-01T00:00:00Z'), status: { replicas: 2, readyReplicas: 2, availableReplicas: 2 } };
    const s = c.calculateStatus(d, [newRS], newRS);
    expect([s.replicas, s.updatedReplicas, s.availableReplicas, s.unavailableReplicas]).toEqual([2, 2, 2, 3]);
    // more available than desired: never negative
    const over = { ...rs('new', 1, '2026-01-01T00:00:00Z'), status: { replicas: 2, availableReplicas: 2 } };
    expect(c.calculateStatus(dep(1), [over], over).unavailableReplicas).toBe(0);
  });
});

describe('fenceposts (upstream TestResolveFenceposts)', () => {
  it.each([
    ['0%', '0%', 0, { surge: 0, unavailable: 1 }],
    ['39%', '39%', 10, { surge: 4, unavailable: 3 }],
  ])('maxSurge %s maxUnavailable %s of %i', (s, u, n, want) => {
    expect(resolveFenceposts(dep(n, s, u), n)).toEqual(want);
  });
  it.each([
    ['oops', '39%'],
    ['55%', 'urg'],
    ['5', '1'],
  ])('maxSurge %s maxUnavailable %s: an error naming the field', (s, u) => {
    expect(() => resolveFenceposts(dep(10, s, u), 10)).toThrow(/Deployment ns\/d: spec\.strategy\.rollingUpdate\.max(Surge|Unavailable): invalid value/);
  });
});

describe('progress deadline (upstream syncRolloutStatus, requeueStuckDeployment)', () => {
  // a Deployment whose 2 new pods never schedule, as the API returns it: zero counts omitted
  const T = Date.parse('2026-01-01T00:00:02Z');
  const stuck = (): V1Deployment => ({
    metadata: { name: 'd', namespace: 'n', generation: 1 },
    spec: { replicas: 2, progressDeadlineSeconds: 2, selector: { matchLabels: { a: 'b' } }, strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: '25%' as never, maxUnavailable: '25%' as never } }, template: {} },
    status: {
      observedGeneration: 1,
      replicas: 2,
      updatedReplicas: 2,
      unavailableReplicas: 2,
      terminatingReplicas: 0,
      conditions: [
        { type: 'Available', status: 'False', reason: 'MinimumReplicasUnavailable', message: 'Deployment does not have minimum availability.', lastUpdateTime: new Date(T - 2000), lastTransitionTime: new Date(T - 2000) },
        { type: 'Progressing', status: 'True', reason: 'ReplicaSetUpdated', message: 'ReplicaSet "d-1" is progressing.', lastUpdateTime: new Date(T), lastTransitionTime: new Date(T - 2000) },
      ],
    },
  });
  const newRS = { metadata: { name: 'd-1' }, spec: { replicas: 2, selector: {} }, status: { replicas: 2, fullyLabeledReplicas: 2, observedGeneration: 1, terminatingReplicas: 0 } } as V1ReplicaSet;
  const controller = async (now: number) => {
    const { DeploymentController } = await import('../../controller-manager/controllers/deployment.ts');
    const c = new DeploymentController(controllerDeps({ now: () => now }));
    const puts: V1Deployment['status'][] = [];
    (c as unknown as { putStatus: (d: V1Deployment, s: V1Deployment['status']) => Promise<void> }).putStatus = async (_d, s) => void puts.push(s);
    const sync = (d: V1Deployment) => (c as unknown as { syncRolloutStatus: (d: V1Deployment, all: V1ReplicaSet[], n: V1ReplicaSet) => Promise<{ requeueAfterMs?: number } | void> }).syncRolloutStatus(d, [newRS], newRS);
    return { sync, puts };
  };

  it('an unchanged status (zero counts omitted by the API) is not written; the key comes back after the deadline (+1 s)', async () => {
    const { sync, puts } = await controller(T + 500);
    expect(await sync(stuck())).toEqual({ requeueAfterMs: 2500 });
    expect(puts).toEqual([]);
  });

  it('past the deadline: Progressing=False, ProgressDeadlineExceeded', async () => {
    const { sync, puts } = await controller(T + 3000);
    expect(await sync(stuck())).toBeUndefined();
    expect(puts).toHaveLength(1);
    expect(puts[0]!.conditions!.find((c) => c.type === 'Progressing')).toMatchObject({ status: 'False', reason: 'ProgressDeadlineExceeded', message: 'ReplicaSet "d-1" has timed out progressing.' });
  });

  it('deploymentStatusEqual: omitted zero counts and empty strings equal their zero values; pointers (terminatingReplicas) and times do not', async () => {
    const { deploymentStatusEqual } = await import('../../controller-manager/controllers/deployment.ts');
    expect(deploymentStatusEqual({ replicas: 0, readyReplicas: 0, conditions: [{ type: 'A', status: 'True', message: '' }] }, { conditions: [{ type: 'A', status: 'True' }] })).toBe(true);
    expect(deploymentStatusEqual({ terminatingReplicas: 0 }, {})).toBe(false);
    expect(deploymentStatusEqual({ conditions: [{ type: 'A', status: 'True', lastUpdateTime: '2026-01-01T00:00:00Z' as never }] }, { conditions: [{ type: 'A', status: 'True', lastUpdateTime: new Date('2026-01-01T00:00:00Z') }] })).toBe(true);
    expect(deploymentStatusEqual({ conditions: [{ type: 'A', status: 'True', lastUpdateTime: new Date(1000) }] }, { conditions: [{ type: 'A', status: 'True', lastUpdateTime: new Date(2000) }] })).toBe(false);
  });
});
