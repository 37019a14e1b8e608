/**
 * The kustomize overlays of manifests/ as data, and their rendering with the real `kubectl kustomize`
 * (a kubectl the caller names). Used by the tests and usable by tooling; no cluster access.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

const run = promisify(execFile);

export const MANIFESTS_DIR = fileURLToPath(new URL('.', import.meta.url));
export const ULYSSES_NAMESPACE = 'ulysses-system';
export const ULYSSES_CONFIG_NAME = 'default';

/** A rendered Kubernetes object (only the fields the checks read are typed). */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

/** Who may claim what (manifests/base/admission): in every overlay, installed with the namespace and the CRD. */
export const ADMISSION_OBJECTS = [
  'ValidatingAdmissionPolicy/ulysses-claims',
  'ValidatingAdmissionPolicyBinding/ulysses-claims',
  'ValidatingAdmissionPolicy/ulysses-workload-claims',
  'ValidatingAdmissionPolicyBinding/ulysses-workload-claims',
  'ValidatingAdmissionPolicy/ulysses-node-attributes',
  'ValidatingAdmissionPolicyBinding/ulysses-node-attributes',
] as const;

/** Objects every overlay carries (manifests/base). */
const COMMON = ['Namespace/ulysses-system', 'CustomResourceDefinition/ulyssesconfigs.ulysses.io', 'UlyssesConfig/default', ...ADMISSION_OBJECTS];

/** What each component directory (manifests/base/<component>) contributes, as Kind/name. */
export const COMPONENT_OBJECTS = {
  'controller-manager': [
    'ServiceAccount/ulysses-controller-manager',
    'ClusterRole/ulysses:controller-manager',
    'ClusterRoleBinding/ulysses:controller-manager',
    'Role/ulysses:controller-manager:leader-election',
    'RoleBinding/ulysses:controller-manager:leader-election',
    'Role/ulysses:kcm-handback',
    'RoleBinding/ulysses:kcm-handback',
    'Lease/ulysses-controller-manager',
    'ClusterRole/ulysses:apf-exemption',
    'ClusterRoleBinding/ulysses:apf-exemption',
    'ValidatingAdmissionPolicy/ulysses-controller-manager-node-taint',
    'ValidatingAdmissionPolicyBinding/ulysses-controller-manager-node-taint',
    'Deployment/ulysses-controller-manager',
    'PodDisruptionBudget/ulysses-controller-manager',
    'Service/ulysses-controller-manager-metrics',
  ],
  'scheduler-extender': [
    'ServiceAccount/ulysses-scheduler-extender',
    'ClusterRole/ulysses:scheduler-extender',
    'ClusterRoleBinding/ulysses:scheduler-extender',
    'Role/ulysses:scheduler-extender:leader-election',
    'RoleBinding/ulysses:scheduler-extender:leader-election',
    'Role/ulysses:scheduler-extender:routing',
    'RoleBinding/ulysses:scheduler-extender:routing',
    'Lease/ulysses-scheduler-extender',
    'Deployment/ulysses-scheduler-extender',
    'PodDisruptionBudget/ulysses-scheduler-extender',
    'ConfigMap/ulysses-scheduler-extender',
    'Service/ulysses-scheduler-extender',
    'ValidatingAdmissionPolicy/ulysses-reservations',
    'ValidatingAdmissionPolicyBinding/ulysses-reservations',
    'ValidatingAdmissionPolicy/ulysses-reservation-epoch',
    'ValidatingAdmissionPolicyBinding/ulysses-reservation-epoch',
    'ValidatingAdmissionPolicy/ulysses-scheduler-extender-pod-writes',
    'ValidatingAdmissionPolicyBinding/ulysses-scheduler-extender-pod-writes',
  ],
  'kubelet-shim': [
    'ServiceAccount/ulysses-kubelet-shim',
    'ClusterRole/ulysses:kubelet-shim',
    'ClusterRoleBinding/ulysses:kubelet-shim',
    'ClusterRole/ulysses:kubelet-shim:pod',
    'ClusterRoleBinding/ulysses:kubelet-shim:pod',
    'Role/ulysses:kubelet-shim:events',
    'RoleBinding/ulysses:kubelet-shim:events',
    'ValidatingAdmissionPolicy/ulysses-kubelet-shim-status',
    'ValidatingAdmissionPolicyBinding/ulysses-kubelet-shim-status',
    'DaemonSet/ulysses-kubelet-shim',
  ],
  apf: ['FlowSchema/ulysses-critical-namespaces'],
} as const satisfies Record<string, readonly string[]>;

