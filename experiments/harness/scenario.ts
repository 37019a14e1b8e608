/**
 * One repetition of the failover scenario of thesis §4.3.2, and the return to the initial state
 * between repetitions.
 *
 * Setup: the destination nodes are cordoned; the critical UDP echo pod (criticality high, its own
 * namespace and Service, allowed only on the source node and the first destination node) and the
 * low-priority load (Deployments of 2 http-server pods, podsPerNode x DN pods) come up on the source
 * node; then the destinations are uncordoned. At t=0 the source node gets a NoExecute taint; the
 * taint eviction controller deletes its pods, the ReplicaSet controller recreates them, the
 * scheduler puts them on the destinations. Events come from watches (pods, the critical pod's
 * namespace on its own, EndpointSlices) and a UDP client on the host that sends a datagram every
 * 50 ms to the new critical pod ("Prio up").
 */
import { join } from 'node:path';
import { AppsV1Api, CoreV1Api, type CoreV1Event, type KubeConfig, type V1Deployment, type V1EndpointSlice, type V1Node, type V1Pod, type V1Toleration } from '@kubernetes/client-node';
import { ResilientInformer } from '../../core/informer.ts';
import { isNodeReady, isPodReady } from '../../core/objects.ts';
import { FatalError, pollUntil, TimeoutError } from '../testbed/processes.ts';
import { PodStartWatch } from '../pod-start.ts';
import { ECHO_PORT, HTTP_PORT, applyDeployment, deployment, ensureNamespace, taintNoExecuteTimed, udpFirstAnswer, untaint } from '../workloads.ts';
import { grantLabels } from '../../core/claims.ts';
import { DETECTION_EVENTS, EVENTS, SERVICE_EVENT, USER_PLANE_EVENTS, emptyEvents, type EventName, type FailoverEvents, type ScenarioName } from './results.ts';
import { DETECTION_TAINTS, NODE_FAILURE_DETECTED_REASON, ULYSSES_UNREACHABLE_TAINT, detectionEvents, detectionTaintsOf, type DetectionObservation } from './failure-detection.ts';
import type { FailureMode } from './profile.ts';
import { failureTolerationSeconds } from './upstream-tuned.ts';
import { eupfDeployment, eupfService, eupfStartProblem } from '../5g/eupf.ts';
import { UserPlane, userPlaneTimes } from '../5g/user-plane.ts';
import { cpuDuring, type CpuWindow } from './cpu-window.ts';

export const EXPERIMENT_LABEL = 'ulysses.io/experiment';
export const FAILURE_TAINT = 'ulysses.io/failure';
export const PRIO_NAME = 'prio';

/**
 * The 5G scenario of thesis §6.1.2 on the testbed: the critical pod is the 5G user plane function,
 * eUPF (Deployment and Service `upf`, experiments/5g/eupf.ts), with the SMF and gNB/UE stand-ins and
 * the data network on the host (experiments/5g/user-plane.ts) giving it a PFCP session and GTP-U
 * traffic; the low-priority load is a multi-service application (one Service per Deployment, named
 * after train-ticket's microservices as in the thesis).
 */
export const UPF_NAME = 'upf';
export const TRAIN_TICKET_SERVICES = [
  'ts-auth', 'ts-user', 'ts-order', 'ts-route', 'ts-station', 'ts-train', 'ts-travel', 'ts-ticketinfo',
  'ts-price', 'ts-seat', 'ts-payment', 'ts-notification', 'ts-food', 'ts-contacts', 'ts-config',
] as const;

/** The critical Deployment's and Service's name in a scenario. */
export const criticalName = (scenario: ScenarioName = 'failover') => (scenario === '5g' ? UPF_NAME : PRIO_NAME);

/**
 * Names of `count` load Deployments: low-0, low-1, ... (failover) or train-ticket services,
 * suffixed -2, -3, ... once the list is used up (5g).
 */
export function loadNames(count: number, scenario: ScenarioName = 'failover'): string[] {
  return Array.from({ length: count }, (_, i) => {
    if (scenario !== '5g') return `low-${i}`;
    const base = TRAIN_TICKET_SERVICES[i % TRAIN_TICKET_SERVICES.length]!;
    const round = Math.floor(i / TRAIN_TICKET_SERVICES.length);
    return round ? `${base}-${round + 1}` : base;
  });
}

export interface Topology {
  /** nodes that fail (tainted NoExecute at t=0, or frozen: failureMode); the workload starts there */
  sources: string[];
  /** destination nodes, in order; the critical pod may only go to the first one */
  destinations: string[];
}

