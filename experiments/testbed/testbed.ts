/**
 * `ulysses testbed up|down|status|kubeconfig`: a real Kubernetes cluster on this machine's loopback
 * (etcd, kube-apiserver, kube-scheduler, vanilla kube-controller-manager), real worker nodes
 * (kubelet + containerd + CNI bridge) and KWOK nodes. Everything it starts is tracked in
 * <runDir>/state.json, so `down` stops exactly that, and both `up` and `down` are idempotent.
 */
import { existsSync, readFileSync, rmSync, writeFileSync, readdirSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { KubeConfig, CoreV1Api, type V1Node } from '@kubernetes/client-node';
import { stringify as stringifyYaml } from 'yaml';
import { ensureBinaries, K8S_VERSION, cacheDir, missingBinaries } from './binaries.ts';
import { BUILD_PREREQUISITES, TESTBED_PREREQUISITES, ensurePrerequisites } from './prerequisites.ts';
import { downCommand, stateKind } from './run-dir.ts';
import { buildTestImages } from './images/index.ts';
import { generateApiserverCert, generatePki, pkiPaths, writeKubeconfig, type Pki } from './pki.ts';
import {
  APISERVERS_BRIDGE,
  HA_APISERVER_IPS,
  PORTS,
  apiserverName,
  apiserverSpec,
  apiserverUrl,
  startApiserver,
  startControllerManager,
  startEtcd,
  startScheduler,
  waitApiserverReady,
  type ControlPlaneOptions,
} from './controlplane.ts';
import {
  realNodeSpec,
  startRealNode,
  stopRealNode,
  unmountUnder,
  mountsUnder,
  deleteBridge,
  destroyCgroupRoot,
  ensureBridge,
  kubeletConfigPath,
  kubeletConfigWithEndpoint,
  kubeletHeartbeatBackupPath,
  kubeletHeartbeatSwitch,
  withNodeAgent,
  runtimeEndpoint,
  type KubeletHeartbeatSettings,
  type KubeletRuntime,
  type RealNodeSpec,
} from './realnode.ts';
import { createKwokNodes, DEFAULT_KWOK_DELAYS, KWOK_PORT, startKwok, writeKwokStages, type KwokDelays } from './kwok.ts';
import { KubeClient } from '../../core/kube.ts';
import { isNodeReady } from '../../core/objects.ts';
import { ensureRuntimeConfigCrd } from '../../core/runtime-config.ts';
import { FatalError, isAlive, pidsMatching, pollUntil, processTracker, recordClusterStart, startProcess, stopProcess, tailFile, type TrackedProcess } from './processes.ts';
import { progressLog } from '../../core/logging.ts';

export interface TestbedOptions {
  runDir?: string;
  realNodes?: number;
  kwokNodes?: number;
  /** --controllers for the vanilla kube-controller-manager; "*" (all) by default. */
  controllers?: string;
  /**
   * Pin control-plane processes to CPU 0 and node processes (containerd, kubelet-shim, kubelet, and
   * what they spawn: containerd-shim, runc, CNI plugins) to CPU 1 (needs >= 2 CPUs): the testbed's
   * stand-in for a control-plane machine and worker machines. A container's own processes are not
   * confined (joining the pod's cpuset cgroup resets their affinity, and the kubelet sets kubepods'
   * cpuset to every CPU): the test images are idle servers, the pod creation work is the node's.
   */
  pinCpus?: boolean;
  /** With pinCpus: where kwok (the KWOK nodes' simulated kubelets) runs; default 'control-plane'. */
  kwokCpus?: 'control-plane' | 'nodes';
  kwokDelays?: KwokDelays;
  /** run Ulysses' kubelet-shim (CRI proxy) on every real node with this config file */
  kubeletShimConfig?: string;
  /**
   * kube-scheduler --config file (a KubeSchedulerConfiguration, e.g. with the Ulysses extender:
   * scheduler-plugins/extender/kube-scheduler-config.ts). Its clientConnection.kubeconfig must be
   * {@link schedulerKubeconfigPath}(runDir): with --config the scheduler ignores --kubeconfig.
   */
  schedulerConfig?: string;
  /**
   * kube-apiserver audit log of the pod and EndpointSlice writes in these namespaces (auditLogPath;
   * the failover experiment's critical namespace: its requests on the critical path).
   */
  auditNamespaces?: string[];
  /**
   * 2: a second kube-apiserver on the same etcd, as on a kubeadm HA control plane. Both bind and
   * advertise their own address on the bridge `uly-apis` (HA_APISERVER_IPS: 10.243.0.1, 10.243.0.2,
   * port 16443, each with its own serving certificate from the testbed CA valid for its address)
   * with the default lease endpoint reconciler, so both are listed in default/kubernetes; the
   * kubeconfigs point at the first. Default 1: one apiserver on 127.0.0.1, listed nowhere.
   */
  apiservers?: 1 | 2;
  /**
   * How long to wait for every node to be Ready and schedulable; default 120 s + 0.3 s per KWOK
   * node (kwok and the node lifecycle controller need minutes for 1000 nodes on 2 cores).
   */
  nodesReadyTimeoutMs?: number;
  log?: (line: string) => void;
}

/** Default wait for nodes Ready: 120 s, plus 0.3 s per KWOK node. */
export function defaultNodesReadyTimeoutMs(kwokNodes: number): number {
  return 120_000 + 300 * kwokNodes;
}

export interface TestbedState {
  version: string;
  runDir: string;
  kubeconfig: string;
  apiserver: string;
  options: { realNodes: number; kwokNodes: number; controllers: string; kcmExtraArgs?: string[]; pinCpus: boolean; kwokCpus?: 'control-plane' | 'nodes'; kubeletShimConfig?: string; schedulerConfig?: string; auditNamespaces?: string[]; apiservers?: 1 | 2 };
  processes: TrackedProcess[];
  realNodes: RealNodeSpec[];
  kwokNodes: string[];
  startedAt: string;
  ready: boolean;
}

export function defaultRunDir(): string {
  return process.env.ULYSSES_RUN_DIR ?? '/tmp/ulysses-testbed';
}

const stateFile = (runDir: string) => join(runDir, 'state.json');

/** The plain testbed's state in `runDir`; a kubeadm testbed's state there is an error naming its `down`. */
export function readState(runDir = defaultRunDir()): TestbedState | undefined {
  const f = stateFile(runDir);
  if (!existsSync(f)) return undefined;
  const s: unknown = JSON.parse(readFileSync(f, 'utf8'));
  if (stateKind(s) === 'kubeadm') throw new FatalError(`${f} is a kubeadm testbed's state, not a plain testbed's (\`${downCommand('kubeadm', runDir)}\` takes it down)`);
  return s as TestbedState;
}

function saveState(s: TestbedState): void {
  writeFileSync(stateFile(s.runDir), JSON.stringify(s, null, 2));
}

export function kubeConfigFor(state: TestbedState): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(state.kubeconfig);
  return kc;
}


