import { describe, expect, it } from 'vitest';
import { parseRtAnnotation, parseRtCapacityAnnotation } from '../../scheduler-plugins/realtime/annotations.ts';

describe('ulysses.io/rt', () => {
  it('parses the three shapes and tells them apart by their keys', () => {
    const ds = parseRtAnnotation('{"server":{"budgetUs":2000,"periodUs":10000},"tasks":[{"wcetUs":500,"periodUs":10000,"deadlineUs":10000,"priority":1}]}');
    expect(ds).toEqual({
      ok: true,
      value: { kind: 'deferrable-server', server: { budgetUs: 2000, periodUs: 10000 }, tasks: [{ wcetUs: 500, periodUs: 10000, deadlineUs: 10000, priority: 1 }] },
    });
    const bp = parseRtAnnotation({ reservation: { runtimeUs: 2000, periodUs: 10000 }, tasks: [] });
    expect(bp).toEqual({ ok: true, value: { kind: 'budget-period', reservation: { runtimeUs: 2000, periodUs: 10000, cpus: 1 }, tasks: [] } });
    expect(parseRtAnnotation('{"tasks":[{"wcetUs":1,"periodUs":2}]}')).toEqual({ ok: true, value: { kind: 'edf', tasks: [{ wcetUs: 1, periodUs: 2 }] } });
  });

  it('names the annotation and the field', () => {
    const r = parseRtAnnotation('{"tasks":[{"wcetUs":0,"periodUs":10000}]}');
    expect(r).toMatchObject({ ok: false, error: 'ulysses.io/rt: tasks.0.wcetUs: must be > 0', issues: [{ field: 'tasks.0.wcetUs' }] });
    expect(parseRtAnnotation('{"server":{"budgetUs":0,"periodUs":10000}}')).toMatchObject({ ok: false, error: 'ulysses.io/rt: server.budgetUs: must be > 0' });
    expect(parseRtAnnotation('{"server":{"budgetUs":20000,"periodUs":10000}}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/rt: server.budgetUs: must be <= periodUs (10000)',
    });
    expect(parseRtAnnotation('{"reservation":{"runtimeUs":2000,"periodUs":1000,"cpus":0}}')).toMatchObject({
      ok: false,
      issues: [{ field: 'reservation.cpus', message: 'must be >= 1' }, { field: 'reservation.runtimeUs', message: 'must be <= periodUs (1000)' }],
    });
    expect(parseRtAnnotation('{"tasks":[{"wcetUs":1.5,"periodUs":"10"}]}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/rt: tasks.0.wcetUs: must be an integer (microseconds); ulysses.io/rt: tasks.0.periodUs: must be a number',
    });
    expect(parseRtAnnotation('{"server":{"periodUs":10}}')).toMatchObject({ ok: false, error: 'ulysses.io/rt: server.budgetUs: is required' });
  });

  it('rejects misspelt keys instead of ignoring them', () => {
    const r = parseRtAnnotation('{"server":{"budgetUs":10,"periodUs":100,"priority":3}}');
    expect(r).toMatchObject({ ok: false, issues: [{ field: 'server', message: expect.stringContaining('"priority"') }] });
    expect(parseRtAnnotation('{"tasks":[{"wcetUs":1,"periodUs":2,"wcet":3}]}')).toMatchObject({ ok: false, issues: [{ field: 'tasks.0' }] });
  });

  it('accepts a deadline shorter than the WCET (unschedulable, not malformed)', () => {
    expect(parseRtAnnotation('{"tasks":[{"wcetUs":5,"periodUs":10,"deadlineUs":4}]}').ok).toBe(true);
  });

  it('never throws: bad JSON, wrong types, missing, ambiguous', () => {
    expect(parseRtAnnotation('{"tasks":')).toMatchObject({ ok: false, error: expect.stringMatching(/^ulysses\.io\/rt: \(json\): invalid JSON/) });
    expect(parseRtAnnotation('[1,2]')).toMatchObject({ ok: false, error: expect.stringMatching(/^ulysses\.io\/rt: \(root\): /) });
    expect(parseRtAnnotation(undefined)).toMatchObject({ ok: false, error: 'ulysses.io/rt: (root): annotation is missing' });
    expect(parseRtAnnotation('{"tasks":[]}')).toMatchObject({ ok: false, error: 'ulysses.io/rt: tasks: at least one task is required' });
    expect(parseRtAnnotation({ server: { budgetUs: 1, periodUs: 2 }, reservation: { runtimeUs: 1, periodUs: 2 } })).toMatchObject({
      ok: false,
      error: expect.stringMatching(/mutually exclusive/),
    });
    expect(parseRtAnnotation(`{"tasks":[{"wcetUs":1,"periodUs":${4e9}}]}`)).toMatchObject({ ok: false, issues: [{ field: 'tasks.0.periodUs' }] });
  });
});

describe('ulysses.io/rt-capacity', () => {
  it('parses and validates', () => {
    expect(parseRtCapacityAnnotation('{"cores":2,"maxUtilization":0.95}')).toEqual({ ok: true, value: { cores: 2, maxUtilization: 0.95 } });
    expect(parseRtCapacityAnnotation('{"cores":4}')).toEqual({ ok: true, value: { cores: 4 } });
    expect(parseRtCapacityAnnotation('{"cores":0,"maxUtilization":1.2}')).toMatchObject({
      ok: false,
      error: 'ulysses.io/rt-capacity: cores: must be >= 1; ulysses.io/rt-capacity: maxUtilization: must be <= 1',
    });
    expect(parseRtCapacityAnnotation('{"maxUtilization":0}')).toMatchObject({ ok: false, issues: [{ field: 'cores', message: 'is required' }, { field: 'maxUtilization', message: 'must be > 0' }] });
  });
});
