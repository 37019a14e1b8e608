/**
 * What the lab needs from the host: the one list of prerequisites, by what needs each part
 * ({@link PREREQUISITES}). `testbed up` (plain and kubeadm) and `ulysses image build` check their
 * part before anything starts; `ulysses prerequisites` checks all of it, and .ci/run installs CI's
 * packages through it. Missing Debian packages are installed with apt-get when we are root and
 * apt-get exists (printing what is installed); anything else missing stops the command at once,
 * naming each piece and the command that provides it.
 */
import { execFileSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { FatalError } from './processes.ts';
import { progressLog } from '../../core/logging.ts';

export interface Prerequisite {
  /** What is needed, as the user reads it ("runc (/usr/sbin/runc)"). */
  what: string;
  present: (probe: HostProbe) => boolean;
  /** The Debian package that provides it, when there is one. */
  debianPackage?: string;
  /** What to do when no package provides it. */
  remedy?: string;
}

/** The host as the checks see it (a fake one in unit tests). */
export interface HostProbe {
  isRoot: boolean;
  /** An executable file at this absolute path. */
  executable(path: string): boolean;
  /** A command on PATH. */
  onPath(cmd: string): boolean;
  fileContains(path: string, text: string): boolean;
  /** A file (of any kind) at this absolute path. */
  exists(path: string): boolean;
}

export const hostProbe: HostProbe = {
  isRoot: process.getuid?.() === 0,
  executable(path) {
    try {
      accessSync(path, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  },
  onPath(cmd) {
    return (process.env.PATH ?? '').split(delimiter).some((d) => d && hostProbe.executable(join(d, cmd)));
  },
  fileContains(path, text) {
    return existsSync(path) && readFileSync(path, 'utf8').includes(text);
  },
  exists(path) {
    return existsSync(path);
  },
};

const CNI_DIR = '/usr/lib/cni';

/** The plain testbed's needs: real nodes (containerd's runc, CNI bridge), test images, PKI. */
export const TESTBED_PREREQUISITES: readonly Prerequisite[] = [
  { what: 'root (the testbed creates bridges, cgroups and containers)', present: (h) => h.isRoot, remedy: 'run as root' },
  { what: 'runc (/usr/sbin/runc)', present: (h) => h.executable('/usr/sbin/runc'), debianPackage: 'runc' },
  ...['bridge', 'host-local', 'loopback'].map((p) => ({
    what: `CNI plugin ${p} (${CNI_DIR}/${p})`,
    present: (h: HostProbe) => h.executable(`${CNI_DIR}/${p}`),
    debianPackage: 'containernetworking-plugins',
  })),
  { what: 'ip (iproute2)', present: (h) => h.onPath('ip'), debianPackage: 'iproute2' },
  { what: 'openssl', present: (h) => h.onPath('openssl'), debianPackage: 'openssl' },
  { what: 'gcc (builds the static test images)', present: (h) => h.onPath(process.env.CC ?? 'gcc'), debianPackage: 'gcc' },
  // gcc without its recommended libc6-dev has no headers and no static libc to link the images with
  { what: 'C library headers and static libc (/usr/include/errno.h)', present: (h) => h.exists('/usr/include/errno.h'), debianPackage: 'libc6-dev' },
  { what: 'taskset (util-linux)', present: (h) => h.onPath('taskset'), debianPackage: 'util-linux' },
  {
    what: 'the overlay filesystem (containerd snapshotter)',
    present: (h) => h.fileContains('/proc/filesystems', 'overlay'),
    remedy: 'modprobe overlay (a kernel with CONFIG_OVERLAY_FS)',
  },
  {
    what: 'cgroups mounted at /sys/fs/cgroup',
    present: (h) => h.fileContains('/proc/mounts', ' /sys/fs/cgroup'),
    remedy: 'mount cgroups at /sys/fs/cgroup (cgroup v1 controllers or cgroup2)',
  },
];

/** The kubeadm testbed's needs beyond the plain one: kube-proxy's iptables, joins in mount namespaces. */
export const KUBEADM_PREREQUISITES: readonly Prerequisite[] = [
  ...TESTBED_PREREQUISITES,
  ...['iptables-save', 'iptables-restore'].map((c) => ({ what: `${c} (kube-proxy's image takes the host's iptables)`, present: (h: HostProbe) => h.onPath(c), debianPackage: 'iptables' })),
  ...['unshare', 'mount'].map((c) => ({ what: `${c} (util-linux: kubeadm join in a mount namespace of its own)`, present: (h: HostProbe) => h.onPath(c), debianPackage: c === 'mount' ? 'mount' : 'util-linux' })),
];

/** Go is needed only while binaries still have to be built. */
export const BUILD_PREREQUISITES: readonly Prerequisite[] = [
  { what: 'go >= 1.26 (builds the Kubernetes binaries from Go modules on first use)', present: (h) => h.onPath('go'), remedy: 'install Go >= 1.26 (https://go.dev/doc/install) and put it on PATH' },
];

/**
 * What the Ulysses image is made of besides node and the repository (ulysses-image.ts). busybox is
 * the image's /bin/sh and the tools manifests/entrypoint.sh runs; the static build, since the image
 * holds only the shared libraries node loads.
 */
export const ULYSSES_IMAGE_PREREQUISITES: readonly Prerequisite[] = [
  { what: "busybox (/bin/busybox: the Ulysses image's /bin/sh and entrypoint tools)", present: (h) => h.executable('/bin/busybox'), debianPackage: 'busybox-static' },
  { what: "git (the image holds the repository's tracked files)", present: (h) => h.onPath('git'), debianPackage: 'git' },
  { what: 'ldd (the shared libraries node loads go into the image)', present: (h) => h.onPath('ldd'), debianPackage: 'libc-bin' },
];

/**
 * The PNG copies of the figures (`--png`, rendered by @resvg/resvg-js): the SVGs name DejaVu Sans,
 * and resvg draws no text at all when the host has no font.
 */
export const FIGURE_PREREQUISITES: readonly Prerequisite[] = [
  { what: 'the DejaVu Sans font (/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf: the text of PNG figures)', present: (h) => h.exists('/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf'), debianPackage: 'fonts-dejavu-core' },
];

/**
 * eUPF (experiments/5g/eupf/build-eupf.sh, issue 41): its BPF objects are compiled at build time by
 * bpf2go (`go generate ./cmd/ebpf/`) with clang, libbpf's headers and the 32-bit glibc stubs
 * gcc-multilib brings (without them: "gnu/stubs-32.h: No such file").
 */
export const EUPF_BUILD_PREREQUISITES: readonly Prerequisite[] = [
  { what: "clang (compiles eUPF's XDP programs)", present: (h) => h.onPath('clang'), debianPackage: 'clang' },
  { what: "libbpf headers (/usr/include/bpf/bpf_helpers.h: eUPF's XDP programs)", present: (h) => h.exists('/usr/include/bpf/bpf_helpers.h'), debianPackage: 'libbpf-dev' },
  { what: "32-bit glibc stubs (/usr/include/x86_64-linux-gnu/gnu/stubs-32.h: eUPF's XDP programs)", present: (h) => h.exists('/usr/include/x86_64-linux-gnu/gnu/stubs-32.h'), debianPackage: 'gcc-multilib' },
  { what: 'jq (experiments/5g/eupf/dataplane-check.sh reads the stand-ins\' JSON events)', present: (h) => h.onPath('jq'), debianPackage: 'jq' },
  { what: "curl (experiments/5g/eupf/dataplane-check.sh asks eUPF's API)", present: (h) => h.onPath('curl'), debianPackage: 'curl' },
];

/**
 * The one list, by what needs each part. Debian's containerd is not in it: every node runs the
 * containerd (and `ctr`, containerd-shim-runc-v2) built from its Go module into the binary cache.
 */
export const PREREQUISITES = {
  testbed: TESTBED_PREREQUISITES,
  kubeadm: KUBEADM_PREREQUISITES,
  build: BUILD_PREREQUISITES,
  image: ULYSSES_IMAGE_PREREQUISITES,
  figures: FIGURE_PREREQUISITES,
  eupf: EUPF_BUILD_PREREQUISITES,
} as const satisfies Record<string, readonly Prerequisite[]>;

/** Every part of {@link PREREQUISITES}, each piece once: what `ulysses prerequisites` and CI check. */
export const ALL_PREREQUISITES: readonly Prerequisite[] = [...new Map(Object.values(PREREQUISITES).flat().map((p) => [p.what, p])).values()];

/** The Debian packages that provide `needs`, in order, once each. */
export function debianPackages(needs: readonly Prerequisite[]): string[] {
  return [...new Set(needs.flatMap((n) => (n.debianPackage ? [n.debianPackage] : [])))];
}

export interface PrerequisitePlan {
  missing: Prerequisite[];
  /** Debian packages that would provide what is missing, in order, once each. */
  packages: string[];
  /** Missing pieces no package provides. */
  manual: Prerequisite[];
}

export function planPrerequisites(needs: readonly Prerequisite[], probe: HostProbe): PrerequisitePlan {
  const missing = needs.filter((n) => !n.present(probe));
  return { missing, packages: debianPackages(missing), manual: missing.filter((m) => !m.debianPackage) };
}

/** The error text for what is still missing: one line per piece with the command that provides it. */
export function describeMissing(missing: readonly Prerequisite[]): string {
  const lines = missing.map((m) => `  - ${m.what}: ${m.debianPackage ? `apt-get install -y ${m.debianPackage}` : m.remedy ?? 'install it'}`);
  return `prerequisites missing on this host:\n${lines.join('\n')}`;
}

export interface EnsureOptions {
  probe?: HostProbe;
  log?: (line: string) => void;
  /** Install missing Debian packages (root with apt-get only); default unless ULYSSES_NO_APT=1. */
  install?: boolean;
  /** Runs apt-get; replaced in unit tests. */
  apt?: (args: string[]) => void;
}

const runApt = (args: string[]) => {
  execFileSync('apt-get', args, { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
};

/**
 * Checks `needs`; installs the missing Debian packages when allowed, then checks again. Throws a
 * FatalError naming every piece still missing (and what provides it) otherwise.
 */
export function ensurePrerequisites(needs: readonly Prerequisite[], o: EnsureOptions = {}): void {
  const probe = o.probe ?? hostProbe;
  const log = o.log ?? progressLog;
  let plan = planPrerequisites(needs, probe);
  if (plan.missing.length === 0) return;
  const install = (o.install ?? process.env.ULYSSES_NO_APT !== '1') && probe.isRoot && plan.packages.length > 0 && probe.onPath('apt-get');
  if (install) {
    const apt = o.apt ?? runApt;
    log(`installing missing Debian packages: ${plan.packages.join(' ')} (apt-get; set ULYSSES_NO_APT=1 to do it yourself)`);
    try {
      apt(['update', '-qq']);
      apt(['install', '-y', '-qq', '--no-install-recommends', ...plan.packages]);
    } catch (err) {
      const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim().split('\n').slice(-5).join('\n');
      throw new FatalError(`apt-get install ${plan.packages.join(' ')} failed${stderr ? `:\n${stderr}` : ''}\n${describeMissing(plan.missing)}`);
    }
    plan = planPrerequisites(needs, probe);
    if (plan.missing.length === 0) return;
  }
  throw new FatalError(describeMissing(plan.missing));
}