/** Ready and no longer carrying the taints the node lifecycle controller removes once it is Ready. */
export function nodeSchedulable(n: V1Node): boolean {
  const transient = ['node.kubernetes.io/not-ready', 'node.kubernetes.io/unreachable', 'node.cloudprovider.kubernetes.io/uninitialized'];
  return isNodeReady(n) && !n.spec?.unschedulable && !(n.spec?.taints ?? []).some((t) => transient.includes(t.key));
}

/** The kubeconfig the testbed writes for kube-scheduler (system:kube-scheduler). */
export function schedulerKubeconfigPath(runDir: string): string {
  return join(runDir, 'kubeconfigs', 'kube-scheduler.kubeconfig');
}

function controlPlaneOptions(runDir: string, pki: Pki, controllers: string, cpus?: string, schedulerConfig?: string, auditNamespaces?: string[], apiservers: 1 | 2 = 1, kcmExtraArgs?: readonly string[]): ControlPlaneOptions {
  return {
    runDir,
    pki,
    controllers,
    cpus,
    ...(kcmExtraArgs?.length ? { controllerManagerExtraArgs: kcmExtraArgs } : {}),
    ...apiserverAddresses(apiservers),
    ...(schedulerConfig ? { schedulerConfig } : {}),
    ...(auditNamespaces?.length ? { auditNamespaces } : {}),
    kubeconfigs: {
      scheduler: schedulerKubeconfigPath(runDir),
      controllerManager: join(runDir, 'kubeconfigs', 'kube-controller-manager.kubeconfig'),
    },
  };
}

