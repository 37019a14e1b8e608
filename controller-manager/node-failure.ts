/**
 * Fast node-failure detection (README "Node failure detection"): the controller manager's leader
 * probes the node agent of every node (kubelet-shim/node-agent.ts) over UDP every `periodMs`; an
 * agent silent for `windowMs` whose kubelet does not complete a TLS handshake within
 * `confirmTimeoutMs` either makes its node failed. A failed node gets the NoExecute taint
 * `ulysses.io/unreachable`, which the taint-eviction controller applies to the pods in `scope` only
 * (critical pods by default) and at once: the 300 s tolerations that the DefaultTolerationSeconds
 * admission plugin adds cover kcm's `node.kubernetes.io/unreachable`, not this key, while a
 * toleration the pod's author wrote for it (or for every taint) is honoured.
 *
 * What keeps it from failing over a living node:
 *  - two independent signals must both be silent: the agent (our process) and the kubelet (another
 *    process, another language); a GC pause or a crashed agent alone fails nothing;
 *  - a node is monitored only once this decider instance has heard its agent ("armed"), and silence
 *    counts from the later of the last reply and the moment this instance could last trust its own
 *    clock: a restart or a new leader, or a tick that came late (the decider's own event loop was
 *    blocked, so replies may be waiting unread), restarts every window;
 *  - disruption, as kcm's node lifecycle controller (ComputeZoneState): when no armed node answers,
 *    the decider or its network is the problem (full disruption), and when more than 2 nodes and at
 *    least `disruptionThreshold` of the armed ones are silent together (partial disruption) the
 *    cluster is too sick to tell: nothing is failed;
 *  - the taint is removed once the node's agent has answered for a full window again.
 * Heartbeats go from this process to the agents and back, never through the apiserver or etcd: the
 * only API writes are the taint, its removal and Events.
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import tls from 'node:tls';
import type { V1Node, V1Taint } from '@kubernetes/client-node';
import { z } from 'zod';
import { Counter, Gauge, Histogram } from 'prom-client';
import { DEFAULT_NODE_AGENT_PORT, decodeHeartbeat, encodeHeartbeat } from '../core/node-heartbeat.ts';
import type { KubeAccess, KubeClient } from '../core/kube.ts';
import { NODE_UNREACHABLE_TAINT, updateNodeTaint } from '../core/node-taints.ts';
import { RuntimeConfigWatcher } from '../core/runtime-config.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import { NO_EVENTS, type ComponentEventRecorder } from '../core/events.ts';
import type { ResilientInformer } from '../core/informer.ts';
import type { Logger } from '../core/logging.ts';
import { KWOK_NODE_ANNOTATION } from './cache-projection.ts';

/** Ulysses' own NoExecute taint of a node found failed; pods tolerating it (author's choice) stay. */
export { NODE_UNREACHABLE_TAINT };
/** Event reasons on the Node. */
export const NODE_FAILURE_EVENTS = {
  detected: 'NodeFailureDetected',
  suppressed: 'NodeFailureSuppressed',
  recovered: 'NodeFailureRecovered',
  kubeletAnswers: 'NodeAgentSilent',
} as const;

export const NODE_FAILURE_SCOPES = ['critical', 'all'] as const;
export type NodeFailureScope = (typeof NODE_FAILURE_SCOPES)[number];

export const NodeFailureConfigSchema = z
  .object({
    enabled: z.boolean().default(true),
    /** Probe period of every node agent. */
    periodMs: z.number().int().min(20).max(10_000).default(100),
    /** How long an armed agent must be silent before its node can fail (at least 3 periods). */
    windowMs: z.number().int().min(100).max(120_000).default(600),
    /** How long the kubelet has to complete a TLS handshake once the agent went silent. */
    confirmTimeoutMs: z.number().int().min(50).max(10_000).default(400),
    /** UDP port of the node agents (kubelet-shim nodeAgent.port). */
    agentPort: z.number().int().min(1).max(65535).default(DEFAULT_NODE_AGENT_PORT),
    /** Pods the taint evicts at once: `critical` (criticality high) or `all`; others follow stock Kubernetes. */
    scope: z.enum(NODE_FAILURE_SCOPES).default('critical'),
    /** Partial disruption: more than 2 and at least this share of the armed nodes silent together. */
    disruptionThreshold: z.number().gt(0).max(1).default(0.55),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.windowMs < 3 * c.periodMs) ctx.addIssue({ code: 'custom', path: ['windowMs'], message: `must be at least 3 periods (3 × periodMs = ${3 * c.periodMs})` });
    if (c.confirmTimeoutMs > c.windowMs) ctx.addIssue({ code: 'custom', path: ['confirmTimeoutMs'], message: `must not exceed windowMs (${c.windowMs})` });
  });
