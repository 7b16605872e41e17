// Reads that may take long, off the event loop (SQLite). Every statement of the store runs on the event loop,
// which is the fastest way for the many that take microseconds; but one that walks 100,000 contacts (a tag
// with an email term many hold, at a million contacts: 0.25 s) stopped every other request for as long.
// The caller that expects such a read asks it of `db` here: a Kysely whose statements run on the long-read
// thread (long-read-thread.ts), one after another, on a reader of the same files. Each still starts after
// its request arrived, so it sees every write committed before. While the thread is not running (between a
// failure and its restart), or stops with reads in hand, they run on the store's reader as before.
import type { CompiledQuery, DatabaseConnection, Driver, QueryResult } from 'kysely';
import { Kysely, SqliteAdapter, SqliteIntrospector, SqliteQueryCompiler } from './kysely.js';
import { type BackgroundThread, startBackgroundThread } from './background-thread.js';
import type { Database } from './schema.js';
import type { Executor } from './store.js';
import type { LongReadReport, LongReadRequest, LongReadThreadData } from './long-read-thread.js';

/**
 * A read expected to hold the event loop this long (µs) or more is a long one, for the long-read thread.
 * The hop there and back costs about 0.1–0.2 ms a statement (a page with its count takes a few), so
 * shorter reads cost less where they are.
 */
export const LONG_READ_US = 2_000;
/** What a read costs a row, by how it reaches it (µs; 2 cores at a million contacts, 2026-12-03). */
export const READ_COST_US = {
  /** An index entry passed (a deep page's offset, a walk of the created_at index): 0.08–0.14. */
  entry: 0.12,
  /** A row looked up by its id, as from a tag's index: 2–5. */
  lookup: 3,
};

/** Whether a page that skips `offset` index entries before its rows is a long read. */
export function deepOffset(offset: number): boolean {
  return offset * READ_COST_US.entry >= LONG_READ_US;
}

export interface LongReads {
  /** Runs each statement on the long-read thread. Reads only: no transactions. */
  readonly db: Executor;
  /**
   * Fails every read not answered yet as the store being unavailable (a shutdown whose grace ran out: their
   * requests answer 503 at once); the thread skips those it has not begun, and the one it is running goes
   * on to its end, unheard. How many there were.
   */
  interrupt(): number;
  /** Whether no read is in hand: one asked now begins at once. */
  readonly idle: boolean;
  close(): Promise<void>;
}

interface Pending {
  query: CompiledQuery;
  resolve: (result: QueryResult<unknown>) => void;
  reject: (err: unknown) => void;
}

/** A long read cut short: the store is unavailable to it (a 503), as a PostgreSQL statement cancelled. */
function interrupted(): Error {
  return Object.assign(new Error('the read was cut short: the server is shutting down'), {
    code: 'SQLITE_INTERRUPT',
  });
}

export function startLongReads(options: {
  data: Omit<LongReadThreadData, 'generation'>;
  /** The store's own reader: where reads run while the thread does not. */
  fallback: () => Executor;
  onError?: (err: unknown) => void;
  /** Whether a new thread may still start (the store is open). */
  alive?: () => boolean;
}): LongReads {
  const pending = new Map<number, Pending>();
  let next = 0;
  let closed = false;
  /** Bumped by each interrupt: the thread skips reads sent before (long-read-thread.ts). */
  const generation = new Int32Array(new SharedArrayBuffer(4));
  /** Started at the first long read: most processes never make one. */
  let thread: BackgroundThread | undefined;
  const runHere = (query: CompiledQuery) => options.fallback().executeQuery(query);

  const onReport = (report: LongReadReport): void => {
    const read = pending.get(report.id);
    if (!read) return;
    pending.delete(report.id);
    if ('rows' in report) read.resolve({ rows: report.rows });
    else read.reject(Object.assign(new Error(report.error.message), { code: report.error.code }));
  };
  // The reads a stopped thread had in hand are run here: a read's answer does not depend on where it ran.
  const runOrphansHere = (): Promise<unknown> => {
    const orphans = [...pending.values()];
    pending.clear();
    return Promise.allSettled(orphans.map((read) => runHere(read.query).then(read.resolve, read.reject)));
  };
  const onStop = (err: unknown): void => {
    options.onError?.(err);
    void runOrphansHere();
  };

  const execute = (query: CompiledQuery): Promise<QueryResult<unknown>> => {
    if (closed) return runHere(query);
    thread ??= startBackgroundThread<LongReadReport>({
      base: import.meta.url,
      module: 'long-read-thread',
      data: { ...options.data, generation: generation.buffer } satisfies LongReadThreadData,
      onReport,
      onStop,
      ...(options.alive ? { alive: options.alive } : {}),
    });
    const id = ++next;
    const request: LongReadRequest = {
      id,
      generation: Atomics.load(generation, 0),
      sql: query.sql,
      parameters: [...query.parameters],
    };
    return new Promise((resolve, reject) => {
      pending.set(id, { query, resolve, reject });
      if (!thread!.post(request)) {
        pending.delete(id);
        runHere(query).then(resolve, reject);
      }
    });
  };

  const connection: DatabaseConnection = {
    executeQuery: <R>(query: CompiledQuery) => execute(query) as Promise<QueryResult<R>>,
    // eslint-disable-next-line require-yield
    async *streamQuery() {
      throw new Error('the long-read thread does not stream');
    },
  };
  const readsOnly = (): Promise<void> =>
    Promise.reject(new Error('the long-read thread runs reads only, outside transactions'));
  const driver: Driver = {
    init: () => Promise.resolve(),
    acquireConnection: () => Promise.resolve(connection),
    beginTransaction: readsOnly,
    commitTransaction: readsOnly,
    rollbackTransaction: readsOnly,
    releaseConnection: () => Promise.resolve(),
    destroy: () => Promise.resolve(),
  };
  const db = new Kysely<Database>({
    dialect: {
      createAdapter: () => new SqliteAdapter(),
      createDriver: () => driver,
      createQueryCompiler: () => new SqliteQueryCompiler(),
      createIntrospector: (kysely) => new SqliteIntrospector(kysely),
    },
  });

  return {
    db,
    get idle() {
      return pending.size === 0;
    },
    interrupt() {
      Atomics.add(generation, 0, 1);
      const cut = [...pending.values()];
      pending.clear();
      for (const read of cut) read.reject(interrupted());
      return cut.length;
    },
    async close() {
      closed = true;
      await thread?.close();
      // Reads the thread left unanswered as it stopped: run here, as after a failure.
      await runOrphansHere();
    },
  };
}
