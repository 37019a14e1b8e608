/**
 * Shared setup of the integration tests: a testbed in its own run dir (a leftover of an aborted run
 * torn down first) or the shared one, typed API clients, optionally Ulysses' controller manager,
 * all torn down after (the shared testbed only at the end of its family).
 */
import { afterAll, beforeAll, expect } from 'vitest';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { ControllerManager, type ControllerManagerOptions, type ControllerName } from '../../controller-manager/manager.ts';
import { KubeClient } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig, type ComponentStatus } from '../../core/runtime-config.ts';
import { setPatch, type SetOptions } from '../../core/runtime-status.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';
import { acquireSharedTestbed, declareSharing, type SharedTestbedOptions } from './shared-testbed.ts';

export interface TestbedContext {
  state: testbed.TestbedState;
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
  discovery: DiscoveryV1Api;
  cm?: ControllerManager;
}

type FileOptions = { namespace?: string; controllerManager?: Omit<ControllerManagerOptions, 'kubeconfig'> };

/** A testbed of this file's own in `runDir` (torn down after it). */
export function useTestbed(runDir: string, opts: testbed.TestbedOptions & FileOptions): TestbedContext {
  const ctx = {} as TestbedContext;
  beforeAll(async () => {
    await testbed.down({ runDir, log: () => undefined });
    await connect(ctx, await testbed.up({ ...opts, runDir }), opts);
  });
  afterAll(async () => {
    await ctx.cm?.stop();
    await testbed.down({ runDir });
  });
  return ctx;
}

/**
 * The shared testbed (shared-testbed.ts) in the shape `opts` asks for, reset for this file or brought
 * up fresh, and left up after it for the next file of `family` (test/sequencer.ts runs a family's
 * files one after another). Its run dir is SHARED_RUN_DIR.
 */
export function useSharedTestbed(family: string, opts: SharedTestbedOptions & FileOptions): TestbedContext {
  declareSharing(family);
  const ctx = {} as TestbedContext;
  beforeAll(async () => {
    await connect(ctx, await acquireSharedTestbed(opts), opts);
  });
  afterAll(async () => {
    await ctx.cm?.stop();
  });
  return ctx;
}

async function connect(ctx: TestbedContext, state: testbed.TestbedState, opts: FileOptions): Promise<void> {
  ctx.state = state;
  ctx.kc = testbed.kubeConfigFor(state);
  ctx.core = ctx.kc.makeApiClient(CoreV1Api);
  ctx.apps = ctx.kc.makeApiClient(AppsV1Api);
  ctx.discovery = ctx.kc.makeApiClient(DiscoveryV1Api);
  if (opts.namespace) await ensureNamespace(ctx.core, opts.namespace);
  if (opts.controllerManager) {
    ctx.cm = new ControllerManager({ ...opts.controllerManager, kubeconfig: ctx.kc });
    await ctx.cm.start();
  }
}

/**
 * `ulysses set <component> <mode>` as a library call, then waits until `statusKey` reports the new
 * generation in UlyssesConfig status; returns that component status.
 */
export async function setAndObserve(
  kc: KubeConfig,
  component: string,
  mode: string,
  o: SetOptions,
  statusKey: string = component,
): Promise<ComponentStatus> {
  const client = new KubeClient(kc);
  const gen = (await patchRuntimeConfig(client, setPatch(component, mode, o, (await readRuntimeConfig(client))?.spec))).metadata.generation!;
  return observeRuntimeConfig(kc, statusKey, gen);
}

/** Waits until `statusKey` reports generation >= `generation` in UlyssesConfig/default's status. */
export async function observeRuntimeConfig(kc: KubeConfig, statusKey: string, generation: number): Promise<ComponentStatus> {
  const client = new KubeClient(kc);
  let last: ComponentStatus | null | undefined;
  return pollUntil(
    `${statusKey} reports generation ${generation}`,
    async () => {
      last = (await readRuntimeConfig(client))?.status?.components?.[statusKey];
      return last && last.observedGeneration >= generation ? last : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 100, explain: () => `last status: ${JSON.stringify(last)}` },
  );
}

/**
 * Makes `controller` (running in the context's controller manager) reconcile Service ns/name again
 * without any change to what it publishes (an annotation patch on the Service), and waits until
 * that reconcile and anything it caused are done: the pool idle (nothing queued, delayed or
 * running) and no reconcile started for `quietMs` (a write of its own would come back as a watch
 * event and start another one).
 */
export async function reconcileServiceAgain(t: TestbedContext, controller: ControllerName, ns: string, name: string, quietMs = 500): Promise<void> {
  const pool = t.cm!.pool(controller);
  const before = pool.stats().syncs;
  await t.core.patchNamespacedService({ name, namespace: ns, body: [{ op: 'add', path: '/metadata/annotations', value: { 'ulysses.test/touched': String(Date.now()) } }] });
  let last = { syncs: before, at: Date.now() };
  await pollUntil(
    `${controller} reconciled ${ns}/${name} and idle for ${quietMs} ms`,
    () => {
      const { syncs, inFlight } = pool.stats();
      const idle = pool.queue.len() === 0 && pool.queue.numWaiting() === 0 && inFlight === 0;
      if (!idle || syncs !== last.syncs) last = { syncs, at: Date.now() };
      return syncs > before && idle && Date.now() - last.at >= quietMs;
    },
    { timeoutMs: 30_000, intervalMs: 20 },
  );
}

/** Creates `p` in `namespace`; it must stay Pending, unbound, with a FailedScheduling event matching `re` (returned). */
export async function createAndWaitRefused(core: CoreV1Api, namespace: string, p: V1Pod, re: RegExp): Promise<string> {
  await core.createNamespacedPod({ namespace, body: p });
  const name = p.metadata!.name!;
  const msg = await pollUntil(`FailedScheduling event of ${name} matching ${re}`, async () => {
    const events = await core.listNamespacedEvent({ namespace, fieldSelector: `involvedObject.name=${name},reason=FailedScheduling` });
    return events.items.map((e) => e.message ?? '').find((m) => re.test(m));
  }, { timeoutMs: 60_000 });
  const cur = await core.readNamespacedPod({ name, namespace });
  expect(cur.spec?.nodeName).toBeFalsy();
  expect(cur.status?.phase).toBe('Pending');
  return msg;
}
