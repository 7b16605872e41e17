// A PostgreSQL backend terminated while Mailroom holds its connection (mid-transaction) must fail that
// one write as "store unavailable" and leave the process and the pool working. Another client creating
// pg_trgm while Mailroom migrates must not be taken for an extension Mailroom may not create; a role that
// may not create it migrates all the same, and email search then works without the trigram index. A start
// waits for another process's migration as long as it takes, and moving the trigram index off contacts
// goes on beside contact writes. Every connection Mailroom opens replaces the role's statement timeout,
// however short.
import { randomBytes } from 'node:crypto';
import { sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isStoreUnavailable } from '../../src/store/dialect.js';
import { type Store, createStore } from '../../src/store/store.js';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { renewLeases } from '../../src/delivery/queue.repository.js';
import { createServices } from '../../src/services.js';
import { loadConfig } from '../../src/config.js';
import { pageByEmailOnPostgres } from '../../src/search/contact-search-postgres.repository.js';
import { connectLong, setUpPoolClient } from '../../src/store/pg-client.js';
import { contactRow } from '../helpers/rows.js';
import { eventually, stallEventLoop } from '../helpers/smtp.js';
import {
  TEST_DATABASE_URL,
  type TestStore,
  anyWaitingForLock,
  createTestDatabase,
  useStore,
  noPostgres,
  olderStore,
} from '../helpers/stores.js';

const AT = '2031-07-01T00:00:00.000Z';
/** The advisory lock kysely's migrator takes on PostgreSQL (its PostgresAdapter). */
const KYSELY_MIGRATION_LOCK = '3853314791062309107';
/** The advisory lock Mailroom takes around the trigram index's build and the old one's drop (trigram-index.ts). */
const TRGM_LOCK = 0x6d72_7467;

const org = (id: string) => ({ id, name: id, created_at: AT });

/** Organisations written through `write`, each id's as it settled, on a store whose statements time out after a second. */
type Writes = (store: Store, ids: string[]) => Promise<PromiseSettledResult<unknown>[]>;

/** A store whose statements time out after a second, and an admin client of its database. */
async function withShortTimeouts(run: (store: Store, admin: pg.Client) => Promise<void>) {
  const db = await createTestDatabase();
  const store = createStore({ databaseUrl: db.url, dataDir: '', queryTimeoutMs: 1_000 });
  const admin = new pg.Client({ connectionString: db.url });
  await admin.connect();
  try {
    await store.migrate();
    await run(store, admin);
  } finally {
    await admin.end().catch(() => undefined);
    await store.close();
    await db.drop();
  }
}

/** What writes behind r3's row lock come to: only r3's waits out the timeout and is refused. */
const ONLY_R3_REFUSED = ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled'];

/** `write` behind a lock on one row (another transaction's uncommitted copy of r3's key), held 5 s. */
async function behindRowLock(store: Store, admin: pg.Client, write: Writes) {
  await admin.query('begin');
  await admin.query(`insert into organizations (id, name, created_at) values ('r3', 'x', '${AT}')`);
  const release = setTimeout(() => void admin.query('rollback'), 5_000);
  try {
    return await write(store, ['r1', 'r2', 'r3', 'r4', 'r5']);
  } finally {
    clearTimeout(release);
    await admin.query('rollback');
  }
}

