/**
 * `npm run demo`: brings the testbed up with 2 real nodes, runs one failover (critical UDP echo pod
 * plus low-priority Deployments, source node tainted NoExecute) and prints the timeline. Later
 * issues turn this into the Table 6.1 comparison.
 */
import * as testbed from './testbed/testbed.ts';
import { runFailover, type FailoverEvents } from './failover.ts';

export function formatTimeline(e: FailoverEvents, lowPods: number): string {
  const row = (what: string, t: number | null) => `  ${what.padEnd(52)} ${t === null ? 'never' : `${t.toFixed(3)} s`}`;
  return [
    `failover timeline (seconds after the NoExecute taint on real-1; ${lowPods} low-priority pods):`,
    row('taint applied to real-1', 0),
    row('critical pod scheduled on real-2  (Prio scheduled)', e.prioScheduled),
    row('critical pod Ready                (Prio ready)', e.prioReady),
    row('first UDP echo answered from host (Prio up)', e.prioUp),
    row('last pod scheduled                (Last scheduled)', e.lastScheduled),
    row('last pod Ready                    (Last ready)', e.lastReady),
  ].join('\n');
}

export async function runDemo(o: { runDir: string; lowPods: number; keep: boolean }): Promise<void> {
  const state = await testbed.up({ runDir: o.runDir, realNodes: 2 });
  try {
    const events = await runFailover(testbed.kubeConfigFor(state), {
      namespace: `demo-${Date.now().toString(36)}`,
      source: 'real-1',
      destinations: ['real-2'],
      lowPods: o.lowPods,
    });
    console.log(formatTimeline(events, o.lowPods));
  } finally {
    if (!o.keep) await testbed.down({ runDir: o.runDir });
  }
}
