// Worker threads started from a module of ours: the compiled one under dist/, or, when running from the
// TypeScript sources (tests, `npm run dev`), the source through tsx, which a thread does not inherit.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/** `module` is the thread's file beside `base` (an import.meta.url), named without its extension. */
export function startThread(base: string, module: string, workerData: unknown): Worker {
  const compiled = new URL(`./${module}.js`, base);
  if (existsSync(fileURLToPath(compiled))) return new Worker(compiled, { workerData });
  const source = JSON.stringify(new URL(`./${module}.ts`, base).href);
  return new Worker(`import('tsx/esm/api').then((tsx) => tsx.tsImport(${source}, ${source}))`, {
    eval: true,
    workerData,
  });
}
