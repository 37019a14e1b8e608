/**
 * Pure parts of the node-assurance updater (A = floor(base · Π γ) over matching conditions/taints)
 * and of the rescheduler (which bound pods no longer have a node satisfying their policy, most
 * critical first), plus their config validation.
 */
import { describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { assuranceUpdaterConfig, effectiveAssurance, sameVector, vectorText } from '../../scheduler-plugins/assurance/updater.ts';
import { assuranceViolations, ReschedulerConfig } from '../../scheduler-plugins/assurance/rescheduler.ts';
import { extenderConfig } from '../../scheduler-plugins/extender/config.ts';
import { ConfigError } from '../../core/config.ts';

const node = (conditions: Array<[string, string]> = [], taints: string[] = [], assurance?: string): V1Node => ({
  metadata: { name: 'n', annotations: assurance ? { 'ulysses.io/assurance': assurance } : {} },
  spec: { taints: taints.map((key) => ({ key, effect: 'NoSchedule' })) },
  status: { conditions: conditions.map(([type, status]) => ({ type, status })) },
});

describe('node-assurance updater: effective assurance', () => {
  const rules = assuranceUpdaterConfig({}).rules; // the defaults
  const base = { cpu: 4, memory: 3, disk: 2, network: 5 };

  it('a healthy node offers its base', () => {
    expect(effectiveAssurance(base, node([['Ready', 'True'], ['MemoryPressure', 'False']]), rules)).toEqual({ vector: base, matched: [] });
  });

  it('pressure lowers only the resource under pressure; factors multiply; floor', () => {
    const r = effectiveAssurance(base, node([['Ready', 'True'], ['MemoryPressure', 'True'], ['DiskPressure', 'True']]), rules);
    expect(r.vector).toEqual({ cpu: 4, memory: 1, disk: 1, network: 5 });
    expect(r.matched).toEqual(['condition MemoryPressure=True', 'condition DiskPressure=True']);
    const custom = assuranceUpdaterConfig({ rules: [{ taint: 'x/degraded', gamma: 0.5 }, { condition: 'MemoryPressure', gamma: 0.5, resources: ['memory'] }] }).rules;
    expect(effectiveAssurance(base, node([['MemoryPressure', 'True']], ['x/degraded']), custom).vector).toEqual({ cpu: 2, memory: 0, disk: 1, network: 2 });
  });

  it('a not-ready or unreachable node offers nothing', () => {
    expect(effectiveAssurance(base, node([['Ready', 'Unknown']]), rules).vector).toEqual({ cpu: 0, memory: 0, disk: 0, network: 0 });
  });

  it('config errors name the rule field', () => {
    expect(() => assuranceUpdaterConfig({ rules: [{ gamma: 0.5 }] })).toThrow(/rules\.0\.condition: exactly one of condition or taint/);
    expect(() => assuranceUpdaterConfig({ rules: [{ taint: 't', gamma: 1.5 }] })).toThrow(ConfigError);
  });

  it('vectors compare order-insensitively and are written canonically', () => {
    expect(sameVector({ a: 1, b: 2 }, { b: 2, a: 1 })).toBe(true);
    expect(sameVector({ a: 1 }, { a: 1, b: 0 })).toBe(false);
    expect(vectorText({ memory: 1, cpu: 2 })).toBe('{"cpu":2,"memory":1}');
  });
});

describe('assurance rescheduler: violations', () => {
  const pod = (name: string, nodeName: string | undefined, annotations: Record<string, string> = {}, labels: Record<string, string> = {}, phase = 'Running'): V1Pod => ({
    metadata: { name, namespace: 'ns', uid: name, annotations, labels },
    spec: { containers: [], ...(nodeName ? { nodeName } : {}) },
    status: { phase },
  });
  const cfg = extenderConfig({ defaultAssurancePolicies: { high: { policy: 'threshold', min: { cpu: 3 } } } });
  const nodes = [{ ...node([], [], '{"cpu":1}'), metadata: { name: 'weak', annotations: { 'ulysses.io/assurance': '{"cpu":1}' } } }, { ...node(), metadata: { name: 'strong', annotations: { 'ulysses.io/assurance': '{"cpu":5}' } } }];

  it('lists bound pods whose node no longer satisfies them, most critical first', () => {
    const pods = [
      pod('low-explicit', 'weak', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' }, { 'ulysses.io/criticality': 'low' }),
      pod('high-default', 'weak', {}, { 'ulysses.io/criticality': 'high' }),
      pod('high-fine', 'strong', {}, { 'ulysses.io/criticality': 'high' }),
      pod('no-policy', 'weak'),
      pod('pending', undefined, {}, { 'ulysses.io/criticality': 'high' }),
      pod('done', 'weak', {}, { 'ulysses.io/criticality': 'high' }, 'Succeeded'),
      pod('malformed', 'weak', { 'ulysses.io/assurance-policy': '{' }),
    ];
    const v = assuranceViolations(nodes, pods, cfg);
    expect(v.map((x) => x.key)).toEqual(['ns/high-default', 'ns/low-explicit']);
    expect(v[0]!.message).toBe('node weak assurance {"cpu":1} no longer satisfies the policy {"policy":"threshold","min":{"cpu":3}}');
    expect(assuranceViolations(nodes, pods, extenderConfig({ ...cfg, plugins: { assurance: false, realtime: true, tdma: true } }))).toEqual([]);
  });

  it('is off by default and rate-limited', () => {
    expect(ReschedulerConfig.parse({})).toMatchObject({ enabled: false, evictionsPerMinute: 6, burst: 1, onlyControlled: true });
  });
});