export interface ScenarioOptions {
  /** namespace of the critical service (the APF-exempt one) */
  criticalNamespace: string;
  /** namespace of the low-priority load */
  loadNamespace: string;
  /** what else happens to a failed node besides its NoExecute taint (default: nothing); failureMode frozen-node: all that happens to it */
  failure?: NodeFailure;
  /**
   * taint (default): t = 0 is the harness' NoExecute taint on the sources (after failure.freeze);
   * frozen-node: no taint, t = 0 is the moment failure.freeze has stopped every process of the
   * sources, and the repetition also waits for the cluster's own detection (events detected, taint)
   */
  failureMode?: FailureMode;
  /** where the cleanup reports what it did beyond the usual (e.g. a leftover taint it removed) */
  log?: (line: string) => void;
  /** tolerations of every experiment pod (KWOK nodes: KWOK_TOLERATION) */
  tolerations?: V1Toleration[];
  /** more tolerations of the critical pod only (configuration upstream-tuned: kcm's failure taints for 0 s) */
  criticalTolerations?: V1Toleration[];
  /**
   * Probe the critical pod with the host's UDP client ("Prio up", default true). False on KWOK nodes,
   * whose pods run nothing: prioUp then stays null and the repetition does not wait for it.
   */
  udpProbe?: boolean;
  /**
   * Also probe the critical Service's ClusterIP from the host from t = 0 ("Prio up (ClusterIP)",
   * through kube-proxy; default false). Only where a kube-proxy serves the host and the failed node's
   * pods stop answering at t = 0 (a frozen node): any answer then comes from the replacement.
   */
  serviceProbe?: boolean;
  /**
   * Namespaces whose pods are not part of the initial state (compared before every repetition with
   * the baseline): e.g. ulysses-system on a kubeadm cluster, whose controller manager pods are
   * replaced whenever the run switches between upstream and Ulysses.
   */
  baselineIgnoresNamespaces?: string[];
  /** Pods outside those namespaces that are not part of it either: those carrying all these labels (e.g. the kcm handback's static pods, gone in upstream). */
  baselineIgnoresPods?: Record<string, string>;
  /** failover (default) or 5g: eUPF with the user plane's stand-ins, and a multi-service low-priority app (one Service per Deployment) */
  scenario?: ScenarioName;
  /** scenario 5g: where the user plane's stand-ins write their logs, one directory per repetition (default /tmp/u5g-user-plane) */
  userPlaneDir?: string;
  /**
   * Whether the controllers are idle (nothing queued or running, no client-side limiter debt); the
   * setup waits for it before t=0 as well as for the Deployments' status (in-process controller manager).
   */
  quiescent?: () => boolean | Promise<boolean>;
  /**
   * t = 0 no earlier than this long after the critical pod was created (default: as soon as the
   * setup has settled). A failure in steady state strikes a critical pod created long before; right
   * after the setup the apiserver still holds state of its creation: LimitRanger's live lookup of a
   * namespace without LimitRanges is cached for 30 s, so a replacement created within 30 s of the
   * first pod skips the LIST that every later one pays (the load cells' longer setup expires that
   * cache, the idle cells' does not). 35000 puts every cell past it.
   */
  minCriticalAgeMs?: number;
  /**
   * After the repetition's configuration is switched on (beforeFailure), this long with no request of
   * the harness before t = 0 (its watches stay open): the first failover after a quiet spell, when
   * connections a component does not use are closed (issue 40). Default none.
   */
  quietBeforeFailureMs?: number;
}

/**
 * Extra effects of a node failure. On a one-machine testbed a "failed" node that keeps running
 * tears its 20-60 pods down on the same CPUs the destination nodes need, which a real failed
 * machine would not do: `freeze` stops its kubelet right before the taint, `thaw` resumes it for
 * the cleanup (it then kills the evicted pods).
 */
export interface NodeFailure {
  description: string;
  freeze(nodes: string[]): Promise<void>;
  thaw(nodes: string[]): Promise<void>;
}

export interface RepOptions extends ScenarioOptions {
  topology: Topology;
  podsPerNode: number;
  /**
   * Position of the critical Deployment among the load Deployments in creation order (0: first).
   * Creation order is the order of the pods in the informers, hence in FIFO queues: a critical pod
   * always created first would be served first by vanilla controllers by luck. See criticalPosition.
   */
  criticalPosition?: number;
  /** how long to wait for every event after t = 0 */
  timeoutMs?: number;
  setupTimeoutMs?: number;
  /**
   * Called once the workload is Ready on the sources and the destinations are free, right before
   * t=0 (the harness' watches already run; the experiment switches to the repetition's configuration here, see
   * ExperimentOptions.neutralSetup).
   */
  beforeFailure?: () => Promise<void>;
  /** Called right before the first taint patch, after the failure's freeze (frozen-node: right after t = 0; e.g. CpuWindowProbe.arm). */
  atFailure?: () => void;
  /** Called once, when every event of the critical pod (and, frozen-node, the detection) is in: the end of the critical path. */
  atCriticalPath?: () => void;
}

/**
 * Settled: every experiment Deployment's status reports all its replicas updated, ready and
 * available for its current generation, i.e. the controllers' status-update tail of the setup is
 * written. (Pods Ready on the sources is not enough: with the 20 qps client limiter the vanilla
 * controller manager is then still seconds behind on ReplicaSet/Deployment status updates and
 * Events, a backlog the failover would queue behind.)
 */
