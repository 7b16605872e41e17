// The trigram index of contacts' emails on SQLite (its own file since migration 0009, kept by a thread):
// it stays exact under inserts, address changes, deletes (one by one and by an organisation's cascade),
// VACUUM, two indexers on one DATA_DIR, an index file of another database or of a later state of this one
// (a restore), a broken or missing file, and upgrades of databases written before it; its answers equal
// the plain LIKE path's, whether the contacts asked about are in the index yet (below its watermark) or not,
// and whether the thread that keeps it takes a search's read up, is busy, or has stopped.
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  openSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { Kysely, SqliteDialect, sql } from '../../src/store/kysely.js';
import type { QueryId } from 'kysely';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { eventually } from '../helpers/smtp.js';
import { countContacts, insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import { countByEmailIndex, pageByEmailIndex } from '../../src/search/contact-search.repository.js';
import { migrateTo } from '../../src/store/migrations.js';
import { SearchIndexer } from '../../src/search/search-index.js';
import { SEARCH_FILE } from '../../src/search/search-file.js';
import { readerBeside } from '../../src/search/search-indexer.js';
import {
  ALONE,
  TWO_PARTS_FROM,
  countByChunks,
  countByChunksInTwo,
  pageByChunks,
  pageByChunksInTwo,
} from '../../src/search/contact-chunks.repository.js';
import { ftsPhrase } from '../../src/store/dialect.js';
import type { NewContact, Database } from '../../src/store/schema.js';
import { type Store, createStore } from '../../src/store/store.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { createTestStore, migrationsFrom } from '../helpers/stores.js';
import { readChunks } from '../helpers/chunks.js';
import { contactRow } from '../helpers/rows.js';
import { threadsStarted } from '../helpers/recorded-threads.js';

// Every thread the store starts, recorded: so that a test can end the search thread, as a crash would.
vi.mock('../../src/threads.js', () => import('../helpers/recorded-threads.js'));

const BASE = Date.parse('2031-01-01T00:00:00.000Z');

function contact(org: string, i: number, email: string): { row: NewContact; tags: string[] } {
  const at = new Date(BASE + ((i * 7919) % 1000) * 1000 + i).toISOString();
  return { row: contactRow(org, `${org}-${i}`, email, at, i % 3 === 0), tags: [] };
}

async function seed(
  store: Store | Kysely<Database>,
  org: string,
  emails: string[],
  first = 0,
): Promise<void> {
  await seedRows(
    store,
    emails.map((email, i) => contact(org, first + i, email)),
  );
}

async function seedRows(
  store: Store | Kysely<Database>,
  rows: { row: NewContact; tags: string[] }[],
): Promise<void> {
  for (let i = 0; i < rows.length; i += 100) {
    const chunk = rows.slice(i, i + 100);
    if ('write' in store) await store.write((trx) => insertContacts(trx, chunk));
    else await insertContacts(store, chunk);
  }
}

const databaseFile = (dir: string) => path.join(dir, 'mailroom.sqlite');
const indexFile = (dir: string) => path.join(dir, SEARCH_FILE);

/** Runs fn with an indexer of its own over the store under `dir` (beside the store's thread, if any). */
function withIndexer<T>(dir: string, fn: (ix: SearchIndexer) => T): T {
  const ix = new SearchIndexer(databaseFile(dir), indexFile(dir));
  try {
    return fn(ix);
  } finally {
    ix.close();
  }
}

/** Indexes every contact above the watermark, and takes every retired key out. */
const indexAll = (dir: string) => withIndexer(dir, (ix) => ix.catchUp());

interface IndexView {
  watermark: number;
  /** The keys in the index, ascending. */
  keys: number[];
  /** The keys the database's contacts hold at or below the watermark, ascending. */
  held: number[];
}

/** What the index file holds, beside what the database holds, each as of one moment. */
function viewIndex(dir: string): IndexView {
  const index = new Sqlite(indexFile(dir), { readonly: true });
  const db = new Sqlite(databaseFile(dir), { readonly: true });
  try {
    index.exec('begin');
    const { w } = index.prepare('select indexed_to as w from search_state').get() as { w: number };
    const keys = index.prepare('select rowid as k from contacts_search order by 1').pluck().all() as number[];
    index.exec('commit');
    const held = db
      .prepare('select search_key from contacts where search_key <= ? order by 1')
      .pluck()
      .all(w) as number[];
    return { watermark: w, keys, held };
  } finally {
    index.close();
    db.close();
  }
}

/** The index holds every contact at or below its watermark under its current address, and no other key. */
function expectIndexExact(dir: string): void {
  indexAll(dir);
  const { keys, held, watermark } = viewIndex(dir);
  expect(keys).toEqual(held);
  const db = new Sqlite(databaseFile(dir), { readonly: true });
  const index = new Sqlite(indexFile(dir), { readonly: true });
  try {
    const top = db.prepare('select coalesce(max(search_key), 0) from contacts').pluck().get() as number;
    expect(watermark).toBeGreaterThanOrEqual(top);
    const rows = db.prepare('select email_lower, search_key from contacts').all() as {
      email_lower: string;
      search_key: number;
    }[];
    const match = index.prepare('select rowid from contacts_search where contacts_search match ?').pluck();
    for (const r of rows) expect(match.all(ftsPhrase(r.email_lower))).toContain(r.search_key);
    // The address chunks hold the same contacts, each once, under its organisation, address and time.
    const indexed = (
      db
        .prepare(
          `select organization_id as organizationId, search_key as key, email_lower as address, created_at
          from contacts where search_key <= ? order by search_key`,
        )
        .all(watermark) as { created_at: string }[]
    ).map(({ created_at, ...c }) => ({ ...c, created: Date.parse(created_at) }));
    expect(readChunks(indexFile(dir))).toEqual(indexed);
  } finally {
    db.close();
    index.close();
  }
}

/**
 * Runs `check` on a store opened over a database as an older release left it: migrated up to `migration`,
 * `org` holding these contacts, then changed by `adjust`. The database is removed after.
 */
async function onUpgradedStore(
  older: { migration: string; org: string; emails: string[]; adjust?: (old: Kysely<Database>) => unknown },
  check: (store: Store, dir: string) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-upgrade-'));
  try {
    const old = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new Sqlite(path.join(dir, 'mailroom.sqlite')) }),
    });
    await migrateTo(old as Kysely<unknown>, 'sqlite', older.migration);
    await old
      .insertInto('organizations')
      .values({ id: older.org, name: older.org, created_at: new Date(BASE).toISOString() })
      .execute();
    await seed(old, older.org, older.emails);
    await older.adjust?.(old);
    await old.destroy();
    const store = createStore({ dataDir: dir });
    try {
      await check(store, dir);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const search = (db: Kysely<Database>, org: string, email: string) =>
  pageContacts(db, org, { email }, { page: 1, limit: 100 }).then((p) =>
    p.contacts.map((c) => (JSON.parse(c) as { id: string }).id),
  );

describe('contact email index on sqlite', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp('sqlite');
  });
  afterAll(() => t.close());

  it('answers as the plain LIKE path does, through the index when few contacts match', async () => {
    const org = (await t.services.orgs.create('same')).id;
    const other = (await t.services.orgs.create('other')).id;
    const emails = Array.from({ length: 600 }, (_, i) => `Person${i}@Site${i % 17}.Example`);
    emails[5] = 'we"ird%_x@quote.example';
    await seed(t.ts.store, org, emails);
    await seed(t.ts.store, other, emails.slice(0, 50));
    // Half of them in the index, half above its watermark: both ways are exercised at once.
    withIndexer(t.ts.dataDir, (ix) => ix.step());
    const db = t.ts.store.db;
    let indexedPages = 0;
    let indexedCounts = 0;
    for (const email of ['person12', 'PERSON599', 'we"ird', '"ird%_', '%_x', 'site3.', 'example', 'zzz']) {
      for (const unsubscribed of [undefined, true, false]) {
        const filter = { email, unsubscribed };
        const total = await countContacts(db, org, filter, { searchIndex: false });
        for (const page of [
          { page: 1, limit: 20 },
          { page: 2, limit: 3 },
          { page: 40, limit: 20 },
        ]) {
          const { contacts: rows } = await pageContacts(db, org, filter, page, { searchIndex: false });
          const indexed = await pageByEmailIndex(db, org, filter, page);
          if (indexed) indexedPages++;
          expect(indexed?.contacts ?? rows, `${email} page ${page.page}`).toEqual(rows);
          // A page with rows learns the total on the way; whatever total it learns is right.
          if (indexed && rows.length > 0) expect(indexed.total).toBe(total);
          if (indexed?.total !== undefined) expect(indexed.total).toBe(total);
        }
        const count = await countByEmailIndex(db, org, filter);
        if (count !== undefined) indexedCounts++;
        expect(count ?? total).toBe(total);
      }
    }
    expect(indexedPages).toBeGreaterThan(10);
    expect(indexedCounts).toBeGreaterThan(5);
    // Both strategies were taken. A term that most contacts match is read from the address chunks, and
    // walks with a subscription filter beside it, which the chunks do not know. Its count among subscribed
    // contacts is the chunks' count less the unsubscribed ones that hold it (every third contact here).
    const first = { page: 1, limit: 20 };
    for (const email of ['example', 'pe']) {
      const total = await countContacts(db, org, { email }, { searchIndex: false });
      expect((await pageByEmailIndex(db, org, { email }, first))?.total).toBe(total);
      expect(await pageByEmailIndex(db, org, { email, unsubscribed: true }, first)).toBe(undefined);
      const subscribed = await countContacts(db, org, { email, unsubscribed: false }, { searchIndex: false });
      expect(subscribed).toBeLessThan(total);
      expect(await countByEmailIndex(db, org, { email, unsubscribed: false })).toBe(subscribed);
    }
    expect(await search(db, org, 'WE"IRD%_X@')).toEqual([`${org}-5`]);
  });

  it('takes a tag beside a term few contacts hold through the index, answering as the plain walk does', async () => {
    // The plain walk looks up each contact with the tag: at a million contacts, 100,000 of them with the
    // tag, a term 280 contacts hold took 0.25 s for its page and as long again for its count, where the
    // term alone took 4 ms.
    const org = (await t.services.orgs.create('tagged')).id;
    const rows = Array.from({ length: 600 }, (_, i) => {
      const tags = [
        ...(i % 4 === 0 ? ['vip'] : []),
        ...(i % 5 === 0 ? ['beta'] : []),
        ...(i === 120 ? ['solo'] : []),
      ];
      const { row } = contact(org, i, `Member${i}@Club${i % 13}.Example`);
      return { row: { ...row, tags: JSON.stringify(tags) }, tags };
    });
    await seedRows(t.ts.store, rows);
    // Half of them in the index, half above its watermark.
    withIndexer(t.ts.dataDir, (ix) => ix.step());
    const db = t.ts.store.db;
    let indexedPages = 0;
    let indexedCounts = 0;
    for (const email of ['member12', 'MEMBER599@', 'member40', 'zzz', 'club3.', 'me']) {
      for (const tag of ['vip', 'beta', 'solo', 'none']) {
        for (const unsubscribed of [undefined, true, false]) {
          const filter = { email, tag, unsubscribed };
          const what = JSON.stringify(filter);
          const total = await countContacts(db, org, filter, { searchIndex: false });
          for (const page of [
            { page: 1, limit: 20 },
            { page: 2, limit: 3 },
          ]) {
            const { contacts: walked } = await pageContacts(db, org, filter, page, { searchIndex: false });
            const indexed = await pageByEmailIndex(db, org, filter, page);
            if (indexed) indexedPages++;
            expect(indexed?.contacts ?? walked, what).toEqual(walked);
            if (indexed?.total !== undefined) expect(indexed.total, what).toBe(total);
          }
          const count = await countByEmailIndex(db, org, filter);
          if (count !== undefined) indexedCounts++;
          expect(count ?? total, what).toBe(total);
        }
      }
    }
    // Terms held by 11, 1, 11, 0, 46 (`club3.`) and 600 (`me`) contacts. A page through the index when
    // the term's matches cost less than walking to the page (28 matches for page 1, 15 for page 2 here) and
    // than walking the tag's contacts (150 `vip`, 120 `beta`, 1 `solo`, 0 `none`): the first four terms
    // with `vip` and `beta`, `member599@` and `zzz` with `solo`, `zzz` with `none`. A count alone, up to
    // 1 % of the organisation (6) and the tag's contacts: `member599@` and `zzz` with `vip`, `beta` and
    // `solo`, `zzz` with `none`. (Bounding by the tag came after a tag on 5 of 100,000 contacts beside a term
    // 300 held read every match through the index: 3 ms, where the walk took 0.1 ms.)
    expect(indexedPages).toBe((2 * 4 + 2 + 1) * 3 * 2);
    expect(indexedCounts).toBe((3 * 2 + 1) * 3);
    expect(await countByEmailIndex(db, org, { email: 'me', tag: 'vip' })).toBe(undefined);
  });

  it('counts a term among subscribed contacts from one snapshot, while contacts are written meanwhile', async () => {
    // The chunks' count less the unsubscribed contacts holding the term, read in two statements, gave a
    // total no state ever had when unsubscribed contacts came or went between them (helper-131: -5 where
    // it was 0 before and after). Here contacts are written as soon as the count's statement has answered.
    const org = (await t.services.orgs.create('snapshot')).id;
    const { contacts } = t.services;
    const made: string[] = [];
    for (let i = 0; i < 10; i++) {
      const json = await contacts.createJson(org, { email: `zq${i}@snap.test`, unsubscribed: i < 8 });
      made.push((JSON.parse(json) as { id: string }).id);
    }
    const filter = { email: 'zq', unsubscribed: false };
    const truth = () => countContacts(t.ts.store.db, org, filter, { searchIndex: false });
    expect(await truth()).toBe(2);
    const asked: QueryId[] = [];
    let wrote = false;
    const db = t.ts.store.db.withPlugin({
      transformQuery({ node, queryId }) {
        if (JSON.stringify(node).includes('mailroom_chunk_count')) asked.push(queryId);
        return node;
      },
      async transformResult({ queryId, result }) {
        if (!wrote && asked.includes(queryId)) {
          wrote = true;
          for (let i = 0; i < 5; i++) {
            await contacts.createJson(org, { email: `zq-new${i}@snap.test`, unsubscribed: true });
          }
          for (const id of made.slice(0, 4)) await contacts.delete(org, { id });
        }
        return result;
      },
    });
    expect(await countByEmailIndex(db, org, filter)).toBe(2);
    expect(wrote).toBe(true);
    expect(await truth()).toBe(2);
  });

  it("never reads other organisations' matches for a page past the organisation's contacts", async () => {
    const small = (await t.services.orgs.create('small')).id;
    const big = (await t.services.orgs.create('big')).id;
    await seed(t.ts.store, small, ['a@small.example', 'b@small.example', 'c@small.example']);
    await seed(
      t.ts.store,
      big,
      Array.from({ length: 1_000 }, (_, i) => `m${i}@mass.example`),
    );
    withIndexer(t.ts.dataDir, (ix) => ix.step());
    // Every statement the search runs, as kysely hands it over: the index is read by a MATCH.
    const statements: string[] = [];
    const db = t.ts.store.db.withPlugin({
      transformQuery: (args) => {
        statements.push(JSON.stringify(args.node));
        return args.node;
      },
      transformResult: async (args) => args.result,
    });
    const readsIndex = () => statements.some((s) => s.includes('contacts_search match'));
    const deep = { page: 1_000_000_000, limit: 100 };
    expect(await pageByEmailIndex(db, small, { email: 'mass.example' }, deep)).toEqual({
      contacts: [],
    });
    expect(readsIndex()).toBe(false);
    // Within the organisation's contacts the index is read as before, and finds none of the other's.
    expect(await pageByEmailIndex(db, small, { email: 'mass.example' }, { page: 1, limit: 20 })).toEqual({
      contacts: [],
      total: 0,
    });
    expect(readsIndex()).toBe(true);
    // Through the API: no contacts, and the total as it is.
    const auth = (await t.newKey(undefined, small)).auth;
    const res = await t.call({
      method: 'GET',
      url: '/api/v1/contacts',
      auth,
      query: { email: 'small.example', page: '1000000000', limit: '100' },
    });
    expect(res.json()).toMatchObject({
      contacts: [],
      pagination: { page: 1_000_000_000, limit: 100, total: 3, pages: 1 },
    });
  });

  it('follows address changes and deletes', async () => {
    const org = (await t.services.orgs.create('triggers')).id;
    const c = t.services.contacts;
    const create = async (email: string) => JSON.parse(await c.createJson(org, { email })) as { id: string };
    const a = await create('alpha.one@trig.example');
    const b = await create('beta.two@trig.example');
    indexAll(t.ts.dataDir);
    const db = t.ts.store.db;
    expect(await search(db, org, 'alpha.one')).toEqual([a.id]);

    await c.update(org, { id: a.id, email: 'gamma.three@trig.example' });
    await c.update(org, { id: b.id, firstName: 'Same address' });
    // The index still holds alpha.one under a key no contact holds any more.
    expect(await search(db, org, 'alpha.one')).toEqual([]);
    expect(await search(db, org, 'gamma.three')).toEqual([a.id]);
    expect(await search(db, org, 'beta.two')).toEqual([b.id]);

    await c.delete(org, { id: b.id });
    expect(await search(db, org, 'beta.two')).toEqual([]);
    expectIndexExact(t.ts.dataDir);
    expect(await search(db, org, 'gamma.three')).toEqual([a.id]);

    // Many at once, as an organisation's cascade deletes them.
    await t.ts.store.write((trx) => trx.deleteFrom('contacts').where('organization_id', '=', org).execute());
    expect(await search(db, org, 'trig.example')).toEqual([]);
    expectIndexExact(t.ts.dataDir);
    const index = new Sqlite(indexFile(t.ts.dataDir), { readonly: true });
    const left = index
      .prepare(`select count(*) from contacts_search where contacts_search match '"trig.example"'`)
      .pluck()
      .get();
    index.close();
    expect(left).toBe(0);
  });

  it('drops the contacts of a deleted organisation from the index', async () => {
    const ts = await createTestStore('sqlite');
    try {
      const org = 'org-cascade';
      await ts.store.write((trx) =>
        trx
          .insertInto('organizations')
          .values({ id: org, name: 'c', created_at: '2031-01-01T00:00:00.000Z' })
          .execute(),
      );
      await seed(ts.store, org, ['one@cascade.example', 'two@cascade.example']);
      indexAll(ts.dataDir);
      // Migration 0002's count trigger re-adds a count row for the organisation being deleted, which its
      // foreign key refuses (a bug of its own); without it, the cascade itself is what is tested here.
      await ts.store.write((trx) => sql`drop trigger contacts_count_del`.execute(trx));
      await ts.store.write((trx) => trx.deleteFrom('organizations').where('id', '=', org).execute());
      expect(await search(ts.store.db, org, 'cascade.example')).toEqual([]);
      expectIndexExact(ts.dataDir);
      expect(viewIndex(ts.dataDir).keys).toEqual([]);
    } finally {
      await ts.destroy();
    }
  });

  it('still finds every contact after VACUUM, and new ones after it', async () => {
    const org = (await t.services.orgs.create('vacuum')).id;
    await seed(
      t.ts.store,
      org,
      Array.from({ length: 300 }, (_, i) => `vac${i}@vacuum.example`),
    );
    // Holes in the rowids, which VACUUM is free to close up.
    await t.ts.store.write((trx) =>
      trx.deleteFrom('contacts').where('organization_id', '=', org).where('id', 'like', '%1').execute(),
    );
    indexAll(t.ts.dataDir);
    const vacuum = new Sqlite(databaseFile(t.ts.dataDir));
    vacuum.exec('VACUUM');
    vacuum.close();

    const db = t.ts.store.db;
    expectIndexExact(t.ts.dataDir);
    expect(await search(db, org, 'vac250@')).toEqual([`${org}-250`]);
    expect(await search(db, org, 'vac251@')).toEqual([]);
    const made = await t.services.contacts.createJson(org, { email: 'after.vacuum@vacuum.example' });
    expect(await search(db, org, 'after.vac')).toEqual([(JSON.parse(made) as { id: string }).id]);
    expectIndexExact(t.ts.dataDir);
  });
});

