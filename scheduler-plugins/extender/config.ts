/**
 * Configuration of the scheduler extender: ONE zod schema, {@link ExtenderConfig}, so the same
 * shape can be loaded from a file (`--config`, YAML or JSON, core/config.ts) or later be driven by a
 * runtime-config object and applied live with `ExtenderServer.setConfig(cfg)`.
 *
 * ```yaml
 * listen: { host: 127.0.0.1, port: 8888 }      # not live-reloadable
 * tls:                                         # HTTPS, kube-scheduler's client certificate required for the verbs (extender/tls.ts);
 *   certFile: /etc/ulysses-tls/tls.crt         # files re-read when they change; required when listen.host is not loopback
 *   keyFile: /etc/ulysses-tls/tls.key
 *   clientCAFile: /etc/ulysses-tls/ca.crt
 *   clientNames: [system:kube-scheduler]       # the client certificate's CN the verbs are answered for
 * plugins: { assurance: true, realtime: true, tdma: true }
 * tdmaNetworks:                                # name -> cycle/slot length (µs) and slot count
 *   rtnet0: { cycleUs: 5000, slotUs: 1000, slots: 5 }
 * defaultAssurancePolicies:                    # per criticality level, for pods without
 *   high: { policy: threshold, min: { cpu: 2 } }   # ulysses.io/assurance-policy (null = none)
 *   low: null
 *   none: null
 * prioritize: { weights: { assurance: 1, realtime: 1 } }
 * priorityClassThreshold: 1000000              # optional, as core/criticality.ts
 * httpTimeoutMs: 5000                          # kube-scheduler's httpTimeout for the extender: every call ends within it
 * bindTimeoutMs: 10000                         # one API request of bind (capped by httpTimeoutMs)
 * analysisBudget: 1000000                     # RT analysis work units per request (realtime/task.ts AnalysisBudget)
 * inlineAnalysisBudget: 50000                  # of which a filter does inline; the rest in the analysis thread
 * analysisThread: true
 * analysisThreadFeed: true                     # the thread fed in the background from the informers
 * bodyLimitBytes: 16777216
 * requeueDelayMs: 250                          # after a release, refused pods not asked about since are requeued
 * assuranceUpdater: { enabled: false, rules: [{ condition: MemoryPressure, gamma: 0.5, resources: [memory] }] }
 * rescheduler: { enabled: false, evictionsPerMinute: 6, burst: 1, onlyControlled: true, intervalMs: 5000, dryRun: false }
 * ```
 */
import { z } from 'zod';
import { loadConfigFile, validateConfig } from '../../core/config.ts';
import { assurancePolicySchema, type AssurancePolicy } from '../assurance/assurance.ts';
import { AssuranceUpdaterConfig } from '../assurance/updater.ts';
import { micros } from '../realtime/annotations.ts';
import { MAX_SLOTS_PER_CYCLE, type TdmaNetwork } from '../tdma/tdma.ts';
import { SCHEDULER_CLIENT_NAME } from '../../core/extender-pki.ts';

const filePath = z.string().min(1).max(4096);
/** HTTPS with client certificates (issue 42 item 1): who may call /filter, /prioritize and /bind. */
export const ExtenderTlsConfig = z.strictObject({
  certFile: filePath,
  keyFile: filePath,
  /** The CA that signs the callers' client certificates (the extender's own, core/extender-pki.ts). */
  clientCAFile: filePath,
  clientNames: z.array(z.string().min(1).max(253)).min(1).max(16).default([SCHEDULER_CLIENT_NAME]),
});
export type ExtenderTlsConfig = z.output<typeof ExtenderTlsConfig>;

const tdmaNetworkConfig = z
  .strictObject({
    cycleUs: micros().optional(),
    slotUs: micros(),
    slots: z.number().int().min(1).max(MAX_SLOTS_PER_CYCLE).optional(),
  })
  .superRefine((n, ctx) => {
    if (n.cycleUs === undefined && n.slots === undefined) {
      ctx.addIssue({ code: 'custom', path: ['cycleUs'], message: 'cycleUs or slots is required' });
      return;
    }
    const cycle = n.cycleUs ?? n.slots! * n.slotUs;
    if (cycle % n.slotUs !== 0) ctx.addIssue({ code: 'custom', path: ['cycleUs'], message: `must be a multiple of slotUs (${n.slotUs})` });
    else if (n.slots !== undefined && cycle / n.slotUs !== n.slots) {
      ctx.addIssue({ code: 'custom', path: ['slots'], message: `must equal cycleUs / slotUs = ${cycle / n.slotUs}` });
    } else if (cycle / n.slotUs > MAX_SLOTS_PER_CYCLE) {
      ctx.addIssue({ code: 'custom', path: ['slotUs'], message: `at most ${MAX_SLOTS_PER_CYCLE} slots per cycle` });
    }
  });

/** The opt-in assurance rescheduler (assurance/rescheduler.ts). */
export const ReschedulerConfig = z.strictObject({
  enabled: z.boolean().default(false),
  evictionsPerMinute: z.number().gt(0).max(6000).default(6),
  burst: z.number().int().min(1).max(100).default(1),
  onlyControlled: z.boolean().default(true),
  intervalMs: z.number().int().min(100).max(3_600_000).default(5_000),
  dryRun: z.boolean().default(false),
});
export type ReschedulerConfig = z.output<typeof ReschedulerConfig>;

