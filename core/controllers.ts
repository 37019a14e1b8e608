/**
 * The controllers Ulysses' controller manager runs in place of kube-controller-manager's: the one
 * list every part names them by (the controller manager, its UlyssesConfig section, `ulysses set`,
 * the harness), and the name kube-controller-manager's --controllers flag knows each one by (the
 * flag must disable them there: two writers of the same objects fight).
 */
export const CONTROLLERS = ['replicaset', 'deployment', 'taint-eviction', 'endpointslice', 'endpoints'] as const;
export type ControllerName = (typeof CONTROLLERS)[number];

/** kube-controller-manager's --controllers name of each controller (cmd/kube-controller-manager/names). */
export const KCM_CONTROLLER_NAMES: Readonly<Record<ControllerName, string>> = Object.freeze({
  replicaset: 'replicaset-controller',
  deployment: 'deployment-controller',
  'taint-eviction': 'taint-eviction-controller',
  endpointslice: 'endpointslice-controller',
  endpoints: 'endpoints-controller',
});

/**
 * The `source.component` of each controller's Events, as upstream's recorders name it (not always
 * its --controllers name: `endpoint-slice-controller`, `endpoint-controller`).
 */
export const EVENT_SOURCE_NAMES: Readonly<Record<ControllerName, string>> = Object.freeze({
  replicaset: 'replicaset-controller',
  deployment: 'deployment-controller',
  'taint-eviction': 'taint-eviction-controller',
  endpointslice: 'endpoint-slice-controller',
  endpoints: 'endpoint-controller',
});

export function isControllerName(name: string): name is ControllerName {
  return (CONTROLLERS as readonly string[]).includes(name);
}

/** kube-controller-manager --controllers that leaves the given controllers to Ulysses: `*,-a-controller,...`. */
export function kcmControllersFlag(ulysses: readonly string[]): string {
  const off = new Set(
    ulysses.map((c) => {
      if (!isControllerName(c)) throw new Error(`unknown controller "${c}" (known: ${CONTROLLERS.join(', ')})`);
      return KCM_CONTROLLER_NAMES[c];
    }),
  );
  return ['*', ...[...off].map((c) => `-${c}`)].join(',');
}
