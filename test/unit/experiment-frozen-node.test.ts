/**
 * Failure mode frozen-node of the failover harness (issue 39): the profile field and the flag's
 * parsing and errors, the events `detected` and `taint` from what the Node and Event watches
 * deliver, the run conditions and results lines, the report, the repetition timeout, the baseline's
 * view of pods the failed node loses, and the SIGSTOP of a node's processes (pods' included).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { KubeConfig, type CoreV1Event, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { FAILURE_MODES, parseFailureMode, parseRunProfile, runProfileOptions } from '../../experiments/harness/profile.ts';
import { detectionEvents, detectionTaintsOf, type DetectionObservation } from '../../experiments/harness/failure-detection.ts';
import { emptyEvents, parseResults, resultEvents, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { conditionFields, conditionMismatch } from '../../experiments/harness/experiment.ts';
import { summarize, summaryCsv } from '../../experiments/harness/stats.ts';
import { renderReport } from '../../experiments/harness/report.ts';
import { awaitedEvents, otherPods } from '../../experiments/harness/scenario.ts';
import { FROZEN_NODE_REP_TIMEOUT_MS, failoverRunOptions, failureMode, kubepodsPids, runFailoverExperiment, stoppedNodeFailure } from '../../experiments/harness/local.ts';
import { runKubeadmFailoverExperiment } from '../../experiments/harness/kubeadm-configurator.ts';
import { processState, withDescendants } from '../../experiments/harness/cpu-window.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';

const T0 = Date.parse('2026-12-01T10:00:00.400Z');
const iso = (ms: number) => new Date(ms).toISOString();
/** A Node as the watch delivers it (timestamps as JSON strings). */
const node = (o: { name?: string; ready?: 'True' | 'False' | 'Unknown'; since?: number; taints?: Array<{ key: string; effect: string; timeAdded?: number }> } = {}): V1Node =>
  ({
    metadata: { name: o.name ?? 'real-1' },
    spec: { taints: (o.taints ?? []).map((t) => ({ key: t.key, effect: t.effect, ...(t.timeAdded === undefined ? {} : { timeAdded: iso(t.timeAdded) }) })) },
    status: { conditions: [{ type: 'Ready', status: o.ready ?? 'True', lastTransitionTime: iso(o.since ?? T0 - 3_600_000) }] },
  }) as unknown as V1Node;
const event = (o: { name?: string; reason?: string; kind?: string; eventTime?: number; first?: number; last?: number }): CoreV1Event =>
  ({
    metadata: { name: 'real-1.abc', namespace: 'default' },
    involvedObject: { kind: o.kind ?? 'Node', name: o.name ?? 'real-1' },
    reason: o.reason ?? 'NodeFailureDetected',
    ...(o.eventTime === undefined ? {} : { eventTime: iso(o.eventTime) }),
    ...(o.first === undefined ? {} : { firstTimestamp: iso(o.first) }),
    ...(o.last === undefined ? {} : { lastTimestamp: iso(o.last) }),
  }) as unknown as CoreV1Event;
const at = (ms: number, o: { node: V1Node } | { event: CoreV1Event }): DetectionObservation => ({ atMs: T0 + ms, ...o }) as DetectionObservation;
/** whole seconds, as the apiserver stores metav1.Time */
const secondOf = (ms: number) => Math.floor(ms / 1000) * 1000;

