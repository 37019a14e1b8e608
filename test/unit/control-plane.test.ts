/**
 * What the install changes on kubeadm's control plane (manifests/control-plane.ts): the
 * ClusterConfiguration entries `kubeadm upgrade` keeps, the in-place static pod edits and their exact
 * reversal, the operator's scheduler config merged, and the version/node preflight
 * (manifests/install.ts). The install itself runs on a real kubeadm cluster in
 * test/integration/kubeadm.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import type { V1Node } from '@kubernetes/client-node';
import { clusterConfigurationHas, clusterConfigurationWith, clusterConfigurationWithout, flagValues, hostPathOf, manifestWith, manifestWithout, mergedSchedulerConfig } from '../../manifests/control-plane.ts';
import { INSTALL_ORDER, KCM_CONTROLLERS_FLAG, SCHEDULER_CONFIG_FLAG, SUPPORTED_MINORS, UNINSTALL_ORDER, versionProblems } from '../../manifests/install.ts';
import { MANIFESTS_DIR } from '../../manifests/overlays.ts';
import { handedBack, takenBack } from '../../manifests/kcm-handback.ts';
import { REPO_ROOT } from '../../experiments/testbed/ulysses-image.ts';
import { kcmManifest, OPERATOR_SCHEDULER_CONFIG } from '../kubeadm-fixtures.ts';

/** kubeadm's ClusterConfiguration as kube-system/kubeadm-config stores it, with an operator's own extraArgs. */
const CLUSTER = `apiServer: {}
apiVersion: kubeadm.k8s.io/v1beta4
caCertificateValidityPeriod: 87600h0m0s
certificateValidityPeriod: 8760h0m0s
certificatesDir: /etc/kubernetes/pki
clusterName: kubernetes
controllerManager:
  extraArgs:
  - name: node-monitor-grace-period
    value: 20s
dns: {}
encryptionAlgorithm: RSA-2048
etcd:
  local:
    dataDir: /var/lib/etcd
imageRepository: registry.k8s.io
kind: ClusterConfiguration
kubernetesVersion: v1.37.2
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.96.0.0/12
proxy: {}
scheduler: {}
`;

const kcm = kcmManifest;

const scheduler = (flags = '', mounts = '', volumes = '') => `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-scheduler
  name: kube-scheduler
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-scheduler
    - --authentication-kubeconfig=/etc/kubernetes/scheduler.conf
    - --bind-address=127.0.0.1
    - --kubeconfig=/etc/kubernetes/scheduler.conf
    - --leader-elect=true
${flags}    image: registry.k8s.io/kube-scheduler:v1.37.2
    name: kube-scheduler
    volumeMounts:
    - mountPath: /etc/kubernetes/scheduler.conf
      name: kubeconfig
      readOnly: true
${mounts}  hostNetwork: true
  volumes:
  - hostPath:
      path: /etc/kubernetes/scheduler.conf
      type: FileOrCreate
    name: kubeconfig
${volumes}status: {}
`;

const commandOf = (text: string) => (parse(text) as { spec: { containers: Array<{ command: string[] }> } }).spec.containers[0]!.command;
const OURS = readFileSync(join(MANIFESTS_DIR, 'kubeadm', 'kube-scheduler-config.yaml'), 'utf8');

