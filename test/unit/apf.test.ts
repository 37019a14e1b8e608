import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { V1FlowSchema } from '@kubernetes/client-node';
import { ConfigError } from '../../core/config.ts';
import {
  ALL_SUBJECTS,
  BUILTIN_MIN_NON_EXEMPT_PRECEDENCE,
  DEFAULT_FLOW_SCHEMA_NAME,
  DEFAULT_MATCHING_PRECEDENCE,
  criticalNamespaceFlowSchemas,
  renderDefaultCriticalNamespaceYaml,
  renderFlowSchemasYaml,
  shadowingFlowSchemas,
} from '../../apf-configs/flowschemas.ts';
import { metricSamples } from '../../core/metrics.ts';

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
  it('routes every request on resources in the namespace, from any user, to the built-in exempt level', () => {
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
          subjects: [
            { kind: 'Group', group: { name: 'system:authenticated' } },
            { kind: 'Group', group: { name: 'system:unauthenticated' } },
          ],
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

  it('returns fresh objects: mutating one does not leak into the next or into ALL_SUBJECTS', () => {
    const [a] = criticalNamespaceFlowSchemas({ namespaces: ['x'] });
    a!.spec!.rules![0]!.subjects[0]!.group!.name = 'mutated';
    expect(ALL_SUBJECTS[0]!.group!.name).toBe('system:authenticated');
    expect(criticalNamespaceFlowSchemas({ namespaces: ['x'] })[0]!.spec!.rules![0]!.subjects[0]!.group!.name).toBe('system:authenticated');
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
  ])('%j -> %s', (input, field, message) => {
    const err = configError(() => criticalNamespaceFlowSchemas(input as never));
    const issue = err.issues.find((i) => i.field === field);
    expect(issue, `issues: ${JSON.stringify(err.issues)}`).toBeDefined();
    expect(issue!.message).toMatch(message);
    expect(err.message).toContain(`${field}: `);
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
