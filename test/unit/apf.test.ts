import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { FlowcontrolV1Subject, V1FlowSchema } from '@kubernetes/client-node';
import { ConfigError } from '../../core/config.ts';
import {
  BUILTIN_MIN_NON_EXEMPT_PRECEDENCE,
  CATCH_ALL_SUBJECTS,
  DEFAULT_EXEMPT_SUBJECTS,
  DEFAULT_FLOW_SCHEMA_NAME,
  DEFAULT_MATCHING_PRECEDENCE,
  MAX_EXEMPT_SUBJECTS,
  criticalNamespaceFlowSchemas,
  renderDefaultCriticalNamespaceYaml,
  renderFlowSchemasYaml,
  shadowingFlowSchemas,
} from '../../apf-configs/flowschemas.ts';
import { metricSamples } from '../../core/metrics.ts';
import { ULYSSES_NAMESPACE, manifestFile, parseObjects } from '../../manifests/overlays.ts';
import { APF_FLOWSCHEMA_YAML_PATH } from '../../manifests/render.ts';

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return err as ConfigError;
  }
  throw new Error('expected a ConfigError');
}
const fields = (e: ConfigError) => e.issues.map((i) => i.field).sort();

/** Built-in FlowSchemas of kube-apiserver 1.36.3 as observed on the testbed (name, precedence, level). */
const BUILTINS: V1FlowSchema[] = (
  [
    ['exempt', 1, 'exempt'],
    ['probes', 2, 'exempt'],
    ['system-leader-election', 100, 'leader-election'],
    ['system-node-high', 400, 'node-high'],
    ['system-nodes', 500, 'system'],
    ['kube-controller-manager', 800, 'workload-high'],
    ['kube-scheduler', 800, 'workload-high'],
    ['kube-system-service-accounts', 900, 'workload-high'],
    ['service-accounts', 9000, 'workload-low'],
    ['global-default', 9900, 'global-default'],
    ['catch-all', 10000, 'catch-all'],
  ] as const
).map(([name, matchingPrecedence, pl]) => ({ metadata: { name }, spec: { matchingPrecedence, priorityLevelConfiguration: { name: pl } } }));

describe('criticalNamespaceFlowSchemas', () => {
  it("routes the requests on resources in the namespace by its own ServiceAccounts and the failover path's identities to the built-in exempt level", () => {
    const out = criticalNamespaceFlowSchemas({ namespaces: ['ulysses-critical'] });
    expect(out).toHaveLength(1);
    const fs = out[0]!;
    expect(fs.apiVersion).toBe('flowcontrol.apiserver.k8s.io/v1');
    expect(fs.kind).toBe('FlowSchema');
    expect(fs.metadata!.name).toBe(DEFAULT_FLOW_SCHEMA_NAME);
    expect(fs.metadata!.labels).toMatchObject({ 'app.kubernetes.io/managed-by': 'ulysses' });
    expect(fs.metadata!.namespace).toBeUndefined(); // cluster-scoped object
    expect(fs.spec).toEqual({
      matchingPrecedence: 50,
      priorityLevelConfiguration: { name: 'exempt' },
      rules: [
        {
          subjects: [{ kind: 'ServiceAccount', serviceAccount: { namespace: 'ulysses-critical', name: '*' } }, ...DEFAULT_EXEMPT_SUBJECTS],
          resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], namespaces: ['ulysses-critical'] }],
        },
      ],
    });
    // namespaced only: no clusterScope, no non-resource rules, no distinguisher (meaningless when exempt)
    expect(fs.spec!.rules![0]!.resourceRules![0]!.clusterScope).toBeUndefined();
    expect(fs.spec!.rules![0]!.nonResourceRules).toBeUndefined();
    expect(fs.spec!.distinguisherMethod).toBeUndefined();
  });

  it('takes several namespaces, a name and a precedence', () => {
    const [fs] = criticalNamespaceFlowSchemas({ namespaces: ['a', 'b-2'], name: 'my.exempt-fs', matchingPrecedence: 2 });
    expect(fs!.metadata!.name).toBe('my.exempt-fs');
    expect(fs!.spec!.matchingPrecedence).toBe(2);
    expect(fs!.spec!.rules![0]!.resourceRules![0]!.namespaces).toEqual(['a', 'b-2']);
    expect(fs!.metadata!.annotations!['ulysses.io/critical-namespaces']).toBe('a,b-2');
  });

  it('the default precedence sits between the reserved 1 and the first built-in non-exempt schema', () => {
    expect(DEFAULT_MATCHING_PRECEDENCE).toBeGreaterThan(1);
    expect(DEFAULT_MATCHING_PRECEDENCE).toBeLessThan(BUILTIN_MIN_NON_EXEMPT_PRECEDENCE);
    const min = Math.min(...BUILTINS.filter((f) => f.spec!.priorityLevelConfiguration.name !== 'exempt').map((f) => f.spec!.matchingPrecedence!));
    expect(min).toBe(BUILTIN_MIN_NON_EXEMPT_PRECEDENCE);
  });

  it('includeClusterScoped adds cluster-scoped requests of the namespaces\' service accounts only', () => {
    const [fs] = criticalNamespaceFlowSchemas({ namespaces: ['a', 'b'], includeClusterScoped: true });
    expect(fs!.spec!.rules).toHaveLength(2);
    expect(fs!.spec!.rules![1]).toEqual({
      subjects: [
        { kind: 'ServiceAccount', serviceAccount: { namespace: 'a', name: '*' } },
        { kind: 'ServiceAccount', serviceAccount: { namespace: 'b', name: '*' } },
      ],
      resourceRules: [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], clusterScope: true }],
    });
    // the namespaced rule is unchanged
    expect(fs!.spec!.rules![0]).toEqual(criticalNamespaceFlowSchemas({ namespaces: ['a', 'b'] })[0]!.spec!.rules![0]);
  });

  it('returns fresh objects: mutating one does not leak into the next or into DEFAULT_EXEMPT_SUBJECTS', () => {
    const [a] = criticalNamespaceFlowSchemas({ namespaces: ['x'] });
    a!.spec!.rules![0]!.subjects[1]!.group!.name = 'mutated';
    expect(DEFAULT_EXEMPT_SUBJECTS[0]).toEqual({ kind: 'Group', group: { name: 'system:nodes' } });
    expect(criticalNamespaceFlowSchemas({ namespaces: ['x'] })[0]!.spec!.rules![0]!.subjects[1]!.group!.name).toBe('system:nodes');
  });
});