export type NodeFailureConfig = z.output<typeof NodeFailureConfigSchema>;
export type NodeFailureConfigInput = z.input<typeof NodeFailureConfigSchema>;

/** What the kubelet's TLS handshake said: it answered, it stayed silent, or the check itself is not to be trusted. */
export type KubeletCheck = 'alive' | 'silent' | 'inconclusive';

/** Backoff of a failed taint write, per node (1 s doubling to 30 s). */
const TAINT_RETRY_MIN_MS = 1000;
const TAINT_RETRY_MAX_MS = 30_000;

/** Probes sent before the event loop turns (and reads their replies): 100 replies are 83 KB of receive buffer. */
const PROBE_BURST = 100;

export type SuppressReason = 'full-disruption' | 'partial-disruption';

export interface FailureEvidence {
  /** ms since the agent's last reply (or since this decider could last trust its clock) */
  silentMs: number;
  probesMissed: number;
  /** ms the kubelet had to answer the TLS handshake */
  kubeletSilentMs: number;
}

interface NodeState {
  address: string;
  kubeletPort?: number;
  /** this instance heard the agent at least once */
  armed: boolean;
  lastHeardAt: number;
  /** first reply of the current run of replies */
  answeringSince?: number;
  phase: 'healthy' | 'suspect' | 'failed';
  check?: { result?: KubeletCheck; doneAt?: number };
  /** the kubelet-answers guard was reported for the current silence */
  guardReported?: boolean;
  suppressed?: SuppressReason;
}

export interface DetectorHooks {
  /** checks the kubelet (TLS handshake), resolving within about confirmTimeoutMs */
  checkKubelet(node: string, address: string, port: number | undefined): Promise<KubeletCheck>;
  onFailed(node: string, evidence: FailureEvidence): void;
  onSuppressed(nodes: string[], reason: SuppressReason, counts: { silent: number; armed: number }): void;
  onKubeletAnswers(node: string, silentMs: number): void;
  onDeciderLag(lateMs: number): void;
  /**
   * A kubelet check ended `silent`: the caller evaluates again as soon as it can (tick) instead of
   * at the next period, so the decision does not wait up to a period after its last evidence.
   */
  onKubeletSilent?(node: string): void;
}

/**
 * The decision core, without sockets or API calls (unit-tested with a fake clock): which nodes are
 * failed, from the replies heard, the kubelet checks and the ticks.
 */
export class NodeFailureDetector {
  private readonly nodes = new Map<string, NodeState>();
  /** silence is counted from here at the earliest: start, and every late tick */
  private trustedSince: number;

  constructor(
    private config: NodeFailureConfig,
    private readonly now: () => number,
    private readonly hooks: DetectorHooks,
  ) {
    this.trustedSince = now();
  }

  setConfig(config: NodeFailureConfig): void {
    this.config = config;
    // a new window applies to silence heard under it
    this.trustedSince = this.now();
  }

  /** The probe targets: node name -> InternalIP (and kubelet port); nodes not listed are forgotten. */
  setTargets(targets: Map<string, { address: string; kubeletPort?: number }>): void {
    for (const name of [...this.nodes.keys()]) if (!targets.has(name)) this.nodes.delete(name);
    for (const [name, t] of targets) {
      const s = this.nodes.get(name);
      if (!s) this.nodes.set(name, { address: t.address, kubeletPort: t.kubeletPort, armed: false, lastHeardAt: -Infinity, phase: 'healthy' });
      else {
        if (s.address !== t.address) {
          // another address is another agent: heard anew before it is monitored
          Object.assign(s, { address: t.address, armed: false, lastHeardAt: -Infinity, answeringSince: undefined, check: undefined });
          if (s.phase === 'suspect') s.phase = 'healthy';
        }
        s.kubeletPort = t.kubeletPort;
      }
    }
  }

  targets(): Array<{ node: string; address: string }> {
    return [...this.nodes].map(([node, s]) => ({ node, address: s.address }));
  }

