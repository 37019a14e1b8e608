/**
 * Self-fencing's decision (kubelet-shim/fencing.ts), pure logic with a hand-driven clock: fenced only
 * when both the decider's probes and the apiserver are gone for afterMs (a decider pause alone, or an
 * apiserver outage alone, never fences); fenced, the critical sandboxes are stopped on every check
 * and the gate refuses them; lifted when either comes back. And the gate's refusal of critical pods.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { cutOff, FencingConfigSchema, SelfFencer } from '../../kubelet-shim/fencing.ts';
import { PacingGate, PacingRejection } from '../../kubelet-shim/pacing.ts';
import { NodeAgentConfigSchema } from '../../kubelet-shim/node-agent.ts';
import { silentLogger } from '../../core/logging.ts';

function setup(afterMs = 2000) {
  let now = 0;
  let lastProbe = 0;
  let api = true;
  const sandboxes = new Map<string, string>([['s1', 'ns/upf-1']]);
  const stopped: string[] = [];
  const fences: (string | undefined)[] = [];
  const f = new SelfFencer({
    node: 'worker-1',
    config: FencingConfigSchema.parse({ enabled: true, afterMs, checkMs: 500 }),
    log: silentLogger(),
    runtime: {
      criticalSandboxes: async () => [...sandboxes].map(([id, pod]) => ({ id, pod })),
      stopSandbox: async (id) => {
        stopped.push(id);
        sandboxes.delete(id);
      },
    },
    gate: { fence: (r) => fences.push(r) },
    lastProbeAt: () => lastProbe,
    apiReachable: async () => (api ? true : Promise.reject(new Error('ECONNREFUSED'))),
    now: () => now,
    registry: new Registry(),
  });
  return {
    f,
    stopped,
    fences,
    sandboxes,
    at: (t: number) => (now = t),
    probe: () => (lastProbe = now),
    apiserver: (up: boolean) => (api = up),
  };
}

describe('self-fencing', () => {
  it('cut off only when both the probes and the apiserver are gone for afterMs', () => {
    expect(cutOff(5000, 0, 0, 5000)).toBe(true);
    expect(cutOff(4999, 0, 0, 5000)).toBe(false);
    expect(cutOff(9000, 0, 4001, 5000)).toBe(false); // the apiserver answered 4999 ms ago
    expect(cutOff(9000, 4001, 0, 5000)).toBe(false); // a probe came 4999 ms ago
  });

  it('a decider that stops probing (restart, leader change) never fences while the apiserver answers', async () => {
    const s = setup();
    for (let t = 0; t <= 60_000; t += 500) {
      s.at(t);
      await s.f.tick();
    }
    expect(s.f.fenced).toBe(false);
    expect(s.stopped).toEqual([]);
    expect(s.fences).toEqual([]);
  });

  it('an apiserver outage while the decider probes never fences', async () => {
    const s = setup();
    s.apiserver(false);
    for (let t = 0; t <= 60_000; t += 500) {
      s.at(t);
      s.probe();
      await s.f.tick();
    }
    expect(s.f.fenced).toBe(false);
    expect(s.stopped).toEqual([]);
  });

  it('cut off for afterMs: fences, stops the critical sandboxes (again each check), lifts when the control plane answers', async () => {
    const s = setup(2000);
    s.at(1000);
    s.probe();
    await s.f.tick(); // the apiserver answered at 1000
    s.apiserver(false);
    s.at(2500);
    await s.f.tick();
    expect(s.f.fenced).toBe(false); // 1500 ms: not yet
    s.at(3000);
    await s.f.tick();
    expect(s.f.fenced).toBe(true);
    expect(s.stopped).toEqual(['s1']);
    expect(s.fences).toHaveLength(1);
    expect(s.fences[0]).toMatch(/node worker-1 is fenced: cut off from the control plane \(no heartbeat probe for 2000 ms, apiserver unreachable for 2000 ms\)/);
    // a sandbox that started meanwhile is stopped at the next check; the gate is not told twice
    s.sandboxes.set('s2', 'ns/upf-2');
    s.at(3500);
    await s.f.tick();
    expect(s.stopped).toEqual(['s1', 's2']);
    expect(s.fences).toHaveLength(1);
    // the apiserver answers again: lifted
    s.apiserver(true);
    s.at(4000);
    await s.f.tick();
    expect(s.f.fenced).toBe(false);
    expect(s.fences).toEqual([s.fences[0], undefined]);
  });

  it('a stalled process (a frozen node thawed) does not fence on its first checks: the windows restart', async () => {
    const s = setup(2000);
    s.at(0);
    await s.f.tick();
    // frozen for 30 s: no check ran; thawed, the apiserver check fails once (the machine busy)
    s.apiserver(false);
    s.at(30_000);
    await s.f.tick();
    expect(s.f.fenced).toBe(false);
    s.at(31_500);
    await s.f.tick();
    expect(s.f.fenced).toBe(false);
    // still cut off a full window after the stall: now it fences
    s.at(32_000);
    await s.f.tick();
    expect(s.f.fenced).toBe(true);
  });

  it('is off by default and bounds its durations, naming the field', () => {
    expect(NodeAgentConfigSchema.parse({}).fencing).toEqual({ enabled: false, afterMs: 5000, checkMs: 500 });
    expect(() => NodeAgentConfigSchema.parse({ fencing: { enabled: true, afterMs: 10 } })).toThrow(/afterMs/);
    expect(() => NodeAgentConfigSchema.parse({ fencing: { checkMs: 3e9 } })).toThrow(/checkMs/);
  });
});

describe('the pacing gate of a fenced node', () => {
  it('refuses critical pods (waiting ones too) and admits the others; lifted, admits critical pods again', async () => {
    const gate = new PacingGate({ config: { policy: { type: 'vanilla' } } });
    gate.fence('node n is fenced: cut off');
    await expect(gate.acquire({ key: 'ns/upf', criticality: 'high' })).rejects.toThrow(/critical pod ns\/upf not started: node n is fenced/);
    await expect(gate.acquire({ key: 'ns/web', criticality: 'low' })).resolves.toBeDefined();
    const err = await gate.acquire({ key: 'ns/upf', criticality: 'high' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PacingRejection);
    expect((err as PacingRejection).code).toBe('UNAVAILABLE');
    gate.fence(undefined);
    await expect(gate.acquire({ key: 'ns/upf', criticality: 'high' })).resolves.toBeDefined();
    gate.close();
  });
});
