// The processes tests start, so that none outlives its test file. A test that times out never reaches its
// own cleanup (its `finally` waits on what timed out), and its servers kept running past the whole run,
// holding ports and data directories. After each file (test/helpers/leftovers.ts) and when the test worker
// exits, whatever is still running is killed.
import type { ChildProcess } from 'node:child_process';

/** Each running child, and whether its process group is to be killed with it. */
const running = new Map<ChildProcess, boolean>();

/**
 * Tracks `child` until it exits: killed by `killLeftovers` if it is still running then. `group`: the child
 * was spawned `detached` (a process group of its own) and starts the real server under it, as `npm start`
 * does: the whole group is killed, or the server would be left behind, orphaned.
 */
export function tracked<T extends ChildProcess>(child: T, { group = false } = {}): T {
  if (child.exitCode !== null || child.signalCode !== null) return child;
  running.set(child, group);
  child.once('exit', () => running.delete(child));
  return child;
}

/** Kills (SIGKILL) every tracked child still running; returns how many it found. */
export function killLeftovers(): number {
  const left = [...running];
  running.clear();
  for (const [child, group] of left) {
    try {
      if (group && child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      else child.kill('SIGKILL');
    } catch {
      // Gone meanwhile.
    }
  }
  return left.length;
}

// Synchronous, as 'exit' handlers must be: the signal is sent before the worker is gone.
process.once('exit', killLeftovers);
