import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError, loadConfigFile, validateConfig } from '../../core/config.ts';
import { metricsRegistry, serveMetrics } from '../../core/metrics.ts';

const schema = z.object({
  mode: z.enum(['vanilla', 'periodic']),
  workers: z.number().int().positive(),
  periods: z.record(z.string(), z.number().positive()).default({}),
});

describe('configuration loading', () => {
  it('returns the parsed value with defaults', () => {
    expect(validateConfig(schema, { mode: 'vanilla', workers: 5 }, 'inline')).toEqual({ mode: 'vanilla', workers: 5, periods: {} });
  });

  it('names every offending field and the source', () => {
    let err: unknown;
    try {
      validateConfig(schema, { mode: 'fast', workers: -1, periods: { replicaset: 'x' } }, 'cm.yaml');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const ce = err as ConfigError;
    expect(ce.source).toBe('cm.yaml');
    expect(ce.issues.map((i) => i.field).sort()).toEqual(['mode', 'periods.replicaset', 'workers']);
    expect(ce.message).toContain('invalid configuration in cm.yaml');
    expect(ce.message).toMatch(/workers: .*>\s*0|workers: .*positive|workers: .*greater/i);
  });

  it('reports YAML syntax errors and missing files as ConfigError, not crashes', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ulysses-config-'));
    const bad = join(dir, 'bad.yaml');
    await writeFile(bad, 'mode: [unclosed\n');
    await expect(loadConfigFile(schema, bad)).rejects.toMatchObject({ name: 'ConfigError', issues: [{ field: '(syntax)' }] });
    await expect(loadConfigFile(schema, join(dir, 'missing.yaml'))).rejects.toMatchObject({ issues: [{ field: '(file)' }] });
    const good = join(dir, 'good.yaml');
    await writeFile(good, 'mode: periodic\nworkers: 5\nperiods:\n  replicaset: 100\n');
    expect(await loadConfigFile(schema, good)).toEqual({ mode: 'periodic', workers: 5, periods: { replicaset: 100 } });
  });
});

describe('metrics endpoint', () => {
  it('serves the process registry on /metrics', async () => {
    const { Counter } = await import('prom-client');
    const c = new Counter({ name: 'ulysses_test_total', help: 'test', registers: [metricsRegistry()] });
    c.inc(3);
    const srv = await serveMetrics(0, '127.0.0.1');
    try {
      const body = await (await fetch(`http://127.0.0.1:${srv.port}/metrics`)).text();
      expect(body).toContain('ulysses_test_total 3');
      expect(body).toContain('process_cpu_seconds_total');
      expect((await fetch(`http://127.0.0.1:${srv.port}/nope`)).status).toBe(404);
    } finally {
      await srv.close();
    }
  });
});
