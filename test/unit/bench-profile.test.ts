import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import {
  ADVERSARIAL_BENCH_DEFAULTS,
  CONTROLLER_BENCH_DEFAULTS,
  EXTENDER_BENCH_DEFAULTS,
  EXTENDER_POD_KINDS,
  KUBELET_SHIM_BENCH_DEFAULTS,
  adversarialBenchCommand,
  adversarialBenchOptions,
  controllerBenchCommand,
  controllerBenchOptions,
  extenderBenchCommand,
  extenderBenchOptions,
  kubeletShimBenchCommand,
  kubeletShimBenchOptions,
  shimVariants,
} from '../../experiments/bench/options.ts';
import { PROXY_IMPLEMENTATIONS } from '../../kubelet-shim/proxies.ts';
import { extenderConfig } from '../../scheduler-plugins/extender/config.ts';

const dir = mkdtempSync(join(tmpdir(), 'bench-profile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let seq = 0;
/** A profile file with `text`; its path. */
const profile = (text: string) => {
  const f = join(dir, `p${seq++}.yaml`);
  writeFileSync(f, text);
  return f;
};
/** A command that throws instead of exiting the test process, and prints nothing. */
const quiet = <C extends { exitOverride(): C; configureOutput(o: object): C }>(c: C) => c.exitOverride().configureOutput({ writeErr: () => undefined, writeOut: () => undefined });

const shim = (argv: string[]) => kubeletShimBenchOptions(argv, PROXY_IMPLEMENTATIONS, quiet(kubeletShimBenchCommand(PROXY_IMPLEMENTATIONS)));
const benches = {
  controller: { parse: (argv: string[]) => controllerBenchOptions(argv, quiet(controllerBenchCommand())), field: 'syncMs: 7' },
  extender: { parse: (argv: string[]) => extenderBenchOptions(argv, quiet(extenderBenchCommand())), field: 'noopChurn: true' },
  adversarial: { parse: (argv: string[]) => adversarialBenchOptions(argv, quiet(adversarialBenchCommand())), field: 'baselineMs: 500' },
  'kubelet-shim': { parse: shim, field: 'warmup: 100' },
};

describe('bench profiles: read as the failover profile is (experiments/harness/profile.ts loadProfile)', () => {
  for (const [name, b] of Object.entries(benches)) {
    describe(name, () => {
      it('refuses an unknown field, naming the file and the field and listing the known ones', () => {
        const f = profile(`${b.field}\npinCPUs: true\n`);
        expect(() => b.parse(['--profile', f])).toThrow(new RegExp(`profile ${f}: unknown field\\(s\\) pinCPUs \\(known: `));
      });
      it('refuses a file over 64 KiB before reading it', () => {
        const f = profile(`${b.field}\n# ${'x'.repeat(70_000)}\n`);
        expect(() => b.parse(['--profile', f])).toThrow(`profile ${f}: larger than 65536 bytes`);
      });
      it('refuses YAML aliases', () => {
        const f = profile(`${b.field}\nx0: &a [1, 2]\nx1: *a\n`);
        // refused by the YAML parser, before the schema sees the unknown fields
        expect(() => b.parse(['--profile', f])).toThrow(new RegExp(`profile ${f}: not YAML: .*alias`, 'i'));
      });
      it('refuses a missing file and a file that is not a mapping, naming the file', () => {
        expect(() => b.parse(['--profile', join(dir, 'absent.yaml')])).toThrow(`profile ${join(dir, 'absent.yaml')}: no such file`);
        const f = profile('- 1\n');
        expect(() => b.parse(['--profile', f])).toThrow(new RegExp(`profile ${f}`));
      });
      it('takes a known field, and an empty profile leaves the defaults', () => {
        const [k, v] = b.field.split(': ');
        expect((b.parse(['--profile', profile(`${b.field}\n`)]).profile as Record<string, unknown>)[k!]).toBe(v === 'true' ? true : Number(v));
        expect(b.parse(['--profile', profile('# nothing\n')])).toEqual(b.parse([]));
      });
      it('refuses an unknown flag (the old diagnosis flags are profile fields now)', () => {
        expect(() => b.parse(['--pin-cpus'])).toThrow(/unknown option '--pin-cpus'/);
      });
    });
  }
});

describe('bench:controller options', () => {
  it('defaults: parts queue and sync, the settled sizes and run conditions', () => {
    expect(controllerBenchOptions([], quiet(controllerBenchCommand()))).toEqual({ parts: ['queue', 'sync'], backlog: 500, rs: 100, rssNodes: 1000, rssPods: 10000, profile: CONTROLLER_BENCH_DEFAULTS });
    expect(CONTROLLER_BENCH_DEFAULTS).toEqual({ syncMs: 5, rssVariants: ['dist', 'tsx', 'dist-default-gc'], rssHeapSnapshot: false, runDir: '/tmp/ulysses-bench-controller' });
  });
  it('flags and profile fields', () => {
    const o = controllerBenchOptions(['--parts', 'rss', '--rss-nodes', '10', '--rss-pods', '20', '--profile', profile('rssVariants: [tsx-no-strip]\nrssHeapSnapshot: true\nrunDir: /tmp/x\n')], quiet(controllerBenchCommand()));
    expect(o).toMatchObject({ parts: ['rss'], rssNodes: 10, rssPods: 20, profile: { syncMs: 5, rssVariants: ['tsx-no-strip'], rssHeapSnapshot: true, runDir: '/tmp/x' } });
  });
  it('refuses an unknown part, a bad size and an unknown RSS variant, naming them', () => {
    const c = () => quiet(controllerBenchCommand());
    expect(() => controllerBenchOptions(['--parts', 'queue,rs'], c())).toThrow(/--parts: unknown rs \(known: queue, sync, rss\)/);
    expect(() => controllerBenchOptions(['--backlog', '-1'], c())).toThrow(/--backlog: expected an integer >= 1, got "-1"/);
    const f = profile('rssVariants: [dist, dist-fast]\n');
    expect(() => controllerBenchOptions(['--profile', f], c())).toThrow(new RegExp(`profile ${f}: field rssVariants.1: `));
  });
});

describe('bench:extender options', () => {
  const parse = (argv: string[]) => extenderBenchOptions(argv, quiet(extenderBenchCommand()));
  it('defaults: in memory, 100 and 1000 nodes, every pod kind, churn 1 by the parent, the client on the loop, informers in a thread', () => {
    expect(parse([])).toEqual({ sizes: [100, 1000], iterations: 400, kinds: [...EXTENDER_POD_KINDS], kwok: false, json: false, profile: EXTENDER_BENCH_DEFAULTS });
    expect(EXTENDER_BENCH_DEFAULTS).toMatchObject({ churn: 1, churnBy: 'parent', client: 'loop', informers: 'thread', pinCpus: false, noopChurn: false, idleMs: 0 });
  });
  it('the documented KWOK command: flags and the quiet profile', () => {
    const quietProfile = fileURLToPath(new URL('../../experiments/profiles/bench-extender-quiet.yaml', import.meta.url));
    const o = parse(['--kwok', '--sizes', '100', '--iterations', '1000', '--kinds', 'tdma', '--profile', quietProfile]);
    expect(o).toMatchObject({ sizes: [100], iterations: 1000, kinds: ['tdma'], kwok: true });
    expect(o.profile).toEqual({ ...EXTENDER_BENCH_DEFAULTS, pinCpus: true, client: 'go', schedFifo: true, clientSchedFifo: true, clientGcBetweenRounds: true, noopChurn: true });
  });
  it('a CPU list as a YAML number or a string', () => {
    expect(parse(['--profile', profile('client: go\nclientCpus: 0\n')]).profile.clientCpus).toBe('0');
    expect(parse(['--profile', profile('client: go\nclientCpus: "0,2-3"\n')]).profile.clientCpus).toBe('0,2-3');
    const f = profile('client: go\nclientCpus: first\n');
    expect(() => parse(['--profile', f])).toThrow(new RegExp(`profile ${f}: field clientCpus: `));
  });
  it('refuses fields that need another field or the other mode, naming the field', () => {
    const cases: Array<[string, string[], RegExp]> = [
      ['clientCpus: 0\n', [], /field clientCpus needs client: go/],
      ['clientGcBetweenRounds: true\nclient: worker\n', [], /field clientGcBetweenRounds needs client: go/],
      ['schedFifo: true\n', ['--kwok'], /field schedFifo needs pinCpus: true/],
      ['pinCpus: true\nschedFifo: true\nclientSchedFifo: true\n', ['--kwok'], /field clientSchedFifo needs schedFifo: true and client: go/],
      ['pinCpus: true\n', [], /field pinCpus needs --kwok/],
      ['informers: loop\n', [], /field informers needs --kwok/],
      ['churn: all\n', ['--kwok'], /field churn all is for the in-memory mode/],
      ['idleMs: 35\n', ['--kwok'], /field idleMs is for the in-memory mode/],
      ['churn: some\n', [], /field churn: /],
      ['client: rust\n', [], /field client: /],
    ];
    for (const [text, flags, err] of cases) {
      const f = profile(text);
      expect(() => parse([...flags, '--profile', f]), text).toThrow(new RegExp(`profile ${f}: ${err.source}`));
    }
  });
  it('refuses an unknown pod kind and a bad size, naming the known kinds', () => {
    expect(() => parse(['--kinds', 'tdma,gpu'])).toThrow(/--kinds: unknown gpu \(known: critical\+assurance, /);
    expect(() => parse(['--sizes', '100,x'])).toThrow(/--sizes: expected an integer >= 1, got "x"/);
  });
});

describe('bench:extender-adversarial options', () => {
  const parse = (argv: string[]) => adversarialBenchOptions(argv, quiet(adversarialBenchCommand()));
  it('defaults, flags and the analysis thread off by profile', () => {
    expect(parse([])).toEqual({ nodes: 100, repetitions: 20, clusters: ['mixed', 'hostile'], json: false, profile: ADVERSARIAL_BENCH_DEFAULTS });
    expect(ADVERSARIAL_BENCH_DEFAULTS).toEqual({ baselineMs: 3000, analysisThread: true, analysisThreadFeed: 'on', analysisThreadNice: 10, starts: 1 });
    // the extender's own default
    expect(extenderConfig({}).analysisThreadNice).toBe(ADVERSARIAL_BENCH_DEFAULTS.analysisThreadNice);
    const noThread = fileURLToPath(new URL('../../experiments/profiles/bench-extender-adversarial-no-analysis-thread.yaml', import.meta.url));
    expect(parse(['--repetitions', '50', '--clusters', 'hostile', '--json', '--profile', noThread])).toEqual({ nodes: 100, repetitions: 50, clusters: ['hostile'], json: true, profile: { ...ADVERSARIAL_BENCH_DEFAULTS, analysisThread: false } });
    const feed = fileURLToPath(new URL('../../experiments/profiles/bench-extender-adversarial-feed-both.yaml', import.meta.url));
    expect(parse(['--profile', feed]).profile).toEqual({ ...ADVERSARIAL_BENCH_DEFAULTS, analysisThreadFeed: 'both', starts: 10 });
    const nice = fileURLToPath(new URL('../../experiments/profiles/bench-extender-adversarial-nice-both.yaml', import.meta.url));
    expect(parse(['--profile', nice]).profile).toEqual({ ...ADVERSARIAL_BENCH_DEFAULTS, analysisThreadNice: 'both', starts: 5 });
  });
  it('refuses an unknown cluster and a bad analysisThread value', () => {
    expect(() => parse(['--clusters', 'mixed,calm'])).toThrow(/--clusters: unknown calm \(known: mixed, hostile\)/);
    const f = profile('analysisThread: off\n');
    expect(() => parse(['--profile', f])).toThrow(new RegExp(`profile ${f}: field analysisThread: `));
    const g = profile('analysisThreadFeed: true\n');
    expect(() => parse(['--profile', g])).toThrow(new RegExp(`profile ${g}: field analysisThreadFeed: `));
    const h = profile('analysisThreadNice: 20\n');
    expect(() => parse(['--profile', h])).toThrow(new RegExp(`profile ${h}: field analysisThreadNice: `));
  });
});

describe('bench:kubelet-shim options', () => {
  it('defaults: every implementation, 5000 calls after 5000 warm-up calls, a grpc-js client, shims as their own processes', () => {
    expect(shim([])).toEqual({ n: 5000, implementations: PROXY_IMPLEMENTATIONS.join(','), profile: KUBELET_SHIM_BENCH_DEFAULTS });
    expect(KUBELET_SHIM_BENCH_DEFAULTS).toEqual({ warmup: 5000, client: 'node', inProcess: false, shimNodeFlags: [], runDir: '/tmp/ulysses-bench-shim', nodeIndex: 9 });
  });
  it("the documented kubelet's-client command: flags and profile", () => {
    const f = fileURLToPath(new URL('../../experiments/profiles/bench-kubelet-shim-kubelet-client.yaml', import.meta.url));
    const o = shim(['--implementations', 'splice', '--n', '5000', '--profile', f]);
    expect(o).toMatchObject({ n: 5000, implementations: 'splice', profile: { client: 'go', pinShim: '0', pinShimHelpers: '1', pinClient: '0', warmup: 5000 } });
  });
  it('refuses contradictory fields and bad values, naming the field', () => {
    const cases: Array<[string, RegExp]> = [
      ['pinShimHelpers: 0\n', /field pinShimHelpers needs pinShim/],
      ['inProcess: true\nshimNice: -10\n', /field inProcess: true leaves no shim process/],
      ['shimNice: -40\n', /field shimNice: /],
      ['shimNodeFlags: [max-semi-space-size=64]\n', /field shimNodeFlags.0: /],
      ['client: rust\n', /field client: /],
    ];
    for (const [text, err] of cases) {
      const f = profile(text);
      expect(() => shim(['--profile', f]), text).toThrow(new RegExp(`profile ${f}: ${err.source}`));
    }
  });
  it('--implementations: variants with node flags; an unknown one, and node flags in process, refused', () => {
    expect(shimVariants('splice,splice+--max-semi-space-size=64', PROXY_IMPLEMENTATIONS)).toEqual([
      { name: 'splice', impl: 'splice', nodeFlags: [] },
      { name: 'splice+--max-semi-space-size=64', impl: 'splice', nodeFlags: ['--max-semi-space-size=64'] },
    ]);
    expect(() => shim(['--implementations', 'splice,quic'])).toThrow(/unknown implementation "quic"/);
    expect(() => shim(['--implementations', 'splice+--cpu-prof', '--profile', profile('inProcess: true\n')])).toThrow(/node flags need the shims as their own processes/);
  });
});

describe('the example bench profiles in experiments/profiles/ parse under their bench', () => {
  /** the extender's profiles for its KWOK mode (pinCpus needs --kwok) */
  const KWOK_PROFILES = ['bench-extender-quiet.yaml', 'bench-extender-pinned.yaml'];
  it('each bench-*.yaml sets something', () => {
    const profiles = fileURLToPath(new URL('../../experiments/profiles/', import.meta.url));
    const files = readdirSync(profiles).filter((f) => f.startsWith('bench-') && f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThanOrEqual(6);
    for (const f of files) {
      const argv = ['--profile', join(profiles, f)];
      const o = f.startsWith('bench-controller-')
        ? controllerBenchOptions(argv, quiet(controllerBenchCommand()))
        : f.startsWith('bench-extender-adversarial-')
          ? adversarialBenchOptions(argv, quiet(adversarialBenchCommand()))
          : f.startsWith('bench-extender-')
            ? extenderBenchOptions(KWOK_PROFILES.includes(f) ? ['--kwok', ...argv] : argv, quiet(extenderBenchCommand()))
            : shim(argv);
      const defaults = f.startsWith('bench-controller-') ? CONTROLLER_BENCH_DEFAULTS : f.startsWith('bench-extender-adversarial-') ? ADVERSARIAL_BENCH_DEFAULTS : f.startsWith('bench-extender-') ? EXTENDER_BENCH_DEFAULTS : KUBELET_SHIM_BENCH_DEFAULTS;
      expect(o.profile, f).not.toEqual(defaults);
    }
  });
});

describe('the benches start with these options', () => {
  // each bench's own process, as `npm run bench:*` starts it: its --help lists the flags above and nothing else
  const benchHelp: Array<[string, string[]]> = [
    ['controller.ts', ['--parts', '--backlog', '--rs', '--rss-nodes', '--rss-pods', '--profile']],
    ['extender.ts', ['--sizes', '--iterations', '--kinds', '--kwok', '--json', '--profile']],
    ['extender-adversarial.ts', ['--nodes', '--repetitions', '--clusters', '--json', '--profile']],
    ['kubelet-shim.ts', ['--n', '--implementations', '--backend', '--profile']],
  ];
  for (const [file, flags] of benchHelp) {
    it(`${file} --help`, () => {
      const out = execFileSync(process.execPath, ['--import', 'tsx', fileURLToPath(new URL(`../../experiments/bench/${file}`, import.meta.url)), '--help'], { encoding: 'utf8', env: { ...process.env, ULYSSES_BENCH_EXTENDER_MEASURE: '' } });
      expect([...out.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1])).toEqual(flags);
    });
  }
});
