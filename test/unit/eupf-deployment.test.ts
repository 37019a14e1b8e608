import { describe, expect, it } from 'vitest';
import { EUPF_IMAGE, EUPF_PORTS, eupfDeployment, eupfService, eupfStartProblem } from '../../experiments/5g/eupf.ts';

describe('eUPF as the critical Deployment', () => {
  const d = eupfDeployment({ namespace: 'ulysses-critical', nodes: ['real-2'] });
  const c = d.spec!.template.spec!.containers[0]!;
  it('is one critical replica, replaced by Recreate (two UPFs never hold the same sessions)', () => {
    expect(d.spec!.replicas).toBe(1);
    expect(d.spec!.strategy?.type).toBe('Recreate');
    expect(d.spec!.template.metadata!.labels).toMatchObject({ app: 'upf', 'ulysses.io/criticality': 'high' });
    expect(d.spec!.selector.matchLabels).toEqual({ app: 'upf' });
  });
  it('runs the local image privileged, XDP generic on eth0, every address its own pod IP', () => {
    expect(c.image).toBe(EUPF_IMAGE);
    expect(c.imagePullPolicy).toBe('Never');
    expect(c.securityContext?.privileged).toBe(true);
    const arg = (f: string) => c.args![c.args!.indexOf(f) + 1];
    expect([arg('--iface'), arg('--attach'), arg('--paddr'), arg('--nodeid'), arg('--n3addr')]).toEqual(['eth0', 'generic', '$(POD_IP):8805', '$(POD_IP)', '$(POD_IP)']);
    expect(c.env).toEqual([{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }]);
    // no fixed address: the API and metrics listen on every address of the pod
    expect(c.args!.filter((a) => /\d+\.\d+\.\d+\.\d+/.test(a) && !a.startsWith('0.0.0.0:'))).toEqual([]);
  });
  it('is Ready when its health API answers, and stays on the nodes it is given', () => {
    expect(c.readinessProbe?.httpGet).toMatchObject({ path: '/api/v1/health', port: EUPF_PORTS.api });
    expect(c.readinessProbe?.periodSeconds).toBe(1);
    expect(d.spec!.template.spec!.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms[0]!.matchExpressions![0]!.values).toEqual(['real-2']);
    expect(eupfDeployment({ namespace: 'x' }).spec!.template.spec!.affinity).toBeUndefined();
  });
  it("has a Service over PFCP and GTP-U for its EndpointSlice", () => {
    const s = eupfService({ namespace: 'ulysses-critical' });
    expect(s.spec!.selector).toEqual({ app: 'upf' });
    expect(s.spec!.ports!.map((p) => [p.name, p.port, p.protocol])).toEqual([['pfcp', 8805, 'UDP'], ['gtpu', 2152, 'UDP']]);
  });
});

describe('eupfStartProblem', () => {
  const pod = (status: object) => ({ metadata: { namespace: 'ulysses-critical', name: 'upf-1' }, spec: { nodeName: 'real-1', containers: [] }, status: { containerStatuses: [{ name: 'eupf', ...status }] } }) as never;
  it('names eUPF\'s exit and its last log lines (a failed XDP attach)', () => {
    const message = 'INF loading\nFTL Can\'t attach XDP program to iface "nosuch": link not found\n';
    expect(eupfStartProblem(pod({ state: { waiting: { reason: 'CrashLoopBackOff' } }, lastState: { terminated: { exitCode: 1, reason: 'Error', message } } }))).toBe(
      'eUPF in pod ulysses-critical/upf-1 on real-1 exited with 1 (Error): INF loading | FTL Can\'t attach XDP program to iface "nosuch": link not found',
    );
  });
  it('is undefined while eUPF runs or has not started, and for a clean exit', () => {
    expect(eupfStartProblem(pod({ state: { running: {} } }))).toBeUndefined();
    expect(eupfStartProblem(pod({ state: { waiting: { reason: 'ContainerCreating' } } }))).toBeUndefined();
    expect(eupfStartProblem(pod({ state: { terminated: { exitCode: 0 } } }))).toBeUndefined();
  });
  it('sends a failed start to the container status', () => {
    expect(eupfDeployment({ namespace: 'x' }).spec!.template.spec!.containers[0]!.terminationMessagePolicy).toBe('FallbackToLogsOnError');
  });
});
