/**
 * Who may claim what (manifests/base/admission/, core/claims.ts): the keys the admission policies
 * name are the code's, every `ulysses.io/` key the code defines is either governed by a policy or
 * listed here with why it needs none, the policies are bound with Deny and installed by every
 * overlay and by `ulysses install` (after a preflight), and the workloads this repository ships
 * grant what their pods claim. The policies' behaviour on a real apiserver:
 * test/integration/claims-vap.int.test.ts.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import type { CoreV1Api, V1Namespace, V1Pod } from '@kubernetes/client-node';
import {
  CLAIMS,
  GRANT_LABELS,
  GRANTED,
  HIGH_PRIORITY_CLASS,
  MIRROR_POD_ANNOTATION,
  RT_CLAIM_ANNOTATION,
  TDMA_CLAIM_ANNOTATION,
  grantLabels,
  grants,
  podClaims,
  ungrantedClaims,
} from '../../core/claims.ts';
import { CRITICALITY_LABEL } from '../../core/criticality.ts';
import { NODE_UNREACHABLE_TAINT } from '../../core/node-taints.ts';
import { RT_ANNOTATION, RT_CAPACITY_ANNOTATION, RT_CORES_ANNOTATION, RT_SCHEDULER_LABEL, RESERVATION_RESOURCE, TDMA_ANNOTATION, TDMA_NETWORK_LABEL, TDMA_SLOTS_ANNOTATION } from '../../scheduler-plugins/schedulability.ts';
import { ASSURANCE_ANNOTATION, ASSURANCE_POLICY_ANNOTATION } from '../../scheduler-plugins/assurance/assurance.ts';
import { BASE_ASSURANCE_ANNOTATION } from '../../scheduler-plugins/assurance/updater.ts';
import { RESERVED_NODE_ANNOTATION } from '../../scheduler-plugins/extender/state.ts';
import { KCM_HANDBACK_ANNOTATION } from '../../core/kcm.ts';
import { LEADER_LABEL, RESERVATION_EPOCH_ANNOTATION } from '../../scheduler-plugins/extender/leadership.ts';
import { REQUEUE_ANNOTATION } from '../../scheduler-plugins/extender/requeue.ts';
import { ADMISSION_OBJECTS, objectId, parseObjects } from '../../manifests/overlays.ts';
import { checkClaimsGranted } from '../../manifests/install.ts';
import { fiveGManifests } from '../../experiments/5g/manifests.ts';

const DIR = 'manifests/base/admission';
type Doc = Record<string, any>;
const docsOf = (file: string): Doc[] => parseAllDocuments(readFileSync(`${DIR}/${file}`, 'utf8')).map((d) => d.toJS() as Doc);
const claimsDocs = docsOf('claims-policy.yaml');
const nodeDocs = docsOf('node-attributes-policy.yaml');
const policy = (docs: Doc[], name: string) => docs.find((d) => d.kind === 'ValidatingAdmissionPolicy' && d.metadata.name === name)!;
const variable = (p: Doc, name: string) => p.spec.variables.find((v: { name: string }) => v.name === name).expression as string;
/** A CEL list or map literal of single-quoted strings, as JSON. */
const literal = (cel: string) => JSON.parse(cel.replace(/'/g, '"')) as unknown;
/** Every single-quoted `ulysses.io/` or `kubernetes.io/` string a policy's CEL names. */
const keysIn = (p: Doc) => new Set([...JSON.stringify(p.spec).matchAll(/'((?:ulysses|kubernetes)\.io\/[^']+)'/g)].map((m) => m[1]!));
const extenderSA = () => {
  const sa = parseAllDocuments(readFileSync('manifests/base/scheduler-extender/rbac.yaml', 'utf8')).map((d) => d.toJS() as Doc).find((d) => d.kind === 'ServiceAccount')!;
  return `system:serviceaccount:${sa.metadata.namespace}:${sa.metadata.name}`;
};

describe('the admission policies name the keys of the code', () => {
  it('ulysses-claims: the criticality label and class, the RT/TDMA demands with their grant labels, the reservation, the mirror annotation', () => {
    expect(RT_CLAIM_ANNOTATION).toBe(RT_ANNOTATION);
    expect(TDMA_CLAIM_ANNOTATION).toBe(TDMA_ANNOTATION);
    const p = policy(claimsDocs, 'ulysses-claims');
    expect(keysIn(p)).toEqual(
      new Set([CRITICALITY_LABEL, GRANT_LABELS.criticality, GRANT_LABELS.rt, GRANT_LABELS.tdma, RT_ANNOTATION, TDMA_ANNOTATION, RESERVED_NODE_ANNOTATION, MIRROR_POD_ANNOTATION]),
    );
    expect(literal(variable(p, 'grantOf'))).toEqual({ [RT_ANNOTATION]: GRANT_LABELS.rt, [TDMA_ANNOTATION]: GRANT_LABELS.tdma });
    expect(variable(p, 'highClass')).toContain(`'${HIGH_PRIORITY_CLASS}'`);
    expect(variable(p, 'highLabel')).toContain(`== 'high'`);
    const text = JSON.stringify(p.spec.validations);
    for (const label of Object.values(GRANT_LABELS)) expect(text).toContain(`${label}=${GRANTED}`);
    expect(p.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['pods', 'pods/status'] }]);
  });

  it('ulysses-workload-claims: the criticality label on Deployments, ReplicaSets (own and template) and Services', () => {
    const p = policy(claimsDocs, 'ulysses-workload-claims');
    expect(keysIn(p)).toEqual(new Set([CRITICALITY_LABEL, GRANT_LABELS.criticality]));
    const rules = p.spec.matchConstraints.resourceRules as { apiGroups: string[]; resources: string[]; operations: string[] }[];
    expect(rules.flatMap((r) => r.resources.map((res) => `${r.apiGroups[0]}/${res}`)).sort()).toEqual(
      ['apps/deployments', 'apps/deployments/status', 'apps/replicasets', 'apps/replicasets/status', '/services', '/services/status'].sort(),
    );
    for (const r of rules) expect(r.operations).toEqual(['CREATE', 'UPDATE']);
  });

  it("ulysses-node-attributes: the node labels and annotations the extender places by, the updater's keys and ServiceAccount", () => {
    const p = policy(nodeDocs, 'ulysses-node-attributes');
    expect(literal(variable(p, 'labelKeys'))).toEqual([RT_SCHEDULER_LABEL, TDMA_NETWORK_LABEL]);
    expect(literal(variable(p, 'annotationKeys'))).toEqual([ASSURANCE_ANNOTATION, BASE_ASSURANCE_ANNOTATION, RT_CAPACITY_ANNOTATION]);
    expect(literal(variable(p, 'updaterKeys'))).toEqual([ASSURANCE_ANNOTATION, BASE_ASSURANCE_ANNOTATION]);
    expect(variable(p, 'isUpdater')).toBe(`variables.user == '${extenderSA()}'`);
    // the updater writes exactly those two annotations of a node
    const updater = readFileSync('scheduler-plugins/assurance/updater.ts', 'utf8');
    expect(new Set([...updater.matchAll(/annotations: \{ \[([A-Z_]+)\]/g)].map((m) => m[1]))).toEqual(new Set(['BASE_ASSURANCE_ANNOTATION', 'ASSURANCE_ANNOTATION']));
    expect(p.spec.matchConstraints.resourceRules).toEqual([{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE', 'UPDATE'], resources: ['nodes', 'nodes/status'] }]);
  });

  it('every ulysses.io key the components define is governed by a policy or needs none, for the reason given', () => {
    const governed: Record<string, string> = {
      [CRITICALITY_LABEL]: 'claim: admission/claims-policy.yaml',
      [RT_ANNOTATION]: 'claim: admission/claims-policy.yaml',
      [TDMA_ANNOTATION]: 'claim: admission/claims-policy.yaml',
      [ASSURANCE_ANNOTATION]: 'node attribute: admission/node-attributes-policy.yaml',
      [BASE_ASSURANCE_ANNOTATION]: 'node attribute: admission/node-attributes-policy.yaml',
      [RT_CAPACITY_ANNOTATION]: 'node attribute: admission/node-attributes-policy.yaml',
      [RT_SCHEDULER_LABEL]: 'node attribute: admission/node-attributes-policy.yaml',
      [TDMA_NETWORK_LABEL]: 'node attribute: admission/node-attributes-policy.yaml',
      [RESERVED_NODE_ANNOTATION]: 'reservation: scheduler-extender/reservation-policy.yaml',
      [RT_CORES_ANNOTATION]: 'reservation: scheduler-extender/reservation-policy.yaml',
      [TDMA_SLOTS_ANNOTATION]: 'reservation: scheduler-extender/reservation-policy.yaml',
      [RESERVATION_EPOCH_ANNOTATION]: 'reservation: scheduler-extender/reservation-epoch-policy.yaml',
      [NODE_UNREACHABLE_TAINT]: 'a taint (kubelets may not change taints, NodeRestriction); controller-manager/node-taint-policy.yaml',
      [ASSURANCE_POLICY_ANNOTATION]: "no claim: narrows where the pod itself may go, takes nothing from others",
      [REQUEUE_ANNOTATION]: "no claim: requeues the writer's own pending pod in kube-scheduler",
      [LEADER_LABEL]: "no claim: marks the extender's leader pod (pods in ulysses-system)",
      [KCM_HANDBACK_ANNOTATION]: "no claim: on kcm's static pod, written by the handback through the node's manifest (mirror pods cannot be changed through the API)",
      [RESERVATION_RESOURCE]: 'no claim: an extended resource no node offers, only routes the pod to the bind of the extender',
    };
    const defined = new Set<string>();
    const walk = (dir: string): void => {
      for (const e of readdirSync(dir)) {
        const p = join(dir, e);
        if (statSync(p).isDirectory()) walk(p);
        else if (p.endsWith('.ts') && !p.endsWith('.test.ts')) {
          for (const m of readFileSync(p, 'utf8').matchAll(/export const [A-Z_]+ = '(ulysses\.io\/[^']+)'/g)) defined.add(m[1]!);
        }
      }
    };
    for (const d of ['core', 'controller-manager', 'scheduler-plugins', 'kubelet-shim', 'apf-configs']) walk(d);
    expect(defined.size).toBeGreaterThan(10);
    expect([...defined].filter((k) => !(k in governed))).toEqual([]);
  });
});

describe('bindings and installation', () => {
  it('each policy is bound with Deny; the objects are ADMISSION_OBJECTS, in manifests/base through admission/', () => {
    const docs = [...claimsDocs, ...nodeDocs];
    for (const p of docs.filter((d) => d.kind === 'ValidatingAdmissionPolicy')) {
      expect(p.spec.failurePolicy, p.metadata.name).toBe('Fail');
      const b = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding' && d.spec.policyName === p.metadata.name);
      expect(b?.spec, p.metadata.name).toEqual({ policyName: p.metadata.name, validationActions: ['Deny'] });
    }
    const ids = [...parseObjects(readFileSync(`${DIR}/claims-policy.yaml`, 'utf8'), 'c'), ...parseObjects(readFileSync(`${DIR}/node-attributes-policy.yaml`, 'utf8'), 'n')].map(objectId);
    expect(ids.sort()).toEqual([...ADMISSION_OBJECTS].sort());
    expect(parseYaml(readFileSync(`${DIR}/kustomization.yaml`, 'utf8')).resources).toEqual(['claims-policy.yaml', 'node-attributes-policy.yaml']);
    expect(parseYaml(readFileSync('manifests/base/kustomization.yaml', 'utf8')).resources).toContain('admission');
    // Ulysses' own namespace grants criticality to its components' pods
    const ns = parseYaml(readFileSync('manifests/base/namespace.yaml', 'utf8')) as V1Namespace;
    expect(grants(ns.metadata?.labels, 'criticality')).toBe(true);
  });
});

describe('core/claims.ts', () => {
  const pod = (labels: Record<string, string> = {}, annotations: Record<string, string> = {}, priorityClassName?: string, extra: Partial<V1Pod['metadata']> = {}): V1Pod => ({
    metadata: { name: 'p', namespace: 'ns', labels, annotations, ...extra },
    spec: { containers: [], ...(priorityClassName ? { priorityClassName } : {}) },
  });

  it('podClaims: high (label or the ulysses-high class), RT and TDMA demands; low, none and other classes claim nothing', () => {
    expect(podClaims(pod())).toEqual([]);
    expect(podClaims(pod({ [CRITICALITY_LABEL]: 'low' }, {}, 'ulysses-low'))).toEqual([]);
    expect(podClaims(pod({ [CRITICALITY_LABEL]: 'High' }))).toEqual([]); // malformed: counted as none (core/criticality.ts)
    expect(podClaims(pod({ [CRITICALITY_LABEL]: 'high' }))).toEqual(['criticality']);
    expect(podClaims(pod({}, {}, HIGH_PRIORITY_CLASS))).toEqual(['criticality']);
    expect(podClaims(pod({}, { [TDMA_ANNOTATION]: '{}', [RT_ANNOTATION]: '{}' }))).toEqual(['rt', 'tdma']);
    expect(podClaims({})).toEqual([]);
  });

  it('grants and grantLabels: only the value "true" grants', () => {
    expect(grantLabels(CLAIMS)).toEqual({ 'ulysses.io/allow-criticality': 'true', 'ulysses.io/allow-rt': 'true', 'ulysses.io/allow-tdma': 'true' });
    expect(grants(grantLabels(['rt']), 'rt')).toBe(true);
    expect(grants(grantLabels(['rt']), 'tdma')).toBe(false);
    expect(grants({ [GRANT_LABELS.criticality]: 'yes' }, 'criticality')).toBe(false);
    expect(grants(undefined, 'criticality')).toBe(false);
  });

  it('ungrantedClaims: per namespace, the claims missing a grant, a few pods and the command; terminating pods left out', () => {
    const pods = [
      { ...pod({ [CRITICALITY_LABEL]: 'high' }), metadata: { name: 'a', namespace: 'open', labels: { [CRITICALITY_LABEL]: 'high' } } },
      { metadata: { name: 'b', namespace: 'rt-only', annotations: { [RT_ANNOTATION]: '{}', [TDMA_ANNOTATION]: '{}' } } },
      { metadata: { name: 'c', namespace: 'granted', labels: { [CRITICALITY_LABEL]: 'high' } } },
      { metadata: { name: 'd', namespace: 'leaving', labels: { [CRITICALITY_LABEL]: 'high' }, deletionTimestamp: new Date() } },
      ...['e1', 'e2', 'e3', 'e4'].map((name) => ({ metadata: { name, namespace: 'open', annotations: { [TDMA_ANNOTATION]: '{}' } } })),
    ];
    const labels: Record<string, Record<string, string>> = { granted: grantLabels(['criticality']), 'rt-only': grantLabels(['rt']) };
    expect(ungrantedClaims(pods, (ns) => labels[ns])).toEqual([
      { namespace: 'open', claims: ['criticality', 'tdma'], pods: ['a', 'e1', 'e2'], fix: 'kubectl label namespace open ulysses.io/allow-criticality=true ulysses.io/allow-tdma=true' },
      { namespace: 'rt-only', claims: ['tdma'], pods: ['b'], fix: 'kubectl label namespace rt-only ulysses.io/allow-tdma=true' },
    ]);
  });
});

describe('ulysses install: preflight of the claims', () => {
  const core = (namespaces: V1Namespace[], pods: V1Pod[]) =>
    ({ listNamespace: async () => ({ items: namespaces }), listPodForAllNamespaces: async () => ({ items: pods }) }) as unknown as CoreV1Api;
  const highPod = (namespace: string, name = 'upf'): V1Pod => ({ metadata: { name, namespace, labels: { [CRITICALITY_LABEL]: 'high' } } });

  it('refuses, before any change, a cluster whose running pods claim what their namespace does not grant, naming the fix', async () => {
    const err = await checkClaimsGranted(core([{ metadata: { name: 'edge' } }], [highPod('edge')]), []).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain('1 namespace(s) run pods whose claims the namespace does not grant');
    expect(err?.message).toContain('edge: criticality (pods upf): kubectl label namespace edge ulysses.io/allow-criticality=true');
  });

  it('passes when the namespaces grant them, counting the labels the install itself applies (ulysses-system)', async () => {
    await checkClaimsGranted(core([{ metadata: { name: 'edge', labels: grantLabels(['criticality']) } }], [highPod('edge')]), []);
    const rendered = parseObjects(readFileSync('manifests/base/namespace.yaml', 'utf8'), 'namespace.yaml');
    await checkClaimsGranted(core([{ metadata: { name: 'ulysses-system' } }], [highPod('ulysses-system', 'ulysses-controller-manager-0')]), rendered);
  });
});

describe('workloads of this repository grant what their pods claim', () => {
  it('experiments/5g: the namespace of the critical UPF is labelled for it, and only that one', () => {
    const objs = fiveGManifests();
    const namespaces = new Map(objs.filter((o) => o.kind === 'Namespace').map((o) => [o.metadata.name, o.metadata.labels]));
    const templates = objs.filter((o) => o.kind === 'Deployment').map((o) => ({ ...(o as unknown as { spec: { template: V1Pod } }).spec.template, metadata: { ...(o as unknown as { spec: { template: V1Pod } }).spec.template.metadata, namespace: o.metadata.namespace } }));
    expect(ungrantedClaims(templates, (ns) => namespaces.get(ns))).toEqual([]);
    expect([...namespaces].filter(([, l]) => grants(l, 'criticality')).map(([n]) => n)).toEqual(['open5gs']);
  });
});
