#!/usr/bin/env -S npx tsx
/**
 * `ulysses`: the one CLI entry point. Subcommands wire library code; they hold no logic of their own.
 */
import { Command, InvalidArgumentError } from 'commander';
import * as testbed from '../experiments/testbed/testbed.ts';
import * as kubeadmTestbed from '../experiments/testbed/kubeadm.ts';
import { downCommand, testbedTarget, upCommand, type TestbedTarget } from '../experiments/testbed/run-dir.ts';

const int = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${name} must be a non-negative integer, got "${v}"`);
  return n;
};

const program = new Command('ulysses').description('SLO-aware control-plane components for Kubernetes');

const tb = program.command('testbed').description('local real Kubernetes testbed (etcd, apiserver, scheduler, kcm, kubelets, kwok)');
/**
 * The testbed a `testbed` subcommand acts on: `--run-dir` (else the default run dir of the kind
 * `--kubeadm` asks for), of the kind its state file says (run-dir.ts).
 */
function target(o: { kubeadm: boolean; runDir: string }, cmd: Command): TestbedTarget {
  return testbedTarget(
    { kubeadm: o.kubeadm, runDir: cmd.getOptionValueSource('runDir') === 'default' ? undefined : o.runDir },
    { plain: testbed.defaultRunDir(), kubeadm: kubeadmTestbed.defaultKubeadmRunDir() },
  );
}
/** `target`, saying so when the state's kind is not the one asked for. */
function foundTarget(o: { kubeadm: boolean; runDir: string }, cmd: Command): TestbedTarget {
  const t = target(o, cmd);
  if (t.kind !== t.asked) console.error(`${t.runDir} holds a ${t.kind} testbed: acting on it as one`);
  return t;
}
tb.command('up')
  .description('build (first time) and start the testbed; a healthy running testbed is reused')
  .option('--real-nodes <n>', 'real nodes (kubelet + containerd)', int('--real-nodes'), 2)
  .option('--kwok-nodes <n>', 'KWOK nodes', int('--kwok-nodes'), 0)
  .option('--controllers <list>', 'kube-controller-manager --controllers', '*')
  .option('--apiservers <n>', 'kube-apiservers on the one etcd: 1, or 2 (each on its own address of the bridge uly-apis, both listed in default/kubernetes)', int('--apiservers'), 1)
  .option('--pin-cpus', 'pin control plane to CPU 0 and nodes to CPU 1', false)
  .option('--kubelet-shim <config>', "run Ulysses' kubelet-shim between each real kubelet and containerd, with this config file")
  .option('--run-dir <dir>', 'run directory', testbed.defaultRunDir())
  .option('--nodes-ready-timeout <s>', 'seconds to wait for all nodes Ready (default 120 + 0.3 per KWOK node)', int('--nodes-ready-timeout'))
  .option('--kubeadm', `a kubeadm cluster instead (static-pod control plane, kube-proxy, CoreDNS, joined workers; run dir ${kubeadmTestbed.defaultKubeadmRunDir()})`, false)
  .option('--workers <n>', 'with --kubeadm: worker nodes joined with kubeadm join', int('--workers'), 2)
  .action(async (o, cmd: Command) => {
    const t = target(o, cmd);
    if (t.kind !== t.asked) throw new Error(`${t.runDir} holds a ${t.kind} testbed: \`${upCommand(t.kind, t.runDir)}\` reuses it, \`${downCommand(t.kind, t.runDir)}\` takes it down`);
    if (o.kubeadm) {
      const k = await kubeadmTestbed.up({ workers: o.workers, runDir: t.runDir });
      console.log(`export KUBECONFIG=${k.kubeconfig}`);
      return;
    }
    const s = await testbed.up({
      nodesReadyTimeoutMs: o.nodesReadyTimeout !== undefined ? o.nodesReadyTimeout * 1000 : undefined,
      realNodes: o.realNodes,
      kwokNodes: o.kwokNodes,
      controllers: o.controllers,
      pinCpus: o.pinCpus,
      runDir: t.runDir,
      kubeletShimConfig: o.kubeletShim,
      apiservers: o.apiservers,
    });
    console.log(`export KUBECONFIG=${s.kubeconfig}`);
  });
tb.command('down')
  .description("stop everything the testbed started and clean up (the testbed of the kind the run dir's state.json says)")
  .option('--run-dir <dir>', 'run directory', testbed.defaultRunDir())
  .option('--kubeadm', `the kubeadm cluster (default run dir ${kubeadmTestbed.defaultKubeadmRunDir()}): kubeadm reset on every node, then remove what it left`, false)
  .action(async (o, cmd: Command) => {
    const t = foundTarget(o, cmd);
    await (t.kind === 'kubeadm' ? kubeadmTestbed.down({ runDir: t.runDir }) : testbed.down({ runDir: t.runDir }));
  });
