/**
 * API Priority and Fairness (APF) objects that exempt the critical namespace(s) from the apiserver's
 * fair queuing (thesis §5.3.3: the apiserver stays unmodified; an exempt FlowSchema covers the
 * namespace hosting the critical services).
 *
 * Facts checked on the real kube-apiserver 1.36.3 (see test/integration/apf.int.test.ts):
 * - Only the built-in PriorityLevelConfiguration named `exempt` may have `type: Exempt`; any other
 *   name is refused with 422 `spec.type: Invalid value: "Exempt": must be 'Exempt' if and only if
 *   \`name\` is 'exempt'`. So our FlowSchema points at `exempt` instead of shipping its own level.
 * - matchingPrecedence 1 is reserved: `only the schema named 'exempt' may have matchingPrecedence 1`.
 * - The built-in (suggested) FlowSchemas routing to a non-exempt level start at precedence 100
 *   (`system-leader-election`), then 400 (`system-node-high`), 500, 800, 900, 9000 (`service-accounts`),
 *   9900 (`global-default`), 10000 (`catch-all`). The lowest precedence wins, so any value in 2..99
 *   beats all of them for requests in the critical namespace(s); the default is 50.
 *
 * Matching semantics (k8s.io/apiserver/pkg/util/flowcontrol/match.go): a resourceRule with
 * `namespaces` only matches namespaced requests (including GET/PATCH/DELETE of the Namespace object
 * itself, whose RequestInfo carries its own name as namespace); cluster-scoped requests need
 * `clusterScope: true`. Subjects are ORed, rules are ORed.
 *
 * No I/O here: see apply.ts for server-side apply, removal and verification.
 */
import type { V1FlowSchema, V1PolicyRulesWithSubjects, FlowcontrolV1Subject } from '@kubernetes/client-node';
import { stringify as stringifyYaml } from 'yaml';
import { z } from 'zod';
import { validateConfig } from '../core/config.ts';

export const FLOWCONTROL_API_VERSION = 'flowcontrol.apiserver.k8s.io/v1';
export const FLOWCONTROL_API_PATH = '/apis/flowcontrol.apiserver.k8s.io/v1';
/** The built-in, mandatory priority level; the only one that may be of type Exempt. */
export const EXEMPT_PRIORITY_LEVEL = 'exempt';
export const DEFAULT_FLOW_SCHEMA_NAME = 'ulysses-critical-namespaces';
export const DEFAULT_MATCHING_PRECEDENCE = 50;
export const DEFAULT_CRITICAL_NAMESPACES: readonly string[] = ['ulysses-critical'];
/**
 * Lowest matchingPrecedence of a built-in FlowSchema that routes to a non-exempt priority level
 * (`system-leader-election`, Kubernetes 1.36). Ours must be strictly lower to win.
 */
export const BUILTIN_MIN_NON_EXEMPT_PRECEDENCE = 100;
export const MANAGED_BY_LABEL = 'app.kubernetes.io/managed-by';
export const MANAGED_BY_VALUE = 'ulysses';
/** Label carrying the component that owns the object, so `kubectl get flowschemas -l` finds ours. */
export const COMPONENT_LABEL = 'app.kubernetes.io/component';
export const COMPONENT_VALUE = 'apf-exemption';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

const namespaceName = z
  .string()
  .max(63, 'must be a DNS-1123 label: at most 63 characters')
  .regex(DNS1123_LABEL, 'must be a DNS-1123 label: lower-case alphanumerics or "-", starting and ending with an alphanumeric');

const objectName = z
  .string()
  .max(253, 'must be a DNS-1123 subdomain: at most 253 characters')
  .regex(DNS1123_SUBDOMAIN, 'must be a DNS-1123 subdomain: lower-case alphanumerics, "-" or ".", starting and ending with an alphanumeric');

export const CriticalNamespaceOptionsSchema = z
  .object({
    /** Namespaces whose requests are exempt from APF queuing (every verb, resource and user). */
    namespaces: z
      .array(namespaceName)
      .min(1, 'must list at least one namespace')
      .refine((ns) => new Set(ns).size === ns.length, 'must not contain duplicates'),
    /** FlowSchema name. */
    name: objectName.default(DEFAULT_FLOW_SCHEMA_NAME),
    /**
     * Lower wins. > 1 (1 is reserved for the mandatory `exempt` FlowSchema) and below every built-in
     * FlowSchema routing to a limited level (100), so no built-in shadows ours.
     */
    matchingPrecedence: z
      .number()
      .int('must be an integer')
      .gt(1, "must be > 1: precedence 1 is reserved for the mandatory 'exempt' FlowSchema")
      .lt(BUILTIN_MIN_NON_EXEMPT_PRECEDENCE, `must be < ${BUILTIN_MIN_NON_EXEMPT_PRECEDENCE}: the built-in system-leader-election FlowSchema (precedence 100) would otherwise win`)
      .default(DEFAULT_MATCHING_PRECEDENCE),
    /**
     * Also exempt the cluster-scoped requests (nodes, namespaces, PVs, ...) made by the critical
     * namespaces' own service accounts. Off by default: it is wider than the namespace itself.
     * (Exempting *every* cluster-scoped request would exempt the whole cluster's node and
     * controller traffic, so this is deliberately scoped to those service accounts.)
     */
    includeClusterScoped: z.boolean().default(false),
  })
  .strict();

