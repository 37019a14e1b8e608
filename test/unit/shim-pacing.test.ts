/**
 * kubelet-shim pacing (thesis §5.3.4): policies' wait sequences and the PacingGate's rules, driven
 * by a fake clock so every release time is exact.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ConfigError } from '../../core/config.ts';
import {
  AdaptivePolicy,
  ExponentialDecayPolicy,
  FixedPolicy,
  PacingGate,
  PacingRejection,
  THESIS_POLICIES,
  VanillaPolicy,
  createPolicy,
  type Admission,
  type PacingConfigInput,
} from '../../kubelet-shim/pacing.ts';
import { shimMetrics } from '../../kubelet-shim/metrics.ts';
import type { Criticality } from '../../core/criticality.ts';
import { FakeClock, settle } from '../../core/clock.ts';

interface Tracked {
  key: string;
  admission?: Admission;
  error?: unknown;
}

function harness(config: PacingConfigInput, registry?: Registry) {
  const clock = new FakeClock();
  const gate = new PacingGate({ config, clock, metrics: registry ? shimMetrics(registry) : undefined });
  /** Keys in the order their admissions resolved (the order the proxy forwards them). */
  const order: string[] = [];
  const submit = (key: string, criticality: Criticality, signal?: AbortSignal): Tracked => {
    const t: Tracked = { key };
    gate.acquire({ key, criticality }, signal).then(
      (a) => {
        order.push(key);
        t.admission = a;
      },
      (e) => (t.error = e),
    );
    return t;
  };
  return { clock, gate, submit, order };
}

const releasedAt = (ts: Tracked[]) => ts.map((t) => t.admission?.releasedAt);

describe('pacing policies', () => {
  it('vanilla never waits', () => {
    const p = new VanillaPolicy();
    expect([0, 1, 2].map((t) => p.afterRelease(t))).toEqual([0, 0, 0]);
  });

  it('fixed waits the same time after every low-priority creation (thesis 1.2 s)', () => {
    const p = createPolicy(THESIS_POLICIES.fixed);
    expect(p).toBeInstanceOf(FixedPolicy);
    expect([0, 1200, 2400, 60_000].map((t) => p.afterRelease(t))).toEqual([1200, 1200, 1200, 1200]);
  });

  it('exponential decay: cloud 700 ms x0.5, a geometric progression per burst', () => {
    const p = createPolicy(THESIS_POLICIES.cloud);
    expect(p).toBeInstanceOf(ExponentialDecayPolicy);
    const gaps: number[] = [];
    let t = 0;
    for (let i = 0; i < 5; i++) {
      const g = p.afterRelease(t);
      gaps.push(g);
      t += g;
    }
    expect(gaps).toEqual([700, 350, 175, 87.5, 43.75]);
  });

  it('exponential decay: edge 1.5 s x0.6', () => {
    const p = createPolicy(THESIS_POLICIES.edge);
    let t = 0;
    const gaps = [0, 1, 2, 3].map(() => {
      const g = p.afterRelease(t);
      t += g;
      return g;
    });
    expect(gaps.map((g) => Math.round(g * 1000) / 1000)).toEqual([1500, 900, 540, 324]);
  });

  it('exponential decay resets to the initial wait after resetAfterMs of inactivity, not before', () => {
    const p = createPolicy(THESIS_POLICIES.cloud);
    expect(p.afterRelease(0)).toBe(700);
    expect(p.afterRelease(700)).toBe(350);
    expect(p.afterRelease(700 + 4999)).toBe(175); // idle 4.999 s: same burst
    expect(p.afterRelease(700 + 4999 + 5000)).toBe(700); // idle 5 s: new burst
    expect(p.afterRelease(700 + 4999 + 5000 + 10)).toBe(350);
  });

  it('exponential decay honours minWaitMs as a floor', () => {
    const p = createPolicy({ type: 'exponential-decay', initialWaitMs: 400, factor: 0.5, resetAfterMs: 5000, minWaitMs: 150 });
    expect([0, 1, 2, 3].map((t) => p.afterRelease(t))).toEqual([400, 200, 150, 150]);
  });

  it('validates policies as configuration, naming the bad field', () => {
    expect(() => createPolicy({ type: 'exponential-decay', factor: 0 } as never)).toThrow(ConfigError);
    try {
      createPolicy({ type: 'exponential-decay', factor: 1.5 } as never);
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).issues.map((i) => i.field)).toEqual(['factor']);
    }
    expect(() => createPolicy({ type: 'linear' } as never)).toThrow(/type/);
    expect(() => createPolicy({ type: 'fixed', waitMs: -1 })).toThrow(/waitMs/);
    expect(() => createPolicy({ type: 'fixed', wait: 3 } as never)).toThrow(ConfigError); // strict: typo caught
    // defaults are the thesis' cloud / fixed settings
    expect(createPolicy({ type: 'exponential-decay' }).config).toEqual(THESIS_POLICIES.cloud);
    expect(createPolicy({ type: 'fixed' }).config).toEqual(THESIS_POLICIES.fixed);
  });

  it('gate configuration is validated too', () => {
    expect(() => new PacingGate({ config: { maxQueueLength: 0 } })).toThrow(/maxQueueLength/);
    expect(() => new PacingGate({ config: { highMinInterArrivalMs: -5 } })).toThrow(/highMinInterArrivalMs/);
    const g = new PacingGate({ config: {} });
    expect(g.config).toEqual({ policy: { type: 'vanilla' }, highMinInterArrivalMs: 100, lowHoldMs: 0, maxQueueLength: 1024, maxHighQueueLength: 64, holdLowsDuringHighMs: 0 });
  });
});

