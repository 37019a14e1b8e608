import { describe, expect, it, vi } from 'vitest';
import type { V1Deployment, V1EndpointSlice, V1Pod, V1ReplicaSet, V1Service } from '@kubernetes/client-node';
import {
  CRITICALITY_LABEL,
  CRITICALITY_LEVELS,
  CriticalityIndex,
  compareCriticality,
  criticalityRank,
  deploymentCriticality,
  endpointSliceCriticality,
  maxCriticality,
  nodeCriticality,
  podCriticality,
  replicaSetCriticality,
  serviceCriticality,
  type Criticality,
  type CriticalityError,
} from '../../core/criticality.ts';
import { compileLabelSelector, matchesLabelSelector, selectorFromMap } from '../../core/labels.ts';

// ----------------------------------------------------------------------------- fixtures

interface PodSpecLite {
  ns?: string;
  level?: string; // raw label value
  labels?: Record<string, string>;
  owners?: string[];
  node?: string;
  phase?: string;
  priority?: number;
}

function pod(name: string, o: PodSpecLite = {}): V1Pod {
  const labels: Record<string, string> = { ...(o.labels ?? {}) };
  if (o.level !== undefined) labels[CRITICALITY_LABEL] = o.level;
  return {
    metadata: {
      name,
      namespace: o.ns ?? 'apps',
      uid: `uid-${o.ns ?? 'apps'}-${name}`,
      labels,
      ownerReferences: (o.owners ?? []).map((uid) => ({ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: uid, uid, controller: true })),
    },
    spec: { containers: [{ name: 'c' }], ...(o.node ? { nodeName: o.node } : {}), ...(o.priority !== undefined ? { priority: o.priority } : {}) },
    ...(o.phase ? { status: { phase: o.phase } } : {}),
  };
}

function rs(name: string, uid: string, templateLevel?: string, ownerUid?: string): V1ReplicaSet {
  return {
    metadata: {
      name,
      namespace: 'apps',
      uid,
      ...(ownerUid ? { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: 'd', uid: ownerUid, controller: true }] } : {}),
    },
    spec: {
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name, ...(templateLevel ? { [CRITICALITY_LABEL]: templateLevel } : {}) } } },
    },
  };
}

function deployment(name: string, uid: string, templateLevel?: string): V1Deployment {
  return {
    metadata: { name, namespace: 'apps', uid },
    spec: {
      selector: { matchLabels: { app: name } },
      template: { metadata: { labels: { app: name, ...(templateLevel ? { [CRITICALITY_LABEL]: templateLevel } : {}) } } },
    },
  };
}

function service(name: string, selector: Record<string, string> | undefined, ns = 'apps', extra: Partial<V1Service['spec']> = {}): V1Service {
  return { metadata: { name, namespace: ns }, spec: { ...(selector ? { selector } : {}), ...extra } };
}

function slice(name: string, serviceName: string | undefined, ns = 'apps'): V1EndpointSlice {
  return {
    metadata: { name, namespace: ns, labels: serviceName ? { 'kubernetes.io/service-name': serviceName } : {} },
    addressType: 'IPv4',
    endpoints: [],
  };
}

// ----------------------------------------------------------------------------- levels

describe('levels', () => {
  it('orders none < low < high', () => {
    expect(CRITICALITY_LEVELS).toEqual(['none', 'low', 'high']);
    expect(['high', 'none', 'low'].sort((a, b) => compareCriticality(a as Criticality, b as Criticality))).toEqual(['none', 'low', 'high']);
    expect(compareCriticality('low', 'low')).toBe(0);
    expect(compareCriticality('high', 'low')).toBeGreaterThan(0);
  });

  it('ranks levels 0, 1, 2', () => {
    expect(criticalityRank('none')).toBe(0);
    expect(criticalityRank('low')).toBe(1);
    expect(criticalityRank('high')).toBe(2);
  });

  it('maxCriticality picks the highest, none when empty', () => {
    expect(maxCriticality()).toBe('none');
    expect(maxCriticality('low', 'none')).toBe('low');
    expect(maxCriticality('none', 'high', 'low')).toBe('high');
  });
});

// ----------------------------------------------------------------------------- pod level

