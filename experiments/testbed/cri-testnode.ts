/**
 * A bare CRI node for the shim's integration test and benchmark: one real containerd 2 (the
 * testbed's config and launcher from experiments/testbed/realnode.ts), the test images imported,
 * no kubelet. Pods are created by hand through CRI with a cgroup parent under the node's cgroup
 * root, and the CNI bridge plugin creates the node's bridge on the first sandbox. Everything is
 * under `runDir` and removed by {@link stopCriTestNode}.
 */
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { cacheDir, ensureBinaries } from './binaries.ts';
import { buildTestImages, TEST_IMAGES } from './images/index.ts';
import { pidsMatching, pollUntil, stopProcess, tailFile, type TrackedProcess } from './processes.ts';
import {
  deleteBridge,
  destroyCgroupRoot,
  importImages,
  mountsUnder,
  realNodeSpec,
  startContainerd,
  stopRealNode,
  unmountUnder,
  type RealNodeSpec,
} from './realnode.ts';
import { CRITICALITY_LABEL, type Criticality } from '../../core/criticality.ts';
import { CriClient } from '../../kubelet-shim/cri-client.ts';

export interface CriTestNode {
  readonly runDir: string;
  readonly spec: RealNodeSpec;
  containerd: TrackedProcess;
}

/** Starts containerd for node `index` under `runDir` (after removing a leftover of an aborted run). */
export async function startCriTestNode(runDir: string, index: number): Promise<CriTestNode> {
  const spec = realNodeSpec(runDir, index);
  await cleanupCriTestNode(runDir, spec);
  await mkdir(spec.dir, { recursive: true });
  await ensureBinaries();
  const images = await buildTestImages(cacheDir());
  const wanted = new Set<string>([TEST_IMAGES.pause.name, TEST_IMAGES.udpEcho.name]);
  const containerd = await startContainerd(spec);
  const node: CriTestNode = { runDir, spec, containerd };
  await waitForCri(node);
  await importImages(
    spec.socket,
    images.filter((i) => wanted.has(i.name)).map((i) => i.tar),
  );
  return node;
}

/** Waits until containerd's CRI plugin answers Version and reports the runtime ready. */
export async function waitForCri(node: CriTestNode, timeoutMs = 30_000): Promise<void> {
  const cri = new CriClient(node.spec.socket);
  try {
    await pollUntil(
      'containerd CRI ready',
      async () => {
        const st = await cri.call('Status', {}, { deadline: Date.now() + 2000 });
        const conds = (st.status?.conditions ?? []) as Array<{ type: string; status: boolean }>;
        return conds.some((c) => c.type === 'RuntimeReady' && c.status);
      },
      { timeoutMs, intervalMs: 100, explain: () => tailFile(node.containerd.logFile) },
    );
  } finally {
    cri.close();
  }
}

/** Stops containerd (its containers keep running under their shims). */
export async function stopContainerd(node: CriTestNode): Promise<void> {
  await stopProcess(node.containerd.pid, 5000);
}

/** Starts containerd again on the same root/state/socket. */
export async function restartContainerd(node: CriTestNode): Promise<void> {
  await stopContainerd(node);
  node.containerd = await startContainerd(node.spec);
  await waitForCri(node);
}

/** Stops containerd, kills the node's containers and shims, unmounts, deletes the bridge and cgroups, removes runDir. */
export async function stopCriTestNode(node: CriTestNode): Promise<void> {
  await stopRealNode(node.spec, [node.containerd.pid]);
  await cleanupCriTestNode(node.runDir, node.spec);
}

async function cleanupCriTestNode(runDir: string, spec: RealNodeSpec): Promise<void> {
  for (const pid of pidsMatching(runDir)) await stopProcess(pid, 1000);
  await destroyCgroupRoot(spec.cgroupRoot);
  await unmountUnder(runDir);
  await deleteBridge(spec.bridge);
  await rm(runDir, { recursive: true, force: true });
}

/** What must be gone after {@link stopCriTestNode}: processes, mounts, the bridge, the cgroup root. */
export function criTestNodeLeftovers(runDir: string, spec: RealNodeSpec): string[] {
  const out: string[] = [];
  for (const pid of pidsMatching(runDir)) out.push(`process ${pid} still refers to ${runDir}`);
  for (const m of mountsUnder(runDir)) out.push(`mount ${m}`);
  if (existsSync(`/sys/class/net/${spec.bridge}`)) out.push(`interface ${spec.bridge}`);
  for (const c of ['pids', 'memory', 'cpu', 'cpuset']) {
    if (existsSync(join('/sys/fs/cgroup', c, spec.cgroupRoot))) out.push(`cgroup ${c}${spec.cgroupRoot}`);
  }
  if (existsSync(runDir)) out.push(`directory ${runDir}`);
  return out;
}

// ---------------------------------------------------------------------------------------------
// CRI request bodies, as the kubelet builds them (trimmed to what containerd needs)
// ---------------------------------------------------------------------------------------------

export interface TestPod {
  namespace: string;
  name: string;
  uid: string;
  criticality?: Criticality;
  annotations?: Record<string, string>;
}

/** PodSandboxConfig for `pod` on `spec`'s node: pod labels copied as the kubelet does, cgroup parent under the node's root. */
export function podSandboxConfig(spec: RealNodeSpec, pod: TestPod): object {
  const labels: Record<string, string> = {
    'io.kubernetes.pod.namespace': pod.namespace,
    'io.kubernetes.pod.name': pod.name,
    'io.kubernetes.pod.uid': pod.uid,
  };
  if (pod.criticality) labels[CRITICALITY_LABEL] = pod.criticality;
  return {
    metadata: { name: pod.name, namespace: pod.namespace, uid: pod.uid, attempt: 0 },
    hostname: pod.name,
    log_directory: join(spec.dir, 'pod-logs', `${pod.namespace}_${pod.name}_${pod.uid}`),
    labels,
    annotations: pod.annotations ?? {},
    linux: {
      cgroup_parent: `${spec.cgroupRoot}/pod-${pod.uid}`,
      security_context: { namespace_options: { network: 'POD', pid: 'CONTAINER', ipc: 'POD' } },
    },
  };
}

/** ContainerConfig of the UDP echo test service (ulysses.local/udp-echo:1). */
export function udpEchoContainerConfig(name = 'echo'): object {
  return {
    metadata: { name, attempt: 0 },
    image: { image: TEST_IMAGES.udpEcho.name },
    // KeyValue.value is `bytes` in cri-api v0.36
    envs: [{ key: TEST_IMAGES.udpEcho.port.env, value: Buffer.from(String(TEST_IMAGES.udpEcho.port.number)) }],
    log_path: `${name}.log`,
    labels: { 'io.kubernetes.container.name': name },
    linux: {},
  };
}
