// The database factory: embedded SQLite under DATA_DIR by default, PostgreSQL when DATABASE_URL is set.
// Services read through `store.db` and write through `store.write`, which is one transaction per call on
// PostgreSQL and a shared group commit on SQLite.
import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type BetterSqlite3 from 'better-sqlite3';
import { Sqlite, useWal, withSmallCache, withStatementCache } from './sqlite-driver.js';
import { Kysely, PostgresDialect, SqliteDialect, sql } from 'kysely';
import type { ClientBase, Client as PgClient, PoolClient } from 'pg';
import { loadPg } from '../optional-packages.js';
import { InterruptiblePool } from './interruptible-pool.js';
import type { Database } from './schema.js';
import { type DialectName, isExtensionUnavailable, isLockTimeout, isRetryableConflict } from './dialect.js';
import { type AppendRows, Appender } from './appender.js';
import { GroupCommit, sqliteImmediateTransaction } from './group-commit.js';
import { WalSync } from './wal-sync.js';
import { allowSnapshotConnections } from './snapshot.js';
import { nameStatementsOn } from './named-statements.js';
import {
  MIGRATION_LOCK_TIMEOUT_MS,
  type MigrationRun,
  isMigrationLockWait,
  migrateToLatest,
  newerReleaseNote,
} from './migrations.js';
import { foldCountShards } from './counts.js';
import { foldAddressChunks } from './address-chunks-postgres.js';
import { gatherReads } from './sqlite-reads.js';
import { startCheckpointer } from './checkpointer.js';
import { SearchIndexer } from './search-index.js';
import { SEARCH_FILE, attachSearchFile, openSearchFile } from './search-file.js';
import { type IndexingThread, lendReaderBeside, startSearchIndexer } from './search-indexer.js';
import { type KeyChanges, fileKeyChanges, postgresKeyChanges } from './key-changes.js';

export type Executor = Kysely<Database>;

export interface Migrated {
  /** The migrations applied, by name, in order. */
  applied: string[];
  /** Lines for the operator: work the start could not do, and what follows from it (trigramIndexNote). */
  warnings: string[];
}

export interface Store {
  readonly dialect: DialectName;
  /** For reads; on SQLite a separate connection, so reads never wait behind a write batch. */
  readonly db: Executor;
  /**
   * Reads that must agree with one another (an email with its recipients and events), from one snapshot.
   * fn must ask for them all at once (Promise.all): on SQLite, reads asked for together share one read
   * transaction (sqlite-reads.ts); on PostgreSQL fn runs in one REPEATABLE READ, READ ONLY transaction.
   */
  snapshot<T>(fn: (db: Executor) => Promise<T>): Promise<T>;
  /** Runs fn in a transaction; resolves only when the transaction is durably committed. */
  write<T>(fn: (trx: Executor) => Promise<T>): Promise<T>;
  /**
   * Like write, but fn may share its transaction (in its own savepoint) with other batched writes that
   * arrive meanwhile: fewer commits for many small writes that need not run alone (delivery results).
   * fn changes few existing rows (WriteOptions.small): a bulk update or delete belongs in write.
   */
  batch<T>(fn: (trx: Executor) => Promise<T>): Promise<T>;
  /**
   * Inserts new rows (tables in the order given) durably; rows appended concurrently by other callers
   * share multi-row statements and one commit. For writes that only add rows (accepting an email).
   */
  append(rows: readonly AppendRows<Database>[]): Promise<void>;
  /**
   * Runs fn, unless another process of this store is running fn under the same name: then undefined, at
   * once. On PostgreSQL by an advisory lock, held on a connection of its own while fn runs and let go with
   * it, or when the process holding it dies or stops answering (aloneOnPostgres); fn asks `held()` now and
   * then whether it still has the lock (it keeps it, too), and stops when not. On SQLite fn just runs (the
   * processes of one data directory are a few at most).
   */
  alone<T>(name: string, fn: (held: () => Promise<boolean>) => Promise<T>): Promise<T | undefined>;
  /** Word between the processes of this store that API keys changed (key-changes.ts). */
  readonly keyChanges: KeyChanges;
  /** Brings the schema up to date: the migrations it applied, and what went less well than it should. */
  migrate(): Promise<Migrated>;
  ping(): Promise<void>;
  /**
   * Ends the statements stuck in progress, for a shutdown whose grace ran out: on PostgreSQL what the
   * connections checked out for a tenth of a second or more are running is cancelled, so that what it was
   * writing is rolled back instead of committing later, after its request was cut unanswered; each caller
   * gets a store-unavailable error (interruptible-pool.ts). Resolves to how many connections were checked
   * out. SQLite: 0, nothing to end; its statements run to their end on the event loop.
   */
  interrupt(): Promise<number>;
  close(): Promise<void>;
}

