/**
 * The critical-recovery SLO of UlyssesConfig (`spec.slo`): how long a critical pod may be down,
 * from the NoExecute taint of its node (or its deletion) until its replacement is Ready and in an
 * EndpointSlice of its Service. Measured by the controller manager (controller-manager/recovery-slo.ts),
 * which records an Event on the owner when a recovery exceeds it and reports the last recoveries in
 * `status.components.controller-manager.recoveries` (printed by `ulysses status`).
 *
 *   spec:
 *     slo:
 *       criticalRecoverySeconds: 5              # every namespace; absent: no SLO (measured, never missed)
 *       namespaces:
 *         ulysses-critical: { criticalRecoverySeconds: 2 }
 */
import { z } from 'zod';

/** Upper bound of an SLO (the CRD enforces the same). */
export const MAX_SLO_SECONDS = 3600;

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

const Seconds = z.number().positive().max(MAX_SLO_SECONDS);

export const SloConfigSchema = z
  .object({
    criticalRecoverySeconds: Seconds.optional(),
    namespaces: z
      .record(
        z.string().max(63).regex(DNS_LABEL, 'namespace names are DNS labels (e.g. ulysses-critical)'),
        z.object({ criticalRecoverySeconds: Seconds }).strict(),
      )
      .default({}),
  })
  .strict();
export type SloConfig = z.output<typeof SloConfigSchema>;

/** The SLO of a namespace in seconds: its override, else the default, else undefined (none). */
export function sloSecondsFor(cfg: SloConfig | undefined, namespace: string): number | undefined {
  return cfg?.namespaces[namespace]?.criticalRecoverySeconds ?? cfg?.criticalRecoverySeconds;
}

/** One finished recovery as reported in UlyssesConfig status (newest first, bounded). */
export interface RecoveryRecord {
  namespace: string;
  /** "Deployment/prio", "ReplicaSet/x", "StatefulSet/db" */
  owner: string;
  /** the pod that was lost and the one that replaced it */
  pod: string;
  replacement: string;
  /** "taint <key>" or "deleted" */
  cause: string;
  seconds: number;
  sloSeconds: number | null;
  missed: boolean;
  /** endpointslice: the replacement Ready and in an EndpointSlice; ready: no Service selects it */
  until: 'endpointslice' | 'ready';
  finishedAt: string;
}

/** How many finished recoveries the controller manager keeps in its status entry. */
export const RECOVERY_STATUS_ENTRIES = 10;

/** "critical-recovery default 5s, ulysses-critical 2s" (what `ulysses status` shows). */
export function describeSlo(cfg: SloConfig): string {
  const parts = [cfg.criticalRecoverySeconds !== undefined ? `default ${cfg.criticalRecoverySeconds}s` : 'default none'];
  for (const [ns, v] of Object.entries(cfg.namespaces ?? {})) parts.push(`${ns} ${v.criticalRecoverySeconds}s`);
  return `critical-recovery ${parts.join(', ')}`;
}