/** A store over a new directory whose index only moves when a test says so (no search thread). */
async function storeWithoutThread(): Promise<{ store: Store; dir: string; destroy: () => Promise<void> }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-search-'));
  const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
  await store.migrate();
  return {
    store,
    dir,
    async destroy() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function addOrganization(store: Store, id: string): Promise<void> {
  await store.write((trx) =>
    trx
      .insertInto('organizations')
      .values({ id, name: id, created_at: new Date(BASE).toISOString() })
      .execute(),
  );
}

describe('contacts not yet in the index (above its watermark)', () => {
  let s: Awaited<ReturnType<typeof storeWithoutThread>>;
  beforeAll(async () => {
    s = await storeWithoutThread();
    await addOrganization(s.store, ORG);
  });
  afterAll(() => s.destroy());
  const ORG = 'org-tail';
  const keyOf = (id: string) =>
    sql<{ k: number }>`select search_key as k from contacts where id = ${id}`
      .execute(s.store.db)
      .then((r) => r.rows[0]!.k);
  const searchTail = (email: string) =>
    pageByEmailIndex(s.store.db, ORG, { email }, { page: 1, limit: 20 }).then((p) =>
      p?.contacts.map((c) => (JSON.parse(c) as { id: string }).id),
    );
  const countTail = (email: string) => countByEmailIndex(s.store.db, ORG, { email });
  const answers = async () => ({
    one: await searchTail('NEW.ONE@'),
    both: (await searchTail('new.'))!.sort(),
    count: await countTail('new.'),
    old: await searchTail('old17@'),
  });

  it('are found at once, then through the index, with the same answers', async () => {
    await seed(
      s.store,
      ORG,
      Array.from({ length: 200 }, (_, i) => `old${i}@tail.example`),
    );
    indexAll(s.dir);
    await s.store.write((trx) =>
      insertContacts(trx, [
        contact(ORG, 500, 'new.one@tail.example'),
        contact(ORG, 501, 'new.two@tail.example'),
      ]),
    );
    // Both new contacts sit above the watermark: not in the index, yet found.
    const { watermark } = viewIndex(s.dir);
    for (const id of [`${ORG}-500`, `${ORG}-501`]) expect(await keyOf(id)).toBeGreaterThan(watermark);
    const before = await answers();
    expect(before).toEqual({
      one: [`${ORG}-500`],
      both: [`${ORG}-501`, `${ORG}-500`].sort(),
      count: 2,
      old: [`${ORG}-17`],
    });
    indexAll(s.dir);
    expect(viewIndex(s.dir).keys).toContain(await keyOf(`${ORG}-500`));
    expect(await answers()).toEqual(before);
    expectIndexExact(s.dir);
  });

  it('follow address changes and deletes, before and after they are indexed', async () => {
    await s.store.write((trx) =>
      insertContacts(trx, [
        contact(ORG, 600, 'moving@tail.example'),
        contact(ORG, 601, 'leaving@tail.example'),
        contact(ORG, 602, 'indexed.mover@tail.example'),
        contact(ORG, 603, 'indexed.leaver@tail.example'),
      ]),
    );
    const readdress = (id: string, email: string) =>
      s.store.write((trx) =>
        trx.updateTable('contacts').set({ email, email_lower: email }).where('id', '=', id).execute(),
      );
    const remove = (id: string) =>
      s.store.write((trx) => trx.deleteFrom('contacts').where('id', '=', id).execute());
    await readdress(`${ORG}-600`, 'moved@tail.example');
    await remove(`${ORG}-601`);
    expect(await searchTail('moving@')).toEqual([]);
    expect(await searchTail('moved@')).toEqual([`${ORG}-600`]);
    expect(await searchTail('leaving@')).toEqual([]);

    indexAll(s.dir);
    const oldKey = await keyOf(`${ORG}-602`);
    expect(viewIndex(s.dir).keys).toContain(oldKey);
    await readdress(`${ORG}-602`, 'indexed.moved@tail.example');
    await remove(`${ORG}-603`);
    // A new address is a new key, above the watermark; the old key's entry is left over until the
    // indexer takes it out, and no contact answers to it meanwhile.
    expect(await keyOf(`${ORG}-602`)).toBeGreaterThan(viewIndex(s.dir).watermark);
    expect(viewIndex(s.dir).keys).toContain(oldKey);
    expect(await searchTail('indexed.mover@')).toEqual([]);
    expect(await searchTail('indexed.moved@')).toEqual([`${ORG}-602`]);
    expect(await searchTail('indexed.leaver@')).toEqual([]);
    expect(await countContacts(s.store.db, ORG, { email: 'indexed.' })).toBe(1);
    expectIndexExact(s.dir);
    expect(viewIndex(s.dir).keys).not.toContain(oldKey);
    expect(await searchTail('indexed.')).toEqual([`${ORG}-602`]);
  });

  it('never take a key that was ever issued, so none is taken for indexed too soon', async () => {
    indexAll(s.dir);
    const top = (
      await sql<{ id: string; k: number }>`select id, search_key as k from contacts
      order by search_key desc limit 1`.execute(s.store.db)
    ).rows[0]!;
    await s.store.write((trx) => trx.deleteFrom('contacts').where('id', '=', top.id).execute());
    await s.store.write((trx) => insertContacts(trx, [contact(ORG, 700, 'reborn@tail.example')]));
    const reborn = await keyOf(`${ORG}-700`);
    expect(reborn).toBeGreaterThan(top.k);
    expect(await searchTail('reborn@')).toEqual([`${ORG}-700`]);
    // The same when the top contact changes its address and then goes.
    await s.store.write((trx) =>
      trx
        .updateTable('contacts')
        .set({ email: 'x@y.example', email_lower: 'x@y.example' })
        .where('id', '=', `${ORG}-700`)
        .execute(),
    );
    const moved = await keyOf(`${ORG}-700`);
    expect(moved).toBeGreaterThan(reborn);
    await s.store.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${ORG}-700`).execute());
    await s.store.write((trx) => insertContacts(trx, [contact(ORG, 701, 'reborn.again@tail.example')]));
    expect(await keyOf(`${ORG}-701`)).toBeGreaterThan(moved);
    expectIndexExact(s.dir);
    expect(await search(s.store.db, ORG, 'reborn')).toEqual([`${ORG}-701`]);
  });

  it('are found by a search during which they change address (one snapshot per search)', async () => {
    await s.store.write((trx) => insertContacts(trx, [contact(ORG, 650, 'flip.one@tail.example')]));
    // Enough other contacts that the index is the cheaper way for a term this rare.
    await seed(
      s.store,
      ORG,
      Array.from({ length: 300 }, (_, i) => `filler${i}@tail.example`),
      2000,
    );
    indexAll(s.dir);
    // Another connection changes the address after every statement the search runs: each change gives
    // a new key, so a search reading keys and contacts in two snapshots would find neither.
    const other = new Sqlite(databaseFile(s.dir));
    let flips = 0;
    const flip = () => {
      const email = flips++ % 2 ? 'flip.one@tail.example' : 'flip.two@tail.example';
      other
        .prepare('update contacts set email = ?, email_lower = ? where id = ?')
        .run(email, email, `${ORG}-650`);
    };
    const db = s.store.db;
    const executor = db.getExecutor();
    const hooked = new Proxy(executor, {
      get(target, name) {
        if (name !== 'executeQuery') {
          const value = Reflect.get(target, name) as unknown;
          return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
        }
        return async (...args: Parameters<typeof executor.executeQuery>) => {
          const result = await target.executeQuery(...args);
          flip();
          return result;
        };
      },
    });
    const flipping = new Proxy(db, {
      get(target, name) {
        if (name === 'getExecutor') return () => hooked;
        const value = Reflect.get(target, name) as unknown;
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    try {
      for (let round = 0; round < 4; round++) {
        const page = await pageByEmailIndex(flipping, ORG, { email: 'flip.' }, { page: 1, limit: 20 });
        expect(page?.contacts.map((c) => (JSON.parse(c) as { id: string }).id)).toEqual([`${ORG}-650`]);
      }
      expect(flips).toBeGreaterThanOrEqual(4);
    } finally {
      other.close();
    }
    await s.store.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${ORG}-650`).execute());
  });

  it('keep a key state whose row cannot be deleted (every new key would be NULL without it)', async () => {
    await expect(s.store.write((trx) => sql`delete from contacts_search_state`.execute(trx))).rejects.toThrow(
      /keeps its row/,
    );
    const w = await sql<{ n: number }>`select count(*) as n from contacts_search_state`.execute(s.store.db);
    expect(w.rows[0]!.n).toBe(1);
  });

  it('are indexed the same by two indexers taking turns (two processes on one DATA_DIR)', async () => {
    const one = new SearchIndexer(databaseFile(s.dir), indexFile(s.dir));
    const two = new SearchIndexer(databaseFile(s.dir), indexFile(s.dir));
    try {
      for (let round = 0; round < 4; round++) {
        await seed(
          s.store,
          ORG,
          [`turn${round}a@tail.example`, `turn${round}b@tail.example`],
          900 + round * 2,
        );
        await s.store.write((trx) =>
          trx
            .deleteFrom('contacts')
            .where('id', '=', `${ORG}-${900 + round * 2}`)
            .execute(),
        );
        (round % 2 ? one : two).step();
      }
      one.catchUp();
      two.catchUp();
    } finally {
      one.close();
      two.close();
    }
    expectIndexExact(s.dir);
    expect((await search(s.store.db, ORG, 'turn')).sort()).toEqual(
      [901, 903, 905, 907].map((i) => `${ORG}-${i}`),
    );
  });
});