describe("kubeadm's ClusterConfiguration (what kubeadm upgrade regenerates the static pods from)", () => {
  it("records kcm's --controllers and kube-scheduler's --config with its volume next to the operator's entries; idempotent", () => {
    const both = clusterConfigurationWith(clusterConfigurationWith(CLUSTER, 'kube-controller-manager'), 'kube-scheduler');
    const cc = parse(both) as { controllerManager: { extraArgs: { name: string; value: string }[] }; scheduler: { extraArgs: unknown[]; extraVolumes: { name: string }[] }; kubernetesVersion: string };
    expect(cc.controllerManager.extraArgs).toEqual([{ name: 'node-monitor-grace-period', value: '20s' }, { name: 'controllers', value: KCM_CONTROLLERS_FLAG.slice('--controllers='.length) }]);
    expect(cc.scheduler.extraArgs).toEqual([{ name: 'config', value: SCHEDULER_CONFIG_FLAG.slice('--config='.length) }]);
    expect(cc.scheduler.extraVolumes.map((v) => v.name)).toEqual(['ulysses-config']);
    expect(cc.kubernetesVersion).toBe('v1.37.2');
    // block style, as kubeadm writes it (its `scheduler: {}` is a flow map)
    expect(both).toContain('scheduler:\n  extraArgs:\n  - name: config\n');
    expect(clusterConfigurationWith(both, 'kube-scheduler')).toBe(both);
    expect(clusterConfigurationHas(both, 'kube-controller-manager')).toBe(true);
    expect(clusterConfigurationHas(CLUSTER, 'kube-controller-manager')).toBe(false);
  });

  it('gives back the text of before byte for byte, or after a kubeadm upgrade only takes its entries out (an operator\'s own --controllers restored)', () => {
    const installed = clusterConfigurationWith(CLUSTER, 'kube-controller-manager');
    expect(clusterConfigurationWithout(installed, CLUSTER, 'kube-controller-manager')).toBe(CLUSTER);
    const operators = CLUSTER.replace('  - name: node-monitor-grace-period\n', '  - name: controllers\n    value: "*,-ttl-controller"\n  - name: node-monitor-grace-period\n');
    const upgraded = clusterConfigurationWith(operators, 'kube-controller-manager').replace('v1.37.2', 'v1.37.3');
    const back = parse(clusterConfigurationWithout(upgraded, operators, 'kube-controller-manager')) as { controllerManager: { extraArgs: unknown[] }; kubernetesVersion: string };
    expect(back.kubernetesVersion).toBe('v1.37.3');
    expect(back.controllerManager.extraArgs).toEqual([{ name: 'controllers', value: '*,-ttl-controller' }, { name: 'node-monitor-grace-period', value: '20s' }]);
    // both installed (in install order), taken out one by one: each step exact, whichever goes first
    const both = clusterConfigurationWith(clusterConfigurationWith(CLUSTER, 'kube-controller-manager'), 'kube-scheduler');
    for (const [first, second] of [['kube-scheduler', 'kube-controller-manager'], ['kube-controller-manager', 'kube-scheduler']] as const) {
      const one = clusterConfigurationWithout(both, CLUSTER, first);
      expect(one).toBe(clusterConfigurationWith(CLUSTER, second));
      expect(clusterConfigurationWithout(one, CLUSTER, second)).toBe(CLUSTER);
    }
    // changed since: an emptied section that was there before (scheduler: {}) stays
    const changed = clusterConfigurationWith(CLUSTER, 'kube-scheduler').replace('clusterName: kubernetes', 'clusterName: k');
    expect(parse(clusterConfigurationWithout(changed, CLUSTER, 'kube-scheduler'))).toEqual({ ...(parse(CLUSTER) as object), clusterName: 'k' });
    // no copy of before: the entries go, empty sections with them
    const sched = parse(clusterConfigurationWithout(clusterConfigurationWith(CLUSTER, 'kube-scheduler').replace('v1.37.2', 'v1.37.3'), undefined, 'kube-scheduler')) as Record<string, unknown>;
    expect(sched.scheduler).toBeUndefined();
  });

  it('refuses what it cannot edit, naming the ConfigMap and the field', () => {
    expect(() => clusterConfigurationWith(CLUSTER.replace('v1beta4', 'v1beta3'), 'kube-controller-manager')).toThrow('ConfigMap kube-system/kubeadm-config, ClusterConfiguration: apiVersion kubeadm.k8s.io/v1beta3');
    expect(() => clusterConfigurationWith(CLUSTER.replace("controllerManager:\n  extraArgs:\n  - name: node-monitor-grace-period\n    value: 20s", 'controllerManager:\n  extraArgs: 3'), 'kube-controller-manager')).toThrow('controllerManager.extraArgs is not a list');
    expect(() => clusterConfigurationWith(`${CLUSTER}# ${'x'.repeat(1 << 20)}\n`, 'kube-controller-manager')).toThrow('more than the 1048576 this reads');
  });
});

