/**
 * The adversarial pods of issue 26 against the REAL kube-scheduler of the testbed (extender wired
 * with ignorable=false, httpTimeout 5s) on KWOK nodes: the review's 13.5 KB `ulysses.io/rt` and the
 * generated worst cases (experiments/bench/extender-adversarial-inputs.ts: max tasks, max servers,
 * extreme periods, 1024 cores) each get a FailedScheduling event carrying the extender's reason
 * (no scheduler timeout), while an ordinary pod created at the same time is bound and `/healthz`
 * keeps answering. Durations are printed, never asserted.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { CoreV1Api, V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { KubeClient } from '../../core/kube.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';
import { schedulerKubeconfigPath } from '../../experiments/testbed/testbed.ts';
import { adversarialCases, ISSUE_ITEM_1_RT } from '../../experiments/bench/extender-adversarial-inputs.ts';
import { renderKubeSchedulerConfiguration } from '../../scheduler-plugins/extender/kube-scheduler-config.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { reservationRequest, RT_ANNOTATION, RT_CORES_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';

const runDir = SHARED_RUN_DIR;
const schedulerConfig = '/tmp/ulysses-it-sched-adversarial-kube-scheduler.yaml';
const PORT = 20430;
const ns = 'sched-adv';
const CASES = adversarialCases();
/** One KWOK node per case, plus a plain node for the ordinary pods. */
const PLAIN = `kwok-${CASES.length + 1}`;
writeFileSync(
  schedulerConfig,
  renderKubeSchedulerConfiguration({ kubeconfig: schedulerKubeconfigPath(runDir), extenderUrl: `http://127.0.0.1:${PORT}`, weight: 10, httpTimeout: '5s' }),
);
const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: CASES.length + 1, namespace: ns, schedulerConfig });

let core: CoreV1Api;
let extender: ExtenderServer;
const caseNode = (i: number) => `kwok-${i + 1}`;

/** A pod for the KWOK nodes; an RT one requests ulysses.io/reservation, as its users must. */
function kwokPod(name: string, annotations: Record<string, string>, o: { node?: string; nodeName?: string } = {}): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, annotations, labels: { app: 'sched-adv' } },
    spec: {
      containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', ...(RT_ANNOTATION in annotations ? { resources: reservationRequest() } : {}) }],
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
      nodeSelector: { type: 'kwok', ...(o.node ? { 'ulysses.test/adv-node': o.node } : {}) },
      ...(o.nodeName ? { nodeName: o.nodeName } : {}),
    },
  };
}

beforeAll(async () => {
  core = t.core;
  const client = new KubeClient(t.kc);
  for (const [i, c] of CASES.entries()) {
    await client.mergePatch(`/api/v1/nodes/${caseNode(i)}`, {
      metadata: {
        labels: { 'ulysses.io/rt-scheduler': c.node.kind, 'ulysses.test/adv-node': caseNode(i) },
        annotations: { 'ulysses.io/rt-capacity': JSON.stringify({ cores: c.node.cores }) },
      },
    });
    // the pods already holding capacity: bound directly (spec.nodeName), pinned by rt-cores
    for (const [h, holder] of c.holders.entries()) {
      const body = kwokPod(`${c.name}-holder-${h}`, { 'ulysses.io/rt': holder.rt, [RT_CORES_ANNOTATION]: JSON.stringify(holder.cores) }, { nodeName: caseNode(i) });
      body.spec!.nodeSelector = {};
      await core.createNamespacedPod({ namespace: ns, body });
    }
  }
  await client.mergePatch(`/api/v1/nodes/${PLAIN}`, { metadata: { labels: { 'ulysses.test/adv-node': PLAIN } } });
  extender = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: PORT } }, kubeconfig: t.kc });
  await extender.start();
  const holders = CASES.reduce((n, c) => n + c.holders.length, 0);
  await pollUntil(
    'extender sees the node roles and the holders',
    async () => CASES.every((c, i) => extender.state.node(caseNode(i))?.rtKind === c.node.kind) && extender.state.podCount >= holders,
    { timeoutMs: 60_000 },
  );
}, 300_000);
afterAll(async () => {
  await extender?.stop();
});

const readPod = (name: string) => core.readNamespacedPod({ name, namespace: ns });

