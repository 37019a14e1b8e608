#!/usr/bin/env -S npx tsx
/**
 * Cost of the fast node-failure detection's heartbeats (controller-manager/README.md "Node failure
 * detection"), `npm run bench:node-heartbeat`:
 *   npm run bench:node-heartbeat -- [--nodes 100,1000] [--seconds 20] [--warmup 5] [--period-ms 100]
 *       [--window-ms 600] [--confirm-ms 400] [--port 0] [--agent-processes 1] [--decider-rcvbuf BYTES]
 *   (--nodes 0: the idle baseline, both processes with no node and no agent)
 *
 * Heartbeats never go through the apiserver or etcd (the decider probes the node agents over UDP
 * itself), so what is left to measure is the CPU of the two ends. For each N in --nodes:
 *  - N node agents (kubelet-shim/node-agent.ts, one NodeAgent per node, node name `node-i`, each
 *    bound to its own loopback address 127.0.x.y, all on the same UDP port) run in --agent-processes
 *    CHILD processes (this file again, `--child`), so that the decider's CPU is measured alone;
 *  - this process runs a NodeFailureController (controller-manager/node-failure.ts) whose `nodes`
 *    informer is a fake list()/get() over N V1Nodes (InternalIP 127.0.x.y, kubelet port 10250), whose
 *    API client throws if it is ever called, and whose kubelet check answers `silent` after
 *    confirmTimeoutMs (as for a dead kubelet): an agent silent for a window would fail its node, so
 *    "no failure" below really means every agent kept answering.
 * After --warmup seconds (every agent armed), it measures for --seconds: the decider process' CPU
 * (process.cpuUsage delta, % of one core), the agent processes' CPU (each child reports its own
 * process.cpuUsage), probes sent (ulysses_node_heartbeat_probes_total of this process' registry) and
 * answered (ulysses_node_agent_probes_total{result="answered"} of the children's registries), the
 * heartbeats an armed agent missed (ulysses_node_heartbeats_missed_total), the decider-lag guards,
 * the kubelet checks started (suspects), and the failures and suppressions (must be 0). It also
 * audits the machine over the measured part (MachineCpuAudit: other work on the CPUs) and counts the
 * datagrams the kernel dropped because a socket's receive buffer was full, on the decider's socket
 * and on the agents' (the `drops` column of /proc/net/udp, per socket).
 *
 * --decider-rcvbuf BYTES (diagnostic, off by default) sets the receive buffer of the decider's
 * socket after it started (capped by net.core.rmem_max): the controller itself leaves the kernel's
 * default (net.core.rmem_default, 212992 bytes on stock kernels), and all N replies of a period come
 * back in one burst. The rcvbuf column shows the size in force (as the kernel reports it: doubled).
 * Drops on a CPU's full input backlog (net.core.netdev_max_backlog, loopback included) are counted
 * too (/proc/net/softnet_stat, whole machine).
 *
 * Loopback only (127.0.0.0/8: Linux routes the whole /8 to `lo`, no address to configure). --port 0
 * (default) picks a UDP port free on every address.
 */
import dgram from 'node:dgram';
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { V1Node } from '@kubernetes/client-node';
import type { Counter, Gauge } from 'prom-client';
import { NodeFailureConfigSchema, NodeFailureController, type KubeletCheck } from '../../controller-manager/node-failure.ts';
import { NodeAgent, NodeAgentConfigSchema } from '../../kubelet-shim/node-agent.ts';
import { metricsRegistry } from '../../core/metrics.ts';
import { silentLogger } from '../../core/logging.ts';
import type { KubeClient } from '../../core/kube.ts';
import type { ResilientInformer } from '../../core/informer.ts';
import { MachineCpuAudit, describeMachine, type RepCpu } from '../harness/cpu-window.ts';

const KUBELET_PORT = 10250;

/** Loopback address of node i: 127.0.1.1 ... 127.0.1.254, 127.0.2.1, ... (never 127.0.0.1). */
function nodeAddress(i: number): string {
  return `127.0.${1 + Math.floor(i / 254)}.${1 + (i % 254)}`;
}

// ---------------------------------------------------------------------------------------------
// Child: the node agents
// ---------------------------------------------------------------------------------------------

