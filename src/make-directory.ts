// mkdir -p for DATA_DIR and the file outbox.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';

/**
 * mkdir -p, one level at a time, each made 0700. Node's `recursive` option loops for ever, a core busy, where
 * mkdir says ENOENT although the parent exists (`/proc/x`): it takes that as "make the parent first", again
 * and again.
 */
export function makeDirectory(dir: string): void {
  const missing: string[] = [];
  for (let d = dir; !existsSync(d) && path.dirname(d) !== d; d = path.dirname(d)) missing.push(d);
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d, { mode: 0o700 });
    } catch (err) {
      // Made meanwhile by another process starting on the same DATA_DIR.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}
