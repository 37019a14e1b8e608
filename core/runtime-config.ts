/**
 * Runtime toggling (thesis §5.3.5: every modification can be switched on and off at runtime, per
 * component): one declarative source of truth, the cluster-scoped custom resource
 * `UlyssesConfig/default` (ulysses.io/v1alpha1), watched live by every component.
 *
 * Why a CRD and not a ConfigMap: a CR has `metadata.generation` (bumped on spec changes only), so a
 * component can report `observedGeneration` like a Deployment does; a status subresource that the
 * components write without touching spec; an OpenAPI schema the apiserver enforces (a bad mode enum
 * never reaches a component); and `kubectl get ulyssesconfig` columns.
 *
 * Each component:
 *  - picks its section of the spec and validates it with its own zod schema;
 *  - applies a valid section (the component's own `apply`), keeps the last good one when a new one
 *    is invalid or fails to apply;
 *  - reports what it applied in `status.components["<component>[/<instance>]"]` (observedGeneration,
 *    the mode it actually runs, an `Applied` condition) with a JSON merge patch on the status
 *    subresource (so many writers, e.g. one kubelet-shim per node, never conflict);
 *  - records an Event on the UlyssesConfig on every change applied or rejected.
 */
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { KubeAccess } from './kube.ts';
import type { z } from 'zod';
import { ConfigError, validateConfig } from './config.ts';
import type { RecoveryRecord } from './slo.ts';
import { ResilientInformer } from './informer.ts';
import { KubeClient, isNotFound, isNotServed } from './kube.ts';
import { componentLogger, type Logger } from './logging.ts';
import { Gauge } from 'prom-client';
import { metricsRegistry, registeredMetric } from './metrics.ts';

export const RUNTIME_CONFIG_GROUP = 'ulysses.io';
export const RUNTIME_CONFIG_VERSION = 'v1alpha1';
export const RUNTIME_CONFIG_KIND = 'UlyssesConfig';
export const RUNTIME_CONFIG_PLURAL = 'ulyssesconfigs';
export const RUNTIME_CONFIG_NAME = 'default';
export const RUNTIME_CONFIG_API_VERSION = `${RUNTIME_CONFIG_GROUP}/${RUNTIME_CONFIG_VERSION}`;
export const runtimeConfigCollectionPath = `/apis/${RUNTIME_CONFIG_GROUP}/${RUNTIME_CONFIG_VERSION}/${RUNTIME_CONFIG_PLURAL}`;
export const runtimeConfigPath = (name = RUNTIME_CONFIG_NAME) => `${runtimeConfigCollectionPath}/${name}`;

/** The sections of `spec`, one per component (their contents are validated by each component). */
export interface UlyssesConfigSpec {
  controllerManager?: unknown;
  kubeletShim?: unknown;
  schedulerExtender?: unknown;
  apf?: unknown;
  /** the critical-recovery SLO (core/slo.ts), measured by the controller manager */
  slo?: unknown;
  /** fast node-failure detection, by the controller manager's leader */
  nodeFailure?: unknown;
}

export interface ComponentCondition {
  type: 'Applied';
  status: 'True' | 'False';
  reason: string;
  message: string;
  lastTransitionTime: string;
}

export interface ComponentStatus {
  observedGeneration: number;
  /** What the component actually runs, in a short human-readable form (e.g. "replicaset=multi-priority-periodic"). */
  mode: string;
  conditions: ComponentCondition[];
  updateTime: string;
  /** controller-manager only: the last critical-pod recoveries, newest first (core/slo.ts) */
  recoveries?: RecoveryRecord[];
}

export interface UlyssesConfig {
  apiVersion: string;
  kind: string;
  metadata: { name: string; uid?: string; generation?: number; resourceVersion?: string };
  spec?: UlyssesConfigSpec;
  status?: { components?: Record<string, ComponentStatus | null> };
}

