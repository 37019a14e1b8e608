// vitest setup file: this worker's component logs go to the run's log file (vitest.config.ts), and
// the clusters it brings up are recorded against its test file (experiments/testbed/processes.ts
// recordClusterStart, read by test/test-times.ts).
import { relative } from 'node:path';
import { beforeAll } from 'vitest';
import { logToFile } from '../core/logging.ts';

if (process.env.ULYSSES_TEST_LOG_FILE) logToFile(process.env.ULYSSES_TEST_LOG_FILE);

beforeAll((file) => {
  if ('filepath' in file && typeof file.filepath === 'string') process.env.ULYSSES_TEST_FILE = relative(process.cwd(), file.filepath);
});
