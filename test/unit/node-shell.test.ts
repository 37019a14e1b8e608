/**
 * manifests/node-shell.ts: the `--node-shell` template and the node steps as sh scripts, run here
 * through a local `sh -c` standing in for `ssh root@{node}` (files under a temporary directory).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync, existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { checkShimProgram, NodeShellError, parseNodeShell, shQuote, ShellNodeAccess } from '../../manifests/node-shell.ts';

/** The CLI as a user runs it: exit code and output. */
async function cli(args: string[]): Promise<{ code: number; out: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(join('node_modules', '.bin', 'tsx'), [join('cli', 'ulysses.ts'), ...args], { env: { ...process.env, KUBECONFIG: '' } });
    return { code: 0, out: stdout + stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, out: `${e.stdout ?? ''}${e.stderr ?? ''}` };
  }
}

const dir = mkdtempSync(join(tmpdir(), 'ulysses-node-shell-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const nodes = [{ name: 'cp-1', controlPlane: true }, { name: 'worker-1', controlPlane: false }];
/** `sh -c <script>` with the node's name in $NODE, each script logged */
const log = join(dir, 'scripts.log');
const local = () => new ShellNodeAccess({ shell: ['env', 'NODE={node}', 'sh', '-c', `printf '%s\\n--\\n' "$1" >> ${shQuote(log)}; exec sh -c "$1"`, 'sh'], nodes });

describe('--node-shell', () => {
  it('is the command\'s words with {node} in one of them', () => {
    expect(parseNodeShell('  ssh -o BatchMode=yes   root@{node} ')).toEqual(['ssh', '-o', 'BatchMode=yes', 'root@{node}']);
    expect(() => parseNodeShell('  ')).toThrow(/--node-shell: empty/);
    expect(() => parseNodeShell('ssh root@host')).toThrow(/no \{node\} in it/);
    expect(() => parseNodeShell(`ssh {node} ${'x'.repeat(5000)}`)).toThrow(/longer than 4096/);
    expect(() => new ShellNodeAccess({ shell: ['ssh', 'host'], nodes })).toThrow(/no \{node\}/);
  });

  it('is checked by the CLI before anything is read or changed', async () => {
    const install = await cli(['install', '--node-shell', 'ssh root@host', '--kubeconfig', '/nonexistent']);
    expect(install).toEqual({ code: 1, out: expect.stringContaining('ulysses: --node-shell "ssh root@host": no {node} in it') });
    const noKubeconfig = await cli(['uninstall', '--node-shell', 'ssh root@{node}']);
    expect(noKubeconfig).toEqual({ code: 1, out: expect.stringContaining("--node-shell: the cluster's admin kubeconfig is needed (--kubeconfig or $KUBECONFIG)") });
    const experiment = await cli(['experiment', 'failover', '--node-shell', 'ssh root@{node}', '--out', join(dir, 'never')]);
    expect(experiment).toEqual({ code: 1, out: expect.stringContaining('--node-shell: with --kubeconfig of a kubeadm cluster') });
  }, 60_000);
});

describe('ShellNodeAccess', () => {
  it('runs each step on the node the template names', async () => {
    expect(await local().run('worker-1', 'who', 'echo "$NODE"')).toBe('worker-1\n');
    expect(local().nodes()).toEqual(nodes);
  });

  it('writes, reads back and removes files literally, whatever their name or content', async () => {
    const a = local();
    const file = join(dir, "it's a dir", 'sub', 'file $(x).yaml');
    const content = "a: '$(rm -rf /)'\nb: \"`id`\"\n\\n no newline at the end";
    await a.writeFile('cp-1', file, content, 0o600);
    expect(readFileSync(file, 'utf8')).toBe(content);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(await a.readFile('cp-1', file)).toBe(content);
    // written under a hidden name (a kubelet ignores it in its static pod directory), then renamed
    expect(readdirSync(dirname(file))).toEqual(['file $(x).yaml']);
    await a.writeFile('cp-1', file, '', 0o644);
    expect(await a.readFile('cp-1', file)).toBe('');
    expect(statSync(file).mode & 0o777).toBe(0o644);
    await a.remove('cp-1', join(dir, "it's a dir"));
    expect(existsSync(file)).toBe(false);
    expect(await a.readFile('cp-1', file)).toBeUndefined();
    await a.remove('cp-1', join(dir, 'never there')); // nothing there is fine
  });

  it('names the node, the step, the exit code and the output tail when a step fails', async () => {
    const err = await local().kubeadm('cp-1', ['init', 'phase', 'control-plane', 'scheduler']).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NodeShellError);
    expect((err as Error).message).toMatch(/^kubeadm init phase control-plane scheduler on node cp-1 exited with 127:/);
    expect((err as Error).message).toMatch(/kubeadm.*not found/);
    const cannot = await new ShellNodeAccess({ shell: ['/nonexistent/ssh', '{node}'], nodes }).run('cp-1', 'a step', 'true').catch((e: unknown) => e);
    expect((cannot as Error).message).toBe('a step on node cp-1: cannot run /nonexistent/ssh: spawn /nonexistent/ssh ENOENT');
  });

  it('bounds what it reads back from a node', async () => {
    const big = join(dir, 'big');
    writeFileSync(big, Buffer.alloc((16 << 20) + 1024, 0x61));
    await expect(local().readFile('cp-1', big)).rejects.toThrow(`reading ${big} on node cp-1: more than 16777216 bytes of output`);
  });

  it('checks the kubelet-shim program before it changes anything on the node', async () => {
    rmSync(log, { force: true });
    const a = new ShellNodeAccess({ ...({ shell: ['env', 'NODE={node}', 'sh', '-c', `printf '%s\\n--\\n' "$1" >> ${shQuote(log)}; exec sh -c "$1"`, 'sh'], nodes }), shimProgram: join(dir, 'missing', 'entrypoint.sh') });
    await expect(a.startKubeletShim('worker-1')).rejects.toThrow(/checking the kubelet-shim program on node worker-1 exited with 3:\nthe kubelet-shim needs .*missing\/entrypoint.sh on the node/);
    expect(readFileSync(log, 'utf8').split('\n--\n').filter(Boolean)).toHaveLength(1);
  });

  it('refuses a kubelet-shim program that is not a plain absolute path before running anything (it runs as root on every node)', async () => {
    rmSync(log, { force: true });
    const pwned = join(dir, 'pwned');
    const shell = ['env', 'NODE={node}', 'sh', '-c', `printf '%s\\n--\\n' "$1" >> ${shQuote(log)}; exec sh -c "$1"`, 'sh'];
    for (const bad of [`${dir}/x$(touch ${pwned})`, `${dir}/x\`touch ${pwned}\``, `${dir}/a b`, 'relative/entrypoint.sh', `${dir}/%h`, `${dir}/x;touch ${pwned}`]) {
      expect(() => new ShellNodeAccess({ shell, nodes, shimProgram: bad }), bad).toThrow(/^--shim-program .*: an absolute path of letters, digits and \. _ \/ \+ - only/);
    }
    expect(existsSync(log)).toBe(false);
    expect(existsSync(pwned)).toBe(false);
    expect(checkShimProgram('/opt/ulysses/manifests/entrypoint.sh')).toBe('/opt/ulysses/manifests/entrypoint.sh');
  });

  it('uses the production paths unless told otherwise', () => {
    const a = local();
    expect([a.containerdSocket('cp-1'), a.shimSocket('cp-1'), a.shimMetricsPort('cp-1')]).toEqual(['/run/containerd/containerd.sock', '/run/ulysses/kubelet-shim.sock', 10260]);
  });
});