describe('PacingGate', () => {
  it('vanilla: every request passes at once', async () => {
    const { clock, submit } = harness({ policy: { type: 'vanilla' }, highMinInterArrivalMs: 0 });
    const ts = ['a', 'b', 'c'].map((k) => submit(k, 'low'));
    await clock.advance(0);
    expect(releasedAt(ts)).toEqual([0, 0, 0]);
  });

  it('fixed: low-priority creations are spaced by the constant wait, FIFO', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1200 } });
    const ts = ['a', 'b', 'c', 'd'].map((k) => submit(k, 'low'));
    await clock.advance(0);
    expect(releasedAt(ts)).toEqual([0, undefined, undefined, undefined]);
    expect(gate.queueLength).toBe(3);
    await clock.advance(1199);
    expect(releasedAt(ts)).toEqual([0, undefined, undefined, undefined]);
    await clock.advance(1);
    expect(releasedAt(ts)).toEqual([0, 1200, undefined, undefined]);
    await clock.advance(10_000);
    expect(releasedAt(ts)).toEqual([0, 1200, 2400, 3600]);
    expect(ts.map((t) => t.admission?.waitedMs)).toEqual([0, 1200, 2400, 3600]);
    expect(gate.queueLength).toBe(0);
  });

  it('exponential decay through the gate, and a fresh burst after 5 s idle starts over at 700 ms', async () => {
    const { clock, submit } = harness({ policy: THESIS_POLICIES.cloud });
    const burst = ['a', 'b', 'c', 'd', 'e'].map((k) => submit(k, 'low'));
    await clock.advance(5000);
    expect(releasedAt(burst)).toEqual([0, 700, 1050, 1225, 1312.5]);
    // last release at 1312.5; a low arriving 5 s later starts a new burst
    await clock.advance(1312.5 + 5000 - clock.now());
    const t1 = clock.now();
    const next = ['f', 'g', 'h'].map((k) => submit(k, 'low'));
    await clock.advance(5000);
    expect(releasedAt(next)).toEqual([t1, t1 + 700, t1 + 1050]);
  });

  it('a low request that arrives while the gap is open waits only for what remains of it', async () => {
    const { clock, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } });
    const a = submit('a', 'low');
    await clock.advance(400);
    const b = submit('b', 'low');
    await clock.advance(1000);
    expect(releasedAt([a, b])).toEqual([0, 1000]);
    expect(b.admission?.waitedMs).toBe(600);
    await clock.advance(5000); // gap long over: the next one passes at once
    const c = submit('c', 'low');
    await clock.advance(0);
    expect(c.admission?.releasedAt).toBe(6400);
    expect(c.admission?.waitedMs).toBe(0);
  });

  it('the gap counts from the forward: a release the proxy forwards late pushes the next low one back by the delay', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } });
    const ts = ['a', 'b', 'c'].map((k) => submit(k, 'low'));
    const h = submit('h', 'high');
    await clock.advance(0);
    expect(releasedAt([...ts, h])).toEqual([0, undefined, undefined, 0]);
    // the event loop was busy for 30 ms between a's release and its frames going out
    await clock.advance(30);
    gate.forwarded(ts[0]!.admission!);
    gate.forwarded(h.admission!); // a high forward does not touch the low gap
    await clock.advance(999);
    expect(ts[1]!.admission).toBeUndefined();
    await clock.advance(1);
    expect(ts[1]!.admission?.releasedAt).toBe(1030);
    // forwarded at once: the next gap stays where it is; a second report of the same forward is ignored
    gate.forwarded(ts[1]!.admission!);
    await clock.advance(10);
    gate.forwarded(ts[1]!.admission!);
    gate.forwarded(ts[0]!.admission!); // an older admission: ignored
    await clock.advance(990);
    expect(ts[2]!.admission?.releasedAt).toBe(2030);
  });

  it('high priority passes at once and never waits behind queued low ones', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1200 } });
    const lows = ['l1', 'l2', 'l3'].map((k) => submit(k, 'low'));
    const none = submit('n1', 'none'); // undeclared criticality is paced like low
    await clock.advance(10);
    const high = submit('h1', 'high');
    await clock.advance(0);
    expect(high.admission).toEqual({ priority: 'high', waitedMs: 0, releasedAt: 10 });
    expect(gate.snapshot().waitingLow).toEqual(['l2', 'l3', 'n1']);
    await clock.advance(5000);
    expect(releasedAt([...lows, none])).toEqual([0, 1200, 2400, 3600]);
    expect(none.admission?.priority).toBe('low');
  });

  it('high priority: a minimum inter-arrival between releases, so a flood of highs cannot starve the node', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 250 }, highMinInterArrivalMs: 100 });
    const highs = ['h1', 'h2', 'h3', 'h4'].map((k) => submit(k, 'high'));
    const lows = ['l1', 'l2'].map((k) => submit(k, 'low'));
    await clock.advance(0);
    expect(releasedAt(highs)).toEqual([0, undefined, undefined, undefined]);
    expect(gate.snapshot().waitingHigh).toEqual(['h2', 'h3', 'h4']);
    await clock.advance(99);
    expect(highs[1]!.admission).toBeUndefined();
    await clock.advance(1000);
    expect(releasedAt(highs)).toEqual([0, 100, 200, 300]);
    // the low class keeps its own pace meanwhile
    expect(releasedAt(lows)).toEqual([0, 250]);
    // a high arriving after the slot has passed goes at once
    const late = submit('h5', 'high');
    await clock.advance(0);
    expect(late.admission?.releasedAt).toBe(1099);
    expect(late.admission?.waitedMs).toBe(0);
  });

  it('when a high and a low become due at the same instant, the high one is released first', async () => {
    const { clock, submit, order } = harness({ policy: { type: 'fixed', waitMs: 100 }, highMinInterArrivalMs: 100 });
    submit('h1', 'high');
    submit('l1', 'low');
    submit('l2', 'low');
    submit('h2', 'high');
    await clock.advance(100);
    expect(order).toEqual(['h1', 'l1', 'h2', 'l2']);
  });

  it('bounded queues: RESOURCE_EXHAUSTED beyond the bound, per class; room frees as requests leave', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 }, maxQueueLength: 2, maxHighQueueLength: 1 });
    const lows = ['l1', 'l2', 'l3', 'l4'].map((k) => submit(k, 'low'));
    await clock.advance(0);
    expect(lows[0]!.admission?.releasedAt).toBe(0); // released at once, never queued
    expect(lows[3]!.error).toBeInstanceOf(PacingRejection);
    expect((lows[3]!.error as PacingRejection).code).toBe('RESOURCE_EXHAUSTED');
    expect(lows.slice(0, 3).every((t) => t.error === undefined)).toBe(true);
    // a full low queue does not reject a high one
    const highs = ['h1', 'h2', 'h3'].map((k) => submit(k, 'high'));
    await clock.advance(0);
    expect(highs[0]!.admission?.releasedAt).toBe(0);
    expect(highs[1]!.error).toBeUndefined(); // waits for its slot (bound 1)
    expect((highs[2]!.error as PacingRejection).code).toBe('RESOURCE_EXHAUSTED');
    await clock.advance(1000); // l2 leaves: room for one more low
    const l5 = submit('l5', 'low');
    const l6 = submit('l6', 'low');
    await clock.advance(0);
    expect(l5.error).toBeUndefined();
    expect((l6.error as PacingRejection).code).toBe('RESOURCE_EXHAUSTED');
    await clock.advance(10_000);
    expect(releasedAt([...lows.slice(0, 3), l5])).toEqual([0, 1000, 2000, 3000]);
    expect(gate.queueLength).toBe(0);
  });

  it('a cancelled waiting request is removed cleanly and the next one takes its slot', async () => {
    const registry = new Registry();
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } }, registry);
    const ac2 = new AbortController();
    const ac3 = new AbortController();
    const a = submit('a', 'low');
    const b = submit('b', 'low', ac2.signal);
    const c = submit('c', 'low', ac3.signal);
    const d = submit('d', 'low');
    await clock.advance(500);
    expect(gate.queueLength).toBe(3);
    ac2.abort(); // the head of the queue
    await settle();
    expect(b.error).toBeInstanceOf(PacingRejection);
    expect((b.error as PacingRejection).code).toBe('CANCELLED');
    expect(gate.snapshot().waitingLow).toEqual(['c', 'd']);
    expect((await registry.getSingleMetric('ulysses_cri_pacing_queue_length')!.get()).values[0]!.value).toBe(2);
    await clock.advance(500);
    expect(c.admission?.releasedAt).toBe(1000); // c got b's slot
    ac3.abort(); // after release: no effect
    await clock.advance(5000);
    expect(releasedAt([a, c, d])).toEqual([0, 1000, 2000]);
    expect(c.error).toBeUndefined();
    expect(clock.pendingTimers).toBe(0);
    // a request whose call is already cancelled never enters
    const dead = new AbortController();
    dead.abort();
    const e = submit('e', 'low', dead.signal);
    await settle();
    expect((e.error as PacingRejection).code).toBe('CANCELLED');
    expect(gate.queueLength).toBe(0);
  });

  it('cancelling the only waiting request disarms the timer', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } });
    submit('a', 'low');
    const ac = new AbortController();
    submit('b', 'low', ac.signal);
    await clock.advance(0);
    expect(clock.pendingTimers).toBe(1);
    ac.abort();
    await settle();
    expect(clock.pendingTimers).toBe(0);
    expect(gate.queueLength).toBe(0);
  });

  it('setPolicy at runtime: waiting requests are kept and re-timed under the new policy', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1200 } });
    const ts = ['a', 'b', 'c', 'd', 'e'].map((k) => submit(k, 'low'));
    await clock.advance(100);
    expect(releasedAt(ts)).toEqual([0, undefined, undefined, undefined, undefined]);
    // fixed 1.2 s -> exponential decay: continues from the last release (t=0): 700, then 350
    gate.setPolicy({ type: 'exponential-decay', initialWaitMs: 700, factor: 0.5, resetAfterMs: 5000 });
    expect(gate.queueLength).toBe(4);
    await clock.advance(1000);
    expect(releasedAt(ts)).toEqual([0, 700, 1050, undefined, undefined]);
    // -> vanilla: everything still waiting goes at once
    gate.setPolicy({ type: 'vanilla' });
    await clock.advance(0);
    expect(releasedAt(ts)).toEqual([0, 700, 1050, 1100, 1100]);
    expect(ts.every((t) => t.error === undefined)).toBe(true);
    expect(gate.config.policy).toEqual({ type: 'vanilla' });
    expect(() => gate.setPolicy({ type: 'fixed', waitMs: -3 })).toThrow(/waitMs/);
    expect(gate.config.policy).toEqual({ type: 'vanilla' }); // a bad policy changes nothing
  });

  it('switching from vanilla to fixed paces the requests that arrive next', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'vanilla' } });
    const a = submit('a', 'low');
    await clock.advance(0);
    gate.setPolicy({ type: 'fixed', waitMs: 500 });
    const b = submit('b', 'low');
    const c = submit('c', 'low');
    await clock.advance(2000);
    expect(releasedAt([a, b, c])).toEqual([0, 500, 1000]);
  });

  it('reconfigure changes the high inter-arrival of waiting highs', async () => {
    const { clock, gate, submit } = harness({ highMinInterArrivalMs: 1000 });
    const hs = ['h1', 'h2', 'h3'].map((k) => submit(k, 'high'));
    await clock.advance(10);
    gate.reconfigure({ ...gate.config, highMinInterArrivalMs: 50 });
    await clock.advance(0);
    expect(releasedAt(hs)).toEqual([0, undefined, undefined]);
    await clock.advance(100); // h2 at 50 (not 1000), h3 50 ms later
    expect(releasedAt(hs)).toEqual([0, 50, 100]);
  });

  it('lowHoldMs holds every low request so that highs of the same burst go first', async () => {
    const { clock, submit } = harness({ policy: THESIS_POLICIES.cloud, lowHoldMs: 50 });
    const l1 = submit('l1', 'low');
    const l2 = submit('l2', 'low');
    await clock.advance(10);
    const h = submit('h', 'high');
    await clock.advance(1000);
    expect(h.admission?.releasedAt).toBe(10);
    expect(releasedAt([l1, l2])).toEqual([50, 750]);
  });

  it('records the wait per priority class in ulysses_cri_pacing_wait_seconds', async () => {
    const registry = new Registry();
    const { clock, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } }, registry);
    submit('a', 'low');
    submit('b', 'low');
    submit('h', 'high');
    await clock.advance(2000);
    const values = (await registry.getSingleMetric('ulysses_cri_pacing_wait_seconds')!.get()).values;
    const sum = (prio: string) => values.find((v) => (v as { metricName?: string }).metricName === 'ulysses_cri_pacing_wait_seconds_sum' && v.labels.priority === prio)?.value;
    const count = (prio: string) => values.find((v) => (v as { metricName?: string }).metricName === 'ulysses_cri_pacing_wait_seconds_count' && v.labels.priority === prio)?.value;
    expect([count('low'), sum('low')]).toEqual([2, 1]);
    expect([count('high'), sum('high')]).toEqual([1, 0]);
  });

  it('close() rejects the waiting requests with UNAVAILABLE and refuses new ones', async () => {
    const { clock, gate, submit } = harness({ policy: { type: 'fixed', waitMs: 1000 } });
    const a = submit('a', 'low');
    const b = submit('b', 'low');
    await clock.advance(0);
    gate.close();
    await settle();
    expect(a.admission?.releasedAt).toBe(0);
    expect((b.error as PacingRejection).code).toBe('UNAVAILABLE');
    const c = submit('c', 'high');
    await settle();
    expect((c.error as PacingRejection).code).toBe('UNAVAILABLE');
    expect(clock.pendingTimers).toBe(0);
  });
});