export interface RuntimeConfigOptions<S extends z.ZodType> {
  kc: KubeAccess;
  /** Status key: the component, plus "/<instance>" for per-node components ("kubelet-shim/real-0"). */
  statusKey: string;
  /** This component's section of the spec (absent: the schema's defaults apply). */
  field: keyof UlyssesConfigSpec;
  /** Narrows the section to this instance (e.g. the kubelet-shim entry matching this node). */
  select?: (section: unknown) => unknown;
  schema: S;
  /** Applies a validated section; returns the mode now in effect (reported in status). */
  apply: (cfg: z.output<S>) => string | Promise<string>;
  name?: string;
  log?: Logger;
}

function generationGauge() {
  return registeredMetric(
    'ulysses_runtime_config_observed_generation',
    () =>
      new Gauge({
        name: 'ulysses_runtime_config_observed_generation',
        help: 'metadata.generation of the UlyssesConfig last applied by this component.',
        labelNames: ['component'],
        registers: [metricsRegistry()],
      }),
  );
}

/** Backoff of a failed apply's retries (RuntimeConfigWatcher.retryApply). */
export const APPLY_RETRY_MIN_MS = 1000;
export const APPLY_RETRY_MAX_MS = 30_000;

/**
 * Watches UlyssesConfig/<name> and applies this component's section. Emits 'applied' (cfg, mode)
 * and 'rejected' (error) after the status is reported, so tests and callers can wait on them.
 */
