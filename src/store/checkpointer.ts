// WAL checkpoints off the event loop: SQLite's writer otherwise copies its WAL into the database file inside
// the commit that takes the WAL past wal_autocheckpoint frames, blocking the server meanwhile. The writer's
// own checkpoint stays as a backstop at a few thousand frames: it then copies only what the thread has not,
// and bounds the WAL when back-to-back commits never leave the thread a moment with every frame copied. It is
// back at SQLite's default while no thread runs.
import type BetterSqlite3 from 'better-sqlite3';
import { startBackgroundThread } from './background-thread.js';

export interface CheckpointThreadData {
  file: string;
  synchronous: string;
  everyMs: number;
}

/** What the thread tells the store: a checkpoint that failed (it goes on trying). */
export interface CheckpointThreadReport {
  error: string;
}

/** How often the thread checkpoints: a few MB of WAL at the highest write rates measured here. */
const EVERY_MS = 50;
/** The writer's backstop while the thread runs (frames of 4 KiB: 12 MiB of WAL). */
const BACKSTOP_FRAMES = 3_000;
/** SQLite's own default, for the writer again once the thread has stopped. */
const DEFAULT_FRAMES = 1_000;

export interface Checkpointer {
  close(): Promise<void>;
}

/**
 * `onError` hears of a checkpoint that failed, or of a thread that stopped (it should do neither); a
 * stopped thread is replaced a while later (background-thread.ts), and the writer checkpoints by itself
 * meanwhile.
 */
export function startCheckpointer(
  writer: BetterSqlite3.Database,
  options: { synchronous: string; onError?: (err: unknown) => void },
): Checkpointer {
  const data: CheckpointThreadData = {
    file: writer.name,
    synchronous: options.synchronous,
    everyMs: EVERY_MS,
  };
  const thread = startBackgroundThread<CheckpointThreadReport>({
    base: import.meta.url,
    module: 'checkpoint-thread',
    data,
    onStart: () => writer.pragma(`wal_autocheckpoint = ${BACKSTOP_FRAMES}`),
    onReport: (report) => options.onError?.(new Error(report.error)),
    onStop: (err) => {
      if (writer.open) writer.pragma(`wal_autocheckpoint = ${DEFAULT_FRAMES}`);
      options.onError?.(err);
    },
    alive: () => writer.open,
  });
  return {
    async close() {
      await thread.close();
      if (writer.open) writer.pragma(`wal_autocheckpoint = ${DEFAULT_FRAMES}`);
    },
  };
}