export interface StoreOptions {
  databaseUrl?: string | undefined;
  dataDir: string;
  poolSize?: number;
  sqliteSynchronous?: 'FULL' | 'NORMAL';
  /** Told when work the store does on its own (SQLite's search index, WAL checkpoints) starts failing. */
  onBackgroundError?: (err: unknown, what: string) => void;
  /**
   * SQLite: WAL checkpoints on a thread of their own (checkpointer.ts), for processes that keep the store
   * open. Default true; a one-shot CLI command does without.
   */
  backgroundCheckpoints?: boolean;
  /**
   * SQLite: the search index kept up to date by a thread of its own (search-index.ts), for processes that
   * keep the store open. Default true; a one-shot CLI command leaves it to the next server.
   */
  backgroundSearchIndex?: boolean;
  /**
   * PostgreSQL: what migrating leaves for later (dropping the trigram index of before 0016) done in the
   * background, for processes that keep the store open. Default true; a one-shot CLI command leaves it to
   * the next server or worker.
   */
  backgroundMigrationWork?: boolean;
  /**
   * PostgreSQL: how long the pool waits for an answer to a query (default 15 s); the server stops the
   * statement a moment before (statement_timeout). Shorter in tests.
   */
  queryTimeoutMs?: number;
}

export function createStore(options: StoreOptions): Store {
  return options.databaseUrl
    ? createPostgresStore(
        options.databaseUrl,
        options.poolSize ?? 10,
        options.queryTimeoutMs ?? 15_000,
        options.backgroundMigrationWork !== false,
        options.onBackgroundError,
      )
    : createSqliteStore(options);
}

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

/**
 * mkdir -p, one level at a time. Node's `recursive` option loops for ever, a core busy, where mkdir says
 * ENOENT although the parent exists (`/proc/x`): it takes that as "make the parent first", again and again.
 */
function makeDirectory(dir: string): void {
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

/** The SQLite database file of a DATA_DIR. */
export function sqliteFile(dataDir: string): string {
  return path.join(dataDir, 'mailroom.sqlite');
}

function createSqliteStore(options: StoreOptions): Store {
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
  // Email substring search reads an index file of its own, which a thread keeps (search-index.ts).
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
      return { applied, warnings: newer.length > 0 ? [newerReleaseNote(newer)] : [] };
    },
    async ping() {
      // A store fenced by a failed WAL sync is unavailable until restarted: /health says so.
      walSync?.check();
      await sql`select 1`.execute(this.db);
    },
    // Statements run on the event loop, to the end: none is left waiting when the grace runs out.
    interrupt: () => Promise.resolve(0),
    async close() {
      clearInterval(optimizer);
      await keyChanges.close();
      await searchIndexer?.close();
      await appender.idle();
      await group.idle();
      await checkpointer?.close();
      await reader?.destroy();
      await writer.destroy();
      walSync?.close();
    },
  };
  return store;
}

/**
 * Runs a PostgreSQL write again when it lost a deadlock or a serialization conflict: writers that lock the
 * same rows in different orders (a contact and its tags, say) back off a little and run again.
 */
async function retryingConflicts<T>(write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (attempt >= 5 || !isRetryableConflict(err)) throw err;
      await new Promise((r) => setTimeout(r, attempt * 10 + Math.random() * 20));
    }
  }
}

const FOLD_EVERY_MS = 60_000;

/** How often each process merges the rows the contacts' writes add to the address chunks (0012). */
const FOLD_CHUNKS_EVERY_MS = 5_000;

/** Migrations that could not get a lock another transaction held: the database's state, not a setting. */
export class MigrationWaitError extends Error {}

/** Runs of the migrations tried when one waited too long for a lock, MIGRATION_RETRY_MS apart. */
const MIGRATION_TRIES = 6;
const MIGRATION_RETRY_MS = 2_000;

