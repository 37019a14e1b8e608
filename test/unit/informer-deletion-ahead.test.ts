/**
 * ResilientInformer.observeDeletion (core/informer.ts): a DELETE's response cached ahead of the
 * watch. Pure cache logic, driven through the informer's own entry point for watch events (its
 * private upsert) without an apiserver; the whole failover path on real components is in
 * test/integration/taint-eviction.int.test.ts.
 */
import type { V1Pod } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { ResilientInformer } from '../../core/informer.ts';

const pod = (rv: string, o: { uid?: string; deleting?: boolean; phase?: string } = {}): V1Pod => ({
  metadata: { name: 'crit', namespace: 'ns', uid: o.uid ?? 'u1', resourceVersion: rv, ...(o.deleting ? { deletionTimestamp: new Date(0) } : {}) },
  status: { phase: o.phase ?? 'Running' },
});

function informer() {
  const kc = { getCurrentCluster: () => ({ server: 'https://unused.invalid' }), applyToFetchOptions: async () => ({}) };
  const inf = new ResilientInformer<V1Pod>(kc, { path: '/api/v1/pods' });
  const events: string[] = [];
  inf.on('add', (p) => events.push(`add ${p.metadata!.resourceVersion}`));
  inf.on('update', (p, old) => events.push(`update ${old!.metadata!.resourceVersion}->${p.metadata!.resourceVersion}${p.metadata?.deletionTimestamp ? ' deleting' : ''}`));
  inf.on('delete', (p) => events.push(`delete ${p.metadata!.resourceVersion}`));
  /** a watch event (ADDED/MODIFIED) as the informer handles it */
  const watched = (p: V1Pod) => (inf as unknown as { upsert(p: V1Pod): void }).upsert(p);
  return { inf, events, watched };
}

describe('ResilientInformer.observeDeletion', () => {
  it('emits the pod marked for deletion at once; the watch\'s own event for it emits nothing more', () => {
    const { inf, events, watched } = informer();
    watched(pod('10'));
    expect(inf.observeDeletion(pod('12', { deleting: true }))).toBe(true);
    expect(inf.get('ns/crit')?.metadata?.deletionTimestamp).toBeDefined();
    watched(pod('12', { deleting: true }));
    expect(events).toEqual(['add 10', 'update 10->12 deleting']);
  });

  it('skips versions from before the deletion that the watch still delivers, then follows the watch again', () => {
    const { inf, events, watched } = informer();
    watched(pod('10'));
    inf.observeDeletion(pod('12', { deleting: true }));
    // the kubelet's status update at 11 arrives after the DELETE's response: older, not terminating
    watched(pod('11', { phase: 'Failed' }));
    expect(inf.get('ns/crit')?.metadata?.resourceVersion).toBe('12');
    watched(pod('12', { deleting: true }));
    watched(pod('13', { deleting: true, phase: 'Failed' }));
    expect(events).toEqual(['add 10', 'update 10->12 deleting', 'update 12->13 deleting']);
  });

  it('changes nothing for a pod it does not hold, another uid, one already marked, or an unmarked response', () => {
    const { inf, events, watched } = informer();
    expect(inf.observeDeletion(pod('12', { deleting: true }))).toBe(false); // not cached
    watched(pod('10'));
    expect(inf.observeDeletion(pod('12', { deleting: true, uid: 'u2' }))).toBe(false); // same name, another pod
    expect(inf.observeDeletion(pod('12'))).toBe(false); // deleted at once: the response is not marked
    watched(pod('12', { deleting: true }));
    expect(inf.observeDeletion(pod('12', { deleting: true }))).toBe(false); // the watch was first
    expect(events).toEqual(['add 10', 'update 10->12 deleting']);
  });

  it('a pod of the same name but another uid from the watch is taken (the name was reused)', () => {
    const { inf, events, watched } = informer();
    watched(pod('10'));
    inf.observeDeletion(pod('12', { deleting: true }));
    watched(pod('15', { uid: 'u2' }));
    expect(inf.get('ns/crit')?.metadata?.uid).toBe('u2');
    expect(events).toEqual(['add 10', 'update 10->12 deleting', 'update 12->15']);
  });
});