tb.command('status')
  .option('--run-dir <dir>', 'run directory', testbed.defaultRunDir())
  .option('--json', 'print JSON', false)
  .option('--kubeadm', 'the kubeadm cluster: its processes (kubelets, containerds, kubelet-shims) and whether each runs', false)
  .action(async (o, cmd: Command) => {
    const t = foundTarget(o, cmd);
    if (t.kind === 'kubeadm') {
      const k = kubeadmTestbed.readKubeadmState(t.runDir);
      if (!k) return console.log(`no kubeadm testbed in ${t.runDir} (ulysses testbed up --kubeadm)`);
      const problems = kubeadmTestbed.statusProblems(k);
      if (o.json) return console.log(JSON.stringify({ ...k, problems }, null, 2));
      console.log(`kubeadm testbed ${k.ready && !problems.length ? 'UP' : 'DEGRADED'} in ${k.runDir} (Kubernetes ${k.version})\nkubeconfig: ${k.kubeconfig}`);
      for (const p of k.processes) console.log(`  ${problems.some((x) => x.startsWith(`${p.name} `)) ? 'DEAD   ' : 'running'}  ${p.name.padEnd(36)} pid ${p.pid}  log ${p.logFile}`);
      for (const p of problems) console.log(`problem: ${p}`);
      if (!k.ready || problems.length) process.exitCode = 1;
      return;
    }
    const s = await testbed.status(t.runDir);
    if (o.json) return console.log(JSON.stringify(s, null, 2));
    if (!s.processes.length) return console.log(`no testbed in ${s.runDir}`);
    console.log(`testbed ${s.up ? 'UP' : 'DEGRADED'} in ${s.runDir}\nkubeconfig: ${s.kubeconfig}`);
    for (const p of s.processes) console.log(`  ${p.alive ? 'running' : 'DEAD   '}  ${p.name.padEnd(28)} pid ${p.pid}  log ${p.log}`);
    for (const n of s.nodes) console.log(`  node ${n.name.padEnd(12)} ${n.kind.padEnd(5)} ${n.ready ? 'Ready' : 'NotReady'}`);
    for (const p of s.problems) console.log(`problem: ${p}`);
    if (!s.up) process.exitCode = 1;
  });
tb.command('kubeconfig')
  .description('print the admin kubeconfig path')
  .option('--run-dir <dir>', 'run directory', testbed.defaultRunDir())
  .option('--kubeadm', "the kubeadm cluster's admin kubeconfig", false)
  .action((o, cmd: Command) => {
    const t = foundTarget(o, cmd);
    const s = t.kind === 'kubeadm' ? kubeadmTestbed.readKubeadmState(t.runDir) : testbed.readState(t.runDir);
    if (!s) {
      console.error(`no ${t.kind === 'kubeadm' ? 'kubeadm testbed' : 'testbed'} in ${t.runDir}: run "ulysses testbed up${t.kind === 'kubeadm' ? ' --kubeadm' : ''}"`);
      process.exitCode = 1;
      return;
    }
    console.log(s.kubeconfig);
  });

program
  .command('demo')
  .description('testbed with 2 real nodes; stock Kubernetes (configuration upstream) vs Ulysses (configuration 5) on a failover under load; prints a short verdict')
  .option('--run-dir <dir>', 'run directory', testbed.defaultRunDir())
  .option('--pods-per-node <n>', 'low-priority pods on the destination node', int('--pods-per-node'), 10)
  .option('--reps <n>', 'repetitions per cell', int('--reps'), 2)
  .option('--out <dir>', 'output directory (default: a new one under the temp dir)')
  .option('--keep', 'leave the testbed up afterwards', false)
  .action(async (o) => {
    const { runDemo } = await import('../experiments/demo.ts');
    await runDemo({ runDir: o.runDir, podsPerNode: o.podsPerNode, reps: o.reps, keep: o.keep, out: o.out });
  });

/** A comma-separated option as its non-empty, trimmed items. */
const list = (v: string) => v.split(',').map((x) => x.trim()).filter(Boolean);
const intList = (name: string, min: number) => (v: string) =>
  v.split(',').map((x) => {
    const n = Number(x.trim());
    if (!x.trim() || !Number.isInteger(n) || n < min) throw new InvalidArgumentError(`${name}: "${x}" is not an integer >= ${min} (comma-separated list expected, e.g. 1,2,3)`);
    return n;
  });
/**
 * --config: Table 6.1 ids, "all", a range 1..5, and `upstream` (stock Kubernetes: the local testbed or
 * a kubeadm cluster) or `upstream-tuned` (stock Kubernetes tuned for node failure) in a list.
 */
