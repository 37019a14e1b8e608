/** randfixedsum (Emberson, Stafford, Davis 2010): exact sum, bounds, uniformity, determinism. */
import { describe, expect, it } from 'vitest';
import { prng } from '../../core/prng.ts';
import { logUniform, randfixedsum } from '../../experiments/placement/randfixedsum.ts';

const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

describe('randfixedsum', () => {
  it('sums exactly to the target and stays within the bounds', () => {
    const rand = prng(2010);
    const cases: Array<[number, number, number, number]> = [
      [6, 1.8, 0, 1],
      [12, 1.8, 0, 1],
      [2, 1.5, 0, 1],
      [10, 9.5, 0, 1], // near the upper corner
      [8, 0.05, 0, 1], // near the lower corner
      [5, 2, 0.1, 0.9],
      [7, 3, 0.25, 0.6],
    ];
    for (const [n, s, a, b] of cases) {
      for (let k = 0; k < 500; k++) {
        const x = randfixedsum(n, s, rand, { min: a, max: b });
        expect(x).toHaveLength(n);
        expect(Math.abs(sum(x) - s)).toBeLessThan(1e-12);
        for (const v of x) {
          expect(v).toBeGreaterThanOrEqual(a - 1e-12);
          expect(v).toBeLessThanOrEqual(b + 1e-12);
        }
      }
    }
  });

  it('is uniform on the polytope (not uniform-then-normalise): known marginals', () => {
    const rand = prng(7);
    const N = 20000;
    // n = 3, s = 1 in [0,1]: the standard simplex; x1 ~ Beta(1, 2): P(x1 < 0.5) = 0.75, E = 1/3.
    let below = 0;
    let mean = 0;
    // n = 3, s = 2.5: 1 − x lies on a simplex of sum 0.5: P(x1 > 0.75) = 0.75.
    let above = 0;
    for (let k = 0; k < N; k++) {
      const x = randfixedsum(3, 1, rand);
      if (x[0]! < 0.5) below++;
      mean += x[1]! / N;
      if (randfixedsum(3, 2.5, rand)[2]! > 0.75) above++;
    }
    expect(Math.abs(below / N - 0.75)).toBeLessThan(0.015);
    expect(Math.abs(mean - 1 / 3)).toBeLessThan(0.01);
    expect(Math.abs(above / N - 0.75)).toBeLessThan(0.015);
    // Normalising uniform draws would give P(x1 < 0.5) ≈ 0.79 for n = 3: the test tells them apart.
    let norm = 0;
    for (let k = 0; k < N; k++) {
      const u = [rand(), rand(), rand()];
      if (u[0]! / sum(u) < 0.5) norm++;
    }
    expect(norm / N - 0.75).toBeGreaterThan(0.025);
  });

  it('is deterministic for a seed; n = 1 and infeasible inputs', () => {
    expect(randfixedsum(9, 1.8, prng(42))).toEqual(randfixedsum(9, 1.8, prng(42)));
    expect(randfixedsum(9, 1.8, prng(42))).not.toEqual(randfixedsum(9, 1.8, prng(43)));
    expect(randfixedsum(1, 0.7, prng(1))).toEqual([0.7]);
    expect(() => randfixedsum(3, 3.5, prng(1))).toThrow(/outside/);
    expect(() => randfixedsum(0, 0, prng(1))).toThrow(/n must be/);
  });

  it('logUniform stays in range with a median at the geometric mean', () => {
    const rand = prng(3);
    const xs = Array.from({ length: 4001 }, () => logUniform(rand, 10, 1000)).sort((a, b) => a - b);
    expect(xs[0]!).toBeGreaterThanOrEqual(10);
    expect(xs[xs.length - 1]!).toBeLessThanOrEqual(1000);
    expect(Math.abs(Math.log10(xs[2000]!) - 2)).toBeLessThan(0.06);
  });
});
