/**
 * Parsing of the real-time annotations (thesis §5.3.2: the pod's RT requirements are forwarded to
 * the node's scheduling agent).
 *
 * Pod annotation `ulysses.io/rt` (JSON), one of three shapes, told apart by their keys:
 * - deferrable-server nodes: `{"server":{"budgetUs":2000,"periodUs":10000},"tasks":[...]}`
 * - budget/period nodes:     `{"reservation":{"runtimeUs":2000,"periodUs":10000,"cpus":1},"tasks":[...]}`
 * - EDF nodes:               `{"tasks":[...]}` (at least one task)
 * with tasks `{"wcetUs":500,"periodUs":10000,"deadlineUs":10000,"priority":1}` (deadline and
 * priority optional). Node annotation `ulysses.io/rt-capacity`: `{"cores":2,"maxUtilization":0.95}`
 * (maxUtilization optional: its default depends on the node kind, see `what-if.ts`).
 *
 * Objects are strict (a misspelt key such as `budgetUS` is an error, not silently ignored); times are
 * integer µs in (0, 1 h]. A budget/runtime larger than its period is rejected here; a deadline
 * shorter than the WCET is accepted (the task is then reported unschedulable, not malformed).
 *
 * Errors never throw: every parser returns `{ ok: false, error }` whose message names the annotation
 * and each field, e.g. `ulysses.io/rt: tasks.0.wcetUs: must be > 0`. The generic helper
 * {@link parseAnnotation} is shared with the tdma and assurance plugins.
 */
import { z } from 'zod';
import { ConfigError, validateConfig } from '../../core/config.ts';
import { MAX_TIME_US, type RtTask } from './task.ts';

export const RT_ANNOTATION = 'ulysses.io/rt';
export const RT_CAPACITY_ANNOTATION = 'ulysses.io/rt-capacity';

export type AnnotationIssue = { readonly field: string; readonly message: string };

export type Parsed<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly error: string; readonly issues: readonly AnnotationIssue[] };

/**
 * Validates an annotation against `schema`. `raw` is the annotation's string value (parsed as JSON)
 * or an already-decoded value (e.g. from a what-if input file). Never throws.
 */
export function parseAnnotation<S extends z.ZodType>(schema: S, raw: unknown, annotation: string): Parsed<z.output<S>> {
  const decoded = decodeAnnotation(raw, annotation);
  if (!decoded.ok) return decoded;
  try {
    return { ok: true, value: validateConfig(schema, decoded.value, annotation) };
  } catch (err) {
    if (err instanceof ConfigError) return annotationError(annotation, err.issues);
    return annotationError(annotation, [{ field: '(root)', message: err instanceof Error ? err.message : String(err) }]);
  }
}

/** A failed {@link Parsed} whose message is `<annotation>: <field>: <message>` per issue, joined by "; ". */
export function annotationError(annotation: string, issues: readonly AnnotationIssue[]): { ok: false; error: string; issues: readonly AnnotationIssue[] } {
  return { ok: false, issues, error: issues.map((i) => `${annotation}: ${i.field}: ${i.message}`).join('; ') };
}

/** Decodes the JSON text of an annotation (non-string values are taken as already decoded). */
export function decodeAnnotation(raw: unknown, annotation: string): Parsed<unknown> {
  if (raw === undefined || raw === null) return annotationError(annotation, [{ field: '(root)', message: 'annotation is missing' }]);
  if (typeof raw !== 'string') return { ok: true, value: raw };
  try {
    return { ok: true, value: JSON.parse(raw) as unknown };
  } catch (err) {
    return annotationError(annotation, [{ field: '(json)', message: `invalid JSON: ${(err as Error).message}` }]);
  }
}