const STOCK_CONFIGS = ['upstream', 'upstream-tuned'] as const;
const configList = (v: string): Array<number | (typeof STOCK_CONFIGS)[number]> => {
  if (v === 'all') return [1, 2, 3, 4, 5];
  if (v.includes('..')) {
    const [a, b] = v.split('..').map(Number);
    const configs = Array.from({ length: b! - a! + 1 }, (_, i) => a! + i);
    for (const c of configs) if (!Number.isInteger(c) || c < 1 || c > 5) throw new InvalidArgumentError(`--config: ${c} is not one of Table 6.1's configurations 1..5 (or "all")`);
    return configs;
  }
  const configs = v.split(',').map((x) => x.trim());
  const stock = (c: string): c is (typeof STOCK_CONFIGS)[number] => (STOCK_CONFIGS as readonly string[]).includes(c);
  for (const c of configs) if (!stock(c) && !/^[1-5]$/.test(c)) throw new InvalidArgumentError(`--config: "${c}" is not upstream, upstream-tuned or one of Table 6.1's configurations 1..5 (or "all")`);
  return configs.map((c) => (stock(c) ? c : Number(c)));
};

const experiment = program.command('experiment').description('experiments of the thesis (§6.1) on the local testbed or any cluster');
experiment
  .command('failover')
  .description('failover timing (thesis §4.3.2, Table 6.1): critical UDP echo pod + low-priority load, source node tainted NoExecute (or frozen: --failure frozen-node); resumable')
  .option(
    '--config <list>',
    'Table 6.1 configurations: 1..5, "all", or a list like 1,5; upstream (stock Kubernetes: on the local testbed or with --kubeadm) as in upstream,1,5, and upstream-tuned (stock Kubernetes tuned for node failure: kcm node monitor 1 s / grace 5 s, kubelet Lease every 1 s, critical pod tolerationSeconds 0) (default: 1,5; with --kubeadm upstream,1,5)',
    configList,
  )
  .option('--kubeadm', 'run on the kubeadm testbed (brought up with 1 + max(--dn) workers if none is up, and taken down again if the run fails): Ulysses installed as pods and switched with stock Kubernetes (configuration upstream) by the install/uninstall steps', false)
  .option('--keep-testbed', 'with --kubeadm: leave a kubeadm testbed the run brought up in place when the run fails (to look into it)', false)
  .option('--dn <list>', 'destination node counts', intList('--dn', 1), [1])
  .option('--pods-per-node <list>', 'low-priority pods per destination node (an idle cell, 0, is added unless --no-idle)', intList('--pods-per-node', 0), [5, 10, 15, 20])
  .option('--no-idle', 'do not add the idle cell (0 pods per node)')
  .option('--reps <n>', 'repetitions per cell', int('--reps'), 3)
  .requiredOption('--out <dir>', 'output directory (results.jsonl, summary.csv, report.md, figures)')
  .option('--run-dir <dir>', 'local testbed run directory (brought up if needed)', testbed.defaultRunDir())
  .option('--kubeconfig <file>', 'run on this cluster instead of the local testbed (needs --sources, --destinations)')
  .option('--node-shell <command>', 'with --kubeconfig of a kubeadm cluster: a command running a shell as root on a node, {node} its name (e.g. "ssh root@{node}"); Ulysses is installed and switched with stock Kubernetes (configuration upstream) through it')
  .option('--image <ref>', 'with --node-shell: the Ulysses image the nodes pull (default: ulysses:<version>)')
  .option('--sources <nodes>', 'with --kubeconfig: nodes that fail (comma-separated)', list)
  .option('--destinations <nodes>', 'with --kubeconfig: destination nodes, at least max(--dn)', list)
  .option('--shim-config <file>', 'kubelet-shim config of the paced configurations (2-5)')
  .option('--kwok-nodes <n>', 'scale run: a local testbed of this many KWOK nodes only (control plane only, no UDP client, no kubelet pacing)', int('--kwok-nodes'))
  .option('--kwok-sources <n>', 'with --kwok-nodes: KWOK nodes that fail (kwok-1..kwok-N); the destinations are the next --dn nodes', int('--kwok-sources'), 10)
  .option('--shim-policies <list>', 'kubelet policy comparison (thesis Fig 6.5): run each configuration with each kubelet-shim policy, e.g. vanilla,fixed,exponential-decay (or name=config.yaml)', list)
  .option('--scenario <name>', 'failover (the critical pod a UDP echo), or 5g: eUPF with PFCP/GTP-U stand-ins on this machine (connection restored) + multi-service low-priority app (thesis §6.1.2)', 'failover')
  .option(
    '--failure <mode>',
    'how the source node fails: taint (the harness taints it NoExecute at t = 0; default) or frozen-node (every process of it stopped at t = 0, no taint written: the cluster finds the failure itself; local or kubeadm testbed); overrides the profile',
  )
  .option('--profile <file>', 'run conditions a study varies (YAML: freezeSource, failure, repTimeoutSeconds, clientRateLimit, neutralSetup, warmup, criticalPathHoldMs, minCriticalAgeMs, quietBeforeFailureSeconds, pinCpus, cpuWindowMs, cpuWindowProfile, repeatShared); examples in experiments/profiles/')
  .action(async (o) => {
    const { runFailoverExperiment, resolveShimPolicies } = await import('../experiments/harness/local.ts');
    if (!['failover', '5g'].includes(o.scenario)) throw new InvalidArgumentError(`--scenario: "${o.scenario}" is not failover or 5g`);
    if (o.kwokNodes !== undefined && o.kubeconfig) throw new InvalidArgumentError('--kwok-nodes is a local testbed mode: do not combine it with --kubeconfig');
    const { loadKubeConfig } = await import('../core/kubeconfig.ts');
    // --kubeconfig of the kubeadm testbed: its node steps are reachable, so it runs as --kubeadm
    const kubeadmState = kubeadmTestbed.readKubeadmState();
    const { resolve } = await import('node:path');
    const kubeadm = o.kubeadm || Boolean(o.kubeconfig && kubeadmState && resolve(o.kubeconfig) === resolve(kubeadmState.kubeconfig));
    if (o.nodeShell && (!o.kubeconfig || kubeadm)) throw new InvalidArgumentError('--node-shell: with --kubeconfig of a kubeadm cluster other than the kubeadm testbed (whose nodes the harness reaches itself)');
    if (o.image && !o.nodeShell) throw new InvalidArgumentError('--image: with --node-shell (on the testbeds the image is built and imported)');
    let cluster: import('../experiments/harness/kubeadm-configurator.ts').KubeadmClusterTarget | undefined;
    if (o.nodeShell) {
      const { nodeShellAccess } = await import('../manifests/node-shell.ts');
      if (!o.sources?.length || !o.destinations?.length) throw new InvalidArgumentError('--node-shell: --sources and --destinations name the nodes that fail and receive');
      cluster = { kubeconfig: o.kubeconfig, nodes: await nodeShellAccess(o.nodeShell, () => loadKubeConfig(o.kubeconfig)), image: o.image, sources: o.sources, destinations: o.destinations, shellDescription: `"${o.nodeShell}"` };
    }
    if (o.kubeadm && o.kubeconfig && !kubeadm) throw new InvalidArgumentError(`--kubeadm with --kubeconfig ${o.kubeconfig}: not the kubeadm testbed's kubeconfig (${kubeadmState?.kubeconfig ?? 'none is up'})`);
    const configs = o.config ?? (kubeadm || cluster ? ['upstream', 1, 5] : [1, 5]);
    const podsPerNode = [...new Set([...(o.idle ? [0] : []), ...o.podsPerNode])].sort((a, b) => a - b);
    const policyItems: string[] | undefined = o.shimPolicies;
    const shimPolicyFiles = policyItems?.length ? resolveShimPolicies(policyItems) : undefined;
    const { loadRunProfile, parseFailureMode, runProfileOptions } = await import('../experiments/harness/profile.ts');
    let failure: import('../experiments/harness/profile.ts').FailureMode | undefined;
    try {
      failure = o.failure === undefined ? undefined : parseFailureMode(o.failure, '--failure');
    } catch (err) {
      throw new InvalidArgumentError((err as Error).message);
    }
    const profile = o.profile ? runProfileOptions(loadRunProfile(o.profile)) : {};
    const r = await runFailoverExperiment({
      plan: { configs, dns: o.dn, podsPerNode, reps: o.reps, ...(shimPolicyFiles ? { shimPolicies: Object.keys(shimPolicyFiles) } : {}) },
      shimPolicyFiles,
      scenario: o.scenario,
      ...profile,
      ...(failure ? { failure } : {}),
      out: o.out,
      runDir: o.runDir,
      kubeconfig: o.kubeconfig && !kubeadm && !cluster ? await loadKubeConfig(o.kubeconfig) : undefined,
      kubeadm: kubeadm || Boolean(cluster),
      keepTestbed: o.keepTestbed,
      cluster,
      sources: o.sources,
      destinations: o.destinations,
      pacedShimConfig: o.shimConfig,
      kwokNodes: o.kwokNodes,
      kwokSources: o.kwokSources,
      command: `npx tsx cli/ulysses.ts experiment report --out ${o.out}`,
    });
    console.log(`${r.ran} repetitions run, ${r.skipped} already done; report: ${r.report}`);
  });
