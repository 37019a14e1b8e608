import { describe, expect, it } from 'vitest';
import { analyze, leastLoadedCoreScore, type WhatIfNode } from '../../scheduler-plugins/realtime/what-if.ts';

const dsNode = (pods: WhatIfNode['pods'] = []): WhatIfNode => ({
  name: 'ds-node',
  kind: 'deferrable-server',
  capacity: '{"cores":2}',
  pods: [
    { name: 'a', rt: { server: { budgetUs: 5000, periodUs: 10000 }, tasks: [{ wcetUs: 1000, periodUs: 20000 }] } },
    { name: 'b', rt: '{"server":{"budgetUs":3000,"periodUs":10000}}' },
    ...(pods ?? []),
  ],
});
const bpNode: WhatIfNode = {
  name: 'bp-node',
  kind: 'budget-period',
  capacity: { cores: 2, maxUtilization: 0.95 },
  pods: [{ name: 'r', rt: { reservation: { runtimeUs: 9000, periodUs: 10000 } } }],
};
const edfNode = (name: string, existing: unknown): WhatIfNode => ({ name, kind: 'edf', capacity: { cores: 1 }, pods: [{ name: 'e', rt: existing }] });

describe('what-if: deferrable-server nodes', () => {
  it('places the server on the least loaded core that stays schedulable and shows every response time', () => {
    // a → core 0 (U 0.5), b → core 1 (U 0.3). The pod (2000/10000) is tried on core 1 first, below b
    // ("b" < "pod"): R_S = 2000 + ceil((R+7000)/10000)·3000 → 5000 → 8000; task: x(500) = 6500,
    // R = 10000 − 2000 + 6500 = 14500 ≤ 40000.
    const r = analyze({ nodes: [dsNode()], pod: { name: 'pod', rt: { server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 500, periodUs: 40000 }] } } });
    expect(r.error).toBeUndefined();
    expect(r.kind).toBe('deferrable-server');
    const n = r.nodes[0]!;
    expect(n).toMatchObject({ node: 'ds-node', schedulable: true, cores: [1], score: 5 });
    expect(n.coreUtilization.map((u) => Math.round(u * 100) / 100)).toEqual([0.5, 0.5]);
    expect(n.servers.map((s) => [s.pod, s.rank, s.responseTimeUs])).toEqual([
      ['b', 0, 3000],
      ['pod', 1, 8000],
    ]);
    expect(n.tasks).toMatchObject([{ pod: 'pod', task: 0, core: 1, responseTimeUs: 14500, deadlineUs: 40000, schedulable: true, method: 'exact' }]);
    expect(n.reason).toMatch(/fits on core 1/);
    expect(r.schedulableOn).toEqual(['ds-node']);
  });

  it('says why not, with the analysis of the least loaded core', () => {
    // Same pod with D = T = 10000: 14500 > 10000 on core 1; on core 0 below a: R_S = 2000 + ceil((R+5000)/10000)·5000 → 7000 → 12000 > 10000.
    const r = analyze({ nodes: [dsNode()], pod: { name: 'pod', rt: { server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 500, periodUs: 10000 }] } } });
    const n = r.nodes[0]!;
    expect(n.schedulable).toBe(false);
    expect(n.score).toBe(0);
    expect(n.reason).toMatch(/core 1: pod pod task 0: response time >= 14500 us > deadline 10000 us/);
    expect(n.reason).toMatch(/core 0: server of pod pod: server response time 12000 us > period 10000 us/);
    expect(n.tasks).toMatchObject([{ pod: 'pod', core: 1, schedulable: false, responseTimeUs: 14500 }]);
    expect(r.schedulableOn).toEqual([]);
  });

  it('honours pinned existing pods and reports bad pins', () => {
    const pinned = analyze({
      nodes: [{ ...dsNode(), pods: [{ name: 'a', cores: [1], rt: { server: { budgetUs: 5000, periodUs: 10000 } } }] }],
      pod: { name: 'pod', rt: { server: { budgetUs: 1000, periodUs: 10000 } } },
    });
    expect(pinned.nodes[0]).toMatchObject({ schedulable: true, cores: [0] });
    const bad = analyze({
      nodes: [{ ...dsNode(), pods: [{ name: 'a', cores: [2], rt: { server: { budgetUs: 5000, periodUs: 10000 } } }] }],
      pod: { name: 'pod', rt: { server: { budgetUs: 1000, periodUs: 10000 } } },
    });
    // a pin the node cannot have is ignored (reported), the pod placed by the rule: it never makes the node unusable
    expect(bad.nodes[0]).toMatchObject({ schedulable: true, cores: [1], ignored: ['existing pod a: pinned core 2 does not exist (node has 2 cores): reservation ignored, the pod placed by the rule'] });
  });
});

