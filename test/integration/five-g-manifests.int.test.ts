/**
 * The 5G scenario's manifests (experiments/5g/: Open5GS UPF, UERANSIM, multi-service low-priority
 * app) are accepted by a real kube-apiserver: a server-side dry run (`dryRun=All`: validation,
 * defaulting and admission, nothing stored) of every object on a control-plane-only testbed, and the
 * UPF pod template the apiserver returns is the one critical pod for Ulysses.
 */
import { describe, expect, it } from 'vitest';
import type { V1Deployment } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { apiRequest } from '../../core/kube.ts';
import { podCriticality } from '../../core/criticality.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { fiveGManifests, type ManifestObject } from '../../experiments/5g/manifests.ts';

const t = useSharedTestbed('control-plane', { realNodes: 0, kwokNodes: 0 });

const PLURALS: Record<string, string> = { Namespace: 'namespaces', ConfigMap: 'configmaps', Service: 'services', Deployment: 'deployments' };
const collection = (o: ManifestObject) => {
  const plural = PLURALS[o.kind];
  if (!plural) throw new Error(`experiments/5g: ${o.kind} ${o.metadata.name}: kind not handled by this test`);
  const base = o.apiVersion === 'v1' ? '/api/v1' : `/apis/${o.apiVersion}`;
  return o.metadata.namespace ? `${base}/namespaces/${o.metadata.namespace}/${plural}` : `${base}/${plural}`;
};

describe('experiments/5g manifests against the apiserver', () => {
  it('every object passes a server-side dry run; the UPF is critical, the app low', async () => {
    const objs = fiveGManifests();
    const dryRun = (o: ManifestObject) =>
      apiRequest<ManifestObject>(t.kc, 'POST', collection(o), { query: { dryRun: 'All' }, body: o }).catch((err: Error) => {
        throw new Error(`${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}: ${err.message}`);
      });
    // the Namespaces first (dry run: not stored), then created for real, as namespaced dry runs need them
    const namespaces = objs.filter((o) => o.kind === 'Namespace');
    const accepted: ManifestObject[] = [];
    for (const ns of namespaces) accepted.push(await dryRun(ns));
    for (const ns of namespaces) await ensureNamespace(t.core, ns.metadata.name);
    for (const o of objs.filter((x) => x.kind !== 'Namespace')) accepted.push(await dryRun(o));
    objs.sort((a, b) => Number(b.kind === 'Namespace') - Number(a.kind === 'Namespace')); // the order of `accepted`
    expect(accepted.map((o) => `${o.kind}/${o.metadata.name}`)).toEqual(objs.map((o) => `${o.kind}/${o.metadata.name}`));
    // nothing was stored
    const deployments = await t.apps.listDeploymentForAllNamespaces();
    expect(deployments.items.filter((d) => ['open5gs', 'ueransim', 'train-ticket'].includes(d.metadata!.namespace!))).toEqual([]);
    // as the apiserver defaulted them
    const deps = accepted.filter((o) => o.kind === 'Deployment') as unknown as V1Deployment[];
    const level = (d: V1Deployment) => podCriticality({ metadata: d.spec!.template.metadata, spec: d.spec!.template.spec }).level;
    expect(deps.filter((d) => level(d) === 'high').map((d) => `${d.metadata!.namespace}/${d.metadata!.name}`)).toEqual(['open5gs/upf']);
    const upf = deps.find((d) => d.metadata!.name === 'upf')!;
    expect(upf.spec!.strategy!.type).toBe('Recreate');
    expect(upf.spec!.template.spec!.containers[0]!.securityContext!.privileged).toBe(true);
    const app = deps.filter((d) => d.metadata!.namespace === 'train-ticket');
    expect(app.length).toBeGreaterThanOrEqual(5);
    for (const d of app) expect(level(d)).toBe('low');
  });
});