experiment
  .command('report')
  .description('regenerate summary.csv, report.md and the SVG figures from DIR/results.jsonl')
  .requiredOption('--out <dir>', 'experiment output directory')
  .option('--print', 'print report.md', false)
  .option('--png', 'also a PNG copy of each figure (@resvg/resvg-js; experiments/results keeps the SVGs only)', false)
  .action(async (o) => {
    const { writeOutputs } = await import('../experiments/harness/outputs.ts');
    const r = await writeOutputs(o.out, (l) => console.error(l), { png: o.png });
    if (o.print) console.log((await import('node:fs')).readFileSync(r.report, 'utf8'));
    else console.log(`wrote ${r.report}, ${r.summary}, ${figureCount(r)}`);
  });

experiment
  .command('pool')
  .description('one results directory (report, summary, figures) from the repetitions of several runs of the same plan')
  .requiredOption('--from <dirs>', 'result directories to pool, comma-separated (at least two)', list)
  .option('--config <list>', 'keep these configurations only (e.g. 5: ratios against configuration 1 hold only within one run)', list)
  .requiredOption('--out <dir>', 'output directory')
  .action(async (o) => {
    const { writePool } = await import('../experiments/harness/pool.ts');
    const { writeOutputs } = await import('../experiments/harness/outputs.ts');
    const from: string[] = o.from;
    const configs: string[] | undefined = o.config;
    const command = `npx tsx cli/ulysses.ts experiment pool --from ${from.join(',')}${configs ? ` --config ${configs.join(',')}` : ''} --out ${o.out}`;
    const n = writePool(o.out, from, configs, command);
    const r = await writeOutputs(o.out, (l) => console.error(l));
    console.log(`pooled ${n} repetitions; wrote ${r.report}, ${r.summary}, ${figureCount(r)}`);
  });

