/**
 * The optional monitoring files (manifests/monitoring/): the Grafana dashboard parses and queries
 * only series the components register, with labels those series (or the scrape) carry; the
 * PodMonitors select the pods of manifests/base by their labels and scrape their `metrics` port;
 * the kustomizations render, and the install overlays carry none of it.
 *
 * The components' series are read from their source (every prom-client constructor in core/,
 * controller-manager/, scheduler-plugins/, kubelet-shim/), checked against real registries where a
 * module can build its metrics on its own, plus prom-client's default process metrics.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { RECOVERY_METRIC, recoveryHistogram } from '../../controller-manager/recovery-slo.ts';
import { queueMetrics, workerMetrics } from '../../controller-manager/queue/metrics.ts';
import { metricsRegistry } from '../../core/metrics.ts';
import { binaryPath } from '../../experiments/testbed/binaries.ts';
import { shimMetrics } from '../../kubelet-shim/metrics.ts';
import { MANIFESTS_DIR, objectId, parseObjects, renderOverlay, ULYSSES_NAMESPACE, type K8sObject } from '../../manifests/overlays.ts';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const MONITORING = join(MANIFESTS_DIR, 'monitoring');
const kubectl = binaryPath('kubectl');
const run = promisify(execFile);

// ---------------------------------------------------------------------------------------------
// The components' series
// ---------------------------------------------------------------------------------------------

type Component = 'controller-manager' | 'scheduler-extender' | 'kubelet-shim';
const COMPONENT_DIRS: Record<string, Component[]> = {
  'controller-manager': ['controller-manager'],
  'scheduler-plugins': ['scheduler-extender'],
  'kubelet-shim': ['kubelet-shim'],
  // the shared library's series (API client, leader election, Events, informers) may be in any process
  core: ['controller-manager', 'scheduler-extender', 'kubelet-shim'],
};

interface Series {
  name: string;
  type: 'Counter' | 'Gauge' | 'Histogram' | 'Summary';
  labels: string[];
  components: Component[];
  file: string;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(join(REPO, dir)).flatMap((e) => {
    const rel = join(dir, e);
    if (statSync(join(REPO, rel)).isDirectory()) return e === 'node_modules' ? [] : sourceFiles(rel);
    return rel.endsWith('.ts') && !rel.endsWith('.test.ts') ? [rel] : [];
  });
}

/** The object literal starting at `open` (a `{`), braces balanced. */
function objectAt(text: string, open: number): string {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(open, i + 1);
  }
  throw new Error(`unbalanced braces at ${open}`);
}

/** The value of `const id = '...'` or `const id: T = [...]` declared in `text` before `at`. */
function constant(text: string, id: string, at: number): string | undefined {
  const re = new RegExp(`(?:const|let)\\s+${id}\\b\\s*(?::[^=]+)?=\\s*('[^']*'|\\[[^\\]]*\\])`, 'g');
  let found: string | undefined;
  for (const m of text.slice(0, at).matchAll(re)) found = m[1];
  return found;
}

const stringsIn = (literal: string) => [...literal.matchAll(/'([^']*)'/g)].map((m) => m[1]!);

