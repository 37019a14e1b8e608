/**
 * The recovery-SLO tracker (controller-manager/recovery-slo.ts) on informer events fed by hand with
 * a fake clock: start at the taint (or deletion), end when a replacement of the same owner is Ready
 * and a ready endpoint of a slice, in every order the watches can deliver them.
 */
import { describe, expect, it } from 'vitest';
import type { KubernetesObject, V1Deployment, V1EndpointSlice, V1Node, V1Pod, V1ReplicaSet, V1Service, V1Taint, V1Toleration } from '@kubernetes/client-node';
import { pino } from 'pino';
import { RecoveryTracker, recoveryHistogram, SLO_MISSED_REASON, taintStartMs } from '../../controller-manager/recovery-slo.ts';
import type { ComponentEventRecorder } from '../../core/events.ts';
import type { RecoveryRecord } from '../../core/slo.ts';
import { SloConfigSchema, sloSecondsFor } from '../../core/slo.ts';
import { validateConfig, ConfigError } from '../../core/config.ts';
import { formatRecoveries, setPatch } from '../../core/runtime-status.ts';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const FAILURE: V1Taint = { key: 'ulysses.io/failure', value: 'true', effect: 'NoExecute' };

class World {
  now = T0;
  pods = new Map<string, V1Pod>();
  replicaSets = new Map<string, V1ReplicaSet>();
  deployments = new Map<string, V1Deployment>();
  services: V1Service[] = [];
  events: Array<{ object: KubernetesObject; type: string; reason: string; message: string }> = [];
  published: RecoveryRecord[][] = [];
  seq = 0;
  readonly tracker: RecoveryTracker;

  constructor(readonly ns: string, opts: { maxOpen?: number; maxAgeMs?: number } = {}) {
    const recorder: ComponentEventRecorder = { event: (object, type, reason, message) => this.events.push({ object, type, reason, message }) };
    this.tracker = new RecoveryTracker({
      now: () => this.now,
      getPod: (k) => this.pods.get(k),
      getReplicaSet: (k) => this.replicaSets.get(k),
      getDeployment: (k) => this.deployments.get(k),
      podsOnNode: (n) => [...this.pods.values()].filter((p) => p.spec?.nodeName === n),
      podsInNamespace: (n) => [...this.pods.values()].filter((p) => p.metadata?.namespace === n),
      servicesInNamespace: (n) => this.services.filter((s) => s.metadata?.namespace === n),
      events: recorder,
      publish: (r) => this.published.push(r),
      log: pino({ level: 'silent' }),
      ...opts,
    });
  }

