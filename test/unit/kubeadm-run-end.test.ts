// What `ulysses experiment failover --kubeadm` does with the cluster when it ends
// (experiments/harness/kubeadm-configurator.ts kubeadmRunEnd).

import { describe, expect, it } from 'vitest';
import { kubeadmRunEnd } from '../../experiments/harness/kubeadm-configurator.ts';

describe('the end of a kubeadm run', () => {
  it('takes down a kubeadm testbed it brought up itself when the run fails', () => {
    expect(kubeadmRunEnd({ broughtUpTestbed: true, failed: true })).toBe('down');
  });

  it('--keep-testbed leaves it up (restored, for a look into it)', () => {
    expect(kubeadmRunEnd({ broughtUpTestbed: true, failed: true, keepTestbed: true })).toBe('restore');
  });

  it('leaves alone a testbed that was up before the run, failed or not', () => {
    expect(kubeadmRunEnd({ broughtUpTestbed: false, failed: true })).toBe('restore');
    expect(kubeadmRunEnd({ broughtUpTestbed: false, failed: false })).toBe('restore');
  });

  it('keeps the testbed it brought up after a run that succeeded (the next run reuses it)', () => {
    expect(kubeadmRunEnd({ broughtUpTestbed: true, failed: false })).toBe('restore');
  });
});
