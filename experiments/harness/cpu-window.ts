/**
 * Who uses the CPUs while the critical pod is on its way (issue 7's load/idle analysis): CPU time
 * per process group between two snapshots of /proc, one right before the taint and one
 * `windowMs` after it, plus the machine's busy time from /proc/stat over the same window.
 *
 * Process groups: the harness itself, the control-plane binaries by name, a real node's processes
 * as `<node>/<comm>` (the node from the command line or the cgroup path: kubelet, kubelet-shim,
 * containerd, containerd-shim, the containers' processes), kernel threads as `kernel`. Short-lived
 * children (runc, CNI plugins) are counted in their parent once reaped (cutime/cstime), so a node's
 * sandbox work shows up under its containerd / containerd-shim. Local testbed only (it reads this
 * machine's /proc).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Session, type Profiler } from 'node:inspector';
import { z } from 'zod';

export const CpuWindowSchema = z.object({
  /** the window: taint -> taint + windowMs */
  windowMs: z.number().int().positive(),
  /** CPU-seconds the whole machine was busy in the window (all CPUs; /proc/stat) */
  busyCpuS: z.number().nonnegative(),
  /** CPU milliseconds per process group in the window, largest first (groups above 1 ms) */
  byGroup: z.record(z.string(), z.number().nonnegative()),
  /** how long the second snapshot took to read (ms): the probe's own cost on the harness' CPU */
  snapshotMs: z.number().nonnegative(),
  /**
   * With profiling: where the harness' own CPU went in the window (V8 sampling profile), self time in
   * ms per package (node_modules/<pkg>, node:internal, our directories, "(garbage collector)", ...)
   * and per function, largest first.
   */
  harnessProfile: z
    .object({
      byPackage: z.record(z.string(), z.number().nonnegative()),
      topFunctions: z.array(z.object({ fn: z.string(), ms: z.number().nonnegative() })),
    })
    .optional(),
});
export type CpuWindow = z.infer<typeof CpuWindowSchema>;

/** The machine over a whole repetition, taint to its last event ({@link MachineCpuAudit}). */
export const RepCpuSchema = z.object({
  /** seconds from the taint to the end of the measured part (last event or timeout) */
  seconds: z.number().nonnegative(),
  /** CPU-seconds the machine was busy (all CPUs, /proc/stat), and of them stolen by the hypervisor */
  busyCpuS: z.number().nonnegative(),
  stealCpuS: z.number().nonnegative(),
  /** CPU-seconds of the testbed's processes ({@link isTestbedGroup}) */
  testbedCpuS: z.number().nonnegative(),
  /** CPU-seconds of every other process on the machine: work that competed with the testbed */
  outsideCpuS: z.number().nonnegative(),
  /** the largest groups outside the testbed, CPU ms (at most 5, above 10 ms) */
  outside: z.record(z.string(), z.number().nonnegative()),
});
export type RepCpu = z.infer<typeof RepCpuSchema>;

/** A repetition shared the machine when processes outside the testbed used more than 1% of a CPU over it (at least 0.1 CPU-s). */
export const sharedMachine = (c: RepCpu): boolean => c.outsideCpuS > Math.max(0.1, 0.01 * c.seconds);

/** The largest groups outside the testbed, e.g. "bash 3000 ms, node 400 ms". */
export const formatOutside = (c: RepCpu): string => Object.entries(c.outside).map(([g, ms]) => `${g} ${ms.toFixed(0)} ms`).join(', ');

/** One line for a benchmark's output: the machine over a measured part, and whether others shared it. */
export function describeMachine(c: RepCpu): string {
  const outside = formatOutside(c);
  return `${c.seconds.toFixed(1)} s, busy ${c.busyCpuS.toFixed(2)} CPU-s (steal ${c.stealCpuS.toFixed(2)}), ours ${c.testbedCpuS.toFixed(2)}, outside ${c.outsideCpuS.toFixed(2)}${outside ? ` (${outside})` : ''}${sharedMachine(c) ? ' — SHARED: other work ran on these CPUs' : ''}`;
}

