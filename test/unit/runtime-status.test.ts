import { describe, expect, it } from 'vitest';
import { formatStatus, parseSelector, setPatch, shimSectionForNode, statusRows } from '../../core/runtime-status.ts';
import type { UlyssesConfig } from '../../core/runtime-config.ts';
import { ControllerManagerRuntimeSchema } from '../../controller-manager/runtime.ts';
import { ApfRuntimeSchema } from '../../apf-configs/runtime.ts';
import { NodeFailureConfigSchema } from '../../controller-manager/node-failure.ts';

describe('ulysses set: spec patches', () => {
  it('controller-manager: all failover-path controllers by default, parameters when given', () => {
    expect(setPatch('controller-manager', 'multi-priority-periodic', { controllers: ['replicaset'], periodMs: 100, workers: 5 })).toEqual({
      controllerManager: { controllers: { replicaset: { mode: 'multi-priority-periodic', periodMs: 100, workers: 5 } } },
    });
    const all = setPatch('controller-manager', 'vanilla', {}) as { controllerManager: { controllers: Record<string, unknown> } };
    expect(Object.keys(all.controllerManager.controllers).sort()).toEqual(['deployment', 'endpoints', 'endpointslice', 'replicaset', 'taint-eviction']);
  });

  it('kubelet-shim: policy and params; per-node entries by hostname label or selector replace only their own entry', () => {
    expect(setPatch('kubelet-shim', 'exponential-decay', { params: { initialWaitMs: 700, factor: 0.5, highMinInterArrivalMs: 50 } })).toEqual({
      kubeletShim: { default: { policy: 'exponential-decay', params: { initialWaitMs: 700, factor: 0.5, highMinInterArrivalMs: 50 } } },
    });
    const current = {
      kubeletShim: {
        nodes: [
          { nodeSelector: { 'kubernetes.io/hostname': 'a' }, policy: 'fixed' },
          { nodeSelector: { 'kubernetes.io/hostname': 'b' }, policy: 'fixed' },
        ],
      },
    };
    expect(setPatch('kubelet-shim', 'vanilla', { node: 'a' }, current)).toEqual({
      kubeletShim: {
        nodes: [
          { nodeSelector: { 'kubernetes.io/hostname': 'b' }, policy: 'fixed' },
          { nodeSelector: { 'kubernetes.io/hostname': 'a' }, policy: 'vanilla' },
        ],
      },
    });
    expect(setPatch('kubelet-shim', 'fixed', { selector: 'zone=edge' }).kubeletShim).toEqual({ nodes: [{ nodeSelector: { zone: 'edge' }, policy: 'fixed' }] });
  });

  it('on/off components and bad input name the argument', () => {
    expect(setPatch('apf', 'on', { namespaces: ['crit'] })).toEqual({ apf: { enabled: true, exemptNamespaces: ['crit'] } });
    expect(setPatch('scheduler-extender', 'off', { plugins: ['tdma'] })).toEqual({ schedulerExtender: { plugins: { tdma: false } } });
    expect(() => setPatch('apf', 'maybe', {})).toThrow(/apf mode must be "on" or "off"/);
    expect(() => setPatch('kube-proxy', 'on', {})).toThrow(/unknown component "kube-proxy"/);
    expect(() => parseSelector('zone')).toThrow(/--selector: "zone" is not key=value/);
  });

  it('node-failure: on/off with the values given; the controller manager\'s schema refuses a bad window naming it', () => {
    const on = setPatch('node-failure', 'on', { periodMs: 200, windowMs: 1000, confirmTimeoutMs: 500, scope: 'all' });
    expect(on).toEqual({ nodeFailure: { enabled: true, periodMs: 200, windowMs: 1000, confirmTimeoutMs: 500, scope: 'all' } });
    expect(NodeFailureConfigSchema.parse(on.nodeFailure)).toMatchObject({ enabled: true, windowMs: 1000, scope: 'all' });
    expect(setPatch('node-failure', 'off', {})).toEqual({ nodeFailure: { enabled: false } });
    expect(() => setPatch('node-failure', 'fast', {})).toThrow(/node-failure mode must be "on" or "off"/);
    expect(() => setPatch('node-failure', 'on', { scope: 'some' })).toThrow(/--scope must be "critical" or "all"/);
    expect(NodeFailureConfigSchema.safeParse(setPatch('node-failure', 'on', { periodMs: 100, windowMs: 200 }).nodeFailure).error?.issues[0]?.path).toEqual(['windowMs']);
  });
});

