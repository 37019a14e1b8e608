import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CriticalWrites, criticalWrites } from '../../core/critical-writes.ts';
import { KubeClient } from '../../core/kube.ts';
import { parseLightKubeconfig } from '../../core/kubeconfig.ts';
import { settle } from '../../core/clock.ts';

describe('CriticalWrites', () => {
  it('clear() resolves at once with no critical write in flight, and when the last one settles otherwise', async () => {
    const w = new CriticalWrites(60_000);
    let cleared = false;
    await w.clear();
    let release!: () => void;
    const write = w.critical(() => new Promise<void>((r) => (release = r)));
    const second = w.critical(() => Promise.resolve('done'));
    void w.clear().then(() => (cleared = true));
    expect(await second).toBe('done');
    await settle();
    expect(cleared).toBe(false); // the first is still in flight
    release();
    await write;
    await settle();
    expect(cleared).toBe(true);
  });

  it('a critical write that fails still clears, and a hanging one holds the others at most maxDeferMs', async () => {
    vi.useFakeTimers();
    try {
      const w = new CriticalWrites(250);
      await expect(w.critical(() => Promise.reject(new Error('conflict')))).rejects.toThrow('conflict');
      expect(w.busy).toBe(false);
      void w.critical(() => new Promise<void>(() => {}));
      let cleared = false;
      void w.clear().then(() => (cleared = true));
      await vi.advanceTimersByTimeAsync(249);
      expect(cleared).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(cleared).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('CriticalWrites.expect: a critical write that is due', () => {
  it('holds the others until the due write has started and settled', async () => {
    const w = new CriticalWrites(60_000, 60_000);
    w.expect();
    expect(w.busy).toBe(true);
    let cleared = false;
    void w.clear().then(() => (cleared = true));
    await settle();
    expect(cleared).toBe(false); // nothing in flight yet, but the create is due
    let release!: () => void;
    const create = w.critical(() => new Promise<void>((r) => (release = r)));
    await settle();
    expect(cleared).toBe(false);
    release();
    await create;
    await settle();
    expect(cleared).toBe(true);
    expect(w.busy).toBe(false);
  });

  it('holds them at most maxExpectMs when the due write never comes', async () => {
    vi.useFakeTimers();
    try {
      const w = new CriticalWrites(250, 100);
      w.expect();
      let cleared = false;
      void w.clear().then(() => (cleared = true));
      await vi.advanceTimersByTimeAsync(99);
      expect(cleared).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(cleared).toBe(true);
      expect(w.busy).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('KubeClient: writes on the critical path first', () => {
  let server: Server;
  let base = '';
  const arrived: string[] = [];
  let holdCritical: ServerResponse | undefined;
  const pending = new Set<() => void>();

  beforeAll(async () => {
    server = createServer((req: IncomingMessage, res: ServerResponse) => {
      arrived.push(`${req.method} ${req.url}`);
      req.resume();
      res.setHeader('Content-Type', 'application/json');
      // the critical create is answered only when the test says so
      if (req.url === '/api/v1/namespaces/n/pods') holdCritical = res;
      else res.end('{}');
      for (const p of pending) p();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  /** Resolves when `n` requests have reached the server (no sleeping). */
  const arrivals = (n: number) =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (arrived.length >= n) {
          pending.delete(check);
          resolve();
        }
      };
      pending.add(check);
      check();
    });

  it('an Event, an EndpointSlice update and a status write wait for a critical create in flight; reads do not', async () => {
    const kc = parseLightKubeconfig(
      `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${base}", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`,
      'test',
    );
    const client = new KubeClient(kc);
    const create = client.post('/api/v1/namespaces/n/pods', { metadata: { generateName: 'prio-' } }, { critical: true });
    await arrivals(1);
    expect(criticalWrites.busy).toBe(true);
    const others = [
      client.post('/api/v1/namespaces/n/events', {}),
      client.put('/apis/discovery.k8s.io/v1/namespaces/n/endpointslices/s', {}),
      client.put('/apis/apps/v1/namespaces/n/replicasets/r/status', {}),
    ];
    await client.get('/api/v1/namespaces/n/pods/p');
    expect(arrived).toEqual(['POST /api/v1/namespaces/n/pods', 'GET /api/v1/namespaces/n/pods/p']);
    holdCritical!.end('{}');
    await create;
    await Promise.all(others);
    expect(arrived.slice(2).sort()).toEqual([
      'POST /api/v1/namespaces/n/events',
      'PUT /apis/apps/v1/namespaces/n/replicasets/r/status',
      'PUT /apis/discovery.k8s.io/v1/namespaces/n/endpointslices/s',
    ]);
    expect(criticalWrites.busy).toBe(false);
  });
});
