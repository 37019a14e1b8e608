/**
 * The 5G scenario's manifests (experiments/5g/, thesis §6.1.2) are consistent without a cluster:
 * the kustomization lists every file, the UPF is the only critical pod (criticality high as
 * core/criticality.ts reads it), the multi-service app is low, every Service selects a Deployment's
 * pods in its namespace, every ConfigMap a pod mounts exists, every namespace used is declared.
 * (The apiserver's view: test/integration/five-g-manifests.int.test.ts, a server-side dry run.)
 */
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { V1ConfigMap, V1Deployment, V1Namespace, V1Pod, V1Service } from '@kubernetes/client-node';
import { podCriticality } from '../../core/criticality.ts';
import { FIVE_G_DIR, fiveGManifests, fiveGResources } from '../../experiments/5g/manifests.ts';

describe('experiments/5g manifests', () => {
  const objs = fiveGManifests();
  const of = <T>(kind: string) => objs.filter((o) => o.kind === kind) as unknown as T[];
  const deployments = of<V1Deployment>('Deployment');
  const podOf = (d: V1Deployment): V1Pod => ({ metadata: d.spec!.template.metadata, spec: d.spec!.template.spec });

  it('the kustomization lists every manifest of the directory', () => {
    const files = readdirSync(FIVE_G_DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...fiveGResources()].sort()).toEqual(files.sort());
  });

  it('the UPF is the one critical pod; the multi-service app is low priority', () => {
    const levels = Object.fromEntries(deployments.map((d) => [`${d.metadata!.namespace}/${d.metadata!.name}`, podCriticality(podOf(d))]));
    expect(levels['open5gs/upf']).toEqual({ level: 'high', source: 'label' });
    const critical = Object.entries(levels).filter(([, c]) => c.level === 'high').map(([k]) => k);
    expect(critical).toEqual(['open5gs/upf']);
    const app = deployments.filter((d) => d.metadata!.namespace === 'train-ticket');
    expect(app.length).toBeGreaterThanOrEqual(5);
    for (const d of app) expect(podCriticality(podOf(d)).level, d.metadata!.name).toBe('low');
    for (const d of deployments) expect(podCriticality(podOf(d)).error, d.metadata!.name).toBeUndefined();
  });

  it('every Service selects the pods of a Deployment in its namespace; the app has one Service per Deployment', () => {
    for (const s of of<V1Service>('Service')) {
      const sel = s.spec!.selector!;
      const match = deployments.filter(
        (d) => d.metadata!.namespace === s.metadata!.namespace && Object.entries(sel).every(([k, v]) => d.spec!.template.metadata!.labels?.[k] === v),
      );
      expect(match.length, `Service ${s.metadata!.namespace}/${s.metadata!.name}`).toBe(1);
    }
    const appServices = of<V1Service>('Service').filter((s) => s.metadata!.namespace === 'train-ticket');
    expect(appServices.length).toBe(deployments.filter((d) => d.metadata!.namespace === 'train-ticket').length);
  });

  it('mounted ConfigMaps exist with the keys the commands use; namespaces are declared', () => {
    const cms = of<V1ConfigMap>('ConfigMap');
    for (const d of deployments) {
      for (const v of d.spec!.template.spec!.volumes ?? []) {
        if (!v.configMap) continue;
        // file modes as decimal numbers: "0755" is octal for kubectl (YAML 1.1) but 755 for YAML 1.2 parsers
        if (v.configMap.defaultMode !== undefined) expect(v.configMap.defaultMode, `${d.metadata!.name} ${v.name} defaultMode`).toBeLessThanOrEqual(0o777);
        const cm = cms.find((c) => c.metadata!.name === v.configMap!.name && c.metadata!.namespace === d.metadata!.namespace);
        expect(cm, `ConfigMap ${v.configMap.name} of ${d.metadata!.name}`).toBeDefined();
        const mount = d.spec!.template.spec!.containers[0]!.volumeMounts!.find((m) => m.name === v.name)!.mountPath;
        for (const arg of d.spec!.template.spec!.containers[0]!.command ?? [])
          if (arg.startsWith(`${mount}/`)) expect(Object.keys(cm!.data!), `${d.metadata!.name} runs ${arg}`).toContain(arg.slice(mount.length + 1));
      }
    }
    const declared = of<V1Namespace>('Namespace').map((n) => n.metadata!.name);
    for (const o of objs) if (o.metadata.namespace) expect(declared, `${o.kind} ${o.metadata.name}`).toContain(o.metadata.namespace);
  });

  it('the UPF config the start script runs parses and sets the PFCP and GTP-U servers', () => {
    const cm = of<V1ConfigMap>('ConfigMap').find((c) => c.metadata!.name === 'upf')!;
    const cfg = parse(cm.data!['upf.yaml']!) as { upf: { pfcp: { server: unknown[] }; gtpu: { server: unknown[] }; session: Array<{ subnet: string }> } };
    expect(cfg.upf.pfcp.server.length).toBe(1);
    expect(cfg.upf.gtpu.server.length).toBe(1);
    expect(cm.data!['start.sh']).toContain(cfg.upf.session[0]!.subnet);
    expect(cm.data!['start.sh']).toContain('open5gs-upfd -c /etc/ulysses-5g/upf.yaml');
  });
});
