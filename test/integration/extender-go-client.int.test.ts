/**
 * The Go client of `bench:extender --client go` (extender-client-go/main.go): kube-scheduler's own
 * HTTPExtender, built from the same k8s.io/kubernetes release as the testbed's binaries, making
 * rounds against the real extender over loopback HTTP. It is the evidence that the bench's figures
 * with `--client go` are rounds kube-scheduler's code makes and that our wire format decodes into
 * its Go types (ExtenderFilterResult, HostPriorityList), and that a failure is an error, not a figure.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { GoRoundClient, buildGoClient, round } from '../../experiments/bench/extender-client.ts';
import { ensureBinaries } from '../../experiments/testbed/binaries.ts';
import { silentLogger } from '../../core/logging.ts';

let server: ExtenderServer;
let url: string;
let client: GoRoundClient;
const names = Array.from({ length: 12 }, (_, i) => `n${i}`);

beforeAll(async () => {
  await ensureBinaries(); // the Go client is built in the Kubernetes binaries' module
  client = new GoRoundClient(buildGoClient((l) => process.stderr.write(`${l}\n`)));
  server = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 } }, log: silentLogger() });
  // nodes n0..n11 with cpu assurance 0..3 (n3, n7, n11 offer 3)
  names.forEach((name, i) =>
    server.state.upsertNode({ metadata: { name, annotations: { 'ulysses.io/assurance': JSON.stringify({ cpu: i % 4, memory: 1 }) }, resourceVersion: String(i + 1) } } as V1Node),
  );
  url = (await server.start()).url;
});
afterAll(async () => {
  await client?.close();
  await server?.stop();
});

const pod = (uid: string, annotations: Record<string, string>): V1Pod => ({
  metadata: { name: `p-${uid}`, namespace: 'ns', uid, annotations, labels: { 'ulysses.io/criticality': 'high' }, resourceVersion: '1' },
  spec: { containers: [{ name: 'c' }] },
});

describe("bench:extender's Go client (kube-scheduler's HTTPExtender)", () => {
  it('makes the same decisions as the Node client, timed', async () => {
    const p = pod('u1', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' });
    const go = await client.round(url, p, names);
    const node = await round(url, p, names);
    expect(go.feasible).toBe(6); // cpu 2 or 3: n2, n3, n6, n7, n10, n11
    expect(node.feasible).toBe(go.feasible);
    expect(go.endMs).toBeGreaterThan(go.startMs);
    expect(Math.abs(go.startMs - Date.now())).toBeLessThan(60_000); // Unix-epoch milliseconds
    expect(go.clientPreempted).toBeGreaterThanOrEqual(0);
  });

  it('follows a new node list', async () => {
    const p = pod('u2', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":3}}' });
    expect((await client.round(url, p, names)).feasible).toBe(3);
    expect((await client.round(url, p, names.slice(0, 4))).feasible).toBe(1);
  });

  it('with -gc-between-rounds (profile clientGcBetweenRounds of bench:extender) makes the same rounds', async () => {
    const gc = new GoRoundClient(buildGoClient(() => undefined), undefined, true);
    try {
      const p = pod('u5', { 'ulysses.io/assurance-policy': '{"policy":"threshold","min":{"cpu":2}}' });
      for (let i = 0; i < 3; i++) {
        const r = await gc.round(url, p, names);
        expect(r.feasible).toBe(6);
        expect(r.endMs).toBeGreaterThan(r.startMs);
      }
    } finally {
      await gc.close();
    }
  });

  it('turns an unreachable extender into an error naming it, not a timing', async () => {
    await expect(client.round('http://127.0.0.1:1', pod('u3', {}), names)).rejects.toThrow(/round against http:\/\/127\.0\.0\.1:1: .*connection refused/);
    // and the client is still usable afterwards
    expect((await client.round(url, pod('u4', {}), names)).feasible).toBe(12);
  });
});
