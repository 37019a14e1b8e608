/**
 * `ulysses status` / `ulysses set`: what the operator asked for (UlyssesConfig spec) against what
 * each component reports it runs (status.components), and the spec patches of `set`.
 */
import { CONTROLLERS } from './controllers.ts';
import type { UlyssesConfig, UlyssesConfigSpec } from './runtime-config.ts';
import { describeSlo, MAX_SLO_SECONDS, type RecoveryRecord, type SloConfig } from './slo.ts';

export const COMPONENTS = ['controller-manager', 'kubelet-shim', 'scheduler-extender', 'apf', 'slo', 'node-failure'] as const;
export type Component = (typeof COMPONENTS)[number];

export const SPEC_FIELD: Record<Component, keyof UlyssesConfigSpec> = {
  'controller-manager': 'controllerManager',
  'kubelet-shim': 'kubeletShim',
  'scheduler-extender': 'schedulerExtender',
  apf: 'apf',
  slo: 'slo',
  'node-failure': 'nodeFailure',
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
      const d = (s.default as ShimEntry | undefined)?.policy ?? 'vanilla';
      const per = ((s.nodes ?? []) as ShimEntry[]).map((n) => `${selectorString(n.nodeSelector ?? {})}=${n.policy ?? 'vanilla'}`);
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
    case 'slo':
      return describeSlo({ namespaces: {}, ...(s as Partial<SloConfig>) });
    case 'node-failure': {
      if (s.enabled === false) return 'off';
      const parts = (['periodMs', 'windowMs', 'confirmTimeoutMs', 'scope'] as const).filter((k) => s[k] !== undefined).map((k) => `${k}=${String(s[k])}`);
      return ['on', ...parts].join(' ');
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
  return `UlyssesConfig/default generation ${obj.metadata.generation ?? 0}\n` + out.join('\n') + formatRecoveries(obj.status?.components?.['controller-manager']?.recoveries);
}

/** The controller manager's last critical recoveries (newest first), as a table after the components. */
export function formatRecoveries(recoveries: RecoveryRecord[] | undefined): string {
  if (!recoveries?.length) return '\n\nno critical-pod recovery measured yet (controller-manager)';
  const missed = recoveries.filter((r) => r.missed).length;
  const head = ['FINISHED', 'NAMESPACE', 'OWNER', 'SECONDS', 'SLO', 'MISSED', 'UNTIL', 'CAUSE'];
  const rows = recoveries.map((r) => [r.finishedAt, r.namespace, r.owner, r.seconds.toFixed(3), r.sloSeconds === null ? '-' : `${r.sloSeconds}`, r.missed ? 'MISSED' : 'no', r.until, r.cause]);
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(w[i]!)).join('  ').trimEnd();
  return `\n\nlast ${recoveries.length} critical-pod recoveries (controller-manager), ${missed} over their SLO:\n` + [head, ...rows].map(line).join('\n');
}

export interface SetOptions {
  /** controller-manager: which controllers (default: all named in the spec or the failover-path set) */
  controllers?: string[];
  periodMs?: number;
  workers?: number;
  /** controller-manager: its client-side limiter on or off ("rate limiting off", thesis §4.3.3, §6.1) */
  apiRateLimit?: 'on' | 'off';
  /** kubelet-shim: a node name (selects kubernetes.io/hostname), or a label selector "k=v,k2=v2"; absent: the default */
  node?: string;
  selector?: string;
  /** kubelet-shim policy and gate parameters by name (e.g. initialWaitMs, factor, waitMs, highMinInterArrivalMs) */
  params?: Record<string, number>;
  /** scheduler-extender plugins; apf namespaces */
  plugins?: string[];
  namespaces?: string[];
  /** node-failure: detection window, kubelet check timeout, scope */
  windowMs?: number;
  confirmTimeoutMs?: number;
  scope?: string;
}

/**
 * The spec merge patch for `ulysses set <component> <mode>`. Throws naming the argument on bad
 * input; the components validate the values again (and report a rejection in status).
 */
