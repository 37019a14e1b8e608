/**
 * Testbed PKI with the openssl CLI: a cluster CA, the apiserver serving certificate, client
 * certificates for every control-plane identity (so RBAC applies as in kubeadm) and the
 * service-account key pair. EC P-256 keys keep generation fast.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await run('openssl', args, { cwd });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`openssl ${args[0]} failed: ${e.stderr ?? e.message}`);
  }
}

export interface ClientIdentity {
  file: string; // base name, e.g. "admin"
  cn: string;
  org?: string;
}

export interface Pki {
  dir: string;
  caCert: string;
  caKey: string;
  apiserverCert: string;
  apiserverKey: string;
  saKey: string;
  saPub: string;
  client(file: string): { cert: string; key: string };
}

/** Signs `<name>.crt` (key `<name>.key`, EC P-256) with the CA in `dir`. */
async function signCert(dir: string, name: string, subj: string, ext: string): Promise<void> {
  await openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', `${name}.key`], dir);
  await openssl(['req', '-new', '-key', `${name}.key`, '-subj', subj, '-out', `${name}.csr`], dir);
  await writeFile(join(dir, `${name}.ext`), ext);
  await openssl(
    ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', `0x${randomBytes(16).toString('hex')}`, '-sha256', '-days', '3650', '-extfile', `${name}.ext`, '-out', `${name}.crt`],
    dir,
  );
}

/** An apiserver serving certificate's extensions: these IP SANs and the `kubernetes` Service names (as kubeadm's). */
function servingExt(ips: string[]): string {
  const sans = [...ips.map((ip) => `IP:${ip}`), 'DNS:localhost', 'DNS:kubernetes', 'DNS:kubernetes.default', 'DNS:kubernetes.default.svc', 'DNS:kubernetes.default.svc.cluster.local'].join(',');
  return `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=${sans}\n`;
}

/**
 * Another apiserver's serving certificate from the testbed CA (`<name>.crt`/`.key` in the PKI dir),
 * valid for `ips` and the `kubernetes` Service names: each apiserver's own address, as kubeadm
 * puts the advertise address of every control-plane node into that node's certificate.
 */
export async function generateApiserverCert(pki: Pki, name: string, ips: string[]): Promise<{ cert: string; key: string }> {
  await signCert(pki.dir, name, '/CN=kube-apiserver', servingExt(ips));
  return { cert: join(pki.dir, `${name}.crt`), key: join(pki.dir, `${name}.key`) };
}

const CLIENT_EXT = 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n';
const clientSubject = (c: ClientIdentity) => `${c.org ? `/O=${c.org}` : ''}/CN=${c.cn}`;

/** Another client certificate from the testbed CA (`<file>.crt`/`.key` in the PKI dir): user `cn`, group `org`. */
export async function generateClientCert(pki: Pki, c: ClientIdentity): Promise<{ cert: string; key: string }> {
  await signCert(pki.dir, c.file, clientSubject(c), CLIENT_EXT);
  return pki.client(c.file);
}

export async function generatePki(dir: string, clients: ClientIdentity[], apiserverIps: string[]): Promise<Pki> {
  await mkdir(dir, { recursive: true });
  await openssl(['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'ca.key'], dir);
  await openssl(['req', '-x509', '-new', '-key', 'ca.key', '-sha256', '-days', '3650', '-subj', '/CN=ulysses-testbed-ca', '-out', 'ca.crt'], dir);

  const sign = (name: string, subj: string, ext: string) => signCert(dir, name, subj, ext);
  await sign('apiserver', '/CN=kube-apiserver', servingExt(apiserverIps));
  await Promise.all(clients.map((c) => sign(c.file, clientSubject(c), CLIENT_EXT)));
  await openssl(['genrsa', '-out', 'sa.key', '2048'], dir);
  await openssl(['rsa', '-in', 'sa.key', '-pubout', '-out', 'sa.pub'], dir);
  return pkiPaths(dir);
}

/** The file layout of a PKI generated in `dir` (also to reopen an existing one). */
export function pkiPaths(dir: string): Pki {
  const p = (f: string) => join(dir, f);
  return {
    dir,
    caCert: p('ca.crt'),
    caKey: p('ca.key'),
    apiserverCert: p('apiserver.crt'),
    apiserverKey: p('apiserver.key'),
    saKey: p('sa.key'),
    saPub: p('sa.pub'),
    client: (file) => ({ cert: p(`${file}.crt`), key: p(`${file}.key`) }),
  };
}

/** A kubeconfig with embedded credentials, as kubeadm writes them. */
export async function writeKubeconfig(file: string, server: string, pki: Pki, clientFile: string, user: string): Promise<void> {
  const b64 = async (f: string) => (await readFile(f)).toString('base64');
  const { cert, key } = pki.client(clientFile);
  const text = `apiVersion: v1
kind: Config
clusters:
- name: ulysses-testbed
  cluster:
    server: ${server}
    certificate-authority-data: ${await b64(pki.caCert)}
users:
- name: ${user}
  user:
    client-certificate-data: ${await b64(cert)}
    client-key-data: ${await b64(key)}
contexts:
- name: ulysses-testbed
  context:
    cluster: ulysses-testbed
    user: ${user}
current-context: ulysses-testbed
`;
  await writeFile(file, text, { mode: 0o600 });
}
