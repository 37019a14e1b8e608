/**
 * Pure logic of the failover experiment's KWOK mode (scale run, issue 7): the KWOK topology, the
 * testbed options, the events a repetition waits for without the UDP client, the KWOK toleration on
 * the experiment's pods, and the configurable inflation targets of the report.
 */
import { describe, expect, it } from 'vitest';
import { kwokExperimentTestbedOptions, kwokTopology, ULYSSES_CONTROLLERS } from '../../experiments/harness/local.ts';
import { awaitedEvents } from '../../experiments/harness/scenario.ts';
import { kcmControllersFlag } from '../../experiments/harness/configurator.ts';
import { checkTargets, renderReport } from '../../experiments/harness/report.ts';
import { emptyEvents, EVENTS, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { SummaryIndex, summarize } from '../../experiments/harness/stats.ts';
import { KWOK_ANNOTATION, KWOK_TOLERATION, kwokNode } from '../../experiments/testbed/kwok.ts';
import { deployment } from '../../experiments/workloads.ts';

describe('KWOK topology', () => {
  it('fails kwok-1..kwok-S and receives on the next DN nodes', () => {
    const t = kwokTopology(10, 100)(90);
    expect(t.sources).toEqual(Array.from({ length: 10 }, (_, i) => `kwok-${i + 1}`));
    expect(t.destinations[0]).toBe('kwok-11');
    expect(t.destinations.at(-1)).toBe('kwok-100');
    expect(t.destinations).toHaveLength(90);
    expect(new Set([...t.sources, ...t.destinations]).size).toBe(100);
  });
  it('rejects a plan that needs more KWOK nodes than the testbed has, naming the option', () => {
    expect(() => kwokTopology(10, 100)(91)).toThrow(/need 101 KWOK nodes, --kwok-nodes is 100/);
    expect(() => kwokTopology(0, 100)).toThrow(/--kwok-sources must be at least 1/);
  });
  it('testbed: KWOK nodes only, no kubelet-shim, kcm without the controllers Ulysses replaces', () => {
    const o = kwokExperimentTestbedOptions('/tmp/x', 100);
    expect(o).toMatchObject({ runDir: '/tmp/x', realNodes: 0, kwokNodes: 100, controllers: kcmControllersFlag(ULYSSES_CONTROLLERS) });
    expect(o.kubeletShimConfig).toBeUndefined();
    expect(o.controllers).toContain('-taint-eviction-controller');
  });
});

describe('repetition without the UDP client', () => {
  it('waits for every event but Prio up', () => {
    expect(awaitedEvents(true)).toEqual([...EVENTS]);
    expect(awaitedEvents(false)).toEqual(EVENTS.filter((e) => e !== 'prioUp'));
  });
  it('experiment pods tolerate exactly the KWOK node taint', () => {
    const d = deployment({ namespace: 'n', name: 'low-0', replicas: 2, criticality: 'low', image: 'http-server', tolerations: [{ ...KWOK_TOLERATION }] });
    const tol = d.spec!.template.spec!.tolerations!;
    const taint = kwokNode('kwok-1').spec!.taints![0]!;
    expect(tol).toHaveLength(1);
    expect(tol[0]).toMatchObject({ key: taint.key, value: taint.value, effect: taint.effect, operator: 'Equal' });
    expect(tol[0]!.key).toBe(KWOK_ANNOTATION);
    // the failure taint (NoExecute) is not tolerated: the pods are evicted at t=0
    expect(tol.some((t) => t.effect === 'NoExecute')).toBe(false);
    expect(deployment({ namespace: 'n', name: 'x', replicas: 1, criticality: 'low', image: 'http-server' }).spec!.template.spec!.tolerations).toBeUndefined();
  });
});

describe('inflation targets of the scale run', () => {
  const ev = (t: number): FailoverEvents => ({ ...emptyEvents(), prioScheduled: t * 0.1, prioReady: t * 0.5, prioEndpointReady: t * 0.6, lastScheduled: t * 0.8, lastReady: t });
  const results: RepResult[] = [];
  for (let r = 0; r < 3; r++) {
    results.push({ config: 1, dn: 90, podsPerNode: 0, rep: r, events: ev(2) });
    results.push({ config: 5, dn: 90, podsPerNode: 0, rep: r, events: ev(2) });
    results.push({ config: 1, dn: 90, podsPerNode: 7, rep: r, events: ev(40) });
    results.push({ config: 5, dn: 90, podsPerNode: 7, rep: r, events: { ...ev(41), prioScheduled: 0.21, prioEndpointReady: 1.5 } });
  }
  const index = new SummaryIndex(summarize(results));
  it('checks config 5 at load / idle for the given events (no Prio up needed)', () => {
    const { cell, checks } = checkTargets(index, ['prioScheduled', 'prioEndpointReady']);
    expect(cell).toEqual({ dn: 90, podsPerNode: 7 });
    const sched = checks.find((c) => c.what.startsWith('Prio scheduled: config 5 at load'))!;
    expect(sched.measured).toBeCloseTo(0.21 / 0.2);
    expect(sched.met).toBe(true);
    const eps = checks.find((c) => c.what.startsWith('Prio in EndpointSlice: config 5 at load'))!;
    expect(eps.measured).toBeCloseTo(1.5 / 1.2);
    expect(eps.met).toBe(false);
    expect(checks.some((c) => c.what.startsWith('Prio up: config 5 at load'))).toBe(false);
  });
  it('the report takes them from meta and shows Prio scheduled in the inflation table', () => {
    const md = renderReport(results, index.rows, { inflationTargets: ['prioScheduled', 'prioEndpointReady'] });
    expect(md).toMatch(/\| Prio scheduled: config 5 at load \/ config 5 idle \| 1\.05x \| 1\.05x–1\.05x \| <= 1\.15x \| met \|/);
    expect(md).toMatch(/\| Prio in EndpointSlice: config 5 at load \/ config 5 idle \| 1\.25x \| 1\.25x–1\.25x \| <= 1\.15x \| \*\*missed\*\* \|/);
    expect(md).toMatch(/\| Prio scheduled, config 5 \| 1\.05x \|/);
  });
});
