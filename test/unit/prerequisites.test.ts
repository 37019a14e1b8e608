import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { FatalError } from '../../experiments/testbed/processes.ts';
import {
  ALL_PREREQUISITES,
  BUILD_PREREQUISITES,
  PREREQUISITES,
  TESTBED_PREREQUISITES,
  ULYSSES_IMAGE_PREREQUISITES,
  debianPackages,
  ensurePrerequisites,
  hostProbe,
  planPrerequisites,
  type HostProbe,
} from '../../experiments/testbed/prerequisites.ts';

/** A host with these executables (absolute paths or commands on PATH) and nothing else. */
function fakeHost(o: { root?: boolean; files?: string[]; cmds?: string[]; overlay?: boolean; cgroups?: boolean }): HostProbe & { files: Set<string>; cmds: Set<string> } {
  const files = new Set(o.files ?? []);
  const cmds = new Set(o.cmds ?? []);
  return {
    files,
    cmds,
    isRoot: o.root ?? true,
    executable: (p) => files.has(p),
    onPath: (c) => cmds.has(c),
    fileContains: (p, t) => (p === '/proc/filesystems' && t === 'overlay' ? o.overlay ?? true : p === '/proc/mounts' ? o.cgroups ?? true : false),
    exists: (p) => files.has(p),
  };
}

const complete = {
  files: ['/usr/sbin/runc', '/usr/lib/cni/bridge', '/usr/lib/cni/host-local', '/usr/lib/cni/loopback', '/usr/include/errno.h'],
  cmds: ['ip', 'openssl', 'gcc', 'taskset', 'go', 'apt-get'],
};

describe('testbed prerequisites', () => {
  it('a complete host needs nothing', () => {
    const plan = planPrerequisites([...TESTBED_PREREQUISITES, ...BUILD_PREREQUISITES], fakeHost(complete));
    expect(plan.missing).toEqual([]);
  });

  it('the fresh machine of the newcomer report: runc and the CNI plugins missing -> two packages, once each', () => {
    const host = fakeHost({ ...complete, files: complete.files.filter((f) => !f.startsWith('/usr/sbin') && !f.startsWith('/usr/lib/cni')) });
    const plan = planPrerequisites(TESTBED_PREREQUISITES, host);
    expect(plan.missing.map((m) => m.what)).toEqual([
      'runc (/usr/sbin/runc)',
      'CNI plugin bridge (/usr/lib/cni/bridge)',
      'CNI plugin host-local (/usr/lib/cni/host-local)',
      'CNI plugin loopback (/usr/lib/cni/loopback)',
    ]);
    expect(plan.packages).toEqual(['runc', 'containernetworking-plugins']);
    expect(plan.manual).toEqual([]);
  });

  it('as root with apt-get: installs the packages, prints what, and checks again', () => {
    const host = fakeHost({ ...complete, files: ['/usr/include/errno.h'] });
    const calls: string[][] = [];
    const logs: string[] = [];
    ensurePrerequisites(TESTBED_PREREQUISITES, {
      probe: host,
      install: true,
      log: (l) => logs.push(l),
      apt: (args) => {
        calls.push(args);
        if (args[0] === 'install') for (const f of complete.files) host.files.add(f);
      },
    });
    expect(calls[0]).toEqual(['update', '-qq']);
    expect(calls[1]?.slice(-2)).toEqual(['runc', 'containernetworking-plugins']);
    expect(logs.join('\n')).toContain('installing missing Debian packages: runc containernetworking-plugins');
  });

  it('a fresh minimal Debian: gcc without libc6-dev (the static images need its headers and libc.a)', () => {
    const host = fakeHost({ ...complete, files: complete.files.filter((f) => f !== '/usr/include/errno.h'), cmds: complete.cmds.filter((c) => c !== 'gcc') });
    const plan = planPrerequisites(TESTBED_PREREQUISITES, host);
    expect(plan.packages).toEqual(['gcc', 'libc6-dev']);
  });

  it('a package that installs but does not provide the piece still fails, naming it', () => {
    const host = fakeHost({ ...complete, files: ['/usr/sbin/runc', '/usr/include/errno.h'] });
    expect(() => ensurePrerequisites(TESTBED_PREREQUISITES, { probe: host, install: true, log: () => undefined, apt: () => undefined })).toThrow(
      /CNI plugin bridge \(\/usr\/lib\/cni\/bridge\): apt-get install -y containernetworking-plugins/,
    );
  });

  it('not root: no install attempted; every missing piece named with its remedy', () => {
    const host = fakeHost({ ...complete, root: false, cmds: ['ip', 'gcc', 'taskset', 'apt-get'], overlay: false });
    let aptCalled = false;
    let err: unknown;
    try {
      ensurePrerequisites([...TESTBED_PREREQUISITES, ...BUILD_PREREQUISITES], { probe: host, install: true, log: () => undefined, apt: () => (aptCalled = true) });
    } catch (e) {
      err = e;
    }
    expect(aptCalled).toBe(false);
    expect(err).toBeInstanceOf(FatalError);
    const msg = (err as Error).message;
    expect(msg).toContain('root (the testbed creates bridges, cgroups and containers): run as root');
    expect(msg).toContain('openssl: apt-get install -y openssl');
    expect(msg).toContain('the overlay filesystem (containerd snapshotter): modprobe overlay');
    expect(msg).toContain('go >= 1.26');
    expect(msg).not.toContain('runc');
  });

  it('a failing apt-get ends with its stderr tail and the missing list', () => {
    const host = fakeHost({ ...complete, cmds: ['ip', 'gcc', 'taskset', 'apt-get'] });
    const apt = () => {
      throw Object.assign(new Error('exit 100'), { stderr: Buffer.from('E: Unable to locate package openssl\n') });
    };
    expect(() => ensurePrerequisites(TESTBED_PREREQUISITES, { probe: host, install: true, log: () => undefined, apt })).toThrow(/Unable to locate package openssl[\s\S]*openssl: apt-get install -y openssl/);
  });

  it("the image's needs include busybox: a host without /bin/busybox gets busybox-static from the image build's check", () => {
    const host = fakeHost({ files: complete.files, cmds: [...complete.cmds, 'git', 'ldd'] });
    expect(planPrerequisites(ULYSSES_IMAGE_PREREQUISITES, host).packages).toEqual(['busybox-static']);
    const calls: string[][] = [];
    ensurePrerequisites(ULYSSES_IMAGE_PREREQUISITES, {
      probe: host,
      install: true,
      log: () => undefined,
      apt: (args) => {
        calls.push(args);
        if (args[0] === 'install') host.files.add('/bin/busybox');
      },
    });
    expect(calls[1]?.slice(-1)).toEqual(['busybox-static']);
  });

  it('not root (or ULYSSES_NO_APT=1): the image build stops naming busybox and its package', () => {
    const host = fakeHost({ root: false, cmds: ['git', 'ldd', 'apt-get'] });
    expect(() => ensurePrerequisites(ULYSSES_IMAGE_PREREQUISITES, { probe: host, log: () => undefined })).toThrow(/\/bin\/busybox.*: apt-get install -y busybox-static/);
    const root = fakeHost({ cmds: ['git', 'ldd', 'apt-get'] });
    let aptCalled = false;
    expect(() => ensurePrerequisites(ULYSSES_IMAGE_PREREQUISITES, { probe: root, install: false, log: () => undefined, apt: () => (aptCalled = true) })).toThrow(/busybox-static/);
    expect(aptCalled).toBe(false);
  });

  it('the real probe finds a command on PATH and not a missing one', () => {
    expect(hostProbe.onPath('node')).toBe(true);
    expect(hostProbe.onPath('no-such-command-ulysses')).toBe(false);
  });
});

