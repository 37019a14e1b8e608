/**
 * HA of the controller manager with a coordination.k8s.io Lease, as two real processes
 * (`npm run start:controller-manager`, short lease): the standby waits while the leader runs the
 * ReplicaSet controller; kill -9 of the leader in the middle of a scale-up to 30 lets the standby
 * take over and finish it with no duplicate and no missing pod (every pod the RS ever owned is
 * counted over a watch: never more than 30 at once, exactly 30 created, 30 at the end);
 * SIGTERM steps down and releases the Lease.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AppsV1Api, CoordinationV1Api, type KubeConfig, type V1Pod, type V1ReplicaSet } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { isAlive, pollUntil, startProcess, stopProcess, type TrackedProcess } from '../../experiments/testbed/processes.ts';
import { deployment } from '../../experiments/workloads.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { KWOK_ANNOTATION } from '../../experiments/testbed/kwok.ts';

const runDir = SHARED_RUN_DIR;
const ns = 'ha-it';
const t = useSharedTestbed('real-nodes', { kwokNodes: 2, controllers: '*,-replicaset-controller', namespace: ns });
let kc: KubeConfig, apps: AppsV1Api, coord: CoordinationV1Api;
const procs: TrackedProcess[] = [];
beforeAll(() => {
  ({ kc, apps } = t);
  coord = kc.makeApiClient(CoordinationV1Api);
});
afterAll(async () => {
  for (const p of procs) await stopProcess(p.pid, 2000);
});

const LEASE = ['--leader-elect-lease-duration', '3s', '--leader-elect-renew-deadline', '2s', '--leader-elect-retry-period', '500ms'];

function startCm(id: string, config: string): TrackedProcess {
  const cfgFile = join(runDir, `cm-${id}.yaml`);
  writeFileSync(cfgFile, config);
  // log files are appended to: start from an empty one so nothing of an earlier run is read
  const logFile = join(runDir, 'logs', `cm-${id}.log`);
  rmSync(logFile, { force: true });
  const p = startProcess({
    name: `cm-${id}`,
    cmd: 'npm',
    args: ['run', '--silent', 'start:controller-manager', '--', '--kubeconfig', t.state.kubeconfig, '--config', cfgFile, '--metrics-port', '0', '--identity', id, ...LEASE],
    logFile,
    env: { ULYSSES_LOG_LEVEL: 'info' },
  });
  procs.push(p);
  return p;
}

const lease = async () => (await coord.readNamespacedLease({ name: 'ulysses-controller-manager', namespace: 'kube-system' })).spec;
const holder = async () => {
  try {
    return (await lease())?.holderIdentity ?? '';
  } catch {
    return undefined;
  }
};

describe('leader election between two controller-manager processes', () => {
  it('kill -9 of the leader during a scale-up to 30: the standby finishes it, no duplicate, no missing pod', async () => {
    // the leader creates slowly (4 qps, burst 1) so the kill lands in the middle of the scale-up
    const a = startCm('cm-a', 'controllers: [replicaset]\napiQps: 4\napiBurst: 1\n');
    await pollUntil('cm-a leads', async () => (await holder()) === 'cm-a', { timeoutMs: 60_000 });
    const b = startCm('cm-b', 'controllers: [replicaset]\n');
    await pollUntil('cm-b is a standby that sees cm-a', () => readFileSync(b.logFile, 'utf8').includes('"leader":"cm-a"'), { timeoutMs: 60_000 });

    const tpl = deployment({ namespace: ns, name: 'ha', replicas: 1, criticality: 'low', image: 'http-server' }).spec!;
    tpl.template.spec!.tolerations = [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }];
    tpl.template.spec!.nodeSelector = { type: 'kwok' };
    const rs = await apps.createNamespacedReplicaSet({ namespace: ns, body: { metadata: { name: 'ha' }, spec: { replicas: 1, selector: tpl.selector, template: tpl.template } } });
    const uid = rs.metadata!.uid!;
    await pollUntil('1 pod available', async () => (await apps.readNamespacedReplicaSetStatus({ name: 'ha', namespace: ns })).status?.availableReplicas === 1, { timeoutMs: 60_000 });

    const ever = new Set<string>();
    const active = new Set<string>();
    let maxActive = 0;
    const watch = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${ns}/pods`, labelSelector: 'app=ha' });
    const track = (p: V1Pod) => {
      if (!p.metadata?.ownerReferences?.some((r) => r.uid === uid)) return;
      ever.add(p.metadata.uid!);
      if (p.metadata.deletionTimestamp) active.delete(p.metadata.uid!);
      else active.add(p.metadata.uid!);
      maxActive = Math.max(maxActive, active.size);
    };
    watch.on('add', track);
    watch.on('update', track);
    watch.on('delete', (p) => active.delete(p.metadata!.uid!));
    await watch.start();

    await apps.patchNamespacedReplicaSetScale({ name: 'ha', namespace: ns, body: [{ op: 'replace', path: '/spec/replicas', value: 30 }] }, undefined);
    await pollUntil('scale-up under way', () => active.size >= 4, { timeoutMs: 30_000 });
    process.kill(-a.pid, 'SIGKILL');
    const atKill = active.size;
    await pollUntil('cm-a gone', () => !isAlive(a.pid), { timeoutMs: 10_000 });
    expect(atKill).toBeLessThan(30);

    await pollUntil('cm-b took over the lease', async () => (await holder()) === 'cm-b', { timeoutMs: 30_000 });
    const l = await lease();
    expect(l?.leaseTransitions).toBeGreaterThanOrEqual(1);
    const final = await pollUntil('30 pods available', async () => {
      const s = (await apps.readNamespacedReplicaSetStatus({ name: 'ha', namespace: ns })).status;
      return s?.availableReplicas === 30 && active.size === 30 && s;
    }, { timeoutMs: 90_000 });
    watch.stop();
    expect(final.replicas).toBe(30);
    expect(maxActive).toBe(30);
    expect(ever.size).toBe(30); // every pod ever owned by the RS: none created twice, none replaced
    const metricsPort = /"metricsPort":(\d+)/.exec(readFileSync(b.logFile, 'utf8'))![1];
    const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    expect(metrics).toMatch(/ulysses_leader\{component="controller-manager"\} 1/);

    // SIGTERM: stop the controllers, then release the Lease (empty holder)
    process.kill(-b.pid, 'SIGTERM');
    // stopping waits for in-flight syncs and their API calls (30 s client timeout) before the release
    await pollUntil('lease released', async () => (await holder()) === '', { timeoutMs: 45_000 });
  });
});
