#!/usr/bin/env -S npx tsx
/**
 * kubelet-shim: the CRI proxy between one kubelet and its containerd, with RunPodSandbox pacing.
 *
 *   npx tsx kubelet-shim/main.ts --listen /run/ulysses/kubelet-shim.sock \
 *       --backend /run/containerd/containerd.sock --config kubelet-shim/configs/thesis-cloud.yaml --metrics-port 10260
 *
 * Point the kubelet at it with containerRuntimeEndpoint/imageServiceEndpoint: unix://<listen>.
 * SIGHUP re-reads the config file and applies its `pacing` section (waiting requests are kept);
 * SIGTERM/SIGINT stop accepting calls, let running ones finish (2 s) and remove the socket.
 * This file only wires config, logger, metrics, gate and proxy.
 */
import { existsSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, InvalidArgumentError, Option } from 'commander';
import { componentLogger, type Logger } from '../core/logging.ts';
import { serveMetrics } from '../core/metrics.ts';
import { onShutdownSignal } from '../core/shutdown.ts';
import { ConfigError } from '../core/config.ts';
import { loadShimConfig, parseShimConfig, type ShimConfig } from './config.ts';
import { PacingGate, type PacingConfig } from './pacing.ts';
import { PROXY_IMPLEMENTATIONS, createCriProxy, type CriProxyServer, type ProxyImplementation } from './proxies.ts';
import { shimMetrics } from './metrics.ts';
import { shimRuntime, type ShimRuntime } from './runtime.ts';
import { loadKubeConfig } from '../core/kubeconfig.ts';
import { NodeAgent } from './node-agent.ts';
import { SelfFencer, criRuntime } from './fencing.ts';
import { CriClient } from './cri-client.ts';
import { ShimHealth } from './health.ts';
import { systemdNotifier } from './systemd-notify.ts';
import { ApiError, KubeClient } from '../core/kube.ts';
import type { KubeConfig } from '@kubernetes/client-node';

export interface RunningShim {
  readonly proxy: CriProxyServer;
  readonly gate: PacingGate;
  /** The configuration in force (its `pacing` follows {@link apply}). */
  readonly config: ShimConfig;
  readonly metricsPort: number | undefined;
  /** The heartbeat responder (node-agent.ts); absent when off, without a node name, or when its port could not be bound. */
  readonly agent: NodeAgent | undefined;
  /**
   * Applies a new configuration live — the entry point of runtime toggles (thesis §5.3.5): validates
   * `config` (a {@link ShimConfigInput}; ConfigError naming the field, nothing changed), then applies
   * its `pacing` section to the gate (policy and parameters; waiting requests are kept and re-timed).
   * The other fields (sockets, implementation, limits, metrics port) need a restart: a difference is
   * logged and ignored.
   */
  apply(config: unknown, source?: string): ShimConfig;
  /** Applies a validated pacing section (the runtime toggle validated it already); returns the configuration in force. */
  applyPacing(pacing: PacingConfig): ShimConfig;
  /** Re-reads `configFile` and {@link apply}s it (SIGHUP). */
  reload(): Promise<void>;
  /**
   * Starts self-fencing when `nodeAgent.fencing.enabled` (fencing.ts), with `kc` to tell whether the
   * apiserver answers; without API access it cannot tell a cut-off node from a decider pause: never fences.
   */
  startFencing(kc: KubeConfig): void;
  /** The self-fencer, once started. */
  readonly fencer: SelfFencer | undefined;
  /** The self-check behind /readyz and the systemd watchdog (health.ts). */
  readonly health: ShimHealth;
  stop(): Promise<void>;
}

export interface ShimOptions {
  listen?: string;
  backend?: string;
  configFile?: string;
  metricsPort?: number;
  /** address /metrics listens on (default the config file's `metrics.host`, else 127.0.0.1) */
  metricsHost?: string;
  implementation?: ProxyImplementation;
  /** this node's name: the node agent answers probes naming it (no name: no agent) */
  nodeName?: string;
  log?: Logger;
  /** the socket path no longer holds the shim's socket (health.ts); main.ts exits so the unit restarts it */
  onSocketLost?: () => void;
}