async function failedScheduling(name: string): Promise<string[]> {
  const events = await core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.name=${name},reason=FailedScheduling` });
  return events.items.map((e) => e.message ?? '');
}

describe('adversarial RT pods against kube-scheduler with the Ulysses extender (testbed, KWOK nodes)', () => {
  it('each adversarial pod is refused with the extender\'s reason, an ordinary pod created meanwhile is bound, /healthz keeps answering', async () => {
    // /healthz polled back to back for the whole test: every answer counted
    const health = { answers: 0, failures: [] as string[], maxMs: 0, stop: false };
    const poller = (async () => {
      while (!health.stop) {
        const t0 = performance.now();
        try {
          const r = await fetch(`http://127.0.0.1:${PORT}/healthz`, { signal: AbortSignal.timeout(30_000) });
          if (r.status !== 200) health.failures.push(`HTTP ${r.status}`);
          await r.text();
        } catch (err) {
          health.failures.push((err as Error).message);
        }
        health.answers++;
        health.maxMs = Math.max(health.maxMs, performance.now() - t0);
      }
    })();

    const started = Date.now();
    // every case on its own node (the refusal is that node's), the review's pod once more on every node
    const adversarial = [
      ...CASES.map((c, i) => ({ name: `adv-${c.name}`, body: kwokPod(`adv-${c.name}`, { 'ulysses.io/rt': c.rt }, { node: caseNode(i) }), refusal: c.refusal })),
      { name: 'adv-issue-item-1-all-nodes', body: kwokPod('adv-issue-item-1-all-nodes', { 'ulysses.io/rt': ISSUE_ITEM_1_RT }), refusal: /analysis budget exceeded: 256 tasks x 1 servers/ },
    ];
    const ordinary = kwokPod('ordinary', {}, { node: PLAIN });
    // the adversarial pods first, the ordinary one in the same burst
    await Promise.all([...adversarial.map((a) => core.createNamespacedPod({ namespace: ns, body: a.body })), core.createNamespacedPod({ namespace: ns, body: ordinary })]);

    const boundMs = await pollUntil('ordinary pod bound', async () => ((await readPod('ordinary')).spec?.nodeName ? Date.now() - started : undefined), { timeoutMs: 120_000 });
    expect((await readPod('ordinary')).spec?.nodeName).toBe(PLAIN);
    // bound while the adversarial pods are not
    for (const a of adversarial) expect((await readPod(a.name)).spec?.nodeName, a.name).toBeFalsy();

    const refusedMs: Record<string, number> = {};
    for (const a of adversarial) {
      let seen: string[] = [];
      const msg = await pollUntil(
        `FailedScheduling of ${a.name} with the extender's reason`,
        async () => (seen = await failedScheduling(a.name)).find((m) => /ulysses/.test(m) && a.refusal.test(m)),
        { timeoutMs: 120_000, explain: () => `events: ${JSON.stringify(seen)}` },
      );
      refusedMs[a.name] = Date.now() - started;
      expect(msg).toMatch(/nodes are available/);
      const cur = await readPod(a.name);
      expect(cur.spec?.nodeName, a.name).toBeFalsy();
      expect(cur.status?.phase).toBe('Pending');
    }
    expect((await failedScheduling('adv-issue-item-1')).join('\n')).toMatch(/analysis budget exceeded: 256 tasks x 1 servers on 1 core\(s\)/);
    expect((await failedScheduling('adv-issue-item-1-all-nodes')).join('\n')).toMatch(/analysis budget exceeded/);

    // the scheduler never waited for the extender past its timeout: every refusal is an answer
    for (const a of adversarial) {
      for (const m of await failedScheduling(a.name)) expect(m, a.name).not.toMatch(/timeout|deadline exceeded|context canceled|connection refused/i);
    }
    // while the adversarial pods are retried, another ordinary pod is bound
    await core.createNamespacedPod({ namespace: ns, body: kwokPod('ordinary-2', {}, { node: PLAIN }) });
    await pollUntil('ordinary-2 bound', async () => (await readPod('ordinary-2')).spec?.nodeName, { timeoutMs: 120_000 });
    for (const a of adversarial) expect((await readPod(a.name)).spec?.nodeName, a.name).toBeFalsy();

    health.stop = true;
    await poller;
    expect(health.failures).toEqual([]);
    expect(health.answers).toBeGreaterThan(0);

    const metrics = await (await fetch(`http://127.0.0.1:${PORT}/metrics`)).text();
    const filterCount = Number(/ulysses_extender_request_duration_seconds_count\{verb="filter"\} (\d+)/.exec(metrics)?.[1] ?? 0);
    expect(filterCount).toBeGreaterThan(adversarial.length);
    expect(extender.analysisThreadJobs).toBeGreaterThan(0);
    console.log(
      `[extender adversarial] ordinary pod bound after ${boundMs} ms; refusals seen after ${JSON.stringify(refusedMs)} ms; ` +
        `${filterCount} filter calls, ${extender.analysisThreadJobs} analysis-thread jobs, ${extender.analysisWork.units} work units; ` +
        `/healthz answered ${health.answers} times (slowest ${health.maxMs.toFixed(1)} ms)`,
    );
  }, 600_000);
});