const sa = (namespace: string, name: string) => ({ kind: 'ServiceAccount' as const, serviceAccount: { namespace, name } });
const CATCH_ALL_GROUPS = ['system:authenticated', 'system:unauthenticated', 'system:serviceaccounts', '*'];
const CATCH_ALL_USERS = ['system:anonymous', '*'];
const catchAll = (s: FlowcontrolV1Subject) =>
  (s.kind === 'Group' && CATCH_ALL_GROUPS.includes(s.group!.name)) || (s.kind === 'User' && CATCH_ALL_USERS.includes(s.user!.name));

describe('exempt subjects (the failover path of a critical pod, never everyone)', () => {
  it('the defaults contain no catch-all group or user, and neither do the generated YAML files', () => {
    expect(DEFAULT_EXEMPT_SUBJECTS.filter(catchAll)).toEqual([]);
    for (const g of CATCH_ALL_GROUPS) expect(CATCH_ALL_SUBJECTS.Group[g], g).toBeDefined();
    for (const u of CATCH_ALL_USERS) expect(CATCH_ALL_SUBJECTS.User[u], u).toBeDefined();
    const files = [fileURLToPath(new URL('../../apf-configs/critical-namespace.yaml', import.meta.url)), APF_FLOWSCHEMA_YAML_PATH];
    for (const file of files) {
      const subjects = parseAllDocuments(readFileSync(file, 'utf8')).flatMap((d) => (d.toJS() as V1FlowSchema).spec!.rules!.flatMap((r) => r.subjects));
      expect(subjects.length, file).toBeGreaterThan(0);
      expect(subjects.filter(catchAll), file).toEqual([]);
    }
  });

  it.each([
    [{ kind: 'Group', group: { name: 'system:nodes' } }, 'kubelets: status of the critical pods'],
    [{ kind: 'User', user: { name: 'system:kube-scheduler' } }, 'binding of the replacement pod'],
    [{ kind: 'User', user: { name: 'system:kube-controller-manager' } }, 'kcm without service-account credentials'],
    [sa('kube-system', 'node-controller'), 'node-lifecycle and taint-eviction (core.go NewClient("node-controller"))'],
    [sa('kube-system', 'pod-garbage-collector'), 'pods on a deleted or out-of-service node'],
    [sa('kube-system', 'replicaset-controller'), 'the replacement pod'],
    [sa('kube-system', 'deployment-controller'), "the Deployment's ReplicaSets"],
    [sa('kube-system', 'endpoint-controller'), 'Endpoints'],
    [sa('kube-system', 'endpointslice-controller'), 'EndpointSlices'],
    [sa('ulysses-system', 'ulysses-controller-manager'), "Ulysses' controllers"],
    [sa('ulysses-system', 'ulysses-scheduler-extender'), "Ulysses' reservations and binding"],
  ])('default subject %j (%s)', (subject, _why) => {
    expect(DEFAULT_EXEMPT_SUBJECTS).toContainEqual(subject);
    expect(criticalNamespaceFlowSchemas({ namespaces: ['c'] })[0]!.spec!.rules![0]!.subjects).toContainEqual(subject);
  });

  it('lists exactly those defaults, once each', () => {
    expect(DEFAULT_EXEMPT_SUBJECTS).toHaveLength(11);
    expect(new Set(DEFAULT_EXEMPT_SUBJECTS.map((s) => JSON.stringify(s))).size).toBe(DEFAULT_EXEMPT_SUBJECTS.length);
  });

  it("Ulysses' subjects are the ServiceAccounts its Deployments run as in manifests/base; not the kubelet-shim's (no request in a critical namespace)", () => {
    const ours = DEFAULT_EXEMPT_SUBJECTS.filter((s) => s.kind === 'ServiceAccount' && s.serviceAccount.namespace === ULYSSES_NAMESPACE).map((s) => (s.kind === 'ServiceAccount' ? s.serviceAccount.name : ''));
    const runAs = ['base/controller-manager/deployment.yaml', 'base/scheduler-extender/deployment.yaml'].flatMap((f) =>
      parseObjects(manifestFile(f), f)
        .filter((o) => o.kind === 'Deployment')
        .map((o) => (o.spec as { template: { spec: { serviceAccountName: string } } }).template.spec.serviceAccountName),
    );
    expect(ours.sort()).toEqual(runAs.sort());
    const accounts = parseObjects(manifestFile('base/kubelet-shim/rbac.yaml'), 'kubelet-shim').filter((o) => o.kind === 'ServiceAccount').map((o) => o.metadata.name);
    expect(accounts).toEqual(['ulysses-kubelet-shim']);
    expect(ours).not.toContain('ulysses-kubelet-shim');
  });

  it("always adds every critical namespace's own ServiceAccounts, before the configured subjects", () => {
    const [fs] = criticalNamespaceFlowSchemas({ namespaces: ['a', 'b'], subjects: [{ kind: 'User', user: { name: 'alice' } }] });
    expect(fs!.spec!.rules![0]!.subjects).toEqual([sa('a', '*'), sa('b', '*'), { kind: 'User', user: { name: 'alice' } }]);
    // an empty list leaves only the namespaces' own ServiceAccounts
    expect(criticalNamespaceFlowSchemas({ namespaces: ['a'], subjects: [] })[0]!.spec!.rules![0]!.subjects).toEqual([sa('a', '*')]);
  });

  it('takes every subject kind, including all ServiceAccounts of one namespace', () => {
    const subjects = [{ kind: 'Group' as const, group: { name: 'system:serviceaccounts:ops' } }, { kind: 'User' as const, user: { name: 'system:node:n1' } }, sa('ops', '*'), sa('ops', 'failover.bot')];
    expect(criticalNamespaceFlowSchemas({ namespaces: ['a'], subjects })[0]!.spec!.rules![0]!.subjects.slice(1)).toEqual(subjects);
  });
});

