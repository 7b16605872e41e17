// Store on PostgreSQL (store.ts): one pool, a transaction per write (run again on a deadlock), and what
// migrating starts: the migrations on a connection of their own, then the trigram index.
import { Kysely, PostgresDialect, sql } from './kysely.js';
import { loadPg } from '../optional-packages.js';
import { InterruptiblePool } from './interruptible-pool.js';
import type { Database } from './schema.js';
import { isLockTimeout, isRetryableConflict } from './dialect.js';
import { Appender } from './appender.js';
import { GroupCommit } from './group-commit.js';
import { allowSnapshotConnections } from './snapshot.js';
import { newerReleaseNote } from './migrations.js';
import { foldCountShards } from './counts.js';
import { foldAddressChunks } from '../search/address-chunks-postgres.js';
import { postgresKeyChanges } from './key-changes.js';
import { migratePostgres } from './postgres-migrate.js';
import { createTrigramIndex, dropOldTrigramIndex, trigramIndexNote } from '../search/trigram-index.js';
import { aloneOnPostgres } from './postgres-alone.js';
import { healthPinger, setUpPoolClient } from './pg-client.js';
import type { Store, StoreOptions } from './store.js';

/**
 * Runs a PostgreSQL write again when it lost a deadlock or a serialization conflict: writers that lock the
 * same rows in different orders (a contact and its tags, say) back off a little and run again.
 */
async function retryingConflicts<T>(write: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await write();
    } catch (err) {
      if (attempt >= 5 || !isRetryableConflict(err)) throw err;
      await new Promise((r) => setTimeout(r, attempt * 10 + Math.random() * 20));
    }
  }
}

const FOLD_EVERY_MS = 60_000;

/** How often each process merges the rows the contacts' writes add to the address chunks (0012). */
const FOLD_CHUNKS_EVERY_MS = 5_000;

/** `background`: a long-running process's store, which may do work of its own after migrating. */
export function createPostgresStore(
  databaseUrl: string,
  poolSize: number,
  queryTimeoutMs: number,
  background: boolean,
  onBackgroundError: StoreOptions['onBackgroundError'],
): Store {
  let dropping: ReturnType<typeof dropOldTrigramIndex> | undefined;
  const pool = new (loadPg().Pool)({
    connectionString: databaseUrl,
    max: poolSize,
    connectionTimeoutMillis: 5_000,
    query_timeout: queryTimeoutMs,
    // Awaited before the client is handed out; one whose settings failed is ended and its caller told.
    onConnect: (client) => setUpPoolClient(client, queryTimeoutMs),
  });
  // An idle client losing its connection (server restart) must not crash the process; the pool replaces it.
  pool.on('error', () => undefined);
  // The same for a client that is checked out (inside a transaction, between two queries) when its
  // backend is terminated: without a listener its 'error' event would crash the process. The query
  // that was waiting fails on its own, and the pool drops the broken client.
  pool.on('connect', (client) => client.on('error', () => undefined));
  const interruptible = new InterruptiblePool(pool, databaseUrl);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  // Counts that read one snapshot on several connections leave one of the pool for everything else.
  allowSnapshotConnections(db, poolSize - 1);
  const group = new GroupCommit<Database>((fn) => db.transaction().execute(fn));
  // A few batches at once: each waits on round trips and its commit, and the pool has room for reads.
  const appender = new Appender<Database>((fn) => db.transaction().execute(fn), {
    concurrency: Math.max(1, Math.floor(poolSize / 3)),
    direct: db,
    retrying: retryingConflicts,
  });
  // Counter rows pile up one per connection that wrote (0005); merge them now and then. A failed fold
  // (store down, not yet migrated) changes nothing and is tried again next time.
  const folding = setInterval(() => void foldCountShards(db).catch(() => undefined), FOLD_EVERY_MS);
  folding.unref();
  // The same for the address chunks, which pile up a row per statement: sooner, as a search reads them all.
  const foldingChunks = setInterval(
    () => void foldAddressChunks(db).catch(() => undefined),
    FOLD_CHUNKS_EVERY_MS,
  );
  foldingChunks.unref();
  const health = healthPinger(databaseUrl);
  const keyChanges = postgresKeyChanges(databaseUrl, async (channel) => {
    await sql`select pg_notify(${channel}, '')`.execute(db);
  });
  return {
    dialect: 'postgres',
    db,
    longReads: db,
    longReadsIdle: () => true,
    keyChanges,
    batch: (fn) => group.run(fn),
    append: (rows) => appender.append(rows),
    write: (fn) => retryingConflicts(() => db.transaction().execute(fn)),
    snapshot: (fn) =>
      db.transaction().setIsolationLevel('repeatable read').setAccessMode('read only').execute(fn),
    alone: (name, fn) => aloneOnPostgres(databaseUrl, queryTimeoutMs, name, fn),
    async migrate() {
      const { applied, newer } = await migratePostgres(databaseUrl);
      // The trigram index (on 0016's narrow table of addresses) makes email substring search fast; it needs
      // the pg_trgm extension, which a restricted role may not be allowed to create, and search works without
      // it, only slower. Built by a server or worker, or by the command that applied migrations; other
      // one-shot commands leave it to them, or each would wait for it. Another client creating the extension
      // at the same moment fails the first try (Mailroom's own processes take turns: TRGM_LOCK), so a failure
      // other than a lock wait is tried once more.
      const warnings = newer.length > 0 ? [newerReleaseNote(newer)] : [];
      if (!background && applied.length === 0) return { applied, warnings };
      const trigramIndex = () => createTrigramIndex(databaseUrl);
      try {
        const { old } = await trigramIndex().catch((err: unknown) => {
          if (isLockTimeout(err)) throw err;
          return trigramIndex();
        });
        if (old && background) {
          dropping ??= dropOldTrigramIndex(databaseUrl, (err) =>
            onBackgroundError?.(err, 'dropping the trigram index of before migration 0016'),
          );
        }
      } catch (err) {
        warnings.push(trigramIndexNote(err));
      }
      return { applied, warnings };
    },
    ping: () => health.ping(),
    interrupt: () => interruptible.interrupt(),
    async close() {
      clearInterval(folding);
      clearInterval(foldingChunks);
      dropping?.stop();
      await dropping?.done;
      await keyChanges.close();
      await health.close();
      await appender.idle();
      await group.idle();
      await db.destroy();
    },
  };
}
