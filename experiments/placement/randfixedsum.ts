/**
 * randfixedsum (Stafford's algorithm, as used for task-set generation by Emberson, Stafford and
 * Davis, "Techniques for the synthesis of multiprocessor tasksets", WATERS 2010): n values, each in
 * [a, b], summing exactly to s, drawn UNIFORMLY from that (n−1)-dimensional polytope. Thesis §6.2
 * generates the high-isolation RT pods with it ("created with the algorithm presented in [119] such
 * that their total utilization is 180%").
 *
 * Not "draw uniform values and normalise" (which is neither uniform nor within bounds). The
 * algorithm, on the unit cube (x' = (x − a)/(b − a), s' = (s − n a)/(b − a)):
 * 1. The polytope {x ∈ [0,1]^n : Σx = s'} is cut into simplices. w(i, j) is proportional to the
 *    volume of the slice of the i-dimensional cube with sum in [j−1, j] lying in the polytope
 *    (recurrence w(i, ·) = (w(i−1, ·+1)·s1 + w(i−1, ·)·s2)/i, scaled by the largest double to stay
 *    in range); t(i, j) is the probability of moving to the lower sum band when one dimension is
 *    removed.
 * 2. Walking from n−1 dimensions down to 1: a uniform draw against t picks the simplex type (which
 *    coordinate direction, e ∈ {0,1}); a second draw r^(1/i) gives the next simplex coordinate.
 *    Running sum/product turn those simplex coordinates into cube coordinates.
 * 3. The coordinates come out in a fixed dimension order: shuffle them (Fisher-Yates), rescale.
 * The last value is s minus the others, so the sum is exact up to floating-point rounding.
 * No I/O; randomness only from `rand` (a seeded PRNG gives reproducible sets).
 */

export interface RandFixedSumOptions {
  /** Lower bound of each value (default 0). */
  readonly min?: number;
  /** Upper bound of each value (default 1, e.g. a task utilization on one core). */
  readonly max?: number;
}

/** n values in [min, max] with sum exactly `sum`, uniform over the feasible set. Throws on an empty set. */
export function randfixedsum(n: number, sum: number, rand: () => number, options: RandFixedSumOptions = {}): number[] {
  const a = options.min ?? 0;
  const b = options.max ?? 1;
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`randfixedsum: n must be an integer >= 1, got ${n}`);
  if (!(b > a)) throw new RangeError(`randfixedsum: max (${b}) must be > min (${a})`);
  if (!(sum >= n * a - 1e-12 && sum <= n * b + 1e-12)) {
    throw new RangeError(`randfixedsum: sum ${sum} is outside [n·min, n·max] = [${n * a}, ${n * b}]`);
  }
  if (n === 1) return [sum];
  // Rescale to the unit cube.
  let s = (sum - n * a) / (b - a);
  const k = Math.max(Math.min(Math.floor(s), n - 1), 0); // 0 ≤ k ≤ n−1
  s = Math.max(Math.min(s, k + 1), k); // k ≤ s ≤ k+1
  // s1[i] = s − (k − i), s2[i] = (k + n − i) − s, i = 0..n−1 (never negative)
  const s1 = Array.from({ length: n }, (_, i) => s - (k - i));
  const s2 = Array.from({ length: n }, (_, i) => k + n - i - s);
  const huge = Number.MAX_VALUE;
  const tiny = Number.MIN_VALUE;
  // w[i][j] for i = 0..n−1 (dimension i+1), j = 0..n; t[i][j] for i = 0..n−2.
  const w: number[][] = Array.from({ length: n }, () => new Array<number>(n + 1).fill(0));
  const t: number[][] = Array.from({ length: n - 1 }, () => new Array<number>(n).fill(0));
  w[0]![1] = huge;
  for (let i = 2; i <= n; i++) {
    const prev = w[i - 2]!;
    const row = w[i - 1]!;
    for (let j = 0; j < i; j++) {
      const up = (prev[j + 1]! * s1[j]!) / i;
      const down = (prev[j]! * s2[n - i + j]!) / i;
      row[j + 1] = up + down;
      const total = row[j + 1]! + tiny;
      // Probability of the lower band; computed from the larger term for accuracy.
      t[i - 2]![j] = s2[n - i + j]! > s1[j]! ? down / total : 1 - up / total;
    }
  }
  // Walk down the dimensions.
  const x = new Array<number>(n).fill(0);
  let rem = s;
  let col = k + 1; // 1-based column of t
  let sm = 0;
  let pr = 1;
  for (let i = n - 1; i >= 1; i--) {
    const e = rand() <= t[i - 1]![col - 1]! ? 1 : 0; // simplex type
    const sx = rand() ** (1 / i); // next simplex coordinate
    sm += ((1 - sx) * pr * rem) / (i + 1);
    pr *= sx;
    x[n - i - 1] = sm + pr * e;
    rem -= e;
    col -= e;
  }
  x[n - 1] = sm + pr * rem;
  // Random order (Fisher-Yates), rescale to [a, b].
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [x[i], x[j]] = [x[j]!, x[i]!];
  }
  const out = x.map((v) => Math.min(b, Math.max(a, a + (b - a) * v)));
  // Put the floating-point residue on the value with the most room, so Σ = sum to ~1 ulp.
  const residue = sum - out.reduce((acc, v) => acc + v, 0);
  if (residue !== 0) {
    let best = 0;
    for (let i = 1; i < n; i++) {
      const room = (v: number) => (residue > 0 ? b - v : v - a);
      if (room(out[i]!) > room(out[best]!)) best = i;
    }
    out[best] = out[best]! + residue;
  }
  return out;
}

/** Log-uniform value in [lo, hi] (periods, thesis §6.2 / Emberson et al. 2010). */
export function logUniform(rand: () => number, lo: number, hi: number): number {
  return Math.exp(Math.log(lo) + rand() * (Math.log(hi) - Math.log(lo)));
}
