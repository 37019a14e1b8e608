/**
 * Shared setup of the integration tests: a testbed in its own run dir (a leftover of an aborted run
 * torn down first), typed API clients, optionally Ulysses' controller manager, all torn down after.
 */
import { afterAll, beforeAll } from 'vitest';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type KubeConfig } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { ControllerManager, type ControllerManagerOptions } from '../../controller-manager/manager.ts';
import { KubeClient } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig, type ComponentStatus } from '../../core/runtime-config.ts';
import { setPatch, type SetOptions } from '../../core/runtime-status.ts';
import { pollUntil } from '../../experiments/testbed/processes.ts';

export interface TestbedContext {
  state: testbed.TestbedState;
  kc: KubeConfig;
  core: CoreV1Api;
  apps: AppsV1Api;
  discovery: DiscoveryV1Api;
  cm?: ControllerManager;
}

export function useTestbed(
  runDir: string,
  opts: testbed.TestbedOptions & { namespace?: string; controllerManager?: Omit<ControllerManagerOptions, 'kubeconfig'> },
): TestbedContext {
  const ctx = {} as TestbedContext;
  beforeAll(async () => {
    await testbed.down({ runDir, log: () => undefined });
    ctx.state = await testbed.up({ ...opts, runDir });
    ctx.kc = testbed.kubeConfigFor(ctx.state);
    ctx.core = ctx.kc.makeApiClient(CoreV1Api);
    ctx.apps = ctx.kc.makeApiClient(AppsV1Api);
    ctx.discovery = ctx.kc.makeApiClient(DiscoveryV1Api);
    if (opts.namespace) await ensureNamespace(ctx.core, opts.namespace);
    if (opts.controllerManager) {
      ctx.cm = new ControllerManager({ ...opts.controllerManager, kubeconfig: ctx.kc });
      await ctx.cm.start();
    }
  });
  afterAll(async () => {
    await ctx.cm?.stop();
    await testbed.down({ runDir });
  });
  return ctx;
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
