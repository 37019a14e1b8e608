/**
 * eUPF as the critical pod on real kubelets (issue 41, docs/development/eupf.md "eUPF in
 * Kubernetes" and "The user plane around the pod"): the local image `ulysses.local/eupf:0.7.1`
 * imported into the nodes' containerd, the critical Deployment and its Service. The pod is Ready
 * through eUPF's health API, eUPF attached its XDP program to the pod's eth0, and an SMF stand-in on
 * the host, which found the UPF through the Service's EndpointSlice, gets a PFCP association accepted
 * by it. Then a 5G failover: the UPF's node tainted NoExecute, the new UPF pod gets the association
 * and the same session, a GTP-U reply comes back through it, the old pod's endpoint is gone. Asserted
 * on the protocol events, no timing.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { V1Pod } from '@kubernetes/client-node';
import { useSharedTestbed } from './harness.ts';
import { EUPF_PORTS, buildEupfImage, eupfDeployment, eupfService, eupfStartProblem, standinBinary } from '../../experiments/5g/eupf.ts';
import { UE_IP, UL_TEID, DL_TEID, UserPlane, type StandinEvent } from '../../experiments/5g/user-plane.ts';
import { applyDeployment, podReady, taintNoExecute, untaint } from '../../experiments/workloads.ts';
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

describe('a 5G failover with eUPF', () => {
  const name = 'upf5g';
  const readyUpf = (node: string) =>
    pollUntil(
      `the ${name} pod Ready on ${node}`,
      async () => (await t.core.listNamespacedPod({ namespace: ns, labelSelector: `app=${name}` })).items.find((p) => p.spec?.nodeName === node && !p.metadata?.deletionTimestamp && podReady(p)),
      { timeoutMs: 120_000 },
    );
  const sameSession = (e: StandinEvent) => ({ ue_ip: e.ue_ip, ul_teid: e.ul_teid, dl_teid: e.dl_teid, cp_seid: e.cp_seid });

  it('moves the association and the session to the new UPF pod, whose GTP-U replies come back, and takes the old endpoint away', async () => {
    // the UPF starts on real-1 (real-2 cordoned meanwhile), may go to real-2
    await t.core.patchNode({ name: 'real-2', body: [{ op: 'replace', path: '/spec/unschedulable', value: true }] });
    await applyDeployment(t.apps, eupfDeployment({ namespace: ns, name, nodes: ['real-1', 'real-2'] }));
    await t.core.createNamespacedService({ namespace: ns, body: eupfService({ namespace: ns, name }) });
    const first = await readyUpf('real-1');
    await t.core.patchNode({ name: 'real-2', body: [{ op: 'replace', path: '/spec/unschedulable', value: false }] });
    const oldIp = first.status!.podIP!;

    const up = await UserPlane.start({ kc: t.kc, namespace: ns, service: name, dir: join(t.state.runDir, 'user-plane'), heartbeat: { intervalMs: 500, timeoutMs: 500, retries: 2 } });
    try {
      const pfcp = (ip: string) => `${ip}:${EUPF_PORTS.pfcp}`;
      const s1 = await up.waitFor((e) => e.event === 'session-established' && e.upf === pfcp(oldIp), `the session on the first UPF ${oldIp}`, 60_000);
      expect(sameSession(s1)).toMatchObject({ ue_ip: UE_IP, ul_teid: UL_TEID, dl_teid: DL_TEID });
      const reply1 = await up.waitFor((e) => e.src === 'gnb' && e.event === 'first-reply' && e.via === oldIp, `a GTP-U reply through ${oldIp}`, 60_000);
      expect(reply1).toMatchObject({ teid: DL_TEID, ue_ip: UE_IP });

      // the failure: the UPF's node tainted NoExecute; its pod is evicted, the replacement goes to real-2
      const mark = up.events.length;
      await taintNoExecute(t.kc, 'real-1');
      const second = await readyUpf('real-2');
      const newIp = second.status!.podIP!;
      expect(newIp).not.toBe(oldIp);

      // the new UPF pod: association, the same session (UE IP, TEIDs, SEID), the gNB told, a reply through it
      await up.waitFor((e) => e.event === 'association' && e.upf === pfcp(newIp), `the association with the new UPF ${newIp}`, 60_000, mark);
      const s2 = await up.waitFor((e) => e.event === 'session-established' && e.upf === pfcp(newIp), `the session on the new UPF ${newIp}`, 60_000, mark);
      expect(sameSession(s2)).toEqual(sameSession(s1));
      await up.waitFor((e) => e.src === 'gnb' && e.event === 'n3-changed' && e.upf_n3 === `${newIp}:${EUPF_PORTS.gtpu}`, `the gNB switched to ${newIp}`, 30_000, mark);
      const restored = await up.waitFor((e) => e.src === 'gnb' && e.event === 'connection-restored', 'connection restored', 30_000, mark);
      expect(restored).toMatchObject({ via: newIp, teid: DL_TEID, ue_ip: UE_IP });
      const associations = await (await fetch(`http://${newIp}:${EUPF_PORTS.api}/api/v1/pfcp_associations`)).text();
      expect(associations).toContain(up.events.find((e) => e.src === 'smf' && e.event === 'start')!.node_id as string);

      // the old UPF's endpoint is gone from the Service's EndpointSlices
      await pollUntil(
        `the old UPF ${oldIp} out of the EndpointSlices`,
        async () => {
          const slices = await t.discovery.listNamespacedEndpointSlice({ namespace: ns, labelSelector: `kubernetes.io/service-name=${name}` });
          const addresses = slices.items.flatMap((s) => s.endpoints ?? []).flatMap((e) => e.addresses);
          return addresses.includes(newIp) && !addresses.includes(oldIp) ? addresses : undefined;
        },
        { timeoutMs: 60_000 },
      );
    } finally {
      await up.stop();
      await untaint(t.kc, 'real-1');
    }
  });
});

describe('an eUPF that cannot start', () => {
  it("is named with eUPF's own reason from its container status (XDP on an interface the pod does not have)", async () => {
    const name = 'upf-bad';
    await applyDeployment(t.apps, eupfDeployment({ namespace: ns, name, nodes: ['real-2'], iface: 'nosuch0' }));
    let last: V1Pod | undefined;
    const problem = await pollUntil(
      'the failed eUPF start in its pod status',
      async () => {
        last = (await t.core.listNamespacedPod({ namespace: ns, labelSelector: `app=${name}` })).items[0];
        return last ? eupfStartProblem(last) : undefined;
      },
      { timeoutMs: 120_000, explain: () => JSON.stringify(last?.status?.containerStatuses) },
    );
    expect(problem).toMatch(new RegExp(`^eUPF in pod ${ns}/${name}-[a-z0-9-]+ on real-2 exited with [1-9]`));
    expect(problem).toContain('nosuch0');
    expect(last && podReady(last)).toBe(false);
    await t.apps.deleteNamespacedDeployment({ name, namespace: ns });
  });
});
