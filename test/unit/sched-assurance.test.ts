import { describe, expect, it } from 'vitest';
import {
  assuranceExcess,
  assuranceScore,
  parseAssuranceAnnotation,
  parseAssurancePolicyAnnotation,
  satisfies,
  type AssurancePolicy,
} from '../../scheduler-plugins/assurance/assurance.ts';

const threshold: AssurancePolicy = { policy: 'threshold', min: { cpu: 2 } };
const weighted: AssurancePolicy = { policy: 'weighted', weights: { cpu: 0.6, memory: 0.4 }, threshold: 2.5 };

describe('assurance policies', () => {
  it('threshold: every listed resource at least its minimum; unlisted node resources count as 0', () => {
    expect(satisfies({ cpu: 2 }, threshold)).toBe(true);
    expect(satisfies({ cpu: 1, memory: 5 }, threshold)).toBe(false);
    expect(satisfies({ memory: 5 }, threshold)).toBe(false);
    expect(satisfies({ cpu: 3, memory: 3 }, { policy: 'threshold', min: { cpu: 2, memory: 4 } })).toBe(false);
    // own properties only: "constructor" is not an inherited level
    expect(satisfies({}, { policy: 'threshold', min: { constructor: 1 } })).toBe(false);
  });

  it('weighted: Σ w_r A_r ≥ threshold', () => {
    expect(satisfies({ cpu: 3, memory: 2 }, weighted)).toBe(true); // 1.8 + 0.8 = 2.6
    expect(satisfies({ cpu: 2, memory: 3 }, weighted)).toBe(false); // 1.2 + 1.2 = 2.4
    expect(satisfies({ cpu: 2.5, memory: 2.5 }, weighted)).toBe(true); // exactly 2.5 (float sum 2.5)
  });

  it('no policy: every node satisfies', () => {
    expect(satisfies({}, null)).toBe(true);
  });
});

describe('assurance score (prefer the node that just satisfies)', () => {
  it('is 10 for an exact match and decreases with the excess, 0 when not satisfied', () => {
    expect(assuranceScore({ cpu: 2 }, threshold)).toBe(10);
    expect(assuranceExcess({ cpu: 3 }, threshold)).toBe(1);
    expect(assuranceScore({ cpu: 3 }, threshold)).toBe(5);
    // other resources count too: a high-memory node is kept for pods that need memory assurance
    expect(assuranceExcess({ cpu: 2, memory: 4 }, threshold)).toBe(4);
    expect(assuranceScore({ cpu: 2, memory: 4 }, threshold)).toBe(2);
    expect(assuranceScore({ cpu: 1 }, threshold)).toBe(0);
    expect(assuranceScore({ cpu: 40 }, threshold)).toBe(0);
  });

  it('is non-increasing in the offered assurance', () => {
    let previous = 10;
    for (let cpu = 2; cpu <= 30; cpu++) {
      const s = assuranceScore({ cpu }, threshold);
      expect(s).toBeLessThanOrEqual(previous);
      previous = s;
    }
    expect(previous).toBe(0);
  });

  it('weighted and no-policy excess', () => {
    expect(assuranceExcess({ cpu: 3, memory: 2 }, weighted)).toBeCloseTo(0.1, 12);
    expect(assuranceScore({ cpu: 3, memory: 2 }, weighted)).toBe(9);
    expect(assuranceExcess({ cpu: 3, memory: 2, disk: 3 }, weighted)).toBeCloseTo(3.1, 12);
    expect(assuranceScore({ cpu: 3, memory: 2, disk: 3 }, weighted)).toBe(2);
    expect(assuranceScore({}, null)).toBe(10);
    expect(assuranceScore({ cpu: 1 }, null)).toBe(5);
    // ranking nodes for a cpu ≥ 2 pod: the just-sufficient node first, the strongest last
    const nodes = { low: { cpu: 1 }, exact: { cpu: 2 }, medium: { cpu: 3 }, high: { cpu: 5, memory: 5 } };
    const ranked = Object.entries(nodes)
      .filter(([, a]) => satisfies(a, threshold))
      .sort((a, b) => assuranceScore(b[1], threshold) - assuranceScore(a[1], threshold))
      .map(([n]) => n);
    expect(ranked).toEqual(['exact', 'medium', 'high']);
  });
});

describe('annotations', () => {
  it('ulysses.io/assurance: resource → integer level ≥ 0', () => {
    expect(parseAssuranceAnnotation('{"cpu":3,"memory":2}')).toEqual({ ok: true, value: { cpu: 3, memory: 2 } });
    expect(parseAssuranceAnnotation('{"cpu":1.5}')).toMatchObject({ ok: false, error: 'ulysses.io/assurance: cpu: must be an integer' });
    expect(parseAssuranceAnnotation('{"cpu":-1}')).toMatchObject({ ok: false, error: 'ulysses.io/assurance: cpu: must be >= 0' });
    expect(parseAssuranceAnnotation('[3]')).toMatchObject({ ok: false, issues: [{ field: '(root)' }] });
    expect(parseAssuranceAnnotation('{cpu:3}')).toMatchObject({ ok: false, issues: [{ field: '(json)' }] });
  });

  it('ulysses.io/assurance-policy: threshold or weighted, errors name the field', () => {
    expect(parseAssurancePolicyAnnotation('{"policy":"threshold","min":{"cpu":2}}')).toEqual({ ok: true, value: threshold });
    expect(parseAssurancePolicyAnnotation('{"policy":"weighted","weights":{"cpu":0.6,"memory":0.4},"threshold":2.5}')).toEqual({ ok: true, value: weighted });
    expect(parseAssurancePolicyAnnotation('{"policy":"best"}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/assurance-policy: policy: must be "threshold" or "weighted"',
    });
    expect(parseAssurancePolicyAnnotation('{"policy":"threshold","min":{"cpu":-2}}')).toMatchObject({ ok: false, error: 'ulysses.io/assurance-policy: min.cpu: must be >= 0' });
    expect(parseAssurancePolicyAnnotation('{"policy":"weighted","weights":{"cpu":0},"threshold":1}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/assurance-policy: weights: at least one weight must be > 0',
    });
    expect(parseAssurancePolicyAnnotation('{"policy":"weighted","weights":{"cpu":1}}')).toMatchObject({ ok: false, error: 'ulysses.io/assurance-policy: threshold: is required' });
  });
});
