// `node --import ./slow-cli-load.mjs bin/mailroom.js …`: the CLI's modules load slowly, as on a busy machine.
// When dist/cli/main.js is about to load (bin/mailroom.js has loaded start-signals.js before it), the file
// named by SLOW_LOAD_MARK is written, and the load waits SLOW_LOAD_MS: a test signals the process then.
// Node 22.15+ has synchronous hooks on the main thread (module.registerHooks; module.register is deprecated
// from Node 25); Node 20 has only module.register, whose hooks run on a thread of their own.
import * as nodeModule from 'node:module';
import { writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

const isCli = (url) => url.endsWith('/dist/cli/main.js');
const settings = () => ({ mark: process.env.SLOW_LOAD_MARK, ms: Number(process.env.SLOW_LOAD_MS) });

let options = { mark: undefined, ms: 0 };
export function initialize(data) {
  options = data;
}

export async function load(url, context, nextLoad) {
  if (isCli(url)) {
    if (options.mark) writeFileSync(options.mark, 'loading');
    await new Promise((resolve) => setTimeout(resolve, options.ms));
  }
  return nextLoad(url, context);
}

if (isMainThread) {
  if (typeof nodeModule.registerHooks === 'function') {
    const { mark, ms } = settings();
    nodeModule.registerHooks({
      load(url, context, nextLoad) {
        if (isCli(url)) {
          if (mark) writeFileSync(mark, 'loading');
          // The main thread waits (a signal meanwhile is handled once it runs again, as in a long load).
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
        }
        return nextLoad(url, context);
      },
    });
  } else {
    nodeModule.register(import.meta.url, { data: settings() });
  }
}
