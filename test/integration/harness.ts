/**
 * Shared setup of the integration tests: a testbed in its own run dir (a leftover of an aborted run
 * torn down first), typed API clients, optionally Ulysses' controller manager, all torn down after.
 */
import { afterAll, beforeAll } from 'vitest';
import { AppsV1Api, CoreV1Api, DiscoveryV1Api, type KubeConfig } from '@kubernetes/client-node';
import * as testbed from '../../experiments/testbed/testbed.ts';
import { ensureNamespace } from '../../experiments/workloads.ts';
import { ControllerManager, type ControllerManagerOptions } from '../../controller-manager/manager.ts';

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
