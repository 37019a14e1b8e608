/**
 * Least privilege of the RBAC in manifests/ (issue 42 item 4), evaluated without a cluster by the
 * rule matcher of test/rbac-rules.ts over the objects each base kustomization lists (plus the
 * static-pod bindings):
 * - every API call a component makes (CALLS: one entry per call site) is allowed to its identity,
 *   and every verb a rule grants is one of those calls: a verb nothing calls fails the test;
 * - Leases only by name: a Ulysses identity creates only its own Lease, by name (a PUT), and never
 *   writes another component's Lease (the extender cannot fence the controller manager, nor the
 *   reverse);
 * - FlowSchema (and priority level) writes only of the FlowSchema the controller manager manages;
 * - the kubelet-shim needs nothing beyond its node's identity but UlyssesConfig `default`.
 * The same checks against the real apiserver (SubjectAccessReview, admission) are in
 * test/integration/manifests.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DEFAULT_FLOW_SCHEMA_NAME } from '../../apf-configs/flowschemas.ts';
import { manifestFile, parseObjects, ULYSSES_CONFIG_NAME, ULYSSES_NAMESPACE, type K8sObject } from '../../manifests/overlays.ts';
import { allRules, allows, describeRequest, grantedRules, nodeIdentity, ruleAllows, serviceAccount, user, type Identity, type Request } from '../rbac-rules.ts';

/**
 * The objects `manifests/base/<dir>/kustomization.yaml` lists (a directory among them: its own
 * kustomization's), as written: the base kustomizations only add labels.
 */
function baseObjects(dir: string): K8sObject[] {
  const k = parseYaml(manifestFile(`base/${dir}/kustomization.yaml`)) as { resources: string[] };
  return k.resources.flatMap((f) => (f.endsWith('.yaml') ? parseObjects(manifestFile(`base/${dir}/${f}`), `base/${dir}/${f}`) : baseObjects(`${dir}/${f}`)));
}

const OBJECTS: K8sObject[] = [
  ...baseObjects('.'),
  ...baseObjects('controller-manager'),
  ...baseObjects('scheduler-extender'),
  ...baseObjects('kubelet-shim'),
  ...baseObjects('apf'),
  ...parseObjects(manifestFile('kubeadm/static-pods/rbac-static.yaml'), 'rbac-static.yaml'),
];

const NS = ULYSSES_NAMESPACE;
/** A namespace of some tenant: a call the component makes in whichever namespace its objects are. */
const ANY = 'a-tenant-namespace';
const CM_LEASE = 'ulysses-controller-manager';
const EXTENDER_LEASE = 'ulysses-scheduler-extender';
const NODE = 'worker-1';

const CM = serviceAccount(NS, 'ulysses-controller-manager');
const EXTENDER = serviceAccount(NS, 'ulysses-scheduler-extender');
const SHIM_POD = serviceAccount(NS, 'ulysses-kubelet-shim');
const SHIM_NODE = nodeIdentity(NODE);

type Call = Request & { at: string };
const call = (at: string, verb: string, resource: string, o: Omit<Partial<Request>, 'verb' | 'resource'> = {}): Call => ({ at, verb, resource, group: o.group ?? '', ...o });
const calls = (at: string, verbs: string[], resource: string, o: Omit<Partial<Request>, 'verb' | 'resource'> = {}) => verbs.map((v) => call(at, v, resource, o));
const config = (at: string, verbs: string[]) => calls(at, verbs, 'ulyssesconfigs', { group: 'ulysses.io', name: ULYSSES_CONFIG_NAME });
const configStatus = (at: string) => call(at, 'patch', 'ulyssesconfigs', { group: 'ulysses.io', subresource: 'status', name: ULYSSES_CONFIG_NAME });

/**
 * Every API call of each component, with the code making it (informers list and watch across all
 * namespaces; `/finalizers` updates are what OwnerReferencesPermissionEnforcement checks when an
 * object is written with an ownerReference that has blockOwnerDeletion).
 */
