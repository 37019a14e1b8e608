/**
 * CPU time per process group in the window after the taint (experiments/harness/cpu-window.ts):
 * parsing of /proc, grouping, the probe on this machine's real /proc, and the report table.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CpuWindowProbe, codeOrigin, cpuByGroup, machineBusyTicks, parseStat, processGroup, summarizeProfile } from '../../experiments/harness/cpu-window.ts';
import { emptyEvents, parseResults, type RepResult } from '../../experiments/harness/results.ts';
import { cpuWindowTable } from '../../experiments/harness/report.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';

describe('parsing /proc', () => {
  it('reads comm (with spaces and parentheses) and sums utime+stime+cutime+cstime', () => {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    const stat = '4242 (my (odd) proc) S 17 4242 4242 0 -1 4194560 100 0 0 0 7 3 20 5 20 0 1 0 12345';
    expect(parseStat(stat)).toEqual({ comm: 'my (odd) proc', state: 'S', ppid: 17, ticks: 35, flags: 4194560 });
    expect(parseStat('garbage')).toBeUndefined();
    expect(parseStat('1 (x) S 0 1 1 0 -1 0 0 0 0 0 a b c d')).toBeUndefined();
  });
  it('groups by node from the command line or the cgroup, kernel threads and the harness apart', () => {
    expect(processGroup('kubelet', '/cache/kubelet --config /tmp/run/nodes/real-2/kubelet.yaml', '', false, false)).toBe('real-2/kubelet');
    expect(processGroup('http-server', '/http-server', '4:cpu,cpuacct:/ulysses-real-3/kubepods/besteffort/podX/abc\n', false, false)).toBe('real-3/http-server');
    expect(processGroup('kube-apiserver', '/cache/kube-apiserver --etcd-servers=...', '', false, false)).toBe('kube-apiserver');
    expect(processGroup('kworker/0:1', '', '', true, false)).toBe('kernel');
    expect(processGroup('node', 'node cli/ulysses.ts', '', false, true)).toBe('harness');
    expect(processGroup('node', 'node --import tsx /w/kubelet-shim/main.ts --listen /run/nodes/real-2/kubelet-shim.sock', '', false, false)).toBe('real-2/kubelet-shim');
    // "real-12" is a node of its own, not real-1
    expect(processGroup('containerd', 'containerd --config /run/nodes/real-12/containerd.toml', '', false, false)).toBe('real-12/containerd');
  });
  it('counts busy ticks from /proc/stat without idle and iowait', () => {
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    expect(machineBusyTicks('cpu  100 5 50 9000 40 1 2 3 0 0\ncpu0 1 2 3 4\n')).toBe(161);
  });
  it('subtracts per pid, counts new pids from 0, drops groups under 1 ms, sorts largest first', () => {
    const before = new Map([
      [1, { group: 'a', ticks: 10 }],
      [2, { group: 'b', ticks: 5 }],
    ]);
    const after = new Map([
      [1, { group: 'a', ticks: 12 }], // +20 ms
      [2, { group: 'b', ticks: 5 }], // idle
      [3, { group: 'a', ticks: 1 }], // new: +10 ms
      [4, { group: 'c', ticks: 4 }], // new: +40 ms
    ]);
    const byGroup = cpuByGroup(before, after);
    expect(byGroup).toEqual({ c: 40, a: 30 });
    expect(Object.keys(byGroup)).toEqual(['c', 'a']);
  });
});

describe('profile summary', () => {
  it('attributes code to packages, our directories, node internals and V8 pseudo-frames', () => {
    expect(codeOrigin('file:///w/node_modules/@kubernetes/client-node/dist/informer.js', 'f')).toBe('@kubernetes/client-node');
    expect(codeOrigin('file:///w/node_modules/pino/lib/tools.js', 'f')).toBe('pino');
    expect(codeOrigin('file:///w/controller-manager/queue/queue.ts', 'f')).toBe('controller-manager');
    expect(codeOrigin('node:internal/streams/readable', 'f')).toBe('node:internal');
    expect(codeOrigin('', '(garbage collector)')).toBe('(garbage collector)');
    expect(codeOrigin('', 'JSON.parse')).toBe('(native)');
  });
  it('sums self time per sample from the time deltas and leaves idle out', () => {
    const frame = (functionName: string, url: string) => ({ functionName, url, scriptId: '1', lineNumber: 9, columnNumber: 0 });
    const profile = {
      nodes: [
        { id: 1, callFrame: frame('(root)', '') },
        { id: 2, callFrame: frame('(idle)', '') },
        { id: 3, callFrame: frame('parse', 'file:///w/node_modules/yaml/x.js') },
        { id: 4, callFrame: frame('(garbage collector)', '') },
      ],
      startTime: 0,
      endTime: 10_000,
      samples: [3, 3, 2, 4],
      timeDeltas: [0, 2000, 3000, 500], // sample i ran for timeDeltas[i + 1]
    };
    expect(summarizeProfile(profile)).toEqual({
      byPackage: { yaml: 5 },
      topFunctions: [{ fn: 'parse yaml:10', ms: 5 }],
    });
  });
});

describe('CpuWindowProbe on this machine', () => {
  it('sees a CPU-bound child process of this process in the window', async () => {
    const probe = new CpuWindowProbe(300);
    expect(probe.result()).toBeNull(); // not armed
    probe.arm();
    // a child burning ~250 ms of CPU, reaped inside the window: counted in this process (cutime)
    spawnSync(process.execPath, ['-e', 'const e = Date.now() + 250; while (Date.now() < e);']);
    const w = await pollUntil('cpu window', () => probe.result() ?? undefined, { timeoutMs: 5_000, intervalMs: 20 });
    expect(w.windowMs).toBe(300);
    expect(w.byGroup.harness).toBeGreaterThanOrEqual(150);
    expect(w.busyCpuS).toBeGreaterThanOrEqual(0.15);
    expect(w.snapshotMs).toBeGreaterThan(0);
  });
  it('profiles the harness\' own JavaScript in the window when asked', async () => {
    const probe = new CpuWindowProbe(250, true);
    probe.arm();
    // ~150 ms of JavaScript in a named function of this file
    const end = Date.now() + 150;
    let x = 0;
    function burnInTestFile() {
      while (Date.now() < end) x += Math.sqrt(x + 1);
    }
    burnInTestFile();
    const w = await pollUntil('profiled cpu window', () => probe.result() ?? undefined, { timeoutMs: 5_000, intervalMs: 20 });
    const p = w.harnessProfile!;
    expect(p.topFunctions[0]!.fn).toMatch(/^burnInTestFile /);
    expect(p.topFunctions[0]!.ms).toBeGreaterThanOrEqual(80);
    expect(Object.values(p.byPackage).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(80);
    expect(x).toBeGreaterThan(0);
  });
  it('rejects a window that is not a positive integer', () => {
    expect(() => new CpuWindowProbe(0)).toThrow(/windowMs/);
  });
});

describe('CPU window in results and report', () => {
  const rep = (podsPerNode: number, r: number, groups: Record<string, number>): RepResult => ({
    config: 5,
    dn: 3,
    podsPerNode,
    rep: r,
    events: { ...emptyEvents(), prioReady: 0.3 },
    cpuWindow: { windowMs: 300, busyCpuS: podsPerNode ? 0.5 : 0.3, byGroup: groups, snapshotMs: 4 },
  });
  it('renders medians per cell, the largest groups and per-node totals', () => {
    const results = parseResults(
      [
        rep(0, 0, { 'kube-apiserver': 60, 'real-2/kubelet': 30, 'real-2/containerd': 20 }),
        rep(0, 1, { 'kube-apiserver': 80, 'real-2/kubelet': 50 }),
        rep(20, 0, { 'kube-apiserver': 150, 'real-2/kubelet': 40, 'real-3/kubelet': 30 }),
      ]
        .map((r) => JSON.stringify(r))
        .join('\n'),
    );
    const table = cpuWindowTable(results)!;
    expect(table).toContain('## CPU in the first 300 ms after the taint');
    expect(table).toContain('| machine busy (all CPUs) | 300 | 500 |');
    expect(table).toContain('| kube-apiserver | 70 | 150 |');
    expect(table).toContain('| real-2/containerd | 10 | 0 |'); // absent in one repetition: 0
    expect(table).toContain('| real-2 (all) | 50 | 40 |');
    expect(table).toContain('| real-3 (all) | 0 | 30 |');
    expect(cpuWindowTable([{ ...rep(0, 0, {}), cpuWindow: undefined }])).toBeUndefined();
  });
  it('rejects a malformed window naming the field', () => {
    const bad = JSON.stringify({ ...rep(0, 0, {}), cpuWindow: { windowMs: 300, busyCpuS: -1, byGroup: {}, snapshotMs: 1 } });
    expect(() => parseResults(bad)).toThrow(/cpuWindow\.busyCpuS/);
  });
});
