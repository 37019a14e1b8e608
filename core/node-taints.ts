/**
 * One taint of a Node, added or removed by key without losing anyone else's: read, change the list,
 * write it back with the read resourceVersion (a concurrent change, e.g. kcm's node lifecycle
 * controller tainting the same node, is a conflict, and the change is made again on the new list).
 */
import type { V1Node, V1Taint } from '@kubernetes/client-node';
import { isConflict, isNotFound, type KubeClient } from './kube.ts';

/** Ulysses' NoExecute taint of a node its controller manager found failed (controller-manager/node-failure.ts). */
export const NODE_UNREACHABLE_TAINT = 'ulysses.io/unreachable';

/**
 * Sets the taint `taint` (by its key) on node `name`, or removes the taint keyed `key` when `taint`
 * is undefined. Returns whether the node was written; false when it already was as asked or is gone.
 */
export async function updateNodeTaint(client: KubeClient, name: string, key: string, taint?: V1Taint, attempts = 5): Promise<boolean> {
  for (let attempt = 1; ; attempt++) {
    let node: V1Node;
    try {
      node = await client.get<V1Node>(`/api/v1/nodes/${name}`);
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
    const taints = node.spec?.taints ?? [];
    const has = taints.some((t) => t.key === key);
    if (taint ? has : !has) return false;
    const next = taint ? [...taints, taint] : taints.filter((t) => t.key !== key);
    try {
      await client.request('PATCH', `/api/v1/nodes/${name}`, {
        body: { metadata: { resourceVersion: node.metadata!.resourceVersion }, spec: { taints: next } },
        contentType: 'application/merge-patch+json',
        // a failure's taint starts a failover: the first write on its critical path
        critical: taint !== undefined,
      });
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      if (!isConflict(err) || attempt >= attempts) throw err;
    }
  }
}
