/**
 * The install manifests (manifests/) against the real kube-apiserver, kube-controller-manager and
 * kube-scheduler 1.36.3 of the testbed (0 real nodes, 2 KWOK nodes: nothing here runs pods):
 *
 * - every overlay rendered by the real `kubectl kustomize` passes a server-side dry-run apply
 *   (admission, schema validation, RBAC escalation checks, Service ClusterIP allocation);
 * - the cluster-level objects are applied for real: the UlyssesConfig CRD becomes Established, the
 *   default UlyssesConfig is stored unchanged (no field pruned), invalid ones are rejected naming
 *   the field, the status subresource takes what components will report;
 * - each component's ServiceAccount may do what its component calls and nothing like reading or
 *   deleting Secrets (SubjectAccessReview); Leases and FlowSchemas only by name: the extender cannot
 *   write the controller manager's Lease nor the reverse, the controller manager no other FlowSchema
 *   (also through `kubectl auth can-i --as`); the kubelet-shim's node identity (system:node:<node>)
 *   reads UlyssesConfig and writes only its own status entry (the ValidatingAdmissionPolicy, live);
 * - kube-controller-manager started with the ClusterConfiguration's --controllers value (the
 *   testbed's own kcm) and with kubeadm's flag plus the patch's appended flag (a second kcm) disables
 *   exactly the replaced controllers;
 * - kube-scheduler accepts manifests/kubeadm/kube-scheduler-config.yaml (--write-config-to).
 */
import { execFile, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { useSharedTestbed } from './harness.ts';
import { SHARED_RUN_DIR } from './shared-testbed.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { RESERVATION_RESOURCE } from '../../scheduler-plugins/schedulability.ts';
import { pollUntil, stopProcess, tailFile } from '../../experiments/testbed/processes.ts';
import { ApiError, apiRequest, KubeClient, type KubeAccess } from '../../core/kube.ts';
import { impersonating } from '../extender-admission.ts';
import { NODE_UNREACHABLE_TAINT, updateNodeTaint } from '../../core/node-taints.ts';
import { issueExtenderPki, SCHEDULER_EXTENDER_TLS_FILES } from '../../core/extender-pki.ts';
import { LEADER_LABEL } from '../../scheduler-plugins/extender/leadership.ts';
import { REQUEUE_ANNOTATION } from '../../scheduler-plugins/extender/requeue.ts';
import {
  OVERLAYS,
  ULYSSES_CONFIG_NAME,
  ULYSSES_NAMESPACE,
  kcmControllersFromPatch,
  manifestFile,
  renderOverlay,
  type K8sObject,
} from '../../manifests/overlays.ts';

const runDir = SHARED_RUN_DIR;
const run = promisify(execFile);
const KCM_CONTROLLERS = kcmControllersFromPatch();
/** kube-controller-manager's names of the controllers Ulysses replaces. */
const REPLACED = ['replicaset-controller', 'deployment-controller', 'endpoints-controller', 'endpointslice-controller', 'taint-eviction-controller'];
const CRD_NAME = 'ulyssesconfigs.ulysses.io';
const CFG_PATH = '/apis/ulysses.io/v1alpha1/ulyssesconfigs';
/** What the testbed cannot run without real nodes and the image: dry-run only. */
const WORKLOAD_KINDS = new Set(['Deployment', 'DaemonSet']);

const ctx = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 2, controllers: KCM_CONTROLLERS });
const rendered = new Map<string, { yaml: string; objects: K8sObject[] }>();

async function kubectl(args: string[], stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(binaryPath('kubectl'), [`--kubeconfig=${ctx.state.kubeconfig}`, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr }));
    p.stdin.end(stdin ?? '');
  });
}

const toYaml = (objs: K8sObject[]) => objs.map((o) => '---\n' + stringifyYaml(o)).join('');

async function createConfig(body: unknown, query: Record<string, string> = {}): Promise<unknown> {
  return apiRequest(ctx.kc, 'POST', CFG_PATH, { body, query: { fieldValidation: 'Strict', ...query } });
}

async function rejection(p: Promise<unknown>): Promise<ApiError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error('expected the apiserver to reject the request');
}

beforeAll(async () => {
  for (const overlay of Object.keys(OVERLAYS)) rendered.set(overlay, await renderOverlay(overlay, binaryPath('kubectl')));
});

describe('kubectl kustomize + apply to the testbed apiserver', () => {
  it('Namespace and CRD apply for real; the CRD becomes Established with its names accepted', async () => {
    const { objects } = rendered.get('kubeadm')!;
    const first = objects.filter((o) => o.kind === 'Namespace' || o.kind === 'CustomResourceDefinition');
    const r = await kubectl(['apply', '--server-side', '--field-manager=ulysses-install', '-f', '-'], toYaml(first));
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const conds = await pollUntil(
      `CRD ${CRD_NAME} Established`,
      async () => {
        const crd = await apiRequest<{ status?: { conditions?: { type: string; status: string }[] } }>(ctx.kc, 'GET', `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${CRD_NAME}`);
        const c = crd.status?.conditions ?? [];
        return c.some((x) => x.type === 'Established' && x.status === 'True') ? c : undefined;
      },
      { timeoutMs: 30_000 },
    );
    expect(conds).toEqual(expect.arrayContaining([expect.objectContaining({ type: 'NamesAccepted', status: 'True' })]));
  });

  for (const overlay of Object.keys(OVERLAYS)) {
    it(`overlay ${overlay}: every rendered object passes a server-side dry-run apply`, async () => {
      const { yaml, objects } = rendered.get(overlay)!;
      const r = await kubectl(['apply', '--server-side', '--dry-run=server', '--field-manager=ulysses-install', '-f', '-'], yaml);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      const lines = r.stdout.trim().split('\n');
      expect(lines).toHaveLength(objects.length);
      for (const l of lines) expect(l).toMatch(/ serverside-applied \(server dry run\)$/);
    });
  }

  it('the kubeadm overlay minus the workloads (Deployments, DaemonSet) applies for real, and re-applying changes nothing', async () => {
    const { objects } = rendered.get('kubeadm')!;
    const held = objects.filter((o) => !WORKLOAD_KINDS.has(o.kind));
    const apply = () => kubectl(['apply', '--server-side', '--field-manager=ulysses-install', '-f', '-'], toYaml(held));
    const r = await apply();
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.trim().split('\n')).toHaveLength(held.length);
    const before = await apiRequest<{ metadata: { generation: number; resourceVersion: string } }>(ctx.kc, 'GET', `${CFG_PATH}/${ULYSSES_CONFIG_NAME}`);
    const again = await apply();
    expect(again.code).toBe(0);
    const after = await apiRequest<{ metadata: { generation: number; resourceVersion: string } }>(ctx.kc, 'GET', `${CFG_PATH}/${ULYSSES_CONFIG_NAME}`);
    expect(after.metadata.resourceVersion).toBe(before.metadata.resourceVersion);
    expect(after.metadata.generation).toBe(1);
  });
});