type ToChild = { cmd: 'start'; nodes: Array<{ name: string; address: string }>; port: number } | { cmd: 'sample' } | { cmd: 'stop' };
interface ChildSample {
  /** process.cpuUsage() of the child, µs */
  userUs: number;
  systemUs: number;
  answered: number;
  /** probes not answered (wrong-node, malformed, rate-limited) */
  dropped: number;
  /** agents that answered at least one probe */
  answering: number;
}
type FromChild = { type: 'ready' } | { type: 'error'; message: string } | ({ type: 'sample' } & ChildSample) | { type: 'stopped' };

async function childMain(): Promise<void> {
  const agents: NodeAgent[] = [];
  const log = silentLogger();
  const send = (m: FromChild) => process.send!(m);
  const probes = async () => {
    const c = metricsRegistry().getSingleMetric('ulysses_node_agent_probes_total') as Counter<'result'> | undefined;
    const values = c ? (await c.get()).values : [];
    let answered = 0,
      dropped = 0;
    for (const v of values) (v.labels.result === 'answered' ? (answered += v.value) : (dropped += v.value));
    return { answered, dropped };
  };
  process.on('message', async (m: ToChild) => {
    try {
      if (m.cmd === 'start') {
        for (const n of m.nodes) {
          // the default registry: every agent of this process adds to the same counters
          const a = new NodeAgent({ node: n.name, config: NodeAgentConfigSchema.parse({ address: n.address, port: m.port }), log });
          await a.start();
          agents.push(a);
        }
        send({ type: 'ready' });
      } else if (m.cmd === 'sample') {
        const cpu = process.cpuUsage();
        send({ type: 'sample', userUs: cpu.user, systemUs: cpu.system, ...(await probes()), answering: agents.filter((a) => a.answered > 0).length });
      } else if (m.cmd === 'stop') {
        await Promise.all(agents.map((a) => a.stop()));
        send({ type: 'stopped' });
        process.disconnect();
      }
    } catch (err) {
      send({ type: 'error', message: (err as Error).message });
    }
  });
  // the parent went away: do not linger
  process.on('disconnect', () => process.exit(0));
}

// ---------------------------------------------------------------------------------------------
// Parent: the decider and the measurement
// ---------------------------------------------------------------------------------------------

/** One child process of agents, driven over its IPC channel. */
class AgentProcess {
  private readonly child: ChildProcess;
  private waiting: Array<{ type: FromChild['type']; resolve: (m: FromChild) => void; reject: (e: Error) => void }> = [];
  private exited = false;

  constructor(readonly index: number) {
    const self = fileURLToPath(import.meta.url);
    this.child = fork(self, ['--child'], {
      execArgv: ['--import', 'tsx'],
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, ULYSSES_LOG_LEVEL: 'warn' },
    });
    this.child.on('message', (m: FromChild) => {
      if (m.type === 'error') {
        for (const w of this.waiting.splice(0)) w.reject(new Error(`agent process ${index}: ${m.message}`));
        return;
      }
      const i = this.waiting.findIndex((w) => w.type === m.type);
      if (i >= 0) this.waiting.splice(i, 1)[0]!.resolve(m);
    });
    this.child.on('exit', (code, signal) => {
      this.exited = true;
      for (const w of this.waiting.splice(0)) w.reject(new Error(`agent process ${index} exited (${code ?? signal})`));
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  private ask<T extends FromChild['type']>(msg: ToChild, type: T, timeoutMs = 60_000): Promise<Extract<FromChild, { type: T }>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`agent process ${this.index}: no ${type} within ${timeoutMs} ms`)), timeoutMs);
      this.waiting.push({
        type,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m as Extract<FromChild, { type: T }>);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.child.send(msg);
    });
  }

  async start(nodes: Array<{ name: string; address: string }>, port: number): Promise<void> {
    await this.ask({ cmd: 'start', nodes, port }, 'ready');
  }

  async sample(): Promise<ChildSample> {
    const { type: _t, ...s } = await this.ask({ cmd: 'sample' }, 'sample');
    return s;
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((r) => this.child.once('exit', () => r()));
    try {
      await this.ask({ cmd: 'stop' }, 'stopped', 10_000);
    } catch {
      /* killed below */
    }
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    if (!this.exited) {
      if (this.child.connected) this.child.disconnect();
      await exited;
    }
    clearTimeout(timer);
  }

  kill(): void {
    if (!this.exited) this.child.kill('SIGKILL');
  }
}

