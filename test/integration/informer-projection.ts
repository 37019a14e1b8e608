/** The projection of informer.int.test.ts's ThreadedInformer test: a ConfigMap's name and its `v` only. */
import type { V1ConfigMap } from '@kubernetes/client-node';

export function configMapV(cm: V1ConfigMap): V1ConfigMap {
  return { metadata: { name: cm.metadata?.name, namespace: cm.metadata?.namespace, resourceVersion: cm.metadata?.resourceVersion }, data: { v: cm.data?.v ?? '' } };
}
