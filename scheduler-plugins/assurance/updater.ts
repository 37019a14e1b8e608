/**
 * Node-assurance updater (thesis §3.1.2, §5.3.2 (a): "a daemon updates node assurance"): the
 * assurance a node offers is A = f(hardware score, software score, γ(t)); the operator declares the
 * static part in the node annotation `ulysses.io/base-assurance` (same JSON as `ulysses.io/assurance`)
 * and this controller keeps `ulysses.io/assurance` — what the extender filters on — equal to
 *
 *     A_r(t) = floor(base_r · Π_{rules matching the node now and covering r} γ_rule)
 *
 * Rules match a node condition (`condition` with `status`, default "True") or a taint key (`taint`),
 * and cover the listed `resources` (default: every resource). γ ∈ [0, 1]. A node with
 * `ulysses.io/assurance` but no base is adopted: its current vector becomes its base (written
 * first, so a restart never compounds γ). A malformed base is logged and the node left alone.
 */
import { z } from 'zod';
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import { Counter } from 'prom-client';
import { ResilientInformer, stripManagedFields } from '../../core/informer.ts';
import { KubeClient } from '../../core/kube.ts';
import { componentLogger, objectLogger, type Logger } from '../../core/logging.ts';
import { metricsRegistry, registeredMetric } from '../../core/metrics.ts';
import { validateConfig } from '../../core/config.ts';
import { ASSURANCE_ANNOTATION, parseAssuranceAnnotation, type AssuranceVector } from './assurance.ts';

export const BASE_ASSURANCE_ANNOTATION = 'ulysses.io/base-assurance';

const ruleSchema = z
  .strictObject({
    condition: z.string().min(1).optional(),
    status: z.enum(['True', 'False', 'Unknown']).default('True'),
    taint: z.string().min(1).optional(),
    gamma: z.number().min(0).max(1),
    resources: z.array(z.string().min(1)).min(1).optional(),
  })
  .superRefine((r, ctx) => {
    if ((r.condition === undefined) === (r.taint === undefined)) ctx.addIssue({ code: 'custom', path: ['condition'], message: 'exactly one of condition or taint is required' });
  });

export type GammaRule = z.output<typeof ruleSchema>;

/** Defaults: a not-Ready node offers nothing; pressure halves the assurance of the resource under pressure. */
export const DEFAULT_GAMMA_RULES: z.input<typeof ruleSchema>[] = [
  { condition: 'Ready', status: 'False', gamma: 0 },
  { condition: 'Ready', status: 'Unknown', gamma: 0 },
  { condition: 'MemoryPressure', gamma: 0.5, resources: ['memory'] },
  { condition: 'DiskPressure', gamma: 0.5, resources: ['disk'] },
  { condition: 'PIDPressure', gamma: 0.5, resources: ['cpu'] },
  { condition: 'NetworkUnavailable', gamma: 0, resources: ['network'] },
];

export const AssuranceUpdaterConfig = z.strictObject({
  // prefault: the defaults are parsed too (status defaults to "True")
  rules: z.array(ruleSchema).prefault(DEFAULT_GAMMA_RULES as never),
});
export type AssuranceUpdaterConfig = z.output<typeof AssuranceUpdaterConfig>;

export function assuranceUpdaterConfig(raw: unknown = {}, source = 'assurance updater config'): AssuranceUpdaterConfig {
  return validateConfig(AssuranceUpdaterConfig, raw, source);
}

function ruleMatches(node: V1Node, r: GammaRule): boolean {
  if (r.taint !== undefined) return (node.spec?.taints ?? []).some((t) => t.key === r.taint);
  return (node.status?.conditions ?? []).some((c) => c.type === r.condition && c.status === r.status);
}

function ruleName(r: GammaRule): string {
  return r.taint !== undefined ? `taint ${r.taint}` : `condition ${r.condition}=${r.status}`;
}

/** A(t) from the base vector and the node's current conditions/taints (header). Pure. */
export function effectiveAssurance(base: AssuranceVector, node: V1Node, rules: readonly GammaRule[]): { vector: Record<string, number>; matched: string[] } {
  const matching = rules.filter((r) => ruleMatches(node, r));
  const vector: Record<string, number> = {};
  for (const [resource, level] of Object.entries(base)) {
    let gamma = 1;
    for (const r of matching) if (!r.resources || r.resources.includes(resource)) gamma *= r.gamma;
    vector[resource] = Math.floor(level * gamma + 1e-9);
  }
  return { vector, matched: matching.map(ruleName) };
}