/** One reading of the machine: every process' group and ticks, and /proc/stat's busy and steal ticks. */
export interface MachineSnapshot {
  procs: Map<number, ProcSample>;
  ticks: { busy: number; steal: number };
}

/** Reads the machine once (groups cached per pid in `groups`). */
export function snapshotMachine(groups: Map<number, string>): MachineSnapshot {
  return { procs: snapshotProcesses(groups), ticks: machineTicks(readFileSync('/proc/stat', 'utf8')) };
}

interface ProcSample {
  group: string;
  /** utime + stime + cutime + cstime, clock ticks */
  ticks: number;
}

/** USER_HZ on Linux (sysconf(_SC_CLK_TCK)); 100 on every architecture Node runs on here. */
const CLK_TCK = 100;

/** Group name of a process from its comm, command line and cgroup (see the module comment). */
export function processGroup(comm: string, cmdline: string, cgroup: string, isKernelThread: boolean, isHarness: boolean): string {
  if (isKernelThread) return 'kernel';
  const node = /\b(real-\d+)\b/.exec(cmdline)?.[1] ?? /\/ulysses-(real-\d+)\//.exec(cgroup)?.[1];
  // our TypeScript components run as "node .../<component>/main.ts" or ".../<tool>.ts" (comm
  // "MainThread" where Node.js names its main thread)
  const name = comm === 'node' || comm === 'MainThread' ? (/([\w-]+)\/main\.ts\b/.exec(cmdline)?.[1] ?? /([\w-]+)\.ts\b/.exec(cmdline)?.[1] ?? comm) : comm;
  // a testbed the harness brought up itself is its child: its processes keep their own groups
  if (isHarness && !node && !TESTBED_GROUPS.has(name)) return 'harness';
  return node ? `${node}/${name}` : name;
}

/** Fields after the ")" that ends comm in /proc/<pid>/stat (comm may hold spaces and parentheses). */
export function parseStat(stat: string): { comm: string; state: string; ppid: number; ticks: number; flags: number } | undefined {
  const open = stat.indexOf('(');
  const close = stat.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const f = stat.slice(close + 2).split(' ');
  // f[0] = state (field 3), so field n is f[n - 3]
  const num = (n: number) => Number(f[n - 3]);
  const ticks = num(14) + num(15) + num(16) + num(17);
  if (!Number.isFinite(ticks)) return undefined;
  return { comm: stat.slice(open + 1, close), state: f[0]!, ppid: num(4), ticks, flags: num(9) };
}

const PF_KTHREAD = 0x00200000;

function readOr(path: string, fallback: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return fallback;
  }
}

/** Pids of every process on the machine (/proc's numeric entries). */
export function procPids(): number[] {
  return readdirSync('/proc').map(Number).filter(Number.isInteger);
}

/** State letter of a process from /proc/<pid>/stat (R running, S sleeping, T stopped, ...); 'gone' once it exited. */
export function processState(pid: number): string {
  return parseStat(readOr(`/proc/${pid}/stat`, ''))?.state ?? 'gone';
}

/**
 * The harness' own processes: the npm/npx/sh/node launchers right above this one (`npx tsx
 * cli/ulysses.ts ...`: npm exec, sh, tsx's node; a benchmark's parent) and everything they started
 * (this process, tsx's esbuild services, a benchmark's measuring child and clients), from pid ->
 * parent pid and comm.
 */
export function harnessFamily(self: number, procs: ReadonlyMap<number, { comm: string; ppid: number }>): Set<number> {
  let root = self;
  for (let p = procs.get(self)?.ppid; p !== undefined && p > 1 && /^(node|npm|npx|sh)$|^npm /.test(procs.get(p)?.comm ?? ''); p = procs.get(p)?.ppid) root = p;
  return new Set(withDescendants([root], procs));
}

/**
 * `roots` and every process below them, each after its parent (`procs`: pid -> parent pid, this
 * machine's /proc when absent). A node's supervised daemon (the kubelet-shim under its unit's
 * supervisor) stops with its supervisor, as on a machine that died.
 */