describe('failure mode: profile field and --failure', () => {
  it('maps the profile field onto the option; taint is the default and recorded nowhere', () => {
    expect(runProfileOptions(parseRunProfile('failure: frozen-node\n', 'f.yaml'))).toEqual({ failure: 'frozen-node' });
    expect(runProfileOptions(parseRunProfile('failure: taint\nfreezeSource: kubelet\n', 'f.yaml'))).toEqual({ failure: 'taint', freezeSource: 'kubelet' });
    expect(runProfileOptions(parseRunProfile('failure: frozen-node\nfreezeSource: node\n', 'f.yaml'))).toEqual({ failure: 'frozen-node', freezeSource: 'node' });
    expect(FAILURE_MODES).toEqual(['taint', 'frozen-node']);
  });
  it('refuses a bad value or a freezeSource that contradicts frozen-node, naming the file and the field', () => {
    expect(() => parseRunProfile('failure: frozen\n', 'f.yaml')).toThrow(/profile f\.yaml: field failure: /);
    expect(() => parseRunProfile('failure: frozen-node\nfreezeSource: kubelet\n', 'f.yaml')).toThrow(/profile f\.yaml: field failure: failure frozen-node stops every process of the source node: freezeSource kubelet contradicts it/);
    expect(() => parseRunProfile('failure: frozen-node\nfreezeSource: none\n', 'f.yaml')).toThrow(/freezeSource none contradicts it/);
  });
  it('parses the flag, naming it in the error', () => {
    expect(parseFailureMode('frozen-node', '--failure')).toBe('frozen-node');
    expect(parseFailureMode('taint', '--failure')).toBe('taint');
    expect(() => parseFailureMode('freeze', '--failure')).toThrow(/^--failure: "freeze" is not one of taint, frozen-node$/);
  });
  it('checks the options as given (the flag overrides the profile, so the pair is checked again)', () => {
    expect(failureMode({})).toBe('taint');
    expect(failureMode({ failure: 'frozen-node' })).toBe('frozen-node');
    expect(failureMode({ failure: 'frozen-node', freezeSource: true })).toBe('frozen-node');
    expect(() => failureMode({ failure: 'frozen-node', freezeSource: false })).toThrow(/freezeSource none contradicts it/);
    expect(() => failureMode({ failure: 'frozen' as never })).toThrow(/^failure: "frozen" is not one of taint, frozen-node$/);
  });
  it('needs a testbed whose node processes the harness can stop: refused before anything starts', async () => {
    const kc = new KubeConfig();
    const plan = { configs: [1 as const], dns: [1], podsPerNode: [0], reps: 1 };
    await expect(runFailoverExperiment({ plan, out: '/nonexistent', failure: 'frozen-node', kwokNodes: 20 })).rejects.toThrow(/failure frozen-node .* not --kwok-nodes/);
    await expect(runFailoverExperiment({ plan, out: '/nonexistent', failure: 'frozen-node', kubeconfig: kc, sources: ['a'], destinations: ['b'] })).rejects.toThrow(/failure frozen-node .* not --kubeconfig/);
    await expect(runFailoverExperiment({ plan, out: '/nonexistent', failure: 'frozen-node', freezeSource: 'kubelet' })).rejects.toThrow(/freezeSource kubelet contradicts it/);
    await expect(runKubeadmFailoverExperiment({ plan, out: '/nonexistent', failure: 'frozen-node', cluster: {} as never })).rejects.toThrow(/not on a cluster reached through --node-shell/);
  });
  it('gives frozen-node repetitions a timeout past stock Kubernetes\' 352 s unless the profile sets one; taint runs are unchanged', () => {
    const plan = { configs: [1 as const], dns: [1], podsPerNode: [0], reps: 1 };
    const frozen = failoverRunOptions({ plan, out: 'x', failure: 'frozen-node' }, 'node');
    expect(frozen.repTimeoutMs).toBe(FROZEN_NODE_REP_TIMEOUT_MS);
    expect(FROZEN_NODE_REP_TIMEOUT_MS).toBeGreaterThan(352_000);
    expect(frozen).toMatchObject({ failureMode: 'frozen-node', conditions: { failure: 'frozen-node' } });
    expect(failoverRunOptions({ plan, out: 'x', failure: 'frozen-node', repTimeoutMs: 600_000 }, 'node').repTimeoutMs).toBe(600_000);
    const taint = failoverRunOptions({ plan, out: 'x' }, 'node');
    expect(taint.repTimeoutMs).toBeUndefined();
    expect(taint).not.toHaveProperty('failureMode');
    expect(conditionFields(taint.conditions)).not.toHaveProperty('failure');
  });
});

