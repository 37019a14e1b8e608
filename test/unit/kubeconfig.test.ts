import { createServer, type Server } from 'node:https';
import type { TLSSocket } from 'node:tls';
import { mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubeConfig } from '@kubernetes/client-node';
import { kubeAccessFromText, LightKubeConfig, loadKubeAccess, parseLightKubeconfig, UnsupportedKubeconfig } from '../../core/kubeconfig.ts';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { ApiError, apiRequest, isNotFound, isNotServed, KubeClient } from '../../core/kube.ts';
import { patchRuntimeConfig, readRuntimeConfig } from '../../core/runtime-config.ts';
import { ResilientInformer } from '../../core/informer.ts';
import { generatePki, writeKubeconfig, type Pki } from '../../experiments/testbed/pki.ts';

const kubeconfigYaml = (user: string, cluster = 'server: https://127.0.0.1:6443') => `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    ${cluster}
users:
- name: u
  user:
    ${user}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
`;

describe('LightKubeConfig: parsing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ulysses-kubeconfig-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('bearer token, and a token file re-read relative to the kubeconfig', async () => {
    const kc = parseLightKubeconfig(kubeconfigYaml('token: abc'), join(dir, 'config'));
    expect(kc.getCurrentCluster()).toMatchObject({ server: 'https://127.0.0.1:6443', skipTLSVerify: false });
    expect((await kc.applyToFetchOptions()).headers).toEqual({ Authorization: 'Bearer abc' });
    writeFileSync(join(dir, 'token'), 'from-file\n');
    const kf = parseLightKubeconfig(kubeconfigYaml('tokenFile: token'), join(dir, 'config'));
    expect((await kf.applyToFetchOptions()).headers).toEqual({ Authorization: 'Bearer from-file' });
  });

  it('basic auth and insecure-skip-tls-verify', async () => {
    const kc = parseLightKubeconfig(kubeconfigYaml('{username: admin, password: pw}', 'insecure-skip-tls-verify: true\n    server: https://h:1/'), 'k');
    expect(kc.getCurrentCluster()).toMatchObject({ server: 'https://h:1', skipTLSVerify: true });
    expect((await kc.applyToFetchOptions()).headers).toEqual({ Authorization: `Basic ${Buffer.from('admin:pw').toString('base64')}` });
  });

  it('errors name the missing field', () => {
    expect(() => parseLightKubeconfig('apiVersion: v1\n', 'f.yaml')).toThrow(/kubeconfig f.yaml: current-context is not set/);
    expect(() => parseLightKubeconfig(kubeconfigYaml('token: a').replace('current-context: ctx', 'current-context: nope'), 'f.yaml')).toThrow(/contexts: no context named "nope"/);
    expect(() => parseLightKubeconfig(kubeconfigYaml('token: a', 'insecure-skip-tls-verify: true'), 'f.yaml')).toThrow(/clusters\[c\].server is not set/);
    expect(() => parseLightKubeconfig(kubeconfigYaml('token: 5'), 'f.yaml')).toThrow(/users\[u\].token: expected a string/);
  });

  it('exec plugins, auth providers and proxies are left to client-node', async () => {
    const execUser = 'exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}';
    expect(() => parseLightKubeconfig(kubeconfigYaml(execUser), 'f')).toThrow(UnsupportedKubeconfig);
    expect(() => parseLightKubeconfig(kubeconfigYaml('token: a', 'proxy-url: http://p:3128\n    server: https://h'), 'f')).toThrow(UnsupportedKubeconfig);
    const file = join(dir, 'exec.yaml');
    writeFileSync(file, kubeconfigYaml(execUser));
    const reasons: string[] = [];
    const kc = await loadKubeAccess(file, (r) => reasons.push(r));
    expect(kc).toBeInstanceOf(KubeConfig);
    expect(reasons).toEqual(['user field exec']);
  });
});