describe('one list of prerequisites', () => {
  const union = [...new Set(Object.values(PREREQUISITES).flatMap((l) => debianPackages(l)))].sort();

  it('every part is in ALL_PREREQUISITES, each piece once', () => {
    for (const list of Object.values(PREREQUISITES)) for (const p of list) expect(ALL_PREREQUISITES).toContain(p);
    expect(new Set(ALL_PREREQUISITES.map((p) => p.what)).size).toBe(ALL_PREREQUISITES.length);
    expect([...debianPackages(ALL_PREREQUISITES)].sort()).toEqual(union);
  });

  it("what CI used to install by hand is in the list, except Debian's containerd (the nodes run the built one)", () => {
    for (const p of ['runc', 'containernetworking-plugins', 'busybox-static', 'iproute2', 'iptables', 'openssl', 'gcc', 'fonts-dejavu-core']) expect(union).toContain(p);
    expect(union).not.toContain('containerd');
  });

  it('on a bare host (root, apt-get) the full check installs exactly the union of the lists', () => {
    const host = fakeHost({ cmds: ['apt-get'] });
    const installed: string[] = [];
    expect(() =>
      ensurePrerequisites(ALL_PREREQUISITES, { probe: host, install: true, log: () => undefined, apt: (args) => (args[0] === 'install' ? installed.push(...args.filter((a) => !a.startsWith('-') && a !== 'install')) : undefined) }),
    ).toThrow(FatalError); // the fake apt provides nothing
    expect([...installed].sort()).toEqual(union);
  });

  it('.ci/run installs through `ulysses prerequisites` (no package list of its own), whose --packages is the union', () => {
    const ciRun = readFileSync(fileURLToPath(new URL('../../.ci/run', import.meta.url)), 'utf8');
    const code = ciRun.split('\n').filter((l) => !l.trim().startsWith('#')).join('\n');
    expect(code).toMatch(/^node --import tsx cli\/ulysses\.ts prerequisites$/m);
    expect(code).not.toMatch(/apt-get|dpkg/);
    expect(code.indexOf('npm ci')).toBeLessThan(code.indexOf('cli/ulysses.ts prerequisites'));
    const cli = fileURLToPath(new URL('../../cli/ulysses.ts', import.meta.url));
    const printed = execFileSync(process.execPath, ['--import', 'tsx', cli, 'prerequisites', '--packages'], { encoding: 'utf8' }).trim().split(' ');
    expect([...printed].sort()).toEqual(union);
  });
});
