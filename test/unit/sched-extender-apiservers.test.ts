/**
 * The reservation epoch on every kube-apiserver, the pure parts: the apiservers' list from the
 * EndpointSlice / Endpoints default/kubernetes as kube-apiserver's lease endpoint reconciler writes
 * them (scheduler-plugins/extender/apiservers.ts), the credentials aimed at one apiserver's address
 * (the kubeconfig's CA and client certificate, not its server name), and the new leader's
 * confirmation rounds over fakes: the list re-read every round, an apiserver that refuses or cannot
 * be reached holding the leader back with its name in the readiness reason, one that leaves the list
 * no longer waited for, a confirmed one not asked again. The real thing (two apiservers, one
 * stopped) is test/integration/scheduler-extender-fence.int.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { Agent as HttpsAgent } from 'node:https';
import {
  APISERVER_ENDPOINTS_PATH,
  APISERVER_SLICE_PATH,
  MAX_APISERVERS,
  apiserverAccess,
  apiserversFromEndpoints,
  apiserversFromSlice,
} from '../../scheduler-plugins/extender/apiservers.ts';
import { ExtenderLeadership, RESERVATION_EPOCH_ANNOTATION } from '../../scheduler-plugins/extender/leadership.ts';
import { ApiError, type KubeClient } from '../../core/kube.ts';
import { silentLogger } from '../../core/logging.ts';
import { FAST_LEASE, testLeadership } from '../fast-lease.ts';

/** The slice kube-apiserver writes (EndpointsAdapter: one endpoint per IP, ready, the port "https"). */
const slice = (ips: string[], port = 6443, addressType = 'IPv4') => ({
  apiVersion: 'discovery.k8s.io/v1',
  kind: 'EndpointSlice',
  metadata: { name: 'kubernetes', namespace: 'default', labels: { 'kubernetes.io/service-name': 'kubernetes' } },
  addressType,
  endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
  ports: [{ name: 'https', port, protocol: 'TCP' }],
});

describe('the apiservers listed in default/kubernetes', () => {
  it('EndpointSlice: one URL per address with the https port, sorted, without duplicates; IPv6 in brackets; 443 is the origin without a port', () => {
    expect(apiserversFromSlice(slice(['192.168.60.23', '192.168.60.21', '192.168.60.22', '192.168.60.21']))).toEqual([
      'https://192.168.60.21:6443',
      'https://192.168.60.22:6443',
      'https://192.168.60.23:6443',
    ]);
    expect(apiserversFromSlice(slice(['fd00::2', 'fd00::1'], 6443, 'IPv6'))).toEqual(['https://[fd00::1]:6443', 'https://[fd00::2]:6443']);
    expect(apiserversFromSlice(slice(['10.0.0.1'], 443))).toEqual(['https://10.0.0.1']);
    // the only port, whatever its name; none listed: no apiserver
    expect(apiserversFromSlice({ ...slice(['10.0.0.1']), ports: [{ name: 'api', port: 8443 }] })).toEqual(['https://10.0.0.1:8443']);
    expect(apiserversFromSlice({ ...slice([]), ports: [] })).toEqual([]);
  });

  it('malformed: an error naming the object and the field', () => {
    expect(() => apiserversFromSlice(slice(['a.example'], 6443, 'FQDN'))).toThrow('EndpointSlice default/kubernetes: addressType "FQDN" (IPv4 or IPv6 expected)');
    expect(() => apiserversFromSlice(slice(['10.0.0.256']))).toThrow('EndpointSlice default/kubernetes: address "10.0.0.256" is not an IP address');
    expect(() => apiserversFromSlice({ ...slice(['10.0.0.1']), ports: [{ name: 'a', port: 1 }, { name: 'b', port: 2 }] })).toThrow(
      'EndpointSlice default/kubernetes ports: no port named "https" among 2 ports',
    );
    expect(() => apiserversFromSlice({ ...slice(['10.0.0.1']), ports: [{ name: 'https', port: 0 }] })).toThrow('port "https" is 0, not a port number');
    expect(() => apiserversFromSlice({ ...slice([]), endpoints: [{}] as never })).toThrow('EndpointSlice default/kubernetes: endpoints[0].addresses missing');
    const many = Array.from({ length: MAX_APISERVERS + 1 }, (_, i) => `10.1.${i >> 8}.${i & 255}`);
    expect(() => apiserversFromSlice(slice(many))).toThrow(`EndpointSlice default/kubernetes: ${MAX_APISERVERS + 1} apiserver addresses, more than ${MAX_APISERVERS}`);
    expect(apiserversFromSlice(slice(many.slice(0, MAX_APISERVERS)))).toHaveLength(MAX_APISERVERS);
  });

  it('Endpoints (no slice): ready and not-ready addresses of every subset', () => {
    expect(
      apiserversFromEndpoints({
        subsets: [{ addresses: [{ ip: '10.0.0.2' }, { ip: '10.0.0.1' }], notReadyAddresses: [{ ip: '10.0.0.3' }], ports: [{ name: 'https', port: 6443 }] }],
      }),
    ).toEqual(['https://10.0.0.1:6443', 'https://10.0.0.2:6443', 'https://10.0.0.3:6443']);
    expect(apiserversFromEndpoints({})).toEqual([]);
    expect(() => apiserversFromEndpoints({ subsets: [{ addresses: [{ ip: '10.0.0.1' }], ports: [] }] })).toThrow('Endpoints default/kubernetes subsets[0].ports: no port named "https" among 0 ports');
  });
});