/** Brings the testbed up; returns the state. A healthy testbed already up is returned as is. */
export async function up(opts: TestbedOptions = {}): Promise<TestbedState> {
  const log = opts.log ?? progressLog;
  const runDir = opts.runDir ?? defaultRunDir();
  const existing = readState(runDir);
  if (existing) {
    const problems = await statusProblems(existing);
    if (existing.ready && problems.length === 0) {
      log(`testbed already up in ${runDir} (${existing.realNodes.length} real, ${existing.kwokNodes.length} kwok nodes)`);
      return existing;
    }
    log(`found a stale or broken testbed in ${runDir} (${problems.join('; ') || 'not ready'}): tearing it down first`);
    await down({ runDir, log });
  }
  const t0 = Date.now();
  const realCount = opts.realNodes ?? 2;
  const kwokCount = opts.kwokNodes ?? 0;
  const controllers = opts.controllers ?? '*';
  const pinCpus = opts.pinCpus ?? false;
  const cpCpus = pinCpus ? '0' : undefined;
  const nodeCpus = pinCpus ? '1' : undefined;
  const kwokCpus = opts.kwokCpus ?? 'control-plane';
  const apiservers = opts.apiservers ?? 1;
  if (apiservers !== 1 && apiservers !== 2) throw new Error(`testbed option apiservers: ${JSON.stringify(opts.apiservers)} (1 or 2)`);
  const url = apiserverUrl(apiserverAddresses(apiservers));

  ensurePrerequisites([...TESTBED_PREREQUISITES, ...(missingBinaries().length ? BUILD_PREREQUISITES : [])], { log });
  await assertPortsFree([...Object.values(PORTS), ...(kwokCount ? [KWOK_PORT] : [])]);
  await ensureBinaries(log);
  const images = await buildTestImages(cacheDir(), log);
  await mkdir(join(runDir, 'logs'), { recursive: true });
  await mkdir(join(runDir, 'kubeconfigs'), { recursive: true });
  log(`run directory: ${runDir} (logs in ${join(runDir, 'logs')})`);

  const nodes = Array.from({ length: realCount }, (_, i) => realNodeSpec(runDir, i + 1));
  const kwokNames = Array.from({ length: kwokCount }, (_, i) => `kwok-${i + 1}`);
  const state: TestbedState = {
    version: K8S_VERSION,
    runDir,
    kubeconfig: join(runDir, 'kubeconfigs', 'admin.kubeconfig'),
    apiserver: url,
    options: {
      realNodes: realCount,
      kwokNodes: kwokCount,
      controllers,
      pinCpus,
      kwokCpus,
      kubeletShimConfig: opts.kubeletShimConfig,
      schedulerConfig: opts.schedulerConfig,
      ...(opts.auditNamespaces?.length ? { auditNamespaces: opts.auditNamespaces } : {}),
      ...(apiservers === 2 ? { apiservers } : {}),
    },
    processes: [],
    realNodes: nodes,
    kwokNodes: kwokNames,
    startedAt: new Date().toISOString(),
    ready: false,
  };
  saveState(state);
  const track = processTracker(state, saveState);

  try {
    const pki = await generatePki(
      join(runDir, 'pki'),
      [
        { file: 'admin', cn: 'ulysses-admin', org: 'system:masters' },
        { file: 'kube-scheduler', cn: 'system:kube-scheduler' },
        { file: 'kube-controller-manager', cn: 'system:kube-controller-manager' },
        { file: 'apiserver-kubelet-client', cn: 'kube-apiserver-kubelet-client', org: 'system:masters' },
        ...nodes.map((n) => ({ file: `node-${n.name}`, cn: `system:node:${n.name}`, org: 'system:nodes' })),
      ],
      ['127.0.0.1', '10.96.0.1', ...(apiservers === 2 ? [HA_APISERVER_IPS[0]] : [])],
    );
    if (apiservers === 2) {
      await generateApiserverCert(pki, 'apiserver-2', [HA_APISERVER_IPS[1], '10.96.0.1']);
      // the apiservers' addresses, one /32 each on a bridge of their own (no port on it)
      await ensureBridge(APISERVERS_BRIDGE, HA_APISERVER_IPS.map((ip) => `${ip}/32`));
    }
    const kcDir = join(runDir, 'kubeconfigs');
    await writeKubeconfig(state.kubeconfig, url, pki, 'admin', 'admin');
    await writeKubeconfig(join(kcDir, 'kube-scheduler.kubeconfig'), url, pki, 'kube-scheduler', 'kube-scheduler');
    await writeKubeconfig(join(kcDir, 'kube-controller-manager.kubeconfig'), url, pki, 'kube-controller-manager', 'kube-controller-manager');
    for (const n of nodes) await writeKubeconfig(join(kcDir, `${n.name}.kubeconfig`), url, pki, `node-${n.name}`, n.name);

    const cp = controlPlaneOptions(runDir, pki, controllers, cpCpus, opts.schedulerConfig, opts.auditNamespaces, apiservers);
    log('starting etcd');
    track(await startEtcd(cp));
    for (let i = 0; i < apiservers; i++) {
      log(`starting ${apiserverName(i)}${cp.apiserverAddresses ? ` on ${cp.apiserverAddresses[i]}` : ''}`);
      track(await startApiserver(cp, i));
    }
    log('starting kube-scheduler and kube-controller-manager');
    track(await startScheduler(cp));
    track(await startControllerManager(cp));

    const kc = kubeConfigFor(state);
    const core = kc.makeApiClient(CoreV1Api);
    // the "default" ServiceAccount must exist before pods can be created in a namespace
    await pollUntil('default ServiceAccount', async () => (await core.readNamespacedServiceAccount({ name: 'default', namespace: 'default' })).metadata?.name, {
      timeoutMs: 60_000,
    });

    // Ulysses' runtime-config CRD (UlyssesConfig), so components and `ulysses set` work out of the box
    await ensureRuntimeConfigCrd(new KubeClient(kc));

    if (nodes.length) log(`starting ${nodes.length} real node(s): containerd + kubelet`);
    for (const n of nodes) {
      const h = await startRealNode(n, {
        kubeconfig: join(kcDir, `${n.name}.kubeconfig`),
        caCert: pki.caCert,
        imageTars: images.map((i) => i.tar),
        cpus: nodeCpus,
        kubeletShimConfig: opts.kubeletShimConfig,
        shimRuntimeKubeconfig: state.kubeconfig, // the shims follow UlyssesConfig/default like in a cluster
      });
      track(h.containerd);
      if (h.shim) track(h.shim);
      track(h.kubelet);
    }
    if (kwokNames.length) {
      log(`starting kwok with ${kwokNames.length} node(s)`);
      const stages = join(runDir, 'kwok-stages.yaml');
      await writeKwokStages(stages, opts.kwokDelays ?? DEFAULT_KWOK_DELAYS);
      track(startKwok(runDir, state.kubeconfig, stages, kwokCpus === 'nodes' ? nodeCpus : cpCpus));
      await createKwokNodes(core, kwokNames);
    }
    const expected = [...nodes.map((n) => n.name), ...kwokNames];
    await pollUntil(
      `nodes Ready and schedulable (${expected.length})`,
      async () => {
        const dead = state.processes.filter((p) => !isAlive(p.pid));
        if (dead.length) throw new FatalError(dead.map((p) => `${p.name} exited:\n${tailFile(p.logFile, 15)}`).join('\n'));
        const list = await core.listNode();
        const ready = new Set(list.items.filter(nodeSchedulable).map((n) => n.metadata!.name!));
        return expected.every((n) => ready.has(n));
      },
      {
        timeoutMs: opts.nodesReadyTimeoutMs ?? defaultNodesReadyTimeoutMs(kwokNames.length),
        // listing 1000 nodes every 500 ms would load the apiserver that is getting them Ready
        intervalMs: expected.length > 100 ? 3000 : 500,
        explain: () => nodes.map((n) => `--- kubelet ${n.name}:\n${tailFile(join(n.dir, 'kubelet.log'), 15)}`).join('\n'),
      },
    );
    state.ready = true;
    saveState(state);
    recordClusterStart('local', runDir, Date.now() - t0);
    log(`testbed up in ${((Date.now() - t0) / 1000).toFixed(1)} s: kubeconfig ${state.kubeconfig}`);
    return state;
  } catch (err) {
    log(`testbed up failed: ${(err as Error).message}`);
    log(`logs kept in ${join(runDir, 'logs')}; tearing down what was started`);
    await down({ runDir, log });
    throw err;
  }
}

