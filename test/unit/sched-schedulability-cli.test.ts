import { describe, expect, it } from 'vitest';
import { schedulability } from '../../scheduler-plugins/schedulability.ts';

const dsNode = { metadata: { name: 'rt-1', labels: { 'ulysses.io/rt-scheduler': 'deferrable-server', 'ulysses.io/tdma-network': 'rtnet0' }, annotations: { 'ulysses.io/rt-capacity': '{"cores":1}' } } };
const rtPod = (name: string, budgetUs: number, periodUs: number, wcetUs: number, extra: Record<string, string> = {}) => ({
  metadata: {
    name,
    uid: `uid-${name}`,
    annotations: {
      // tasks run at 4x the server period: a deferrable-server task can wait T_S - C_S before its budget
      'ulysses.io/rt': JSON.stringify({ server: { budgetUs, periodUs }, tasks: [{ wcetUs, periodUs: 4 * periodUs, deadlineUs: 4 * periodUs, priority: 1 }] }),
      ...extra,
    },
  },
});

describe('ulysses schedulability (one node what-if)', () => {
  it('admits a deferrable-server pod that fits and reports response times of the pods on its core', () => {
    const a = schedulability({ node: dsNode, pods: [rtPod('a', 2000, 10_000, 1000)], pod: rtPod('b', 2000, 10_000, 500) });
    expect(a.feasible).toBe(true);
    expect(a.core).toBe(0);
    expect(a.responseTimesUs.map((r) => r.pod).sort()).toEqual(['a', 'b']);
    for (const r of a.responseTimesUs) expect(r.responseTimeUs!).toBeLessThanOrEqual(r.deadlineUs);
  });

  it('refuses a pod whose servers overload the core, with the reason', () => {
    const a = schedulability({ node: dsNode, pods: [rtPod('a', 6000, 10_000, 5000)], pod: rtPod('b', 6000, 10_000, 5000) });
    expect(a.feasible).toBe(false);
    expect(a.reasons.join(' ')).toMatch(/rt-1/);
  });

  it('refuses RT pods on non-RT nodes and names malformed annotations', () => {
    const plain = { metadata: { name: 'plain', labels: {}, annotations: {} } };
    expect(schedulability({ node: plain, pod: rtPod('b', 1000, 10_000, 500) })).toMatchObject({ feasible: false, reasons: [expect.stringMatching(/not a real-time node/)] });
    const bad = { metadata: { name: 'bad', annotations: { 'ulysses.io/rt': '{"server":{"budgetUs":0,"periodUs":10},"tasks":[]}' } } };
    const a = schedulability({ node: dsNode, pod: bad });
    expect(a.feasible).toBe(false);
    expect(a.reasons.join(' ')).toMatch(/ulysses\.io\/rt: .*budgetUs/);
  });

  it('allocates TDMA slots around the ones already reserved, or refuses', () => {
    const holder = { metadata: { name: 'h', annotations: { 'ulysses.io/tdma-slots': '[0,1]' } } };
    const want = (slots: number, maxGapUs: number) => ({ metadata: { name: 'n', annotations: { 'ulysses.io/tdma': JSON.stringify({ network: 'rtnet0', slots, maxGapUs }) } } });
    const ok = schedulability({ node: dsNode, pods: [holder], pod: want(2, 4000) });
    expect(ok.feasible).toBe(true);
    expect(ok.slots).toEqual([2, 3]);
    const full = schedulability({ node: dsNode, pods: [holder], pod: want(4, 4000) });
    expect(full.feasible).toBe(false);
    expect(full.slots).toBeNull();
    const other = schedulability({ node: { metadata: { name: 'x', labels: { 'ulysses.io/tdma-network': 'other' } } }, pod: want(1, 5000) });
    expect(other.reasons[0]).toMatch(/not on TDMA network rtnet0/);
  });
});