/**
 * A read is declined while the search thread has a step to make (its rounds come late on a busy machine):
 * asked again until `taken` (or the thread's answer is not ALONE), for a while; the last answer.
 */
async function takenUp<T>(ask: () => Promise<T>, taken: (answer: T) => boolean): Promise<T> {
  let answer = await ask();
  for (let tries = 0; !taken(answer) && tries < 100; tries++) {
    await new Promise((r) => setTimeout(r, 20));
    answer = await ask();
  }
  return answer;
}

/** Waits, polling, until `done` holds (the search thread works on its own time); fails after 10 s, naming it. */
async function until(what: string, done: () => Promise<boolean> | boolean): Promise<void> {
  await eventually(done, 10_000, what);
}

describe('the store keeping its search index', () => {
  let dir: string | undefined;
  // Set by the first test only: a run filtered to later ones has none to remove.
  afterAll(() => dir && rmSync(dir, { recursive: true, force: true }));

  it('indexes new contacts a moment after they are written, and prunes the keys it took out', async () => {
    const made = mkdtempSync(path.join(tmpdir(), 'mailroom-indexer-'));
    dir = made;
    const store = createStore({ dataDir: made });
    try {
      await store.migrate();
      await addOrganization(store, 'o');
      await seed(
        store,
        'o',
        Array.from({ length: 50 }, (_, i) => `later${i}@own.example`),
      );
      const top = async () =>
        (await sql<{ k: number }>`select max(search_key) as k from contacts`.execute(store.db)).rows[0]!.k;
      await until(
        'the index to reach the newest contact',
        async () => viewIndex(made).watermark === (await top()),
      );
      await store.write((trx) => trx.deleteFrom('contacts').where('id', 'like', 'o-1%').execute());
      const retired = () =>
        sql<{ n: number }>`select count(*) as n from contacts_search_retired`
          .execute(store.db)
          .then((r) => r.rows[0]!.n);
      // Taken out of the index by the thread, then out of the log by the store.
      await until('the retired keys to be pruned', async () => (await retired()) === 0);
      const { keys, held } = viewIndex(made);
      expect(keys).toEqual(held);
      expect(await search(store.db, 'o', 'later1')).toEqual([]);
      expect(await search(store.db, 'o', 'later22@')).toEqual(['o-22']);
    } finally {
      await store.close();
    }
  });

  it('runs a read beside the event loop, and steps no further until it is let go', async () => {
    const readDir = mkdtempSync(path.join(tmpdir(), 'mailroom-beside-'));
    const store = createStore({ dataDir: readDir });
    const watermark = () => viewIndex(readDir).watermark;
    const top = async () =>
      (await sql<{ k: number }>`select max(search_key) as k from contacts`.execute(store.db)).rows[0]!.k;
    try {
      await store.migrate();
      await addOrganization(store, 'o');
      await seed(store, 'o', ['one@beside.example', 'two@beside.example']);
      await until('the index to reach the newest contact', async () => watermark() === (await top()));
      const beside = readerBeside(store.db)!;
      expect(beside).toBeDefined();
      const readTakenUp = (text: string, parameters: unknown[] = []) =>
        takenUp(
          () => beside.readBeside(text, parameters, 5_000),
          (read) => read !== undefined,
        );
      const held = Date.now();
      const read = await readTakenUp(
        `select indexed_to as i, (select count(*) from contacts where email_lower like ?) as n
          from search.search_state`,
        ['%beside%'],
      );
      expect(read).toBeDefined();
      expect(await read!.rows).toEqual([{ i: watermark(), n: 2 }]);
      // Held: a contact written now waits, over several of the thread's rounds (50 ms each).
      await seed(store, 'o', ['three@beside.example'], 2);
      const waiting = await top();
      await new Promise((r) => setTimeout(r, 400));
      // The thread lets go by itself 2 s after it took the read up, should its asker never do so: on a
      // machine stalled that long these two are not checked.
      if (Date.now() - held < 1_500) {
        expect(watermark()).toBeLessThan(waiting);
        // Held long past a step, it declines another read: the index must keep up with the contacts.
        expect(await beside.readBeside('select 1 as x', [], 400)).toBeUndefined();
      }
      read!.release();
      await until('the held contact to be indexed', () => watermark() === waiting);
      // Its error reaches the asker.
      const failing = await readTakenUp('select * from no_such_table');
      await expect(failing!.rows).rejects.toThrow(/no_such_table/);
      failing!.release();
      // A search in two parts, the thread's half on its reader: exact, and the thread steps again after.
      const page = { page: 1, limit: 2 };
      const inTwo = <T>(search: () => Promise<T>) => takenUp(search, (answer) => answer !== ALONE);
      expect(await inTwo(() => pageByChunksInTwo(store.db, beside, 'o', 'beside', page))).toEqual({
        contacts: (await pageContacts(store.db, 'o', { email: 'beside' }, page, { searchIndex: false }))
          .contacts,
        total: 3,
      });
      expect(await inTwo(() => countByChunksInTwo(store.db, beside, 'o', 'beside'))).toBe(3);
      // Subscribed ones only (every third contact seeded is unsubscribed: `one`), in the same two halves.
      const subscribedOnly = { subscribed: true };
      expect(await inTwo(() => countByChunksInTwo(store.db, beside, 'o', 'beside', subscribedOnly))).toBe(2);
      // Reads that overlap, each taken up while the one before it still holds the index: a contact written
      // meanwhile is still indexed (a read is declined once the last step is 250 ms old, and a round steps).
      await seed(store, 'o', ['four@beside.example'], 3);
      const last = await top();
      let taken = 0;
      let declined = 0;
      let holding = await beside.readBeside('select 1 as x', [], 1_000);
      for (const until = Date.now() + 3_000; Date.now() < until && watermark() !== last;) {
        const next = await beside.readBeside('select 1 as x', [], 10);
        if (next) taken++;
        else declined++;
        holding?.release();
        holding = next;
        await new Promise((r) => setTimeout(r, 45));
      }
      holding?.release();
      expect(watermark(), `${taken} reads taken, ${declined} declined`).toBe(last);
      // Searching with the thread or without it (declined while it has a step to make: a read held for
      // 300 ms keeps it from stepping): the same answers.
      const held2 = await beside.readBeside('select 1 as x', [], 1_000);
      const heldAt = Date.now();
      expect(held2).toBeDefined();
      await new Promise((r) => setTimeout(r, 300));
      // Declined now, so the searches below fall back to one statement (unless the machine stalled so long
      // that the thread let go by itself).
      if (Date.now() - heldAt < 1_500) {
        expect(await beside.readBeside('select 1 as x', [], 10)).toBeUndefined();
      }
      for (const size of [TWO_PARTS_FROM, 0]) {
        expect(await pageByChunks(store.db, 'o', 'beside', page, size)).toEqual({
          contacts: (await pageContacts(store.db, 'o', { email: 'beside' }, page, { searchIndex: false }))
            .contacts,
          total: 4,
        });
        expect(await countByChunks(store.db, 'o', 'beside', size)).toBe(4);
      }
      held2?.release();
    } finally {
      await store.close();
      rmSync(readDir, { recursive: true, force: true });
    }
  });

  it('fails a read the thread was running when it stopped, and searches alone until a new one starts', async () => {
    const stopDir = mkdtempSync(path.join(tmpdir(), 'mailroom-stop-'));
    const told: string[] = [];
    const store = createStore({
      dataDir: stopDir,
      onBackgroundError: (_err, what) => told.push(what),
    });
    try {
      await store.migrate();
      await addOrganization(store, 'o');
      await seed(store, 'o', ['one@stop.example', 'two@stop.example', 'three@elsewhere.example']);
      const top = async () =>
        (await sql<{ k: number }>`select max(search_key) as k from contacts`.execute(store.db)).rows[0]!.k;
      await until(
        'the index to reach the newest contact',
        async () => viewIndex(stopDir).watermark === (await top()),
      );
      const beside = readerBeside(store.db)!;
      // A read that runs until the thread is stopped, or for a few seconds: a chunk function per row is
      // JavaScript, where a thread's termination takes effect with better-sqlite3 12.x. With 13.x (Node 22,
      // 24) a termination that lands inside SQLite only makes each later call answer NULL: the statement
      // goes on to its end, so it must have one.
      const endless = `with recursive c(x) as (select 1 union all select x + 1 from c where x < 5000000)
        select sum(mailroom_chunk_holds(x, 'abc', 0, 'b')) as n from c`;
      const read = await takenUp(
        () => beside.readBeside(endless, [], 5_000),
        (answer) => answer !== undefined,
      );
      expect(read).toBeDefined();
      // The thread is busy with it: another read is given up on when its wait is over.
      expect(await beside.readBeside('select 1 as x', [], 10)).toBeUndefined();
      const thread = threadsStarted.filter((t) => t.module === 'search-thread').at(-1)!.worker;
      await thread.terminate();
      await expect(read!.rows).rejects.toThrow(/the search thread stopped/);
      expect(told).toContain('keeping the search index');
      // Until a new thread starts (10 s later), a read is not waited for, and a search reads alone: exact.
      const asked = Date.now();
      expect(await beside.readBeside('select 1 as x', [], 5_000)).toBeUndefined();
      expect(Date.now() - asked).toBeLessThan(1_000);
      const page = { page: 1, limit: 2 };
      expect(await pageByChunksInTwo(store.db, beside, 'o', 'stop', page)).toBe(ALONE);
      expect(await pageByChunks(store.db, 'o', 'stop', page, TWO_PARTS_FROM)).toEqual({
        contacts: (await pageContacts(store.db, 'o', { email: 'stop' }, page, { searchIndex: false }))
          .contacts,
        total: 2,
      });
      expect(await countByChunks(store.db, 'o', 'stop', TWO_PARTS_FROM)).toBe(2);
    } finally {
      await store.close();
      rmSync(stopDir, { recursive: true, force: true });
    }
  });

  it('says once when it starts failing, and again only after it has recovered', async () => {
    const failDir = mkdtempSync(path.join(tmpdir(), 'mailroom-indexer-'));
    const told: string[] = [];
    const store = createStore({
      dataDir: failDir,
      onBackgroundError: (err, what) => told.push(`${what}: ${(err as Error).message}`),
    });
    const away = (from: string, to: string) =>
      store.write((trx) => sql.raw(`alter table ${from} rename to ${to}`).execute(trx));
    const indexed = () => viewIndex(failDir).keys.length;
    try {
      await store.migrate();
      await addOrganization(store, 'o');
      // The thread at work first.
      await seed(store, 'o', ['zero@fail.example']);
      await until('one contact indexed', () => indexed() === 1);
      expect(told).toEqual([]);
      // The log of retired keys gone: every round fails the same way, for several rounds.
      await away('contacts_search_retired', 'retired_away');
      await seed(store, 'o', ['one@fail.example'], 1);
      await until('the failure to be told', () => told.length > 0);
      await new Promise((r) => setTimeout(r, 300));
      expect(told).toHaveLength(1);
      expect(told[0]).toMatch(/^keeping the search index: .*contacts_search_retired/);
      // Searches stay exact meanwhile: the contact is read from the table.
      expect(await search(store.db, 'o', 'one@fail')).toEqual(['o-1']);
      await away('retired_away', 'contacts_search_retired');
      await until('two contacts indexed', () => indexed() === 2);
      await away('contacts_search_retired', 'retired_away');
      await seed(store, 'o', ['two@fail.example'], 2);
      await until('the second failure to be told', () => told.length > 1);
      expect(told).toHaveLength(2);
      await away('retired_away', 'contacts_search_retired');
    } finally {
      await store.close();
      rmSync(failDir, { recursive: true, force: true });
    }
  });
});

