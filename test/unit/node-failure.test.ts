/**
 * Node failure detection, the pure parts: the heartbeat codec (bounded parsing), the detector's
 * decisions on a fake clock (what fails a node and every guard that keeps a living one), the
 * node agent on loopback, which pods the node-failure taint applies to, and the config's errors.
 */
import dgram from 'node:dgram';
import { readFileSync } from 'node:fs';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import type { V1Pod, V1Taint, V1Toleration } from '@kubernetes/client-node';
import { decodeHeartbeat, encodeHeartbeat, MAX_HEARTBEAT_BYTES } from '../../core/node-heartbeat.ts';
import { NodeFailureConfigSchema, NodeFailureDetector, NODE_UNREACHABLE_TAINT, type KubeletCheck, type NodeFailureConfig } from '../../controller-manager/node-failure.ts';
import { applicableTaints, evictionDecision } from '../../controller-manager/controllers/taint-eviction.ts';
import { NodeAgent, NodeAgentConfigSchema } from '../../kubelet-shim/node-agent.ts';
import { ConfigError, validateConfig } from '../../core/config.ts';
import { componentLogger } from '../../core/logging.ts';

const nonce = Buffer.from('01234567');

describe('heartbeat codec', () => {
  it('round-trips a probe and a reply', () => {
    const p = { type: 'probe' as const, nonce, seq: 4_000_000_000, node: 'worker-1' };
    expect(decodeHeartbeat(encodeHeartbeat(p))).toEqual(p);
    expect(decodeHeartbeat(encodeHeartbeat({ ...p, type: 'reply' }))).toEqual({ ...p, type: 'reply' });
  });

  it('rejects what is not a heartbeat, oversized datagrams before parsing', () => {
    const good = encodeHeartbeat({ type: 'probe', nonce, seq: 1, node: 'n' });
    expect(decodeHeartbeat(Buffer.alloc(MAX_HEARTBEAT_BYTES + 1))).toMatchObject({ error: expect.stringContaining('length') });
    expect(decodeHeartbeat(Buffer.from('hello world, not a heartbeat'))).toMatchObject({ error: 'bad magic' });
    const truncated = good.subarray(0, good.length - 1);
    expect(decodeHeartbeat(truncated)).toMatchObject({ error: expect.stringContaining('does not match') });
    const badType = Buffer.from(good);
    badType.writeUInt8(9, 5);
    expect(decodeHeartbeat(badType)).toMatchObject({ error: 'type 9' });
    expect(() => encodeHeartbeat({ type: 'probe', nonce, seq: 1, node: 'x'.repeat(254) })).toThrow(/node name/);
  });
});

const config = (over: Partial<NodeFailureConfig> = {}): NodeFailureConfig => validateConfig(NodeFailureConfigSchema, { periodMs: 100, windowMs: 600, confirmTimeoutMs: 400, ...over }, 'test');

/** A detector on a fake clock; kubelet checks answer what `kubelet` says for the node. */
function harness(over: Partial<NodeFailureConfig> = {}, nodes = ['a', 'b', 'c']) {
  let now = 0;
  const kubelet = new Map<string, KubeletCheck>();
  const failed: string[] = [];
  const suppressed: Array<{ nodes: string[]; reason: string }> = [];
  const guards: string[] = [];
  const checks: string[] = [];
  const d = new NodeFailureDetector(config(over), () => now, {
    checkKubelet: async (node) => {
      checks.push(node);
      return kubelet.get(node) ?? 'silent';
    },
    onFailed: (node) => failed.push(node),
    onSuppressed: (ns, reason) => suppressed.push({ nodes: ns, reason }),
    onKubeletAnswers: (node) => guards.push(`kubelet-answers:${node}`),
    onDeciderLag: () => guards.push('decider-lag'),
  });
  d.setTargets(new Map(nodes.map((n, i) => [n, { address: `10.0.0.${i + 1}`, kubeletPort: 10250 }])));
  const addr = (n: string) => `10.0.0.${nodes.indexOf(n) + 1}`;
  /** `ms` of 100 ms periods; `answering` nodes reply each period */
  const run = async (ms: number, answering: string[]) => {
    for (let t = 0; t < ms; t += 100) {
      now += 100;
      for (const n of answering) d.heard(n, now);
      d.tick(0);
      await Promise.resolve();
      await Promise.resolve();
    }
  };
  return { d, kubelet, failed, suppressed, guards, checks, run, addr, advance: (ms: number) => (now += ms), nowMs: () => now };
}