export function setPatch(component: string, mode: string, o: SetOptions, current?: UlyssesConfigSpec): UlyssesConfigSpec {
  switch (component) {
    case 'controller-manager': {
      const controllers = o.controllers?.length ? o.controllers : CONTROLLERS;
      const entry: Record<string, unknown> = { mode };
      if (o.periodMs !== undefined) entry.periodMs = o.periodMs;
      if (o.workers !== undefined) entry.workers = o.workers;
      const section: Record<string, unknown> = { controllers: Object.fromEntries(controllers.map((c) => [c, entry])) };
      if (o.apiRateLimit !== undefined) {
        if (o.apiRateLimit !== 'on' && o.apiRateLimit !== 'off') throw new Error(`--api-rate-limit must be "on" or "off", got "${o.apiRateLimit}"`);
        section.apiRateLimit = o.apiRateLimit === 'off' ? { enabled: false } : null; // on: the process' own limits
      }
      return { controllerManager: section };
    }
    case 'kubelet-shim': {
      const entry: ShimEntry = { policy: mode, ...(o.params && Object.keys(o.params).length ? { params: o.params } : {}) };
      if (!o.node && !o.selector) return { kubeletShim: { default: entry } };
      // nodes is an atomic list: a merge patch replaces it whole, so carry the other entries over.
      const nodeSelector = o.node ? { [HOSTNAME_LABEL]: o.node } : parseSelector(o.selector!);
      const others = ((current?.kubeletShim as { nodes?: ShimEntry[] } | undefined)?.nodes ?? []).filter(
        (n) => selectorString(n.nodeSelector ?? {}) !== selectorString(nodeSelector),
      );
      return { kubeletShim: { nodes: [...others, { nodeSelector, ...entry }] } };
    }
    case 'scheduler-extender': {
      if (mode !== 'on' && mode !== 'off') throw new Error(`scheduler-extender mode must be "on" or "off", got "${mode}"`);
      const plugins = o.plugins?.length ? o.plugins : ['assurance', 'realtime', 'tdma'];
      return { schedulerExtender: { plugins: Object.fromEntries(plugins.map((p) => [p, mode === 'on'])) } };
    }
    case 'slo': {
      // set slo <seconds>|off [--namespaces a,b]: the default, or those namespaces' overrides
      let seconds: number | null = null;
      if (mode !== 'off') {
        seconds = Number(mode);
        if (!Number.isFinite(seconds) || seconds <= 0 || seconds > MAX_SLO_SECONDS) throw new Error(`slo: criticalRecoverySeconds must be a number > 0 and <= ${MAX_SLO_SECONDS}, or "off", got "${mode}"`);
      }
      if (!o.namespaces?.length) return { slo: { criticalRecoverySeconds: seconds } };
      return { slo: { namespaces: Object.fromEntries(o.namespaces.map((ns) => [ns, seconds === null ? null : { criticalRecoverySeconds: seconds }])) } };
    }
    case 'apf': {
      if (mode !== 'on' && mode !== 'off') throw new Error(`apf mode must be "on" or "off", got "${mode}"`);
      return { apf: { enabled: mode === 'on', ...(o.namespaces?.length ? { exemptNamespaces: o.namespaces } : {}) } };
    }
    case 'node-failure': {
      // set node-failure on|off [--period-ms N] [--window-ms N] [--confirm-ms N] [--scope critical|all]:
      // the values given are merged into the section; the controller manager checks them (status names a bad field)
      if (mode !== 'on' && mode !== 'off') throw new Error(`node-failure mode must be "on" or "off", got "${mode}"`);
      if (o.scope !== undefined && o.scope !== 'critical' && o.scope !== 'all') throw new Error(`--scope must be "critical" or "all", got "${o.scope}"`);
      return {
        nodeFailure: {
          enabled: mode === 'on',
          ...(o.periodMs !== undefined ? { periodMs: o.periodMs } : {}),
          ...(o.windowMs !== undefined ? { windowMs: o.windowMs } : {}),
          ...(o.confirmTimeoutMs !== undefined ? { confirmTimeoutMs: o.confirmTimeoutMs } : {}),
          ...(o.scope !== undefined ? { scope: o.scope } : {}),
        },
      };
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

/** A kubelet-shim entry of the spec: `default`, or one of `nodes` (with its nodeSelector). */
export interface ShimEntry {
  nodeSelector?: Record<string, string>;
  policy?: string;
  params?: Record<string, number>;
}

/** The label the kubelet sets to the node name: `--node N` selects it. */
export const HOSTNAME_LABEL = 'kubernetes.io/hostname';

const selectorString = (sel: Record<string, string>) =>
  Object.entries(sel)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(',');

/** The kubelet-shim entry for a node: the first of `nodes` whose selector matches its labels, else `default`. */
export function shimSectionForNode(section: unknown, nodeLabels: Record<string, string>): ShimEntry | undefined {
  const s = (section ?? {}) as { default?: ShimEntry; nodes?: ShimEntry[] };
  const hit = (s.nodes ?? []).find((n) => n.nodeSelector && Object.entries(n.nodeSelector).every(([k, v]) => nodeLabels[k] === v));
  return hit ?? s.default;
}
