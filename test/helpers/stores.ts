// Every API and delivery suite runs once per store: SQLite always, PostgreSQL when TEST_DATABASE_URL is set.
// Each test store is new: a temp directory, or a fresh database (a copy of the run's migrated template) that
// is dropped afterwards.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { Kysely, PostgresDialect, SqliteDialect } from '../../src/store/kysely.js';
import { type Store, createStore } from '../../src/store/store.js';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { migrateTo, migrationNames } from '../../src/store/migrations.js';
import type { Database } from '../../src/store/schema.js';
import { TEST_DATABASE_URL, createTestDatabase } from './databases.js';

export type StoreKind = 'sqlite' | 'postgres';

export { TEST_DATABASE_URL, createTestDatabase };
export const TEST_REDIS_URL = process.env.TEST_REDIS_URL;

let warned = false;
export function storeKinds(): StoreKind[] {
  return noPostgres() ? ['sqlite'] : ['sqlite', 'postgres'];
}

/** For `describe.skipIf`: true, with a visible warning, when TEST_DATABASE_URL is not set. */
export function noPostgres(): boolean {
  if (!TEST_DATABASE_URL && !warned) {
    warned = true;
    console.warn('\n*** TEST_DATABASE_URL is not set: PostgreSQL variants of the suites are SKIPPED ***\n');
  }
  return !TEST_DATABASE_URL;
}

let warnedRedis = false;
/** For `describe.skipIf`: true, with a visible warning, when TEST_REDIS_URL is not set. */
export function noRedis(): boolean {
  if (!TEST_REDIS_URL && !warnedRedis) {
    warnedRedis = true;
    console.warn(
      '\n*** TEST_REDIS_URL is not set: the suites that share rate limits through Redis are SKIPPED ***\n',
    );
  }
  return !TEST_REDIS_URL;
}

export interface TestStore {
  kind: StoreKind;
  store: Store;
  dataDir: string;
  databaseUrl: string | undefined;
  /** Opens another store on the same data (a restart, or a second process's view). */
  reopen(): Store;
  destroy(): Promise<void>;
}

/**
 * Whether any connection to the database waits for a lock now, as `watcher` sees it: a connection outside
 * the transactions watched (inside one, pg_stat_activity shows the same snapshot every time).
 */
export async function anyWaitingForLock(watcher: pg.Client): Promise<boolean> {
  const { rows } = await watcher.query<{ n: number }>(
    "select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'",
  );
  return rows[0]!.n > 0;
}

export async function createTestStore(kind: StoreKind): Promise<TestStore> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-test-'));
  let databaseUrl: string | undefined;
  let drop = async () => {};
  if (kind === 'postgres') {
    // A copy of the run's migrated template (test/global-postgres.ts): migrate() below then finds nothing
    // left to do, as a restarted server does.
    const db = await createTestDatabase(inject('postgresTemplate'));
    databaseUrl = db.url;
    drop = db.drop;
  }
  const open = () => createStore({ databaseUrl, dataDir, poolSize: 10 });
  const store = open();
  await store.migrate();
  return {
    kind,
    store,
    dataDir,
    databaseUrl,
    reopen: open,
    async destroy() {
      await store.close().catch(() => undefined);
      await drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A store on `kind` for the enclosing describe, handed to `set` (which may fill it); dropped after. */
export function useStore(kind: StoreKind, set: (ts: TestStore) => unknown): void {
  let ts: TestStore | undefined;
  beforeAll(async () => {
    ts = await createTestStore(kind);
    await set(ts);
  });
  afterAll(() => ts?.destroy());
}

/** A store at an older migration: its own connection, as a release before this one left it. */
export async function olderStore(kind: 'sqlite' | 'postgres', migration: string) {
  if (kind === 'sqlite') {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-counts-'));
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new Sqlite(path.join(dir, 'mailroom.sqlite')) }),
    });
    await migrateTo(db as Kysely<unknown>, kind, migration);
    return {
      db,
      dir,
      open: () => createStore({ dataDir: dir }),
      drop: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }
  const created = await createTestDatabase();
  const db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: created.url, max: 1 }) }),
  });
  await migrateTo(db as Kysely<unknown>, kind, migration);
  return {
    db,
    url: created.url,
    open: () => createStore({ databaseUrl: created.url, dataDir: tmpdir() }),
    drop: created.drop,
  };
}

/**
 * The migrations from `first` to the newest, as a store upgraded from just before `first` applies them:
 * an upgrade test names where it starts, and a new migration needs no edit of it.
 */
export function migrationsFrom(first: string): string[] {
  const names = migrationNames();
  const at = names.indexOf(first);
  if (at < 0) throw new Error(`no migration ${first}`);
  return names.slice(at);
}