export function deploymentSettled(d: V1Deployment): boolean {
  const want = d.spec?.replicas ?? 1;
  const st = d.status ?? {};
  return (st.observedGeneration ?? 0) >= (d.metadata?.generation ?? 1) && st.replicas === want && st.updatedReplicas === want && st.readyReplicas === want && st.availableReplicas === want;
}

export interface RepOutcome {
  events: FailoverEvents;
  /** seconds after t = 0 at which each moved pod became Ready, sorted */
  podReady: number[];
  /** t = 0 (the first taint patch sent; frozen-node: every source process stopped), epoch ms: to line the events up with component logs */
  taintAtMs: number;
  /** ms after t = 0 when the PATCH tainting the critical pod's source node returned (the taint stored) */
  criticalTaintWrittenMs?: number;
  /** the critical pod's NoExecute tolerations of kcm's failure taints as admitted (failureTolerationSeconds) */
  criticalTolerationSeconds?: Record<string, number | null>;
  /** CPU per process group over the quiet spell before t = 0 (quietBeforeFailureMs) */
  quietCpu?: CpuWindow;
  error?: string;
}

const LABELS = { [EXPERIMENT_LABEL]: 'failover' };
const SELECTOR = `${EXPERIMENT_LABEL}=failover`;

async function setUnschedulable(core: CoreV1Api, nodes: string[], value: boolean): Promise<void> {
  for (const name of nodes) await core.patchNode({ name, body: [{ op: 'add', path: '/spec/unschedulable', value }] }, undefined);
}

/** Namespaces and the critical Service (kept across repetitions: part of the initial state). */
export async function prepareScenario(kc: KubeConfig, o: ScenarioOptions): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  // the critical pod's namespace grants criticality high (manifests/base/admission; an admin's
  // label, which the harness, as admin, sets); the low-priority load claims nothing
  await ensureNamespace(core, o.criticalNamespace, grantLabels(['criticality']));
  await ensureNamespace(core, o.loadNamespace);
  const name = criticalName(o.scenario);
  try {
    await core.createNamespacedService({
      namespace: o.criticalNamespace,
      body:
        o.scenario === '5g'
          ? eupfService({ namespace: o.criticalNamespace, name, labels: LABELS })
          : {
              metadata: { name, namespace: o.criticalNamespace, labels: LABELS },
              spec: { selector: { app: name }, ports: [{ name: 'echo', protocol: 'UDP', port: ECHO_PORT, targetPort: ECHO_PORT }] },
            },
    });
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
  }
}

/**
 * Deterministic pseudo-random position in 0..deployments for a repetition (Knuth's multiplicative
 * hash of the seed), the same for every configuration of that repetition (paired comparison).
 */
export function criticalPosition(seed: number, deployments: number): number {
  return (Math.imul(seed + 1, 2654435761) >>> 0) % (deployments + 1);
}

/** Low-priority Deployments of 2 pods (the last one of 1 if the total is odd). */
export function loadDeployments(total: number): number[] {
  const sizes: number[] = [];
  for (let left = total; left > 0; left -= 2) sizes.push(Math.min(2, left));
  return sizes;
}

/**
 * The events a repetition waits for: all of them, but Prio up only when the UDP client probes, and
 * the cluster's own detection (detected, taint) only with failure frozen-node.
 */
export function awaitedEvents(udpProbe: boolean, serviceProbe = false, failureMode: FailureMode = 'taint', userPlane = false): EventName[] {
  return [...(failureMode === 'frozen-node' ? DETECTION_EVENTS : []), ...EVENTS.filter((e) => udpProbe || e !== 'prioUp'), ...(serviceProbe ? [SERVICE_EVENT] : []), ...(userPlane ? USER_PLANE_EVENTS : [])];
}

const onNode = (p: V1Pod, nodes: string[]) => nodes.includes(p.spec?.nodeName ?? '') && !p.metadata?.deletionTimestamp;