  /**
   * A reply of `node`'s agent arrived (it carried this instance's nonce). Its source address is not
   * compared with the InternalIP: an agent bound to every address (the DaemonSet) answers from the
   * address the kernel routes by, which on a node with several may be another one.
   */
  heard(node: string, at = this.now()): void {
    const s = this.nodes.get(node);
    if (!s) return;
    if (!s.armed || at - s.lastHeardAt >= this.silenceLimit()) s.answeringSince = at;
    s.armed = true;
    s.lastHeardAt = at;
  }

  /** Silence after which the kubelet is checked: early enough for the check to end by the window. */
  private silenceLimit(): number {
    return Math.max(2 * this.config.periodMs, this.config.windowMs - this.config.confirmTimeoutMs);
  }

  isArmed(node: string): boolean {
    return this.nodes.get(node)?.armed ?? false;
  }

  phase(node: string): NodeState['phase'] | undefined {
    return this.nodes.get(node)?.phase;
  }

  /** ms the node's agent has answered without a gap (undefined: it is silent or never heard). */
  answeringFor(node: string, now = this.now()): number | undefined {
    const s = this.nodes.get(node);
    if (!s?.armed || s.answeringSince === undefined || this.silenceOf(s, now) >= this.silenceLimit()) return undefined;
    return now - Math.max(s.answeringSince, this.trustedSince);
  }

  private silenceOf(s: NodeState, now: number): number {
    return now - Math.max(s.lastHeardAt, this.trustedSince);
  }

  stats(): { armed: number; silent: number; failed: number } {
    const now = this.now();
    let armed = 0,
      silent = 0,
      failed = 0;
    for (const s of this.nodes.values()) {
      if (!s.armed) continue;
      armed++;
      if (this.silenceOf(s, now) >= this.silenceLimit()) silent++;
      if (s.phase === 'failed') failed++;
    }
    return { armed, silent, failed };
  }

  /**
   * One evaluation; `lateMs`: how late this tick fired. A tick later than a period (at least 50 ms)
   * means this process did not run for a while: replies may be waiting unread, so nothing is decided
   * and every window restarts.
   */
  tick(lateMs = 0): void {
    const now = this.now();
    const { windowMs, periodMs, confirmTimeoutMs, disruptionThreshold } = this.config;
    if (lateMs > Math.max(periodMs, 50)) {
      this.trustedSince = now;
      this.hooks.onDeciderLag(lateMs);
      return;
    }
    const limit = this.silenceLimit();
    let armed = 0;
    const silent: string[] = [];
    const candidates: string[] = [];
    for (const [name, s] of this.nodes) {
      if (!s.armed) continue;
      armed++;
      const silence = this.silenceOf(s, now);
      if (silence < limit) {
        // answering: a suspicion ends; a failed node recovers after a full window of replies
        if (s.phase === 'suspect') s.phase = 'healthy';
        if (s.phase === 'failed' && this.answeringFor(name, now)! >= windowMs) s.phase = 'healthy';
        s.check = undefined;
        s.suppressed = undefined;
        s.guardReported = undefined;
        continue;
      }
      silent.push(name);
      if (s.phase === 'failed') continue;
      s.phase = 'suspect';
      const c = s.check;
      // the kubelet is checked once per silence, again a window after an inconclusive or living answer
      if (!c || (c.doneAt !== undefined && c.result !== 'silent' && now - c.doneAt >= (c.result === 'inconclusive' ? periodMs : windowMs))) {
        this.startCheck(name, s);
        continue;
      }
      if (c.result === 'alive' && !s.guardReported) {
        s.guardReported = true;
        this.hooks.onKubeletAnswers(name, silence);
      }
      if (c.result === 'silent' && silence >= windowMs) candidates.push(name);
    }
    if (!candidates.length) return;
    const healthy = armed - silent.length;
    const reason: SuppressReason | undefined =
      healthy === 0 ? 'full-disruption' : silent.length > 2 && silent.length / armed >= disruptionThreshold ? 'partial-disruption' : undefined;
    if (reason) {
      const fresh = candidates.filter((n) => this.nodes.get(n)!.suppressed !== reason);
      for (const n of candidates) this.nodes.get(n)!.suppressed = reason;
      if (fresh.length) this.hooks.onSuppressed(fresh, reason, { silent: silent.length, armed });
      return;
    }
    for (const name of candidates) {
      const s = this.nodes.get(name)!;
      // a silent kubelet heard of more than a window ago (the failure was suppressed meanwhile) is asked again first
      if (now - s.check!.doneAt! >= windowMs) {
        this.startCheck(name, s);
        continue;
      }
      s.phase = 'failed';
      s.suppressed = undefined;
      const silentMs = this.silenceOf(s, now);
      this.hooks.onFailed(name, { silentMs, probesMissed: Math.floor(silentMs / periodMs), kubeletSilentMs: confirmTimeoutMs });
    }
  }

