/**
 * The scheduler extender's own PKI (issue 42 item 1): kube-scheduler and the extender authenticate
 * each other with TLS client certificates.
 * - A CA of its own (`ulysses-scheduler-extender-ca`), used for nothing else: a certificate of the
 *   cluster CA (every kubelet, every admin) opens no door here.
 * - The extender's serving certificate, for the addresses kube-scheduler dials (the Service's fixed
 *   ClusterIP, its DNS names, loopback for the static-pod variant).
 * - kube-scheduler's client certificate, CN {@link SCHEDULER_CLIENT_NAME}: the only identity the
 *   extender answers its verbs for (scheduler-plugins/extender/tls.ts).
 * EC P-256 keys, PEM (PKCS#8 keys). `ulysses install` issues them (manifests/install.ts) and
 * re-issues the leaf certificates from the kept CA when less than {@link RENEW_BEFORE_DAYS} remain.
 */
import { X509Certificate as NodeX509 } from 'node:crypto';
import { isIP } from 'node:net';

/** @peculiar/x509, loaded when a certificate is issued (the extender only verifies: node:crypto). */
async function x509lib(): Promise<typeof import('@peculiar/x509')> {
  await import('reflect-metadata'); // its dependency injection needs the Reflect metadata API
  return import('@peculiar/x509');
}

/** The client identity kube-scheduler presents (its own user name in Kubernetes). */
export const SCHEDULER_CLIENT_NAME = 'system:kube-scheduler';
export const CA_NAME = 'ulysses-scheduler-extender-ca';
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const DAY_MS = 86_400_000;
/** Validity: the CA 10 years, the leaves 1 year (as kubeadm's), renewed by an install with less than 30 days left. */
export const CA_DAYS = 3650;
export const LEAF_DAYS = 365;
export const RENEW_BEFORE_DAYS = 30;

/** Where `ulysses install` puts kube-scheduler's files on control-plane nodes (kube-scheduler mounts /etc/kubernetes/ulysses): its `tlsConfig`. */
export const SCHEDULER_EXTENDER_TLS_FILES = {
  certFile: '/etc/kubernetes/ulysses/pki/extender-client.crt',
  keyFile: '/etc/kubernetes/ulysses/pki/extender-client.key',
  caFile: '/etc/kubernetes/ulysses/pki/extender-ca.crt',
} as const;

export interface KeyPair {
  cert: string;
  key: string;
}

export interface ExtenderPki {
  ca: KeyPair;
  serving: KeyPair;
  client: KeyPair;
}

async function exportKey(k: CryptoKey): Promise<string> {
  const der = Buffer.from(await crypto.subtle.exportKey('pkcs8', k));
  return `-----BEGIN PRIVATE KEY-----\n${der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n?$/, '\n')}-----END PRIVATE KEY-----\n`;
}

async function importKey(pem: string, what: string): Promise<CryptoKey> {
  const b64 = pem.replace(/-----(BEGIN|END) PRIVATE KEY-----/g, '').replace(/\s+/g, '');
  try {
    return await crypto.subtle.importKey('pkcs8', Buffer.from(b64, 'base64'), ALG, true, ['sign']);
  } catch (err) {
    throw new Error(`${what}: not an EC P-256 PKCS#8 private key (${(err as Error).message})`);
  }
}

const serial = () => Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString('hex').replace(/^[89a-f]/, '1');

/** A new CA (self-signed, may sign leaves only). */
export async function issueCa(now = new Date()): Promise<KeyPair> {
  const x509 = await x509lib();
  const keys = await crypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=${CA_NAME}`,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter: new Date(now.getTime() + CA_DAYS * DAY_MS),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  return { cert: cert.toString('pem'), key: await exportKey(keys.privateKey) };
}

/** A leaf certificate signed by `ca`: a server's for `sans` (IPs and DNS names), or a client's. */
export async function issueLeaf(ca: KeyPair, o: { cn: string; usage: 'server' | 'client'; sans?: readonly string[]; now?: Date }): Promise<KeyPair> {
  const x509 = await x509lib();
  const now = o.now ?? new Date();
  const caCert = new x509.X509Certificate(ca.cert);
  const caKey = await importKey(ca.key, 'the extender CA key');
  const keys = await crypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const sans = (o.sans ?? []).map((s) => (isIP(s) ? { type: 'ip' as const, value: s } : { type: 'dns' as const, value: s }));
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${o.cn}`,
    issuer: caCert.subject,
    notBefore: new Date(now.getTime() - 60_000),
    notAfter: new Date(Math.min(now.getTime() + LEAF_DAYS * DAY_MS, caCert.notAfter.getTime())),
    publicKey: keys.publicKey,
    signingKey: caKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([o.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth]),
      await x509.AuthorityKeyIdentifierExtension.create(caCert),
      ...(sans.length ? [new x509.SubjectAlternativeNameExtension(sans)] : []),
    ],
  });
  return { cert: cert.toString('pem'), key: await exportKey(keys.privateKey) };
}

/**
 * The names kube-scheduler may dial the extender by: the Service's ClusterIP and DNS names (manifests/base/scheduler-extender/service.yaml)
 * and loopback (the static-pod variant, manifests/kubeadm/static-pods).
 */
export function servingNames(clusterIp: string, service = 'ulysses-scheduler-extender', namespace = 'ulysses-system'): string[] {
  return [clusterIp, '127.0.0.1', 'localhost', service, `${service}.${namespace}`, `${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`];
}

/** The whole set: a CA (`ca` when given: kept, its leaves re-issued), the serving and kube-scheduler's client certificate. */
export async function issueExtenderPki(clusterIp: string, ca?: KeyPair, now = new Date()): Promise<ExtenderPki> {
  const theCa = ca ?? (await issueCa(now));
  return {
    ca: theCa,
    serving: await issueLeaf(theCa, { cn: 'ulysses-scheduler-extender', usage: 'server', sans: servingNames(clusterIp), now }),
    client: await issueLeaf(theCa, { cn: SCHEDULER_CLIENT_NAME, usage: 'client', now }),
  };
}

/**
 * Whether the kept set still serves: each certificate parses, the leaves are signed by the CA, the
 * serving one names `clusterIp`, and none expires within {@link RENEW_BEFORE_DAYS}. The reason when not.
 */
export function pkiProblem(p: ExtenderPki, clusterIp: string, now = new Date()): string | undefined {
  let ca: NodeX509, serving: NodeX509, client: NodeX509;
  try {
    [ca, serving, client] = [p.ca.cert, p.serving.cert, p.client.cert].map((c) => new NodeX509(c)) as [NodeX509, NodeX509, NodeX509];
  } catch (err) {
    return `a certificate does not parse (${(err as Error).message})`;
  }
  const horizon = now.getTime() + RENEW_BEFORE_DAYS * DAY_MS;
  if (new Date(ca.validTo).getTime() < horizon) return `the CA expires ${ca.validTo}`;
  for (const [name, c] of [['serving', serving], ['client', client]] as const) {
    if (!c.verify(ca.publicKey)) return `the ${name} certificate is not signed by the CA`;
    if (new Date(c.validTo).getTime() < horizon) return `the ${name} certificate expires ${c.validTo}`;
  }
  if (!serving.checkIP(clusterIp)) return `the serving certificate does not name ${clusterIp}`;
  return undefined;
}