describe('the index file', () => {
  const ORG = 'org-file';
  const dirs: string[] = [];
  afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
  const freshDir = () => {
    const d = mkdtempSync(path.join(tmpdir(), 'mailroom-file-'));
    dirs.push(d);
    return d;
  };
  /** A store over `dir` with contacts one@, two@ … indexed; closed again. */
  async function indexedDatabase(dir: string, emails: string[]): Promise<void> {
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    try {
      await store.migrate();
      await addOrganization(store, ORG);
      await seed(store, ORG, emails);
      indexAll(dir);
    } finally {
      await store.close();
    }
  }
  const searchIn = async (dir: string, email: string) => {
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    try {
      await store.migrate();
      return await search(store.db, ORG, email);
    } finally {
      await store.close();
    }
  };
  const copyDatabase = (from: string, to: string) => {
    for (const suffix of ['', '-wal', '-shm']) {
      rmSync(databaseFile(to) + suffix, { force: true });
      if (existsSync(databaseFile(from) + suffix))
        copyFileSync(databaseFile(from) + suffix, databaseFile(to) + suffix);
    }
  };

  it('is built again when it belongs to another database', async () => {
    const a = freshDir();
    const b = freshDir();
    await indexedDatabase(a, ['alpha@a.example', 'beta@a.example']);
    await indexedDatabase(b, ['gamma@b.example', 'delta@b.example', 'eps@b.example']);
    copyFileSync(indexFile(a), indexFile(b));
    rmSync(indexFile(b) + '-wal', { force: true });
    expect(withIndexer(b, (ix) => ix.catchUp())!.rebuilt).toBe(true);
    expectIndexExact(b);
    expect(await searchIn(b, 'alpha@')).toEqual([]);
    expect(await searchIn(b, 'delta@')).toEqual([`${ORG}-1`]);
  });

  it('is built again when the database goes back to an earlier copy (a restore from backup)', async () => {
    const dir = freshDir();
    const backup = freshDir();
    await indexedDatabase(dir, ['kept@r.example', 'gone@r.example', 'last@r.example']);
    copyDatabase(dir, backup);
    // Later: a contact deleted and its key taken out of the index; nothing new issued.
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await store.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${ORG}-1`).execute());
    await store.close();
    indexAll(dir);
    expect(await searchIn(dir, 'gone@')).toEqual([]);
    // The database restored, the index file not: the contact is back, and the index must know it.
    copyDatabase(backup, dir);
    expect(withIndexer(dir, (ix) => ix.catchUp())!.rebuilt).toBe(true);
    expect(await searchIn(dir, 'gone@')).toEqual([`${ORG}-1`]);
    expectIndexExact(dir);
    // Later still: contacts added and indexed, then the same backup restored.
    const again = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await seed(again, ORG, ['new1@r.example', 'new2@r.example'], 3);
    await again.close();
    indexAll(dir);
    copyDatabase(backup, dir);
    expect(withIndexer(dir, (ix) => ix.catchUp())!.rebuilt).toBe(true);
    expectIndexExact(dir);
    expect(await searchIn(dir, 'new1@')).toEqual([]);
  });

  it('is made anew when it cannot be read, or is gone', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, ['one@broken.example', 'two@broken.example']);
    writeFileSync(indexFile(dir), 'not a database '.repeat(500));
    rmSync(indexFile(dir) + '-wal', { force: true });
    expect(await searchIn(dir, 'two@broken')).toEqual([`${ORG}-1`]);
    expectIndexExact(dir);
    rmSync(indexFile(dir));
    expect(await searchIn(dir, 'one@broken')).toEqual([`${ORG}-0`]);
    expectIndexExact(dir);
    expect(await searchIn(dir, 'one@broken')).toEqual([`${ORG}-0`]);
  });

  it('is built again after a restore when it had only read, not yet applied, what came after the backup', async () => {
    const dir = freshDir();
    const backup = freshDir();
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await store.migrate();
    await addOrganization(store, ORG);
    await seed(store, ORG, ['a1@seen.example', 'a2@seen.example']);
    indexAll(dir);
    // Two retirements waiting, and three contacts not indexed yet, at the time of the backup.
    await store.write((trx) =>
      trx
        .deleteFrom('contacts')
        .where('id', 'in', [`${ORG}-0`, `${ORG}-1`])
        .execute(),
    );
    await seed(store, ORG, ['c1@seen.example', 'c2@seen.example', 'c3@seen.example'], 2);
    await store.close();
    copyDatabase(dir, backup);
    const later = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await later.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${ORG}-3`).execute());
    await later.close();
    // One step that reads three retirements but applies one, and indexes c1 and c3 (c2 is gone).
    const small = new SearchIndexer(databaseFile(dir), indexFile(dir), { retireBatch: 1 });
    try {
      expect(small.step()).toMatchObject({ indexed: 2, retired: 1, rebuilt: false });
    } finally {
      small.close();
    }
    copyDatabase(backup, dir);
    // c2 is back, under a key below the watermark, and in no index: only a rebuild finds it.
    expect(await searchIn(dir, 'c2@seen')).toEqual([`${ORG}-3`]);
    expectIndexExact(dir);
  });

  it('is checked at start, before a restored database issues keys past those the index saw', async () => {
    const dir = freshDir();
    const backup = freshDir();
    await indexedDatabase(dir, ['one@start.example', 'two@start.example', 'three@start.example']);
    copyDatabase(dir, backup);
    const later = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await seed(later, ORG, ['later3@start.example', 'later4@start.example'], 3);
    await later.close();
    indexAll(dir);
    copyDatabase(backup, dir);
    // The server starts on the restored database and writes at once: the keys the index saw for the
    // later contacts are issued again, to other addresses.
    const restarted = createStore({ dataDir: dir, backgroundSearchIndex: false });
    try {
      await restarted.migrate();
      await seed(restarted, ORG, ['fresh3@start.example', 'fresh4@start.example', 'fresh5@start.example'], 3);
      indexAll(dir);
      expect(await search(restarted.db, ORG, 'later3@')).toEqual([]);
      expect(await search(restarted.db, ORG, 'fresh3@')).toEqual([`${ORG}-3`]);
      expectIndexExact(dir);
    } finally {
      await restarted.close();
    }
  });

  /** Overwrites `length` bytes at `offset` of every page of the index's FTS5 data (the store closed). */
  const damageIndex = (dir: string, offset: number, length: number, byte = 0x41) => {
    const index = new Sqlite(indexFile(dir));
    const pages = index
      .prepare(`select pageno from dbstat where name = 'contacts_search_data' and pagetype = 'leaf'`)
      .pluck()
      .all() as number[];
    const size = index.pragma('page_size', { simple: true }) as number;
    index.close();
    const fd = openSync(indexFile(dir), 'r+');
    for (const page of pages)
      writeSync(fd, Buffer.alloc(length, byte), 0, length, (page - 1) * size + offset);
    closeSync(fd);
    expect(pages.length).toBeGreaterThan(2);
  };
  const many = Array.from({ length: 3000 }, (_, i) => `dmg${i}@damage${i % 13}.example`);

  it('is laid out anew and built again when its pages are damaged', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, many);
    damageIndex(dir, 3000, 200);
    withIndexer(dir, (ix) => {
      expect(ix.intact()).toBe(false);
      ix.repair();
      expect(ix.intact()).toBe(true);
    });
    expectIndexExact(dir);
    expect(await searchIn(dir, 'dmg1234@')).toEqual([`${ORG}-1234`]);
  });

  it('is checked by the thread at start, so damage that raises no error is repaired too', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, many);
    damageIndex(dir, 1000, 3000);
    const wanted = `${ORG}-1234`;
    // Silent: the damaged index finds nothing, and says nothing.
    expect(await searchIn(dir, 'dmg1234@')).not.toEqual([wanted]);
    const errors: string[] = [];
    const store = createStore({ dataDir: dir, onBackgroundError: (err) => errors.push(String(err)) });
    try {
      await store.migrate();
      await until(
        'the rebuilt index to find the contact',
        async () => (await search(store.db, ORG, 'dmg1234@')).join() === wanted,
      );
      // The thread says so once it has laid the index out anew; searches read the contacts it has not
      // indexed yet from the table meanwhile, so the contact can be found before its message is read here.
      await until('the quick check to be reported', () =>
        /quick check at start; the index is being built again/.test(errors.join('\n')),
      );
    } finally {
      await store.close();
    }
    expectIndexExact(dir);
  });

  it('is laid out anew by the thread when an address chunk is damaged (which the quick check misses)', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, many);
    const index = new Sqlite(indexFile(dir));
    index
      .prepare('update address_chunks set entries = ? where id = (select max(id) from address_chunks)')
      .run(Buffer.alloc(12));
    index.close();
    const errors: string[] = [];
    const store = createStore({ dataDir: dir, onBackgroundError: (err) => errors.push(String(err)) });
    try {
      await store.migrate();
      // The next contact goes to the damaged chunk: the thread's step finds the damage.
      await seed(store, ORG, ['after.damage@damage0.example'], many.length);
      await until('the damaged chunk to be reported', () =>
        errors.some((e) => /address chunk .* damaged; the index is being built again/.test(e)),
      );
      await until(
        'the rebuilt index to find the new contact',
        async () => (await search(store.db, ORG, 'after.damage@')).length === 1,
      );
    } finally {
      await store.close();
    }
    expectIndexExact(dir);
  });

  it('is read around while damaged: searches take the plain path', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, many);
    // Page headers: SQLite then refuses the pages (SQLITE_CORRUPT) rather than reading them as empty.
    damageIndex(dir, 0, 12, 0xff);
    const index = new Sqlite(indexFile(dir), { readonly: true });
    expect(() =>
      index.prepare(`select rowid from contacts_search where contacts_search match '"dmg123"'`).all(),
    ).toThrow();
    index.close();
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    try {
      await store.migrate();
      expect(await pageByEmailIndex(store.db, ORG, { email: 'dmg123' }, { page: 1, limit: 20 })).toBe(
        undefined,
      );
      expect(await countByEmailIndex(store.db, ORG, { email: 'dmg123' })).toBe(undefined);
      const found = await search(store.db, ORG, 'dmg123');
      expect(found.sort()).toEqual(
        many.flatMap((e, i) => (e.startsWith('dmg123') ? [`${ORG}-${i}`] : [])).sort(),
      );
    } finally {
      await store.close();
    }
  });

  it('of an earlier layout is laid out anew', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, ['old.layout@l.example']);
    const index = new Sqlite(indexFile(dir));
    index.exec(`drop table search_state;
      create table search_state (id integer primary key, source text, indexed_to integer, retired_seen integer);
      insert into search_state values (1, 'x', 99, 0);
      pragma user_version = 0;`);
    index.close();
    expect(await searchIn(dir, 'old.layout@')).toEqual([`${ORG}-0`]);
    expectIndexExact(dir);
  });

  it('is not rebuilt when it is only behind', async () => {
    const dir = freshDir();
    await indexedDatabase(dir, ['a1@behind.example']);
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await seed(store, ORG, ['a2@behind.example'], 1);
    await store.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${ORG}-0`).execute());
    await store.close();
    expect(withIndexer(dir, (ix) => ix.catchUp())!.rebuilt).toBe(false);
    expectIndexExact(dir);
  });
});

describe('migration 0009 on a database indexed in itself (0003 and 0006)', () => {
  it('moves the index to its own file, keeps every key, and never issues an old one again', async () => {
    const emails = Array.from({ length: 120 }, (_, i) => `five${i}@before.example`);
    const older = {
      migration: '0008_stored_contact_json',
      org: 'org-5',
      emails,
      // The top contact deleted before the upgrade: its key was indexed once, and stays retired.
      adjust: (old: Kysely<Database>) => old.deleteFrom('contacts').where('id', '=', 'org-5-119').execute(),
    };
    await onUpgradedStore(older, async (store, dir) => {
      const topBefore = (
        await sql<{ w: number }>`select indexed_to as w from contacts_search_state`.execute(store.db)
      ).rows[0]!.w;
      expect((await store.migrate()).applied).toEqual(migrationsFrom('0009_search_index_file'));
      const inside = await sql<{ n: number }>`select count(*) as n from sqlite_master
        where name like 'contacts_search%' and name not in ('contacts_search_state', 'contacts_search_retired',
          'contacts_search_key', 'contacts_search_state_kept', 'contacts_search_ins', 'contacts_search_upd',
          'contacts_search_del')`.execute(store.db);
      expect(inside.rows[0]!.n).toBe(0);
      expect(await search(store.db, 'org-5', 'five17@')).toEqual(['org-5-17']);
      await seed(store, 'org-5', ['six@after.example'], 120);
      const six = (
        await sql<{ k: number }>`select search_key as k from contacts where id = 'org-5-120'`.execute(
          store.db,
        )
      ).rows[0]!.k;
      expect(six).toBeGreaterThan(topBefore);
      expect(await search(store.db, 'org-5', 'six@after')).toEqual(['org-5-120']);
      expectIndexExact(dir);
      expect(await search(store.db, 'org-5', 'five17@')).toEqual(['org-5-17']);
      expect(await search(store.db, 'org-5', 'five119@')).toEqual([]);
    });
  });
});

describe('migration 0003 on a database written before it', () => {
  it('indexes the contacts already there, and new contacts after them', async () => {
    const older = {
      migration: '0002_contact_counts',
      org: 'org-old',
      emails: Array.from({ length: 250 }, (_, i) => `legacy${i}@before.example`),
      adjust: (old: Kysely<Database>) => old.deleteFrom('contacts').where('id', '=', 'org-old-7').execute(),
    };
    await onUpgradedStore(older, async (store, dir) => {
      expect((await store.migrate()).applied).toEqual(migrationsFrom('0003_contact_search'));
      expectIndexExact(dir);
      expect(await search(store.db, 'org-old', 'legacy17@')).toEqual(['org-old-17']);
      expect(await search(store.db, 'org-old', 'legacy7@')).toEqual([]);
      const fresh = Array.from({ length: 10 }, (_, i) => `fresh${i}@after.example`);
      await seed(store, 'org-old', fresh, 250);
      expect(await search(store.db, 'org-old', 'fresh5@')).toEqual(['org-old-255']);
      const keys = await sql<{ k: number; id: string }>`select search_key as k, id from contacts`.execute(
        store.db,
      );
      const oldMax = Math.max(...keys.rows.filter((r) => !/-25\d$/.test(r.id)).map((r) => r.k));
      expect(keys.rows.find((r) => r.id === 'org-old-250')!.k).toBeGreaterThan(oldMax);
      expectIndexExact(dir);
    });
  });
});