/** A number; a missing one is reported as "is required". */
export const num = () => z.number({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a number') });

/** Integer microseconds in (0, MAX_TIME_US]. */
export const micros = () =>
  num()
    .int({ error: 'must be an integer (microseconds)' })
    .positive({ error: 'must be > 0' })
    .max(MAX_TIME_US, { error: `must be <= ${MAX_TIME_US}` });

export const rtTaskSchema = z.strictObject({
  wcetUs: micros(),
  periodUs: micros(),
  deadlineUs: micros().optional(),
  priority: num().int({ error: 'must be an integer' }).optional(),
});

const MAX_TASKS = 256;
const tasksSchema = z.array(rtTaskSchema, { error: 'must be an array of tasks' }).max(MAX_TASKS, { error: `at most ${MAX_TASKS} tasks` });

export const serverSchema = z
  .strictObject({ budgetUs: micros(), periodUs: micros() })
  .superRefine((v, ctx) => {
    if (v.budgetUs > v.periodUs) ctx.addIssue({ code: 'custom', path: ['budgetUs'], message: `must be <= periodUs (${v.periodUs})` });
  });

export const reservationSchema = z
  .strictObject({
    runtimeUs: micros(),
    periodUs: micros(),
    cpus: num().int({ error: 'must be an integer' }).min(1, { error: 'must be >= 1' }).max(1024, { error: 'must be <= 1024' }).default(1),
  })
  .superRefine((v, ctx) => {
    if (v.runtimeUs > v.periodUs) ctx.addIssue({ code: 'custom', path: ['runtimeUs'], message: `must be <= periodUs (${v.periodUs})` });
  });

const dsPodSchema = z.strictObject({ server: serverSchema, tasks: tasksSchema.default([]) });
const bpPodSchema = z.strictObject({ reservation: reservationSchema, tasks: tasksSchema.default([]) });
const edfPodSchema = z.strictObject({ tasks: tasksSchema.min(1, { error: 'at least one task is required' }) });

export type RtKind = 'deferrable-server' | 'budget-period' | 'edf';
export const RT_KINDS: readonly RtKind[] = ['deferrable-server', 'budget-period', 'edf'];

export type RtPodSpec =
  | { readonly kind: 'deferrable-server'; readonly server: { budgetUs: number; periodUs: number }; readonly tasks: readonly RtTask[] }
  | { readonly kind: 'budget-period'; readonly reservation: { runtimeUs: number; periodUs: number; cpus: number }; readonly tasks: readonly RtTask[] }
  | { readonly kind: 'edf'; readonly tasks: readonly RtTask[] };

/** Which shape an annotation object has, from its keys (server → DS, reservation → budget/period, else EDF). */
function kindOf(value: unknown): RtKind | 'both' {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'edf';
  const hasServer = Object.hasOwn(value, 'server');
  const hasReservation = Object.hasOwn(value, 'reservation');
  if (hasServer && hasReservation) return 'both';
  return hasServer ? 'deferrable-server' : hasReservation ? 'budget-period' : 'edf';
}

/** Parses the pod annotation `ulysses.io/rt` (string or decoded JSON). */
export function parseRtAnnotation(raw: unknown): Parsed<RtPodSpec> {
  const decoded = decodeAnnotation(raw, RT_ANNOTATION);
  if (!decoded.ok) return decoded;
  const value = decoded.value;
  switch (kindOf(value)) {
    case 'both':
      return annotationError(RT_ANNOTATION, [{ field: '(root)', message: '"server" and "reservation" are mutually exclusive' }]);
    case 'deferrable-server': {
      const r = parseAnnotation(dsPodSchema, value, RT_ANNOTATION);
      return r.ok ? { ok: true, value: { kind: 'deferrable-server', ...r.value } } : r;
    }
    case 'budget-period': {
      const r = parseAnnotation(bpPodSchema, value, RT_ANNOTATION);
      return r.ok ? { ok: true, value: { kind: 'budget-period', ...r.value } } : r;
    }
    case 'edf': {
      const r = parseAnnotation(edfPodSchema, value, RT_ANNOTATION);
      return r.ok ? { ok: true, value: { kind: 'edf', ...r.value } } : r;
    }
  }
}

export const rtCapacitySchema = z.strictObject({
  cores: num().int({ error: 'must be an integer' }).min(1, { error: 'must be >= 1' }).max(1024, { error: 'must be <= 1024' }),
  maxUtilization: num().gt(0, { error: 'must be > 0' }).lte(1, { error: 'must be <= 1' }).optional(),
});

export type RtCapacity = z.output<typeof rtCapacitySchema>;

/** Parses the node annotation `ulysses.io/rt-capacity` (string or decoded JSON). */
export function parseRtCapacityAnnotation(raw: unknown): Parsed<RtCapacity> {
  return parseAnnotation(rtCapacitySchema, raw, RT_CAPACITY_ANNOTATION);
}