  private startCheck(name: string, s: NodeState): void {
    const check: NonNullable<NodeState['check']> = {};
    s.check = check;
    this.hooks.checkKubelet(name, s.address, s.kubeletPort).then(
      (result) => {
        check.result = result;
        check.doneAt = this.now();
        if (result === 'silent' && s.check === check) this.hooks.onKubeletSilent?.(name);
      },
      () => {
        check.result = 'inconclusive';
        check.doneAt = this.now();
      },
    );
  }
}

/**
 * The kubelet's answer to a TLS handshake on its port: `alive` when the handshake completes or the
 * node refuses or resets (its kernel or the kubelet answered), `silent` when nothing came within
 * `timeoutMs` or the host is unreachable, `inconclusive` when the timer itself fired late (this
 * process was not running: the answer may be waiting unread) or for any other error.
 */
export function checkKubeletTls(address: string, port: number, timeoutMs: number): Promise<KubeletCheck> {
  return new Promise((resolve) => {
    const started = performance.now();
    let done = false;
    const finish = (r: KubeletCheck) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    // liveness only: no certificate is checked and nothing is sent after the handshake
    const socket = tls.connect({ host: address, port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
    socket.once('secureConnect', () => finish('alive'));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      if (['EHOSTUNREACH', 'ENETUNREACH', 'EHOSTDOWN'].includes(err.code ?? '')) finish('silent');
      else if (['ECONNREFUSED', 'ECONNRESET', 'EPIPE'].includes(err.code ?? '') || !err.code || err.code.startsWith('ERR_SSL') || err.code.startsWith('ERR_TLS')) finish('alive');
      else finish('inconclusive');
    });
    const timer = setTimeout(() => finish(performance.now() - started > timeoutMs * 1.5 ? 'inconclusive' : 'silent'), timeoutMs);
  });
}

interface DecisionMetrics {
  probes: Counter;
  missed: Counter;
  failures: Counter;
  suppressed: Counter<'reason'>;
  guards: Counter<'guard'>;
  detection: Histogram;
  armed: Gauge;
  silent: Gauge;
}

function decisionMetrics(): DecisionMetrics {
  const registers = [metricsRegistry()];
  return {
    probes: registeredMetric('ulysses_node_heartbeat_probes_total', () => new Counter({ name: 'ulysses_node_heartbeat_probes_total', help: 'Heartbeat probes sent to node agents.', registers })),
    missed: registeredMetric('ulysses_node_heartbeats_missed_total', () =>
      new Counter({ name: 'ulysses_node_heartbeats_missed_total', help: 'Probe periods in which an armed node agent did not answer.', registers }),
    ),
    failures: registeredMetric('ulysses_node_failures_detected_total', () =>
      new Counter({ name: 'ulysses_node_failures_detected_total', help: 'Nodes found failed (agent and kubelet silent) and tainted ulysses.io/unreachable.', registers }),
    ),
    suppressed: registeredMetric('ulysses_node_failures_suppressed_total', () =>
      new Counter({
        name: 'ulysses_node_failures_suppressed_total',
        help: 'Node failures not acted on because too many nodes were silent together (full or partial disruption).',
        labelNames: ['reason'],
        registers,
      }),
    ),
    guards: registeredMetric('ulysses_node_failure_guards_total', () =>
      new Counter({
        name: 'ulysses_node_failure_guards_total',
        help: 'False-positive guards that fired: kubelet-answers (agent silent, kubelet alive), decider-lag (this process ran late; windows restarted).',
        labelNames: ['guard'],
        registers,
      }),
    ),
    detection: registeredMetric('ulysses_node_failure_detection_seconds', () =>
      new Histogram({ name: 'ulysses_node_failure_detection_seconds', help: 'Time from the last heartbeat reply of a failed node to the decision.', buckets: [0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30], registers }),
    ),
    armed: registeredMetric('ulysses_node_agents_armed', () => new Gauge({ name: 'ulysses_node_agents_armed', help: 'Node agents this decider has heard (their nodes are monitored).', registers })),
    silent: registeredMetric('ulysses_node_agents_silent', () => new Gauge({ name: 'ulysses_node_agents_silent', help: 'Armed node agents silent for more than the check threshold.', registers })),
  };
}

