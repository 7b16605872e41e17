// Group commit: writes that arrive while a commit is in flight are queued and run together in the next
// transaction, each inside its own savepoint, so many writes share one commit (one fsync) while a failing
// write rolls back only itself. A caller's promise settles only after its commit is durable. Every write
// goes through it on SQLite; on PostgreSQL, writes that tolerate company (the worker's claims, lease renewals
// and results) do. A write whose lock wait times out fails alone and the writes after it still run: the
// lock may be one row's, and skipping them would fail writes that no lock holds up.
// A write marked `small` changes few existing rows (an append, a batch of delivery results); a batch of
// only such writes lets SQLite keep the page copies it takes to undo a statement or savepoint in memory
// (sqliteImmediateTransaction).
import type { Kysely } from 'kysely';
import { sql } from './kysely.js';
import { BatchQueue } from './batch-queue.js';
import { isRetryableConflict } from './dialect.js';

interface Job<DB> {
  fn: (trx: Kysely<DB>) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
  /** Times it lost a deadlock (PostgreSQL) and went back in the queue. */
  conflicts: number;
  small: boolean;
}

export interface WriteOptions {
  /**
   * The write changes few existing rows, however many it adds: what it could have to undo is bounded.
   * Unmarked writes may change any number (deleting a list deletes all its memberships).
   */
  small?: boolean;
}

/** Runs fn in one transaction and commits it (or rolls back if it throws); `small` if every write is. */
export type Transaction<DB> = <T>(fn: (trx: Kysely<DB>) => Promise<T>, small: boolean) => Promise<T>;

const MAX_BATCH = 256;
const MAX_CONFLICTS = 5;

export class GroupCommit<DB> {
  private readonly queue = new BatchQueue<Job<DB>>((batch) => this.runBatch(batch), MAX_BATCH);
  /** Transactions committed so far; each may carry many writes. */
  commits = 0;

  constructor(private readonly transaction: Transaction<DB>) {}

  run<T>(fn: (trx: Kysely<DB>) => Promise<T>, options: WriteOptions = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const small = options.small === true;
      this.queue.push({ fn, resolve: resolve as (v: unknown) => void, reject, conflicts: 0, small });
    });
  }

  /** Resolves once every queued write has settled. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  private async runBatch(batch: Job<DB>[]): Promise<void> {
    const outcomes: { ok: boolean; value: unknown }[] = [];
    try {
      await this.transaction(
        async (conn) => {
          for (const job of batch) {
            await sql`savepoint w`.execute(conn);
            try {
              const value = await job.fn(conn);
              await sql`release savepoint w`.execute(conn);
              outcomes.push({ ok: true, value });
            } catch (err) {
              try {
                await sql`rollback to savepoint w`.execute(conn);
                await sql`release savepoint w`.execute(conn);
              } catch {
                // The write's failure ended the whole transaction (SQLite rolls it all back when a statement
                // cannot write its undo journal: a full disk, an I/O error), savepoint included: every write
                // of the batch fails with that failure, not with the savepoint's absence (a 500, not a 503).
                throw err;
              }
              outcomes.push({ ok: false, value: err });
            }
          }
        },
        batch.every((job) => job.small),
      );
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

/**
 * The SQLite transaction for a batch: IMMEDIATE takes the write lock up front, so another process's
 * writer makes us wait (busy_timeout) instead of failing on a stale read snapshot.
 * Every statement and savepoint keeps a copy of each existing page it changes, to undo it; past 64 KiB
 * SQLite spills those copies to a temporary file (an open, an unlink and a write per page), a large share
 * of a batch's cost. A batch of small writes keeps them in memory instead, since they are bounded; any
 * other batch keeps the file, so deleting a list of a million members cannot fill the heap.
 */
export function sqliteImmediateTransaction<DB>(
  db: Kysely<DB>,
  /**
   * Makes a commit durable, when COMMIT itself does not (wal-sync.ts): `sync` after each commit (its
   * callers wait for it), `check` before each transaction (it throws once a sync failed).
   */
  durability?: { check(): void; sync(): Promise<void> | undefined },
): Transaction<DB> {
  // The connection's setting, changed only between transactions (SQLite refuses it inside one).
  let inMemory = false;
  return <T>(fn: (trx: Kysely<DB>) => Promise<T>, small: boolean): Promise<T> =>
    db.connection().execute(async (conn) => {
      if (small !== inMemory) {
        await (small ? sql`pragma temp_store = memory` : sql`pragma temp_store = default`).execute(conn);
        inMemory = small;
      }
      durability?.check();
      await sql`begin immediate`.execute(conn);
      try {
        const value = await fn(conn);
        await sql`commit`.execute(conn);
        if (durability) await durability.sync();
        return value;
      } catch (err) {
        await sql`rollback`.execute(conn).catch(() => undefined);
        throw err;
      }
    });
}
