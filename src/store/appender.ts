// Batched appends: rows from concurrent callers (accepted emails with their recipients and events) go in one
// multi-row INSERT per table and one commit for the lot, not a transaction of several statements each: round
// trips and commits are where acceptance spends its time. A caller's promise settles only once its rows are
// durably committed; if a shared batch fails, each caller's rows are written again alone, so one bad row
// fails only its own caller.
import type { Insertable, Kysely, QueryCreator } from 'kysely';
import { CompiledQuery, sql } from './kysely.js';
import {
  type DialectName,
  dialectOf,
  failedToConnect,
  isTypeRefusal,
  isStoreUnavailable,
} from './dialect.js';
import { AppendStatements, pushValues } from './append-statements.js';
import type { Database } from './schema.js';
import {
  BatchQueue,
  type RetryAlone,
  type Settleable,
  aloneAfter,
  writeTogetherOrAlone,
} from './batch-queue.js';

/** Rows for one table; a list of these is one caller's append. */
export type AppendRows<DB> = {
  [T in keyof DB & string]: { table: T; rows: readonly Insertable<DB[T]>[] };
}[keyof DB & string];

interface Job extends Settleable<void> {
  rows: readonly { table: string; rows: readonly object[] }[];
  /** A write of it failed in a way that may have followed its commit (see writeOrFind). */
  unsure?: boolean;
  /** Written once more alone after a look found it not in (see writeOrFind). */
  again?: boolean;
}

type Transaction<DB> = (fn: (trx: Kysely<DB>) => Promise<void>) => Promise<void>;
type Retrying = (write: () => Promise<void>) => Promise<void>;

const MAX_JOBS = 500;
/** Errors of batches whose rows may or may not be in (writeOrFind): not written again alone. */
const unwritable = new WeakSet<Error>();
/**
 * A look for a batch's rows (writeOrFind) that fails quickly (within LOOK_QUICK_MS: a new connection cut by
 * the fault that lost the write's answer) is tried again, LOOK_TRIES times in all, LOOK_RETRY_MS and then
 * twice that apart: a 503 for rows that were in makes a client that retries without a key send the email
 * twice. A look that failed slowly (a timeout) is not: the store is slow or gone, and the caller would wait
 * as long again.
 */
export const LOOK_TRIES = 3;
const LOOK_RETRY_MS = 50;
const LOOK_QUICK_MS = 1_000;
/** Bound values per statement, under SQLite's 32,766 and PostgreSQL's 65,535. */
const MAX_PARAMETERS = 30_000;
/**
 * Characters of text values per statement (but for one row's, or one caller's): a driver copies every value
 * of a statement at once (better-sqlite3 binds them all, pg builds one message of them, growing it by
 * copies), so twenty emails near the 10 MiB limit in one INSERT held some 200-340 MiB more than each alone,
 * and SQLite's held the event loop for 4-5 s.
 */
export const MAX_STATEMENT_CHARS = 1 << 20;

/** The characters of a row's text values. */
function charsOf(row: object): number {
  let n = 0;
  for (const value of Object.values(row)) if (typeof value === 'string') n += value.length;
  return n;
}

export class Appender<DB> {
  private readonly queue: BatchQueue<Job>;
  private readonly maxParameters: number;
  private readonly direct: Kysely<DB> | undefined;
  private readonly statements: AppendStatements | undefined;
  private readonly retrying: Retrying;
  /** Transactions committed so far; each may carry many callers' rows. */
  commits = 0;

  /**
   * `transaction` runs its callback in one transaction and commits it; `concurrency` is how many such
   * transactions may be open at once; `maxParameters` bounds one statement's bound values. With `direct`
   * (PostgreSQL), a batch that fits one statement is written as one (data-modifying WITH clauses), committed
   * on its own: one round trip, not five. `retrying` runs each batch's write, and may run it again.
   */
  constructor(
    private readonly transaction: Transaction<DB>,
    {
      concurrency = 1,
      maxParameters = MAX_PARAMETERS,
      direct,
      retrying = (write) => write(),
    }: { concurrency?: number; maxParameters?: number; direct?: Kysely<DB>; retrying?: Retrying } = {},
  ) {
    this.maxParameters = maxParameters;
    this.direct = direct;
    this.statements = direct && new AppendStatements(direct as unknown as Kysely<unknown>);
    this.retrying = retrying;
    this.queue = new BatchQueue<Job>(
      (jobs) =>
        writeTogetherOrAlone<Job, void>(
          jobs,
          async (batch) => {
            await this.writeOrFind(batch);
            return () => undefined;
          },
          (err) => this.retryAlone(err),
        ),
      MAX_JOBS,
      concurrency,
    );
  }

