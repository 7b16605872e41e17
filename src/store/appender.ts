// Batched appends: new rows from concurrent callers (accepted emails with their recipients and events)
// are written together, one multi-row INSERT per table and one commit for the lot, instead of a
// transaction of several statements per caller. That is where acceptance spends its time on
// PostgreSQL (round trips, one commit each) and, less so, on SQLite (a savepoint per write).
// A caller's promise settles only after its rows are durably committed. If a shared batch fails, each
// caller's rows are written again on their own, so one bad row fails only its own caller.
import type { Insertable, Kysely, QueryCreator } from 'kysely';
import { BatchQueue } from './batch-queue.js';

/** Rows for one table; a list of these is one caller's append. */
export type AppendRows<DB> = {
  [T in keyof DB & string]: { table: T; rows: readonly Insertable<DB[T]>[] };
}[keyof DB & string];

interface Job {
  rows: readonly { table: string; rows: readonly object[] }[];
  resolve: () => void;
  reject: (err: unknown) => void;
}

type Transaction<DB> = (fn: (trx: Kysely<DB>) => Promise<void>) => Promise<void>;

const MAX_JOBS = 500;

export class Appender<DB> {
  private readonly queue: BatchQueue<Job>;
  private readonly maxParameters: number;
  private readonly direct: Kysely<DB> | undefined;
  /** Transactions committed so far; each may carry many callers' rows. */
  commits = 0;

  /**
   * `transaction` runs its callback in one transaction and commits it; `concurrency` is how many such
   * transactions may be open at once; `maxParameters` bounds one statement's bound values (SQLite
   * allows 32,766, PostgreSQL 65,535). With `direct` (PostgreSQL), a batch that fits one statement is
   * written as one (data-modifying WITH clauses), committed on its own: one round trip, not five.
   */
  constructor(
    private readonly transaction: Transaction<DB>,
    {
      concurrency = 1,
      maxParameters = 30_000,
      direct,
    }: { concurrency?: number; maxParameters?: number; direct?: Kysely<DB> } = {},
  ) {
    this.maxParameters = maxParameters;
    this.direct = direct;
    this.queue = new BatchQueue<Job>((jobs) => this.flush(jobs), MAX_JOBS, concurrency);
  }

  /** Inserts the rows (tables in the order given, so parents come before children) in one commit. */
  append(rows: readonly AppendRows<DB>[]): Promise<void> {
    return new Promise<void>((resolve, reject) => this.queue.push({ rows, resolve, reject }));
  }

  /** Resolves once every queued append has settled. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private async flush(jobs: Job[]): Promise<void> {
    try {
      await this.write(jobs);
      for (const job of jobs) job.resolve();
      return;
    } catch (err) {
      if (jobs.length === 1) {
        jobs[0]!.reject(err);
        return;
      }
    }
    // Someone's rows were refused: find whose, without failing the others.
    for (const job of jobs) {
      try {
        await this.write([job]);
        job.resolve();
      } catch (err) {
        job.reject(err);
      }
    }
  }

  private async write(jobs: Job[]): Promise<void> {
    const byTable = new Map<string, object[]>();
    for (const job of jobs) {
      for (const { table, rows } of job.rows) {
        let all = byTable.get(table);
        if (!all) byTable.set(table, (all = []));
        for (const row of rows) all.push(row);
      }
    }
    const inserts = [...byTable].filter(([, rows]) => rows.length > 0);
    const parameters = inserts.reduce((n, [, rows]) => n + rows.length * Object.keys(rows[0]!).length, 0);
    // The rows were typed per table by append(); table names are only known here at run time.
    type AnyDb = Kysely<Record<string, object>>;
    if (this.direct && inserts.length > 0 && parameters <= this.maxParameters) {
      // One statement, committed on its own: every insert but the last rides in a WITH clause.
      const [table, rows] = inserts.at(-1)!;
      let db: QueryCreator<Record<string, object>> = this.direct as unknown as AnyDb;
      inserts.slice(0, -1).forEach(([t, r], i) => {
        db = db.with(`append_${i}`, (q) => q.insertInto(t).values(r)) as unknown as typeof db;
      });
      await db.insertInto(table).values(rows).execute();
    } else {
      await this.transaction(async (trx) => {
        for (const [table, rows] of inserts) {
          const perStatement = Math.max(1, Math.floor(this.maxParameters / Object.keys(rows[0]!).length));
          for (let i = 0; i < rows.length; i += perStatement) {
            await (trx as unknown as AnyDb)
              .insertInto(table)
              .values(rows.slice(i, i + perStatement))
              .execute();
          }
        }
      });
    }
    this.commits++;
  }
}