describe('detected and taint from the watches', () => {
  it('detected is the Ready condition turning Unknown in a delivered Node; taint the first failure-detection NoExecute taint', () => {
    const obs = [
      at(-5_000, { node: node() }),
      at(40_000, { node: node() }), // a status write of the node lifecycle controller that changes nothing
      at(50_300, { node: node({ ready: 'Unknown', since: secondOf(T0 + 50_300) }) }),
      at(50_350, { node: node({ ready: 'Unknown', since: secondOf(T0 + 50_300), taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }] }) }),
      at(50_400, { node: node({ ready: 'Unknown', since: secondOf(T0 + 50_300), taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute', timeAdded: secondOf(T0 + 50_400) }] }) }),
    ];
    expect(detectionEvents(obs, ['real-1'], T0)).toEqual({ detected: 50.3, taint: 50.4 });
    // nothing of it yet: both null, not made up
    expect(detectionEvents(obs.slice(0, 2), ['real-1'], T0)).toEqual({ detected: null, taint: null });
  });
  it("Ulysses' NodeFailureDetected Event and ulysses.io/unreachable come first; the Event's MicroTime counts, else its arrival", () => {
    const obs = [
      at(720, { node: node({ taints: [{ key: 'ulysses.io/unreachable', effect: 'NoExecute', timeAdded: secondOf(T0 + 700) }] }) }),
      at(760, { event: event({ first: secondOf(T0 + 710), last: secondOf(T0 + 710) }) }),
      at(50_300, { node: node({ ready: 'Unknown', since: secondOf(T0 + 50_300), taints: [{ key: 'ulysses.io/unreachable', effect: 'NoExecute' }] }) }),
    ];
    expect(detectionEvents(obs, ['real-1'], T0)).toEqual({ detected: 0.76, taint: 0.72 });
    // an Event with a MicroTime: its own time, not the watch's arrival
    const micro = [at(900, { event: event({ eventTime: T0 + 650 }) }), ...obs];
    expect(detectionEvents(micro, ['real-1'], T0).detected).toBe(0.65);
    // not-ready counts as a failure-detection taint too
    expect(detectionEvents([at(2_000, { node: node({ taints: [{ key: 'node.kubernetes.io/not-ready', effect: 'NoExecute' }] }) })], ['real-1'], T0).taint).toBe(2);
  });
  it('ignores what is older than t = 0, other nodes, other reasons and other taints', () => {
    const old = T0 - 120_000;
    const obs = [
      // the previous repetition's Event, redelivered by a relist after t = 0
      at(3_000, { event: event({ first: secondOf(old), last: secondOf(old) }) }),
      at(3_000, { event: event({ eventTime: old }) }),
      // before t = 0
      at(-10, { event: event({}) }),
      at(-10, { node: node({ ready: 'False', since: secondOf(T0 - 10) }) }),
      // other nodes, kinds, reasons
      at(1_000, { event: event({ name: 'real-2' }) }),
      at(1_000, { event: event({ reason: 'NodeNotReady' }) }),
      at(1_000, { event: event({ kind: 'Pod' }) }),
      at(1_000, { node: node({ name: 'real-2', ready: 'Unknown', since: secondOf(T0 + 1_000), taints: [{ key: 'ulysses.io/unreachable', effect: 'NoExecute' }] }) }),
      // a Ready condition that went Unknown before t = 0, a taint added before t = 0, a taint that is no failure
      at(1_500, { node: node({ ready: 'Unknown', since: secondOf(old), taints: [{ key: 'ulysses.io/unreachable', effect: 'NoExecute', timeAdded: secondOf(old) }] }) }),
      at(1_600, { node: node({ taints: [{ key: 'ulysses.io/failure', effect: 'NoExecute' }, { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }] }) }),
    ];
    expect(detectionEvents(obs, ['real-1'], T0)).toEqual({ detected: null, taint: null });
    // an aggregated Event (count and lastTimestamp patched) of this failure counts at its arrival
    expect(detectionEvents([at(1_200, { event: event({ first: secondOf(old), last: secondOf(T0 + 1_100) }) })], ['real-1'], T0).detected).toBe(1.2);
  });
  it('lists the failure-detection taints a node still carries (the cleanup waits for them)', () => {
    expect(detectionTaintsOf(node({ taints: [{ key: 'node.kubernetes.io/unreachable', effect: 'NoExecute' }, { key: 'node.kubernetes.io/unreachable', effect: 'NoSchedule' }, { key: 'ulysses.io/unreachable', effect: 'NoExecute' }, { key: 'x', effect: 'NoExecute' }] }))).toEqual([
      'node.kubernetes.io/unreachable:NoExecute',
      'node.kubernetes.io/unreachable:NoSchedule',
      'ulysses.io/unreachable:NoExecute',
    ]);
    expect(detectionTaintsOf(node())).toEqual([]);
  });
  it('a frozen-node repetition waits for them too; a taint repetition does not', () => {
    expect(awaitedEvents(true, false, 'frozen-node')).toEqual(['detected', 'taint', 'prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastScheduled', 'lastReady']);
    expect(awaitedEvents(true, true, 'taint')).toEqual(awaitedEvents(true, true));
    expect(awaitedEvents(true, true)).not.toContain('detected');
  });
});

const frozenEvents = (detected: number, taint: number, prioReady: number): FailoverEvents => ({
  ...emptyEvents(),
  detected,
  taint,
  prioScheduled: detected + 0.2,
  prioReady,
  prioUp: prioReady + 0.01,
  prioEndpointReady: prioReady + 0.02,
  lastScheduled: 352,
  lastReady: 353,
});
const row = (config: 1 | 5, r: number, events: FailoverEvents, extra: Partial<RepResult> = {}): RepResult => ({ config, dn: 1, podsPerNode: 5, rep: r, events, ...extra });

describe('results of a frozen-node run', () => {
  it('carry failure and the detection events; taint is the default and never written', () => {
    const line = row(5, 0, frozenEvents(0.7, 0.8, 1.4), { ...conditionFields({ failure: 'frozen-node' }) });
    expect(line.failure).toBe('frozen-node');
    const [parsed] = parseResults(JSON.stringify(line));
    expect(parsed).toMatchObject({ failure: 'frozen-node', events: { detected: 0.7, taint: 0.8 } });
    expect(conditionFields({ failure: 'taint' })).toEqual({});
    expect(() => parseResults(JSON.stringify({ ...line, failure: 'taint' }))).toThrow(/:1: field failure/);
    expect(() => parseResults(JSON.stringify({ ...line, events: { ...line.events, detected: -1 } }))).toThrow(/:1: field events\.detected/);
    // a taint-mode line has neither
    const [plain] = parseResults(JSON.stringify(row(1, 0, { ...emptyEvents(), prioReady: 1 })));
    expect(plain).not.toHaveProperty('failure');
    expect(plain!.events).not.toHaveProperty('detected');
  });
  it('are never mixed with taint runs in one directory, and the description says why', () => {
    const frozen = [row(5, 0, frozenEvents(0.7, 0.8, 1.4), { failure: 'frozen-node' })];
    expect(conditionMismatch(frozen, { failure: 'frozen-node' })).toBeUndefined();
    expect(conditionMismatch(frozen, {})).toMatch(/holds repetitions run with client rate limit on, scenario failover, failure frozen-node, this run is client rate limit on, scenario failover: use another --out/);
    expect(conditionMismatch([row(1, 0, emptyEvents())], { failure: 'frozen-node' })).toMatch(/this run is .*failure frozen-node/);
  });
  it('list detected and taint first in summary.csv and the report, timed from t = 0 the frozen node; taint runs keep their tables', () => {
    const frozen = [row(1, 0, frozenEvents(50.3, 50.4, 352.1), { failure: 'frozen-node' }), row(5, 0, frozenEvents(0.7, 0.8, 1.4), { failure: 'frozen-node' })];
    expect(resultEvents(frozen).slice(0, 3)).toEqual(['detected', 'taint', 'prioScheduled']);
    const csv = summaryCsv(summarize(frozen));
    expect(csv).toContain('1,1,5,detected,1,0,50.300');
    expect(csv).toContain('5,1,5,taint,1,0,0.800');
    const report = renderReport(frozen, summarize(frozen));
    expect(report).toMatch(/Times in seconds after t = 0, the moment every process of the source node was stopped/);
    expect(report).toMatch(/\*\*Detected\*\* \(`detected`\): median \[p25–p75\] s after t = 0/);
    expect(report).toMatch(/\*\*Taint\*\* \(`taint`\)/);
    const plain = [row(1, 0, { ...emptyEvents(), prioReady: 1, lastReady: 2 })];
    expect(resultEvents(plain)).toEqual(['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastScheduled', 'lastReady']);
    const plainReport = renderReport(plain, summarize(plain));
    expect(plainReport).toMatch(/Times in seconds after the NoExecute taint of the source node \(t = 0\)\./);
    expect(plainReport).not.toMatch(/Detected/);
    expect(summaryCsv(summarize(plain))).not.toMatch(/detected|,taint,/);
  });
});

describe('the initial state of a frozen-node run', () => {
  const pod = (ns: string, name: string, rs?: string): V1Pod => ({ metadata: { namespace: ns, name, ...(rs ? { ownerReferences: [{ kind: 'ReplicaSet', name: rs, apiVersion: 'apps/v1', uid: rs }] } : {}) } });
  const o = { criticalNamespace: 'ulysses-critical', loadNamespace: 'ulysses-load' };
  it('knows a ReplicaSet pod outside the experiment by its ReplicaSet: the failed node\'s CoreDNS is replaced under a new name', () => {
    const before = [pod('kube-system', 'coredns-6d4-abcde', 'coredns-6d4'), pod('kube-system', 'coredns-6d4-fghij', 'coredns-6d4'), pod('kube-system', 'kube-proxy-x1'), pod('ulysses-load', 'low-0-1', 'low-0-rs')];
    const after = [pod('kube-system', 'coredns-6d4-abcde', 'coredns-6d4'), pod('kube-system', 'coredns-6d4-zzzzz', 'coredns-6d4'), pod('kube-system', 'kube-proxy-x1')];
    const frozen = { ...o, failureMode: 'frozen-node' as const };
    expect(otherPods(before, frozen)).toEqual(['kube-system/coredns-6d4-*', 'kube-system/coredns-6d4-*', 'kube-system/kube-proxy-x1']);
    expect(otherPods(after, frozen)).toEqual(otherPods(before, frozen));
    // by name otherwise, as before
    expect(otherPods(after, o)).not.toEqual(otherPods(before, o));
    expect(otherPods(before, o)).toEqual(['kube-system/coredns-6d4-abcde', 'kube-system/coredns-6d4-fghij', 'kube-system/kube-proxy-x1']);
  });

  it("leaves out the pods the run's switches add and remove: the kcm handback's static pod in kube-system", () => {
    const handback: V1Pod = { metadata: { namespace: 'kube-system', name: 'ulysses-kcm-handback-cp', labels: { 'app.kubernetes.io/name': 'ulysses-kcm-handback' } } };
    const withIt = [pod('kube-system', 'kube-proxy-x1'), handback];
    const ignoring = { ...o, baselineIgnoresPods: { 'app.kubernetes.io/name': 'ulysses-kcm-handback' } };
    expect(otherPods(withIt, ignoring)).toEqual(['kube-system/kube-proxy-x1']);
    expect(otherPods(withIt, o)).toEqual(['kube-system/kube-proxy-x1', 'kube-system/ulysses-kcm-handback-cp']);
  });
});

describe('stopping a node', () => {
  const children: ChildProcess[] = [];
  const dirs: string[] = [];
  const child = () => {
    const c = spawn('sleep', ['600'], { stdio: 'ignore' });
    children.push(c);
    return c.pid!;
  };
  afterEach(() => {
    for (const c of children.splice(0)) {
      c.kill('SIGCONT');
      c.kill('SIGKILL');
    }
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it("finds every process of a node's pod cgroups, not those in this machine's network namespace; no pod cgroup is an error", () => {
    const root = mkdtempSync(join(tmpdir(), 'ulysses-freezer-'));
    dirs.push(root);
    const ctr = join(root, 'ulysses-real-1', 'kubepods', 'besteffort', 'pod1234', 'ctr');
    mkdirSync(ctr, { recursive: true });
    writeFileSync(join(root, 'ulysses-real-1', 'kubepods', 'cgroup.procs'), '');
    writeFileSync(join(root, 'ulysses-real-1', 'kubepods', 'besteffort', 'cgroup.procs'), '');
    writeFileSync(join(root, 'ulysses-real-1', 'kubepods', 'besteffort', 'pod1234', 'cgroup.procs'), '');
    // this process shares the host's network namespace (a hostNetwork pod); the other is in none we can read
    writeFileSync(join(ctr, 'cgroup.procs'), `${process.pid}\n2147483646\n`);
    expect(kubepodsPids('/ulysses-real-1', root)).toEqual([2147483646]);
    expect(() => kubepodsPids('/ulysses-real-9', root)).toThrow(/no pod cgroup .*ulysses-real-9\/kubepods: cannot stop the node's pods/);
  });

  it('takes a supervised daemon with its supervisor: every process below a root, each after its parent', async () => {
    // a supervisor (sh) whose child is the daemon (sh) whose child is a worker (sleep), as the
    // kubelet-shim's unit supervisor -> tsx -> node: freezing the supervisor alone left the shim answering
    const sup = spawn('sh', ['-c', 'sh -c "sleep 600; :" & wait'], { stdio: 'ignore' });
    children.push(sup);
    const tree = await pollUntil('the supervisor, its daemon and the daemon\'s worker', () => {
      const t = withDescendants([sup.pid!]);
      return t.length >= 3 && t;
    }, { timeoutMs: 10_000, intervalMs: 20 });
    expect(tree[0]).toBe(sup.pid);
    expect(tree).toHaveLength(3);
    expect(withDescendants([])).toEqual([]);
    const other = child();
    expect(withDescendants([other, other])).toEqual([other]); // a root named twice counts once
    for (const pid of tree.slice(1)) process.kill(pid, 'SIGKILL');
  });

  it('stops what it names and what appears meanwhile; resumes it all, the last stopped first', async () => {
    const kubelet = child();
    const runtime = child();
    const forked = child();
    let scans = 0;
    const failure = stoppedNodeFailure({
      description: 'test',
      // the second scan finds a process the first did not (a container process forked meanwhile)
      pidsOf: () => (scans++ === 0 ? [kubelet, runtime] : [kubelet, runtime, forked]),
      unfrozenPids: () => [],
      rescan: true,
    });
    await failure.freeze(['real-1']);
    expect([kubelet, runtime, forked].map(processState)).toEqual(['T', 'T', 'T']);
    expect(scans).toBe(3); // the third found nothing new
    await failure.thaw(['real-1']);
    await pollUntil('every process resumed', () => [kubelet, runtime, forked].every((p) => processState(p) !== 'T'), { timeoutMs: 5_000, intervalMs: 5 });
  });
});
