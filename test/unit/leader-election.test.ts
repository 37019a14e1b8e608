import { describe, expect, it } from 'vitest';
import { microTime, parseDurationSeconds as parseSeconds, validateLeaderElection } from '../../core/leader-election.ts';

describe('leader election settings', () => {
  it('MicroTime has exactly 6 fractional digits (the apiserver rejects 3)', () => {
    expect(microTime(Date.UTC(2026, 0, 2, 3, 4, 5, 678))).toBe('2026-01-02T03:04:05.678000Z');
  });
  it('validates as client-go: lease > renew > retry * 1.2, naming the setting', () => {
    expect(() => validateLeaderElection({ leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 2 })).not.toThrow();
    expect(() => validateLeaderElection({ leaseDurationSeconds: 10, renewDeadlineSeconds: 10, retryPeriodSeconds: 2 })).toThrow(/leaseDurationSeconds \(10\) must be greater than renewDeadlineSeconds/);
    expect(() => validateLeaderElection({ leaseDurationSeconds: 15, renewDeadlineSeconds: 2, retryPeriodSeconds: 2 })).toThrow(/renewDeadlineSeconds \(2\) must be greater than retryPeriodSeconds/);
    expect(() => validateLeaderElection({ leaseDurationSeconds: 15, renewDeadlineSeconds: 10, retryPeriodSeconds: 0 })).toThrow(/retryPeriodSeconds must be > 0/);
  });
  it('duration flags accept 15s, 500ms, 2m and plain seconds', () => {
    expect(parseSeconds('x', '15s')).toBe(15);
    expect(parseSeconds('x', '500ms')).toBe(0.5);
    expect(parseSeconds('x', '2m')).toBe(120);
    expect(parseSeconds('x', '3')).toBe(3);
    expect(() => parseSeconds('leader-elect-lease-duration', 'soon')).toThrow(/--leader-elect-lease-duration: invalid duration "soon"/);
  });
});
