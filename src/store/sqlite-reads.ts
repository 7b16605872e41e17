// Reads on the SQLite store's reader without kysely's driver (a mutex and a chain of promises per query), by
// raw-mode statements whose value arrays are made into objects here: cheaper than better-sqlite3 building
// each row in C++. The reads asked for in one round of the event loop run together after it, in one read
// transaction: a lookup run alone costs several times one run right after another (the CPU caches gone cold),
// and each statement outside a transaction takes and drops the WAL read locks. Every read still starts after
// its request arrived, so it sees every write committed before that. Same SQL, values and row objects.
import type BetterSqlite3 from 'better-sqlite3';
import { Sqlite } from './sqlite-driver.js';
import type { Executor } from './store.js';

/** Runs one read statement and resolves to its rows, as kysely would. */
export type DirectRead = (sql: string, parameters: readonly unknown[]) => Promise<unknown[]>;

const directReads = new WeakMap<Executor, DirectRead>();

/** The gathered path to the connection behind `db`, when it has one (the SQLite store's reader). */
export function directRead(db: Executor): DirectRead | undefined {
  return directReads.get(db);
}

interface Pending {
  sql: string;
  parameters: readonly unknown[];
  resolve: (rows: unknown[]) => void;
  reject: (err: unknown) => void;
}

/** Gives `db` (a Kysely over `conn` alone, with no plugins) a gathered path for prepared reads. */
export function gatherReads(db: Executor, conn: BetterSqlite3.Database): void {
  // Its statements are its own: raw mode must not reach the ones kysely runs on this connection.
  const prepare = (sql: string): BetterSqlite3.Statement<unknown[]> =>
    Sqlite.prototype.prepare.call(conn, sql);
  const statements = new Map<string, { statement: BetterSqlite3.Statement<unknown[]>; columns: string[] }>();
  const begin = prepare('begin');
  const commit = prepare('commit');
  const rollback = prepare('rollback');
  let pending: Pending[] = [];

  const run = (sql: string, parameters: readonly unknown[]): unknown[] => {
    let entry = statements.get(sql);
    if (!entry) {
      const statement = prepare(sql);
      if (!statement.reader) throw new Error(`not a read: ${sql}`);
      entry = { statement: statement.raw(true), columns: statement.columns().map((c) => c.name) };
      // Only prepared shapes come here (store/prepared.ts): a fixed, small set.
      statements.set(sql, entry);
    }
    const { statement, columns } = entry;
    const values = statement.all(parameters) as unknown[][];
    const rows = new Array<Record<string, unknown>>(values.length);
    for (let r = 0; r < values.length; r++) {
      const row: Record<string, unknown> = {};
      const value = values[r]!;
      for (let c = 0; c < columns.length; c++) row[columns[c]!] = value[c];
      rows[r] = row;
    }
    return rows;
  };

  const flush = () => {
    const batch = pending;
    pending = [];
    // Several reads share one transaction; a lone read needs none, and if BEGIN fails they run one by one.
    let together = false;
    if (batch.length > 1) {
      try {
        begin.run();
        together = true;
      } catch {
        // run them one by one
      }
    }
    for (const read of batch) {
      let rows: unknown[];
      try {
        rows = run(read.sql, read.parameters);
      } catch (err) {
        read.reject(err);
        continue;
      }
      read.resolve(rows);
    }
    // A read-only transaction has nothing to keep; ending it is all that matters.
    if (together && conn.inTransaction) {
      try {
        commit.run();
      } catch {
        rollback.run();
      }
    }
  };

  directReads.set(
    db,
    (sql, parameters) =>
      new Promise((resolve, reject) => {
        if (pending.length === 0) setImmediate(flush);
        pending.push({ sql, parameters, resolve, reject });
      }),
  );
}