/** Stops everything `up` started (tracked pids, containers, shims), unmounts, removes interfaces and state. */
export async function down(opts: { runDir?: string; log?: (line: string) => void } = {}): Promise<void> {
  const log = opts.log ?? progressLog;
  const runDir = opts.runDir ?? defaultRunDir();
  const state = readState(runDir);
  if (!state) {
    log(`no testbed in ${runDir}`);
    return;
  }
  const byName = (prefix: string) => state.processes.filter((p) => p.name.startsWith(prefix));
  for (const p of byName('kwok')) await stopProcess(p.pid, 2000);
  for (const n of state.realNodes) {
    const pids = [...byName(`kubelet/${n.name}`), ...byName(`kubelet-shim/${n.name}`), ...byName(`containerd/${n.name}`)].map((p) => p.pid);
    await stopRealNode(n, pids);
  }
  for (const name of ['kube-controller-manager', 'kube-scheduler', 'kube-apiserver', 'etcd']) {
    for (const p of byName(name)) await stopProcess(p.pid, 5000);
  }
  // anything else that still refers to the run directory (e.g. a process restarted by a test)
  for (const pid of pidsMatching(runDir)) await stopProcess(pid, 1000);
  await unmountUnder(runDir);
  for (const n of state.realNodes) {
    await deleteBridge(n.bridge);
    await destroyCgroupRoot(n.cgroupRoot);
  }
  if (state.options.apiservers === 2) await deleteBridge(APISERVERS_BRIDGE);
  // keep the logs: node logs are moved next to the control-plane ones
  for (const entry of existsSync(runDir) ? readdirSync(runDir) : []) {
    if (entry === 'logs') continue;
    if (entry === 'nodes') {
      for (const n of state.realNodes) {
        for (const f of ['kubelet.log', 'kubelet-shim.log', 'containerd.log']) {
          const src = join(n.dir, f);
          if (existsSync(src)) writeFileSync(join(runDir, 'logs', `${n.name}-${f}`), readFileSync(src));
        }
      }
    }
    await rm(join(runDir, entry), { recursive: true, force: true });
  }
  log(`testbed down (logs kept in ${join(runDir, 'logs')})`);
}

