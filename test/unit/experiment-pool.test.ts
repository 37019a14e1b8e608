/** `ulysses experiment pool`: several runs' repetitions in one results directory. */
import { mkdtempSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { poolResults, writePool } from '../../experiments/harness/pool.ts';
import { emptyEvents, parseResults, repKey, type RepResult } from '../../experiments/harness/results.ts';

const rep = (config: 1 | 5, podsPerNode: number, r: number, prioScheduled: number): RepResult => ({ config, dn: 90, podsPerNode, rep: r, events: { ...emptyEvents(), prioScheduled } });

describe('poolResults', () => {
  it('renumbers repetitions per cell in source order and keeps only the asked configurations', () => {
    const a = { dir: 'a', results: [rep(1, 7, 0, 180), rep(5, 0, 0, 0.16), rep(5, 7, 0, 0.21), rep(5, 0, 1, 0.15)] };
    const b = { dir: 'b', results: [rep(5, 0, 0, 0.13), rep(5, 7, 0, 0.16)] };
    const { results, ranges } = poolResults([a, b], ['5']);
    expect(results.map(repKey)).toEqual(['c5/dn90/ppn0/rep0', 'c5/dn90/ppn7/rep0', 'c5/dn90/ppn0/rep1', 'c5/dn90/ppn0/rep2', 'c5/dn90/ppn7/rep1']);
    expect(results.map((r) => r.events.prioScheduled)).toEqual([0.16, 0.21, 0.15, 0.13, 0.16]);
    expect(ranges).toEqual(['a: 3 repetition(s), pooled rows 1-3', 'b: 2 repetition(s), pooled rows 4-5']);
    // without a filter every configuration is kept
    expect(poolResults([a, b]).results).toHaveLength(6);
  });
  it('refuses a source without a repetition of the configurations kept', () => {
    expect(() => poolResults([{ dir: 'a', results: [rep(1, 7, 0, 180)] }], ['5'])).toThrow(/a\/results\.jsonl: no repetition of configuration 5/);
  });
  it('writes results.jsonl that parses and meta.json saying where every row came from', () => {
    const root = mkdtempSync(join(tmpdir(), 'pool-'));
    for (const [d, rows] of [['a', [rep(5, 0, 0, 0.1), rep(5, 7, 0, 0.2)]], ['b', [rep(5, 0, 0, 0.3)]]] as const) {
      mkdirSync(join(root, d));
      writeFileSync(join(root, d, 'results.jsonl'), rows.map((r) => JSON.stringify(r)).join('\n'));
    }
    writeFileSync(join(root, 'a', 'meta.json'), JSON.stringify({ notes: ['machine: test'], inflationTargets: ['prioScheduled'] }));
    const out = join(root, 'pooled');
    expect(writePool(out, [join(root, 'a'), join(root, 'b')], ['5'], 'the command')).toBe(3);
    expect(parseResults(readFileSync(join(out, 'results.jsonl'), 'utf8')).map(repKey)).toEqual(['c5/dn90/ppn0/rep0', 'c5/dn90/ppn7/rep0', 'c5/dn90/ppn0/rep1']);
    const meta = JSON.parse(readFileSync(join(out, 'meta.json'), 'utf8'));
    expect(meta.command).toBe('the command');
    expect(meta.inflationTargets).toEqual(['prioScheduled']);
    expect(meta.notes[0]).toMatch(/^pooled from 2 runs \(configuration 5 only\).*a: 2 repetition\(s\), pooled rows 1-2; .*b: 1 repetition\(s\), pooled rows 3-3$/);
    expect(meta.notes[1]).toBe('machine: test');
    expect(() => writePool(out, [join(root, 'a')], undefined, 'x')).toThrow(/at least two/);
  });
});