describe('LightKubeConfig: a real TLS round trip with client certificates', () => {
  let dir: string;
  let pki: Pki;
  let server: Server;
  let port = 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ulysses-kubeconfig-tls-'));
    pki = await generatePki(join(dir, 'pki'), [{ file: 'admin', cn: 'kubernetes-admin', org: 'system:masters' }], ['127.0.0.1']);
    server = createServer(
      { cert: readFileSync(pki.apiserverCert), key: readFileSync(pki.apiserverKey), ca: readFileSync(pki.caCert), requestCert: true, rejectUnauthorized: true },
      (req, res) => {
        const peer = (req.socket as TLSSocket).getPeerCertificate();
        res.setHeader('Content-Type', 'application/json');
        const url = new URL(req.url!, 'https://x');
        if (url.pathname === '/api/v1/configmaps' && url.searchParams.get('watch')) {
          // a watch: one event, then the stream stays open until the client aborts
          res.write(`${JSON.stringify({ type: 'ADDED', object: { metadata: { name: 'b', namespace: 'n', resourceVersion: '2' }, data: { user: peer.subject?.CN } } })}\n`);
          return;
        }
        if (url.pathname === '/api/v1/configmaps') {
          res.end(JSON.stringify({ metadata: { resourceVersion: '1' }, items: [{ metadata: { name: 'a', namespace: 'n', resourceVersion: '1' } }] }));
          return;
        }
        res.end(JSON.stringify({ kind: 'APIVersions', path: req.url, user: peer.subject?.CN }));
      },
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as { port: number }).port;
    await writeKubeconfig(join(dir, 'admin.conf'), `https://127.0.0.1:${port}`, pki, 'admin', 'kubernetes-admin');
  }, 60_000);
  afterAll(async () => {
    await new Promise((r) => server?.close(r));
    rmSync(dir, { recursive: true, force: true });
  });

  it('authenticates with the kubeconfig client certificate and verifies the server against its CA', async () => {
    const kc = await loadKubeAccess(join(dir, 'admin.conf'));
    expect(kc).toBeInstanceOf(LightKubeConfig);
    for (let i = 0; i < 3; i++) {
      const body = await apiRequest<{ path: string; user: string }>(kc, 'GET', '/api', { query: { i } });
      expect(body).toEqual({ kind: 'APIVersions', path: `/api?i=${i}`, user: 'kubernetes-admin' });
    }
  });

  it('reuses one TLS connection across requests, with LightKubeConfig and with client-node\'s KubeConfig', async () => {
    let handshakes = 0;
    const count = () => handshakes++;
    server.on('secureConnection', count);
    try {
      const light = await loadKubeAccess(join(dir, 'admin.conf'));
      for (let i = 0; i < 4; i++) await apiRequest(light, 'GET', '/api');
      expect(handshakes).toBe(1);
      // client-node builds a new agent (and TLS context) per request: apiRequest keeps one per kubeconfig
      const full = new KubeConfig();
      full.loadFromFile(join(dir, 'admin.conf'));
      for (let i = 0; i < 4; i++) {
        const body = await apiRequest<{ user: string }>(full, i % 2 ? 'POST' : 'GET', '/api', i % 2 ? { body: { i } } : {});
        expect(body.user).toBe('kubernetes-admin');
      }
      expect(handshakes).toBe(2);
    } finally {
      server.off('secureConnection', count);
    }
  });

  it('lists and watches through it (ResilientInformer with client-node dist/watch.js)', async () => {
    const kc = await loadKubeAccess(join(dir, 'admin.conf'));
    const informer = new ResilientInformer<{ metadata?: { name?: string; namespace?: string; resourceVersion?: string }; data?: { user?: string } }>(kc, { path: '/api/v1/configmaps' });
    const added: string[] = [];
    const watched = new Promise<string | undefined>((resolve) => informer.on('add', (o) => (added.push(o.metadata!.name!), o.metadata!.name === 'b' && resolve(o.data?.user))));
    await informer.start();
    try {
      expect(await watched).toBe('kubernetes-admin');
      expect(added).toEqual(['a', 'b']);
    } finally {
      informer.stop();
    }
  });

  it('refuses a server its CA did not sign', async () => {
    const other = await generatePki(join(dir, 'other'), [], ['127.0.0.1']);
    const file = join(dir, 'wrong-ca.conf');
    await writeKubeconfig(file, `https://127.0.0.1:${port}`, { ...pki, caCert: other.caCert, client: pki.client }, 'admin', 'kubernetes-admin');
    await expect(apiRequest(await loadKubeAccess(file), 'GET', '/api')).rejects.toThrow(/certificate/);
  }, 60_000);
});

