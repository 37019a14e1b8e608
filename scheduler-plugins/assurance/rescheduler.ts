/**
 * Assurance rescheduler (thesis §5.3.2 (a): "a controller reschedules pods whose node no longer
 * satisfies them"). OPT-IN (`enabled: false` by default) and rate-limited: every `intervalMs` it
 * finds the bound, running pods whose node's current `ulysses.io/assurance` no longer satisfies their
 * policy (`ulysses.io/assurance-policy`, else the default of their criticality level — the same
 * rule as the extender's filter, `podRequirements`), most critical first, and evicts them through
 * the Eviction API (PodDisruptionBudgets are honoured: a 429 is retried later) at most
 * `evictionsPerMinute` (token bucket, `burst`). By default only pods with a controller owner are
 * evicted (their controller recreates them and the scheduler, with the extender, places them on a
 * node that satisfies them); bare pods are only reported. `dryRun` logs without evicting.
 */
import { z } from 'zod';
import type { KubeConfig, V1Node, V1Pod } from '@kubernetes/client-node';
import { Counter } from 'prom-client';
import { criticalityRank } from '../../core/criticality.ts';
import { ResilientInformer, stripManagedFields } from '../../core/informer.ts';
import { ApiError, KubeClient, isNotFound } from '../../core/kube.ts';
import { componentLogger, objectLogger, type Logger } from '../../core/logging.ts';
import { metricsRegistry, registeredMetric } from '../../core/metrics.ts';
import { objectKey } from '../../core/objects.ts';
import { validateConfig } from '../../core/config.ts';
import { TokenBucket } from '../../core/token-bucket.ts';
import { satisfies } from './assurance.ts';
import { extenderConfig, ReschedulerConfig, tdmaNetworks, type ExtenderConfig, type ExtenderConfigInput } from '../extender/config.ts';

export { ReschedulerConfig };
import { podRequirements } from '../extender/evaluate.ts';
import { nodeInfoOf } from '../extender/state.ts';

export interface Violation {
  readonly pod: V1Pod;
  readonly key: string;
  readonly node: string;
  readonly criticality: 'none' | 'low' | 'high';
  readonly message: string;
}

/**
 * Bound, non-terminal, not-deleting pods whose node does not satisfy their assurance policy, most
 * critical first (ties by key). Pods whose annotations are malformed are skipped (the extender
 * reports those). Pure.
 */