/** Runs one repetition; the caller restores the initial state afterwards (restoreInitialState). */
export async function runRep(kc: KubeConfig, o: RepOptions): Promise<RepOutcome> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const { sources, destinations } = o.topology;
  const lowTotal = o.podsPerNode * destinations.length;
  const total = 1 + lowTotal;

  // --- setup: everything on the source node(s)
  await setUnschedulable(core, destinations, true);
  const load = loadDeployments(lowTotal);
  const names = loadNames(load.length, o.scenario);
  const prioName = criticalName(o.scenario);
  const position = Math.min(o.criticalPosition ?? 0, load.length);
  const both = [...(o.tolerations ?? []), ...(o.criticalTolerations ?? [])];
  const criticalTolerations = both.length ? both : undefined;
  const fiveG = o.scenario === '5g';
  const criticalNodes = [...sources, destinations[0]!];
  const critical = () =>
    applyDeployment(
      apps,
      fiveG
        ? eupfDeployment({ namespace: o.criticalNamespace, name: prioName, nodes: criticalNodes, labels: LABELS, tolerations: criticalTolerations })
        : deployment({ namespace: o.criticalNamespace, name: prioName, replicas: 1, criticality: 'high', image: 'udp-echo', nodes: criticalNodes, labels: LABELS, tolerations: criticalTolerations }),
    );
  for (const [i, replicas] of load.entries()) {
    if (i === position) await critical();
    await applyDeployment(apps, deployment({ namespace: o.loadNamespace, name: names[i]!, replicas, criticality: 'low', image: 'http-server', nodes: [...sources, ...destinations], labels: LABELS, tolerations: o.tolerations }));
    // 5g: each microservice has its Service, so its pods' moves are EndpointSlice work too
    if (o.scenario === '5g')
      await core.createNamespacedService({
        namespace: o.loadNamespace,
        body: {
          metadata: { name: names[i]!, namespace: o.loadNamespace, labels: LABELS },
          spec: { selector: { app: names[i]! }, ports: [{ name: 'http', protocol: 'TCP', port: HTTP_PORT, targetPort: HTTP_PORT }] },
        },
      });
  }
  if (position >= load.length) await critical();
  const setupTimeoutMs = o.setupTimeoutMs ?? 180_000;
  const podStart = new PodStartWatch(core, [o.criticalNamespace, o.loadNamespace]);
  await pollUntil(
    `${total} experiment pods Ready on ${sources.join(',')}`,
    async () => {
      const pods = (await core.listPodForAllNamespaces({ labelSelector: SELECTOR })).items;
      await podStart.check(pods);
      // 5g: a UPF that exits at start (XDP attach, bpffs mount) ends the run with eUPF's reason
      const upfProblem = fiveG ? pods.filter((p) => p.metadata?.namespace === o.criticalNamespace).map(eupfStartProblem).find(Boolean) : undefined;
      if (upfProblem) throw new FatalError(upfProblem);
      return pods.filter((p) => isPodReady(p) && onNode(p, sources)).length === total;
    },
    { timeoutMs: setupTimeoutMs, intervalMs: 250 },
  );
  // --- watches, started before the settle phase: their first LIST (every experiment pod) and its
  // garbage are then long gone at t=0, as no observer lists the cluster at a real failure's instant
  // (started right before the taint, the LIST of 631 KWOK pods loaded the apiserver and this process,
  // which hosts the controller manager, during the critical path); events before t=0 are ignored
  const frozenNode = o.failureMode === 'frozen-node';
  if (frozenNode && !o.failure) throw new Error('failure frozen-node needs a NodeFailure that stops the source nodes');
  const events = emptyEvents();
  let userPlane: UserPlane | undefined;
  if (frozenNode) Object.assign(events, { detected: null, taint: null });
  // 5g: the UPF answers GTP-U, not the UDP echo probes; its "up" is the user plane's connection restored
  const udpProbe = (o.udpProbe ?? true) && !fiveG;
  const serviceProbe = !!o.serviceProbe && !fiveG;
  if (serviceProbe) events.prioUpService = null;
  if (fiveG) for (const e of USER_PLANE_EVENTS) events[e] = null;
  const awaited = awaitedEvents(udpProbe, serviceProbe, o.failureMode, fiveG);
  const criticalPath = awaited.filter((e) => e !== 'lastScheduled' && e !== 'lastReady');
  let criticalPathDone = false;
  const scheduled = new Map<string, number>();
  const ready = new Map<string, number>();
  const endpointReady = new Map<string, number>(); // pod uid -> first time ready in a slice
  let prioUid: string | undefined;
  let t0 = 0;
  let probe: Promise<number> | undefined;
  let probeError: string | undefined;
  const timeoutMs = o.timeoutMs ?? 180_000;
  const onPod = (p: V1Pod) => {
    if (!t0 || !onNode(p, destinations)) return;
    const uid = p.metadata!.uid!;
    const now = Date.now();
    if (!scheduled.has(uid)) scheduled.set(uid, now);
    if (isPodReady(p) && !ready.has(uid)) ready.set(uid, now);
    if (p.metadata?.namespace === o.criticalNamespace) {
      prioUid ??= uid;
      if (p.status?.podIP && !probe && udpProbe) {
        probe = udpFirstAnswer(p.status.podIP, ECHO_PORT, { intervalMs: 50, timeoutMs });
        probe.then(
          (t) => (events.prioUp = (t - t0) / 1000),
          (err: Error) => (probeError = err.message),
        );
      }
    }
  };
  const onSlice = (s: V1EndpointSlice) => {
    if (!t0) return;
    const now = Date.now();
    for (const ep of s.endpoints ?? []) {
      const uid = ep.targetRef?.uid;
      if (uid && ep.conditions?.ready && !endpointReady.has(uid)) endpointReady.set(uid, now);
    }
  };
  const pods = new ResilientInformer<V1Pod>(kc, { path: '/api/v1/pods', labelSelector: SELECTOR });
  // the critical pod's events also from a watch of its namespace of its own: in the watch of every
  // experiment pod its binding queues behind the low pods' events (the apiserver serializing them to
  // this watcher, this process parsing them), a delay of the observer that grows with the load
  const prioPods = new ResilientInformer<V1Pod>(kc, { path: `/api/v1/namespaces/${o.criticalNamespace}/pods`, labelSelector: SELECTOR });
  const slices = new ResilientInformer<V1EndpointSlice>(kc, {
    path: `/apis/discovery.k8s.io/v1/namespaces/${o.criticalNamespace}/endpointslices`,
    labelSelector: `kubernetes.io/service-name=${prioName}`,
  });
  for (const informer of [pods, prioPods]) {
    informer.on('add', onPod);
    informer.on('update', onPod);
  }
  slices.on('add', onSlice);
  slices.on('update', onSlice);
  // frozen-node: how the cluster finds the failure (the sources' Node objects, NodeFailureDetected Events)
  const detection: DetectionObservation[] = [];
  const sourceNodes = frozenNode
    ? new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', ...(sources.length === 1 ? { fieldSelector: `metadata.name=${sources[0]}` } : {}) })
    : undefined;
  const failureReports = frozenNode ? new ResilientInformer<CoreV1Event>(kc, { path: '/api/v1/events', fieldSelector: `involvedObject.kind=Node,reason=${NODE_FAILURE_DETECTED_REASON}` }) : undefined;
  const onSourceNode = (node: V1Node) => {
    if (t0 && sources.includes(node.metadata?.name ?? '')) detection.push({ atMs: Date.now(), node });
  };
  const onFailureReport = (event: CoreV1Event) => {
    if (t0) detection.push({ atMs: Date.now(), event });
  };
  sourceNodes?.on('add', onSourceNode).on('update', onSourceNode);
  failureReports?.on('add', onFailureReport).on('update', onFailureReport);
  await Promise.all([pods.start(), prioPods.start(), slices.start(), sourceNodes?.start(), failureReports?.start()]);
  try {
    let unsettled: string[] = [];
    await pollUntil(
      'experiment Deployments settled (status up to date) and the controllers idle',
      async () => {
        const ds = [...(await apps.listNamespacedDeployment({ namespace: o.criticalNamespace })).items, ...(await apps.listNamespacedDeployment({ namespace: o.loadNamespace })).items];
        unsettled = ds.filter((d) => !deploymentSettled(d)).map((d) => `${d.metadata?.namespace}/${d.metadata?.name}`);
        if (!unsettled.length && o.quiescent && !(await o.quiescent())) unsettled = ['controller manager busy (queued or running syncs, or client limiter in debt)'];
        return unsettled.length === 0;
      },
      { timeoutMs: setupTimeoutMs, intervalMs: 100, explain: () => `not settled: ${unsettled.slice(0, 5).join(', ')}${unsettled.length > 5 ? ', ...' : ''}` },
    );
    await setUnschedulable(core, destinations, false);
    // the node lifecycle controller removes the unschedulable taint shortly after: the destinations
    // must really be free before t=0
    await pollUntil(
      `destinations ${destinations.join(',')} schedulable`,
      async () => {
        const nodes = await Promise.all(destinations.map((name) => core.readNode({ name })));
        return nodes.every((n) => !n.spec?.unschedulable && !(n.spec?.taints ?? []).some((t) => t.key === 'node.kubernetes.io/unschedulable'));
      },
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    // the critical pod before the failure, on its source node
    const prio = prioPods.list().find((p) => onNode(p, sources));
    if (o.minCriticalAgeMs) {
      const created = prio?.metadata?.creationTimestamp ? new Date(prio.metadata.creationTimestamp as unknown as string).getTime() : Date.now();
      // creationTimestamp has whole seconds: up to 1 s more
      const waitMs = created + 1000 + o.minCriticalAgeMs - Date.now();
      if (waitMs > 0) await new Promise((r) => setTimeout(r, waitMs));
    }
    // 5g: the user plane's stand-ins on the host, a session through the UPF on its source node and
    // GTP-U replies through it before t = 0
    let upfBefore: string | undefined;
    if (fiveG) {
      userPlane = await UserPlane.start({ kc, namespace: o.criticalNamespace, service: prioName, endpointSlices: slices, dir: join(o.userPlaneDir ?? '/tmp/u5g-user-plane', `rep-${Date.now()}`) });
      const reply = await userPlane.waitFor((e) => e.src === 'gnb' && e.event === 'first-reply', 'a GTP-U reply through the UPF before the failure', setupTimeoutMs);
      upfBefore = reply.via as string;
    }
    await o.beforeFailure?.();
    // the quiet spell is the condition under study, not a synchronisation; what the idle cluster's
    // processes cost over it is read from /proc
    const quiet = o.quietBeforeFailureMs;
    const quietCpu = quiet ? await cpuDuring(() => new Promise((r) => setTimeout(r, quiet))) : undefined;

    // --- t = 0
    let error: string | undefined;
    const prioSource = prio?.spec?.nodeName;
    const readClusterIP = async () => {
      const ip = serviceProbe ? (await core.readNamespacedService({ name: prioName, namespace: o.criticalNamespace })).spec?.clusterIP : undefined;
      if (serviceProbe && !ip) throw new Error(`Service ${o.criticalNamespace}/${prioName} has no ClusterIP`);
      return ip;
    };
    let clusterIP: string | undefined;
    let taint: Awaited<ReturnType<typeof taintNoExecuteTimed>> | undefined;
    if (frozenNode) {
      clusterIP = await readClusterIP();
      await o.failure!.freeze(sources);
      // t = 0: every process of the sources is stopped; nothing is written, the cluster finds out itself
      t0 = Date.now();
      o.atFailure?.();
    } else {
      await o.failure?.freeze(sources);
      o.atFailure?.();
      // all sources fail at once: t=0 is the first taint patch sent (recording is on from here, so
      // nothing the taints cause is missed; with many sources a sequential loop would let a pod
      // evicted from the first one be rescheduled "before" the last taint)
      clusterIP = await readClusterIP();
      t0 = Date.now();
      taint = await taintNoExecuteTimed(kc, sources, FAILURE_TAINT);
      t0 = taint.sentAtMs;
    }
    if (clusterIP)
      udpFirstAnswer(clusterIP, ECHO_PORT, { intervalMs: 50, timeoutMs, freshSourcePort: true }).then(
        (t) => (events.prioUpService = (t - t0) / 1000),
        (err: Error) => (probeError = err.message),
      );
    const written = prioSource ? taint?.writtenAtMs[prioSource] : undefined;
    const criticalTaintWrittenMs = written === undefined ? undefined : written - t0;
    for (const p of pods.list()) onPod(p);
    const rel = (t: number | undefined) => (t === undefined ? null : (t - t0) / 1000);
    // the failure of the critical pod's source node (all sources when it is not known)
    const detectionNodes = prioSource ? [prioSource] : sources;
    const collect = () => {
      if (frozenNode) Object.assign(events, detectionEvents(detection, detectionNodes, t0));
      if (userPlane && upfBefore) Object.assign(events, userPlaneTimes(userPlane.events, upfBefore, t0));
      if (prioUid) {
        events.prioScheduled = rel(scheduled.get(prioUid));
        events.prioReady = rel(ready.get(prioUid));
        events.prioEndpointReady = rel(endpointReady.get(prioUid));
      }
      if (scheduled.size >= total) events.lastScheduled = rel(Math.max(...scheduled.values()));
      if (ready.size >= total) events.lastReady = rel(Math.max(...ready.values()));
      if (!criticalPathDone && criticalPath.every((e) => events[e] !== null && events[e] !== undefined)) {
        criticalPathDone = true;
        o.atCriticalPath?.();
      }
      return awaited.every((e) => events[e] !== null && events[e] !== undefined);
    };
    try {
      await pollUntil('every failover event', () => {
        if (probeError) throw new Error(probeError);
        if (userPlane?.problem) throw new Error(userPlane.problem);
        return collect();
      }, { timeoutMs, intervalMs: 50 });
    } catch (err) {
      const upProblem = userPlane?.problem;
      if (!(err instanceof TimeoutError) && !probeError && !upProblem) throw err;
      collect();
      const missing = awaited.filter((e) => events[e] === null || events[e] === undefined);
      error = `${missing.join(', ')} not seen ${upProblem ? '' : `within ${timeoutMs / 1000} s `}(${ready.size}/${total} pods Ready on the destinations${probeError ? `; ${probeError}` : ''}${upProblem ? `; ${upProblem}` : ''})`;
    }
    const podReady = [...ready.values()].map((t) => Math.max(0, Math.round(t - t0) / 1000)).sort((a, b) => a - b);
    return {
      events,
      podReady,
      taintAtMs: t0,
      ...(criticalTaintWrittenMs === undefined ? {} : { criticalTaintWrittenMs }),
      ...(prio ? { criticalTolerationSeconds: failureTolerationSeconds(prio.spec?.tolerations) } : {}),
      ...(quietCpu ? { quietCpu } : {}),
      error,
    };
  } finally {
    await userPlane?.stop();
    pods.stop();
    prioPods.stop();
    slices.stop();
    sourceNodes?.stop();
    failureReports?.stop();
  }
}

