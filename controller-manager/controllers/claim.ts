/**
 * Upstream's ControllerRefManager (k8s.io/kubernetes/pkg/controller/controller_ref_manager.go),
 * shared by the ReplicaSet controller (ClaimPods) and the Deployment controller (ClaimReplicaSets):
 * of the candidates in the owner's namespace, keep those it controls and that still match, adopt
 * matching orphans, release controlled ones that no longer match. Adoption and release are JSON
 * patches guarded by `test` ops, so a concurrent change makes them fail instead of clobbering.
 * As upstream, an adoption or release that fails (other than for an object that is gone) is an
 * error of the claim: the caller's sync fails and is retried, and does not act on a partial claim
 * (the ReplicaSet controller would otherwise create a replacement for an orphan it failed to adopt).
 */
import type { KubernetesObject, V1ObjectMeta, V1OwnerReference } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { isNotFound, type KubeClient } from '../../core/kube.ts';
import { objectKey } from '../../core/objects.ts';

export function controllerRef(meta: { ownerReferences?: V1OwnerReference[] } | undefined): V1OwnerReference | undefined {
  return meta?.ownerReferences?.find((r) => r.controller);
}

type Owned = KubernetesObject & { metadata?: V1ObjectMeta };

export interface ClaimOptions<T extends Owned> {
  client: KubeClient;
  /** the controller: its apiVersion/kind go into the adopted objects' ownerReference */
  owner: { apiVersion: string; kind: string; metadata?: V1ObjectMeta };
  candidates: readonly T[];
  matches: (labels: Record<string, string>) => boolean;
  /** object path for the patches */
  path: (obj: T) => string;
  /** what is claimed, for the logs ("pod", "ReplicaSet") */
  noun: string;
  /** extra condition for adopting an orphan (ClaimPods adopts active pods only) */
  canAdopt?: (obj: T) => boolean;
  /**
   * the owner's API path: read from the API (not the cache) once, before the first adoption of the
   * claim; an owner that is gone (other uid) or being deleted adopts nothing (upstream
   * RecheckDeletionTimestamp: the GC orphaning the objects of an owner deleted with
   * propagationPolicy Orphan must not see them adopted back by a stale cached owner).
   */
  ownerPath?: string;
  log: Logger;
}

/** Error of a claim: every adoption/release that failed (upstream utilerrors.NewAggregate). */
export class ClaimError extends Error {
  constructor(readonly errors: unknown[]) {
    super(errors.map((e) => (e as Error).message).join('; '));
    this.name = 'ClaimError';
  }
}

/**
 * Returns the claimed objects (adopted ones as returned by the adoption patch); throws a
 * {@link ClaimError} after trying them all if an adoption or release failed.
 */
export async function claimObjects<T extends Owned>(o: ClaimOptions<T>): Promise<T[]> {
  const ns = o.owner.metadata!.namespace!;
  const uid = o.owner.metadata!.uid!;
  const ownerGone = !!o.owner.metadata?.deletionTimestamp;
  const claimed: T[] = [];
  const errors: unknown[] = [];
  let recheck: Promise<void> | undefined;
  const ownerCanAdopt = () =>
    (recheck ??= (async () => {
      if (!o.ownerPath) return;
      const name = `${ns}/${o.owner.metadata?.name}`;
      let fresh: Owned;
      try {
        fresh = await o.client.get<Owned>(o.ownerPath);
      } catch (err) {
        throw new Error(`can't recheck DeletionTimestamp of ${o.owner.kind} ${name}: ${(err as Error).message}`);
      }
      if (fresh.metadata?.uid !== uid) throw new Error(`original ${o.owner.kind} ${name} is gone: got uid ${fresh.metadata?.uid}, wanted ${uid}`);
      if (fresh.metadata?.deletionTimestamp) throw new Error(`${o.owner.kind} ${name} has just been deleted at ${new Date(fresh.metadata.deletionTimestamp).toISOString()}`);
    })());
  const attempt = async <R>(f: () => Promise<R>): Promise<R | undefined> => {
    try {
      return await f();
    } catch (err) {
      errors.push(err);
      return undefined;
    }
  };
  for (const obj of o.candidates) {
    if (obj.metadata?.namespace !== ns) continue;
    const ref = controllerRef(obj.metadata);
    const labels = obj.metadata?.labels ?? {};
    if (ref) {
      if (ref.uid !== uid) continue;
      if (o.matches(labels) || ownerGone) claimed.push(obj);
      else if (!obj.metadata?.deletionTimestamp) await attempt(() => release(o, obj, uid));
      continue;
    }
    if (!o.matches(labels) || obj.metadata?.deletionTimestamp || ownerGone || (o.canAdopt && !o.canAdopt(obj))) continue;
    const adopted = await attempt(async () => {
      await ownerCanAdopt();
      return adopt(o, obj);
    });
    if (adopted) claimed.push(adopted);
  }
  if (errors.length) throw new ClaimError(errors);
  return claimed;
}

async function adopt<T extends Owned>(o: ClaimOptions<T>, obj: T): Promise<T | undefined> {
  const m = o.owner.metadata!;
  const ref: V1OwnerReference = { apiVersion: o.owner.apiVersion, kind: o.owner.kind, name: m.name!, uid: m.uid!, controller: true, blockOwnerDeletion: true };
  const ops = [
    { op: 'test', path: '/metadata/uid', value: obj.metadata!.uid },
    obj.metadata?.ownerReferences?.length ? { op: 'add', path: '/metadata/ownerReferences/-', value: ref } : { op: 'add', path: '/metadata/ownerReferences', value: [ref] },
  ];
  try {
    const res = await o.client.jsonPatch<T>(o.path(obj), ops);
    o.log.info({ [o.noun.toLowerCase()]: objectKey(obj) }, `adopted orphan ${o.noun}`);
    return res ?? obj;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    o.log.warn({ [o.noun.toLowerCase()]: objectKey(obj), err: (err as Error).message }, `adoption of ${o.noun} failed`);
    throw err;
  }
}

async function release<T extends Owned>(o: ClaimOptions<T>, obj: T, uid: string): Promise<void> {
  const i = (obj.metadata?.ownerReferences ?? []).findIndex((r) => r.uid === uid);
  if (i < 0) return;
  try {
    await o.client.jsonPatch(o.path(obj), [
      { op: 'test', path: `/metadata/ownerReferences/${i}/uid`, value: uid },
      { op: 'remove', path: `/metadata/ownerReferences/${i}` },
    ]);
    o.log.info({ [o.noun.toLowerCase()]: objectKey(obj) }, `released ${o.noun} that no longer matches the selector`);
  } catch (err) {
    if (isNotFound(err)) return;
    o.log.warn({ [o.noun.toLowerCase()]: objectKey(obj), err: (err as Error).message }, `release of ${o.noun} failed`);
    throw err;
  }
}
