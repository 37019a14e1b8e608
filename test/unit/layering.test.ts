/**
 * The repository's layering (.dependency-cruiser.cjs), checked with dependency-cruiser's own API:
 * core/ imports no component; each component imports only core/ and itself (named exceptions in the
 * config); only experiments/, test/ and cli/ import the lab; the generic queue imports no domain
 * module. The second case cruises a small tree with one violation of each kind, so a rule set that
 * let everything pass would fail here.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { cruise, type ICruiseOptions, type ICruiseResult, type IFlattenedRuleSet } from 'dependency-cruiser';

const REPO = fileURLToPath(new URL('../..', import.meta.url));
const config = createRequire(import.meta.url)('../../.dependency-cruiser.cjs') as { forbidden: IFlattenedRuleSet['forbidden']; options: ICruiseOptions };
const DIRS = ['core', 'controller-manager', 'scheduler-plugins', 'kubelet-shim', 'apf-configs', 'manifests', 'experiments', 'cli', 'test'];

async function cruiseTree(baseDir: string, dirs: string[]): Promise<ICruiseResult> {
  const r = await cruise(dirs, { ...config.options, baseDir, validate: true, ruleSet: { forbidden: config.forbidden } });
  return r.output as ICruiseResult;
}

const violations = (r: ICruiseResult) => r.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`).sort();

describe('layering (dependency-cruiser)', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'ulysses-layering-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('the repository has no violation', async () => {
    const r = await cruiseTree(REPO, DIRS);
    expect(violations(r)).toEqual([]);
    // the cruise really read the code: every component and its imports of core/
    const sources = new Set(r.modules.map((m) => m.source));
    for (const f of ['core/kube.ts', 'controller-manager/main.ts', 'scheduler-plugins/extender/main.ts', 'kubelet-shim/main.ts', 'apf-configs/apply.ts', 'manifests/overlays.ts', 'experiments/bench/controller.ts']) {
      expect(sources, f).toContain(f);
    }
    const main = r.modules.find((m) => m.source === 'kubelet-shim/main.ts')!;
    expect(main.dependencies.map((d) => d.resolved)).toContain('core/logging.ts');
    expect(r.summary.totalCruised).toBeGreaterThan(150);
  }, 60_000);

  it('catches each kind of violation in a small tree', async () => {
    const files: Record<string, string> = {
      'core/ok.ts': 'export const ok = 1;\n',
      'core/bad.ts': "import { b } from '../kubelet-shim/b.ts';\nexport const a = b;\n",
      'kubelet-shim/b.ts': "import { ok } from '../core/ok.ts';\nimport { lab } from '../experiments/lab.ts';\nexport const b = ok + lab;\n",
      'manifests/m.ts': "import type { Lab } from '../experiments/lab.ts';\nexport const m: Lab = 1;\n",
      'scheduler-plugins/s.ts': "import { d } from '../controller-manager/d.ts';\nexport const s = d;\n",
      'controller-manager/d.ts':
        "import { toggle } from '../apf-configs/runtime.ts';\nimport { apply } from '../apf-configs/apply.ts';\nimport { t } from '../test/t.ts';\nexport const d = toggle + apply + t;\n",
      'apf-configs/runtime.ts': 'export const toggle = 1;\n',
      'core/criticality.ts': "export type Criticality = 'high';\n",
      'controller-manager/queue/q.ts': "import type { Criticality } from '../../core/criticality.ts';\nexport const q: Criticality = 'high';\n",
      'core/priority.ts': 'export type Priority = 0 | 1 | 2;\n',
      // the generic queue may use core/priority.ts, not a controller of its own component
      'controller-manager/queue/p.ts': "import type { Priority } from '../../core/priority.ts';\nimport { d } from '../d.ts';\nexport const p: Priority = d ? 1 : 0;\n",
      'apf-configs/apply.ts': 'export const apply = 1;\n',
      'experiments/lab.ts': "import { b } from '../kubelet-shim/b.ts';\nexport type Lab = number;\nexport const lab = 1 + 0 * b;\n",
      'test/t.ts': "import { lab } from '../experiments/lab.ts';\nexport const t = lab;\n",
      'cli/c.ts': "import { lab } from '../experiments/lab.ts';\nimport { gone } from '../core/gone.ts';\nexport const c = lab + gone;\n",
    };
    for (const [rel, text] of Object.entries(files)) {
      mkdirSync(dirname(join(tmp, rel)), { recursive: true });
      writeFileSync(join(tmp, rel), text);
    }
    const r = await cruiseTree(tmp, ['core', 'kubelet-shim', 'manifests', 'scheduler-plugins', 'controller-manager', 'apf-configs', 'experiments', 'test', 'cli']);
    expect(violations(r)).toEqual(
      [
        'core-imports-no-component: core/bad.ts -> kubelet-shim/b.ts',
        'kubelet-shim-imports-only-core-and-itself: kubelet-shim/b.ts -> experiments/lab.ts',
        'only-lab-tests-cli-import-experiments: kubelet-shim/b.ts -> experiments/lab.ts',
        // a type-only import of the lab counts
        'manifests-imports-only-core-and-itself: manifests/m.ts -> experiments/lab.ts',
        'only-lab-tests-cli-import-experiments: manifests/m.ts -> experiments/lab.ts',
        'scheduler-plugins-imports-only-core-and-itself: scheduler-plugins/s.ts -> controller-manager/d.ts',
        // apf-configs/runtime.ts is the named exception; apply.ts is not
        'controller-manager-imports-only-core-and-itself: controller-manager/d.ts -> apf-configs/apply.ts',
        'controller-manager-imports-only-core-and-itself: controller-manager/d.ts -> test/t.ts',
        'nothing-imports-tests: controller-manager/d.ts -> test/t.ts',
        'not-to-unresolvable: cli/c.ts -> ../core/gone.ts',
        'generic-queue-knows-no-domain: controller-manager/queue/q.ts -> core/criticality.ts',
        'generic-queue-knows-no-domain: controller-manager/queue/p.ts -> controller-manager/d.ts',
      ].sort(),
    );
  }, 60_000);
});