/** Problems of a testbed that claims to be up: dead processes (with their log tail) or an unready apiserver. */
export async function statusProblems(state: TestbedState): Promise<string[]> {
  const problems: string[] = [];
  for (const p of state.processes) {
    if (!isAlive(p.pid)) problems.push(`${p.name} (pid ${p.pid}) is not running; last log lines:\n${tailFile(p.logFile, 10)}`);
  }
  return problems;
}

export interface TestbedStatus {
  up: boolean;
  runDir: string;
  kubeconfig?: string;
  processes: Array<{ name: string; pid: number; alive: boolean; log: string }>;
  nodes: Array<{ name: string; ready: boolean; kind: string }>;
  problems: string[];
}

export async function status(runDir = defaultRunDir()): Promise<TestbedStatus> {
  const state = readState(runDir);
  if (!state) return { up: false, runDir, processes: [], nodes: [], problems: [] };
  const problems = await statusProblems(state);
  let nodes: TestbedStatus['nodes'] = [];
  try {
    const list = await kubeConfigFor(state).makeApiClient(CoreV1Api).listNode();
    nodes = list.items.map((n) => ({
      name: n.metadata!.name!,
      ready: isNodeReady(n),
      kind: n.metadata?.labels?.['ulysses.io/testbed-node'] ?? 'other',
    }));
  } catch (err) {
    problems.push(`apiserver unreachable: ${(err as Error).message}`);
  }
  return {
    up: state.ready && problems.length === 0,
    runDir,
    kubeconfig: state.kubeconfig,
    processes: state.processes.map((p) => ({ name: p.name, pid: p.pid, alive: isAlive(p.pid), log: p.logFile })),
    nodes,
    problems,
  };
}

/**
 * Stops and restarts one control-plane process with the same command line (used to test that our
 * informers survive an apiserver restart). Resolves once the component is healthy again.
 */