const CM_CALLS: Call[] = [
  ...calls('manager.ts informer', ['list', 'watch'], 'pods'),
  call('replicaset.ts create', 'create', 'pods', { namespace: ANY }),
  call('claim.ts adopt/release (JSON patch)', 'patch', 'pods', { namespace: ANY }),
  call('replicaset.ts scale down, taint-eviction.ts evict', 'delete', 'pods', { namespace: ANY }),
  call('taint-eviction.ts DisruptionTarget condition', 'patch', 'pods', { subresource: 'status', namespace: ANY }),
  ...calls('manager.ts informer', ['list', 'watch'], 'nodes'),
  call('core/node-taints.ts read', 'get', 'nodes', { name: NODE }),
  call('core/node-taints.ts taint ulysses.io/unreachable', 'patch', 'nodes', { name: NODE }),
  ...calls('manager.ts informer', ['list', 'watch'], 'services'),
  call('endpointslice.ts ownerReference to the Service (blockOwnerDeletion)', 'update', 'services', { subresource: 'finalizers', namespace: ANY }),
  ...calls('manager.ts informer', ['list', 'watch'], 'endpoints'),
  ...calls('endpoints.ts', ['create', 'update', 'delete'], 'endpoints', { namespace: ANY }),
  ...calls('manager.ts informer', ['list', 'watch'], 'endpointslices', { group: 'discovery.k8s.io' }),
  ...calls('endpointslice.ts', ['create', 'update', 'delete'], 'endpointslices', { group: 'discovery.k8s.io', namespace: ANY }),
  ...calls('manager.ts informer', ['list', 'watch'], 'replicasets', { group: 'apps' }),
  ...calls('deployment.ts, replicaset.ts, claim.ts', ['get', 'create', 'update', 'patch', 'delete'], 'replicasets', { group: 'apps', namespace: ANY }),
  call('replicaset.ts status', 'update', 'replicasets', { group: 'apps', subresource: 'status', namespace: ANY }),
  call('replicaset.ts ownerReference of the pods (blockOwnerDeletion)', 'update', 'replicasets', { group: 'apps', subresource: 'finalizers', namespace: ANY }),
  ...calls('manager.ts informer', ['list', 'watch'], 'deployments', { group: 'apps' }),
  call('claim.ts owner re-check', 'get', 'deployments', { group: 'apps', namespace: ANY }),
  call('deployment.ts status', 'update', 'deployments', { group: 'apps', subresource: 'status', namespace: ANY }),
  call('deployment.ts ownerReference of the ReplicaSets (blockOwnerDeletion)', 'update', 'deployments', { group: 'apps', subresource: 'finalizers', namespace: ANY }),
  ...calls('core/events.ts', ['create', 'patch'], 'events', { namespace: ANY }),
  call('core/runtime-config.ts Event on UlyssesConfig', 'create', 'events', { namespace: 'default' }),
  ...config('core/runtime-config.ts informer, manager.ts readRuntimeConfig', ['get', 'list', 'watch']),
  configStatus('core/runtime-config.ts, recovery-slo.ts'),
  ...calls('core/leader-election.ts (create: PUT by name)', ['get', 'update', 'create'], 'leases', { group: 'coordination.k8s.io', namespace: NS, name: CM_LEASE }),
  ...calls('apf-configs/apply.ts apply (creates when absent), read back, remove', ['get', 'create', 'patch', 'delete'], 'flowschemas', { group: 'flowcontrol.apiserver.k8s.io', name: DEFAULT_FLOW_SCHEMA_NAME }),
  call('apf-configs/apply.ts shadowing check', 'list', 'flowschemas', { group: 'flowcontrol.apiserver.k8s.io' }),
];

