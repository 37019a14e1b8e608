// Pure parts of the kubeadm testbed and the Ulysses image: kubeadm's config documents, the kubelet
// command line from kubeadm-flags.env, the discovery CA hash, image names, what goes in the image,
// the tracked processes changed on disk.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it, onTestFinished } from 'vitest';
import { caCertHash, changeTrackedProcesses, initConfig, joinConfig, kubeadmNode, parseKubeadmFlags, readKubeadmState, type KubeadmState } from '../../experiments/testbed/kubeadm.ts';
import { imageComponent } from '../../experiments/testbed/kubeadm-images.ts';
import { inImage, productionPackages, ulyssesImageName } from '../../experiments/testbed/ulysses-image.ts';

describe('kubeadm testbed configuration', () => {
  const cp = kubeadmNode('/tmp/run', 0);
  const w1 = kubeadmNode('/tmp/run', 1);

  it('gives the control plane kubeadm defaults and workers their own ports and directories', () => {
    expect(cp.spec.name).toBe('kubeadm-control-plane');
    expect(cp.etcKubernetes).toBe('/etc/kubernetes');
    expect(cp.spec.kubeletPort).toBe(10250);
    expect(w1.role).toBe('worker');
    expect(w1.spec.kubeletPort).not.toBe(10250);
    expect(w1.etcKubernetes).toBe('/tmp/run/nodes/kubeadm-worker-1/etc-kubernetes');
    expect(w1.spec.bridge.length).toBeLessThanOrEqual(15); // Linux interface name limit
    expect(w1.spec.gateway).not.toBe(cp.spec.gateway);
  });

  it('writes InitConfiguration, ClusterConfiguration, KubeletConfiguration and KubeProxyConfiguration', () => {
    const docs = parseAllDocuments(initConfig('/tmp/run', cp, 'abcdef.0123456789abcdef', true)).map((d) => d.toJS() as Record<string, any>);
    expect(docs.map((d) => d.kind)).toEqual(['InitConfiguration', 'ClusterConfiguration', 'KubeletConfiguration', 'KubeProxyConfiguration']);
    const [init, cluster, kubelet, proxy] = docs as [any, any, any, any];
    expect(init.nodeRegistration.imagePullPolicy).toBe('IfNotPresent');
    expect(init.nodeRegistration.criSocket).toBe(`unix://${cp.spec.socket}`);
    expect(init.localAPIEndpoint.advertiseAddress).toBe(cp.spec.gateway);
    expect(cluster.controlPlaneEndpoint).toBe(`${cp.spec.gateway}:6443`);
    expect(cluster.dns).toBeUndefined();
    expect(kubelet).toMatchObject({ cgroupDriver: 'cgroupfs', failCgroupV1: false, failSwapOn: false, resolvConf: '/tmp/run/resolv.conf' });
    expect(proxy).toMatchObject({ mode: 'iptables', conntrack: { maxPerCore: 0 } });
    const noDns = parseAllDocuments(initConfig('/tmp/run', cp, 'abcdef.0123456789abcdef', false))[1]!.toJS() as any;
    expect(noDns.dns).toEqual({ disabled: true });
    expect(cluster.apiServer).toBeUndefined();
  });

  it('audits through kubeadm when asked: the apiserver flags and the audit directory mounted at the same path', () => {
    const cluster = parseAllDocuments(initConfig('/tmp/run', cp, 'abcdef.0123456789abcdef', true, ['failover-critical']))[1]!.toJS() as any;
    expect(cluster.apiServer.extraArgs).toEqual([
      { name: 'audit-policy-file', value: '/tmp/run/audit/policy.json' },
      { name: 'audit-log-path', value: '/tmp/run/audit/kube-apiserver-audit.log' },
      { name: 'audit-log-format', value: 'json' },
      { name: 'audit-log-maxsize', value: '0' },
    ]);
    expect(cluster.apiServer.extraVolumes).toEqual([{ name: 'ulysses-audit', hostPath: '/tmp/run/audit', mountPath: '/tmp/run/audit', readOnly: false, pathType: 'DirectoryOrCreate' }]);
  });

  it('joins a worker with the token, the CA hash and its node-local kubelet flags', () => {
    const j = parseAllDocuments(joinConfig(w1, cp, 'abcdef.0123456789abcdef', 'sha256:00'))[0]!.toJS() as any;
    expect(j.kind).toBe('JoinConfiguration');
    expect(j.discovery.bootstrapToken).toEqual({ apiServerEndpoint: `${cp.spec.gateway}:6443`, token: 'abcdef.0123456789abcdef', caCertHashes: ['sha256:00'] });
    expect(j.nodeRegistration.kubeletExtraArgs).toContainEqual({ name: 'root-dir', value: w1.varLibKubelet });
    expect(j.nodeRegistration.ignorePreflightErrors).toContain('Port-10250');
  });

  it('reads the kubelet flags from kubeadm-flags.env and fails naming the variable', () => {
    expect(parseKubeadmFlags('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///x.sock --node-ip=10.0.0.1"\n')).toEqual([
      '--container-runtime-endpoint=unix:///x.sock',
      '--node-ip=10.0.0.1',
    ]);
    expect(() => parseKubeadmFlags('OTHER=1')).toThrow(/KUBELET_KUBEADM_ARGS/);
  });

  it('computes the discovery CA hash as openssl does (sha256 of the SubjectPublicKeyInfo)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'ca-'));
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=kubernetes', '-days', '1', '-keyout', join(dir, 'k'), '-out', join(dir, 'c')], { stdio: 'ignore' });
    const pem = readFileSync(join(dir, 'c'), 'utf8');
    writeFileSync(join(dir, 'c.pem'), pem);
    const der = execFileSync('sh', ['-c', `openssl x509 -pubkey -in ${join(dir, 'c.pem')} | openssl pkey -pubin -outform der | openssl dgst -sha256 -hex`], { encoding: 'utf8' });
    expect(caCertHash(pem)).toBe(`sha256:${der.trim().split(' ').pop()}`);
  });

  it('maps kubeadm image names to components', () => {
    expect(imageComponent('registry.k8s.io/kube-apiserver:v1.36.3')).toBe('kube-apiserver');
    expect(imageComponent('registry.k8s.io/coredns/coredns:v1.14.2')).toBe('coredns');
    expect(imageComponent('registry.k8s.io/etcd:3.6.8-0')).toBe('etcd');
  });
});

