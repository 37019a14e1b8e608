/**
 * The 5G user plane around the eUPF pod (issue 41; docs/development/eupf.md "The user plane around the
 * pod"): the data network's echo, the gNB/UE stand-in and the SMF stand-in run on the host, which is
 * the gateway of every pod subnet. The SMF finds the UPF through the `upf` Service's EndpointSlice
 * (watched here, written to its `--upf-file`), never through a fixed address; GTP-U (N3) and PFCP
 * (N4) go to the pod IP. Their events (one JSON line each, experiments/5g/standin-events) are
 * collected with the host clock the harness uses.
 *
 *   host N3/N4/N6 address HOST_ADDRESS (a /32 on loopback, label lo:u5g, reached by every pod through
 *   its default route):  gNB :2152 + control :9999, SMF :8805, data-network echo :7777
 *   UE pool UE_POOL:  routed via the current UPF pod's IP (set by the SMF on every new UPF)
 */
import { execFile, spawn, type ChildProcessByStdio } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { createWriteStream, mkdirSync, renameSync, writeFileSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { promisify } from 'node:util';
import type { KubeConfig, V1EndpointSlice } from '@kubernetes/client-node';
import { ResilientInformer } from '../../core/informer.ts';
import { EUPF_PORTS, standinBinary } from './eupf.ts';

const run = promisify(execFile);

/** The host's address for N3 (gNB), N4 (SMF) and N6 (the data network): on loopback, so no node's bridge going down takes it away. */
export const HOST_ADDRESS = '10.203.0.1';
export const HOST_LABEL = 'lo:u5g';
/** The UEs' addresses: the data network routes them via the current UPF (N6 routing, set by the SMF). */
export const UE_POOL = '10.204.0.0/16';
export const UE_IP = '10.204.0.10';
export const DN_PORT = 7777;
export const GNB_CONTROL_PORT = 9999;
export const UL_TEID = 0x100;
export const DL_TEID = 0x200;

/** One line of a stand-in (experiments/5g/standin-events), or `src: 'harness'` for what this module saw. */
export interface StandinEvent {
  t_ns: number;
  src: 'smf' | 'gnb' | 'dn' | 'harness';
  event: string;
  [field: string]: unknown;
}

/**
 * The SMF's address source from the Service's EndpointSlices: the current address while it stays a
 * ready endpoint, else the first ready one (sorted, so every caller picks the same). A terminating
 * endpoint is not ready (the EndpointSlice controller), so a replacement is chosen as soon as the old
 * pod is being deleted; undefined while no endpoint is ready (the SMF keeps what it has).
 */
export function upfAddressFrom(slices: readonly V1EndpointSlice[], current: string | undefined): string | undefined {
  const ready = slices
    .filter((s) => s.addressType === 'IPv4')
    .flatMap((s) => s.endpoints ?? [])
    .filter((e) => e.conditions?.ready === true && e.conditions?.terminating !== true)
    .map((e) => e.addresses[0])
    .filter((a): a is string => !!a)
    .sort();
  if (current && ready.includes(current)) return current;
  return ready[0];
}

export interface UserPlaneOptions {
  kc: KubeConfig;
  /** the UPF Service's namespace */
  namespace: string;
  /** the UPF Service (its EndpointSlices are the SMF's address source), default `upf` */
  service?: string;
  /** where the stand-ins' logs and the address file go */
  dir: string;
  /** PDU sessions the SMF sets up (only the first carries the UE's traffic) */
  sessions?: number;
  /** the UE's uplink period, default 20 ms */
  intervalMs?: number;
  /** a started watch of the Service's EndpointSlices to share (the harness' own); default: one of its own */
  endpointSlices?: ResilientInformer<V1EndpointSlice>;
  /** SMF heartbeat period / timeout (default 2 s / 1 s, Open5GS-like seconds) and misses before heartbeat-lost (3) */
  heartbeat?: { intervalMs: number; timeoutMs: number; retries: number };
}

interface Stream {
  name: string;
  proc: ChildProcessByStdio<null, Readable, Readable>;
  log: WriteStream;
  exit?: string;
}

/**
 * The stand-ins and the address feed, started together, stopped together. `events` holds every line
 * in arrival order; `waitFor` resolves with the first (from an index on) that matches, and fails at
 * once, naming the process and its last lines, when a stand-in exits.
 */
export class UserPlane extends EventEmitter {
  readonly events: StandinEvent[] = [];
  private readonly streams: Stream[] = [];
  private slices?: ResilientInformer<V1EndpointSlice>;
  private onSlices?: () => void;
  private address: string | undefined;
  private stopped = false;

  private constructor(private readonly o: UserPlaneOptions) {
    super();
  }

  static async start(o: UserPlaneOptions): Promise<UserPlane> {
    const up = new UserPlane(o);
    try {
      await up.begin();
    } catch (err) {
      await up.stop();
      throw err;
    }
    return up;
  }

  private async begin(): Promise<void> {
    const o = this.o;
    mkdirSync(o.dir, { recursive: true });
    await ensureHostAddress();
    const [smf, gnb] = [standinBinary('smf-standin'), standinBinary('gnb-standin')];
    const addressFile = join(o.dir, 'upf-address');
    writeFileSync(addressFile, '');
    const hb = o.heartbeat ?? { intervalMs: 2000, timeoutMs: 1000, retries: 3 };
    this.spawn('dn', gnb, ['echo', '--listen', `${HOST_ADDRESS}:${DN_PORT}`]);
    this.spawn('gnb', gnb, [
      '--n3', `${HOST_ADDRESS}:${EUPF_PORTS.gtpu}`, '--control', `${HOST_ADDRESS}:${GNB_CONTROL_PORT}`, '--ue-ip', UE_IP,
      '--dn', `${HOST_ADDRESS}:${DN_PORT}`, '--ul-teid', String(UL_TEID), '--dl-teid', String(DL_TEID), '--interval', `${o.intervalMs ?? 20}ms`,
    ]);
    this.spawn('smf', smf, [
      '--upf-file', addressFile, '--local', `${HOST_ADDRESS}:${EUPF_PORTS.pfcp}`, '--ue-ip', UE_IP, '--ul-teid', String(UL_TEID),
      '--dl-teid', String(DL_TEID), '--sessions', String(o.sessions ?? 1), '--gnb-n3', HOST_ADDRESS, '--gnb-control', `${HOST_ADDRESS}:${GNB_CONTROL_PORT}`,
      '--n6-route-cmd', `ip route replace ${UE_POOL} via {upf}`,
      '--hb-interval', `${hb.intervalMs}ms`, '--hb-timeout', `${hb.timeoutMs}ms`, '--hb-retries', String(hb.retries),
    ]);
    await Promise.all(['dn', 'gnb', 'smf'].map((src) => this.waitFor((e) => e.src === src && e.event === 'start', `the ${src} stand-in's start`, 30_000)));

    // the address source: the Service's ready endpoint, written as the SMF's --upf-file (renamed into place)
    const service = o.service ?? 'upf';
    const slices =
      o.endpointSlices ??
      new ResilientInformer<V1EndpointSlice>(o.kc, {
        path: `/apis/discovery.k8s.io/v1/namespaces/${o.namespace}/endpointslices`,
        labelSelector: `kubernetes.io/service-name=${service}`,
      });
    this.slices = slices;
    const onSlices = () => {
      const next = upfAddressFrom(slices.list(), this.address);
      if (!next || next === this.address) return;
      const previous = this.address;
      this.address = next;
      writeFileSync(`${addressFile}.tmp`, `${next}:${EUPF_PORTS.pfcp}\n`);
      renameSync(`${addressFile}.tmp`, addressFile);
      this.push({ t_ns: nowNs(), src: 'harness', event: 'upf-endpoint', upf: next, previous: previous ?? null });
    };
    this.onSlices = onSlices;
    for (const ev of ['add', 'update', 'delete'] as const) slices.on(ev, onSlices);
    if (!o.endpointSlices) await slices.start();
    onSlices();
  }

  private spawn(name: string, bin: string, args: string[]): void {
    const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const log = createWriteStream(join(this.o.dir, `${name}.log`));
    const s: Stream = { name, proc, log };
    this.streams.push(s);
    proc.stderr.pipe(log, { end: false });
    createInterface({ input: proc.stdout }).on('line', (line) => {
      log.write(`${line}\n`);
      try {
        const e = JSON.parse(line) as StandinEvent;
        if (typeof e.t_ns === 'number' && typeof e.event === 'string') this.push(e);
      } catch {
        // a stand-in prints only JSON lines on stdout; anything else stays in its log
      }
    });
    proc.on('error', (err) => this.exited(s, err.message));
    proc.on('exit', (code, signal) => this.exited(s, `exit ${code ?? signal}`));
  }

  private exited(s: Stream, how: string): void {
    if (s.exit) return;
    s.exit = how;
    if (!this.stopped) this.emit('exit', s);
  }

  private push(e: StandinEvent): void {
    this.events.push(e);
    this.emit('event', e);
  }

  /** Why the user plane stopped working by itself (a stand-in exited), or undefined. */
  get problem(): string | undefined {
    const gone = this.streams.find((s) => s.exit);
    return gone && !this.stopped ? `the ${gone.name} stand-in ended (${gone.exit}); see ${join(this.o.dir, `${gone.name}.log`)}` : undefined;
  }

  /** The UPF address the SMF was last given (the pod IP). */
  get upfAddress(): string | undefined {
    return this.address;
  }

  /** The first event from index `from` on that matches; rejects when a stand-in exits or after timeoutMs, with the last events. */
  waitFor(match: (e: StandinEvent) => boolean, what: string, timeoutMs: number, from = 0): Promise<StandinEvent> {
    const found = this.events.slice(from).find(match);
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.off('event', onEvent);
        this.off('exit', onExit);
      };
      const onEvent = (e: StandinEvent) => {
        if (!match(e)) return;
        done();
        resolve(e);
      };
      const onExit = (s: Stream) => {
        done();
        reject(new Error(`waiting for ${what}: the ${s.name} stand-in ended (${s.exit}); see ${join(this.o.dir, `${s.name}.log`)}\n${this.tail()}`));
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`waiting for ${what}: nothing after ${timeoutMs} ms\n${this.tail()}`));
      }, timeoutMs);
      this.on('event', onEvent);
      this.on('exit', onExit);
    });
  }

  /** The last events, one line each (for failure messages). */
  tail(n = 15): string {
    return this.events
      .slice(-n)
      .map((e) => JSON.stringify(e))
      .join('\n');
  }

  /** Stops the stand-ins and the feed; takes the UE pool's route and the host address away. Safe to call twice. */
  async stop(): Promise<void> {
    this.stopped = true;
    // a shared watch stays with its owner; only this one's handlers leave it
    if (!this.o.endpointSlices) this.slices?.stop();
    else if (this.onSlices) for (const ev of ['add', 'update', 'delete'] as const) this.slices?.off(ev, this.onSlices);
    await Promise.all(
      this.streams.map(async (s) => {
        if (!s.exit) {
          const gone = new Promise((r) => s.proc.once('exit', r));
          s.proc.kill('SIGTERM');
          await Promise.race([gone, new Promise((r) => setTimeout(r, 3000).unref())]);
          if (!s.exit) s.proc.kill('SIGKILL');
        }
        await new Promise<void>((r) => s.log.end(r));
      }),
    );
    await removeHostAddress();
  }
}

