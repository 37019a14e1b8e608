/**
 * §6.2 placement: kube-scheduler NodeResourcesFit scores on hand-computed examples (integer
 * arithmetic as the Go code), host selection, the assurance model, and the mechanism the
 * criticality-aware policy exploits, on a 2-node workload whose outcome is computed by hand.
 */
import { describe, expect, it } from 'vitest';
import { prng } from '../../core/prng.ts';
import { brokenLinear, fits, leastRequestedScore, mostRequestedScore, resourceScore, selectHost } from '../../experiments/placement/kube-scoring.ts';
import { assuranceLevel, simulatePolicy, type SimNode, type SimPod, type Workload } from '../../experiments/placement/placement.ts';

describe('NodeResourcesFit scoring strategies', () => {
  // node: 4000m cpu, 10000 memory; after placing the pod: 2000m, 4000 requested
  it('LeastAllocated: Σ (cap − req)·100/cap · w / Σ w, integer division', () => {
    expect(leastRequestedScore(2000, 4000)).toBe(50);
    expect(leastRequestedScore(4000, 10000)).toBe(60);
    expect(resourceScore('LeastAllocated', [2000, 4000], [4000, 10000])).toBe(55);
    expect(leastRequestedScore(3000, 7000)).toBe(57); // 57.14 truncated
    expect(resourceScore('LeastAllocated', [3000, 4001], [7000, 10000])).toBe(58); // (57 + 59) / 2
    expect(leastRequestedScore(5000, 4000)).toBe(0); // over capacity
    expect(resourceScore('LeastAllocated', [2000, 4000], [4000, 10000], { weights: [3, 1] })).toBe(52); // (150 + 60) / 4 = 52.5 → 52
  });

  it('MostAllocated: req·100/cap, requested clamped to capacity', () => {
    expect(mostRequestedScore(3000, 7000)).toBe(42); // 42.86 truncated
    expect(resourceScore('MostAllocated', [2000, 4000], [4000, 10000])).toBe(45);
    expect(mostRequestedScore(5000, 4000)).toBe(100);
    expect(resourceScore('MostAllocated', [1000, 0], [4000, 0])).toBe(25); // allocatable 0: resource skipped
  });

  it('RequestedToCapacityRatio (shape 0→0, 100→10): broken-linear of utilization, zero scores left out, rounded', () => {
    // cpu util floor(3000·100/7000) = 42 → 42; memory 40 → 40; round(82 / 2) = 41
    expect(resourceScore('RequestedToCapacityRatio', [3000, 4000], [7000, 10000])).toBe(41);
    // a resource scoring 0 does not count: (42) / 1, where MostAllocated averages it in: (42 + 0) / 2
    expect(resourceScore('RequestedToCapacityRatio', [3000, 0], [7000, 10000])).toBe(42);
    expect(resourceScore('MostAllocated', [3000, 0], [7000, 10000])).toBe(21);
    // requested > capacity scores as utilization 100
    expect(resourceScore('RequestedToCapacityRatio', [5000, 10000], [4000, 10000])).toBe(100);
    // round, not truncate: (43 + 40) / 2 = 41.5 → 42
    expect(resourceScore('RequestedToCapacityRatio', [4300, 4000], [10000, 10000])).toBe(42);
    // the least-requested shape 0→10, 100→0 (scores ×10): 100 − 42 = 58
    expect(resourceScore('RequestedToCapacityRatio', [3000], [7000], { shape: [{ utilization: 0, score: 10 }, { utilization: 100, score: 0 }] })).toBe(58);
  });

  it('brokenLinear: flat outside the points, Go integer division inside', () => {
    const shape = [
      { utilization: 20, score: 0 },
      { utilization: 50, score: 100 },
      { utilization: 100, score: 40 },
    ];
    expect(brokenLinear(shape, 0)).toBe(0);
    expect(brokenLinear(shape, 30)).toBe(33); // 100·10/30 = 33.3
    expect(brokenLinear(shape, 75)).toBe(70); // 100 + (−60·25)/50 = 100 − 30
    expect(brokenLinear(shape, 101)).toBe(40);
  });

  it('fit filter and host selection (highest score, ties uniformly at random, seeded)', () => {
    expect(fits([3000, 0], [1000, 5], [4000, 5])).toBe(true);
    expect(fits([3000, 0], [1001, 5], [4000, 5])).toBe(false);
    expect(selectHost([10, 70, 30], prng(1))).toBe(1);
    expect(selectHost([], prng(1))).toBe(-1);
    const rand = prng(7);
    const counts = [0, 0, 0, 0];
    for (let i = 0; i < 3000; i++) counts[selectHost([5, 9, 2, 9], rand)]!++;
    expect(counts[0]).toBe(0);
    expect(counts[2]).toBe(0);
    expect(Math.abs(counts[1]! - 1500)).toBeLessThan(150);
  });
});

describe('assurance model (§6.2: a percentage of α+β, by minimum hosted criticality and guarantee)', () => {
  it('levels', () => {
    expect(assuranceLevel(4, null, true)).toBe(100);
    expect(assuranceLevel(4, 'high', true)).toBe(100);
    expect(assuranceLevel(4, 'none', true)).toBe(50);
    expect(assuranceLevel(4, 'low', false)).toBe(64); // 25·4·0.8·0.8
    expect(assuranceLevel(3, 'high', true)).toBe(75);
    expect(assuranceLevel(2, 'low', true)).toBe(40);
  });
});

describe('the criticality-aware policy keeps the high-assurance node for the HI pod', () => {
  // RT node: 8 cores, α+β = 4; plain node: 4 cores, α+β = 2. A NO pod (1 core) arrives first, then
  // an RT HI pod (1 core, needs assurance 75 on an RT node). By hand:
  // - LeastAllocated puts the NO pod on the RT node (87 vs 75 free); the RT node drops to 50 < 75,
  //   so the HI pod fits nowhere;
  // - MostAllocated/RequestedToCapacityRatio put it on the small node (25 vs 12 allocated);
  // - criticality-aware: the RT node is the only one counted in Ā, so the NO pod goes to the plain
  //   node and the HI pod gets the RT node.
  const GiB = 1024 ** 3;
  const node = (name: string, cores: number, rt: boolean, base: number): SimNode => ({ name, allocatable: [cores * 1000, 16 * GiB, 100e9], rt, base, joinsAt: 0 });
  const pod = (id: number, arrival: number, criticality: SimPod['criticality'], rt: boolean): SimPod => ({
    id,
    arrival,
    departure: 1000 - id, // the NO pod outlives the HI pod: nothing frees the RT node in between
    request: [1000, GiB, 1e9],
    limit: [1000, GiB, 1e9],
    criticality,
    rt,
  });
  const w: Workload = { seed: 1, nodes: [node('rt', 8, true, 4), node('plain', 4, false, 2)], initialNodes: 2, pods: [pod(0, 1, 'none', false), pod(1, 2, 'high', true)], load: 1 };

  it('vanilla LeastAllocated rejects the HI pod; criticality-aware and bin-packing accept it', () => {
    const least = simulatePolicy(w, 'LeastAllocated');
    expect(least.placed).toEqual({ none: 1, low: 0, high: 0 });
    for (const p of ['MostAllocated', 'RequestedToCapacityRatio', 'CriticalityAware'] as const) {
      const r = simulatePolicy(w, p);
      expect(r.placed, p).toEqual({ none: 1, low: 0, high: 1 });
      expect(r.assuranceAtPlacement.high, p).toBe(1);
    }
  });
});
