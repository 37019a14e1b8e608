/**
 * One pino logger per process. Components derive child loggers with `component` and, for work on a
 * Kubernetes object, the object key (`namespace/name`) so every line can be joined to the object.
 */
import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

let root: Logger | undefined;

let destination: DestinationStream | undefined;

let progressFile: string | undefined;

/**
 * Sends this process's logs to `file` (appended) instead of standard output, and its progress lines
 * (progressLog) there instead of standard error; for the test suite, whose output stays readable.
 * Call before the first logger is made. Child processes are not affected.
 */
export function logToFile(file: string): void {
  mkdirSync(dirname(file), { recursive: true });
  destination = pino.destination({ dest: file, append: true, sync: false });
  progressFile = file;
}

/**
 * The default sink of the human-readable progress lines of the CLI's long steps (testbed up and
 * down, install steps): standard error, or the file of logToFile.
 */
export function progressLog(line: string): void {
  if (progressFile) appendFileSync(progressFile, `${line}\n`);
  else process.stderr.write(`${line}\n`);
}

export function rootLogger(opts: LoggerOptions = {}): Logger {
  if (root) return root;
  const options: LoggerOptions = {
    level: process.env.ULYSSES_LOG_LEVEL ?? 'info',
    base: { pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    ...opts,
  };
  root = destination ? pino(options, destination) : pino(options);
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
