// pinMainThreadApart (experiments/testbed/processes.ts), which the benchmarks use to keep a Node
// process's main thread alone on its CPU: checked on a real Node process's threads (Linux, taskset).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, readdirSync } from 'node:fs';
import { cpus } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { pinMainThreadApart } from '../../experiments/testbed/processes.ts';

const allowed = (pid: number, tid: string) => /Cpus_allowed_list:\s+(\S+)/.exec(readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8'))![1];

describe('pinMainThreadApart', () => {
  let child: ChildProcess | undefined;
  afterEach(() => {
    child?.kill('SIGKILL');
  });

  it('puts the main thread on one CPU and every other thread on another, keeping the listed ones with the main thread', async () => {
    expect(cpus().length, 'this test needs 2 CPUs').toBeGreaterThanOrEqual(2);
    // a Node process with its V8 platform and libuv threads, alive until killed
    child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000); console.log("up")'], { stdio: ['ignore', 'pipe', 'inherit'] });
    await once(child.stdout!, 'data');
    const pid = child.pid!;
    const tids = readdirSync(`/proc/${pid}/task`);
    expect(tids.length).toBeGreaterThan(2);
    const keep = tids.find((t) => t !== String(pid))!;

    const moved = pinMainThreadApart(pid, '1', '0', [keep]);
    expect(moved).toBe(tids.length - 2);
    for (const tid of tids) expect(allowed(pid, tid), `thread ${tid}`).toBe(tid === String(pid) || tid === keep ? '1' : '0');

    pinMainThreadApart(pid, '0', '1');
    for (const tid of tids) expect(allowed(pid, tid), `thread ${tid}`).toBe(tid === String(pid) ? '0' : '1');
  });

  it('names the process when it does not exist', () => {
    expect(() => pinMainThreadApart(2 ** 22 + 7, '0', '1')).toThrow(/4194311/);
  });
});
