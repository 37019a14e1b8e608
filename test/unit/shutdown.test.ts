/**
 * onShutdownSignal in a real child node process: a second SIGTERM during the stop (as `npm run` or a
 * process-group kill relays it) does not kill the process half-way; a stop that hangs is ended by
 * the grace deadline with status 1.
 */
import { describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const shutdownModule = fileURLToPath(new URL('../../core/shutdown.ts', import.meta.url));

function child(stopMs: number, graceMs: number) {
  const script = `
    import { onShutdownSignal } from ${JSON.stringify(shutdownModule)};
    onShutdownSignal(async () => {
      console.log('stop begun');
      await new Promise((r) => setTimeout(r, ${stopMs}));
      console.log('stop done');
    }, { graceMs: ${graceMs} });
    setInterval(() => undefined, 1000);
    console.log('ready');
  `;
  const p = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  p.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const waitFor = (text: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => out.includes(text) && resolve();
      p.stdout.on('data', check);
      p.once('exit', () => (out.includes(text) ? resolve() : reject(new Error(`exited before printing "${text}": ${out}`))));
      check();
    });
  return { p, waitFor, output: () => out };
}

describe('onShutdownSignal', () => {
  it('runs the stop once; a repeated SIGTERM does not cut it short', async () => {
    const c = child(500, 10_000);
    await c.waitFor('ready');
    c.p.kill('SIGTERM');
    await c.waitFor('stop begun');
    c.p.kill('SIGTERM');
    c.p.kill('SIGINT');
    const [code] = await once(c.p, 'exit');
    expect(code).toBe(0);
    expect(c.output()).toContain('stop done');
    expect(c.output().match(/stop begun/g)).toHaveLength(1);
  });

  it('a stop that does not finish within graceMs exits with status 1', async () => {
    const c = child(60_000, 300);
    await c.waitFor('ready');
    c.p.kill('SIGTERM');
    const [code] = await once(c.p, 'exit');
    expect(code).toBe(1);
    expect(c.output()).not.toContain('stop done');
  });
});
