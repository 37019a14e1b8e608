/**
 * CPU time per process group in the window after the taint (experiments/harness/cpu-window.ts):
 * parsing of /proc, grouping, the probe on this machine's real /proc, and the report table.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CpuWindowProbe, MachineCpuAudit, assignGroups, codeOrigin, cpuByGroup, cpuDuring, harnessFamily, isTestbedGroup, machineTicks, parseStat, processGroup, sharedMachine, summarizeProfile } from '../../experiments/harness/cpu-window.ts';
import { emptyEvents, parseResults, type RepResult } from '../../experiments/harness/results.ts';
import { cpuWindowTable, idleCpuTable, machineTable } from '../../experiments/harness/report.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';

/** A node -e program that burns `ms` of its own CPU time (not wall time: on a busy machine a spin gets part of a CPU). */
const burnCpu = (ms: number) => `const s = process.cpuUsage(); for (let u = process.cpuUsage(s); u.user + u.system < ${ms * 1000}; u = process.cpuUsage(s));`;

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
    // the harness' children that are the testbed it brought up keep their groups
    expect(processGroup('kube-apiserver', '/cache/kube-apiserver --etcd-servers=...', '', false, true)).toBe('kube-apiserver');
    expect(processGroup('kwok', '/cache/kwok --kubeconfig /tmp/tb/kwok.kubeconfig', '', false, true)).toBe('kwok');
    expect(processGroup('kubelet', '/cache/kubelet --config /tmp/run/nodes/real-2/kubelet.yaml', '', false, true)).toBe('real-2/kubelet');
    expect(processGroup('esbuild', '/w/node_modules/esbuild/bin/esbuild --service', '', false, true)).toBe('harness');
    expect(processGroup('node', 'node --import tsx /w/kubelet-shim/main.ts --listen /run/nodes/real-2/kubelet-shim.sock', '', false, false)).toBe('real-2/kubelet-shim');
    // a Node.js that names its main thread (the Ulysses image): comm MainThread, the component from main.ts
    expect(processGroup('MainThread', 'node --import /app/node_modules/tsx/dist/loader.mjs /app/controller-manager/main.ts --leader-elect=true', '', false, false)).toBe('controller-manager');
    expect(processGroup('MainThread', 'node --import /app/node_modules/tsx/dist/loader.mjs /app/manifests/kcm-handback.ts --after=60s', '', false, false)).toBe('kcm-handback');
    expect(processGroup('MainThread', 'node /app/cli/other.js', '', false, false)).toBe('MainThread');
    // "real-12" is a node of its own, not real-1
    expect(processGroup('containerd', 'containerd --config /run/nodes/real-12/containerd.toml', '', false, false)).toBe('real-12/containerd');
  });
  it('counts tsx\'s esbuild service in the Node.js process that started it, and a kubelet the harness restarted as kubelet', () => {
    const stats = new Map([
      [10, { comm: 'MainThread', ppid: 1, flags: 0 }],
      [11, { comm: 'esbuild', ppid: 10, flags: 0 }],
      [20, { comm: 'node', ppid: 1, flags: 0 }], // the harness
      [21, { comm: 'esbuild', ppid: 20, flags: 0 }],
      [22, { comm: 'kubelet', ppid: 20, flags: 0 }],
    ]);
    const cmdlines: Record<number, string> = { 10: 'node --import /app/node_modules/tsx/dist/loader.mjs /app/controller-manager/main.ts', 11: '/app/node_modules/esbuild/bin/esbuild --service', 20: 'node cli/ulysses.ts experiment failover', 21: 'esbuild --service', 22: '/cache/kubelet --config=/var/lib/kubelet/config.yaml' };
    const groups = new Map<number, string>();
    assignGroups(stats, new Set([20, 21, 22]), (pid) => ({ cmdline: cmdlines[pid]!, cgroup: '' }), groups);
    expect(Object.fromEntries(groups)).toEqual({ 10: 'controller-manager', 11: 'controller-manager', 20: 'harness', 21: 'harness', 22: 'kubelet' });
  });
  it('counts busy ticks from /proc/stat without idle and iowait', () => {
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    expect(machineTicks('cpu  100 5 50 9000 40 1 2 3 0 0\ncpu0 1 2 3 4\n').busy).toBe(161);
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

describe('the testbed and the rest of the machine', () => {
  it('counts the npx/sh/node launchers above the harness and all they started as the harness, nothing else', () => {
    const procs = new Map([
      [1, { comm: 'systemd', ppid: 0 }],
      [10, { comm: 'bash', ppid: 1 }],
      [11, { comm: 'npm exec tsx cl', ppid: 10 }],
      [12, { comm: 'sh', ppid: 11 }],
      [13, { comm: 'node', ppid: 12 }],
      [14, { comm: 'node', ppid: 13 }], // the harness
      [15, { comm: 'esbuild', ppid: 14 }],
      [16, { comm: 'runc', ppid: 15 }],
      [17, { comm: 'go', ppid: 10 }], // a build started from the same shell
      [18, { comm: 'esbuild', ppid: 13 }], // tsx's service of the launcher
      [19, { comm: 'vitest', ppid: 1 }],
    ]);
    expect([...harnessFamily(14, procs)].sort((a, b) => a - b)).toEqual([11, 12, 13, 14, 15, 16, 18]);
  });
  it('knows the testbed\'s process groups', () => {
    for (const g of ['harness', 'kernel', 'kube-apiserver', 'etcd', 'kube-controller', 'kwok', 'real-2/kubelet', 'real-12/http-server', 'runc:[2:INIT]', 'kubelet-shim']) expect(isTestbedGroup(g), g).toBe(true);
    for (const g of ['bash', 'node', 'go', 'npm exec tsc --', 'process_api', 'memfd:sealed-91']) expect(isTestbedGroup(g), g).toBe(false);
  });
  it('reads busy and steal ticks from /proc/stat', () => {
    expect(machineTicks('cpu  100 5 50 9000 40 1 2 3 0 0\n')).toEqual({ busy: 161, steal: 3 });
  });
  it('flags a repetition that shared the CPUs with other work', () => {
    const c = { seconds: 20, busyCpuS: 30, stealCpuS: 0, testbedCpuS: 29, outsideCpuS: 0.15, outside: {} };
    expect(sharedMachine(c)).toBe(false); // below 1% of a CPU over 20 s
    expect(sharedMachine({ ...c, outsideCpuS: 0.25 })).toBe(true);
    expect(sharedMachine({ ...c, seconds: 2, outsideCpuS: 0.05 })).toBe(false); // below 0.1 CPU-s
  });
});

// bounds for a busy machine, not speed expectations
describe('MachineCpuAudit on this machine', { timeout: 120_000 }, () => {
  it('puts a process outside the harness\' family in outsideCpuS and this process\' children in the testbed', async () => {
    const audit = new MachineCpuAudit();
    expect(audit.finish()).toBeNull(); // not armed
    audit.arm();
    // a child of this process: the harness
    spawnSync(process.execPath, ['-e', burnCpu(200)]);
    // a process re-parented away from this one (its shell exits at once): someone else's work
    const pid = Number(spawnSync('sh', ['-c', `${process.execPath} -e '${burnCpu(3000)}' >/dev/null 2>&1 & echo $!`], { encoding: 'utf8' }).stdout.trim());
    try {
      await pollUntil('the outside process burned 300 ms', () => (parseStat(readFileSync(`/proc/${pid}/stat`, 'utf8'))?.ticks ?? 0) >= 30, { timeoutMs: 60_000, intervalMs: 20 });
      const c = audit.finish()!;
      // outsideCpuS, not outside.node: on a busy machine other groups may push node out of the top 5 listed
      expect(c.outsideCpuS, JSON.stringify(c)).toBeGreaterThanOrEqual(0.25);
      expect(c.testbedCpuS, JSON.stringify(c)).toBeGreaterThanOrEqual(0.15); // the child reaped into this process
      expect(c.seconds).toBeGreaterThan(0.3);
      expect(sharedMachine(c)).toBe(true);
      expect(audit.finish()).toBeNull(); // once per arm
    } finally {
      process.kill(pid, 'SIGKILL');
    }
  });
});

describe('CpuWindowProbe on this machine', { timeout: 120_000 }, () => {
  it('sees a CPU-bound child process of this process in the window', async () => {
    const probe = new CpuWindowProbe(300);
    expect(probe.result()).toBeNull(); // not armed
    probe.arm();
    // a child burning ~250 ms of CPU, reaped inside the window: counted in this process (cutime)
    spawnSync(process.execPath, ['-e', burnCpu(250)]);
    const w = await pollUntil('cpu window', () => probe.result() ?? undefined, { timeoutMs: 60_000, intervalMs: 20 });
    expect(w.windowMs).toBe(300);
    expect(w.byGroup.harness).toBeGreaterThanOrEqual(150);
    expect(w.busyCpuS).toBeGreaterThanOrEqual(0.15);
    expect(w.snapshotMs).toBeGreaterThan(0);
  });
  it('profiles the harness\' own JavaScript in the window when asked', async () => {
    const probe = new CpuWindowProbe(250, true);
    probe.arm();
    // ~150 ms of JavaScript in a named function of this file
    const start = process.cpuUsage();
    let x = 0;
    function burnInTestFile() {
      // long inner loops: the JavaScript, not the cpuUsage calls between them, takes the time
      for (let u = process.cpuUsage(start); u.user + u.system < 150_000; u = process.cpuUsage(start)) for (let i = 0; i < 200_000; i++) x += Math.sqrt(x + 1);
    }
    burnInTestFile();
    const w = await pollUntil('profiled cpu window', () => probe.result() ?? undefined, { timeoutMs: 60_000, intervalMs: 20 });
    const p = w.harnessProfile!;
    // the burning function is named among the top ones, not how many of its ms a busy machine's sampler caught
    const burn = p.topFunctions.find((f) => /^burnInTestFile /.test(f.fn));
    expect(burn, JSON.stringify(p.topFunctions)).toBeDefined();
    expect(burn!.ms).toBeGreaterThan(0);
    expect(Object.values(p.byPackage).reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(burn!.ms);
    expect(x).toBeGreaterThan(0);
  });
  it('rejects a window that is not a positive integer', () => {
    expect(() => new CpuWindowProbe(0)).toThrow(/windowMs/);
  });
});

describe('cpuDuring on this machine', { timeout: 120_000 }, () => {
  it('counts what a child of this process burns during the spell, and the spell\'s length', async () => {
    const t0 = performance.now();
    const w = await cpuDuring(async () => {
      spawnSync(process.execPath, ['-e', burnCpu(250)]);
    });
    expect(w.windowMs).toBeGreaterThan(0);
    expect(w.windowMs).toBeLessThanOrEqual(Math.ceil(performance.now() - t0));
    expect(w.byGroup.harness).toBeGreaterThanOrEqual(150);
    expect(w.busyCpuS).toBeGreaterThanOrEqual(0.15);
  });
});

describe('the idle CPU table (quiet spell before t = 0)', () => {
  const rep = (config: RepResult['config'], r: number, byGroup: Record<string, number>): RepResult => ({
    config,
    dn: 1,
    podsPerNode: 0,
    rep: r,
    events: { ...emptyEvents(), prioReady: 0.3 },
    quietCpu: { windowMs: 100_000, busyCpuS: 10, byGroup, snapshotMs: 5 },
  });
  it('sums pod control per configuration and divides by stock\'s at the same cell', () => {
    const results = parseResults(
      [
        // stock: kcm 1.0%, scheduler 0.5% of a CPU (ms over 100 s)
        rep('upstream', 0, { 'kube-controller': 1000, 'kube-scheduler': 500, 'kube-apiserver': 4000, extender: 700 }), // an extender left running is off stock's path
        rep('upstream', 1, { 'kube-controller': 1000, 'kube-scheduler': 500, 'kube-apiserver': 4200 }),
        // Ulysses: kcm 0.5%, scheduler 0.5%, controller manager 1.5%, extender 0.5%, shims 0.25%
        rep(5, 0, { 'kube-controller': 500, 'kube-scheduler': 500, 'controller-manager': 1500, extender: 500, 'kubelet-shim': 250, harness: 9000 }),
      ]
        .map((r) => JSON.stringify(r))
        .join('\n'),
    );
    const table = idleCpuTable(results)!;
    expect(table).toContain('## CPU of the idle cluster (the 100 s quiet spell before t = 0');
    expect(table).toContain('| kube-controller | 1.00 | 0.50 |');
    expect(table).toContain('| controller-manager | 0.00 | 1.50 |');
    expect(table).toContain('| extender | 0.35 | 0.50 |');
    expect(table).toContain('| kube-apiserver | 4.10 | 0.00 |');
    expect(table).toContain('| **pod control (sum)** | 1.50 | 3.25 |');
    expect(table).toContain('| pod control : upstream\'s | 1.00x | 2.17x |');
    expect(table).not.toContain('harness'); // the harness is not a component
    expect(idleCpuTable([{ ...rep(5, 0, {}), quietCpu: undefined }])).toBeUndefined();
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

describe('the machine table of the report', () => {
  const rep = (r: number, outsideCpuS: number, outside: Record<string, number>): RepResult => ({
    config: 5,
    dn: 3,
    podsPerNode: 20,
    rep: r,
    events: { ...emptyEvents(), prioReady: 0.5 },
    repCpu: { seconds: 20, busyCpuS: 25, stealCpuS: 0.1, testbedCpuS: 24, outsideCpuS, outside },
  });
  it('gives medians and names the repetitions that shared the machine', () => {
    const table = machineTable(parseResults([rep(0, 0.02, {}), rep(1, 3.5, { bash: 3000, node: 400 })].map((r) => JSON.stringify(r)).join('\n')))!;
    expect(table).toContain('| 5: + CM multi-priority periodic | 3 | 20 | 2 | 20.00 | 25.00 | 0.10 | 24.00 | 1.76 / 3.50 | 1 |');
    expect(table).toContain('**1 of 2 repetitions shared the machine**');
    expect(table).toContain('config 5, DN 3, 20 pods/node, rep 1: 3.50 CPU-s (bash 3000 ms, node 400 ms)');
    expect(table).not.toContain('run again');
    const again = machineTable(parseResults(JSON.stringify({ ...rep(2, 0.03, {}), sharedRepeats: 1 })))!;
    expect(again).toContain('1 repetition(s) were run again because other work shared the machine (profile repeatShared; the recorded run is the last): config 5, DN 3, 20 pods/node, rep 2 (1x).');
  });
  it('says so when no repetition shared it, and is absent without audits', () => {
    expect(machineTable(parseResults(JSON.stringify(rep(0, 0.02, {}))))).toContain('No repetition shared the machine: outside the testbed at most 0.02 CPU-s');
    expect(machineTable(parseResults(JSON.stringify({ ...rep(0, 0, {}), repCpu: undefined })))).toBeUndefined();
  });
});