const policyOrNull = assurancePolicySchema.nullable().default(null);

/** The analysis thread's default nice value (analysisThreadNice). */
export const ANALYSIS_THREAD_NICE = 10;

export const ExtenderConfig = z.strictObject({
  listen: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: z.number().int().min(0).max(65535).default(8888),
    })
    .default({ host: '127.0.0.1', port: 8888 }),
  /** Not live-reloadable (the files are: re-read when they change). */
  tls: ExtenderTlsConfig.optional(),
  plugins: z
    .strictObject({ assurance: z.boolean().default(true), realtime: z.boolean().default(true), tdma: z.boolean().default(true) })
    .default({ assurance: true, realtime: true, tdma: true }),
  tdmaNetworks: z.record(z.string().min(1).max(253), tdmaNetworkConfig).default({}),
  defaultAssurancePolicies: z
    .strictObject({ high: policyOrNull, low: policyOrNull, none: policyOrNull })
    .default({ high: null, low: null, none: null }),
  prioritize: z
    .strictObject({
      weights: z
        .strictObject({ assurance: z.number().min(0).max(100).default(1), realtime: z.number().min(0).max(100).default(1) })
        .default({ assurance: 1, realtime: 1 }),
    })
    .default({ weights: { assurance: 1, realtime: 1 } }),
  /** A pod without the criticality label whose spec.priority reaches this is `high` (core/criticality.ts). */
  priorityClassThreshold: z.number().int().optional(),
  /**
   * kube-scheduler's `httpTimeout` for this extender (KubeSchedulerConfiguration, 5 s by default):
   * every call (notably bind: cache wait + locks + PATCH + POST) finishes or gives up within it, less a
   * margin for the round trip (a tenth, at most 500 ms), and releases its locks.
   */
  httpTimeoutMs: z.number().int().min(200).max(600_000).default(5_000),
  /** Timeout of one API request of bind (capped by what is left of httpTimeoutMs). */
  bindTimeoutMs: z.number().int().min(100).max(600_000).default(10_000),
  bodyLimitBytes: z.number().int().min(1024).max(1 << 30).default(16 << 20),
  /**
   * Work bound of the RT analyses of one request (filter, prioritize, bind), in terms of the
   * fixed-point sums (realtime/task.ts AnalysisBudget): ~1e6 units take 40-100 ms on one core.
   * Past it the pod is refused on the remaining RT nodes with "analysis budget exceeded".
   */
  analysisBudget: z.number().int().min(1000).max(1_000_000_000).default(1_000_000),
  /**
   * Analysis work a filter does inline (on the event loop that answers kube-scheduler) before the
   * nodes left over go to the analysis thread (extender/analysis-worker.ts): ~1-2 ms.
   */
  inlineAnalysisBudget: z.number().int().min(100).max(1_000_000_000).default(50_000),
  /** Analyse what passes inlineAnalysisBudget in a worker thread (false: everything inline, up to analysisBudget). */
  analysisThread: z.boolean().default(true),
  /**
   * Linux nice value of the analysis thread (0-19; 0: the process's own). Above the event loop's
   * (0), a heavy analysis gets the CPU only when the loop that answers kube-scheduler, /healthz and
   * the other pods does not need it (CFS weight 110 against 1024 at 10).
   */
  analysisThreadNice: z.number().int().min(0).max(19).default(ANALYSIS_THREAD_NICE),
  /**
   * Bring the nodes' RT pods into the analysis thread in the background as the informers deliver
   * them (small jobs, one at a time), so a request finds them there; a request then carries at
   * most a small share of pods itself (false: every request brings over what its budget allows).
   */
  analysisThreadFeed: z.boolean().default(true),
  /**
   * Wait after a release of capacity (a reservation's pod gone, a node added or changed) before the
   * pods refused on the older view, and not asked about since, are put back in kube-scheduler's
   * queue (extender/requeue.ts).
   */
  requeueDelayMs: z.number().int().min(0).max(60_000).default(250),
  /** Node-assurance updater run by main.ts next to the server (assurance/updater.ts). */
  assuranceUpdater: z.strictObject({ enabled: z.boolean().default(false), ...AssuranceUpdaterConfig.shape }).prefault({}),
  /** Opt-in rescheduler run by main.ts (assurance/rescheduler.ts). */
  rescheduler: ReschedulerConfig.prefault({}),
});

export type ExtenderConfig = z.output<typeof ExtenderConfig>;
export type ExtenderConfigInput = z.input<typeof ExtenderConfig>;

/** Validates (and fills defaults); throws ConfigError naming each bad field. */
export function extenderConfig(raw: unknown = {}, source = 'extender config'): ExtenderConfig {
  return validateConfig(ExtenderConfig, raw, source);
}

export function loadExtenderConfig(file: string): Promise<ExtenderConfig> {
  return loadConfigFile(ExtenderConfig, file);
}

/** The configured networks in the form tdma/tdma.ts works with. */
export function tdmaNetworks(cfg: ExtenderConfig): Map<string, TdmaNetwork> {
  const out = new Map<string, TdmaNetwork>();
  for (const [name, n] of Object.entries(cfg.tdmaNetworks)) out.set(name, { name, slotUs: n.slotUs, cycleUs: n.cycleUs ?? n.slots! * n.slotUs });
  return out;
}

export type DefaultPolicies = Readonly<Record<'high' | 'low' | 'none', AssurancePolicy | null>>;
