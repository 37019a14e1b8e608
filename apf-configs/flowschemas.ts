/**
 * API Priority and Fairness (APF) objects that exempt the critical namespace(s) from the apiserver's
 * fair queuing (thesis §5.3.3: the apiserver stays unmodified; an exempt FlowSchema covers the
 * namespace hosting the critical services).
 *
 * Facts checked on the real kube-apiserver 1.36.3 and 1.37.2 (see test/integration/apf.int.test.ts):
 * - Only the built-in PriorityLevelConfiguration named `exempt` may have `type: Exempt`; any other
 *   name is refused with 422 `spec.type: Invalid value: "Exempt": must be 'Exempt' if and only if
 *   \`name\` is 'exempt'`. So our FlowSchema points at `exempt` instead of shipping its own level.
 * - matchingPrecedence 1 is reserved: `only the schema named 'exempt' may have matchingPrecedence 1`.
 * - The built-in (suggested) FlowSchemas routing to a non-exempt level start at precedence 100
 *   (`system-leader-election`), then 400 (`system-node-high`), 500, 800, 900, 9000 (`service-accounts`),
 *   9900 (`global-default`), 10000 (`catch-all`). The lowest precedence wins, so any value in 2..99
 *   beats all of them for requests in the critical namespace(s); the default is 50.
 *
 * Matching semantics (k8s.io/apiserver/pkg/util/flowcontrol/rule.go): a resourceRule with
 * `namespaces` only matches namespaced requests (including GET/PATCH/DELETE of the Namespace object
 * itself, whose RequestInfo carries its own name as namespace); cluster-scoped requests need
 * `clusterScope: true`. Subjects are ORed, rules are ORed. A User or Group subject named `*` matches
 * everyone.
 *
 * Who is exempt: APF runs after authentication and impersonation and before authorization
 * (k8s.io/apiserver pkg/server/config.go DefaultBuildHandlerChain, v0.36.3 and v0.37.2). A request
 * is classified by its authenticated identity — one without credentials as `system:anonymous` in
 * group `system:unauthenticated` (anonymous auth is on by default) — and a request that RBAC then
 * refuses was still served at the level APF chose. So the subjects, not RBAC, decide who may reach
 * the `exempt` level: only the identities on the failover path of a critical pod
 * (DEFAULT_EXEMPT_SUBJECTS) and the critical namespaces' own ServiceAccounts, never a group that
 * every client belongs to (CATCH_ALL_SUBJECTS).
 *
 * No I/O here: see apply.ts for server-side apply, removal and verification.
 */
import type { V1FlowSchema, V1PolicyRulesWithSubjects } from '@kubernetes/client-node';
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

const sa = (namespace: string, name: string) => ({ kind: 'ServiceAccount' as const, serviceAccount: { namespace, name } });

/** Namespace of kube-controller-manager's per-controller ServiceAccounts (`--use-service-account-credentials`). */
export const KUBE_SYSTEM_NAMESPACE = 'kube-system';
/** Namespace of Ulysses' components (manifests/base); their ServiceAccounts are listed below. */
export const ULYSSES_SYSTEM_NAMESPACE = 'ulysses-system';

/**
 * The identities that act on a critical pod, its ReplicaSet/Deployment and its Endpoints/EndpointSlices
 * while it fails over; their requests in the critical namespace(s) are exempt. ServiceAccount names of
 * kube-controller-manager are the `NewClient("<sa>")` names in cmd/kube-controller-manager/app of
 * Kubernetes v1.36.3 and v1.37.2 (kubeadm runs it with `--use-service-account-credentials=true`, so
 * each controller writes as kube-system/<sa>).
 */
export const DEFAULT_EXEMPT_SUBJECTS: readonly ExemptSubject[] = [
  // kubelets (system:node:<name>): status of the critical pods on their node, their deletion once terminated
  { kind: 'Group', group: { name: 'system:nodes' } },
  // kube-scheduler: pods/binding of the replacement pod
  { kind: 'User', user: { name: 'system:kube-scheduler' } },
  // kube-controller-manager's own identity: its controllers' writes when it runs without service-account credentials
  { kind: 'User', user: { name: 'system:kube-controller-manager' } },
  // node-lifecycle (marks the failed node's pods NotReady) and taint-eviction (deletes them): both use this SA
  sa(KUBE_SYSTEM_NAMESPACE, 'node-controller'),
  // force-deletes the pods bound to a deleted or out-of-service node
  sa(KUBE_SYSTEM_NAMESPACE, 'pod-garbage-collector'),
  // creates the replacement pod
  sa(KUBE_SYSTEM_NAMESPACE, 'replicaset-controller'),
  // the Deployment's ReplicaSets and status
  sa(KUBE_SYSTEM_NAMESPACE, 'deployment-controller'),
  // Endpoints: drops the failed pod, adds the replacement
  sa(KUBE_SYSTEM_NAMESPACE, 'endpoint-controller'),
  // EndpointSlices: the same
  sa(KUBE_SYSTEM_NAMESPACE, 'endpointslice-controller'),
  // Ulysses' controller manager: the ReplicaSet, Deployment, Endpoints, EndpointSlice and taint-eviction controllers it replaces
  sa(ULYSSES_SYSTEM_NAMESPACE, 'ulysses-controller-manager'),
  // Ulysses' scheduler extender: reservation annotation and pods/binding of the replacement pod
  sa(ULYSSES_SYSTEM_NAMESPACE, 'ulysses-scheduler-extender'),
  // not ulysses-kubelet-shim: it makes no request in any critical namespace (nodes, the cluster-scoped
  // UlyssesConfig and its Events in `default`), and its long-lived token sits on every node
];