describe('static-pod variants (manifests/kubeadm/static-pods)', () => {
  it('the static Pods pass a server-side dry run in kube-system', async () => {
    const pods = ['ulysses-controller-manager.yaml', 'ulysses-scheduler-extender.yaml'].map((f) => manifestFile(`kubeadm/static-pods/${f}`)).join('\n---\n');
    const r = await kubectl(['apply', '--server-side', '--dry-run=server', '--field-manager=ulysses-install', '-f', '-'], pods);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim().split('\n')).toEqual([
      'pod/ulysses-controller-manager serverside-applied (server dry run)',
      'pod/ulysses-scheduler-extender serverside-applied (server dry run)',
    ]);
  });

  it("rbac-static.yaml gives kubeadm's kube-controller-manager and kube-scheduler identities the Ulysses roles", async () => {
    const check = (user: string, verb: string, resource: string, group = '', namespace?: string, subresource?: string, name?: string) =>
      apiRequest<{ status: { allowed: boolean } }>(ctx.kc, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: { user, groups: ['system:authenticated'], resourceAttributes: { verb, resource, group, namespace, subresource, name } },
        },
      }).then((x) => x.status.allowed);
    const probes = async () => [
      // (kube-controller-manager's own role already lists/watches every resource)
      await check('system:kube-controller-manager', 'patch', 'ulyssesconfigs', 'ulysses.io', undefined, 'status', ULYSSES_CONFIG_NAME),
      await check('system:kube-controller-manager', 'create', 'pods', '', 'some-namespace'),
      await check('system:kube-controller-manager', 'update', 'leases', 'coordination.k8s.io', ULYSSES_NAMESPACE, undefined, 'ulysses-controller-manager'),
      await check('system:kube-controller-manager', 'patch', 'flowschemas', 'flowcontrol.apiserver.k8s.io', undefined, undefined, 'ulysses-critical-namespaces'),
      await check('system:kube-scheduler', 'watch', 'ulyssesconfigs', 'ulysses.io', undefined, undefined, ULYSSES_CONFIG_NAME),
      await check('system:kube-scheduler', 'patch', 'pods', '', 'some-namespace'),
    ];
    expect(await probes()).toEqual([false, false, false, false, false, false]); // kubeadm's roles alone
    const r = await kubectl(['apply', '--server-side', '--field-manager=ulysses-install', '-f', '-'], manifestFile('kubeadm/static-pods/rbac-static.yaml'));
    expect(r.code).toBe(0);
    expect(await probes()).toEqual([true, true, true, true, true, true]);
    expect(await check('system:kube-scheduler', 'delete', 'secrets', '', ULYSSES_NAMESPACE)).toBe(false);
    // kcm's user gets the controller manager's Lease only, not the extender's
    expect(await check('system:kube-controller-manager', 'update', 'leases', 'coordination.k8s.io', ULYSSES_NAMESPACE, undefined, 'ulysses-scheduler-extender')).toBe(false);
  });
});

