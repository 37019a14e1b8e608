/**
 * Who may call the scheduler extender (issue 42 item 1), on the real server over real TLS sockets:
 * kube-scheduler's client certificate from the extender's own CA opens the verbs; no certificate,
 * another CA's, or another name is refused 403 (a verb path the router would decode too); the probes
 * stay open; plain HTTP on a non-loopback address is refused at start; a renewed certificate is
 * served without a restart. And the PKI the installer issues (core/extender-pki.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueExtenderPki, issueLeaf, pkiProblem, SCHEDULER_CLIENT_NAME, type ExtenderPki, type KeyPair } from '../../core/extender-pki.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import { checkListenSecurity, isLoopback } from '../../scheduler-plugins/extender/tls.ts';
import { pollUntil } from '../../core/poll.ts';
import { silentLogger } from '../../core/logging.ts';

const CLUSTER_IP = '10.96.0.250';
const dir = mkdtempSync(join(tmpdir(), 'ulysses-extender-tls-'));
let pki: ExtenderPki;
let other: ExtenderPki;
let server: ExtenderServer;
let port = 0;
const tls = { certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key'), clientCAFile: join(dir, 'ca.crt') };
const writeServing = (p: ExtenderPki) => {
  writeFileSync(tls.certFile, p.serving.cert);
  writeFileSync(tls.keyFile, p.serving.key);
  writeFileSync(tls.clientCAFile, p.ca.cert);
};

interface Answer {
  status: number;
  body: string;
}
/** One HTTPS call on a new connection, verifying the server against `ca` (by the name 127.0.0.1). */
function call(method: string, path: string, o: { ca: string; client?: KeyPair; body?: unknown }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = request(
      { host: '127.0.0.1', port, method, path, ca: o.ca, cert: o.client?.cert, key: o.client?.key, agent: false, headers: body ? { 'content-type': 'application/json' } : {} },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}
const filterArgs = { Pod: { metadata: { name: 'p', namespace: 'default', uid: 'u1' }, spec: { containers: [{ name: 'c' }] } }, NodeNames: [] };

beforeAll(async () => {
  pki = await issueExtenderPki(CLUSTER_IP);
  other = await issueExtenderPki(CLUSTER_IP);
  writeServing(pki);
  server = new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, tls }, log: silentLogger(), tlsFilesCheckMs: 50 });
  ({ port } = await server.start());
});
afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("the extender answers kube-scheduler's client certificate only", () => {
  it('serves the verbs to kube-scheduler (its CN, the extender CA)', async () => {
    const r = await call('POST', '/filter', { ca: pki.ca.cert, client: pki.client, body: filterArgs });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.body)).toHaveProperty('NodeNames');
  });
  it('refuses a call without a client certificate, naming what it needs', async () => {
    const r = await call('POST', '/bind', { ca: pki.ca.cert, body: { PodName: 'p', PodNamespace: 'default', PodUID: 'u1', Node: 'control-plane' } });
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body).error).toMatch(/answers kube-scheduler only \(client certificate, CN system:kube-scheduler\): no client certificate/);
  });
  it("refuses another CA's certificate, even with kube-scheduler's name", async () => {
    const r = await call('POST', '/bind', { ca: pki.ca.cert, client: other.client, body: {} });
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body).error).toMatch(/client certificate not accepted/);
  });
  it("refuses the extender CA's certificate of another name", async () => {
    const node = await issueLeaf(pki.ca, { cn: 'system:node:worker-1', usage: 'client' });
    const r = await call('POST', '/filter', { ca: pki.ca.cert, client: node, body: filterArgs });
    expect(r.status).toBe(403);
    expect(JSON.parse(r.body).error).toMatch(/client "system:node:worker-1" is not among system:kube-scheduler/);
  });
  it('refuses every path but the open reads: an encoded verb, an unknown path', async () => {
    for (const path of ['/%62ind', '/bind/', '/BIND', '/nothing']) {
      const r = await call('POST', path, { ca: pki.ca.cert, body: {} });
      expect(r.status, path).toBe(403);
    }
    expect((await call('GET', '/metrics?x', { ca: pki.ca.cert })).status).toBe(200);
  });
  it('keeps /healthz and /readyz open to probes without a certificate', async () => {
    expect(await call('GET', '/healthz', { ca: pki.ca.cert })).toEqual({ status: 200, body: 'ok' });
    expect((await call('GET', '/readyz', { ca: pki.ca.cert })).status).toBe(200);
  });
  it('serves a renewed certificate without a restart', async () => {
    const renewed = await issueExtenderPki(CLUSTER_IP);
    writeServing(renewed);
    // new connections are verified against the new CA once the files are re-read
    await pollUntil('the renewed certificate served', () => call('GET', '/healthz', { ca: renewed.ca.cert }).then((r) => r.status === 200, () => false), { timeoutMs: 20_000, intervalMs: 50 });
    expect((await call('POST', '/filter', { ca: renewed.ca.cert, client: renewed.client, body: filterArgs })).status).toBe(200);
    // the old client certificate's CA is no longer trusted
    expect((await call('POST', '/filter', { ca: renewed.ca.cert, client: pki.client, body: filterArgs })).status).toBe(403);
    writeServing(pki);
    await pollUntil('the first certificate served again', () => call('GET', '/healthz', { ca: pki.ca.cert }).then((r) => r.status === 200, () => false), { timeoutMs: 20_000, intervalMs: 50 });
  });
});

