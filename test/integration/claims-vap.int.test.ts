/**
 * Who may claim what (manifests/base/admission/) on the testbed's REAL kube-apiserver (Node and RBAC
 * authorization, NodeRestriction; 1 KWOK node), every identity impersonated by the testbed's admin:
 *
 * - a tenant (user `tenant-a`, the `edit` ClusterRole in two namespaces) cannot label its namespace,
 *   and in a namespace without grants can create no pod with criticality high (label or the
 *   `ulysses-high` class), `ulysses.io/rt` or `ulysses.io/tdma`, no high Deployment or Service, nor
 *   raise a pod to high; each refusal names the namespace, the claim and the label an admin sets.
 *   Once an admin labelled the namespace it can, and kcm's ReplicaSet controller creates the pods of
 *   its high Deployment;
 * - a pod created with spec.nodeName and an RT or TDMA demand is refused for everyone (it would skip
 *   the extender's analysis), but the mirror pod of a static pod created by its own node's kubelet;
 *   a placed pod's RT/TDMA demand can no longer change;
 * - a namespace whose grant an admin removes keeps its running claims (their updates pass) and
 *   refuses new ones;
 * - a node's kubelet (system:node:kwok-1, group system:nodes) can neither set, change nor remove its
 *   node's Ulysses attributes, on the Node or its status, nor register a Node with them; nor can a
 *   ServiceAccount allowed to patch nodes, and the scheduler extender's only the assurance
 *   annotations of its updater; an admin can; the controller manager's ServiceAccount still adds
 *   and removes its taint (with its own node-taint policy in place).
 *
 * flock /tmp/ulysses-testbed.lock npx vitest run --project integration test/integration/claims-vap.int.test.ts
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import type { KubeConfig, V1Deployment, V1Node, V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { KWOK_TOLERATION } from '../../experiments/testbed/kwok.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { deployment, ensureNamespace } from '../../experiments/workloads.ts';
import { KubeClient } from '../../core/kube.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { grantLabels, GRANT_LABELS, HIGH_PRIORITY_CLASS, MIRROR_POD_ANNOTATION } from '../../core/claims.ts';
import { NODE_UNREACHABLE_TAINT, updateNodeTaint } from '../../core/node-taints.ts';
import { RT_ANNOTATION, RT_CAPACITY_ANNOTATION, RT_SCHEDULER_LABEL, TDMA_ANNOTATION, TDMA_NETWORK_LABEL } from '../../scheduler-plugins/schedulability.ts';
import { ASSURANCE_ANNOTATION } from '../../scheduler-plugins/assurance/assurance.ts';
import { BASE_ASSURANCE_ANNOTATION } from '../../scheduler-plugins/assurance/updater.ts';
import { MANIFESTS_DIR } from '../../manifests/overlays.ts';
import { impersonating, refusal } from '../extender-admission.ts';

const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 1 });
const run = promisify(execFile);

const NODE = 'kwok-1';
const PLAIN = 'claims-plain'; // never granted anything
const GRANTED = 'claims-granted'; // granted by the admin during the test
const TENANT = 'tenant-a';
const EXTENDER = 'system:serviceaccount:ulysses-system:ulysses-scheduler-extender';
const CONTROLLER_MANAGER = 'system:serviceaccount:ulysses-system:ulysses-controller-manager';
const CNI_AGENT = 'system:serviceaccount:kube-system:it-cni-agent';
const RT = JSON.stringify({ reservation: { runtimeUs: 2000, periodUs: 10_000, cpus: 1 } });
const TDMA = JSON.stringify({ network: 'rtnet0', slots: 1 });
const HIGH = { [CRITICALITY_LABEL]: 'high' };

/** A client acting as `user` (in `group`), impersonated by the testbed's admin. */
const as = (kc: KubeConfig, user: string, group?: string) => new KubeClient(impersonating(kc, user, { group }));

