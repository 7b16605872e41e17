// A thread started from the TypeScript sources: from the compiled copy MAILROOM_THREADS_FROM names (as in
// this test run, vitest.config.ts), or, without it (`npm run dev`), from the source through tsx. The
// checkpoint thread given a database file that does not exist fails at once, and its stack says which file
// ran.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { afterEach, describe, expect, it } from 'vitest';
import { startThread } from '../../src/threads.js';

const BASE = new URL('../../src/store/store.ts', import.meta.url).href;
const DATA = { file: '/nonexistent/mailroom.sqlite', synchronous: 'FULL', everyMs: 1000 };

function failure(worker: Worker): Promise<Error> {
  return new Promise((resolve, reject) => {
    worker.once('error', resolve);
    worker.once('exit', () => reject(new Error('the thread exited without an error')));
  });
}

describe('startThread from the sources', () => {
  const copies = process.env.MAILROOM_THREADS_FROM;
  afterEach(() => {
    if (copies === undefined) delete process.env.MAILROOM_THREADS_FROM;
    else process.env.MAILROOM_THREADS_FROM = copies;
  });

  it('runs the compiled copy MAILROOM_THREADS_FROM names', async () => {
    expect(copies).toBeTruthy();
    const err = await failure(startThread(BASE, 'checkpoint-thread', DATA));
    expect(err.message).toMatch(/unable to open database file|directory does not exist/);
    expect(err.stack).toContain(path.join(copies!, 'store', 'checkpoint-thread.js'));
  });

  it('runs the source through tsx without it', async () => {
    delete process.env.MAILROOM_THREADS_FROM;
    const err = await failure(startThread(BASE, 'checkpoint-thread', DATA));
    expect(err.message).toMatch(/unable to open database file|directory does not exist/);
    expect(err.stack).toContain(path.join('src', 'store', 'checkpoint-thread.ts'));
  });

  it('refuses a MAILROOM_THREADS_FROM without the thread, rather than fall back to tsx', () => {
    const empty = mkdtempSync(path.join(tmpdir(), 'mailroom-threads-'));
    process.env.MAILROOM_THREADS_FROM = empty;
    try {
      expect(() => startThread(BASE, 'checkpoint-thread', DATA)).toThrow(
        `MAILROOM_THREADS_FROM has no ${path.join(empty, 'store', 'checkpoint-thread.js')}`,
      );
    } finally {
      rmSync(empty, { recursive: true });
    }
  });
});
