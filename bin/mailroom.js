#!/usr/bin/env node
// Runs the compiled CLI; `npm ci` builds dist/ through the prepare script.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/cli/main.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  const message = 'dist/ is missing; run `npm run build` (npm ci does it for you)';
  // With --json the last stdout line is a JSON object, this error too.
  if (process.argv.includes('--json')) console.log(JSON.stringify({ error: message }));
  console.error(`mailroom: ${message}`);
  process.exit(1);
}
// Before the CLI's many modules: serve and worker hold a stop signal that comes while they load (a dist/
// built before start-signals.js existed goes without, rather than fail to start).
const signals = new URL('../dist/cli/start-signals.js', import.meta.url);
if (existsSync(fileURLToPath(signals))) await import(signals.href);
await import(entry.href);