/** "N SVG figure(s)", and the PNG copies when there are any. */
function figureCount(r: { svgs: readonly string[]; pngs: readonly string[] }): string {
  return `${r.svgs.length} SVG${r.pngs.length ? ` and ${r.pngs.length} PNG` : ''} figure(s)`;
}

// --- §6.2 experiments (experiments/placement/): pure simulations, no testbed ---
experiment
  .command('placement')
  .description('§6.2 placement simulation: LeastAllocated, MostAllocated, RequestedToCapacityRatio vs criticality-aware (52.5/42.5/5)')
  .option('--seed <n>', 'seed (run r uses seed + r)', int('--seed'), 1)
  .option('--runs <n>', 'runs (each: 4-10 nodes, 300-1000 pods)', int('--runs'), 100)
  .option('--nodes <n>', 'fix the initial node count', int('--nodes'))
  .option('--pods <n>', 'fix the pod count', int('--pods'))
  .requiredOption('--out <dir>', 'output directory (placement.csv, report.md, figures)')
  .option('--png', 'also a PNG copy of each SVG figure (@resvg/resvg-js)', false)
  .action(async (o) => {
    const { runPlacementExperiment } = await import('../experiments/placement/run.ts');
    const command = `ulysses experiment placement --seed ${o.seed} --runs ${o.runs}${o.nodes !== undefined ? ` --nodes ${o.nodes}` : ''}${o.pods !== undefined ? ` --pods ${o.pods}` : ''} --out ${o.out}`;
    const r = await runPlacementExperiment({ seed: o.seed, runs: o.runs, nodes: o.nodes, pods: o.pods, out: o.out, command, png: o.png, log: (l) => console.error(l) });
    if (r.written.pngMessage) console.error(r.written.pngMessage);
    console.log(`${r.table}\n\nwrote ${r.written.files.join(', ')}`);
  });
experiment
  .command('schedulability')
  .description('§6.2 schedulability study: 200 pod sets on 5 non-RT, 2 budget/period, 1 deferrable-server node; vanilla vs Ulysses')
  .option('--seed <n>', 'seed', int('--seed'), 1)
  .option('--sets <n>', 'pod sets', int('--sets'), 200)
  .option('--ds-cores <n>', 'cores of the deferrable-server node', int('--ds-cores'), 6)
  .option('--bp-cores <n>', 'cores of each budget/period node', int('--bp-cores'), 3)
  .option('--non-rt-cores <n>', 'cores of each non-RT node', int('--non-rt-cores'), 4)
  .option('--sample <n>', 'DS-rejected sets to check with the simulator', int('--sample'), 10)
  .requiredOption('--out <dir>', 'output directory (schedulability*.csv, report.md, figures)')
  .option('--png', 'also a PNG copy of each SVG figure (@resvg/resvg-js)', false)
  .action(async (o) => {
    const { runSchedulabilityExperiment } = await import('../experiments/placement/run.ts');
    const command = `ulysses experiment schedulability --seed ${o.seed} --sets ${o.sets} --ds-cores ${o.dsCores} --bp-cores ${o.bpCores} --non-rt-cores ${o.nonRtCores} --sample ${o.sample} --out ${o.out}`;
    const r = await runSchedulabilityExperiment({
      seed: o.seed,
      sets: o.sets,
      dsCores: o.dsCores,
      budgetPeriodCores: o.bpCores,
      nonRtCores: o.nonRtCores,
      simulateSample: o.sample,
      out: o.out,
      command,
      png: o.png,
      log: (l) => console.error(l),
    });
    if (r.written.pngMessage) console.error(r.written.pngMessage);
    console.log(`${r.table}\n\n${r.sensitivity}\n\nwrote ${r.written.files.join(', ')}`);
  });

program
  .command('schedulability')
  .description('what-if: would this real-time/TDMA pod fit on this node? (same analyses as the scheduler extender)')
  .requiredOption('--input <file>', 'JSON: {"node":{labels,annotations},"pods":[...existing],"pod":{...new},"networks":[...]?}')
  .action(async (o) => {
    const { readFile } = await import('node:fs/promises');
    const { schedulability } = await import('../scheduler-plugins/schedulability.ts');
    let input: unknown;
    try {
      input = JSON.parse(await readFile(o.input, 'utf8'));
    } catch (err) {
      throw new Error(`--input ${o.input}: ${(err as Error).message}`);
    }
    const answer = schedulability(input as never);
    console.log(JSON.stringify(answer, null, 2));
    if (!answer.feasible) process.exitCode = 3;
  });