/** What must be identical before every repetition. */
export interface ClusterBaseline {
  nodes: Array<{ name: string; taints: string[] }>;
  /** pods outside the experiment namespaces */
  otherPods: string[];
}

const taintKeys = (n: V1Node) => (n.spec?.taints ?? []).map((t) => `${t.key}:${t.effect}`).sort();
const nodeSchedulable = (n: V1Node) =>
  isNodeReady(n) && !n.spec?.unschedulable;

/** Differences between the cluster now and its initial state (empty: back to the initial state). */
export async function initialStateDiff(kc: KubeConfig, o: ScenarioOptions & { topology: Topology }, baseline?: ClusterBaseline): Promise<string[]> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const diff: string[] = [];
  const allPods = (await core.listPodForAllNamespaces()).items;
  for (const p of allPods) if (p.metadata?.deletionTimestamp) diff.push(`pod ${p.metadata.namespace}/${p.metadata.name} terminating`);
  for (const ns of [o.criticalNamespace, o.loadNamespace]) {
    const n = allPods.filter((p) => p.metadata?.namespace === ns).length;
    if (n) diff.push(`${n} pod(s) left in namespace ${ns}`);
    const d = (await apps.listNamespacedDeployment({ namespace: ns })).items.length;
    if (d) diff.push(`${d} Deployment(s) left in namespace ${ns}`);
    const r = (await apps.listNamespacedReplicaSet({ namespace: ns })).items.length;
    if (r) diff.push(`${r} ReplicaSet(s) left in namespace ${ns}`);
  }
  const svc = (await core.listNamespacedService({ namespace: o.loadNamespace, labelSelector: SELECTOR })).items.length;
  if (svc) diff.push(`${svc} Service(s) left in namespace ${o.loadNamespace}`);
  const nodes = (await core.listNode()).items;
  for (const name of [...o.topology.sources, ...o.topology.destinations]) {
    const n = nodes.find((x) => x.metadata?.name === name);
    if (!n) diff.push(`node ${name} missing`);
    else {
      if (!nodeSchedulable(n)) diff.push(`node ${name} not Ready and schedulable`);
      if (taintKeys(n).some((t) => t.startsWith(`${FAILURE_TAINT}:`) || t.startsWith('node.kubernetes.io/unschedulable:')) || detectionTaintsOf(n).length) diff.push(`node ${name} still tainted (${taintKeys(n).join(', ')})`);
    }
  }
  if (baseline) {
    for (const b of baseline.nodes) {
      const n = nodes.find((x) => x.metadata?.name === b.name);
      if (n && taintKeys(n).join(',') !== b.taints.join(',')) diff.push(`node ${b.name} taints ${taintKeys(n).join(', ') || 'none'} (initially ${b.taints.join(', ') || 'none'})`);
    }
    const others = otherPods(allPods, o);
    const added = without(others, baseline.otherPods);
    const gone = without(baseline.otherPods, others);
    if (added.length || gone.length) diff.push(`pods outside the experiment changed (+${added.join(',')} -${gone.join(',')})`);
  }
  return diff;
}

