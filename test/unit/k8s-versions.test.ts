// The per-release table (experiments/testbed/k8s-versions.txt) that build-binaries.sh, binaries.ts
// and the kubeadm images follow: parsing, bad rows, unknown releases, and kubeadm's image list
// checked against a row.

import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { K8S_RELEASES, k8sRelease, parseK8sReleases, VERSIONS_FILE } from '../../experiments/testbed/binaries.ts';
import { imageTag, releaseMismatches } from '../../experiments/testbed/kubeadm-images.ts';

/** `kubeadm config images list --kubernetes-version v1.37.2` of kubeadm v1.37.2. */
const KUBEADM_137_IMAGES = [
  'registry.k8s.io/kube-apiserver:v1.37.2',
  'registry.k8s.io/kube-controller-manager:v1.37.2',
  'registry.k8s.io/kube-scheduler:v1.37.2',
  'registry.k8s.io/kube-proxy:v1.37.2',
  'registry.k8s.io/coredns/coredns:v1.14.6',
  'registry.k8s.io/pause:3.10.2',
  'registry.k8s.io/etcd:3.7.0-0',
];

describe('k8s-versions.txt', () => {
  it('has the tested releases with what their kubeadm deploys (cmd/kubeadm/app/constants) and one default', () => {
    const by = Object.fromEntries(K8S_RELEASES.map((r) => [r.kubernetes, r]));
    expect(by['v1.36.3']).toMatchObject({ etcd: 'v3.6.8', coredns: 'v1.14.2', pause: '3.10.2' });
    expect(by['v1.37.2']).toMatchObject({ etcd: 'v3.7.0', coredns: 'v1.14.6', pause: '3.10.2' });
    expect(K8S_RELEASES.filter((r) => r.isDefault)).toHaveLength(1);
  });

  it('rejects a malformed row naming the file, the line and the column', () => {
    const head = '# kubernetes etcd coredns pause default\n';
    expect(() => parseK8sReleases(`${head}v1.36.3 v3.6.8 v1.14.2 3.10.2\n`, 'f.txt')).toThrow(/^f\.txt:2: 4 columns instead of 5/);
    expect(() => parseK8sReleases(`${head}v1.36.3 3.6.8 v1.14.2 3.10.2 default\n`, 'f.txt')).toThrow(/f\.txt:2: etcd "3\.6\.8" is not a version like v3\.6\.8/);
    expect(() => parseK8sReleases(`${head}v1.36.3 v3.6.8 v1.14.2 3.10.2 yes\n`, 'f.txt')).toThrow(/last column is "yes"/);
    expect(() => parseK8sReleases(`${head}v1.36.3 v3.6.8 v1.14.2 3.10.2 default\nv1.36.3 v3.6.8 v1.14.2 3.10.2 -\n`, 'f.txt')).toThrow(/f\.txt:3: a second row for v1\.36\.3/);
    expect(() => parseK8sReleases(`${head}v1.36.3 v3.6.8 v1.14.2 3.10.2 default\nv1.37.2 v3.7.0 v1.14.6 3.10.2 default\n`, 'f.txt')).toThrow(/2 rows are marked default/);
    expect(() => parseK8sReleases(`${head}v1.36.3 v3.6.8 v1.14.2 3.10.2 -\n`, 'f.txt')).toThrow(/0 rows are marked default/);
  });

  it('refuses a release without a row unless etcd and CoreDNS are both given, and lets the variables override a row', () => {
    expect(() => k8sRelease('v1.37.1', {})).toThrow(/K8S_VERSION=v1\.37\.1 has no row in .*k8s-versions\.txt \(known: .*v1\.36\.3.*v1\.37\.2.*\)/);
    expect(() => k8sRelease('v1.37.1', { ETCD_VERSION: 'v3.7.0' })).toThrow(/set ETCD_VERSION and COREDNS_VERSION/);
    expect(k8sRelease('v1.37.1', { ETCD_VERSION: 'v3.7.0', COREDNS_VERSION: 'v1.14.6' })).toMatchObject({ kubernetes: 'v1.37.1', etcd: 'v3.7.0', coredns: 'v1.14.6' });
    expect(k8sRelease('v1.37.2', { ETCD_VERSION: 'v3.7.1' })).toMatchObject({ etcd: 'v3.7.1', coredns: 'v1.14.6', pause: '3.10.2' });
  });

  it('build-binaries.sh refuses the same unknown release before building anything', () => {
    const cache = join(mkdtempSync(join(tmpdir(), 'k8s-versions-')), 'cache');
    const r = spawnSync('bash', [join(VERSIONS_FILE, '..', 'build-binaries.sh'), cache], { encoding: 'utf8', env: { ...process.env, K8S_VERSION: 'v1.37.1', ETCD_VERSION: '', COREDNS_VERSION: '' } });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/K8S_VERSION=v1\.37\.1 has no row in .*k8s-versions\.txt \(known: v1\.36\.3 v1\.37\.2\)/);
    expect(spawnSync('test', ['-e', cache]).status).not.toBe(0);
  });
});

describe("kubeadm's image list against a row", () => {
  it('reads image tags', () => {
    expect(imageTag('registry.k8s.io/etcd:3.7.0-0')).toBe('3.7.0-0');
    expect(imageTag('registry.k8s.io/coredns/coredns:v1.14.6')).toBe('v1.14.6');
    expect(imageTag('localhost:5000/pause')).toBe('');
  });

  it('agrees with the release kubeadm belongs to and names every image that differs for another row', () => {
    const r137 = K8S_RELEASES.find((r) => r.kubernetes === 'v1.37.2')!;
    const r136 = K8S_RELEASES.find((r) => r.kubernetes === 'v1.36.3')!;
    expect(releaseMismatches(KUBEADM_137_IMAGES, r137)).toEqual([]);
    expect(releaseMismatches(KUBEADM_137_IMAGES, { ...r136, kubernetes: 'v1.37.2' })).toEqual([
      'kubeadm v1.37.2 deploys registry.k8s.io/etcd:3.7.0-0, the row says etcd 3.6.8-0',
      'kubeadm v1.37.2 deploys registry.k8s.io/coredns/coredns:v1.14.6, the row says coredns v1.14.2',
    ]);
    expect(releaseMismatches(KUBEADM_137_IMAGES.filter((n) => !n.includes('pause')), r137)).toEqual(['kubeadm v1.37.2 lists no pause image (expected tag 3.10.2)']);
  });
});
