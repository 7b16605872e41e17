// The search index file (DATA_DIR/mailroom-search.sqlite): its layout, and opening, removing and attaching
// it. It holds the trigram index of contacts' emails (FTS5) and the address chunks (address-chunks.ts),
// kept by a thread of the store (search-index.ts, search-thread.ts) with connections of its own: its
// writes and FTS5's segment merges never hold the database's write lock or the event loop. The file is
// derived data: deleted, unreadable, or built for another database (a copy, a restore), it is built again
// from the contacts, and searches stay exact meanwhile.
import { closeSync, openSync, rmSync } from 'node:fs';
import type BetterSqlite3 from 'better-sqlite3';
import { Sqlite, useWal, withSmallCache } from '../store/sqlite-driver.js';
import { CHUNK_SCHEMA } from './address-chunks.js';
import { registerChunkFunctions } from './chunk-functions.js';

/** The index file's name, in DATA_DIR beside mailroom.sqlite. */
export const SEARCH_FILE = 'mailroom-search.sqlite';

/** The index file's layout; a file of another one (an earlier build's) is emptied and laid out anew. */
const SCHEMA_VERSION = 2;

const SCHEMA = `
  drop table if exists search_state;
  drop table if exists contacts_search;
  create table search_state (
    id integer primary key check (id = 1),
    -- contacts_search_state.source of the database this index is of; '' for none yet
    source text not null,
    indexed_to integer not null,
    -- the contacts_search_retired ids this index has taken out, up to here
    retired_seen integer not null,
    -- the highest key and contacts_search_retired id the database had issued when last read: a database
    -- that has issued less went back to an earlier copy (a restore), and this index is of a later state
    issued_key integer not null,
    issued_retired integer not null);
  insert into search_state (id, source, indexed_to, retired_seen, issued_key, issued_retired)
    values (1, '', 0, 0, 0, 0);
  -- case_sensitive 1: both sides are lowercased by the service already, so a match is exactly
  -- instr(email_lower, term) > 0; contentless_delete lets a key be taken out without its text.
  create virtual table contacts_search using fts5(email_lower,
    tokenize = 'trigram case_sensitive 1', content = '', contentless_delete = 1);
  ${CHUNK_SCHEMA}`;

function openIndexFile(file: string): BetterSqlite3.Database {
  // Contacts' addresses: for this user only, as the database is (store/sqlite-store.ts).
  closeSync(openSync(file, 'a', 0o600));
  const db = new Sqlite(file);
  try {
    // Written by the search thread alone, off the event loop, and a larger cache builds it no faster.
    withSmallCache(db);
    db.pragma('busy_timeout = 10000');
    useWal(db);
    // FULL, as the database: the store deletes retired keys from the database once a commit here says
    // they are out of the index, so that commit must not be lost. Its fsyncs are the thread's, not the
    // event loop's.
    db.pragma('synchronous = FULL');
    // Written only when the layout is missing or old: opening a current file takes no lock.
    if (db.pragma('user_version', { simple: true }) !== SCHEMA_VERSION) {
      db.transaction(() => {
        if (db.pragma('user_version', { simple: true }) === SCHEMA_VERSION) return;
        db.exec(SCHEMA);
        db.pragma(`user_version = ${SCHEMA_VERSION}`);
      }).immediate();
    }
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/** Whether SQLite says the file is not a database, or a damaged one (SQLITE_CORRUPT_VTAB and the like). */
export function isUnreadable(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && (code === 'SQLITE_NOTADB' || code.startsWith('SQLITE_CORRUPT'));
}

/**
 * Opens the index file, creating it if need be, or anew if what is there is not a readable database:
 * nothing in it is lost that the contacts do not hold. Any other failure (busy, disk full, permissions)
 * is thrown, and the file left alone.
 */
export function openSearchFile(file: string): BetterSqlite3.Database {
  try {
    return openIndexFile(file);
  } catch (err) {
    if (!isUnreadable(err)) throw err;
    removeSearchFile(file);
    return openIndexFile(file);
  }
}

/** Deletes the index file with its WAL files; the next open lays it out anew, and it is built again. */
export function removeSearchFile(file: string): void {
  for (const suffix of ['', '-wal', '-shm']) rmSync(file + suffix, { force: true });
}

/**
 * Makes the index readable on `conn` (the store's reader) as `search.contacts_search`. Never on the writer:
 * its BEGIN IMMEDIATE would take the index file's write lock too, and wait for the thread.
 *
 * A statement reading both files takes the database's snapshot first, then the index file's. An index
 * newer than the database is safe but for one case: a key retired after the first and taken out of the
 * index before the second. On the event loop that cannot happen (the statement runs synchronously, and
 * the store's writer commits on the same thread); on the long-read thread (store/long-reads.ts), or with
 * another process writing contacts on the same DATA_DIR, a commit and the search thread's read, delete
 * and commit would all have to fall in the microseconds between the two.
 */
export function attachSearchFile(conn: BetterSqlite3.Database, file: string): void {
  conn.prepare('attach database ? as search').run(file);
  withSmallCache(conn, 'search');
  registerChunkFunctions(conn);
}

/**
 * Lays the index file out anew, empty, over damaged pages; the indexer's next steps build it again from
 * the contacts. Throws if even that fails: then only deleting the file (and starting again) helps.
 */
export function layOutAnew(db: BetterSqlite3.Database): void {
  db.transaction(() => db.exec(SCHEMA)).immediate();
}