/** Same vectors (order-insensitive)? */
export function sameVector(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): boolean {
  const ka = Object.keys(a);
  return ka.length === Object.keys(b).length && ka.every((k) => Object.hasOwn(b, k) && b[k] === a[k]);
}

/** Canonical JSON of a vector (sorted keys): what the updater writes. */
export function vectorText(v: Readonly<Record<string, number>>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))));
}

function updateCounter() {
  return registeredMetric(
    'ulysses_assurance_updates_total',
    () =>
      new Counter({
        name: 'ulysses_assurance_updates_total',
        help: 'Node assurance annotations written by the updater (result: updated, adopted, error, malformed).',
        labelNames: ['result'],
        registers: [metricsRegistry()],
      }),
  );
}

export class NodeAssuranceUpdater {
  private cfg: AssuranceUpdaterConfig;
  private readonly client: KubeClient;
  private readonly informer: ResilientInformer<V1Node>;
  private readonly log: Logger;
  private readonly inFlight = new Set<string>();
  private readonly again = new Set<string>();

  constructor(kc: KubeConfig, config: z.input<typeof AssuranceUpdaterConfig> = {}, log?: Logger) {
    this.cfg = assuranceUpdaterConfig(config);
    this.client = new KubeClient(kc);
    this.log = log ?? componentLogger('assurance-updater');
    this.informer = new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', transform: stripManagedFields, log: this.log });
    this.informer.on('add', (n) => void this.reconcile(n.metadata!.name!));
    this.informer.on('update', (n) => void this.reconcile(n.metadata!.name!));
  }

  setConfig(config: z.input<typeof AssuranceUpdaterConfig>): void {
    this.cfg = assuranceUpdaterConfig(config, 'setConfig');
    for (const n of this.informer.list()) void this.reconcile(n.metadata!.name!);
  }

  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): void {
    this.informer.stop();
  }

  /** One node: write the effective assurance if it differs (one write in flight per node; changes meanwhile are redone). */
  async reconcile(name: string): Promise<void> {
    if (this.inFlight.has(name)) {
      this.again.add(name);
      return;
    }
    this.inFlight.add(name);
    try {
      do {
        this.again.delete(name);
        const node = this.informer.get(name);
        if (node) await this.sync(node);
      } while (this.again.has(name));
    } finally {
      this.inFlight.delete(name);
    }
  }

  private async sync(node: V1Node): Promise<void> {
    const name = node.metadata!.name!;
    const log = objectLogger(this.log, 'Node', name);
    const ann = node.metadata?.annotations ?? {};
    let baseText = ann[BASE_ASSURANCE_ANNOTATION];
    const path = `/api/v1/nodes/${encodeURIComponent(name)}`;
    try {
      if (baseText === undefined) {
        if (ann[ASSURANCE_ANNOTATION] === undefined) return; // not an assurance-managed node
        const current = parseAssuranceAnnotation(ann[ASSURANCE_ANNOTATION]);
        if (!current.ok) {
          updateCounter().inc({ result: 'malformed' });
          log.warn(`cannot adopt: ${current.error}`);
          return;
        }
        baseText = vectorText(current.value);
        await this.client.mergePatch(path, { metadata: { annotations: { [BASE_ASSURANCE_ANNOTATION]: baseText } } });
        updateCounter().inc({ result: 'adopted' });
        log.info({ base: baseText }, 'adopted the current assurance as base');
      }
      const base = parseAssuranceAnnotation(baseText);
      if (!base.ok) {
        updateCounter().inc({ result: 'malformed' });
        log.warn(base.error.replace(ASSURANCE_ANNOTATION, BASE_ASSURANCE_ANNOTATION));
        return;
      }
      const { vector, matched } = effectiveAssurance(base.value, node, this.cfg.rules);
      const current = ann[ASSURANCE_ANNOTATION] === undefined ? undefined : parseAssuranceAnnotation(ann[ASSURANCE_ANNOTATION]);
      if (current?.ok && sameVector(current.value, vector)) return;
      await this.client.mergePatch(path, { metadata: { annotations: { [ASSURANCE_ANNOTATION]: vectorText(vector) } } });
      updateCounter().inc({ result: 'updated' });
      log.info({ assurance: vector, base: base.value, matched }, 'effective assurance updated');
    } catch (err) {
      updateCounter().inc({ result: 'error' });
      log.warn({ err: (err as Error).message }, 'assurance update failed (retried on the next node event)');
    }
  }
}