/**
 * The pods outside the experiment, as the initial state knows them: by name; with failure
 * frozen-node a ReplicaSet's pod as `<namespace>/<replicaset>-*`, since the failed node's other
 * Deployment pods (e.g. CoreDNS) are evicted and replaced under new names, as on a real failure.
 */
export function otherPods(pods: V1Pod[], o: Pick<ScenarioOptions, 'criticalNamespace' | 'loadNamespace' | 'baselineIgnoresNamespaces' | 'baselineIgnoresPods' | 'failureMode'>): string[] {
  const byOwner = o.failureMode === 'frozen-node';
  const ignored = Object.entries(o.baselineIgnoresPods ?? {});
  return pods
    .filter((p) => ![o.criticalNamespace, o.loadNamespace, ...(o.baselineIgnoresNamespaces ?? [])].includes(p.metadata?.namespace ?? ''))
    .filter((p) => !(ignored.length > 0 && ignored.every(([k, v]) => p.metadata?.labels?.[k] === v)))
    .map((p) => {
      const rs = byOwner ? p.metadata?.ownerReferences?.find((r) => r.kind === 'ReplicaSet') : undefined;
      return `${p.metadata?.namespace}/${rs ? `${rs.name}-*` : p.metadata?.name}`;
    })
    .sort();
}

