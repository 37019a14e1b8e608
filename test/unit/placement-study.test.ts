/**
 * §6.2 end to end (small): determinism with a seed; the qualitative placement result (criticality-
 * aware accepts more HI pods and keeps more assurance than every vanilla strategy, without losing
 * overall acceptance); the schedulability study (vanilla accepts every set, Ulysses only the
 * schedulable ones, and the simulator exhibits a deadline miss for the rejected ones checked).
 */
import { describe, expect, it } from 'vitest';
import { prng } from '../../core/prng.ts';
import { runPlacement, runPlacementStudy, POLICIES } from '../../experiments/placement/placement.ts';
import { placementRows } from '../../experiments/placement/report.ts';
import { criticalInstant, generatePodSet, runSchedulabilityStudy } from '../../experiments/placement/schedulability.ts';
import { coreSchedulable, type DeferrableServer } from '../../scheduler-plugins/realtime/deferrable-server.ts';
import { RT_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';

describe('placement simulation', () => {
  it('is deterministic for a seed', () => {
    expect(runPlacement(5)).toEqual(runPlacement(5));
    expect(runPlacement(5).policies[0]!.placed).not.toEqual(runPlacement(6).policies[0]!.placed);
  });

  it('criticality-aware accepts more HI pods and keeps more assurance than every vanilla strategy', () => {
    const runs = runPlacementStudy(1, 8);
    const rows = placementRows(runs);
    const ca = rows.find((r) => r.policy === 'CriticalityAware')!;
    const vanilla = rows.filter((r) => r.policy !== 'CriticalityAware');
    expect(vanilla.map((r) => r.policy)).toEqual(POLICIES.slice(0, 3));
    expect(ca.acceptanceHigh).toBeGreaterThan(Math.max(...vanilla.map((r) => r.acceptanceHigh)) + 0.03);
    expect(ca.meanClusterAssurance).toBeGreaterThan(Math.max(...vanilla.map((r) => r.meanClusterAssurance)));
    // ...without penalizing the overall acceptance (thesis: "not statistically different")
    expect(ca.acceptance).toBeGreaterThan(Math.max(...vanilla.map((r) => r.acceptance)) - 0.05);
    for (const r of runs) for (const p of r.policies) expect(p.placed.high).toBeLessThanOrEqual(p.arrived.high);
  });
});

describe('schedulability study', () => {
  it('generates the §6.2 pod sets', () => {
    const set = generatePodSet(0, prng(3));
    const by = (c: string) => set.pods.filter((p) => p.cls === c);
    expect(by('best-effort')).toHaveLength(30);
    expect(by('medium-rt')).toHaveLength(30);
    expect(set.highCount).toBeGreaterThanOrEqual(6);
    expect(set.highCount).toBeLessThanOrEqual(12);
    expect(Math.abs(set.highUtilizations.reduce((a, b) => a + b, 0) - 1.8)).toBeLessThan(1e-12);
    for (const p of [...by('best-effort'), ...by('medium-rt')]) {
      expect(p.utilization).toBeGreaterThanOrEqual(0.079);
      expect(p.utilization).toBeLessThanOrEqual(0.251);
    }
    for (const p of by('high-rt')) {
      const rt = JSON.parse(p.pod.metadata!.annotations![RT_ANNOTATION]!) as { server: { budgetUs: number; periodUs: number }; tasks: Array<{ wcetUs: number; periodUs: number; deadlineUs: number }> };
      expect(rt.tasks[0]).toEqual({ wcetUs: rt.server.budgetUs, periodUs: 2 * rt.server.periodUs, deadlineUs: rt.server.periodUs + rt.server.budgetUs });
    }
  });

  it('critical instant: the simulated response equals the analysis on a hand example', () => {
    // hp server (1000, 5000); target (1000, 10000) with a task C 1000, T 20000, D 11000.
    // Analysis: r = 9000, x(1000) = 1000 + ceil((x + 4000)/5000)·1000 = 3000, R = 12000 > 11000.
    // Simulation: target replenished at 9000; hp runs 9000-10000 and, replenished at 10000,
    // 10000-11000 (back-to-back); the target runs 11000-12000.
    const servers: DeferrableServer[] = [
      { podUid: 'a', budgetUs: 1000, periodUs: 5000, tasks: [{ wcetUs: 500, periodUs: 10000 }] },
      { podUid: 'b', budgetUs: 1000, periodUs: 10000, tasks: [{ wcetUs: 1000, periodUs: 20000, deadlineUs: 11000 }] },
    ];
    const analysis = coreSchedulable(servers, { exactResponseTimes: true });
    expect(analysis.schedulable).toBe(false);
    expect(analysis.servers[1]!.tasks[0]!.responseTimeUs).toBe(12000);
    expect(criticalInstant(servers, 1, 1_000_000)).toEqual({ responseUs: 12000, deadlineUs: 11000, missed: true });
    // With the deadline at the analysed bound the same instant just meets it.
    const ok = servers.map((s, i) => (i === 1 ? { ...s, tasks: [{ ...s.tasks[0]!, deadlineUs: 12000 }] } : s));
    expect(coreSchedulable(ok).schedulable).toBe(true);
    expect(criticalInstant(ok, 1, 1_000_000).missed).toBe(false);
  });

  it('vanilla accepts every set, Ulysses only the schedulable ones, and rejected sets really miss', () => {
    const r = runSchedulabilityStudy(1, { sets: 24, simulateSample: 4 });
    expect(r.vanillaAccepted).toBe(24);
    expect(r.ulyssesAccepted).toBeGreaterThan(0);
    expect(r.ulyssesAccepted).toBeLessThan(24);
    expect(r.ulyssesAccepted).toBe(24 - r.rejectedByDs - r.rejectedByBudgetPeriod + r.rejectedByBoth);
    expect(r.dsChecks.length).toBe(4);
    for (const c of r.dsChecks) {
      expect(c.missed).toBe(true);
      expect(c.worstLatenessUs).toBeGreaterThan(0);
    }
    expect(runSchedulabilityStudy(1, { sets: 24, simulateSample: 4 })).toEqual(r);
  });
});
