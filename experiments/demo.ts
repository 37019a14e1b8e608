/**
 * `npm run demo`: brings the testbed up (2 real nodes, kubelet-shims, kcm without the controllers
 * Ulysses replaces), runs a short comparison of Ulysses against stock Kubernetes (configuration 5,
 * all of Ulysses with the controller manager's CriticalPathHold, vs configuration upstream: kcm with
 * all its controllers, the kubelets on containerd directly, nothing of Ulysses on the path; DN 1; an
 * idle cell and one loaded cell; 2 repetitions) and prints a short verdict; the full report is
 * written beside the results. A repetition that failed is run once more (the run resumes), so one
 * transient failure does not leave a cell short.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as testbed from './testbed/testbed.ts';
import { ensureExperimentTestbed, runFailoverExperiment } from './harness/local.ts';
import { planReps, type ExperimentPlan } from './harness/experiment.ts';
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
    const plan: ExperimentPlan = { configs: ['upstream', 5], dns: [1], podsPerNode: [0, o.podsPerNode], reps: o.reps };
    const run = () => runFailoverExperiment({ plan, out, runDir: o.runDir, command: `npx tsx cli/ulysses.ts experiment report --out ${out}` });
    let r = await run();
    const missing = planReps(plan).length - readResults(join(out, RESULTS_FILE)).length;
    if (missing > 0) {
      console.log(`${missing} repetition(s) failed (reasons above): running them again`);
      r = await run();
    }
    const results = readResults(join(out, RESULTS_FILE));
    console.log(`\n${renderVerdict(results, summarize(results))}`);
    console.log(`\nfull report: ${r.report} (results, summary and figures in ${out})`);
  } finally {
    if (!o.keep) await testbed.down({ runDir: o.runDir });
  }
}
