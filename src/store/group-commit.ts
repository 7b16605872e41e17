// Group commit: writes that arrive while a commit is in flight are queued and run together in the next
// transaction, each inside its own savepoint, so many writes share one commit (one fsync) while a failing
// write rolls back only itself. A caller's promise settles only after its commit is durable. Every write
// goes through it on SQLite; on PostgreSQL, writes that tolerate company (the worker's results) do.
import { type Kysely, sql } from 'kysely';
import { BatchQueue } from './batch-queue.js';
import { isRetryableConflict } from './dialect.js';

interface Job<DB> {
  fn: (trx: Kysely<DB>) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
  /** Times it lost a deadlock (PostgreSQL) and went back in the queue. */
  conflicts: number;
}

const MAX_BATCH = 256;
const MAX_CONFLICTS = 5;

export class GroupCommit<DB> {
  private readonly queue = new BatchQueue<Job<DB>>((batch) => this.runBatch(batch), MAX_BATCH);
  /** Transactions committed so far; each may carry many writes. */
  commits = 0;

  /** `transaction` runs its callback in one transaction and commits it (or rolls back if it throws). */
  constructor(private readonly transaction: <T>(fn: (trx: Kysely<DB>) => Promise<T>) => Promise<T>) {}

  run<T>(fn: (trx: Kysely<DB>) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ fn, resolve: resolve as (v: unknown) => void, reject, conflicts: 0 });
    });
  }

  /** Resolves once every queued write has settled. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private async runBatch(batch: Job<DB>[]): Promise<void> {
    const outcomes: { ok: boolean; value: unknown }[] = [];
    try {
      await this.transaction(async (conn) => {
        for (const job of batch) {
          await sql`savepoint w`.execute(conn);
          try {
            const value = await job.fn(conn);
            await sql`release savepoint w`.execute(conn);
            outcomes.push({ ok: true, value });
          } catch (err) {
            await sql`rollback to savepoint w`.execute(conn);
            await sql`release savepoint w`.execute(conn);
            outcomes.push({ ok: false, value: err });
          }
        }
      });
      this.commits++;
    } catch (err) {
      for (const job of batch) this.fail(job, err);
      return;
    }
    batch.forEach((job, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) job.resolve(outcome.value);
      else this.fail(job, outcome.value);
    });
  }

  /**
   * A write that lost a deadlock runs again in a later transaction: in this one, the lock it waited for
   * may be held by an earlier write's savepoint, so retrying here could only lose again.
   */
  private fail(job: Job<DB>, err: unknown): void {
    if (isRetryableConflict(err) && job.conflicts < MAX_CONFLICTS) {
      job.conflicts++;
      this.queue.push(job);
    } else {
      job.reject(err);
    }
  }
}

/** The SQLite transaction for a batch: IMMEDIATE takes the write lock up front, so another process's
 * writer makes us wait (busy_timeout) instead of failing on a stale read snapshot. */
export function sqliteImmediateTransaction<DB>(db: Kysely<DB>) {
  return <T>(fn: (trx: Kysely<DB>) => Promise<T>): Promise<T> =>
    db.connection().execute(async (conn) => {
      await sql`begin immediate`.execute(conn);
      try {
        const value = await fn(conn);
        await sql`commit`.execute(conn);
        return value;
      } catch (err) {
        await sql`rollback`.execute(conn).catch(() => undefined);
        throw err;
      }
    });
}