  /**
   * How a failed batch's jobs are written again (aloneAfter): a connection lost with its answer is settled
   * by writing each again by the same ids (writeOrFind), unless the look itself could not tell.
   */
  private retryAlone(err: unknown): RetryAlone {
    return err instanceof Error && unwritable.has(err) ? 'no' : aloneAfter(err);
  }

  /** Inserts the rows (tables in the order given, so parents come before children) in one commit. */
  append(rows: readonly AppendRows<DB>[]): Promise<void> {
    return new Promise<void>((resolve, reject) => this.queue.push({ rows, resolve, reject }));
  }

  /** Resolves once every queued append has settled. */
  idle(): Promise<void> {
    return this.queue.idle();
  }

  /**
   * Writes the batch. On PostgreSQL a write can fail after its commit (the connection lost with the answer on
   * its way), so the batch's first row is looked for (a batch commits whole or not at all): a caller whose
   * rows are in must hear neither of an outage nor of a conflict with its own rows. A first attempt that
   * commits after the look found nothing collides with the next attempt, which looks again. A write that
   * could not connect sent nothing, and is not looked for.
   */
  private async writeOrFind(batch: Job[]): Promise<void> {
    try {
      await this.retrying(() => this.write(batch));
    } catch (err) {
      if (!this.direct || failedToConnect(err)) throw err;
      if (!isStoreUnavailable(err) && !batch.some((job) => job.unsure)) throw err;
      for (const job of batch) job.unsure = true;
      let found: boolean;
      try {
        found = await this.lookFor(batch[0]!);
      } catch (lookupErr) {
        // Whether the rows are in cannot be told: an outage to each caller, never the collision (it may
        // be with the caller's own rows), and not written again alone, each into the same outage.
        const undecided = isStoreUnavailable(lookupErr) || !isStoreUnavailable(err) ? lookupErr : err;
        if (undecided instanceof Error) unwritable.add(undecided);
        throw undecided;
      }
      if (!found) {
        // Not in yet, but a write the server never answered may still commit late. A lone caller's rows are
        // written again here by the same ids (several callers' go one by one): whichever write comes second
        // collides, and the next look settles it, where a 503 would have a retry without a key send the email
        // twice. A commit stalled past this write's own statement_timeout still gets the 503: its outcome is
        // unknown. A write the server answered with an error cannot commit late, and is not written again (a
        // timed-out one would only wait on the same lock).
        const [job] = batch;
        if (batch.length === 1 && !job!.again && firstRow(job!) !== undefined && !answeredByServer(err)) {
          job!.again = true;
          return this.writeOrFind(batch);
        }
        throw err;
      }
    }
  }

  /** committed(), tried again while it fails quickly (LOOK_TRIES). */
  private async lookFor(job: Job): Promise<boolean> {
    for (let tries = 1; ; tries++) {
      const started = performance.now();
      try {
        return await this.committed(job);
      } catch (err) {
        const quick = performance.now() - started < LOOK_QUICK_MS;
        if (tries >= LOOK_TRIES || !quick || !isStoreUnavailable(err)) throw err;
        await new Promise((resolve) => setTimeout(resolve, LOOK_RETRY_MS * tries));
      }
    }
  }

  /** Whether the job's first row is in the store, by its id (false for rows without one). */
  private async committed(job: Job): Promise<boolean> {
    const first = firstRow(job);
    if (!first) return false;
    const db = this.direct as unknown as AnyDb;
    const found = await db
      .selectFrom(first.table)
      .select(sql.lit(1).as('one'))
      .where(sql.ref('id'), '=', first.id)
      .executeTakeFirst();
    return found !== undefined;
  }

  private async write(jobs: Job[]): Promise<void> {
    // Every caller's rows for a table in one list, tables in the order they first appear.
    const byTable = new Map<string, { table: string; rows: object[] }>();
    for (const job of jobs) {
      for (const { table, rows } of job.rows) {
        let merged = byTable.get(table);
        if (!merged) byTable.set(table, (merged = { table, rows: [] }));
        for (const row of rows) merged.rows.push(row);
      }
    }
    const inserts = [...byTable.values()].filter(({ rows }) => rows.length > 0);
    const parameters = inserts.reduce((n, { rows }) => n + rows.length * Object.keys(rows[0]!).length, 0);
    // One caller's rows go together however long (a single large email is no batch to split).
    const oneStatement =
      parameters <= this.maxParameters &&
      (jobs.length === 1 ||
        inserts.reduce((n, { rows }) => rows.reduce((m, row) => m + charsOf(row), n), 0) <=
          MAX_STATEMENT_CHARS);
    if (this.direct && inserts.length > 0 && oneStatement) {
      // One statement, committed on its own: every insert but the last rides in a WITH clause; named
      // where its shape allows (append-statements.ts), else as kysely writes it.
      if (await this.writeStatement(this.direct, this.statements!, inserts)) {
        this.commits++;
        return;
      }
      const last = inserts.at(-1)!;
      let db: QueryCreator<Record<string, object>> = this.direct as unknown as AnyDb;
      inserts.slice(0, -1).forEach(({ table, rows }, i) => {
        db = db.with(`append_${i}`, (q) => q.insertInto(table).values(rows)) as unknown as typeof db;
      });
      await db.insertInto(last.table).values(last.rows).execute();
    } else {
      await this.transaction((trx) =>
        insertRows(trx, inserts as unknown as AppendRows<DB>[], this.maxParameters),
      );
    }
    this.commits++;
  }

