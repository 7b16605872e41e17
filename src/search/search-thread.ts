// The search thread: keeps the index file of contacts' emails up to date with the database (search-index.ts),
// on connections of its own, so that neither the server's event loop nor the database's write lock ever
// waits for an index flush or merge. It also runs a read beside the event loop when asked (a share of a
// pass over the address chunks, contact-chunks.repository.ts), and steps no further until the asker lets
// go: the index file then stays as that read saw it, for the asker's own reads (search-indexer.ts).
import { parentPort, workerData } from 'node:worker_threads';
import type BetterSqlite3 from 'better-sqlite3';
import { SearchIndexer } from './search-index.js';
import { attachSearchFile, isUnreadable } from './search-file.js';
import { isDamagedChunk } from './address-chunks.js';
import { openQueryOnly, withStatementCache } from '../store/sqlite-driver.js';

export interface SearchThreadData {
  databaseFile: string;
  indexFile: string;
  everyMs: number;
}

/**
 * What the thread tells the store: a step that failed (it goes on trying), retired keys done with, or about
 * a read it was asked for: taken up (`held`: no step until it is let go), then its rows or its error.
 */
export type SearchThreadReport =
  | { error: string }
  | { retiredSeen: number }
  | { read: number; held: true }
  | { read: number; declined: true }
  | { read: number; rows: unknown[] }
  | { read: number; failed: string };

/** What the store asks of the thread. */
export type SearchThreadRequest =
  | { close: true }
  /** Run `sql` on a reader of both files and hold the index file as it is; past `deadline`, do nothing. */
  | { read: number; sql: string; parameters: unknown[]; deadline: number }
  | { release: number };

/** How long a read holds the index at most, should the store never let go (it always does). */
const HOLD_MAX_MS = 2_000;
/**
 * Reads asked for back to back could hold the index for ever, and new contacts would then never reach it:
 * past this long since the last step ended, a read is declined (its asker reads alone) until one is made.
 */
const STEP_AT_LEAST_MS = 250;

const { databaseFile, indexFile, everyMs } = workerData as SearchThreadData;
const port = parentPort!;
const indexer = new SearchIndexer(databaseFile, indexFile);

/** Damaged index pages: laid out anew and built again, or said why not. */
const repair = (cause: unknown): void => {
  try {
    indexer.repair();
    port.postMessage({
      error: `${String(cause)}; the index is being built again`,
    } satisfies SearchThreadReport);
  } catch (err) {
    port.postMessage({
      error: `${String(err)}; delete ${indexFile} and restart to build it again (searches scan meanwhile)`,
    } satisfies SearchThreadReport);
  }
};
const intact = (): boolean => {
  try {
    return indexer.intact();
  } catch {
    return false;
  }
};
// Once per start, before the first step: garbage inside FTS5's blobs raises no error, a search just finds
// nothing there, so no failed step would ever call for the check. It reads the whole file, on this thread;
// meanwhile searches read the contacts not indexed yet from the table, as usual.
if (!intact()) repair(new Error('the search index file failed its quick check at start'));

/** The reads holding the index file as it is, with when each lets go at the latest. */
const holds = new Map<number, number>();
const holding = (): boolean => {
  const now = Date.now();
  for (const [id, until] of holds) if (until <= now) holds.delete(id);
  return holds.size > 0;
};

let timer: NodeJS.Timeout | undefined;
let failing = false;
let told = -1;
let stepped = Date.now();
const round = (): void => {
  if (holding()) {
    timer = setTimeout(round, everyMs);
    return;
  }
  let more = false;
  try {
    const step = indexer.step();
    failing = false;
    if (step && step.retiredSeen > told) {
      told = step.retiredSeen;
      port.postMessage({ retiredSeen: told } satisfies SearchThreadReport);
    }
    // More waiting: no pause. Otherwise the contacts of the next moments wait to be indexed together,
    // which costs less per contact.
    more = step?.more ?? false;
  } catch (err) {
    // Told once per run of failures; the next round tries again. Damage is repaired only when it is
    // the index file's (a damaged database is the operator's to see to, not a reason to drop the index).
    if (!failing) {
      if (isDamagedChunk(err) || (isUnreadable(err) && !intact())) repair(err);
      else port.postMessage({ error: String(err) } satisfies SearchThreadReport);
    }
    failing = true;
  }
  stepped = Date.now();
  timer = setTimeout(round, more ? 0 : everyMs);
};
round();

/**
 * A reader of the database with the index file attached, as the store's own (store/sqlite-store.ts);
 * opened when asked.
 */
let reader: BetterSqlite3.Database | undefined;
const readRows = (sql: string, parameters: unknown[]): unknown[] => {
  if (!reader) {
    reader = withStatementCache(openQueryOnly(databaseFile));
    attachSearchFile(reader, indexFile);
  }
  return reader.prepare(sql).all(...parameters);
};

port.on('message', (request: SearchThreadRequest) => {
  if ('read' in request) {
    // Asked too long ago (the thread was busy): the asker has read alone meanwhile.
    if (Date.now() > request.deadline) return;
    // Held one after another, with never a round in between, the index would fall behind for good.
    if (Date.now() - stepped > STEP_AT_LEAST_MS) {
      port.postMessage({ read: request.read, declined: true } satisfies SearchThreadReport);
      return;
    }
    // Between two steps: the index file is as the asker's next read will find it, until let go.
    holds.set(request.read, Date.now() + HOLD_MAX_MS);
    port.postMessage({ read: request.read, held: true } satisfies SearchThreadReport);
    try {
      const rows = readRows(request.sql, request.parameters);
      port.postMessage({ read: request.read, rows } satisfies SearchThreadReport);
    } catch (err) {
      port.postMessage({ read: request.read, failed: String(err) } satisfies SearchThreadReport);
    }
    return;
  }
  if ('release' in request) {
    holds.delete(request.release);
    // The round skipped while held, at once: a contact written meanwhile waits no longer than it must.
    if (!holding()) {
      clearTimeout(timer);
      timer = setTimeout(round, 0);
    }
    return;
  }
  clearTimeout(timer);
  reader?.close();
  indexer.close();
  port.close();
});