describe("the kubeconfig's credentials aimed at one apiserver", () => {
  it("same headers, CA and client certificate; the name checked is the address (not the kubeconfig's tls-server-name); one agent until the credentials change", async () => {
    let cert = Buffer.from('cert-1');
    const kc = {
      getCurrentCluster: () => ({ server: 'https://lb.example:6443' }),
      applyToFetchOptions: async () => ({
        agent: new HttpsAgent({ ca: Buffer.from('ca'), cert, key: Buffer.from('key'), servername: 'lb.example' }),
        headers: { Authorization: 'Bearer t', 'Impersonate-User': 'someone' },
      }),
    };
    const access = apiserverAccess(kc, 'https://10.0.0.2:6443');
    expect(access.getCurrentCluster()).toEqual({ server: 'https://10.0.0.2:6443' });
    const a = (await access.applyToFetchOptions({})) as { agent: HttpsAgent & { options: Record<string, unknown> }; headers: Record<string, string> };
    expect(a.headers).toEqual({ Authorization: 'Bearer t', 'Impersonate-User': 'someone' });
    expect(a.agent.options).toMatchObject({ ca: Buffer.from('ca'), cert: Buffer.from('cert-1'), key: Buffer.from('key'), keepAlive: true });
    expect(a.agent.options.servername).toBeUndefined();
    expect(a.agent.options.rejectUnauthorized).toBeUndefined(); // verification stays on (Node's default)
    const b = (await access.applyToFetchOptions({})) as { agent: HttpsAgent };
    expect(b.agent).toBe(a.agent);
    cert = Buffer.from('cert-2'); // rotated
    const c = (await access.applyToFetchOptions({})) as { agent: HttpsAgent & { options: Record<string, unknown> } };
    expect(c.agent).not.toBe(a.agent);
    expect(c.agent.options.cert).toEqual(Buffer.from('cert-2'));
  });
});

