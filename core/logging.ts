/**
 * One pino logger per process. Components derive child loggers with `component` and, for work on a
 * Kubernetes object, the object key (`namespace/name`) so every line can be joined to the object.
 */
import { pino, type Logger, type LoggerOptions } from 'pino';

let root: Logger | undefined;

export function rootLogger(opts: LoggerOptions = {}): Logger {
  root ??= pino({
    level: process.env.ULYSSES_LOG_LEVEL ?? 'info',
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...opts,
  });
  return root;
}

export function componentLogger(component: string): Logger {
  return rootLogger().child({ component });
}

/** Child logger bound to one Kubernetes object, with the key in the field `key` like klog's `"pod"="ns/name"`. */
export function objectLogger(log: Logger, kind: string, key: string): Logger {
  return log.child({ kind, key });
}

/** A logger that writes nothing (benchmarks, unit tests of components that take a logger). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}

export type { Logger };