describe('NodeFailureDetector', () => {
  it('fails a node whose agent and kubelet are silent, after the window, and only that node', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    await h.run(500, ['b', 'c']);
    expect(h.failed).toEqual([]);
    expect(h.checks).toEqual(['a']); // checked at window - confirm (200 ms), while the window runs
    await h.run(200, ['b', 'c']);
    expect(h.failed).toEqual(['a']);
    expect(h.d.phase('a')).toBe('failed');
    expect(h.d.phase('b')).toBe('healthy');
  });

  it('decides when the kubelet check ends silent, not at the next period (onKubeletSilent), and only for a silent result', async () => {
    let now = 0;
    const failedAt: Array<[string, number]> = [];
    const pending = new Map<string, (r: KubeletCheck) => void>();
    const d: NodeFailureDetector = new NodeFailureDetector(config(), () => now, {
      checkKubelet: (node) => new Promise((resolve) => pending.set(node, resolve)),
      onFailed: (node) => failedAt.push([node, now]),
      onSuppressed: () => {},
      onKubeletAnswers: () => {},
      onDeciderLag: () => {},
      onKubeletSilent: () => d.tick(0),
    });
    d.setTargets(new Map(['a', 'b', 'c'].map((n, i) => [n, { address: `10.0.0.${i + 1}`, kubeletPort: 10250 }])));
    const flush = async () => {
      for (let i = 0; i < 3; i++) await Promise.resolve();
    };
    for (; now < 1000; now += 100) {
      for (const n of ['a', 'b', 'c']) d.heard(n, now);
      d.tick(0);
    }
    // from t = 1000 nodes a and b are silent (c answers): both checked at 200 ms of silence
    for (; now <= 1600; now += 100) {
      d.heard('c', now);
      d.tick(0);
    }
    expect([...pending.keys()].sort()).toEqual(['a', 'b']);
    now = 1650; // between two periods, after the window (600 ms)
    pending.get('b')!('alive');
    await flush();
    expect(failedAt).toEqual([]);
    pending.get('a')!('silent');
    await flush();
    expect(failedAt).toEqual([['a', 1650]]);
  });

  it('does not fail a node whose kubelet answers (agent crashed or paused), and says so once', async () => {
    const h = harness();
    h.kubelet.set('a', 'alive');
    await h.run(1000, ['a', 'b', 'c']);
    await h.run(3000, ['b', 'c']);
    expect(h.failed).toEqual([]);
    expect(h.guards.filter((g) => g === 'kubelet-answers:a')).toHaveLength(1);
    // checked again a window after each living answer: still alive, still not failed
    expect(h.checks.length).toBeGreaterThan(1);
  });

  it('never fails a node this instance has not heard (new leader, node without agent)', async () => {
    const h = harness();
    await h.run(1000, ['b', 'c']);
    await h.run(5000, ['b', 'c']);
    expect(h.failed).toEqual([]);
    expect(h.checks).toEqual([]);
  });

  it('evicts nothing when every armed agent is silent together (full disruption)', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    await h.run(3000, []);
    expect(h.failed).toEqual([]);
    expect(h.suppressed).toEqual([{ nodes: ['a', 'b', 'c'], reason: 'full-disruption' }]);
  });

  it('evicts nothing when more than 2 and at least the threshold of the agents are silent (partial disruption), but does with 2', async () => {
    const five = ['a', 'b', 'c', 'd', 'e'];
    const h = harness({}, five);
    await h.run(1000, five);
    await h.run(2000, ['d', 'e']); // 3 of 5 silent: 60 % >= 55 %
    expect(h.failed).toEqual([]);
    expect(h.suppressed[0]).toMatchObject({ reason: 'partial-disruption' });
    const h2 = harness({}, five);
    await h2.run(1000, five);
    await h2.run(2000, ['c', 'd', 'e']); // 2 silent: kcm's rule needs more than 2
    expect(h2.failed.sort()).toEqual(['a', 'b']);
  });

  it('asks a kubelet again before failing its node when its silence was heard more than a window ago (a disruption ended)', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    await h.run(2000, []); // everything silent: suppressed, one check each
    expect(h.failed).toEqual([]);
    expect(h.checks.sort()).toEqual(['a', 'b', 'c']);
    h.kubelet.set('a', 'alive'); // a's kubelet is back, its agent still silent
    await h.run(1500, ['b', 'c']);
    expect(h.checks.filter((n) => n === 'a').length).toBeGreaterThanOrEqual(2);
    expect(h.failed).toEqual([]);
    expect(h.guards).toContain('kubelet-answers:a');
    // the same with the kubelet still silent: failed, after the second check
    const h2 = harness();
    await h2.run(1000, ['a', 'b', 'c']);
    await h2.run(2000, []);
    await h2.run(1500, ['b', 'c']);
    expect(h2.failed).toEqual(['a']);
    expect(h2.checks.filter((n) => n === 'a')).toHaveLength(2);
  });

  it('restarts every window when its own tick came late (replies may be waiting unread)', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    // the process stalls 2 s: nobody's replies were read
    h.advance(2000);
    h.d.tick(2000);
    expect(h.guards).toEqual(['decider-lag']);
    await h.run(100, ['a', 'b', 'c']);
    expect(h.failed).toEqual([]);
    expect(h.checks).toEqual([]);
  });

  it('recovers a failed node only after its agent answered for a full window', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    await h.run(1000, ['b', 'c']);
    expect(h.d.phase('a')).toBe('failed');
    await h.run(300, ['a', 'b', 'c']);
    expect(h.d.phase('a')).toBe('failed');
    expect(h.d.answeringFor('a')).toBe(200); // replies at +100, +200, +300
    await h.run(400, ['a', 'b', 'c']);
    expect(h.d.phase('a')).toBe('healthy');
  });

  it('a node whose InternalIP changes must be heard anew before it is monitored', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    expect(h.d.isArmed('a')).toBe(true);
    h.d.setTargets(new Map([['a', { address: '10.0.0.99' }], ['b', { address: h.addr('b') }], ['c', { address: h.addr('c') }]]));
    expect(h.d.isArmed('a')).toBe(false);
    await h.run(3000, ['b', 'c']);
    expect(h.failed).toEqual([]);
  });

  it('forgets nodes that are gone and ignores replies naming unknown nodes', async () => {
    const h = harness();
    await h.run(1000, ['a', 'b', 'c']);
    h.d.setTargets(new Map([['b', { address: h.addr('b') }], ['c', { address: h.addr('c') }]]));
    h.d.heard('a');
    h.d.heard('zzz');
    expect(h.d.targets().map((x) => x.node)).toEqual(['b', 'c']);
    expect(h.d.stats().armed).toBe(2);
  });
});

