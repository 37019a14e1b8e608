/**
 * The node agent of the fast node-failure detection (controller-manager/README.md "Node failure
 * detection"): a UDP responder in the kubelet-shim, which runs on every node next to the runtime.
 * The controller manager's leader probes it every period; a frozen or dead node stops answering.
 *
 * It answers only probes naming its own node (core/node-heartbeat.ts), at most `maxRepliesPerSecond`
 * a second (bounded work whatever arrives), and says in its log and metrics when no probe has come
 * for `silenceWarnMs`: then the decider cannot reach it (or detection is off), and this node's
 * failures are found by stock Kubernetes only. It stops nothing on its node unless self-fencing is
 * configured (`fencing`, fencing.ts: off by default).
 */
import dgram from 'node:dgram';
import { z } from 'zod';
import { Counter, Gauge, type Registry } from 'prom-client';
import { DEFAULT_NODE_AGENT_PORT, decodeHeartbeat, encodeHeartbeat } from '../core/node-heartbeat.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import { TokenBucket } from '../core/token-bucket.ts';
import type { Logger } from '../core/logging.ts';
import { FencingConfigSchema } from './fencing.ts';

export const NodeAgentConfigSchema = z
  .object({
    /** Answer the controller manager's heartbeat probes (a node without a running agent is never failed over fast). */
    enabled: z.boolean().default(true),
    /** Address to listen on: the node's InternalIP, which the decider probes (0.0.0.0: every address). */
    address: z.string().min(1).default('0.0.0.0'),
    /** UDP port (0: any free one, for tests). */
    port: z.number().int().min(0).max(65535).default(DEFAULT_NODE_AGENT_PORT),
    /** Replies a second at most; probes over it are dropped and counted. */
    maxRepliesPerSecond: z.number().int().min(1).max(100_000).default(2000),
    /** Log a warning (and every such period again) when no probe has arrived for this long. */
    silenceWarnMs: z.number().int().min(1000).max(3_600_000).default(30_000),
    /** Optional self-fencing when the node is cut off from the control plane (fencing.ts; off by default). */
    fencing: FencingConfigSchema.prefault({}),
  })
  .strict();
export type NodeAgentConfig = z.output<typeof NodeAgentConfigSchema>;

interface AgentMetrics {
  probes: Counter<'result'>;
  sinceProbe: Gauge;
}

function agentMetrics(registry: Registry): AgentMetrics {
  const probes = registeredMetric('ulysses_node_agent_probes_total', () =>
    new Counter({
      name: 'ulysses_node_agent_probes_total',
      help: 'Heartbeat probes received by the node agent, by result (answered, wrong-node, malformed, rate-limited).',
      labelNames: ['result'],
      registers: [registry],
    }),
  );
  const sinceProbe = registeredMetric('ulysses_node_agent_seconds_since_probe', () =>
    new Gauge({
      name: 'ulysses_node_agent_seconds_since_probe',
      help: 'Seconds since the node agent last answered a probe of the controller manager (since its start when none came yet).',
      registers: [registry],
    }),
  );
  return { probes, sinceProbe };
}

export class NodeAgent {
  private socket: dgram.Socket | undefined;
  private readonly metrics: AgentMetrics;
  private readonly limiter: TokenBucket;
  private lastProbeAt: number;
  private warnedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  /** probes answered since start */
  answered = 0;

  constructor(
    private readonly o: { node: string; config: NodeAgentConfig; log: Logger; registry?: Registry; now?: () => number },
  ) {
    this.metrics = agentMetrics(o.registry ?? metricsRegistry());
    this.limiter = new TokenBucket({ qps: o.config.maxRepliesPerSecond, burst: o.config.maxRepliesPerSecond });
    this.lastProbeAt = this.now();
  }

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  /** When the agent last answered a probe (its start when none came yet). */
  get lastProbe(): number {
    return this.lastProbeAt;
  }

  /** The port bound (useful with port 0 in tests). */
  get port(): number | undefined {
    return this.socket?.address().port;
  }

  async start(): Promise<void> {
    const { address, port } = this.o.config;
    const socket = dgram.createSocket({ type: address.includes(':') ? 'udp6' : 'udp4' });
    socket.on('message', (msg, from) => this.onMessage(socket, msg, from));
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(port, address, () => {
        socket.off('error', reject);
        resolve();
      });
    });
    // an error after binding (e.g. a send failing) must never stop the shim
    socket.on('error', (err) => this.o.log.warn({ err: err.message }, 'node agent socket error'));
    this.socket = socket;
    this.timer = setInterval(() => this.checkSilence(), Math.min(5000, this.o.config.silenceWarnMs)).unref();
    this.o.log.info({ node: this.o.node, address, port: this.port }, 'node agent answering heartbeat probes');
  }

  private onMessage(socket: dgram.Socket, msg: Buffer, from: dgram.RemoteInfo): void {
    const h = decodeHeartbeat(msg);
    if ('error' in h || h.type !== 'probe') {
      this.metrics.probes.inc({ result: 'malformed' });
      return;
    }
    if (h.node !== this.o.node) {
      this.metrics.probes.inc({ result: 'wrong-node' });
      return;
    }
    if (!this.limiter.tryAccept()) {
      this.metrics.probes.inc({ result: 'rate-limited' });
      return;
    }
    socket.send(encodeHeartbeat({ ...h, type: 'reply' }), from.port, from.address);
    this.metrics.probes.inc({ result: 'answered' });
    this.answered++;
    this.lastProbeAt = this.now();
  }

  private checkSilence(): void {
    const silentMs = this.now() - this.lastProbeAt;
    this.metrics.sinceProbe.set(silentMs / 1000);
    if (silentMs < this.o.config.silenceWarnMs) return;
    if (this.now() - this.warnedAt < this.o.config.silenceWarnMs) return;
    this.warnedAt = this.now();
    this.o.log.warn(
      { node: this.o.node, silentMs, address: this.o.config.address, port: this.port, answered: this.answered },
      this.answered
        ? 'no heartbeat probe from the controller manager: it cannot reach this agent (or node failure detection is off); failures of this node are detected by stock Kubernetes only'
        : 'no heartbeat probe from the controller manager since the start: is node failure detection on, and can its leader reach this address and port?',
    );
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const s = this.socket;
    this.socket = undefined;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }
}