describe('podCriticality', () => {
  it.each(['none', 'low', 'high'] as const)('reads the valid label %s', (level) => {
    expect(podCriticality(pod('p', { level }))).toEqual({ level, source: 'label' });
  });

  it('defaults to none without label', () => {
    expect(podCriticality(pod('p'))).toEqual({ level: 'none', source: 'default' });
    expect(podCriticality({})).toEqual({ level: 'none', source: 'default' });
  });

  it.each([
    ['wrong case', 'HIGH'],
    ['capitalised', 'Low'],
    ['empty', ''],
    ['unknown word', 'critical'],
    ['trailing space', 'high '],
    ['leading space', ' low'],
  ])('malformed label (%s) → none with an error naming pod and field', (_what, value) => {
    const r = podCriticality(pod('web-1', { ns: 'prod', level: value }));
    expect(r.level).toBe('none');
    expect(r.source).toBe('label');
    expect(r.error).toMatchObject({
      kind: 'Pod',
      namespace: 'prod',
      name: 'web-1',
      field: 'metadata.labels["ulysses.io/criticality"]',
      value,
      allowed: ['none', 'low', 'high'],
    });
    expect(r.error!.message).toContain('prod/web-1');
    expect(r.error!.message).toContain('metadata.labels["ulysses.io/criticality"]');
    expect(r.error!.message).toContain(JSON.stringify(value));
    expect(r.error!.message).toContain('"none", "low", "high"');
  });

  it('falls back to priorityClass when the label is absent and priority >= threshold', () => {
    const opts = { priorityClassThreshold: 1000 };
    expect(podCriticality(pod('p', { priority: 1000 }), opts)).toEqual({ level: 'high', source: 'priorityClass' });
    expect(podCriticality(pod('p', { priority: 2_000_000_000 }), opts)).toEqual({ level: 'high', source: 'priorityClass' });
    expect(podCriticality(pod('p', { priority: 999 }), opts)).toEqual({ level: 'none', source: 'default' });
    expect(podCriticality(pod('p'), opts)).toEqual({ level: 'none', source: 'default' });
  });

  it('ignores priority without a threshold', () => {
    expect(podCriticality(pod('p', { priority: 2_000_000_000 }))).toEqual({ level: 'none', source: 'default' });
  });

  it('a valid label wins over priority; a malformed label gets no fallback', () => {
    const opts = { priorityClassThreshold: 1000 };
    expect(podCriticality(pod('p', { level: 'low', priority: 5000 }), opts)).toEqual({ level: 'low', source: 'label' });
    expect(podCriticality(pod('p', { level: 'none', priority: 5000 }), opts)).toEqual({ level: 'none', source: 'label' });
    const bad = podCriticality(pod('p', { level: 'HIGH', priority: 5000 }), opts);
    expect(bad.level).toBe('none');
    expect(bad.error?.value).toBe('HIGH');
  });
});

// ----------------------------------------------------------------------------- label selectors

describe('label selectors (Kubernetes semantics)', () => {
  const labels = { app: 'web', tier: 'front', empty: '' };

  it('null selects nothing, empty selects everything', () => {
    expect(matchesLabelSelector(undefined, labels)).toBe(false);
    expect(matchesLabelSelector(null, labels)).toBe(false);
    expect(matchesLabelSelector({}, labels)).toBe(true);
    expect(matchesLabelSelector({}, undefined)).toBe(true);
  });

  it('matchLabels and matchExpressions are ANDed', () => {
    expect(matchesLabelSelector({ matchLabels: { app: 'web' } }, labels)).toBe(true);
    expect(matchesLabelSelector({ matchLabels: { app: 'db' } }, labels)).toBe(false);
    expect(
      matchesLabelSelector({ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['back'] }] }, labels),
    ).toBe(false);
    expect(
      matchesLabelSelector({ matchLabels: { app: 'web' }, matchExpressions: [{ key: 'tier', operator: 'In', values: ['back', 'front'] }] }, labels),
    ).toBe(true);
  });

  it('In / NotIn / Exists / DoesNotExist', () => {
    const m = (operator: string, key: string, values?: string[]) =>
      matchesLabelSelector({ matchExpressions: [{ key, operator, ...(values ? { values } : {}) }] }, labels);
    expect(m('In', 'app', ['web'])).toBe(true);
    expect(m('In', 'missing', ['web'])).toBe(false);
    expect(m('NotIn', 'app', ['web'])).toBe(false);
    expect(m('NotIn', 'app', ['db'])).toBe(true);
    expect(m('NotIn', 'missing', ['x'])).toBe(true); // absent key satisfies NotIn
    expect(m('Exists', 'empty')).toBe(true); // "" value still exists
    expect(m('Exists', 'missing')).toBe(false);
    expect(m('DoesNotExist', 'missing')).toBe(true);
    expect(m('DoesNotExist', 'app')).toBe(false);
    expect(m('Exists', 'constructor')).toBe(false); // no prototype leakage
  });

  it('invalid selectors match nothing and say why', () => {
    expect(compileLabelSelector({ matchExpressions: [{ key: 'app', operator: 'In', values: [] }] }).error).toMatch(/non-empty values/);
    expect(compileLabelSelector({ matchExpressions: [{ key: 'app', operator: 'Exists', values: ['web'] }] }).error).toMatch(/empty values/);
    const bogus = compileLabelSelector({ matchExpressions: [{ key: 'app', operator: 'Equals', values: ['web'] }] });
    expect(bogus.error).toMatch(/unknown operator "Equals"/);
    expect(bogus.matches(labels)).toBe(false);
    expect(compileLabelSelector({ matchLabels: { app: 'web' } }).error).toBeUndefined();
  });

  it('a Service selector map that is absent or empty selects nothing', () => {
    expect(selectorFromMap(undefined)).toBeUndefined();
    expect(selectorFromMap({})).toBeUndefined();
    expect(matchesLabelSelector(selectorFromMap({ app: 'web' }), labels)).toBe(true);
  });
});

