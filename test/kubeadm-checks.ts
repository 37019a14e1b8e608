/**
 * What the kubeadm tests check of an install and an uninstall, whichever way the node steps went
 * (the testbed's direct access or a node shell).
 */
import { expect } from 'vitest';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { CoreV1Api, CoreV1Event } from '@kubernetes/client-node';
import { parse as parseYaml } from 'yaml';
import * as kubeadm from '../experiments/testbed/kubeadm.ts';
import { isAlive } from '../experiments/testbed/processes.ts';
import { KCM_CONTROLLERS_FLAG, SCHEDULER_CONFIG_FLAG } from '../manifests/install.ts';

const STATIC_PODS = ['kube-controller-manager', 'kube-scheduler'];

/** A node's kubelet CRI endpoints, from its config file. */
export const kubeletEndpoints = (node: kubeadm.KubeadmNode) => {
  const cfg = parseYaml(readFileSync(join(node.varLibKubelet, 'config.yaml'), 'utf8')) as Record<string, unknown>;
  return { runtime: cfg.containerRuntimeEndpoint, image: cfg.imageServiceEndpoint };
};

/** What uninstall must restore: the static pod manifests kubeadm wrote, each kubelet's endpoints. */
export function stockSnapshot(state: kubeadm.KubeadmState) {
  return {
    manifests: Object.fromEntries(STATIC_PODS.map((c) => [c, readFileSync(`/etc/kubernetes/manifests/${c}.yaml`, 'utf8')])),
    kubelets: Object.fromEntries(state.nodes.map((n) => [n.spec.name, kubeletEndpoints(n)])),
  };
}

/** Ulysses on the path: kcm without the replaced controllers, kube-scheduler with the extender, a shim and its fallback guard per node, each kubelet on the shim. */
export async function expectInstalled(core: CoreV1Api, runDir: string): Promise<void> {
  const cp = kubeadm.CONTROL_PLANE_NAME;
  const kcm = await core.readNamespacedPod({ name: `kube-controller-manager-${cp}`, namespace: 'kube-system' });
  expect(kcm.spec?.containers[0]?.command).toContain(KCM_CONTROLLERS_FLAG);
  const sched = await core.readNamespacedPod({ name: `kube-scheduler-${cp}`, namespace: 'kube-system' });
  expect(sched.spec?.containers[0]?.command).toContain(SCHEDULER_CONFIG_FLAG);
  const fresh = kubeadm.readKubeadmState(runDir)!;
  for (const n of fresh.nodes) {
    const shim = fresh.processes.find((p) => p.name === `kubelet-shim/${n.spec.name}`);
    expect(shim && isAlive(shim.pid), `kubelet-shim on ${n.spec.name}`).toBe(true);
    const guard = fresh.processes.find((p) => p.name === `kubelet-shim-fallback/${n.spec.name}`);
    expect(guard && isAlive(guard.pid), `kubelet-shim-fallback on ${n.spec.name}`).toBe(true);
    expect(kubeletEndpoints(n)).toEqual({ runtime: `unix://${n.spec.shimSocket}`, image: `unix://${n.spec.shimSocket}` });
  }
}

/** Back to stock: the manifests byte for byte as kubeadm wrote them, the kubelets' endpoints as before, no shim, no Ulysses patches. */
export function expectStock(runDir: string, stock: ReturnType<typeof stockSnapshot>): void {
  for (const [c, text] of Object.entries(stock.manifests)) expect(readFileSync(`/etc/kubernetes/manifests/${c}.yaml`, 'utf8'), c).toBe(text);
  const fresh = kubeadm.readKubeadmState(runDir)!;
  for (const n of fresh.nodes) {
    expect(kubeletEndpoints(n), n.spec.name).toEqual(stock.kubelets[n.spec.name]);
    expect(fresh.processes.some((p) => p.name === `kubelet-shim/${n.spec.name}` || p.name === `kubelet-shim-fallback/${n.spec.name}`)).toBe(false);
  }
  expect(existsSync('/etc/kubernetes/ulysses')).toBe(false);
}

/** What must not change for running workloads in `namespaces`: pod uid, container id, restarts (static pods left out: regenerated on purpose). */
export async function workloadFingerprint(core: CoreV1Api, namespaces: readonly string[]): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const ns of namespaces) {
    for (const p of (await core.listNamespacedPod({ namespace: ns })).items) {
      if (p.metadata?.annotations?.['kubernetes.io/config.mirror']) continue;
      const c = p.status?.containerStatuses?.[0];
      out[`${ns}/${p.metadata!.name}`] = `${p.metadata!.uid} ${c?.containerID} restarts=${c?.restartCount}`;
    }
  }
  return out;
}

/** The process of a Ulysses pod on this machine (its POD_NAME and its component in the command line). */
export function podProcess(pod: string, component: string): number | undefined {
  const pid = readdirSync('/proc').filter((d) => /^\d+$/.test(d)).find((d) => {
    try {
      return readFileSync(`/proc/${d}/environ`, 'latin1').split('\0').includes(`POD_NAME=${pod}`) && readFileSync(`/proc/${d}/cmdline`, 'latin1').includes(component);
    } catch {
      return false;
    }
  });
  return pid === undefined ? undefined : Number(pid);
}

export async function eventsFor(core: CoreV1Api, ns: string, kind: string, name: string): Promise<CoreV1Event[]> {
  return (await core.listNamespacedEvent({ namespace: ns, fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}` })).items;
}
