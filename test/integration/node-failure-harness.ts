/**
 * What the node-failure integration tests share: Ulysses' controller manager as leader-elected
 * processes (`npm run start:controller-manager`) with the node-failure detection configured, their
 * metrics, the Lease holder, and progress measured in probes sent (not in time).
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CoordinationV1Api, type KubeConfig, type V1Node } from '@kubernetes/client-node';
import { pollUntil, startProcess, type TrackedProcess } from '../../experiments/testbed/processes.ts';
import { metricSamples } from '../../core/metrics.ts';
import { NODE_UNREACHABLE_TAINT } from '../../controller-manager/node-failure.ts';

/** kube-controller-manager's --controllers without the ones these controller managers run. */
export const KCM_WITHOUT_REPLACED = '*,-replicaset-controller,-deployment-controller,-endpointslice-controller,-taint-eviction-controller';
const REPLACED = ['replicaset', 'deployment', 'endpointslice', 'taint-eviction'] as const;
/** the detection's defaults, written out: the tests count probes in these periods and windows */
export const DETECTION = { periodMs: 100, windowMs: 600, confirmTimeoutMs: 400 } as const;
// the lease outlives a 10 s apiserver outage (renew deadline 25 s)
const LEASE = ['--leader-elect-lease-duration', '30s', '--leader-elect-renew-deadline', '25s', '--leader-elect-retry-period', '1s'];

export class ControllerManagers {
  readonly procs: TrackedProcess[] = [];
  private readonly coord: CoordinationV1Api;

  constructor(
    private readonly runDir: string,
    private readonly kubeconfig: string,
    kc: KubeConfig,
  ) {
    this.coord = kc.makeApiClient(CoordinationV1Api);
  }

  start(id: string): TrackedProcess {
    const cfgFile = join(this.runDir, `cm-${id}.yaml`);
    writeFileSync(cfgFile, `controllers: [${REPLACED.join(', ')}]\nnodeFailure: ${JSON.stringify(DETECTION)}\n`);
    const logFile = join(this.runDir, 'logs', `cm-${id}.log`);
    rmSync(logFile, { force: true });
    const p = startProcess({
      name: `cm-${id}`,
      cmd: 'npm',
      args: ['run', '--silent', 'start:controller-manager', '--', '--kubeconfig', this.kubeconfig, '--config', cfgFile, '--metrics-port', '0', '--identity', id, ...LEASE],
      logFile,
      env: { ULYSSES_LOG_LEVEL: 'info' },
    });
    this.procs.push(p);
    return p;
  }

  async holder(): Promise<string | undefined> {
    try {
      return (await this.coord.readNamespacedLease({ name: 'ulysses-controller-manager', namespace: 'kube-system' })).spec?.holderIdentity ?? '';
    } catch {
      return undefined;
    }
  }
}

/** The sum of a series of the /metrics on 127.0.0.1:`port` over the samples matching `labels`. */
export async function metricAt(port: number | string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  return metricSamples(text, new Set([name]))
    .filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((sum, s) => sum + s.value, 0);
}

/** The sum of a series of process `p`'s /metrics (its port from its log) over the samples matching `labels`. */
export async function metric(p: TrackedProcess, name: string, labels: Record<string, string> = {}): Promise<number> {
  const port = /"metricsPort":(\d+)/.exec(readFileSync(p.logFile, 'utf8'))?.[1];
  if (!port) throw new Error(`${p.name} has not logged its metrics port yet`);
  return metricAt(port, name, labels);
}

/** Waits until leader `p` has probed `nodes` nodes for `windows` more windows (progress, not time). */
export async function probedFor(p: TrackedProcess, nodes: number, windows: number, what: string, timeoutMs = 120_000): Promise<void> {
  const start = await metric(p, 'ulysses_node_heartbeat_probes_total');
  const periods = (windows * DETECTION.windowMs) / DETECTION.periodMs;
  await pollUntil(`${p.name}: ${windows} windows of probes ${what}`, async () => (await metric(p, 'ulysses_node_heartbeat_probes_total')) >= start + nodes * periods, { timeoutMs, intervalMs: 200 });
}

export const nodeTainted = (n: V1Node) => (n.spec?.taints ?? []).some((x) => x.key === NODE_UNREACHABLE_TAINT);