/**
 * Subjects that would exempt every client (or every client of a kind), never accepted: the wildcard,
 * the groups every request belongs to one of, the anonymous user, and every ServiceAccount of the
 * cluster (anyone who may create a ServiceAccount anywhere).
 */
export const CATCH_ALL_SUBJECTS: Readonly<Record<'User' | 'Group', Readonly<Record<string, string>>>> = {
  User: { '*': 'it matches every user', 'system:anonymous': 'it is every request without credentials' },
  Group: {
    '*': 'it matches every group',
    'system:authenticated': 'every authenticated request is in it',
    'system:unauthenticated': 'every request without credentials is in it',
    'system:serviceaccounts': 'every ServiceAccount of every namespace is in it',
  },
};
/** Upper bound of the `subjects` option: keeps the FlowSchema small, with room beyond the defaults. */
export const MAX_EXEMPT_SUBJECTS = 32;

const identityName = (kind: 'User' | 'Group') =>
  z
    .string()
    .min(1, 'must not be empty')
    .superRefine((name, ctx) => {
      const why = CATCH_ALL_SUBJECTS[kind][name];
      if (why) ctx.addIssue({ code: 'custom', message: `must not be ${JSON.stringify(name)}: ${why}, so every such client would skip APF` });
    });

const subjectSchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('User'), user: z.object({ name: identityName('User') }).strict() }).strict(),
  z.object({ kind: z.literal('Group'), group: z.object({ name: identityName('Group') }).strict() }).strict(),
  z
    .object({
      kind: z.literal('ServiceAccount'),
      // name `*`: every ServiceAccount of that namespace
      serviceAccount: z.object({ namespace: namespaceName, name: z.union([z.literal('*'), objectName]) }).strict(),
    })
    .strict(),
]);
export type ExemptSubject = z.output<typeof subjectSchema>;

const subjectKey = (s: ExemptSubject) => JSON.stringify(s.kind === 'User' ? [s.kind, s.user.name] : s.kind === 'Group' ? [s.kind, s.group.name] : [s.kind, s.serviceAccount.namespace, s.serviceAccount.name]);

export const CriticalNamespaceOptionsSchema = z
  .object({
    /**
     * Namespaces whose requests are exempt from APF queuing: every verb and resource, made by the
     * namespaces' own ServiceAccounts or by `subjects`.
     */
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
    /**
     * Identities whose requests in the critical namespace(s) are exempt, besides the critical
     * namespaces' own ServiceAccounts (always included). At most MAX_EXEMPT_SUBJECTS, no duplicates,
     * none of CATCH_ALL_SUBJECTS.
     */
    subjects: z
      .array(subjectSchema)
      .max(MAX_EXEMPT_SUBJECTS, `must list at most ${MAX_EXEMPT_SUBJECTS} subjects`)
      .refine((l) => new Set(l.map(subjectKey)).size === l.length, 'must not contain duplicates')
      .default(() => DEFAULT_EXEMPT_SUBJECTS.map((s) => structuredClone(s))),
  })
  .strict();

export type CriticalNamespaceOptions = z.output<typeof CriticalNamespaceOptionsSchema>;
export type CriticalNamespaceOptionsInput = z.input<typeof CriticalNamespaceOptionsSchema>;

/** Validates the options; throws core/config ConfigError naming each offending field. */
export function parseCriticalNamespaceOptions(raw: unknown, source = 'apf-configs options'): CriticalNamespaceOptions {
  return validateConfig(CriticalNamespaceOptionsSchema, raw, source);
}

/**
 * The FlowSchema(s) routing the requests on resources in `namespaces` made by the namespaces' own
 * ServiceAccounts and by `subjects` (default DEFAULT_EXEMPT_SUBJECTS) to the built-in `exempt`
 * priority level. Returns one FlowSchema (an array so callers and the YAML renderer stay unchanged
 * if the set ever grows).
 */
export function criticalNamespaceFlowSchemas(input: CriticalNamespaceOptionsInput): V1FlowSchema[] {
  const o = parseCriticalNamespaceOptions(input);
  const rules: V1PolicyRulesWithSubjects[] = [
    {
      // the critical workload's own API calls, then the identities on its failover path
      subjects: [...o.namespaces.map((ns) => sa(ns, '*')), ...o.subjects.map((s) => structuredClone(s))],
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
          'ulysses.io/purpose': 'thesis 5.3.3: requests on resources in the critical namespace(s) by the identities on their failover path bypass APF queuing',
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
  'Exempt: the namespace\'s own ServiceAccounts and the identities on its failover path (apf-configs/README.md).',
  '',
  'Apply:    kubectl apply --server-side --field-manager=ulysses -f apf-configs/critical-namespace.yaml',
  'Rollback: kubectl delete -f apf-configs/critical-namespace.yaml',
].join('\n');

/** The content of apf-configs/critical-namespace.yaml. */
export function renderDefaultCriticalNamespaceYaml(): string {
  return renderFlowSchemasYaml(criticalNamespaceFlowSchemas({ namespaces: [...DEFAULT_CRITICAL_NAMESPACES] }), CRITICAL_NAMESPACE_YAML_HEADER);
}
