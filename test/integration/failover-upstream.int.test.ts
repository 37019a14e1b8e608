/**
 * `ulysses experiment failover --kubeadm` (issue 24): on a kubeadm testbed (DN 1: a source and a
 * destination worker), one repetition each of configuration `upstream` (stock Kubernetes), 1 and 5
 * with 3 pods per node, switched by the install/uninstall steps of manifests/install.ts. Checks that
 * each configuration ran as specified — in upstream kube-controller-manager runs all its controllers,
 * kube-scheduler has no extender, every kubelet talks to containerd, no Ulysses controller manager
 * pod runs, no APF exemption, and the eviction and the replacement's creation are Events of kcm's
 * controllers; in 1 and 5 the controller manager pods do that work with the kubelets on the
 * kubelet-shim — that Prio up was measured through the Service's ClusterIP too, that the switches
 * were timed, that the report has the table against upstream and the fidelity table, and that the
 * cluster is stock again afterwards (it started stock). No timing thresholds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { ApiextensionsV1Api, CoreV1Api, type CoreV1Event, type KubeConfig } from '@kubernetes/client-node';
import * as kubeadm from '../../experiments/testbed/kubeadm.ts';
import { runFailoverExperiment, CRITICAL_NAMESPACE } from '../../experiments/harness/local.ts';
import { readResults, type RepResult } from '../../experiments/harness/results.ts';

const runDir = '/tmp/ulysses-it-kubeadm-upstream';
const out = '/tmp/ulysses-it-failover-upstream';
const ULYSSES_CM = 'ulysses-controller-manager';
let state: kubeadm.KubeadmState | undefined;
let kc: KubeConfig;
let results: RepResult[] = [];
let report = '';
let events: CoreV1Event[] = [];

/** Events of the critical namespace in a repetition: from its taint to the next repetition's start. */
function eventsOf(r: RepResult): CoreV1Event[] {
  const from = new Date(r.taintAt!).getTime() - 1000;
  const next = results.find((x) => x.startedAt && new Date(x.startedAt).getTime() > from + 1000);
  const to = next ? new Date(next.startedAt!).getTime() : Infinity;
  return events.filter((e) => {
    const t = new Date((e.eventTime ?? e.lastTimestamp ?? e.firstTimestamp) as unknown as string).getTime();
    return t >= from && t < to;
  });
}