export function assuranceViolations(nodes: readonly V1Node[], pods: readonly V1Pod[], cfg: ExtenderConfig): Violation[] {
  if (!cfg.plugins.assurance) return [];
  const byName = new Map(nodes.map((n) => [n.metadata?.name ?? '', nodeInfoOf(n)]));
  const networks = tdmaNetworks(cfg);
  const out: Violation[] = [];
  for (const pod of pods) {
    const nodeName = pod.spec?.nodeName;
    if (!nodeName || pod.metadata?.deletionTimestamp || pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') continue;
    const info = byName.get(nodeName);
    if (!info || !info.assurance.ok) continue;
    const r = podRequirements(pod, cfg, networks);
    if (!r.ok || !r.req.policy) continue;
    if (satisfies(info.assurance.value, r.req.policy)) continue;
    out.push({
      pod,
      key: objectKey(pod),
      node: nodeName,
      criticality: r.req.criticality,
      message: `node ${nodeName} assurance ${info.assuranceText} no longer satisfies the policy ${r.req.policyText}`,
    });
  }
  return out.sort((a, b) => criticalityRank(b.criticality) - criticalityRank(a.criticality) || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

function evictionCounter() {
  return registeredMetric(
    'ulysses_rescheduler_evictions_total',
    () =>
      new Counter({
        name: 'ulysses_rescheduler_evictions_total',
        help: 'Pods the assurance rescheduler acted on (result: evicted, dry_run, uncontrolled, blocked, rate_limited, error).',
        labelNames: ['result'],
        registers: [metricsRegistry()],
      }),
  );
}

export class AssuranceRescheduler {
  private cfg: ReschedulerConfig;
  private extender: ExtenderConfig;
  private bucket: TokenBucket;
  private readonly client: KubeClient;
  private readonly nodes: ResilientInformer<V1Node>;
  private readonly pods: ResilientInformer<V1Pod>;
  private readonly log: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** pod UID -> last logged message (bare pods are reported once). */
  private readonly reported = new Map<string, string>();

  constructor(kc: KubeConfig, config: z.input<typeof ReschedulerConfig> = {}, extender: ExtenderConfigInput = {}, log?: Logger) {
    this.cfg = validateConfig(ReschedulerConfig, config, 'rescheduler config');
    this.extender = extenderConfig(extender);
    this.bucket = new TokenBucket({ qps: this.cfg.evictionsPerMinute / 60, burst: this.cfg.burst });
    this.client = new KubeClient(kc);
    this.log = log ?? componentLogger('assurance-rescheduler');
    this.nodes = new ResilientInformer<V1Node>(kc, { path: '/api/v1/nodes', transform: stripManagedFields, log: this.log });
    this.pods = new ResilientInformer<V1Pod>(kc, { path: '/api/v1/pods', fieldSelector: 'spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed', transform: stripManagedFields, log: this.log });
  }

  /** Applies a new rescheduler and/or extender config live (e.g. enable it). */
  setConfig(config: z.input<typeof ReschedulerConfig>, extender?: ExtenderConfigInput): void {
    this.cfg = validateConfig(ReschedulerConfig, config, 'rescheduler setConfig');
    if (extender) this.extender = extenderConfig(extender, 'rescheduler setConfig');
    this.bucket.setRate(this.cfg.evictionsPerMinute / 60, this.cfg.burst);
    this.schedule();
  }

  async start(): Promise<void> {
    this.running = true;
    await Promise.all([this.nodes.start(), this.pods.start()]);
    this.schedule();
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.nodes.stop();
    this.pods.stop();
  }

  private schedule(): void {
    clearTimeout(this.timer);
    if (!this.running) return;
    this.timer = setTimeout(() => void this.pass().finally(() => this.schedule()), this.cfg.intervalMs);
  }

  /** One pass: act on the current violations, within the rate limit. Returns what it did. */
  async pass(): Promise<Array<{ key: string; result: string }>> {
    const done: Array<{ key: string; result: string }> = [];
    if (!this.cfg.enabled) return done;
    for (const v of assuranceViolations(this.nodes.list(), this.pods.list(), this.extender)) {
      const log = objectLogger(this.log, 'Pod', v.key);
      const uid = v.pod.metadata?.uid ?? v.key;
      if (this.cfg.onlyControlled && !v.pod.metadata?.ownerReferences?.some((o) => o.controller)) {
        if (this.reported.get(uid) !== v.message) {
          this.reported.set(uid, v.message);
          evictionCounter().inc({ result: 'uncontrolled' });
          log.warn({ node: v.node }, `${v.message}; not evicted: the pod has no controller to recreate it`);
        }
        done.push({ key: v.key, result: 'uncontrolled' });
        continue;
      }
      if (!this.bucket.tryAccept()) {
        evictionCounter().inc({ result: 'rate_limited' });
        done.push({ key: v.key, result: 'rate_limited' });
        break; // the rest waits for the next pass
      }
      if (this.cfg.dryRun) {
        evictionCounter().inc({ result: 'dry_run' });
        log.info({ node: v.node }, `${v.message}; would evict (dry run)`);
        done.push({ key: v.key, result: 'dry_run' });
        continue;
      }
      const ns = v.pod.metadata!.namespace!;
      const name = v.pod.metadata!.name!;
      try {
        await this.client.post(`/api/v1/namespaces/${encodeURIComponent(ns)}/pods/${encodeURIComponent(name)}/eviction`, {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name, namespace: ns },
          deleteOptions: { preconditions: { uid } },
        });
        evictionCounter().inc({ result: 'evicted' });
        log.info({ node: v.node, criticality: v.criticality }, `${v.message}: evicted for rescheduling`);
        done.push({ key: v.key, result: 'evicted' });
      } catch (err) {
        if (isNotFound(err)) continue;
        const blocked = err instanceof ApiError && err.statusCode === 429;
        evictionCounter().inc({ result: blocked ? 'blocked' : 'error' });
        log.warn({ err: (err as Error).message }, blocked ? 'eviction blocked by a PodDisruptionBudget: retried later' : 'eviction failed: retried later');
        done.push({ key: v.key, result: blocked ? 'blocked' : 'error' });
      }
    }
    return done;
  }
}
