/**
 * `npm run demo`: brings the testbed up (2 real nodes, kubelet-shims, kcm without the controllers
 * Ulysses replaces), runs a short Table 6.1 comparison (configuration 1 all vanilla vs 5 all of
 * Ulysses, with the controller manager's CriticalPathHold; DN 1; an idle cell and one loaded cell;
 * 2 repetitions) and prints a short verdict; the full report is written beside the results.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as testbed from './testbed/testbed.ts';
import { ensureExperimentTestbed, runFailoverExperiment } from './harness/local.ts';
import { RESULTS_FILE } from './harness/outputs.ts';
import { renderVerdict } from './harness/report.ts';
import { readResults } from './harness/results.ts';
import { summarize } from './harness/stats.ts';

export interface DemoOptions {
  runDir: string;
  podsPerNode: number;
  reps: number;
  keep: boolean;
  out?: string;
}

export async function runDemo(o: DemoOptions): Promise<void> {
  const out = o.out ?? join(tmpdir(), `ulysses-demo-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  await ensureExperimentTestbed(o.runDir, 1);
  try {
    const r = await runFailoverExperiment({
      plan: { configs: [1, 5], dns: [1], podsPerNode: [0, o.podsPerNode], reps: o.reps },
      out,
      runDir: o.runDir,
      command: `npx tsx cli/ulysses.ts experiment report --out ${out}`,
    });
    const results = readResults(join(out, RESULTS_FILE));
    console.log(`\n${renderVerdict(results, summarize(results))}`);
    console.log(`\nfull report: ${r.report} (results, summary and figures in ${out})`);
  } finally {
    if (!o.keep) await testbed.down({ runDir: o.runDir });
  }
}