/** --kubeconfig, else $KUBECONFIG, else the local testbed's admin kubeconfig. */
async function clusterClient(kubeconfig?: string) {
  const { KubeClient } = await import('../core/kube.ts');
  const { loadKubeConfig } = await import('../core/kubeconfig.ts');
  const file = kubeconfig ?? process.env.KUBECONFIG ?? testbed.readState()?.kubeconfig ?? kubeadmTestbed.readKubeadmState()?.kubeconfig;
  return new KubeClient(await loadKubeConfig(file));
}

const num = (name: string) => (v: string) => {
  const n = Number(v);
  if (!Number.isFinite(n)) throw new InvalidArgumentError(`${name} must be a number, got "${v}"`);
  return n;
};

program
  .command('status')
  .description('runtime configuration: desired (UlyssesConfig spec) vs observed (what each component reports) per component and node; the last critical-pod recoveries and SLO misses')
  .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, else the local testbed)')
  .option('--json', 'print the UlyssesConfig as JSON', false)
  .action(async (o) => {
    const { readRuntimeConfig } = await import('../core/runtime-config.ts');
    const { formatStatus, statusRows } = await import('../core/runtime-status.ts');
    const obj = await readRuntimeConfig(await clusterClient(o.kubeconfig));
    if (o.json) return console.log(JSON.stringify(obj ?? null, null, 2));
    console.log(formatStatus(obj));
    if (statusRows(obj).some((r) => !r.upToDate)) process.exitCode = 2;
  });

program
  .command('set')
  .description(
    'switch a component at runtime (patches UlyssesConfig/default; the components apply it live):\n' +
      '  set controller-manager vanilla|multi-priority-async|multi-priority-periodic|auto [--controllers a,b] [--period-ms N] [--workers N] [--api-rate-limit on|off]\n' +
      '  set kubelet-shim vanilla|fixed|exponential-decay|adaptive [--node N | --selector k=v] [--param name=value ...]\n' +
      '  set scheduler-extender on|off [--plugins assurance,realtime,tdma]\n' +
      '  set apf on|off [--namespaces ns1,ns2]\n' +
      '  set slo <seconds>|off [--namespaces ns1,ns2]   (critical-pod recovery SLO: the default, or these namespaces)\n' +
      '  set node-failure on|off [--period-ms N] [--window-ms N] [--confirm-ms N] [--scope critical|all]   (fast node failure detection)',
  )
  .argument('<component>', 'controller-manager | kubelet-shim | scheduler-extender | apf | slo | node-failure')
  .argument('<mode>', 'the mode or policy')
  .option('--kubeconfig <file>', 'kubeconfig (default: $KUBECONFIG, else the local testbed)')
  .option('--controllers <list>', 'controller-manager: controllers to switch (default: all failover-path ones)', list)
  .option('--period-ms <n>', 'controller-manager: period T of the periodic workers; node-failure: probe period', num('--period-ms'))
  .option('--window-ms <n>', 'node-failure: silence of a node agent before its node can fail (>= 3 periods)', num('--window-ms'))
  .option('--confirm-ms <n>', "node-failure: time the node's kubelet has to answer a TLS handshake (<= window)", num('--confirm-ms'))
  .option('--scope <critical|all>', 'node-failure: pods evicted at once from a failed node')
  .option('--workers <n>', 'controller-manager: workers', num('--workers'))
  .option('--api-rate-limit <on|off>', "controller-manager: kcm's client-side limiter (20 qps / burst 30); off = \"rate limiting off\"")
  .option('--node <name>', 'kubelet-shim: only this node')
  .option('--selector <k=v,...>', 'kubelet-shim: nodes with these labels')
  .option('--param <name=value>', 'kubelet-shim: a policy or gate parameter, e.g. initialWaitMs=700 (repeatable)', (v: string, acc: Record<string, number> = {}) => {
    const m = /^([A-Za-z]+)=(.+)$/.exec(v);
    if (!m || !Number.isFinite(Number(m[2]))) throw new InvalidArgumentError(`--param must be name=number, got "${v}"`);
    return { ...acc, [m[1]!]: Number(m[2]) };
  })
  .option('--plugins <list>', 'scheduler-extender: plugins to switch', list)
  .option('--namespaces <list>', 'apf: critical namespaces to exempt; slo: namespaces whose SLO to set', list)
  .action(async (component: string, mode: string, o) => {
    if (component === 'kubelet-shim') await checkShimEntry(mode, o.param);
    const { patchRuntimeConfig, readRuntimeConfig } = await import('../core/runtime-config.ts');
    const { setPatch } = await import('../core/runtime-status.ts');
    const client = await clusterClient(o.kubeconfig);
    const current = await readRuntimeConfig(client);
    const patch = setPatch(component, mode, { controllers: o.controllers, periodMs: o.periodMs, workers: o.workers, apiRateLimit: o.apiRateLimit, node: o.node, selector: o.selector, params: o.param, plugins: o.plugins, namespaces: o.namespaces, windowMs: o.windowMs, confirmTimeoutMs: o.confirmMs, scope: o.scope }, current?.spec);
    const obj = await patchRuntimeConfig(client, patch);
    console.log(`UlyssesConfig/default generation ${obj.metadata.generation}: ${JSON.stringify(patch)}\n(run "ulysses status" to see the components apply it)`);
  });