/** The items of `a` not matched one for one in `b` (a multiset difference). */
function without(a: readonly string[], b: readonly string[]): string[] {
  const left = [...b];
  return a.filter((x) => {
    const i = left.indexOf(x);
    if (i < 0) return true;
    left.splice(i, 1);
    return false;
  });
}

export async function captureBaseline(kc: KubeConfig, o: ScenarioOptions & { topology: Topology }): Promise<ClusterBaseline> {
  const core = kc.makeApiClient(CoreV1Api);
  const nodes = (await core.listNode()).items;
  const names = [...o.topology.sources, ...o.topology.destinations];
  return {
    nodes: nodes.filter((n) => names.includes(n.metadata!.name!)).map((n) => ({ name: n.metadata!.name!, taints: taintKeys(n) })),
    otherPods: otherPods((await core.listPodForAllNamespaces()).items, o),
  };
}

/**
 * Resumes the failed nodes, deletes the experiment's workload, removes the failure taint and
 * cordons, waits until the failure-detection taints are gone from the sources
 * (waitDetectionTaintsGone), then (with a deadline) until initialStateDiff is empty: no experiment
 * object left, no pod terminating anywhere, every node of the topology Ready, schedulable and with
 * its initial taints.
 */
export async function restoreInitialState(kc: KubeConfig, o: ScenarioOptions & { topology: Topology }, baseline?: ClusterBaseline, timeoutMs = 180_000): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  await o.failure?.thaw(o.topology.sources);
  for (const n of o.topology.sources) await untaint(kc, n, FAILURE_TAINT);
  await setUnschedulable(core, [...o.topology.sources, ...o.topology.destinations], false);
  for (const namespace of [o.criticalNamespace, o.loadNamespace]) {
    await apps.deleteCollectionNamespacedDeployment({ namespace, propagationPolicy: 'Background' });
    await apps.deleteCollectionNamespacedReplicaSet({ namespace, propagationPolicy: 'Background' });
  }
  // the 5g scenario's microservice Services (the critical Service stays: part of the initial state)
  for (const svc of (await core.listNamespacedService({ namespace: o.loadNamespace, labelSelector: SELECTOR })).items) {
    try {
      await core.deleteNamespacedService({ name: svc.metadata!.name!, namespace: o.loadNamespace });
    } catch (err) {
      if ((err as { code?: number }).code !== 404) throw err;
    }
  }
  await waitDetectionTaintsGone(kc, o.topology.sources, timeoutMs, o.log);
  let last: string[] = [];
  await pollUntil(
    'the cluster back in its initial state',
    async () => {
      last = await initialStateDiff(kc, o, baseline);
      if (last.some((d) => d.includes('pod(s) left'))) {
        // owners are gone: delete what the garbage collector has not (gracefully, like an eviction)
        for (const namespace of [o.criticalNamespace, o.loadNamespace]) {
          const rs = (await apps.listNamespacedReplicaSet({ namespace })).items.length;
          if (!rs) await core.deleteCollectionNamespacedPod({ namespace });
        }
      }
      return last.length === 0;
    },
    { timeoutMs, intervalMs: 500, explain: () => `still different: ${last.join('; ')}` },
  );
}

