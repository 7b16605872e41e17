// WAL checkpoints off the event loop. SQLite's writer copies its WAL into the database file itself, inside
// the commit that takes the WAL past wal_autocheckpoint frames (1,000 by default): under a steady write
// load about one commit in twenty then blocks the server for 5-40 ms. A thread with its own connection
// does it instead; the writer's own checkpoint stays as a backstop, far enough out never to be reached
// while the thread keeps up, and back at SQLite's default if the thread stops.
import type BetterSqlite3 from 'better-sqlite3';
import { startThread } from '../threads.js';

export interface CheckpointThreadData {
  file: string;
  synchronous: string;
  everyMs: number;
}

/** How often the thread checkpoints: a few MB of WAL at the highest write rates measured here. */
const EVERY_MS = 50;
/** The writer's backstop while the thread runs (frames of 4 KiB: 40 MiB of WAL). */
const BACKSTOP_FRAMES = 10_000;
/** SQLite's own default, for the writer again once the thread has stopped. */
const DEFAULT_FRAMES = 1_000;

export interface Checkpointer {
  close(): Promise<void>;
}

/** `onStop` hears of a thread that stopped on its own (it should not); the writer then checkpoints again. */
export function startCheckpointer(
  writer: BetterSqlite3.Database,
  options: { synchronous: string; onStop?: (err: unknown) => void; everyMs?: number },
): Checkpointer {
  const data: CheckpointThreadData = {
    file: writer.name,
    synchronous: options.synchronous,
    everyMs: options.everyMs ?? EVERY_MS,
  };
  writer.pragma(`wal_autocheckpoint = ${BACKSTOP_FRAMES}`);
  const thread = startThread(import.meta.url, 'checkpoint-thread', data);
  thread.unref();
  let closing = false;
  let failure: unknown = new Error('the checkpoint thread stopped');
  thread.on('error', (err) => (failure = err));
  const exited = new Promise<void>((resolve) => {
    thread.once('exit', () => {
      if (!closing) {
        if (writer.open) writer.pragma(`wal_autocheckpoint = ${DEFAULT_FRAMES}`);
        options.onStop?.(failure);
      }
      resolve();
    });
  });
  return {
    async close() {
      closing = true;
      // Held open until the thread is gone: an unref'd thread alone would let the process exit mid-close.
      thread.ref();
      thread.postMessage({ close: true });
      await exited;
      if (writer.open) writer.pragma(`wal_autocheckpoint = ${DEFAULT_FRAMES}`);
    },
  };
}
