/**
 * What a run directory holds, and the commands that act on it. Both testbeds keep their state in
 * `<run-dir>/state.json`: the kubeadm testbed's says `kind: "kubeadm"` (kubeadm.ts KubeadmState), the
 * plain testbed's has no `kind` and lists its `realNodes` (testbed.ts TestbedState). `ulysses testbed
 * down|status|kubeconfig` act on the kind the state file says, whatever the `--kubeadm` flag; the
 * flag only picks the default run directory.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { FatalError } from './processes.ts';

export type TestbedKind = 'plain' | 'kubeadm';
/** `none`: no state file; `unknown`: a state file of neither testbed (or not JSON). */
export type RunDirKind = TestbedKind | 'none' | 'unknown';

export const stateFilePath = (runDir: string) => join(runDir, 'state.json');

/** The testbed a parsed state.json belongs to. */
export function stateKind(state: unknown): TestbedKind | undefined {
  if (!state || typeof state !== 'object') return undefined;
  const s = state as Record<string, unknown>;
  if (s.kind === 'kubeadm') return 'kubeadm';
  if (s.kind === undefined && Array.isArray(s.realNodes)) return 'plain';
  return undefined;
}

export function runDirKind(runDir: string): RunDirKind {
  const f = stateFilePath(runDir);
  if (!existsSync(f)) return 'none';
  try {
    return stateKind(JSON.parse(readFileSync(f, 'utf8'))) ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

const shellWord = (w: string) => (/^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`);

/** The command that takes down the testbed of this kind in `runDir`. */
export function downCommand(kind: TestbedKind, runDir: string): string {
  return `ulysses testbed down${kind === 'kubeadm' ? ' --kubeadm' : ''} --run-dir ${shellWord(runDir)}`;
}

/** The command that brings up (or reuses) the testbed of this kind in `runDir`. */
export function upCommand(kind: TestbedKind, runDir: string): string {
  return `ulysses testbed up${kind === 'kubeadm' ? ' --kubeadm' : ''} --run-dir ${shellWord(runDir)}`;
}

export interface TestbedTarget {
  /** the kind the run dir's state says (the flag's when there is no state) */
  kind: TestbedKind;
  /** the kind the command line asked for (`--kubeadm` or not) */
  asked: TestbedKind;
  runDir: string;
}

/**
 * The testbed a `testbed` subcommand acts on: `--run-dir`, else the default run dir of the kind
 * asked for; its kind from the state file found there. A state file of neither kind is an error.
 */
export function testbedTarget(
  o: { kubeadm: boolean; runDir?: string },
  defaults: Record<TestbedKind, string>,
  kindOf: (runDir: string) => RunDirKind = runDirKind,
): TestbedTarget {
  const asked: TestbedKind = o.kubeadm ? 'kubeadm' : 'plain';
  const runDir = o.runDir ?? defaults[asked];
  const found = kindOf(runDir);
  if (found === 'unknown') throw new FatalError(`${stateFilePath(runDir)} is not a testbed's state (neither kind "kubeadm" nor a plain testbed's realNodes)`);
  return { kind: found === 'none' ? asked : found, asked, runDir };
}

/** The `ulysses*` directories directly under `parent`: where the testbeds and their tests keep their run dirs. */
export function ulyssesDirsIn(parent: string): string[] {
  try {
    return readdirSync(parent)
      .filter((e) => e.startsWith('ulysses'))
      .map((e) => join(parent, e))
      .filter((d) => statSync(d).isDirectory());
  } catch {
    return [];
  }
}

/** The run dirs among `candidates` (each once, `except` left out) that hold a kubeadm testbed's state. */
export function kubeadmRunDirs(candidates: readonly string[], except?: string, kindOf: (runDir: string) => RunDirKind = runDirKind): string[] {
  const skip = except === undefined ? undefined : resolve(except);
  const dirs = [...new Set(candidates.map((c) => resolve(c)))].filter((d) => d !== skip);
  return dirs.filter((d) => kindOf(d) === 'kubeadm');
}

/**
 * Why `testbed up --kubeadm` cannot start: kubeadm's files of another cluster (`leftovers`) are on
 * the host. A kubeadm testbed whose state is in `stateDirs` is taken down by `ulysses testbed down`;
 * `kubeadm reset -f` only when no testbed state is found.
 */
export function foreignKubeadmClusterMessage(leftovers: readonly string[], stateDirs: readonly string[]): string {
  const files = leftovers.join(', ');
  if (!stateDirs.length) return `a kubeadm cluster not started by this testbed seems to exist (${files}; no kubeadm testbed state found): run \`kubeadm reset -f\` first`;
  const commands = stateDirs.map((d) => `\`${downCommand('kubeadm', d)}\``).join(' and ');
  const where = stateDirs.length === 1 ? `the kubeadm testbed whose state is in ${stateDirs[0]}` : `kubeadm testbed state is in ${stateDirs.join(', ')}`;
  return `a kubeadm cluster exists on this machine (${files}): ${where}; run ${commands} first`;
}
