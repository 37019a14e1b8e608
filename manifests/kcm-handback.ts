#!/usr/bin/env -S npx tsx
/**
 * kcm handback (issue 42 item 7): kube-controller-manager gets back the controllers Ulysses replaces
 * when Ulysses' controller manager has had no leader for `--after` (60 s), and gives them up again
 * once a leader is back. Without it, a controller manager that is gone for good (its pods deleted:
 * only its own ReplicaSet controller would create them again) leaves the cluster without ReplicaSet,
 * Deployment, endpoint and taint-eviction controllers.
 *
 * A static pod on every control-plane node (manifests/kubeadm/static-pods/ulysses-kcm-handback.yaml,
 * written by `ulysses install`): the kubelet runs it, nothing of Ulysses has to. It reads the Lease
 * ulysses-system/ulysses-controller-manager with kcm's own credential, and edits kcm's static pod
 * manifest on its node, which the kubelet then restarts:
 * - **hand back**: the Lease has not changed (holder, renewTime) for `--after` on this process' clock
 *   (client-go's observedTime rule: no comparison of remote clocks) while the apiserver answered. The
 *   install's `--controllers` is replaced by kubeadm's `*,bootstrapsigner,tokencleaner` (every
 *   controller on) and the pod gets {@link HANDBACK_ANNOTATION}.
 * - **take back**: the Lease changed after the handback and has a holder, i.e. a controller manager
 *   leads again. The install's flag is put back and the annotation removed. The controller manager
 *   holds its controllers back while any kcm pod carries the annotation (controller-manager/main.ts),
 *   so the two never run the same controller at once.
 * - An apiserver that does not answer decides nothing, and its return restarts the observation.
 *
 * The same process runs the extender rescue (manifests/extender-rescue.ts, `--extender-after`).
 */