/** Every prom-client series the components' source constructs. */
function scanSeries(): Series[] {
  const out: Series[] = [];
  for (const [dir, components] of Object.entries(COMPONENT_DIRS)) {
    for (const file of sourceFiles(dir)) {
      const text = readFileSync(join(REPO, file), 'utf8');
      for (const m of text.matchAll(/new (Counter|Gauge|Histogram|Summary)(?:<[^>]*>)?\(\s*\{/g)) {
        const open = m.index + m[0].length - 1;
        const obj = objectAt(text, open);
        const nameExpr = /\bname:\s*('[^']*'|\w+)/.exec(obj)?.[1] ?? (/[{,]\s*name\s*[,}]/.test(obj) ? 'name' : undefined);
        if (!nameExpr) throw new Error(`${file}: a ${m[1]} without a name`);
        const nameLit = nameExpr.startsWith("'") ? nameExpr : constant(text, nameExpr, open);
        if (!nameLit) throw new Error(`${file}: cannot resolve the metric name ${nameExpr}`);
        const labelsExpr = /\blabelNames:\s*(\[[^\]]*\]|\w+)/.exec(obj)?.[1] ?? (/[{,]\s*labelNames\s*[,}]/.test(obj) ? 'labelNames' : undefined);
        const labelsLit = labelsExpr === undefined ? '[]' : labelsExpr.startsWith('[') ? labelsExpr : constant(text, labelsExpr, open);
        if (labelsLit === undefined) throw new Error(`${file}: cannot resolve the label names ${labelsExpr}`);
        out.push({ name: stringsIn(nameLit)[0]!, type: m[1] as Series['type'], labels: stringsIn(labelsLit), components, file });
      }
    }
  }
  // prom-client's default metrics (collectDefaultMetrics on every component's main thread)
  const defaults = new Registry();
  collectDefaultMetrics({ register: defaults });
  for (const metric of defaults.getMetricsAsArray()) {
    const m = metric as unknown as { name: string; labelNames?: string[]; constructor: { name: string } };
    out.push({ name: m.name, type: m.constructor.name as Series['type'], labels: m.labelNames ?? [], components: COMPONENT_DIRS.core!, file: 'prom-client default metrics' });
  }
  return out;
}

const SERIES = scanSeries();
const seriesNamed = (name: string) => SERIES.filter((s) => s.name === name);

// ---------------------------------------------------------------------------------------------
// PromQL, as much as the dashboard uses
// ---------------------------------------------------------------------------------------------

const FUNCTIONS = new Set(['sum', 'max', 'min', 'avg', 'count', 'rate', 'increase', 'histogram_quantile', 'label_values']);
const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'and', 'or', 'unless', 'offset']);

interface Selector {
  metric: string;
  matchers: { label: string; op: string; value: string }[];
}

/** The selectors (metric + label matchers), the grouping labels and the functions of an expression. */
function parsePromql(expr: string): { selectors: Selector[]; grouping: string[]; functions: string[] } {
  let rest = expr.replace(/\[[^\]]*\]/g, ' '); // range selectors: [5m], [$__rate_interval]
  const grouping: string[] = [];
  rest = rest.replace(/\b(by|without|on|ignoring)\s*\(([^)]*)\)/g, (_all, _kw, labels: string) => {
    grouping.push(...labels.split(',').map((l) => l.trim()).filter(Boolean));
    return ' ';
  });
  const selectors: Selector[] = [];
  const functions: string[] = [];
  const re = /([A-Za-z_:][\w:]*)\s*(\{[^}]*\})?\s*(\()?|\{[^}]*\}|"[^"]*"|[\d.]+/g;
  for (const m of rest.matchAll(re)) {
    const [, ident, braces, call] = m;
    if (!ident) {
      if (m[0].startsWith('{')) throw new Error(`a selector without a metric name in: ${expr}`);
      continue;
    }
    if (call) functions.push(ident);
    else if (KEYWORDS.has(ident)) continue;
    else {
      const matchers = [...(braces ?? '').matchAll(/(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"/g)].map((x) => ({ label: x[1]!, op: x[2]!, value: x[3]! }));
      selectors.push({ metric: ident, matchers });
    }
  }
  return { selectors, grouping, functions };
}

/** A metric name as queried -> its series (a histogram's _bucket/_sum/_count are the histogram's). */
function resolve(metric: string): { series: Series[]; extraLabels: string[] } {
  const direct = seriesNamed(metric);
  if (direct.length) return { series: direct, extraLabels: [] };
  const m = /^(.*)_(bucket|sum|count)$/.exec(metric);
  if (!m) return { series: [], extraLabels: [] };
  const base = seriesNamed(m[1]!).filter((s) => (m[2] === 'bucket' ? s.type === 'Histogram' : s.type === 'Histogram' || s.type === 'Summary'));
  return { series: base, extraLabels: m[2] === 'bucket' ? ['le'] : [] };
}

// ---------------------------------------------------------------------------------------------
// The files
// ---------------------------------------------------------------------------------------------

interface Target {
  expr: string;
  refId: string;
  legendFormat?: string;
}
interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: Target[];
}
interface Dashboard {
  uid: string;
  title: string;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown; datasource?: { uid: string } }[] };
}