export interface NodeFailureControllerOptions {
  client: KubeClient;
  nodes: ResilientInformer<V1Node>;
  config: NodeFailureConfig;
  log: Logger;
  events?: ComponentEventRecorder;
  /** kubelet check (default: TLS handshake); tests of the wiring may replace it */
  checkKubelet?: (address: string, port: number, timeoutMs: number) => Promise<KubeletCheck>;
}

/** The decider's process side: probes over UDP, ticks, the taint and the Events. */
export class NodeFailureController {
  private config: NodeFailureConfig;
  private readonly detector: NodeFailureDetector;
  private readonly nonce = randomBytes(8);
  private seq = 0;
  private socket: dgram.Socket | undefined;
  private timer: NodeJS.Timeout | undefined;
  private nextTickAt = 0;
  private readonly writing = new Set<string>();
  private readonly metrics = decisionMetrics();
  private readonly events: ComponentEventRecorder;
  private readonly log: Logger;
  /** nodes whose agent replied since the last tick (the others missed a heartbeat) */
  private readonly repliedThisPeriod = new Set<string>();
  /** the evidence of each failed node, for the Event written with its taint */
  private readonly evidence = new Map<string, FailureEvidence>();
  /** per node, when a failed taint write may be tried again */
  private readonly retry = new Map<string, { at: number; delayMs: number }>();

  constructor(private readonly o: NodeFailureControllerOptions) {
    this.config = o.config;
    this.log = o.log.child({ controller: 'node-failure' });
    this.events = o.events ?? NO_EVENTS;
    const check = o.checkKubelet ?? checkKubeletTls;
    this.detector = new NodeFailureDetector(this.config, () => performance.now(), {
      checkKubelet: (_node, address, port) => (port ? check(address, port, this.config.confirmTimeoutMs) : Promise.resolve('inconclusive')),
      // evaluate once the replies already received are read (setImmediate: after the event loop's
      // I/O phase), not a period later; a check whose timer fired late is inconclusive, never silent
      onKubeletSilent: () =>
        setImmediate(() => {
          if (this.socket) this.detector.tick(0);
        }),
      onFailed: (node, e) => {
        this.metrics.failures.inc();
        this.metrics.detection.observe(e.silentMs / 1000);
        this.log.warn({ node, ...e }, 'node failed');
        // the Event goes out with the taint (writeTaint), saying what was found
        this.evidence.set(node, e);
        this.reconcileTaint(node);
      },
      onSuppressed: (nodes, reason, counts) => {
        this.metrics.suppressed.inc({ reason }, nodes.length);
        const message = `${counts.silent} of ${counts.armed} node agents silent together (${reason}): the control plane, this decider or the network is the likelier problem; nothing is evicted`;
        this.log.warn({ nodes, reason, ...counts }, 'node failures suppressed');
        for (const n of nodes) this.nodeEvent(n, 'Warning', NODE_FAILURE_EVENTS.suppressed, message);
      },
      onKubeletAnswers: (node, silentMs) => {
        this.metrics.guards.inc({ guard: 'kubelet-answers' });
        this.log.warn({ node, silentMs: Math.round(silentMs) }, 'node agent silent but the kubelet answers: node not failed');
        this.nodeEvent(node, 'Warning', NODE_FAILURE_EVENTS.kubeletAnswers, `node agent silent for ${Math.round(silentMs)} ms but the kubelet answers: not failed over (is the kubelet-shim running?)`);
      },
      onDeciderLag: (lateMs) => {
        this.metrics.guards.inc({ guard: 'decider-lag' });
        this.log.warn({ lateMs: Math.round(lateMs) }, 'failure detector ran late: every window restarts');
      },
    });
  }

  /** The configuration in force. */
  get current(): NodeFailureConfig {
    return this.config;
  }

  get running(): boolean {
    return this.socket !== undefined;
  }

