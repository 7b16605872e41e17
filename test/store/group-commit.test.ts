import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fs, { writeFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { Kysely, SqliteDialect, sql } from '../../src/store/kysely.js';
import { Appender } from '../../src/store/appender.js';
import { type Store, type StoreOptions, createStore } from '../../src/store/store.js';
import { GroupCommit, sqliteImmediateTransaction } from '../../src/store/group-commit.js';
import { type StoreKind, type TestStore, createTestStore, storeKinds } from '../helpers/stores.js';
import { eventually } from '../helpers/smtp.js';
import { OFF_LOOP_MS, SLOW_SYNC_MS, WalSync } from '../../src/store/wal-sync.js';
import type { Database } from '../../src/store/schema.js';

const ORG = { id: 'org-1', name: 'Org', created_at: '2026-01-01T00:00:00.000Z' };

describe.each(storeKinds())('store writes on %s', (kind: StoreKind) => {
  let ts: TestStore;
  afterEach(() => ts.destroy());

  it('commits concurrent writes together, and a failing write rolls back only itself', async () => {
    ts = await createTestStore(kind);
    await ts.store.write((trx) => trx.insertInto('organizations').values(ORG).execute());
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        ts.store.write(async (trx) => {
          await trx
            .insertInto('organizations')
            .values({ id: `o${i}`, name: `n${i}`, created_at: ORG.created_at })
            .execute();
          // Every fifth write inserts a duplicate key after its first insert: all of it must vanish.
          if (i % 5 === 0) await trx.insertInto('organizations').values(ORG).execute();
          return i;
        }),
      ),
    );
    expect(results.filter((r) => r.status === 'rejected')).toHaveLength(10);
    const rows = await ts.store.db.selectFrom('organizations').select('id').execute();
    const ids = new Set(rows.map((r) => r.id));
    expect(ids.size).toBe(41);
    for (let i = 0; i < 50; i++) expect(ids.has(`o${i}`)).toBe(i % 5 !== 0);
  });

  it('appends concurrent rows together, and refused rows fail only their own caller', async () => {
    ts = await createTestStore(kind);
    await ts.store.write((trx) => trx.insertInto('organizations').values(ORG).execute());
    const org = (i: number) => ({ id: `a${i}`, name: `n${i}`, created_at: ORG.created_at });
    const results = await Promise.allSettled(
      Array.from({ length: 60 }, (_, i) =>
        ts.store.append([
          // Every seventh caller repeats an existing key in its second table: none of its rows may land.
          { table: 'organizations', rows: [org(i), org(i + 1000)] },
          { table: 'organizations', rows: i % 7 === 0 ? [ORG] : [org(i + 2000)] },
        ]),
      ),
    );
    const refused = results.flatMap((r, i) => (r.status === 'rejected' ? [i] : []));
    expect(refused).toEqual([0, 7, 14, 21, 28, 35, 42, 49, 56]);
    const ids = new Set(
      (await ts.store.db.selectFrom('organizations').select('id').execute()).map((r) => r.id),
    );
    expect(ids.size).toBe(1 + 3 * (60 - refused.length));
    for (let i = 0; i < 60; i++) {
      for (const id of [`a${i}`, `a${i + 1000}`, `a${i + 2000}`]) expect(ids.has(id)).toBe(i % 7 !== 0);
    }
  });

  it('appends parents and children of many callers at once; a refused child takes only its caller down', async () => {
    ts = await createTestStore(kind);
    const at = ORG.created_at;
    const list = (id: string, org: string) => ({
      id,
      organization_id: org,
      name: id,
      description: null,
      contact_count: 0,
      created_at: at,
      updated_at: at,
    });
    await ts.store.write(async (trx) => {
      await trx.insertInto('organizations').values(ORG).execute();
      await trx.insertInto('lists').values(list('taken', ORG.id)).execute();
    });
    const results = await Promise.allSettled(
      Array.from({ length: 40 }, (_, i) =>
        ts.store.append([
          { table: 'organizations', rows: [{ id: `p${i}`, name: `p${i}`, created_at: at }] },
          // Children refer to the parent appended beside them; every tenth repeats a taken list id.
          { table: 'lists', rows: [list(`l${i}`, `p${i}`), list(i % 10 === 3 ? 'taken' : `m${i}`, `p${i}`)] },
        ]),
      ),
    );
    const refused = results.flatMap((r, i) => (r.status === 'rejected' ? [i] : []));
    expect(refused).toEqual([3, 13, 23, 33]);
    const orgs = new Set(
      (await ts.store.db.selectFrom('organizations').select('id').execute()).map((r) => r.id),
    );
    const lists = new Set((await ts.store.db.selectFrom('lists').select('id').execute()).map((r) => r.id));
    for (let i = 0; i < 40; i++) {
      const kept = !refused.includes(i);
      expect([orgs.has(`p${i}`), lists.has(`l${i}`)]).toEqual([kept, kept]);
    }
    expect(lists.size).toBe(1 + 2 * 36);
  });

  it('appends more rows in one call than one statement may bind', async () => {
    ts = await createTestStore(kind);
    const rows = Array.from({ length: 12_000 }, (_, i) => ({
      id: `big${i}`,
      name: `n${i}`,
      created_at: ORG.created_at,
    }));
    await ts.store.append([{ table: 'organizations', rows }]);
    const { rows: count } = await sql<{ n: number }>`select count(*) as n from organizations`.execute(
      ts.store.db,
    );
    expect(Number(count[0]!.n)).toBe(12_000);
  });

  it('keeps what a write committed after the store is closed and opened again', async () => {
    ts = await createTestStore(kind);
    await ts.store.write((trx) => trx.insertInto('organizations').values(ORG).execute());
    await ts.store.close();
    const again = ts.reopen();
    const row = await again.db
      .selectFrom('organizations')
      .selectAll()
      .where('id', '=', ORG.id)
      .executeTakeFirst();
    expect(row).toEqual({ ...ORG, is_default: 0 });
    await again.close();
  });

  it('a throw inside write() rejects that caller and leaves no trace', async () => {
    ts = await createTestStore(kind);
    await expect(
      ts.store.write(async (trx) => {
        await trx.insertInto('organizations').values(ORG).execute();
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    const { rows } = await sql<{ n: number }>`select count(*) as n from organizations`.execute(ts.store.db);
    expect(Number(rows[0]!.n)).toBe(0);
  });
});

describe('group commit on sqlite', () => {
  let ts: TestStore;
  afterEach(() => ts.destroy());

  it("fails the batch with a write's own error when that error ended the whole transaction (a full disk)", async () => {
    // SQLite rolls the whole transaction back when a statement cannot write its undo journal (a full disk,
    // an I/O error): the savepoint is gone, and rolling back to it failed with "no such savepoint: w",
    // which every write of the batch then got instead of SQLITE_FULL (a 500 where the store's 503 was due).
    ts = await createTestStore('sqlite');
    const full = Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        ts.store.write(async (trx) => {
          await trx
            .insertInto('organizations')
            .values({ id: `f${i}`, name: `n${i}`, created_at: ORG.created_at })
            .execute();
          if (i === 3) {
            await sql`rollback`.execute(trx);
            throw full;
          }
          return i;
        }),
      ),
    );
    const refused = results.flatMap((r, i) => (r.status === 'rejected' ? [[i, r.reason]] : []));
    expect(refused.map(([i]) => i)).toContain(3);
    for (const [i, reason] of refused)
      expect([i, (reason as { code?: string }).code]).toEqual([i, 'SQLITE_FULL']);
    // What was refused is not there; what was answered is.
    const rows = await ts.store.db
      .selectFrom('organizations')
      .select('id')
      .where('id', 'like', 'f%')
      .execute();
    expect(rows.map((r) => r.id).sort()).toEqual(
      results.flatMap((r, i) => (r.status === 'fulfilled' ? [`f${i}`] : [])).sort(),
    );
  });
});

