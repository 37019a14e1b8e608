/**
 * The failover experiment harness on the real testbed: a tiny Table 6.1 run (configurations 1 and 5,
 * DN 1, 4 pods per node, 1 repetition) through the runtime toggles; the results file's schema and
 * event order, resumability (done reps skipped, a missing one rerun), and the cluster back in its
 * initial state (no experiment pod, nothing terminating, nodes schedulable, APF exemption removed).
 * Configuration upstream on the testbed: one repetition of stock Kubernetes (kcm with all its
 * controllers, kubelets on containerd, no Ulysses controller manager), and the testbed back as it was.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { useTestbed } from './harness.ts';
import { CRITICAL_NAMESPACE, LOAD_NAMESPACE, containerdShimPids, experimentTestbedOptions, runFailoverExperiment, testbedFrozenNode, testbedTopology } from '../../experiments/harness/local.ts';
import { readState, statusProblems } from '../../experiments/testbed/testbed.ts';
import { kubeletConfigEndpoint, kubeletConfigPath } from '../../experiments/testbed/realnode.ts';
import { processState } from '../../experiments/harness/cpu-window.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { TEST_IMAGES } from '../../experiments/testbed/images/index.ts';
import { EVENTS, parseResults } from '../../experiments/harness/results.ts';
import { initialStateDiff } from '../../experiments/harness/scenario.ts';
import { criticalApiSteps } from '../../experiments/harness/api-trace.ts';
import { ProgressBar } from '../../experiments/harness/progress.ts';
import { apiRequest, isNotFound } from '../../core/kube.ts';
import { DEFAULT_FLOW_SCHEMA_NAME, FLOWCONTROL_API_PATH } from '../../apf-configs/flowschemas.ts';

/** the kubelet's Lease and status periods as the testbed's config leaves them (the kubelet's defaults) */
const STOCK_HEARTBEAT = { nodeLeaseDurationSeconds: 40, nodeStatusUpdateFrequency: '10s', nodeStatusReportFrequency: '1m0s' };
const runDir = '/tmp/ulysses-it-experiment';
const out = '/tmp/ulysses-it-experiment-out';
const t = useTestbed(runDir, experimentTestbedOptions(runDir, 1));
const plan = { configs: [1, 5] as (1 | 5)[], dns: [1], podsPerNode: [4], reps: 1 };
const run = () => runFailoverExperiment({ plan, out, runDir, progress: new ProgressBar(), repTimeoutMs: 120_000, cpuWindowMs: 300 });
const scope = { criticalNamespace: CRITICAL_NAMESPACE, loadNamespace: LOAD_NAMESPACE, topology: testbedTopology(1) };

