/**
 * The real 5G user plane, no Kubernetes yet (issue 41; docs/development/eupf.md): eUPF v0.7.1 built
 * from its pinned module, an SMF stand-in (go-pfcp) and a gNB/UE stand-in (go-gtp) in network
 * namespaces. experiments/5g/eupf/dataplane-check.sh asserts on the stand-ins' protocol events:
 * a UE's packets come back through eUPF 1's XDP path; after eUPF 1 is killed and eUPF 2 starts on a
 * new IP, eUPF 2 gets the association and the same session (UE IP, TEIDs), the gNB is told the new
 * N3 address, and a GTP-U reply comes back through eUPF 2 (connection restored), forwarded by its
 * XDP program. No timing is asserted; the script prints the times.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);

describe('eUPF user plane in network namespaces', () => {
  it('PFCP association and session, a GTP-U round trip through eUPF, and the same session restored on a new eUPF after a failover', async () => {
    const r = await run('bash', ['experiments/5g/eupf/dataplane-check.sh'], {
      env: { ...process.env, RUNS: '1', LOGDIR: '/tmp/ulysses-it-eupf-dataplane' },
      maxBuffer: 16 << 20,
      timeout: 15 * 60_000,
    }).catch((err: { stdout?: string; stderr?: string; message: string }) => {
      throw new Error(`dataplane-check.sh failed: ${err.message}\n${err.stdout ?? ''}\n${err.stderr ?? ''}`);
    });
    const out = r.stdout;
    expect(out).toMatch(/run 1: UPF 1 ready \d+ ms after start; association \+\d+ ms, session \+\d+ ms, first reply \+\d+ ms/);
    expect(out).toMatch(/run 1: kill -> heartbeat-lost \d+ ms; UPF 2 \(new IP 10\.203\.0\.3\), from its start: ready \d+ ms, association \d+ ms, session \d+ ms, gNB updated \d+ ms, connection restored \d+ ms/);
    expect(out.trim().split('\n').at(-1)).toBe('PASS');
  }, 20 * 60_000);
});