describe('sqlite settings', () => {
  it('creates DATA_DIR for the owner only, and the database and search index with their WAL files 0600', async () => {
    const parent = mkdtempSync(path.join(tmpdir(), 'mailroom-mode-'));
    const dataDir = path.join(parent, 'data');
    const store = createStore({ dataDir });
    try {
      await store.migrate();
      expect(statSync(dataDir).mode & 0o777).toBe(0o700);
      // keys-changed: the word that a key was revoked (store/key-changes.ts).
      for (const name of ['mailroom.sqlite', 'mailroom.sqlite-wal', 'mailroom.sqlite-shm', 'keys-changed']) {
        expect([name, statSync(path.join(dataDir, name)).mode & 0o777]).toEqual([name, 0o600]);
      }
      // The index file's WAL files exist while a connection has it open (its thread may not have yet).
      const search = ['mailroom-search.sqlite', 'mailroom-search.sqlite-wal', 'mailroom-search.sqlite-shm'];
      expect(existsSync(path.join(dataDir, search[0]!))).toBe(true);
      for (const name of search.filter((n) => existsSync(path.join(dataDir, n)))) {
        expect([name, statSync(path.join(dataDir, name)).mode & 0o777]).toEqual([name, 0o600]);
      }
    } finally {
      await store.close();
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('makes every missing level of DATA_DIR, each 0700', async () => {
    const parent = mkdtempSync(path.join(tmpdir(), 'mailroom-levels-'));
    try {
      const dataDir = path.join(parent, 'a', 'b', 'data');
      await createStore({ dataDir }).close();
      for (const dir of [path.join(parent, 'a'), path.join(parent, 'a', 'b'), dataDir]) {
        expect([dir, statSync(dir).mode & 0o777]).toEqual([dir, 0o700]);
      }
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  it('runs WAL with foreign keys on, the writer committing NORMAL while the store syncs each commit', async () => {
    const ts = await createTestStore('sqlite');
    try {
      const pragma = async (db: Kysely<Database>, name: string) =>
        Object.values((await sql.raw(`pragma ${name}`).execute(db)).rows[0] as object)[0];
      expect(await pragma(ts.store.db, 'journal_mode')).toBe('wal');
      expect(await pragma(ts.store.db, 'foreign_keys')).toBe(1);
      // 1: NORMAL, no sync inside COMMIT; the FULL sync is the store's own (wal-sync.ts, next test).
      expect(await ts.store.write((trx) => pragma(trx, 'synchronous'))).toBe(1);
    } finally {
      await ts.destroy();
    }
  });

  it("answers a write only after its commit's sync; after a slow sync, made off the event loop while requests go on", async () => {
    const synced: string[] = [];
    let slow = false;
    let hold: Promise<void> | undefined;
    vi.spyOn(fs, 'fdatasyncSync').mockImplementation(() => {
      // A disk slow to sync: 30 ms, past SLOW_SYNC_MS.
      if (slow) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 30);
      synced.push('inline');
    });
    vi.spyOn(fs, 'fdatasync').mockImplementation(((_fd: number, done: (err: null) => void) => {
      synced.push('begun');
      void hold?.then(() => {
        synced.push('done');
        done(null);
      });
    }) as typeof fs.fdatasync);
    await withOwnStore({}, async (store) => {
      slow = true;
      await store.write((trx) => trx.insertInto('organizations').values(ORG).execute());
      expect(synced.at(-1)).toBe('inline');
      synced.length = 0;
      let release!: () => void;
      hold = new Promise<void>((resolve) => (release = resolve));
      let answered = false;
      const other = { ...ORG, id: 'org-2' };
      const write = store
        .write((trx) => trx.insertInto('organizations').values(other).execute())
        .then(() => (answered = true));
      await eventually(() => synced.includes('begun'), 5_000, 'the sync to begin');
      // The event loop is free while the disk syncs: timers fire and reads are answered (they see the
      // commit); the write's caller is not answered yet.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const read = await store.db
        .selectFrom('organizations')
        .select('id')
        .where('id', '=', other.id)
        .execute();
      expect(read).toEqual([{ id: other.id }]);
      expect(answered).toBe(false);
      release();
      await write;
      expect(synced).toEqual(['begun', 'done']);
    });
  });

  it('syncs on the event loop again once syncs have been quick for OFF_LOOP_MS', () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-sync-'));
    const file = path.join(dataDir, 'wal');
    writeFileSync(file, 'x');
    let now = 1_000;
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => now);
    let cost = 0;
    const inline = vi.spyOn(fs, 'fdatasyncSync').mockImplementation(() => void (now += cost));
    const offLoop = vi
      .spyOn(fs, 'fdatasync')
      .mockImplementation(((_fd: number, done: (err: null) => void) => done(null)) as typeof fs.fdatasync);
    const wal = new WalSync(file);
    try {
      expect(wal.sync()).toBeUndefined();
      cost = SLOW_SYNC_MS + 1;
      expect(wal.sync()).toBeUndefined();
      cost = 0;
      expect(wal.sync()).toBeInstanceOf(Promise);
      now += OFF_LOOP_MS + SLOW_SYNC_MS + 2;
      expect(wal.sync()).toBeUndefined();
      expect(inline).toHaveBeenCalledTimes(3);
      expect(offLoop).toHaveBeenCalledTimes(1);
    } finally {
      clock.mockRestore();
      inline.mockRestore();
      offLoop.mockRestore();
      wal.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('takes no more writes once a sync failed: the disk may have dropped what it was given', async () => {
    let failing = false;
    const eio = () => Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' });
    const original = fs.fdatasyncSync;
    vi.spyOn(fs, 'fdatasyncSync').mockImplementation((fd) => {
      if (failing) throw eio();
      original(fd);
    });
    // Both ways of syncing fail: on a busy machine a slow sync while migrating sends the next ones to
    // libuv's thread pool (wal-sync.ts), where only an inline failure would have gone unseen.
    const originalAsync = fs.fdatasync;
    vi.spyOn(fs, 'fdatasync').mockImplementation(((fd: number, done: (err: Error | null) => void) => {
      if (failing) done(eio());
      else originalAsync(fd, done);
    }) as typeof fs.fdatasync);
    await withOwnStore({}, async (store) => {
      failing = true;
      await expect(
        store.write((trx) => trx.insertInto('organizations').values(ORG).execute()),
      ).rejects.toMatchObject({ code: 'SQLITE_IOERR_FSYNC' });
      failing = false;
      // Not even begun: the disk said it failed once, and a later sync could succeed without those pages.
      const other = { ...ORG, id: 'org-2' };
      await expect(
        store.write((trx) => trx.insertInto('organizations').values(other).execute()),
      ).rejects.toMatchObject({ code: 'SQLITE_IOERR_FSYNC' });
      expect(
        await store.db.selectFrom('organizations').select('id').where('id', '=', other.id).execute(),
      ).toEqual([]);
    });
  });

  it('makes no sync of its own with SQLITE_SYNCHRONOUS=NORMAL', async () => {
    const inline = vi.spyOn(fs, 'fdatasyncSync');
    const offLoop = vi.spyOn(fs, 'fdatasync');
    await withOwnStore({ sqliteSynchronous: 'NORMAL' }, async (store) => {
      await store.write((trx) => trx.insertInto('organizations').values(ORG).execute());
      expect(inline).not.toHaveBeenCalled();
      expect(offLoop).not.toHaveBeenCalled();
    });
  });
});

/**
 * Runs `test` on a migrated SQLite store in a DATA_DIR of its own, without background threads; then closes
 * it, removes the directory and restores the spies the test made (before the store: migrating syncs too).
 */
async function withOwnStore(options: Partial<StoreOptions>, test: (store: Store) => Promise<void>) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-sync-'));
  const store = createStore({
    dataDir,
    backgroundCheckpoints: false,
    backgroundSearchIndex: false,
    ...options,
  });
  try {
    await store.migrate();
    await test(store);
  } finally {
    vi.restoreAllMocks();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

describe('appender', () => {
  it('shares one commit among appends that arrive together, and settles each only after it', async () => {
    const db = new Kysely<{ t: { n: number } }>({
      dialect: new SqliteDialect({ database: new Sqlite(':memory:') }),
    });
    await db.schema.createTable('t').addColumn('n', 'integer').execute();
    let committed = 0;
    const appender = new Appender<{ t: { n: number } }>(async (fn) => {
      await db.transaction().execute(fn);
      committed = (await sql<{ c: number }>`select count(*) as c from t`.execute(db)).rows[0]!.c;
    });
    await Promise.all(
      Array.from({ length: 100 }, (_, n) =>
        appender.append([{ table: 't', rows: [{ n }] }]).then(() => {
          // Resolved only once the transaction holding this row has committed.
          expect(committed).toBeGreaterThan(n);
        }),
      ),
    );
    expect(appender.commits).toBeLessThan(5);
    await db.destroy();
  });
});

describe('appender failures', () => {
  /** An appender whose every transaction fails with `code`, counting its transactions. */
  async function failing(code: string) {
    let transactions = 0;
    const appender = new Appender<{ t: { n: number } }>(async () => {
      transactions++;
      throw Object.assign(new Error(code), { code });
    });
    const results = await Promise.allSettled(
      Array.from({ length: 5 }, (_, n) => appender.append([{ table: 't', rows: [{ n }] }])),
    );
    return { transactions, refused: results.filter((r) => r.status === 'rejected').length };
  }

  it('fails the batch at once when another process holds the write lock, and writes each alone otherwise', async () => {
    // Another process holding SQLite's write lock past busy_timeout: alone, each would wait it out again,
    // one after another, with the event loop stopped.
    expect(await failing('SQLITE_BUSY')).toEqual({ transactions: 1, refused: 5 });
    // A row the store refuses: which caller's it is, only writing each alone can tell. A full disk may
    // still take a smaller write.
    expect(await failing('SQLITE_CONSTRAINT_UNIQUE')).toEqual({ transactions: 6, refused: 5 });
    expect(await failing('SQLITE_FULL')).toEqual({ transactions: 6, refused: 5 });
  });
});

describe('group commit', () => {
  it('shares one commit among writes that arrive together', async () => {
    const db = new Kysely<{ t: { n: number } }>({
      dialect: new SqliteDialect({ database: new Sqlite(':memory:') }),
    });
    await db.schema.createTable('t').addColumn('n', 'integer').execute();
    const group = new GroupCommit(sqliteImmediateTransaction(db));
    await Promise.all(
      Array.from({ length: 100 }, (_, n) => group.run((trx) => trx.insertInto('t').values({ n }).execute())),
    );
    expect(group.commits).toBeLessThan(5);
    const { rows } = await sql<{ c: number }>`select count(*) as c from t`.execute(db);
    expect(rows[0]!.c).toBe(100);
    await db.destroy();
  });

  it('keeps undo copies in memory only for a batch of small writes', async () => {
    const db = new Kysely<{ t: { n: number } }>({
      dialect: new SqliteDialect({ database: new Sqlite(':memory:') }),
    });
    await db.schema.createTable('t').addColumn('n', 'integer').execute();
    const group = new GroupCommit(sqliteImmediateTransaction(db));
    // 0 is the build's default (a file), 2 memory: what SQLite uses for the transaction the write is in.
    const tempStore = async (trx: Kysely<{ t: { n: number } }>) => {
      await trx.insertInto('t').values({ n: 1 }).execute();
      const { rows } = await sql<{ temp_store: number }>`pragma temp_store`.execute(trx);
      return rows[0]!.temp_store;
    };
    expect(await group.run(tempStore, { small: true })).toBe(2);
    expect(await group.run(tempStore)).toBe(0);
    // Together in one transaction: one write that may be large puts the whole batch back on the file.
    expect(await Promise.all([group.run(tempStore, { small: true }), group.run(tempStore)])).toEqual([0, 0]);
    expect(
      await Promise.all([group.run(tempStore, { small: true }), group.run(tempStore, { small: true })]),
    ).toEqual([2, 2]);
    // A small write that fails still rolls back only itself.
    const [failed, kept] = await Promise.allSettled([
      group.run(
        async (trx) => {
          await trx.insertInto('t').values({ n: 2 }).execute();
          throw new Error('refused');
        },
        { small: true },
      ),
      group.run((trx) => trx.insertInto('t').values({ n: 3 }).execute(), { small: true }),
    ]);
    expect(failed.status).toBe('rejected');
    expect(kept.status).toBe('fulfilled');
    const rows = await db.selectFrom('t').select('n').where('n', '>', 1).execute();
    expect(rows.map((r) => r.n)).toEqual([3]);
    await db.destroy();
  });

  it('runs a write that lost a deadlock again in a later transaction, up to five times', async () => {
    const db = new Kysely<{ t: { n: number } }>({
      dialect: new SqliteDialect({ database: new Sqlite(':memory:') }),
    });
    await db.schema.createTable('t').addColumn('n', 'integer').execute();
    const group = new GroupCommit(sqliteImmediateTransaction(db));
    const deadlock = Object.assign(new Error('deadlock detected'), { code: '40P01' });
    const runs = { unlucky: 0, hopeless: 0 };
    // Each writes its row, then loses a deadlock: the first twice, the second every time.
    const unlucky = group.run(async (trx) => {
      await trx.insertInto('t').values({ n: 1 }).execute();
      if (++runs.unlucky <= 2) throw deadlock;
      return 'written';
    });
    const hopeless = group.run(async (trx) => {
      runs.hopeless++;
      await trx.insertInto('t').values({ n: 2 }).execute();
      throw deadlock;
    });
    const others = Array.from({ length: 10 }, () =>
      group.run((trx) => trx.insertInto('t').values({ n: 3 }).execute()),
    );
    expect(await unlucky).toBe('written');
    await expect(hopeless).rejects.toBe(deadlock);
    await Promise.all(others);
    expect(runs).toEqual({ unlucky: 3, hopeless: 6 });
    const rows = await db.selectFrom('t').select('n').orderBy('n').execute();
    expect(rows.map((r) => r.n)).toEqual([1, ...Array<number>(10).fill(3)]);
    await db.destroy();
  });
});