describe.skipIf(noPostgres())('PostgreSQL faults', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  it('survive a backend terminated inside a transaction', async () => {
    const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await admin.connect();
    try {
      const failed = ts.store.write(async (trx) => {
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
        const pid = rows[0]!.pid;
        await admin.query('select pg_terminate_backend($1)', [pid]);
        // Between two queries of the transaction, as kysely is while a service awaits something else: the
        // next query goes to a backend that is gone (a signal, so it may take a moment to end).
        await eventually(
          async () =>
            (await admin.query('select 1 from pg_stat_activity where pid = $1', [pid])).rowCount === 0,
          10_000,
          'the terminated backend to end',
        );
        await sql`select 1`.execute(trx);
      });
      const err = await failed.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeDefined();
      expect(isStoreUnavailable(err)).toBe(true);
      // The process is still here and the pool hands out a working connection.
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(ts.store.db);
      expect(rows[0]!.one).toBe(1);
    } finally {
      await admin.end();
    }
  });

  it('take a query the server does not answer within query_timeout for the store being unavailable', async () => {
    // What a server that stops answering with the connection open (a dead host) looks like to the client.
    const client = new pg.Client({ connectionString: TEST_DATABASE_URL, query_timeout: 100 });
    await client.connect();
    try {
      const err = await client.query('select pg_sleep(2)').then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(String(err)).toMatch(/Query read timeout/);
      expect(isStoreUnavailable(err)).toBe(true);
    } finally {
      await client.end().catch(() => undefined);
    }
  });

  // The server's statement_timeout (900 ms here) comes before the pool's query_timeout (1 s), but a process
  // whose event loop stalls across the gap between them runs the pool's timer before it reads the server's
  // answer (CI's host did, and the batch was written again one caller after another).
  it.each([
    ['the server stops it', false],
    ['the pool gives up first, its process stalled', true],
  ])(
    'write a batch of appends stopped by statement_timeout again all at once, not one caller after another (%s)',
    async (_, stall) => {
      const write: Writes = (store, ids) =>
        Promise.allSettled(ids.map((id) => store.append([{ table: 'organizations', rows: [org(id)] }])));
      await withShortTimeouts(async (store, admin) => {
        // A lock held for four statement timeouts on the whole table (a migration, an operator). Written
        // again one by one, each caller waited the timeout out in turn, and those whose turn came after the
        // lock went were written late; all at once, the timeout is waited out once more.
        await admin.query('begin');
        await admin.query('lock table organizations in share mode');
        const release = setTimeout(() => void admin.query('rollback'), 4_000);
        if (stall) {
          // From 800 ms to 1,100 ms of the first write. A stall in the check phase: the loop next runs the
          // timers that came due during it, then reads the sockets.
          setTimeout(() => setImmediate(() => stallEventLoop(300)), 800);
        }
        const table = await write(store, ['t1', 't2', 't3', 't4', 't5', 't6']);
        clearTimeout(release);
        await admin.query('rollback');
        expect(table.map((r) => r.status)).toEqual(Array(6).fill('rejected'));
        for (const r of table) expect(isStoreUnavailable((r as PromiseRejectedResult).reason)).toBe(true);
        const written = await store.db
          .selectFrom('organizations')
          .select('id')
          .where('id', 'like', 't%')
          .execute();
        expect(written).toEqual([]);
        if (stall) return;
        // Behind one row's lock, only its caller fails.
        const row = await behindRowLock(store, admin, write);
        expect(row.map((r) => r.status)).toEqual(ONLY_R3_REFUSED);
      });
    },
  );

  it('fail only the write of a batch whose row lock outlasts statement_timeout, whatever joins the next batch', async () => {
    // store.batch (group commit): writes queued in one tick share one transaction, each in its savepoint.
    // The worker's lease renewals and results meet a row an operator holds this way: the other writes of
    // the batch, and those queued while it waits (another try of the same row among them), go through.
    await withShortTimeouts(async (store, admin) => {
      const row = (id: string) =>
        store.batch((trx) => trx.insertInto('organizations').values(org(id)).execute());
      let again: Promise<unknown> | undefined;
      const settled = await behindRowLock(store, admin, (_store, ids) => {
        setTimeout(() => (again = row('r3').catch(() => undefined)), 300);
        return Promise.allSettled(ids.map(row));
      });
      await again;
      expect(settled.map((r) => r.status)).toEqual(ONLY_R3_REFUSED);
    });
  });

  it("renew a worker's other leases while another transaction holds one of its emails' rows", async () => {
    await withShortTimeouts(async (store, admin) => {
      const services = createServices({ config: loadConfig({ LOG_LEVEL: 'silent' }), store });
      const org = (await services.orgs.create('leases')).id;
      const ids: string[] = [];
      for (const to of ['a@x.test', 'b@x.test', 'c@x.test']) {
        ids.push((await services.emails.send(org, { to: [to], subject: 's', text: 't' })).id);
      }
      const soon = new Date(Date.now() + 60_000).toISOString();
      await store.db
        .updateTable('emails')
        .set({ status: 'sending', lease_owner: 'w1', lease_until: soon, next_attempt_at: soon })
        .execute();
      // An operator's open transaction on the first email's row, past the store's statement timeout.
      await admin.query('begin');
      await admin.query(`update emails set updated_at = updated_at where id = $1`, [ids[0]]);
      try {
        const later = new Date(Date.now() + 120_000).toISOString();
        // Waiting for that row, the renewal timed out, and every held email's lease with it.
        const renewed = await store.batch((trx) => renewLeases(trx, 'w1', ids, later));
        expect(renewed.sort()).toEqual(ids.slice(1).sort());
      } finally {
        await admin.query('rollback');
      }
    });
  });

  it('never commit a write the pool gave up on, whether the server stopped its statement or the pool stopped waiting', async () => {
    const db = await createTestDatabase();
    const store = createStore({ databaseUrl: db.url, dataDir: '', queryTimeoutMs: 1_000 });
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query('create table probe (k text primary key)');
      // Each write waits on a lock held past the pool's patience (a migration, a frozen process).
      const blocked = async (k: string, serverStops: boolean) => {
        await admin.query('begin');
        await admin.query('lock table probe in exclusive mode');
        const err = await store
          .write(async (trx) => {
            // Without its statement_timeout, only the pool's query_timeout ends the wait.
            if (!serverStops) await sql`set local statement_timeout = 0`.execute(trx);
            await sql`insert into probe values (${k})`.execute(trx);
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        await admin.query('rollback');
        expect([k, isStoreUnavailable(err)]).toEqual([k, true]);
        // The server stops the statement a moment before the pool would stop waiting (statement_timeout),
        // and the backend with it: no statement is left waiting on the lock.
        if (serverStops) expect((err as { code?: string }).code).toBe('57014');
        // Writes after it, on the pool's connections (the one that gave up first: the pool hands out the
        // last one back): a COMMIT of theirs had committed the abandoned insert with them.
        for (let i = 0; i < 12; i++) {
          await store.write((trx) => sql`insert into probe values (${`${k}-after-${i}`})`.execute(trx));
        }
        const { rows } = await admin.query('select k from probe where k = $1', [k]);
        expect([k, rows]).toEqual([k, []]);
      };
      await blocked('stopped-by-server', true);
      await blocked('given-up-by-pool', false);
      // A transaction left idle (its process frozen mid-write) is ended by the server after twice the
      // pool's patience, and what it wrote with it: its locks no longer hold the other processes up.
      const idle = await store
        .write(async (trx) => {
          await sql`insert into probe values ('left-idle')`.execute(trx);
          await new Promise((resolve) => setTimeout(resolve, 2_500));
          await sql`select 1`.execute(trx);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(isStoreUnavailable(idle)).toBe(true);
      const { rows } = await admin.query("select k from probe where k = 'left-idle'");
      expect(rows).toEqual([]);
    } finally {
      await store.close();
      await admin.end();
      await db.drop();
    }
  });

  it('wait out another client creating pg_trgm at the same moment, then create the index', async () => {
    const db = await createTestDatabase();
    const other = new pg.Client({ connectionString: db.url });
    // Outside the other's transaction: inside it, pg_stat_activity would show the same snapshot every time.
    const watcher = new pg.Client({ connectionString: db.url });
    await Promise.all([other.connect(), watcher.connect()]);
    const store = createStore({ databaseUrl: db.url, dataDir: '' });
    try {
      await other.query('begin');
      await other.query('create extension if not exists pg_trgm');
      const migrating = store.migrate();
      // Mailroom's own create waits on the other's uncommitted one; then the other commits.
      await eventually(
        () => anyWaitingForLock(watcher),
        10_000,
        'the migration waiting for the other client',
      );
      await other.query('commit');
      expect((await migrating).warnings).toEqual([]);
      const { rows } = await other.query(
        "select 1 from pg_indexes where indexname = 'contact_addresses_trgm'",
      );
      expect(rows).toHaveLength(1);
    } finally {
      await store.close();
      await Promise.all([other.end(), watcher.end()]);
      await db.drop();
    }
  });

  it('migrate a migrated store again (every start, every CLI command) without waiting on open writes of contacts', async () => {
    // A write of contacts left open, as by a process stopped mid-transaction.
    const writer = new pg.Client({ connectionString: ts.databaseUrl });
    const watcher = new pg.Client({ connectionString: ts.databaseUrl });
    await Promise.all([writer.connect(), watcher.connect()]);
    const store = ts.reopen();
    try {
      await writer.query('begin');
      await writer.query('lock table contact_addresses in row exclusive mode');
      let migrated = false;
      const migrating = store.migrate().then(() => (migrated = true));
      // Either the migration is done, or something of it waits for a lock (then for as long as the writer
      // stays open, and every other process's contact writes behind it).
      let waiting = false;
      while (!migrated && !waiting) {
        waiting = await anyWaitingForLock(watcher);
        await new Promise((r) => setTimeout(r, 20));
      }
      expect({ migrated, waiting }).toEqual({ migrated: true, waiting: false });
      await migrating;
    } finally {
      await writer.query('rollback');
      await Promise.all([writer.end(), watcher.end()]);
      await store.close();
    }
  });

  it('wait for another process migrating, however much longer than a statement may take', async () => {
    const db = await createTestDatabase();
    const other = new pg.Client({ connectionString: db.url });
    const watcher = new pg.Client({ connectionString: db.url });
    await Promise.all([other.connect(), watcher.connect()]);
    // Statements of the pool stopped after 1.8 s: waiting for kysely's migration lock on a pool connection
    // failed then (14 s by default: a start beside a long migration exited, blaming DATABASE_URL).
    const store = createStore({ databaseUrl: db.url, dataDir: '', queryTimeoutMs: 2_000 });
    try {
      await other.query(`select pg_advisory_lock(${KYSELY_MIGRATION_LOCK})`);
      let settled = false;
      const migrating = store.migrate().finally(() => (settled = true));
      await eventually(() => anyWaitingForLock(watcher), 10_000, 'the migration waiting for the other');
      await new Promise((r) => setTimeout(r, 3_000));
      expect(settled).toBe(false);
      await other.query(`select pg_advisory_unlock(${KYSELY_MIGRATION_LOCK})`);
      expect((await migrating).applied).toContain('0016_contact_addresses');
    } finally {
      await store.close();
      await Promise.all([other.end(), watcher.end()]);
      await db.drop();
    }
  });

  it('move the trigram index to contact_addresses beside a contact write, deadlocking with none', async () => {
    // As after a rolling deploy: an older process started after the upgrade built its index on contacts.
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    const writer = new pg.Client({ connectionString: db.url });
    await Promise.all([admin.connect(), writer.connect()]);
    const store = createStore({ databaseUrl: db.url, dataDir: '' });
    const deadlocks = async () => {
      await admin.query('select pg_stat_clear_snapshot()');
      const { rows } = await admin.query<{ n: string }>(
        'select deadlocks as n from pg_stat_database where datname = current_database()',
      );
      return Number(rows[0]!.n);
    };
    try {
      await store.migrate();
      await admin.query('drop index contact_addresses_trgm');
      await admin.query('create index contacts_email_trgm on contacts using gin (email_lower gin_trgm_ops)');
      await store.db.insertInto('organizations').values({ id: 'o', name: 'o', created_at: AT }).execute();
      await insertContacts(store.db, [
        { row: { ...contactRow('o', 'c1', 'first@move.test', AT), json: null }, tags: [] },
      ]);
      const before = await deadlocks();
      // A contact write under way: contacts locked, then (by 0016's trigger) its address.
      await writer.query('begin');
      await writer.query('lock table contacts in row exclusive mode');
      const migrating = store.migrate();
      await eventually(() => anyWaitingForLock(admin), 10_000, 'the old index waiting for the write');
      const updated = await writer
        .query(
          "update contacts set email = 'moved@move.test', email_lower = 'moved@move.test' where id = 'c1'",
        )
        .then(
          (r) => r.rowCount,
          (err: unknown) => err,
        );
      await writer.query('commit');
      expect(updated).toBe(1);
      expect(await migrating).toEqual({ applied: [], warnings: [] });
      // The old index goes in the background, once the write has ended.
      const trigramIndexes = async () =>
        (
          await admin.query<{ name: string }>(
            "select indexname as name from pg_indexes where indexname like '%trgm'",
          )
        ).rows;
      await eventually(async () => (await trigramIndexes()).length === 1, 10_000, 'the old index dropped');
      expect(await trigramIndexes()).toEqual([{ name: 'contact_addresses_trgm' }]);
      // Dropped with the new index's lock held, the old index waited for the write and the write for
      // that lock: PostgreSQL killed one of them (the drop, tried again once, which then got through).
      await new Promise((r) => setTimeout(r, 1_000));
      expect(await deadlocks()).toBe(before);
    } finally {
      await store.close();
      await Promise.all([admin.end(), writer.end()]);
      await db.drop();
    }
  });

  it('let other writes through while a migration waits for a transaction left open, and migrate after it', async () => {
    const old = await olderStore('postgres', '0015_address_chunks_by_domain');
    await old.db.destroy();
    const writer = new pg.Client({ connectionString: old.url });
    const other = new pg.Client({ connectionString: old.url });
    const watcher = new pg.Client({ connectionString: old.url });
    await Promise.all([writer.connect(), other.connect(), watcher.connect()]);
    const store = old.open();
    try {
      // A write of contacts left open: 0016 locks contacts, and waits for it.
      await writer.query('begin');
      await writer.query('lock table contacts in row exclusive mode');
      const migrating = store.migrate();
      await eventually(() => anyWaitingForLock(watcher), 10_000, 'the migration waiting for the writer');
      // Queued behind the migration's lock for as long as that waited (an hour): now until its lock wait
      // times out, and it gets through while the migration waits to try again.
      const through = await Promise.race([
        other.query('update contacts set updated_at = updated_at where id = $1', ['nobody']).then(() => true),
        new Promise((r) => setTimeout(() => r(false), 20_000)),
      ]);
      expect(through).toBe(true);
      await writer.query('commit');
      expect((await migrating).applied).toContain('0016_contact_addresses');
    } finally {
      await writer.query('rollback').catch(() => undefined);
      await store.close();
      await Promise.all([writer.end(), other.end(), watcher.end()]);
      await old.drop();
    }
  });

  it('migrate, build the trigram index and set up every connection whatever statement timeout the role has', async () => {
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    const name = new URL(db.url).pathname.slice(1);
    let store: Store | undefined;
    try {
      // At 1 ms the role's timeout cancels about one in a hundred of the SETs that lift it (CI, 2026-12-01).
      await admin.query(`alter database ${name} set statement_timeout = '1ms'`);
      store = createStore({ databaseUrl: db.url, dataDir: '', queryTimeoutMs: 5_000 });
      expect((await store.migrate()).warnings).toEqual([]);
      const { rows } = await admin.query(
        "select 1 from pg_indexes where indexname = 'contact_addresses_trgm'",
      );
      expect(rows).toHaveLength(1);
      // A migration run opens a connection of its own each time (every start, every CLI command).
      for (let i = 0; i < 10; i++) expect(await store.migrate()).toEqual({ applied: [], warnings: [] });
      const timeouts = new Map<string, number>();
      const note = (t: string) => timeouts.set(t, (timeouts.get(t) ?? 0) + 1);
      for (let i = 0; i < 100; i++) {
        const long = await connectLong(db.url);
        note(
          `long ${(await long.query<{ t: string }>("select current_setting('statement_timeout') t")).rows[0]!.t}`,
        );
        await long.end();
        const pooled = new pg.Client({ connectionString: db.url });
        await pooled.connect();
        await setUpPoolClient(pooled, 5_000);
        note(
          `pool ${(await pooled.query<{ t: string }>("select current_setting('statement_timeout') t")).rows[0]!.t}`,
        );
        await pooled.end();
      }
      expect(Object.fromEntries(timeouts)).toEqual({ 'long 0': 100, 'pool 4500ms': 100 });
      // The store's own pool: a statement longer than the role's 1 ms on each of several new connections.
      const slept = await Promise.all(
        Array.from({ length: 8 }, () =>
          sql<{ ok: number }>`select 1 as ok from pg_sleep(0.01)`.execute(store!.db),
        ),
      );
      expect(slept.map((r) => r.rows[0]!.ok)).toEqual(Array(8).fill(1));
    } finally {
      await store?.close();
      await admin.end();
      await db.drop();
    }
  });

  it('leave a missing trigram index to the process building it, and one-shot commands to servers, waiting for neither', async () => {
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    const writer = new pg.Client({ connectionString: db.url });
    const watcher = new pg.Client({ connectionString: db.url });
    await Promise.all([admin.connect(), writer.connect(), watcher.connect()]);
    const first = createStore({ databaseUrl: db.url, dataDir: '' });
    const second = createStore({ databaseUrl: db.url, dataDir: '' });
    const oneShot = createStore({ databaseUrl: db.url, dataDir: '', backgroundMigrationWork: false });
    try {
      await first.migrate();
      await admin.query('drop index contact_addresses_trgm');
      // An open write of the addresses: the index's build waits for it (5 s, then left to the next start).
      await writer.query('begin');
      await writer.query('lock table contact_addresses in row exclusive mode');
      const building = first.migrate();
      await eventually(() => anyWaitingForLock(watcher), 10_000, 'the build waiting for the write');
      // Neither waits its turn behind the build, nor for the write (each waited 5 s, one after another).
      let waited = false;
      const others = Promise.all([second.migrate(), oneShot.migrate()]).finally(() => (waited = true));
      const [fromSecond, fromOneShot] = await Promise.race([
        others,
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error('they waited')), 4_000)),
      ]);
      const none = { applied: [], warnings: [] };
      expect({ waited, fromSecond, fromOneShot }).toEqual({
        waited: true,
        fromSecond: none,
        fromOneShot: none,
      });
      // Within its 5 s: the build goes on once the write has ended.
      await writer.query('commit');
      expect(await building).toEqual({ applied: [], warnings: [] });
      const { rows } = await admin.query(
        "select 1 from pg_indexes where indexname = 'contact_addresses_trgm'",
      );
      expect(rows).toHaveLength(1);
    } finally {
      await writer.query('rollback').catch(() => undefined);
      await Promise.all([first.close(), second.close(), oneShot.close()]);
      await Promise.all([admin.end(), writer.end(), watcher.end()]);
      await db.drop();
    }
  });

  it("drop the old trigram index once another process's build of the new one is done", async () => {
    const db = await createTestDatabase();
    const admin = new pg.Client({ connectionString: db.url });
    const builder = new pg.Client({ connectionString: db.url });
    await Promise.all([admin.connect(), builder.connect()]);
    const store = createStore({ databaseUrl: db.url, dataDir: '' });
    const trigramIndexes = async () =>
      (
        await admin.query<{ name: string }>(
          "select indexname as name from pg_indexes where indexname like '%trgm' order by 1",
        )
      ).rows.map((r) => r.name);
    try {
      await store.migrate();
      await admin.query('drop index contact_addresses_trgm');
      await admin.query('create index contacts_email_trgm on contacts using gin (email_lower gin_trgm_ops)');
      // Another process (the one-shot `migrate` that applied 0016, say) is building the new index.
      await builder.query(`select pg_advisory_lock(${TRGM_LOCK})`);
      expect(await store.migrate()).toEqual({ applied: [], warnings: [] });
      await builder.query(
        'create index contact_addresses_trgm on contact_addresses using gin (email_lower gin_trgm_ops)',
      );
      await builder.query(`select pg_advisory_unlock(${TRGM_LOCK})`);
      // This server, long-running, drops the old one (it waited for the build, and it was left behind).
      await eventually(async () => (await trigramIndexes()).length === 1, 10_000, 'the old index dropped');
      expect(await trigramIndexes()).toEqual(['contact_addresses_trgm']);
    } finally {
      await store.close();
      await Promise.all([admin.end(), builder.end()]);
      await db.drop();
    }
  });

  it('migrate for a role that may not create pg_trgm, and then search without the index', async () => {
    const db = await createTestDatabase();
    const role = `mailroom_restricted_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    let store: Store | undefined;
    try {
      // May create tables in the schema, not extensions in the database (pg_trgm is trusted: that takes
      // CREATE on the database).
      await admin.query(`create role ${role} login`);
      await admin.query(`grant create on schema public to ${role}`);
      const url = new URL(db.url);
      url.username = role;
      store = createStore({ databaseUrl: url.toString(), dataDir: '' });
      expect((await store.migrate()).warnings).toEqual(['pg_trgm unavailable: email substring search scans']);
      const { rows: indexes } = await admin.query("select 1 from pg_indexes where indexname like '%trgm%'");
      expect(indexes).toEqual([]);
      // The old matches are sorted and counted out of the narrow table, scanned.
      const org = 'restricted';
      await store.db.insertInto('organizations').values({ id: org, name: org, created_at: AT }).execute();
      const made = Array.from({ length: 60 }, (_, i) => {
        const at = new Date(Date.parse(AT) + i * 1000).toISOString();
        const email = i < 10 ? `old${i}@legacy.test` : `new${i}@d.test`;
        return { row: { ...contactRow(org, `r${i}`, email, at), json: null }, tags: [] };
      });
      await insertContacts(store.db, made);
      const got = await pageByEmailOnPostgres(
        store.db,
        org,
        { email: 'LEGACY' },
        { page: 1, limit: 4 },
        undefined,
        {
          walkBudget: 5,
          trigramMs: 10_000,
        },
      );
      expect(got?.total).toBe(10);
      expect(got?.contacts?.map((j) => (JSON.parse(j) as { id: string }).id)).toEqual([
        'r9',
        'r8',
        'r7',
        'r6',
      ]);
    } finally {
      await store?.close();
      await admin.end();
      await db.drop();
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await c.connect();
      await c.query(`drop role if exists ${role}`);
      await c.end();
    }
  });
});