const EXTENDER_CALLS: Call[] = [
  ...calls('server.ts informer', ['list', 'watch'], 'nodes'),
  ...calls('server.ts informer and re-list', ['list', 'watch'], 'pods'),
  call('leadership.ts pods holding the routing label', 'list', 'pods', { namespace: NS }),
  call('server.ts bind reads the pod', 'get', 'pods', { namespace: ANY }),
  call('server.ts reservation, requeue.ts nudge', 'patch', 'pods', { namespace: ANY }),
  call('leadership.ts routing label', 'patch', 'pods', { namespace: NS }),
  call('server.ts bind', 'create', 'pods', { subresource: 'binding', namespace: ANY }),
  ...calls('core/events.ts', ['create', 'patch'], 'events', { namespace: ANY }),
  ...config('core/runtime-config.ts informer', ['list', 'watch']),
  configStatus('core/runtime-config.ts'),
  ...calls('core/leader-election.ts (create: PUT by name)', ['get', 'update', 'create'], 'leases', { group: 'coordination.k8s.io', namespace: NS, name: EXTENDER_LEASE }),
  call('leadership.ts reservation epoch dry run', 'patch', 'leases', { group: 'coordination.k8s.io', namespace: NS, name: EXTENDER_LEASE }),
  ...calls('routing.ts the Service routed to the leader', ['list', 'create', 'update', 'delete'], 'endpointslices', { group: 'discovery.k8s.io', namespace: NS }),
  call('leadership.ts apiservers', 'get', 'endpointslices', { group: 'discovery.k8s.io', namespace: 'default', name: 'kubernetes' }),
  call('leadership.ts apiservers (no EndpointSlice)', 'get', 'endpoints', { namespace: 'default', name: 'kubernetes' }),
];

/** The shim's calls (kubelet-shim/runtime.ts, core/runtime-config.ts), the node informer limited to its node by a field selector. */
const shimCalls = (node: string): Call[] => [
  ...calls('kubelet-shim/runtime.ts node informer (fieldSelector metadata.name)', ['list', 'watch'], 'nodes', { name: node }),
  ...config('core/runtime-config.ts informer', ['list', 'watch']),
  configStatus('core/runtime-config.ts'),
  call('core/runtime-config.ts Event on UlyssesConfig', 'create', 'events', { namespace: 'default' }),
];

/**
 * What kube-apiserver grants a node identity besides RBAC, for the calls above (kubernetes
 * plugin/pkg/auth/authorizer/node/node_authorizer.go authorizeNode: get/list/watch of its own Node
 * only, the name from a metadata.name field selector for list/watch; bootstrappolicy/policy.go
 * NodeRules: create/update/patch of events, core and events.k8s.io, in every namespace).
 */
function nodeAuthorizerAllows(who: Identity, r: Request): boolean {
  const node = who.user.startsWith('system:node:') && who.groups.includes('system:nodes') ? who.user.slice('system:node:'.length) : undefined;
  if (!node) return false;
  if (r.group === '' && r.resource === 'nodes' && !r.subresource) return ['get', 'list', 'watch'].includes(r.verb) && r.name === node;
  return ['', 'events.k8s.io'].includes(r.group) && r.resource === 'events' && !r.subresource && ['create', 'update', 'patch'].includes(r.verb);
}

const IDENTITIES: Array<[string, Identity, Call[]]> = [
  ['controller manager (ServiceAccount)', CM, CM_CALLS],
  ['scheduler extender (ServiceAccount)', EXTENDER, EXTENDER_CALLS],
  ['kubelet-shim DaemonSet (ServiceAccount)', SHIM_POD, shimCalls(NODE)],
  ['kubelet-shim node service (the node\'s kubelet credential)', SHIM_NODE, shimCalls(NODE)],
];