// ----------------------------------------------------------------------------- aggregations

describe('replicaSetCriticality', () => {
  it('is the max of its template and of the pods it owns', () => {
    const r = rs('web', 'rs-1', 'low');
    expect(replicaSetCriticality(r, [])).toBe('low');
    expect(replicaSetCriticality(r, [pod('a', { owners: ['rs-1'], level: 'none' })])).toBe('low');
    expect(replicaSetCriticality(r, [pod('a', { owners: ['rs-1'], level: 'none' }), pod('b', { owners: ['rs-1'], level: 'high' })])).toBe('high');
  });

  it('ignores pods of another owner, even with matching labels', () => {
    const r = rs('web', 'rs-1');
    const foreign = pod('x', { owners: ['rs-2'], level: 'high', labels: { app: 'web' } });
    const orphan = pod('y', { level: 'high', labels: { app: 'web' } });
    expect(replicaSetCriticality(r, [foreign, orphan])).toBe('none');
    expect(replicaSetCriticality(r, [foreign, orphan, pod('z', { owners: ['rs-1'], level: 'low' })])).toBe('low');
  });

  it('a malformed template or pod label contributes none and is reported once', () => {
    const onError = vi.fn<(e: CriticalityError) => void>();
    const r = rs('web', 'rs-1', 'Critical');
    const bad = pod('a', { owners: ['rs-1'], level: 'HIGH' });
    expect(replicaSetCriticality(r, [bad, bad, pod('b', { owners: ['rs-1'], level: 'low' })], { onError })).toBe('low');
    expect(onError).toHaveBeenCalledTimes(2);
    expect(onError.mock.calls.map(([e]) => [e.kind, e.name, e.field, e.value])).toEqual([
      ['ReplicaSet', 'web', 'spec.template.metadata.labels["ulysses.io/criticality"]', 'Critical'],
      ['Pod', 'a', 'metadata.labels["ulysses.io/criticality"]', 'HIGH'],
    ]);
  });

  it('honours the ReplicaSet\'s own label (can only raise)', () => {
    const r = rs('web', 'rs-1', 'low');
    r.metadata!.labels = { [CRITICALITY_LABEL]: 'high' };
    expect(replicaSetCriticality(r, [])).toBe('high');
    r.metadata!.labels = { [CRITICALITY_LABEL]: 'none' };
    expect(replicaSetCriticality(r, [pod('a', { owners: ['rs-1'], level: 'high' })])).toBe('high');
  });
});

