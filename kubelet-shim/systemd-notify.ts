/**
 * The service side of systemd's notify protocol (sd_notify(3)), for the kubelet-shim's unit
 * (`Type=notify`, `WatchdogSec=`): `READY=1` once the CRI socket serves, `WATCHDOG=1` every half
 * watchdog interval while the shim's self-check passes (health.ts), `STOPPING=1` on the way out.
 * systemd restarts a shim whose pings stop (hung, stopped, wedged proxy) as it restarts one that exits.
 *
 * The messages are datagrams on the unix socket named by $NOTIFY_SOCKET, which Node's own sockets
 * cannot send: node-unix-socket (a prebuilt N-API module, no compiler needed) does. Without
 * $NOTIFY_SOCKET (not under systemd) nothing is sent and nothing is loaded.
 */
import type { Logger } from '../core/logging.ts';

export interface NotifyEnv {
  NOTIFY_SOCKET?: string;
  WATCHDOG_USEC?: string;
  WATCHDOG_PID?: string;
}

/** The watchdog interval systemd asks of this process (µs in $WATCHDOG_USEC, for $WATCHDOG_PID or any pid), in ms; undefined when none. */
export function watchdogIntervalMs(env: NotifyEnv, pid = process.pid): number | undefined {
  if (!env.WATCHDOG_USEC) return undefined;
  if (env.WATCHDOG_PID && Number(env.WATCHDOG_PID) !== pid) return undefined;
  const usec = Number(env.WATCHDOG_USEC);
  if (!Number.isFinite(usec) || usec <= 0) return undefined;
  return Math.max(1, Math.floor(usec / 1000));
}

export interface SystemdNotifier {
  /** Sends `READY=1` (with a STATUS line). */
  ready(status: string): void;
  /** Sends `STOPPING=1`. */
  stopping(): void;
  /**
   * Pings the watchdog every half interval while `alive()` holds (a failing check sends nothing, so
   * systemd restarts the process after WatchdogSec). No-op without a watchdog interval.
   */
  keepAlive(alive: () => boolean): void;
  close(): void;
}

interface DatagramSender {
  sendTo(buf: Buffer, offset: number, length: number, destPath: string, onWrite?: (err: Error | undefined) => void): void;
  close(): void;
}

/**
 * A notifier for $NOTIFY_SOCKET, or undefined when the process does not run under a notify-type unit.
 * `sender` replaces the datagram socket in tests.
 */
export async function systemdNotifier(log: Logger, env: NotifyEnv = process.env, sender?: DatagramSender): Promise<SystemdNotifier | undefined> {
  const target = env.NOTIFY_SOCKET;
  if (!target) return undefined;
  if (target.startsWith('@')) {
    log.warn({ notifySocket: target }, 'NOTIFY_SOCKET is an abstract socket, which this shim cannot send to: no readiness or watchdog notifications (use the unit of manifests/systemd/)');
    return undefined;
  }
  let socket: DatagramSender;
  try {
    socket = sender ?? new (await import('node-unix-socket')).DgramSocket();
  } catch (err) {
    log.error({ err: (err as Error).message }, 'cannot load node-unix-socket: no readiness or watchdog notifications to systemd');
    return undefined;
  }
  let failedOnce = false;
  const send = (text: string) => {
    const buf = Buffer.from(text);
    try {
      socket.sendTo(buf, 0, buf.length, target, (err) => {
        if (err && !failedOnce) {
          failedOnce = true;
          log.warn({ err: err.message, notifySocket: target }, 'systemd notification not delivered');
        }
      });
    } catch (err) {
      if (!failedOnce) log.warn({ err: (err as Error).message, notifySocket: target }, 'systemd notification not delivered');
      failedOnce = true;
    }
  };
  const intervalMs = watchdogIntervalMs(env);
  let timer: NodeJS.Timeout | undefined;
  return {
    ready(status) {
      send(`READY=1\nSTATUS=${status.replace(/\n/g, ' ')}`);
    },
    stopping() {
      send('STOPPING=1');
    },
    keepAlive(alive) {
      if (intervalMs === undefined || timer) return;
      log.info({ watchdogMs: intervalMs }, 'systemd watchdog: pinging every half interval while the self-check passes');
      timer = setInterval(() => {
        if (alive()) send('WATCHDOG=1');
      }, Math.max(1, Math.floor(intervalMs / 2)));
      timer.unref();
    },
    close() {
      if (timer) clearInterval(timer);
      timer = undefined;
      socket.close();
    },
  };
}
