// What differs between the two stores, in one place. Everything else is shared query code.
import type { Expression, Kysely, RawBuilder, SelectQueryBuilder, SqlBool } from 'kysely';
import { PostgresAdapter, sql } from './kysely.js';

export type DialectName = 'sqlite' | 'postgres';

interface DbError {
  code?: unknown;
  errno?: unknown;
}

function codeOf(err: unknown): string {
  const code = (err as DbError | null)?.code;
  return typeof code === 'string' ? code : '';
}

export function isUniqueViolation(err: unknown): boolean {
  const code = codeOf(err);
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

export function isForeignKeyViolation(err: unknown): boolean {
  const code = codeOf(err);
  return code === '23503' || code === 'SQLITE_CONSTRAINT_FOREIGNKEY';
}

/** Faults of the store itself (down, disk full, locked too long), as opposed to bugs in a query. */
export function isStoreUnavailable(err: unknown): boolean {
  const code = codeOf(err);
  if (/^SQLITE_(FULL|IOERR|BUSY|LOCKED|CANTOPEN|READONLY|NOMEM|PROTOCOL|INTERRUPT)/.test(code)) return true;
  // PostgreSQL: connection exceptions (08), insufficient resources (53), operator intervention (57),
  // system errors (58); and the socket-level faults of the pg client.
  if (/^(08|53|57|58)/.test(code)) return true;
  if (refusedAtLogin(code)) return true;
  // 55000 at connect: the database is not accepting connections (ALLOW_CONNECTIONS false, being dropped).
  if (code === '55000' && /not currently accepting connections/.test(messageOf(err))) return true;
  if (['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH'].includes(code))
    return true;
  // "Query read timeout": no answer within the pool's query_timeout, as from a server that stopped
  // answering with the connection still open; the client is then ended (pg-client.ts endOnReadTimeout), and
  // what its caller sends next (kysely's ROLLBACK) is "closed and is not queryable".
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed and is not queryable|Query read timeout|the database system is (starting up|shutting down)/i.test(
    messageOf(err),
  );
}

/**
 * PostgreSQL refusing a new connection at login: its database gone (3D000) or its role refused (class 28: a
 * password rotated, a role dropped). The store is out of reach, as /health says, not a query's bug.
 */
const refusedAtLogin = (code: string) => code === '3D000' || code.startsWith('28');

/**
 * A store fault from before any statement was sent (PostgreSQL): no connection could be made, so nothing
 * of the write can have been done.
 */
export function failedToConnect(err: unknown): boolean {
  const code = codeOf(err);
  if (['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', '53300', '57P03'].includes(code)) return true;
  if (refusedAtLogin(code)) return true;
  return /timeout exceeded when trying to connect|Connection terminated due to connection timeout|the database system is (starting up|shutting down)|not currently accepting connections/i.test(
    messageOf(err),
  );
}

/**
 * PostgreSQL's refusal to run a named statement whose result's column types changed under it (a migration
 * altered one); it keeps refusing on that connection (named-statements.ts).
 */
export function isStaleNamedResult(err: unknown): boolean {
  return codeOf(err) === '0A000' && /cached plan must not change result type/.test(messageOf(err));
}

/**
 * PostgreSQL's refusal of a statement's text (SQLSTATE class 42), or of a value that does not convert to
 * the type it was cast to: what a statement built on a table's column types meets once a migration
 * changed them.
 */
export function isTypeRefusal(err: unknown): boolean {
  const code = codeOf(err);
  return code.startsWith('42') || ['22P02', '22003', '22007', '22008'].includes(code);
}

/** SQLite's write lock held by another connection past busy_timeout, or a table another one has locked. */
export function isBusy(err: unknown): boolean {
  return /^SQLITE_(BUSY|LOCKED)/.test(codeOf(err));
}

/** PostgreSQL's code for a statement stopped by its `statement_timeout` (or cancelled by an operator). */
export function isStatementCanceled(err: unknown): boolean {
  return codeOf(err) === '57014';
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : '';
}

/** Transient conflicts worth retrying the whole transaction for. */
export function isRetryableConflict(err: unknown): boolean {
  const code = codeOf(err);
  return code === '40001' || code === '40P01';
}

/** A PostgreSQL lock wait that ran past lock_timeout. */
export function isLockTimeout(err: unknown): boolean {
  return codeOf(err) === '55P03';
}

/**
 * No answer within the pool's query_timeout (pg's own message): the client gave up on the statement, and
 * the connection is ended (pg-client.ts endOnReadTimeout).
 */
export function isReadTimeout(err: unknown): boolean {
  return messageOf(err) === 'Query read timeout';
}

/**
 * A PostgreSQL statement stopped by a timeout (statement_timeout, lock_timeout), a cancel, or the pool's
 * query_timeout: most often while it waited on a lock, which the statements after it may wait on in turn.
 * The server's statement_timeout is set to come first (pg-client.ts), but a process whose event loop stalls
 * across the gap between the two runs the pool's timer before it reads the server's answer.
 */
export function isWaitStopped(err: unknown): boolean {
  return isStatementCanceled(err) || isLockTimeout(err) || isReadTimeout(err);
}

/**
 * A PostgreSQL extension this role may not create (42501), that the server does not have installed
 * (58P01), or cannot load (0A000).
 */
export function isExtensionUnavailable(err: unknown): boolean {
  return ['42501', '58P01', '0A000'].includes(codeOf(err));
}

/** Which store a kysely instance (or a transaction of it) talks to. */
export function dialectOf<DB>(db: Kysely<DB>): DialectName {
  return db.getExecutor().adapter instanceof PostgresAdapter ? 'postgres' : 'sqlite';
}

/**
 * The column that locates a row where it is stored (SQLite's rowid, PostgreSQL's ctid): deleting rows found
 * by it takes no second lookup through the primary key. Valid within one statement.
 */
export function rowLocator(dialect: DialectName): RawBuilder<unknown> {
  return dialect === 'postgres' ? sql`ctid` : sql`rowid`;
}

/** A text value (or NULL) as JSON text: a quoted, escaped JSON string, or `null`. */
export function jsonString(dialect: DialectName, value: Expression<string | null>): RawBuilder<string> {
  return dialect === 'postgres' ? sql`coalesce(to_json(${value})::text, 'null')` : sql`json_quote(${value})`;
}

/** Row lock for read-modify-write on PostgreSQL; SQLite has one writer, so the lock is implicit there. */
export function forUpdate<DB, TB extends keyof DB, O>(
  dialect: DialectName,
  qb: SelectQueryBuilder<DB, TB, O>,
): SelectQueryBuilder<DB, TB, O> {
  return dialect === 'postgres' ? qb.forUpdate() : qb;
}

/** LIKE pattern for a literal substring: `%` and `_` (and the escape itself) match only themselves. */
export function containsPattern(value: string): string {
  return `%${value.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * `column` holds `term` as a literal substring (both already lowercased). SQLite: instr, a plain byte
 * search, about a fifth cheaper per row than LIKE when a count scans a million addresses. PostgreSQL: LIKE,
 * which its pg_trgm index can answer.
 */
export function containsText(dialect: DialectName, column: string, term: string): RawBuilder<SqlBool> {
  return dialect === 'sqlite'
    ? sql<SqlBool>`instr(${sql.ref(column)}, ${term}) > 0`
    : sql<SqlBool>`${sql.ref(column)} like ${containsPattern(term)} escape '\\'`;
}

/** FTS5 query for a literal substring: one string in double quotes (inner ones doubled), no operators. */
export function ftsPhrase(value: string): string {
  return `"${value.replaceAll('"', '""')}"`;
}

/** SQLite's trigram tokenizer matches only substrings of at least three characters (code points). */
export function isTrigramSearchable(value: string): boolean {
  return [...value].length >= 3;
}
