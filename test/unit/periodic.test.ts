/** core/periodic.ts on fake timers: never overlapping, timed from the end of a run, errors reported, stop stops. */
import { describe, expect, it, vi } from 'vitest';
import { runPeriodically } from '../../core/periodic.ts';

describe('runPeriodically', () => {
  it('runs again everyMs after the previous run ended, reports a throwing run and goes on, and stops', async () => {
    vi.useFakeTimers();
    try {
      const starts: number[] = [];
      const errors: string[] = [];
      let n = 0;
      const p = runPeriodically(async () => {
        starts.push(Date.now());
        n++;
        if (n === 2) throw new Error('boom');
        await new Promise((r) => setTimeout(r, 300)); // a slow run
      }, 1000, { onError: (e) => errors.push(e.message) });
      const t0 = starts[0]!;
      await vi.advanceTimersByTimeAsync(1300);
      expect(starts.map((t) => t - t0)).toEqual([0, 1300]);
      await vi.advanceTimersByTimeAsync(1000);
      expect(starts.map((t) => t - t0)).toEqual([0, 1300, 2300]);
      expect(errors).toEqual(['boom']);
      p.stop();
      await vi.advanceTimersByTimeAsync(10_000);
      expect(starts).toHaveLength(3);
    } finally {
      vi.useRealTimers();
    }
  });
});