describe('each Ulysses identity may make the calls of its code, and no other', () => {
  for (const [what, who, needs] of IDENTITIES) {
    it(`${what}: every call allowed`, () => {
      const denied = needs.filter((c) => !allows(OBJECTS, who, c) && !nodeAuthorizerAllows(who, c)).map((c) => `${describeRequest(c)} (${c.at})`);
      expect(denied).toEqual([]);
    });

    it(`${what}: every verb granted is called (least privilege)`, () => {
      const unused: string[] = [];
      for (const g of grantedRules(OBJECTS, who)) {
        for (const group of g.rule.apiGroups ?? []) {
          for (const resource of g.rule.resources ?? []) {
            for (const verb of g.rule.verbs) {
              const [res, sub] = resource.split('/');
              const used = needs.some((c) => c.verb === verb && c.group === group && c.resource === res && c.subresource === sub && ruleAllows(g.rule, c));
              if (!used) unused.push(`${verb} ${group ? `${resource}.${group}` : resource}${g.rule.resourceNames ? ` ${JSON.stringify(g.rule.resourceNames)}` : ''} (${g.via})`);
            }
          }
        }
      }
      expect(unused).toEqual([]);
    });
  }

  it('the static-pod identities get the same roles: kube-controller-manager the controller manager\'s calls, kube-scheduler the extender\'s but the Lease', () => {
    const kcm = user('system:kube-controller-manager');
    const sched = user('system:kube-scheduler');
    expect(CM_CALLS.filter((c) => !allows(OBJECTS, kcm, c)).map(describeRequest)).toEqual([]);
    // the static extender runs without leader election, hence neither the Lease nor the routing
    const leaderOnly = (c: Call) => c.resource === 'leases' || (c.resource === 'endpointslices' && c.namespace === NS);
    expect(EXTENDER_CALLS.filter((c) => !leaderOnly(c) && !allows(OBJECTS, sched, c)).map(describeRequest)).toEqual([]);
  });
});

describe('Leases: by name, and each component only its own', () => {
  const lease = (verb: string, name?: string, namespace = NS): Request => ({ verb, group: 'coordination.k8s.io', resource: 'leases', namespace, name });

  it('no rule grants a Lease verb without resourceNames (a `create` would have to be documented here: there is none)', () => {
    const DOCUMENTED_CREATES: string[] = [];
    const open = allRules(OBJECTS)
      .filter(({ rule }) => rule.verbs.some((v) => ruleAllows(rule, lease(v))))
      .filter(({ rule, role }) => !(rule.verbs.length === 1 && rule.verbs[0] === 'create' && DOCUMENTED_CREATES.includes(role)))
      .map(({ rule, role }) => `${role}: ${rule.verbs.join(',')} leases`);
    expect(open).toEqual([]);
  });

  it('the Leases the Roles name are created by the manifests, as the Deployments name them', () => {
    for (const [dir, name] of [['controller-manager', CM_LEASE], ['scheduler-extender', EXTENDER_LEASE]] as const) {
      const objs = baseObjects(dir);
      expect(objs.some((o) => o.kind === 'Lease' && o.metadata.name === name && o.metadata.namespace === NS), `base/${dir} has Lease ${NS}/${name}`).toBe(true);
      const args = (objs.find((o) => o.kind === 'Deployment') as unknown as { spec: { template: { spec: { containers: { args: string[] }[] } } } }).spec.template.spec.containers[0]!.args;
      expect(args).toEqual(expect.arrayContaining([`--leader-elect-resource-namespace=${NS}`, `--leader-elect-resource-name=${name}`]));
    }
  });

  it('a Ulysses identity creates only its own Lease, by name (a POST carries no name: refused), deletes none, writes none of kube-system', () => {
    expect(allows(OBJECTS, CM, lease('create', CM_LEASE))).toBe(true);
    expect(allows(OBJECTS, EXTENDER, lease('create', EXTENDER_LEASE))).toBe(true);
    for (const who of [CM, EXTENDER, SHIM_POD, SHIM_NODE, user('system:kube-controller-manager'), user('system:kube-scheduler')]) {
      expect(allows(OBJECTS, who, lease('create')), `${who.user} create`).toBe(false);
      for (const name of [CM_LEASE, EXTENDER_LEASE]) expect(allows(OBJECTS, who, lease('delete', name)), `${who.user} delete ${name}`).toBe(false);
      for (const name of ['kube-controller-manager', 'kube-scheduler']) expect(allows(OBJECTS, who, lease('update', name, 'kube-system')), `${who.user} update ${name}`).toBe(false);
    }
  });

  it("the kcm handback (kcm's own identity, without the static-pod bindings) reads both Leases and writes none; its extender rescue lists and binds pods of ulysses-system only", () => {
    const base = OBJECTS.filter((o) => !o.metadata.name.endsWith(':static'));
    const kcm = user('system:kube-controller-manager');
    for (const name of [CM_LEASE, EXTENDER_LEASE]) {
      expect(allows(base, kcm, lease('get', name))).toBe(true);
      for (const verb of ['update', 'patch', 'delete', 'create']) expect(allows(base, kcm, lease(verb, name)), `${verb} ${name}`).toBe(false);
    }
    const pods = (verb: string, namespace: string, subresource?: string): Request => ({ verb, group: '', resource: 'pods', subresource, namespace, name: subresource ? 'p' : undefined });
    expect(allows(base, kcm, pods('list', NS))).toBe(true);
    expect(allows(base, kcm, pods('create', NS, 'binding'))).toBe(true);
    for (const verb of ['create', 'update', 'patch', 'delete']) expect(allows(base, kcm, pods(verb, NS)), `${verb} pods`).toBe(false);
    expect(allows(base, kcm, pods('create', 'default', 'binding'))).toBe(false);
    expect(allows(base, kcm, pods('create', NS, 'eviction'))).toBe(false);
  });

  it('the extender cannot take or fence the controller manager\'s Lease, nor the controller manager the extender\'s', () => {
    for (const verb of ['update', 'patch', 'delete', 'create']) {
      expect(allows(OBJECTS, EXTENDER, lease(verb, CM_LEASE)), `extender ${verb} ${CM_LEASE}`).toBe(false);
      expect(allows(OBJECTS, CM, lease(verb, EXTENDER_LEASE)), `controller manager ${verb} ${EXTENDER_LEASE}`).toBe(false);
      expect(allows(OBJECTS, user('system:kube-controller-manager'), lease(verb, EXTENDER_LEASE)), `static controller manager ${verb} ${EXTENDER_LEASE}`).toBe(false);
    }
    expect(allows(OBJECTS, EXTENDER, lease('update', EXTENDER_LEASE))).toBe(true);
    expect(allows(OBJECTS, CM, lease('update', CM_LEASE))).toBe(true);
  });
});

