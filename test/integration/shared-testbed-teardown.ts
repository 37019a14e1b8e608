// vitest globalSetup of the integration project: the shared testbed (shared-testbed.ts) comes down
// when the run ends, as every other testbed does after its file.
import { releaseSharedTestbed } from './shared-testbed.ts';

export async function teardown(): Promise<void> {
  await releaseSharedTestbed();
}
