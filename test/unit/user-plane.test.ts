/** The SMF's address source from the UPF Service's EndpointSlices (experiments/5g/user-plane.ts). */
import { describe, expect, it } from 'vitest';
import type { V1EndpointSlice } from '@kubernetes/client-node';
import { upfAddressFrom, userPlaneTimes, type StandinEvent } from '../../experiments/5g/user-plane.ts';

const slice = (endpoints: Array<[string, { ready?: boolean; terminating?: boolean }]>, addressType = 'IPv4'): V1EndpointSlice => ({
  addressType,
  endpoints: endpoints.map(([ip, conditions]) => ({ addresses: [ip], conditions })),
});

describe('upfAddressFrom', () => {
  it('is undefined while no endpoint is ready (the SMF keeps what it has)', () => {
    expect(upfAddressFrom([], undefined)).toBeUndefined();
    expect(upfAddressFrom([slice([['10.244.1.5', { ready: false }]])], '10.244.1.5')).toBeUndefined();
  });

  it('keeps the current UPF while it stays ready, even beside another ready one', () => {
    expect(upfAddressFrom([slice([['10.244.2.7', { ready: true }], ['10.244.1.5', { ready: true }]])], '10.244.2.7')).toBe('10.244.2.7');
  });

  it('moves to the replacement once the old pod is terminating (not ready), whatever the slice order', () => {
    const old = slice([['10.244.1.5', { ready: false, terminating: true }]]);
    const fresh = slice([['10.244.2.7', { ready: true }]]);
    expect(upfAddressFrom([old, fresh], '10.244.1.5')).toBe('10.244.2.7');
    expect(upfAddressFrom([fresh, old], '10.244.1.5')).toBe('10.244.2.7');
  });

  it('never takes a terminating endpoint that still says ready, nor an IPv6 slice', () => {
    expect(upfAddressFrom([slice([['10.244.1.5', { ready: true, terminating: true }]])], undefined)).toBeUndefined();
    expect(upfAddressFrom([slice([['fd00::5', { ready: true }]], 'IPv6')], undefined)).toBeUndefined();
  });

  it('picks the same one of several ready endpoints for every caller (the lowest address)', () => {
    expect(upfAddressFrom([slice([['10.244.2.7', { ready: true }], ['10.244.1.5', { ready: true }]])], undefined)).toBe('10.244.1.5');
  });
});

describe('userPlaneTimes', () => {
  const t0 = 1_800_000_000_000; // ms
  const at = (ms: number) => (t0 + ms) * 1e6;
  const ev = (src: StandinEvent['src'], event: string, ms: number, fields: Record<string, unknown>): StandinEvent => ({ t_ns: at(ms), src, event, ...fields });

  it('takes the first event of each kind about the new UPF after t = 0, in seconds', () => {
    const events = [
      ev('smf', 'association', -5000, { upf: '10.244.1.5:8805' }),
      ev('gnb', 'n3-changed', -4990, { upf_n3: '10.244.1.5:2152' }),
      ev('smf', 'heartbeat-lost', 1200, { upf: '10.244.1.5:8805' }),
      ev('smf', 'association-failed', 3000, { upf: '10.244.2.7:8805' }),
      ev('smf', 'association', 3250, { upf: '10.244.2.7:8805' }),
      ev('smf', 'sessions-ready', 3251.5, { upf: '10.244.2.7:8805' }),
      ev('gnb', 'n3-changed', 3253, { upf_n3: '10.244.2.7:2152' }),
      ev('gnb', 'connection-restored', 3254.25, { via: '10.244.2.7' }),
      ev('smf', 'association', 9000, { upf: '10.244.2.7:8805' }),
    ];
    expect(userPlaneTimes(events, '10.244.1.5', t0)).toEqual({ upfAssociation: 3.25, upfSession: 3.2515, gnbUpdated: 3.253, connectionRestored: 3.25425 });
  });

  it('leaves null what concerned only the old UPF, or came before t = 0', () => {
    const events = [
      ev('smf', 'association', -10, { upf: '10.244.2.7:8805' }),
      ev('smf', 'association', 500, { upf: '10.244.1.5:8805' }), // the old UPF re-associated (a restart in place)
      ev('gnb', 'connection-restored', 800, { via: '10.244.1.5' }),
    ];
    expect(userPlaneTimes(events, '10.244.1.5', t0)).toEqual({ upfAssociation: null, upfSession: null, gnbUpdated: null, connectionRestored: null });
  });
});
