/**
 * The layering of the repository, checked by dependency-cruiser (`npx depcruise core
 * controller-manager scheduler-plugins kubelet-shim apf-configs manifests experiments cli test`, and
 * in `npm test` by test/unit/layering.test.ts):
 *
 *   core/          the shared library: imports no component, no lab, no tests
 *   components     controller-manager/, scheduler-plugins/, kubelet-shim/, apf-configs/, manifests/:
 *                  each imports only core/ and its own files (exceptions below, named)
 *   experiments/   the lab (testbed, harness, benches): may import everything except test/;
 *                  imported only by experiments/, test/ and cli/
 *
 * Type-only imports count too (tsPreCompilationDeps): a type from the lab is still the lab.
 */
const COMPONENTS = ['controller-manager', 'scheduler-plugins', 'kubelet-shim', 'apf-configs', 'manifests'];
const REPO_DIRS = ['core', ...COMPONENTS, 'experiments', 'cli', 'test'];
const inRepo = `^(${REPO_DIRS.join('|')})/`;

/** The modules of core/ that know no domain (no criticality, no Kubernetes object): what the generic queue may use. */
const GENERIC_CORE = ['priority', 'clock', 'heap', 'token-bucket', 'metrics', 'logging', 'config'];

/**
 * Imports across components that the architecture has on purpose. The controller manager hosts the
 * APF exemption's runtime toggle (leader-elected, one writer of the FlowSchema); manifests/render.ts
 * generates the kustomize base's FlowSchema from the same function as apf-configs/critical-namespace.yaml.
 */
const ALLOWED_ACROSS = {
  'controller-manager': ['^apf-configs/runtime\\.ts$'],
  manifests: ['^apf-configs/flowschemas\\.ts$'],
};

module.exports = {
  forbidden: [
    {
      name: 'core-imports-no-component',
      comment: 'core/ is the shared library: it must not import a component, the lab, the CLI or the tests.',
      severity: 'error',
      from: { path: '^core/' },
      to: { path: inRepo, pathNot: '^core/' },
    },
    ...COMPONENTS.map((c) => ({
      name: `${c}-imports-only-core-and-itself`,
      comment: `${c}/ is a component: it imports core/ and its own files only (never experiments/, test/, cli/ or another component).`,
      severity: 'error',
      from: { path: `^${c}/` },
      to: { path: inRepo, pathNot: [`^${c}/`, '^core/', ...(ALLOWED_ACROSS[c] ?? [])] },
    })),
    {
      name: 'generic-queue-knows-no-domain',
      comment:
        'controller-manager/queue/ is a generic work queue: it has priority levels (core/priority.ts), not criticalities, and knows no controller or Kubernetes object (core/criticality.ts maps criticality onto a Priority, the controllers enqueue it). It imports only the generic parts of core/.',
      severity: 'error',
      from: { path: '^controller-manager/queue/' },
      to: { path: inRepo, pathNot: ['^controller-manager/queue/', `^core/(${GENERIC_CORE.join('|')})\\.ts$`] },
    },
    {
      name: 'only-lab-tests-cli-import-experiments',
      comment: 'experiments/ is the lab: only experiments/, test/ and cli/ may import it.',
      severity: 'error',
      from: { pathNot: '^(experiments|test|cli)/' },
      to: { path: '^experiments/' },
    },
    {
      name: 'nothing-imports-tests',
      comment: 'test/ is imported only by test/.',
      severity: 'error',
      from: { pathNot: '^test/' },
      to: { path: '^test/' },
    },
    {
      name: 'not-to-unresolvable',
      comment: 'An import that cannot be resolved would escape the rules above.',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(node_modules|dist|experiments/results)/' },
    tsPreCompilationDeps: true,
    moduleSystems: ['es6', 'cjs'],
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'] },
  },
};
