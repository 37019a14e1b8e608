/**
 * The SLO-aware controller manager (thesis §5.3.1): shared informers and one criticality index for
 * all controllers, one WorkerPool per controller (vanilla / multi-priority-async /
 * multi-priority-periodic, switchable at runtime), and kube-controller-manager's client-side rate
 * limiter (20 qps / burst 30, one per controller, as kube-controller-manager gives each controller
 * a client of its own) applied per API request in the modes that keep it. In the periodic mode the
 * periodic workers pace the work instead of the limiter.
 */
import type { V1Deployment, V1EndpointSlice, V1Endpoints, V1Node, V1Pod, V1ReplicaSet, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CONTROLLERS, EVENT_SOURCE_NAMES, type ControllerName } from '../core/controllers.ts';
import { CriticalityIndex } from '../core/criticality.ts';
import { ResilientInformer, stripManagedFields } from '../core/informer.ts';
import { KubeClient, type KubeAccess } from '../core/kube.ts';
import { componentLogger } from '../core/logging.ts';
import { Gauge } from 'prom-client';
import { EventRecorder } from '../core/events.ts';
import { readRuntimeConfig } from '../core/runtime-config.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import { objectKey } from '../core/objects.ts';
import type { Priority } from '../core/priority.ts';
import { AutoModeSwitch } from './auto-mode.ts';
import { CriticalPathHold } from './critical-path-hold.ts';
import { RECOVERY_EVENT_SOURCE, RecoveryTracker, recoveryStatusPublisher } from './recovery-slo.ts';
import { projectNode, projectPod } from './cache-projection.ts';
import { ReplicaSetController } from './controllers/replicaset.ts';
import { DeploymentController } from './controllers/deployment.ts';
import { EndpointsController } from './controllers/endpoints.ts';
import { TaintEvictionController } from './controllers/taint-eviction.ts';
import { EndpointSliceController } from './controllers/endpointslice.ts';
import { NodeFailureConfigSchema, NodeFailureController, type NodeFailureConfigInput } from './node-failure.ts';
import { DUPLICATE_EVENT_SOURCE, DuplicateControllersDetector } from './duplicate-controllers.ts';
import { validateConfig } from '../core/config.ts';
import type { ControllerDeps, Enqueue, SharedInformers } from './controllers/deps.ts';
import { KCM_API_BURST, KCM_API_QPS, realClock, THESIS_PERIODS_MS, TokenBucket, WorkerPool, type Reconciler, type WorkerMode, type WorkerPoolConfigInput } from './queue/index.ts';

export { CONTROLLERS, type ControllerName } from '../core/controllers.ts';

export interface ControllerManagerOptions {
  kubeconfig: KubeAccess;
  controllers?: ControllerName[];
  /** per-controller worker pool settings (mode, workers, periodMs, ...) */
  pools?: Partial<Record<ControllerName, WorkerPoolConfigInput>>;
  /** kube-controller-manager --kube-api-qps / --kube-api-burst */
  apiQps?: number;
  apiBurst?: number;
  /** criticality fallback: pods with spec.priority >= this are high */
  priorityClassThreshold?: number;
  /**
   * Controllers in `auto` mode: vanilla while no high-criticality pod exists, periodic from the first
   * one on, vanilla again `autoHoldMs` (default 30 s) after the last one is gone (auto-mode.ts).
   */
  auto?: ControllerName[];
  autoHoldMs?: number;
  /**
   * CriticalPathHold (critical-path-hold.ts): while a high-criticality pod is on its way to Ready the
   * periodic workers serve high-priority keys only, for at most this long per critical pod (ms).
   * Default 0 (off, the thesis' behaviour); UlyssesConfig spec.controllerManager.criticalPathHoldMs.
   */
  criticalPathHoldMs?: number;
  /** drop metadata.managedFields from cached objects (default true: saves memory, nothing reads them) */
  stripManagedFields?: boolean;
  /**
   * cache pods and nodes with only the fields the controllers read (cache-projection.ts; default
   * true). Implies stripManagedFields for them.
   */
  cacheProjection?: boolean;
  /**
   * report the last critical recoveries (recovery-slo.ts) in UlyssesConfig/default
   * status.components.controller-manager.recoveries (default true; nothing is written while the
   * object does not exist)
   */
  recoveryStatus?: boolean;
  /**
   * Fast node-failure detection (node-failure.ts): off when absent. Needs the taint-eviction
   * controller (it evicts under the node-failure taint); without it the detection stays off.
   */
  nodeFailure?: NodeFailureConfigInput;
  /** Report kube-controller-manager pods that run a controller this process replaces (duplicate-controllers.ts; default on). */
  detectDuplicateControllers?: boolean;
  /** called after every sync (benchmarks, experiments): controller, key, priority, mode, start, duration */
  observeSync?: (e: SyncObservation) => void;
  /** reportingInstance of Events and holder identity of leader election (default: hostname_pid) */
  identity?: string;
  log?: Logger;
}