/** A UDP port free on every address right now (bound on 0.0.0.0 and released). */
async function freeUdpPort(): Promise<number> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '0.0.0.0', () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** The informer the controller reads: list() and get() over fixed Nodes. */
function fakeNodes(n: number): ResilientInformer<V1Node> {
  const nodes = new Map<string, V1Node>();
  for (let i = 0; i < n; i++) {
    const name = `node-${i}`;
    nodes.set(name, {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, uid: `uid-${name}`, resourceVersion: '1' },
      status: { addresses: [{ type: 'InternalIP', address: nodeAddress(i) }], daemonEndpoints: { kubeletEndpoint: { Port: KUBELET_PORT } } },
    });
  }
  const list = [...nodes.values()];
  return { list: () => list, get: (k: string) => nodes.get(k) } as unknown as ResilientInformer<V1Node>;
}

/** An API client that must never be used: heartbeats do not touch the apiserver. */
function throwingClient(calls: { n: number }): KubeClient {
  return new Proxy({} as KubeClient, {
    get(_t, prop) {
      if (prop === 'then') return undefined;
      return () => {
        calls.n++;
        throw new Error(`API client called (${String(prop)}): heartbeats must not touch the apiserver`);
      };
    },
  });
}

async function counterValue(name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = metricsRegistry().getSingleMetric(name) as Counter<string> | Gauge<string> | undefined;
  if (!m) return 0;
  let sum = 0;
  for (const v of (await m.get()).values) if (Object.entries(labels).every(([k, l]) => v.labels[k] === l)) sum += v.value;
  return sum;
}

async function deciderCounters() {
  return {
    probes: await counterValue('ulysses_node_heartbeat_probes_total'),
    missed: await counterValue('ulysses_node_heartbeats_missed_total'),
    failures: await counterValue('ulysses_node_failures_detected_total'),
    suppressed: await counterValue('ulysses_node_failures_suppressed_total'),
    lagGuards: await counterValue('ulysses_node_failure_guards_total', { guard: 'decider-lag' }),
    kubeletGuards: await counterValue('ulysses_node_failure_guards_total', { guard: 'kubelet-answers' }),
    armed: await counterValue('ulysses_node_agents_armed'),
  };
}

/**
 * Datagrams the kernel dropped on the UDP sockets bound to `port` (any address), from the `drops`
 * column of /proc/net/udp: a full receive buffer, counted per socket (this network namespace).
 */
function udpSocketDrops(port: number): number {
  let sum = 0;
  for (const line of readFileSync('/proc/net/udp', 'utf8').trim().split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (parseInt(f[1]?.split(':')[1] ?? '', 16) === port) sum += Number(f[12] ?? 0);
  }
  return sum;
}