interface PodOptions {
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  nodeName?: string;
  priorityClassName?: string;
}
/** A pod of a scheduler that does not exist (nothing places it unless the test binds it), tolerating the KWOK node. */
const pod = (namespace: string, name: string, o: PodOptions = {}): V1Pod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, labels: o.labels, annotations: o.annotations },
  spec: {
    schedulerName: 'nobody',
    ...(o.nodeName ? { nodeName: o.nodeName } : {}),
    ...(o.priorityClassName ? { priorityClassName: o.priorityClassName } : {}),
    containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never' }],
    tolerations: [{ ...KWOK_TOLERATION }],
  },
});
const podsPath = (ns: string) => `/api/v1/namespaces/${ns}/pods`;
const podPath = (ns: string, name: string) => `${podsPath(ns)}/${name}`;
const nodePath = `/api/v1/nodes/${NODE}`;

let admin: KubeClient;
let tenant: KubeClient;
let kubelet: KubeClient;

/** kubectl apply --server-side of files of manifests/, as ulysses install applies them. */
const apply = (...files: string[]) =>
  run(binaryPath('kubectl'), [`--kubeconfig=${t.state.kubeconfig}`, 'apply', '--server-side', '--field-manager=ulysses-install', ...files.flatMap((f) => ['-f', join(MANIFESTS_DIR, f)])]);

beforeAll(async () => {
  admin = new KubeClient(t.kc);
  tenant = as(t.kc, TENANT);
  kubelet = as(t.kc, `system:node:${NODE}`, 'system:nodes');
  await apply('base/namespace.yaml');
  await apply('base/admission/claims-policy.yaml', 'base/admission/node-attributes-policy.yaml', 'base/controller-manager/rbac.yaml', 'base/controller-manager/node-taint-policy.yaml');
  for (const ns of [PLAIN, GRANTED]) {
    await ensureNamespace(t.core, ns);
    await admin.post(`/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`, {
      metadata: { name: 'tenant-a-edit' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'edit' },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name: TENANT }],
    });
  }
  await pollUntil(
    "the tenant's RoleBindings in effect",
    async () => {
      for (const ns of [PLAIN, GRANTED]) await tenant.get(podsPath(ns));
      return true;
    },
    { timeoutMs: 10_000 },
  );
  // the class Ulysses ships for `high`, as scheduler-plugins/priority-classes.yaml defines it
  const high = parseAllDocuments(readFileSync('scheduler-plugins/priority-classes.yaml', 'utf8')).map((d) => d.toJS() as { metadata: { name: string } }).find((d) => d.metadata.name === HIGH_PRIORITY_CLASS);
  await admin.post('/apis/scheduling.k8s.io/v1/priorityclasses', high);
  // patch nodes, as a CNI agent's ServiceAccount often may; and the extender's for its assurance updater
  await admin.post('/apis/rbac.authorization.k8s.io/v1/clusterroles', { metadata: { name: 'it-node-patcher' }, rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['get', 'patch'] }] });
  await admin.post('/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
    metadata: { name: 'it-node-patcher' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'it-node-patcher' },
    subjects: [CNI_AGENT, EXTENDER].map((u) => {
      const [, , namespace, name] = u.split(':');
      return { kind: 'ServiceAccount', namespace, name };
    }),
  });
  // the policies take effect once the apiserver has compiled them: probe until each refuses
  let probe = 0;
  await pollUntil(
    'the claims policy refuses a high pod in a namespace without grants',
    async () => {
      const name = `probe-${probe++}`;
      const r = await refusal(admin.post(podsPath(PLAIN), pod(PLAIN, name, { labels: HIGH })));
      if (r === undefined) await admin.delete(podPath(PLAIN, name));
      return r;
    },
    { timeoutMs: 30_000, intervalMs: 500 },
  );
  await pollUntil('the node attributes policy refuses a kubelet', () => refusal(kubelet.mergePatch(nodePath, { metadata: { labels: { [TDMA_NETWORK_LABEL]: `probe-${probe++}` } } })), { timeoutMs: 30_000, intervalMs: 500 });
  await admin.mergePatch(nodePath, { metadata: { labels: { [TDMA_NETWORK_LABEL]: null } } });
}, 120_000);

