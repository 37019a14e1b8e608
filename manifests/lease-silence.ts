/**
 * Whether a Lease's holder still renews, on this process' clock (client-go's observedTime rule: the
 * holder's renewTime is compared with nothing, only watched for change). Shared by the kcm handback
 * and the extender rescue, both run by the static pod of manifests/kcm-handback.ts.
 */
import type { Logger } from '../core/logging.ts';
import { isNotFound, type KubeClient } from '../core/kube.ts';

export interface LeaseObservation {
  /** holderIdentity + renewTime, or undefined when the apiserver did not answer */
  key: string | undefined;
  holder: string;
}

/**
 * The decision on a clock (pure: the caller reads the Lease and edits the manifest):
 * `handBack` after `afterMs` without a change of the Lease, `takeBack` when it changed after the
 * handback with a holder.
 */
export class HandbackDecider {
  private lastKey: string | undefined;
  private lastChangeAt: number;
  private handedBackAt: number | undefined;

  constructor(
    private readonly afterMs: number,
    now: number,
    handedBack: boolean,
  ) {
    this.lastChangeAt = now;
    // a restart during a handback: it stays until a leader is seen
    if (handedBack) this.handedBackAt = now;
  }

  observe(o: LeaseObservation, now: number): 'handBack' | 'takeBack' | undefined {
    if (o.key === undefined) {
      // no answer: nothing is decided, and the silence counts again from the apiserver's return
      this.lastKey = undefined;
      this.lastChangeAt = now;
      return undefined;
    }
    if (o.key !== this.lastKey) {
      this.lastKey = o.key;
      this.lastChangeAt = now;
    }
    if (this.handedBackAt !== undefined) {
      if (this.lastChangeAt > this.handedBackAt && o.holder) return 'takeBack';
      return undefined;
    }
    return now - this.lastChangeAt >= this.afterMs ? 'handBack' : undefined;
  }

  handedBack(now: number): void {
    this.handedBackAt = now;
  }

  takenBack(now: number): void {
    this.handedBackAt = undefined;
    this.lastChangeAt = now;
  }
}

/** The Lease's holder and renewal as {@link HandbackDecider} observes them; `key` undefined when the apiserver did not answer. */
export async function observeLease(client: Pick<KubeClient, 'request'>, lease: { namespace: string; name: string }, log: Logger): Promise<LeaseObservation> {
  const { namespace, name } = lease;
  try {
    const l = await client.request<{ spec?: { holderIdentity?: string; renewTime?: string } }>('GET', `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases/${name}`, { timeoutMs: 5000 });
    const holder = l.spec?.holderIdentity ?? '';
    return { key: `${holder}@${l.spec?.renewTime ?? ''}`, holder };
  } catch (err) {
    // no Lease at all (never installed, deleted): no leader to wait for either way
    if (isNotFound(err)) return { key: 'absent', holder: '' };
    log.warn({ err: (err as Error).message, lease: `${namespace}/${name}` }, 'cannot read the Lease: nothing decided');
    return { key: undefined, holder: '' };
  }
}