describe('static pod manifests, edited in place', () => {
  it("kcm: Ulysses' --controllers in place of kubeadm's (as kubeadm writes an extraArg), the operator's hand edit kept; back byte for byte", () => {
    const before = kcm('    - --v=4\n');
    const installed = manifestWith(before, 'kube-controller-manager');
    const command = commandOf(installed);
    expect(command.filter((a) => a.startsWith('--controllers='))).toEqual([KCM_CONTROLLERS_FLAG]);
    expect(command.indexOf(KCM_CONTROLLERS_FLAG)).toBe(2);
    expect(command).toContain('--v=4');
    expect(manifestWith(installed, 'kube-controller-manager')).toBe(installed);
    expect(manifestWithout(installed, before, 'kube-controller-manager')).toBe(before);
  });

  it('kcm handed back by the kcm handback when uninstalled: taken back first, then the backup byte for byte (no handback annotation left)', () => {
    const before = kcm('    - --v=4\n');
    const handed = handedBack(manifestWith(before, 'kube-controller-manager'), KCM_CONTROLLERS_FLAG, '2026-11-29T10:00:00Z')!;
    expect(manifestWithout(handed, before, 'kube-controller-manager')).not.toBe(before);
    expect(manifestWithout(takenBack(handed, KCM_CONTROLLERS_FLAG)!, before, 'kube-controller-manager')).toBe(before);
  });

  it('kcm changed since the install (a kubeadm upgrade): only the flag goes back to what it was, the new image stays', () => {
    const before = kcm();
    const upgraded = manifestWith(before, 'kube-controller-manager').replace('v1.37.2', 'v1.37.3');
    const back = manifestWithout(upgraded, before, 'kube-controller-manager');
    expect(commandOf(back)).toEqual(commandOf(before));
    expect(back).toContain('kube-controller-manager:v1.37.3');
    // no backup at all: the flag removed
    expect(flagValues(manifestWithout(upgraded, undefined, 'kube-controller-manager'), 'kube-controller-manager', 'controllers')).toEqual([]);
  });

  it("kube-scheduler: --config, the volume and its mount added; an operator's own --config replaced and given back", () => {
    const before = scheduler('    - --config=/etc/sched/config.yaml\n', '    - mountPath: /etc/sched\n      name: sched\n', '  - hostPath:\n      path: /srv/sched\n    name: sched\n');
    const installed = manifestWith(before, 'kube-scheduler');
    expect(flagValues(installed, 'kube-scheduler', 'config')).toEqual([SCHEDULER_CONFIG_FLAG.slice('--config='.length)]);
    const pod = parse(installed) as { spec: { volumes: { name: string; hostPath: { path: string; type?: string } }[]; containers: { volumeMounts: { name: string; readOnly?: boolean }[] }[] } };
    expect(pod.spec.volumes.find((v) => v.name === 'ulysses-config')?.hostPath).toEqual({ path: '/etc/kubernetes/ulysses', type: 'DirectoryOrCreate' });
    expect(pod.spec.containers[0]!.volumeMounts.find((m) => m.name === 'ulysses-config')?.readOnly).toBe(true);
    expect(pod.spec.volumes.map((v) => v.name)).toContain('sched');
    expect(manifestWithout(installed, before, 'kube-scheduler')).toBe(before);
    expect(flagValues(manifestWithout(installed.replace('v1.37.2', 'v1.37.3'), before, 'kube-scheduler'), 'kube-scheduler', 'config')).toEqual(['/etc/sched/config.yaml']);
    expect(hostPathOf(before, 'kube-scheduler', '/etc/sched/config.yaml')).toBe('/srv/sched/config.yaml');
    expect(hostPathOf(before, 'kube-scheduler', '/etc/schedx/config.yaml')).toBeUndefined();
  });

  it("leaves a manifest without Ulysses' entries alone, whatever its flags (nothing to give back, no backup)", () => {
    expect(manifestWithout(kcm(), undefined, 'kube-controller-manager')).toBe(kcm());
    const operators = scheduler('    - --config=/etc/sched/config.yaml\n');
    expect(manifestWithout(operators, undefined, 'kube-scheduler')).toBe(operators);
    const cc = CLUSTER.replace('  - name: node-monitor-grace-period\n    value: 20s', '  - name: controllers\n    value: "*,-ttl-controller"');
    expect(clusterConfigurationWithout(cc, undefined, 'kube-controller-manager')).toBe(cc);
    // given back already (a second uninstall, its copy of before gone): untouched, `scheduler: {}` kept
    expect(clusterConfigurationWithout(CLUSTER, undefined, 'kube-scheduler')).toBe(CLUSTER);
  });

  it('refuses a file that is not a static pod with a command, naming the file', () => {
    expect(() => manifestWith('kind: Pod\nspec: {}\n', 'kube-controller-manager')).toThrow('/etc/kubernetes/manifests/kube-controller-manager.yaml: not a static pod with a container command');
    expect(() => manifestWith('a: [', 'kube-scheduler')).toThrow('/etc/kubernetes/manifests/kube-scheduler.yaml: not YAML');
  });
});

