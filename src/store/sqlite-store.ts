// Store on SQLite (store.ts): the database file under DATA_DIR, a writer whose commits are shared (group
// commit), a separate reader, and the threads that checkpoint the WAL and keep the search index.
import { closeSync, openSync } from 'node:fs';
import path from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { Sqlite, useWal, withSmallCache, withStatementCache } from './sqlite-driver.js';
import { Kysely, SqliteDialect, sql } from './kysely.js';
import type { Database } from './schema.js';
import { Appender } from './appender.js';
import { GroupCommit, sqliteImmediateTransaction } from './group-commit.js';
import { WalSync } from './wal-sync.js';
import { migrateToLatest, migrationNames, newerReleaseNote } from './migrations.js';
import { gatherReads } from './sqlite-reads.js';
import { startCheckpointer } from './checkpointer.js';
import { SearchIndexer } from '../search/search-index.js';
import { SEARCH_FILE, attachSearchFile, openSearchFile } from '../search/search-file.js';
import { type IndexingThread, lendReaderBeside, startSearchIndexer } from '../search/search-indexer.js';
import { fileKeyChanges } from './key-changes.js';
import { startLongReads } from './long-reads.js';
import type { Store, StoreOptions } from './store.js';
import { makeDirectory } from '../make-directory.js';

function openSqlite(file: string, synchronous: string, readonly: boolean): BetterSqlite3.Database {
  const conn = new Sqlite(file);
  useWal(conn);
  conn.pragma(`synchronous = ${synchronous}`);
  conn.pragma('busy_timeout = 10000');
  conn.pragma('foreign_keys = ON');
  if (readonly) {
    conn.pragma('query_only = ON');
    withSmallCache(conn);
  }
  return withStatementCache(conn);
}

/** The SQLite database file of a DATA_DIR. */
/** Said by whatever upgraded an existing SQLite store: migrate, or a process that migrated it at start. */
const UPGRADED_NOTE =
  'restart every server and worker on this DATA_DIR: one of an earlier release still running does not know the new schema';

export function sqliteFile(dataDir: string): string {
  return path.join(dataDir, 'mailroom.sqlite');
}

export function createSqliteStore(options: StoreOptions): Store {
  // Contacts and email bodies are for this user only: a new DATA_DIR is 0700 and a new database file
  // 0600 (SQLite gives its -wal and -shm files the database file's mode). Existing ones are left as set.
  makeDirectory(options.dataDir);
  const file = sqliteFile(options.dataDir);
  closeSync(openSync(file, 'a', 0o600));
  const synchronous = options.sqliteSynchronous ?? 'FULL';
  // FULL's sync of each commit is made off the event loop (wal-sync.ts): the writer itself commits NORMAL.
  const walSync = synchronous === 'FULL' ? new WalSync(`${file}-wal`) : undefined;
  const writerConn = openSqlite(file, walSync ? 'NORMAL' : synchronous, false);
  const writer = new Kysely<Database>({ dialect: new SqliteDialect({ database: writerConn }) });
  const checkpointer =
    options.backgroundCheckpoints === false
      ? undefined
      : startCheckpointer(writerConn, {
          synchronous,
          onError: (err) => options.onBackgroundError?.(err, 'checkpointing the WAL in the background'),
        });
  let reader: Kysely<Database> | undefined;
  const group = new GroupCommit(sqliteImmediateTransaction(writer, walSync));
  // Appends ride in the group commit too: SQLite has one writer, and its commit is shared anyway.
  const appender = new Appender<Database>((fn) => group.run(fn, { small: true }));
  // The query planner needs table statistics to prefer a primary-key probe over walking an
  // organisation's index; `optimize` refreshes them where tables grew, cheaply (analysis_limit).
  const optimize = () => group.run((trx) => sql`pragma optimize`.execute(trx)).catch(() => undefined);
  const optimizer = setInterval(() => void optimize(), 30 * 60_000);
  optimizer.unref();
  // Email substring search reads an index file of its own, which a thread keeps (search/search-index.ts).
  const searchFile = path.join(options.dataDir, SEARCH_FILE);
  openSearchFile(searchFile).close();
  // Started by migrate(), once the index file is known to be this database's (SearchIndexer.verify).
  let searchIndexer: IndexingThread | undefined;
  const startIndexing = () =>
    startSearchIndexer({
      databaseFile: file,
      indexFile: searchFile,
      prune: (fn) => group.run(fn, { small: true }),
      onError: (err, what) => options.onBackgroundError?.(err, what),
      alive: () => writerConn.open,
    });
  const keyChanges = fileKeyChanges(options.dataDir);
  const longReads = startLongReads({
    data: { databaseFile: file, indexFile: searchFile },
    fallback: () => store.db,
    onError: (err) => options.onBackgroundError?.(err, 'running long reads beside the event loop'),
    alive: () => writerConn.open,
  });
  // A long read shares a pass over the address chunks with the search thread, as the reader does.
  lendReaderBeside(longReads.db, () => searchIndexer);
  const store: Store = {
    dialect: 'sqlite',
    keyChanges,
    get db() {
      // Opened lazily: the reader must not create the file before the writer has set WAL mode.
      if (!reader) {
        const conn = openSqlite(file, synchronous, true);
        attachSearchFile(conn, searchFile);
        reader = new Kysely<Database>({ dialect: new SqliteDialect({ database: conn }) });
        gatherReads(reader, conn);
        lendReaderBeside(reader, () => searchIndexer);
      }
      return reader;
    },
    longReads: longReads.db,
    longReadsIdle: () => longReads.idle,
    snapshot(fn) {
      return fn(this.db);
    },
    write: (fn) => group.run(fn),
    // The worker's claims, leases and results: as many rows as it has emails in hand.
    batch: (fn) => group.run(fn, { small: true }),
    alone: (_name, fn) => fn(() => Promise.resolve(true)),
    append: (rows) => appender.append(rows),
    async migrate() {
      const { applied, newer } = await migrateToLatest(writer as Kysely<unknown>, 'sqlite');
      // Before any write: once new keys were issued, a database restored from a backup could pass for
      // the later state the index file was built for.
      const verifier = new SearchIndexer(file, searchFile);
      try {
        verifier.verify();
      } finally {
        verifier.close();
      }
      if (options.backgroundSearchIndex !== false) searchIndexer ??= startIndexing();
      await sql`pragma analysis_limit = 1000`.execute(writer);
      await group.run((trx) => sql`pragma optimize = 0x10002`.execute(trx));
      const warnings = newer.length > 0 ? [newerReleaseNote(newer)] : [];
      // An existing store upgraded (not a new one): a process of the earlier release still on it would go
      // on with a schema it does not know (its email searches fail), with nothing said.
      if (applied.length > 0 && applied[0] !== migrationNames()[0]) warnings.push(UPGRADED_NOTE);
      return { applied, warnings };
    },
    async ping() {
      // A store fenced by a failed WAL sync is unavailable until restarted: /health says so.
      walSync?.check();
      await sql`select 1`.execute(this.db);
    },
    // Statements run on the event loop, to the end: none is left waiting when the grace runs out, but for
    // long reads on their thread (long-reads.ts).
    interrupt: () => Promise.resolve(longReads.interrupt()),
    async close() {
      clearInterval(optimizer);
      await keyChanges.close();
      await searchIndexer?.close();
      await appender.idle();
      await group.idle();
      await checkpointer?.close();
      await longReads.close();
      await reader?.destroy();
      await writer.destroy();
      walSync?.close();
    },
  };
  return store;
}
