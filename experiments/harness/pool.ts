/**
 * `ulysses experiment pool`: one results directory from the repetitions of several runs of the same
 * plan (e.g. three KWOK scale runs of configuration 5, each a few repetitions long), so a median is
 * taken over all of them. Repetitions keep their order (source by source) and are renumbered per
 * cell; ratios against configuration 1 stay meaningful only if every pooled run measured it, which
 * is why `configs` can keep configuration 5 alone.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { META_FILE, RESULTS_FILE, readMeta } from './outputs.ts';
import type { ReportMeta } from './report.ts';
import { cellKey, configKey, readResults, type RepResult } from './results.ts';

export interface PoolSource {
  dir: string;
  results: RepResult[];
}

/** The repetitions of `sources` (of configurations `configs`, all if absent), renumbered 0.. per cell. */
export function poolResults(sources: readonly PoolSource[], configs?: readonly string[]): { results: RepResult[]; ranges: string[] } {
  const next = new Map<string, number>();
  const results: RepResult[] = [];
  const ranges: string[] = [];
  for (const s of sources) {
    const kept = s.results.filter((r) => !configs || configs.includes(configKey(r)));
    if (!kept.length) throw new Error(`${join(s.dir, RESULTS_FILE)}: no repetition of configuration ${configs?.join(', ') ?? 'any'}`);
    const firstIndex = results.length;
    for (const r of kept) {
      const cell = cellKey(r);
      const rep = next.get(cell) ?? 0;
      next.set(cell, rep + 1);
      results.push({ ...r, rep });
    }
    ranges.push(`${s.dir}: ${kept.length} repetition(s), pooled rows ${firstIndex + 1}-${results.length}`);
  }
  return { results, ranges };
}

/** Writes DIR/results.jsonl and DIR/meta.json (the first source's notes, plus where each row came from). */
export function writePool(out: string, dirs: readonly string[], configs: readonly string[] | undefined, command: string): number {
  if (dirs.length < 2) throw new Error('--from: pool at least two result directories');
  const sources = dirs.map((dir) => ({ dir, results: readResults(join(dir, RESULTS_FILE)) }));
  for (const s of sources) if (!s.results.length) throw new Error(`${join(s.dir, RESULTS_FILE)}: no results`);
  const { results, ranges } = poolResults(sources, configs);
  const first: ReportMeta = readMeta(dirs[0]!);
  const meta: ReportMeta = {
    ...first,
    notes: [
      `pooled from ${dirs.length} runs${configs ? ` (configuration ${configs.join(', ')} only)` : ''}, repetitions renumbered per cell in this order: ${ranges.join('; ')}`,
      ...(first.notes ?? []),
    ],
    command,
  };
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, RESULTS_FILE), results.map((r) => `${JSON.stringify(r)}\n`).join(''));
  writeFileSync(join(out, META_FILE), `${JSON.stringify(meta, null, 2)}\n`);
  return results.length;
}
