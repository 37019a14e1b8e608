/**
 * The installer's node steps on any kubeadm cluster (manifests/install.ts NodeAccess) through a
 * command that runs a shell on a node as root, typically `ssh root@{node}` — what a kubeadm user
 * already has for `kubeadm join` and `kubeadm upgrade node`.
 *
 * Each step is one POSIX sh script given to that command as its last argument (ssh hands it to the
 * node's login shell): files are written through a temporary file and `mv`, read with `cat`, the
 * kubelet restarted with `systemctl restart kubelet`, and the kubelet-shim installed as the systemd
 * service of manifests/systemd/ (unit, kubelet drop-in, and a drop-in naming the node) and started
 * with `systemctl enable --now`. Its program (default /opt/ulysses/manifests/entrypoint.sh: the
 * repository with node_modules and Node.js 20 on the node) is checked before anything is changed.
 * The nodes come from the API: control-plane nodes carry `node-role.kubernetes.io/control-plane`.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { MANIFESTS_DIR } from './overlays.ts';
import { NODE_PATHS, type InstallNode, type NodeAccess } from './install.ts';

/** Where the kubelet-shim's systemd service lives on a node. */
export const SHIM_UNIT_PATHS = {
  unit: '/etc/systemd/system/ulysses-kubelet-shim.service',
  fallbackUnit: '/etc/systemd/system/ulysses-kubelet-shim-fallback.service',
  nodeDropIn: '/etc/systemd/system/ulysses-kubelet-shim.service.d/20-ulysses-node.conf',
  kubeletDropIn: '/etc/systemd/system/kubelet.service.d/10-ulysses-kubelet-shim.conf',
} as const;
/** The unit's ExecStart program as manifests/systemd/ulysses-kubelet-shim.service names it. */
export const DEFAULT_SHIM_PROGRAM = '/opt/ulysses/manifests/entrypoint.sh';
export const CONTROL_PLANE_LABEL = 'node-role.kubernetes.io/control-plane';

/** A node's output read back (a file, kubeadm's log) is bounded: nothing a step reads is larger. */
const OUTPUT_LIMIT = 16 << 20;
const TEMPLATE_LIMIT = 4096;

export interface ShellNodeAccessOptions {
  /**
   * the command's words, `{node}` standing for the node's name (or the words for a node); the
   * script is appended as the last word
   */
  shell: readonly string[] | ((node: string) => string[]);
  nodes: readonly InstallNode[];
  /** bound of one step on a node (default 300 s: kubeadm regenerating a static pod is the longest) */
  timeoutMs?: number;
  /** the node's paths and port where they are not the production defaults (the kubeadm testbed's nodes share one machine) */
  containerdSocket?: (node: string) => string;
  shimSocket?: (node: string) => string;
  shimMetricsPort?: (node: string) => number;
  /** the kubelet-shim's program on the nodes (the unit's ExecStart) */
  shimProgram?: string;
}

/**
 * `--node-shell`: the command's words separated by spaces, `{node}` standing for the node's name,
 * e.g. `ssh -o BatchMode=yes root@{node}`. No quoting: a command needing a word with spaces goes
 * into a script of its own.
 */
export function parseNodeShell(template: string): string[] {
  if (template.length > TEMPLATE_LIMIT) throw new Error(`--node-shell: longer than ${TEMPLATE_LIMIT} characters`);
  const words = template.trim().split(/\s+/).filter(Boolean);
  if (!words.length) throw new Error('--node-shell: empty; give the command that runs a shell on a node as root, e.g. "ssh root@{node}"');
  if (!words.some((w) => w.includes('{node}'))) throw new Error(`--node-shell "${template}": no {node} in it, so every node step would run on the same machine (e.g. "ssh root@{node}")`);
  return words;
}

/** The cluster's nodes as the installer sees them: control-plane nodes by kubeadm's label. */
export async function clusterNodes(kc: KubeConfig): Promise<InstallNode[]> {
  const nodes = (await kc.makeApiClient(CoreV1Api).listNode()).items;
  return nodes.map((n) => ({ name: n.metadata!.name!, controlPlane: n.metadata?.labels?.[CONTROL_PLANE_LABEL] !== undefined }));
}

/**
 * `--node-shell TEMPLATE` on a cluster: the template checked first (before the kubeconfig is read),
 * then the nodes listed from the API.
 */