  /** Deployment `name` with ReplicaSet `name-rs` of `replicas` */
  deployment(name: string, replicas = 1): V1ReplicaSet {
    const d: V1Deployment = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name, namespace: this.ns, uid: `d-${name}` }, spec: { replicas, selector: {}, template: {} } };
    this.deployments.set(`${this.ns}/${name}`, d);
    const rs: V1ReplicaSet = {
      apiVersion: 'apps/v1',
      kind: 'ReplicaSet',
      metadata: { name: `${name}-rs`, namespace: this.ns, uid: `rs-${name}`, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name, uid: `d-${name}`, controller: true }] },
      spec: { replicas, selector: {} },
    };
    this.replicaSets.set(`${this.ns}/${name}-rs`, rs);
    return rs;
  }

  pod(rs: V1ReplicaSet, node: string, o: { ready?: boolean; level?: string; tolerations?: V1Toleration[]; app?: string } = {}): V1Pod {
    const name = `${rs.metadata!.name}-${++this.seq}`;
    const p: V1Pod = {
      metadata: {
        name,
        namespace: this.ns,
        uid: `uid-${name}`,
        labels: { app: o.app ?? rs.metadata!.name!, 'ulysses.io/criticality': o.level ?? 'high' },
        ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: rs.metadata!.name!, uid: rs.metadata!.uid!, controller: true }],
      },
      spec: { nodeName: node, containers: [], tolerations: o.tolerations },
      status: { phase: 'Running', podIP: `10.0.0.${this.seq}`, conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True' }] },
    };
    this.pods.set(`${this.ns}/${name}`, p);
    this.tracker.podChanged(p);
    return p;
  }

  service(app: string): void {
    this.services.push({ metadata: { name: app, namespace: this.ns }, spec: { selector: { app } } });
  }

  taint(node: string, taints: V1Taint[]): void {
    const n: V1Node = { metadata: { name: node }, spec: { taints } };
    this.tracker.nodeChanged(n);
  }

  deleting(p: V1Pod): void {
    p.metadata!.deletionTimestamp = new Date(this.now + 30_000) as never;
    this.tracker.podChanged(p);
  }

  deleted(p: V1Pod): void {
    this.pods.delete(`${this.ns}/${p.metadata!.name}`);
    this.tracker.podDeleted(p);
  }

  ready(p: V1Pod): void {
    p.status = { ...p.status, conditions: [{ type: 'Ready', status: 'True' }] };
    this.tracker.podChanged(p);
  }

  slice(service: string, pods: V1Pod[], ready = true): void {
    const s: V1EndpointSlice = {
      addressType: 'IPv4',
      metadata: { name: `${service}-abc`, namespace: this.ns, labels: { 'kubernetes.io/service-name': service } },
      endpoints: pods.map((p) => ({ addresses: [p.status!.podIP!], conditions: { ready }, targetRef: { kind: 'Pod', name: p.metadata!.name!, namespace: this.ns, uid: p.metadata!.uid! } })),
    };
    this.tracker.sliceChanged(s);
  }

  async observations(): Promise<Array<{ labels: Record<string, string | number>; count: number; sum: number }>> {
    const m = await recoveryHistogram().get();
    const out = new Map<string, { labels: Record<string, string | number>; count: number; sum: number }>();
    for (const v of m.values) {
      if (v.labels.namespace !== this.ns) continue;
      const { le: _le, ...labels } = v.labels as Record<string, string | number>;
      const k = JSON.stringify(labels);
      const e = out.get(k) ?? { labels, count: 0, sum: 0 };
      if (v.metricName === `${m.name}_count`) e.count = v.value;
      if (v.metricName === `${m.name}_sum`) e.sum = v.value;
      out.set(k, e);
    }
    return [...out.values()];
  }
}

