import { describe, expect, it } from 'vitest';
import {
  THESIS_TESTBED_NETWORK as NET,
  allocateSlots,
  circularGapsUs,
  maxCircularGapUs,
  parseTdmaAnnotation,
  slotSetSupplyBound,
  supplyBound,
  timeToServe,
  type TdmaNetwork,
} from '../../scheduler-plugins/tdma/tdma.ts';
import { prng } from '../../core/prng.ts';


describe('TDMA supply (thesis testbed: 5 ms cycle, 1 ms slots)', () => {
  it('sbf(D) = floor(D/c)Θ + max(0, D mod c − (c − Θ))', () => {
    expect(NET).toEqual({ name: 'rtnet0', cycleUs: 5000, slotUs: 1000 });
    // one slot: Θ = 1000, blackout 4000
    expect([0, 4000, 4500, 5000, 9999, 10000, 12000].map((d) => supplyBound(d, 5000, 1000))).toEqual([0, 0, 500, 1000, 1999, 2000, 2000]);
    // two contiguous slots: blackout 3000
    expect([3000, 3500, 5000, 8500].map((d) => supplyBound(d, 5000, 2000))).toEqual([0, 500, 2000, 2500]);
  });

  it('time to serve W = W + ceil(W/Θ)(c − Θ) is the least D with sbf(D) ≥ W', () => {
    expect(timeToServe(1000, 5000, 1000)).toBe(5000);
    expect(timeToServe(1500, 5000, 1000)).toBe(9500);
    expect(timeToServe(2000, 5000, 2000)).toBe(5000);
    for (const theta of [1000, 2000, 3000, 5000]) {
      for (let w = 1; w <= 12000; w += 250) {
        const d = timeToServe(w, 5000, theta);
        expect(supplyBound(d, 5000, theta)).toBeGreaterThanOrEqual(w);
        expect(supplyBound(d - 1, 5000, theta)).toBeLessThan(w);
      }
    }
  });

  it('the exact supply of a slot set equals the closed form for contiguous slots, and spreading never hurts', () => {
    const rand = prng(42);
    for (let n = 0; n < 60; n++) {
      const N = 3 + Math.floor(rand() * 8);
      const net: TdmaNetwork = { name: 'x', cycleUs: N * 100, slotUs: 100 };
      const k = 1 + Math.floor(rand() * N);
      const start = Math.floor(rand() * N);
      const contiguous = Array.from({ length: k }, (_, i) => (start + i) % N);
      const spread = [...new Set(Array.from({ length: k }, () => Math.floor(rand() * N)))];
      for (let d = 0; d <= 3 * net.cycleUs; d += 37) {
        expect(slotSetSupplyBound(d, net, contiguous)).toBe(supplyBound(d, net.cycleUs, k * 100));
        expect(slotSetSupplyBound(d, net, spread)).toBeGreaterThanOrEqual(supplyBound(d, net.cycleUs, spread.length * 100));
      }
    }
    // {0, 2}: the worst 2000 us window (end of slot 2 → start of slot 0) gets nothing, 3000 us get a slot;
    // two contiguous slots would give 0 in 3000 us.
    expect(slotSetSupplyBound(2000, NET, [0, 2])).toBe(0);
    expect(slotSetSupplyBound(3000, NET, [0, 2])).toBe(1000);
    expect(slotSetSupplyBound(3000, NET, [0, 1])).toBe(0);
  });
});

describe('circular gaps', () => {
  it('counts the gap from the last slot around to the first one', () => {
    expect(circularGapsUs(NET, [0, 3])).toEqual([2000, 1000]);
    expect(circularGapsUs(NET, [1, 2])).toEqual([0, 3000]);
    expect(maxCircularGapUs(NET, [1, 2])).toBe(3000);
    expect(maxCircularGapUs(NET, [4])).toBe(4000);
    expect(maxCircularGapUs(NET, [0, 1, 2, 3, 4])).toBe(0);
  });
});

