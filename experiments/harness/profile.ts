/**
 * Run conditions a study varies but a user leaves at their settled defaults: one YAML file
 * (`--profile`) instead of a flag each, for `ulysses experiment failover` (RunProfileSchema below)
 * and the benches (experiments/bench/options.ts). Every profile is read by {@link loadProfile}:
 * unknown fields are errors naming the file and the field; the file's size and YAML aliases are
 * bounded. This module imports no harness code, so a bench's measuring process can load it.
 */
import { readFileSync, statSync } from 'node:fs';
import { parse } from 'yaml';
import { z } from 'zod';
import type { FailoverExperimentOptions } from './local.ts';

const MAX_PROFILE_BYTES = 64 * 1024;

/** What of a failed testbed node is stopped at t = 0 (profile freezeSource). */
export const SOURCE_FREEZES = ['node', 'kubelet', 'none'] as const;

/**
 * How the source node fails at t = 0 (profile failure, `--failure`): `taint`, the harness writes a
 * NoExecute taint (after freezeSource's stop); `frozen-node`, every process of the node is stopped
 * and nothing is written: the cluster has to find the failure itself.
 */
export const FAILURE_MODES = ['taint', 'frozen-node'] as const;
export type FailureMode = (typeof FAILURE_MODES)[number];

/** A failure mode as given (`source` names the field or flag in the error). */
export function parseFailureMode(v: unknown, source = 'failure'): FailureMode {
  if (!FAILURE_MODES.includes(v as FailureMode)) throw new Error(`${source}: ${JSON.stringify(v)} is not one of ${FAILURE_MODES.join(', ')}`);
  return v as FailureMode;
}

/** What is wrong with freezeSource beside failure frozen-node (which stops the whole node itself), or nothing. */
export function failureFreezeConflict(failure: FailureMode | undefined, freezeSource: string | boolean | undefined): string | undefined {
  if (failure !== 'frozen-node' || freezeSource === undefined || freezeSource === true || freezeSource === 'node') return undefined;
  return `failure frozen-node stops every process of the source node: freezeSource ${freezeSource === false ? 'none' : freezeSource} contradicts it (leave freezeSource out)`;
}

/**
 * A profile's text (YAML or JSON) checked against `schema` (a strict object of optional fields);
 * `name` is the file named in errors. `check` sees the parsed profile and returns what is wrong
 * across fields (e.g. "field b needs field a"), or nothing.
 */
export function parseProfile<S extends z.ZodObject>(text: string, name: string, schema: S, check?: (p: z.infer<S>) => string | undefined): z.infer<S> {
  if (Buffer.byteLength(text) > MAX_PROFILE_BYTES) throw new Error(`profile ${name}: larger than ${MAX_PROFILE_BYTES} bytes`);
  let doc: unknown;
  try {
    doc = parse(text, { maxAliasCount: 0 }) ?? {};
  } catch (err) {
    throw new Error(`profile ${name}: not YAML: ${(err as Error).message.split('\n')[0]}`);
  }
  const r = schema.safeParse(doc);
  if (!r.success) {
    const i = r.error.issues[0]!;
    const field = i.path.join('.');
    const detail = i.code === 'unrecognized_keys' ? `unknown field(s) ${i.keys.join(', ')} (known: ${Object.keys(schema.shape).join(', ')})` : i.message;
    throw new Error(`profile ${name}${field ? `: field ${field}` : ''}: ${detail}`);
  }
  const wrong = check?.(r.data);
  if (wrong) throw new Error(`profile ${name}: ${wrong}`);
  return r.data;
}

/** The profile in `file` (see {@link parseProfile}); a file over the bound is refused before it is read. */
export function loadProfile<S extends z.ZodObject>(file: string, schema: S, check?: (p: z.infer<S>) => string | undefined): z.infer<S> {
  let size: number;
  try {
    size = statSync(file).size;
  } catch (err) {
    throw new Error(`profile ${file}: ${(err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message}`);
  }
  if (size > MAX_PROFILE_BYTES) throw new Error(`profile ${file}: larger than ${MAX_PROFILE_BYTES} bytes`);
  return parseProfile(readFileSync(file, 'utf8'), file, schema, check);
}