  async start(): Promise<void> {
    if (!this.config.enabled || this.socket) return;
    // a larger receive buffer where the kernel allows it (net.core.rmem_max caps it); PROBE_BURST keeps within the default
    const socket = dgram.createSocket({ type: 'udp4', recvBufferSize: 4 * 1024 * 1024 });
    socket.on('message', (msg) => this.onReply(msg));
    socket.on('error', (err) => this.log.warn({ err: err.message }, 'heartbeat socket error'));
    await new Promise<void>((r) => socket.bind(0, () => r()));
    this.socket = socket;
    this.detector.setConfig(this.config);
    this.nextTickAt = performance.now() + this.config.periodMs;
    this.schedule();
    this.log.info({ ...this.config }, 'node failure detection on');
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const s = this.socket;
    this.socket = undefined;
    if (s) await new Promise<void>((r) => s.close(() => r()));
  }

  /** Applies a new configuration (validated); off removes every ulysses.io/unreachable taint. */
  async apply(config: NodeFailureConfig): Promise<void> {
    const was = this.config;
    this.config = config;
    if (!config.enabled) {
      await this.stop();
      if (was.enabled) await this.removeAllTaints();
      return;
    }
    this.detector.setConfig(config);
    if (!this.socket) await this.start();
  }

  /** Phase of a node as the detector sees it (tests, status). */
  phase(node: string): string | undefined {
    return this.detector.phase(node);
  }

  stats(): { armed: number; silent: number; failed: number } {
    return this.detector.stats();
  }

  private schedule(): void {
    const delay = Math.max(0, this.nextTickAt - performance.now());
    this.timer = setTimeout(() => this.onTick(), delay);
  }

  private onTick(): void {
    if (!this.socket) return;
    const now = performance.now();
    const late = now - this.nextTickAt;
    this.nextTickAt = Math.max(this.nextTickAt + this.config.periodMs, now + this.config.periodMs / 2);
    try {
      this.detector.setTargets(this.targets());
      this.detector.tick(late);
      const st = this.detector.stats();
      this.metrics.armed.set(st.armed);
      this.metrics.silent.set(st.silent);
      for (const { node } of this.detector.targets()) {
        if (this.detector.isArmed(node) && !this.repliedThisPeriod.has(node)) this.metrics.missed.inc();
        this.reconcileTaint(node);
      }
      this.repliedThisPeriod.clear();
      this.sendProbes();
    } catch (err) {
      this.log.error({ err: (err as Error).message }, 'failure detector tick failed');
    }
    this.schedule();
  }

  /** Every node with an InternalIP, except nodes simulated by KWOK. */
  private targets(): Map<string, { address: string; kubeletPort?: number }> {
    const out = new Map<string, { address: string; kubeletPort?: number }>();
    for (const n of this.o.nodes.list()) {
      if (n.metadata?.annotations?.[KWOK_NODE_ANNOTATION] !== undefined) continue;
      const address = n.status?.addresses?.find((a) => a.type === 'InternalIP' && !a.address.includes(':'))?.address;
      if (!address) continue;
      out.set(n.metadata!.name!, { address, kubeletPort: n.status?.daemonEndpoints?.kubeletEndpoint?.Port });
    }
    return out;
  }

  /**
   * One probe to every target, PROBE_BURST at a time with the event loop turning in between: the
   * replies of a burst are read before the next one is sent, so they never exceed the socket's
   * receive buffer (the kernel's default, 208 KiB, holds 256 replies: all at once, 1000 nodes lost
   * a fifth of theirs; docs/results/node-heartbeat-cost.md).
   */
  private sendProbes(): void {
    const targets = this.detector.targets();
    const seq = this.seq;
    this.seq = (this.seq + 1) >>> 0;
    const port = this.config.agentPort;
    const burst = (from: number) => {
      const socket = this.socket;
      if (!socket) return;
      const end = Math.min(targets.length, from + PROBE_BURST);
      for (let i = from; i < end; i++) socket.send(encodeHeartbeat({ type: 'probe', nonce: this.nonce, seq, node: targets[i]!.node }), port, targets[i]!.address);
      this.metrics.probes.inc(end - from);
      if (end < targets.length) setImmediate(() => burst(end));
    };
    burst(0);
  }

  private onReply(msg: Buffer): void {
    const h = decodeHeartbeat(msg);
    if ('error' in h || h.type !== 'reply' || !h.nonce.equals(this.nonce)) return;
    this.repliedThisPeriod.add(h.node);
    this.detector.heard(h.node);
  }

  private hasTaint(node: V1Node | undefined): boolean {
    return !!node?.spec?.taints?.some((t) => t.key === NODE_UNREACHABLE_TAINT);
  }

