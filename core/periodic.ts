/**
 * A check run every `everyMs`, never overlapping itself: the next run is timed from the end of the
 * previous one. `keepAlive` holds the process open (a process whose only work is this loop); false
 * lets it exit when nothing else runs. A throwing run is reported to `onError` and the loop goes on.
 */
export interface Periodic {
  stop(): void;
}

export function runPeriodically(run: () => Promise<unknown>, everyMs: number, o: { keepAlive?: boolean; onError?: (err: Error) => void } = {}): Periodic {
  let running = true;
  let timer: NodeJS.Timeout | undefined;
  const loop = async () => {
    if (!running) return;
    try {
      await run();
    } catch (err) {
      o.onError?.(err as Error);
    }
    if (!running) return;
    timer = setTimeout(() => void loop(), everyMs);
    if (!o.keepAlive) timer.unref();
  };
  void loop();
  return {
    stop() {
      running = false;
      if (timer) clearTimeout(timer);
    },
  };
}
