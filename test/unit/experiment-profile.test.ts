import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseRunProfile, runProfileOptions } from '../../experiments/harness/profile.ts';

describe('experiment failover --profile', () => {
  it('maps every field onto the harness option it sets', () => {
    const p = parseRunProfile(
      'freezeSource: kubelet\nrepTimeoutSeconds: 60\nclientRateLimit: false\nneutralSetup: false\nwarmup: false\ncriticalPathHoldMs: 0\nminCriticalAgeMs: 35000\nquietBeforeFailureSeconds: 120\npinCpus: true\ncpuWindowMs: 3000\ncpuWindowProfile: true\nrepeatShared: 0\n',
      'all.yaml',
    );
    expect(runProfileOptions(p)).toEqual({
      freezeSource: 'kubelet',
      repTimeoutMs: 60_000,
      clientRateLimit: false,
      neutralSetup: false,
      warmup: false,
      criticalPathHoldMs: 0,
      minCriticalAgeMs: 35_000,
      quietBeforeFailureMs: 120_000,
      pinCpus: true,
      cpuWindowMs: 3000,
      cpuWindowProfile: true,
      repeatShared: 0,
    });
  });

  it('an empty profile changes nothing (the settled defaults stay)', () => {
    expect(runProfileOptions(parseRunProfile('# nothing\n', 'empty.yaml'))).toEqual({});
  });

  it('refuses bad input naming the file and the field', () => {
    expect(() => parseRunProfile('pinCPUs: true\n', 'p.yaml')).toThrow(/profile p\.yaml: unknown field\(s\) pinCPUs \(known: freezeSource, /);
    expect(() => parseRunProfile('freezeSource: all\n', 'p.yaml')).toThrow(/profile p\.yaml: field freezeSource: /);
    expect(() => parseRunProfile('repTimeoutSeconds: -1\n', 'p.yaml')).toThrow(/field repTimeoutSeconds/);
    expect(() => parseRunProfile('cpuWindowProfile: true\n', 'p.yaml')).toThrow(/field cpuWindowProfile needs cpuWindowMs/);
    expect(() => parseRunProfile('- 1\n- 2\n', 'p.yaml')).toThrow(/profile p\.yaml/);
    expect(() => parseRunProfile('a: [\n', 'p.yaml')).toThrow(/profile p\.yaml: not YAML/);
  });

  it('bounds the work: no YAML aliases, at most 64 KiB', () => {
    expect(() => parseRunProfile('x: &a 1\ny: *a\n', 'p.yaml')).toThrow(/profile p\.yaml/);
    expect(() => parseRunProfile(`# ${'x'.repeat(70_000)}\n`, 'big.yaml')).toThrow(/larger than 65536 bytes/);
  });

  it('the example profiles in experiments/profiles/ parse', () => {
    const dir = new URL('../../experiments/profiles/', import.meta.url);
    const files = readdirSync(dir).filter((f) => f.endsWith('.yaml') && !f.startsWith('bench-')); // bench-*: test/unit/bench-profile.test.ts
    expect(files.length).toBeGreaterThanOrEqual(4);
    for (const f of files) expect(Object.keys(runProfileOptions(parseRunProfile(readFileSync(new URL(f, dir), 'utf8'), f))).length).toBeGreaterThan(0);
  });
});
