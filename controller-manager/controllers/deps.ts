/**
 * What the controller manager gives each of its controllers (thesis §5.3.1: shared informers and one
 * criticality index for all controllers, one priority work queue per controller). The five
 * controllers take this one interface; what only one of them needs (the taint-eviction
 * controller's CriticalPathHold signals, the EndpointSlice controller's slice size) is a second,
 * optional constructor argument of that controller.
 *
 * The path from criticality to queue priority, typed end to end: the CriticalityIndex gives a
 * key's `Criticality`, `criticalityRank` (core/criticality.ts) turns it into a `Priority`
 * (core/priority.ts), and `enqueue` hands that `Priority` to the controller's queue.
 */
import type { V1Deployment, V1EndpointSlice, V1Endpoints, V1Node, V1Pod, V1ReplicaSet, V1Service } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { CriticalityIndex } from '../../core/criticality.ts';
import type { ComponentEventRecorder } from '../../core/events.ts';
import type { ResilientInformer } from '../../core/informer.ts';
import type { KubeClient } from '../../core/kube.ts';
import type { Priority } from '../../core/priority.ts';

/** The manager's informers, one watch per resource type, shared by every controller (each reads the ones it needs). */
export interface SharedInformers {
  readonly pods: ResilientInformer<V1Pod>;
  readonly nodes: ResilientInformer<V1Node>;
  readonly replicaSets: ResilientInformer<V1ReplicaSet>;
  readonly deployments: ResilientInformer<V1Deployment>;
  readonly services: ResilientInformer<V1Service>;
  readonly endpointSlices: ResilientInformer<V1EndpointSlice>;
  readonly endpoints: ResilientInformer<V1Endpoints>;
}

/** Puts a key on the controller's priority work queue: now, or after `afterMs` (a duplicate keeps the higher priority). */
export type Enqueue = (key: string, priority: Priority, afterMs?: number) => void;

export interface ControllerDeps {
  /** The controller's own API client (its own client-side limiter, as kube-controller-manager gives each controller a clientset). */
  readonly client: KubeClient;
  readonly informers: SharedInformers;
  /** Aggregated criticality of pods, ReplicaSets, Deployments, Services and nodes (core/criticality.ts). */
  readonly criticality: CriticalityIndex;
  readonly enqueue: Enqueue;
  readonly log: Logger;
  /** The upstream controller's Events (e.g. SuccessfulCreate on a ReplicaSet); none when absent. */
  readonly events?: ComponentEventRecorder;
  /** Wall clock in ms (default Date.now): status timestamps, toleration clocks. */
  readonly now?: () => number;
}