describe('plain HTTP only on loopback', () => {
  it('knows loopback addresses', () => {
    for (const h of ['127.0.0.1', '127.3.4.5', '::1', 'localhost']) expect(isLoopback(h), h).toBe(true);
    for (const h of ['0.0.0.0', '::', '10.96.0.250', '128.0.0.1', 'example.com']) expect(isLoopback(h), h).toBe(false);
  });
  it('refuses to start on a network address without tls, naming the field and the fix', async () => {
    expect(() => checkListenSecurity('0.0.0.0', undefined)).toThrow(/listen.host 0.0.0.0 without tls would let any pod that reaches it bind pods to nodes: set tls/);
    expect(() => checkListenSecurity('0.0.0.0', { ...tls, clientNames: [SCHEDULER_CLIENT_NAME] })).not.toThrow();
    const open = new ExtenderServer({ config: { listen: { host: '0.0.0.0', port: 0 } }, log: silentLogger() });
    await expect(open.start()).rejects.toThrow(/without tls/);
    await open.stop();
  });
  it('names a tls file it cannot read', () => {
    expect(() => new ExtenderServer({ config: { listen: { host: '127.0.0.1', port: 0 }, tls: { ...tls, keyFile: join(dir, 'missing.key') } }, log: silentLogger() })).toThrow(/tls.keyFile .*missing.key: ENOENT/);
  });
});

describe('the PKI the installer issues', () => {
  it('a serving certificate for the ClusterIP and the Service names, a client certificate for kube-scheduler, both from the CA', () => {
    const ca = new X509Certificate(pki.ca.cert);
    const serving = new X509Certificate(pki.serving.cert);
    const client = new X509Certificate(pki.client.cert);
    expect(ca.ca).toBe(true);
    expect(serving.ca).toBe(false);
    expect(serving.verify(ca.publicKey) && client.verify(ca.publicKey)).toBe(true);
    expect(serving.checkIP(CLUSTER_IP)).toBe(CLUSTER_IP);
    expect(serving.checkHost('ulysses-scheduler-extender.ulysses-system.svc')).toBeTruthy();
    expect(client.subject).toBe(`CN=${SCHEDULER_CLIENT_NAME}`);
    expect(serving.checkPrivateKey(createPrivateKey(pki.serving.key)) && client.checkPrivateKey(createPrivateKey(pki.client.key))).toBe(true);
    expect(pkiProblem(pki, CLUSTER_IP)).toBeUndefined();
  });
  it('says why a kept set must be issued again', async () => {
    expect(pkiProblem(pki, '10.100.0.250')).toMatch(/does not name 10.100.0.250/);
    expect(pkiProblem(pki, CLUSTER_IP, new Date(Date.now() + 340 * 86_400_000))).toMatch(/the serving certificate expires/);
    expect(pkiProblem({ ...pki, client: other.client }, CLUSTER_IP)).toMatch(/the client certificate is not signed by the CA/);
    expect(pkiProblem({ ...pki, ca: { ...pki.ca, cert: 'garbage' } }, CLUSTER_IP)).toMatch(/does not parse/);
    // the kept CA issues the leaves again
    const again = await issueExtenderPki(CLUSTER_IP, pki.ca);
    expect(again.ca).toBe(pki.ca);
    expect(new X509Certificate(again.client.cert).verify(new X509Certificate(pki.ca.cert).publicKey)).toBe(true);
  });
});
