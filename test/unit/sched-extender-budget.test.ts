/**
 * The work bound of the RT analyses (realtime/task.ts AnalysisBudget): the hostile pod (a
 * 1000/1000 server, one task 9999/10000 and 255 tasks of 1000 µs every 3.6e9 µs, which cost ~1.1e9
 * work units, 11-12 s, before the bound) is refused with "analysis budget exceeded" after at most
 * the budget's work, on one node and over a whole request; the cheap necessary conditions refuse
 * without any response-time analysis; an ordinary pod is still placed. Work is counted, never timed.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { analyzeRtNode } from '../../scheduler-plugins/realtime/what-if.ts';
import { AnalysisBudget, AnalysisBudgetExceeded } from '../../scheduler-plugins/realtime/task.ts';
import { coreSchedulable, placeServer, type DeferrableServer } from '../../scheduler-plugins/realtime/deferrable-server.ts';
import { placeReservation } from '../../scheduler-plugins/realtime/budget-period.ts';
import { silentLogger } from '../../core/logging.ts';
import { filter } from './extender-calls.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';

const hostileTasks = [{ wcetUs: 9999, periodUs: 10000 }, ...Array.from({ length: 255 }, () => ({ wcetUs: 1000, periodUs: 3_600_000_000 }))];
const hostile = { server: { budgetUs: 1000, periodUs: 1000 }, tasks: hostileTasks };
const dsSpec = (budgetUs: number, periodUs: number, tasks: Array<{ wcetUs: number; periodUs: number }>) => ({ kind: 'deferrable-server' as const, server: { budgetUs, periodUs }, tasks });

let seq = 0;
const node = (name: string, cores = 1): V1Node => ({
  metadata: { name, resourceVersion: String(++seq), labels: { 'ulysses.io/rt-scheduler': 'deferrable-server' }, annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores }) } },
});
const pod = (name: string, rt: unknown, extra: { nodeName?: string; cores?: number[] } = {}): V1Pod => ({
  metadata: {
    name,
    namespace: 'ns',
    uid: `uid-${name}`,
    resourceVersion: String(++seq),
    annotations: { 'ulysses.io/rt': JSON.stringify(rt), ...(extra.cores ? { 'ulysses.io/rt-cores': JSON.stringify(extra.cores) } : {}) },
  },
  spec: { containers: [{ name: 'c', resources: reservationRequest() }], ...(extra.nodeName ? { nodeName: extra.nodeName } : {}) },
});

const servers: ExtenderServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.app.close();
});

describe('RT analysis budget', () => {
  it("refuses the issue's pod on a single-core node with the budget's reason, its counted work within the budget", () => {
    const budget = new AnalysisBudget(1_000_000);
    const r = analyzeRtNode(
      { name: 'rt', kind: 'deferrable-server', capacity: { cores: 1 }, pods: [] },
      { name: 'ns/hostile', uid: 'u', spec: dsSpec(1000, 1000, hostileTasks) },
      { exactResponseTimes: false, stopAtFirstFailure: true, budget },
    );
    expect(r.schedulable).toBe(false);
    expect(r.reason).toBe('analysis budget exceeded: 256 tasks x 1 servers on 1 core(s) (budget 1000000 work units per request)');
    expect(r.budgetExceeded).toBe(true);
    expect(budget.exceeded).toBe(true);
    expect(budget.used).toBeLessThanOrEqual(1_000_000);
    // an exhausted budget refuses the next node at once, spending nothing more
    const used = budget.used;
    const next = analyzeRtNode({ name: 'rt2', kind: 'deferrable-server', capacity: { cores: 4 }, pods: [] }, { name: 'ns/small', uid: 'v', spec: dsSpec(100, 1000, [{ wcetUs: 50, periodUs: 1000 }]) }, { budget });
    expect(next.reason).toMatch(/^analysis budget exceeded: 1 tasks x 1 servers on 4 core\(s\)/);
    expect(budget.used).toBe(used);
  });

  it('spend never lets the counter pass the limit', () => {
    const b = new AnalysisBudget(10);
    b.spend(6);
    expect(() => b.spend(5)).toThrow(AnalysisBudgetExceeded);
    expect(b.used).toBe(6);
    expect(() => b.spend(1)).toThrow(AnalysisBudgetExceeded); // exceeded stays exceeded
  });

  it('cheap necessary conditions refuse before any response-time analysis (no work counted)', () => {
    const budget = new AnalysisBudget(1_000_000);
    const srv = (uid: string, c: number, t: number, tasks: DeferrableServer['tasks'] = [{ wcetUs: 1, periodUs: t }]): DeferrableServer => ({ podUid: uid, budgetUs: c, periodUs: t, tasks });
    // tasks need 0.6 of a core, the server supplies 0.5
    const over = placeServer([[]], srv('new', 500, 1000, [{ wcetUs: 600, periodUs: 1000 }]), { budget });
    expect(over).toMatchObject({ ok: false });
    expect((over as { reason: string }).reason).toContain("tasks' utilization Σ C/T = 0.600000 > server bandwidth 500/1000");
    // both cores above the utilization cap: neither is analysed
    const capped = placeServer([[srv('a', 900, 1000)], [srv('b', 800, 1000)]], srv('new', 300, 1000), { budget });
    expect(capped).toMatchObject({ ok: false, reason: 'core 1: utilization 1.1000 > 1; core 0: utilization 1.2000 > 1' });
    expect(budget.used).toBe(0);
  });

  it("a core's analysis stops at its first failure; a server failing alone is not tried on further cores", () => {
    // within its bandwidth (0.9005 <= 0.95), but its first task (deadline 500 < WCET 900) misses
    const bad: DeferrableServer = { podUid: 'x', budgetUs: 950, periodUs: 1000, tasks: [{ wcetUs: 900, periodUs: 1000, deadlineUs: 500 }, ...Array.from({ length: 50 }, () => ({ wcetUs: 1, periodUs: 100_000 }))] };
    const all = new AnalysisBudget(1e9);
    const first = new AnalysisBudget(1e9);
    const full = coreSchedulable([bad], { budget: all });
    const stopped = coreSchedulable([bad], { budget: first, stopAtFirstFailure: true });
    expect(full.schedulable).toBe(false);
    expect(stopped.schedulable).toBe(false);
    expect(stopped.reason).toBe(full.reason);
    expect(full.servers[0]!.tasks).toHaveLength(51);
    expect(stopped.servers[0]!.tasks).toHaveLength(1);
    expect(first.used).toBeLessThan(all.used);
    // eight cores, each holding a server: the pod fails on the first core tried and alone, so the other seven are not analysed
    const other = (i: number): DeferrableServer => ({ podUid: `o${i}`, budgetUs: 10, periodUs: 100_000, tasks: [{ wcetUs: 1, periodUs: 100_000 }] });
    const cores = Array.from({ length: 8 }, (_, i) => [other(i)]);
    const placed = placeServer(cores, bad, { stopAtFirstFailure: true });
    expect(placed.ok).toBe(false);
    expect((placed as { reason: string }).reason).toMatch(/^core 0: .*; alone on a core: .*\(no core can take it\)$/);
  });

  it('EDF placement counts ordering the cores too: 256 tasks on a 1024-core node stay within the budget', () => {
    const budget = new AnalysisBudget(100_000);
    const tasks = Array.from({ length: 256 }, () => ({ wcetUs: 1, periodUs: 1000 }));
    const r = analyzeRtNode({ name: 'e', kind: 'edf', capacity: { cores: 1024 }, pods: [] }, { name: 'ns/wide', uid: 'w', spec: { kind: 'edf', tasks } }, { budget });
    expect(r.reason).toMatch(/^analysis budget exceeded: 256 tasks x 1 pods on 1024 core\(s\)/);
    expect(budget.used).toBeLessThanOrEqual(100_000);
    // with room for it, the same pod is placed
    const big = new AnalysisBudget(1_000_000);
    expect(analyzeRtNode({ name: 'e', kind: 'edf', capacity: { cores: 1024 }, pods: [] }, { name: 'ns/wide', uid: 'w', spec: { kind: 'edf', tasks } }, { budget: big }).schedulable).toBe(true);
  });

  it("EDF per-core summaries are counted: a pod whose placement fits the budget but whose 1024 core utilizations do not is refused with the budget's reason", async () => {
    const one = { kind: 'edf' as const, tasks: [{ wcetUs: 1, periodUs: 2 }] };
    const node1024 = { name: 'e', kind: 'edf' as const, capacity: { cores: 1024 }, pods: [] };
    // the placement: 1 (node) + 1024 (ordering the cores) + 1 (the task alone) + 1 (the first core takes it) = 1027 units,
    // the test of the core used 2; the utilizations of the 1024 cores after it (1024 cores + 1 task) pass 1500
    const small = new AnalysisBudget(1500);
    const r = analyzeRtNode(node1024, { name: 'ns/one', uid: 'o', spec: one }, { budget: small });
    expect(r.schedulable).toBe(false);
    expect(r.reason).toMatch(/^analysis budget exceeded: 1 tasks x 1 pods on 1024 core\(s\) \(budget 1500 work units per request\)$/);
    expect(small.used).toBeLessThanOrEqual(1500);
    // with room: placed, and every summary counted (placement 1027, the used core 2, utilizations 1025)
    const big = new AnalysisBudget(10_000);
    expect(analyzeRtNode(node1024, { name: 'ns/one', uid: 'o', spec: one }, { budget: big }).schedulable).toBe(true);
    expect(big.used).toBe(1027 + 2 + 1025);
    // through /filter, inline and with the analysis thread: refused with the reason, the request within its budget
    for (const analysisThread of [false, true]) {
      const s = new ExtenderServer({ config: { analysisBudget: 1500, analysisThread }, log: silentLogger() });
      servers.push(s);
      s.state.upsertNode({ metadata: { name: 'e1024', resourceVersion: '1', labels: { 'ulysses.io/rt-scheduler': 'edf' }, annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores: 1024 }) } } });
      const f = await filter(s, pod(`one-${analysisThread}`, { tasks: one.tasks }), ['e1024']);
      expect(f.NodeNames).toEqual([]);
      expect(f.FailedAndUnresolvableNodes['e1024']).toContain('analysis budget exceeded: 1 tasks x 1 pods on 1024 core(s) (budget 1500 work units per request)');
      expect(s.analysisWork.last).toBeLessThanOrEqual(1500);
    }
  });

  it('a budget-period reservation stops at its first failing task', () => {
    const budget = new AnalysisBudget(1e9);
    const r = placeReservation([[]], { runtimeUs: 100, periodUs: 1000, cpus: 1, tasks: [{ wcetUs: 200, periodUs: 1000 }, { wcetUs: 1, periodUs: 2000 }] }, { budget });
    expect(r.ok).toBe(false);
    expect(r.tasks).toHaveLength(1);
  });

  it('through /filter: the pod is refused on every RT node within one budget, an ordinary pod still fits, a pod holding a core does not make the node cost more than the budget', async () => {
    const s = new ExtenderServer({ config: { analysisBudget: 200_000 }, log: silentLogger() });
    servers.push(s);
    for (const n of ['rt1', 'rt2', 'rt3']) s.state.upsertNode(node(n));
    const r = await filter(s, pod('hostile', hostile), ['rt1', 'rt2', 'rt3']);
    expect(r.NodeNames).toEqual([]);
    for (const n of ['rt1', 'rt2', 'rt3']) expect(r.FailedAndUnresolvableNodes[n]).toContain('analysis budget exceeded: 256 tasks x 1 servers on 1 core(s) (budget 200000 work units per request)');
    expect(s.analysisWork.last).toBeLessThanOrEqual(200_000);
    // not cached: the next request analyses again, with a budget of its own
    const again = await filter(s, pod('hostile', hostile), ['rt1']);
    expect(again.FailedAndUnresolvableNodes.rt1).toContain('analysis budget exceeded');
    expect(s.analysisWork.last).toBeGreaterThan(0);
    expect(s.analysisWork.last).toBeLessThanOrEqual(200_000);
    // an ordinary pod is placed
    const ok = await filter(s, pod('small', { server: { budgetUs: 100, periodUs: 1000 }, tasks: [{ wcetUs: 50, periodUs: 1000 }] }), ['rt1', 'rt2', 'rt3']);
    expect(ok.NodeNames).toEqual(['rt1', 'rt2', 'rt3']);
    // the hostile tasks holding rt1's core (bound with a 99999/100000 server, pinned by rt-cores): a
    // new demand that fits the utilization cap (1e-5 more: exactly 1) stays within the budget
    s.state.upsertPod(pod('holder', { server: { budgetUs: 99_999, periodUs: 100_000 }, tasks: hostileTasks }, { nodeName: 'rt1', cores: [0] }));
    const after = await filter(s, pod('next', { server: { budgetUs: 1, periodUs: 100_000 }, tasks: [{ wcetUs: 1, periodUs: 100_000 }] }), ['rt1']);
    expect(after.NodeNames).toEqual([]);
    expect(after.FailedAndUnresolvableNodes.rt1).toContain('analysis budget exceeded: 257 tasks x 2 servers');
    expect(s.analysisWork.last).toBeLessThanOrEqual(200_000);
  });

  it('/healthz and an ordinary pod are answered while a heavy /filter runs in the analysis thread', async () => {
    const s = new ExtenderServer({ config: { analysisBudget: 20_000_000 }, log: silentLogger() });
    servers.push(s);
    for (const n of ['rt1', 'rt2']) s.state.upsertNode(node(n));
    const order: string[] = [];
    const heavy = s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: pod('hostile', hostile), NodeNames: ['rt1', 'rt2'] } }).then((r) => (order.push('heavy filter'), r));
    const health = s.app.inject({ method: 'GET', url: '/healthz' }).then((r) => (order.push('healthz'), r));
    const small = { server: { budgetUs: 100, periodUs: 1000 }, tasks: [{ wcetUs: 50, periodUs: 1000 }] };
    const ordinary = s.app.inject({ method: 'POST', url: '/filter', payload: { Pod: pod('small', small), NodeNames: ['rt1', 'rt2'] } }).then((r) => (order.push('ordinary filter'), r));
    const [h, res, o] = await Promise.all([health, heavy, ordinary]);
    // inline, the heavy filter would have been answered first (it was sent first and would hold the event loop)
    expect(order).toEqual(['healthz', 'ordinary filter', 'heavy filter']);
    expect(h.statusCode).toBe(200);
    expect((o.json() as { NodeNames: string[] }).NodeNames).toEqual(['rt1', 'rt2']);
    const r = res.json() as { NodeNames: string[]; FailedAndUnresolvableNodes: Record<string, string> };
    expect(r.NodeNames).toEqual([]);
    expect(r.FailedAndUnresolvableNodes.rt1).toContain('analysis budget exceeded: 256 tasks x 1 servers on 1 core(s) (budget 20000000 work units per request)');
    expect(s.analysisThreadJobs).toBe(1);
    expect(s.analysisWork.last).toBeLessThanOrEqual(20_000_000);
  }, 60_000);

  it('a demand that ran past the inline budget sends its RT nodes to the thread at once next time; a light one stays inline', async () => {
    const s = new ExtenderServer({ config: { analysisBudget: 2_000_000 }, log: silentLogger() });
    servers.push(s);
    for (const n of ['rt1', 'rt2', 'rt3']) s.state.upsertNode(node(n));
    const names = ['rt1', 'rt2', 'rt3'];
    const first = await filter(s, pod('hostile-a', hostile), names);
    const inlineFirst = s.inlineWork.units;
    expect(inlineFirst).toBeGreaterThan(0);
    expect(s.analysisThreadJobs).toBe(1);
    // a replica (same demand, its own UID): the same answer, with no inline work (the event loop is not held for it)
    const second = await filter(s, pod('hostile-b', hostile), names);
    expect(s.inlineWork.units).toBe(inlineFirst);
    expect(s.analysisThreadJobs).toBe(2);
    expect(second.NodeNames).toEqual([]);
    const msg = (r: typeof first, uid: string) => Object.fromEntries(Object.entries(r.FailedAndUnresolvableNodes).map(([k, m]) => [k, m.split(uid).join('UID')]));
    expect(msg(second, 'uid-hostile-b')).toEqual(msg(first, 'uid-hostile-a'));
    expect(second.FailedAndUnresolvableNodes.rt1).toContain('analysis budget exceeded: 256 tasks x 1 servers on 1 core(s) (budget 2000000 work units per request)');
    // a light pod is analysed inline, every time
    const small = { server: { budgetUs: 100, periodUs: 1000 }, tasks: [{ wcetUs: 50, periodUs: 1000 }] };
    expect((await filter(s, pod('small-a', small), names)).NodeNames).toEqual(names);
    const inlineSmall = s.inlineWork.units;
    expect(inlineSmall).toBeGreaterThan(inlineFirst);
    expect(s.analysisThreadJobs).toBe(2);
  }, 60_000);
});