describe('recovery SLO tracker', () => {
  it('taint, eviction, replacement Ready, then in the EndpointSlice: taint -> slice, labelled by the Deployment', async () => {
    const w = new World('r-basic');
    const rs = w.deployment('prio');
    w.service('prio-rs');
    const lost = w.pod(rs, 'n1');
    w.now += 1000;
    w.taint('n1', [FAILURE]);
    expect(w.tracker.openRecoveries()).toEqual([{ pod: `r-basic/${lost.metadata!.name}`, owner: 'Deployment/prio', startMs: T0 + 1000, cause: 'taint ulysses.io/failure' }]);
    w.now += 50;
    w.deleting(lost);
    w.deleted(lost);
    w.now += 100;
    const repl = w.pod(rs, 'n2', { ready: false });
    w.now += 2000;
    w.ready(repl);
    expect(w.tracker.recent).toHaveLength(0); // a Service selects it: not before the slice
    w.now += 150;
    w.slice('prio-rs', [repl]);
    expect(w.tracker.openRecoveries()).toEqual([]);
    expect(w.tracker.recent[0]).toMatchObject({ namespace: 'r-basic', owner: 'Deployment/prio', pod: lost.metadata!.name, replacement: repl.metadata!.name, seconds: 2.3, until: 'endpointslice', missed: false, sloSeconds: null });
    expect(await w.observations()).toEqual([{ labels: { namespace: 'r-basic', owner_kind: 'Deployment', until: 'endpointslice' }, count: 1, sum: 2.3 }]);
    expect(w.published).toHaveLength(1);
    expect(w.events).toEqual([]);
  });

  it('the slice seen before the replacement’s Ready (separate watches): ends at the Ready', async () => {
    const w = new World('r-slice-first');
    const rs = w.deployment('prio');
    w.service('prio-rs');
    const lost = w.pod(rs, 'n1');
    w.taint('n1', [FAILURE]);
    w.deleted(lost);
    const repl = w.pod(rs, 'n2', { ready: false });
    w.now += 1000;
    w.slice('prio-rs', [repl]);
    expect(w.tracker.recent).toHaveLength(0);
    w.now += 40;
    w.ready(repl);
    expect(w.tracker.recent[0]!.seconds).toBe(1.04);
  });

  it('a not-ready endpoint does not end it; the pod of another owner does not either', () => {
    const w = new World('r-notready');
    const rs = w.deployment('prio');
    const other = w.deployment('other');
    w.service('prio-rs');
    const lost = w.pod(rs, 'n1');
    w.taint('n1', [FAILURE]);
    w.deleted(lost);
    const stranger = w.pod(other, 'n2', { ready: false, app: 'prio-rs' });
    w.ready(stranger);
    w.slice('prio-rs', [stranger]);
    const repl = w.pod(rs, 'n2');
    w.slice('prio-rs', [repl], false);
    expect(w.tracker.recent).toHaveLength(0);
    w.now += 10;
    w.slice('prio-rs', [repl], true);
    expect(w.tracker.recent[0]!.replacement).toBe(repl.metadata!.name);
  });

  it('deletion seen before the taint: the start moves back to the taint’s timeAdded + 1 s, not later than observed', () => {
    const w = new World('r-delete-first');
    const rs = w.deployment('prio');
    const lost = w.pod(rs, 'n1');
    w.now += 5000;
    w.deleting(lost); // opens at the deletion
    expect(w.tracker.openRecoveries()[0]!.startMs).toBe(T0 + 5000);
    w.deleted(lost);
    w.now += 30;
    // the node watch delivers the taint late; it was added at T0+4 s (whole seconds)
    w.taint('n1', [{ ...FAILURE, timeAdded: new Date(T0 + 4000).toISOString() as never }]);
    expect(w.tracker.openRecoveries()[0]).toMatchObject({ startMs: T0 + 5000, cause: 'deleted' }); // timeAdded + 1 s is not earlier
    w.taint('n1', [{ ...FAILURE, timeAdded: new Date(T0 + 4000).toISOString() as never }, { key: 'node.kubernetes.io/unreachable', effect: 'NoExecute', timeAdded: new Date(T0 + 2000).toISOString() as never }]);
    expect(w.tracker.openRecoveries()[0]).toMatchObject({ startMs: T0 + 3000, cause: 'taint node.kubernetes.io/unreachable' });
  });

  it('taint start: the observation, or timeAdded + 1 s when that is earlier', () => {
    expect(taintStartMs(FAILURE, 1000)).toBe(1000);
    expect(taintStartMs({ ...FAILURE, timeAdded: new Date(T0).toISOString() as never }, T0 + 300)).toBe(T0 + 300);
    expect(taintStartMs({ ...FAILURE, timeAdded: new Date(T0).toISOString() as never }, T0 + 60_000)).toBe(T0 + 1000);
  });

  it('no Service selects the replacement: ends at Ready, until="ready"', async () => {
    const w = new World('r-no-svc');
    const rs = w.deployment('prio');
    const lost = w.pod(rs, 'n1');
    w.taint('n1', [FAILURE]);
    w.deleted(lost);
    const repl = w.pod(rs, 'n2', { ready: false });
    w.now += 700;
    w.ready(repl);
    expect(w.tracker.recent[0]).toMatchObject({ seconds: 0.7, until: 'ready' });
    expect((await w.observations())[0]!.labels).toEqual({ namespace: 'r-no-svc', owner_kind: 'Deployment', until: 'ready' });
  });

  it('a pod tolerating the taint forever starts no recovery; tolerationSeconds starts it at the taint', () => {
    const w = new World('r-tolerates');
    const rs = w.deployment('prio', 2);
    w.pod(rs, 'n1', { tolerations: [{ key: FAILURE.key, operator: 'Exists', effect: 'NoExecute' }] });
    const limited = w.pod(rs, 'n1', { tolerations: [{ key: FAILURE.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 }] });
    w.now += 100;
    w.taint('n1', [FAILURE]);
    expect(w.tracker.openRecoveries()).toEqual([expect.objectContaining({ pod: `r-tolerates/${limited.metadata!.name}`, startMs: T0 + 100 })]);
  });

  it('the taint removed while the pod still runs: the recovery is dropped', () => {
    const w = new World('r-untaint');
    const rs = w.deployment('prio');
    w.pod(rs, 'n1', { tolerations: [{ key: FAILURE.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 }] });
    w.taint('n1', [FAILURE]);
    expect(w.tracker.openRecoveries()).toHaveLength(1);
    w.taint('n1', []);
    expect(w.tracker.openRecoveries()).toHaveLength(0);
  });

  it('a non-critical pod, or a pod without a controller, starts none', () => {
    const w = new World('r-low');
    const rs = w.deployment('low');
    const low = w.pod(rs, 'n1', { level: 'low' });
    const bare = w.pod(rs, 'n1');
    bare.metadata!.ownerReferences = [];
    w.tracker.podChanged(bare);
    w.taint('n1', [FAILURE]);
    w.deleted(low);
    expect(w.tracker.openRecoveries()).toEqual([]);
  });

  it('owner deleted: the recovery is dropped, nothing observed; a pod deleted by a scale-down starts none', async () => {
    const w = new World('r-owner-gone');
    const rs = w.deployment('prio', 2);
    const a = w.pod(rs, 'n1');
    w.pod(rs, 'n2');
    w.taint('n1', [FAILURE]);
    w.deleted(a);
    expect(w.tracker.openRecoveries()).toHaveLength(1);
    const d = w.deployments.get('r-owner-gone/prio')!;
    w.deployments.delete('r-owner-gone/prio');
    w.tracker.ownerDeleted(d);
    expect(w.tracker.openRecoveries()).toHaveLength(0);
    w.ready(w.pod(rs, 'n2'));
    expect(await w.observations()).toEqual([]);

    const w2 = new World('r-scale-down');
    const rs2 = w2.deployment('prio', 2);
    const p1 = w2.pod(rs2, 'n1');
    w2.pod(rs2, 'n2');
    w2.pod(rs2, 'n2');
    rs2.spec!.replicas = 2; // three pods, two wanted: the RS deletes one
    w2.deleting(p1);
    expect(w2.tracker.openRecoveries()).toHaveLength(0);
    // two pods, two wanted: a deletion is a loss
    w2.deleted(p1);
    const [p2] = [...w2.pods.values()];
    w2.deleting(p2!);
    expect(w2.tracker.openRecoveries()).toHaveLength(1);
  });

  it('two pods of one owner lost: each replacement ends one recovery, the oldest first; existing pods are no replacements', () => {
    const w = new World('r-two');
    const rs = w.deployment('prio', 3);
    const a = w.pod(rs, 'n1');
    const b = w.pod(rs, 'n1');
    const survivor = w.pod(rs, 'n2');
    w.taint('n1', [FAILURE]);
    w.now += 10;
    w.deleted(a);
    w.deleted(b);
    w.ready(survivor);
    expect(w.tracker.openRecoveries()).toHaveLength(2);
    const r1 = w.pod(rs, 'n2', { ready: false });
    const r2 = w.pod(rs, 'n2', { ready: false });
    w.now += 1000;
    w.ready(r2);
    w.now += 500;
    w.ready(r1);
    expect(w.tracker.openRecoveries()).toHaveLength(0);
    expect(w.tracker.recent.map((r) => [r.replacement, r.seconds])).toEqual([
      [r1.metadata!.name, 1.51],
      [r2.metadata!.name, 1.01],
    ]);
  });

  it('over the SLO: a Warning Event on the owner; the namespace override wins over the default', () => {
    const w = new World('r-slo');
    w.tracker.setSlo(validateConfig(SloConfigSchema, { criticalRecoverySeconds: 10, namespaces: { 'r-slo': { criticalRecoverySeconds: 1 } } }, 'test'));
    const rs = w.deployment('prio');
    const lost = w.pod(rs, 'n1');
    w.taint('n1', [FAILURE]);
    w.deleted(lost);
    const repl = w.pod(rs, 'n2', { ready: false });
    w.now += 1500;
    w.ready(repl);
    expect(w.tracker.recent[0]).toMatchObject({ seconds: 1.5, sloSeconds: 1, missed: true });
    expect(w.events).toHaveLength(1);
    expect(w.events[0]).toMatchObject({ type: 'Warning', reason: SLO_MISSED_REASON, object: { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'prio', namespace: 'r-slo', uid: 'd-prio' } } });
    expect(w.events[0]!.message).toContain('over the SLO of 1 s');
    expect(formatRecoveries([...w.tracker.recent])).toMatch(/r-slo\s+Deployment\/prio\s+1\.500\s+1\s+MISSED\s+ready/);
  });

  it('the list of a previous process continues (restart, new leader), newest first', () => {
    const w = new World('r-seed');
    const old = { namespace: 'r-seed', owner: 'Deployment/prio', pod: 'a', replacement: 'b', cause: 'deleted', seconds: 9, sloSeconds: null, missed: false, until: 'ready' as const, finishedAt: new Date(T0).toISOString() };
    w.tracker.seedRecent([old]);
    const rs = w.deployment('prio');
    const lost = w.pod(rs, 'n1');
    w.deleted(lost);
    w.ready(w.pod(rs, 'n2', { ready: false }));
    expect(w.tracker.recent.map((r) => r.seconds)).toEqual([0, 9]);
    w.tracker.seedRecent([old]);
    expect(w.tracker.recent).toHaveLength(2);
  });

  it('bounded: beyond maxOpen the oldest open recovery is dropped; recoveries older than maxAgeMs too', () => {
    const w = new World('r-cap', { maxOpen: 2, maxAgeMs: 60_000 });
    const rss = [w.deployment('a'), w.deployment('b'), w.deployment('c')];
    const pods = rss.map((rs) => w.pod(rs, 'n1'));
    for (const p of pods) {
      w.now += 1;
      w.deleted(p);
    }
    expect(w.tracker.openRecoveries().map((r) => r.owner)).toEqual(['Deployment/b', 'Deployment/c']);
    w.now += 61_000;
    w.tracker.podChanged(w.pod(rss[0]!, 'n2', { level: 'low' }));
    expect(w.tracker.openRecoveries()).toEqual([]);
  });
});