/** A leftover ulysses.io/unreachable is removed by the harness after this long (its owner, a stopped controller manager, may never do it). */
export const LEFTOVER_ULYSSES_TAINT_MS = 60_000;

/**
 * Waits until no node of `nodes` carries a failure-detection taint (DETECTION_TAINTS). Their owners
 * remove them once a resumed node reports again: kcm's node lifecycle controller its
 * node.kubernetes.io/unreachable and not-ready once the kubelet posts Ready, the Ulysses controller
 * manager its ulysses.io/unreachable once the node agent answers. kcm's are never touched here; a
 * ulysses.io/unreachable still there after LEFTOVER_ULYSSES_TAINT_MS (e.g. the controller manager that
 * wrote it was stopped by a switch to upstream) is removed, once per node, and logged.
 */
export async function waitDetectionTaintsGone(kc: KubeConfig, nodes: readonly string[], timeoutMs: number, log: (line: string) => void = () => undefined): Promise<void> {
  const core = kc.makeApiClient(CoreV1Api);
  const started = Date.now();
  const removed = new Set<string>();
  let left: string[] = [];
  await pollUntil(
    `the failure-detection taints (${DETECTION_TAINTS.join(', ')}) gone from ${nodes.join(', ')}`,
    async () => {
      left = [];
      for (const name of nodes) {
        const n = await core.readNode({ name });
        const keys = detectionTaintsOf(n);
        if (!keys.length) continue;
        const ready = n.status?.conditions?.find((c) => c.type === 'Ready')?.status ?? 'unknown';
        left.push(`${name}: ${keys.join(', ')} (Ready ${ready})`);
        if (!removed.has(name) && Date.now() - started >= LEFTOVER_ULYSSES_TAINT_MS && keys.some((k) => k.startsWith(`${ULYSSES_UNREACHABLE_TAINT}:`))) {
          removed.add(name);
          log(`node ${name}: ${ULYSSES_UNREACHABLE_TAINT} still there ${LEFTOVER_ULYSSES_TAINT_MS / 1000} s into the cleanup (its controller manager did not remove it): removed by the harness`);
          await untaint(kc, name, ULYSSES_UNREACHABLE_TAINT);
        }
      }
      return left.length === 0;
    },
    {
      timeoutMs,
      intervalMs: 500,
      explain: () =>
        `their owners remove them once the resumed node reports again (kube-controller-manager's node lifecycle controller once its kubelet posts Ready, the Ulysses controller manager once its node agent answers); still there: ${left.join('; ')}`,
    },
  );
}