/**
 * Vanilla taint eviction as kube-controller-manager runs it: every due pod's eviction in a goroutine
 * of its own (TimedWorkerQueue), so evictions overlap as far as the controller's client limiter lets
 * them, whatever the API latency — not 5 at a time like a --concurrent-*-syncs controller. A bound
 * of 256 concurrent evictions stands in for "one each".
 */
export const TAINT_EVICTION_VANILLA_WORKERS = 256;

/**
 * Pool defaults per controller (ControllerManagerOptions.pools overrides them): thesis §6.1.1
 * periods, 100 ms ReplicaSet/Deployment and 50 ms node-related and endpoints; the vanilla taint
 * eviction's concurrency.
 */
const DEFAULT_POOLS: Record<ControllerName, WorkerPoolConfigInput & { periodMs: number }> = {
  replicaset: { periodMs: THESIS_PERIODS_MS.replicaset },
  deployment: { periodMs: THESIS_PERIODS_MS.deployment },
  'taint-eviction': { periodMs: THESIS_PERIODS_MS.node, vanillaWorkers: TAINT_EVICTION_VANILLA_WORKERS },
  endpointslice: { periodMs: THESIS_PERIODS_MS.endpointslice },
  endpoints: { periodMs: THESIS_PERIODS_MS.endpoints },
};

/** The periodic workers' default period of a controller (thesis §6.1.1). */
export function defaultPeriodMs(controller: ControllerName): number {
  return DEFAULT_POOLS[controller].periodMs;
}

/** source.component of the node failure detector's Events on Nodes */
export const NODE_FAILURE_EVENT_SOURCE = 'ulysses-node-failure';

/** Events' reportingComponent */
export const REPORTING_CONTROLLER = 'ulysses-controller-manager';

/** What every controller offers the manager: its reconcile, its informer wiring, an optional initial pass. */
interface Controller {
  reconcile: Reconciler<string>;
  register(): void;
  afterSync?(): void;
}

export interface SyncObservation {
  controller: ControllerName;
  key: string;
  priority: Priority;
  mode: WorkerMode;
  /** performance.now() when the reconcile started */
  startedAt: number;
  durationMs: number;
  error?: boolean;
}

/** A controller's serving mode as the manager sees it: a WorkerPool mode, or `auto`. */
export type ControllerMode = WorkerMode | 'auto';

function autoGauge(): Gauge<'controller'> {
  const name = 'ulysses_controller_auto';
  return registeredMetric(name, () =>
    new Gauge({ name, help: 'Whether a controller is in auto mode (its current WorkerPool mode is in ulysses_controller_mode).', labelNames: ['controller'], registers: [metricsRegistry()] }),
  );
}

interface Running {
  pool: WorkerPool<string>;
  client: KubeClient;
  afterSync?: () => void;
}