export function withDescendants(roots: readonly number[], procs?: ReadonlyMap<number, { ppid: number }>): number[] {
  const children = new Map<number, number[]>();
  const add = (pid: number, ppid: number) => children.set(ppid, [...(children.get(ppid) ?? []), pid]);
  if (procs) for (const [pid, st] of procs) add(pid, st.ppid);
  else
    for (const pid of procPids()) {
      const st = parseStat(readOr(`/proc/${pid}/stat`, ''));
      if (st) add(pid, st.ppid);
    }
  const out: number[] = [];
  const seen = new Set<number>();
  const visit = (pid: number) => {
    if (seen.has(pid)) return;
    seen.add(pid);
    out.push(pid);
    for (const c of children.get(pid) ?? []) visit(c);
  };
  for (const r of roots) visit(r);
  return out;
}

/** One snapshot: pid -> group and ticks. Processes that vanish while being read are skipped. */
export function snapshotProcesses(groups: Map<number, string>): Map<number, ProcSample> {
  const stats = new Map<number, NonNullable<ReturnType<typeof parseStat>>>();
  for (const pid of procPids()) {
    const st = parseStat(readOr(`/proc/${pid}/stat`, ''));
    if (st) stats.set(pid, st);
  }
  const harness = harnessFamily(process.pid, stats);
  assignGroups(stats, harness, (pid) => ({ cmdline: readOr(`/proc/${pid}/cmdline`, '').replaceAll('\0', ' '), cgroup: readOr(`/proc/${pid}/cgroup`, '') }), groups);
  const out = new Map<number, ProcSample>();
  for (const [pid, st] of stats) out.set(pid, { group: groups.get(pid)!, ticks: st.ticks });
  return out;
}

/**
 * The group of every process of `stats` into `groups` (kept there for pids already named):
 * {@link processGroup} from its comm, command line and cgroup (`read`), except tsx's transform
 * service (`esbuild`), which counts in the Node.js process that started it.
 */
export function assignGroups(
  stats: ReadonlyMap<number, { comm: string; ppid: number; flags: number }>,
  harness: ReadonlySet<number>,
  read: (pid: number) => { cmdline: string; cgroup: string },
  groups: Map<number, string>,
): void {
  const groupOf = (pid: number, st: { comm: string; ppid: number; flags: number }): string => {
    let group = groups.get(pid);
    if (group !== undefined) return group;
    const parent = stats.get(st.ppid);
    if (st.comm === 'esbuild' && parent) {
      group = groupOf(st.ppid, parent);
    } else {
      const kthread = (st.flags & PF_KTHREAD) !== 0 || st.ppid === 2 || pid === 2;
      const { cmdline, cgroup } = kthread ? { cmdline: '', cgroup: '' } : read(pid);
      group = processGroup(st.comm, cmdline, cgroup, kthread, harness.has(pid));
    }
    groups.set(pid, group);
    return group;
  };
  for (const [pid, st] of stats) groupOf(pid, st);
}

/** Busy ticks (user, nice, system, irq, softirq, steal) and, of them, steal (the hypervisor ran someone else). */
export function machineTicks(procStat: string): { busy: number; steal: number } {
  const f = procStat.split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = f;
  return { busy: user + nice + system + irq + softirq + steal, steal };
}

/**
 * The testbed's own process groups ({@link processGroup}): the harness, kernel threads, the control
 * plane, kwok, our components, a real node's processes and the runtime's helpers (runc). Anything
 * else on the machine (a build, a test run, an editor) competes with the testbed for the CPUs and
 * makes a repetition slower for reasons that are not the configuration's.
 */
const TESTBED_GROUPS = new Set(['harness', 'kernel', 'etcd', 'kube-apiserver', 'kube-scheduler', 'kube-controller', 'kwok', 'controller-manager', 'kubelet-shim', 'extender', 'containerd', 'containerd-shim', 'kubelet', 'kube-proxy', 'coredns', 'kcm-handback']);