export async function restartComponent(name: 'kube-apiserver', opts: { runDir?: string; downtimeMs?: number } = {}): Promise<void> {
  const runDir = opts.runDir ?? defaultRunDir();
  const state = readState(runDir);
  if (!state) throw new Error(`no testbed in ${runDir}`);
  const idx = state.processes.findIndex((p) => p.name === name);
  if (idx < 0) throw new Error(`${name} is not tracked in ${runDir}`);
  const old = state.processes[idx]!;
  await stopProcess(old.pid, 10_000);
  if (opts.downtimeMs) await new Promise((r) => setTimeout(r, opts.downtimeMs));
  const cp = controlPlaneOptions(runDir, pkiPaths(join(runDir, 'pki')), state.options.controllers, old.cpus, state.options.schedulerConfig, state.options.auditNamespaces, state.options.apiservers, state.options.kcmExtraArgs);
  const spec = apiserverSpec(cp);
  const p = startProcess(spec);
  state.processes[idx] = p;
  saveState(state);
  await waitApiserverReady(cp, p.logFile, undefined, p);
}

/**
 * Restarts kube-controller-manager with `--controllers=<controllers>` (every other flag as `up` gave
 * it), e.g. `*` for stock Kubernetes or the list without the controllers Ulysses replaces, and with
 * `extraArgs` after them (`--name=value`, e.g. configuration upstream-tuned's node monitor; `[]`: none,
 * kcm's defaults; undefined: those it runs with now). The new process, the controllers and the extra
 * flags go into state.json (`status`, `down` and a later restart see them; no extra flags: the field
 * absent, as `up` writes it). Resolves once its /healthz answers.
 */
export async function restartControllerManager(controllers: string, runDir = defaultRunDir(), extraArgs?: readonly string[]): Promise<TrackedProcess> {
  return restartControlPlaneProcess('kube-controller-manager', runDir, startControllerManager, (o) => {
    const extra = [...(extraArgs ?? o.kcmExtraArgs ?? [])];
    const bad = extra.filter((a) => !/^--[a-z0-9-]+=/.test(a) || a.startsWith('--controllers='));
    if (bad.length) throw new Error(`kube-controller-manager extra flags: ${bad.join(' ')} (each --name=value, not --controllers)`);
    o.controllers = controllers;
    if (extra.length) o.kcmExtraArgs = extra;
    else delete o.kcmExtraArgs;
  });
}

/**
 * Restarts kube-scheduler with `--config=<schedulerConfig>` (undefined: none, its defaults), every
 * other flag as `up` gave it; the config goes into state.json. Resolves once its /healthz answers.
 */
export async function restartScheduler(schedulerConfig: string | undefined, runDir = defaultRunDir()): Promise<TrackedProcess> {
  return restartControlPlaneProcess('kube-scheduler', runDir, startScheduler, (o) => {
    if (schedulerConfig) o.schedulerConfig = schedulerConfig;
    else delete o.schedulerConfig;
  });
}

/**
 * Stops the tracked control-plane process `name` and starts it again with the testbed's options as
 * `change` leaves them (a change that throws stops nothing); the process and the options go into
 * state.json.
 */
async function restartControlPlaneProcess(
  name: 'kube-controller-manager' | 'kube-scheduler',
  runDir: string,
  start: (cp: ControlPlaneOptions) => Promise<TrackedProcess>,
  change: (options: TestbedState['options']) => void,
): Promise<TrackedProcess> {
  const state = readState(runDir);
  const old = state?.processes.find((p) => p.name === name);
  if (!state || !old) throw new Error(`no ${name} tracked in the testbed of ${runDir}`);
  const o = structuredClone(state.options);
  change(o);
  await stopProcess(old.pid, 10_000);
  const p = await start(controlPlaneOptions(runDir, pkiPaths(join(runDir, 'pki')), o.controllers, old.cpus, o.schedulerConfig, o.auditNamespaces, o.apiservers, o.kcmExtraArgs));
  replaceTracked(runDir, name, p, (s) => (s.options = o));
  return p;
}

