/**
 * Graceful shutdown on SIGTERM/SIGINT for every Ulysses process.
 *
 * The stop runs once: a repeated signal while it runs is logged and ignored, because wrappers relay
 * the signal a second time (`npm run`, a shell, a process-group kill reach the process twice), and
 * a second delivery must not kill a component half-way through releasing its Lease. A stop that has
 * not finished after `graceMs` exits with status 1 (as a kubelet would after
 * terminationGracePeriodSeconds), so a wedged API call cannot keep a process alive forever.
 *
 * Run components as one node process (`node --import tsx main.ts`, what the npm start scripts and
 * manifests/entrypoint.sh do): the `tsx` CLI supervises a child and SIGKILLs it when the child does
 * not acknowledge a relayed signal within ~60 ms, which a loaded machine misses.
 */
import type { Logger } from './logging.ts';

export interface ShutdownOptions {
  log?: Logger;
  /** hard deadline for `stop` (default 60 s) */
  graceMs?: number;
  signals?: NodeJS.Signals[];
  /** exit status after a clean stop (default 0) */
  exitCode?: number;
}

/** Calls `stop` on the first SIGTERM/SIGINT, then exits. Returns a function that removes the handlers. */
export function onShutdownSignal(stop: (signal: NodeJS.Signals) => Promise<unknown> | unknown, o: ShutdownOptions = {}): () => void {
  const signals = o.signals ?? ['SIGTERM', 'SIGINT'];
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) {
      o.log?.info({ signal }, 'shutdown already in progress: signal ignored');
      return;
    }
    stopping = true;
    o.log?.info({ signal }, 'shutting down');
    const deadline = setTimeout(() => {
      o.log?.error({ signal, graceMs: o.graceMs ?? 60_000 }, 'shutdown did not finish in time: exiting');
      process.exit(1);
    }, o.graceMs ?? 60_000);
    deadline.unref();
    Promise.resolve()
      .then(() => stop(signal))
      .then(
        () => process.exit(o.exitCode ?? 0),
        (err: Error) => {
          o.log?.error({ err: err.message }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  for (const s of signals) process.on(s, handler);
  return () => {
    for (const s of signals) process.off(s, handler);
  };
}
