/**
 * Supervision of the testbed's long-running processes: started detached (so they outlive the CLI
 * that started them), logs to one file each in the run directory, pids tracked in state.json so a
 * later `down` stops exactly what `up` started.
 */
import { execFileSync, spawn, type ChildProcessByStdio } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import { appendFileSync, openSync, closeSync, readFileSync, existsSync, readdirSync, readlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ProcessSpec {
  name: string;
  cmd: string;
  args: string[];
  logFile: string;
  env?: Record<string, string>;
  /** CPU list for taskset (e.g. "0" or "1"), when control plane and nodes are pinned apart. */
  cpus?: string;
}

export interface TrackedProcess {
  name: string;
  pid: number;
  logFile: string;
  cmd: string;
  args: string[];
  cpus?: string;
  env?: Record<string, string>;
}

/**
 * Pins process `pid`'s main thread (thread id = pid: the event loop of a Node process) to
 * `mainCpus` and every other thread it has now (V8's GC and compiler helpers, libuv's pool, worker
 * threads) to `otherCpus` (taskset, Linux). Threads started later inherit the affinity of the thread
 * that starts them. Used by the benchmarks: on the main thread's CPU the helpers preempted it in the
 * slowest rounds (experiments/bench/extender.ts). `withMain`: thread ids that stay with the
 * main thread. Returns how many other threads moved.
 */
export function pinMainThreadApart(pid: number, mainCpus: string, otherCpus: string, withMain: readonly string[] = []): number {
  const tids = readdirSync(`/proc/${pid}/task`);
  const main = new Set([String(pid), ...withMain]);
  for (const tid of tids) execFileSync('taskset', ['-p', '-c', main.has(tid) ? mainCpus : otherCpus, tid], { stdio: 'ignore' });
  return tids.length - main.size;
}

/** Records each process started in `state` (saved at once), so a later `down` stops exactly these. */
export function processTracker<S extends { processes: TrackedProcess[] }>(state: S, save: (s: S) => void): (p: TrackedProcess) => TrackedProcess {
  return (p) => {
    state.processes.push(p);
    save(state);
    return p;
  };
}

export function startProcess(spec: ProcessSpec): TrackedProcess {
  const fd = openSync(spec.logFile, 'a');
  const [cmd, args] = spec.cpus ? ['taskset', ['-c', spec.cpus, spec.cmd, ...spec.args]] : [spec.cmd, spec.args];
  const child = spawn(cmd, args, {
    detached: true,
    stdio: ['ignore', fd, fd],
    env: { ...process.env, ...spec.env },
  });
  closeSync(fd);
  if (child.pid === undefined) throw new Error(`${spec.name}: could not start ${spec.cmd}`);
  child.unref();
  return { name: spec.name, pid: child.pid, logFile: spec.logFile, cmd: spec.cmd, args: spec.args, cpus: spec.cpus, env: spec.env };
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    // a zombie still answers kill(0): treat it as dead
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z/.test(stat);
  } catch {
    return false;
  }
}

/** SIGTERM to the process group, then SIGKILL after `graceMs`. Safe on already-dead pids. */
export async function stopProcess(pid: number, graceMs = 5000): Promise<void> {
  const signal = (sig: NodeJS.Signals) => {
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, sig);
      } catch {
        /* gone */
      }
    }
  };
  if (!isAlive(pid)) return;
  signal('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline) {
    if (!isAlive(pid)) return;
    await sleep(50);
  }
  signal('SIGKILL');
  const killDeadline = Date.now() + 5000;
  while (isAlive(pid) && Date.now() < killDeadline) await sleep(50);
}

/**
 * One JSON line per cluster brought up (`local`, `kubeadm`) or taken over after a reset (`reused`:
 * the integration tests' shared testbed), appended to $ULYSSES_CLUSTER_LOG when it is set, with the
 * test file that asked for it ($ULYSSES_TEST_FILE, set by the tests' setup file): the per-file table
 * of docs/development.md counts cluster starts from it (test/test-times.ts).
 */
export function recordClusterStart(kind: 'local' | 'kubeadm' | 'reused', runDir: string, ms: number): void {
  const file = process.env.ULYSSES_CLUSTER_LOG;
  if (!file) return;
  appendFileSync(file, `${JSON.stringify({ kind, runDir, at: Date.now(), ms, testFile: process.env.ULYSSES_TEST_FILE ?? null })}\n`);
}

export function tailFile(file: string, lines = 20): string {
  if (!existsSync(file)) return '(no log)';
  const text = readFileSync(file, 'utf8');
  return text.split('\n').slice(-lines - 1).join('\n');
}

/** Every pid whose command line contains `needle` (e.g. a containerd socket path or the run dir). */
/** This process and its ancestors (e.g. the tsx / npx wrappers whose command line holds our arguments). */
function selfAndAncestors(): Set<number> {
  const out = new Set<number>([process.pid]);
  let pid = process.ppid;
  while (pid > 1 && !out.has(pid)) {
    out.add(pid);
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may contain spaces and parentheses
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      pid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      break;
    }
  }
  return out;
}

export function pidsMatching(needle: string): number[] {
  const out: number[] = [];
  const self = selfAndAncestors();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (self.has(pid)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replace(/\0/g, ' ');
      let cwd = '';
      try {
        cwd = readlinkSync(`/proc/${entry}/cwd`);
      } catch {
        /* kernel thread or gone */
      }
      if (cmdline.includes(needle) || cwd.startsWith(needle)) out.push(pid);
    } catch {
      /* gone */
    }
  }
  return out;
}

export { FatalError, pollUntil, TimeoutError } from '../../core/poll.ts';

/**
 * A helper process spoken to in JSON lines, one reply line per request line, in order (the Go bench
 * clients: experiments/bench/extender-client-go, experiments/bench/kubelet-shim-client-go). Started on
 * `cpus` (taskset) when given; a reply with `error` set, or the process exiting, rejects the call.
 */
export class JsonLinesProcess {
  private readonly proc: ChildProcessByStdio<Writable, Readable, null>;
  private readonly waiting: Array<(line: string) => void> = [];
  /** lines no call was waiting for (a start-up error the process printed before exiting) */
  private readonly stray: string[] = [];
  private exited: Error | undefined;

  constructor(cmd: string, args: string[], opts: { cpus?: string } = {}) {
    const [c, a] = opts.cpus ? ['taskset', ['-c', opts.cpus, cmd, ...args]] : [cmd, args];
    this.proc = spawn(c, a, { stdio: ['pipe', 'pipe', 'inherit'] });
    createInterface({ input: this.proc.stdout }).on('line', (line) => {
      const w = this.waiting.shift();
      if (w) w(line);
      else this.stray.push(line);
    });
    this.proc.on('exit', (code, signal) => {
      this.exited = new Error(`${cmd} exited with ${code ?? signal}${this.stray.length ? `: ${this.stray.join(' ')}` : ''}`);
      for (const w of this.waiting.splice(0)) w(JSON.stringify({ error: this.exited.message }));
    });
  }

  call<T>(request: unknown): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    return new Promise((resolve, reject) => {
      this.waiting.push((line) => {
        const r = JSON.parse(line) as T & { error?: string };
        if (r.error) reject(new Error(r.error));
        else resolve(r);
      });
      this.proc.stdin.write(JSON.stringify(request) + '\n');
    });
  }

  /** The process's pid (a `cpus` start execs taskset into the command: the same pid). */
  get pid(): number | undefined {
    return this.proc.pid;
  }

  /** Ends its input and waits for it to exit. */
  async close(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((resolve) => this.proc.once('exit', resolve));
    this.proc.stdin.end();
    await gone;
  }
}