const dashboardText = readFileSync(join(MONITORING, 'grafana-dashboard.json'), 'utf8');
const dashboard = JSON.parse(dashboardText) as Dashboard;
const queryPanels = dashboard.panels.filter((p) => p.type !== 'row');
const exprs = queryPanels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));

interface PodMonitor extends K8sObject {
  spec: {
    jobLabel?: string;
    namespaceSelector?: { matchNames?: string[] };
    selector: { matchLabels: Record<string, string> };
    podMetricsEndpoints: { port: string; path?: string; honorLabels?: boolean; relabelings?: { targetLabel?: string }[] }[];
  };
}
const podMonitors = parseObjects(readFileSync(join(MONITORING, 'podmonitors.yaml'), 'utf8'), 'podmonitors.yaml') as PodMonitor[];

type Workload = K8sObject & {
  spec: { template: { metadata: { labels: Record<string, string> }; spec: { containers: { name: string; args?: string[]; ports?: { name?: string; containerPort: number }[] }[] } } };
};
function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((e) => (statSync(join(dir, e)).isDirectory() ? yamlFiles(join(dir, e)) : e.endsWith('.yaml') && e !== 'kustomization.yaml' ? [join(dir, e)] : []));
}
const baseWorkloads = yamlFiles(join(MANIFESTS_DIR, 'base'))
  .flatMap((f) => parseObjects(readFileSync(f, 'utf8'), f))
  .filter((o): o is Workload => o.kind === 'Deployment' || o.kind === 'DaemonSet');
/** The component a workload of manifests/base runs: the first argument of its container (manifests/entrypoint.sh). */
const componentOf = (w: Workload) => w.spec.template.spec.containers[0]!.args?.[0] as Component;

/** The workloads of manifests/base a PodMonitor selects. */
const selected = (pm: PodMonitor) =>
  baseWorkloads.filter(
    (w) =>
      (pm.spec.namespaceSelector?.matchNames ?? [pm.metadata.namespace]).includes(w.metadata.namespace!) &&
      Object.entries(pm.spec.selector.matchLabels).every(([k, v]) => w.spec.template.metadata.labels[k] === v),
  );

/** Labels Prometheus puts on every series of a PodMonitor's targets. */
const targetLabels = (pm: PodMonitor) => ['job', 'instance', 'namespace', 'pod', 'container', 'endpoint', ...pm.spec.podMetricsEndpoints.flatMap((e) => (e.relabelings ?? []).flatMap((r) => (r.targetLabel ? [r.targetLabel] : [])))];

/** job label value -> the PodMonitor and component it scrapes (job = the pod's `jobLabel` label). */
const jobs = new Map(
  podMonitors.map((pm) => {
    const [w] = selected(pm);
    return [w?.spec.template.metadata.labels[pm.spec.jobLabel ?? ''] ?? `(none: ${pm.metadata.name})`, { pm, component: w ? componentOf(w) : undefined }] as const;
  }),
);

// ---------------------------------------------------------------------------------------------

