import { describe, expect, it } from 'vitest';
import type { V1Node } from '@kubernetes/client-node';
import { nodeResetPatch, shapeOf } from '../integration/shared-testbed.ts';
import { familyOf, groupFamilies } from '../sequencer.ts';
import { kwokNode } from '../../experiments/testbed/kwok.ts';

const want = { labels: { 'kubernetes.io/hostname': 'real-1', role: 'a' }, annotations: { note: 'x' }, taints: [], unschedulable: false };
const node = (o: { labels?: Record<string, string>; annotations?: Record<string, string>; taints?: V1Node['spec'] extends infer S ? (S extends { taints?: infer T } ? T : never) : never; unschedulable?: boolean }): V1Node => ({
  metadata: { name: 'real-1', labels: o.labels, annotations: o.annotations },
  spec: { taints: o.taints, unschedulable: o.unschedulable },
});

describe('shared testbed: a node put back as it was at up', () => {
  it('nothing to do for a node as it was, other components\' annotations kept', () => {
    expect(nodeResetPatch(node({ labels: want.labels, annotations: { note: 'x', 'node.alpha.kubernetes.io/ttl': '0', 'volumes.kubernetes.io/controller-managed-attach-detach': 'true' } }), want)).toBeNull();
  });
  it("a test's labels, annotations, taints and cordon removed; a changed value put back", () => {
    const n = node({
      labels: { ...want.labels, role: 'b', 'ulysses.io/rt-scheduler': 'edf' },
      annotations: { 'ulysses.io/rt-capacity': '{"cores":2}', 'node.alpha.kubernetes.io/ttl': '0' },
      taints: [{ key: 'ulysses.io/failure', effect: 'NoExecute' }],
      unschedulable: true,
    });
    expect(nodeResetPatch(n, want)).toEqual({
      metadata: { labels: { role: 'a', 'ulysses.io/rt-scheduler': null }, annotations: { 'ulysses.io/rt-capacity': null, note: 'x' } },
      spec: { taints: null, unschedulable: null },
    });
  });
  it('a KWOK node gets back the taint it was created with', () => {
    const created = kwokNode('kwok-1');
    const untainted: V1Node = { ...created, spec: { taints: [] } };
    const w = { labels: created.metadata!.labels!, annotations: {}, taints: created.spec!.taints!, unschedulable: false };
    expect(nodeResetPatch(untainted, w)).toEqual({ spec: { taints: created.spec!.taints, unschedulable: null } });
  });
});

describe('shared testbed: which files share one', () => {
  it('the same shape whatever the flags a reset changes; another shape for what it cannot', () => {
    const base = { realNodes: 2, kwokNodes: 2 };
    expect(shapeOf({ ...base, controllers: '*,-replicaset-controller', schedulerConfig: '/tmp/x.yaml', kwokNodes: 6 })).toBe(shapeOf(base));
    expect(shapeOf({ kwokNodes: 1 })).toBe(shapeOf(base)); // 2 real nodes by default, as `testbed up`
    for (const other of [{ realNodes: 1 }, { kubeletShimConfig: 'kubelet-shim/configs/vanilla.yaml' }, { apiservers: 2 as const }, { auditNamespaces: ['a'] }, { pinCpus: true }]) {
      expect(shapeOf({ ...base, ...other }), JSON.stringify(other)).not.toBe(shapeOf(base));
    }
  });
  it("reads a file's family from its useSharedTestbed call", () => {
    expect(familyOf("const t = useSharedTestbed('control-plane', { realNodes: 0 });")).toBe('control-plane');
    expect(familyOf('const t = useSharedTestbed(\n  "real-nodes",\n  {});')).toBe('real-nodes');
    expect(familyOf("const t = useTestbed(runDir, { realNodes: 0 });")).toBeUndefined();
  });
  it("runs a family's files together where its first one ran, everything else in its order", () => {
    const fam: Record<string, string> = { b: 'x', d: 'y', e: 'x', g: 'y' };
    expect(groupFamilies(['a', 'b', 'c', 'd', 'e', 'f', 'g'], (f) => fam[f])).toEqual(['a', 'b', 'e', 'c', 'd', 'g', 'f']);
    expect(groupFamilies([], () => undefined)).toEqual([]);
  });
});