  /**
   * Writes the inserts as one statement of append-statements.ts; false when their rows cannot be. A
   * statement refused for its text or a value's type is built and sent once more if the tables' column
   * types changed since they were read (a migration). Refused, it was not committed.
   */
  private async writeStatement(
    db: Kysely<DB>,
    statements: AppendStatements,
    inserts: readonly { table: string; rows: readonly object[] }[],
  ): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      const statement = await statements.statement(inserts);
      if (!statement) return false;
      try {
        await db.executeQuery(statement);
        return true;
      } catch (err) {
        if (attempt > 1 || !isTypeRefusal(err)) throw err;
        if (!(await statements.changedSince(statement).catch(() => false))) throw err;
      }
    }
  }
}

/** An error PostgreSQL itself sent (it has a severity): the statement failed there, and is over. */
function answeredByServer(err: unknown): boolean {
  return typeof err === 'object' && err !== null && 'severity' in err;
}

/** The job's first row, whose id tells whether its rows are in; undefined if it has no id. */
function firstRow(job: Job): { table: string; id: string } | undefined {
  const first = job.rows.find(({ rows }) => rows.length > 0);
  const id = (first?.rows[0] as { id?: unknown } | undefined)?.id;
  return first && typeof id === 'string' ? { table: first.table, id } : undefined;
}

// The rows were typed per table by append(); table names are only known at run time.
type AnyDb = Kysely<Record<string, object>>;

/**
 * The rows, table by table in the order given, inside the caller's transaction: as few multi-row
 * INSERTs as the bound-value limit and MAX_STATEMENT_CHARS allow. What an append does when it cannot be one
 * statement.
 */
export async function insertRows<DB>(
  trx: Kysely<DB>,
  inserts: readonly AppendRows<DB>[],
  maxParameters = MAX_PARAMETERS,
  maxChars = MAX_STATEMENT_CHARS,
): Promise<void> {
  const dialect = dialectOf(trx as unknown as Kysely<Database>);
  for (const { table, rows } of inserts as readonly { table: string; rows: readonly object[] }[]) {
    if (rows.length === 0) continue;
    const columns = Object.keys(rows[0]!);
    const perStatement = Math.max(1, Math.floor(maxParameters / columns.length));
    for (let i = 0; i < rows.length;) {
      // At least one row, then as many more as both bounds allow.
      let chars = charsOf(rows[i]!);
      let end = i + 1;
      for (; end < rows.length && end - i < perStatement; end++) {
        chars += charsOf(rows[end]!);
        if (chars > maxChars) break;
      }
      const chunk = rows.slice(i, end);
      i = end;
      const statement = plainInsert(dialect, table, columns, chunk);
      // Rows whose columns differ (none the app writes) go through kysely, which reconciles them.
      if (statement) await trx.executeQuery(statement);
      else await (trx as unknown as AnyDb).insertInto(table).values(chunk).execute();
    }
  }
}

/** Statement texts by table, columns and row count: few shapes, made once, the same string each time. */
const insertTexts = new Map<string, string>();

/**
 * A multi-row INSERT of rows that all have exactly `columns`, none undefined, as kysely would write it;
 * undefined when they do not. Building it through kysely's query tree cost more per accepted email than
 * the insert.
 */
function plainInsert(
  dialect: DialectName,
  table: string,
  columns: string[],
  rows: readonly object[],
): CompiledQuery | undefined {
  const parameters: unknown[] = [];
  if (!pushValues(rows, columns, parameters)) return undefined;
  const key = `${dialect} ${table} ${columns.join(',')} ${rows.length}`;
  let text = insertTexts.get(key);
  if (text === undefined) {
    let n = 0;
    const place = dialect === 'postgres' ? () => `$${++n}` : () => '?';
    const tuples = rows.map(() => `(${columns.map(place).join(', ')})`);
    text = `insert into "${table}" (${columns.map((c) => `"${c}"`).join(', ')}) values ${tuples.join(', ')}`;
    // Row counts vary with load; a flood of shapes just starts over.
    if (insertTexts.size >= 1000) insertTexts.clear();
    insertTexts.set(key, text);
  }
  return CompiledQuery.raw(text, parameters);
}