/**
 * Restarts a real node's kubelet on the CRI endpoint `runtime` (its containerd directly, or the
 * node's kubelet-shim): rewrites both endpoints in its config file and starts it again with the
 * same command line. Running pods stay (they are containerd's, and so is every sandbox the kubelet
 * finds again); a kubelet-shim left out keeps running unused. `heartbeat` also changes how often it
 * renews its node Lease and computes its status (configuration upstream-tuned): settings (the values
 * the file had are kept in {@link kubeletHeartbeatBackupPath}), or `'stock'`, those values back and
 * the backup removed; undefined: as the file has them. Resolves once its /healthz answers.
 */
export async function restartKubelet(node: string, runtime: KubeletRuntime, runDir = defaultRunDir(), heartbeat?: KubeletHeartbeatSettings | 'stock'): Promise<TrackedProcess> {
  const state = readState(runDir);
  const spec = state?.realNodes.find((n) => n.name === node);
  const old = state?.processes.find((p) => p.name === `kubelet/${node}`);
  if (!state || !spec || !old) throw new Error(`node ${node} of the testbed in ${runDir} has no tracked kubelet`);
  if (runtime === 'kubelet-shim') {
    const shim = state.processes.find((p) => p.name === `kubelet-shim/${node}`);
    if (!shim || !isAlive(shim.pid)) throw new Error(`node ${node} of the testbed in ${runDir} runs no kubelet-shim (testbed up --kubelet-shim CONFIG)`);
  }
  const file = kubeletConfigPath(spec);
  await stopProcess(old.pid, 10_000);
  let config = kubeletConfigWithEndpoint(readFileSync(file, 'utf8'), runtimeEndpoint(spec, runtime));
  if (heartbeat !== undefined) {
    const backupFile = kubeletHeartbeatBackupPath(spec);
    const sw = kubeletHeartbeatSwitch(config, existsSync(backupFile) ? readFileSync(backupFile, 'utf8') : undefined, heartbeat);
    // the values from before first, so an interrupted switch can still restore them
    if (typeof sw.backup === 'string') writeFileSync(backupFile, sw.backup);
    config = sw.config;
    writeFileSync(file, config);
    if (sw.backup === null) rmSync(backupFile, { force: true });
  } else writeFileSync(file, config);
  const p = startProcess({ name: old.name, cmd: old.cmd, args: old.args, logFile: old.logFile, env: old.env, cpus: old.cpus });
  replaceTracked(runDir, old.name, p);
  await pollUntil(
    `kubelet of ${node} /healthz (on ${runtime})`,
    async () => {
      if (!isAlive(p.pid)) throw new FatalError(`kubelet of ${node} exited:\n${tailFile(p.logFile)}`);
      return (await fetch(`http://127.0.0.1:${spec.kubeletHealthzPort}/healthz`).catch(() => undefined))?.ok ?? false;
    },
    { timeoutMs: 60_000, intervalMs: 200, explain: () => tailFile(p.logFile) },
  );
  return p;
}

/**
 * Records `p` in state.json in place of the tracked process `name` (and `also` on the state). Reads
 * and writes the file with nothing awaited in between, so restarts running side by side (several
 * kubelets) do not overwrite each other's entries.
 */
function replaceTracked(runDir: string, name: string, p: TrackedProcess, also?: (s: TestbedState) => void): void {
  const state = readState(runDir);
  const idx = state?.processes.findIndex((x) => x.name === name) ?? -1;
  if (!state || idx < 0) throw new Error(`${name} is no longer tracked in ${runDir}`);
  state.processes[idx] = p;
  also?.(state);
  saveState(state);
}

/**
 * Stops a real node's containerd (its containers keep running under their shims), e.g. to test
 * what the kubelet or the kubelet-shim do while the runtime is down. {@link startNodeContainerd}
 * brings it back with the same command line.
 */
export async function stopNodeContainerd(node: string, runDir = defaultRunDir()): Promise<void> {
  const state = readState(runDir);
  const proc = state?.processes.find((p) => p.name === `containerd/${node}`);
  if (!proc) throw new Error(`node ${node} of the testbed in ${runDir} has no tracked containerd`);
  await stopProcess(proc.pid, 10_000);
}