describe('critical-path protection (holdLowsDuringHighMs)', () => {
  it('holds low releases after a high one until the proxy reports the critical pod started', async () => {
    const { clock, gate, submit, order } = harness({ policy: { type: 'vanilla' }, holdLowsDuringHighMs: 2000 });
    const high = submit('crit', 'high');
    await clock.advance(0);
    expect(high.admission?.releasedAt).toBe(0);
    expect(gate.highsInFlight).toEqual(['crit']);
    const lows = ['a', 'b'].map((k) => submit(k, 'low'));
    await clock.advance(500);
    expect(releasedAt(lows)).toEqual([undefined, undefined]); // held while the critical pod starts
    gate.highDone('crit');
    await clock.advance(0);
    expect(releasedAt(lows)).toEqual([500, 500]);
    expect(order).toEqual(['crit', 'a', 'b']);
    expect(gate.highsInFlight).toEqual([]);
  });

  it('releases the lows at the hold deadline if the start is never reported', async () => {
    const { clock, submit } = harness({ policy: { type: 'vanilla' }, holdLowsDuringHighMs: 2000 });
    submit('crit', 'high');
    await clock.advance(100);
    const low = submit('a', 'low');
    await clock.advance(1899);
    expect(low.admission).toBeUndefined();
    await clock.advance(1);
    expect(low.admission?.releasedAt).toBe(2000);
  });

  it('is off by default (thesis behaviour): lows are not held by a high release', async () => {
    const { clock, submit } = harness({ policy: { type: 'vanilla' } });
    submit('crit', 'high');
    const low = submit('a', 'low');
    await clock.advance(0);
    expect(low.admission?.releasedAt).toBe(0);
  });
});


