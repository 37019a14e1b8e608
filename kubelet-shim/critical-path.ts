/**
 * Critical-path tracking of the CRI proxy (both implementations): from a high-priority pod's
 * RunPodSandbox to its first StartContainer, through the ids containerd hands out (sandbox id ->
 * CreateContainer -> container id -> StartContainer). When the first container of a critical pod has
 * started, the gate is told (`highDone`: low-priority sandboxes held by `holdLowsDuringHighMs`
 * resume) and the pod's creation latency seen by the node — RunPodSandbox arrival to StartContainer
 * answered — is reported (`criticalCreation`: the feedback of the `adaptive` policy).
 *
 * Decoding is only needed while something is tracked: {@link wantsCreate}/{@link wantsStart} let
 * the proxies skip decoding CreateContainer/StartContainer the rest of the time.
 */
import type { Logger } from 'pino';
import type { PacingGate } from './pacing.ts';

/** How long the proxy remembers a critical pod's sandbox/containers while waiting for its start. */
export const CRITICAL_TRACKING_MS = 60_000;

interface Tracked {
  readonly key: string;
  /** performance.now() when the pod's RunPodSandbox reached the proxy. */
  readonly since: number;
  /** Date.now() when this id was remembered (expiry). */
  readonly at: number;
}

export class CriticalPathTracker {
  private readonly sandboxes = new Map<string, Tracked>();
  private readonly containers = new Map<string, Tracked>();

  constructor(
    private readonly gate: () => PacingGate,
    private readonly log?: Logger,
  ) {}

  /** True while CreateContainer requests must be decoded (a critical sandbox awaits its container). */
  get wantsCreate(): boolean {
    return this.sandboxes.size > 0;
  }

  /** True while StartContainer requests must be decoded. */
  get wantsStart(): boolean {
    return this.containers.size > 0;
  }

  /**
   * A high-priority RunPodSandbox (arrived at `since`) was answered: follow its sandbox id, or, when
   * it failed, stop holding low-priority sandboxes for it.
   */
  sandboxDone(key: string, since: number, sandboxId: string | undefined): void {
    if (sandboxId) this.remember(this.sandboxes, sandboxId, key, since);
    else this.gate().highDone(key);
  }

  /** The tracked pod of a CreateContainer for `sandboxId`, if any. */
  createFor(sandboxId: unknown): Tracked | undefined {
    return typeof sandboxId === 'string' ? this.sandboxes.get(sandboxId) : undefined;
  }

  /** CreateContainer of a tracked pod answered: follow the container, or give up on failure. */
  containerCreated(t: Tracked, containerId: string | undefined): void {
    if (containerId) this.remember(this.containers, containerId, t.key, t.since);
    else this.finish(t, false);
  }

  /** The tracked pod of a StartContainer for `containerId`, if any. */
  startFor(containerId: unknown): Tracked | undefined {
    return typeof containerId === 'string' ? this.containers.get(containerId) : undefined;
  }

  /** StartContainer of a tracked pod answered (`ok`: without error): the critical path is over. */
  finish(t: Tracked, ok: boolean): void {
    for (const map of [this.sandboxes, this.containers]) {
      for (const [id, v] of map) if (v.key === t.key) map.delete(id);
    }
    const gate = this.gate();
    gate.highDone(t.key);
    const latencyMs = performance.now() - t.since;
    if (ok) gate.criticalCreation(t.key, latencyMs);
    this.log?.info({ kind: 'Pod', key: t.key, ok, creationMs: Math.round(latencyMs) }, 'critical pod container started: low-priority sandboxes resume');
  }

  private remember(map: Map<string, Tracked>, id: string, key: string, since: number): void {
    const now = Date.now();
    for (const [k, v] of map) if (now - v.at > CRITICAL_TRACKING_MS) map.delete(k);
    map.set(id, { key, since, at: now });
  }
}