describe('claims: per namespace, granted by an admin', () => {
  it('a tenant cannot grant itself: labelling its namespace takes a right it does not hold', async () => {
    const r = await refusal(tenant.mergePatch(`/api/v1/namespaces/${PLAIN}`, { metadata: { labels: grantLabels(['criticality', 'rt', 'tdma']) } }));
    expect(r).toContain('cannot patch resource "namespaces"');
  });

  it('in a namespace without grants a tenant makes no claim; each refusal names the namespace, the claim and the label an admin sets', async () => {
    const high = await refusal(tenant.post(podsPath(PLAIN), pod(PLAIN, 'high', { labels: HIGH })));
    expect(high).toContain(`pod ${PLAIN}/high claims criticality high (label ulysses.io/criticality: high), which namespace ${PLAIN} does not grant`);
    expect(high).toContain(`a cluster admin must label the namespace ${GRANT_LABELS.criticality}=true`);
    expect(await refusal(tenant.post(podsPath(PLAIN), pod(PLAIN, 'by-class', { priorityClassName: HIGH_PRIORITY_CLASS })))).toContain(`claims criticality high (priorityClassName ${HIGH_PRIORITY_CLASS})`);
    const rt = await refusal(tenant.post(podsPath(PLAIN), pod(PLAIN, 'rt', { annotations: { [RT_ANNOTATION]: RT } })));
    expect(rt).toContain(`pod ${PLAIN}/rt claims real-time capacity (annotation ${RT_ANNOTATION}), which namespace ${PLAIN} does not grant`);
    expect(rt).toContain(`${GRANT_LABELS.rt}=true`);
    const tdma = await refusal(tenant.post(podsPath(PLAIN), pod(PLAIN, 'tdma', { annotations: { [TDMA_ANNOTATION]: TDMA } })));
    expect(tdma).toContain(`pod ${PLAIN}/tdma claims TDMA slots (annotation ${TDMA_ANNOTATION}), which namespace ${PLAIN} does not grant`);
    expect(tdma).toContain(`${GRANT_LABELS.tdma}=true`);
    // the objects whose own labels Ulysses reads
    const d = deployment({ namespace: PLAIN, name: 'upf', replicas: 1, criticality: 'high', image: 'udp-echo' });
    expect(await refusal(tenant.post(`/apis/apps/v1/namespaces/${PLAIN}/deployments`, d))).toContain(`Deployment ${PLAIN}/upf claims criticality high`);
    const svc = { metadata: { name: 'upf', labels: HIGH }, spec: { selector: { app: 'upf' }, ports: [{ port: 5005, protocol: 'UDP' }] } };
    expect(await refusal(tenant.post(`/api/v1/namespaces/${PLAIN}/services`, svc))).toContain(`Service ${PLAIN}/upf claims criticality high`);
    // low claims nothing; a pod raised to high later is refused like a new one
    await tenant.post(podsPath(PLAIN), pod(PLAIN, 'low', { labels: { [CRITICALITY_LABEL]: 'low' } }));
    expect(await refusal(tenant.mergePatch(podPath(PLAIN, 'low'), { metadata: { labels: HIGH } }))).toContain(`pod ${PLAIN}/low claims criticality high`);
    expect((await admin.get<V1Pod>(podPath(PLAIN, 'low'))).metadata?.labels?.[CRITICALITY_LABEL]).toBe('low');
  });

  it('once an admin labelled the namespace, the tenant claims there, and the ReplicaSet controller creates the high pods of its Deployment', async () => {
    await admin.mergePatch(`/api/v1/namespaces/${GRANTED}`, { metadata: { labels: grantLabels(['criticality', 'rt', 'tdma']) } });
    // the apiserver's admission reads the namespace from its informer cache: the grant is in within moments
    await pollUntil('the tenant creates a high pod in the granted namespace', async () => (await refusal(tenant.post(podsPath(GRANTED), pod(GRANTED, 'high', { labels: HIGH })))) === undefined, {
      timeoutMs: 10_000,
      intervalMs: 200,
    });
    await tenant.post(podsPath(GRANTED), pod(GRANTED, 'by-class', { priorityClassName: HIGH_PRIORITY_CLASS }));
    await tenant.post(podsPath(GRANTED), pod(GRANTED, 'rt', { annotations: { [RT_ANNOTATION]: RT } }));
    await tenant.post(podsPath(GRANTED), pod(GRANTED, 'tdma', { annotations: { [TDMA_ANNOTATION]: TDMA } }));
    await tenant.post(`/apis/apps/v1/namespaces/${GRANTED}/deployments`, deployment({ namespace: GRANTED, name: 'upf', replicas: 1, criticality: 'high', image: 'udp-echo' }));
    const created = await pollUntil(
      "the Deployment's high pod, created by kcm's ReplicaSet controller",
      async () => (await admin.get<{ items: V1Pod[] }>(podsPath(GRANTED), { labelSelector: 'app=upf' })).items[0],
      { timeoutMs: 30_000 },
    );
    expect(created.metadata?.labels?.[CRITICALITY_LABEL]).toBe('high');
    expect((await admin.get<V1Deployment>(`/apis/apps/v1/namespaces/${GRANTED}/deployments/upf`)).metadata?.labels?.[CRITICALITY_LABEL]).toBe('high');
  });

  it('a pod created on a node with an RT or TDMA demand is refused, for the admin too: it would skip the extender', async () => {
    for (const [client, who] of [
      [tenant, 'tenant'],
      [admin, 'admin'],
    ] as const) {
      const rt = await refusal(client.post(podsPath(GRANTED), pod(GRANTED, `${who}-rt-on-node`, { annotations: { [RT_ANNOTATION]: RT }, nodeName: NODE })));
      expect(rt).toContain(`pod ${GRANTED}/${who}-rt-on-node is created with spec.nodeName ${NODE} and ${RT_ANNOTATION}: a pod created on a node skips kube-scheduler and the Ulysses scheduler extender`);
      expect(await refusal(client.post(podsPath(GRANTED), pod(GRANTED, `${who}-tdma-on-node`, { annotations: { [TDMA_ANNOTATION]: TDMA }, nodeName: NODE })))).toContain(
        `is created with spec.nodeName ${NODE} and ${TDMA_ANNOTATION}`,
      );
    }
    // without a demand a pod may be created on a node, even a high one where granted
    await tenant.post(podsPath(GRANTED), pod(GRANTED, 'high-on-node', { labels: HIGH, nodeName: NODE }));
  });

  it("a placed pod's RT and TDMA demands are fixed: set, changed or removed after binding is refused", async () => {
    await tenant.post(podsPath(GRANTED), pod(GRANTED, 'rt-bound', { annotations: { [RT_ANNOTATION]: RT } }));
    await admin.post(`${podPath(GRANTED, 'rt-bound')}/binding`, { apiVersion: 'v1', kind: 'Binding', metadata: { name: 'rt-bound' }, target: { apiVersion: 'v1', kind: 'Node', name: NODE } });
    const bigger = JSON.stringify({ reservation: { runtimeUs: 9000, periodUs: 10_000, cpus: 1 } });
    const changed = await refusal(tenant.mergePatch(podPath(GRANTED, 'rt-bound'), { metadata: { annotations: { [RT_ANNOTATION]: bigger } } }));
    expect(changed).toContain(`pod ${GRANTED}/rt-bound is already placed on node ${NODE}: its ${RT_ANNOTATION} can no longer be set, changed or removed`);
    expect(await refusal(tenant.mergePatch(podPath(GRANTED, 'rt-bound'), { metadata: { annotations: { [RT_ANNOTATION]: null } } }))).toContain('is already placed');
    expect(await refusal(admin.mergePatch(podPath(GRANTED, 'rt-bound'), { metadata: { annotations: { [TDMA_ANNOTATION]: TDMA } } }))).toContain(`its ${TDMA_ANNOTATION} can no longer`);
    await tenant.mergePatch(podPath(GRANTED, 'rt-bound'), { metadata: { annotations: { 'example.com/note': 'other annotations are free' } } });
    expect((await admin.get<V1Pod>(podPath(GRANTED, 'rt-bound'))).metadata?.annotations?.[RT_ANNOTATION]).toBe(RT);
  });

  it("the mirror pod of a static pod with an RT demand is admitted from its own node's kubelet where the namespace grants RT, nowhere else", async () => {
    const node = await admin.get<V1Node>(nodePath);
    const mirror = (ns: string, name: string): V1Pod => {
      const p = pod(ns, name, { annotations: { [RT_ANNOTATION]: RT, [MIRROR_POD_ANNOTATION]: `hash-${name}` }, nodeName: NODE });
      p.metadata!.ownerReferences = [{ apiVersion: 'v1', kind: 'Node', name: NODE, uid: node.metadata!.uid!, controller: true }];
      return p;
    };
    await kubelet.post(podsPath(GRANTED), mirror(GRANTED, `static-rt-${NODE}`));
    expect((await admin.get<V1Pod>(podPath(GRANTED, `static-rt-${NODE}`))).spec?.nodeName).toBe(NODE);
    // its namespace must grant the claim like any other's
    expect(await refusal(kubelet.post(podsPath(PLAIN), mirror(PLAIN, `static-rt-${NODE}`)))).toContain(`${GRANT_LABELS.rt}=true`);
    // a tenant cannot pass its pod off as a mirror pod
    expect(await refusal(tenant.post(podsPath(GRANTED), pod(GRANTED, 'fake-mirror', { annotations: { [RT_ANNOTATION]: RT, [MIRROR_POD_ANNOTATION]: 'x' }, nodeName: NODE })))).toContain(
      `is created with spec.nodeName ${NODE}`,
    );
  });

  it('a grant removed by the admin keeps the running claims (their updates pass) and refuses new ones', async () => {
    await admin.mergePatch(`/api/v1/namespaces/${GRANTED}`, { metadata: { labels: { [GRANT_LABELS.criticality]: null } } });
    await pollUntil('a new high pod refused once the grant is gone', async () => (await refusal(tenant.post(podsPath(GRANTED), pod(GRANTED, 'high-2', { labels: HIGH })))) !== undefined, {
      timeoutMs: 10_000,
      intervalMs: 200,
    });
    // the high pod created under the grant: a status update (as its kubelet makes) and other label changes pass
    await admin.mergePatch(`${podPath(GRANTED, 'high-on-node')}/status`, { status: { conditions: [{ type: 'it.ulysses.io/Probe', status: 'True' }] } });
    await tenant.mergePatch(podPath(GRANTED, 'high'), { metadata: { labels: { team: 'edge' } } });
    expect((await admin.get<V1Pod>(podPath(GRANTED, 'high'))).metadata?.labels).toMatchObject({ ...HIGH, team: 'edge' });
  });
});

