/**
 * The APF exemption of the critical namespace (thesis §5.3.3) on the testbed's real kube-apiserver:
 * requests on resources in `ulysses-critical` made by the namespace's own ServiceAccounts and by the
 * identities on the failover path (kubelets, kube-scheduler, kube-controller-manager's controllers)
 * are classified into the built-in `exempt` priority level by our FlowSchema (response headers
 * X-Kubernetes-PF-*-UID and the apiserver_flowcontrol_dispatched_requests_total metric); the same
 * requests from an anonymous client, another namespace's ServiceAccount or an ordinary user are not,
 * nor are requests elsewhere; removing the FlowSchema switches it off at runtime.
 *
 * The admin identity is in system:masters, whose requests always match the built-in `exempt`
 * FlowSchema (precedence 1), so the probes use ServiceAccount tokens (TokenRequest API) and client
 * certificates from the testbed CA.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig, type V1FlowSchema, type V1FlowSchemaList, type V1PriorityLevelConfiguration } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { useSharedTestbed } from './harness.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { ApiError, apiRequest, isNotFound } from '../../core/kube.ts';
import { ApfProbe, PROBE_SA, configMapsPath } from './apf-probe.ts';
import {
  BUILTIN_MIN_NON_EXEMPT_PRECEDENCE,
  DEFAULT_FLOW_SCHEMA_NAME,
  DEFAULT_MATCHING_PRECEDENCE,
  EXEMPT_PRIORITY_LEVEL,
  FLOWCONTROL_API_PATH,
  criticalNamespaceFlowSchemas,
  shadowingFlowSchemas,
} from '../../apf-configs/flowschemas.ts';
import {
  applyApfExemption,
  dispatchedRequests,
  observedPriorityLevel,
  removeApfExemption,
  type ObservedClassification,
} from '../../apf-configs/apply.ts';

const CRIT = 'ulysses-critical';
const OTHER = 'apf-other';
const yamlFile = fileURLToPath(new URL('../../apf-configs/critical-namespace.yaml', import.meta.url));
const run = promisify(execFile);

let state: testbed.TestbedState;
let kc: KubeConfig; // admin (system:masters)
let exemptPlUid: string;
const observations: Record<string, unknown> = {};

const cmPath = configMapsPath;

let apf: ApfProbe;
const probe = (ns: string, path: string) => apf.probe(ns, path);
const waitClassified = (what: string, ns: string, path: string, want: (o: ObservedClassification) => boolean) => apf.waitClassified(what, ns, path, want);

const kubectl = (...args: string[]) => run(binaryPath('kubectl'), ['--kubeconfig', state.kubeconfig, ...args]);

describe('APF exemption of the critical namespace on the real apiserver', () => {
  const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 0 });
  beforeAll(async () => {
    ({ state, kc } = t);
    expect(new URL(state.apiserver).hostname).toBe('127.0.0.1');
    apf = new ApfProbe(kc, state);
    await apf.setup(CRIT);
    await apf.setup(OTHER);
    // both probe identities may list namespaces (a cluster-scoped request), for includeClusterScoped
    await apiRequest(kc, 'POST', '/apis/rbac.authorization.k8s.io/v1/clusterroles', {
      body: { metadata: { name: 'apf-probe-namespace-reader' }, rules: [{ apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list'] }] },
    });
    await apiRequest(kc, 'POST', '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings', {
      body: {
        metadata: { name: 'apf-probe-namespace-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'apf-probe-namespace-reader' },
        subjects: [CRIT, OTHER].map((namespace) => ({ kind: 'ServiceAccount', name: PROBE_SA, namespace })),
      },
    });
    const pl = await apiRequest<V1PriorityLevelConfiguration>(kc, 'GET', `${FLOWCONTROL_API_PATH}/prioritylevelconfigurations/${EXEMPT_PRIORITY_LEVEL}`);
    expect(pl.spec?.type).toBe('Exempt');
    exemptPlUid = pl.metadata!.uid!;
    observations.exemptPriorityLevelUID = exemptPlUid;
  });
  afterAll(async () => {
    console.log('[apf] observations ' + JSON.stringify(observations, null, 2));
  });

  it('precedence 50 beats every built-in non-exempt FlowSchema; precedence 1 is reserved', async () => {
    const all = await apiRequest<V1FlowSchemaList>(kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas`);
    const builtins = all.items.map((f) => `${f.metadata!.name}:${f.spec!.matchingPrecedence}:${f.spec!.priorityLevelConfiguration.name}`);
    observations.builtinFlowSchemas = builtins;
    const nonExempt = all.items.filter((f) => f.spec!.priorityLevelConfiguration.name !== EXEMPT_PRIORITY_LEVEL);
    const minNonExempt = Math.min(...nonExempt.map((f) => f.spec!.matchingPrecedence!));
    expect(minNonExempt).toBe(BUILTIN_MIN_NON_EXEMPT_PRECEDENCE);
    expect(DEFAULT_MATCHING_PRECEDENCE).toBeGreaterThan(1);
    expect(DEFAULT_MATCHING_PRECEDENCE).toBeLessThan(minNonExempt);
    const [ours] = criticalNamespaceFlowSchemas({ namespaces: [CRIT] });
    expect(shadowingFlowSchemas(ours!, all.items)).toEqual([]);

    // the apiserver itself refuses precedence 1 for any FlowSchema but `exempt` (dry run: nothing persists)
    const body = criticalNamespaceFlowSchemas({ namespaces: [CRIT], name: 'apf-precedence-probe' })[0]!;
    body.spec!.matchingPrecedence = 1;
    const err = await apiRequest(kc, 'POST', `${FLOWCONTROL_API_PATH}/flowschemas`, { query: { dryRun: 'All' }, body }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).statusCode).toBe(422);
    expect((err as ApiError).message).toContain("only the schema named 'exempt' may have matchingPrecedence 1");
    observations.precedence1Rejection = (err as ApiError).message;
  });

  it('refuses a custom priority level of type Exempt (only the built-in `exempt` may be Exempt)', async () => {
    const err = await apiRequest(kc, 'POST', `${FLOWCONTROL_API_PATH}/prioritylevelconfigurations`, {
      body: { apiVersion: 'flowcontrol.apiserver.k8s.io/v1', kind: 'PriorityLevelConfiguration', metadata: { name: 'ulysses-exempt' }, spec: { type: 'Exempt', exempt: {} } },
    }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect([400, 422]).toContain((err as ApiError).statusCode);
    expect((err as ApiError).message).toContain("must be 'Exempt' if and only if `name` is 'exempt'");
    observations.customExemptRejection = { status: (err as ApiError).statusCode, message: (err as ApiError).message };
    const gone = await apiRequest(kc, 'GET', `${FLOWCONTROL_API_PATH}/prioritylevelconfigurations/ulysses-exempt`).catch((e: unknown) => e);
    expect(isNotFound(gone)).toBe(true);
  });

  it('exempts requests in the critical namespace only, counted in the dispatch metric, and toggles off at runtime', async () => {
    // before: the service account's request is queued like any other (service-accounts -> workload-low)
    const before = await probe(CRIT, cmPath(CRIT));
    observations.criticalBeforeApply = before;
    expect(before.status).toBe(200);
    expect(before.priorityLevelUID).toBeDefined();
    expect(before.priorityLevelUID).not.toBe(exemptPlUid);

    const res = await applyApfExemption(kc, { namespaces: [CRIT], waitDigestedMs: 30_000 });
    expect(res.shadowedBy).toEqual([]);
    const ours = res.flowSchemas[0]!;
    expect(ours.metadata!.name).toBe(DEFAULT_FLOW_SCHEMA_NAME);
    expect(ours.spec!.priorityLevelConfiguration.name).toBe(EXEMPT_PRIORITY_LEVEL);
    observations.ourFlowSchemaUID = ours.metadata!.uid;

    const on = await waitClassified('critical-namespace request classified as exempt', CRIT, cmPath(CRIT), (o) => o.priorityLevelUID === exemptPlUid);
    observations.criticalAfterApply = on;
    expect(on.status).toBe(200);
    expect(on.flowSchemaUID).toBe(ours.metadata!.uid);
    expect(on).toMatchObject({ flowSchema: DEFAULT_FLOW_SCHEMA_NAME, priorityLevel: EXEMPT_PRIORITY_LEVEL });

    const other = await probe(OTHER, cmPath(OTHER));
    observations.otherNamespaceAfterApply = other;
    expect(other.status).toBe(200);
    expect(other.priorityLevelUID).toBeDefined();
    expect(other.priorityLevelUID).not.toBe(exemptPlUid);
    expect(other.flowSchemaUID).not.toBe(ours.metadata!.uid);

    // classification is by the request's namespace and who asks, before authorization: another
    // namespace's SA is refused (403) and its request was classified, but not as exempt
    const cross = await probe(OTHER, cmPath(CRIT));
    observations.otherSaInCriticalNamespace = cross;
    expect(cross.status).toBe(403);
    expect(cross.flowSchemaUID).toBeDefined();
    expect(cross.flowSchemaUID).not.toBe(ours.metadata!.uid);
    expect(cross.priorityLevelUID).not.toBe(exemptPlUid);

    // the dispatch metric of our FlowSchema at the exempt level grows with the critical requests
    const m0 = await dispatchedRequests(kc, { flowSchema: DEFAULT_FLOW_SCHEMA_NAME, priorityLevel: EXEMPT_PRIORITY_LEVEL });
    const N = 10;
    for (let i = 0; i < N; i++) expect((await observedPriorityLevel(apf.saKc[CRIT]!, cmPath(CRIT))).priorityLevelUID).toBe(exemptPlUid);
    const m1 = await dispatchedRequests(kc, { flowSchema: DEFAULT_FLOW_SCHEMA_NAME, priorityLevel: EXEMPT_PRIORITY_LEVEL });
    observations.dispatchedOursExempt = { before: m0, after: m1, requests: N };
    expect(m1 - m0).toBeGreaterThanOrEqual(N);

    // idempotent: re-applying the same spec changes nothing (same object, same generation and version)
    const again1 = (await applyApfExemption(kc, { namespaces: [CRIT] })).flowSchemas[0]!;
    const again2 = (await applyApfExemption(kc, { namespaces: [CRIT] })).flowSchemas[0]!;
    expect(again1.metadata!.uid).toBe(ours.metadata!.uid);
    expect(again2.metadata!.generation).toBe(1);
    expect(again2.metadata!.resourceVersion).toBe(again1.metadata!.resourceVersion);

    // runtime toggle off: the same request falls back to a limited level
    expect(await removeApfExemption(kc)).toBe(true);
    expect(await removeApfExemption(kc)).toBe(false);
    const off = await waitClassified('critical-namespace request back to a limited level', CRIT, cmPath(CRIT), (o) => !!o.priorityLevelUID && o.priorityLevelUID !== exemptPlUid);
    observations.criticalAfterRemove = off;
    expect(off.status).toBe(200);
    expect(off.flowSchemaUID).toBe(before.flowSchemaUID);
    expect(off.priorityLevelUID).toBe(before.priorityLevelUID);
    const m2 = await dispatchedRequests(kc, { flowSchema: DEFAULT_FLOW_SCHEMA_NAME, priorityLevel: EXEMPT_PRIORITY_LEVEL });
    for (let i = 0; i < 5; i++) await observedPriorityLevel(apf.saKc[CRIT]!, cmPath(CRIT));
    const m3 = await dispatchedRequests(kc, { flowSchema: DEFAULT_FLOW_SCHEMA_NAME, priorityLevel: EXEMPT_PRIORITY_LEVEL });
    observations.dispatchedOursExemptAfterRemove = { before: m2, after: m3, requests: 5 };
    expect(m3).toBe(m2);
  });

  it('exempts only the failover-path identities and the critical ServiceAccounts: not an anonymous client, another namespace\'s ServiceAccount or an ordinary user', async () => {
    // APF classifies after authentication and before authorization (DefaultBuildHandlerChain): the
    // testbed's apiserver keeps anonymous auth on (the default), so a request without credentials is
    // system:anonymous in system:unauthenticated, classified, then refused by RBAC (403)
    const path = cmPath(CRIT);
    // created by kube-controller-manager (--use-service-account-credentials) when the controller starts
    const rsController = await pollUntil('a token of kube-system/replicaset-controller', () => apf.serviceAccountKc('kube-system', 'replicaset-controller'), { timeoutMs: 60_000 });
    await apf.setup('kube-system', false); // a kube-system ServiceAccount that is not on the list
    const schedulerKc = new KubeConfig();
    schedulerKc.loadFromFile(join(state.runDir, 'kubeconfigs', 'kube-scheduler.kubeconfig'));
    const exempt = {
      criticalSa: apf.saKc[CRIT]!,
      node: await apf.certificateKc({ file: 'apf-probe-node', cn: 'system:node:apf-probe-node', org: 'system:nodes' }),
      kubeScheduler: schedulerKc,
      replicaSetControllerSa: rsController,
    };
    const notExempt = {
      anonymous: apf.kubeConfigAs(),
      otherNamespaceSa: apf.saKc[OTHER]!,
      ordinaryUser: await apf.certificateKc({ file: 'apf-probe-user', cn: 'apf-probe-user' }),
      otherKubeSystemSa: apf.saKc['kube-system']!,
    };
    // what each falls back to without our FlowSchema (built-in FlowSchemas)
    const fallback = { anonymous: 'global-default', otherNamespaceSa: 'service-accounts', ordinaryUser: 'global-default', otherKubeSystemSa: 'kube-system-service-accounts' };

    const ours = (await applyApfExemption(kc, { namespaces: [CRIT], waitDigestedMs: 30_000 })).flowSchemas[0]!;
    try {
      await waitClassified('critical SA exempt', CRIT, path, (o) => o.flowSchemaUID === ours.metadata!.uid);
      // soft: every identity is reported, not only the first that fails
      const seen: Record<string, unknown> = (observations.identities = {});
      for (const [who, ikc] of Object.entries(exempt)) {
        const o = (seen[who] = await apf.probeAs(ikc, path));
        expect.soft(o.flowSchemaUID, who).toBe(ours.metadata!.uid);
        expect.soft(o.priorityLevelUID, who).toBe(exemptPlUid);
      }
      for (const [who, ikc] of Object.entries(notExempt)) {
        const o = (seen[who] = await apf.probeAs(ikc, path));
        expect.soft(o.status, who).toBe(403); // authenticated (anonymous included), classified, refused by RBAC
        expect.soft(o.flowSchemaUID, who).toBeDefined();
        expect.soft(o.flowSchemaUID, who).not.toBe(ours.metadata!.uid);
        expect.soft(o.priorityLevelUID, who).not.toBe(exemptPlUid);
        expect.soft(o.flowSchema, who).toBe(fallback[who as keyof typeof fallback]);
      }
    } finally {
      expect(await removeApfExemption(kc)).toBe(true);
    }
  });

  it("includeClusterScoped also exempts the critical service accounts' cluster-scoped requests, nobody else's", async () => {
    const nsList = '/api/v1/namespaces';
    const before = await probe(CRIT, nsList);
    expect(before.status).toBe(200);
    expect(before.priorityLevelUID).not.toBe(exemptPlUid);
    const name = 'ulysses-critical-cluster-scoped';
    const ours = (await applyApfExemption(kc, { namespaces: [CRIT], name, includeClusterScoped: true, waitDigestedMs: 30_000 })).flowSchemas[0]!;
    try {
      const on = await waitClassified('critical SA cluster-scoped request exempt', CRIT, nsList, (o) => o.priorityLevelUID === exemptPlUid);
      expect(on.flowSchemaUID).toBe(ours.metadata!.uid);
      const other = await probe(OTHER, nsList);
      observations.clusterScoped = { criticalSa: on, otherSa: other };
      expect(other.status).toBe(200);
      expect(other.priorityLevelUID).not.toBe(exemptPlUid);
    } finally {
      expect(await removeApfExemption(kc, name)).toBe(true);
    }
  });

  it('the generated critical-namespace.yaml applies with kubectl --server-side, co-exists with the TS API and rolls back with kubectl delete', async () => {
    const applied = await kubectl('apply', '--server-side', '-f', yamlFile);
    observations.kubectlApply = applied.stdout.trim();
    const fs = await apiRequest<V1FlowSchema>(kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas/${DEFAULT_FLOW_SCHEMA_NAME}`);
    const want = criticalNamespaceFlowSchemas({ namespaces: [CRIT] })[0]!;
    expect(fs.spec).toEqual(want.spec);
    expect(fs.metadata!.labels).toEqual(want.metadata!.labels);
    await waitClassified('exempt after kubectl apply', CRIT, cmPath(CRIT), (o) => o.priorityLevelUID === exemptPlUid && o.flowSchemaUID === fs.metadata!.uid);

    // the TS API applies the same spec on top without conflict (force) and without a new generation
    const ts = (await applyApfExemption(kc, { namespaces: [CRIT] })).flowSchemas[0]!;
    expect(ts.metadata!.uid).toBe(fs.metadata!.uid);
    expect(ts.metadata!.generation).toBe(fs.metadata!.generation);
    expect(new Set(ts.metadata!.managedFields!.filter((f) => f.operation === 'Apply' && !f.subresource).map((f) => f.manager))).toEqual(new Set(['kubectl', 'ulysses']));

    const deleted = await kubectl('delete', '-f', yamlFile);
    observations.kubectlDelete = deleted.stdout.trim();
    const gone = await apiRequest(kc, 'GET', `${FLOWCONTROL_API_PATH}/flowschemas/${DEFAULT_FLOW_SCHEMA_NAME}`).catch((e: unknown) => e);
    expect(isNotFound(gone)).toBe(true);
    await waitClassified('limited again after kubectl delete', CRIT, cmPath(CRIT), (o) => !!o.priorityLevelUID && o.priorityLevelUID !== exemptPlUid);
  });
});
