#!/usr/bin/env -S npx tsx
/**
 * The Ulysses scheduler extender process:
 *
 *   npm run start:scheduler-extender -- --config scheduler-plugins/extender/example-config.yaml --kubeconfig ~/.kube/config
 *
 * Serves /filter, /prioritize, /bind, /metrics, /healthz, /readyz on the config's `listen` address
 * (flags --host/--port win; HTTPS with kube-scheduler's client certificate required unless on
 * loopback: tls.ts, flags --tls-cert-file, --tls-private-key-file, --client-ca-file), and runs the node-assurance updater and the rescheduler when their
 * config sections enable them. SIGHUP re-reads the config file and applies it live (setConfig);
 * SIGTERM/SIGINT stop. This file only wires config, kubeconfig, leader election and the server.
 *
 * Leader election (leadership.ts; on by default, flags as kube-scheduler's and the controller
 * manager's: --leader-elect, --leader-elect-lease-duration 15s, --leader-elect-renew-deadline 10s,
 * --leader-elect-retry-period 2s, --leader-elect-resource-namespace kube-system,
 * --leader-elect-resource-name ulysses-scheduler-extender, --identity): every replica keeps its
 * informers, only the leader answers the verbs and runs the updater and the rescheduler. Losing the
 * Lease stops the answers at once and exits with status 1 (kube-scheduler does the same); SIGTERM
 * steps down and releases the Lease. In a pod (POD_NAME and POD_NAMESPACE from the downward API)
 * the leader carries the label the Service routes by. `--leader-elect=false` (the static pods next
 * to each kube-scheduler, or a single instance) serves always.
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError } from 'commander';
import { KubeClient } from '../../core/kube.ts';
import { loadKubeConfig } from '../../core/kubeconfig.ts';
import { DEFAULT_LEASE_DURATION_S, DEFAULT_RENEW_DEADLINE_S, DEFAULT_RETRY_PERIOD_S, parseDurationSeconds } from '../../core/leader-election.ts';
import { componentLogger } from '../../core/logging.ts';
import { serveMetrics } from '../../core/metrics.ts';
import { onShutdownSignal } from '../../core/shutdown.ts';
import { extenderConfig, loadExtenderConfig, type ExtenderConfig } from './config.ts';
import { ExtenderServer } from './server.ts';
import { ExtenderLeadership } from './leadership.ts';
import { extenderRuntimeWatcher, withRuntime } from './runtime.ts';
import { NodeAssuranceUpdater } from '../assurance/updater.ts';
import { AssuranceRescheduler } from '../assurance/rescheduler.ts';

export interface RunningExtender {
  readonly server: ExtenderServer;
  /** With leader election. */
  readonly leadership?: ExtenderLeadership;
  /** Applies a config to the server and starts/stops/reconfigures the updater and the rescheduler. */
  apply(cfg: ExtenderConfig): Promise<void>;
  stop(): Promise<void>;
}

export interface StartExtenderOptions {
  configFile?: string;
  kubeconfig?: string;
  host?: string;
  port?: number;
  /** TLS files (flags --tls-cert-file, --tls-private-key-file, --client-ca-file): over the config file's `tls`. */
  tls?: { certFile?: string; keyFile?: string; clientCAFile?: string };
  runtimeConfig?: boolean;
  /** The informers in a worker thread (default true, ExtenderServerOptions.informerThread). */
  informerThread?: boolean;
  /** Called with the server before it starts its informers and listens (e.g. the benchmark adds a fastify hook). */
  beforeStart?: (server: ExtenderServer) => void;
  /** Replicas with a Lease (see the header); without it this process serves always. */
  leaderElection?: {
    namespace: string;
    name: string;
    identity?: string;
    leaseDurationSeconds: number;
    renewDeadlineSeconds: number;
    retryPeriodSeconds: number;
    /** The pod this process runs in: the leader keeps the Service's routing label on it. */
    pod?: { namespace: string; name: string };
    /** Leadership ended: `lost` (the CLI exits with status 1) or `stopped` (stepped down by stop()). */
    onStopped?: (reason: 'lost' | 'stopped') => void | Promise<void>;
  };
}

