/**
 * Who may call the extender's verbs (issue 42 item 1). /bind writes a binding and the RT/TDMA
 * reservations under the extender's ServiceAccount, bypassing kube-scheduler's filters, so only
 * kube-scheduler may call /filter, /prioritize and /bind: HTTPS, and a client certificate signed by
 * `clientCAFile` whose subject CN is one of `clientNames` (kube-scheduler's, core/extender-pki.ts).
 * Without one every request is answered 403, except GET of /healthz, /readyz and /metrics (kubelet
 * probes and monitors present no client certificate; they reveal no reservation and change nothing).
 * Plain HTTP is allowed on loopback only (the static-pod variant beside kube-scheduler).
 */
import { readFileSync, statSync } from 'node:fs';
import { isIP } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { ExtenderTlsConfig } from './config.ts';

export interface ServingTls {
  key: Buffer;
  cert: Buffer;
  ca: Buffer;
}

/** The files of `tls`, each read whole; an unreadable one is named with its field. */
export function readServingTls(tls: ExtenderTlsConfig): ServingTls {
  const read = (field: keyof ExtenderTlsConfig, path: string) => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw new Error(`scheduler extender tls.${field} ${path}: ${(err as Error).message}`);
    }
  };
  return { key: read('keyFile', tls.keyFile), cert: read('certFile', tls.certFile), ca: read('clientCAFile', tls.clientCAFile) };
}

/** A fingerprint of the files' state (size and mtime): changes when a mounted Secret is updated. */
export function tlsFilesVersion(tls: ExtenderTlsConfig): string {
  return [tls.certFile, tls.keyFile, tls.clientCAFile]
    .map((f) => {
      try {
        const s = statSync(f);
        return `${s.size}:${s.mtimeMs}`;
      } catch {
        return 'missing';
      }
    })
    .join('/');
}

/** Loopback: 127.0.0.0/8, ::1, localhost. */
export function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  if (isIP(host) === 4) return host.startsWith('127.');
  return host === '::1' || host === '0:0:0:0:0:0:0:1';
}

/** Refuses a configuration that would open the verbs to the network without client certificates. */
export function checkListenSecurity(host: string, tls: ExtenderTlsConfig | undefined): void {
  if (!tls && !isLoopback(host)) {
    throw new Error(
      `scheduler extender: listen.host ${host} without tls would let any pod that reaches it bind pods to nodes: ` +
        'set tls (certFile, keyFile, clientCAFile; `ulysses install` issues them) or listen on loopback',
    );
  }
}

/**
 * The caller of a verb, or why it is refused: the TLS session's verified client certificate, CN
 * among `clientNames`. `socket` is the request's socket (TLSSocket under HTTPS).
 */
export function verbCaller(socket: unknown, tls: ExtenderTlsConfig): { ok: true; name: string } | { ok: false; reason: string } {
  const s = socket as Partial<TLSSocket>;
  if (typeof s.getPeerCertificate !== 'function') return { ok: false, reason: 'not a TLS connection' };
  const peer = s.getPeerCertificate();
  if (!peer || !peer.subject) return { ok: false, reason: 'no client certificate' };
  if (!s.authorized) return { ok: false, reason: `client certificate not accepted (${String(s.authorizationError ?? 'unknown')})` };
  const cn = [peer.subject.CN].flat()[0];
  if (!cn || !tls.clientNames.includes(cn)) return { ok: false, reason: `client ${JSON.stringify(cn ?? '')} is not among ${tls.clientNames.join(', ')}` };
  return { ok: true, name: cn };
}