/** Starts the shim; flags win over the config file. */
export async function startShim(opts: ShimOptions): Promise<RunningShim> {
  const log = opts.log ?? componentLogger('kubelet-shim');
  const fromFile = opts.configFile ? await loadShimConfig(opts.configFile) : parseShimConfig({});
  const config = parseShimConfig({
    ...fromFile,
    ...(opts.listen ? { listen: opts.listen } : {}),
    ...(opts.backend ? { backend: opts.backend } : {}),
    ...(opts.implementation ? { implementation: opts.implementation } : {}),
    metrics: {
      ...fromFile.metrics,
      ...(opts.metricsPort !== undefined ? { port: opts.metricsPort } : {}),
      ...(opts.metricsHost !== undefined ? { host: opts.metricsHost } : {}),
    },
  }, 'kubelet-shim flags');
  if (!config.listen) throw new ConfigError('kubelet-shim flags', [{ field: 'listen', message: 'required (--listen or `listen:` in the config file)' }]);
  if (!config.backend) throw new ConfigError('kubelet-shim flags', [{ field: 'backend', message: 'required (--backend or `backend:` in the config file)' }]);

  const metrics = shimMetrics();
  const gate = new PacingGate({ config: config.pacing, log, metrics });
  const proxy = createCriProxy({
    implementation: config.implementation,
    listen: config.listen,
    backend: config.backend,
    gate,
    log,
    metrics,
    maxMessageBytes: config.maxMessageBytes,
    connectTimeoutMs: config.connectTimeoutMs,
    socketMode: parseInt(config.socketMode, 8),
  });
  await proxy.start();
  const health = new ShimHealth({ socket: config.listen, config: config.health, log, metrics, onSocketLost: opts.onSocketLost });
  health.start();
  const server = config.metrics.port !== undefined ? await serveMetrics(config.metrics.port, config.metrics.host, () => health.readiness()) : undefined;
  if (server) log.info({ port: server.port, host: config.metrics.host }, 'metrics served on /metrics');
  const agent = await startNodeAgent(config, opts.nodeName, log);

  let current = config;
  let fencer: SelfFencer | undefined;
  let cri: CriClient | undefined;
  const shim: RunningShim = {
    get fencer() {
      return fencer;
    },
    startFencing(kc) {
      const f = config.nodeAgent.fencing;
      if (!f.enabled || fencer) return;
      if (!agent) {
        log.warn('self-fencing configured but the node agent is not running: never fences');
        return;
      }
      const api = new KubeClient(kc);
      cri = new CriClient(config.backend!);
      fencer = new SelfFencer({
        node: opts.nodeName!,
        config: f,
        log,
        runtime: criRuntime(cri, f.checkMs * 4),
        gate,
        lastProbeAt: () => agent.lastProbe,
        // any HTTP answer of /version: the apiserver is reachable (a 401/403 too)
        apiReachable: (timeoutMs) => api.request('GET', '/version', { timeoutMs }).then(() => true, (err) => err instanceof ApiError),
      });
      fencer.start();
    },
    proxy,
    gate,
    health,
    get config() {
      return current;
    },
    metricsPort: server?.port,
    agent,
    apply(raw, source = 'kubelet-shim config') {
      const next = parseShimConfig(raw, source);
      const fixed: string[] = (['listen', 'backend', 'implementation', 'socketMode', 'connectTimeoutMs', 'maxMessageBytes'] as const).filter(
        (k) => next[k] !== undefined && next[k] !== current[k],
      );
      if (JSON.stringify(next.nodeAgent) !== JSON.stringify(current.nodeAgent)) fixed.push('nodeAgent');
      if (fixed.length > 0) log.warn({ fields: fixed }, 'configuration change needs a restart of the shim: ignored (pacing applied)');
      return shim.applyPacing(next.pacing);
    },
    applyPacing(pacing) {
      gate.apply(pacing);
      current = { ...current, pacing: gate.config };
      return current;
    },
    async reload() {
      if (!opts.configFile) return;
      const raw = await loadShimConfig(opts.configFile);
      shim.apply(raw, opts.configFile);
    },
    async stop() {
      health.stop();
      fencer?.stop();
      cri?.client.close();
      await agent?.stop();
      await proxy.close(2000);
      await server?.close();
    },
  };
  return shim;
}

/**
 * The node agent, when configured and the node is named. A port that cannot be bound is logged and
 * the shim runs on: the CRI path must not depend on failure detection.
 */
async function startNodeAgent(config: ShimConfig, nodeName: string | undefined, log: Logger): Promise<NodeAgent | undefined> {
  if (!config.nodeAgent.enabled) return undefined;
  if (!nodeName) {
    log.warn('node agent off: no node name (--node-name or $NODE_NAME); this node is not failed over fast');
    return undefined;
  }
  const agent = new NodeAgent({ node: nodeName, config: config.nodeAgent, log });
  try {
    await agent.start();
    return agent;
  } catch (err) {
    log.error({ err: (err as Error).message, address: config.nodeAgent.address, port: config.nodeAgent.port }, 'node agent could not listen: this node is not failed over fast');
    return undefined;
  }
}

const nonNegativeInt = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError(`${name} must be a port number, got "${v}"`);
  return n;
};

