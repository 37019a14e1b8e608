/**
 * What the extender's admission tests share (scheduler-extender-vap, scheduler-extender-fence): the
 * manifests of manifests/base/scheduler-extender created on a testbed, a client acting as the
 * extender's ServiceAccount, pods only the extender's bind places, and an admission refusal's text.
 */
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { ApiError, KubeClient, plainHeaders, type KubeAccess } from '../core/kube.ts';
import { KWOK_ANNOTATION } from '../experiments/testbed/kwok.ts';
import { reservationRequest, RT_ANNOTATION, TDMA_ANNOTATION } from '../scheduler-plugins/schedulability.ts';

export const EXTENDER_SA = 'system:serviceaccount:ulysses-system:ulysses-scheduler-extender';
export const EXTENDER_MANIFESTS = 'manifests/base/scheduler-extender';

/** Path of an object's collection (the kinds these manifests hold). */
function collection(o: { kind: string; metadata: { namespace?: string } }): string {
  const paths: Record<string, string> = {
    ServiceAccount: `/api/v1/namespaces/${o.metadata.namespace}/serviceaccounts`,
    ClusterRole: '/apis/rbac.authorization.k8s.io/v1/clusterroles',
    ClusterRoleBinding: '/apis/rbac.authorization.k8s.io/v1/clusterrolebindings',
    Role: `/apis/rbac.authorization.k8s.io/v1/namespaces/${o.metadata.namespace}/roles`,
    RoleBinding: `/apis/rbac.authorization.k8s.io/v1/namespaces/${o.metadata.namespace}/rolebindings`,
    ValidatingAdmissionPolicy: '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies',
    ValidatingAdmissionPolicyBinding: '/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings',
    Lease: `/apis/coordination.k8s.io/v1/namespaces/${o.metadata.namespace}/leases`,
  };
  const path = paths[o.kind];
  if (!path) throw new Error(`${EXTENDER_MANIFESTS}: no collection path for kind ${o.kind}`);
  return path;
}

/** Creates every object of these files of manifests/base/scheduler-extender. */
export async function createExtenderManifests(admin: KubeClient, files: readonly string[]): Promise<void> {
  for (const file of files) {
    for (const doc of parseAllDocuments(readFileSync(`${EXTENDER_MANIFESTS}/${file}`, 'utf8'))) {
      const o = doc.toJS() as { kind: string; metadata: { namespace?: string } };
      await admin.request('POST', collection(o), { body: o });
    }
  }
}

/** A client acting as the extender's ServiceAccount (impersonated by the testbed's admin). */
/**
 * The testbed admin's access acting as someone else (Impersonate-* headers): a user, its groups, and
 * extra fields (e.g. a bound token's node, `authentication.kubernetes.io/node-name`).
 */
export function impersonating(kc: KubeAccess, user: string, o: { group?: string; extra?: Record<string, string> } = {}): KubeAccess {
  const headers: Record<string, string> = { 'Impersonate-User': user };
  if (o.group) headers['Impersonate-Group'] = o.group;
  for (const [k, v] of Object.entries(o.extra ?? {})) headers[`Impersonate-Extra-${encodeURIComponent(k)}`] = v;
  return {
    getCurrentCluster: () => kc.getCurrentCluster(),
    applyToFetchOptions: async (opts: object) => {
      const applied = (await kc.applyToFetchOptions(opts as never)) as { headers?: unknown };
      return { ...applied, headers: { ...plainHeaders(applied.headers), ...headers } };
    },
  };
}

export function asExtenderClient(kc: KubeConfig): KubeClient {
  return new KubeClient(impersonating(kc, EXTENDER_SA));
}

/**
 * A pod of a scheduler that does not exist, tolerating the KWOK node: only the extender's bind
 * places it. An RT/TDMA one requests ulysses.io/reservation, as its users must.
 */
export function unscheduledPod(namespace: string, name: string, annotations: Record<string, string> = {}): V1Pod {
  const reserves = RT_ANNOTATION in annotations || TDMA_ANNOTATION in annotations;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, annotations },
    spec: {
      schedulerName: 'nobody',
      containers: [{ name: 'c', image: 'pause', imagePullPolicy: 'Never', ...(reserves ? { resources: reservationRequest() } : {}) }],
      tolerations: [{ key: KWOK_ANNOTATION, operator: 'Exists', effect: 'NoSchedule' }],
    },
  };
}

/** The admission refusal of a request, or undefined if it went through. */
export async function refusal(req: Promise<unknown>): Promise<string | undefined> {
  try {
    await req;
    return undefined;
  } catch (err) {
    if (err instanceof ApiError && (err.statusCode === 403 || err.statusCode === 422)) return err.message;
    throw err;
  }
}
