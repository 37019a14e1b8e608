/**
 * Scenario 5g with eUPF (issue 41): the user plane's events in a results line, the run condition that
 * keeps them apart from the UDP-echo runs, the events a repetition waits for, and the report's table
 * of connection restored − UPF ready and its figures.
 */
import { describe, expect, it } from 'vitest';
import { parseResults, resultEvents, type ConfigId, type FailoverEvents, type RepResult } from '../../experiments/harness/results.ts';
import { SummaryIndex, summarize } from '../../experiments/harness/stats.ts';
import { MAX_RESTORED_AFTER_READY_S, renderReport, upstreamTable, userPlaneTable } from '../../experiments/harness/report.ts';
import { conditionFields, conditionMismatch } from '../../experiments/harness/experiment.ts';
import { awaitedEvents } from '../../experiments/harness/scenario.ts';

const events = (ready: number, restored: number | null): FailoverEvents => ({
  prioScheduled: ready - 1,
  prioReady: ready,
  prioUp: null,
  prioEndpointReady: ready + 0.02,
  lastScheduled: ready + 2,
  lastReady: ready + 5,
  upfAssociation: restored === null ? null : restored - 0.004,
  upfSession: restored === null ? null : restored - 0.003,
  gnbUpdated: restored === null ? null : restored - 0.001,
  connectionRestored: restored,
});
const rep = (config: ConfigId, r: number, e: FailoverEvents): RepResult => ({ config, dn: 1, podsPerNode: 5, rep: r, events: e, scenario: '5g', userPlane: 'eupf' });

describe('scenario 5g with eUPF', () => {
  it('records the user plane events and the UPF in a results line, and reads them back', () => {
    const line = JSON.stringify(rep(5, 0, events(1.5, 1.62)));
    const [r] = parseResults(line, 'results.jsonl');
    expect(r!.events.connectionRestored).toBe(1.62);
    expect(r!.userPlane).toBe('eupf');
    expect(resultEvents([r!])).toEqual(['prioScheduled', 'prioReady', 'prioUp', 'prioEndpointReady', 'lastScheduled', 'lastReady', 'upfAssociation', 'upfSession', 'gnbUpdated', 'connectionRestored']);
    expect(() => parseResults(JSON.stringify({ ...rep(5, 0, events(1, 1.1)), userPlane: 'open5gs' }), 'results.jsonl')).toThrow(/userPlane/);
  });

  it('does not resume a directory of the UDP echo stand-in runs', () => {
    const echo: RepResult[] = [{ config: 1, dn: 1, podsPerNode: 5, rep: 0, events: events(1, null), scenario: '5g' }];
    expect(conditionFields({ scenario: '5g', userPlane: 'eupf' })).toEqual({ scenario: '5g', userPlane: 'eupf' });
    expect(conditionMismatch(echo, { scenario: '5g', userPlane: 'eupf' })).toMatch(/scenario 5g \(UPF: UDP echo stand-in\).*scenario 5g \(UPF: eupf\)/);
    expect(conditionMismatch([rep(1, 0, events(1, 1.1))], { scenario: '5g', userPlane: 'eupf' })).toBeUndefined();
  });

  it('waits for the user plane events instead of the UDP probe', () => {
    expect(awaitedEvents(false, false, 'taint', true)).toEqual(['prioScheduled', 'prioReady', 'prioEndpointReady', 'lastScheduled', 'lastReady', 'upfAssociation', 'upfSession', 'gnbUpdated', 'connectionRestored']);
    expect(awaitedEvents(true)).not.toContain('connectionRestored');
  });

  it('reports connection restored − UPF ready per configuration against its limit, and connection restored against stock', () => {
    const results = [
      ...[0, 1, 2].map((r) => rep('upstream', r, events(10 + r, 10.5 + r))), // 0.5 s after ready: missed
      ...[0, 1, 2].map((r) => rep(5, r, events(1 + r / 10, 1.05 + r / 10))), // 0.05 s: met
    ];
    const index = new SummaryIndex(summarize(results));
    const table = userPlaneTable(results, index)!;
    expect(table).toContain(`within ${MAX_RESTORED_AFTER_READY_S} s`);
    expect(table).toMatch(/\| DN 1, 5 \| upstream \| 3 \| 0\.496 \| 0\.500 \| \*\*missed\*\* \|/);
    expect(table).toMatch(/\| DN 1, 5 \| 5 \| 3 \| 0\.046 \| 0\.050 \| met \|/);
    const up = upstreamTable(results, index)!;
    expect(up).toMatch(/\| Connection restored \| 11\.50 \| 1\.15 \|/);
    expect(up).toMatch(/Connection restored: reduction of config 5 vs upstream/);
    expect(renderReport(results, summarize(results))).toContain('## User plane after the UPF pod is Ready (scenario 5g)');
  });

  it('has no user plane table without the user plane events', () => {
    const plain: RepResult[] = [{ config: 5, dn: 1, podsPerNode: 5, rep: 0, events: { prioScheduled: 1, prioReady: 2, prioUp: 2.1, prioEndpointReady: 2.2, lastScheduled: 3, lastReady: 4 } }];
    expect(userPlaneTable(plain, new SummaryIndex(summarize(plain)))).toBeUndefined();
  });
});
