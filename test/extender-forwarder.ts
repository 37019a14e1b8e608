/**
 * A Service in miniature for extender replicas on the testbed: /readyz of every backend polled (a
 * readiness probe every 100 ms); a new connection goes to a Ready backend, or is refused (reset)
 * when none is, as kube-proxy rejects a Service without ready endpoints. Open connections stay
 * where they are until either side closes (as an established flow through kube-proxy does).
 */
import net from 'node:net';

async function readyz(port: number): Promise<boolean> {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) });
    await r.text();
    return r.status === 200;
  } catch {
    return false;
  }
}

export class ReadyForwarder {
  /** The backend new connections go to (the first Ready one), if any. */
  ready: string | undefined;
  /** Connections sent to each backend so far. */
  readonly connections = new Map<string, number>();
  private readonly server: net.Server;
  private readonly timer: NodeJS.Timeout;
  private readonly sockets = new Set<net.Socket>();
  private probing = false;

  /** `backends`: name -> port on 127.0.0.1, read at every probe (replicas may come and go). */
  constructor(
    port: number,
    private readonly backends: () => Record<string, number>,
  ) {
    this.server = net.createServer((client) => {
      const target = this.ready;
      const targetPort = target !== undefined ? this.backends()[target] : undefined;
      if (target === undefined || targetPort === undefined) return void client.resetAndDestroy();
      this.connections.set(target, (this.connections.get(target) ?? 0) + 1);
      const upstream = net.connect(targetPort, '127.0.0.1');
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
      }
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.resetAndDestroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream).pipe(client);
    });
    this.server.listen(port, '127.0.0.1');
    this.timer = setInterval(() => void this.probe(), 100);
  }

  private async probe(): Promise<void> {
    if (this.probing) return;
    this.probing = true;
    try {
      const entries = Object.entries(this.backends());
      const states = await Promise.all(entries.map(async ([name, port]) => ((await readyz(port)) ? name : undefined)));
      this.ready = states.find((s) => s !== undefined);
    } finally {
      this.probing = false;
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