describe('spec.slo', () => {
  it('validates with errors naming the field; the namespace override, else the default', () => {
    const cfg = validateConfig(SloConfigSchema, { criticalRecoverySeconds: 5, namespaces: { crit: { criticalRecoverySeconds: 2 } } }, 'UlyssesConfig/default slo');
    expect(sloSecondsFor(cfg, 'crit')).toBe(2);
    expect(sloSecondsFor(cfg, 'other')).toBe(5);
    expect(sloSecondsFor(validateConfig(SloConfigSchema, {}, 't'), 'x')).toBeUndefined();
    const bad = (raw: unknown) => {
      try {
        validateConfig(SloConfigSchema, raw, 't');
      } catch (err) {
        return (err as ConfigError).issues.map((i) => i.field);
      }
      return [];
    };
    expect(bad({ criticalRecoverySeconds: 0 })).toEqual(['criticalRecoverySeconds']);
    expect(bad({ criticalRecoverySeconds: 7200 })).toEqual(['criticalRecoverySeconds']);
    expect(bad({ namespaces: { crit: { criticalRecoverySeconds: -1 } } })).toEqual(['namespaces.crit.criticalRecoverySeconds']);
    expect(bad({ namespaces: { Crit_NS: { criticalRecoverySeconds: 1 } } })).toEqual(['namespaces.Crit_NS']);
    expect(bad({ criticalRecoverySecs: 1 })).toEqual(['(root)']);
  });

  it('`ulysses set slo`: the default or per-namespace patches, off removes', () => {
    expect(setPatch('slo', '2.5', {})).toEqual({ slo: { criticalRecoverySeconds: 2.5 } });
    expect(setPatch('slo', 'off', {})).toEqual({ slo: { criticalRecoverySeconds: null } });
    expect(setPatch('slo', '1', { namespaces: ['a', 'b'] })).toEqual({ slo: { namespaces: { a: { criticalRecoverySeconds: 1 }, b: { criticalRecoverySeconds: 1 } } } });
    expect(setPatch('slo', 'off', { namespaces: ['a'] })).toEqual({ slo: { namespaces: { a: null } } });
    expect(() => setPatch('slo', '0', {})).toThrow(/criticalRecoverySeconds/);
    expect(() => setPatch('slo', 'fast', {})).toThrow(/criticalRecoverySeconds/);
  });
});