describe("kube-scheduler's configuration", () => {
  it("without one of the operator's: Ulysses', reading the scheduler's --kubeconfig", () => {
    expect(mergedSchedulerConfig(OURS, undefined, '/etc/kubernetes/scheduler.conf', '')).toBe(OURS);
    const moved = parse(mergedSchedulerConfig(OURS, undefined, '/etc/k8s/sched.conf', '')) as { clientConnection: { kubeconfig: string }; extenders: unknown[] };
    expect(moved.clientConnection.kubeconfig).toBe('/etc/k8s/sched.conf');
    expect(moved.extenders).toHaveLength(2);
  });

  it("the operator's merged: their profiles, scoring and extenders kept, Ulysses' appended once", () => {
    const theirs = `${OPERATOR_SCHEDULER_CONFIG}extenders:
- urlPrefix: http://127.0.0.1:9999
  filterVerb: filter
- urlPrefix: https://10.96.0.250:8888
  filterVerb: old
`;
    const merged = parse(mergedSchedulerConfig(OURS, theirs, '/etc/kubernetes/scheduler.conf', 'cp:/srv/sched/config.yaml')) as { percentageOfNodesToScore: number; profiles: unknown[]; extenders: { urlPrefix: string; filterVerb?: string }[]; clientConnection: { kubeconfig: string } };
    expect(merged.percentageOfNodesToScore).toBe(77);
    expect(merged.profiles).toEqual((parse(theirs) as { profiles: unknown }).profiles);
    expect(merged.extenders.map((e) => e.urlPrefix)).toEqual(['http://127.0.0.1:9999', 'https://10.96.0.250:8888', 'https://10.96.0.250:8888']);
    expect(merged.extenders.map((e) => e.filterVerb)).toEqual(['filter', 'filter', undefined]);
    expect(merged.clientConnection.kubeconfig).toBe('/etc/kubernetes/scheduler.conf');
  });

  it('refuses an old or foreign config, naming where it was read', () => {
    expect(() => mergedSchedulerConfig(OURS, 'apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n', undefined, 'cp:/srv/s.yaml')).toThrow('cp:/srv/s.yaml: apiVersion kubescheduler.config.k8s.io/v1beta3');
    expect(() => mergedSchedulerConfig(OURS, 'kind: Pod\n', undefined, 'cp:/srv/s.yaml')).toThrow('cp:/srv/s.yaml: kind is Pod');
  });
});

describe('install preflight: versions and nodes', () => {
  const node = (name: string, info: Partial<{ operatingSystem: string; containerRuntimeVersion: string; kubeletVersion: string }>) =>
    ({ metadata: { name }, status: { nodeInfo: { operatingSystem: 'linux', containerRuntimeVersion: 'containerd://2.1.4', kubeletVersion: 'v1.37.2', ...info } } }) as V1Node;

  it('accepts the supported releases, linux nodes with containerd and kubelets within the skew', () => {
    expect(versionProblems('v1.37.2', [node('a', {}), node('b', { kubeletVersion: 'v1.34.0' })], true)).toEqual([]);
    expect(versionProblems('v1.36.3', [node('a', { kubeletVersion: 'v1.36.3' })], true)).toEqual([]);
  });

  it('names the apiserver release, and each node with its field', () => {
    expect(versionProblems('v1.35.1', [], true)).toEqual([`the apiserver is v1.35.1; this Ulysses supports Kubernetes ${SUPPORTED_MINORS.join(' and ')}`]);
    const problems = versionProblems('v1.37.2', [node('win', { operatingSystem: 'windows' }), node('crio', { containerRuntimeVersion: 'cri-o://1.33' }), node('old', { kubeletVersion: 'v1.33.9' }), node('new', { kubeletVersion: 'v1.38.0' })], true);
    expect(problems).toHaveLength(4);
    expect(problems[0]).toContain('node win: status.nodeInfo.operatingSystem is windows');
    expect(problems[1]).toContain('node crio: status.nodeInfo.containerRuntimeVersion is cri-o://1.33');
    expect(problems[2]).toContain('node old: status.nodeInfo.kubeletVersion v1.33.9 is outside the skew');
    expect(problems[3]).toContain('node new: status.nodeInfo.kubeletVersion v1.38.0');
    // the nodes matter only to the kubelet-shim
    expect(versionProblems('v1.37.2', [node('win', { operatingSystem: 'windows' })], false)).toEqual([]);
  });

  it('supports exactly the minors the testbed builds and tests (experiments/testbed/k8s-versions.txt)', () => {
    const tested = readFileSync(join(REPO_ROOT, 'experiments', 'testbed', 'k8s-versions.txt'), 'utf8').split('\n').filter((l) => /^v\d/.test(l)).map((l) => /^v(\d+\.\d+)/.exec(l)![1]);
    expect([...SUPPORTED_MINORS].sort()).toEqual([...new Set(tested)].sort());
  });

  it('uninstall takes the control plane back first, and every component once', () => {
    expect([...UNINSTALL_ORDER].sort()).toEqual([...INSTALL_ORDER].sort());
    expect(UNINSTALL_ORDER.indexOf('kubelet-shim')).toBeGreaterThan(Math.max(UNINSTALL_ORDER.indexOf('controller-manager'), UNINSTALL_ORDER.indexOf('scheduler-extender')));
  });
});
