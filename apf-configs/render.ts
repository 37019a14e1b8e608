/**
 * Regenerates apf-configs/critical-namespace.yaml (the default exemption for namespace
 * "ulysses-critical"): `npx tsx apf-configs/render.ts [--check]`. With --check it only compares and
 * exits 1 when the checked-in file is stale.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { renderDefaultCriticalNamespaceYaml } from './flowschemas.ts';

export const CRITICAL_NAMESPACE_YAML_PATH = fileURLToPath(new URL('./critical-namespace.yaml', import.meta.url));

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const want = renderDefaultCriticalNamespaceYaml();
  if (process.argv.includes('--check')) {
    let have = '';
    try {
      have = readFileSync(CRITICAL_NAMESPACE_YAML_PATH, 'utf8');
    } catch {
      /* missing: stale */
    }
    if (have !== want) {
      process.stderr.write(`${CRITICAL_NAMESPACE_YAML_PATH} is stale: run npx tsx apf-configs/render.ts\n`);
      process.exit(1);
    }
  } else {
    writeFileSync(CRITICAL_NAMESPACE_YAML_PATH, want);
    process.stdout.write(`wrote ${CRITICAL_NAMESPACE_YAML_PATH}\n`);
  }
}
