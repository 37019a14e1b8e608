/**
 * A worker thread running a TypeScript module of this repository. Node 20 does not apply the
 * `--import tsx` hooks of the process to its workers, so the worker first registers tsx's loader
 * (tsx/esm/api) and then imports the module. The module tells its worker side from other imports by
 * `isMainThread` and the `workerData` it is given.
 */
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { Worker, type WorkerOptions } from 'node:worker_threads';

// tsx's ESM build of tsx/esm/api (its CommonJS build cannot register the hooks), found through
// require.resolve (import.meta.resolve is not there under vitest) next to the CommonJS one
const TSX_API = pathToFileURL(createRequire(import.meta.url).resolve('tsx/esm/api').replace(/\.cjs$/, '.mjs')).href;

export function tsWorker(moduleUrl: string, opts: Omit<WorkerOptions, 'eval'> = {}): Worker {
  return new Worker(
    `import(${JSON.stringify(TSX_API)}).then((tsx) => { tsx.register(); return import(${JSON.stringify(moduleUrl)}); })`,
    { ...opts, eval: true },
  );
}
