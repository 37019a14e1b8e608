// vitest setup file: this worker's component logs go to the run's log file (vitest.config.ts).
import { logToFile } from '../core/logging.ts';

if (process.env.ULYSSES_TEST_LOG_FILE) logToFile(process.env.ULYSSES_TEST_LOG_FILE);
