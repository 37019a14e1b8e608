/**
 * The calling thread as Linux schedules it: its thread id, and its nice value. setpriority(2) with
 * PRIO_PROCESS and a thread id changes that one thread on Linux (os.setPriority passes the id on),
 * so a worker thread doing heavy work can yield the CPU to the event loop that answers requests.
 * Raising a nice value needs no privilege. Elsewhere (no /proc/thread-self) both are undefined.
 */
import { readlinkSync } from 'node:fs';
import os from 'node:os';

/** The calling thread's Linux thread id (/proc/thread-self is `<pid>/task/<tid>`), undefined off Linux. */
export function threadId(): number | undefined {
  try {
    const tid = /task\/(\d+)$/.exec(readlinkSync('/proc/thread-self'))?.[1];
    return tid === undefined ? undefined : Number(tid);
  } catch {
    return undefined;
  }
}

/** The calling thread's nice value, undefined off Linux. */
export function threadNice(): number | undefined {
  const tid = threadId();
  return tid === undefined ? undefined : os.getPriority(tid);
}

/**
 * Sets the calling thread's nice value (-20..19, higher yields more); returns the value now in
 * effect, or undefined off Linux. Lowering it below the current value needs CAP_SYS_NICE: the error
 * of setpriority(2) is thrown.
 */
export function setThreadNice(nice: number): number | undefined {
  const tid = threadId();
  if (tid === undefined) return undefined;
  os.setPriority(tid, nice);
  return os.getPriority(tid);
}
