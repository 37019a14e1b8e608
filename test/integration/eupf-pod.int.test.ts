/**
 * eUPF as the critical pod on real kubelets (issue 41, docs/development/eupf.md "eUPF in
 * Kubernetes"): the local image `ulysses.local/eupf:0.7.1` imported into the nodes' containerd, the
 * critical Deployment and its Service. The pod is Ready through eUPF's health API, eUPF attached its
 * XDP program to the pod's eth0, and an SMF stand-in on the host, which found the UPF through the
 * Service's EndpointSlice, gets a PFCP association accepted by it. No timing is asserted.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { EUPF_PORTS, buildEupfImage, eupfDeployment, eupfService, standinBinary } from '../../experiments/5g/eupf.ts';
import { applyDeployment, podReady } from '../../experiments/workloads.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { importImages } from '../../experiments/testbed/realnode.ts';

const run = promisify(execFile);
const ns = 'eupf-it';
const t = useSharedTestbed('real-nodes', { realNodes: 2, namespace: ns });
let smf: string;

beforeAll(async () => {
  const image = await buildEupfImage();
  for (const n of t.state.realNodes) await importImages(n.socket, [image.tar]);
  smf = standinBinary('smf-standin');
});

describe('eUPF as the critical pod', () => {
  it('is Ready through its health API, has XDP on its eth0, and accepts a PFCP association from an SMF that found it through the EndpointSlice', async () => {
    await applyDeployment(t.apps, eupfDeployment({ namespace: ns, nodes: ['real-2'] }));
    await t.core.createNamespacedService({ namespace: ns, body: eupfService({ namespace: ns }) });
    let last: V1Pod | undefined;
    const pod = await pollUntil(
      'the eUPF pod Ready',
      async () => {
        last = (await t.core.listNamespacedPod({ namespace: ns, labelSelector: 'app=upf' })).items[0];
        return last && podReady(last) ? last : undefined;
      },
      { timeoutMs: 120_000, explain: () => JSON.stringify(last?.status?.containerStatuses ?? last?.status?.conditions) },
    );
    expect(pod.metadata?.labels?.['ulysses.io/criticality']).toBe('high');
    const podIp = pod.status!.podIP!;

    const log = await t.core.readNamespacedPodLog({ name: pod.metadata!.name!, namespace: ns });
    expect(log).toContain('Attached XDP program to iface "eth0"');
    expect(log).toMatch(/xdp_attach_mode:generic/);

    // the SMF's address source: the ready endpoint of the Service, never a fixed address
    const upf = await pollUntil(
      "the UPF's ready endpoint in the EndpointSlice",
      async () => {
        const slices = await t.discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: 'kubernetes.io/service-name=upf' });
        return slices.items.flatMap((s) => s.endpoints ?? []).find((e) => e.conditions?.ready)?.addresses[0];
      },
      { timeoutMs: 60_000 },
    );
    expect(upf).toBe(podIp);

    // the SMF on the host, on the gateway of the pod's node bridge (what eUPF reaches by its default route)
    const gateway = t.state.realNodes.find((n) => n.name === pod.spec!.nodeName)!.gateway;
    const r = await run(smf, ['--associate-only', '--upf', `${upf}:${EUPF_PORTS.pfcp}`, '--local', `${gateway}:${EUPF_PORTS.pfcp}`], { timeout: 30_000 }).catch(
      (err: { stdout?: string; stderr?: string; message: string }) => {
        throw new Error(`smf-standin --associate-only: ${err.message}\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
      },
    );
    // exit 0: cause Request accepted; the answer names the pod IP as the UPF's node ID
    expect(r.stdout).toContain(`UPF node ID ${podIp},`);
    const associations = await (await fetch(`http://${podIp}:${EUPF_PORTS.api}/api/v1/pfcp_associations`)).text();
    expect(associations).toContain(gateway);
  });
});