describe('option validation names the field', () => {
  it.each([
    [{ namespaces: [] }, 'namespaces', /at least one/],
    [{ namespaces: ['Critical'] }, 'namespaces.0', /DNS-1123 label/],
    [{ namespaces: ['ok', 'under_score'] }, 'namespaces.1', /DNS-1123 label/],
    [{ namespaces: ['-lead'] }, 'namespaces.0', /DNS-1123 label/],
    [{ namespaces: ['a'.repeat(64)] }, 'namespaces.0', /63/],
    [{ namespaces: ['a', 'a'] }, 'namespaces', /duplicates/],
    [{ namespaces: 'ulysses-critical' }, 'namespaces', /.+/],
    [{}, 'namespaces', /.+/],
    [{ namespaces: ['a'], matchingPrecedence: 1 }, 'matchingPrecedence', /> 1.*reserved/],
    [{ namespaces: ['a'], matchingPrecedence: 100 }, 'matchingPrecedence', /< 100/],
    [{ namespaces: ['a'], matchingPrecedence: 9000 }, 'matchingPrecedence', /< 100/],
    [{ namespaces: ['a'], matchingPrecedence: 2.5 }, 'matchingPrecedence', /integer/],
    [{ namespaces: ['a'], name: 'Bad Name' }, 'name', /DNS-1123 subdomain/],
    [{ namespaces: ['a'], includeClusterScoped: 'yes' }, 'includeClusterScoped', /.+/],
    [{ namespaces: ['a'], precedence: 50 }, '(root)', /precedence/],
    [{ namespaces: ['a'], subjects: [{ kind: 'Group', group: { name: 'system:authenticated' } }] }, 'subjects.0.group.name', /must not be "system:authenticated": every authenticated request/],
    [{ namespaces: ['a'], subjects: [{ kind: 'Group', group: { name: 'system:unauthenticated' } }] }, 'subjects.0.group.name', /must not be "system:unauthenticated": every request without credentials/],
    [{ namespaces: ['a'], subjects: [sa('kube-system', 'x'), { kind: 'Group', group: { name: 'system:serviceaccounts' } }] }, 'subjects.1.group.name', /every ServiceAccount of every namespace/],
    [{ namespaces: ['a'], subjects: [{ kind: 'Group', group: { name: '*' } }] }, 'subjects.0.group.name', /must not be "\*": it matches every group/],
    [{ namespaces: ['a'], subjects: [{ kind: 'User', user: { name: 'system:anonymous' } }] }, 'subjects.0.user.name', /must not be "system:anonymous"/],
    [{ namespaces: ['a'], subjects: [{ kind: 'User', user: { name: '*' } }] }, 'subjects.0.user.name', /it matches every user/],
    [{ namespaces: ['a'], subjects: [{ kind: 'User', user: { name: '' } }] }, 'subjects.0.user.name', /must not be empty/],
    [{ namespaces: ['a'], subjects: [{ kind: 'Everyone' }] }, 'subjects.0.kind', /.+/],
    [{ namespaces: ['a'], subjects: [{ kind: 'Group', user: { name: 'x' } }] }, 'subjects.0.group', /.+/],
    [{ namespaces: ['a'], subjects: [sa('Kube_System', 'x')] }, 'subjects.0.serviceAccount.namespace', /DNS-1123 label/],
    [{ namespaces: ['a'], subjects: [sa('*', '*')] }, 'subjects.0.serviceAccount.namespace', /DNS-1123 label/],
    [{ namespaces: ['a'], subjects: [sa('kube-system', 'Bad Name')] }, 'subjects.0.serviceAccount.name', /.+/],
    [{ namespaces: ['a'], subjects: [sa('kube-system', 'x'), sa('kube-system', 'x')] }, 'subjects', /duplicates/],
    [{ namespaces: ['a'], subjects: { kind: 'Group', group: { name: 'system:nodes' } } }, 'subjects', /.+/],
  ])('%j -> %s', (input, field, message) => {
    const err = configError(() => criticalNamespaceFlowSchemas(input as never));
    const issue = err.issues.find((i) => i.field === field);
    expect(issue, `issues: ${JSON.stringify(err.issues)}`).toBeDefined();
    expect(issue!.message).toMatch(message);
    expect(err.message).toContain(`${field}: `);
  });

  it(`bounds the subjects at ${MAX_EXEMPT_SUBJECTS}`, () => {
    const subjects = (n: number) => Array.from({ length: n }, (_, i) => sa('kube-system', `sa-${i}`));
    expect(criticalNamespaceFlowSchemas({ namespaces: ['a'], subjects: subjects(MAX_EXEMPT_SUBJECTS) })[0]!.spec!.rules![0]!.subjects).toHaveLength(MAX_EXEMPT_SUBJECTS + 1);
    const err = configError(() => criticalNamespaceFlowSchemas({ namespaces: ['a'], subjects: subjects(MAX_EXEMPT_SUBJECTS + 1) }));
    expect(err.issues).toEqual([{ field: 'subjects', message: `must list at most ${MAX_EXEMPT_SUBJECTS} subjects` }]);
  });

  it('reports every bad field at once', () => {
    const err = configError(() => criticalNamespaceFlowSchemas({ namespaces: ['OK'], name: '', matchingPrecedence: 0 } as never));
    expect(fields(err)).toEqual(['matchingPrecedence', 'name', 'namespaces.0']);
  });
});

