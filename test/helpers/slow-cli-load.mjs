// `node --import ./slow-cli-load.mjs bin/mailroom.js …`: the CLI's modules load slowly, as on a busy machine.
// When dist/cli/main.js is about to load (bin/mailroom.js has loaded start-signals.js before it), the file
// named by SLOW_LOAD_MARK is written, and the load waits SLOW_LOAD_MS: a test signals the process then.
// Node 22.15+ runs the hook on the main thread (module.registerHooks; module.register is deprecated from
// Node 25); Node 20 has only module.register, which runs it on a thread of its own. Either way the main
// thread only waits for the load, and a signal meanwhile is handled as in a long load.
import * as nodeModule from 'node:module';
import { writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const mark = process.env.SLOW_LOAD_MARK;
const ms = Number(process.env.SLOW_LOAD_MS);

export function load(url, context, nextLoad) {
  if (url.endsWith('/dist/cli/main.js')) {
    if (mark) writeFileSync(mark, 'loading');
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
  }
  return nextLoad(url, context);
}

if (isMainThread) {
  if (typeof nodeModule.registerHooks === 'function') nodeModule.registerHooks({ load });
  else nodeModule.register(import.meta.url);
}