describe('failover harness: recovery metric vs Prio in EndpointSlice', () => {
  it('one observation compared; none or two, or a difference over 50 ms, reported', async () => {
    const { recoveryMetricCheck } = await import('../../experiments/harness/experiment.ts');
    expect(recoveryMetricCheck({ count: 3, sum: 10 }, { count: 4, sum: 11.234 }, 1.25)).toEqual({ recoveryMetricS: 1.234, recoveryMetricDiffMs: 16 });
    expect(recoveryMetricCheck({ count: 3, sum: 10 }, { count: 4, sum: 11.2 }, 1.26).problem).toMatch(/differ by 60 ms/);
    expect(recoveryMetricCheck({ count: 3, sum: 10 }, { count: 3, sum: 10 }, 1.26)).toMatchObject({ recoveryMetricS: null, problem: expect.stringMatching(/observed 0 recoveries/) });
    expect(recoveryMetricCheck({ count: 3, sum: 10 }, { count: 5, sum: 12 }, 1.26).recoveryMetricS).toBeNull();
  });

  it('the report table per configuration', async () => {
    const { recoveryMetricTable } = await import('../../experiments/harness/report.ts');
    const rep = (config: 1 | 5, diff: number | undefined, metric: number | null) => ({ config, dn: 1, podsPerNode: 0, rep: 0, events: {} as never, recoveryMetricS: metric, ...(diff === undefined ? {} : { recoveryMetricDiffMs: diff }) });
    expect(recoveryMetricTable([rep(1, 5, 1)])).toContain('| 1 | 1 | 1 | 5.0 | 5.0 | 0 |');
    const table = recoveryMetricTable([rep(5, 10, 1), rep(5, -70, 1), rep(5, 20, 1), rep(5, undefined, null)])!;
    expect(table).toContain('| 5 | 3 | 2 | 10.0 | 70.0 | 1 |');
    expect(recoveryMetricTable([{ ...rep(1, 0, 0), recoveryMetricS: undefined }])).toBeUndefined();
  });
});

