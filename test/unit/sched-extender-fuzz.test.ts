/**
 * Fuzz: thousands of random and malformed ExtenderArgs / ExtenderBindingArgs bodies against the real
 * fastify instance (inject) with a populated node/pod cache. Every answer is HTTP 200: the verb's
 * refusal naming the field, or a VALID result (every node accounted for exactly once, scores
 * integers in 0..10), never a 5xx. Seeded PRNG:
 * a failure names its seed and iteration and is reproducible.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { prng } from '../../core/prng.ts';
import { ExtenderServer } from '../../scheduler-plugins/extender/server.ts';
import type { ExtenderFilterResult, HostPriority } from '../../scheduler-plugins/extender/wire.ts';
import { silentLogger } from '../../core/logging.ts';
import { reservationRequest } from '../../scheduler-plugins/schedulability.ts';

const SEED = 0x5eed4;
const ITERATIONS = 4000;
const rnd = prng(SEED);
const int = (n: number) => Math.floor(rnd() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;

const quiet = silentLogger();

const server = new ExtenderServer({ config: { tdmaNetworks: { rtnet0: { cycleUs: 5000, slotUs: 1000 }, big: { slotUs: 10, slots: 1000 } } }, log: quiet });
afterAll(() => server.app.close());

const NODE_NAMES = Array.from({ length: 12 }, (_, i) => `n${i}`);
const kinds = ['deferrable-server', 'budget-period', 'edf', 'fifo', ''];
for (const [i, name] of NODE_NAMES.entries()) {
  const labels: Record<string, string> = {};
  const annotations: Record<string, string> = {};
  if (i % 2 === 0) labels['ulysses.io/rt-scheduler'] = kinds[i % kinds.length]!;
  if (i % 3 === 0) labels['ulysses.io/tdma-network'] = pick(['rtnet0', 'big', 'unknown']);
  if (i % 4 !== 1) annotations['ulysses.io/assurance'] = pick(['{"cpu":3,"memory":2}', '{"cpu":1}', '{"cpu":-1}', 'nope', '{}']);
  if (i % 2 === 0) annotations['ulysses.io/rt-capacity'] = pick(['{"cores":2}', '{"cores":1,"maxUtilization":0.9}', '{"cores":0}', '[]']);
  server.state.upsertNode({ metadata: { name, labels, annotations, resourceVersion: String(i + 1) } } as V1Node);
}

const VALID = {
  rt: [
    '{"server":{"budgetUs":2000,"periodUs":10000},"tasks":[{"wcetUs":500,"periodUs":10000,"deadlineUs":10000,"priority":1}]}',
    '{"reservation":{"runtimeUs":2000,"periodUs":10000,"cpus":1}}',
    '{"tasks":[{"wcetUs":100,"periodUs":1000}]}',
  ],
  tdma: ['{"network":"rtnet0","slots":2,"maxGapUs":3000}', '{"network":"big","slots":7}', '{"network":"rtnet0","slots":1}'],
  policy: ['{"policy":"threshold","min":{"cpu":2}}', '{"policy":"weighted","weights":{"cpu":0.6,"memory":0.4},"threshold":2.5}'],
};

/** Random JSON-ish junk, including huge numbers, deep nesting, unicode and prototype keys. */
function junk(depth = 0): unknown {
  switch (int(depth > 3 ? 6 : 9)) {
    case 0: return null;
    case 1: return pick([0, -1, 1e308, -0, 3.5, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER]);
    case 2: return pick(['', 'x', 'ulysses.io/rt', '\u0000', '💥'.repeat(int(5)), '{', '[]', 'null']);
    case 3: return rnd() < 0.5;
    case 4: return 'a'.repeat(int(300));
    case 5: return int(100);
    case 6: return Array.from({ length: int(4) }, () => junk(depth + 1));
    case 7: return Object.fromEntries(Array.from({ length: int(4) }, () => [pick(['a', 'metadata', 'name', 'constructor', 'Pod', 'NodeNames']), junk(depth + 1)]));
    default: return { metadata: junk(depth + 1) };
  }
}

/** Mutates a JSON text: truncation, character flips, value swaps. */
function mutateText(s: string): string {
  const r = int(5);
  if (r === 0) return s.slice(0, int(s.length));
  if (r === 1) {
    const i = int(s.length);
    return s.slice(0, i) + pick(['"', '}', ',', '-', '0', 'e9', ' ', '9999999999999']) + s.slice(i + 1);
  }
  if (r === 2) return s.replace(/\d+/, pick(['-5', '0', '1.5', '1e400', '"7"', 'null']));
  if (r === 3) return s.replace(/"[a-zA-Z]+":/, `"${pick(['budgetUS', 'x', '', 'periodUs'])}":`);
  return s;
}

function annotations(): Record<string, string> {
  const a: Record<string, string> = {};
  for (const [key, values] of [['ulysses.io/rt', VALID.rt], ['ulysses.io/tdma', VALID.tdma], ['ulysses.io/assurance-policy', VALID.policy]] as const) {
    if (rnd() < 0.5) a[key] = rnd() < 0.5 ? pick(values) : mutateText(pick(values));
  }
  return a;
}

function pod(): unknown {
  const p: V1Pod = {
    metadata: {
      name: `p${int(50)}`,
      namespace: pick(['default', 'ns', '']),
      uid: `u${int(50)}`,
      annotations: annotations(),
      labels: rnd() < 0.3 ? { 'ulysses.io/criticality': pick(['high', 'low', 'HIGH', '']) } : {},
      resourceVersion: String(int(1000)),
    },
    // mostly as users must write an RT/TDMA pod (requesting ulysses.io/reservation), sometimes not
    spec: { containers: [{ name: 'c', ...(rnd() < 0.8 ? { resources: reservationRequest() } : {}) }] },
  };
  if (rnd() < 0.15) (p as Record<string, unknown>)[pick(['metadata', 'spec'])] = junk();
  if (rnd() < 0.1 && typeof p.metadata === 'object' && p.metadata) (p.metadata as Record<string, unknown>)[pick(['name', 'annotations', 'labels', 'uid'])] = junk();
  return p;
}