export function isTestbedGroup(group: string): boolean {
  return TESTBED_GROUPS.has(group) || /^real-\d+\//.test(group) || group.startsWith('runc');
}

/** CPU ms per group between two snapshots (a pid seen only in the second counts from 0). */
export function cpuByGroup(before: Map<number, ProcSample>, after: Map<number, ProcSample>): Record<string, number> {
  const sums = new Map<string, number>();
  for (const [pid, a] of after) {
    const d = a.ticks - (before.get(pid)?.ticks ?? 0);
    if (d > 0) sums.set(a.group, (sums.get(a.group) ?? 0) + (d * 1000) / CLK_TCK);
  }
  return Object.fromEntries([...sums].filter(([, ms]) => ms > 1).sort((x, y) => y[1] - x[1]));
}

/** Where a profile node's code lives: an npm package, a directory of ours, node:internal, or V8's pseudo-frames. */
export function codeOrigin(url: string, functionName: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (pkg) return pkg;
  if (url.startsWith('node:')) return 'node:internal';
  const ours = /\/(core|controller-manager|experiments|kubelet-shim|scheduler-plugins|apf-configs|cli)\//.exec(url)?.[1];
  return ours ?? url;
}

/** Self time (ms) per code origin and per function of a V8 CPU profile, largest first. */
export function summarizeProfile(profile: Profiler.Profile, topN = 12): NonNullable<CpuWindow['harnessProfile']> {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  // timeDeltas[i] is the time before sample i: sample i's node ran for timeDeltas[i + 1]
  for (let i = 0; i < samples.length; i++) selfUs.set(samples[i]!, (selfUs.get(samples[i]!) ?? 0) + (deltas[i + 1] ?? 0));
  const pkgs = new Map<string, number>();
  const fns = new Map<string, number>();
  for (const [id, us] of selfUs) {
    const cf = byId.get(id)?.callFrame;
    if (!cf || cf.functionName === '(idle)') continue;
    const origin = codeOrigin(cf.url, cf.functionName);
    pkgs.set(origin, (pkgs.get(origin) ?? 0) + us);
    const fn = `${cf.functionName || '(anonymous)'} ${origin}${cf.url ? `:${cf.lineNumber + 1}` : ''}`;
    fns.set(fn, (fns.get(fn) ?? 0) + us);
  }
  const ms = (us: number) => Math.round(us / 100) / 10;
  const sorted = (m: Map<string, number>) => [...m].sort((a, b) => b[1] - a[1]).filter(([, us]) => us >= 100);
  return {
    byPackage: Object.fromEntries(sorted(pkgs).map(([k, us]) => [k, ms(us)])),
    topFunctions: sorted(fns).slice(0, topN).map(([fn, us]) => ({ fn, ms: ms(us) })),
  };
}

/** The window from reading `start` to a reading taken now (`windowMs` apart). */
function windowFrom(start: MachineSnapshot, groups: Map<number, string>, windowMs: number): CpuWindow {
  const t = performance.now();
  const after = snapshotMachine(groups);
  return {
    windowMs,
    busyCpuS: Math.max(0, after.ticks.busy - start.ticks.busy) / CLK_TCK,
    byGroup: cpuByGroup(start.procs, after.procs),
    snapshotMs: Math.round((performance.now() - t) * 10) / 10,
  };
}

/**
 * CPU per process group while `spell` runs: what each component costs the machine while nothing
 * happens (the quiet spell before a failure, issue 40's idle CPU of Ulysses against kcm +
 * kube-scheduler). This machine's /proc: the testbeds whose nodes run here.
 */
export async function cpuDuring(spell: () => Promise<void>): Promise<CpuWindow> {
  const groups = new Map<number, string>();
  const start = snapshotMachine(groups);
  const t0 = performance.now();
  await spell();
  return windowFrom(start, groups, Math.round(performance.now() - t0));
}

/**
 * Arms at the taint, snapshots again `windowMs` later; `result()` gives the window (null when not
 * armed or the second snapshot has not been taken yet). Arming again drops a pending snapshot.
 */
