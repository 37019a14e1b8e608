/**
 * KWOK nodes: control-plane-only nodes (no kubelet, no containers) whose node and pod lifecycle is
 * played by one kwok process from Stage configs. Since kwok v0.8 the stages are mandatory; we use
 * kwok's own node-initialize / heartbeat-with-lease / pod-general stages (copied next to the kwok
 * binary at build time) with delays set here, so that hundreds of nodes and pods behave with
 * realistic latencies on 2 cores.
 */
import { readFile, writeFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { parseAllDocuments, stringify } from 'yaml';
import type { CoreV1Api, V1Node } from '@kubernetes/client-node';
import { binaryPath, binDir } from './binaries.ts';
import { startProcess, type TrackedProcess } from './processes.ts';

export const KWOK_ANNOTATION = 'kwok.x-k8s.io/node';
export const KWOK_PORT = 20300;
/** What a pod needs to be scheduled on (and stay on) a KWOK node, whose taint is KWOK_ANNOTATION=fake:NoSchedule. */
export const KWOK_TOLERATION = { key: KWOK_ANNOTATION, operator: 'Equal', value: 'fake', effect: 'NoSchedule' } as const;

export interface KwokDelays {
  /** pod created -> containers "running" (ms, plus uniform jitter) */
  podCreateMs: number;
  podCreateJitterMs: number;
  /** running -> Ready */
  podReadyMs: number;
  podReadyJitterMs: number;
  /** deletionTimestamp -> object removed */
  podDeleteMs: number;
}

/** Roughly what a real kubelet needs for a pre-pulled image on an idle node (see testbed-notes). */
export const DEFAULT_KWOK_DELAYS: KwokDelays = {
  podCreateMs: 300,
  podCreateJitterMs: 400,
  podReadyMs: 200,
  podReadyJitterMs: 300,
  podDeleteMs: 500,
};

const STAGE_DELAYS: Record<string, (d: KwokDelays) => [number, number] | undefined> = {
  'pod-create': (d) => [d.podCreateMs, d.podCreateJitterMs],
  'pod-ready': (d) => [d.podReadyMs, d.podReadyJitterMs],
  'pod-delete': (d) => [d.podDeleteMs, 0],
  'pod-complete': () => [1000, 0],
};

/** Writes the kwok --config file (multi-document Stage YAML) with our delays. */
export async function writeKwokStages(file: string, delays: KwokDelays): Promise<void> {
  const dir = join(binDir(), 'kwok-stages');
  const docs: string[] = [];
  for (const f of (await readdir(dir)).filter((n) => n.endsWith('.yaml')).sort()) {
    for (const doc of parseAllDocuments(await readFile(join(dir, f), 'utf8'))) {
      const stage = doc.toJS() as { kind?: string; metadata: { name: string }; spec: { delay?: Record<string, unknown> } };
      if (stage?.kind !== 'Stage') continue;
      const delay = STAGE_DELAYS[stage.metadata.name]?.(delays);
      if (delay && stage.spec.delay) {
        stage.spec.delay.durationMilliseconds = delay[0];
        if (delay[1] > 0) stage.spec.delay.jitterDurationMilliseconds = delay[1];
        else delete stage.spec.delay.jitterDurationMilliseconds;
      }
      docs.push(stringify(stage));
    }
  }
  if (!docs.length) throw new Error(`no kwok Stage configs found in ${dir} (rebuild binaries)`);
  await writeFile(file, docs.join('---\n'));
}

export function startKwok(runDir: string, kubeconfig: string, stagesFile: string, cpus?: string): TrackedProcess {
  return startProcess({
    name: 'kwok',
    cmd: binaryPath('kwok'),
    args: [
      `--kubeconfig=${kubeconfig}`,
      `--config=${stagesFile}`,
      '--manage-all-nodes=false',
      `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
      `--server-address=127.0.0.1:${KWOK_PORT}`,
      '--cidr=10.250.0.0/16',
      '--node-ip=10.250.255.254',
      '--node-lease-duration-seconds=40',
    ],
    logFile: join(runDir, 'logs', 'kwok.log'),
    cpus,
  });
}

export function kwokNode(name: string): V1Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      annotations: { [KWOK_ANNOTATION]: 'fake', 'node.alpha.kubernetes.io/ttl': '0' },
      labels: {
        'kubernetes.io/hostname': name,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/arch': 'amd64',
        type: 'kwok',
        'ulysses.io/testbed-node': 'kwok',
      },
    },
    spec: { taints: [{ key: KWOK_ANNOTATION, value: 'fake', effect: 'NoSchedule' }] },
    status: {
      allocatable: { cpu: '32', memory: '256Gi', pods: '110' },
      capacity: { cpu: '32', memory: '256Gi', pods: '110' },
    },
  };
}

export async function createKwokNodes(core: CoreV1Api, names: string[]): Promise<void> {
  await Promise.all(
    names.map(async (name) => {
      try {
        await core.createNode({ body: kwokNode(name) });
      } catch (err) {
        if ((err as { code?: number }).code !== 409) throw err;
      }
    }),
  );
}