/** The stand-ins' clock: Unix nanoseconds (here with millisecond resolution). */
const nowNs = () => Date.now() * 1e6;

/**
 * The host address on the loopback device under its own label (idempotent): local to the host whatever
 * happens to the nodes' bridges, reached by every pod through its default route. (No dummy link: the
 * kernel here has no dummy driver.)
 */
export async function ensureHostAddress(): Promise<void> {
  const addrs = (await run('ip', ['-o', '-4', 'addr', 'show', 'dev', 'lo'])).stdout;
  if (!addrs.includes(` ${HOST_ADDRESS}/32 `)) await run('ip', ['addr', 'add', `${HOST_ADDRESS}/32`, 'dev', 'lo', 'label', HOST_LABEL]);
}

/** Takes the UE pool's route and the host address away. */
export async function removeHostAddress(): Promise<void> {
  await run('ip', ['route', 'del', UE_POOL]).catch(() => undefined);
  await run('ip', ['addr', 'del', `${HOST_ADDRESS}/32`, 'dev', 'lo']).catch(() => undefined);
}

/** The user plane's failover events (results.ts USER_PLANE_EVENTS), seconds after t0Ms. */
export interface UserPlaneTimes {
  upfAssociation: number | null;
  upfSession: number | null;
  gnbUpdated: number | null;
  connectionRestored: number | null;
}

