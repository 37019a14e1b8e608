/**
 * CriticalPathHold (controller-manager/critical-path-hold.ts): which pod events hold the low-priority
 * periodic work, for how long, and that a WorkerPool in periodic mode serves only high keys meanwhile.
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { V1Pod } from '@kubernetes/client-node';
import { CriticalPathHold, TAINT_WINDOW_MS } from '../../controller-manager/critical-path-hold.ts';
import { FakeClock, WorkerPool } from '../../controller-manager/queue/index.ts';

const RS = 'rs-uid-1';
function pod(name: string, o: { ready?: boolean; deleting?: boolean; phase?: string; owner?: string } = {}): V1Pod {
  return {
    metadata: {
      name,
      namespace: 'crit',
      ...(o.deleting ? { deletionTimestamp: new Date(0) } : {}),
      ...(o.owner ? { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: o.owner, controller: true }] } : {}),
    },
    status: { phase: o.phase ?? 'Running', conditions: [{ type: 'Ready', status: o.ready ? 'True' : 'False' }] },
  };
}

describe('CriticalPathHold', () => {
  it('holds from a critical pod not Ready until it is Ready', () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    expect(h.active()).toBe(false);
    h.podChanged('crit/a', pod('a'), true);
    expect(h.active()).toBe(true);
    h.podChanged('crit/a', pod('a', { ready: true }), true);
    expect(h.active()).toBe(false);
  });

  it('low pods, terminal pods and a zero maxHoldMs never hold', () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    h.podChanged('load/x', pod('x'), false);
    h.podChanged('crit/done', pod('done', { phase: 'Succeeded' }), true);
    expect(h.active()).toBe(false);
    h.podChanged('crit/a', pod('a'), true);
    h.setMaxHoldMs(0);
    expect(h.active()).toBe(false);
  });

  it('a critical pod holds at most maxHoldMs, once per way to Ready', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    h.podChanged('crit/stuck', pod('stuck'), true);
    await clock.advance(999);
    expect(h.active()).toBe(true);
    await clock.advance(1);
    expect(h.active()).toBe(false);
    // further updates of the same not-Ready pod do not restart its hold
    h.podChanged('crit/stuck', pod('stuck'), true);
    expect(h.active()).toBe(false);
    // once Ready and not Ready again (a new way to Ready), it holds again
    h.podChanged('crit/stuck', pod('stuck', { ready: true }), true);
    h.podChanged('crit/stuck', pod('stuck'), true);
    expect(h.active()).toBe(true);
  });

  it('an evicted critical pod holds until its owner’s replacement appears, which then holds until Ready', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    h.podChanged('crit/old', pod('old', { ready: true, owner: RS }), true);
    expect(h.active()).toBe(false);
    h.podChanged('crit/old', pod('old', { ready: true, owner: RS, deleting: true }), true);
    expect(h.active()).toBe(true);
    await clock.advance(300);
    h.podChanged('crit/new', pod('new', { owner: RS }), true);
    await clock.advance(600); // 900 ms after the eviction: one uninterrupted hold, still within maxHoldMs
    expect(h.active()).toBe(true);
    h.podChanged('crit/new', pod('new', { owner: RS, ready: true }), true);
    expect(h.active()).toBe(false);
    // repeated updates of the terminating pod do not open a second replacement hold
    h.podChanged('crit/old', pod('old', { ready: true, owner: RS, deleting: true }), true);
    expect(h.active()).toBe(false);
  });

  it('a deleted critical pod without a replacement holds at most maxHoldMs; a bare pod never waits for one', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 500, clock });
    h.podChanged('crit/bare', pod('bare', { ready: true, deleting: true }), true);
    expect(h.active()).toBe(false);
    h.podChanged('crit/owned', pod('owned', { ready: true, owner: RS, deleting: true }), true);
    h.podDeleted('crit/owned');
    expect(h.active()).toBe(true);
    await clock.advance(500);
    expect(h.active()).toBe(false);
  });
});

describe('WorkerPool periodic mode with a low hold', () => {
  it('serves only high keys while held, counts held slots, and resumes the low keys in order after', async () => {
    const clock = new FakeClock(1000);
    let held = true;
    const served: string[] = [];
    const pool = new WorkerPool<string>({
      name: 'hold-test',
      clock,
      logger: pino({ level: 'silent' }),
      mode: 'multi-priority-periodic',
      workers: 2,
      highPriorityWorkers: 0,
      periodMs: 100,
      lowHold: () => held,
      reconcile: async (key) => {
        served.push(key);
      },
    });
    for (let i = 0; i < 3; i++) pool.queue.add(`low-${i}`, 'low');
    pool.start();
    await clock.advance(200); // ticks at +0, 50, 100, 150, 200: all held
    expect(served).toEqual([]);
    pool.queue.add('crit', 'high');
    await clock.advance(50);
    expect(served).toEqual(['crit']);
    expect(pool.stats().heldSlots).toBe(5);
    held = false;
    await clock.advance(150);
    expect(served).toEqual(['crit', 'low-0', 'low-1', 'low-2']);
    await pool.stop();
  });
});

describe('CriticalPathHold.podEvicting', () => {
  it('starts the replacement hold before the deletion is seen, and the deletion does not start a second one', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    h.podChanged('crit/old', pod('old', { ready: true, owner: RS }), true);
    h.podEvicting('crit/old', pod('old', { ready: true, owner: RS }));
    h.podEvicting('crit/old', pod('old', { ready: true, owner: RS })); // again, right before the eviction
    expect(h.active()).toBe(true);
    await clock.advance(600);
    h.podChanged('crit/old', pod('old', { ready: true, owner: RS, deleting: true }), true);
    await clock.advance(400); // 1000 ms after the eviction began: the deletion did not extend the hold
    expect(h.active()).toBe(false);
  });
});

describe('CriticalPathHold duty cycle', () => {
  it('a stream of critical pods starting one after the other holds at most maxHoldMs in a row, then pauses as long', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    const active: boolean[] = [];
    // a new critical pod starts every 200 ms and never gets Ready within the test
    for (let t = 0; t < 3000; t += 100) {
      if (t % 200 === 0) h.podChanged(`crit/p${t}`, pod(`p${t}`), true);
      active.push(h.active());
      await clock.advance(100);
    }
    // held 0..900 ms, paused 1000..1900 ms, held again from 2000 ms
    expect(active.slice(0, 10).every(Boolean)).toBe(true);
    expect(active.slice(10, 20).some(Boolean)).toBe(false);
    expect(active.slice(20, 30).every(Boolean)).toBe(true);
  });
});

describe('CriticalPathHold taint window', () => {
  it('a new NoExecute taint holds the low-priority work for TAINT_WINDOW_MS (never longer than maxHoldMs), extended by the next taint', async () => {
    const clock = new FakeClock(0);
    const h = new CriticalPathHold({ maxHoldMs: 1000, clock });
    h.nodeTainted();
    expect(h.active()).toBe(true);
    await clock.advance(TAINT_WINDOW_MS - 50);
    h.nodeTainted(); // the next node of the burst
    await clock.advance(100);
    expect(h.active()).toBe(true);
    await clock.advance(TAINT_WINDOW_MS);
    expect(h.active()).toBe(false);
    const short = new CriticalPathHold({ maxHoldMs: 50, clock });
    short.nodeTainted();
    await clock.advance(50);
    expect(short.active()).toBe(false);
    const off = new CriticalPathHold({ maxHoldMs: 0, clock });
    off.nodeTainted();
    expect(off.active()).toBe(false);
  });
});