const ms = z.number().int().nonnegative();
export const RunProfileSchema = z
  .object({
    /** local testbed: what of the failed node stops at t = 0 (default node) */
    freezeSource: z.enum(SOURCE_FREEZES),
    /** taint (default) or frozen-node: no taint written, every process of the source node stopped */
    failure: z.enum(FAILURE_MODES),
    /** seconds to wait for all events after t = 0 (default 180; failure frozen-node: 420) */
    repTimeoutSeconds: z.number().int().positive().max(3600),
    /** false: "rate limiting off" (thesis §4.3.3, Fig 6.4), the controller manager's client-side limiter off in every configuration */
    clientRateLimit: z.boolean(),
    /** false: each repetition's configuration applied before its setup instead of right before the taint */
    neutralSetup: z.boolean(),
    /** false: no unrecorded warm-up repetition per configuration */
    warmup: z.boolean(),
    /** configuration 5: the controller manager's CriticalPathHold per critical pod (default: the installed default; 0: off) */
    criticalPathHoldMs: ms.max(60_000),
    /** t = 0 no earlier than this long after the critical pod's creation */
    minCriticalAgeMs: ms.max(600_000),
    /** seconds without a request of the harness between the configuration switch and t = 0 (the first failover after a quiet spell) */
    quietBeforeFailureSeconds: z.number().int().positive().max(900),
    /** local testbed: control plane and harness on CPU 0, nodes on CPU 1 */
    pinCpus: z.boolean(),
    /** local testbed: CPU time of every process group in the first ms after the taint */
    cpuWindowMs: z.number().int().positive().max(600_000),
    /** with cpuWindowMs: also sample the harness' own JavaScript in the window */
    cpuWindowProfile: z.boolean(),
    /** run a repetition again, at most this many times, when other work shared the machine (default 2) */
    repeatShared: z.number().int().nonnegative().max(10),
  })
  .partial()
  .strict();
export type RunProfile = z.infer<typeof RunProfileSchema>;

const runProfileCheck = (p: RunProfile) => {
  if (p.cpuWindowProfile && p.cpuWindowMs === undefined) return 'field cpuWindowProfile needs cpuWindowMs';
  const conflict = failureFreezeConflict(p.failure, p.freezeSource);
  return conflict && `field failure: ${conflict}`;
};

/** The failover experiment's profile text checked against {@link RunProfileSchema}; `name` is the file named in errors. */
export function parseRunProfile(text: string, name: string): RunProfile {
  return parseProfile(text, name, RunProfileSchema, runProfileCheck);
}

export function loadRunProfile(file: string): RunProfile {
  return loadProfile(file, RunProfileSchema, runProfileCheck);
}

/** The experiment options a profile sets (absent fields stay at the harness' defaults). */
export function runProfileOptions(p: RunProfile): Partial<FailoverExperimentOptions> {
  const o: Partial<FailoverExperimentOptions> = {};
  if (p.freezeSource !== undefined) o.freezeSource = p.freezeSource;
  if (p.failure !== undefined) o.failure = p.failure;
  if (p.repTimeoutSeconds !== undefined) o.repTimeoutMs = p.repTimeoutSeconds * 1000;
  if (p.clientRateLimit !== undefined) o.clientRateLimit = p.clientRateLimit;
  if (p.neutralSetup !== undefined) o.neutralSetup = p.neutralSetup;
  if (p.warmup !== undefined) o.warmup = p.warmup;
  if (p.criticalPathHoldMs !== undefined) o.criticalPathHoldMs = p.criticalPathHoldMs;
  if (p.minCriticalAgeMs !== undefined) o.minCriticalAgeMs = p.minCriticalAgeMs;
  if (p.quietBeforeFailureSeconds !== undefined) o.quietBeforeFailureMs = p.quietBeforeFailureSeconds * 1000;
  if (p.pinCpus !== undefined) o.pinCpus = p.pinCpus;
  if (p.cpuWindowMs !== undefined) o.cpuWindowMs = p.cpuWindowMs;
  if (p.cpuWindowProfile !== undefined) o.cpuWindowProfile = p.cpuWindowProfile;
  if (p.repeatShared !== undefined) o.repeatShared = p.repeatShared;
  return o;
}
