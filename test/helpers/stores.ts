// Every API and delivery suite runs once per store: SQLite always, PostgreSQL when TEST_DATABASE_URL is set.
// Each test store is new: a temp directory, or a fresh database (a copy of the run's migrated template) that
// is dropped afterwards.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, inject } from 'vitest';
import { Kysely, PostgresDialect, SqliteDialect } from '../../src/store/kysely.js';
import { type Store, createStore } from '../../src/store/store.js';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { migrateTo, migrationNames } from '../../src/store/migrations.js';
import type { Database } from '../../src/store/schema.js';

export type StoreKind = 'sqlite' | 'postgres';

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;
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

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
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

/** A new database, empty, or a copy of `template`, dropped by `drop`. */
export async function createTestDatabase(
  template?: string,
): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `mailroom_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
  await admin.end();
  return {
    url: withDatabase(TEST_DATABASE_URL!, name),
    drop: async () => {
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await c.connect();
      // A pool ended just before (pg-pool's end() resolves once its clients are told to end, not once
      // they have) may still be closing: FORCE would cut it, and a pool without an error listener throws
      // that out of the test run. Give closing connections a moment; force only what stays open.
      for (let i = 0; i < 40; i++) {
        const { rows } = await c.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
          [name],
        );
        if (rows[0]!.n === 0) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
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