/**
 * The user plane's failover events from the stand-ins' lines, each the first after t0Ms that concerns
 * a UPF other than `before` (the pod IP the session ran through before the failure): the SMF's
 * association with it, all its sessions established (`sessions-ready`), the gNB's switch to it
 * (`n3-changed`), and connection restored (the gNB's first downlink reply through it after the switch).
 */
export function userPlaneTimes(events: readonly StandinEvent[], before: string, t0Ms: number): UserPlaneTimes {
  const ip = (addr: unknown) => (typeof addr === 'string' ? addr.replace(/:\d+$/, '') : undefined);
  const first = (src: StandinEvent['src'], event: string, addressOf: (e: StandinEvent) => unknown) => {
    const e = events.find((x) => x.src === src && x.event === event && x.t_ns / 1e6 >= t0Ms && ip(addressOf(x)) !== undefined && ip(addressOf(x)) !== before);
    return e ? Math.round(e.t_ns / 1e3 - t0Ms * 1e3) / 1e6 : null;
  };
  return {
    upfAssociation: first('smf', 'association', (e) => e.upf),
    upfSession: first('smf', 'sessions-ready', (e) => e.upf),
    gnbUpdated: first('gnb', 'n3-changed', (e) => e.upf_n3),
    connectionRestored: first('gnb', 'connection-restored', (e) => e.via),
  };
}
