// Worker threads started from a module of ours: the compiled one under dist/, or, when running from the
// TypeScript sources (tests, `npm run dev`), a compiled copy of the sources or the source through tsx,
// which a thread does not inherit. And a thread's own CPU priority.
import { existsSync, readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

/** The folder of the sources (or of their compiled copy): this module's. */
const ROOT = path.dirname(fileURLToPath(import.meta.url));

/**
 * `module` is the thread's file beside `base` (an import.meta.url), named without its extension. Beside
 * the sources, a thread starts from the same file under MAILROOM_THREADS_FROM when that names a compiled
 * copy of them (the test run's, test/global-build.ts: tsx costs each thread some 0.4 s of CPU to start,
 * and the suites start hundreds); otherwise through tsx.
 */
export function startThread(base: string, module: string, workerData: unknown): Worker {
  const compiled = new URL(`./${module}.js`, base);
  if (existsSync(fileURLToPath(compiled))) return new Worker(compiled, { workerData });
  const copies = process.env.MAILROOM_THREADS_FROM && path.resolve(process.env.MAILROOM_THREADS_FROM);
  if (copies) {
    const copy = path.join(copies, path.relative(ROOT, path.dirname(fileURLToPath(base))), `${module}.js`);
    // Not a quiet fall back to tsx: a copy gone missing would only make every start slower.
    if (!existsSync(copy)) throw new Error(`MAILROOM_THREADS_FROM has no ${copy}`);
    return new Worker(copy, { workerData });
  }
  const source = JSON.stringify(new URL(`./${module}.ts`, base).href);
  return new Worker(`import('tsx/esm/api').then((tsx) => tsx.tsImport(${source}, ${source}))`, {
    eval: true,
    workerData,
  });
}

/**
 * Lowers the calling thread's CPU priority `steps` nice levels below what it has (at most to 19): when the
 * cores are all busy, the kernel then runs the process's other threads first, and this one in the time
 * they leave. Only on Linux, where a nice value belongs to a thread (setpriority(2)) and /proc/thread-self
 * names it; elsewhere the same call would lower the whole process, so nothing is done. Where /proc is not
 * mounted or the call is refused, the thread keeps its priority.
 */
export function lowerThreadPriority(steps: number): void {
  if (process.platform !== 'linux') return;
  try {
    const tid = Number(path.basename(readlinkSync('/proc/thread-self')));
    setPriority(tid, Math.min(19, getPriority(tid) + steps));
  } catch {
    // as documented: left as it was
  }
}
