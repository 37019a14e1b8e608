/**
 * The kubelet-shim's health, from its own end: every `checkMs` a CRI `Version` call goes through the
 * shim's own socket, the way the kubelet's calls come in, and on to the runtime.
 * - *serving*: the call was answered within `timeoutMs`, with the runtime's version or the shim's
 *   own UNAVAILABLE when containerd is down. This is what the systemd watchdog is pinged on
 *   (systemd-notify.ts): a hung event loop, a wedged proxy or a lost socket stop the pings, a
 *   runtime outage does not (restarting the shim would not bring containerd back).
 * - *ready*: the call succeeded, so the kubelet's path to the runtime works end to end (`/readyz`).
 * The fallback guard (fallback.ts) asks the same question from outside the process.
 */
import { z } from 'zod';
import type { ShimMetrics } from './metrics.ts';
import type { Logger } from '../core/logging.ts';
import { CriClient } from './cri-client.ts';
import { socketIdentity } from './socket-path.ts';
import { runPeriodically, type Periodic } from '../core/periodic.ts';

export const HealthConfigSchema = z
  .object({
    /** Period of the self-check. */
    checkMs: z.number().int().min(100).max(60_000).default(1000),
    /** A self-check not answered within this is a failure. */
    timeoutMs: z.number().int().min(100).max(60_000).default(2000),
  })
  .strict();
export type HealthConfig = z.output<typeof HealthConfigSchema>;

export type CriProbeResult = 'ok' | 'error' | 'timeout';

/**
 * One CRI `Version` call through `client` with a deadline: `ok` (answered), `error` (answered with a
 * gRPC error, or refused), `timeout` (no answer within `timeoutMs`).
 */
export async function probeCri(client: CriClient, timeoutMs: number): Promise<{ result: CriProbeResult; detail?: string }> {
  try {
    await client.call('Version', { version: 'v1' }, { deadline: Date.now() + timeoutMs });
    return { result: 'ok' };
  } catch (err) {
    const e = err as { code?: number; details?: string; message: string };
    // grpc-js status 4: DEADLINE_EXCEEDED
    return { result: e.code === 4 ? 'timeout' : 'error', detail: (e.details ?? e.message).slice(0, 300) };
  }
}

/** What the self-check records (metrics.ts ShimMetrics). */
export type ShimHealthMetrics = Pick<ShimMetrics, 'selfChecks' | 'ready'>;

export class ShimHealth {
  private readonly client: CriClient;
  private loop: Periodic | undefined;
  private lastAnsweredAt: number | undefined;
  private last: { result: CriProbeResult; detail?: string; at: number } | undefined;
  private readonly identity: string | undefined;
  private socketLost = false;

  /**
   * `onSocketLost`: the socket path no longer holds the socket this shim bound (the fallback guard
   * replaced it, or someone removed it); the kubelet cannot reach this process any more.
   */
  constructor(
    private readonly o: { socket: string; config: HealthConfig; log: Logger; metrics?: ShimHealthMetrics; now?: () => number; onSocketLost?: () => void },
  ) {
    this.client = new CriClient(o.socket);
    this.identity = socketIdentity(o.socket);
  }

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  /** Runs one self-check now (also the period's work). */
  async check(): Promise<CriProbeResult> {
    if (this.socketLost || (this.identity !== undefined && socketIdentity(this.o.socket) !== this.identity)) {
      // a call would go to whatever is at the path now (the guard's symlink reaches containerd)
      if (!this.socketLost) {
        this.socketLost = true;
        this.o.log.error({ socket: this.o.socket }, 'the socket path no longer holds this shim\'s socket: the kubelet cannot reach it');
        this.o.metrics?.ready.set(0);
        this.o.onSocketLost?.();
      }
      return 'timeout';
    }
    const r = await probeCri(this.client, this.o.config.timeoutMs);
    const at = this.now();
    const was = this.last?.result;
    this.last = { ...r, at };
    if (r.result !== 'timeout') this.lastAnsweredAt = at;
    this.o.metrics?.selfChecks.inc({ result: r.result });
    this.o.metrics?.ready.set(r.result === 'ok' ? 1 : 0);
    if (was !== r.result && (was !== undefined || r.result !== 'ok')) {
      const line = { result: r.result, was, detail: r.detail, socket: this.o.socket };
      if (r.result === 'ok') this.o.log.info(line, 'self-check: the runtime answers through the shim');
      else this.o.log.warn(line, r.result === 'timeout' ? 'self-check: the shim did not answer its own call' : 'self-check: the runtime does not answer through the shim');
    }
    return r.result;
  }

  start(): void {
    this.loop ??= runPeriodically(() => this.check(), this.o.config.checkMs);
  }

  /** Answered within the timeout recently enough (the last period and its timeout): the watchdog's condition. */
  serving(): boolean {
    return !this.socketLost && this.lastAnsweredAt !== undefined && this.now() - this.lastAnsweredAt <= this.o.config.checkMs + this.o.config.timeoutMs;
  }

  /** `/readyz`: the last check reached the runtime, recently. */
  readiness(): { ready: boolean; detail: string } {
    const l = this.last;
    if (this.socketLost) return { ready: false, detail: 'the socket path no longer holds this shim\'s socket' };
    if (!l) return { ready: false, detail: 'no self-check yet' };
    const age = this.now() - l.at;
    if (age > this.o.config.checkMs + this.o.config.timeoutMs) return { ready: false, detail: `last self-check ${age} ms ago` };
    if (l.result === 'ok') return { ready: true, detail: 'the runtime answers through the shim' };
    return { ready: false, detail: `${l.result}: ${l.detail ?? ''}`.trim() };
  }

  stop(): void {
    this.loop?.stop();
    this.client.close();
  }
}
