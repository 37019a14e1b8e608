/**
 * The testbed control plane on loopback: etcd, kube-apiserver, kube-scheduler and the vanilla
 * kube-controller-manager, with flags as in controller-runtime's envtest plus real authn/authz
 * (client certificates, Node + RBAC authorization, NodeRestriction).
 */
import https from 'node:https';
import { readFileSync, writeFileSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { binaryPath } from './binaries.ts';
import type { Pki } from './pki.ts';
import { FatalError, isAlive, pollUntil, startProcess, tailFile, type TrackedProcess } from './processes.ts';

export const PORTS = {
  etcdClient: 23790,
  etcdPeer: 23800,
  apiserver: 16443,
  scheduler: 20259,
  controllerManager: 20257,
} as const;

export const APISERVER_URL = `https://127.0.0.1:${PORTS.apiserver}`;
export const SERVICE_CIDR = '10.96.0.0/16';

/**
 * Two kube-apiservers on one etcd (TestbedOptions.apiservers = 2): their addresses, /32 on the
 * bridge {@link APISERVERS_BRIDGE} of this machine (no port, nothing else on it). A loopback
 * address is no valid endpoint of the `kubernetes` Service, so with two apiservers each binds and
 * advertises its own address here, with the default lease endpoint reconciler: both are listed in
 * default/kubernetes (Endpoints and EndpointSlice), as on a kubeadm HA cluster, and every client of
 * the testbed talks to the first one.
 */
export const HA_APISERVER_IPS = ['10.243.0.1', '10.243.0.2'] as const;
export const APISERVERS_BRIDGE = 'uly-apis';

/** The URL of apiserver `index` (0: the first) of a control plane. */
export function apiserverUrl(o: Pick<ControlPlaneOptions, 'apiserverAddresses'>, index = 0): string {
  return `https://${o.apiserverAddresses?.[index] ?? '127.0.0.1'}:${PORTS.apiserver}`;
}

/** GET over HTTPS; resolves with [status, body]. `insecure` for components with self-signed serving certs. */
export function httpsGet(url: string, tls: { ca?: string; cert?: string; key?: string; insecure?: boolean }): Promise<[number, string]> {
  return new Promise((resolve, reject) => {
    const req = https.get(
      url,
      {
        ca: tls.ca ? readFileSync(tls.ca) : undefined,
        cert: tls.cert ? readFileSync(tls.cert) : undefined,
        key: tls.key ? readFileSync(tls.key) : undefined,
        rejectUnauthorized: !tls.insecure,
        timeout: 3000,
      },
      (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve([res.statusCode ?? 0, body]));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

export interface ControlPlaneOptions {
  runDir: string;
  pki: Pki;
  kubeconfigs: { scheduler: string; controllerManager: string };
  /** --controllers for the vanilla kube-controller-manager (default "*"). */
  controllers?: string;
  /** more kube-controller-manager flags (`--name=value`), after the testbed's own (e.g. configuration upstream-tuned's node monitor). */
  controllerManagerExtraArgs?: readonly string[];
  /** extra kube-scheduler --config file (e.g. with an extender). */
  schedulerConfig?: string;
  cpus?: string;
  /** audit the pod and EndpointSlice writes in these namespaces ({@link auditPolicy}, {@link auditLogPath}) */
  auditNamespaces?: readonly string[];
  /**
   * One address per apiserver ({@link HA_APISERVER_IPS}): each binds and advertises its own, with
   * the lease endpoint reconciler. Absent: one apiserver on 127.0.0.1, listed nowhere.
   */
  apiserverAddresses?: readonly string[];
}

/** The apiserver's audit log (JSON lines) of a testbed started with auditNamespaces. */
export const auditLogPath = (runDir: string) => join(runDir, 'logs', 'kube-apiserver-audit.log');

/** The write verbs the audit policy records (reads and watches are not on the critical path's API side). */
export const AUDITED_VERBS = ['create', 'update', 'patch', 'delete'] as const;

/**
 * An audit policy (audit.k8s.io/v1) recording, at level Metadata and at ResponseComplete only, the
 * writes to pods (and their subresources) and EndpointSlices in `namespaces`, nothing else: a
 * failover experiment's critical namespace, whose few requests per repetition cost a few log writes,
 * the same at idle and at load (experiments/harness/api-trace.ts reads them). `['*']`: every write
 * of every resource, namespaced or not (a diagnosis of what else reaches the apiserver; at load it
 * costs the load's requests a log write each).
 */
export function auditPolicy(namespaces: readonly string[]): string {
  const scope = namespaces.includes('*')
    ? {}
    : {
        namespaces,
        resources: [
          { group: '', resources: ['pods', 'pods/*'] },
          { group: 'discovery.k8s.io', resources: ['endpointslices'] },
        ],
      };
  return JSON.stringify({
    apiVersion: 'audit.k8s.io/v1',
    kind: 'Policy',
    omitStages: ['RequestReceived', 'ResponseStarted', 'Panic'],
    rules: [{ level: 'Metadata', verbs: AUDITED_VERBS, ...scope }, { level: 'None' }],
  });
}

function auditFlags(o: ControlPlaneOptions): string[] {
  if (!o.auditNamespaces?.length) return [];
  const policy = join(o.runDir, 'audit-policy.json');
  writeFileSync(policy, auditPolicy(o.auditNamespaces));
  // the log backend in its default blocking mode: an event is written before the response completes
  return [`--audit-policy-file=${policy}`, `--audit-log-path=${auditLogPath(o.runDir)}`, '--audit-log-format=json', '--audit-log-maxsize=0'];
}

export function etcdSpec(o: ControlPlaneOptions) {
  const peer = `http://127.0.0.1:${PORTS.etcdPeer}`;
  const client = `http://127.0.0.1:${PORTS.etcdClient}`;
  return {
    name: 'etcd',
    cmd: binaryPath('etcd'),
    args: [
      '--name=default',
      `--data-dir=${join(o.runDir, 'etcd')}`,
      `--listen-client-urls=${client}`,
      `--advertise-client-urls=${client}`,
      `--listen-peer-urls=${peer}`,
      `--initial-advertise-peer-urls=${peer}`,
      `--initial-cluster=default=${peer}`,
      '--listen-metrics-urls=',
      '--unsafe-no-fsync=true', // a disposable testbed: trade durability for speed on a shared disk
      '--quota-backend-bytes=4294967296',
      '--log-level=warn',
    ],
    logFile: join(o.runDir, 'logs', 'etcd.log'),
    cpus: o.cpus,
  };
}

/** The process name of apiserver `index`: kube-apiserver, kube-apiserver-2, ... */
export const apiserverName = (index: number) => (index === 0 ? 'kube-apiserver' : `kube-apiserver-${index + 1}`);

/** Apiserver `index` (0: the first; others only with apiserverAddresses, serving certificate `apiserver-<n>` of the PKI). */
export function apiserverSpec(o: ControlPlaneOptions, index = 0) {
  const { pki } = o;
  const kc = pki.client('apiserver-kubelet-client');
  const address = o.apiserverAddresses?.[index];
  if (index > 0 && !address) throw new Error(`kube-apiserver ${index + 1}: the control plane has ${o.apiserverAddresses?.length ?? 1} apiserver address(es)`);
  const serving = index === 0 ? { cert: pki.apiserverCert, key: pki.apiserverKey } : pki.client(`apiserver-${index + 1}`);
  const name = apiserverName(index);
  return {
    name,
    cmd: binaryPath('kube-apiserver'),
    args: [
      `--etcd-servers=http://127.0.0.1:${PORTS.etcdClient}`,
      ...(address
        ? // its own address, listed in default/kubernetes by the lease endpoint reconciler (the default)
          [`--bind-address=${address}`, `--advertise-address=${address}`]
        : [
            '--bind-address=127.0.0.1',
            '--advertise-address=127.0.0.1',
            // a loopback address is no valid endpoint of the `kubernetes` Service: kube-apiserver 1.37
            // refuses to start with it and the default lease reconciler, 1.36 failed each endpoint write.
            // Nothing on the testbed reaches the apiserver through that Service (no kube-proxy, no in-cluster clients)
            '--endpoint-reconciler-type=none',
          ]),
      `--secure-port=${PORTS.apiserver}`,
      `--cert-dir=${join(o.runDir, 'pki')}`,
      `--tls-cert-file=${serving.cert}`,
      `--tls-private-key-file=${serving.key}`,
      `--client-ca-file=${pki.caCert}`,
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-key-file=${pki.saPub}`,
      `--service-account-signing-key-file=${pki.saKey}`,
      '--authorization-mode=Node,RBAC',
      '--enable-admission-plugins=NodeRestriction',
      `--kubelet-client-certificate=${kc.cert}`,
      `--kubelet-client-key=${kc.key}`,
      '--allow-privileged=true',
      // reach kubelets by their InternalIP (no DNS on the testbed: never resolve node names)
      '--kubelet-preferred-address-types=InternalIP',
      '--profiling=false',
      ...(index === 0 ? auditFlags(o) : []),
      '--v=1',
    ],
    logFile: join(o.runDir, 'logs', `${name}.log`),
    cpus: o.cpus,
  };
}

export function schedulerSpec(o: ControlPlaneOptions) {
  return {
    name: 'kube-scheduler',
    cmd: binaryPath('kube-scheduler'),
    args: [
      `--kubeconfig=${o.kubeconfigs.scheduler}`,
      `--authentication-kubeconfig=${o.kubeconfigs.scheduler}`,
      `--authorization-kubeconfig=${o.kubeconfigs.scheduler}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${PORTS.scheduler}`,
      '--leader-elect=false',
      ...(o.schedulerConfig ? [`--config=${o.schedulerConfig}`] : []),
      '--v=1',
    ],
    logFile: join(o.runDir, 'logs', 'kube-scheduler.log'),
    cpus: o.cpus,
  };
}

export function controllerManagerSpec(o: ControlPlaneOptions) {
  const { pki } = o;
  return {
    name: 'kube-controller-manager',
    cmd: binaryPath('kube-controller-manager'),
    args: [
      `--kubeconfig=${o.kubeconfigs.controllerManager}`,
      `--authentication-kubeconfig=${o.kubeconfigs.controllerManager}`,
      `--authorization-kubeconfig=${o.kubeconfigs.controllerManager}`,
      '--bind-address=127.0.0.1',
      `--secure-port=${PORTS.controllerManager}`,
      '--leader-elect=false',
      '--use-service-account-credentials=true',
      `--service-account-private-key-file=${pki.saKey}`,
      `--root-ca-file=${pki.caCert}`,
      `--cluster-signing-cert-file=${pki.caCert}`,
      `--cluster-signing-key-file=${pki.caKey}`,
      `--controllers=${o.controllers ?? '*'}`,
      '--v=1',
      ...(o.controllerManagerExtraArgs ?? []),
    ],
    logFile: join(o.runDir, 'logs', 'kube-controller-manager.log'),
    cpus: o.cpus,
  };
}

export async function startEtcd(o: ControlPlaneOptions): Promise<TrackedProcess> {
  await mkdir(join(o.runDir, 'etcd'), { recursive: true, mode: 0o700 });
  const p = startProcess(etcdSpec(o));
  await pollUntil(
    'etcd /health',
    async () => {
      assertRunning(p);
      const res = await fetch(`http://127.0.0.1:${PORTS.etcdClient}/health`);
      return res.ok && (await res.text()).includes('true');
    },
    { timeoutMs: 30_000, explain: () => tailFile(p.logFile) },
  );
  return p;
}

/** Throws a FatalError (ends a poll at once) with the log tail when process `p` has exited. */
function assertRunning(p: { name: string; pid: number; logFile: string } | undefined): void {
  if (p && !isAlive(p.pid)) throw new FatalError(`${p.name} exited:\n${tailFile(p.logFile)}`);
}

/** Waits for /readyz of apiserver `index`; with `p` (the apiserver's process) a dead apiserver ends the wait at once. */
export async function waitApiserverReady(o: ControlPlaneOptions, logFile: string, timeoutMs = 90_000, p?: TrackedProcess, index = 0): Promise<void> {
  const admin = o.pki.client('admin');
  await pollUntil(
    `${apiserverName(index)} /readyz`,
    async () => {
      assertRunning(p);
      return (await httpsGet(`${apiserverUrl(o, index)}/readyz`, { ca: o.pki.caCert, ...admin }))[0] === 200;
    },
    { timeoutMs, explain: () => tailFile(logFile) },
  );
}

export async function startApiserver(o: ControlPlaneOptions, index = 0): Promise<TrackedProcess> {
  const p = startProcess(apiserverSpec(o, index));
  await waitApiserverReady(o, p.logFile, undefined, p, index);
  return p;
}

async function startSecureComponent(spec: ReturnType<typeof schedulerSpec>, port: number): Promise<TrackedProcess> {
  const p = startProcess(spec);
  await pollUntil(
    `${spec.name} /healthz`,
    async () => {
      assertRunning(p);
      return (await httpsGet(`https://127.0.0.1:${port}/healthz`, { insecure: true }))[0] === 200;
    },
    { timeoutMs: 60_000, explain: () => tailFile(p.logFile) },
  );
  return p;
}

export const startScheduler = (o: ControlPlaneOptions) => startSecureComponent(schedulerSpec(o), PORTS.scheduler);
export const startControllerManager = (o: ControlPlaneOptions) => startSecureComponent(controllerManagerSpec(o), PORTS.controllerManager);
