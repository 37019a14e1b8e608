/**
 * What systemd does for one `Type=notify` unit, for the testbed's nodes, which have no systemd: the
 * kubelet-shim runs under this with the settings of the unit file it is given
 * (manifests/systemd/ulysses-kubelet-shim.service), so a fault test exercises the unit as shipped.
 *
 *   tsx unit-supervisor.ts --unit FILE --dir DIR -- CMD ARGS...
 *
 * - `$NOTIFY_SOCKET` (DIR/notify.sock) and `$WATCHDOG_USEC` from `WatchdogSec=` are given to the child.
 * - No `WATCHDOG=1` for WatchdogSec (counted from the start): "watchdog timeout", SIGABRT, and
 *   SIGKILL after `TimeoutAbortSec=` (else TimeoutStopSec=) — systemd.service(5).
 * - `Restart=always`: the child is started again `RestartSec=` after it exits, however it exits.
 * - SIGTERM to this process: `KillSignal=` to the child, SIGKILL after TimeoutStopSec, then exit.
 * - DIR/main.pid holds the child's pid (systemd's MainPID), DIR/supervisor.log the unit's events.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DgramSocket } from 'node-unix-socket';

/** The [Service] settings this supervisor honours, from a unit file's text. */
export interface UnitSettings {
  type: string;
  restart: string;
  restartSec: number;
  watchdogSec: number | undefined;
  timeoutAbortSec: number;
  timeoutStopSec: number;
  killSignal: NodeJS.Signals;
}

/** systemd time spans as the unit uses them: "10", "10s", "500ms", "1min". */
function seconds(v: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(ms|s|sec|min)?$/.exec(v.trim());
  if (!m) throw new Error(`unit-supervisor: time span "${v}" not understood`);
  const n = Number(m[1]);
  return m[2] === 'ms' ? n / 1000 : m[2] === 'min' ? n * 60 : n;
}

export function unitSettings(text: string): UnitSettings {
  const service = new Map<string, string>();
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line.startsWith('[')) section = line;
    else if (section === '[Service]' && line && !line.startsWith('#')) {
      const eq = line.indexOf('=');
      if (eq > 0) service.set(line.slice(0, eq).trim(), line.slice(eq + 1).trim());
    }
  }
  const stop = seconds(service.get('TimeoutStopSec') ?? '90');
  return {
    type: service.get('Type') ?? 'simple',
    restart: service.get('Restart') ?? 'no',
    restartSec: seconds(service.get('RestartSec') ?? '0.1'),
    watchdogSec: service.has('WatchdogSec') ? seconds(service.get('WatchdogSec')!) : undefined,
    timeoutAbortSec: service.has('TimeoutAbortSec') ? seconds(service.get('TimeoutAbortSec')!) : stop,
    timeoutStopSec: stop,
    killSignal: (service.get('KillSignal') ?? 'SIGTERM') as NodeJS.Signals,
  };
}

async function main(argv: string[]): Promise<void> {
  const sep = argv.indexOf('--');
  const flag = (name: string) => {
    const i = argv.indexOf(name);
    if (i < 0 || i > sep) throw new Error(`unit-supervisor: ${name} missing`);
    return argv[i + 1]!;
  };
  const unit = unitSettings(readFileSync(flag('--unit'), 'utf8'));
  const dir = flag('--dir');
  const [cmd, ...args] = argv.slice(sep + 1);
  if (sep < 0 || !cmd) throw new Error('usage: unit-supervisor.ts --unit FILE --dir DIR -- CMD ARGS...');
  const logFile = join(dir, 'supervisor.log');
  const log = (line: string) => appendFileSync(logFile, `${new Date().toISOString()} ${line}\n`);
  const notifyPath = join(dir, 'notify.sock');
  const pidFile = join(dir, 'main.pid');
  rmSync(notifyPath, { force: true });
  const notify = new DgramSocket();
  notify.bind(notifyPath);

  let child: ChildProcess | undefined;
  let stopping = false;
  let watchdog: NodeJS.Timeout | undefined;
  let killTimer: NodeJS.Timeout | undefined;
  const armWatchdog = () => {
    if (watchdog) clearTimeout(watchdog);
    if (unit.watchdogSec === undefined || !child) return;
    const c = child;
    watchdog = setTimeout(() => {
      log(`watchdog timeout (${unit.watchdogSec} s): SIGABRT to ${c.pid}, SIGKILL after ${unit.timeoutAbortSec} s`);
      c.kill('SIGABRT');
      killTimer = setTimeout(() => c.kill('SIGKILL'), unit.timeoutAbortSec * 1000);
    }, unit.watchdogSec * 1000);
  };
  notify.on('data', (buf: Buffer) => {
    const fields = buf.toString().split('\n');
    if (fields.includes('WATCHDOG=1')) armWatchdog();
    if (fields.includes('READY=1')) log(`ready: ${fields.find((f) => f.startsWith('STATUS='))?.slice(7) ?? ''}`);
    if (fields.includes('STOPPING=1')) log('stopping');
  });

  const start = () => {
    const env: NodeJS.ProcessEnv = { ...process.env, NOTIFY_SOCKET: notifyPath };
    if (unit.watchdogSec !== undefined) env.WATCHDOG_USEC = String(Math.round(unit.watchdogSec * 1e6));
    const c = spawn(cmd, args, { stdio: 'inherit', env });
    child = c;
    writeFileSync(pidFile, `${c.pid}\n`);
    log(`started ${c.pid}`);
    armWatchdog();
    c.on('exit', (code, signal) => {
      if (watchdog) clearTimeout(watchdog);
      if (killTimer) clearTimeout(killTimer);
      child = undefined;
      log(`main process ${c.pid} exited: ${signal ?? `status ${code}`}`);
      if (stopping) {
        notify.close();
        rmSync(pidFile, { force: true });
        process.exit(0);
      }
      if (unit.restart === 'always') setTimeout(start, unit.restartSec * 1000);
      else process.exit(code ?? 1);
    });
  };
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.on(sig, () => {
      stopping = true;
      if (!child) process.exit(0);
      child.kill(unit.killSignal);
      const c = child;
      setTimeout(() => c.kill('SIGKILL'), unit.timeoutStopSec * 1000).unref();
    });
  }
  start();
}

if (process.argv[1]?.endsWith('unit-supervisor.ts')) {
  main(process.argv.slice(2)).catch((err: Error) => {
    process.stderr.write(`${err.message}\n`);
    process.exit(1);
  });
}