describe('Ulysses image contents', () => {
  it('keeps production dependencies only', () => {
    const lock = {
      packages: {
        '': {},
        'node_modules/a': {},
        'node_modules/vitest': { dev: true },
        'node_modules/a/node_modules/b': {},
        'node_modules/@types/node': {},
        'node_modules/linked': { link: true },
      },
    };
    expect(productionPackages(lock)).toEqual(['node_modules/a', 'node_modules/a/node_modules/b']);
  });

  it('filters the app like .dockerignore and names the image as the CRI resolves ulysses:<version>', () => {
    expect(inImage('controller-manager/main.ts')).toBe(true);
    expect(inImage('manifests/entrypoint.sh')).toBe(true);
    expect(inImage('manifests/base/namespace.yaml')).toBe(true); // `ulysses install` from the image
    expect(inImage('test/unit/x.test.ts')).toBe(false);
    expect(inImage('core/kube.test.ts')).toBe(false);
    expect(ulyssesImageName('1.2.3')).toBe('docker.io/library/ulysses:1.2.3');
  });
});

describe('tracked processes of a kubeadm testbed', () => {
  it('two copies of the state (a test\'s, the node shell\'s) each change the list on disk: neither writes back the other\'s stale one', () => {
    // not a ulysses* name: the kubeadm testbed looks for other run dirs by that prefix in the temp dir
    const runDir = mkdtempSync(join(tmpdir(), 'tracked-processes-'));
    onTestFinished(() => rmSync(runDir, { recursive: true, force: true }));
    const proc = (name: string, pid: number) => ({ name, pid, logFile: '/dev/null', cmd: 'x', args: [] });
    const initial = { kind: 'kubeadm', runDir, processes: [proc('kubelet/cp', 10)] } as unknown as KubeadmState;
    writeFileSync(join(runDir, 'state.json'), JSON.stringify(initial));
    const a = JSON.parse(JSON.stringify(initial)) as KubeadmState;
    const b = JSON.parse(JSON.stringify(initial)) as KubeadmState;
    changeTrackedProcesses(a, (ps) => [...ps.filter((p) => p.name !== 'kubelet/cp'), proc('kubelet/cp', 11)]);
    changeTrackedProcesses(b, (ps) => [...ps, proc('kubelet-shim/cp', 12)]);
    expect(readKubeadmState(runDir)!.processes.map((p) => `${p.name}:${p.pid}`)).toEqual(['kubelet/cp:11', 'kubelet-shim/cp:12']);
    expect(b.processes.map((p) => p.pid)).toEqual([11, 12]);
  });
});
