// `node --import ./slow-cli-load.mjs bin/mailroom.js …`: the CLI's modules load slowly, as on a busy machine.
// When dist/cli/main.js is about to load (bin/mailroom.js has loaded start-signals.js before it), the file
// named by SLOW_LOAD_MARK is written, and the load waits SLOW_LOAD_MS: a test signals the process then.
import { register } from 'node:module';
import { writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

if (isMainThread)
  register(import.meta.url, {
    data: { mark: process.env.SLOW_LOAD_MARK, ms: Number(process.env.SLOW_LOAD_MS) },
  });

let options = { mark: undefined, ms: 0 };
export function initialize(data) {
  options = data;
}

export async function load(url, context, nextLoad) {
  if (url.endsWith('/dist/cli/main.js')) {
    if (options.mark) writeFileSync(options.mark, 'loading');
    await new Promise((resolve) => setTimeout(resolve, options.ms));
  }
  return nextLoad(url, context);
}
