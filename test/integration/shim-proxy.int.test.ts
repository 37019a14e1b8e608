/**
 * kubelet-shim CRI proxy against a REAL containerd 2.4 (issue "kubelet-shim"): the proxy runs
 * in-process on a unix socket in front of containerd (node index 9: run dir /tmp/ulysses-it-shim,
 * bridge uly-br9, pods in 10.244.9.0/24, cgroups under /ulysses-real-9), and the test drives it
 * through CRI the way the kubelet does: pod sandbox + udp-echo container lifecycle with a streaming
 * GetContainerEvents, Exec, Attach and PortForward URLs, messages above grpc-js' 4 MiB default,
 * exponential-decay pacing of 6 low + 1 high RunPodSandbox, and a containerd restart. Network traffic: only to the pod IP.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import { type ForwardEvent } from '../../kubelet-shim/proxy.ts';
import { PROXY_IMPLEMENTATIONS, createCriProxy, type CriProxyServer } from '../../kubelet-shim/proxies.ts';
import { PacingGate, THESIS_POLICIES } from '../../kubelet-shim/pacing.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';
import {
  criTestNodeLeftovers,
  podSandboxConfig,
  restartContainerd,
  startCriTestNode,
  stopContainerd,
  stopCriTestNode,
  udpEchoContainerConfig,
  type CriTestNode,
  type TestPod,
} from '../../experiments/testbed/cri-testnode.ts';
import { udpFirstAnswer } from '../../experiments/workloads.ts';
import { buildGoTool } from '../../experiments/testbed/binaries.ts';
import { JsonLinesProcess } from '../../experiments/testbed/processes.ts';

const runDir = '/tmp/ulysses-it-shim';
const NODE_INDEX = 9;
const MiB = 1024 * 1024;

let node: CriTestNode | undefined;
let gate: PacingGate;
let proxy: CriProxyServer;
let cri: CriClient; // kubelet -> proxy
let direct: CriClient; // straight to containerd, for comparison
const forwarded: ForwardEvent[] = [];
const proxySocket = join(runDir, 'kubelet-shim.sock');

interface ContainerEvent {
  container_id: string;
  container_event_type: string;
  pod_sandbox_status?: { id: string };
}

async function removeSandbox(client: CriClient, pod_sandbox_id: string): Promise<void> {
  await client.call('StopPodSandbox', { pod_sandbox_id });
  await client.call('RemovePodSandbox', { pod_sandbox_id });
}

describe.each(PROXY_IMPLEMENTATIONS)('kubelet-shim proxy (%s) in front of a real containerd', (implementation) => {
  beforeAll(async () => {
    forwarded.length = 0;
    node = await startCriTestNode(runDir, NODE_INDEX);
    gate = new PacingGate({ config: { policy: { type: 'vanilla' } } });
    proxy = createCriProxy({ implementation, listen: proxySocket, backend: node.spec.socket, gate, onForward: (e) => forwarded.push(e) });
    await proxy.start();
    cri = new CriClient(proxySocket);
    direct = new CriClient(node.spec.socket);
  });

  afterAll(async () => {
    cri?.close();
    direct?.close();
    await proxy?.close(500);
    if (node) {
      await stopCriTestNode(node);
      expect(criTestNodeLeftovers(runDir, node.spec)).toEqual([]);
    }
  });

  it("serves the kubelet's own CRI client (k8s.io/cri-client: the benchmark's --client go) as containerd does", async () => {
    const bin = buildGoTool('kubelet-shim-bench-client', join(import.meta.dirname, '../../experiments/bench/kubelet-shim-client-go/main.go'), () => undefined);
    const kubeletClient = new JsonLinesProcess(bin, [`direct=unix://${node!.spec.socket}`, `shim=unix://${proxySocket}`]);
    try {
      const { samples } = await kubeletClient.call<{ samples: Record<string, number[]> }>({ method: 'ListPodSandbox', count: 4, timed: true });
      expect(Object.keys(samples).sort()).toEqual(['direct', 'shim']);
      for (const s of Object.values(samples)) {
        expect(s).toHaveLength(4);
        for (const ms of s) expect(ms).toBeGreaterThan(0);
      }
      // a failed call is an error naming the path and the method, never a sample
      await expect(kubeletClient.call({ method: 'PodSandboxStatus', sandbox: 'no-such-sandbox', count: 1, timed: true })).rejects.toThrow(/^direct PodSandboxStatus: .*NotFound/);
      await expect(kubeletClient.call({ method: 'Version', count: 2, timed: false })).resolves.toEqual({});
    } finally {
      await kubeletClient.close();
    }
    // a client that cannot start says why (its start-up error line), not only its exit code
    const bad = new JsonLinesProcess(bin, ['no-endpoint']);
    await expect(bad.call({ method: 'Version', count: 1, timed: true })).rejects.toThrow(/argument "no-endpoint": expected NAME=unix:\/\/\/path/);
    await bad.close();
  });

  it('answers Version as containerd does', async () => {
    const [viaProxy, straight] = await Promise.all([cri.call('Version', { version: 'v1' }), direct.call('Version', { version: 'v1' })]);
    expect(viaProxy).toEqual(straight);
    expect(viaProxy.runtime_name).toBe('containerd');
    expect(viaProxy.runtime_version).toMatch(/^2\.4\./);
    expect(viaProxy.runtime_api_version).toBe('v1');
  });

  it('exponential-decay pacing: of 6 low + 1 high RunPodSandbox issued together, the high one is forwarded first and the lows are spaced by the policy', async () => {
    // a fresh burst: no low-priority sandbox before it (else the policy would count it, reset after 5 s idle)
    expect(forwarded.filter((f) => f.admission.priority === 'low')).toEqual([]);
    gate.reconfigure({ policy: THESIS_POLICIES.cloud, lowHoldMs: 100, highMinInterArrivalMs: 100 });
    forwarded.length = 0;
    const pods: TestPod[] = [
      ...[0, 1, 2, 3, 4, 5].map((i) => ({ namespace: 'it-shim', name: `low-${i}`, uid: `shim-low-${i}`, criticality: i % 2 ? ('low' as const) : undefined })),
      { namespace: 'it-shim', name: 'crit', uid: 'shim-crit', criticality: 'high' as const },
    ];
    const done = new Map<string, number>();
    const t0 = performance.now();
    const ids = await Promise.all(
      pods.map(async (p) => {
        const { pod_sandbox_id } = await cri.call('RunPodSandbox', { config: podSandboxConfig(node!.spec, p) });
        done.set(p.name, performance.now() - t0);
        return pod_sandbox_id as string;
      }),
    );
    try {
      expect(forwarded.map((f) => f.info.key)).toEqual(['it-shim/crit', ...[0, 1, 2, 3, 4, 5].map((i) => `it-shim/low-${i}`)]);
      expect(forwarded[0]!.admission.priority).toBe('high');
      expect(forwarded[0]!.admission.waitedMs).toBeLessThan(50);
      // gaps between low releases: 700, 350, 175, 87.5, 43.75 ms (thesis cloud setting)
      const lows = forwarded.slice(1);
      const expected = [700, 350, 175, 87.5, 43.75];
      for (let i = 1; i < lows.length; i++) {
        expect(lows[i]!.admission.releasedAt - lows[i - 1]!.admission.releasedAt).toBeGreaterThanOrEqual(expected[i - 1]!);
        expect(lows[i]!.at - lows[i - 1]!.at).toBeGreaterThanOrEqual(expected[i - 1]! - 1);
      }
      // the first low waited its hold, not more than a timer's slack
      expect(lows[0]!.admission.waitedMs).toBeGreaterThanOrEqual(100);
      // the critical sandbox was ready before the second low one was even forwarded
      expect(done.get('crit')!).toBeLessThan(lows[1]!.at - t0);
      const listed = await cri.call('ListPodSandbox', { filter: { label_selector: { 'io.kubernetes.pod.namespace': 'it-shim' } } });
      expect(listed.items).toHaveLength(7);
    } finally {
      gate.setPolicy({ type: 'vanilla' });
      for (const id of ids) await removeSandbox(cri, id);
    }
  });

  it('runs a pod sandbox and a udp-echo container through the proxy, with container events streamed back', async () => {
    const spec = node!.spec;
    const events: ContainerEvent[] = [];
    const stream = cri.stream<ContainerEvent>('GetContainerEvents', {});
    let streamStatus: grpc.StatusObject | undefined;
    stream.on('data', (e: ContainerEvent) => events.push(e));
    stream.on('error', () => undefined);
    stream.on('status', (s: grpc.StatusObject) => (streamStatus = s));

    const pod: TestPod = { namespace: 'it-shim', name: 'echo', uid: 'shim-echo-1', criticality: 'high' };
    const config = podSandboxConfig(spec, pod);
    const { pod_sandbox_id } = await cri.call('RunPodSandbox', { config });
    expect(pod_sandbox_id).toMatch(/^[0-9a-f]{64}$/);
    expect(forwarded.at(-1)?.info).toEqual({ key: 'it-shim/echo', uid: 'shim-echo-1', criticality: 'high' });
    // the sandbox lives in the cgroup parent we asked for, under the node's cgroup root
    expect(existsSync(join('/sys/fs/cgroup/pids', spec.cgroupRoot, `pod-${pod.uid}`))).toBe(true);

    const { container_id } = await cri.call('CreateContainer', { pod_sandbox_id, config: udpEchoContainerConfig(), sandbox_config: config });
    await cri.call('StartContainer', { container_id });
    const cs = await cri.call('ContainerStatus', { container_id });
    expect(cs.status.state).toBe('CONTAINER_RUNNING');
    expect(cs.status.image.image).toBe('ulysses.local/udp-echo:1');

    const st = await cri.call('PodSandboxStatus', { pod_sandbox_id });
    expect(st.status.state).toBe('SANDBOX_READY');
    const ip: string = st.status.network.ip;
    expect(ip).toMatch(/^10\.244\.9\.\d+$/);
    await udpFirstAnswer(ip, undefined, { timeoutMs: 10_000 }); // the pod answers on the node's bridge

    const list = await cri.call('ListPodSandbox', { filter: { label_selector: { 'io.kubernetes.pod.uid': pod.uid } } });
    expect(list.items.map((i: { id: string }) => i.id)).toEqual([pod_sandbox_id]);
    expect(list.items[0].labels['ulysses.io/criticality']).toBe('high');
    const containers = await cri.call('ListContainers', { filter: { pod_sandbox_id } });
    expect(containers.containers.map((c: { id: string }) => c.id)).toEqual([container_id]);

    const exec = await cri.call('Exec', { container_id, cmd: ['/udp-echo'], stdout: true });
    expect(exec.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/exec\/[\w-]+$/);
    // the other streaming calls the kubelet makes for kubectl attach / port-forward: containerd's URLs too
    const attach = await cri.call('Attach', { container_id, stdout: true });
    expect(attach.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/attach\/[\w-]+$/);
    const forward = await cri.call('PortForward', { pod_sandbox_id, port: [7] });
    expect(forward.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/portforward\/[\w-]+$/);

    await removeSandbox(cri, pod_sandbox_id);
    const after = await cri.call('ListPodSandbox', { filter: { id: pod_sandbox_id } });
    expect(after.items).toEqual([]);

    const seen = (id: string, type: string) => events.some((e) => e.container_id === id && e.container_event_type === type);
    const deadline = Date.now() + 10_000;
    while (!(seen(container_id, 'CONTAINER_DELETED_EVENT') && seen(pod_sandbox_id, 'CONTAINER_DELETED_EVENT')) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    for (const type of ['CONTAINER_CREATED_EVENT', 'CONTAINER_STARTED_EVENT', 'CONTAINER_STOPPED_EVENT', 'CONTAINER_DELETED_EVENT']) {
      expect(seen(container_id, type), `container ${type}`).toBe(true);
      expect(seen(pod_sandbox_id, type), `sandbox ${type}`).toBe(true);
    }
    // the kubelet closing its event stream cancels it (no error status from the runtime)
    stream.cancel();
    while (!streamStatus && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(streamStatus?.code).toBe(grpc.status.CANCELLED);
  });

  it('carries CRI messages above 4 MiB both ways (the server is configured for 16 MiB)', async () => {
    const big = 'a'.repeat(5 * MiB);
    const pod: TestPod = { namespace: 'it-shim', name: 'big', uid: 'shim-big-1', annotations: { 'ulysses.io/test-payload': big } };
    // request > 4 MiB through the proxy (RunPodSandbox is also decoded by the gate)
    const { pod_sandbox_id } = await cri.call('RunPodSandbox', { config: podSandboxConfig(node!.spec, pod) });
    try {
      // response > 4 MiB: the status carries the annotation back
      const st = await cri.call('PodSandboxStatus', { pod_sandbox_id });
      expect(st.status.annotations['ulysses.io/test-payload']).toHaveLength(5 * MiB);
      const viaProxy = await cri.call('ListPodSandbox', {});
      const straight = await direct.call('ListPodSandbox', {});
      expect(viaProxy).toEqual(straight);
      // a > 4 MiB request that the runtime answers small
      const filtered = await cri.call('ListPodSandbox', { filter: { label_selector: { huge: big } } });
      expect(filtered.items).toEqual([]);
      // control: the same call through a proxy left at grpc-js' 4 MiB default fails
      const smallSocket = join(runDir, 'small.sock');
      const small = createCriProxy({ implementation, listen: smallSocket, backend: node!.spec.socket, maxMessageBytes: 4 * MiB });
      await small.start();
      const smallClient = new CriClient(smallSocket);
      try {
        const err = await smallClient.call('PodSandboxStatus', { pod_sandbox_id }).catch((e: grpc.ServiceError) => e);
        expect((err as grpc.ServiceError).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
      } finally {
        smallClient.close();
        await small.close(100);
      }
    } finally {
      await removeSandbox(cri, pod_sandbox_id);
    }
  });

  it('answers UNAVAILABLE within 1 s while containerd is down and serves again within 2 s once it is back', async () => {
    await stopContainerd(node!);
    const downAt = performance.now();
    for (const method of ['Version', 'ListPodSandbox', 'ListImages']) {
      const t0 = performance.now();
      const err = await cri.call(method, {}, { deadline: Date.now() + 30_000 }).catch((e: grpc.ServiceError) => e);
      expect((err as grpc.ServiceError).code, method).toBe(grpc.status.UNAVAILABLE);
      expect(performance.now() - t0, method).toBeLessThan(1000);
    }
    // a paced RunPodSandbox too: the gate lets it through and the runtime's absence is reported
    const err = await cri.call('RunPodSandbox', { config: podSandboxConfig(node!.spec, { namespace: 'it-shim', name: 'down', uid: 'shim-down' }) }).catch(
      (e: grpc.ServiceError) => e,
    );
    expect((err as grpc.ServiceError).code).toBe(grpc.status.UNAVAILABLE);
    // stay down 6 s, as a kubelet keeps calling: with grpc-js' default reconnect backoff (1 s x1.6 per
    // failure, up to 120 s) the channel would then wait ~3 s more before its next attempt
    while (performance.now() - downAt < 6000) {
      const t0 = performance.now();
      const e = await cri.call('Version', { version: 'v1' }, { deadline: Date.now() + 30_000 }).catch((x: grpc.ServiceError) => x);
      expect((e as grpc.ServiceError).code).toBe(grpc.status.UNAVAILABLE);
      expect(performance.now() - t0).toBeLessThan(1000);
      await new Promise((r) => setTimeout(r, 200));
    }

    await restartContainerd(node!); // returns once containerd's CRI answers directly
    const back = performance.now();
    let version: { runtime_name?: string } | undefined;
    while (!version && performance.now() - back < 10_000) {
      version = await cri.call('Version', { version: 'v1' }).catch(() => undefined);
      if (!version) await new Promise((r) => setTimeout(r, 50));
    }
    expect(version?.runtime_name).toBe('containerd');
    expect(performance.now() - back).toBeLessThan(2000);
    const images = await cri.call('ListImages', {});
    expect(images.images.map((i: { repo_tags: string[] }) => i.repo_tags[0])).toEqual(expect.arrayContaining(['ulysses.local/pause:1', 'ulysses.local/udp-echo:1']));
  });
});
