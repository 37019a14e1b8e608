/**
 * Where the critical pod's time goes on its node: its sandbox and container steps as the node's
 * kubelet-shim saw them (pino JSON log lines "RunPodSandbox forwarded" / "RunPodSandbox done" /
 * "critical pod container started"), relative to the taint, and how many low-priority sandboxes the
 * runtime was creating when the critical one was forwarded. Only the local testbed has the shims'
 * logs; on other clusters the trace is absent.
 *
 * Critical path on the node (thesis §4.3.1: the kubelet creates pods concurrently, so containerd/CNI
 * contention delays each of them): bound -> the kubelet's RunPodSandbox reaches the shim (kubelet
 * watch + pod worker) -> forwarded (pacing gate; 0 for a critical pod) -> sandbox created (runtime +
 * CNI) -> first container started -> Ready reported by the kubelet.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { z } from 'zod';

export const NodeTraceSchema = z.object({
  /** seconds after the taint; null when the shim log has no such line for the pod */
  sandboxArrived: z.number().nullable(),
  sandboxForwarded: z.number().nullable(),
  sandboxDone: z.number().nullable(),
  containerStarted: z.number().nullable(),
  /** low-priority sandboxes forwarded after the taint and before the critical one */
  lowsForwardedBefore: z.number().int().min(0),
  /** of those, still being created by the runtime when the critical one was forwarded */
  lowsInRuntime: z.number().int().min(0),
  /** low-priority sandboxes forwarded while the critical pod was between its sandbox and its first container start */
  lowsForwardedDuring: z.number().int().min(0),
});
export type NodeTrace = z.infer<typeof NodeTraceSchema>;

interface ShimLine {
  /** epoch ms (pino's time is epoch ms or, as the components log it, an ISO string) */
  time: number;
  msg: string;
  key?: string;
  criticality?: string;
  waitedMs?: number;
  runtimeMs?: number;
}

function parseLines(text: string): ShimLine[] {
  const out: ShimLine[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const v = JSON.parse(line) as Omit<ShimLine, 'time'> & { time: unknown };
      const time = typeof v.time === 'number' ? v.time : typeof v.time === 'string' ? Date.parse(v.time) : Number.NaN;
      if (Number.isFinite(time) && typeof v.msg === 'string') out.push({ ...v, time });
    } catch {
      /* not a log line */
    }
  }
  return out;
}

/**
 * The trace of the critical pod in `namespace` from the shim logs of the destination nodes, for a
 * repetition whose taint was at `taintAtMs` (epoch ms). Sandboxes of pods of earlier repetitions
 * (forwarded before the taint) are ignored. Null when no critical sandbox was forwarded after the taint.
 */
export function criticalNodeTrace(logs: readonly string[], namespace: string, taintAtMs: number): NodeTrace | null {
  const lines = logs.flatMap(parseLines).filter((l) => l.time >= taintAtMs).sort((a, b) => a.time - b.time);
  const forwarded = lines.filter((l) => l.msg === 'RunPodSandbox forwarded');
  const prio = forwarded.find((l) => l.key?.startsWith(`${namespace}/`) && l.criticality === 'high');
  if (!prio) return null;
  const rel = (t: number | undefined) => (t === undefined ? null : Math.round(t - taintAtMs) / 1000);
  const done = lines.find((l) => l.msg === 'RunPodSandbox done' && l.key === prio.key);
  const started = lines.find((l) => l.msg.startsWith('critical pod container started') && l.key === prio.key);
  const lows = forwarded.filter((l) => l.criticality !== 'high');
  const doneAt = new Map<string, number>();
  for (const l of lines) if (l.msg === 'RunPodSandbox done' && l.key && !doneAt.has(l.key)) doneAt.set(l.key, l.time);
  const before = lows.filter((l) => l.time <= prio.time);
  const end = started?.time ?? done?.time ?? prio.time;
  return {
    sandboxArrived: rel(prio.time - (prio.waitedMs ?? 0)),
    sandboxForwarded: rel(prio.time),
    sandboxDone: rel(done?.time),
    containerStarted: rel(started?.time),
    lowsForwardedBefore: before.length,
    lowsInRuntime: before.filter((l) => (doneAt.get(l.key ?? '') ?? Infinity) > prio.time).length,
    lowsForwardedDuring: lows.filter((l) => l.time > prio.time && l.time < end).length,
  };
}

/**
 * Reads `files` incrementally: each call returns what was appended to each file since the previous
 * call (a repetition's lines all come after the previous repetition's taint); a missing file gives
 * no text.
 */
export function appendedText(files: readonly string[]): () => string[] {
  const offsets = new Map<string, number>();
  return () => {
    const texts: string[] = [];
    for (const f of files) {
      let fd: number | undefined;
      try {
        fd = openSync(f, 'r');
        const size = fstatSync(fd).size;
        const from = Math.min(offsets.get(f) ?? 0, size);
        const buf = Buffer.alloc(size - from);
        readSync(fd, buf, 0, buf.length, from);
        texts.push(buf.toString('utf8'));
        offsets.set(f, size);
      } catch {
        /* no log (yet): nothing from this file */
      } finally {
        if (fd !== undefined) closeSync(fd);
      }
    }
    return texts;
  };
}

/** `nodeTrace` of ExperimentOptions on the local testbed: the critical pod's trace from the shim logs `files`. */
export function shimLogTracer(files: readonly string[], namespace: string): (taintAtMs: number) => NodeTrace | null {
  const read = appendedText(files);
  return (taintAtMs) => criticalNodeTrace(read(), namespace, taintAtMs);
}
