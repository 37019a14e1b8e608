/**
 * Claims and who grants them: a pod that declares criticality `high`, a real-time demand or a TDMA
 * demand asks Ulysses for something other tenants then do not get (the fast lane of every component,
 * RT capacity on a node, TDMA slots on a network). A namespace's pods may make a claim only if a
 * cluster admin labelled the namespace for it; changing a namespace's labels takes `update
 * namespaces`, which tenants do not have. The apiserver enforces this with the
 * ValidatingAdmissionPolicies of manifests/base/admission/ (their keys are these constants; a unit
 * test checks that they agree); this module is the same rule in TypeScript, for the installer's
 * preflight and for the workloads that create such namespaces.
 *
 * Only `high` is a criticality claim: `low` and `none` ask for no fast path. A pod that names the
 * PriorityClass `ulysses-high` (scheduler-plugins/priority-classes.yaml) claims `high` too.
 */
import { CRITICALITY_LABEL } from './criticality.ts';
import { labelValue, type Labels } from './labels.ts';

/** What a pod can claim. */
export type Claim = 'criticality' | 'rt' | 'tdma';
export const CLAIMS: readonly Claim[] = Object.freeze(['criticality', 'rt', 'tdma'] as const);

/** The namespace label an admin sets (to {@link GRANTED}) to let the namespace's pods make each claim. */
export const GRANT_LABELS: Readonly<Record<Claim, string>> = Object.freeze({
  criticality: 'ulysses.io/allow-criticality',
  rt: 'ulysses.io/allow-rt',
  tdma: 'ulysses.io/allow-tdma',
});
/** The one value of a grant label that grants. */
export const GRANTED = 'true';

/** The PriorityClass Ulysses ships for criticality `high`. */
export const HIGH_PRIORITY_CLASS = 'ulysses-high';
/** The pod annotations of a real-time and a TDMA demand (scheduler-plugins/schedulability.ts RT_ANNOTATION, TDMA_ANNOTATION). */
export const RT_CLAIM_ANNOTATION = 'ulysses.io/rt';
export const TDMA_CLAIM_ANNOTATION = 'ulysses.io/tdma';
/** The annotation the kubelet puts on the mirror pod of a static pod. */
export const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';

/** The parts of a pod (or a pod template) that carry claims. */
export interface ClaimingObject {
  metadata?: { labels?: Labels; annotations?: Labels } | undefined;
  spec?: { priorityClassName?: string | undefined } | undefined;
}

/** The claims a pod or pod template makes, in {@link CLAIMS} order. */
export function podClaims(pod: ClaimingObject): Claim[] {
  const out: Claim[] = [];
  if (labelValue(pod.metadata?.labels, CRITICALITY_LABEL) === 'high' || pod.spec?.priorityClassName === HIGH_PRIORITY_CLASS) out.push('criticality');
  if (labelValue(pod.metadata?.annotations, RT_CLAIM_ANNOTATION) !== undefined) out.push('rt');
  if (labelValue(pod.metadata?.annotations, TDMA_CLAIM_ANNOTATION) !== undefined) out.push('tdma');
  return out;
}

/** Does a namespace with these labels grant `claim`? */
export function grants(namespaceLabels: Labels, claim: Claim): boolean {
  return labelValue(namespaceLabels, GRANT_LABELS[claim]) === GRANTED;
}

/** The namespace labels that grant `claims`, e.g. `{"ulysses.io/allow-criticality": "true"}`. */
export function grantLabels(claims: Iterable<Claim>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const c of claims) out[GRANT_LABELS[c]] = GRANTED;
  return out;
}

/** A namespace whose pods make claims it does not grant. */
export interface UngrantedClaims {
  readonly namespace: string;
  readonly claims: Claim[];
  /** The claiming pods' names (at most 3 per namespace). */
  readonly pods: string[];
  /** The command that grants them. */
  readonly fix: string;
}

/**
 * The namespaces whose (non-terminating) pods make claims the namespace's labels do not grant:
 * once the policies are installed, such a pod's replacement (a ReplicaSet's next pod after a
 * failure) is refused. `labelsOf` gives a namespace's labels (undefined: unknown namespace, no grant).
 */
export function ungrantedClaims(
  pods: Iterable<ClaimingObject & { metadata?: { name?: string | undefined; namespace?: string | undefined; deletionTimestamp?: unknown } | undefined }>,
  labelsOf: (namespace: string) => Labels,
): UngrantedClaims[] {
  const found = new Map<string, { claims: Set<Claim>; pods: string[] }>();
  for (const pod of pods) {
    if (pod.metadata?.deletionTimestamp) continue;
    const namespace = pod.metadata?.namespace ?? 'default';
    const missing = podClaims(pod).filter((c) => !grants(labelsOf(namespace), c));
    if (!missing.length) continue;
    let entry = found.get(namespace);
    if (!entry) found.set(namespace, (entry = { claims: new Set(), pods: [] }));
    for (const c of missing) entry.claims.add(c);
    if (entry.pods.length < 3) entry.pods.push(pod.metadata?.name ?? '<unnamed>');
  }
  return [...found.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([namespace, e]) => {
      const claims = CLAIMS.filter((c) => e.claims.has(c));
      const labels = Object.entries(grantLabels(claims)).map(([k, v]) => `${k}=${v}`);
      return { namespace, claims, pods: e.pods, fix: `kubectl label namespace ${namespace} ${labels.join(' ')}` };
    });
}