import { readFileSync, realpathSync, renameSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { isMap, isSeq, parseDocument } from 'yaml';
import { Counter, Gauge } from 'prom-client';
import { componentLogger, type Logger } from '../core/logging.ts';
import { KubeClient } from '../core/kube.ts';
import { loadKubeAccess } from '../core/kubeconfig.ts';
import { metricsRegistry, registeredMetric, serveMetrics } from '../core/metrics.ts';
import { onShutdownSignal } from '../core/shutdown.ts';
import { parseDurationSeconds } from '../core/leader-election.ts';
import { runPeriodically } from '../core/periodic.ts';
import { KCM_HANDBACK_ANNOTATION as HANDBACK_ANNOTATION } from '../core/kcm.ts';
import { HandbackDecider, observeLease } from './lease-silence.ts';
import { ExtenderRescue } from './extender-rescue.ts';
import { kcmControllersFromPatch } from './overlays.ts';
import { KUBEADM_STYLE } from './control-plane.ts';


/** The `--controllers` flag the install sets on kcm (manifests/control-plane.ts, as kubeadm's extraArg). */
export const ulyssesControllersFlag = (): string => `--controllers=${kcmControllersFromPatch()}`;

/** `flag` without its `-name` entries: kubeadm's own `--controllers` (`*,bootstrapsigner,tokencleaner`), every controller on. */
export const handedBackFlag = (flag: string): string => `--controllers=${flag.replace(/^--controllers=/, '').split(',').filter((e) => !e.startsWith('-')).join(',')}`;

const argOf = (x: unknown) => (x as { value?: unknown }).value;

/**
 * kcm's manifest with `flag` replaced by {@link handedBackFlag} in its place and with
 * {@link HANDBACK_ANNOTATION} = `at`; undefined when the command does not have the flag (nothing to
 * hand back).
 */
export function handedBack(manifest: string, flag: string, at: string): string | undefined {
  const doc = parseDocument(manifest);
  const command = doc.getIn(['spec', 'containers', 0, 'command']);
  if (!isSeq(command)) return undefined;
  const i = command.items.findIndex((x) => argOf(x) === flag);
  if (i < 0) return undefined;
  command.items[i] = doc.createNode(handedBackFlag(flag));
  doc.setIn(['metadata', 'annotations', HANDBACK_ANNOTATION], at);
  return doc.toString(KUBEADM_STYLE);
}

/**
 * kcm's manifest with `flag` back (in place of the last {@link handedBackFlag}, else appended) and
 * the annotation removed; undefined when it does not carry the annotation (not handed back by us).
 */
export function takenBack(manifest: string, flag: string): string | undefined {
  const doc = parseDocument(manifest);
  const annotations = doc.getIn(['metadata', 'annotations']);
  if (!isMap(annotations) || !annotations.has(HANDBACK_ANNOTATION)) return undefined;
  annotations.delete(HANDBACK_ANNOTATION);
  if (annotations.items.length === 0) doc.deleteIn(['metadata', 'annotations']);
  const command = doc.getIn(['spec', 'containers', 0, 'command']);
  if (isSeq(command) && !command.items.some((x) => argOf(x) === flag)) {
    const i = command.items.map(argOf).lastIndexOf(handedBackFlag(flag));
    if (i >= 0) command.items[i] = doc.createNode(flag);
    else command.add(flag);
  }
  return doc.toString(KUBEADM_STYLE);
}

/** Writes `text` to `file` atomically, through a dot file the kubelet does not read as a static pod. */
function writeManifest(file: string, text: string): void {
  const tmp = join(dirname(file), `.${basename(file)}.ulysses-tmp`);
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}

export interface KcmHandbackOptions {
  client: Pick<KubeClient, 'request'>;
  manifest: string;
  lease: { namespace: string; name: string };
  afterMs: number;
  log: Logger;
  node: string;
  now?: () => number;
}

export class KcmHandback {
  private readonly decider: HandbackDecider;
  private readonly flag = ulyssesControllersFlag();
  private readonly transitions = registeredMetric('ulysses_kcm_handbacks_total', () => new Counter({ name: 'ulysses_kcm_handbacks_total', help: "kube-controller-manager's --controllers changed by the handback: to=\"kcm\" (the controller manager had no leader), to=\"ulysses\" (a leader is back).", labelNames: ['to'], registers: [metricsRegistry()] }));
  private readonly active = registeredMetric('ulysses_kcm_handback_active', () => new Gauge({ name: 'ulysses_kcm_handback_active', help: "1 while kube-controller-manager runs the controllers Ulysses replaces because Ulysses' controller manager had no leader.", registers: [metricsRegistry()] }));

  constructor(private readonly o: KcmHandbackOptions) {
    this.decider = new HandbackDecider(o.afterMs, this.now(), this.readManifest().includes(HANDBACK_ANNOTATION));
  }

  private now(): number {
    return this.o.now?.() ?? Date.now();
  }

  private readManifest(): string {
    return readFileSync(this.o.manifest, 'utf8');
  }

  async tick(): Promise<'handBack' | 'takeBack' | undefined> {
    const decision = this.decider.observe(await observeLease(this.o.client, this.o.lease, this.o.log), this.now());
    if (!decision) return undefined;
    const at = new Date(this.now()).toISOString();
    const before = this.readManifest();
    const after = decision === 'handBack' ? handedBack(before, this.flag, at) : takenBack(before, this.flag);
    if (after === undefined) {
      // not patched by the install (a handback is not ours to make) or not handed back by us
      if (decision === 'handBack') this.decider.handedBack(this.now());
      else this.decider.takenBack(this.now());
      return undefined;
    }
    writeManifest(this.o.manifest, after);
    if (decision === 'handBack') {
      this.decider.handedBack(this.now());
      this.active.set(1);
      this.o.log.error({ node: this.o.node, afterMs: this.o.afterMs, lease: this.o.lease }, "Ulysses' controller manager has had no leader: kube-controller-manager runs the replicaset, deployment, endpoints, endpointslice and taint-eviction controllers again");
    } else {
      this.decider.takenBack(this.now());
      this.active.set(0);
      this.o.log.info({ node: this.o.node }, "a controller manager leads again: kube-controller-manager's replaced controllers turned off again");
    }
    this.transitions.inc({ to: decision === 'handBack' ? 'kcm' : 'ulysses' });
    return decision;
  }
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      kubeconfig: { type: 'string', default: '/etc/kubernetes/controller-manager.conf' },
      manifest: { type: 'string', default: '/etc/kubernetes/manifests/kube-controller-manager.yaml' },
      lease: { type: 'string', default: 'ulysses-system/ulysses-controller-manager' },
      after: { type: 'string', default: '60s' },
      // the extender rescue (manifests/extender-rescue.ts): 'off' disables it
      'extender-after': { type: 'string', default: '30s' },
      period: { type: 'string', default: '2s' },
      'metrics-port': { type: 'string' },
    },
  });
  const log = componentLogger('kcm-handback');
  const [namespace, name] = values.lease!.split('/');
  if (!namespace || !name) throw new Error(`--lease: expected namespace/name, got ${JSON.stringify(values.lease)}`);
  const afterMs = parseDurationSeconds('after', values.after!) * 1000;
  const periodMs = parseDurationSeconds('period', values.period!) * 1000;
  if (afterMs < 20_000) throw new Error(`--after: at least 20s (longer than the controller manager's lease duration), got ${values.after}`);
  const client = new KubeClient(await loadKubeAccess(values.kubeconfig));
  const node = process.env.NODE_NAME ?? '';
  const agent = new KcmHandback({ client, manifest: values.manifest!, lease: { namespace, name }, afterMs, log, node });
  let rescue: ExtenderRescue | undefined;
  if (values['extender-after'] !== 'off') {
    const extenderAfterMs = parseDurationSeconds('extender-after', values['extender-after']!) * 1000;
    if (extenderAfterMs < 20_000) throw new Error(`--extender-after: at least 20s (longer than the extender's lease duration) or off, got ${values['extender-after']}`);
    if (!node) throw new Error('--extender-after: NODE_NAME (the node to bind a rescued extender pod to) is not set; give --extender-after=off to run without the rescue');
    rescue = new ExtenderRescue({ client, node, afterMs: extenderAfterMs, log });
  }
  const metrics = values['metrics-port'] !== undefined ? await serveMetrics(Number(values['metrics-port']), '127.0.0.1') : undefined;
  log.info({ manifest: values.manifest, lease: values.lease, afterMs, periodMs, extenderRescue: values['extender-after'] }, 'kcm handback watching the controller manager Lease (and the extender rescue its Lease)');
  const loop = runPeriodically(async () => {
    // both checks every period, one failing or not
    for (const r of await Promise.allSettled([agent.tick(), rescue?.tick()])) if (r.status === 'rejected') throw r.reason;
  }, periodMs, { keepAlive: true, onError: (err) => log.error({ err: err.message }, 'handback check failed') });
  onShutdownSignal(async () => {
    loop.stop();
    await metrics?.close();
  }, { log });
}

const invokedDirectly = process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
if (invokedDirectly) {
  main(process.argv.slice(2)).catch((err: Error) => {
    console.error(`kcm-handback: ${err.message}`);
    process.exit(2);
  });
}