describe('NodeFailureConfigSchema', () => {
  it('names the field of a bad window, period or timeout', () => {
    const err = (raw: unknown) => {
      try {
        validateConfig(NodeFailureConfigSchema, raw, 'UlyssesConfig spec.nodeFailure');
      } catch (e) {
        expect(e).toBeInstanceOf(ConfigError);
        return (e as Error).message;
      }
      throw new Error('accepted');
    };
    expect(err({ periodMs: 100, windowMs: 200 })).toMatch(/windowMs.*at least 3 periods/);
    expect(err({ periodMs: 5 })).toMatch(/periodMs/);
    expect(err({ windowMs: 600, confirmTimeoutMs: 700 })).toMatch(/confirmTimeoutMs.*must not exceed windowMs/);
    expect(err({ scope: 'everything' })).toMatch(/scope/);
    expect(err({ windowMs: '1s' })).toMatch(/windowMs/);
    expect(validateConfig(NodeFailureConfigSchema, {}, 'x')).toMatchObject({ enabled: true, periodMs: 100, windowMs: 600, confirmTimeoutMs: 400, scope: 'critical' });
  });
});

describe('the node-failure taint applies to the pods in scope only', () => {
  const taints: V1Taint[] = [{ key: NODE_UNREACHABLE_TAINT, effect: 'NoExecute' }];
  // what DefaultTolerationSeconds adds to every pod
  const defaults: V1Toleration[] = [
    { key: 'node.kubernetes.io/not-ready', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
    { key: 'node.kubernetes.io/unreachable', operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 300 },
  ];
  const pod = (criticality: string, extra: Partial<V1Pod['metadata']> = {}, tolerations: V1Toleration[] = defaults): V1Pod => ({
    metadata: { name: 'p', namespace: 'n', labels: { 'ulysses.io/criticality': criticality }, ...extra },
    spec: { containers: [], tolerations },
  });

  it('evicts a critical pod at once despite the 300 s defaults; a low pod keeps stock behaviour', () => {
    expect(evictionDecision(defaults, applicableTaints(pod('high'), taints, 'critical'))).toEqual({ action: 'evict' });
    expect(evictionDecision(defaults, applicableTaints(pod('low'), taints, 'critical'))).toEqual({ action: 'keep' });
    expect(evictionDecision(defaults, applicableTaints(pod('low'), taints, 'all'))).toEqual({ action: 'evict' });
  });

  it("honours the author's toleration of this taint, and of every taint", () => {
    const own = [...defaults, { key: NODE_UNREACHABLE_TAINT, operator: 'Exists', effect: 'NoExecute', tolerationSeconds: 5 }];
    expect(evictionDecision(own, applicableTaints(pod('high', {}, own), taints, 'critical'))).toEqual({ action: 'after', afterMs: 5000 });
    const all = [{ operator: 'Exists' }];
    expect(evictionDecision(all, applicableTaints(pod('high', {}, all), taints, 'critical'))).toEqual({ action: 'keep' });
  });

  it('never applies to DaemonSet or mirror pods', () => {
    const ds = pod('high', { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'd', uid: 'u', controller: true }] });
    expect(evictionDecision(defaults, applicableTaints(ds, taints, 'all'))).toEqual({ action: 'keep' });
    const mirror = pod('high', { annotations: { 'kubernetes.io/config.mirror': 'x' } });
    expect(evictionDecision(defaults, applicableTaints(mirror, taints, 'all'))).toEqual({ action: 'keep' });
  });
});

