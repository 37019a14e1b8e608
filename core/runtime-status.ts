/**
 * `ulysses status` / `ulysses set`: what the operator asked for (UlyssesConfig spec) against what
 * each component reports it runs (status.components), and the spec patches of `set`.
 */
import type { UlyssesConfig, UlyssesConfigSpec } from './runtime-config.ts';

export const COMPONENTS = ['controller-manager', 'kubelet-shim', 'scheduler-extender', 'apf'] as const;
export type Component = (typeof COMPONENTS)[number];

export const SPEC_FIELD: Record<Component, keyof UlyssesConfigSpec> = {
  'controller-manager': 'controllerManager',
  'kubelet-shim': 'kubeletShim',
  'scheduler-extender': 'schedulerExtender',
  apf: 'apf',
};

export interface StatusRow {
  component: string;
  desired: string;
  observed: string;
  /** observedGeneration == generation and the Applied condition is True */
  upToDate: boolean;
  message: string;
}

/** One short line describing a spec section (what `set` wrote). */
export function describeDesired(component: Component, section: unknown): string {
  if (section === undefined || section === null) return '(defaults)';
  const s = section as Record<string, unknown>;
  switch (component) {
    case 'controller-manager': {
      const cs = (s.controllers ?? {}) as Record<string, { mode?: string; periodMs?: number }>;
      const parts = Object.entries(cs).map(([c, v]) => `${c}=${v?.mode ?? 'default'}${v?.periodMs ? `/${v.periodMs}ms` : ''}`);
      return parts.length ? parts.join(',') : '(defaults)';
    }
    case 'kubelet-shim': {
      const d = (s.default as { policy?: { type?: string } } | undefined)?.policy?.type ?? 'vanilla';
      const nodes = (s.nodes ?? []) as Array<{ name?: string; nodeSelector?: Record<string, string>; pacing?: { policy?: { type?: string } } }>;
      const per = nodes.map((n) => `${n.name ?? JSON.stringify(n.nodeSelector ?? {})}=${n.pacing?.policy?.type ?? 'vanilla'}`);
      return [`default=${d}`, ...per].join(',');
    }
    case 'scheduler-extender': {
      const p = (s.plugins ?? {}) as Record<string, boolean>;
      const parts = Object.entries(p).map(([k, v]) => `${k}=${v ? 'on' : 'off'}`);
      return parts.length ? parts.join(',') : '(defaults)';
    }
    case 'apf': {
      const on = s.enabled === true;
      return on ? `exempt ${((s.exemptNamespaces ?? []) as string[]).join(',') || '(none)'}` : 'off';
    }
  }
}

/** Rows for every component reporting in status, plus one per configured component not reporting. */
export function statusRows(obj: UlyssesConfig | undefined): StatusRow[] {
  if (!obj) return [];
  const generation = obj.metadata.generation ?? 0;
  const reported = obj.status?.components ?? {};
  const rows: StatusRow[] = [];
  const seen = new Set<Component>();
  for (const [key, st] of Object.entries(reported).sort(([a], [b]) => a.localeCompare(b))) {
    if (!st) continue;
    const component = key.split('/')[0] as Component;
    seen.add(component);
    const cond = st.conditions?.[0];
    rows.push({
      component: key,
      desired: COMPONENTS.includes(component) ? describeDesired(component, obj.spec?.[SPEC_FIELD[component]]) : '?',
      observed: st.mode || '(none)',
      upToDate: st.observedGeneration === generation && cond?.status === 'True',
      message: cond ? `${cond.reason}: ${cond.message} (observedGeneration ${st.observedGeneration}/${generation})` : '',
    });
  }
  for (const c of COMPONENTS) {
    if (seen.has(c) || obj.spec?.[SPEC_FIELD[c]] === undefined) continue;
    rows.push({ component: c, desired: describeDesired(c, obj.spec[SPEC_FIELD[c]]), observed: '(not reporting)', upToDate: false, message: 'no component has reported this section' });
  }
  return rows;
}

export function formatStatus(obj: UlyssesConfig | undefined): string {
  if (!obj) return 'no UlyssesConfig "default": every component runs its defaults (vanilla). Create one with `ulysses set`.';
  const rows = statusRows(obj);
  const w = (k: keyof StatusRow) => Math.max(k.length, ...rows.map((r) => String(r[k]).length));
  const cols: Array<keyof StatusRow> = ['component', 'desired', 'observed'];
  const line = (r: Record<string, string>) => cols.map((c) => r[c]!.padEnd(w(c))).join('  ') + '  ' + r.sync + '  ' + r.message;
  const out = [line({ component: 'COMPONENT', desired: 'DESIRED', observed: 'OBSERVED', sync: 'SYNCED', message: 'MESSAGE' })];
  for (const r of rows) out.push(line({ ...r, sync: r.upToDate ? 'yes   ' : 'NO    ' } as never));
  return `UlyssesConfig/default generation ${obj.metadata.generation ?? 0}\n` + out.join('\n');
}