describe('shadowingFlowSchemas', () => {
  const ours = (p: number, name = DEFAULT_FLOW_SCHEMA_NAME) => criticalNamespaceFlowSchemas({ namespaces: ['a'], matchingPrecedence: p, name })[0]!;
  it('finds no built-in winning over precedence 50 (exempt-level schemas do not count)', () => {
    expect(shadowingFlowSchemas(ours(50), BUILTINS)).toEqual([]);
    expect(shadowingFlowSchemas(ours(2), BUILTINS)).toEqual([]);
  });
  it('reports non-exempt schemas with lower precedence, or equal precedence and a smaller name', () => {
    // (constructed directly: the validated options refuse >= 100)
    const at = (p: number, name: string): V1FlowSchema => ({ metadata: { name }, spec: { matchingPrecedence: p, priorityLevelConfiguration: { name: 'exempt' } } });
    expect(shadowingFlowSchemas(at(100, 'zzz'), BUILTINS).map((f) => f.metadata!.name)).toEqual(['system-leader-election']);
    expect(shadowingFlowSchemas(at(100, 'aaa'), BUILTINS)).toEqual([]);
    expect(shadowingFlowSchemas(at(450, 'x'), BUILTINS).map((f) => f.metadata!.name)).toEqual(['system-leader-election', 'system-node-high']);
    // our own object in the list is ignored
    expect(shadowingFlowSchemas(ours(50), [...BUILTINS, ours(50)])).toEqual([]);
  });
});