export class CpuWindowProbe {
  private readonly groups = new Map<number, string>();
  /** the pending second snapshot */
  private timer: NodeJS.Timeout | undefined;
  private last: CpuWindow | null = null;

  private session: Session | undefined;

  /** profile: also sample the harness' own JavaScript in the window (node:inspector, 0.5 ms interval). */
  constructor(
    readonly windowMs: number,
    readonly profile = false,
  ) {
    if (!Number.isInteger(windowMs) || windowMs <= 0) throw new Error(`cpu window: windowMs must be a positive integer (got ${windowMs})`);
  }

  private startProfiler(): void {
    if (!this.profile) return;
    if (!this.session) {
      this.session = new Session();
      this.session.connect();
      this.session.post('Profiler.enable');
      this.session.post('Profiler.setSamplingInterval', { interval: 500 });
    }
    this.session.post('Profiler.start');
  }

  /** Publishes the window, with the harness' profile once the profiler handed it over. */
  private publish(w: CpuWindow): void {
    if (!this.profile || !this.session) {
      this.last = w;
      return;
    }
    this.session.post('Profiler.stop', (err, r) => {
      if (!err && r?.profile) w.harnessProfile = summarizeProfile(r.profile);
      this.last = w;
    });
  }

  /**
   * Right before the taint: the first snapshot (its cost is before t = 0). `before`: a reading taken
   * right now by someone else (the MachineCpuAudit's), not read twice.
   */
  arm(before?: MachineSnapshot): void {
    this.cancel();
    this.last = null;
    this.groups.clear(); // pids are reused between repetitions
    const start = before ?? snapshotMachine(this.groups);
    this.startProfiler();
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.publish(windowFrom(start, this.groups, this.windowMs));
    }, this.windowMs);
    this.timer.unref();
  }

  /** The window of the last arm() once taken; each window is returned once. */
  result(): CpuWindow | null {
    const w = this.last;
    this.last = null;
    return w;
  }

  private cancel(): void {
    if (!this.timer) return;
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.profile) this.session?.post('Profiler.stop');
  }
}

/**
 * What else ran on the machine during a repetition: /proc snapshots at the taint and at the end of
 * the measured part (every repetition on the local testbed; two /proc walks, no timer). A
 * repetition that shared the CPUs with a build or a test run is visible in its results
 * (`repCpu.outsideCpuS`) and flagged in the report, instead of passing as the configuration's figure.
 */
export class MachineCpuAudit {
  private readonly groups = new Map<number, string>();
  private start: (MachineSnapshot & { at: number }) | undefined;

  /** Right before the taint; returns the reading, for a CpuWindowProbe armed at the same moment. */
  arm(): MachineSnapshot {
    this.groups.clear(); // pids are reused between repetitions
    this.start = { at: performance.now(), ...snapshotMachine(this.groups) };
    return this.start;
  }

  /** At the end of the measured part; null when not armed since the last call. */
  finish(): RepCpu | null {
    const s = this.start;
    if (!s) return null;
    this.start = undefined;
    const { procs, ticks } = snapshotMachine(this.groups);
    const byGroup = Object.entries(cpuByGroup(s.procs, procs));
    const sum = (rows: Array<[string, number]>) => Math.round(rows.reduce((a, [, ms]) => a + ms, 0)) / 1000;
    const outside = byGroup.filter(([g]) => !isTestbedGroup(g));
    return {
      seconds: Math.round(performance.now() - s.at) / 1000,
      busyCpuS: Math.max(0, ticks.busy - s.ticks.busy) / CLK_TCK,
      stealCpuS: Math.max(0, ticks.steal - s.ticks.steal) / CLK_TCK,
      testbedCpuS: sum(byGroup.filter(([g]) => isTestbedGroup(g))),
      outsideCpuS: sum(outside),
      outside: Object.fromEntries(outside.filter(([, ms]) => ms >= 10).slice(0, 5)),
    };
  }
}