export class ControllerManager {
  readonly log: Logger;
  readonly criticality: CriticalityIndex;
  /** the shared informers, one per resource, as every controller gets them (ControllerDeps.informers) */
  readonly informers: SharedInformers;
  /**
   * kube-controller-manager's client-side limiters, one per controller: each controller gets a
   * clientset of its own (ControllerClientBuilder.ClientOrDie(name)), and client-go's NewForConfig
   * gives every clientset its own token bucket of --kube-api-qps / --kube-api-burst when the config
   * has no RateLimiter. So the taint-eviction controller's deletes do not wait behind the
   * ReplicaSet controller's creates.
   */
  readonly apiLimiters = new Map<ControllerName, TokenBucket>();
  private apiRateSetting: { qps: number; burst: number };
  readonly events: EventRecorder;
  private readonly running = new Map<ControllerName, Running>();
  private readonly rateLimitedModes = new Map<ControllerName, WorkerMode[]>();
  /** controllers in auto mode, with the settings to apply (e.g. periodMs) */
  private readonly autoControllers = new Map<ControllerName, Partial<WorkerPoolConfigInput>>();
  readonly autoSwitch: AutoModeSwitch;
  readonly criticalPathHold: CriticalPathHold;
  /** the critical-recovery SLO measurement (recovery-slo.ts) */
  readonly recoveries: RecoveryTracker;
  private readonly recoveryPublisher: ReturnType<typeof recoveryStatusPublisher> | undefined;
  /** the node failure detector (node-failure.ts), when configured and taint eviction runs here */
  readonly nodeFailure: NodeFailureController | undefined;
  /** kube-controller-manager pods running a replaced controller too (duplicate-controllers.ts) */
  readonly duplicates: DuplicateControllersDetector | undefined;

  constructor(private readonly o: ControllerManagerOptions) {
    this.log = o.log ?? componentLogger('controller-manager');
    this.criticality = new CriticalityIndex({
      priorityClassThreshold: o.priorityClassThreshold,
      onError: (e) => this.log.warn({ key: `${e.namespace}/${e.name}`, field: e.field, value: e.value }, e.message),
    });
    this.apiRateSetting = { qps: o.apiQps ?? KCM_API_QPS, burst: o.apiBurst ?? KCM_API_BURST };
    const kc = o.kubeconfig;
    const transform = o.stripManagedFields === false ? undefined : stripManagedFields;
    const project = o.cacheProjection !== false;
    const inf = (this.informers = {
      pods: new ResilientInformer<V1Pod>(kc, { path: '/api/v1/pods', log: this.log, transform: project ? projectPod : transform }),
      nodes: new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', log: this.log, transform: project ? projectNode : transform }),
      replicaSets: new ResilientInformer<V1ReplicaSet>(kc, { path: '/apis/apps/v1/replicasets', log: this.log, transform }),
      deployments: new ResilientInformer<V1Deployment>(kc, { path: '/apis/apps/v1/deployments', log: this.log, transform }),
      services: new ResilientInformer<V1Service>(kc, { path: '/api/v1/services', log: this.log, transform }),
      endpointSlices: new ResilientInformer<V1EndpointSlice>(kc, { path: '/apis/discovery.k8s.io/v1/endpointslices', log: this.log, transform }),
      endpoints: new ResilientInformer<V1Endpoints>(kc, { path: '/api/v1/endpoints', log: this.log, transform }),
    });
    this.events = new EventRecorder({ client: new KubeClient(kc), reportingController: REPORTING_CONTROLLER, reportingInstance: o.identity, log: this.log });
    this.autoSwitch = new AutoModeSwitch({ holdMs: o.autoHoldMs, clock: realClock, onChange: (critical) => this.applyAuto(critical) });
    this.criticalPathHold = new CriticalPathHold({ maxHoldMs: o.criticalPathHoldMs, clock: realClock });
    this.recoveryPublisher = o.recoveryStatus === false ? undefined : recoveryStatusPublisher(new KubeClient(kc), this.log);
    const podsOf = (entries: Array<{ key: string }>) => entries.map((e) => inf.pods.get(e.key)).filter((p): p is V1Pod => p !== undefined);
    this.recoveries = new RecoveryTracker({
      getPod: (key) => inf.pods.get(key),
      getReplicaSet: (key) => inf.replicaSets.get(key),
      getDeployment: (key) => inf.deployments.get(key),
      podsOnNode: (node) => podsOf(this.criticality.podsOnNode(node)),
      podsInNamespace: (ns) => podsOf(this.criticality.podsInNamespace(ns)),
      servicesInNamespace: (ns) => inf.services.list().filter((s) => (s.metadata?.namespace ?? 'default') === ns),
      priorityClassThreshold: o.priorityClassThreshold,
      events: this.events.forComponent(RECOVERY_EVENT_SOURCE),
      publish: this.recoveryPublisher?.publish,
      log: this.log,
    });
    // the index first, so every controller's handler sees the pod's current level
    const indexPod = (p: V1Pod) => {
      const { after } = this.criticality.upsertPod(p);
      const key = objectKey(p);
      this.autoSwitch.podChanged(key, after.level === 'high' && !after.terminal);
      this.criticalPathHold.podChanged(key, p, after.level === 'high');
      this.recoveries.podChanged(p);
    };
    inf.pods.on('add', indexPod);
    inf.pods.on('update', indexPod);
    inf.pods.on('delete', (p) => {
      this.criticality.deletePod(p);
      const key = objectKey(p);
      this.autoSwitch.podDeleted(key);
      this.criticalPathHold.podDeleted(key);
      this.recoveries.podDeleted(p);
    });
    inf.nodes.on('add', (n) => this.recoveries.nodeChanged(n));
    inf.nodes.on('update', (n) => this.recoveries.nodeChanged(n));
    inf.nodes.on('delete', (n) => this.recoveries.nodeDeleted(n));
    inf.endpointSlices.on('add', (s) => this.recoveries.sliceChanged(s));
    inf.endpointSlices.on('update', (s) => this.recoveries.sliceChanged(s));
    inf.replicaSets.on('delete', (rs) => this.recoveries.ownerDeleted(rs));
    inf.deployments.on('delete', (d) => this.recoveries.ownerDeleted(d));

    const controllers = o.controllers ?? CONTROLLERS;
    if (o.nodeFailure !== undefined) {
      const config = validateConfig(NodeFailureConfigSchema, o.nodeFailure, 'controller manager option nodeFailure');
      if (controllers.includes('taint-eviction')) {
        this.nodeFailure = new NodeFailureController({ client: new KubeClient(kc), nodes: inf.nodes, config, log: this.log, events: this.events.forComponent(NODE_FAILURE_EVENT_SOURCE) });
      } else if (config.enabled) {
        this.log.warn('node failure detection off: it needs the taint-eviction controller, which is not enabled here');
      }
    }
    if (o.detectDuplicateControllers !== false) this.duplicates = new DuplicateControllersDetector({ kubeconfig: kc, log: this.log, events: this.events.forComponent(DUPLICATE_EVENT_SOURCE) });
    for (const name of controllers) this.build(name);
    for (const name of o.auto ?? []) if (this.running.has(name)) this.setMode(name, 'auto', this.o.pools?.[name]);
  }

