/**
 * Two controller managers running the same controller (issue 42 item 9): Ulysses replaces five of
 * kube-controller-manager's controllers, which the install turns off with kcm's `--controllers`
 * (manifests/kubeadm/patches/control-plane). A `kubeadm upgrade` without Ulysses' patches, or a hand
 * edit, turns them back on, and then both act on every ReplicaSet, Deployment, Service and taint:
 * doubled pod creations, fighting endpoint writes. Nothing else notices.
 *
 * This watches the kube-controller-manager pods of kube-system (kubeadm's static pods' mirrors,
 * label component=kube-controller-manager), works out from their command which of the five each runs,
 * and reports a duplicate as the gauge `ulysses_duplicate_controllers{pod,controller}` (1), an error
 * log line and a Warning Event `DuplicateControllers` on that pod. It acts on nothing.
 *
 * kcm's rule for `--controllers` (cmd/kube-controller-manager/app, IsControllerEnabled; aliases as the
 * v1.37.2 binary accepts them: `-replicaset` is known, `-taint-eviction` is not): entries are read in
 * order, the first naming the controller decides (`name` on, `-name` off); else `*` turns on those on
 * by default, which the five are; no `--controllers` is `*`. Repeated flags append (a kubeadm patch
 * adds a second one after kubeadm's own).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { Gauge } from 'prom-client';
import type { ComponentEventRecorder } from '../core/events.ts';
import { ResilientInformer } from '../core/informer.ts';
import type { KubeAccess } from '../core/kube.ts';
import { metricsRegistry, registeredMetric } from '../core/metrics.ts';
import type { Logger } from '../core/logging.ts';
import { KCM_POD_SELECTOR } from '../core/kcm.ts';

/** kcm's names of the controllers Ulysses replaces, with the aliases kcm accepts for them. */
export const REPLACED_KCM_CONTROLLERS: Readonly<Record<string, readonly string[]>> = Object.freeze({
  'replicaset-controller': ['replicaset'],
  'deployment-controller': ['deployment'],
  'endpoints-controller': ['endpoint'],
  'endpointslice-controller': ['endpointslice'],
  'taint-eviction-controller': [],
});

export const DUPLICATE_CONTROLLERS_REASON = 'DuplicateControllers';
export const DUPLICATE_EVENT_SOURCE = 'ulysses-duplicate-controllers';

/** The `--controllers` entries of a command line (`--controllers=a,b` or `--controllers a,b`, every occurrence, in order); undefined without the flag. */
export function controllersFlag(command: readonly string[]): string[] | undefined {
  let out: string[] | undefined;
  for (let i = 0; i < command.length; i++) {
    const a = command[i]!;
    let value: string | undefined;
    if (a.startsWith('--controllers=')) value = a.slice('--controllers='.length);
    else if (a === '--controllers' && i + 1 < command.length) value = command[++i];
    if (value === undefined) continue;
    out = [...(out ?? []), ...value.split(',').map((s) => s.trim()).filter(Boolean)];
  }
  return out;
}

/** Which of the replaced controllers a kube-controller-manager with this command runs (kcm's rule, see the header). */
export function replacedControllersRunning(command: readonly string[]): string[] {
  const entries = controllersFlag(command) ?? ['*'];
  return Object.entries(REPLACED_KCM_CONTROLLERS)
    .filter(([name, aliases]) => {
      const names = new Set([name, ...aliases]);
      for (const e of entries) {
        if (names.has(e)) return true;
        if (e.startsWith('-') && names.has(e.slice(1))) return false;
      }
      return entries.includes('*');
    })
    .map(([name]) => name);
}

/** The command and args of a kcm pod's first container (kubeadm puts the flags in `command`). */
const commandOf = (p: V1Pod): string[] => [...(p.spec?.containers?.[0]?.command ?? []), ...(p.spec?.containers?.[0]?.args ?? [])];

export class DuplicateControllersDetector {
  private readonly informer: ResilientInformer<V1Pod>;
  private readonly gauge: Gauge<'pod' | 'controller'>;
  /** pod key -> the duplicates reported for its current version (uid + the list) */
  private readonly reported = new Map<string, string>();

  constructor(private readonly o: { kubeconfig: KubeAccess; log: Logger; events: ComponentEventRecorder }) {
    this.informer = new ResilientInformer<V1Pod>(o.kubeconfig, { path: '/api/v1/namespaces/kube-system/pods', labelSelector: KCM_POD_SELECTOR, log: o.log });
    this.gauge = registeredMetric('ulysses_duplicate_controllers', () =>
      new Gauge({
        name: 'ulysses_duplicate_controllers',
        help: 'Controllers Ulysses replaces that a kube-controller-manager pod runs too (1 each): both act on the same objects; turn them off in kcm (--controllers).',
        labelNames: ['pod', 'controller'],
        registers: [metricsRegistry()],
      }),
    );
    this.informer.on('add', (p) => this.check(p));
    this.informer.on('update', (p) => this.check(p));
    this.informer.on('delete', (p) => this.forget(p));
  }

  async start(): Promise<void> {
    await this.informer.start();
  }

  stop(): void {
    this.informer.stop();
  }

  private forget(p: V1Pod): void {
    const name = p.metadata?.name ?? '';
    this.reported.delete(name);
    for (const c of Object.keys(REPLACED_KCM_CONTROLLERS)) this.gauge.remove({ pod: name, controller: c });
  }

  private check(p: V1Pod): void {
    const name = p.metadata?.name ?? '';
    const running = replacedControllersRunning(commandOf(p));
    for (const c of Object.keys(REPLACED_KCM_CONTROLLERS)) this.gauge.set({ pod: name, controller: c }, running.includes(c) ? 1 : 0);
    const key = `${p.metadata?.uid}/${running.join(',')}`;
    if (this.reported.get(name) === key) return;
    this.reported.set(name, key);
    if (!running.length) {
      this.o.log.info({ pod: `kube-system/${name}` }, 'kube-controller-manager runs none of the controllers Ulysses replaces');
      return;
    }
    const message = `kube-controller-manager (pod kube-system/${name}) runs ${running.join(', ')}, which the Ulysses controller manager runs too: both act on the same objects. Turn them off in its --controllers: ulysses install --components controller-manager edits its manifest again (kubeadm upgrade keeps the flag recorded in kubeadm-config; a manifest regenerated from another ClusterConfiguration loses it)`;
    this.o.log.error({ pod: `kube-system/${name}`, controllers: running }, message);
    this.o.events.event(p, 'Warning', DUPLICATE_CONTROLLERS_REASON, message);
  }
}