describe('kubeAccessFromText (a kubeconfig handed to a worker thread)', () => {
  const kc = () => {
    const k = new KubeConfig();
    k.loadFromString(
      JSON.stringify({
        clusters: [{ name: 'c', cluster: { server: 'https://10.0.0.1:6443', 'certificate-authority-data': Buffer.from('ca').toString('base64') } }],
        users: [{ name: 'u', user: { token: 'secret-token' } }],
        contexts: [{ name: 'ctx', context: { cluster: 'c', user: 'u' } }],
        'current-context': 'ctx',
      }),
    );
    return k;
  };

  it("reads client-node's exportConfig (absent fields written as null) with the light loader", async () => {
    // client-node holds some absent fields as null (a user entry without a user), exportConfig writes them
    const text = kc().exportConfig().replace('"token":"secret-token"', '"token":"secret-token","auth-provider":null,"exec":null');
    expect(JSON.parse(text).users[0].user['auth-provider']).toBeNull();
    const access = await kubeAccessFromText(text, 'exported');
    expect(access).toBeInstanceOf(LightKubeConfig);
    expect(access.getCurrentCluster()?.server).toBe('https://10.0.0.1:6443');
    const opts = (await access.applyToFetchOptions({})) as { headers: Record<string, string> };
    expect(opts.headers.Authorization ?? opts.headers.authorization).toBe('Bearer secret-token');
  });

  it("falls back to client-node's KubeConfig for what the light loader does not support", async () => {
    const k = kc();
    k.users[0] = { ...k.users[0]!, token: undefined, exec: { command: 'true', apiVersion: 'client.authentication.k8s.io/v1' } } as never;
    const access = await kubeAccessFromText(k.exportConfig(), 'exported');
    expect(access).toBeInstanceOf(KubeConfig);
    expect(access.getCurrentCluster()?.server).toBe('https://10.0.0.1:6443');
  });
});

describe('apiRequest: answers that are not a Status object', () => {
  let server: HttpServer;
  let base = '';
  // what a real apiserver answers for a group it does not serve, and a proxy's error page
  const answers: Record<string, [number, string, string]> = {
    '/apis/ulysses.io/v1alpha1/ulyssesconfigs/default': [404, 'text/plain; charset=utf-8', '404 page not found\n'],
    '/apis/ulysses.io/v1alpha1/ulyssesconfigs': [404, 'text/plain; charset=utf-8', '404 page not found\n'],
    '/api/v1/namespaces/default/pods/p': [404, 'application/json', JSON.stringify({ kind: 'Status', status: 'Failure', reason: 'NotFound', message: 'pods "p" not found', code: 404 })],
    '/proxy-error': [502, 'text/html', '<html><body>Bad Gateway</body></html>'],
    '/ok-but-text': [200, 'text/plain', 'ok'],
  };
  beforeAll(async () => {
    server = createHttpServer((req, res) => {
      const [code, type, body] = answers[new URL(req.url!, 'http://x').pathname] ?? [500, 'text/plain', 'unexpected'];
      res.writeHead(code, { 'Content-Type': type }).end(body);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));
  const access = () => parseLightKubeconfig(kubeconfigYaml('token: t', `server: ${base}\n    insecure-skip-tls-verify: true`), 'test');

  it('keeps the status code and the text, so a 404 of an unserved path is told apart from a missing object', async () => {
    const unserved = await apiRequest(access(), 'GET', '/apis/ulysses.io/v1alpha1/ulyssesconfigs/default').catch((e: unknown) => e);
    expect(unserved).toBeInstanceOf(ApiError);
    expect((unserved as ApiError).message).toBe('GET /apis/ulysses.io/v1alpha1/ulyssesconfigs/default: 404 404 page not found');
    expect([isNotFound(unserved), isNotServed(unserved)]).toEqual([true, true]);
    const missing = await apiRequest(access(), 'GET', '/api/v1/namespaces/default/pods/p').catch((e: unknown) => e);
    expect([isNotFound(missing), isNotServed(missing), (missing as ApiError).reason]).toEqual([true, false, 'NotFound']);
    await expect(apiRequest(access(), 'GET', '/proxy-error')).rejects.toThrow('GET /proxy-error: 502 <html><body>Bad Gateway</body></html>');
    await expect(apiRequest(access(), 'GET', '/ok-but-text')).rejects.toThrow('GET /ok-but-text: 200 answered with text, not JSON: ok');
  });

  it('`ulysses status` and `ulysses set` on a cluster without Ulysses: an error naming the resource, nothing created', async () => {
    const client = new KubeClient(access());
    await expect(readRuntimeConfig(client)).rejects.toThrow('this cluster does not serve ulyssesconfigs.ulysses.io (UlyssesConfig): Ulysses is not installed');
    await expect(patchRuntimeConfig(client, { slo: { defaultSeconds: 2 } } as never)).rejects.toThrow('Ulysses is not installed');
  });
});
