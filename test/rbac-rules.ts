/**
 * RBAC as kube-apiserver's RBAC authorizer decides it, over a set of RBAC objects, for tests without
 * a cluster. The same matching as upstream (kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go
 * RuleAllows with pkg/apis/rbac/v1/evaluation_helpers.go VerbMatches, APIGroupMatches,
 * ResourceMatches, ResourceNameMatches; subjects as pkg/registry/rbac/validation/rule.go appliesTo):
 * - a rule matches a verb, an API group and a resource (`resource/subresource`; `*`; `*` before the
 *   subresource) when it lists it or `*`; with resourceNames, only a request naming one of them. A create (POST)
 *   carries no name, so it never matches a rule with resourceNames; list/watch carry the name of a
 *   `metadata.name=` field selector (k8s.io/apiserver request/requestinfo.go);
 * - a ClusterRoleBinding grants its ClusterRole everywhere, a RoleBinding its Role or ClusterRole in
 *   its own namespace; a ServiceAccount subject without namespace is the binding's namespace.
 * Not modelled: aggregation rules, non-resource URLs, other authorizers (the Node authorizer is
 * modelled where a test needs it, see test/unit/rbac.test.ts).
 */
import type { K8sObject } from '../manifests/overlays.ts';

export interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  verbs: string[];
}

export interface Subject {
  kind: 'ServiceAccount' | 'User' | 'Group';
  name: string;
  namespace?: string;
}

/** An authenticated identity: the user name and its groups. */
export interface Identity {
  user: string;
  groups: string[];
}

/** What a request is, as the authorizer sees it (namespace absent: cluster scope or all namespaces). */
export interface Request {
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

/** The identity a pod's ServiceAccount token authenticates as. */
export function serviceAccount(namespace: string, name: string): Identity {
  return { user: `system:serviceaccount:${namespace}:${name}`, groups: ['system:serviceaccounts', `system:serviceaccounts:${namespace}`, 'system:authenticated'] };
}

/** The identity of a kubelet's client certificate (CN system:node:<name>, O system:nodes). */
export function nodeIdentity(name: string): Identity {
  return { user: `system:node:${name}`, groups: ['system:nodes', 'system:authenticated'] };
}

export function user(name: string): Identity {
  return { user: name, groups: ['system:authenticated'] };
}

const has = (list: readonly string[] | undefined, v: string) => (list ?? []).includes('*') || (list ?? []).includes(v);

/** RuleAllows: does `rule` match `req`? */
export function ruleAllows(rule: PolicyRule, req: Request): boolean {
  if (!has(rule.verbs, req.verb) || !has(rule.apiGroups, req.group)) return false;
  const combined = req.subresource ? `${req.resource}/${req.subresource}` : req.resource;
  const resourceOk = (rule.resources ?? []).some((r) => r === '*' || r === combined || (req.subresource !== undefined && r === `*/${req.subresource}`));
  if (!resourceOk) return false;
  if (!rule.resourceNames?.length) return true;
  return req.name !== undefined && req.name !== '' && rule.resourceNames.includes(req.name);
}

interface Binding extends K8sObject {
  roleRef: { kind: 'Role' | 'ClusterRole'; name: string };
  subjects?: Subject[];
}

interface Role extends K8sObject {
  rules?: PolicyRule[];
}

function appliesTo(s: Subject, who: Identity, bindingNamespace: string | undefined): boolean {
  switch (s.kind) {
    case 'User':
      return s.name === who.user;
    case 'Group':
      return who.groups.includes(s.name);
    case 'ServiceAccount':
      return who.user === `system:serviceaccount:${s.namespace || bindingNamespace}:${s.name}`;
  }
}

/** A rule granted to an identity, where it applies (namespace undefined: everywhere) and through which objects. */
export interface GrantedRule {
  rule: PolicyRule;
  namespace: string | undefined;
  via: string;
}

/** Every rule `objects` grant `who` (bindings whose role is missing grant nothing, as in the apiserver). */
export function grantedRules(objects: readonly K8sObject[], who: Identity): GrantedRule[] {
  const out: GrantedRule[] = [];
  const find = (kind: string, name: string, namespace?: string) =>
    objects.find((o) => o.kind === kind && o.metadata.name === name && (kind === 'ClusterRole' || o.metadata.namespace === namespace)) as Role | undefined;
  for (const o of objects) {
    if (o.kind !== 'ClusterRoleBinding' && o.kind !== 'RoleBinding') continue;
    const b = o as Binding;
    const ns = o.kind === 'RoleBinding' ? o.metadata.namespace : undefined;
    if (!(b.subjects ?? []).some((s) => appliesTo(s, who, ns))) continue;
    if (o.kind === 'ClusterRoleBinding' && b.roleRef.kind !== 'ClusterRole') continue;
    const role = find(b.roleRef.kind, b.roleRef.name, ns);
    for (const rule of role?.rules ?? []) out.push({ rule, namespace: ns, via: `${o.kind}/${o.metadata.name} -> ${b.roleRef.kind}/${b.roleRef.name}` });
  }
  return out;
}

/** Whether `objects` allow `who` to make `req`. */
export function allows(objects: readonly K8sObject[], who: Identity, req: Request): boolean {
  return grantedRules(objects, who).some((g) => (g.namespace === undefined || g.namespace === req.namespace) && ruleAllows(g.rule, req));
}

/** Every rule of every Role and ClusterRole in `objects`, with where it is defined. */
export function allRules(objects: readonly K8sObject[]): Array<{ rule: PolicyRule; role: string }> {
  return objects
    .filter((o) => o.kind === 'Role' || o.kind === 'ClusterRole')
    .flatMap((o) => ((o as Role).rules ?? []).map((rule) => ({ rule, role: `${o.kind}/${o.metadata.namespace ? `${o.metadata.namespace}/` : ''}${o.metadata.name}` })));
}

export const describeRequest = (r: Request) =>
  `${r.verb} ${r.group ? `${r.resource}.${r.group}` : r.resource}${r.subresource ? `/${r.subresource}` : ''}${r.name !== undefined ? ` "${r.name}"` : ''}${r.namespace ? ` in ${r.namespace}` : ''}`;
