/**
 * A light kubeconfig loader for long-running components whose memory matters (the controller
 * manager, issue 3: RSS < 150 MB). `@kubernetes/client-node`'s KubeConfig cannot be imported alone:
 * its module pulls in the whole generated API, OIDC/Azure/GCP authenticators and proxy agents,
 * ~70 MiB of RSS in a process that only ever needs a server URL, TLS material and a token.
 *
 * {@link LightKubeConfig} implements the two methods every request path of the shared core uses
 * (`getCurrentCluster`, `applyToFetchOptions`: core/kube.ts apiRequest, core/informer.ts watches) for
 * kubeconfigs with client certificates, a bearer token (or token file, re-read as service-account
 * tokens rotate), basic auth, CA / insecure-skip-tls-verify / tls-server-name, and in-cluster
 * service-account credentials. Anything else (exec or auth-provider plugins, proxy-url, impersonation,
 * several files in $KUBECONFIG) is handed to client-node's KubeConfig, loaded only then.
 */
import { readFileSync, existsSync } from 'node:fs';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { homedir } from 'node:os';
import { dirname, isAbsolute, join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import type { KubeConfig } from '@kubernetes/client-node';
import type { KubeAccess } from './kube.ts';

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** service-account tokens rotate: re-read a token file at most this often */
const TOKEN_FILE_TTL_MS = 60_000;

export interface LightCluster {
  name: string;
  server: string;
  skipTLSVerify: boolean;
  tlsServerName?: string;
}

interface Credentials {
  ca?: Buffer;
  cert?: Buffer;
  key?: Buffer;
  token?: string;
  tokenFile?: string;
  username?: string;
  password?: string;
}

/** A kubeconfig this loader cannot serve on its own (the caller falls back to client-node). */
export class UnsupportedKubeconfig extends Error {}

export class LightKubeConfig implements KubeAccess {
  private readonly agent: HttpAgent | HttpsAgent;
  private token: { value: string; readAt: number } | undefined;

  constructor(
    readonly cluster: LightCluster,
    private readonly creds: Credentials,
  ) {
    if (cluster.server.startsWith('http:')) {
      if (!cluster.skipTLSVerify) throw new Error(`kubeconfig cluster ${cluster.name}: HTTP server ${cluster.server} needs insecure-skip-tls-verify`);
      this.agent = new HttpAgent({ keepAlive: true });
    } else {
      // one keep-alive agent for the process (client-node builds one per request): requests reuse
      // their connections instead of a TCP + TLS handshake each (core/kube.ts keepAliveAgent)
      this.agent = new HttpsAgent({
        keepAlive: true,
        ca: creds.ca,
        cert: creds.cert,
        key: creds.key,
        servername: cluster.tlsServerName,
        ...(cluster.skipTLSVerify ? { rejectUnauthorized: false } : {}),
      });
    }
  }

  getCurrentCluster(): LightCluster {
    return this.cluster;
  }

  private bearer(): string | undefined {
    if (this.creds.token) return this.creds.token;
    if (!this.creds.tokenFile) return undefined;
    if (!this.token || Date.now() - this.token.readAt > TOKEN_FILE_TTL_MS) {
      this.token = { value: readFileSync(this.creds.tokenFile, 'utf8').trim(), readAt: Date.now() };
    }
    return this.token.value;
  }

  async applyToFetchOptions(_opts: object = {}): Promise<{ agent: HttpAgent | HttpsAgent; headers: Record<string, string> }> {
    const headers: Record<string, string> = {};
    const token = this.bearer();
    if (token) headers.Authorization = `Bearer ${token}`;
    else if (this.creds.username !== undefined) headers.Authorization = `Basic ${Buffer.from(`${this.creds.username}:${this.creds.password ?? ''}`).toString('base64')}`;
    return { agent: this.agent, headers };
  }
}

type Named<K extends string, T> = { name: string } & { [k in K]?: T };
interface RawKubeconfig {
  'current-context'?: string;
  clusters?: Named<'cluster', Record<string, unknown>>[];
  users?: Named<'user', Record<string, unknown>>[];
  contexts?: Named<'context', { cluster?: string; user?: string }>[];
}

const SUPPORTED_CLUSTER = new Set(['server', 'certificate-authority', 'certificate-authority-data', 'insecure-skip-tls-verify', 'tls-server-name', 'extensions']);
const SUPPORTED_USER = new Set(['client-certificate', 'client-certificate-data', 'client-key', 'client-key-data', 'token', 'tokenFile', 'username', 'password', 'extensions']);

/** Parses a kubeconfig file; throws UnsupportedKubeconfig for what only client-node handles. */
export function parseLightKubeconfig(text: string, file: string): LightKubeConfig {
  const raw = (parseYaml(text) ?? {}) as RawKubeconfig;
  const ctxName = raw['current-context'];
  if (!ctxName) throw new Error(`kubeconfig ${file}: current-context is not set`);
  const ctx = raw.contexts?.find((c) => c.name === ctxName)?.context;
  if (!ctx) throw new Error(`kubeconfig ${file}: contexts: no context named ${JSON.stringify(ctxName)} (current-context)`);
  const cl = raw.clusters?.find((c) => c.name === ctx.cluster)?.cluster;
  if (!cl) throw new Error(`kubeconfig ${file}: clusters: no cluster named ${JSON.stringify(ctx.cluster)} (context ${ctxName})`);
  const user = (ctx.user ? raw.users?.find((u) => u.name === ctx.user)?.user : undefined) ?? {};
  for (const k of Object.keys(cl)) if (!SUPPORTED_CLUSTER.has(k)) throw new UnsupportedKubeconfig(`cluster field ${k}`);
  for (const k of Object.keys(user)) if (!SUPPORTED_USER.has(k)) throw new UnsupportedKubeconfig(`user field ${k}`);
  const dir = dirname(file);
  const str = (o: Record<string, unknown>, k: string, where: string): string | undefined => {
    const v = o[k];
    if (v === undefined || v === null) return undefined;
    if (typeof v !== 'string') throw new Error(`kubeconfig ${file}: ${where}.${k}: expected a string`);
    return v;
  };
  const bytes = (o: Record<string, unknown>, fileKey: string, dataKey: string, where: string): Buffer | undefined => {
    const data = str(o, dataKey, where);
    if (data) return Buffer.from(data, 'base64');
    const f = str(o, fileKey, where);
    return f ? readFileSync(isAbsolute(f) ? f : join(dir, f)) : undefined;
  };
  const server = str(cl, 'server', `clusters[${ctx.cluster}]`);
  if (!server) throw new Error(`kubeconfig ${file}: clusters[${ctx.cluster}].server is not set`);
  const tokenFile = str(user, 'tokenFile', `users[${ctx.user}]`);
  return new LightKubeConfig(
    { name: ctx.cluster!, server: server.replace(/\/+$/, ''), skipTLSVerify: cl['insecure-skip-tls-verify'] === true, tlsServerName: str(cl, 'tls-server-name', `clusters[${ctx.cluster}]`) },
    {
      ca: bytes(cl, 'certificate-authority', 'certificate-authority-data', `clusters[${ctx.cluster}]`),
      cert: bytes(user, 'client-certificate', 'client-certificate-data', `users[${ctx.user}]`),
      key: bytes(user, 'client-key', 'client-key-data', `users[${ctx.user}]`),
      token: str(user, 'token', `users[${ctx.user}]`),
      tokenFile: tokenFile && !isAbsolute(tokenFile) ? join(dir, tokenFile) : tokenFile,
      username: str(user, 'username', `users[${ctx.user}]`),
      password: str(user, 'password', `users[${ctx.user}]`),
    },
  );
}

/** In-cluster credentials (the pod's service account), as client-node's loadFromCluster. */
export function inClusterKubeconfig(): LightKubeConfig | undefined {
  const host = process.env.KUBERNETES_SERVICE_HOST;
  const port = process.env.KUBERNETES_SERVICE_PORT;
  if (!host || !port || !existsSync(join(SA_DIR, 'token'))) return undefined;
  const h = host.includes(':') ? `[${host}]` : host;
  return new LightKubeConfig(
    { name: 'inCluster', server: `https://${h}:${port}`, skipTLSVerify: false },
    { ca: existsSync(join(SA_DIR, 'ca.crt')) ? readFileSync(join(SA_DIR, 'ca.crt')) : undefined, tokenFile: join(SA_DIR, 'token') },
  );
}

/**
 * The kubeconfig `file` (or $KUBECONFIG, ~/.kube/config, in-cluster, in that order as
 * client-node's loadFromDefault) as a {@link KubeAccess}: a {@link LightKubeConfig} when this loader
 * supports it, client-node's KubeConfig (loaded on demand) otherwise.
 */
/**
 * client-node's KubeConfig from `file` (or $KUBECONFIG / the defaults), for code that uses its typed
 * API clients; async because @kubernetes/client-node is only loaded here, on demand.
 */
export async function loadKubeConfig(file = process.env.KUBECONFIG): Promise<KubeConfig> {
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return kc;
}

export async function loadKubeAccess(file = process.env.KUBECONFIG, onFallback?: (reason: string) => void): Promise<KubeAccess> {
  const defaultFile = join(homedir(), '.kube', 'config');
  const path = file || (existsSync(defaultFile) ? defaultFile : undefined);
  try {
    if (path) {
      if (path.includes(':')) throw new UnsupportedKubeconfig('several files in KUBECONFIG');
      return parseLightKubeconfig(readFileSync(path, 'utf8'), path);
    }
    const inCluster = inClusterKubeconfig();
    if (inCluster) return inCluster;
    throw new UnsupportedKubeconfig('no kubeconfig file and not in a cluster');
  } catch (err) {
    if (!(err instanceof UnsupportedKubeconfig)) throw err;
    onFallback?.(err.message);
    return loadKubeConfig(path);
  }
}

/**
 * A kubeconfig given as text, e.g. client-node's `KubeConfig.exportConfig()` handed to a worker
 * thread (core/informer-thread.ts): a {@link LightKubeConfig} when this loader supports it,
 * client-node's KubeConfig otherwise. exportConfig writes every absent field as null; those are
 * dropped first (a null `auth-provider` is no auth provider). `source` names it in errors.
 */
export async function kubeAccessFromText(text: string, source: string): Promise<KubeAccess> {
  const cleaned = JSON.stringify(parseYaml(text) ?? {}, (_k, v: unknown) => (v === null ? undefined : v));
  try {
    return parseLightKubeconfig(cleaned, source);
  } catch (err) {
    if (!(err instanceof UnsupportedKubeconfig)) throw err;
  }
  const { KubeConfig } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  kc.loadFromString(cleaned);
  return kc;
}