describe('the components\' series, read from their source', () => {
  it('finds the series the dashboard is about, with their labels, as the real registries have them', () => {
    const shim = new Registry();
    shimMetrics(shim);
    recoveryHistogram();
    queueMetrics('monitoring-test', () => ({ depth: [0, 0, 0], unfinishedSeconds: [0, 0, 0], longestRunningSeconds: [0, 0, 0] }));
    workerMetrics();
    const real = [...shim.getMetricsAsArray(), ...metricsRegistry().getMetricsAsArray()] as unknown as { name: string; labelNames?: string[] }[];
    const ours = real.filter((m) => !m.name.startsWith('process_') && !m.name.startsWith('nodejs_'));
    expect(ours.length).toBeGreaterThan(10);
    for (const m of ours) {
      const scanned = seriesNamed(m.name);
      expect(scanned.length, `${m.name} found in the source`).toBeGreaterThan(0);
      expect(scanned[0]!.labels.slice().sort(), m.name).toEqual((m.labelNames ?? []).slice().sort());
    }
    expect(seriesNamed(RECOVERY_METRIC)[0]).toMatchObject({ type: 'Histogram', labels: ['namespace', 'owner_kind', 'until'], components: ['controller-manager'] });
    expect(seriesNamed('workqueue_depth')[0]).toMatchObject({ labels: ['name', 'priority'], components: ['controller-manager'] });
    expect(seriesNamed('ulysses_extender_request_duration_seconds')[0]).toMatchObject({ type: 'Histogram', labels: ['verb'], components: ['scheduler-extender'] });
    expect(seriesNamed('process_resident_memory_bytes')).toHaveLength(1);
  });
});