describe('NodeAgent on loopback', () => {
  it('answers probes naming its node only, and bounds its replies', async () => {
    const registry = new Registry();
    const agent = new NodeAgent({
      node: 'me',
      config: NodeAgentConfigSchema.parse({ address: '127.0.0.1', port: 0, maxRepliesPerSecond: 3 }),
      log: componentLogger('test'),
      registry,
    });
    await agent.start();
    const client = dgram.createSocket('udp4');
    await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
    const replies: number[] = [];
    client.on('message', (m) => {
      const h = decodeHeartbeat(m);
      if (!('error' in h)) replies.push(h.seq);
    });
    const send = (node: string, seq: number) => new Promise<void>((r) => client.send(encodeHeartbeat({ type: 'probe', nonce, seq, node }), agent.port!, '127.0.0.1', () => r()));
    await send('someone-else', 1);
    await send('me', 2);
    client.send(Buffer.from('garbage'), agent.port!, '127.0.0.1');
    for (let i = 3; i < 10; i++) await send('me', i);
    const { pollUntil } = await import('../../experiments/testbed/processes.ts');
    await pollUntil('agent counted every datagram', async () => {
      const m = await registry.getSingleMetric('ulysses_node_agent_probes_total')!.get();
      return m.values.reduce((s, v) => s + v.value, 0) === 10;
    }, { timeoutMs: 5000, intervalMs: 10 });
    const m = await registry.getSingleMetric('ulysses_node_agent_probes_total')!.get();
    const by = Object.fromEntries(m.values.map((v) => [v.labels.result, v.value]));
    expect(by).toMatchObject({ 'wrong-node': 1, malformed: 1, answered: 3, 'rate-limited': 5 });
    await pollUntil('3 replies', () => replies.length === 3, { timeoutMs: 5000, intervalMs: 10 });
    expect(replies).toEqual([2, 3, 4]);
    client.close();
    await agent.stop();
  });
});

describe("the ValidatingAdmissionPolicy narrowing the controller manager's patch nodes", () => {
  const dir = 'manifests/base/controller-manager';
  const docs = parseAllDocuments(readFileSync(`${dir}/node-taint-policy.yaml`, 'utf8')).map((d) => d.toJS() as Record<string, any>);
  it("names the code's taint key and the controller manager's ServiceAccount, matches node updates, and is bound with Deny", () => {
    const policy = docs.find((d) => d.kind === 'ValidatingAdmissionPolicy')!;
    const binding = docs.find((d) => d.kind === 'ValidatingAdmissionPolicyBinding')!;
    expect(policy.spec.variables.find((v: { name: string }) => v.name === 'key').expression).toBe(`'${NODE_UNREACHABLE_TAINT}'`);
    const sa = parseAllDocuments(readFileSync(`${dir}/rbac.yaml`, 'utf8')).map((d) => d.toJS()).find((d) => d.kind === 'ServiceAccount');
    expect(policy.spec.matchConditions[0].expression).toBe(`request.userInfo.username == 'system:serviceaccount:${sa.metadata.namespace}:${sa.metadata.name}'`);
    expect(policy.spec.matchConstraints.resourceRules[0]).toMatchObject({ operations: ['UPDATE'], resources: ['nodes', 'nodes/status'] });
    expect(binding.spec).toEqual({ policyName: policy.metadata.name, validationActions: ['Deny'] });
    expect(parseYaml(readFileSync(`${dir}/kustomization.yaml`, 'utf8')).resources).toContain('node-taint-policy.yaml');
  });
});
