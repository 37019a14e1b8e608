/**
 * A new leader's wait for kube-controller-manager to give the replaced controllers up (issue 42
 * item 7): while the controller manager had no leader, the kcm handback (manifests/kcm-handback.ts)
 * may have turned them on in kcm, marking kcm's pod with KCM_HANDBACK_ANNOTATION. It turns them off
 * again once this leader renews the Lease; until then the two would run the same controllers, so
 * this leader starts its own only when no kcm pod carries the annotation and every kcm pod is Ready
 * (the restarted kcm runs: the one that ran them has stopped). A cluster without kcm pods in
 * kube-system (another installer, a managed control plane) has nothing to wait for.
 */
import type { V1Pod } from '@kubernetes/client-node';
import type { KubeClient } from '../core/kube.ts';
import type { Logger } from '../core/logging.ts';
import { KCM_HANDBACK_ANNOTATION, KCM_POD_SELECTOR } from '../core/kcm.ts';
import { isPodReady } from '../core/objects.ts';

/** Why this leader must still wait (the first kcm pod that is handed back or not yet Ready), or undefined. */
export function kcmHoldsControllers(pods: readonly V1Pod[]): string | undefined {
  for (const p of pods) {
    const name = `kube-system/${p.metadata?.name}`;
    const at = p.metadata?.annotations?.[KCM_HANDBACK_ANNOTATION];
    if (at !== undefined) return `${name} runs the replaced controllers (handed back at ${at})`;
    if (p.metadata?.deletionTimestamp || !isPodReady(p)) return `${name} is restarting`;
  }
  return undefined;
}

/** Resolves once kcm holds none of the replaced controllers, or when `signal` aborts (leadership ended). */
export async function waitForKcmTakeBack(client: Pick<KubeClient, 'request'>, log: Logger, signal: AbortSignal, everyMs = 1000): Promise<void> {
  let said: string | undefined;
  while (!signal.aborted) {
    try {
      const pods = await client.request<{ items: V1Pod[] }>('GET', '/api/v1/namespaces/kube-system/pods', { query: { labelSelector: KCM_POD_SELECTOR }, timeoutMs: 10_000 });
      const why = kcmHoldsControllers(pods.items);
      if (!why) {
        if (said) log.info('kube-controller-manager gave the replaced controllers up: starting them here');
        return;
      }
      if (why !== said) log.warn({ why }, 'leader, but kube-controller-manager still runs the replaced controllers: waiting before starting them');
      said = why;
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'cannot list the kube-controller-manager pods: waiting');
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