export type Component = keyof typeof COMPONENT_OBJECTS;
export const COMPONENTS = Object.keys(COMPONENT_OBJECTS) as Component[];

/** Overlay name -> the components it installs (manifests/overlays/<name>). */
export const OVERLAYS: Record<string, readonly Component[]> = {
  kubeadm: COMPONENTS,
  'controller-manager': ['controller-manager'],
  'scheduler-extender': ['scheduler-extender'],
  'kubelet-shim': ['kubelet-shim'],
  apf: ['apf'],
};

/** The Kind/name set an overlay must render to, exactly. */
export function expectedObjects(overlay: string): string[] {
  const comps = OVERLAYS[overlay];
  if (!comps) throw new Error(`unknown overlay "${overlay}" (known: ${Object.keys(OVERLAYS).join(', ')})`);
  return [...COMMON, ...comps.flatMap((c) => COMPONENT_OBJECTS[c])].sort();
}

export const objectId = (o: K8sObject) => `${o.kind}/${o.metadata.name}`;

/** Parses multi-document YAML; a document that is not an object with kind and metadata.name throws naming its index. */
export function parseObjects(text: string, source: string): K8sObject[] {
  const out: K8sObject[] = [];
  parseAllDocuments(text).forEach((doc, i) => {
    if (doc.errors.length) throw new Error(`${source}: document ${i}: ${doc.errors[0]!.message}`);
    const o = doc.toJS() as K8sObject | null;
    if (o === null) return;
    if (typeof o !== 'object' || typeof o.kind !== 'string' || typeof o.apiVersion !== 'string' || typeof o.metadata?.name !== 'string') {
      throw new Error(`${source}: document ${i}: not a Kubernetes object (apiVersion, kind and metadata.name required)`);
    }
    out.push(o);
  });
  return out;
}

/** `kubectl kustomize manifests/overlays/<overlay>` with the given kubectl (the tests pass the testbed's pinned one). */
export async function renderOverlay(overlay: string, kubectl: string): Promise<{ yaml: string; objects: K8sObject[] }> {
  const dir = fileURLToPath(new URL(`./overlays/${overlay}`, import.meta.url));
  const { stdout } = await run(kubectl, ['kustomize', dir], { maxBuffer: 16 << 20 });
  return { yaml: stdout, objects: parseObjects(stdout, `kubectl kustomize ${dir}`) };
}

/** A file under manifests/ as text. */
export function manifestFile(rel: string): string {
  return readFileSync(new URL(`./${rel}`, import.meta.url), 'utf8');
}

/** The value of the kube-controller-manager --controllers flag the kubeadm patch appends. */
export function kcmControllersFromPatch(): string {
  const ops = parseAllDocuments(manifestFile('kubeadm/patches/control-plane/kube-controller-manager+json.yaml'))[0]!.toJS() as {
    op: string;
    path: string;
    value: string;
  }[];
  const flag = ops.find((o) => o.path === '/spec/containers/0/command/-' && o.value.startsWith('--controllers='));
  if (!flag) throw new Error('kubeadm/patches/control-plane/kube-controller-manager+json.yaml: no op adding --controllers=');
  return flag.value.slice('--controllers='.length);
}
