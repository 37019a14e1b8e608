/**
 * `ulysses experiment placement` and `ulysses experiment schedulability` (thesis §6.2): run, print
 * the table, write DIR/*.csv, DIR/report.md and the figures.
 */
import { runPlacementStudy, type WorkloadOptions } from './placement.ts';
import { placementTable, schedulabilityTable, sensitivityTable, writePlacementOutputs, writeSchedulabilityOutputs, type SensitivityRow, type Written } from './report.ts';
import { runSchedulabilityStudy, type StudyOptions, type StudyResult } from './schedulability.ts';

export interface PlacementExperimentOptions extends WorkloadOptions {
  readonly seed: number;
  readonly runs: number;
  readonly out: string;
  readonly command: string;
  /** also a PNG copy of each figure */
  readonly png?: boolean;
  readonly log?: (line: string) => void;
}

export async function runPlacementExperiment(o: PlacementExperimentOptions): Promise<{ table: string; written: Written }> {
  const log = o.log ?? (() => undefined);
  atLeast1({ '--runs': o.runs, '--nodes': o.nodes, '--pods': o.pods });
  const { nodes, pods, load, addedNodes } = o;
  const runs = runPlacementStudy(o.seed, o.runs, { ...(nodes !== undefined ? { nodes } : {}), ...(pods !== undefined ? { pods } : {}), ...(load !== undefined ? { load } : {}), ...(addedNodes !== undefined ? { addedNodes } : {}) }, (_, i) => {
    if ((i + 1) % 10 === 0 || i + 1 === o.runs) log(`placement: ${i + 1}/${o.runs} runs`);
  });
  const written = await writePlacementOutputs(o.out, runs, { seed: o.seed, command: o.command, png: o.png });
  return { table: placementTable(runs), written };
}

export interface SchedulabilityExperimentOptions extends StudyOptions {
  readonly seed: number;
  readonly out: string;
  readonly command: string;
  /** DS node sizes for the sensitivity table (default 3, 4, 5, 6, 8 and the chosen one). */
  readonly sensitivityCores?: readonly number[];
  /** also a PNG copy of each figure */
  readonly png?: boolean;
  readonly log?: (line: string) => void;
}

export async function runSchedulabilityExperiment(o: SchedulabilityExperimentOptions): Promise<{ result: StudyResult; table: string; sensitivity: string; written: Written }> {
  const log = o.log ?? (() => undefined);
  atLeast1({ '--sets': o.sets, '--ds-cores': o.dsCores, '--bp-cores': o.budgetPeriodCores, '--non-rt-cores': o.nonRtCores });
  const { seed, out, command, sensitivityCores, png, log: _log, ...study } = o;
  const result = runSchedulabilityStudy(seed, study);
  log(`schedulability: ${result.sets.length} sets, ${result.dsChecks.length} DS rejection(s) simulated`);
  const cores = [...new Set([...(sensitivityCores ?? [3, 4, 5, 6, 8]), result.options.dsCores])].sort((a, b) => a - b);
  const sensitivity: SensitivityRow[] = cores.map((dsCores) => {
    const r = dsCores === result.options.dsCores ? result : runSchedulabilityStudy(seed, { ...study, dsCores, simulateSample: 0 });
    return { dsCores, vanilla: r.vanillaAccepted, ulysses: r.ulyssesAccepted, rejectedByDs: r.rejectedByDs, rejectedByBudgetPeriod: r.rejectedByBudgetPeriod, rejectedByBoth: r.rejectedByBoth };
  });
  const written = await writeSchedulabilityOutputs(out, result, sensitivity, { seed, command, png });
  return { result, table: schedulabilityTable(result), sensitivity: sensitivityTable(sensitivity, result.sets.length), written };
}

/** Options that must be >= 1 when given: a clear error naming the option. */
function atLeast1(options: Record<string, number | undefined>): void {
  for (const [name, v] of Object.entries(options)) {
    if (v !== undefined && !(Number.isInteger(v) && v >= 1)) throw new RangeError(`${name} must be an integer >= 1, got ${v}`);
  }
}