  private build(name: ControllerName): void {
    const cfg: WorkerPoolConfigInput = { ...DEFAULT_POOLS[name], ...this.o.pools?.[name] };
    this.rateLimitedModes.set(name, cfg.rateLimitedModes ?? ['vanilla', 'multi-priority-async']);
    this.apiLimiters.set(name, new TokenBucket(this.apiRateSetting));
    const client = new KubeClient(this.o.kubeconfig);
    const log = this.log.child({ controller: name });
    // the queue is created with the pool below; controllers only enqueue after register()
    const enqueue: Enqueue = (key, priority, afterMs) => (afterMs ? pool.queue.addAfter(key, afterMs, priority) : pool.queue.add(key, priority));
    // Events through the controller's client, so they share its limiter as in kcm
    const events = this.events.forComponent(EVENT_SOURCE_NAMES[name], client);
    const deps: ControllerDeps = { client, informers: this.informers, criticality: this.criticality, enqueue, log, events };
    const controller: Controller = (() => {
      switch (name) {
        case 'replicaset':
          return new ReplicaSetController(deps);
        case 'deployment':
          return new DeploymentController(deps);
        case 'endpointslice':
          return new EndpointSliceController(deps);
        case 'endpoints':
          return new EndpointsController(deps);
        case 'taint-eviction':
          return new TaintEvictionController(deps, {
            onCriticalEviction: (p) => this.criticalPathHold.podEvicting(objectKey(p), p),
            onNoExecuteTaint: () => this.criticalPathHold.nodeTainted(),
            nodeFailureScope: () => this.nodeFailure?.current.scope ?? 'critical',
          });
      }
    })();
    // the client-side limiter is applied per request (applyLimiter); the pool itself never gates syncs
    const observe = this.o.observeSync;
    const reconcile: Reconciler<string> = observe
      ? async (key, ctx) => {
          const startedAt = performance.now();
          let error = false;
          try {
            return await controller.reconcile(key, ctx);
          } catch (err) {
            error = true;
            throw err;
          } finally {
            observe({ controller: name, key, priority: ctx.priority, mode: ctx.mode, startedAt, durationMs: performance.now() - startedAt, error });
          }
        }
      : controller.reconcile;
    const lowHold = () => this.criticalPathHold.active();
    const pool: WorkerPool<string> = new WorkerPool<string>({ ...cfg, rateLimitedModes: [], name, reconcile, logger: log, lowHold });
    controller.register();
    const afterSync = controller.afterSync?.bind(controller);
    this.running.set(name, { pool, client, afterSync });
    this.applyLimiter(name);
  }