describe('deploymentCriticality', () => {
  const d = deployment('web', 'dep-1', 'none');
  const mine1 = rs('web-aaa', 'rs-1', 'none', 'dep-1');
  const mine2 = rs('web-bbb', 'rs-2', 'none', 'dep-1');
  const other = rs('db-ccc', 'rs-9', 'high', 'dep-9');

  it('is the max of the pods owned by its ReplicaSets', () => {
    const pods = [pod('a', { owners: ['rs-1'], level: 'low' }), pod('b', { owners: ['rs-2'], level: 'high' })];
    expect(deploymentCriticality(d, [mine1, mine2, other], pods)).toBe('high');
    expect(deploymentCriticality(d, [mine1, other], pods)).toBe('low'); // rs-2 not given → its pods not reachable
  });

  it('ignores ReplicaSets (and their pods) owned by another Deployment', () => {
    const pods = [pod('x', { owners: ['rs-9'], level: 'high' })];
    expect(deploymentCriticality(d, [mine1, other], pods)).toBe('none');
  });

  it('counts its own template', () => {
    expect(deploymentCriticality(deployment('web', 'dep-1', 'high'), [], [])).toBe('high');
    expect(deploymentCriticality(deployment('web', 'dep-1', 'low'), [mine1], [pod('a', { owners: ['rs-1'] })])).toBe('low');
  });

  it('does not count old ReplicaSet templates, only their pods', () => {
    const old = rs('web-old', 'rs-0', 'high', 'dep-1');
    expect(deploymentCriticality(d, [old], [])).toBe('none');
    expect(deploymentCriticality(d, [old], [pod('o', { owners: ['rs-0'], level: 'high' })])).toBe('high');
  });
});

describe('serviceCriticality / endpointSliceCriticality', () => {
  const pods = [
    pod('web-1', { labels: { app: 'web' }, level: 'low' }),
    pod('web-2', { labels: { app: 'web', track: 'canary' }, level: 'high' }),
    pod('db-1', { labels: { app: 'db' }, level: 'high' }),
    pod('web-other-ns', { ns: 'other', labels: { app: 'web' }, level: 'high' }),
  ];

  it('is the max of the selected pods of its own namespace', () => {
    expect(serviceCriticality(service('web', { app: 'web' }), pods)).toBe('high');
    expect(serviceCriticality(service('web', { app: 'web' }), pods.filter((p) => p.metadata!.name !== 'web-2'))).toBe('low');
    expect(serviceCriticality(service('stable', { app: 'web', track: 'stable' }), pods)).toBe('none');
  });

  it('ignores pods of another namespace', () => {
    expect(serviceCriticality(service('web', { app: 'web' }, 'other'), pods)).toBe('high');
    expect(serviceCriticality(service('web', { app: 'web' }, 'other'), pods.filter((p) => p.metadata!.namespace !== 'other'))).toBe('none');
  });

  it('a Service without selector, or ExternalName, is none', () => {
    expect(serviceCriticality(service('manual', undefined), pods)).toBe('none');
    expect(serviceCriticality(service('manual', {}), pods)).toBe('none');
    expect(serviceCriticality(service('ext', { app: 'web' }, 'apps', { type: 'ExternalName', externalName: 'x.example' }), pods)).toBe('none');
  });

  it('the same selection with matchExpressions (as controllers use for owned pods)', () => {
    const canary = { matchExpressions: [{ key: 'app', operator: 'In', values: ['web'] }, { key: 'track', operator: 'DoesNotExist' }] };
    const selected = pods.filter((p) => p.metadata!.namespace === 'apps' && matchesLabelSelector(canary, p.metadata!.labels));
    expect(selected.map((p) => p.metadata!.name)).toEqual(['web-1']);
    const notDb = { matchExpressions: [{ key: 'app', operator: 'NotIn', values: ['db'] }, { key: 'app', operator: 'Exists' }] };
    expect(pods.filter((p) => matchesLabelSelector(notDb, p.metadata!.labels)).map((p) => p.metadata!.name)).toEqual([
      'web-1',
      'web-2',
      'web-other-ns',
    ]);
  });

  it('an EndpointSlice takes the level of the Service named by kubernetes.io/service-name', () => {
    const services = [service('web', { app: 'web' }), service('db', { app: 'db' }), service('web', { app: 'web' }, 'other')];
    const lowPods = pods.filter((p) => p.metadata!.name !== 'web-2');
    expect(endpointSliceCriticality(slice('web-abcde', 'web'), services, lowPods)).toBe('low');
    expect(endpointSliceCriticality(slice('db-abcde', 'db'), services, lowPods)).toBe('high');
    expect(endpointSliceCriticality(slice('web-xyz', 'web', 'other'), services, lowPods)).toBe('high');
    expect(endpointSliceCriticality(slice('orphan', undefined), services, pods)).toBe('none');
    expect(endpointSliceCriticality(slice('gone', 'missing'), services, pods)).toBe('none');
    // A lookup function works too.
    const lookup = (ns: string, name: string) => services.find((s) => s.metadata!.namespace === ns && s.metadata!.name === name);
    expect(endpointSliceCriticality(slice('db-abcde', 'db'), lookup, lowPods)).toBe('high');
  });
});