describe('failover experiment against stock Kubernetes on a kubeadm testbed', () => {
  beforeAll(async () => {
    await kubeadm.down({ runDir, log: () => undefined }); // a leftover of an aborted run
    rmSync(out, { recursive: true, force: true });
    state = await kubeadm.up({ runDir, workers: 2, log: () => undefined, auditNamespaces: [CRITICAL_NAMESPACE] });
    kc = kubeadm.kubeConfigForKubeadm(state);
    await runFailoverExperiment({
      kubeadm: true,
      kubeadmRunDir: runDir,
      plan: { configs: ['upstream', 1, 5], dns: [1], podsPerNode: [3], reps: 1 },
      warmup: false,
      out,
      repTimeoutMs: 120_000,
    });
    results = readResults(join(out, 'results.jsonl'));
    report = readFileSync(join(out, 'report.md'), 'utf8');
    events = (await kc.makeApiClient(CoreV1Api).listNamespacedEvent({ namespace: CRITICAL_NAMESPACE })).items;
  });
  afterAll(async () => {
    if (kubeadm.readKubeadmState(runDir)) await kubeadm.down({ runDir });
  });

  it('records one repetition of each configuration with every event, Prio up through the ClusterIP included', () => {
    expect(results.map((r) => r.config)).toEqual(['upstream', 1, 5]);
    for (const r of results) {
      expect(r.error, `config ${r.config}`).toBeUndefined();
      for (const [e, v] of Object.entries(r.events)) expect(v, `config ${r.config} ${e}`).not.toBeNull();
      expect(r.events.prioUpService, `config ${r.config} prioUpService`).toBeGreaterThan(0);
    }
  });

  it('ran upstream as stock Kubernetes: all kcm controllers, no extender, kubelets on containerd, no Ulysses controller manager, no APF exemption', () => {
    const up = results.find((r) => r.config === 'upstream')!;
    expect(up.cluster).toBeDefined();
    expect(up.cluster!.kcmControllers).toBe('all');
    expect(up.cluster!.schedulerExtender).toBe(false);
    expect(up.cluster!.ulyssesControllerManagerPods).toBe(0);
    expect(up.cluster!.apfExemption).toBe(false);
    for (const n of state!.nodes) expect(up.cluster!.kubeletRuntime[n.spec.name], n.spec.name).toBe(`unix://${n.spec.socket}`);
  });

  it('ran 1 and 5 with Ulysses on the path: kcm without the failover controllers, the extender, kubelets on the kubelet-shim, controller manager pods; 5 with the APF exemption', () => {
    for (const c of [1, 5] as const) {
      const r = results.find((x) => x.config === c)!;
      expect(r.cluster!.kcmControllers, `config ${c}`).not.toBe('all');
      expect(r.cluster!.kcmControllers).toContain('taint-eviction-controller');
      expect(r.cluster!.schedulerExtender).toBe(true);
      expect(r.cluster!.ulyssesControllerManagerPods).toBeGreaterThan(0);
      for (const n of state!.nodes) expect(r.cluster!.kubeletRuntime[n.spec.name], `config ${c} ${n.spec.name}`).toBe(`unix://${n.spec.shimSocket}`);
    }
    expect(results.find((x) => x.config === 1)!.cluster!.apfExemption).toBe(false);
    expect(results.find((x) => x.config === 5)!.cluster!.apfExemption).toBe(true);
  });

  it("reads the installed controller manager's own recovery measurement through the apiserver: one recovery in 5, none looked for in upstream", () => {
    // config 1's repetition began in upstream (the switch is part of it, warm-ups off): its replicas changed, no comparison
    expect(results.find((r) => r.config === 'upstream')!.recoveryMetricS).toBeUndefined();
    const five = results.find((r) => r.config === 5)!;
    expect(five.recoveryMetricS, 'exactly one recovery observed in the critical namespace').toEqual(expect.any(Number));
    expect(five.recoveryMetricS!).toBeGreaterThan(0);
    expect(five.recoveryMetricDiffMs).toEqual(expect.any(Number));
    expect(report).toContain('ulysses_critical_recovery_seconds');
  });

  it("the eviction and the replacement's creation are kcm's Events in upstream, the controller manager pods' in 1 and 5", () => {
    const pick = (r: RepResult, reason: string) => eventsOf(r).filter((e) => e.reason === reason);
    for (const r of results) {
      const evictions = pick(r, 'TaintManagerEviction');
      const creates = pick(r, 'SuccessfulCreate');
      expect(evictions.length, `config ${r.config}: TaintManagerEviction Events`).toBeGreaterThan(0);
      expect(creates.length, `config ${r.config}: SuccessfulCreate Events`).toBeGreaterThan(0);
      const who = (e: CoreV1Event) => e.reportingComponent || e.source?.component;
      if (r.config === 'upstream') {
        for (const e of evictions) expect(who(e)).toBe('taint-eviction-controller');
        for (const e of creates) expect(who(e)).toBe('replicaset-controller');
      } else {
        for (const e of [...evictions, ...creates]) expect(who(e), `config ${r.config} ${e.reason}`).toBe(ULYSSES_CM);
      }
    }
  });

  it("traces the critical pod through kube-apiserver's audit log: eviction and replacement by kcm in upstream, by the controller manager pods in 1 and 5, bound in each", () => {
    for (const r of results) {
      const trace = r.apiTrace ?? [];
      const by = (verb: string, resource: string) => trace.filter((q) => q.verb === verb && q.resource === resource && q.atMs >= 0);
      expect(by('delete', 'pods').length, `config ${r.config}: the eviction`).toBeGreaterThan(0);
      expect(by('create', 'pods').length, `config ${r.config}: the replacement`).toBeGreaterThan(0);
      expect(by('create', 'pods/binding').length, `config ${r.config}: the binding`).toBeGreaterThan(0);
      const creators = new Set(by('create', 'pods').map((q) => q.user));
      if (r.config === 'upstream') {
        for (const u of creators) expect(u).toMatch(/^system:(serviceaccount:kube-system:|kube-controller-manager)/);
        expect(by('create', 'pods/binding').map((q) => q.user)).toContain('system:kube-scheduler');
      } else {
        expect([...creators], `config ${r.config}`).toEqual(['system:serviceaccount:ulysses-system:ulysses-controller-manager']);
      }
    }
    expect(report).toContain('through the API');
  });

  it('times the switches between upstream and Ulysses', () => {
    const switched = results.filter((r) => r.configSwitch);
    // upstream first (the cluster started stock: the first switch may be none), then to Ulysses before 1
    expect(results.find((r) => r.config === 1)!.configSwitch?.to).toBe('ulysses');
    expect(results.find((r) => r.config === 5)!.configSwitch).toBeUndefined();
    for (const r of switched) expect(r.configSwitch!.seconds).toBeGreaterThan(0);
    expect(report).toContain('## Switches between upstream and Ulysses');
  });

  it('writes the table against upstream (with Prio up through the ClusterIP) and the fidelity table', () => {
    expect(report).toContain('## Against stock Kubernetes (configuration upstream)');
    expect(report).toMatch(/\| DN 1, 3 \(n=1\/1\/1\) \| Prio ready \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+x \|/);
    expect(report).toContain('| Prio up (ClusterIP) |');
    expect(report).toContain('## Fidelity: configuration 1 (vanilla mode) against upstream');
    expect(report).toMatch(/Configuration 1 (is not stock Kubernetes|agrees with upstream)/i);
  });

  it('leaves the cluster stock, as it found it: kcm with all controllers, no Ulysses CRD or namespace', async () => {
    const core = kc.makeApiClient(CoreV1Api);
    const kcm = (await core.listNamespacedPod({ namespace: 'kube-system', labelSelector: 'component=kube-controller-manager' })).items;
    expect(kcm[0]!.spec!.containers[0]!.command!.some((a) => a.startsWith('--controllers=') && a.includes('-replicaset'))).toBe(false);
    const crds = await kc.makeApiClient(ApiextensionsV1Api).listCustomResourceDefinition();
    expect(crds.items.filter((c) => c.spec.group === 'ulysses.io')).toEqual([]);
    expect((await core.listNamespace()).items.map((n) => n.metadata!.name)).not.toContain('ulysses-system');
    expect(existsSync('/etc/kubernetes/ulysses')).toBe(false);
  });
});