describe('what-if: budget/period and EDF nodes', () => {
  it('budget/period: worst-fit core, utilization and the tasks’ periodic-resource bounds', () => {
    const r = analyze({
      nodes: [bpNode],
      pod: { name: 'rt', rt: { reservation: { runtimeUs: 2000, periodUs: 10000, cpus: 1 }, tasks: [{ wcetUs: 500, periodUs: 40000 }] } },
    });
    const n = r.nodes[0]!;
    expect(n).toMatchObject({ schedulable: true, cores: [1], maxUtilization: 0.95, score: 8 }); // round(10·0.75/0.95)
    expect(n.coreUtilization).toEqual([0.9, 0.2]);
    expect(n.tasks).toMatchObject([{ responseTimeUs: 16500, method: 'periodic-resource-bound', schedulable: true }]);
    const tooBig = analyze({ nodes: [bpNode], pod: { name: 'big', rt: { reservation: { runtimeUs: 8000, periodUs: 10000, cpus: 2 } } } });
    expect(tooBig.nodes[0]).toMatchObject({ schedulable: false, reason: expect.stringMatching(/would reach 1\.7000 > 0\.95/) });
  });

  it('EDF: the test used per core, best score first', () => {
    const pod = { name: 'edf-pod', rt: { tasks: [{ wcetUs: 1, periodUs: 4 }, { wcetUs: 2, periodUs: 6 }] } };
    const r = analyze({
      nodes: [edfNode('busy', { tasks: [{ wcetUs: 6, periodUs: 12 }] }), edfNode('light', { tasks: [{ wcetUs: 3, periodUs: 12 }] }), edfNode('lighter', { tasks: [{ wcetUs: 1, periodUs: 12 }] })],
      pod,
    });
    expect(r.nodes.map((n) => n.schedulable)).toEqual([false, true, true]);
    expect(r.nodes[0]!.reason).toMatch(/utilization Σ C\/T = 1\.0833 > 1/);
    expect(r.nodes[1]!.reason).toBe('fits: core 0: utilization 0.8333 <= 1 (exact)');
    expect(r.nodes[1]!.tasks.map((t) => [t.pod, t.task, t.method])).toEqual([
      ['e', 0, 'edf-utilization'],
      ['edf-pod', 0, 'edf-utilization'],
      ['edf-pod', 1, 'edf-utilization'],
    ]);
    expect(r.schedulableOn).toEqual(['lighter', 'light']);
    const dense = analyze({ nodes: [edfNode('n', { tasks: [{ wcetUs: 1, periodUs: 12 }] })], pod: { name: 'p', rt: { tasks: [{ wcetUs: 1, periodUs: 10, deadlineUs: 5 }] } } });
    expect(dense.nodes[0]!.reason).toMatch(/density .* \(sufficient\)/);
  });
});

describe('what-if: mismatches and malformed input never throw', () => {
  it('kind mismatch, bad capacity, bad existing pod', () => {
    const pod = { name: 'pod', rt: { server: { budgetUs: 2000, periodUs: 10000 } } };
    const r = analyze({
      nodes: [bpNode, { name: 'cap', kind: 'deferrable-server', capacity: '{"cores":0}' }, { ...dsNode(), pods: [{ name: 'x', rt: '{"server":{"budgetUs":0,"periodUs":1}}' }] }],
      pod,
    });
    expect(r.nodes[0]).toMatchObject({ schedulable: false, reason: `the pod's ulysses.io/rt declares a "server" but budget-period nodes need a "reservation"` });
    expect(r.nodes[1]).toMatchObject({ schedulable: false, reason: 'node cap: ulysses.io/rt-capacity: cores: must be >= 1' });
    expect(r.nodes[2]).toMatchObject({ schedulable: false, reason: 'existing pod x: ulysses.io/rt: server.budgetUs: must be > 0' });
  });

  it('an invalid pod annotation or input shape is a top-level error', () => {
    expect(analyze({ nodes: [bpNode], pod: { name: 'pod', rt: '{"tasks":[{"wcetUs":0,"periodUs":5}]}' } })).toMatchObject({
      nodes: [],
      error: 'pod pod: ulysses.io/rt: tasks.0.wcetUs: must be > 0',
    });
    expect(analyze({ nodes: 'x', pod: { name: 'p', rt: {} } } as never)).toMatchObject({ nodes: [], error: expect.stringMatching(/^what-if input: nodes: /) });
    expect(analyze(null as never)).toMatchObject({ nodes: [], error: expect.stringMatching(/what-if input/) });
    expect(analyze({ nodes: [{ name: 'n', kind: 'tsn', capacity: {} }], pod: { name: 'p', rt: {} } } as never).error).toMatch(/nodes\.0\.kind/);
  });
});

describe('leastLoadedCoreScore', () => {
  it('scores the remaining utilization of the least loaded core', () => {
    expect(leastLoadedCoreScore([0.9, 0.2], 0.95)).toBe(8);
    expect(leastLoadedCoreScore([1, 1], 1)).toBe(0);
    expect(leastLoadedCoreScore([0, 0.9], 1)).toBe(10);
    expect(leastLoadedCoreScore([], 1)).toBe(0);
  });
});