/** Packets dropped because a CPU's input backlog (net.core.netdev_max_backlog) was full: /proc/net/softnet_stat column 2, all CPUs. */
function softnetDrops(): number {
  return readFileSync('/proc/net/softnet_stat', 'utf8')
    .trim()
    .split('\n')
    .reduce((a, l) => a + parseInt(l.trim().split(/\s+/)[1] ?? '0', 16), 0);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Row {
  nodes: number;
  agentProcesses: number;
  seconds: number;
  probesPerS: number;
  answeredPerS: number;
  deciderCpuPct: number;
  agentsCpuPct: number;
  perAgentCpuPct: number;
  armed: number;
  answering: number;
  missed: number;
  lagGuards: number;
  kubeletChecks: number;
  failures: number;
  suppressed: number;
  apiCalls: number;
  rcvbufBytes: number;
  deciderDrops: number;
  agentDrops: number;
  backlogDrops: number;
  machine: RepCpu | null;
}

async function measure(n: number, o: Options): Promise<Row> {
  const port = o.port || (await freeUdpPort());
  const k = Math.max(1, Math.min(o.agentProcesses, n));
  const procs = Array.from({ length: k }, (_, i) => new AgentProcess(i));
  let controller: NodeFailureController | undefined;
  try {
    const all = Array.from({ length: n }, (_, i) => ({ name: `node-${i}`, address: nodeAddress(i) }));
    await Promise.all(procs.map((p, j) => p.start(all.filter((_, i) => i % k === j), port)));

    const apiCalls = { n: 0 };
    let kubeletChecks = 0;
    const config = NodeFailureConfigSchema.parse({ periodMs: o.periodMs, windowMs: o.windowMs, confirmTimeoutMs: o.confirmMs, agentPort: port });
    controller = new NodeFailureController({
      client: throwingClient(apiCalls),
      nodes: fakeNodes(n),
      config,
      log: silentLogger(),
      // a dead kubelet: any agent silent for a window would fail its node
      checkKubelet: (_address, _port, timeoutMs): Promise<KubeletCheck> => {
        kubeletChecks++;
        return new Promise((r) => setTimeout(() => r('silent'), timeoutMs));
      },
    });
    await controller.start();
    // the controller's socket (private): its receive buffer, and the diagnostic override
    const socket = (controller as unknown as { socket?: dgram.Socket }).socket!;
    if (o.deciderRcvbuf) socket.setRecvBufferSize(o.deciderRcvbuf);
    const rcvbufBytes = socket.getRecvBufferSize();
    const deciderPort = socket.address().port;

    await sleep(o.warmupSeconds * 1000);
    const armedAfterWarmup = controller.stats().armed;
    if (armedAfterWarmup !== n) console.error(`N=${n}: only ${armedAfterWarmup} of ${n} agents armed after the ${o.warmupSeconds} s warm-up`);

    const audit = new MachineCpuAudit();
    audit.arm();
    const d0 = await deciderCounters();
    const deciderDrops0 = udpSocketDrops(deciderPort);
    const agentDrops0 = udpSocketDrops(port);
    const backlog0 = softnetDrops();
    const checks0 = kubeletChecks;
    const c0 = await Promise.all(procs.map((p) => p.sample()));
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    await sleep(o.seconds * 1000);
    const cpu = process.cpuUsage(cpu0);
    const t1 = performance.now();
    const c1 = await Promise.all(procs.map((p) => p.sample()));
    const d1 = await deciderCounters();
    const deciderDrops1 = udpSocketDrops(deciderPort);
    const agentDrops1 = udpSocketDrops(port);
    const backlog1 = softnetDrops();
    const machine = audit.finish();
    const stats = controller.stats();

    const s = (t1 - t0) / 1000;
    const pct = (us: number) => (us / 1e6 / s) * 100;
    const agentsUs = c1.reduce((a, c, i) => a + c.userUs + c.systemUs - c0[i]!.userUs - c0[i]!.systemUs, 0);
    const answered = c1.reduce((a, c, i) => a + c.answered - c0[i]!.answered, 0);
    return {
      nodes: n,
      agentProcesses: k,
      seconds: s,
      probesPerS: (d1.probes - d0.probes) / s,
      answeredPerS: answered / s,
      deciderCpuPct: pct(cpu.user + cpu.system),
      agentsCpuPct: pct(agentsUs),
      perAgentCpuPct: n ? pct(agentsUs) / n : NaN,
      armed: stats.armed,
      answering: c1.reduce((a, c) => a + c.answering, 0),
      missed: d1.missed - d0.missed,
      lagGuards: d1.lagGuards - d0.lagGuards,
      kubeletChecks: kubeletChecks - checks0,
      // over the whole run, warm-up included
      failures: Math.max(stats.failed, d1.failures),
      suppressed: d1.suppressed,
      apiCalls: apiCalls.n,
      rcvbufBytes,
      deciderDrops: deciderDrops1 - deciderDrops0,
      agentDrops: agentDrops1 - agentDrops0,
      backlogDrops: backlog1 - backlog0,
      machine,
    };
  } finally {
    await controller?.stop();
    await Promise.all(procs.map((p) => p.stop().catch(() => p.kill())));
    // failures and suppressions are read as totals: start each N from zero
    for (const name of ['ulysses_node_failures_detected_total', 'ulysses_node_failures_suppressed_total']) (metricsRegistry().getSingleMetric(name) as Counter | undefined)?.reset();
  }
}

interface Options {
  nodes: number[];
  seconds: number;
  warmupSeconds: number;
  periodMs: number;
  windowMs: number;
  confirmMs: number;
  port: number;
  agentProcesses: number;
  deciderRcvbuf: number;
}

function options(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: { type: 'string', default: '100,1000' },
      seconds: { type: 'string', default: '20' },
      warmup: { type: 'string', default: '5' },
      'period-ms': { type: 'string', default: '100' },
      'window-ms': { type: 'string', default: '600' },
      'confirm-ms': { type: 'string', default: '400' },
      port: { type: 'string', default: '0' },
      'agent-processes': { type: 'string', default: '1' },
      'decider-rcvbuf': { type: 'string', default: '0' },
    },
    strict: true,
  });
  const num = (flag: string, v: string, min: number) => {
    const x = Number(v);
    if (!Number.isFinite(x) || x < min) throw new Error(`--${flag}: ${v} is not a number >= ${min}`);
    return x;
  };
  const nodes = values.nodes.split(',').map((v) => num('nodes', v.trim(), 0));
  if (nodes.some((x) => !Number.isInteger(x) || x > 254 * 254)) throw new Error(`--nodes: integers of 0-${254 * 254} (0: idle baseline, no agent and no node)`);
  return {
    nodes,
    seconds: num('seconds', values.seconds, 1),
    warmupSeconds: num('warmup', values.warmup, 1),
    periodMs: num('period-ms', values['period-ms'], 20),
    windowMs: num('window-ms', values['window-ms'], 100),
    confirmMs: num('confirm-ms', values['confirm-ms'], 50),
    port: num('port', values.port, 0),
    agentProcesses: num('agent-processes', values['agent-processes'], 1),
    deciderRcvbuf: num('decider-rcvbuf', values['decider-rcvbuf'], 0),
  };
}

