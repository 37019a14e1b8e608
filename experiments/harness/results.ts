/**
 * The failover experiment's data model (thesis §4.3.2, Table 6.1) and its results file: one JSON line
 * per repetition in DIR/results.jsonl, appended as soon as the repetition ends, so an interrupted run
 * resumes where it stopped (reps already in the file are skipped).
 */
import { existsSync, readFileSync, appendFileSync } from 'node:fs';
import { z } from 'zod';

/** Events of one repetition, seconds after the NoExecute taint (t=0); null if it never happened. */
export const EVENTS = ['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastScheduled', 'lastReady'] as const;
export type EventName = (typeof EVENTS)[number];
export type FailoverEvents = Record<EventName, number | null>;

export const EVENT_LABELS: Record<EventName, string> = {
  prioScheduled: 'Prio scheduled',
  prioReady: 'Prio ready',
  prioUp: 'Prio up',
  prioEndpointReady: 'Prio in EndpointSlice',
  lastScheduled: 'Last scheduled',
  lastReady: 'Last ready',
};

/** Table 6.1 configurations. */
export const CONFIG_IDS = [1, 2, 3, 4, 5] as const;
export type ConfigId = (typeof CONFIG_IDS)[number];

export const CONFIG_LABELS: Record<ConfigId, string> = {
  1: 'vanilla',
  2: '+ kubelet pacing',
  3: '+ APF exemption',
  4: '+ CM multi-priority async',
  5: '+ CM multi-priority periodic',
};

export const emptyEvents = (): FailoverEvents => ({
  prioScheduled: null,
  prioReady: null,
  prioUp: null,
  prioEndpointReady: null,
  lastScheduled: null,
  lastReady: null,
});

const seconds = z.number().finite().nonnegative().nullable();

export const RepResultSchema = z.object({
  config: z.union(CONFIG_IDS.map((c) => z.literal(c)) as unknown as [z.ZodLiteral<1>, z.ZodLiteral<2>, ...z.ZodLiteral<ConfigId>[]]),
  dn: z.number().int().min(1),
  podsPerNode: z.number().int().min(0),
  rep: z.number().int().min(0),
  events: z.object(Object.fromEntries(EVENTS.map((e) => [e, seconds])) as Record<EventName, typeof seconds>).strict(),
  /** the critical Deployment's position among the load Deployments in creation order */
  prioPosition: z.number().int().min(0).optional(),
  /** ISO time the repetition started, wall-clock seconds it took (setup + failover + cleanup) */
  startedAt: z.string().optional(),
  durationS: z.number().optional(),
  /** why some event stayed null (e.g. a timeout) */
  error: z.string().optional(),
});
export type RepResult = z.infer<typeof RepResultSchema> & { config: ConfigId };

export interface Cell {
  config: ConfigId;
  dn: number;
  podsPerNode: number;
}

export const repKey = (r: Cell & { rep: number }) => `c${r.config}/dn${r.dn}/ppn${r.podsPerNode}/rep${r.rep}`;
export const cellKey = (c: Cell) => `c${c.config}/dn${c.dn}/ppn${c.podsPerNode}`;

/** Parses results.jsonl; a bad line is an error naming the file, the line and the field. */
export function parseResults(text: string, source = 'results.jsonl'): RepResult[] {
  const out: RepResult[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new Error(`${source}:${i + 1}: not JSON (${(err as Error).message})`);
    }
    const r = RepResultSchema.safeParse(raw);
    if (!r.success) {
      const issue = r.error.issues[0]!;
      throw new Error(`${source}:${i + 1}: field ${issue.path.join('.') || '(root)'}: ${issue.message}`);
    }
    out.push(r.data as RepResult);
  });
  return out;
}

export function readResults(file: string): RepResult[] {
  return existsSync(file) ? parseResults(readFileSync(file, 'utf8'), file) : [];
}

export function appendResult(file: string, r: RepResult): void {
  RepResultSchema.parse(r);
  appendFileSync(file, `${JSON.stringify(r)}\n`);
}
