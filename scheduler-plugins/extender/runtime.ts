/**
 * The scheduler extender's section of UlyssesConfig (`spec.schedulerExtender`), applied live
 * (thesis §5.3.5): plugins on/off over the file configuration. A plugin switched off stops
 * filtering and scoring at once (ExtenderServer.setConfig); reservations already recorded stay.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { z } from 'zod';
import type { Logger } from '../../core/logging.ts';
import { RuntimeConfigWatcher } from '../../core/runtime-config.ts';
import type { ExtenderConfig } from './config.ts';

export const ExtenderRuntimeSchema = z
  .object({
    plugins: z.object({ assurance: z.boolean().optional(), realtime: z.boolean().optional(), tdma: z.boolean().optional() }).strict().default({}),
  })
  .strict();
export type ExtenderRuntime = z.output<typeof ExtenderRuntimeSchema>;

export function describePlugins(p: ExtenderConfig['plugins']): string {
  return (Object.entries(p) as Array<[string, boolean]>).map(([k, v]) => `${k}=${v ? 'on' : 'off'}`).join(',');
}

/** The file configuration `base` with the runtime section's plugin switches over it. */
export function withRuntime(base: ExtenderConfig, cfg: ExtenderRuntime): ExtenderConfig {
  const plugins = { ...base.plugins, ...Object.fromEntries(Object.entries(cfg.plugins).filter(([, v]) => v !== undefined)) };
  return { ...base, plugins };
}

/**
 * Watches spec.schedulerExtender; `apply` is the extender's own (server config, assurance updater,
 * rescheduler), called with the file configuration `base()` plus the section.
 */
export function extenderRuntimeWatcher(
  kc: KubeConfig,
  apply: (cfg: ExtenderConfig) => Promise<void>,
  base: () => ExtenderConfig,
  log?: Logger,
): RuntimeConfigWatcher<typeof ExtenderRuntimeSchema> {
  return new RuntimeConfigWatcher({
    kc,
    statusKey: 'scheduler-extender',
    field: 'schedulerExtender',
    schema: ExtenderRuntimeSchema,
    apply: async (section) => {
      const cfg = withRuntime(base(), section);
      await apply(cfg);
      return describePlugins(cfg.plugins);
    },
    log,
  });
}