describe('ControllerManager wiring: its informers feed the tracker', () => {
  it('node taint, pod delete, replacement Ready, slice: one recovery labelled by the Deployment', async () => {
    const { KubeConfig } = await import('@kubernetes/client-node');
    const { ControllerManager } = await import('../../controller-manager/manager.ts');
    const kc = new KubeConfig();
    kc.loadFromOptions({ clusters: [{ name: 'c', server: 'https://127.0.0.1:1' }], users: [{ name: 'u' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
    const cm = new ControllerManager({ kubeconfig: kc, controllers: [], recoveryStatus: false, log: pino({ level: 'silent' }) });
    // what the informers would have cached: ResilientInformer's cache, filled as a list/watch does
    const put = <T extends KubernetesObject>(inf: { get(k: string): T | undefined; emit(e: string, o: T, old?: T): boolean }, o: T) => {
      const k = `${o.metadata!.namespace ? `${o.metadata!.namespace}/` : ''}${o.metadata!.name}`;
      const old = inf.get(k);
      (inf as unknown as { cache: Map<string, T> }).cache.set(k, o);
      inf.emit(old ? 'update' : 'add', o, old);
    };
    const remove = <T extends KubernetesObject>(inf: { emit(e: string, o: T): boolean }, o: T) => {
      (inf as unknown as { cache: Map<string, T> }).cache.delete(`${o.metadata!.namespace}/${o.metadata!.name}`);
      inf.emit('delete', o);
    };
    const w = new World('r-wiring'); // only for its object builders
    const rs = w.deployment('prio');
    put(cm.informers.deployments, w.deployments.get('r-wiring/prio')!);
    put(cm.informers.replicaSets, rs);
    put(cm.informers.services, { metadata: { name: 'prio', namespace: 'r-wiring' }, spec: { selector: { app: 'prio-rs' } } } as V1Service);
    const lost = w.pod(rs, 'n1');
    put(cm.informers.pods, lost);
    put(cm.informers.nodes, { metadata: { name: 'n1' }, spec: {} } as V1Node);
    put(cm.informers.nodes, { metadata: { name: 'n1' }, spec: { taints: [FAILURE] } } as V1Node);
    expect(cm.recoveries.openRecoveries()).toEqual([expect.objectContaining({ owner: 'Deployment/prio', cause: `taint ${FAILURE.key}` })]);
    remove(cm.informers.pods, lost);
    const repl = w.pod(rs, 'n2');
    put(cm.informers.pods, repl);
    expect(cm.recoveries.recent).toHaveLength(0);
    put(cm.informers.endpointSlices, {
      addressType: 'IPv4',
      metadata: { name: 'prio-x', namespace: 'r-wiring', labels: { 'kubernetes.io/service-name': 'prio' } },
      endpoints: [{ addresses: ['10.0.0.9'], conditions: { ready: true }, targetRef: { kind: 'Pod', name: repl.metadata!.name!, namespace: 'r-wiring', uid: repl.metadata!.uid! } }],
    } as V1EndpointSlice);
    expect(cm.recoveries.recent[0]).toMatchObject({ owner: 'Deployment/prio', replacement: repl.metadata!.name, until: 'endpointslice' });
    await cm.stop();
  });
});
