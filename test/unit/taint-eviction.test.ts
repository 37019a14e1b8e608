import { describe, expect, it } from 'vitest';
import { evictionDecision, toleratesTaint } from '../../controller-manager/controllers/taint-eviction.ts';

const taint = { key: 'node.kubernetes.io/unreachable', value: '', effect: 'NoExecute' };

describe('toleration matching (upstream Toleration.ToleratesTaint)', () => {
  it('matches by key/operator/value/effect', () => {
    expect(toleratesTaint({ key: taint.key, operator: 'Exists', effect: 'NoExecute' }, taint)).toBe(true);
    expect(toleratesTaint({ operator: 'Exists' }, taint)).toBe(true); // empty key + Exists tolerates everything
    expect(toleratesTaint({ key: taint.key, operator: 'Exists', effect: 'NoSchedule' }, taint)).toBe(false);
    expect(toleratesTaint({ key: 'other', operator: 'Exists' }, taint)).toBe(false);
    expect(toleratesTaint({ key: 'k', value: 'v' }, { key: 'k', value: 'v', effect: 'NoExecute' })).toBe(true); // Equal is the default
    expect(toleratesTaint({ key: 'k', value: 'w' }, { key: 'k', value: 'v', effect: 'NoExecute' })).toBe(false);
    expect(toleratesTaint({ operator: 'Equal', value: '' }, taint)).toBe(false); // Equal needs a key
  });
});

describe('eviction decision', () => {
  it('keeps pods on nodes without NoExecute taints', () => {
    expect(evictionDecision([], [{ key: 'a', effect: 'NoSchedule' }])).toEqual({ action: 'keep' });
    expect(evictionDecision(undefined, undefined)).toEqual({ action: 'keep' });
  });
  it('evicts at once when one NoExecute taint is not tolerated', () => {
    expect(evictionDecision([{ key: taint.key, operator: 'Exists', effect: 'NoExecute' }], [taint, { key: 'failure', value: 'true', effect: 'NoExecute' }])).toEqual({ action: 'evict' });
  });
  it('waits the smallest tolerationSeconds of the tolerations used, forever without any', () => {
    const tol = [
      { key: taint.key, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
      { operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 30 },
    ];
    expect(evictionDecision(tol, [taint])).toEqual({ action: 'after', afterMs: 30_000 });
    expect(evictionDecision([{ operator: 'Exists' }], [taint])).toEqual({ action: 'keep' });
    expect(evictionDecision([{ operator: 'Exists', tolerationSeconds: -5 }], [taint])).toEqual({ action: 'evict' });
  });
});
