// The long-read thread: runs the SQLite store's reads that may take long (a walk of a tag's contacts, a
// deep page: long-reads.ts) on a reader of its own, one after another, so that the event loop serves every
// other request meanwhile. The reader is as the store's own: the database with the index file attached
// as `search`, and the chunk functions.
import { parentPort, workerData } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import { openQueryOnly, withStatementCache } from './sqlite-driver.js';
import { attachSearchFile } from '../search/search-file.js';

export interface LongReadThreadData {
  databaseFile: string;
  indexFile: string;
  /** An Int32Array's: reads sent in an earlier generation than the one it holds now are skipped. */
  generation: SharedArrayBuffer;
}

/** What the store asks: a read (its rows are answered under its id), or to stop. */
export type LongReadRequest =
  { id: number; generation: number; sql: string; parameters: unknown[] } | { close: true };

/** A read's rows, or its error as SQLite gave it (the code decides a 503, a damaged index file, …). */
export type LongReadReport =
  { id: number; rows: unknown[] } | { id: number; error: { message: string; code?: string } };

const { databaseFile, indexFile, generation } = workerData as LongReadThreadData;
const now = new Int32Array(generation);
const port = parentPort!;

/** Opened at the first read: a thread restarted after a failure opens it anew. */
let reader: BetterSqlite3.Database | undefined;
const open = (): BetterSqlite3.Database => {
  if (!reader) {
    const conn = withStatementCache(openQueryOnly(databaseFile));
    try {
      attachSearchFile(conn, indexFile);
    } catch (err) {
      conn.close();
      throw err;
    }
    reader = conn;
  }
  return reader;
};

port.on('message', (request: LongReadRequest) => {
  if ('close' in request) {
    reader?.close();
    port.close();
    return;
  }
  // Interrupted since it was sent: its asker has been answered already (long-reads.ts interrupt).
  if (request.generation !== Atomics.load(now, 0)) return;
  try {
    const rows = open()
      .prepare(request.sql)
      .all(...request.parameters);
    port.postMessage({ id: request.id, rows } satisfies LongReadReport);
  } catch (err) {
    const { message, code } = err as { message?: unknown; code?: unknown };
    port.postMessage({
      id: request.id,
      error: {
        message: typeof message === 'string' ? message : String(err),
        ...(typeof code === 'string' ? { code } : {}),
      },
    } satisfies LongReadReport);
  }
});