async function main(argv: string[]): Promise<void> {
  const program = new Command('kubelet-shim')
    .description('CRI proxy between kubelet and containerd that paces low-priority pod creations (Ulysses, thesis §5.3.4)')
    .option('--listen <socket>', 'unix socket for the kubelet (containerRuntimeEndpoint)')
    .option('--backend <socket>', "containerd's unix socket")
    .option('--config <file>', 'YAML/JSON config file (pacing policy etc.); SIGHUP reloads its pacing section')
    .option('--metrics-port <n>', 'serve /metrics on this port (0: any free port)', nonNegativeInt('--metrics-port'))
    .option('--metrics-host <address>', "address /metrics listens on (default the config file's metrics.host, else 127.0.0.1; the DaemonSet's pod IP for a Prometheus to scrape)")
    .addOption(new Option('--implementation <impl>', 'proxy implementation (default: the config file\'s, else splice)').choices(PROXY_IMPLEMENTATIONS))
    .option('--kubeconfig <file>', 'kubeconfig to watch UlyssesConfig/default (spec.kubeletShim) and report status; without it only the file config applies')
    .option('--node-name <name>', 'this node (selects the spec.kubeletShim entry; default $NODE_NAME)', process.env.NODE_NAME)
    .parse(argv);
  const o = program.opts<{ listen?: string; backend?: string; config?: string; metricsPort?: number; metricsHost?: string; implementation?: ProxyImplementation; kubeconfig?: string; nodeName?: string }>();
  const log = componentLogger('kubelet-shim');
  let shim: RunningShim;
  const notifier = await systemdNotifier(log);
  // the path is the kubelet's only way in: without it this process serves nobody, and a restart
  // (systemd's Restart=always) takes the path back
  const onSocketLost = () => {
    log.error('exiting so that the service manager starts the shim again on its socket path');
    void shim.stop().finally(() => process.exit(1));
  };
  try {
    shim = await startShim({ listen: o.listen, backend: o.backend, configFile: o.config, metricsPort: o.metricsPort, metricsHost: o.metricsHost, implementation: o.implementation, nodeName: o.nodeName, log, onSocketLost });
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  notifier?.ready(`serving CRI on ${shim.config.listen}`);
  notifier?.keepAlive(() => shim.health.serving());
  if (o.kubeconfig && !o.nodeName) {
    console.error('--kubeconfig needs --node-name (or $NODE_NAME) to pick this node\'s spec.kubeletShim entry');
    process.exit(2);
  }
  // the runtime config wins over the file's pacing while a UlyssesConfig exists; watched with
  // --kubeconfig, $KUBECONFIG (systemd unit) or the in-cluster ServiceAccount (DaemonSet), given a node name
  const canReachApi = !!(o.kubeconfig || process.env.KUBECONFIG || process.env.KUBERNETES_SERVICE_HOST);
  let runtime: ShimRuntime | undefined;
  let stopping = false;
  const startRuntime = async (nodeName: string) => {
    const kc = await loadKubeConfig(o.kubeconfig);
    if (stopping) return;
    runtime = shimRuntime(kc, shim, nodeName, log);
    await runtime.start();
    shim.startFencing(kc);
  };
  // the node service runs with the node's kubelet credential, which a node being joined gets only
  // with the kubelet's TLS bootstrap, after the shim started: the CRI proxy serves meanwhile
  const kubeconfigFile = o.kubeconfig ?? process.env.KUBECONFIG;
  if (!canReachApi || !o.nodeName) {
    if (shim.config.nodeAgent.fencing.enabled) log.warn('self-fencing configured without API access (--kubeconfig, $KUBECONFIG or in-cluster) or node name: it cannot tell a cut-off node from a decider pause, and never fences');
    log.info('no API access configured (--kubeconfig, $KUBECONFIG or in-cluster) or no node name: UlyssesConfig not watched, file config only');
  } else if (kubeconfigFile && !kubeconfigFile.includes(':') && !existsSync(kubeconfigFile)) {
    const nodeName = o.nodeName;
    log.warn({ kubeconfig: kubeconfigFile }, 'kubeconfig not there yet (the kubelet writes its own when it joins): file config only until it appears');
    void fileAppears(kubeconfigFile, () => stopping)
      .then((there) => (there ? startRuntime(nodeName) : undefined))
      .catch((err: Error) => log.error({ err: err.message }, 'could not start watching UlyssesConfig: file config only'));
  } else {
    await startRuntime(o.nodeName);
  }
  process.on('SIGHUP', () => {
    shim
      .reload()
      .then(() => runtime?.watcher.resync())
      .catch((err: Error) => log.error({ err: err.message }, 'config reload failed; pacing unchanged'));
  });
  onShutdownSignal(() => {
    stopping = true;
    notifier?.stopping();
    return Promise.all([runtime?.stop(), shim.stop()]).finally(() => notifier?.close());
  }, { log });
}

/** True once `file` exists (checked every `everyMs`), false when `stopped()` says so first. */
export async function fileAppears(file: string, stopped: () => boolean, everyMs = 2000): Promise<boolean> {
  while (!existsSync(file)) {
    if (stopped()) return false;
    await new Promise((r) => setTimeout(r, everyMs).unref());
  }
  return !stopped();
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  main(process.argv).catch((err: Error) => {
    console.error(`kubelet-shim: ${err.stack ?? err.message}`);
    process.exit(1);
  });
}
