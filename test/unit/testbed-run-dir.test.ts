// Which testbed a run directory holds (experiments/testbed/run-dir.ts), what `testbed down|status|
// kubeconfig` act on, and what `testbed up --kubeadm` says when another kubeadm cluster is up.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { kubeadmNode, readKubeadmState, type KubeadmState } from '../../experiments/testbed/kubeadm.ts';
import { realNodeSpec } from '../../experiments/testbed/realnode.ts';
import { downCommand, foreignKubeadmClusterMessage, kubeadmRunDirs, runDirKind, stateKind, testbedTarget, ulyssesDirsIn } from '../../experiments/testbed/run-dir.ts';
import { readState, type TestbedState } from '../../experiments/testbed/testbed.ts';

const root = mkdtempSync(join(tmpdir(), 'ulysses-run-dir-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The state.json each testbed's `up` writes, in their own types. */
function plainState(runDir: string): TestbedState {
  return {
    version: 'v1.37.2',
    runDir,
    kubeconfig: join(runDir, 'kubeconfigs', 'admin.kubeconfig'),
    apiserver: 'https://127.0.0.1:16443',
    options: { realNodes: 2, kwokNodes: 0, controllers: '*', pinCpus: false },
    processes: [{ name: 'etcd', pid: 123, logFile: join(runDir, 'logs', 'etcd.log'), cmd: 'etcd', args: [] }],
    realNodes: [realNodeSpec(runDir, 1), realNodeSpec(runDir, 2)],
    kwokNodes: [],
    startedAt: '2026-11-27T10:00:00.000Z',
    ready: true,
  };
}
function kubeadmState(runDir: string): KubeadmState {
  return {
    kind: 'kubeadm',
    version: 'v1.37.2',
    runDir,
    kubeconfig: '/etc/kubernetes/admin.conf',
    apiserver: 'https://10.244.100.1:6443',
    nodes: [kubeadmNode(runDir, 0), kubeadmNode(runDir, 1)],
    processes: [{ name: 'kubelet/kubeadm-control-plane', pid: 456, logFile: join(runDir, 'nodes', 'kubeadm-control-plane', 'kubelet.log'), cmd: 'kubelet', args: [] }],
    coredns: true,
    host: { ipForward: '1', routeLocalnet: '0', created: [] },
    timingsMs: {},
    startedAt: '2026-11-27T10:00:00.000Z',
    ready: true,
  };
}
/** A run dir under the test's temp dir holding `state` (or nothing, or this text). */
function runDir(name: string, state?: object | string): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  if (state !== undefined) writeFileSync(join(dir, 'state.json'), typeof state === 'string' ? state : JSON.stringify(state, null, 2));
  return dir;
}

describe('the kind of a run dir', () => {
  const plain = runDir('ulysses-plain', plainState(join(root, 'ulysses-plain')));
  const kubeadm = runDir('ulysses-kubeadm', kubeadmState(join(root, 'ulysses-kubeadm')));
  const empty = runDir('ulysses-empty');
  const other = runDir('ulysses-other', { hello: 'world' });
  const broken = runDir('ulysses-broken', '{"kind": "kub');

  it("reads each testbed's own state file as its kind; no state, another file or broken JSON are told apart", () => {
    expect(runDirKind(plain)).toBe('plain');
    expect(runDirKind(kubeadm)).toBe('kubeadm');
    expect(runDirKind(empty)).toBe('none');
    expect(runDirKind(join(root, 'no-such-dir'))).toBe('none');
    expect(runDirKind(other)).toBe('unknown');
    expect(runDirKind(broken)).toBe('unknown');
  });

  it("the discriminator: kind \"kubeadm\", else a plain testbed's realNodes list", () => {
    expect(stateKind(kubeadmState('/r'))).toBe('kubeadm');
    expect(stateKind(plainState('/r'))).toBe('plain');
    // a kubeadm state has no realNodes, a plain one no kind: neither is read as the other
    expect(stateKind({ ...plainState('/r'), kind: 'something-else' })).toBeUndefined();
    expect(stateKind({ nodes: [] })).toBeUndefined();
    expect(stateKind(null)).toBeUndefined();
  });

  it('`testbed down --run-dir <kubeadm run dir>` without --kubeadm acts on the kubeadm testbed (and the reverse)', () => {
    const defaults = { plain: join(root, 'default-plain'), kubeadm: join(root, 'default-kubeadm') };
    expect(testbedTarget({ kubeadm: false, runDir: kubeadm }, defaults)).toEqual({ kind: 'kubeadm', asked: 'plain', runDir: kubeadm });
    expect(testbedTarget({ kubeadm: true, runDir: plain }, defaults)).toEqual({ kind: 'plain', asked: 'kubeadm', runDir: plain });
    expect(testbedTarget({ kubeadm: true, runDir: kubeadm }, defaults)).toEqual({ kind: 'kubeadm', asked: 'kubeadm', runDir: kubeadm });
    // no state: the kind asked for, in its default run dir
    expect(testbedTarget({ kubeadm: true }, defaults)).toEqual({ kind: 'kubeadm', asked: 'kubeadm', runDir: defaults.kubeadm });
    expect(testbedTarget({ kubeadm: false, runDir: empty }, defaults)).toEqual({ kind: 'plain', asked: 'plain', runDir: empty });
    expect(() => testbedTarget({ kubeadm: false, runDir: other }, defaults)).toThrow(/ulysses-other\/state\.json is not a testbed's state/);
  });

  it("each testbed's reader refuses the other's state, naming the down that fits it", () => {
    expect(() => readState(kubeadm)).toThrow(`is a kubeadm testbed's state, not a plain testbed's (\`ulysses testbed down --kubeadm --run-dir ${kubeadm}\` takes it down)`);
    expect(() => readKubeadmState(plain)).toThrow(`is a plain testbed's state, not a kubeadm testbed's (\`ulysses testbed down --run-dir ${plain}\` takes it down)`);
    expect(readState(plain)?.realNodes).toHaveLength(2);
    expect(readKubeadmState(kubeadm)?.nodes).toHaveLength(2);
  });

  it('finds the kubeadm run dirs among the candidates and the ulysses* dirs of a parent, leaving out the one being brought up', () => {
    const candidates = [plain, kubeadm, `${kubeadm}/`, empty, join(root, 'no-such-dir'), ...ulyssesDirsIn(root)];
    expect(kubeadmRunDirs(candidates)).toEqual([kubeadm]);
    expect(kubeadmRunDirs(candidates, `${kubeadm}/`)).toEqual([]);
    expect(ulyssesDirsIn(root).sort()).toEqual([broken, empty, kubeadm, other, plain].sort());
    expect(ulyssesDirsIn(join(root, 'no-such-dir'))).toEqual([]);
  });
});

describe('another kubeadm cluster on the host', () => {
  const leftovers = ['/etc/kubernetes/manifests', '/etc/kubernetes/admin.conf', '/var/lib/etcd/member'];

  it('names the run dir whose state was found and the exact down that cleans it', () => {
    const msg = foreignKubeadmClusterMessage(leftovers, ['/tmp/ulysses-testbed-kubeadm']);
    expect(msg).toBe(
      'a kubeadm cluster exists on this machine (/etc/kubernetes/manifests, /etc/kubernetes/admin.conf, /var/lib/etcd/member): the kubeadm testbed whose state is in /tmp/ulysses-testbed-kubeadm; run `ulysses testbed down --kubeadm --run-dir /tmp/ulysses-testbed-kubeadm` first',
    );
    expect(msg).not.toContain('kubeadm reset');
  });

  it('several state files: a down for each', () => {
    const msg = foreignKubeadmClusterMessage(leftovers, ['/tmp/a', '/tmp/it run']);
    expect(msg).toContain('kubeadm testbed state is in /tmp/a, /tmp/it run');
    expect(msg).toContain("run `ulysses testbed down --kubeadm --run-dir /tmp/a` and `ulysses testbed down --kubeadm --run-dir '/tmp/it run'` first");
  });

  it('kubeadm reset -f only when no testbed state is found', () => {
    expect(foreignKubeadmClusterMessage(leftovers.slice(0, 1), [])).toBe(
      'a kubeadm cluster not started by this testbed seems to exist (/etc/kubernetes/manifests; no kubeadm testbed state found): run `kubeadm reset -f` first',
    );
  });

  it('down commands for both kinds', () => {
    expect(downCommand('kubeadm', '/tmp/x')).toBe('ulysses testbed down --kubeadm --run-dir /tmp/x');
    expect(downCommand('plain', '/tmp/x')).toBe('ulysses testbed down --run-dir /tmp/x');
  });
});