  private applyLimiter(name: ControllerName): void {
    const r = this.running.get(name)!;
    r.client.limiter = this.rateLimitedModes.get(name)!.includes(r.pool.mode) ? this.apiLimiters.get(name) : undefined;
  }

  /** The client-side limit of every controller (an infinite qps: off). */
  get apiRate(): { qps: number; burst: number } {
    return { ...this.apiRateSetting };
  }

  setApiRate(qps: number, burst: number): void {
    this.apiRateSetting = { qps, burst };
    for (const l of this.apiLimiters.values()) l.setRate(qps, burst);
  }

  pool(name: ControllerName): WorkerPool<string> {
    const r = this.running.get(name);
    if (!r) throw new Error(`controller ${name} is not enabled`);
    return r.pool;
  }

  /**
   * Switches a controller's serving mode at runtime; queued keys are kept. `auto` follows the
   * cluster's criticality (AutoModeSwitch); `overrides` (e.g. { periodMs }) apply to the pool.
   */
  setMode(name: ControllerName, mode: ControllerMode, overrides: Partial<WorkerPoolConfigInput> = {}): void {
    const pool = this.pool(name);
    const { mode: _ignored, ...settings } = overrides;
    if (mode === 'auto') {
      this.autoControllers.set(name, settings);
      autoGauge().set({ controller: name }, 1);
      pool.setMode(this.autoSwitch.active ? 'multi-priority-periodic' : 'vanilla', settings);
    } else {
      this.autoControllers.delete(name);
      autoGauge().set({ controller: name }, 0);
      pool.setMode(mode, settings);
    }
    this.applyLimiter(name);
    this.log.info({ controller: name, mode, poolMode: pool.mode }, 'mode changed');
  }

  /** The mode set for a controller (`auto` or the pool's mode). */
  modeOf(name: ControllerName): ControllerMode {
    return this.autoControllers.has(name) ? 'auto' : this.pool(name).mode;
  }

  private applyAuto(critical: boolean): void {
    const mode: WorkerMode = critical ? 'multi-priority-periodic' : 'vanilla';
    for (const [name, settings] of this.autoControllers) {
      this.pool(name).setMode(mode, settings);
      this.applyLimiter(name);
    }
    if (this.autoControllers.size) {
      this.log.info({ controllers: [...this.autoControllers.keys()], mode, highPods: this.autoSwitch.highPods }, critical ? 'auto: a high-criticality pod exists, periodic serving' : 'auto: no high-criticality pod, vanilla serving');
    }
  }

  private allInformers() {
    return Object.values(this.informers);
  }

  async start(): Promise<void> {
    if (this.recoveryPublisher) {
      // the last recoveries reported by a previous process (restart, another leader) stay listed
      const prev = await readRuntimeConfig(new KubeClient(this.o.kubeconfig)).catch(() => undefined);
      this.recoveries.seedRecent(prev?.status?.components?.['controller-manager']?.recoveries);
    }
    await Promise.all(this.allInformers().map((i) => i.start()));
    for (const r of this.running.values()) {
      r.afterSync?.();
      r.pool.start();
    }
    await this.nodeFailure?.start();
    // a failed list is retried by the informer; the controllers do not wait for it
    this.duplicates?.start().catch((err: Error) => this.log.warn({ err: err.message }, 'duplicate controller detection could not list kube-controller-manager pods'));
    this.log.info({ controllers: [...this.running.keys()], nodeFailure: this.nodeFailure?.running ?? false }, 'controller manager started');
  }

  async stop(): Promise<void> {
    this.duplicates?.stop();
    await this.nodeFailure?.stop();
    this.autoSwitch.stop();
    for (const i of this.allInformers()) i.stop();
    await Promise.all([...this.running.values()].map((r) => r.pool.stop()));
    this.log.info('worker pools stopped; flushing events');
    await this.events.flush();
    await this.recoveryPublisher?.flush();
  }
}
