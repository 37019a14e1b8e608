/**
 * The HTTP/2 transport of core/kube.ts (core/http2-transport.ts) against a real HTTP/2 TLS server of
 * node:http2 on loopback: requests multiplexed on one session, a GOAWAY or a server gone followed by a
 * new session, a refused stream sent again, a timeout cancelling its stream only, PINGs on an idle
 * session, apiRequest over it with the credentials of a kubeconfig.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSecureServer, constants, type Http2SecureServer, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { Agent as HttpsAgent } from 'node:https';
import { issueCa, issueLeaf, type KeyPair } from '../../core/extender-pki.ts';
import { Http2RequestError, Http2Transport } from '../../core/http2-transport.ts';
import { apiRequest, http2TransportFor } from '../../core/kube.ts';
import { pollUntil } from '../../core/poll.ts';

let ca: KeyPair;
let serving: KeyPair;
let server: Http2SecureServer;
let origin = '';
const sessions: ServerHttp2Session[] = [];
const pings: number[] = [];
/** how the server answers the next streams: by path */
const behaviour = new Map<string, (s: ServerHttp2Stream) => void>();
const seen: string[] = [];

beforeAll(async () => {
  ca = await issueCa();
  serving = await issueLeaf(ca, { cn: 'apiserver', usage: 'server', sans: ['127.0.0.1'] });
  server = createSecureServer({ cert: serving.cert, key: serving.key, ca: ca.cert, allowHTTP1: false });
  server.on('session', (s) => {
    sessions.push(s);
    s.on('ping', () => pings.push(sessions.indexOf(s)));
  });
  server.on('stream', (stream, headers) => {
    stream.on('error', () => undefined); // the streams a test resets with an error code
    const path = String(headers[':path']);
    seen.push(`${headers[':method']} ${path} auth=${headers.authorization ?? ''} session=${sessions.indexOf(stream.session as ServerHttp2Session)}`);
    const special = behaviour.get(path.split('?')[0]!);
    if (special) return special(stream);
    let body = '';
    stream.on('data', (d: Buffer) => (body += d.toString()));
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'application/json' });
      stream.end(JSON.stringify({ path, body }));
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  for (const s of sessions) s.destroy();
  server.close();
});

const transport = (o: ConstructorParameters<typeof Http2Transport>[2] = {}) => new Http2Transport(origin, { ca: ca.cert }, o);