/**
 * A kubelet-shim entry checked as the shims will check it (kubelet-shim/runtime.ts, pacing.ts), so
 * `set` refuses an unknown parameter or an out-of-range one, naming it, before writing anything.
 */
async function checkShimEntry(policy: string, params: Record<string, number> | undefined): Promise<void> {
  const { pacingFromEntry } = await import('../kubelet-shim/runtime.ts');
  const { PacingConfigSchema } = await import('../kubelet-shim/pacing.ts');
  const r = PacingConfigSchema.safeParse(pacingFromEntry({ policy, ...(params ? { params } : {}) }));
  if (!r.success) throw new InvalidArgumentError(`kubelet-shim ${policy}: ${r.error.issues.map((i) => `${i.path.join('.') || '(entry)'}: ${i.message}`).join('; ')}`);
}

/**
 * The cluster `ulysses install|uninstall` acts on: any kubeadm cluster whose nodes `--node-shell`
 * reaches (manifests/node-shell.ts), or the kubeadm testbed (nodes on this machine, image built and
 * imported first).
 */
async function installTarget(o: { kubeconfig?: string; kubectl?: string; image?: string; components?: string[]; nodeShell?: string; shimProgram?: string }) {
  const { binaryPath } = await import('../experiments/testbed/binaries.ts');
  const { existsSync } = await import('node:fs');
  const components = o.components as import('../manifests/overlays.ts').Component[] | undefined;
  const log = (l: string) => console.error(l);
  if (o.nodeShell) {
    const { nodeShellAccess } = await import('../manifests/node-shell.ts');
    const { loadKubeConfig } = await import('../core/kubeconfig.ts');
    const file = o.kubeconfig ?? process.env.KUBECONFIG;
    if (!file) throw new InvalidArgumentError('--node-shell: the cluster\'s admin kubeconfig is needed (--kubeconfig or $KUBECONFIG)');
    const nodes = await nodeShellAccess(o.nodeShell, () => loadKubeConfig(file), { shimProgram: o.shimProgram });
    return { kubeconfig: file, kubectl: o.kubectl, image: o.image, components, nodes, log, state: undefined };
  }
  const state = kubeadmTestbed.readKubeadmState();
  if (!state?.ready) throw new Error('no kubeadm testbed is up (ulysses testbed up --kubeadm); for another kubeadm cluster give --node-shell, e.g. --node-shell "ssh root@{node}" (manifests/README.md)');
  if (o.kubeconfig && o.kubeconfig !== state.kubeconfig) throw new Error(`--kubeconfig ${o.kubeconfig} is not the kubeadm testbed's (${state.kubeconfig}): give --node-shell to reach that cluster's nodes`);
  const kubectl = o.kubectl ?? (existsSync(binaryPath('kubectl')) ? binaryPath('kubectl') : 'kubectl');
  return { kubeconfig: state.kubeconfig, kubectl, image: o.image, components, nodes: kubeadmTestbed.kubeadmNodeAccess(state), log, state };
}

const NODE_SHELL_HELP = 'a command running a shell as root on a node, {node} its name, e.g. "ssh root@{node}": install into that kubeadm cluster (default: the kubeadm testbed)';

program
  .command('install')
  .description('install Ulysses into a kubeadm cluster as manifests/README.md describes: objects, controller manager and extender Deployments, kube-controller-manager --controllers and kube-scheduler --config (recorded in kubeadm-config, edited into the static pods, the operator\'s changes kept), the kubelet-shim node service and each kubelet\'s runtime endpoint')
  .option('--kubeconfig <file>', "the cluster's admin kubeconfig (default: $KUBECONFIG with --node-shell, else the kubeadm testbed's)")
  .option('--node-shell <command>', NODE_SHELL_HELP)
  .option('--components <list>', 'apf,controller-manager,scheduler-extender,kubelet-shim (default: all)', list)
  .option('--image <ref>', 'the Ulysses image the nodes pull (default: ulysses:<version>; on the kubeadm testbed built and imported into every node)')
  .option('--shim-program <path>', 'with --node-shell: the kubelet-shim program on the nodes (default /opt/ulysses/manifests/entrypoint.sh)')
  .option('--kubectl <path>', "kubectl (default: the testbed's, else kubectl on PATH)")
  .action(async (o) => {
    const target = await installTarget(o);
    if (!o.image && target.state) {
      const { buildUlyssesImage, importUlyssesImage } = await import('../experiments/testbed/ulysses-image.ts');
      const img = await buildUlyssesImage({ log: target.log });
      await importUlyssesImage(img.tar, target.state.nodes.map((n) => n.spec.socket));
    }
    const { install } = await import('../manifests/install.ts');
    await install(target);
  });