function nodeNames(): unknown {
  if (rnd() < 0.05) return junk();
  return Array.from({ length: int(14) }, () => (rnd() < 0.9 ? pick(NODE_NAMES) : `ghost${int(3)}`));
}

function body(verb: string): { payload: string; contentType: string } {
  const r = rnd();
  if (r < 0.05) return { payload: JSON.stringify(junk()), contentType: 'application/json' };
  if (r < 0.1) return { payload: mutateText(JSON.stringify({ Pod: pod(), NodeNames: nodeNames() })), contentType: 'application/json' };
  if (r < 0.12) return { payload: 'x'.repeat(int(50)), contentType: pick(['text/plain', 'application/octet-stream', 'application/json']) };
  if (verb === 'bind') {
    const b: Record<string, unknown> = { PodName: `p${int(5)}`, PodNamespace: 'ns', PodUID: `u${int(5)}`, Node: pick(NODE_NAMES) };
    if (rnd() < 0.5) b[pick(Object.keys(b))] = junk();
    return { payload: JSON.stringify(b), contentType: 'application/json' };
  }
  const args: Record<string, unknown> = { Pod: pod() };
  if (rnd() < 0.85) args.NodeNames = nodeNames();
  else args.Nodes = { items: Array.from({ length: int(4) }, () => (rnd() < 0.8 ? { metadata: { name: pick(NODE_NAMES), labels: { 'ulysses.io/tdma-network': 'rtnet0' } } } : junk())) };
  if (rnd() < 0.05) delete args.Pod;
  return { payload: JSON.stringify(args), contentType: 'application/json' };
}

describe('scheduler extender fuzz', () => {
  it(`${ITERATIONS} random/malformed bodies: a refusal (HTTP 200) or a valid result, never 5xx (seed ${SEED})`, async () => {
    const tally = { ok: 0, clientError: 0, filterAccepted: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      const verb = pick(['filter', 'prioritize', 'bind']);
      const { payload, contentType } = body(verb);
      const res = await server.app.inject({ method: 'POST', url: `/${verb}`, payload, headers: { 'content-type': contentType } });
      const where = `seed ${SEED} iteration ${i} ${verb}: ${payload.slice(0, 300)} -> ${res.statusCode} ${res.body.slice(0, 300)}`;
      // a malformed body gets the verb's refusal as HTTP 200 (kube-scheduler reads no other body)
      expect(res.statusCode, where).toBe(200);
      tally.ok++;
      let sent: { NodeNames?: string[] | null; Nodes?: { items: Array<{ metadata: { name: string } }> } } = {};
      try {
        sent = (JSON.parse(payload) as typeof sent | null) ?? {};
      } catch {
        /* not JSON: refused below */
      }
      const items = Array.isArray(sent.Nodes?.items) ? sent.Nodes.items : [];
      const names: unknown[] = Array.isArray(sent.NodeNames) ? sent.NodeNames : items.map((n) => (n as { metadata?: { name?: unknown } } | null)?.metadata?.name);
      if (verb === 'filter') {
        const r = res.json() as ExtenderFilterResult;
        expect(r.Error, where).toEqual(expect.any(String));
        if (r.Error) {
          // a malformed request: the refusal names the field, kube-scheduler shows it
          expect(r.Error, where).toMatch(/^ulysses: bad filter request: /);
          tally.clientError++;
          continue;
        }
        const passed = r.NodeNames ?? r.Nodes?.items.map((n) => n.metadata!.name!) ?? [];
        tally.filterAccepted += passed.length;
        // every distinct node sent is in exactly one of: passed, FailedNodes, FailedAndUnresolvableNodes
        for (const n of new Set(names as string[])) {
          const places = [passed.includes(n), n in r.FailedNodes, n in r.FailedAndUnresolvableNodes].filter(Boolean).length;
          expect(places, `${where}: node ${n}`).toBe(1);
        }
        for (const msg of [...Object.values(r.FailedNodes), ...Object.values(r.FailedAndUnresolvableNodes)]) expect(msg, where).toMatch(/^ulysses: /);
      } else if (verb === 'prioritize') {
        const r = res.json() as HostPriority[];
        // a malformed request gets no scores
        if (r.length === 0 && !(Array.isArray(sent.NodeNames) && sent.NodeNames.length === 0)) {
          tally.clientError++;
          continue;
        }
        expect(r.map((h) => h.Host), where).toEqual(names);
        for (const h of r) expect(Number.isInteger(h.Score) && h.Score >= 0 && h.Score <= 10, where).toBe(true);
      } else {
        expect(res.json().Error, where).toMatch(/^ulysses: /); // no API client here: a clean refusal
        if (/^ulysses: bad bind request: /.test(res.json().Error as string)) tally.clientError++;
      }
    }
    console.log(`fuzz tally: ${JSON.stringify(tally)}`);
    // the generator exercises both paths
    expect(tally.ok).toBeGreaterThan(ITERATIONS / 4);
    expect(tally.clientError).toBeGreaterThan(ITERATIONS / 20);
    expect(tally.filterAccepted).toBeGreaterThan(0);
    // 4000 inject round trips: ~1-2 s alone, beyond vitest's 5-s default on a loaded 2-CPU machine (not a timing claim)
  }, 60_000);
});