describe('kubelet-shim section per node', () => {
  const section = {
    default: { policy: 'vanilla' },
    nodes: [
      { nodeSelector: { 'kubernetes.io/hostname': 'n2' }, policy: 'exponential-decay' },
      { nodeSelector: { zone: 'edge' }, policy: 'fixed', params: { waitMs: 1200 } },
    ],
  };
  it('the first matching entry wins, else the default', () => {
    expect(shimSectionForNode(section, { 'kubernetes.io/hostname': 'n2', zone: 'edge' })).toEqual({ nodeSelector: { 'kubernetes.io/hostname': 'n2' }, policy: 'exponential-decay' });
    expect(shimSectionForNode(section, { 'kubernetes.io/hostname': 'n1', zone: 'edge' })?.params).toEqual({ waitMs: 1200 });
    expect(shimSectionForNode(section, { 'kubernetes.io/hostname': 'n1' })).toEqual({ policy: 'vanilla' });
    expect(shimSectionForNode(undefined, {})).toBeUndefined();
  });
});

describe('ulysses status', () => {
  const obj: UlyssesConfig = {
    apiVersion: 'ulysses.io/v1alpha1',
    kind: 'UlyssesConfig',
    metadata: { name: 'default', generation: 3 },
    spec: { controllerManager: { controllers: { replicaset: { mode: 'multi-priority-periodic', periodMs: 100 } } }, apf: { enabled: true, exemptNamespaces: ['crit'] } },
    status: {
      components: {
        'controller-manager': { observedGeneration: 3, mode: 'replicaset=multi-priority-periodic/100ms', updateTime: '', conditions: [{ type: 'Applied', status: 'True', reason: 'Applied', message: 'ok', lastTransitionTime: '' }] },
        'kubelet-shim/n1': { observedGeneration: 2, mode: 'vanilla', updateTime: '', conditions: [{ type: 'Applied', status: 'True', reason: 'Applied', message: 'ok', lastTransitionTime: '' }] },
      },
    },
  };
  it('desired vs observed per component and node; stale generations and silent components are flagged', () => {
    const rows = statusRows(obj);
    expect(rows.map((r) => [r.component, r.upToDate])).toEqual([
      ['controller-manager', true],
      ['kubelet-shim/n1', false],
      ['apf', false],
    ]);
    expect(rows[0]!.desired).toBe('replicaset=multi-priority-periodic/100ms');
    expect(rows[2]!.observed).toBe('(not reporting)');
    expect(formatStatus(obj)).toContain('generation 3');
    expect(formatStatus(undefined)).toContain('no UlyssesConfig');
  });
});

describe('component sections', () => {
  it('controller-manager: unknown controller and bad mode name the field', () => {
    const r = ControllerManagerRuntimeSchema.safeParse({ controllers: { replicaset: { mode: 'turbo' }, kubeproxy: { mode: 'vanilla' } } });
    expect(r.success).toBe(false);
    const paths = r.error!.issues.map((i) => i.path.join('.'));
    expect(paths).toContain('controllers.replicaset.mode');
    expect(paths.some((p) => p.startsWith('controllers'))).toBe(true);
  });
  it('apf: namespaces are validated only when enabled, so switching off always works', () => {
    expect(ApfRuntimeSchema.safeParse({ enabled: false, exemptNamespaces: ['Bad_NS'] }).success).toBe(true);
    const r = ApfRuntimeSchema.safeParse({ enabled: true, exemptNamespaces: ['Bad_NS'] });
    expect(r.error?.issues[0]?.path).toEqual(['exemptNamespaces', 0]);
  });
});
