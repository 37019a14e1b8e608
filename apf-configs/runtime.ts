/**
 * The APF exemption as a runtime toggle (thesis §5.3.5): `spec.apf` of UlyssesConfig/default
 * ({enabled, exemptNamespaces, matchingPrecedence?}) is applied live — FlowSchema server-side applied
 * when enabled, deleted when disabled. Hosted by the (leader-elected) controller manager.
 */
import type { KubeAccess } from '../core/kube.ts';
import { z } from 'zod';
import type { Logger } from '../core/logging.ts';
import { RuntimeConfigWatcher } from '../core/runtime-config.ts';
import { applyApfExemption, removeApfExemption } from './apply.ts';
import { CriticalNamespaceOptionsSchema, DEFAULT_CRITICAL_NAMESPACES } from './flowschemas.ts';

const namespacesSchema = CriticalNamespaceOptionsSchema.shape.namespaces;

/** Namespaces are checked only when enabled: switching off always works, even after a bad list. */
export const ApfRuntimeSchema = z
  .object({
    enabled: z.boolean().default(false),
    exemptNamespaces: z.array(z.string()).default([...DEFAULT_CRITICAL_NAMESPACES]),
    matchingPrecedence: CriticalNamespaceOptionsSchema.shape.matchingPrecedence,
  })
  .strict()
  .superRefine((c, ctx) => {
    if (!c.enabled) return;
    const r = namespacesSchema.safeParse(c.exemptNamespaces);
    if (!r.success) for (const i of r.error.issues) ctx.addIssue({ code: 'custom', message: i.message, path: ['exemptNamespaces', ...i.path] });
  });
export type ApfRuntime = z.output<typeof ApfRuntimeSchema>;

/** Applies one `spec.apf` section; returns the mode now in effect. */
export async function applyApfRuntime(kc: KubeAccess, cfg: ApfRuntime): Promise<string> {
  if (!cfg.enabled) {
    await removeApfExemption(kc);
    return 'off';
  }
  // a status condition the apiserver holds back (its per-name rate limit: statusPending) does not
  // hold back the exemption, which it classifies by as soon as it digests the spec
  await applyApfExemption(kc, { namespaces: cfg.exemptNamespaces, matchingPrecedence: cfg.matchingPrecedence, waitDigestedMs: 5000 });
  return `exempt ${cfg.exemptNamespaces.join(',')}`;
}

export function apfRuntimeWatcher(kc: KubeAccess, log?: Logger): RuntimeConfigWatcher<typeof ApfRuntimeSchema> {
  return new RuntimeConfigWatcher({ kc, statusKey: 'apf', field: 'apf', schema: ApfRuntimeSchema, apply: (cfg) => applyApfRuntime(kc, cfg), log });
}
