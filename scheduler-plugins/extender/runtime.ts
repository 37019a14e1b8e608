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
import type { ExtenderServer } from './server.ts';

export const ExtenderRuntimeSchema = z
  .object({
    plugins: z.object({ assurance: z.boolean().optional(), realtime: z.boolean().optional(), tdma: z.boolean().optional() }).strict().default({}),
  })
  .strict();
export type ExtenderRuntime = z.output<typeof ExtenderRuntimeSchema>;

export function describePlugins(p: ExtenderConfig['plugins']): string {
  return (Object.entries(p) as Array<[string, boolean]>).map(([k, v]) => `${k}=${v ? 'on' : 'off'}`).join(',');
}

/** Applies a section over `base` (the file configuration); returns "assurance=on,realtime=on,tdma=off". */
export function applyExtenderRuntime(server: ExtenderServer, base: ExtenderConfig, cfg: ExtenderRuntime): string {
  const plugins = { ...base.plugins, ...Object.fromEntries(Object.entries(cfg.plugins).filter(([, v]) => v !== undefined)) };
  server.setConfig({ ...server.config, plugins });
  return describePlugins(server.config.plugins);
}

export function extenderRuntimeWatcher(kc: KubeConfig, server: ExtenderServer, base: () => ExtenderConfig, log?: Logger): RuntimeConfigWatcher<typeof ExtenderRuntimeSchema> {
  return new RuntimeConfigWatcher({
    kc,
    statusKey: 'scheduler-extender',
    field: 'schedulerExtender',
    schema: ExtenderRuntimeSchema,
    apply: (cfg) => applyExtenderRuntime(server, base(), cfg),
    log,
  });
}