export async function startExtender(opts: StartExtenderOptions): Promise<RunningExtender> {
  const load = async (): Promise<ExtenderConfig> => {
    const base = opts.configFile ? await loadExtenderConfig(opts.configFile) : extenderConfig({});
    const flags = Object.fromEntries(Object.entries(opts.tls ?? {}).filter(([, v]) => v !== undefined));
    const tls = base.tls || Object.keys(flags).length ? { ...base.tls, ...flags } : undefined;
    return extenderConfig({ ...base, tls, listen: { host: opts.host ?? base.listen.host, port: opts.port ?? base.listen.port } }, 'scheduler-extender flags');
  };
  const kc = await loadKubeConfig(opts.kubeconfig);
  const cfg = await load();
  const log = componentLogger('scheduler-extender');
  const le = opts.leaderElection;
  // the updater and the rescheduler write to the cluster: only where the verbs are served
  let active = !le;
  let current = cfg;
  let server!: ExtenderServer;
  const leadership = le
    ? new ExtenderLeadership({
        client: new KubeClient(kc),
        namespace: le.namespace,
        name: le.name,
        identity: le.identity,
        leaseDurationSeconds: le.leaseDurationSeconds,
        renewDeadlineSeconds: le.renewDeadlineSeconds,
        retryPeriodSeconds: le.retryPeriodSeconds,
        pod: le.pod,
        log,
        rebuild: async (signal) => {
          await server.rebuild(signal);
        },
        onServing: async () => {
          active = true;
          await apply(current);
        },
        onStopped: async (reason) => {
          active = false;
          stopWriters();
          await le.onStopped?.(reason);
        },
      })
    : undefined;
  server = new ExtenderServer({ config: cfg, kubeconfig: kc, informerThread: opts.informerThread, gate: leadership?.gate });
  opts.beforeStart?.(server);
  await server.start();
  let updater: NodeAssuranceUpdater | undefined;
  let rescheduler: AssuranceRescheduler | undefined;
  const stopWriters = () => {
    updater?.stop();
    updater = undefined;
    rescheduler?.stop();
    rescheduler = undefined;
  };
  const apply = async (c: ExtenderConfig) => {
    current = c;
    server.setConfig(c);
    if (!active) return;
    if (c.assuranceUpdater.enabled && !updater) {
      updater = new NodeAssuranceUpdater(kc, { rules: c.assuranceUpdater.rules });
      await updater.start();
    } else if (c.assuranceUpdater.enabled) updater!.setConfig({ rules: c.assuranceUpdater.rules });
    else if (updater) {
      updater.stop();
      updater = undefined;
    }
    if (c.rescheduler.enabled && !rescheduler) {
      rescheduler = new AssuranceRescheduler(kc, c.rescheduler, c);
      await rescheduler.start();
    } else rescheduler?.setConfig(c.rescheduler, c); // disabled: it stays idle
  };
  // spec.schedulerExtender of UlyssesConfig/default switches plugins live, over the file config
  let base = cfg;
  const runtime = opts.runtimeConfig === false ? undefined : extenderRuntimeWatcher(kc, apply, () => base, log);
  await apply(cfg);
  await runtime?.start();
  // campaigns once the informers are synced and the server listens (/healthz answers meanwhile)
  leadership?.start();
  process.on('SIGHUP', () => {
    load().then(
      (next) => {
        base = next;
        return runtime?.current ? apply(withRuntime(base, runtime.current)) : apply(base);
      },
      (err: Error) => log.error({ err: err.message }, 'config reload failed: keeping the current configuration'),
    );
  });
  return {
    server,
    leadership,
    apply,
    stop: async () => {
      // steps down first: the Lease is released once nothing is served any more
      await leadership?.stop();
      await runtime?.stop();
      stopWriters();
      await server.stop();
    },
  };
}