describe('allocateSlots', () => {
  it('prefers contiguous slots when their gap c − Θ fits', () => {
    expect(allocateSlots(NET, [], { slots: 2, maxGapUs: 3000 })).toEqual({ ok: true, slots: [0, 1], contiguous: true, budgetUs: 2000, maxGapUs: 3000 });
    expect(allocateSlots(NET, [0], { slots: 1 })).toMatchObject({ ok: true, slots: [1], contiguous: true, maxGapUs: 4000 });
  });

  it('spreads the slots when a contiguous block would leave too long a gap', () => {
    // Best possible: gaps of 2 and 1 slots (the greedy cover jumps as far as allowed: 0 then 3).
    expect(allocateSlots(NET, [], { slots: 2, maxGapUs: 2500 })).toEqual({ ok: true, slots: [0, 3], contiguous: false, budgetUs: 2000, maxGapUs: 2000 });
    expect(allocateSlots(NET, [], { slots: 2, maxGapUs: 1999 })).toMatchObject({ ok: false, reason: expect.stringMatching(/gap of 2000 us > maxGapUs 1999/) });
  });

  it('treats the cycle boundary as contiguous (slot 4 is followed by slot 0)', () => {
    expect(allocateSlots(NET, [1, 3], { slots: 2, maxGapUs: 3000 })).toEqual({ ok: true, slots: [0, 4], contiguous: true, budgetUs: 2000, maxGapUs: 3000 });
  });

  it('best-fit: the shortest free run that holds the block', () => {
    const net: TdmaNetwork = { name: 'n10', cycleUs: 10000, slotUs: 1000 };
    expect(allocateSlots(net, [2, 6], { slots: 2 })).toMatchObject({ ok: true, slots: [3, 4], contiguous: true });
    expect(allocateSlots(net, [2, 6], { slots: 4 })).toMatchObject({ ok: true, slots: [0, 7, 8, 9], contiguous: true });
  });

  it('fails when the free slots cannot meet the latency bound or are too few', () => {
    const net: TdmaNetwork = { name: 'n10', cycleUs: 10000, slotUs: 1000 };
    // free 4..9: the wrap gap from 9 to 4 is at least 4 slots
    expect(allocateSlots(net, [0, 1, 2, 3], { slots: 3, maxGapUs: 3999 }).ok).toBe(false);
    expect(allocateSlots(net, [0, 1, 2, 3], { slots: 3, maxGapUs: 4000 })).toEqual({ ok: true, slots: [4, 5, 9], contiguous: false, budgetUs: 3000, maxGapUs: 4000 });
    expect(allocateSlots(NET, [0, 1, 2, 3], { slots: 2 })).toMatchObject({ ok: false, reason: 'network rtnet0: 1 free slot(s), 2 needed' });
    expect(allocateSlots(NET, [7], { slots: 1 })).toMatchObject({ ok: false, reason: expect.stringMatching(/taken slot 7/) });
    expect(allocateSlots({ name: 'bad', cycleUs: 5000, slotUs: 3000 }, [], { slots: 1 })).toMatchObject({ ok: false, reason: expect.stringMatching(/multiple of slotUs/) });
  });

  it('finds the minimal largest gap (checked by brute force on random small networks)', () => {
    const rand = prng(99);
    const combos = (xs: number[], k: number): number[][] =>
      k === 0 ? [[]] : xs.flatMap((x, i) => combos(xs.slice(i + 1), k - 1).map((c) => [x, ...c]));
    let checked = 0;
    for (let n = 0; n < 150; n++) {
      const N = 2 + Math.floor(rand() * 9);
      const net: TdmaNetwork = { name: 'r', cycleUs: N * 100, slotUs: 100 };
      const taken = Array.from({ length: N }, (_, i) => i).filter(() => rand() < 0.35);
      const free = Array.from({ length: N }, (_, i) => i).filter((i) => !taken.includes(i));
      if (free.length === 0) continue;
      const k = 1 + Math.floor(rand() * free.length);
      const best = Math.min(...combos(free, k).map((c) => maxCircularGapUs(net, c)));
      const got = allocateSlots(net, taken, { slots: k, maxGapUs: best });
      expect(got.ok, `N=${N} taken=${taken} k=${k} best=${best}`).toBe(true);
      if (got.ok) {
        expect(got.slots).toHaveLength(k);
        expect(got.slots.every((s) => free.includes(s))).toBe(true);
        expect(maxCircularGapUs(net, got.slots)).toBeLessThanOrEqual(best);
      }
      if (best > 0) expect(allocateSlots(net, taken, { slots: k, maxGapUs: best - 1 }).ok).toBe(false);
      checked++;
    }
    expect(checked).toBeGreaterThan(100);
  });
});

describe('ulysses.io/tdma', () => {
  it('parses the annotation', () => {
    expect(parseTdmaAnnotation('{"network":"rtnet0","slots":2,"maxGapUs":3000}')).toEqual({ ok: true, value: { network: 'rtnet0', slots: 2, maxGapUs: 3000 } });
    expect(parseTdmaAnnotation({ network: 'rtnet0', slots: 1 })).toEqual({ ok: true, value: { network: 'rtnet0', slots: 1 } });
  });

  it('names the annotation and the field', () => {
    expect(parseTdmaAnnotation('{"network":"rtnet0","slots":0}')).toMatchObject({ ok: false, error: 'ulysses.io/tdma: slots: must be >= 1' });
    expect(parseTdmaAnnotation('{"slots":1,"maxGapUs":-1}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/tdma: network: is required; ulysses.io/tdma: maxGapUs: must be >= 0',
    });
    expect(parseTdmaAnnotation('{"network":"rtnet0","slots":1,"gap":3}')).toMatchObject({ ok: false, issues: [{ field: '(root)', message: expect.stringContaining('"gap"') }] });
    expect(parseTdmaAnnotation('not json')).toMatchObject({ ok: false, error: expect.stringMatching(/^ulysses\.io\/tdma: \(json\)/) });
  });
});