export interface SetOptions {
  /** controller-manager: which controllers (default: all named in the spec or the failover-path set) */
  controllers?: string[];
  periodMs?: number;
  workers?: number;
  /** kubelet-shim: a node name, or a label selector "k=v,k2=v2"; absent: the default */
  node?: string;
  selector?: string;
  /** kubelet-shim policy parameters (e.g. initialWaitMs, factor, waitMs) and gate parameters */
  params?: Record<string, number>;
  /** scheduler-extender plugins; apf namespaces */
  plugins?: string[];
  namespaces?: string[];
}

export const FAILOVER_CONTROLLERS = ['replicaset', 'deployment', 'taint-eviction', 'endpointslice', 'endpoints'];
const GATE_PARAMS = new Set(['highMinInterArrivalMs', 'lowHoldMs', 'maxQueueLength', 'maxHighQueueLength', 'holdLowsDuringHighMs']);

/**
 * The spec merge patch for `ulysses set <component> <mode>`. Throws naming the argument on bad
 * input; the components validate the values again (and report a rejection in status).
 */
export function setPatch(component: string, mode: string, o: SetOptions, current?: UlyssesConfigSpec): UlyssesConfigSpec {
  switch (component) {
    case 'controller-manager': {
      const controllers = o.controllers?.length ? o.controllers : FAILOVER_CONTROLLERS;
      const entry: Record<string, unknown> = { mode };
      if (o.periodMs !== undefined) entry.periodMs = o.periodMs;
      if (o.workers !== undefined) entry.workers = o.workers;
      return { controllerManager: { controllers: Object.fromEntries(controllers.map((c) => [c, entry])) } };
    }
    case 'kubelet-shim': {
      const policy: Record<string, unknown> = { type: mode };
      const pacing: Record<string, unknown> = { policy };
      for (const [k, v] of Object.entries(o.params ?? {})) (GATE_PARAMS.has(k) ? pacing : policy)[k] = v;
      if (!o.node && !o.selector) return { kubeletShim: { default: pacing } };
      // nodes is a list: a merge patch replaces it whole, so carry the other entries over.
      const cur = ((current?.kubeletShim as { nodes?: Array<Record<string, unknown>> } | undefined)?.nodes ?? []).filter((n) =>
        o.node ? n.name !== o.node : JSON.stringify(n.nodeSelector) !== JSON.stringify(parseSelector(o.selector!)),
      );
      const entry = o.node ? { name: o.node, pacing } : { nodeSelector: parseSelector(o.selector!), pacing };
      return { kubeletShim: { nodes: [...cur, entry] } };
    }
    case 'scheduler-extender': {
      if (mode !== 'on' && mode !== 'off') throw new Error(`scheduler-extender mode must be "on" or "off", got "${mode}"`);
      const plugins = o.plugins?.length ? o.plugins : ['assurance', 'realtime', 'tdma'];
      return { schedulerExtender: { plugins: Object.fromEntries(plugins.map((p) => [p, mode === 'on'])) } };
    }
    case 'apf': {
      if (mode !== 'on' && mode !== 'off') throw new Error(`apf mode must be "on" or "off", got "${mode}"`);
      return { apf: { enabled: mode === 'on', ...(o.namespaces?.length ? { exemptNamespaces: o.namespaces } : {}) } };
    }
    default:
      throw new Error(`unknown component "${component}": one of ${COMPONENTS.join(', ')}`);
  }
}

export function parseSelector(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s.split(',').filter(Boolean)) {
    const m = /^([^=]+)=([^=]*)$/.exec(part.trim());
    if (!m) throw new Error(`--selector: "${part}" is not key=value`);
    out[m[1]!] = m[2]!;
  }
  return out;
}

/** Picks the kubelet-shim pacing for a node: an entry naming it, else the first selector matching its labels, else the default. */
export function shimSectionForNode(section: unknown, node: { name: string; labels: Record<string, string> }): unknown {
  const s = (section ?? {}) as { default?: unknown; nodes?: Array<{ name?: string; nodeSelector?: Record<string, string>; pacing?: unknown }> };
  const nodes = s.nodes ?? [];
  const byName = nodes.find((n) => n.name === node.name);
  if (byName) return byName.pacing;
  const bySel = nodes.find((n) => !n.name && n.nodeSelector && Object.entries(n.nodeSelector).every(([k, v]) => node.labels[k] === v));
  if (bySel) return bySel.pacing;
  return s.default;
}