describe('APF: writes only of the FlowSchema Ulysses manages', () => {
  const WRITES = ['create', 'update', 'patch', 'delete', 'deletecollection'];
  const flowcontrol = (resource: string, verb: string, name?: string): Request => ({ verb, group: 'flowcontrol.apiserver.k8s.io', resource, name });

  it('every rule writing FlowSchemas names only ulysses-critical-namespaces; none writes priority levels', () => {
    const open = allRules(OBJECTS)
      .filter(({ rule }) => WRITES.some((v) => ruleAllows({ ...rule, resourceNames: undefined }, flowcontrol('flowschemas', v)) || ruleAllows({ ...rule, resourceNames: undefined }, flowcontrol('prioritylevelconfigurations', v))))
      .filter(({ rule }) => !rule.resourceNames?.length || rule.resourceNames.some((n) => n !== DEFAULT_FLOW_SCHEMA_NAME) || ruleAllows({ ...rule, resourceNames: undefined }, flowcontrol('prioritylevelconfigurations', 'patch')))
      .map(({ rule, role }) => `${role}: ${rule.verbs.join(',')} ${rule.resources?.join(',')} ${JSON.stringify(rule.resourceNames ?? [])}`);
    expect(open).toEqual([]);
  });

  it('the controller manager applies and removes its FlowSchema, and cannot touch the built-in ones or create another', () => {
    for (const v of ['create', 'patch', 'delete']) expect(allows(OBJECTS, CM, flowcontrol('flowschemas', v, DEFAULT_FLOW_SCHEMA_NAME)), v).toBe(true);
    for (const name of ['exempt', 'system-leader-election', 'global-default', 'catch-all', 'some-other']) {
      for (const v of WRITES) expect(allows(OBJECTS, CM, flowcontrol('flowschemas', v, name)), `${v} ${name}`).toBe(false);
    }
    // a POST create is authorized without a name: not allowed (a server-side apply creating its own name is)
    expect(allows(OBJECTS, CM, flowcontrol('flowschemas', 'create'))).toBe(false);
    for (const v of WRITES) expect(allows(OBJECTS, CM, flowcontrol('prioritylevelconfigurations', v, 'exempt')), v).toBe(false);
  });
});