const isMain = (() => {
  try {
    return realpathSync(process.argv[1] ?? '') === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
})();

if (isMain) {
  const port = (v: string) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`--port must be an integer in 0..65535, got "${v}"`);
    return n;
  };
  const bool = (flag: string) => (v: string) => {
    if (v !== 'true' && v !== 'false') throw new InvalidArgumentError(`${flag}: expected true or false, got ${JSON.stringify(v)}`);
    return v === 'true';
  };
  const duration = (flag: string) => (v: string) => {
    try {
      return parseDurationSeconds(flag, v);
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
  };
  const program = new Command('scheduler-extender')
    .description('Ulysses kube-scheduler extender: assurance, real-time and TDMA filtering, scoring and reservations')
    .option('--config <file>', 'ExtenderConfig file (YAML or JSON)')
    .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG or ~/.kube/config)')
    .option('--host <host>', 'listen host (overrides the config)')
    .option('--port <port>', 'listen port (overrides the config)', port)
    .option('--bind-address <host>', 'listen host (kube-style alias of --host)')
    .option('--tls-cert-file <file>', 'serve HTTPS with this certificate (tls.certFile); required unless listening on loopback')
    .option('--tls-private-key-file <file>', "the certificate's private key (tls.keyFile)")
    .option('--client-ca-file <file>', "the CA of kube-scheduler's client certificate (tls.clientCAFile): calls without one it signed are refused")
    .option('--metrics-port <port>', 'also serve /metrics and /healthz on this port (e.g. for a separate metrics Service)', port)
    .option('--no-runtime-config', 'do not watch UlyssesConfig/default (spec.schedulerExtender)')
    .option('--leader-elect <bool>', 'replicas elect a leader with a Lease; only the leader serves (false: always serve, e.g. one static pod per kube-scheduler)', bool('--leader-elect'), true)
    .option('--leader-elect-lease-duration <duration>', 'Lease duration', duration('leader-elect-lease-duration'), DEFAULT_LEASE_DURATION_S)
    .option('--leader-elect-renew-deadline <duration>', 'a leader that could not renew for this long stops serving and exits', duration('leader-elect-renew-deadline'), DEFAULT_RENEW_DEADLINE_S)
    .option('--leader-elect-retry-period <duration>', 'time between acquire/renew attempts', duration('leader-elect-retry-period'), DEFAULT_RETRY_PERIOD_S)
    .option('--leader-elect-resource-namespace <ns>', 'namespace of the Lease', 'kube-system')
    .option('--leader-elect-resource-name <name>', 'name of the Lease', 'ulysses-scheduler-extender')
    .option('--identity <id>', 'holder identity in the Lease (default: hostname_uuid)')
    .action(async (o) => {
      const log = componentLogger('scheduler-extender');
      const pod = process.env.POD_NAME && process.env.POD_NAMESPACE ? { name: process.env.POD_NAME, namespace: process.env.POD_NAMESPACE } : undefined;
      const running = await startExtender({
        configFile: o.config,
        kubeconfig: o.kubeconfig,
        host: o.host ?? o.bindAddress,
        port: o.port,
        tls: { certFile: o.tlsCertFile, keyFile: o.tlsPrivateKeyFile, clientCAFile: o.clientCaFile },
        runtimeConfig: o.runtimeConfig,
        leaderElection: o.leaderElect
          ? {
              namespace: o.leaderElectResourceNamespace,
              name: o.leaderElectResourceName,
              identity: o.identity,
              leaseDurationSeconds: o.leaderElectLeaseDuration,
              renewDeadlineSeconds: o.leaderElectRenewDeadline,
              retryPeriodSeconds: o.leaderElectRetryPeriod,
              pod,
              onStopped: (reason) => {
                if (reason !== 'lost') return;
                log.fatal('leader election lost: exiting');
                process.exit(1);
              },
            }
          : undefined,
      });
      const metrics = o.metricsPort !== undefined ? await serveMetrics(o.metricsPort, o.host ?? o.bindAddress) : undefined;
      onShutdownSignal(() => Promise.all([running.stop(), metrics?.close()]));
    });
  program.parseAsync().catch((err: Error) => {
    console.error(err.message);
    process.exit(1);
  });
}