export async function nodeShellAccess(template: string, kubeconfig: () => Promise<KubeConfig>, o: Omit<ShellNodeAccessOptions, 'shell' | 'nodes'> = {}): Promise<ShellNodeAccess> {
  const shell = parseNodeShell(template);
  return new ShellNodeAccess({ ...o, shell, nodes: await clusterNodes(await kubeconfig()) });
}

/** A word quoted for sh. */
export function shQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

export class NodeShellError extends Error {
  constructor(
    readonly node: string,
    readonly what: string,
    readonly code: number | null,
    readonly output: string,
  ) {
    super(`${what} on node ${node} ${code === null ? 'timed out' : `exited with ${code}`}${output.trim() ? `:\n${output.trim().split('\n').slice(-20).join('\n')}` : ''}`);
  }
}

/**
 * The kubelet-shim program as the node's shell scripts and the unit's `ExecStart=` take it: an
 * absolute path of plain characters only. Quoting alone is not enough: systemd expands `$` and
 * `%` and splits at spaces in `ExecStart=`, and the path is run as root on every node.
 */
export function checkShimProgram(path: string): string {
  if (path.length > 1024 || !/^\/[A-Za-z0-9._/+-]+$/.test(path)) {
    throw new Error(`--shim-program ${JSON.stringify(path.slice(0, 200))}: an absolute path of letters, digits and . _ / + - only (it becomes the unit's ExecStart and runs as root on every node)`);
  }
  return path;
}

export class ShellNodeAccess implements NodeAccess {
  private readonly timeoutMs: number;
  private readonly shimProgram: string;

  constructor(private readonly o: ShellNodeAccessOptions) {
    if (Array.isArray(o.shell) && !o.shell.some((w) => w.includes('{node}'))) throw new Error('node shell: no {node} in the command');
    this.timeoutMs = o.timeoutMs ?? 300_000;
    this.shimProgram = checkShimProgram(o.shimProgram ?? DEFAULT_SHIM_PROGRAM);
  }

  nodes(): InstallNode[] {
    return [...this.o.nodes];
  }

  /** Runs `script` on `node` with `input` on its stdin; resolves with its stdout, rejects with its output's tail. */
  run(node: string, what: string, script: string, input?: string): Promise<string> {
    const shell = this.o.shell;
    const argv = typeof shell === 'function' ? shell(node) : shell.map((w) => w.replaceAll('{node}', node));
    return new Promise((resolve, reject) => {
      const child = spawn(argv[0]!, [...argv.slice(1), script], { stdio: ['pipe', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      let size = 0;
      const take = (to: 'out' | 'err') => (b: Buffer) => {
        size += b.length;
        if (size > OUTPUT_LIMIT) return child.kill('SIGKILL');
        if (to === 'out') out += b.toString();
        else err += b.toString();
      };
      child.stdout.on('data', take('out'));
      child.stderr.on('data', take('err'));
      const timer = setTimeout(() => child.kill('SIGKILL'), this.timeoutMs);
      child.on('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`${what} on node ${node}: cannot run ${argv[0]}: ${e.message}`));
      });
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        if (size > OUTPUT_LIMIT) return reject(new Error(`${what} on node ${node}: more than ${OUTPUT_LIMIT} bytes of output`));
        if (code === 0) return resolve(out);
        reject(new NodeShellError(node, what, signal ? null : code, `${err}${out}`));
      });
      child.stdin.on('error', () => undefined); // a command that exits without reading its input
      child.stdin.end(input ?? '');
    });
  }

  async readFile(node: string, nodePath: string): Promise<string | undefined> {
    const p = shQuote(nodePath);
    const out = await this.run(node, `reading ${nodePath}`, `if [ -f ${p} ]; then echo present; cat ${p}; else echo absent; fi`);
    const nl = out.indexOf('\n');
    const head = out.slice(0, nl);
    if (head === 'absent') return undefined;
    if (head !== 'present') throw new Error(`reading ${nodePath} on node ${node}: unexpected output from the node shell: ${JSON.stringify(out.slice(0, 200))}`);
    return out.slice(nl + 1);
  }

  async writeFile(node: string, nodePath: string, content: string, mode: number): Promise<void> {
    const p = shQuote(nodePath);
    // a hidden name in the same directory: the kubelet ignores it in a static pod directory, and mv is atomic
    const tmp = shQuote(`${dirname(nodePath)}/.${basename(nodePath)}.ulysses-tmp`);
    await this.run(node, `writing ${nodePath}`, `set -e; mkdir -p "$(dirname ${p})"; (umask 077; cat > ${tmp}); chmod ${mode.toString(8)} ${tmp}; mv -f ${tmp} ${p}`, content);
  }