export class RuntimeConfigWatcher<S extends z.ZodType> extends EventEmitter {
  private readonly informer: ResilientInformer<UlyssesConfig>;
  private readonly client: KubeClient;
  private readonly log: Logger;
  private readonly name: string;
  private lastGood: z.output<S> | undefined;
  private lastGoodJson: string | undefined;
  private lastMode = '';
  private lastGeneration = -1;
  private chain: Promise<void> = Promise.resolve();
  /** a failed apply of the current generation is tried again after this long (doubling, bounded) */
  private retryDelayMs = APPLY_RETRY_MIN_MS;
  private retryTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly o: RuntimeConfigOptions<S>) {
    super();
    this.name = o.name ?? RUNTIME_CONFIG_NAME;
    this.client = new KubeClient(o.kc);
    this.log = (o.log ?? componentLogger('runtime-config')).child({ object: `${RUNTIME_CONFIG_KIND}/${this.name}`, statusKey: o.statusKey });
    this.informer = new ResilientInformer<UlyssesConfig>(o.kc, {
      path: runtimeConfigCollectionPath,
      fieldSelector: `metadata.name=${this.name}`,
      log: this.log,
    });
    const onObject = (obj: UlyssesConfig) => {
      this.chain = this.chain.then(() => this.reconcile(obj)).catch((err) => this.log.error({ err }, 'runtime config reconcile failed'));
    };
    this.informer.on('add', onObject);
    this.informer.on('update', onObject);
    this.informer.on('delete', () => this.log.warn('UlyssesConfig deleted: keeping the last applied configuration'));
  }

  /** The last valid configuration applied (undefined before the first). */
  get current(): z.output<S> | undefined {
    return this.lastGood;
  }

  get mode(): string {
    return this.lastMode;
  }

  /** Starts watching; resolves once the first list is in (and its object, if any, reconciled). */
  async start(): Promise<void> {
    await this.informer.start();
    await this.chain;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.informer.stop();
    await this.chain;
  }

  /**
   * After a failed apply (a slow apiserver, a component busy restarting), the same generation is
   * applied again with backoff until it succeeds or a newer one arrives: a transient failure must not
   * leave the component on the old configuration until someone edits the object again.
   */
  private retryApply(generation: number): void {
    clearTimeout(this.retryTimer);
    const delay = this.retryDelayMs;
    this.retryDelayMs = Math.min(this.retryDelayMs * 2, APPLY_RETRY_MAX_MS);
    this.retryTimer = setTimeout(() => {
      const obj = this.informer.get(this.name);
      if (this.stopped || !obj || (obj.metadata.generation ?? 0) !== generation) return;
      this.chain = this.chain
        .then(() => {
          if (this.lastGeneration !== generation) return; // a newer generation was reconciled meanwhile
          this.lastGeneration = -1;
          return this.reconcile(obj);
        })
        .catch((err) => this.log.error({ err }, 'runtime config reconcile failed'));
    }, delay);
    this.retryTimer.unref();
  }

  /**
   * Re-evaluates and re-applies the current object even if its generation did not move (the node's
   * labels changed, or a file reload overwrote what the runtime config had set).
   */
  resync(): Promise<void> {
    const obj = this.informer.get(this.name);
    if (obj) {
      this.chain = this.chain
        .then(() => {
          this.lastGeneration = -1;
          this.lastGoodJson = undefined;
          return this.reconcile(obj);
        })
        .catch((err) => this.log.error({ err }, 'runtime config reconcile failed'));
    }
    return this.chain;
  }

  private async reconcile(obj: UlyssesConfig): Promise<void> {
    const generation = obj.metadata.generation ?? 0;
    if (generation === this.lastGeneration) return; // status-only update (ours or another component's)
    this.lastGeneration = generation;
    const section = obj.spec?.[this.o.field];
    const raw = (this.o.select ? this.o.select(section) : section) ?? {};
    let cfg: z.output<S>;
    try {
      cfg = validateConfig(this.o.schema, raw, `${RUNTIME_CONFIG_KIND}/${this.name} ${this.o.statusKey}`);
    } catch (err) {
      const message = err instanceof ConfigError ? err.issues.map((i) => `${i.field}: ${i.message}`).join('; ') : String(err);
      this.log.warn({ generation, problems: message }, 'rejected invalid runtime config: keeping the last good one');
      await this.report(obj, { status: 'False', reason: 'InvalidConfig', message: `spec.${this.o.field}: ${message}` }, 'Warning');
      this.emit('rejected', err);
      return;
    }
    const json = JSON.stringify(cfg);
    let mode = this.lastMode;
    if (json !== this.lastGoodJson) {
      try {
        mode = await this.o.apply(cfg);
      } catch (err) {
        this.log.error({ err, generation, retryInMs: this.retryDelayMs }, 'applying runtime config failed: keeping the last good one, trying again');
        await this.report(obj, { status: 'False', reason: 'ApplyFailed', message: (err as Error).message }, 'Warning');
        this.retryApply(generation);
        this.emit('rejected', err);
        return;
      }
      clearTimeout(this.retryTimer);
      this.retryDelayMs = APPLY_RETRY_MIN_MS;
      this.lastGood = cfg;
      this.lastGoodJson = json;
      this.lastMode = mode;
      this.log.info({ generation, mode }, 'runtime config applied');
    }
    generationGauge().set({ component: this.o.statusKey }, generation);
    await this.report(obj, { status: 'True', reason: 'Applied', message: `applied generation ${generation}` }, 'Normal');
    this.emit('applied', cfg, mode);
  }

  private async report(
    obj: UlyssesConfig,
    cond: { status: 'True' | 'False'; reason: string; message: string },
    eventType: 'Normal' | 'Warning',
  ): Promise<void> {
    const now = new Date().toISOString();
    const previous = obj.status?.components?.[this.o.statusKey]?.conditions?.[0];
    const changed = !previous || previous.status !== cond.status || previous.reason !== cond.reason || previous.message !== cond.message;
    const status: ComponentStatus = {
      observedGeneration: obj.metadata.generation ?? 0,
      mode: this.lastMode,
      conditions: [{ type: 'Applied', ...cond, lastTransitionTime: changed || !previous ? now : previous.lastTransitionTime }],
      updateTime: now,
    };
    try {
      await this.client.mergePatch(`${runtimeConfigPath(this.name)}/status`, { status: { components: { [this.o.statusKey]: status } } });
    } catch (err) {
      if (!isNotFound(err)) this.log.warn({ err }, 'could not report runtime config status');
    }
    if (changed || cond.reason === 'Applied') {
      const reason = cond.reason === 'Applied' ? 'ConfigApplied' : cond.reason;
      const note = cond.reason === 'Applied' ? `${this.o.statusKey} applied generation ${status.observedGeneration}: ${this.lastMode}` : `${this.o.statusKey}: ${cond.message}`;
      await recordEvent(this.client, obj, { type: eventType, reason, note, component: this.o.statusKey.split('/')[0]!, log: this.log });
    }
  }
}

