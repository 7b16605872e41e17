// The database factory: embedded SQLite under DATA_DIR by default, PostgreSQL when DATABASE_URL is set.
// Services read through `store.db` and write through `store.write`, which is one transaction per call on
// PostgreSQL and a shared group commit on SQLite.
import type { Kysely } from 'kysely';
import type { Database } from './schema.js';
import type { DialectName } from './dialect.js';
import type { AppendRows } from './appender.js';
import type { KeyChanges } from './key-changes.js';
import { createSqliteStore } from './sqlite-store.js';
import { createPostgresStore } from './postgres-store.js';

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
  /**
   * For a read that may take long (a walk of a tag's contacts, a deep page): on SQLite, run on a thread of
   * its own, one such read after another, while the event loop serves the rest (long-reads.ts); on
   * PostgreSQL, `db` (a pooled connection waits, not the event loop).
   */
  readonly longReads: Executor;
  /**
   * Whether a long read asked now would begin at once (SQLite: the thread has none in hand; PostgreSQL:
   * always). A read that is long only sometimes may ask this, rather than wait behind others' walks.
   */
  longReadsIdle(): boolean;
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
   * Runs fn, unless another process of this store is running fn under the same name: then undefined, at once.
   * On PostgreSQL by an advisory lock on a connection of its own, let go when fn ends or its holder dies or
   * stops answering (aloneOnPostgres); fn asks `held()` now and then whether it still has the lock (which
   * keeps it too), and stops when not. On SQLite fn just runs (a data directory has a few processes at most).
   */
  alone<T>(name: string, fn: (held: () => Promise<boolean>) => Promise<T>): Promise<T | undefined>;
  /** Word between the processes of this store that API keys changed (key-changes.ts). */
  readonly keyChanges: KeyChanges;
  /** Brings the schema up to date: the migrations it applied, and what went less well than it should. */
  migrate(): Promise<Migrated>;
  ping(): Promise<void>;
  /**
   * Ends the statements stuck in progress, for a shutdown whose grace ran out. PostgreSQL: what connections
   * checked out for a tenth of a second or more are running is cancelled, so that it rolls back rather than
   * commits after its request was cut unanswered; each caller gets a store-unavailable error
   * (interruptible-pool.ts). Resolves to how many connections were checked out. SQLite: its statements run
   * to their end on the event loop, but for the long reads not answered yet, which fail as a store
   * unavailable (long-reads.ts); resolves to how many.
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
   * SQLite: the search index kept up to date by a thread of its own (search/search-index.ts), for processes
   * that keep the store open. Default true; a one-shot CLI command leaves it to the next server.
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
