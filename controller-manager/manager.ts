/**
 * The SLO-aware controller manager (thesis §5.3.1): shared informers and one criticality index for
 * all controllers, one WorkerPool per controller (vanilla / multi-priority-async /
 * multi-priority-periodic, switchable at runtime), and kube-controller-manager's client-side rate
 * limiter (20 qps / burst 30, one per process) applied per API request in the modes that keep it.
 * In the periodic mode the periodic workers pace the work instead of the global limiter.
 */
import type { KubeConfig, V1EndpointSlice, V1Node, V1Pod, V1ReplicaSet, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CriticalityIndex } from '../core/criticality.ts';
import { ResilientInformer } from '../core/informer.ts';
import { KubeClient } from '../core/kube.ts';
import { componentLogger } from '../core/logging.ts';
import { ReplicaSetController } from './controllers/replicaset.ts';
import { TaintEvictionController } from './controllers/taint-eviction.ts';
import { EndpointSliceController } from './controllers/endpointslice.ts';
import { KCM_API_BURST, KCM_API_QPS, TokenBucket, WorkerPool, type Reconciler, type WorkerMode, type WorkerPoolConfigInput } from './queue/index.ts';

export const CONTROLLERS = ['replicaset', 'taint-eviction', 'endpointslice'] as const;
export type ControllerName = (typeof CONTROLLERS)[number];

export interface ControllerManagerOptions {
  kubeconfig: KubeConfig;
  controllers?: ControllerName[];
  /** per-controller worker pool settings (mode, workers, periodMs, ...) */
  pools?: Partial<Record<ControllerName, WorkerPoolConfigInput>>;
  /** kube-controller-manager --kube-api-qps / --kube-api-burst */
  apiQps?: number;
  apiBurst?: number;
  /** criticality fallback: pods with spec.priority >= this are high */
  priorityClassThreshold?: number;
  log?: Logger;
}

/** thesis §6.1.1: 100 ms ReplicaSet/Deployment, 50 ms node-related and endpoints */
const DEFAULT_PERIODS: Record<ControllerName, number> = { replicaset: 100, 'taint-eviction': 50, endpointslice: 50 };

/** What every controller offers the manager: its reconcile, its informer wiring, an optional initial pass. */
interface Controller {
  reconcile: Reconciler<string>;
  register(): void;
  afterSync?(): void;
}

interface Running {
  pool: WorkerPool<string>;
  client: KubeClient;
  afterSync?: () => void;
}

export class ControllerManager {
  readonly log: Logger;
  readonly criticality: CriticalityIndex;
  readonly pods: ResilientInformer<V1Pod>;
  readonly replicaSets: ResilientInformer<V1ReplicaSet>;
  readonly nodes: ResilientInformer<V1Node>;
  readonly services: ResilientInformer<V1Service>;
  readonly endpointSlices: ResilientInformer<V1EndpointSlice>;
  /** kube-controller-manager's process-wide client-side limiter */
  readonly apiLimiter: TokenBucket;
  private readonly running = new Map<ControllerName, Running>();
  private readonly rateLimitedModes = new Map<ControllerName, WorkerMode[]>();

  constructor(private readonly o: ControllerManagerOptions) {
    this.log = o.log ?? componentLogger('controller-manager');
    this.criticality = new CriticalityIndex({
      priorityClassThreshold: o.priorityClassThreshold,
      onError: (e) => this.log.warn({ key: `${e.namespace}/${e.name}`, field: e.field, value: e.value }, e.message),
    });
    this.apiLimiter = new TokenBucket({ qps: o.apiQps ?? KCM_API_QPS, burst: o.apiBurst ?? KCM_API_BURST });
    const kc = o.kubeconfig;
    this.pods = new ResilientInformer<V1Pod>(kc, { path: '/api/v1/pods', log: this.log });
    this.replicaSets = new ResilientInformer<V1ReplicaSet>(kc, { path: '/apis/apps/v1/replicasets', log: this.log });
    this.nodes = new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', log: this.log });
    this.services = new ResilientInformer<V1Service>(kc, { path: '/api/v1/services', log: this.log });
    this.endpointSlices = new ResilientInformer<V1EndpointSlice>(kc, { path: '/apis/discovery.k8s.io/v1/endpointslices', log: this.log });
    // the index first, so every controller's handler sees the pod's current level
    this.pods.on('add', (p) => this.criticality.upsertPod(p));
    this.pods.on('update', (p) => this.criticality.upsertPod(p));
    this.pods.on('delete', (p) => this.criticality.deletePod(p));

    for (const name of o.controllers ?? CONTROLLERS) this.build(name);
  }

  private build(name: ControllerName): void {
    const cfg: WorkerPoolConfigInput = { periodMs: DEFAULT_PERIODS[name], ...this.o.pools?.[name] };
    this.rateLimitedModes.set(name, cfg.rateLimitedModes ?? ['vanilla', 'multi-priority-async']);
    const client = new KubeClient(this.o.kubeconfig);
    const log = this.log.child({ controller: name });
    // the queue is created with the pool below; controllers only enqueue after register()
    const enqueue = (key: string, priority: number, afterMs?: number) =>
      afterMs ? pool.queue.addAfter(key, afterMs, priority as 0 | 1 | 2) : pool.queue.add(key, priority as 0 | 1 | 2);
    const common = { client, pods: this.pods, nodes: this.nodes, criticality: this.criticality, enqueue, log };
    const controller: Controller = (() => {
      switch (name) {
        case 'replicaset':
          return new ReplicaSetController({ ...common, replicaSets: this.replicaSets });
        case 'endpointslice':
          return new EndpointSliceController({ ...common, services: this.services, slices: this.endpointSlices });
        case 'taint-eviction':
          return new TaintEvictionController(common);
      }
    })();
    // the client-side limiter is applied per request (applyLimiter); the pool itself never gates syncs
    const pool: WorkerPool<string> = new WorkerPool<string>({ ...cfg, rateLimitedModes: [], name, reconcile: controller.reconcile, logger: log });
    controller.register();
    const afterSync = controller.afterSync?.bind(controller);
    this.running.set(name, { pool, client, afterSync });
    this.applyLimiter(name);
  }

  private applyLimiter(name: ControllerName): void {
    const r = this.running.get(name)!;
    r.client.limiter = this.rateLimitedModes.get(name)!.includes(r.pool.mode) ? this.apiLimiter : undefined;
  }

  pool(name: ControllerName): WorkerPool<string> {
    const r = this.running.get(name);
    if (!r) throw new Error(`controller ${name} is not enabled`);
    return r.pool;
  }

  /** Switches a controller's serving mode at runtime; queued keys are kept. */
  setMode(name: ControllerName, mode: WorkerMode, overrides?: Partial<WorkerPoolConfigInput>): void {
    this.pool(name).setMode(mode, overrides);
    this.applyLimiter(name);
    this.log.info({ controller: name, mode }, 'mode changed');
  }

  private informers() {
    return [this.pods, this.replicaSets, this.nodes, this.services, this.endpointSlices];
  }

  async start(): Promise<void> {
    await Promise.all(this.informers().map((i) => i.start()));
    for (const r of this.running.values()) {
      r.afterSync?.();
      r.pool.start();
    }
    this.log.info({ controllers: [...this.running.keys()] }, 'controller manager started');
  }

  async stop(): Promise<void> {
    for (const i of this.informers()) i.stop();
    await Promise.all([...this.running.values()].map((r) => r.pool.stop()));
  }
}
