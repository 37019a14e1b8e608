// vitest setup file of the integration project: a file that does not use the shared testbed
// (shared-testbed.ts) starts with it taken down, since every testbed binds the same ports. Its
// sharing is declared while its module loads, before this hook runs.
import { beforeAll } from 'vitest';
import { releaseSharedTestbed, sharingDeclared } from './shared-testbed.ts';

beforeAll(async () => {
  if (!sharingDeclared()) await releaseSharedTestbed();
});
