/**
 * The better-sqlite3 build this Node can run. 12.x, built on Node's ObjectWrap, aborts the process on
 * Node 24.19+ when the garbage collector frees a statement outside a JS context (at exit, in a thread's
 * teardown, in an idle collection); 13.x, on Node-API 10, does not, but crashes on Node 20 (Node-API 9). So
 * both are installed: 13.x as the optional dependency `better-sqlite3-napi`, which npm skips where its
 * engines (Node >= 22) do not match.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

const require = createRequire(import.meta.url);

function load(): typeof BetterSqlite3 {
  if (Number(process.versions.napi) >= 10) {
    try {
      return require('better-sqlite3-napi') as typeof BetterSqlite3;
    } catch (err) {
      // Installed without optional dependencies: 12.x still runs here, short of Node 24's abort.
      if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
    }
  }
  return require('better-sqlite3') as typeof BetterSqlite3;
}

export const Sqlite = load();

/**
 * The page cache (KiB) of each connection of a store but its writer, and of each file attached to one:
 * SQLite's own default. better-sqlite3 builds SQLite with 16 MiB a connection, and a store has up to seven
 * such caches beside the writer's; the files' pages stay in the OS's cache, a read away. The writer keeps the
 * larger cache, for the pages its inserts touch.
 */
const SMALL_CACHE_KIB = 2_000;

/** Gives `conn` (or one of its attached files, `schema`) SQLite's default page cache (SMALL_CACHE_KIB). */
export function withSmallCache(conn: BetterSqlite3.Database, schema = 'main'): void {
  conn.pragma(`${schema}.cache_size = -${SMALL_CACHE_KIB}`);
}

/** How long opening a store waits for another process to finish setting up the same new file. */
const WAL_SWITCH_WAIT_MS = 10_000;

/**
 * `journal_mode = WAL`, waiting out another process that is switching the same new file at the same moment
 * (two processes started together on a new DATA_DIR): that SQLITE_BUSY comes at once, without the busy
 * handler, so busy_timeout does not help. Synchronous, as opening a store is.
 */
export function useWal(db: BetterSqlite3.Database): void {
  const deadline = Date.now() + WAL_SWITCH_WAIT_MS;
  for (;;) {
    try {
      db.pragma('journal_mode = WAL');
      return;
    } catch (err) {
      if (!String((err as { code?: string }).code).startsWith('SQLITE_BUSY') || Date.now() > deadline)
        throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
    }
  }
}

/**
 * kysely prepares every query anew, and the search thread is handed SQL text: the same text reuses its
 * compiled statement instead.
 */
export function withStatementCache(conn: BetterSqlite3.Database): BetterSqlite3.Database {
  const cache = new Map<string, BetterSqlite3.Statement>();
  const prepare = conn.prepare.bind(conn);
  conn.prepare = ((source: string) => {
    let statement = cache.get(source);
    if (!statement) {
      statement = prepare(source);
      // Query shapes are few; a flood of distinct texts (IN lists of every length) just starts over.
      if (cache.size >= 1000) cache.clear();
      cache.set(source, statement);
    }
    return statement;
  }) as typeof conn.prepare;
  return conn;
}

/** A connection that only reads `file`, which must exist, waiting up to 10 s for another's lock. */
export function openQueryOnly(file: string): BetterSqlite3.Database {
  const conn = new Sqlite(file, { fileMustExist: true });
  withSmallCache(conn);
  conn.pragma('query_only = ON');
  conn.pragma('busy_timeout = 10000');
  return conn;
}
