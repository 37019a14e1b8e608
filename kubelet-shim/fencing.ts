/**
 * Optional self-fencing of a node cut off from the control plane (issue 39; controller-manager/README.md
 * "Node failure detection", "Self-fencing"). When the controller manager's leader fails a node, it
 * evicts the node's critical pods and their replacements start elsewhere, while a node that is only
 * partitioned keeps running the old ones: its endpoints leave the EndpointSlices, but whatever the
 * old pod does outside Services (a UPF holding PFCP sessions, a singleton writing to storage) goes on
 * twice. With fencing on, the node agent stops its node's critical pods itself once the node is cut
 * off for `afterMs`:
 * - no heartbeat probe of the decider for `afterMs`, **and**
 * - the apiserver unreachable for `afterMs` (any HTTP answer to GET /readyz counts as reachable).
 * Both, so that a decider's restart or leader change (probes pause for up to a Lease duration, the
 * apiserver answers) never fences. A check that runs late (this process stalled: a GC pause, a
 * SIGSTOP, a frozen node thawed) restarts both windows: silence counts only while it was watching. Fenced, it stops the READY sandboxes labelled
 * `ulysses.io/criticality: high` (CRI StopPodSandbox: their containers end) and the pacing gate
 * refuses their RunPodSandbox; once a probe or the apiserver answers again the gate opens and the
 * kubelet starts them again (or deletes them, when the decider evicted them meanwhile).
 * The trade-off, why it is off by default: a control plane down everywhere (every apiserver and the
 * decider) cuts every node off, and every node then stops its critical pods although they are fine.
 */
import { z } from 'zod';
import { Counter, Gauge, type Registry } from 'prom-client';
import { CRITICALITY_LABEL } from '../core/criticality.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import type { Logger } from '../core/logging.ts';

export const FencingConfigSchema = z
  .object({
    /** Stop this node's critical pods when it is cut off (default off: see the header's trade-off). */
    enabled: z.boolean().default(false),
    /** Cut off this long (no probe and no apiserver) before fencing: longer than the decider's window. */
    afterMs: z.number().int().min(1000).max(600_000).default(5000),
    /** How often the apiserver is asked (each attempt bounded by this period). */
    checkMs: z.number().int().min(100).max(60_000).default(500),
  })
  .strict();
export type FencingConfig = z.output<typeof FencingConfigSchema>;

/** Whether the node is cut off at `now` (pure: the decision of the header). */
export function cutOff(now: number, lastProbeAt: number, lastApiAt: number, afterMs: number): boolean {
  return now - lastProbeAt >= afterMs && now - lastApiAt >= afterMs;
}

/** What the fencer needs of the runtime: the READY critical sandboxes, and stopping one. */
export interface FencingRuntime {
  criticalSandboxes(): Promise<{ id: string; pod: string }[]>;
  stopSandbox(id: string): Promise<void>;
}

/** A {@link FencingRuntime} on a CRI client (ListPodSandbox with a label filter, StopPodSandbox). */
export function criRuntime(cri: { call<T = unknown>(name: string, request?: object, opts?: { deadline?: number }): Promise<T> }, timeoutMs: number): FencingRuntime {
  type Sandboxes = { items?: { id: string; metadata?: { name?: string; namespace?: string } }[] };
  return {
    async criticalSandboxes() {
      const r = await cri.call<Sandboxes>('ListPodSandbox', { filter: { state: { state: 'SANDBOX_READY' }, label_selector: { [CRITICALITY_LABEL]: 'high' } } }, { deadline: Date.now() + timeoutMs });
      return (r.items ?? []).map((s) => ({ id: s.id, pod: `${s.metadata?.namespace ?? ''}/${s.metadata?.name ?? ''}` }));
    },
    async stopSandbox(id) {
      await cri.call('StopPodSandbox', { pod_sandbox_id: id }, { deadline: Date.now() + timeoutMs });
    },
  };
}

function fencingMetrics(registry: Registry): { fenced: Gauge; stopped: Counter; checks: Counter<'apiserver'> } {
  return {
    checks: registeredMetric('ulysses_node_agent_fencing_checks_total', () => new Counter({ name: 'ulysses_node_agent_fencing_checks_total', help: 'Self-fencing checks, by whether the apiserver answered (reachable, unreachable).', labelNames: ['apiserver'], registers: [registry] })),
    fenced: registeredMetric('ulysses_node_agent_fenced', () => new Gauge({ name: 'ulysses_node_agent_fenced', help: '1 while this node is fenced (cut off from the control plane: its critical pods stopped and refused).', registers: [registry] })),
    stopped: registeredMetric('ulysses_node_agent_fenced_sandboxes_total', () => new Counter({ name: 'ulysses_node_agent_fenced_sandboxes_total', help: 'Critical pod sandboxes the node agent stopped while fenced.', registers: [registry] })),
  };
}