async function main(): Promise<void> {
  const o = options(process.argv.slice(2));
  const rows: Row[] = [];
  for (const n of o.nodes) {
    console.error(`N=${n}: ${o.agentProcesses} agent process(es), warm-up ${o.warmupSeconds} s, measuring ${o.seconds} s ...`);
    rows.push(await measure(n, o));
  }

  console.log(
    `\nNode heartbeat cost: period ${o.periodMs} ms, window ${o.windowMs} ms, confirm ${o.confirmMs} ms; ${o.seconds} s measured after ${o.warmupSeconds} s warm-up; Node ${process.version}, ${cpus().length} CPUs, load average ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
  );
  console.log('CPU % = CPU time (user+system, process.cpuUsage) / wall time, in % of one core; agents: all agent processes together');
  const cols: Array<[string, number, (r: Row) => string]> = [
    ['nodes', 6, (r) => String(r.nodes)],
    ['agent procs', 12, (r) => String(r.agentProcesses)],
    ['probes/s', 10, (r) => r.probesPerS.toFixed(0)],
    ['answered/s', 11, (r) => r.answeredPerS.toFixed(0)],
    ['decider CPU %', 14, (r) => r.deciderCpuPct.toFixed(2)],
    ['agents CPU %', 13, (r) => r.agentsCpuPct.toFixed(2)],
    ['per agent %', 12, (r) => (r.nodes ? r.perAgentCpuPct.toFixed(4) : '-')],
    ['armed', 11, (r) => `${r.armed}/${r.nodes}`],
    ['rcvbuf', 9, (r) => String(r.rcvbufBytes)],
    ['decider drops', 14, (r) => String(r.deciderDrops)],
    ['agent drops', 12, (r) => String(r.agentDrops)],
    ['backlog drops', 14, (r) => String(r.backlogDrops)],
    ['missed', 8, (r) => String(r.missed)],
    ['lag guards', 11, (r) => String(r.lagGuards)],
    ['kubelet chk', 12, (r) => String(r.kubeletChecks)],
    ['failures', 9, (r) => String(r.failures)],
    ['suppressed', 11, (r) => String(r.suppressed)],
    ['API calls', 10, (r) => String(r.apiCalls)],
  ];
  console.log(cols.map(([h, w]) => h.padStart(w)).join(''));
  for (const r of rows) console.log(cols.map(([, w, v]) => v(r).padStart(w)).join(''));
  console.log('rcvbuf = receive buffer of the decider socket (bytes, as the kernel reports it); decider/agent drops = datagrams dropped on a full receive buffer of the decider socket / all agent sockets (/proc/net/udp); backlog drops = /proc/net/softnet_stat column 2 (netdev_max_backlog full), whole machine');
  console.log('missed = probe periods in which an armed agent did not answer (ulysses_node_heartbeats_missed_total); lag guards = ticks more than a period late (windows restarted);');
  console.log('kubelet chk = kubelet checks started (an agent silent for window - confirm); failures/suppressed over the whole run, warm-up included');
  for (const r of rows) console.log(`machine during N=${r.nodes}: ${r.machine ? describeMachine(r.machine) : '-'}`);

  const bad = rows.filter((r) => r.failures > 0 || r.suppressed > 0 || r.armed !== r.nodes || r.apiCalls > 0);
  if (bad.length) {
    for (const r of bad) console.error(`N=${r.nodes}: ${r.failures} failures, ${r.suppressed} suppressed, ${r.armed}/${r.nodes} armed, ${r.apiCalls} API calls: expected 0, 0, all, 0`);
    process.exitCode = 1;
  }
}

if (process.argv.includes('--child')) {
  void childMain();
} else {
  main().catch((err) => {
    console.error(err);
    process.exitCode = 1;
  });
}