describe('failover experiment on the real testbed', () => {
  it('records every event of configurations 1 and 5 in order, resumes, and leaves the cluster as it found it', async () => {
    rmSync(out, { recursive: true, force: true });
    const first = await run();
    expect(first).toMatchObject({ ran: 2, skipped: 0 });

    const file = join(out, 'results.jsonl');
    const results = parseResults(readFileSync(file, 'utf8'), file);
    expect(results.map((r) => [r.config, r.dn, r.podsPerNode, r.rep])).toEqual([[1, 1, 4, 0], [5, 1, 4, 0]]);
    for (const r of results) {
      const e = r.events;
      expect(r.error).toBeUndefined();
      for (const k of EVENTS) {
        expect(e[k], `${k} of config ${r.config}`).not.toBeNull();
        expect(e[k]!).toBeGreaterThan(0);
        expect(e[k]!).toBeLessThan(120);
      }
      expect(e.prioScheduled!).toBeLessThanOrEqual(e.prioReady!);
      expect(e.prioScheduled!).toBeLessThanOrEqual(e.prioUp!);
      expect(e.prioScheduled!).toBeLessThanOrEqual(e.prioEndpointReady!);
      expect(e.prioScheduled!).toBeLessThanOrEqual(e.lastScheduled!);
      expect(e.lastScheduled!).toBeLessThanOrEqual(e.lastReady!);
      expect(e.prioReady!).toBeLessThanOrEqual(e.lastReady!);
    }
    const csv = readFileSync(join(out, 'summary.csv'), 'utf8').trim().split('\n');
    expect(csv).toHaveLength(1 + 2 * EVENTS.length);
    const report = readFileSync(join(out, 'report.md'), 'utf8');
    expect(report).toContain('Ratios vs configuration 1');
    expect(report).toContain('switched by patching UlyssesConfig/default');
    // the warm-up repetitions ran (one per configuration, in every run) but are not among the results
    expect(report).toContain('2 unrecorded warm-up repetition(s), one per configuration (1, 5) on DN 1 with 4 pods per node');
    expect(readFileSync(join(out, 'fig6.1-prioUp.svg'), 'utf8')).toContain('<svg');

    // resumable: nothing to do the second time; a missing repetition is run again
    const again = await run();
    expect(again).toMatchObject({ ran: 0, skipped: 2 });
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
    const lines = readFileSync(file, 'utf8').trim().split('\n');
    writeFileSync(file, `${lines[0]}\n`);
    const third = await run();
    expect(third).toMatchObject({ ran: 1, skipped: 1 });
    expect(parseResults(readFileSync(file, 'utf8')).map((r) => r.config)).toEqual([1, 5]);

    // back in the initial state, and in configuration 1 (no APF exemption left behind)
    expect(await initialStateDiff(t.kc, scope)).toEqual([]);
    const leftover = await apiRequest(t.kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas/${DEFAULT_FLOW_SCHEMA_NAME}`).then(
      () => 'present',
      (err) => (isNotFound(err) ? 'absent' : String(err)),
    );
    expect(leftover).toBe('absent');

    // the failed node was stopped whole (default), and the CPU window was recorded for each repetition
    const recorded = parseResults(readFileSync(file, 'utf8'));
    const nodes = readState(runDir)!.realNodes;
    for (const r of recorded) {
      // what was on the path: Ulysses' family (kcm without its controllers, kubelets on the shims, the in-process controller manager)
      expect(r.cluster).toEqual({
        kcmControllers: `all but ${experimentTestbedOptions(runDir, 1).controllers!.split(',').slice(1).map((c) => c.slice(1)).join(',')}`,
        schedulerExtender: false,
        kubeletRuntime: Object.fromEntries(nodes.map((n) => [n.name, `unix://${n.shimSocket}`])),
        ulyssesControllerManagerPods: 0,
        controllerManagerInProcess: true,
        apfExemption: r.config === 5,
        // stock failure detection (upstream-tuned's settings are not left behind)
        kcmNodeMonitorFlags: [],
        kubeletHeartbeat: Object.fromEntries(nodes.map((n) => [n.name, STOCK_HEARTBEAT])),
      });
      expect(r.configSwitch).toBeUndefined();
      expect(r.sourceFreeze).toBe('node');
      expect(r.cpuWindow?.windowMs).toBe(300);
      expect(r.cpuWindow!.busyCpuS).toBeGreaterThan(0);
      expect(r.cpuWindow!.byGroup.harness).toBeGreaterThan(0);
      // the machine audit: taint to last event, the testbed's CPU apart from everyone else's
      expect(r.repCpu!.seconds).toBeGreaterThanOrEqual(r.events.lastReady!);
      expect(r.repCpu!.testbedCpuS).toBeGreaterThan(0);
      // the apiserver's audit log: the critical pod's eviction, replacement and binding, in causal order
      const steps = criticalApiSteps(r.apiTrace ?? []);
      expect(steps.delete, `config ${r.config}: ${JSON.stringify(r.apiTrace)}`).not.toBeNull();
      expect(steps.create).not.toBeNull();
      expect(steps.bind?.user).toBe('system:kube-scheduler');
      expect(steps.delete!.atMs).toBeLessThan(steps.create!.atMs);
      expect(steps.create!.atMs).toBeLessThan(steps.bind!.atMs);
      // the binding was received before the harness saw the pod bound (its watch event may reach the
      // harness before the audit log's ResponseComplete stamp: the apiserver sends both concurrently)
      expect(steps.bind!.atMs).toBeLessThanOrEqual(r.events.prioScheduled! * 1000 + 1);
      if (steps.statusPatch) expect(steps.statusPatch.atMs).toBeLessThan(steps.delete!.atMs);
      // the critical source's taint PATCH returned after t = 0 and before the replacement was seen bound
      expect(r.criticalTaintWrittenMs).toBeGreaterThanOrEqual(0);
      expect(r.criticalTaintWrittenMs!).toBeLessThan(r.events.prioScheduled! * 1000);
    }
    // the critical pod's sandbox went to its node inside the window: the node's processes show up in
    // the window's CPU, in at least one repetition (CPU is counted in 10 ms ticks per process, and in
    // a configuration-1 window the harness' vanilla controllers can take both CPUs for the whole
    // window, leaving the node's work under a tick)
    const inWindow = recorded.filter((r) => (r.prioNode?.sandboxForwarded ?? Infinity) < r.cpuWindow!.windowMs / 1000);
    expect(inWindow.length).toBeGreaterThan(0);
    expect(inWindow.some((r) => Object.keys(r.cpuWindow!.byGroup).some((g) => g.startsWith('real-2/'))), JSON.stringify(inWindow.map((r) => r.cpuWindow!.byGroup))).toBe(true);
    const reportMd = readFileSync(join(out, 'report.md'), 'utf8');
    expect(reportMd).toContain('## CPU in the first 300 ms after the taint');
    expect(reportMd).toContain('## The machine during the repetitions (taint to last event)');
    expect(reportMd).toContain('## The critical pod through the API (apiserver audit log)');
  });

  it("the node failure stops the source node's kubelet, kubelet-shim, containerd and containerd-shims, and resumes them", async () => {
    const state = readState(runDir)!;
    const pid = (name: string) => state.processes.find((p) => p.name === `${name}/real-1`)!.pid;
    const node = state.realNodes.find((n) => n.name === 'real-1')!;
    // a pod on the node, so that it has a containerd-shim to stop
    const podName = 'freeze-probe';
    await t.core.createNamespacedPod({
      namespace: 'default',
      body: { metadata: { name: podName }, spec: { nodeName: 'real-1', terminationGracePeriodSeconds: 0, enableServiceLinks: false, containers: [{ name: 'c', image: TEST_IMAGES.httpServer.name, imagePullPolicy: 'Never' }] } },
    });
    await pollUntil('freeze-probe running', async () => (await t.core.readNamespacedPod({ name: podName, namespace: 'default' })).status?.phase === 'Running', { timeoutMs: 60_000, intervalMs: 200 });
    const shims = containerdShimPids(node.socket);
    expect(shims.length).toBeGreaterThan(0);
    const pids = [pid('kubelet'), pid('kubelet-shim'), pid('containerd'), ...shims];
    const failure = testbedFrozenNode(runDir);
    expect(failure.description).toMatch(/kubelet, kubelet-shim, containerd and containerd-shims are stopped/);
    await failure.freeze(['real-1']);
    try {
      expect(pids.map(processState)).toEqual(pids.map(() => 'T'));
    } finally {
      await failure.thaw(['real-1']);
    }
    await pollUntil('source node processes resumed', () => pids.every((p) => processState(p) !== 'T'), { timeoutMs: 5_000, intervalMs: 10 });
    // and the node still works after the thaw: its kubelet deletes the pod
    // (a grace period, so that the object goes only once the kubelet has stopped the pod)
    await t.core.deleteNamespacedPod({ name: podName, namespace: 'default', gracePeriodSeconds: 1 });
    await pollUntil('freeze-probe stopped and gone', async () => (await t.core.listNamespacedPod({ namespace: 'default', fieldSelector: `metadata.name=${podName}` })).items.length === 0, { timeoutMs: 60_000, intervalMs: 200 });
    expect(containerdShimPids(node.socket).filter((p) => shims.includes(p))).toEqual([]);
  });

  it('runs a repetition again when other work used the CPUs during it, and records the last run with its repeats', async () => {
    const sharedOut = `${out}-shared`;
    rmSync(sharedOut, { recursive: true, force: true });
    // someone else's job: a CPU-bound process outside the harness (its shell exits: re-parented away)
    const pid = Number(spawnSync('sh', ['-c', `${process.execPath} -e 'const e = Date.now() + 120000; while (Date.now() < e);' >/dev/null 2>&1 & echo $!`], { encoding: 'utf8' }).stdout.trim());
    expect(pid).toBeGreaterThan(1);
    try {
      const r = await runFailoverExperiment({ plan: { configs: [5], dns: [1], podsPerNode: [0], reps: 1 }, out: sharedOut, runDir, progress: new ProgressBar(), repTimeoutMs: 60_000, warmup: false, repeatShared: 1 });
      expect(r).toMatchObject({ ran: 1 });
    } finally {
      process.kill(pid, 'SIGKILL');
    }
    const [rec] = parseResults(readFileSync(join(sharedOut, 'results.jsonl'), 'utf8'));
    expect(rec!.sharedRepeats).toBe(1); // shared, run again once, shared again: the second run recorded
    expect(rec!.repCpu!.outsideCpuS).toBeGreaterThan(0.1);
    expect(Object.keys(rec!.repCpu!.outside)).toContain('node');
    const report = readFileSync(join(sharedOut, 'report.md'), 'utf8');
    expect(report).toContain('**1 of 1 repetitions shared the machine**');
    expect(report).toContain('1 repetition(s) were run again because other work shared the machine');
  });

  it('configuration upstream: kcm with all its controllers, the kubelets on containerd directly and no Ulysses controller manager; the testbed back as it was', async () => {
    const upOut = `${out}-upstream`;
    rmSync(upOut, { recursive: true, force: true });
    const before = readState(runDir)!;
    const pid = (name: string) => readState(runDir)!.processes.find((p) => p.name === name)!.pid;
    const kcmArgs = () => readFileSync(`/proc/${pid('kube-controller-manager')}/cmdline`, 'utf8').split('\0');
    const kubelets = before.realNodes.map((n) => pid(`kubelet/${n.name}`));
    const r = await runFailoverExperiment({ plan: { configs: ['upstream'], dns: [1], podsPerNode: [2], reps: 1 }, out: upOut, runDir, progress: new ProgressBar(), repTimeoutMs: 60_000, warmup: false });
    expect(r).toMatchObject({ ran: 1 });
    const [rec] = parseResults(readFileSync(join(upOut, 'results.jsonl'), 'utf8'));
    expect(rec!.config).toBe('upstream');
    expect(rec!.error).toBeUndefined();
    for (const k of EVENTS) expect(rec!.events[k], k).not.toBeNull();
    expect(rec!.configSwitch?.to).toBe('upstream');
    expect(rec!.cluster).toEqual({
      kcmControllers: 'all',
      schedulerExtender: false,
      kubeletRuntime: Object.fromEntries(before.realNodes.map((n) => [n.name, `unix://${n.socket}`])),
      ulyssesControllerManagerPods: 0,
      controllerManagerInProcess: false,
      apfExemption: false,
      kcmNodeMonitorFlags: [],
      kubeletHeartbeat: Object.fromEntries(before.realNodes.map((n) => [n.name, STOCK_HEARTBEAT])),
    });
    expect(rec!.prioNode).toBeUndefined(); // no kubelet-shim saw the critical pod
    const report = readFileSync(join(upOut, 'report.md'), 'utf8');
    expect(report).toContain('## Against stock Kubernetes (configuration upstream)');
    expect(report).toContain('## Switches between upstream and Ulysses');

    // back as it was: kcm without Ulysses' controllers (running and in state.json), every kubelet
    // restarted onto its kubelet-shim, nothing dead, no exemption, the initial state
    const after = readState(runDir)!;
    expect(after.options.controllers).toBe(before.options.controllers);
    expect(kcmArgs()).toContain(`--controllers=${before.options.controllers}`);
    for (const n of after.realNodes) expect(kubeletConfigEndpoint(readFileSync(kubeletConfigPath(n), 'utf8')), n.name).toBe(`unix://${n.shimSocket}`);
    expect(after.realNodes.map((n) => pid(`kubelet/${n.name}`)).filter((p) => kubelets.includes(p))).toEqual([]);
    expect(await statusProblems(after)).toEqual([]);
    expect(await initialStateDiff(t.kc, scope)).toEqual([]);
    const flowSchema = await apiRequest(t.kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas/${DEFAULT_FLOW_SCHEMA_NAME}`).then(
      () => 'present',
      (err) => (isNotFound(err) ? 'absent' : String(err)),
    );
    expect(flowSchema).toBe('absent');
  });
});
