/**
 * Waiting for a condition by polling it: returns at the first success (not a sleep used as
 * synchronisation), fails with what was awaited, the last error and an explanation.
 */
import { setTimeout as sleep } from 'node:timers/promises';

export class TimeoutError extends Error {}

/** Thrown from a pollUntil check to stop polling at once (e.g. the awaited process died). */
export class FatalError extends Error {}

/**
 * Polls `check` until it returns a truthy value or the deadline passes. `explain` adds context
 * (typically a log tail) to the error. Not a sleep-as-synchronisation: it returns at the first success.
 */
export async function pollUntil<T>(
  what: string,
  check: () => Promise<T | undefined | false> | T | undefined | false,
  opts: { timeoutMs: number; intervalMs?: number; explain?: () => string },
): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let lastErr: unknown;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (err) {
      if (err instanceof FatalError) throw err;
      lastErr = err;
    }
    if (Date.now() > deadline) {
      const extra = opts.explain ? `\n${opts.explain()}` : '';
      const why = lastErr ? ` (last error: ${(lastErr as Error).message})` : '';
      throw new TimeoutError(`timed out after ${opts.timeoutMs} ms waiting for ${what}${why}${extra}`);
    }
    await sleep(opts.intervalMs ?? 200);
  }
}

