// The PostgreSQL store's migration run: on a connection without statement timeouts, tried again a few times
// when a statement waited too long for a lock.
import { Kysely, PostgresDialect } from './kysely.js';
import { loadPg } from '../optional-packages.js';
import {
  MIGRATION_LOCK_TIMEOUT_MS,
  type MigrationRun,
  isMigrationLockWait,
  migrateToLatest,
  migrationNames,
} from './migrations.js';
import { setUpLongStatements } from './pg-client.js';

/** Migrations that could not get a lock another transaction held: the database's state, not a setting. */
export class MigrationWaitError extends Error {}

/** Runs of the migrations tried when one waited too long for a lock, MIGRATION_RETRY_MS apart. */
const MIGRATION_TRIES = 6;
const MIGRATION_RETRY_MS = 2_000;

/**
 * The migrations, on a connection of their own without statement timeouts (setUpLongStatements): a
 * migration's copy can take many seconds on a large store, and a process started beside a migrating one must
 * wait for kysely's advisory lock (up to kysely's hour) rather than fail with an error that blames
 * DATABASE_URL. A statement waiting over MIGRATION_LOCK_TIMEOUT_MS for a lock (a transaction left open on a
 * table it changes) fails the run, which is tried again a few times, then fails the start saying so.
 */
export async function migratePostgres(databaseUrl: string): Promise<MigrationRun> {
  const pool = new (loadPg().Pool)({
    connectionString: databaseUrl,
    max: 1,
    connectionTimeoutMillis: 5_000,
    // Awaited before the connection is handed out: one it could not set up fails the run, saying why.
    onConnect: setUpLongStatements,
  });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
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

/**
 * What the database holds for this role: a Mailroom store (a migrations table it can see, with Mailroom's
 * first migration in it), none (another application's table, or none at all), or a migrations table in a
 * schema it may not use (`hiddenIn`): kysely would not see it, and would make a second, empty store in a
 * schema of the role's own. Undefined when it cannot tell (no connection): opening the store says why.
 */
export async function mailroomStoreIn(
  databaseUrl: string,
): Promise<{ held: boolean; hiddenIn?: string | undefined } | undefined> {
  const client = new (loadPg().Client)({
    connectionString: databaseUrl,
    connectionTimeoutMillis: 5_000,
    query_timeout: 5_000,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const { rows } = await client.query<{ visible: boolean; hidden: string | null }>(
      `select to_regclass('kysely_migration') is not null as visible,
        (select string_agg(n.nspname, ', ') from pg_catalog.pg_class c
          join pg_catalog.pg_namespace n on n.oid = c.relnamespace
          where c.relname = 'kysely_migration' and not has_schema_privilege(n.oid, 'USAGE')) as hidden`,
    );
    const { visible, hidden } = rows[0]!;
    if (!visible) return { held: false, hiddenIn: hidden ?? undefined };
    const first = await client.query('select 1 from kysely_migration where name = $1', [migrationNames()[0]]);
    return { held: first.rowCount !== 0 };
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => undefined);
  }
}