describe('YAML rendering', () => {
  it('renders multi-document YAML that parses back to the same objects, with a comment header', () => {
    const objs = criticalNamespaceFlowSchemas({ namespaces: ['a', 'b'], includeClusterScoped: true });
    const text = renderFlowSchemasYaml(objs, 'line one\n\nline three');
    expect(text.startsWith('# line one\n#\n# line three\n---\n')).toBe(true);
    const docs = parseAllDocuments(text);
    expect(docs.map((d) => d.toJS())).toEqual(objs);
  });

  it('apf-configs/critical-namespace.yaml is up to date with the generator (npx tsx apf-configs/render.ts)', () => {
    const file = fileURLToPath(new URL('../../apf-configs/critical-namespace.yaml', import.meta.url));
    const text = readFileSync(file, 'utf8');
    expect(text).toBe(renderDefaultCriticalNamespaceYaml());
    const docs = parseAllDocuments(text).map((d) => d.toJS() as V1FlowSchema);
    expect(docs).toHaveLength(1);
    expect(docs[0]!.spec!.rules![0]!.resourceRules![0]!.namespaces).toEqual(['ulysses-critical']);
    expect(docs[0]!.spec!.priorityLevelConfiguration.name).toBe('exempt');
  });
});

describe('metricSamples on the apiserver\'s APF metrics', () => {
  it('extracts the samples of one metric with their labels', () => {
    const text = [
      '# HELP apiserver_flowcontrol_dispatched_requests_total [BETA] Number of requests executed by API Priority and Fairness subsystem',
      '# TYPE apiserver_flowcontrol_dispatched_requests_total counter',
      'apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 502',
      'apiserver_flowcontrol_dispatched_requests_total{flow_schema="ulysses-critical-namespaces",priority_level="exempt"} 12',
      'apiserver_flowcontrol_dispatched_requests_total_other{flow_schema="x"} 3',
      'apiserver_flowcontrol_current_executing_requests{flow_schema="exempt",priority_level="exempt"} 1',
      'weird_metric{a="quote \\" and \\\\ backslash"} 1e3',
    ].join('\n');
    expect(metricSamples(text, new Set(['apiserver_flowcontrol_dispatched_requests_total']))).toEqual([
      { name: 'apiserver_flowcontrol_dispatched_requests_total', labels: { flow_schema: 'exempt', priority_level: 'exempt' }, value: 502 },
      { name: 'apiserver_flowcontrol_dispatched_requests_total', labels: { flow_schema: 'ulysses-critical-namespaces', priority_level: 'exempt' }, value: 12 },
    ]);
    expect(metricSamples(text, new Set(['weird_metric']))).toEqual([{ name: 'weird_metric', labels: { a: 'quote " and \\ backslash' }, value: 1000 }]);
  });
});