  async remove(node: string, nodePath: string): Promise<void> {
    await this.run(node, `removing ${nodePath}`, `rm -rf -- ${shQuote(nodePath)}`);
  }

  async kubeadm(node: string, args: string[]): Promise<void> {
    await this.run(node, `kubeadm ${args.join(' ')}`, `kubeadm ${args.map(shQuote).join(' ')} 2>&1`);
  }

  async restartKubelet(node: string): Promise<void> {
    await this.run(node, 'systemctl restart kubelet', 'systemctl restart kubelet');
  }

  async startKubeletShim(node: string): Promise<void> {
    const program = shQuote(this.shimProgram);
    await this.run(
      node,
      'checking the kubelet-shim program',
      `[ -x ${program} ] || { echo "the kubelet-shim needs "${program}" on the node (the repository with node_modules and Node.js 20, see manifests/systemd/ulysses-kubelet-shim.service)" >&2; exit 3; }`,
    );
    const unit = readFileSync(join(MANIFESTS_DIR, 'systemd', 'ulysses-kubelet-shim.service'), 'utf8').replace(
      /^ExecStart=\S+/m,
      `ExecStart=${this.shimProgram}`,
    );
    await this.writeFile(node, SHIM_UNIT_PATHS.unit, unit, 0o644);
    const fallbackUnit = readFileSync(join(MANIFESTS_DIR, 'systemd', 'ulysses-kubelet-shim-fallback.service'), 'utf8').replace(/^ExecStart=\S+/m, `ExecStart=${this.shimProgram}`);
    await this.writeFile(node, SHIM_UNIT_PATHS.fallbackUnit, fallbackUnit, 0o644);
    await this.writeFile(node, SHIM_UNIT_PATHS.nodeDropIn, `# the node's name in the cluster (the unit's default is the hostname)\n[Service]\nEnvironment=NODE_NAME=${node}\n`, 0o644);
    await this.writeFile(node, SHIM_UNIT_PATHS.kubeletDropIn, readFileSync(join(MANIFESTS_DIR, 'systemd', '10-ulysses-kubelet-shim.conf'), 'utf8'), 0o644);
    const socket = shQuote(this.shimSocket(node));
    // the service is up once it listens (bounded: 60 s)
    await this.run(
      node,
      'systemctl enable --now ulysses-kubelet-shim',
      `set -e; systemctl daemon-reload; systemctl enable --now ulysses-kubelet-shim; systemctl enable --now ulysses-kubelet-shim-fallback; i=0; while [ ! -S ${socket} ]; do i=$((i+1)); if [ $i -gt 600 ]; then echo "ulysses-kubelet-shim does not listen on ${this.shimSocket(node)} after 60 s" >&2; systemctl status ulysses-kubelet-shim >&2 || true; exit 1; fi; sleep 0.1; done`,
    );
  }

  async stopKubeletShim(node: string): Promise<void> {
    // the guard first: with the shim gone it would point the (already switched) kubelet's old path at containerd
    await this.run(node, 'systemctl disable --now ulysses-kubelet-shim-fallback', 'systemctl disable --now ulysses-kubelet-shim-fallback 2>&1 || true');
    await this.run(node, 'systemctl disable --now ulysses-kubelet-shim', 'systemctl disable --now ulysses-kubelet-shim 2>&1 || true');
    // a fallback's leftovers: the symlink at the shim's path and its marker
    const socket = this.shimSocket(node);
    await this.run(node, `removing ${socket}`, `rm -f -- ${shQuote(socket)} ${shQuote(`${socket}.fallback`)}`);
    for (const p of [SHIM_UNIT_PATHS.unit, SHIM_UNIT_PATHS.fallbackUnit, SHIM_UNIT_PATHS.nodeDropIn.replace(/\/[^/]+$/, ''), SHIM_UNIT_PATHS.kubeletDropIn]) await this.remove(node, p);
    await this.run(node, 'systemctl daemon-reload', 'systemctl daemon-reload');
  }

  containerdSocket(node: string): string {
    return this.o.containerdSocket?.(node) ?? '/run/containerd/containerd.sock';
  }

  shimSocket(node: string): string {
    return this.o.shimSocket?.(node) ?? '/run/ulysses/kubelet-shim.sock';
  }

  shimMetricsPort(node: string): number {
    return this.o.shimMetricsPort?.(node) ?? 10260;
  }
}