  /** Level-triggered: a failed node carries the taint; a node answering for a full window does not. */
  private reconcileTaint(name: string): void {
    if (this.writing.has(name) || (this.retry.get(name)?.at ?? 0) > performance.now()) return;
    const node = this.o.nodes.get(name);
    if (!node) return;
    const failed = this.detector.phase(name) === 'failed';
    const tainted = this.hasTaint(node);
    const answering = this.detector.answeringFor(name);
    if (failed && !tainted) void this.writeTaint(name, 'add');
    else if (!failed && tainted && answering !== undefined && answering >= this.config.windowMs) void this.writeTaint(name, 'remove');
  }

  private async writeTaint(name: string, op: 'add' | 'remove'): Promise<void> {
    this.writing.add(name);
    try {
      const taint: V1Taint | undefined = op === 'add' ? { key: NODE_UNREACHABLE_TAINT, effect: 'NoExecute', timeAdded: new Date().toISOString() as unknown as Date } : undefined;
      const written = await updateNodeTaint(this.o.client, name, NODE_UNREACHABLE_TAINT, taint);
      this.retry.delete(name);
      if (written && op === 'add') {
        const e = this.evidence.get(name);
        const found = e ? `node agent silent for ${Math.round(e.silentMs)} ms (${e.probesMissed} probes of ${this.config.periodMs} ms missed) and kubelet silent for ${e.kubeletSilentMs} ms` : 'node agent and kubelet silent';
        this.nodeEvent(name, 'Warning', NODE_FAILURE_EVENTS.detected, `${found}: tainted ${NODE_UNREACHABLE_TAINT}:NoExecute, ${this.config.scope === 'critical' ? 'its critical pods are' : 'its pods are'} evicted at once`);
      }
      if (written && op === 'remove') {
        this.log.info({ node: name }, 'node answers again: taint removed');
        this.nodeEvent(name, 'Normal', NODE_FAILURE_EVENTS.recovered, `node agent answered for ${this.config.windowMs} ms: ${NODE_UNREACHABLE_TAINT} removed`);
      }
      if (op === 'remove') this.evidence.delete(name);
    } catch (err) {
      // tried again with backoff (a missing RBAC permission must not become 10 requests a second)
      const delayMs = Math.min(TAINT_RETRY_MAX_MS, 2 * (this.retry.get(name)?.delayMs ?? TAINT_RETRY_MIN_MS / 2));
      this.retry.set(name, { at: performance.now() + delayMs, delayMs });
      this.log.warn({ node: name, op, err: (err as Error).message, retryInMs: delayMs }, 'taint write failed: trying again');
    } finally {
      this.writing.delete(name);
    }
  }

  private async removeAllTaints(): Promise<void> {
    for (const n of this.o.nodes.list()) if (this.hasTaint(n)) await this.writeTaint(n.metadata!.name!, 'remove');
  }

  private nodeEvent(node: string, type: 'Normal' | 'Warning', reason: string, message: string): void {
    const obj = this.o.nodes.get(node);
    // a Node's Events reference its name as uid, as the kubelet's and kcm's do
    this.events.event({ apiVersion: 'v1', kind: 'Node', metadata: { name: node, uid: obj?.metadata?.uid ?? node } }, type, reason, message);
  }
}

/** "on period=100ms window=600ms confirm=400ms scope=critical" / "off": the mode reported in status. */
export function describeNodeFailure(c: NodeFailureConfig): string {
  return c.enabled ? `on period=${c.periodMs}ms window=${c.windowMs}ms confirm=${c.confirmTimeoutMs}ms scope=${c.scope}` : 'off';
}

/**
 * UlyssesConfig/default spec.nodeFailure, applied live; absent: the configuration the process was
 * started with. An invalid section is reported (naming the field) and the last good one stays.
 */
export function nodeFailureRuntimeWatcher(kc: KubeAccess, controller: NodeFailureController, startConfig: NodeFailureConfig, log?: Logger): RuntimeConfigWatcher<typeof NodeFailureConfigSchema> {
  return new RuntimeConfigWatcher({
    kc,
    statusKey: 'node-failure',
    field: 'nodeFailure',
    schema: NodeFailureConfigSchema,
    select: (section) => section ?? startConfig,
    apply: async (cfg) => {
      await controller.apply(cfg);
      return describeNodeFailure(cfg);
    },
    log,
  });
}
