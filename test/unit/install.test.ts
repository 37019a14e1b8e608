/**
 * The pure parts of `ulysses install` (manifests/install.ts): the kubelet endpoint edit and its
 * reversal, which objects each component installs, the image
 * override. The install itself runs on a real kubeadm cluster in test/integration/kubeadm.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { componentObjects, INSTALL_ORDER, KCM_CONTROLLERS_FLAG, NODE_PATHS, renderInstall, SCHEDULER_CONFIG_FLAG, withRuntimeEndpoints, clusterIpProblem } from '../../manifests/install.ts';
import { MANIFESTS_DIR, objectId } from '../../manifests/overlays.ts';

const KUBEADM_KUBELET_CONFIG = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
`;

describe('withRuntimeEndpoints', () => {
  it('points both CRI endpoints at the shim and returns what the kubelet had', () => {
    const shim = 'unix:///run/ulysses/kubelet-shim.sock';
    const { config, previous } = withRuntimeEndpoints(KUBEADM_KUBELET_CONFIG, { containerRuntimeEndpoint: shim, imageServiceEndpoint: shim });
    expect(previous).toEqual({ containerRuntimeEndpoint: 'unix:///run/containerd/containerd.sock' });
    const cfg = parseYaml(config) as Record<string, unknown>;
    expect(cfg.containerRuntimeEndpoint).toBe(shim);
    expect(cfg.imageServiceEndpoint).toBe(shim);
    expect(cfg.staticPodPath).toBe('/etc/kubernetes/manifests');
    // back: exactly the fields of before (an absent imageServiceEndpoint stays absent)
    const back = withRuntimeEndpoints(config, previous);
    expect(parseYaml(back.config)).toEqual(parseYaml(KUBEADM_KUBELET_CONFIG));
  });

  it('refuses a file that is not a KubeletConfiguration, naming the file', () => {
    expect(() => withRuntimeEndpoints('kind: Pod\n', {})).toThrow(`${NODE_PATHS.kubeletConfig}: kind is not KubeletConfiguration`);
    expect(() => withRuntimeEndpoints('', {})).toThrow('KubeletConfiguration');
  });
});

describe('the control-plane flags the install waits for', () => {
  it('are the values the kubeadm patches add', () => {
    const patch = (c: string) => parseYaml(readFileSync(join(MANIFESTS_DIR, 'kubeadm', 'patches', 'control-plane', `${c}+json.yaml`), 'utf8')) as Array<{ path: string; value: unknown }>;
    expect(patch('kube-controller-manager').map((p) => p.value)).toContain(KCM_CONTROLLERS_FLAG);
    expect(patch('kube-scheduler').map((p) => p.value)).toContain(SCHEDULER_CONFIG_FLAG);
    expect(SCHEDULER_CONFIG_FLAG).toBe(`--config=${NODE_PATHS.schedulerConfig}`);
  });
});

const kubectl = binaryPath('kubectl');
describe.skipIf(!existsSync(kubectl))('renderInstall and componentObjects', () => {
  it('installs every object of the kubeadm overlay except the shim DaemonSet (the shim is a node service), with the given image', async () => {
    const objects = await renderInstall({ kubectl, image: 'registry.example.com/ulysses:9.9.9' });
    const images = objects.flatMap((o) => ((o as { spec?: { template?: { spec?: { containers?: Array<{ image: string }> } } } }).spec?.template?.spec?.containers ?? []).map((c) => c.image));
    expect(images.length).toBeGreaterThan(0);
    expect(new Set(images)).toEqual(new Set(['registry.example.com/ulysses:9.9.9']));
    const shim = componentObjects(objects, 'kubelet-shim').map(objectId);
    expect(shim).toContain('ServiceAccount/ulysses-kubelet-shim');
    expect(shim).not.toContain('DaemonSet/ulysses-kubelet-shim');
    expect(componentObjects(objects, 'controller-manager').map(objectId)).toContain('Deployment/ulysses-controller-manager');
    expect(INSTALL_ORDER).toEqual(['apf', 'controller-manager', 'scheduler-extender', 'kubelet-shim']);
  });
  it('puts a nodeSelector on the Deployments only (the experiment keeps them on the control-plane node)', async () => {
    const objects = await renderInstall({ kubectl, nodeSelector: { 'node-role.kubernetes.io/control-plane': '' } });
    const selectors = Object.fromEntries(
      objects.filter((o) => ['Deployment', 'DaemonSet'].includes(o.kind)).map((o) => [objectId(o), (o as unknown as { spec: { template: { spec: { nodeSelector?: Record<string, string> } } } }).spec.template.spec.nodeSelector?.['node-role.kubernetes.io/control-plane']]),
    );
    expect(selectors['Deployment/ulysses-controller-manager']).toBe('');
    expect(selectors['Deployment/ulysses-scheduler-extender']).toBe('');
    expect(selectors['DaemonSet/ulysses-kubelet-shim']).toBeUndefined();
  });
});

describe("preflight of the extender's ClusterIP", () => {
  const svc = (namespace: string, name: string, ...clusterIPs: string[]) => ({ namespace, name, clusterIPs });
  it('accepts an address of the Service subnet that no other Service holds (its own Service on a re-install)', () => {
    expect(clusterIpProblem('10.96.0.250', '10.96.0.0/12', [svc('kube-system', 'kube-dns', '10.96.0.10'), svc('ulysses-system', 'ulysses-scheduler-extender', '10.96.0.250')])).toBeUndefined();
    expect(clusterIpProblem('10.96.0.250', undefined, [])).toBeUndefined(); // kubeadm's default subnet
    expect(clusterIpProblem('10.96.0.250', 'fd00::/108,10.96.0.0/16', [])).toBeUndefined(); // dual-stack
  });
  it('refuses an address outside the subnet, or held by another Service, naming both places to change', () => {
    expect(clusterIpProblem('10.96.0.250', '10.100.0.0/16', [])).toMatch(/not in the cluster's Service subnet 10.100.0.0\/16: .*service.yaml.*kube-scheduler-config.yaml/);
    expect(clusterIpProblem('10.96.0.250', '10.96.0.0/12', [svc('shop', 'cart', '10.96.0.250')])).toMatch(/held by Service shop\/cart/);
  });
});