/** Starts a real node's containerd again (same config, root and socket); resolves once its socket exists. */
export async function startNodeContainerd(node: string, runDir = defaultRunDir()): Promise<void> {
  const state = readState(runDir);
  const spec = state?.realNodes.find((n) => n.name === node);
  const idx = state?.processes.findIndex((p) => p.name === `containerd/${node}`) ?? -1;
  if (!state || !spec || idx < 0) throw new Error(`node ${node} of the testbed in ${runDir} has no tracked containerd`);
  const old = state.processes[idx]!;
  if (isAlive(old.pid)) throw new Error(`containerd of ${node} (pid ${old.pid}) is still running`);
  const p = startProcess({ name: old.name, cmd: old.cmd, args: old.args, logFile: old.logFile, env: old.env, cpus: old.cpus });
  state.processes[idx] = p;
  saveState(state);
  await pollUntil(`containerd socket of ${node}`, () => {
    if (!isAlive(p.pid)) throw new FatalError(`containerd of ${node} exited:\n${tailFile(p.logFile)}`);
    return existsSync(spec.socket);
  }, { timeoutMs: 30_000, explain: () => tailFile(p.logFile) });
}

/** What a clean teardown must leave: no process, mount, interface or cgroup of the testbed. */
export function leftovers(runDir = defaultRunDir(), state?: TestbedState): string[] {
  const out: string[] = [];
  for (const pid of pidsMatching(runDir)) out.push(`process ${pid} still refers to ${runDir}`);
  for (const p of state?.processes ?? []) if (isAlive(p.pid)) out.push(`${p.name} (pid ${p.pid}) still running`);
  for (const m of mountsUnder(runDir)) out.push(`mount ${m}`);
  for (const n of state?.realNodes ?? []) {
    if (existsSync(`/sys/class/net/${n.bridge}`)) out.push(`interface ${n.bridge}`);
    if (existsSync(join('/sys/fs/cgroup/pids', n.cgroupRoot))) out.push(`cgroup ${n.cgroupRoot}`);
  }
  if (state?.options.apiservers === 2 && existsSync(`/sys/class/net/${APISERVERS_BRIDGE}`)) out.push(`interface ${APISERVERS_BRIDGE}`);
  return out;
}

/**
 * Runtime toggle of a real node's kubelet-shim: writes its per-node config file and sends SIGHUP,
 * which makes the shim re-read it and apply the pacing section (waiting requests are kept).
 */
export function reconfigureKubeletShim(node: string, config: unknown, runDir = defaultRunDir()): void {
  const state = readState(runDir);
  const spec = state?.realNodes.find((n) => n.name === node);
  const proc = state?.processes.find((p) => p.name === `kubelet-shim/${node}`);
  if (!spec || !proc) throw new Error(`node ${node} of the testbed in ${runDir} runs no kubelet-shim`);
  writeFileSync(join(spec.dir, 'kubelet-shim.yaml'), stringifyYaml(withNodeAgent(spec, config as Record<string, unknown>)));
  process.kill(proc.pid, 'SIGHUP');
}

/** The tracked process of apiserver `index` (0: the first) of the testbed in `runDir`, and its URL. */
export function apiserverOf(index: number, runDir = defaultRunDir()): { pid: number; url: string; address: string } {
  const state = readState(runDir);
  const p = state?.processes.find((x) => x.name === apiserverName(index));
  if (!state || !p) throw new Error(`the testbed in ${runDir} has no ${apiserverName(index)}`);
  const addresses = apiserverAddresses(state.options.apiservers);
  return { pid: p.pid, url: apiserverUrl(addresses, index), address: addresses.apiserverAddresses?.[index] ?? '127.0.0.1' };
}

/** The control plane's apiserver addresses for the testbed option `apiservers` (none: one apiserver on 127.0.0.1). */
function apiserverAddresses(apiservers: 1 | 2 | undefined): Pick<ControlPlaneOptions, 'apiserverAddresses'> {
  return apiservers === 2 ? { apiserverAddresses: HA_APISERVER_IPS } : {};
}

/** Fails fast (naming the port) when another testbed or program already listens on a port we need. */
async function assertPortsFree(ports: number[]): Promise<void> {
  const busy: number[] = [];
  for (const port of ports) {
    const free = await new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
    });
    if (!free) busy.push(port);
  }
  if (busy.length) {
    const others = pidsMatching('kube-apiserver').length ? ' (is another testbed up? `ulysses testbed status --run-dir DIR`, then `down`)' : '';
    throw new Error(`testbed ports already in use on 127.0.0.1: ${busy.join(', ')}${others}`);
  }
}