/**
 * A connection of Mailroom's own for long statements (migrations, index builds): without the pool's
 * statement timeout (14 s) or the role's, and with the server checking every second that its client is
 * still there, so that a statement of a process that was killed stops waiting for its lock (and holding
 * up every other process's writes in the lock's queue) instead of waiting until it got it.
 */
function setUpLongStatements(client: ClientBase): Promise<unknown> {
  // One query: queued ahead of any caller's, as the pool's own settings are (two at once on a client is
  // what pg deprecates). client_connection_check_interval is PostgreSQL 14's (README: 14 or later).
  return client.query("set statement_timeout = 0; set client_connection_check_interval = '1s'");
}

/**
 * The migrations, on a connection of their own (setUpLongStatements): 0016's copy took 3.6 s at a million
 * contacts on a fast day, and these machines run up to five times slower; a process started beside a
 * migrating one waits for kysely's advisory lock (up to an hour, kysely's lock_timeout) instead of failing
 * after 14 s with an error that blamed DATABASE_URL. A statement waiting over MIGRATION_LOCK_TIMEOUT_MS
 * for a lock (a transaction left open on a table it changes) fails the run, which is tried again a few
 * times, and then fails the start saying so.
 */
async function migratePostgres(databaseUrl: string): Promise<MigrationRun> {
  const pool = new (loadPg().Pool)({ connectionString: databaseUrl, max: 1, connectionTimeoutMillis: 5_000 });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
    void setUpLongStatements(client).catch(() => undefined);
  });
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool }) });
  try {
    for (let attempt = 1; ; attempt++) {
      try {
        return await migrateToLatest(db, 'postgres');
      } catch (err) {
        if (!isMigrationLockWait(err)) throw err;
        if (attempt >= MIGRATION_TRIES) {
          throw new MigrationWaitError(
            `a migration waited over ${MIGRATION_LOCK_TIMEOUT_MS / 1000} s for a lock, ${MIGRATION_TRIES} tries ${MIGRATION_RETRY_MS / 1000} s apart: another transaction keeps a table it changes locked (pg_stat_activity shows it); start again once that has ended`,
            { cause: err },
          );
        }
        await new Promise((r) => setTimeout(r, MIGRATION_RETRY_MS));
      }
    }
  } finally {
    await db.destroy();
  }
}

/** The advisory lock that serialises creating the pg_trgm extension and index (any fixed number). */
const TRGM_LOCK = 0x6d72_7467; // 'mrtg'
/** How long the trigram index's build waits for open writes of contact_addresses, each try. */
const TRGM_BUILD_LOCK_TIMEOUT = '5s';
/** How long dropping the old index waits for the transactions that use contacts. */
const TRGM_DROP_LOCK_TIMEOUT = '30s';
/** How long after a drop that gave up it is tried again. */
const TRGM_DROP_RETRY_MS = 10 * 60_000;

/** Why the trigram index is not there after a start: a warning of the migrations (Migrated). */
export function trigramIndexNote(err: unknown): string {
  if (isExtensionUnavailable(err)) return 'pg_trgm unavailable: email substring search scans';
  const why = err instanceof Error ? err.message : String(err);
  return `trigram index not built: ${why}; tried again at the next start, email substring search scans meanwhile`;
}