describe('nodeCriticality', () => {
  it('is the max of the pods bound to the node, ignoring Succeeded/Failed', () => {
    const pods = [
      pod('a', { node: 'n1', level: 'low', phase: 'Running' }),
      pod('b', { node: 'n1', level: 'high', phase: 'Succeeded' }),
      pod('c', { node: 'n1', level: 'high', phase: 'Failed' }),
      pod('d', { node: 'n2', level: 'high', phase: 'Running' }),
      pod('e', { level: 'high' }), // unscheduled
    ];
    expect(nodeCriticality('n1', pods)).toBe('low');
    expect(nodeCriticality('n2', pods)).toBe('high');
    expect(nodeCriticality('n3', pods)).toBe('none');
    expect(nodeCriticality('n1', [...pods, pod('f', { node: 'n1', level: 'high', phase: 'Pending' })])).toBe('high');
  });

  it('uses the priorityClass fallback when configured', () => {
    const pods = [pod('a', { node: 'n1', priority: 2_000_000_000 })];
    expect(nodeCriticality('n1', pods)).toBe('none');
    expect(nodeCriticality('n1', pods, { priorityClassThreshold: 1_000_000 })).toBe('high');
  });
});

// ----------------------------------------------------------------------------- index

describe('CriticalityIndex', () => {
  it('answers like the pure functions', () => {
    const idx = new CriticalityIndex();
    const pods = [
      pod('a', { owners: ['rs-1'], node: 'n1', labels: { app: 'web' }, level: 'low' }),
      pod('b', { owners: ['rs-2'], node: 'n2', labels: { app: 'web' }, level: 'high' }),
      pod('c', { ns: 'other', owners: ['rs-3'], node: 'n1', labels: { app: 'web' }, level: 'high' }),
    ];
    pods.forEach((p) => idx.upsertPod(p));
    const d = deployment('web', 'dep-1');
    const rss = [rs('web-1', 'rs-1', undefined, 'dep-1'), rs('web-2', 'rs-2', undefined, 'dep-1'), rs('x', 'rs-3', undefined, 'dep-2')];
    const svc = service('web', { app: 'web' });
    for (const r of rss) expect(idx.replicaSetCriticality(r)).toBe(replicaSetCriticality(r, pods));
    expect(idx.replicaSetCriticality(rss[0]!)).toBe('low');
    expect(idx.deploymentCriticality(d, rss)).toBe('high');
    expect(idx.deploymentCriticality(d, rss.slice(0, 1))).toBe('low');
    expect(idx.serviceCriticality(svc)).toBe(serviceCriticality(svc, pods));
    expect(idx.serviceCriticality(service('web', { app: 'web' }, 'nowhere'))).toBe('none');
    expect(idx.endpointSliceCriticality(slice('web-x', 'web', 'other'), [service('web', { app: 'web' }, 'other')])).toBe('high');
    expect(idx.nodeCriticality('n1')).toBe('high');
    expect(idx.nodeCriticality('n2')).toBe(nodeCriticality('n2', pods));
    expect(idx.size).toBe(3);
  });

  it('moves a pod between nodes', () => {
    const idx = new CriticalityIndex();
    idx.upsertPod(pod('a', { node: 'n1', level: 'high' }));
    idx.upsertPod(pod('b', { node: 'n1', level: 'low' }));
    expect(idx.nodeCriticality('n1')).toBe('high');
    const change = idx.upsertPod(pod('a', { node: 'n2', level: 'high' }));
    expect(change.before?.nodeName).toBe('n1');
    expect(change.after.nodeName).toBe('n2');
    expect(idx.nodeCriticality('n1')).toBe('low');
    expect(idx.nodeCriticality('n2')).toBe('high');
    expect(idx.podsOnNode('n1').map((p) => p.name)).toEqual(['b']);
    expect(idx.size).toBe(2);
  });

  it('follows label changes (level and selection)', () => {
    const idx = new CriticalityIndex();
    const svc = service('web', { app: 'web' });
    const r = rs('web', 'rs-1');
    idx.upsertPod(pod('a', { owners: ['rs-1'], labels: { app: 'web' }, level: 'high' }));
    expect(idx.serviceCriticality(svc)).toBe('high');
    expect(idx.replicaSetCriticality(r)).toBe('high');
    idx.upsertPod(pod('a', { owners: ['rs-1'], labels: { app: 'web' }, level: 'low' }));
    expect(idx.serviceCriticality(svc)).toBe('low');
    expect(idx.replicaSetCriticality(r)).toBe('low');
    idx.upsertPod(pod('a', { owners: ['rs-1'], labels: { app: 'api' }, level: 'high' }));
    expect(idx.serviceCriticality(svc)).toBe('none'); // no longer selected
    expect(idx.replicaSetCriticality(r)).toBe('high'); // still owned
  });

  it('follows owner and phase changes', () => {
    const idx = new CriticalityIndex();
    idx.upsertPod(pod('a', { owners: ['rs-1'], node: 'n1', level: 'high', phase: 'Running' }));
    idx.upsertPod(pod('a', { owners: ['rs-2'], node: 'n1', level: 'high', phase: 'Failed' }));
    expect(idx.replicaSetCriticality(rs('r1', 'rs-1'))).toBe('none');
    expect(idx.replicaSetCriticality(rs('r2', 'rs-2'))).toBe('high');
    expect(idx.nodeCriticality('n1')).toBe('none');
    expect(idx.podsOnNode('n1')).toHaveLength(1); // still bound, just terminal
  });

  it('deletes by pod or by key and cleans every index', () => {
    const idx = new CriticalityIndex();
    const a = pod('a', { owners: ['rs-1'], node: 'n1', labels: { app: 'web' }, level: 'high' });
    idx.upsertPod(a);
    idx.upsertPod(pod('b', { ns: 'other', node: 'n1', level: 'low' }));
    expect(idx.deletePod(a)?.key).toBe('apps/a');
    expect(idx.deletePod(a)).toBeUndefined();
    expect(idx.nodeCriticality('n1')).toBe('low');
    expect(idx.replicaSetCriticality(rs('r', 'rs-1'))).toBe('none');
    expect(idx.serviceCriticality(service('web', { app: 'web' }))).toBe('none');
    expect(idx.podsOwnedBy('rs-1')).toEqual([]);
    expect(idx.podsInNamespace('apps')).toEqual([]);
    expect(idx.deletePod('other/b')?.level).toBe('low');
    expect(idx.nodeCriticality('n1')).toBe('none');
    expect(idx.size).toBe(0);
  });

  it('reports a malformed pod label once per bad value, and counts it as none', () => {
    const onError = vi.fn<(e: CriticalityError) => void>();
    const idx = new CriticalityIndex({ onError });
    idx.upsertPod(pod('a', { node: 'n1', level: 'HIGH' }));
    idx.upsertPod(pod('a', { node: 'n1', level: 'HIGH', phase: 'Running' })); // status update, same bad value
    expect(onError).toHaveBeenCalledTimes(1);
    expect(onError.mock.calls[0]![0]).toMatchObject({ kind: 'Pod', namespace: 'apps', name: 'a', value: 'HIGH' });
    expect(idx.nodeCriticality('n1')).toBe('none');
    expect(idx.nodeCriticality('n1')).toBe('none');
    expect(onError).toHaveBeenCalledTimes(1); // queries do not re-report pods
    idx.upsertPod(pod('a', { node: 'n1', level: 'hi' }));
    expect(onError).toHaveBeenCalledTimes(2);
    idx.upsertPod(pod('a', { node: 'n1', level: 'high' }));
    expect(idx.nodeCriticality('n1')).toBe('high');
    expect(idx.getPod('apps', 'a')?.error).toBeUndefined();
    expect(onError).toHaveBeenCalledTimes(2);
  });

  it('reports a malformed template once across repeated queries', () => {
    const onError = vi.fn<(e: CriticalityError) => void>();
    const idx = new CriticalityIndex({ onError });
    const r = rs('web', 'rs-1', 'High');
    expect(idx.replicaSetCriticality(r)).toBe('none');
    expect(idx.replicaSetCriticality(r)).toBe('none');
    expect(onError).toHaveBeenCalledTimes(1);
    expect(onError.mock.calls[0]![0]).toMatchObject({ kind: 'ReplicaSet', name: 'web', value: 'High' });
  });

  it('applies the priorityClass fallback from its options', () => {
    const idx = new CriticalityIndex({ priorityClassThreshold: 1000 });
    const change = idx.upsertPod(pod('a', { node: 'n1', priority: 1000 }));
    expect(change.after).toMatchObject({ level: 'high', source: 'priorityClass' });
    expect(idx.nodeCriticality('n1')).toBe('high');
  });
});
