/**
 * vitest's order (failed first, then slowest first) with the integration files of one shared-testbed
 * family (`useSharedTestbed('<family>', ...)`, test/integration/shared-testbed.ts) next to each
 * other, where the family's first file would run: the family's testbed is then reset between them
 * instead of started again.
 */
import { readFileSync } from 'node:fs';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** The family a test file's source declares, if any. */
export function familyOf(source: string): string | undefined {
  return /useSharedTestbed\(\s*['"]([^'"]+)['"]/.exec(source)?.[1];
}

/** `items` in their order, but every family's members moved up to its first one, in their order. */
export function groupFamilies<T>(items: readonly T[], family: (t: T) => string | undefined): T[] {
  const byFamily = new Map<string, T[]>();
  for (const t of items) {
    const f = family(t);
    if (f !== undefined) byFamily.set(f, [...(byFamily.get(f) ?? []), t]);
  }
  const out: T[] = [];
  for (const t of items) {
    const f = family(t);
    if (f === undefined) out.push(t);
    else if (byFamily.has(f)) {
      out.push(...byFamily.get(f)!);
      byFamily.delete(f);
    }
  }
  return out;
}

export default class FamilySequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const families = new Map<string, string | undefined>();
    const family = (f: TestSpecification) => {
      if (!families.has(f.moduleId)) families.set(f.moduleId, f.project.name === 'integration' ? familyOf(readFileSync(f.moduleId, 'utf8')) : undefined);
      return families.get(f.moduleId);
    };
    return groupFamilies(sorted, family);
  }
}