program
  .command('uninstall')
  .description('return a kubeadm cluster to stock Kubernetes: kube-scheduler and kube-controller-manager first (their manifests and kubeadm-config as they were), then each node\'s kubelet back on containerd, then every Ulysses object deleted')
  .option('--kubeconfig <file>', "the cluster's admin kubeconfig (default: $KUBECONFIG with --node-shell, else the kubeadm testbed's)")
  .option('--node-shell <command>', NODE_SHELL_HELP)
  .option('--components <list>', 'apf,controller-manager,scheduler-extender,kubelet-shim (default: all)', list)
  .option('--skip-unreachable', 'go on past a node whose files cannot be reached (kcm and kube-scheduler are stock before any node is touched); the nodes skipped are named, and `uninstall --components kubelet-shim` finishes them once they are back', false)
  .option('--kubectl <path>', "kubectl (default: the testbed's, else kubectl on PATH)")
  .action(async (o) => {
    const { uninstall } = await import('../manifests/install.ts');
    await uninstall({ ...(await installTarget(o)), skipUnreachable: o.skipUnreachable });
  });

program
  .command('extender-certs')
  .description("issue the scheduler extender's TLS for a step-by-step install (manifests/README.md step 4; `install` does this itself): its own CA, the serving certificate, kube-scheduler's client certificate")
  .requiredOption('--out <dir>', 'where to write secrets.yaml (kubectl apply --server-side -f) and the control-plane nodes\' files (extender-ca.crt, extender-client.crt, extender-client.key)')
  .option('--cluster-ip <ip>', "the extender Service's clusterIP (manifests/base/scheduler-extender/service.yaml)", '10.96.0.250')
  .action(async (o: { out: string; clusterIp: string }) => {
    const { mkdirSync, writeFileSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { stringify } = await import('yaml');
    const { issueExtenderPki } = await import('../core/extender-pki.ts');
    const { extenderTlsSecrets } = await import('../manifests/install.ts');
    const pki = await issueExtenderPki(o.clusterIp);
    mkdirSync(o.out, { recursive: true, mode: 0o700 });
    writeFileSync(join(o.out, 'secrets.yaml'), extenderTlsSecrets(pki).map((x) => stringify(x)).join('---\n'), { mode: 0o600 });
    writeFileSync(join(o.out, 'extender-ca.crt'), pki.ca.cert);
    writeFileSync(join(o.out, 'extender-client.crt'), pki.client.cert);
    writeFileSync(join(o.out, 'extender-client.key'), pki.client.key, { mode: 0o600 });
    console.log(`written to ${o.out}: secrets.yaml (both Secrets of ulysses-system), extender-ca.crt, extender-client.crt, extender-client.key (for /etc/kubernetes/ulysses/pki on every control-plane node)`);
  });

const image = program.command('image').description('the Ulysses container image');
image
  .command('build')
  .description('build ulysses:<version> as an OCI image tar without pulling a base image (host node, app, production deps); print its size')
  .option('--out <file>', 'where to write the tar (default: the image cache)')
  .option('--import', 'import it into the containerd of every node of the running testbeds (kubeadm and plain)', false)
  .action(async (o) => {
    const { buildUlyssesImage, importUlyssesImage } = await import('../experiments/testbed/ulysses-image.ts');
    const img = await buildUlyssesImage({ outFile: o.out, log: (l) => console.error(l) });
    console.log(`${img.name}: ${img.tar} (${(img.bytes / 1e6).toFixed(1)} MB, ${img.files} files)`);
    if (o.import) {
      const sockets = [...(kubeadmTestbed.readKubeadmState()?.nodes.map((n) => n.spec.socket) ?? []), ...(testbed.readState()?.realNodes.map((n) => n.socket) ?? [])];
      if (!sockets.length) throw new Error('--import: no testbed is up (ulysses testbed up [--kubeadm])');
      await importUlyssesImage(img.tar, sockets);
      console.log(`imported into ${sockets.length} node(s)`);
    }
  });

program
  .command('prerequisites')
  .description('what the testbeds, `image build`, PNG figures and the eUPF build (experiments/5g/eupf) need from the host (experiments/testbed/prerequisites.ts): checked, and as root the missing Debian packages installed with apt-get (not with ULYSSES_NO_APT=1)')
  .option('--packages', 'only print the Debian packages that provide them (one line)', false)
  .action(async (o) => {
    const { ALL_PREREQUISITES, debianPackages, ensurePrerequisites } = await import('../experiments/testbed/prerequisites.ts');
    if (o.packages) return console.log(debianPackages(ALL_PREREQUISITES).join(' '));
    ensurePrerequisites(ALL_PREREQUISITES);
    console.log(`all ${ALL_PREREQUISITES.length} prerequisites present`);
  });

program.parseAsync().catch((err: Error) => {
  console.error(`ulysses: ${err.message}`);
  process.exit(1);
});