describe('Http2Transport', () => {
  it('sends requests at the same moment as streams of one session, bodies and answers intact', async () => {
    const t = transport();
    const before = sessions.length;
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => t.request(i % 2 ? 'POST' : 'GET', `/api/v1/things/${i}?x=${i}`, { Authorization: 'Bearer t0k' }, i % 2 ? JSON.stringify({ i }) : undefined, 5000)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    expect(JSON.parse(answers[3]!.text)).toEqual({ path: '/api/v1/things/3?x=3', body: '{"i":3}' });
    expect(sessions.length - before).toBe(1);
    expect(t.sessionsOpened).toBe(1);
    expect(seen.at(-1)).toContain('auth=Bearer t0k');
    t.close();
  });

  it('after a GOAWAY the next request opens a new session and succeeds', async () => {
    const t = transport();
    await t.request('GET', '/a', {}, undefined, 5000);
    const s = sessions.at(-1)!;
    s.goaway(constants.NGHTTP2_NO_ERROR);
    await pollUntil('the client saw the GOAWAY', () => t['session'] === undefined, { timeoutMs: 5000, intervalMs: 10 });
    expect((await t.request('GET', '/b', {}, undefined, 5000)).status).toBe(200);
    expect(t.sessionsOpened).toBe(2);
    t.close();
  });

  it('a stream the server refused (not processed) is sent again once; a request that fails after processing is not', async () => {
    const t = transport();
    let refusals = 0;
    behaviour.set('/refused-once', (st) => {
      if (refusals++ === 0) return st.close(constants.NGHTTP2_REFUSED_STREAM);
      st.respond({ ':status': 201 });
      st.end('{}');
    });
    expect((await t.request('POST', '/refused-once', {}, '{}', 5000)).status).toBe(201);
    expect(refusals).toBe(2);
    let resets = 0;
    behaviour.set('/reset-after-response', (st) => {
      resets++;
      st.respond({ ':status': 200 });
      // part of the body, then the stream reset (destroy with an error: RST_STREAM INTERNAL_ERROR after
      // the HEADERS; close(code) ends it gracefully first on some Node.js versions)
      st.write('{"partial":');
      st.destroy(new Error('cut'));
    });
    const err = await t.request('POST', '/reset-after-response', {}, '{}', 5000).then(() => undefined, (e: Error) => e);
    expect(err).toBeInstanceOf(Http2RequestError);
    expect(err?.message).toMatch(/^POST \/reset-after-response: /);
    expect(resets).toBe(1);
    t.close();
  });

  it('a timeout cancels its stream only: the session carries the next request', async () => {
    const t = transport();
    behaviour.set('/never', () => undefined);
    const err = await t.request('GET', '/never', {}, undefined, 200).then(() => undefined, (e: Error) => e);
    expect(err?.message).toBe('GET /never: no answer in 200 ms');
    expect((await t.request('GET', '/after', {}, undefined, 5000)).status).toBe(200);
    expect(t.sessionsOpened).toBe(1);
    t.close();
  });

  it('PINGs an idle session, and a server gone is a clear error followed by a new session once it is back', async () => {
    const t = transport({ pingIntervalMs: 50 });
    await t.request('GET', '/idle', {}, undefined, 5000);
    const index = sessions.length - 1;
    await pollUntil('two PINGs on the idle session', () => pings.filter((p) => p === index).length >= 2, { timeoutMs: 10_000, intervalMs: 20 });
    // the server's side of the connection destroyed: the client notices and opens a new session
    sessions[index]!.destroy();
    await pollUntil('the client dropped the dead session', () => t['session'] === undefined, { timeoutMs: 5000, intervalMs: 10 });
    expect((await t.request('GET', '/again', {}, undefined, 5000)).status).toBe(200);
    expect(t.sessionsOpened).toBe(2);
    t.close();
    const nowhere = new Http2Transport('https://127.0.0.1:1', { ca: ca.cert });
    const err = await nowhere.request('GET', '/x', {}, undefined, 5000).then(() => undefined, (e: Error) => e);
    expect(err?.message).toMatch(/^GET \/x: .*ECONNREFUSED/);
    nowhere.close();
  });

  it('refuses a server whose certificate the CA did not sign', async () => {
    const other = await issueCa();
    const t = new Http2Transport(origin, { ca: other.cert });
    const err = await t.request('GET', '/x', {}, undefined, 5000).then(() => undefined, (e: Error) => e);
    expect(err?.message).toMatch(/^GET \/x: .*(certificate|self.signed|verify)/i);
    t.close();
  });
});

describe('apiRequest over HTTP/2 (ULYSSES_KUBE_HTTP2=1)', () => {
  it('uses one transport per kubeconfig identity, with its credentials, and parses the JSON answer', async () => {
    const agent = new HttpsAgent({ ca: ca.cert, keepAlive: true });
    const kc = { getCurrentCluster: () => ({ server: origin }), applyToFetchOptions: async () => ({ agent, headers: { Authorization: 'Bearer abc' } }) };
    process.env.ULYSSES_KUBE_HTTP2 = '1';
    try {
      const before = sessions.length;
      const answers = await Promise.all([1, 2, 3].map((i) => apiRequest<{ path: string; body: string }>(kc, 'POST', `/api/v1/namespaces/n/pods`, { body: { i }, query: { dryRun: 'All' } })));
      expect(answers.map((a) => JSON.parse(a.body).i)).toEqual([1, 2, 3]);
      expect(answers[0]!.path).toBe('/api/v1/namespaces/n/pods?dryRun=All');
      expect(sessions.length - before).toBe(1);
      expect(seen.at(-1)).toContain('auth=Bearer abc');
      expect(http2TransportFor(kc, origin, agent)).toBe(http2TransportFor(kc, origin, agent));
      http2TransportFor(kc, origin, agent)!.close();
    } finally {
      delete process.env.ULYSSES_KUBE_HTTP2;
    }
  });
});
