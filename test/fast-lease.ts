import { silentLogger } from '../core/logging.ts';

/** The Lease timings of the extender replicas in tests (unit and integration): a takeover within seconds. */
export const FAST_LEASE = { leaseDurationSeconds: 3, renewDeadlineSeconds: 2, retryPeriodSeconds: 0.5 } as const;

/** ExtenderLeadership options of a unit test's replica `identity` (the extender's Lease, FAST_LEASE, silent, nothing on stop). */
export function testLeadership(identity: string) {
  return { namespace: 'ulysses-system', name: 'ulysses-scheduler-extender', identity, ...FAST_LEASE, log: silentLogger(), onStopped: () => undefined };
}
