/**
 * kubelet-shim configuration file (YAML or JSON), validated with zod; command-line flags of main.ts
 * override `listen`, `backend` and `metrics.port`. `pacing` can be changed at runtime: edit the
 * file and send SIGHUP (thesis §5.3.5: each modification can be enabled per component at runtime).
 *
 *   listen: /run/ulysses/kubelet-shim.sock
 *   backend: /run/containerd/containerd.sock
 *   pacing:
 *     policy: { type: exponential-decay, initialWaitMs: 700, factor: 0.5, resetAfterMs: 5000 }
 *     highMinInterArrivalMs: 100
 *   metrics: { port: 10260 }
 *   nodeAgent: { address: 10.0.0.5, port: 10362 }   # heartbeat responder (node-agent.ts)
 *   health: { checkMs: 1000, timeoutMs: 2000 }       # self-check: /readyz, systemd watchdog (health.ts)
 *   fallback: { afterMs: 5000, returnAfterMs: 30000 } # the fallback guard's (fallback.ts)
 */
import { z } from 'zod';
import { loadConfigFile, validateConfig } from '../core/config.ts';
import { PacingConfigSchema } from './pacing.ts';
import { MAX_MESSAGE_BYTES } from './proxy.ts';
import { PROXY_IMPLEMENTATIONS } from './proxies.ts';
import { NodeAgentConfigSchema } from './node-agent.ts';
import { HealthConfigSchema } from './health.ts';
import { FallbackConfigSchema } from './fallback.ts';

const socketPath = z.string().min(1).refine((p) => p.startsWith('/'), 'must be an absolute path');

export const ShimConfigSchema = z
  .object({
    /** Socket the kubelet connects to (its containerRuntimeEndpoint / imageServiceEndpoint). */
    listen: socketPath.optional(),
    /** containerd's socket. */
    backend: socketPath.optional(),
    /** Octal file mode of the listening socket. */
    socketMode: z
      .string()
      .regex(/^0?[0-7]{3}$/, 'an octal mode such as "0660"')
      .default('0660'),
    /** `splice`: frame-level splice of the two sockets (default, least added latency); `http2`: stream-level pass-through with node:http2; `grpc-js`: gRPC terminated on both sides. Not reloadable. */
    implementation: z.enum(PROXY_IMPLEMENTATIONS).default('splice'),
    pacing: PacingConfigSchema.prefault({}),
    /** How long a call waits for a connecting runtime before failing UNAVAILABLE. */
    connectTimeoutMs: z.number().int().positive().default(1000),
    /** Message size limit, both directions (the kubelet's: 16 MiB). */
    maxMessageBytes: z.number().int().positive().default(MAX_MESSAGE_BYTES),
    metrics: z
      .object({
        /** Port of /metrics; unset: no metrics server; 0: any free port. */
        port: z.number().int().min(0).max(65535).optional(),
        host: z.string().default('127.0.0.1'),
      })
      .strict()
      .prefault({}),
    /** The node agent of the fast node-failure detection (node-agent.ts); restart to change. */
    nodeAgent: NodeAgentConfigSchema.prefault({}),
    /** The self-check behind /readyz and the systemd watchdog (health.ts); restart to change. */
    health: HealthConfigSchema.prefault({}),
    /** The fallback guard's settings (fallback.ts, its own process); restart the guard to change. */
    fallback: FallbackConfigSchema.prefault({}),
  })
  .strict();

export type ShimConfig = z.output<typeof ShimConfigSchema>;
export type ShimConfigInput = z.input<typeof ShimConfigSchema>;

export function parseShimConfig(raw: unknown, source = 'kubelet-shim config'): ShimConfig {
  return validateConfig(ShimConfigSchema, raw, source);
}

export function loadShimConfig(file: string): Promise<ShimConfig> {
  return loadConfigFile(ShimConfigSchema, file);
}