export type CriticalNamespaceOptions = z.output<typeof CriticalNamespaceOptionsSchema>;
export type CriticalNamespaceOptionsInput = z.input<typeof CriticalNamespaceOptionsSchema>;

/** Validates the options; throws core/config ConfigError naming each offending field. */
export function parseCriticalNamespaceOptions(raw: unknown, source = 'apf-configs options'): CriticalNamespaceOptions {
  return validateConfig(CriticalNamespaceOptionsSchema, raw, source);
}

/** Every request, authenticated or not: the two groups every identity belongs to one of. */
export const ALL_SUBJECTS: FlowcontrolV1Subject[] = [
  { kind: 'Group', group: { name: 'system:authenticated' } },
  { kind: 'Group', group: { name: 'system:unauthenticated' } },
];

/**
 * The FlowSchema(s) routing every request on resources in `namespaces` to the built-in `exempt`
 * priority level. Returns one FlowSchema (an array so callers and the YAML renderer stay unchanged
 * if the set ever grows).
 */
export function criticalNamespaceFlowSchemas(input: CriticalNamespaceOptionsInput): V1FlowSchema[] {
  const o = parseCriticalNamespaceOptions(input);
  const rules: V1PolicyRulesWithSubjects[] = [
    {
      subjects: ALL_SUBJECTS.map((s) => structuredClone(s)),
      resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: [...o.namespaces] }],
    },
  ];
  if (o.includeClusterScoped) {
    rules.push({
      subjects: o.namespaces.map((ns) => ({ kind: 'ServiceAccount', serviceAccount: { namespace: ns, name: '*' } })),
      resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], clusterScope: true }],
    });
  }
  return [
    {
      apiVersion: FLOWCONTROL_API_VERSION,
      kind: 'FlowSchema',
      metadata: {
        name: o.name,
        labels: { [MANAGED_BY_LABEL]: MANAGED_BY_VALUE, [COMPONENT_LABEL]: COMPONENT_VALUE },
        annotations: {
          'ulysses.io/purpose': 'thesis 5.3.3: requests on resources in the critical namespace(s) bypass APF queuing',
          'ulysses.io/critical-namespaces': o.namespaces.join(','),
        },
      },
      spec: {
        matchingPrecedence: o.matchingPrecedence,
        priorityLevelConfiguration: { name: EXEMPT_PRIORITY_LEVEL },
        rules,
      },
    },
  ];
}

/**
 * FlowSchemas among `existing` that may win over ours: lower precedence, or equal precedence and a
 * lexicographically smaller name (the apiserver's tie-break), and routing to a non-exempt level.
 * Conservative: their rules are not analysed.
 */
export function shadowingFlowSchemas(ours: Pick<V1FlowSchema, 'metadata' | 'spec'>, existing: readonly V1FlowSchema[]): V1FlowSchema[] {
  const p = ours.spec?.matchingPrecedence ?? 1000;
  const name = ours.metadata?.name ?? '';
  return existing.filter((fs) => {
    if (fs.metadata?.name === name) return false;
    if (fs.spec?.priorityLevelConfiguration.name === EXEMPT_PRIORITY_LEVEL) return false;
    const q = fs.spec?.matchingPrecedence ?? 1000;
    return q < p || (q === p && (fs.metadata?.name ?? '') < name);
  });
}

/** Multi-document YAML for `kubectl apply --server-side -f`. */
export function renderFlowSchemasYaml(objects: readonly V1FlowSchema[], header?: string): string {
  const head = header ? header.split('\n').map((l) => (l ? `# ${l}` : '#')).join('\n') + '\n' : '';
  return head + objects.map((o) => '---\n' + stringifyYaml(o, { lineWidth: 0 })).join('');
}

export const CRITICAL_NAMESPACE_YAML_HEADER = [
  'Generated by apf-configs/render.ts from criticalNamespaceFlowSchemas({ namespaces: ["ulysses-critical"] }).',
  'Do not edit: change the generator and run `npx tsx apf-configs/render.ts`.',
  '',
  'Apply:    kubectl apply --server-side --field-manager=ulysses -f apf-configs/critical-namespace.yaml',
  'Rollback: kubectl delete -f apf-configs/critical-namespace.yaml',
].join('\n');

/** The content of apf-configs/critical-namespace.yaml. */
export function renderDefaultCriticalNamespaceYaml(): string {
  return renderFlowSchemasYaml(criticalNamespaceFlowSchemas({ namespaces: [...DEFAULT_CRITICAL_NAMESPACES] }), CRITICAL_NAMESPACE_YAML_HEADER);
}