describe('UlyssesConfig on the apiserver', () => {
  it('the default instance is stored as written: no field pruned or defaulted differently', async () => {
    const want = rendered.get('kubeadm')!.objects.find((o) => o.kind === 'UlyssesConfig')! as K8sObject & { spec: unknown };
    const got = await apiRequest<{ spec: unknown }>(ctx.kc, 'GET', `${CFG_PATH}/${ULYSSES_CONFIG_NAME}`);
    expect(got.spec).toEqual(want.spec);
  });

  it('the base default (all vanilla, apf disabled) passes strict validation as a new object, with every optional field', async () => {
    const base = parseYaml(manifestFile('base/ulyssesconfig-default.yaml')) as { metadata: { name: string }; spec: Record<string, unknown> };
    base.metadata.name = 'base-default'; // `default` itself exists already
    const full = structuredClone(base);
    full.metadata.name = 'full';
    full.spec.kubeletShim = {
      default: { policy: 'exponential-decay', params: { initialWaitMs: 700, factor: 0.5, resetAfterMs: 5000 } },
      nodes: [{ nodeSelector: { 'node-role.kubernetes.io/edge': '' }, policy: 'exponential-decay', params: { initialWaitMs: 1500, factor: 0.6, resetAfterMs: 5000 } }],
    };
    for (const o of [base, full]) {
      const created = (await createConfig(o, { dryRun: 'All' })) as { spec: unknown };
      expect(created.spec).toEqual(o.spec);
    }
  });

  it('rejects an invalid mode with 422 naming the field and the allowed values', async () => {
    const err = await rejection(
      createConfig({ apiVersion: 'ulysses.io/v1alpha1', kind: 'UlyssesConfig', metadata: { name: 'bad-mode' }, spec: { controllerManager: { controllers: { replicaset: { mode: 'fastest' } } } } }),
    );
    expect(err.statusCode).toBe(422);
    expect(err.message).toContain('spec.controllerManager.controllers.replicaset.mode: Unsupported value: "fastest"');
    expect(err.message).toContain('"multi-priority-periodic"');
  });

  it.each([
    ['kubelet-shim policy enum', { kubeletShim: { default: { policy: 'sometimes' } } }, 'spec.kubeletShim.default.policy: Unsupported value: "sometimes"'],
    ['negative pacing parameter', { kubeletShim: { default: { policy: 'fixed', params: { waitMs: -5 } } } }, 'spec.kubeletShim.default.params.waitMs: Invalid value: -5'],
    ['pacing duration past 10 minutes', { kubeletShim: { default: { policy: 'fixed', params: { waitMs: 3e9 } } } }, 'spec.kubeletShim.default.params.waitMs in body should be less than or equal to 600000'],
    ['per-node pacing duration past 10 minutes', { kubeletShim: { nodes: [{ nodeSelector: { a: 'b' }, policy: 'fixed', params: { lowHoldMs: 600001 } }] } }, 'spec.kubeletShim.nodes[0].params.lowHoldMs in body should be less than or equal to 600000'],
    ['per-node entry without nodeSelector', { kubeletShim: { nodes: [{ policy: 'fixed' }] } }, 'spec.kubeletShim.nodes[0].nodeSelector: Required value'],
    ['zero workers', { controllerManager: { controllers: { replicaset: { mode: 'vanilla', workers: 0 } } } }, 'spec.controllerManager.controllers.replicaset.workers: Invalid value: 0'],
    ['controller name not a DNS label', { controllerManager: { controllers: { ReplicaSet: { mode: 'vanilla' } } } }, 'controller names must be DNS-1123 labels'],
    ['APF enabled without namespaces', { apf: { enabled: true, exemptNamespaces: [] } }, 'spec.apf.exemptNamespaces: Invalid value: exemptNamespaces must list at least one namespace when enabled is true'],
    ['duplicate exempt namespace', { apf: { exemptNamespaces: ['a', 'a'] } }, 'spec.apf.exemptNamespaces[1]: Duplicate value: "a"'],
    ['plugin flag not a boolean', { schedulerExtender: { plugins: { tdma: 'yes' } } }, 'spec.schedulerExtender.plugins.tdma: Invalid value: "string"'],
    ['unknown field (strict field validation)', { kubeletShim: { default: { policy: 'fixed', waitMs: 1200 } } }, 'unknown field "spec.kubeletShim.default.waitMs"'],
  ])('rejects %s naming the field', async (_what, spec, message) => {
    const err = await rejection(createConfig({ apiVersion: 'ulysses.io/v1alpha1', kind: 'UlyssesConfig', metadata: { name: 'invalid' }, spec }));
    expect([400, 422]).toContain(err.statusCode);
    expect(err.message).toContain(message);
  });

  it('status subresource: components report observedGeneration/mode/conditions without bumping the generation; a bad condition status is rejected', async () => {
    const status = {
      components: {
        'controller-manager': {
          observedGeneration: 1,
          mode: 'vanilla',
          controllers: { replicaset: 'vanilla' }, // extra fields are kept (x-kubernetes-preserve-unknown-fields)
          conditions: [{ type: 'Applied', status: 'True', reason: 'ConfigApplied', message: 'all controllers vanilla', lastTransitionTime: '2026-01-01T00:00:00Z', observedGeneration: 1 }],
        },
      },
    };
    const path = `${CFG_PATH}/${ULYSSES_CONFIG_NAME}/status`;
    const patched = await apiRequest<{ metadata: { generation: number }; status: unknown }>(ctx.kc, 'PATCH', path, {
      body: { status },
      contentType: 'application/merge-patch+json',
    });
    expect(patched.status).toEqual(status);
    expect(patched.metadata.generation).toBe(1);
    const bad = await rejection(
      apiRequest(ctx.kc, 'PATCH', path, {
        body: { status: { components: { 'kubelet-shim/kwok-0': { conditions: [{ type: 'Applied', status: 'Maybe' }] } } } },
        contentType: 'application/merge-patch+json',
      }),
    );
    expect(bad.statusCode).toBe(422);
    expect(bad.message).toContain('status.components.kubelet-shim/kwok-0.conditions[0].status: Unsupported value: "Maybe"');
  });

  it('kubectl get shows the printer columns', async () => {
    const r = await kubectl(['get', 'ulyssesconfigs', ULYSSES_CONFIG_NAME]);
    expect(r.code).toBe(0);
    const [head, row] = r.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/));
    expect(head).toEqual(['NAME', 'REPLICASET', 'SHIM', 'ASSURANCE', 'REALTIME', 'TDMA', 'APF', 'SLO', 'AGE']);
    expect(row!.slice(0, 7)).toEqual(['default', 'vanilla', 'vanilla', 'false', 'false', 'false', 'true']);
  });
});