describe('adaptive policy (seed 001 asymmetric controller, Tamiru et al. 2020 Algorithm 1)', () => {
  const cfg = { type: 'adaptive', targetMs: 1000, initialWaitMs: 100, minWaitMs: 50, maxWaitMs: 2000, kp: 0.5, kn: 0.1, intervalMs: 1000, cleanIntervals: 3 } as const;

  it('raises the wait by kp * (latency - target) on a slow critical creation, never above maxWaitMs', () => {
    const p = createPolicy(cfg) as AdaptivePolicy;
    expect(p).toBeInstanceOf(AdaptivePolicy);
    expect(p.afterRelease(0)).toBe(100);
    expect(p.observeCritical(1600, 10)).toBe(true); // error 600 ms -> +300
    expect(p.afterRelease(20)).toBe(400);
    expect(p.observeCritical(900, 30)).toBe(false); // on time: no change (no negative error, asymmetric)
    expect(p.afterRelease(40)).toBe(400);
    expect(p.observeCritical(1000, 50)).toBe(false); // exactly the target is not slow
    expect(p.observeCritical(6000, 60)).toBe(true); // +2500 -> capped
    expect(p.afterRelease(70)).toBe(2000);
    expect(p.observeCritical(5000, 80)).toBe(false); // already at the bound
  });

  it('decays the wait by (1 - kn) only after 3 consecutive clean intervals, then every 3 more', () => {
    const p = createPolicy(cfg) as AdaptivePolicy;
    p.afterRelease(0); // first interval starts at 0
    p.observeCritical(2000, 500); // slow in interval [0,1000): wait 100 + 500 = 600
    expect(p.currentWaitMs(999)).toBe(600);
    expect(p.currentWaitMs(3999)).toBe(600); // intervals [1000,2000), [2000,3000) clean; [3000,4000) not over
    expect(p.currentWaitMs(4000)).toBe(540); // third clean interval over: x0.9
    expect(p.currentWaitMs(6999)).toBe(540);
    expect(p.currentWaitMs(7000)).toBeCloseTo(486, 9);
  });

  it('a slow creation restarts the clean-interval count', () => {
    const p = createPolicy(cfg) as AdaptivePolicy;
    p.afterRelease(0);
    p.observeCritical(1200, 100); // +100 -> 200
    expect(p.currentWaitMs(2500)).toBe(200); // [1000,2000) clean: 1
    p.observeCritical(1200, 2500); // slow in [2000,3000): count restarts, 300
    expect(p.currentWaitMs(5999)).toBe(300); // [3000,4000), [4000,5000) clean: 2
    expect(p.currentWaitMs(6000)).toBe(270); // [5000,6000): 3
  });

  it('never decays below minWaitMs, and a long idle period is evaluated at once', () => {
    const p = createPolicy(cfg) as AdaptivePolicy;
    p.afterRelease(0);
    p.observeCritical(5000, 1); // -> 2000
    expect(p.currentWaitMs(3_600_000)).toBe(50); // an hour later: at the floor
    expect(p.observeCritical(1100, 3_600_001)).toBe(true); // +50
    expect(p.currentWaitMs(3_600_002)).toBe(100);
  });

  it('validates its parameters, naming the field', () => {
    expect(() => createPolicy({ ...cfg, kn: 1 })).toThrow(/kn/);
    expect(() => createPolicy({ ...cfg, kn: 0 })).toThrow(/kn/);
    expect(() => createPolicy({ ...cfg, kp: -1 })).toThrow(/kp/);
    expect(() => createPolicy({ ...cfg, minWaitMs: 3000 })).toThrow(/maxWaitMs/);
    expect(() => createPolicy({ ...cfg, initialWaitMs: 5000 })).toThrow(/initialWaitMs/);
    expect(() => createPolicy({ ...cfg, intervalMs: 0 })).toThrow(/intervalMs/);
    expect(() => createPolicy({ ...cfg, gain: 1 } as never)).toThrow(ConfigError);
    expect(createPolicy({ type: 'adaptive' }).config).toEqual({
      type: 'adaptive', targetMs: 2000, initialWaitMs: 0, minWaitMs: 0, maxWaitMs: 2000, kp: 0.5, kn: 0.1, intervalMs: 5000, cleanIntervals: 3,
    });
  });

  it('through the gate: critical feedback re-times the pending low release and is exported as metrics', async () => {
    const registry = new Registry();
    const { clock, gate, submit } = harness({ policy: { ...cfg, initialWaitMs: 100 } }, registry);
    const lows = ['a', 'b', 'c'].map((k) => submit(k, 'low'));
    await clock.advance(0);
    expect(releasedAt(lows)).toEqual([0, undefined, undefined]); // b due at 100
    gate.criticalCreation('ns/crit', 1800); // slow by 800 -> wait 100 + 400 = 500, b re-timed to 0 + 500
    await clock.advance(499);
    expect(releasedAt(lows)).toEqual([0, undefined, undefined]);
    await clock.advance(1);
    expect(releasedAt(lows)).toEqual([0, 500, undefined]);
    await clock.advance(500);
    expect(releasedAt(lows)).toEqual([0, 500, 1000]);
    expect(gate.adaptiveWaitMs).toBe(500);
    const text = await registry.metrics();
    expect(text).toMatch(/ulysses_cri_pacing_adaptive_wait_seconds 0\.5/);
    expect(text).toMatch(/ulysses_cri_critical_creation_seconds_count 1/);
    // other policies ignore the feedback
    const fixed = harness({ policy: { type: 'fixed', waitMs: 100 } });
    const fl = ['a', 'b'].map((k) => fixed.submit(k, 'low'));
    await fixed.clock.advance(0);
    fixed.gate.criticalCreation('ns/crit', 60_000);
    await fixed.clock.advance(100);
    expect(releasedAt(fl)).toEqual([0, 100]);
    expect(fixed.gate.adaptiveWaitMs).toBeUndefined();
  });
});
