/**
 * Criticality-aware placement by node assurance (thesis §3.1.2 and §5.3.2 (a)).
 *
 * Node annotation `ulysses.io/assurance`: the assurance vector A_n, JSON resource → integer level
 * ≥ 0, e.g. `{"cpu":3,"memory":2,"network":1}`. A resource the node does not list has level 0.
 *
 * Pod annotation `ulysses.io/assurance-policy`: the pod aggregation policy AP_l, one of
 * - `{"policy":"threshold","min":{"cpu":2}}`: A_r ≥ min_r for every listed resource (the policy the
 *   thesis prototype implements: "a simple threshold comparison");
 * - `{"policy":"weighted","weights":{"cpu":0.6,"memory":0.4},"threshold":2.5}`: Σ_r w_r A_r ≥ threshold
 *   (thesis §3.1: A_l = w_0 A_{l,0} + … + w_r A_{l,r} ≥ Threshold).
 * A pod without a policy is satisfied by every node.
 *
 * Score (0..10, the extender's MaxExtenderPriority): the thesis scores "in decreasing order of
 * assurance offered to a Pod", so the node that just satisfies the pod wins and high-assurance nodes
 * stay free for critical pods. With the excess E ≥ 0 of offered over needed assurance:
 *   threshold: E = Σ_{r ∈ node ∪ min} max(0, A_r − min_r)          (min_r = 0 when not listed)
 *   weighted:  E = (Σ_r w_r A_r − threshold) + Σ_{r without weight} A_r
 *   no policy: E = Σ_r A_r
 *   score = round(10 / (1 + E)) if the node satisfies the policy, else 0.
 * E = 0 → 10, E = 1 → 5, E = 2 → 3, E = 4 → 2, E = 9 → 1, E ≥ 19 → 0: non-increasing in E. Resources
 * the pod does not ask for still count (a node with high memory assurance is kept free for pods
 * that need it).
 * No I/O.
 */
import { z } from 'zod';
import { num, parseAnnotation, type Parsed } from '../realtime/annotations.ts';

export const ASSURANCE_ANNOTATION = 'ulysses.io/assurance';
export const ASSURANCE_POLICY_ANNOTATION = 'ulysses.io/assurance-policy';

export const MAX_ASSURANCE_LEVEL = 1000;

const resourceName = z
  .string()
  .min(1, { error: 'resource name must not be empty' })
  .max(253, { error: 'resource name too long' });

const level = () =>
  num()
    .int({ error: 'must be an integer' })
    .min(0, { error: 'must be >= 0' })
    .max(MAX_ASSURANCE_LEVEL, { error: `must be <= ${MAX_ASSURANCE_LEVEL}` });

export const assuranceVectorSchema = z.record(resourceName, level());

export type AssuranceVector = Readonly<Record<string, number>>;

const thresholdPolicySchema = z.strictObject({
  policy: z.literal('threshold'),
  min: z.record(resourceName, level()),
});

const weightedPolicySchema = z
  .strictObject({
    policy: z.literal('weighted'),
    weights: z.record(resourceName, num().min(0, { error: 'must be >= 0' }).max(1e6, { error: 'must be <= 1e6' })),
    threshold: num().min(0, { error: 'must be >= 0' }),
  })
  .superRefine((p, ctx) => {
    if (!Object.values(p.weights).some((w) => w > 0)) ctx.addIssue({ code: 'custom', path: ['weights'], message: 'at least one weight must be > 0' });
  });

export const assurancePolicySchema = z.discriminatedUnion('policy', [thresholdPolicySchema, weightedPolicySchema], {
  error: (issue) => (issue.code === 'invalid_union' ? 'must be "threshold" or "weighted"' : undefined),
});

export type AssurancePolicy =
  | { readonly policy: 'threshold'; readonly min: Readonly<Record<string, number>> }
  | { readonly policy: 'weighted'; readonly weights: Readonly<Record<string, number>>; readonly threshold: number };

/** Parses the node annotation `ulysses.io/assurance` (string or decoded JSON). */
export function parseAssuranceAnnotation(raw: unknown): Parsed<AssuranceVector> {
  return parseAnnotation(assuranceVectorSchema, raw, ASSURANCE_ANNOTATION);
}

/** Parses the pod annotation `ulysses.io/assurance-policy` (string or decoded JSON). */
export function parseAssurancePolicyAnnotation(raw: unknown): Parsed<AssurancePolicy> {
  return parseAnnotation(assurancePolicySchema, raw, ASSURANCE_POLICY_ANNOTATION);
}

/** A_r, 0 when the node does not list r (own properties only). */
export function assuranceLevel(node: AssuranceVector, resource: string): number {
  return Object.hasOwn(node, resource) ? (node[resource] ?? 0) : 0;
}

/** Σ_r w_r A_r. */
export function weightedAssurance(node: AssuranceVector, weights: Readonly<Record<string, number>>): number {
  let sum = 0;
  for (const [r, w] of Object.entries(weights)) sum += w * assuranceLevel(node, r);
  return sum;
}

const EPSILON = 1e-9;

/** Does the node offer the assurance the policy asks for? (no policy: yes) */
export function satisfies(node: AssuranceVector, policy: AssurancePolicy | null | undefined): boolean {
  if (!policy) return true;
  if (policy.policy === 'threshold') return Object.entries(policy.min).every(([r, min]) => assuranceLevel(node, r) >= min);
  return weightedAssurance(node, policy.weights) >= policy.threshold - EPSILON;
}

/** E: assurance offered beyond what the policy needs (formula in the header); ≥ 0 when satisfied. */
export function assuranceExcess(node: AssuranceVector, policy: AssurancePolicy | null | undefined): number {
  if (!policy) return Object.values(node).reduce((s, a) => s + a, 0);
  if (policy.policy === 'threshold') {
    let e = 0;
    const resources = new Set([...Object.keys(node), ...Object.keys(policy.min)]);
    for (const r of resources) {
      const min = Object.hasOwn(policy.min, r) ? (policy.min[r] ?? 0) : 0;
      e += Math.max(0, assuranceLevel(node, r) - min);
    }
    return e;
  }
  let e = Math.max(0, weightedAssurance(node, policy.weights) - policy.threshold);
  for (const [r, a] of Object.entries(node)) if (!Object.hasOwn(policy.weights, r)) e += a;
  return e;
}

/** 0..10: 10 for a node that just satisfies the policy, lower as it offers more, 0 if it does not satisfy. */
export function assuranceScore(node: AssuranceVector, policy: AssurancePolicy | null | undefined): number {
  if (!satisfies(node, policy)) return 0;
  return Math.round(10 / (1 + assuranceExcess(node, policy)));
}