/** A core/v1 Event about a UlyssesConfig (cluster-scoped objects' events live in "default"). */
async function recordEvent(
  client: KubeClient,
  obj: UlyssesConfig,
  e: { type: 'Normal' | 'Warning'; reason: string; note: string; component: string; log: Logger },
): Promise<void> {
  const now = new Date().toISOString();
  try {
    await client.post('/api/v1/namespaces/default/events', {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { generateName: `${obj.metadata.name}.`, namespace: 'default' },
      involvedObject: { apiVersion: obj.apiVersion, kind: obj.kind, name: obj.metadata.name, uid: obj.metadata.uid, resourceVersion: obj.metadata.resourceVersion },
      type: e.type,
      reason: e.reason,
      message: e.note.slice(0, 1024),
      source: { component: `ulysses-${e.component}`, host: hostname() },
      reportingComponent: `ulysses.io/${e.component}`,
      reportingInstance: hostname(),
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    });
  } catch (err) {
    e.log.warn({ err }, 'could not record event');
  }
}

/** Reads UlyssesConfig/<name> (undefined if absent). */
export async function readRuntimeConfig(client: KubeClient, name = RUNTIME_CONFIG_NAME): Promise<UlyssesConfig | undefined> {
  try {
    return await client.get<UlyssesConfig>(runtimeConfigPath(name));
  } catch (err) {
    if (isNotServed(err)) throw new Error(`this cluster does not serve ${RUNTIME_CONFIG_PLURAL}.${RUNTIME_CONFIG_GROUP} (UlyssesConfig): Ulysses is not installed (ulysses install, manifests/README.md)`);
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/**
 * Merges `patch` into the spec (JSON merge patch: null deletes a key), creating UlyssesConfig/<name>
 * if it does not exist. Returns the new object (its generation is what components must observe).
 */
export async function patchRuntimeConfig(client: KubeClient, patch: UlyssesConfigSpec, name = RUNTIME_CONFIG_NAME): Promise<UlyssesConfig> {
  const existing = await readRuntimeConfig(client, name);
  if (!existing) {
    return client.post<UlyssesConfig>(runtimeConfigCollectionPath, {
      apiVersion: RUNTIME_CONFIG_API_VERSION,
      kind: RUNTIME_CONFIG_KIND,
      metadata: { name },
      spec: stripNulls(patch),
    });
  }
  return client.mergePatch<UlyssesConfig>(runtimeConfigPath(name), { spec: patch });
}

function stripNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stripNulls);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== null).map(([k, x]) => [k, stripNulls(x)]));
  return v;
}

/** hostname() of this process, or the node name given by the Downward API (NODE_NAME). */
export function instanceName(): string {
  return process.env.NODE_NAME ?? process.env.POD_NAME ?? hostname();
}

/** The CRD manifest shipped in manifests/base (the single definition of the schema). */
export const RUNTIME_CONFIG_CRD_FILE = new URL('../manifests/base/crd-ulyssesconfig.yaml', import.meta.url);

/** Installs or updates the UlyssesConfig CRD and waits until the apiserver serves it (Established). */
export async function ensureRuntimeConfigCrd(client: KubeClient, timeoutMs = 30_000): Promise<void> {
  const { readFile } = await import('node:fs/promises');
  const { parse } = await import('yaml');
  const crd = parse(await readFile(RUNTIME_CONFIG_CRD_FILE, 'utf8')) as { metadata: { name: string } };
  const path = `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`;
  await client.request('PATCH', path, { query: { fieldManager: 'ulysses', force: true }, body: crd, contentType: 'application/apply-patch+yaml' });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const cur = await client.get<{ status?: { conditions?: Array<{ type: string; status: string }> } }>(path);
    if (cur.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) break;
    if (Date.now() > deadline) throw new Error(`CRD ${crd.metadata.name} not Established within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
  // Established can precede the discovery/handler being ready for a moment: wait for a list to work.
  for (;;) {
    try {
      await client.get(runtimeConfigCollectionPath);
      return;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
