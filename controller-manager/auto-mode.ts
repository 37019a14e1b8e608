/**
 * The `auto` serving mode (issue 3): a controller runs `vanilla` while the cluster has no
 * high-criticality pod, and `multi-priority-periodic` from the moment the first one exists, so a
 * cluster without critical workloads pays nothing for the periodic pacing (thesis §5.3.1: the
 * periodic workers exist to protect the critical pods' orchestration).
 *
 * Hysteresis: going back to vanilla waits `holdMs` (default 30 s) after the last high pod is gone.
 * A failover deletes the critical pod and creates its replacement a moment later; without the hold
 * the controllers would switch to vanilla exactly during the burst the periodic mode is for.
 * Pods in phase Succeeded/Failed do not count.
 *
 * Pure state machine over pod events and a Clock (unit-tested with FakeClock); the manager feeds
 * it from the shared CriticalityIndex and applies `onChange` with WorkerPool.setMode.
 */
import type { Clock, Timer } from './queue/index.ts';

export const AUTO_HOLD_MS = 30_000;

export interface AutoModeOptions {
  holdMs?: number;
  clock: Clock;
  /** true: a high pod exists (switch to periodic); false: none for holdMs (back to vanilla) */
  onChange: (critical: boolean) => void;
}

export class AutoModeSwitch {
  private readonly high = new Set<string>();
  private critical = false;
  private timer: Timer | undefined;
  readonly holdMs: number;

  constructor(private readonly o: AutoModeOptions) {
    this.holdMs = o.holdMs ?? AUTO_HOLD_MS;
  }

  /** Is the cluster in the critical regime (periodic serving)? */
  get active(): boolean {
    return this.critical;
  }

  get highPods(): number {
    return this.high.size;
  }

  /** A pod was added or changed; `high` is its current level == high (and not terminal). */
  podChanged(key: string, high: boolean): void {
    if (high) this.high.add(key);
    else this.high.delete(key);
    this.evaluate();
  }

  podDeleted(key: string): void {
    this.high.delete(key);
    this.evaluate();
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = undefined;
  }

  private evaluate(): void {
    if (this.high.size > 0) {
      this.timer?.cancel();
      this.timer = undefined;
      if (!this.critical) {
        this.critical = true;
        this.o.onChange(true);
      }
      return;
    }
    if (!this.critical || this.timer) return;
    this.timer = this.o.clock.setTimer(() => {
      this.timer = undefined;
      if (this.high.size === 0 && this.critical) {
        this.critical = false;
        this.o.onChange(false);
      }
    }, this.holdMs);
  }
}