describe('least-privilege RBAC (SubjectAccessReview as each ServiceAccount, and as a node)', () => {
  type Check = [verb: string, resource: string, opts?: { group?: string; subresource?: string; namespace?: string; name?: string }];
  const any = 'some-namespace';
  const lease = (verb: string, name?: string, namespace = ULYSSES_NAMESPACE): Check => [verb, 'leases', { group: 'coordination.k8s.io', namespace, name }];
  const fs = (verb: string, name?: string): Check => [verb, 'flowschemas', { group: 'flowcontrol.apiserver.k8s.io', name }];
  const cfg = (verb: string, subresource?: string): Check => [verb, 'ulyssesconfigs', { group: 'ulysses.io', subresource, name: ULYSSES_CONFIG_NAME }];
  const CM_LEASE = 'ulysses-controller-manager';
  const EXT_LEASE = 'ulysses-scheduler-extender';
  const CAN: Record<string, Check[]> = {
    'ulysses-controller-manager': [
      ['watch', 'pods'],
      ['create', 'pods', { namespace: any }],
      ['delete', 'pods', { namespace: any }],
      ['patch', 'pods', { namespace: any }],
      ['patch', 'pods', { subresource: 'status', namespace: any }],
      ['list', 'nodes'],
      ['get', 'nodes', { name: 'kwok-1' }],
      ['patch', 'nodes'], // the node failure detection's taint (narrowed by its admission policy)
      ['watch', 'services'],
      ['update', 'services', { subresource: 'finalizers', namespace: any }],
      ['create', 'endpointslices', { group: 'discovery.k8s.io', namespace: any }],
      ['delete', 'endpointslices', { group: 'discovery.k8s.io', namespace: any }],
      ['update', 'endpoints', { namespace: any }],
      ['watch', 'replicasets', { group: 'apps' }],
      ['create', 'replicasets', { group: 'apps', namespace: any }],
      ['update', 'replicasets', { group: 'apps', subresource: 'status', namespace: any }],
      ['watch', 'deployments', { group: 'apps' }],
      ['update', 'deployments', { group: 'apps', subresource: 'status', namespace: any }],
      ['create', 'events', { namespace: any }],
      ['patch', 'events', { namespace: any }],
      lease('get', CM_LEASE),
      lease('update', CM_LEASE),
      lease('create', CM_LEASE), // a PUT to its name re-creates a Lease deleted by hand
      cfg('watch'),
      cfg('get'),
      cfg('patch', 'status'),
      // a server-side apply creating the FlowSchema is authorized as create with its name
      fs('create', 'ulysses-critical-namespaces'),
      fs('patch', 'ulysses-critical-namespaces'),
      fs('delete', 'ulysses-critical-namespaces'),
      fs('list'),
    ],
    'ulysses-scheduler-extender': [
      ['watch', 'nodes'],
      ['list', 'pods'],
      ['get', 'pods', { namespace: any }],
      ['patch', 'pods', { namespace: any }],
      ['create', 'pods', { subresource: 'binding', namespace: any }],
      ['create', 'events', { namespace: any }],
      cfg('watch'),
      cfg('patch', 'status'),
      lease('get', EXT_LEASE),
      lease('update', EXT_LEASE),
      lease('patch', EXT_LEASE),
      lease('create', EXT_LEASE),
      ['get', 'endpointslices', { group: 'discovery.k8s.io', namespace: 'default', name: 'kubernetes' }],
      // routing.ts: the Service's EndpointSlice, in its own namespace
      ['list', 'endpointslices', { group: 'discovery.k8s.io', namespace: ULYSSES_NAMESPACE }],
      ['create', 'endpointslices', { group: 'discovery.k8s.io', namespace: ULYSSES_NAMESPACE }],
      ['update', 'endpointslices', { group: 'discovery.k8s.io', namespace: ULYSSES_NAMESPACE, name: 'ulysses-scheduler-extender' }],
    ],
    'ulysses-kubelet-shim': [
      ['watch', 'nodes'],
      cfg('watch'),
      cfg('patch', 'status'),
      ['create', 'events', { namespace: 'default' }],
    ],
  };
  const NO_SECRETS: Check[] = [
    ['get', 'secrets', { namespace: any }],
    ['list', 'secrets'],
    ['delete', 'secrets', { namespace: ULYSSES_NAMESPACE }],
  ];
  /** No Ulysses identity creates a Lease but its own by name (a POST has no name), deletes one, or writes another's. */
  const NO_FOREIGN_LEASE = (own: string): Check[] => [
    lease('create'),
    lease('create', own === CM_LEASE ? EXT_LEASE : CM_LEASE),
    lease('delete', own),
    ...['update', 'patch', 'delete'].map((v) => lease(v, own === CM_LEASE ? EXT_LEASE : CM_LEASE)),
    lease('update', 'some-other-lease'),
  ];
  const CANNOT: Record<string, Check[]> = {
    'ulysses-controller-manager': [
      ...NO_SECRETS,
      ...NO_FOREIGN_LEASE(CM_LEASE),
      ['update', 'ulyssesconfigs', { group: 'ulysses.io', name: ULYSSES_CONFIG_NAME }], // the spec belongs to the operator
      ['list', 'ulyssesconfigs', { group: 'ulysses.io' }], // only `default`
      ['delete', 'nodes'],
      ['update', 'nodes'],
      ['patch', 'nodes', { subresource: 'status' }],
      ['create', 'deployments', { group: 'apps', namespace: any }],
      ['delete', 'services', { namespace: any }],
      ['create', 'pods', { subresource: 'binding', namespace: any }],
      lease('update', 'kube-controller-manager', 'kube-system'), // not kcm's lease
      ['create', 'clusterrolebindings', { group: 'rbac.authorization.k8s.io' }],
      // APF: only its own FlowSchema; no other, no built-in one, no priority level
      fs('create'), // a POST carries no name
      fs('patch', 'global-default'),
      fs('update', 'exempt'),
      fs('delete', 'system-leader-election'),
      fs('deletecollection'),
      ['patch', 'prioritylevelconfigurations', { group: 'flowcontrol.apiserver.k8s.io', name: 'exempt' }],
      ['list', 'prioritylevelconfigurations', { group: 'flowcontrol.apiserver.k8s.io' }],
      ['create', 'events', { group: 'events.k8s.io', namespace: any }], // it writes core/v1 Events only
    ],
    'ulysses-scheduler-extender': [
      ...NO_SECRETS,
      ...NO_FOREIGN_LEASE(EXT_LEASE),
      ['delete', 'pods', { namespace: any }],
      ['create', 'pods', { namespace: any }],
      ['update', 'nodes'],
      ['update', 'ulyssesconfigs', { group: 'ulysses.io', name: ULYSSES_CONFIG_NAME }],
      fs('patch', 'ulysses-critical-namespaces'),
      lease('update', 'kube-scheduler', 'kube-system'), // not kube-scheduler's lease
      ['get', 'endpointslices', { group: 'discovery.k8s.io', namespace: any, name: 'web' }], // the apiservers' only
      ['create', 'endpointslices', { group: 'discovery.k8s.io', namespace: any }], // its Service's, in ulysses-system only
    ],
    'ulysses-kubelet-shim': [
      ...NO_SECRETS,
      lease('create'),
      ['list', 'pods'],
      ['patch', 'nodes'],
      ['create', 'pods', { namespace: any }],
      ['update', 'ulyssesconfigs', { group: 'ulysses.io', name: ULYSSES_CONFIG_NAME }],
      ['create', 'events', { namespace: any }], // only in `default`, where the UlyssesConfig's Events live
      ['create', 'events', { namespace: ULYSSES_NAMESPACE }],
    ],
    default: [['list', 'ulyssesconfigs', { group: 'ulysses.io' }]],
  };

  type Who = { user: string; groups: string[] };
  const sa = (name: string): Who => ({
    user: `system:serviceaccount:${ULYSSES_NAMESPACE}:${name}`,
    groups: ['system:serviceaccounts', `system:serviceaccounts:${ULYSSES_NAMESPACE}`, 'system:authenticated'],
  });
  const node = (name: string): Who => ({ user: `system:node:${name}`, groups: ['system:nodes', 'system:authenticated'] });

  async function allowed(who: Who, [verb, resource, o = {}]: Check): Promise<boolean> {
    const r = await apiRequest<{ status: { allowed: boolean } }>(ctx.kc, 'POST', '/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      body: {
        apiVersion: 'authorization.k8s.io/v1',
        kind: 'SubjectAccessReview',
        spec: { user: who.user, groups: who.groups, resourceAttributes: { verb, resource, group: o.group ?? '', subresource: o.subresource, namespace: o.namespace, name: o.name } },
      },
    });
    return r.status.allowed;
  }
  const describeCheck = ([verb, resource, o = {}]: Check) =>
    `${verb} ${o.group ? `${resource}.${o.group}` : resource}${o.subresource ? `/${o.subresource}` : ''}${o.name ? ` "${o.name}"` : ''}${o.namespace ? ` in ${o.namespace}` : ''}`;

  for (const name of Object.keys(CAN)) {
    it(`${name} may do what its component calls`, async () => {
      const denied: string[] = [];
      for (const c of CAN[name]!) if (!(await allowed(sa(name), c))) denied.push(describeCheck(c));
      expect(denied).toEqual([]);
    });
  }
  for (const name of Object.keys(CANNOT)) {
    it(`${name} may not read or delete Secrets, nor act outside its component`, async () => {
      const granted: string[] = [];
      for (const c of CANNOT[name]!) if (await allowed(sa(name), c)) granted.push(describeCheck(c));
      expect(granted).toEqual([]);
    });
  }

  it('kubectl auth can-i --as: the extender cannot update the controller manager\'s Lease, the controller manager no FlowSchema but its own', async () => {
    const canI = async (as: string, ...args: string[]) => {
      const r = await kubectl(['auth', 'can-i', ...args, `--as=system:serviceaccount:${ULYSSES_NAMESPACE}:${as}`]);
      return r.stdout.trim();
    };
    const leaseOf = (n: string) => [`update`, `leases.coordination.k8s.io/${n}`, '-n', ULYSSES_NAMESPACE];
    expect(await canI('ulysses-scheduler-extender', ...leaseOf(CM_LEASE))).toBe('no');
    expect(await canI('ulysses-scheduler-extender', ...leaseOf(EXT_LEASE))).toBe('yes');
    expect(await canI('ulysses-controller-manager', ...leaseOf(EXT_LEASE))).toBe('no');
    expect(await canI('ulysses-controller-manager', ...leaseOf(CM_LEASE))).toBe('yes');
    expect(await canI('ulysses-controller-manager', 'create', 'leases.coordination.k8s.io', '-n', ULYSSES_NAMESPACE)).toBe('no');
    expect(await canI('ulysses-controller-manager', 'update', 'flowschemas.flowcontrol.apiserver.k8s.io/global-default')).toBe('no');
    expect(await canI('ulysses-controller-manager', 'patch', 'flowschemas.flowcontrol.apiserver.k8s.io/some-flowschema')).toBe('no');
    expect(await canI('ulysses-controller-manager', 'patch', 'flowschemas.flowcontrol.apiserver.k8s.io/ulysses-critical-namespaces')).toBe('yes');
  });

  it('the kubelet-shim\'s node identity (system:node:<node>): its own Node and Events from the Node authorizer, UlyssesConfig `default` from Ulysses, nothing more', async () => {
    const nodes = (await apiRequest<{ items: { metadata: { name: string } }[] }>(ctx.kc, 'GET', '/api/v1/nodes')).items.map((n) => n.metadata.name);
    const [self, other] = nodes;
    expect(other, 'two nodes').toBeDefined();
    const can: Check[] = [
      ['list', 'nodes', { name: self }], // the informer's fieldSelector metadata.name=<node>
      ['watch', 'nodes', { name: self }],
      cfg('list'),
      cfg('watch'),
      cfg('patch', 'status'),
      ['create', 'events', { namespace: 'default' }],
    ];
    const cannot: Check[] = [
      ['list', 'nodes'],
      ['get', 'nodes', { name: other }],
      ['list', 'ulyssesconfigs', { group: 'ulysses.io' }],
      ['update', 'ulyssesconfigs', { group: 'ulysses.io', name: ULYSSES_CONFIG_NAME }],
      ['list', 'secrets'],
      lease('update', CM_LEASE),
    ];
    const denied: string[] = [];
    for (const c of can) if (!(await allowed(node(self!), c))) denied.push(describeCheck(c));
    const granted: string[] = [];
    for (const c of cannot) if (await allowed(node(self!), c)) granted.push(describeCheck(c));
    expect({ denied, granted }).toEqual({ denied: [], granted: [] });
  });

  it('a shim writes only its own status entry: another node\'s is refused by the admission policy, for a node and for the DaemonSet\'s ServiceAccount', async () => {
    const nodes = (await apiRequest<{ items: { metadata: { name: string } }[] }>(ctx.kc, 'GET', '/api/v1/nodes')).items.map((n) => n.metadata.name);
    const [self, other] = nodes as [string, string];
    const path = `${CFG_PATH}/${ULYSSES_CONFIG_NAME}/status`;
    const entry = (mode: string) => ({ observedGeneration: 1, mode, conditions: [{ type: 'Applied', status: 'True', reason: 'Applied', message: 'test', lastTransitionTime: '2026-01-01T00:00:00Z' }] });
    // impersonated by the admin: the kubelet's identity, and the DaemonSet's (a pod-bound token names its node)
    const shimSa = `system:serviceaccount:${ULYSSES_NAMESPACE}:ulysses-kubelet-shim`;
    const asNode = impersonating(ctx.kc, `system:node:${self}`, { group: 'system:nodes' });
    const asPod = impersonating(ctx.kc, shimSa, { extra: { 'authentication.kubernetes.io/node-name': self } });
    const asUnboundSa = impersonating(ctx.kc, shimSa);
    const patch = (kc: KubeAccess, key: string, mode: string) =>
      apiRequest(kc, 'PATCH', path, { body: { status: { components: { [key]: entry(mode) } } }, contentType: 'application/merge-patch+json' });
    // the policy is enforced once the apiserver has loaded it: wait until another node's entry is refused
    const refused = await pollUntil(
      'the kubelet-shim status policy enforced',
      async () => {
        const err = await rejection(patch(asNode, `kubelet-shim/${other}`, 'forged')).catch(() => undefined);
        return err?.statusCode === 403 ? err : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(refused.message).toContain(`the kubelet-shim of node ${self} may write only status.components["kubelet-shim/${self}"]`);
    // a forged entry written before the policy was loaded goes (as the admin); from now on none lands
    await apiRequest(ctx.kc, 'PATCH', path, { body: { status: { components: { [`kubelet-shim/${other}`]: null } } }, contentType: 'application/merge-patch+json' });
    await patch(asNode, `kubelet-shim/${self}`, 'node-service');
    expect((await rejection(patch(asNode, 'controller-manager', 'forged'))).statusCode).toBe(403);
    await patch(asPod, `kubelet-shim/${self}`, 'daemonset');
    expect((await rejection(patch(asPod, `kubelet-shim/${other}`, 'forged'))).statusCode).toBe(403);
    expect((await rejection(patch(asUnboundSa, `kubelet-shim/${self}`, 'unbound'))).message).toContain('names no node');
    const stored = await apiRequest<{ status: { components: Record<string, { mode: string }> } }>(ctx.kc, 'GET', `${CFG_PATH}/${ULYSSES_CONFIG_NAME}`);
    expect(stored.status.components[`kubelet-shim/${self}`]?.mode).toBe('daemonset');
    expect(stored.status.components[`kubelet-shim/${other}`]).toBeUndefined();
  });

  it("the controller manager's patch nodes adds and removes its taint ulysses.io/unreachable and changes nothing else (node-taint-policy.yaml)", async () => {
    const nodes = (await apiRequest<{ items: { metadata: { name: string } }[] }>(ctx.kc, 'GET', '/api/v1/nodes')).items.map((n) => n.metadata.name);
    const node = nodes[0]!;
    const asCm = impersonating(ctx.kc, `system:serviceaccount:${ULYSSES_NAMESPACE}:ulysses-controller-manager`);
    const cm = new KubeClient(asCm);
    const mergePatch = (body: unknown) => apiRequest(asCm, 'PATCH', `/api/v1/nodes/${node}`, { body, contentType: 'application/merge-patch+json' });
    // enforced once the apiserver has loaded the policy: a label change by the controller manager is refused
    const refused = await pollUntil(
      'the node taint policy enforced',
      async () => {
        const err = await rejection(mergePatch({ metadata: { labels: { 'ulysses-test/forged': 'x' } } })).catch(() => undefined);
        return err?.statusCode === 403 ? err : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
    expect(refused.message).toContain(`may only add or remove the taint ulysses.io/unreachable on node ${node}`);
    await apiRequest(ctx.kc, 'PATCH', `/api/v1/nodes/${node}`, { body: { metadata: { labels: { 'ulysses-test/forged': null } } }, contentType: 'application/merge-patch+json' });
    const taints = async () => ((await apiRequest<{ spec: { taints?: { key: string }[] } }>(ctx.kc, 'GET', `/api/v1/nodes/${node}`)).spec.taints ?? []).map((t) => t.key);
    // node failure detection's own write (core/node-taints.ts), as the controller manager: admitted both ways
    expect(await updateNodeTaint(cm, node, NODE_UNREACHABLE_TAINT, { key: NODE_UNREACHABLE_TAINT, effect: 'NoExecute' })).toBe(true);
    expect(await taints()).toContain(NODE_UNREACHABLE_TAINT);
    // another taint, cordoning, or an annotation: refused
    const other = (await apiRequest<{ metadata: { resourceVersion: string }; spec: { taints?: unknown[] } }>(ctx.kc, 'GET', `/api/v1/nodes/${node}`));
    expect((await rejection(mergePatch({ spec: { taints: [...(other.spec.taints ?? []), { key: 'evil.example/evict', effect: 'NoExecute' }] } }))).statusCode).toBe(403);
    expect((await rejection(mergePatch({ spec: { unschedulable: true } }))).statusCode).toBe(403);
    expect((await rejection(mergePatch({ metadata: { annotations: { 'ulysses-test/forged': 'x' } } }))).statusCode).toBe(403);
    expect(await updateNodeTaint(cm, node, NODE_UNREACHABLE_TAINT)).toBe(true);
    expect(await taints()).not.toContain(NODE_UNREACHABLE_TAINT);
    expect(await taints()).not.toContain('evil.example/evict');
  });

  it("the extender's patch pods changes only its annotations, and the routing label on its own pods (pod-writes-policy.yaml)", async () => {
    const asExt = impersonating(ctx.kc, `system:serviceaccount:${ULYSSES_NAMESPACE}:ulysses-scheduler-extender`);
    // two pods nobody schedules: a tenant's, and one standing for an extender replica
    const pod = (namespace: string, name: string, labels: Record<string, string>) =>
      apiRequest(ctx.kc, 'POST', `/api/v1/namespaces/${namespace}/pods`, { body: { metadata: { name, labels }, spec: { schedulerName: 'nobody', containers: [{ name: 'c', image: 'example.invalid/none' }] } } });
    await pod('default', 'tenant', { app: 'tenant' });
    await pod(ULYSSES_NAMESPACE, 'extender-replica', { 'app.kubernetes.io/name': 'ulysses-scheduler-extender' });
    try {
      const patch = (namespace: string, name: string, body: unknown) => apiRequest(asExt, 'PATCH', `/api/v1/namespaces/${namespace}/pods/${name}`, { body, contentType: 'application/merge-patch+json' });
      const refused = await pollUntil(
        'the extender pod-writes policy enforced',
        async () => {
          const err = await rejection(patch('default', 'tenant', { metadata: { labels: { app: 'hijacked' } } })).catch(() => undefined);
          return err?.statusCode === 403 ? err : undefined;
        },
        { timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(refused.message).toContain('the Ulysses scheduler extender may change no label of pod default/tenant');
      // what it writes: the requeue nudge (extender/requeue.ts) on any pod, the routing label on its own
      await patch('default', 'tenant', { metadata: { annotations: { [REQUEUE_ANNOTATION]: '1' } } });
      await patch(ULYSSES_NAMESPACE, 'extender-replica', { metadata: { labels: { [LEADER_LABEL]: 'true' } } });
      await patch(ULYSSES_NAMESPACE, 'extender-replica', { metadata: { labels: { [LEADER_LABEL]: null } } });
      // what it may not: the routing label on a tenant's pod, another annotation, the spec
      expect((await rejection(patch('default', 'tenant', { metadata: { labels: { [LEADER_LABEL]: 'true' } } }))).statusCode).toBe(403);
      expect((await rejection(patch('default', 'tenant', { metadata: { annotations: { 'example.com/x': 'y' } } }))).message).toContain('may change only the annotations');
      expect((await rejection(patch('default', 'tenant', { spec: { activeDeadlineSeconds: 5 } }))).message).toContain('may not change the spec');
      const stored = await apiRequest<{ metadata: { labels: Record<string, string>; annotations?: Record<string, string> } }>(ctx.kc, 'GET', '/api/v1/namespaces/default/pods/tenant');
      expect(stored.metadata.labels).toEqual({ app: 'tenant' });
      expect(stored.metadata.annotations).toEqual({ [REQUEUE_ANNOTATION]: '1' });
    } finally {
      for (const [ns, name] of [['default', 'tenant'], [ULYSSES_NAMESPACE, 'extender-replica']] as const) await apiRequest(ctx.kc, 'DELETE', `/api/v1/namespaces/${ns}/pods/${name}`, { query: { gracePeriodSeconds: '0' } }).catch(() => undefined);
    }
  });
});

describe('control-plane flags on the real binaries', () => {
  /** Controllers a kcm log states are disabled. */
  const disabledIn = (log: string) => new Set([...log.matchAll(/controller is disabled"? controller="([a-z-]+)"/g)].map((m) => m[1]!));
  /** Disabled by default in kcm but enabled by kubeadm's entries, and controllers that must keep running. */
  const MUST_RUN = ['bootstrap-signer-controller', 'token-cleaner-controller', 'node-lifecycle-controller', 'garbage-collector-controller', 'namespace-controller', 'daemonset-controller', 'job-controller', 'serviceaccount-token-controller'];
  let singleFlag: Set<string>;

  it('kube-controller-manager with the ClusterConfiguration --controllers value disables the replaced controllers and keeps the rest', async () => {
    const kcm = ctx.state.processes.find((p) => p.name === 'kube-controller-manager')!;
    singleFlag = await pollUntil(
      'kcm logged its disabled controllers',
      () => {
        const d = disabledIn(readFileSync(kcm.logFile, 'utf8'));
        return REPLACED.every((c) => d.has(c)) ? d : undefined;
      },
      { timeoutMs: 30_000, explain: () => tailFile(kcm.logFile) },
    );
    expect(MUST_RUN.filter((c) => singleFlag.has(c))).toEqual([]);
    // the others are the ones kcm 1.36 disables by default (feature-gated)
    expect([...singleFlag].filter((c) => !REPLACED.includes(c))).toEqual(['selinux-warning-controller']);
  });

  it("kubeadm's --controllers flag followed by the patch's appended one has the same effect (a second, short-lived kcm)", async () => {
    const logFile = join(runDir, 'logs', 'kcm-patched.log');
    const args = [
      `--kubeconfig=${join(runDir, 'kubeconfigs', 'kube-controller-manager.kubeconfig')}`,
      '--leader-elect=false',
      '--secure-port=0',
      '--controllers=*,bootstrapsigner,tokencleaner', // what kubeadm writes
      `--controllers=${KCM_CONTROLLERS}`, // what the patch appends
      '--v=1',
    ];
    const child = spawn(binaryPath('kube-controller-manager'), args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    child.stdout.on('data', (d) => (log += d));
    child.stderr.on('data', (d) => (log += d));
    try {
      const disabled = await pollUntil(
        'patched kcm logged its disabled controllers',
        () => {
          if (child.exitCode !== null) throw new Error(`kube-controller-manager exited ${child.exitCode}:\n${log.slice(-3000)}`);
          const d = disabledIn(log);
          return REPLACED.every((c) => d.has(c)) ? d : undefined;
        },
        { timeoutMs: 60_000, explain: () => log.slice(-3000) },
      );
      expect([...disabled].sort()).toEqual([...singleFlag].sort());
    } finally {
      writeFileSync(logFile, log);
      if (child.pid) await stopProcess(child.pid);
    }
  });

  it.each([
    ['kube-scheduler-config.yaml', 'https://10.96.0.250:8888'],
    ['kube-scheduler-config-static.yaml', 'http://127.0.0.1:8888'],
  ])('kube-scheduler accepts %s with the extender at %s (and would refuse a broken one)', async (file, urlPrefix) => {
    const cfg = parseYaml(manifestFile(`kubeadm/${file}`)) as { clientConnection: { kubeconfig: string }; extenders: { weight: number; tlsConfig?: Record<string, string> }[] };
    cfg.clientConnection.kubeconfig = join(runDir, 'kubeconfigs', 'kube-scheduler.kubeconfig'); // instead of kubeadm's /etc/kubernetes/scheduler.conf
    // kube-scheduler reads its extender credentials when it builds the extenders: the files the install writes, here
    const https = urlPrefix.startsWith('https:');
    let tlsConfig: Record<string, string> | undefined;
    if (https) {
      const pki = await issueExtenderPki('10.96.0.250');
      const files = { certFile: join(runDir, 'extender-client.crt'), keyFile: join(runDir, 'extender-client.key'), caFile: join(runDir, 'extender-ca.crt') };
      writeFileSync(files.certFile, pki.client.cert);
      writeFileSync(files.keyFile, pki.client.key);
      writeFileSync(files.caFile, pki.ca.cert);
      tlsConfig = files;
      for (const e of cfg.extenders) {
        expect(e.tlsConfig).toEqual(SCHEDULER_EXTENDER_TLS_FILES);
        e.tlsConfig = tlsConfig;
      }
    }
    const tls = https ? { enableHTTPS: true, tlsConfig: expect.objectContaining(tlsConfig) } : {};
    const check = async (c: unknown, name: string) => {
      const file = join(runDir, `${name}.yaml`);
      const out = join(runDir, `${name}.effective.yaml`);
      writeFileSync(file, stringifyYaml(c));
      try {
        await run(binaryPath('kube-scheduler'), [`--config=${file}`, `--write-config-to=${out}`], { timeout: 60_000 });
        return {
          ok: true,
          effective: parseYaml(readFileSync(out, 'utf8')) as { extenders: unknown[]; profiles: Array<{ pluginConfig: Array<{ name: string; args: { ignoredResources?: string[] } }> }> },
          stderr: '',
        };
      } catch (err) {
        return { ok: false, effective: undefined, stderr: String((err as { stderr?: string }).stderr ?? err) };
      }
    };
    const good = await check(cfg, file.replace('.yaml', ''));
    expect(good.stderr).toBe('');
    // as kube-scheduler reads it: every pod filtered and scored by the first entry, bound by the second only when it requests the resource
    expect(good.effective!.extenders).toEqual([
      { urlPrefix, filterVerb: 'filter', prioritizeVerb: 'prioritize', weight: 1, nodeCacheCapable: true, httpTimeout: '5s', ...tls },
      { urlPrefix, bindVerb: 'bind', managedResources: [{ name: RESERVATION_RESOURCE, ignoredByScheduler: true }], httpTimeout: '5s', ...tls },
    ]);
    // ignoredByScheduler: the scheduler built from it gives NodeResourcesFit the resource to skip (pkg/scheduler/scheduler.go buildExtenders; written after Setup)
    const fit = good.effective!.profiles[0]!.pluginConfig.find((c) => c.name === 'NodeResourcesFit');
    expect(fit?.args.ignoredResources).toEqual([RESERVATION_RESOURCE]);
    const broken = structuredClone(cfg);
    broken.extenders[0]!.weight = 0;
    const bad = await check(broken, file.replace('.yaml', '-broken'));
    expect(bad.ok).toBe(false);
    expect(bad.stderr).toContain('extenders[0].weight: Invalid value: 0');
    // one binder only: kube-scheduler refuses the old "bind every pod" entry next to the binding one
    const twoBinders = structuredClone(cfg) as unknown as { extenders: Record<string, unknown>[] };
    twoBinders.extenders[0]!.bindVerb = 'bind';
    const refused = await check(twoBinders, file.replace('.yaml', '-two-binders'));
    expect(refused.ok).toBe(false);
    expect(refused.stderr).toContain('only one extender can implement bind');
  });
});