async function connectLong(databaseUrl: string): Promise<PgClient> {
  const client = new (loadPg().Client)({ connectionString: databaseUrl, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    await setUpLongStatements(client);
  } catch (err) {
    await client.end().catch(() => undefined);
    throw err;
  }
  return client;
}

/** Where the trigram index is: built (on contact_addresses), and the old one (on contacts) still there. */
async function trigramState(client: PgClient): Promise<{ built: boolean; old: boolean }> {
  const { rows } = await client.query<{ built: boolean; old: boolean }>(
    "select to_regclass('contact_addresses_trgm') is not null as built, to_regclass('contacts_email_trgm') is not null as old",
  );
  return rows[0]!;
}

/**
 * The pg_trgm extension and the trigram index of email search, created if missing; whether the index of
 * before 0016, on contacts, is still to be dropped (dropOldTrigramIndex). One Mailroom process at a time:
 * two running `if not exists` together can both decide to create, and the loser's unique violation looked
 * exactly like a role that may not create the extension. On a connection of its own
 * (setUpLongStatements): the index over a million addresses took 2.9 s to build on a fast day, and these
 * machines run up to five times slower. The build waits TRGM_BUILD_LOCK_TIMEOUT for open writes of
 * contact_addresses (every contact write queues behind it meanwhile), then fails, for the next start.
 */
async function createTrigramIndex(databaseUrl: string): Promise<{ old: boolean }> {
  const client = await connectLong(databaseUrl);
  try {
    // Looked up before anything is locked: `create index if not exists` takes its SHARE lock on the table
    // before it finds the index there, so every start and CLI command waited behind any open write of
    // contacts, and every contact write of every process then queued behind it.
    const first = await trigramState(client);
    if (first.built) return first;
    // Held until the connection ends. Another process building it (or dropping the old one) is let be:
    // waiting for it in turn made starts beside one open write of the addresses wait 5 s each, one
    // after another, with contact writes queued behind each.
    const { rows } = await client.query<{ mine: boolean }>('select pg_try_advisory_lock($1) as mine', [
      TRGM_LOCK,
    ]);
    // Its old index is then dropped by a long-running process, once that one has it built.
    if (!rows[0]?.mine) return { old: first.old };
    const now = await trigramState(client);
    if (now.built) return now;
    await client.query(`set lock_timeout = '${TRGM_BUILD_LOCK_TIMEOUT}'`);
    await client.query('begin');
    await client.query('create extension if not exists pg_trgm');
    await client.query(
      'create index if not exists contact_addresses_trgm on contact_addresses using gin (email_lower gin_trgm_ops)',
    );
    await client.query('commit');
    return now;
  } finally {
    // After a failure the transaction is rolled back as the connection closes, and the lock let go.
    await client.end();
  }
}

/**
 * Drops the index of before 0016, on contacts, concurrently, after the new one has committed: dropped in
 * the new one's transaction, it locked contacts after contact_addresses, the other order from a contact
 * write (contacts, then its address through 0016's triggers), and under writes they always deadlocked (the
 * new index was never built). In the background of a long-running process, one process at a time (it
 * waits for another building the new index or dropping this one, then finds what is left to do). The drop
 * waits for every transaction that uses contacts, holding up no read or write, for up to
 * TRGM_DROP_LOCK_TIMEOUT; then it gives up, leaving the index invalid but still kept up by contact writes,
 * and is tried again TRGM_DROP_RETRY_MS later. `stop` ends it (a drop cut off is finished later).
 */
function dropOldTrigramIndex(
  databaseUrl: string,
  onError: (err: unknown) => void,
): { done: Promise<void>; stop: () => void } {
  let client: PgClient | undefined;
  const stopping = new AbortController();
  /** One try; true when nothing is left to do. */
  const attempt = async (): Promise<boolean> => {
    const c = (client = await connectLong(databaseUrl));
    try {
      if (stopping.signal.aborted) return true;
      await c.query('select pg_advisory_lock($1)', [TRGM_LOCK]);
      const { built, old } = await trigramState(c);
      // Not built: its build failed, and the next start that builds it drops this one.
      if (!built || !old) return true;
      await c.query(`set lock_timeout = '${TRGM_DROP_LOCK_TIMEOUT}'`);
      await c.query('drop index concurrently if exists contacts_email_trgm');
      return true;
    } finally {
      client = undefined;
      await c.end().catch(() => undefined);
    }
  };
  const done = (async () => {
    while (!stopping.signal.aborted) {
      try {
        if (await attempt()) return;
      } catch (err) {
        if (stopping.signal.aborted) return;
        onError(err);
      }
      // Cut short by stop (an AbortError, not a failure).
      const retry = { signal: stopping.signal, ref: false };
      await sleep(TRGM_DROP_RETRY_MS, undefined, retry).catch(() => undefined);
    }
  })();
  return {
    done,
    stop: () => {
      stopping.abort();
      void client?.end().catch(() => undefined);
    },
  };
}

/**
 * How long the transaction that holds a Store.alone lock may sit without a statement before the server
 * ends it, and the lock with it: a holder frozen (SIGSTOP, a paused VM) or cut off lets others in after
 * this, not after the hours TCP takes to notice. A holder asks `held()` far more often than this.
 */
const ALONE_IDLE_S = 60;

/**
 * Store.alone on PostgreSQL: a transaction's advisory lock (pg_try_advisory_xact_lock), the transaction
 * left open while fn runs. It ends with the transaction, behind PgBouncer in transaction mode too, which
 * keeps a transaction on one server connection (a session's lock stays on whichever server connection ran
 * it, after the run). Idle between statements the transaction has no xid and no snapshot (READ
 * COMMITTED): it holds back no VACUUM, and holds only the lock. Its settings are SET LOCAL, so that none
 * of them stays on a server connection a pooler hands Mailroom's pool next. `pg_stat_activity` shows the
 * holder by its application_name, `mailroom: <name>`.
 */
async function aloneOnPostgres<T>(
  databaseUrl: string,
  queryTimeoutMs: number,
  name: string,
  fn: (held: () => Promise<boolean>) => Promise<T>,
): Promise<T | undefined> {
  const client = new (loadPg().Client)({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 5_000,
    // A server that stops answering fails the statement instead of holding the run (and its stop) forever.
    query_timeout: queryTimeoutMs,
    // And a host that vanished is noticed by TCP within a minute or so, not the system's two hours.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  });
  client.on('error', () => undefined);
  let ended = false;
  client.on('end', () => (ended = true));
  // A connection that failed leaves nothing open.
  await client.connect();
  try {
    await client.query('begin');
    const tag = `mailroom: ${name}`;
    // Literals only: SET takes no parameters.
    const label = tag.replace(/'/g, "''");
    await client.query(
      `set local idle_in_transaction_session_timeout = '${ALONE_IDLE_S}s'; set local application_name = '${label}'`,
    );
    const { rows } = await client.query<{ mine: boolean }>(
      'select pg_try_advisory_xact_lock(hashtext($1)) as mine',
      [tag],
    );
    if (!rows[0]!.mine) return undefined;
    return await fn(async () => {
      if (ended) return false;
      try {
        await client.query('select 1');
        return true;
      } catch {
        return false;
      }
    });
  } finally {
    await endWithin(client, queryTimeoutMs);
  }
}

/**
 * Rolls back and closes the client, or drops its socket if that takes longer than `ms` (a server that
 * stopped answering): pg's end() waits for the server to close the connection.
 */
async function endWithin(client: PgClient, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), ms)));
  const ending = (async () => {
    await client.query('rollback').catch(() => undefined);
    await client.end().catch(() => undefined);
    return false;
  })();
  if (await Promise.race([ending, late]))
    (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
  clearTimeout(timer);
}

/**
 * A client whose query got no answer within the pool's query_timeout (a server that stopped answering, a
 * statement that ignored its statement_timeout) still has that query running, inside whatever transaction
 * it was in: kysely's ROLLBACK would wait behind it and time out too, and the pool would hand the client to
 * the next caller, whose COMMIT then committed the stranger's half-done transaction (an idempotency key
 * without its email: a retry answered 200 for an email that never existed). Such a client is ended at
 * once: the server rolls its transaction back as the connection goes, and the pool drops the client.
 */
function endOnReadTimeout(client: PoolClient): void {
  const query = client.query as unknown as (...args: unknown[]) => unknown;
  (client as unknown as { query: typeof query }).query = function (this: PoolClient, ...args: unknown[]) {
    const result = query.apply(this, args);
    if (result instanceof Promise) {
      result.catch((err: unknown) => {
        if (err instanceof Error && err.message === 'Query read timeout')
          void client.end().catch(() => undefined);
      });
    }
    return result;
  };
}

/** `background`: a long-running process's store, which may do work of its own after migrating. */
function createPostgresStore(
  databaseUrl: string,
  poolSize: number,
  queryTimeoutMs: number,
  background: boolean,
  onBackgroundError: StoreOptions['onBackgroundError'],
): Store {
  let dropping: ReturnType<typeof dropOldTrigramIndex> | undefined;
  const pool = new (loadPg().Pool)({
    connectionString: databaseUrl,
    max: poolSize,
    connectionTimeoutMillis: 5_000,
    query_timeout: queryTimeoutMs,
  });
  // An idle client losing its connection (server restart) must not crash the process; the pool replaces it.
  pool.on('error', () => undefined);
  // The same for a client that is checked out (inside a transaction, between two queries) when its
  // backend is terminated: without a listener its 'error' event would crash the process. The query
  // that was waiting fails on its own, and the pool drops the broken client.
  pool.on('connect', (client) => {
    client.on('error', () => undefined);
    // Set as statements (queued ahead of any caller's), not as startup parameters: PgBouncer refuses those.
    // The server stops a statement before the pool gives up on it, so the error comes back on a connection
    // still in step, and kysely's ROLLBACK runs there.
    const statementMs = queryTimeoutMs - Math.min(1_000, Math.floor(queryTimeoutMs / 10));
    // A session left in a transaction without a statement for twice the pool's patience (30 s: a process
    // frozen mid-write, SIGSTOP, a paused VM) is ended by the server, so that the locks it holds (an idempotency key's claim)
    // do not stop every other process's writes until its connection dies. Mailroom's own transactions
    // never pause for anything but the database.
    const idleMs = 2 * queryTimeoutMs;
    void client
      .query(`set statement_timeout = ${statementMs}; set idle_in_transaction_session_timeout = ${idleMs}`)
      .catch(() => undefined);
    // First, so that named statements' own calls (a stale one run again unnamed) are watched too.
    endOnReadTimeout(client);
    nameStatementsOn(client);
  });
  const interruptible = new InterruptiblePool(pool, databaseUrl);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  // Counts that read one snapshot on several connections leave one of the pool for everything else.
  allowSnapshotConnections(db, poolSize - 1);
  const group = new GroupCommit<Database>((fn) => db.transaction().execute(fn));
  // A few batches at once: each waits on round trips and its commit, and the pool has room for reads.
  const appender = new Appender<Database>((fn) => db.transaction().execute(fn), {
    concurrency: Math.max(1, Math.floor(poolSize / 3)),
    direct: db,
    retrying: retryingConflicts,
  });
  // Counter rows pile up one per connection that wrote (0005); merge them now and then. A failed fold
  // (store down, not yet migrated) changes nothing and is tried again next time.
  const folding = setInterval(() => void foldCountShards(db).catch(() => undefined), FOLD_EVERY_MS);
  folding.unref();
  // The same for the address chunks, which pile up a row per statement: sooner, as a search reads them all.
  const foldingChunks = setInterval(
    () => void foldAddressChunks(db).catch(() => undefined),
    FOLD_CHUNKS_EVERY_MS,
  );
  foldingChunks.unref();
  const keyChanges = postgresKeyChanges(databaseUrl, async (channel) => {
    await sql`select pg_notify(${channel}, '')`.execute(db);
  });
  return {
    dialect: 'postgres',
    db,
    keyChanges,
    batch: (fn) => group.run(fn),
    append: (rows) => appender.append(rows),
    write: (fn) => retryingConflicts(() => db.transaction().execute(fn)),
    snapshot: (fn) =>
      db.transaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute(fn),
    alone: (name, fn) => aloneOnPostgres(databaseUrl, queryTimeoutMs, name, fn),
    async migrate() {
      const { applied, newer } = await migratePostgres(databaseUrl);
      // The trigram index (on 0016's narrow table of addresses) makes substring search on email fast; it
      // needs the pg_trgm extension, which a restricted role may not be allowed to create. Search still
      // works without it, only slower. Built by a server or worker, or by the command that applied
      // migrations; other one-shot commands leave it to them (a missing index made each wait for it). A
      // client other than Mailroom's (whose processes build it one at a time: TRGM_LOCK) creating the
      // extension at the same moment makes the first try fail: so a failure other than a lock wait is
      // tried once more.
      const warnings = newer.length > 0 ? [newerReleaseNote(newer)] : [];
      if (!background && applied.length === 0) return { applied, warnings };
      const trigramIndex = () => createTrigramIndex(databaseUrl);
      try {
        const { old } = await trigramIndex().catch((err: unknown) => {
          if (isLockTimeout(err)) throw err;
          return trigramIndex();
        });
        if (old && background) {
          dropping ??= dropOldTrigramIndex(databaseUrl, (err) =>
            onBackgroundError?.(err, 'dropping the trigram index of before migration 0016'),
          );
        }
      } catch (err) {
        warnings.push(trigramIndexNote(err));
      }
      return { applied, warnings };
    },
    async ping() {
      await sql`select 1`.execute(db);
    },
    interrupt: () => interruptible.interrupt(),
    async close() {
      clearInterval(folding);
      clearInterval(foldingChunks);
      dropping?.stop();
      await dropping?.done;
      await keyChanges.close();
      await appender.idle();
      await group.idle();
      await db.destroy();
    },
  };
}
