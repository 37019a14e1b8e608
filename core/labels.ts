/**
 * Label-selector matching with Kubernetes semantics (apimachinery `metav1.LabelSelectorAsSelector`
 * and `labels.Selector.Matches`), used by the criticality aggregation (thesis §5.3: a Service
 * inherits the level of the pods it selects).
 *
 * - `null`/`undefined` selector matches nothing; an empty selector (`{}`) matches everything.
 * - `matchLabels` and every `matchExpressions` requirement are ANDed.
 * - `In`: the key is present and its value is one of `values`.
 * - `NotIn`: the key is absent, or its value is not one of `values`.
 * - `Exists` / `DoesNotExist`: the key is present / absent (the value, even `""`, is irrelevant).
 * - `In`/`NotIn` need a non-empty `values`; `Exists`/`DoesNotExist` need none; any other operator is
 *   invalid. Kubernetes refuses such selectors; here an invalid selector matches nothing and the
 *   reason is returned by {@link compileLabelSelector}. Key/value syntax is not re-validated (the
 *   API server already did that).
 *
 * No I/O.
 */
import type { V1LabelSelector } from '@kubernetes/client-node';

/** A label map as found in `metadata.labels` (possibly absent). */
export type Labels = Readonly<Record<string, string>> | null | undefined;

/** A compiled selector: call it on many label maps without re-parsing. */
export type LabelMatcher = (labels: Labels) => boolean;

/** Result of {@link compileLabelSelector}: `error` is set when the selector is invalid. */
export interface CompiledLabelSelector {
  readonly matches: LabelMatcher;
  readonly error?: string;
}

const matchNothing: LabelMatcher = () => false;
const matchEverything: LabelMatcher = () => true;

/** Own-property lookup, so keys such as "constructor" never hit Object.prototype. */
export function labelValue(labels: Labels, key: string): string | undefined {
  if (labels == null || !Object.hasOwn(labels, key)) return undefined;
  return labels[key];
}

function hasLabel(labels: Labels, key: string): boolean {
  return labels != null && Object.hasOwn(labels, key);
}

/** Compile a `V1LabelSelector` once; invalid selectors compile to "matches nothing" plus an error. */
export function compileLabelSelector(selector: V1LabelSelector | null | undefined): CompiledLabelSelector {
  if (selector == null) return { matches: matchNothing };
  const matchLabels = Object.entries(selector.matchLabels ?? {});
  const expressions = selector.matchExpressions ?? [];
  if (matchLabels.length === 0 && expressions.length === 0) return { matches: matchEverything };

  const requirements: LabelMatcher[] = [];
  for (const [key, value] of matchLabels) {
    requirements.push((labels) => hasLabel(labels, key) && labels![key] === value);
  }
  for (const [i, expr] of expressions.entries()) {
    const { key, operator } = expr;
    const values = expr.values ?? [];
    const where = `matchExpressions[${i}] (key ${JSON.stringify(key)})`;
    switch (operator) {
      case 'In':
      case 'NotIn': {
        if (values.length === 0) {
          return { matches: matchNothing, error: `${where}: operator ${operator} requires non-empty values` };
        }
        const set = new Set(values);
        requirements.push(
          operator === 'In'
            ? (labels) => hasLabel(labels, key) && set.has(labels![key]!)
            : (labels) => !hasLabel(labels, key) || !set.has(labels![key]!),
        );
        break;
      }
      case 'Exists':
      case 'DoesNotExist': {
        if (values.length !== 0) {
          return { matches: matchNothing, error: `${where}: operator ${operator} requires empty values` };
        }
        requirements.push(
          operator === 'Exists' ? (labels) => hasLabel(labels, key) : (labels) => !hasLabel(labels, key),
        );
        break;
      }
      default:
        return { matches: matchNothing, error: `${where}: unknown operator ${JSON.stringify(operator)}` };
    }
  }
  return { matches: (labels) => requirements.every((req) => req(labels)) };
}

/** One-shot convenience: does `selector` select `labels`? (Invalid selector → false.) */
export function matchesLabelSelector(selector: V1LabelSelector | null | undefined, labels: Labels): boolean {
  return compileLabelSelector(selector).matches(labels);
}

/**
 * A Service's `spec.selector` (a plain equality map) as a `V1LabelSelector`. A Service with an
 * absent or empty selector manages no endpoints, so it becomes `undefined` (matches nothing),
 * unlike an empty `V1LabelSelector`, which matches everything.
 */
export function selectorFromMap(map: Readonly<Record<string, string>> | null | undefined): V1LabelSelector | undefined {
  if (map == null || Object.keys(map).length === 0) return undefined;
  return { matchLabels: { ...map } };
}
