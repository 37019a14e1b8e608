/**
 * APF probes for integration tests: a ServiceAccount identity per namespace (TokenRequest API) whose
 * requests show how the real apiserver classifies that namespace's traffic, and other identities
 * (anonymous, existing ServiceAccounts, client certificates from the testbed CA) to show whose
 * requests are exempt. The admin identity is in system:masters, whose requests always match the
 * built-in `exempt` FlowSchema, so it cannot probe.
 */
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { apiRequest } from '../../core/kube.ts';
import { classificationNames, observedPriorityLevel, type ObservedClassification } from '../../apf-configs/apply.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import type { TestbedState } from '../../experiments/testbed/testbed.ts';
import { generateClientCert, pkiPaths, type ClientIdentity } from '../../experiments/testbed/pki.ts';

export const PROBE_SA = 'apf-probe';
export const configMapsPath = (ns: string) => `/api/v1/namespaces/${ns}/configmaps`;

export type Classification = ObservedClassification & { flowSchema?: string; priorityLevel?: string };

export class ApfProbe {
  /** namespace -> kubeconfig with that namespace's probe ServiceAccount token */
  readonly saKc: Record<string, KubeConfig> = {};

  constructor(
    private readonly kc: KubeConfig,
    private readonly state: TestbedState,
  ) {}

  /** A kubeconfig for the testbed's apiserver with these credentials; none: an anonymous client. */
  kubeConfigAs(credentials: { token?: string; certFile?: string; keyFile?: string } = {}): KubeConfig {
    const k = new KubeConfig();
    k.loadFromOptions({
      clusters: [{ name: 'testbed', server: this.state.apiserver, caFile: join(this.state.runDir, 'pki', 'ca.crt') }],
      users: [{ name: 'probe', ...credentials }],
      contexts: [{ name: 'probe', cluster: 'testbed', user: 'probe' }],
      currentContext: 'probe',
    });
    return k;
  }

  /** An existing ServiceAccount's identity: a token from the TokenRequest API. */
  async serviceAccountKc(ns: string, name: string): Promise<KubeConfig> {
    const tr = await apiRequest<{ status: { token: string } }>(this.kc, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts/${name}/token`, {
      body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 3600 } },
    });
    return this.kubeConfigAs({ token: tr.status.token });
  }

  /** A user (and group) of its own: a client certificate signed by the testbed CA. */
  async certificateKc(identity: ClientIdentity): Promise<KubeConfig> {
    const { cert, key } = await generateClientCert(pkiPaths(join(this.state.runDir, 'pki')), identity);
    return this.kubeConfigAs({ certFile: cert, keyFile: key });
  }

  /** Creates `ns` (if `create`), a ServiceAccount allowed to read its ConfigMaps, and its token. */
  async setup(ns: string, create = true): Promise<void> {
    const kc = this.kc;
    if (create) await apiRequest(kc, 'POST', '/api/v1/namespaces', { body: { metadata: { name: ns } } });
    await apiRequest(kc, 'POST', `/api/v1/namespaces/${ns}/serviceaccounts`, { body: { metadata: { name: PROBE_SA } } });
    await apiRequest(kc, 'POST', `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/roles`, {
      body: { metadata: { name: 'configmap-reader' }, rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['get', 'list'] }] },
    });
    await apiRequest(kc, 'POST', `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`, {
      body: {
        metadata: { name: 'apf-probe-configmap-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'configmap-reader' },
        subjects: [{ kind: 'ServiceAccount', name: PROBE_SA, namespace: ns }],
      },
    });
    this.saKc[ns] = await this.serviceAccountKc(ns, PROBE_SA);
  }

  /** `ns`'s service account requests `path`; returns the classification with names. */
  probe(ns: string, path: string): Promise<Classification> {
    return this.probeAs(this.saKc[ns]!, path);
  }

  /** The identity of `kc` requests `path`; returns the classification with names. */
  async probeAs(kc: KubeConfig, path: string): Promise<Classification> {
    const obs = await observedPriorityLevel(kc, path);
    return { ...obs, ...(await classificationNames(this.kc, obs)) };
  }

  async waitClassified(what: string, ns: string, path: string, want: (o: Classification) => boolean): Promise<Classification> {
    let last: Classification | undefined;
    return pollUntil(
      what,
      async () => {
        last = await this.probe(ns, path);
        return want(last) ? last : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100, explain: () => `last: ${JSON.stringify(last)}` },
    );
  }
}