describe("a new leader confirms its epoch on every listed apiserver before it serves", () => {
  it('rounds: list unreadable; .2 refuses (old cache) while .3 joins and refuses connections; .3 leaves the list: served; no apiserver asked again once it admitted', async () => {
    const LEASES = '/apis/coordination.k8s.io/v1/namespaces/ulysses-system/leases';
    let stored: Record<string, any> = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'ulysses-scheduler-extender', namespace: 'ulysses-system', resourceVersion: '1' },
      spec: { holderIdentity: '', leaseDurationSeconds: 1, leaseTransitions: 2 },
    };
    const calls: string[] = [];
    const reasons: string[] = [];
    let listReads = 0;
    let leadership!: ExtenderLeadership;
    const reason = () => {
      const g = leadership.gate.check();
      return g.ready ? 'ready' : g.reason;
    };
    const dryRun = (who: string, opts: { query?: Record<string, unknown>; body?: any }) => {
      expect(opts.query).toEqual({ dryRun: 'All' });
      expect(opts.body).toEqual({ metadata: { annotations: { [RESERVATION_EPOCH_ANNOTATION]: '3' } } });
      calls.push(`dry run ${who}`);
    };
    const own = {
      kc: { getCurrentCluster: () => ({ server: 'https://10.0.0.1:6443/' }) },
      request: async (method: string, path: string, opts: { body?: any; query?: Record<string, unknown> } = {}) => {
        if (path === APISERVER_SLICE_PATH) {
          reasons.push(reason());
          const n = ++listReads;
          calls.push(`list ${n}`);
          if (n === 1) throw new ApiError(`GET ${path}: 500 etcd timeout`, 500);
          return slice(n === 2 ? ['10.0.0.1', '10.0.0.2'] : n === 3 ? ['10.0.0.1', '10.0.0.2', '10.0.0.3'] : ['10.0.0.1', '10.0.0.2']);
        }
        if (path === APISERVER_ENDPOINTS_PATH) throw new Error('the Endpoints are read only without a slice');
        expect(path.startsWith(LEASES)).toBe(true);
        if (method === 'GET') return structuredClone(stored);
        if (method === 'PUT') {
          stored = { ...opts.body, metadata: { ...opts.body.metadata, resourceVersion: String(Number(stored.metadata.resourceVersion) + 1) } };
          return structuredClone(stored);
        }
        if (method === 'PATCH') {
          dryRun('10.0.0.1', opts);
          return structuredClone(stored);
        }
        throw new Error(`unexpected ${method} ${path}`);
      },
    } as unknown as KubeClient;
    const direct = (url: string) => ({
      request: async (method: string, path: string, opts: { body?: any; query?: Record<string, unknown> } = {}) => {
        expect(method).toBe('PATCH');
        expect(path).toBe(`${LEASES}/ulysses-scheduler-extender`);
        const ip = new URL(url).hostname;
        dryRun(ip, opts);
        if (ip === '10.0.0.2' && listReads < 3) throw new ApiError(`PATCH ${path}: 403 reservation epoch "3" is not the current one: Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions is 2`, 403, 'Forbidden');
        if (ip === '10.0.0.3') throw Object.assign(new Error(`request to ${url}${path} failed, reason: connect ECONNREFUSED 10.0.0.3:6443`), { code: 'ECONNREFUSED' });
        return structuredClone(stored);
      },
    }) as unknown as Pick<KubeClient, 'request'>;
    let serving!: () => void;
    const served = new Promise<void>((r) => (serving = r));
    leadership = new ExtenderLeadership({
      client: own,
      apiserverClient: direct,
      ...testLeadership('me'),
      rebuild: async () => {
        calls.push(`rebuild (ready: ${leadership.gate.check().ready})`);
      },
      onServing: () => serving(),
    });
    leadership.start();
    try {
      await served;
      expect(calls).toEqual([
        'list 1',
        'dry run 10.0.0.1', // the kubeconfig's server, whatever the list
        'list 2',
        'dry run 10.0.0.2', // refused: its cache has the old Lease
        'list 3',
        'dry run 10.0.0.2', // admitted now
        'dry run 10.0.0.3', // joined the list; cannot be reached
        'list 4', // .3 left the list: nothing pending
        'rebuild (ready: false)',
      ]);
      // what readiness said before each list read (i.e. after the round before it)
      expect(reasons[0]).toMatch(/^leader since \d+ ms, rebuilding the reservations from the pods' annotations; not serving yet$/);
      expect(reasons[1]).toContain("confirming reservation epoch 3 (Lease ulysses-system/ulysses-scheduler-extender spec.leaseTransitions) on 1 apiserver(s); pending: none; cannot read the apiservers' list (EndpointSlice default/kubernetes): GET");
      expect(reasons[2]).toContain('on 2 apiserver(s); pending: 10.0.0.2:6443: refused: PATCH /apis/coordination.k8s.io/v1/namespaces/ulysses-system/leases/ulysses-scheduler-extender: 403 reservation epoch "3" is not the current one');
      expect(reasons[2]).not.toContain('10.0.0.1');
      expect(reasons[3]).toContain('on 3 apiserver(s); pending: 10.0.0.3:6443: unreachable: request to https://10.0.0.3:6443');
      expect(reasons[3]).toMatch(/not serving yet$/);
      expect(leadership.confirmations).toEqual([
        { apiserver: '10.0.0.1:6443', epoch: 3, kubeconfigServer: true },
        { apiserver: '10.0.0.2:6443', epoch: 3, kubeconfigServer: false },
      ]);
      expect(leadership.gate.check()).toMatchObject({ ready: true, epoch: '3' });
    } finally {
      await leadership.stop();
    }
  });

  it('an apiserver that does not answer: pending "no answer yet" while the dry run is out', async () => {
    let stored: Record<string, any> = {
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'l', namespace: 'ns', resourceVersion: '1' },
      spec: { holderIdentity: '', leaseDurationSeconds: 1, leaseTransitions: 0 },
    };
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    let asked!: () => void;
    const askedP = new Promise<void>((r) => (asked = r));
    const own = {
      kc: { getCurrentCluster: () => ({ server: 'https://10.96.0.1:443' }) },
      request: async (method: string, path: string, opts: { body?: any } = {}) => {
        if (path === APISERVER_SLICE_PATH) return slice(['10.0.0.1', '10.0.0.2']);
        if (method === 'GET') return structuredClone(stored);
        if (method === 'PUT') return (stored = { ...opts.body, metadata: { ...opts.body.metadata, resourceVersion: '2' } });
        return structuredClone(stored);
      },
    } as unknown as KubeClient;
    let serving = false;
    const leadership = new ExtenderLeadership({
      client: own,
      apiserverClient: (url) => ({
        request: (async () => {
          if (url.includes('10.0.0.2')) {
            asked();
            await answered;
          }
          return structuredClone(stored);
        }) as never,
      }),
      namespace: 'ns',
      name: 'l',
      identity: 'me',
      ...FAST_LEASE,
      log: silentLogger(),
      rebuild: async () => undefined,
      onServing: () => {
        serving = true;
      },
      onStopped: () => undefined,
    });
    leadership.start();
    try {
      await askedP;
      // the in-cluster address (the Service's ClusterIP) and both listed apiservers: 3 targets
      await new Promise<void>((r) => setImmediate(r));
      const g = leadership.gate.check();
      expect(!g.ready && g.reason).toMatch(/on 3 apiserver\(s\); pending: 10\.0\.0\.2:6443: no answer yet; not serving yet$/);
      expect(serving).toBe(false);
      answer();
      const { pollUntil } = await import('../../experiments/testbed/processes.ts');
      await pollUntil('served', () => serving, { timeoutMs: 10_000, intervalMs: 5 });
      expect(leadership.confirmations.map((c) => c.apiserver)).toEqual(['10.96.0.1', '10.0.0.1:6443', '10.0.0.2:6443']);
    } finally {
      await leadership.stop();
    }
  });
});