describe('the kubelet-shim: one identity per node', () => {
  it('a node identity gets UlyssesConfig `default` from Ulysses and nothing else: no other Node, no Secret, no pod', () => {
    const rules = grantedRules(OBJECTS, SHIM_NODE);
    expect(rules.map((g) => g.via).every((v) => v.endsWith('ClusterRole/ulysses:kubelet-shim'))).toBe(true);
    expect(allows(OBJECTS, SHIM_NODE, { verb: 'list', group: '', resource: 'nodes' })).toBe(false);
    expect(allows(OBJECTS, SHIM_NODE, { verb: 'get', group: '', resource: 'nodes', name: 'worker-2' })).toBe(false);
    expect(allows(OBJECTS, SHIM_NODE, { verb: 'list', group: 'ulysses.io', resource: 'ulyssesconfigs' })).toBe(false);
    expect(allows(OBJECTS, SHIM_NODE, { verb: 'update', group: 'ulysses.io', resource: 'ulyssesconfigs', name: ULYSSES_CONFIG_NAME })).toBe(false);
  });

  it('the DaemonSet\'s ServiceAccount writes Events only in `default`, where a cluster-scoped object\'s Events live', () => {
    expect(allows(OBJECTS, SHIM_POD, { verb: 'create', group: '', resource: 'events', namespace: 'default' })).toBe(true);
    expect(allows(OBJECTS, SHIM_POD, { verb: 'create', group: '', resource: 'events', namespace: ANY })).toBe(false);
    expect(allows(OBJECTS, SHIM_POD, { verb: 'create', group: '', resource: 'events', namespace: NS })).toBe(false);
  });

  it('each shim writes only its own status entry: the policy matches both shim identities and derives the node from each', () => {
    const docs = parseObjects(manifestFile('base/kubelet-shim/status-policy.yaml'), 'status-policy.yaml') as unknown as Array<K8sObject & { spec: Record<string, any> }>;
    const policy = docs.find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
    const binding = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!;
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, validationActions: ['Deny'] });
    expect(policy.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: ['ulysses.io'], apiVersions: ['*'], operations: ['UPDATE'], resources: ['ulyssesconfigs/status'] }]);
    const match = policy.spec.matchConditions[0].expression as string;
    expect(match).toContain(`request.userInfo.username == '${SHIM_POD.user}'`);
    expect(match).toContain("request.userInfo.username.startsWith('system:node:')");
    const node = policy.spec.variables.find((v: { name: string }) => v.name === 'node').expression as string;
    expect(node).toContain(`substring(${'system:node:'.length})`);
    expect(node).toContain("'authentication.kubernetes.io/node-name'");
    // the key the shim reports under (kubelet-shim/runtime.ts statusKey)
    expect(policy.spec.variables.find((v: { name: string }) => v.name === 'own').expression).toBe("'kubelet-shim/' + variables.node");
    // both identities the policy covers are the ones RBAC lets write the status
    const status: Request = { verb: 'patch', group: 'ulysses.io', resource: 'ulyssesconfigs', subresource: 'status', name: ULYSSES_CONFIG_NAME };
    expect([allows(OBJECTS, SHIM_NODE, status), allows(OBJECTS, SHIM_POD, status)]).toEqual([true, true]);
  });

  it('the node service runs with the node\'s kubelet credential, not a token: the unit and the installer agree', async () => {
    const { NODE_PATHS } = await import('../../manifests/install.ts');
    expect(NODE_PATHS.shimKubeconfig).toBe('/etc/kubernetes/kubelet.conf');
    expect(manifestFile('systemd/ulysses-kubelet-shim.service')).toMatch(new RegExp(`^Environment=KUBECONFIG=${NODE_PATHS.shimKubeconfig}$`, 'm'));
    expect(manifestFile('install.ts')).not.toMatch(/create', 'token'/);
  });
});
