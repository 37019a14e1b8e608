/**
 * The command lines of the benches (`npm run bench:controller`, `bench:extender`,
 * `bench:extender-adversarial`, `bench:kubelet-shim`). A flag is what a user of a bench chooses: the
 * sizes, which part or scenario runs, the output, and `--profile FILE`. The run conditions a study
 * varies (CPU pinning, which client, warm-up, diagnosis output...) are fields of that YAML profile,
 * read and bounded by the harness' loadProfile (experiments/harness/profile.ts: unknown fields and bad
 * values are errors naming the file and the field); absent fields keep the settled defaults below.
 * Examples: experiments/profiles/bench-*.yaml; the old flags and their fields: experiments/README.md.
 *
 * This module imports no component and no testbed code: the extender bench's measuring process and
 * the adversarial bench's client thread load it.
 */
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { z } from 'zod';
import { loadProfile } from '../harness/profile.ts';

const int = (flag: string, min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${flag}: expected an integer >= ${min}, got ${JSON.stringify(v)}`);
  return n;
};
const intList = (flag: string, min: number) => (v: string) => v.split(',').map((x) => int(flag, min)(x.trim()));
/** A comma-separated list of names, each one of `known`. */
const names =
  <T extends string>(flag: string, known: readonly T[]) =>
  (v: string): T[] => {
    const list = v.split(',').map((x) => x.trim()).filter(Boolean);
    const unknown = list.filter((x) => !known.includes(x as T));
    if (unknown.length || !list.length) throw new InvalidArgumentError(`${flag}: ${unknown.length ? `unknown ${unknown.join(', ')}` : 'empty'} (known: ${known.join(', ')})`);
    return list as T[];
  };
/** A CPU list as taskset takes it: 1 (a YAML number), or a string such as 0,2-3. */
const cpuList = z.union([z.number().int().nonnegative(), z.string().regex(/^\d+([-,]\d+)*$/, 'a CPU list as taskset takes it, e.g. 1 or "0,2-3"')]).transform(String);
const dir = z.string().min(1);

/** The profile in `file` (or every default without one), the settled defaults filled in. */
function profileOf<S extends z.ZodObject>(file: string | undefined, schema: S, defaults: Required<z.infer<S>>, check?: (p: z.infer<S>) => string | undefined) {
  const p = file ? loadProfile(file, schema, check) : {};
  return { ...defaults, ...p } as Required<z.infer<S>>;
}

/** A flag-and-profile combination that does not make sense: an error naming the profile's field and the flag. */
function refuse(file: string | undefined, field: string, why: string): never {
  throw new BenchOptionsError(`profile ${file}: field ${field} ${why}`);
}

/** A bad flag or profile: the benches print its message alone (no stack) and exit 1. */
export class BenchOptionsError extends Error {}

/** `parse` with its errors (the profile's, the cross-checks') as BenchOptionsError; commander's own pass through. */
function checked<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof CommanderError || err instanceof BenchOptionsError) throw err;
    throw new BenchOptionsError((err as Error).message);
  }
}

/** What a bench prints when it fails: a bad option's message, or anything else's stack. */
export const benchFailure = (err: Error): string => (err instanceof BenchOptionsError ? err.message : (err.stack ?? err.message));

const profileOption = () => new Option('--profile <file>', 'run conditions (YAML; fields: experiments/README.md, examples: experiments/profiles/bench-*.yaml)');

// ---------------------------------------------------------------- bench:controller

export const CONTROLLER_PARTS = ['queue', 'sync', 'rss'] as const;
export type ControllerPart = (typeof CONTROLLER_PARTS)[number];
/** The controller-manager processes part rss can measure (controller.ts RSS_VARIANTS). */
export const CONTROLLER_RSS_VARIANTS = ['dist', 'tsx', 'dist-default-gc', 'dist-no-arena-limit', 'dist-semi2', 'dist-no-projection', 'tsx-no-strip'] as const;
export type ControllerRssVariant = (typeof CONTROLLER_RSS_VARIANTS)[number];

export const ControllerBenchProfileSchema = z
  .object({
    /** synthetic sync duration of part queue, ms (default 5) */
    syncMs: z.number().int().nonnegative().max(10_000),
    /** part rss: the controller-manager processes measured one after the other on the same cluster */
    rssVariants: z.array(z.enum(CONTROLLER_RSS_VARIANTS)).min(1),
    /** part rss: a heap snapshot of each variant (SIGUSR2) written into the repository root */
    rssHeapSnapshot: z.boolean(),
    /** testbed run directory of parts sync and rss */
    runDir: dir,
  })
  .partial()
  .strict();
export type ControllerBenchProfile = Required<z.infer<typeof ControllerBenchProfileSchema>>;
export const CONTROLLER_BENCH_DEFAULTS: ControllerBenchProfile = { syncMs: 5, rssVariants: ['dist', 'tsx', 'dist-default-gc'], rssHeapSnapshot: false, runDir: '/tmp/ulysses-bench-controller' };

export interface ControllerBenchOptions {
  parts: ControllerPart[];
  backlog: number;
  rs: number;
  rssNodes: number;
  rssPods: number;
  profile: ControllerBenchProfile;
}

export function controllerBenchCommand(): Command {
  return new Command('bench:controller')
    .description("the controller manager's queueing delay, ReplicaSet syncs against kube-controller-manager, and process RSS at scale")
    .addOption(new Option('--parts <list>', 'what runs, in this order: queue (no testbed), sync (testbed), rss (testbed, heavy)').argParser(names('--parts', CONTROLLER_PARTS)).default(['queue', 'sync'], 'queue,sync'))
    .option('--backlog <n>', 'part queue: low-priority keys queued before the high one', int('--backlog', 1), 500)
    .option('--rs <n>', 'part sync: low-priority ReplicaSets per run', int('--rs', 1), 100)
    .option('--rss-nodes <n>', 'part rss: KWOK nodes', int('--rss-nodes', 1), 1000)
    .option('--rss-pods <n>', 'part rss: pods, selected by 100 Services', int('--rss-pods', 0), 10000)
    .addOption(profileOption());
}

export function controllerBenchOptions(argv: readonly string[], command = controllerBenchCommand()): ControllerBenchOptions {
  return checked(() => {
    const o = command.parse([...argv], { from: 'user' }).opts<Omit<ControllerBenchOptions, 'profile'> & { profile?: string }>();
    return { ...o, profile: profileOf(o.profile, ControllerBenchProfileSchema, CONTROLLER_BENCH_DEFAULTS) };
  });
}

// ---------------------------------------------------------------- bench:extender

/** The pods each row schedules (extender.ts POD_KINDS). */
export const EXTENDER_POD_KINDS = ['critical+assurance', 'rt deferrable-server', 'tdma', 'rt budget-period+tdma'] as const;
export type ExtenderPodKind = (typeof EXTENDER_POD_KINDS)[number];

export const ExtenderBenchProfileSchema = z
  .object({
    /** nodes changed between two rounds: a number (default 1, the node the previous pod was bound to), or all (in memory only: every verdict recomputed) */
    churn: z.union([z.number().int().nonnegative(), z.literal('all')]),
    /** the no-op extender's rows under the same churn as the extender's (default: back to back, warm) */
    noopChurn: z.boolean(),
    /** KWOK mode: the churn's API calls made by the bench's parent process (default) or by the measuring one */
    churnBy: z.enum(['parent', 'measuring']),
    /** every timed round of every row as JSON in this directory (<nodes>-<pod kind>-<extender|noop>.json) */
    roundsDir: dir,
    /** the scheduler's side of a round: on the extender's event loop (default), in a worker thread, or kube-scheduler's HTTPExtender in a Go process */
    client: z.enum(['loop', 'worker', 'go']),
    /** client go: its CPUs (taskset; default: the measuring process's) */
    clientCpus: cpuList,
    /** client go: its garbage collected after each round, never during one */
    clientGcBetweenRounds: z.boolean(),
    /** KWOK mode: the testbed on CPU 0, the measuring process on CPU 1 */
    pinCpus: z.boolean(),
    /** with pinCpus: the measuring process's main thread SCHED_FIFO (a client on CPU 1 runs only while it waits) */
    schedFifo: z.boolean(),
    /** with schedFifo and client go: the Go client's threads SCHED_FIFO at the same priority */
    clientSchedFifo: z.boolean(),
    /** KWOK mode: the extender's informers in a worker thread (default, as it runs them) or on its event loop */
    informers: z.enum(['thread', 'loop']),
    /** in memory: ms idle after every round (the gap the KWOK mode's churn leaves) */
    idleMs: z.number().int().nonnegative().max(60_000),
    /** KWOK mode: testbed run directory */
    runDir: dir,
    /** KWOK mode: how long to wait for the KWOK nodes Ready (0: testbed.ts's default) */
    nodesReadyTimeoutMs: z.number().int().nonnegative(),
  })
  .partial()
  .strict();
export type ExtenderBenchProfile = Required<z.infer<typeof ExtenderBenchProfileSchema>>;
export const EXTENDER_BENCH_DEFAULTS: ExtenderBenchProfile = {
  churn: 1,
  noopChurn: false,
  churnBy: 'parent',
  roundsDir: '',
  client: 'loop',
  clientCpus: '',
  clientGcBetweenRounds: false,
  pinCpus: false,
  schedFifo: false,
  clientSchedFifo: false,
  informers: 'thread',
  idleMs: 0,
  runDir: '/tmp/ulysses-bench-extender',
  nodesReadyTimeoutMs: 0,
};

const extenderProfileCheck = (p: z.infer<typeof ExtenderBenchProfileSchema>): string | undefined => {
  const go = p.client === 'go';
  if (p.clientCpus !== undefined && !go) return 'field clientCpus needs client: go';
  if (p.clientGcBetweenRounds && !go) return 'field clientGcBetweenRounds needs client: go';
  if (p.schedFifo && !p.pinCpus) return 'field schedFifo needs pinCpus: true (the extender alone on CPU 1 with its client)';
  if (p.clientSchedFifo && !(p.schedFifo && go)) return 'field clientSchedFifo needs schedFifo: true and client: go';
  return undefined;
};

export interface ExtenderBenchOptions {
  sizes: number[];
  iterations: number;
  /** every kind unless given */
  kinds: ExtenderPodKind[];
  kwok: boolean;
  json: boolean;
  profile: ExtenderBenchProfile;
}

export function extenderBenchCommand(): Command {
  return new Command('bench:extender')
    .description('filter+prioritize round trips of the extender against a no-op extender, in memory or on a KWOK testbed')
    .addOption(new Option('--sizes <list>', 'cluster sizes in nodes').argParser(intList('--sizes', 1)).default([100, 1000], '100,1000'))
    .option('--iterations <n>', 'timed rounds per row, after 50 warm-up rounds', int('--iterations', 1), 400)
    .addOption(new Option('--kinds <list>', `pod kinds to schedule, comma-separated (${EXTENDER_POD_KINDS.join(', ')})`).argParser(names('--kinds', EXTENDER_POD_KINDS)).default([...EXTENDER_POD_KINDS], 'every kind'))
    .option('--kwok', 'per size, a control-plane-only testbed with N KWOK nodes (run under flock /tmp/ulysses-testbed.lock)')
    .option('--json', 'the rows as JSON')
    .addOption(profileOption());
}

export function extenderBenchOptions(argv: readonly string[], command = extenderBenchCommand()): ExtenderBenchOptions {
  return checked(() => {
    const o = command.parse([...argv], { from: 'user' }).opts<Omit<ExtenderBenchOptions, 'profile'> & { profile?: string }>();
    const file = o.profile;
    const p = file ? loadProfile(file, ExtenderBenchProfileSchema, extenderProfileCheck) : {};
    if (o.kwok) {
      if (p.churn === 'all') refuse(file, 'churn', 'all is for the in-memory mode (with --kwok every changed node is an API call per round): use a number');
      if (p.idleMs) refuse(file, 'idleMs', 'is for the in-memory mode (with --kwok the churn through the API is the gap)');
    } else {
      for (const f of ['pinCpus', 'informers', 'churnBy', 'nodesReadyTimeoutMs'] as const) if (p[f] !== undefined && p[f] !== false) refuse(file, f, 'needs --kwok');
    }
    return { ...o, kwok: !!o.kwok, json: !!o.json, profile: { ...EXTENDER_BENCH_DEFAULTS, ...p } };
  });
}

// ---------------------------------------------------------------- bench:extender-adversarial

export const ADVERSARIAL_CLUSTERS = ['mixed', 'hostile'] as const;

export const AdversarialBenchProfileSchema = z
  .object({
    /** ms of /healthz and ordinary filters alone before the adversarial ones (default 3000) */
    baselineMs: z.number().int().positive().max(600_000),
    /** the extender's analysis thread (default true, as it runs) */
    analysisThread: z.boolean(),
    /**
     * the analysis thread fed in the background from the state (extender config analysisThreadFeed):
     * on (default, as it runs), off (every request brings over what its budget allows), or both, one
     * extender of each, alternating, in the same run
     */
    analysisThreadFeed: z.enum(['on', 'off', 'both']),
    /**
     * the analysis thread's nice value (extender config analysisThreadNice; default 10, its default),
     * or both: extenders at 0 and at 10, alternating, in the same run
     */
    analysisThreadNice: z.union([z.number().int().min(0).max(19), z.literal('both')]),
    /** fresh extenders per cluster (and feed mode): the first /filter of each is reported, median and max over them (default 1) */
    starts: z.number().int().positive().max(1000),
  })
  .partial()
  .strict();
export type AdversarialBenchProfile = Required<z.infer<typeof AdversarialBenchProfileSchema>>;
export const ADVERSARIAL_BENCH_DEFAULTS: AdversarialBenchProfile = { baselineMs: 3000, analysisThread: true, analysisThreadFeed: 'on', analysisThreadNice: 10, starts: 1 };

export interface AdversarialBenchOptions {
  nodes: number;
  repetitions: number;
  clusters: Array<(typeof ADVERSARIAL_CLUSTERS)[number]>;
  json: boolean;
  profile: AdversarialBenchProfile;
}

export function adversarialBenchCommand(): Command {
  return new Command('bench:extender-adversarial')
    .description("the extender's /filter and /healthz under issue 26's adversarial RT inputs")
    .option('--nodes <n>', 'cluster size in nodes', int('--nodes', 1), 100)
    .option('--repetitions <n>', 'filters per adversarial case (a fresh pod UID each)', int('--repetitions', 1), 20)
    .addOption(new Option('--clusters <list>', 'mixed (one node per case among ordinary nodes) and/or hostile (every node a case node)').argParser(names('--clusters', ADVERSARIAL_CLUSTERS)).default([...ADVERSARIAL_CLUSTERS], 'mixed,hostile'))
    .option('--json', 'the results as JSON')
    .addOption(profileOption());
}

export function adversarialBenchOptions(argv: readonly string[], command = adversarialBenchCommand()): AdversarialBenchOptions {
  return checked(() => {
    const o = command.parse([...argv], { from: 'user' }).opts<Omit<AdversarialBenchOptions, 'profile'> & { profile?: string }>();
    return { ...o, json: !!o.json, profile: profileOf(o.profile, AdversarialBenchProfileSchema, ADVERSARIAL_BENCH_DEFAULTS) };
  });
}

// ---------------------------------------------------------------- bench:kubelet-shim

export const KubeletShimBenchProfileSchema = z
  .object({
    /** warm-up calls per method and path (default 5000: a fresh shim process reaches its steady state over the first thousands) */
    warmup: z.number().int().nonnegative(),
    /** the client: a grpc-js client in this process (default), or the kubelet's own CRI client (k8s.io/cri-client) in a Go process */
    client: z.enum(['node', 'go']),
    /** the proxies inside the bench's process instead of as their own processes */
    inProcess: z.boolean(),
    /** taskset CPU list of the shim processes */
    pinShim: cpuList,
    /** with pinShim: every thread of a shim process but its main thread on these CPUs, set after each warm-up */
    pinShimHelpers: cpuList,
    /** taskset CPU list of the client (this process, or the Go client) and of the containerd started here */
    pinClient: cpuList,
    /** extra node flags of every shim process, e.g. [--cpu-prof] */
    shimNodeFlags: z.array(z.string().regex(/^--[a-z0-9-]+(=\S*)?$/, 'a node flag such as --max-semi-space-size=32')),
    /** scheduling niceness of the shim processes (root for < 0) */
    shimNice: z.number().int().min(-20).max(19),
    /** run directory of the containerd started here */
    runDir: dir,
    /** node index of the containerd started here (bridge uly-br<i>, 10.244.<i>.0/24; default 9) */
    nodeIndex: z.number().int().min(0).max(250),
  })
  .partial()
  .strict();
export type KubeletShimBenchProfile = z.infer<typeof KubeletShimBenchProfileSchema> & Required<Pick<z.infer<typeof KubeletShimBenchProfileSchema>, 'warmup' | 'client' | 'inProcess' | 'shimNodeFlags' | 'runDir' | 'nodeIndex'>>;
export const KUBELET_SHIM_BENCH_DEFAULTS = { warmup: 5000, client: 'node', inProcess: false, shimNodeFlags: [] as string[], runDir: '/tmp/ulysses-bench-shim', nodeIndex: 9 } as const satisfies Partial<KubeletShimBenchProfile>;

const kubeletShimProfileCheck = (p: z.infer<typeof KubeletShimBenchProfileSchema>): string | undefined => {
  if (p.pinShimHelpers !== undefined && (p.pinShim === undefined || p.inProcess)) return 'field pinShimHelpers needs pinShim and the shims as their own processes (not inProcess: true)';
  if (p.inProcess && (p.pinShim !== undefined || p.shimNice !== undefined || p.shimNodeFlags?.length)) return 'field inProcess: true leaves no shim process for pinShim, shimNice or shimNodeFlags';
  return undefined;
};

export interface KubeletShimBenchOptions {
  n: number;
  /** "impl" or "impl+<node flags of that shim>", see {@link shimVariants} */
  implementations: string;
  backend?: string;
  profile: KubeletShimBenchProfile;
}

export function kubeletShimBenchCommand(implementations: readonly string[]): Command {
  return new Command('bench:kubelet-shim')
    .description('latency the kubelet-shim adds to CRI calls, straight to containerd vs through each proxy, interleaved')
    .option('--n <n>', 'timed calls per method and path', int('--n', 1), 5000)
    .option('--implementations <list>', `proxies to compare, comma-separated (${implementations.join(', ')}); impl+<node flags> runs a variant, e.g. splice+--max-semi-space-size=64`, implementations.join(','))
    .option('--backend <socket>', 'an existing containerd socket (default: a containerd started here, node index 9, under the testbed lock)')
    .addOption(profileOption());
}

export function kubeletShimBenchOptions(argv: readonly string[], implementations: readonly string[], command = kubeletShimBenchCommand(implementations)): KubeletShimBenchOptions {
  return checked(() => {
    const o = command.parse([...argv], { from: 'user' }).opts<Omit<KubeletShimBenchOptions, 'profile'> & { profile?: string }>();
    const p = o.profile ? loadProfile(o.profile, KubeletShimBenchProfileSchema, kubeletShimProfileCheck) : {};
    const profile = { ...KUBELET_SHIM_BENCH_DEFAULTS, ...p } as KubeletShimBenchProfile;
    shimVariants(o.implementations, implementations, profile.inProcess);
    return { ...o, profile };
  });
}

/**
 * `--implementations`: "impl" or "impl+<extra node flags of that shim>" (e.g.
 * splice+--max-semi-space-size=64), variants of one implementation compared in the same run.
 */
export function shimVariants<T extends string>(list: string, known: readonly T[], inProcess = false): Array<{ name: string; impl: T; nodeFlags: string[] }> {
  const out = list.split(',').map((x) => x.trim()).filter(Boolean).map((name) => {
    const [impl, ...flags] = name.split('+');
    if (!known.includes(impl as T)) throw new Error(`--implementations: unknown implementation "${impl}" in "${name}" (one of ${known.join(', ')}, optionally +node flags)`);
    const nodeFlags = flags.join('+').split(' ').filter(Boolean);
    if (nodeFlags.length && inProcess) throw new Error(`--implementations ${name}: node flags need the shims as their own processes (not profile inProcess: true)`);
    return { name, impl: impl as T, nodeFlags };
  });
  if (!out.length) throw new Error(`--implementations: empty (one of ${known.join(', ')})`);
  return out;
}