describe('manifests/monitoring/grafana-dashboard.json', () => {
  it('is a dashboard: unique uid and panel ids, every panel on the datasource variable, refIds unique per panel, panels inside the 24-column grid without overlapping', () => {
    expect(dashboard.uid).toMatch(/^[\w-]{1,40}$/);
    expect(dashboard.templating.list.map((v) => [v.name, v.type])).toEqual([
      ['datasource', 'datasource'],
      ['namespace', 'query'],
    ]);
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const p of queryPanels) {
      expect(p.datasource, p.title).toEqual({ type: 'prometheus', uid: '${datasource}' });
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      const refIds = p.targets!.map((t) => t.refId);
      expect(new Set(refIds).size, p.title).toBe(refIds.length);
    }
    const cells = new Set<string>();
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      for (let x = p.gridPos.x; x < p.gridPos.x + p.gridPos.w; x++) {
        for (let y = p.gridPos.y; y < p.gridPos.y + p.gridPos.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} overlaps at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  it('shows what an operator of the recovery SLO needs: recovery p50/p99 by namespace, queue depth per priority, pacing waits, extender latency', () => {
    const has = (re: RegExp) => exprs.some((e) => re.test(e.expr));
    expect(has(/histogram_quantile\(0\.5, sum by \(namespace, le\) \(increase\(ulysses_critical_recovery_seconds_bucket/)).toBe(true);
    expect(has(/histogram_quantile\(0\.99, sum by \(namespace, le\) \(increase\(ulysses_critical_recovery_seconds_bucket/)).toBe(true);
    expect(has(/sum by \(name, priority\) \(workqueue_depth\)/)).toBe(true);
    expect(has(/ulysses_cri_pacing_wait_seconds_bucket/)).toBe(true);
    expect(has(/ulysses_extender_request_duration_seconds_bucket/)).toBe(true);
  });

  it('queries only registered series, with labels they or their scrape carry, and only known functions', () => {
    const templateQueries = dashboard.templating.list.flatMap((v) => (v.type === 'query' ? [{ panel: `variable ${v.name}`, expr: (v.query as { query: string }).query }] : []));
    const problems: string[] = [];
    let checked = 0;
    for (const { panel, expr } of [...exprs, ...templateQueries]) {
      const lv = /^label_values\((\w+),\s*(\w+)\)$/.exec(expr);
      const { selectors, grouping, functions } = lv ? { selectors: [{ metric: lv[1]!, matchers: [] }], grouping: [lv[2]!], functions: [] } : parsePromql(expr);
      for (const f of functions) if (!FUNCTIONS.has(f)) problems.push(`${panel}: unknown function ${f}() in ${expr}`);
      const labelsInExpr = new Set<string>();
      for (const s of selectors) {
        const { series, extraLabels } = resolve(s.metric);
        checked++;
        if (!series.length) {
          problems.push(`${panel}: ${s.metric} is not a series any component registers`);
          continue;
        }
        // the series' components: all that register it, or those the job matcher names
        const job = s.matchers.find((m) => m.label === 'job');
        const jobNames = job ? (job.op === '=' ? [job.value] : job.value.split('|')) : [...jobs.keys()];
        for (const j of jobNames) if (!jobs.has(j)) problems.push(`${panel}: job "${j}" is no PodMonitor's job (${[...jobs.keys()].join(', ')})`);
        const scraped = jobNames.flatMap((j) => {
          const t = jobs.get(j);
          return t?.component && series.some((x) => x.components.includes(t.component!)) ? [t] : [];
        });
        if (!scraped.length) problems.push(`${panel}: ${s.metric} is registered by ${series[0]!.components.join('/')}, which no PodMonitor of ${jobNames.join('|')} scrapes`);
        const allowed = new Set([...series.flatMap((x) => x.labels), ...extraLabels, ...scraped.flatMap((t) => targetLabels(t.pm))]);
        for (const l of allowed) labelsInExpr.add(l);
        for (const m of s.matchers) if (!allowed.has(m.label)) problems.push(`${panel}: ${s.metric} has no label ${m.label}`);
      }
      for (const l of grouping) if (!labelsInExpr.has(l)) problems.push(`${panel}: grouping label ${l} is on none of the series of ${expr}`);
    }
    expect(problems).toEqual([]);
    expect(checked).toBeGreaterThanOrEqual(exprs.length);
  });

  it('the checks above catch a wrong name, label or job', () => {
    expect(resolve('ulysses_critical_recovery_second_bucket').series).toEqual([]);
    expect(resolve('workqueue_depth_bucket').series).toEqual([]); // a gauge has no buckets
    expect(resolve('ulysses_critical_recovery_seconds_bucket').extraLabels).toEqual(['le']);
    const p = parsePromql('histogram_quantile(0.99, sum by (namespace, le) (rate(x_bucket{job="a", namespace=~"$namespace"}[$__rate_interval]))) / on(pod) y');
    expect(p.functions).toEqual(['histogram_quantile', 'sum', 'rate']);
    expect(p.grouping).toEqual(['namespace', 'le', 'pod']);
    expect(p.selectors).toEqual([
      { metric: 'x_bucket', matchers: [{ label: 'job', op: '=', value: 'a' }, { label: 'namespace', op: '=~', value: '$namespace' }] },
      { metric: 'y', matchers: [] },
    ]);
  });
});

describe('manifests/monitoring/podmonitors.yaml', () => {
  it('one PodMonitor per workload of manifests/base with a metrics port, selecting exactly its pods by label, scraping that port, job = its app.kubernetes.io/name', () => {
    const withMetrics = baseWorkloads.filter((w) => w.spec.template.spec.containers.some((c) => c.ports?.some((p) => p.name === 'metrics')));
    expect(withMetrics.map(objectId).sort()).toEqual(['DaemonSet/ulysses-kubelet-shim', 'Deployment/ulysses-controller-manager', 'Deployment/ulysses-scheduler-extender']);
    expect(podMonitors.map((pm) => [pm.apiVersion, pm.kind, pm.metadata.namespace])).toEqual(Array(3).fill(['monitoring.coreos.com/v1', 'PodMonitor', ULYSSES_NAMESPACE]));
    const covered = new Set<string>();
    for (const pm of podMonitors) {
      const ws = selected(pm);
      expect(ws.map(objectId), pm.metadata.name).toHaveLength(1);
      const w = ws[0]!;
      covered.add(objectId(w));
      expect(pm.spec.jobLabel).toBe('app.kubernetes.io/name');
      expect(w.spec.template.metadata.labels[pm.spec.jobLabel!], pm.metadata.name).toBe(pm.metadata.name);
      const c = w.spec.template.spec.containers[0]!;
      for (const ep of pm.spec.podMetricsEndpoints) {
        const port = c.ports?.find((p) => p.name === ep.port);
        expect(port, `${pm.metadata.name}: port ${ep.port} on ${objectId(w)}`).toBeDefined();
        expect(ep.path ?? '/metrics').toBe('/metrics');
        // the port the process serves /metrics on
        expect(c.args, objectId(w)).toContain(`--metrics-port=${port!.containerPort}`);
      }
    }
    expect([...covered].sort()).toEqual(withMetrics.map(objectId).sort());
  });

  it('keeps the series\' own labels where they collide with the target labels (honorLabels), e.g. the recovery histogram\'s namespace', () => {
    for (const pm of podMonitors) {
      const component = componentOf(selected(pm)[0]!);
      const colliding = SERIES.filter((s) => s.components.includes(component) && s.labels.some((l) => targetLabels(pm).includes(l)));
      for (const ep of pm.spec.podMetricsEndpoints) {
        expect(ep.honorLabels ?? false, `${pm.metadata.name}: ${colliding.map((s) => s.name).join(', ')}`).toBe(colliding.length > 0);
      }
    }
    expect(podMonitors.find((pm) => pm.metadata.name === 'ulysses-controller-manager')!.spec.podMetricsEndpoints[0]!.honorLabels).toBe(true);
  });
});

describe.skipIf(!existsSync(kubectl))('kubectl kustomize of manifests/monitoring', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'ulysses-monitoring-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));
  const kustomize = async (dir: string) => parseObjects((await run(kubectl, ['kustomize', dir], { maxBuffer: 16 << 20 })).stdout, `kubectl kustomize ${dir}`);

  it('renders the PodMonitors and the dashboard ConfigMap for Grafana\'s sidecar, in ulysses-system; no install overlay carries them', async () => {
    const objs = await kustomize(MONITORING);
    expect(objs.map(objectId).sort()).toEqual(['ConfigMap/ulysses-grafana-dashboard', ...podMonitors.map(objectId)].sort());
    for (const o of objs) {
      expect(o.metadata.namespace, objectId(o)).toBe(ULYSSES_NAMESPACE);
      expect(o.metadata.labels?.['app.kubernetes.io/part-of'], objectId(o)).toBe('ulysses');
    }
    const cm = objs.find((o) => o.kind === 'ConfigMap')! as K8sObject & { data: Record<string, string> };
    expect(cm.metadata.labels?.grafana_dashboard).toBe('1');
    expect(cm.data['ulysses.json']).toBe(dashboardText);
    const install = (await renderOverlay('kubeadm', kubectl)).objects;
    expect(install.filter((o) => o.apiVersion.startsWith('monitoring.coreos.com/') || o.metadata.name === 'ulysses-grafana-dashboard')).toEqual([]);
  });

  it('the kubelet-shim-metrics component makes the DaemonSet\'s shims serve /metrics on their pod IP; overlays without the DaemonSet are unchanged', async () => {
    const withComponent = async (overlay: string) => {
      const dir = join(tmp, overlay);
      const rel = (p: string) => relative(dir, p);
      mkdirSync(dir, { recursive: true });
      writeFileSync(
        join(dir, 'kustomization.yaml'),
        `resources:\n  - ${rel(join(MANIFESTS_DIR, 'overlays', overlay))}\ncomponents:\n  - ${rel(join(MONITORING, 'kubelet-shim-metrics'))}\n`,
      );
      return kustomize(dir);
    };
    const objs = await withComponent('kubeadm');
    const ds = objs.find((o) => objectId(o) === 'DaemonSet/ulysses-kubelet-shim')! as Workload;
    const c = ds.spec.template.spec.containers[0]! as Workload['spec']['template']['spec']['containers'][number] & { env: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[] };
    expect(c.args).toContain('--metrics-host=$(POD_IP)');
    expect(c.args).toContain(`--metrics-port=${c.ports!.find((p) => p.name === 'metrics')!.containerPort}`);
    expect(c.env.find((e) => e.name === 'POD_IP')?.valueFrom?.fieldRef?.fieldPath).toBe('status.podIP');
    expect((ds.spec.template.spec as { hostNetwork?: boolean }).hostNetwork).toBe(true); // so the pod IP is the node's
    const plain = (await renderOverlay('kubeadm', kubectl)).objects;
    expect(objs.filter((o) => o.kind !== 'DaemonSet')).toEqual(plain.filter((o) => o.kind !== 'DaemonSet'));
    expect(await withComponent('controller-manager')).toEqual((await renderOverlay('controller-manager', kubectl)).objects);
  });
});
