// A SIGTERM or SIGINT that reaches `serve` or `worker` while their modules still load (about a second on a
// busy machine) would end the process at once, with 143 and not a word. This module imports nothing and is
// loaded first (bin/mailroom.js), so it holds such a signal until the server takes it over (takeStartSignal)
// and stops once started; a second signal meanwhile stops the process at once.

const HOLDS = new Set(['serve', 'worker']);

let first: string | undefined;
let installed = false;

const hold = (signal: string) => {
  if (first === undefined) {
    first = signal;
    return;
  }
  process.stderr.write(`mailroom: ${signal} again while starting; stopped\n`);
  process.exit(1);
};

const command = process.argv.slice(2).find((arg) => !arg.startsWith('-'));
if (command !== undefined && HOLDS.has(command)) {
  process.on('SIGTERM', hold);
  process.on('SIGINT', hold);
  installed = true;
}

/** The signal that arrived while loading, if any; from now on the caller's own handlers take signals. */
export function takeStartSignal(): string | undefined {
  if (installed) {
    process.off('SIGTERM', hold);
    process.off('SIGINT', hold);
    installed = false;
  }
  return first;
}