describe('node attributes: written by admins only', () => {
  it('the node itself can set, change or remove none of them, on the Node or its status; other changes of its own Node pass', async () => {
    const label = await refusal(kubelet.mergePatch(nodePath, { metadata: { labels: { [RT_SCHEDULER_LABEL]: 'deferrable-server' } } }));
    expect(label).toContain(`node ${NODE}: ${RT_SCHEDULER_LABEL} may be set, changed or removed only by a cluster admin, not by a node (system:node:${NODE})`);
    expect(await refusal(kubelet.mergePatch(nodePath, { metadata: { annotations: { [RT_CAPACITY_ANNOTATION]: '{"cores":64}' } } }))).toContain(`node ${NODE}: ${RT_CAPACITY_ANNOTATION} may be set`);
    expect(await refusal(kubelet.mergePatch(`${nodePath}/status`, { metadata: { annotations: { [ASSURANCE_ANNOTATION]: '{"cpu":9,"memory":9}' } } }))).toContain(`node ${NODE}: ${ASSURANCE_ANNOTATION} may be set`);
    expect(await refusal(kubelet.mergePatch(nodePath, { metadata: { labels: { [TDMA_NETWORK_LABEL]: 'rtnet0' } } }))).toContain('not by a node');
    // what NodeRestriction lets a kubelet write of its own Node still goes through
    await kubelet.mergePatch(nodePath, { metadata: { annotations: { 'example.com/note': 'mine' } } });
    await kubelet.mergePatch(`${nodePath}/status`, { metadata: { annotations: { 'example.com/status-note': 'mine' } } });
    const n = await admin.get<V1Node>(nodePath);
    expect(n.metadata?.annotations).toMatchObject({ 'example.com/note': 'mine', 'example.com/status-note': 'mine' });
    expect(n.metadata?.labels?.[RT_SCHEDULER_LABEL]).toBeUndefined();
    expect(n.metadata?.annotations?.[ASSURANCE_ANNOTATION]).toBeUndefined();
  });

  it('a kubelet cannot register its Node with them (--node-labels)', async () => {
    const rogue = as(t.kc, 'system:node:rogue-1', 'system:nodes');
    const r = await refusal(rogue.post('/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'rogue-1', labels: { [RT_SCHEDULER_LABEL]: 'edf' } } }));
    expect(r).toContain(`node rogue-1: ${RT_SCHEDULER_LABEL} may be set, changed or removed only by a cluster admin, not by a node (system:node:rogue-1)`);
  });

  it("a ServiceAccount that may patch nodes cannot; the scheduler extender's only the assurance annotations its updater writes", async () => {
    const cni = as(t.kc, CNI_AGENT, 'system:serviceaccounts');
    // RBAC's cache takes the new binding within moments: until then the refusal is RBAC's
    const r = await pollUntil(
      'the policy (not RBAC) refuses the CNI agent',
      async () => {
        const m = await refusal(cni.mergePatch(nodePath, { metadata: { labels: { [TDMA_NETWORK_LABEL]: 'rtnet0' } } }));
        return m?.includes('only by a cluster admin') ? m : undefined;
      },
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    expect(r).toContain(`node ${NODE}: ${TDMA_NETWORK_LABEL} may be set, changed or removed only by a cluster admin, not by ServiceAccount ${CNI_AGENT}`);
    await cni.mergePatch(nodePath, { metadata: { annotations: { 'example.com/cni': 'ok' } } });
    const extender = as(t.kc, EXTENDER, 'system:serviceaccounts');
    await extender.mergePatch(nodePath, { metadata: { annotations: { [BASE_ASSURANCE_ANNOTATION]: '{"cpu":3}', [ASSURANCE_ANNOTATION]: '{"cpu":3}' } } });
    expect((await admin.get<V1Node>(nodePath)).metadata?.annotations?.[ASSURANCE_ANNOTATION]).toBe('{"cpu":3}');
    expect(await refusal(extender.mergePatch(nodePath, { metadata: { annotations: { [RT_CAPACITY_ANNOTATION]: '{"cores":8}' } } }))).toContain(
      `(the scheduler extender may write only ${ASSURANCE_ANNOTATION}, ${BASE_ASSURANCE_ANNOTATION})`,
    );
  });

  it("an admin sets, changes and removes them; the controller manager's ServiceAccount still adds and removes its taint", async () => {
    await admin.mergePatch(nodePath, {
      metadata: {
        labels: { [RT_SCHEDULER_LABEL]: 'deferrable-server', [TDMA_NETWORK_LABEL]: 'rtnet0' },
        annotations: { [RT_CAPACITY_ANNOTATION]: '{"cores":2}', [ASSURANCE_ANNOTATION]: '{"cpu":2}', [BASE_ASSURANCE_ANNOTATION]: '{"cpu":2}' },
      },
    });
    await admin.mergePatch(nodePath, { metadata: { labels: { [TDMA_NETWORK_LABEL]: null }, annotations: { [RT_CAPACITY_ANNOTATION]: '{"cores":1}' } } });
    let n = await admin.get<V1Node>(nodePath);
    expect(n.metadata?.labels?.[RT_SCHEDULER_LABEL]).toBe('deferrable-server');
    expect(n.metadata?.labels?.[TDMA_NETWORK_LABEL]).toBeUndefined();
    expect(n.metadata?.annotations?.[RT_CAPACITY_ANNOTATION]).toBe('{"cores":1}');
    // node failure detection's write (controller-manager/node-failure.ts): the taint alone
    const cm = as(t.kc, CONTROLLER_MANAGER, 'system:serviceaccounts');
    expect(await updateNodeTaint(cm, NODE, NODE_UNREACHABLE_TAINT, { key: NODE_UNREACHABLE_TAINT, effect: 'NoExecute' })).toBe(true);
    n = await admin.get<V1Node>(nodePath);
    expect(n.spec?.taints?.map((x) => x.key)).toContain(NODE_UNREACHABLE_TAINT);
    expect(n.metadata?.labels?.[RT_SCHEDULER_LABEL]).toBe('deferrable-server');
    expect(await updateNodeTaint(cm, NODE, NODE_UNREACHABLE_TAINT)).toBe(true);
    expect((await admin.get<V1Node>(nodePath)).spec?.taints?.map((x) => x.key) ?? []).not.toContain(NODE_UNREACHABLE_TAINT);
  });
});