export interface SelfFencerOptions {
  node: string;
  config: FencingConfig;
  log: Logger;
  runtime: FencingRuntime;
  /** Refuses (reason) or admits again (undefined) the critical pods' RunPodSandbox: PacingGate.fence. */
  gate: { fence(reason: string | undefined): void };
  /** When the node agent last answered a probe (ms, the same clock as `now`). */
  lastProbeAt: () => number;
  /** Resolves true when the apiserver answered (any HTTP status), false otherwise; bounded by the caller. */
  apiReachable: (timeoutMs: number) => Promise<boolean>;
  now?: () => number;
  registry?: Registry;
}

/** A check starting more than this many periods after the previous one: the process stalled meanwhile. */
export const LATE_CHECKS = 4;

export class SelfFencer {
  private lastApiAt: number;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private fencedSince: number | undefined;
  /** the last check's start; a later one past {@link LATE_CHECKS} periods means this process stalled */
  private lastTickAt: number | undefined;
  /** silence before this does not count (the start, a stall) */
  private watchingSince: number;
  private readonly metrics: ReturnType<typeof fencingMetrics>;

  constructor(private readonly o: SelfFencerOptions) {
    this.lastApiAt = this.now();
    this.watchingSince = this.lastApiAt;
    this.metrics = fencingMetrics(o.registry ?? metricsRegistry());
    this.metrics.fenced.set(0);
  }

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  get fenced(): boolean {
    return this.fencedSince !== undefined;
  }

  start(): void {
    this.o.log.warn({ node: this.o.node, afterMs: this.o.config.afterMs }, 'self-fencing on: this node stops its critical pods when cut off from the control plane (no probe and no apiserver) for afterMs');
    this.timer = setInterval(() => void this.tick(), this.o.config.checkMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One check (exported for tests): asks the apiserver, decides, fences or lifts. Never overlaps itself. */
  async tick(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const started = this.now();
      if (this.lastTickAt !== undefined && started - this.lastTickAt > LATE_CHECKS * this.o.config.checkMs) {
        this.watchingSince = started;
        this.o.log.warn({ lateMs: started - this.lastTickAt - this.o.config.checkMs }, 'fencing check ran late (this process stalled): the windows restart');
      }
      this.lastTickAt = started;
      const reachable = await this.o.apiReachable(this.o.config.checkMs).catch(() => false);
      if (reachable) this.lastApiAt = this.now();
      const now = this.now();
      const cut = cutOff(now, Math.max(this.o.lastProbeAt(), this.watchingSince), Math.max(this.lastApiAt, this.watchingSince), this.o.config.afterMs);
      if (cut) await this.fence(now);
      else if (this.fencedSince !== undefined) this.lift(now);
      this.metrics.checks.inc({ apiserver: reachable ? 'reachable' : 'unreachable' });
    } finally {
      this.running = false;
    }
  }

  private async fence(now: number): Promise<void> {
    if (this.fencedSince === undefined) {
      this.fencedSince = now;
      const reason = `node ${this.o.node} is fenced: cut off from the control plane (no heartbeat probe for ${now - this.o.lastProbeAt()} ms, apiserver unreachable for ${now - this.lastApiAt} ms)`;
      this.o.gate.fence(reason);
      this.metrics.fenced.set(1);
      this.o.log.error({ node: this.o.node, sinceProbeMs: now - this.o.lastProbeAt(), sinceApiMs: now - this.lastApiAt }, 'node cut off from the control plane: fencing, stopping its critical pods');
    }
    // every tick while fenced: a sandbox started meanwhile (before the gate closed) is stopped too
    let sandboxes: { id: string; pod: string }[];
    try {
      sandboxes = await this.o.runtime.criticalSandboxes();
    } catch (err) {
      this.o.log.error({ err: (err as Error).message }, 'fenced, but the runtime did not list the critical sandboxes: retried next check');
      return;
    }
    for (const s of sandboxes) {
      try {
        await this.o.runtime.stopSandbox(s.id);
        this.metrics.stopped.inc();
        this.o.log.warn({ pod: s.pod, sandbox: s.id }, 'fenced: critical pod sandbox stopped');
      } catch (err) {
        this.o.log.error({ pod: s.pod, sandbox: s.id, err: (err as Error).message }, 'fenced, but the sandbox did not stop: retried next check');
      }
    }
  }

  private lift(now: number): void {
    const since = this.fencedSince!;
    this.fencedSince = undefined;
    this.o.gate.fence(undefined);
    this.metrics.fenced.set(0);
    this.o.log.warn({ node: this.o.node, fencedMs: now - since }, 'control plane reachable again: fencing lifted, critical pods may start');
  }
}
