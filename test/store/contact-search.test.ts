// Migrations 0003 and 0006 on SQLite: the trigram index of contacts' emails stays exact under inserts,
// address changes, deletes (one by one and by an organisation's cascade), VACUUM, and an upgrade of a
// database written before it existed; its answers equal the plain LIKE path's, whether the contacts
// asked about are in the index yet (below its watermark) or not.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countContacts, insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import { countByEmailIndex, pageByEmailIndex } from '../../src/contacts/contact-search.repository.js';
import { migrateTo } from '../../src/store/migrations.js';
import { indexPendingContacts } from '../../src/store/search-index.js';
import type { NewContact, Database } from '../../src/store/schema.js';
import { type Executor, type Store, createStore } from '../../src/store/store.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { type TestStore, createTestStore, useStore } from '../helpers/stores.js';

const BASE = Date.parse('2031-01-01T00:00:00.000Z');

function contact(org: string, i: number, email: string): { row: NewContact; tags: string[] } {
  const at = new Date(BASE + ((i * 7919) % 1000) * 1000 + i).toISOString();
  return {
    row: {
      id: `${org}-${i}`,
      organization_id: org,
      email,
      email_lower: email.toLowerCase(),
      first_name: null,
      last_name: null,
      unsubscribed: i % 3 === 0 ? 1 : 0,
      custom_fields: '{}',
      tags: '[]',
      created_at: at,
      updated_at: at,
    },
    tags: [],
  };
}

async function seed(
  store: Store | Kysely<Database>,
  org: string,
  emails: string[],
  first = 0,
): Promise<void> {
  const rows = emails.map((email, i) => contact(org, first + i, email));
  for (let i = 0; i < rows.length; i += 100) {
    const chunk = rows.slice(i, i + 100);
    if ('write' in store) await store.write((trx) => insertContacts(trx, chunk));
    else await insertContacts(store, chunk);
  }
}

/** Whether the index holds exactly the contacts at or below its watermark, each under its address. */
async function expectIndexedToWatermark(db: Kysely<Database>): Promise<void> {
  // One read transaction: the store's own indexer may move the watermark meanwhile.
  await db.transaction().execute(async (trx) => {
    const [{ w }] = (await sql<{ w: number }>`select indexed_to as w from contacts_search_state`.execute(trx))
      .rows as [{ w: number }];
    const indexed = await sql<{ k: number }>`select rowid as k from contacts_search order by 1`.execute(trx);
    const keys = await sql<{ k: number }>`select search_key as k from contacts
      where search_key <= ${w} order by 1`.execute(trx);
    expect(indexed.rows).toEqual(keys.rows);
    const { rows } = await sql<{ email_lower: string; search_key: number }>`
      select email_lower, search_key from contacts where search_key <= ${w}`.execute(trx);
    for (const r of rows) {
      const hits = await sql<{ k: number }>`select rowid as k from contacts_search
        where contacts_search match ${`"${r.email_lower.replaceAll('"', '""')}"`}`.execute(trx);
      expect(hits.rows.map((h) => h.k)).toContain(r.search_key);
    }
  });
}

/** Indexes every contact above the watermark; returns how many there were. */
async function indexAll(store: Store): Promise<number> {
  let total = 0;
  for (let n = -1; n !== 0; total += n) n = await store.write((trx) => indexPendingContacts(trx));
  return total;
}

/** The index is exact up to its watermark, and once the rest is indexed it holds every contact. */
async function expectIndexExact(store: Store): Promise<void> {
  await expectIndexedToWatermark(store.db);
  await indexAll(store);
  const pending = await sql<{ n: number }>`select count(*) as n from contacts
    where search_key > (select indexed_to from contacts_search_state)`.execute(store.db);
  expect(pending.rows[0]!.n).toBe(0);
  await expectIndexedToWatermark(store.db);
}

/**
 * Runs `check` on a store opened over a database as an older release left it: migrated up to `migration`,
 * `org` holding these contacts, then changed by `adjust`. The database is removed after.
 */
async function onUpgradedStore(
  older: { migration: string; org: string; emails: string[]; adjust?: (old: Kysely<Database>) => unknown },
  check: (store: Store) => Promise<void>,
): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-upgrade-'));
  try {
    const old = new Kysely<Database>({
      dialect: new SqliteDialect({ database: new BetterSqlite3(path.join(dir, 'mailroom.sqlite')) }),
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
      await check(store);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const search = (db: Kysely<Database>, org: string, email: string) =>
  pageContacts(db, org, { email }, { page: 1, limit: 100 }, 'sqlite').then((p) =>
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
    const db = t.ts.store.db;
    let indexedPages = 0;
    let indexedCounts = 0;
    for (const email of ['person12', 'PERSON599', 'we"ird', '"ird%_', '%_x', 'site3.', 'example', 'zzz']) {
      for (const unsubscribed of [undefined, true]) {
        const filter = { email, unsubscribed };
        const total = await countContacts(db, org, filter);
        for (const page of [
          { page: 1, limit: 20 },
          { page: 2, limit: 3 },
          { page: 40, limit: 20 },
        ]) {
          const { contacts: rows } = await pageContacts(db, org, filter, page);
          const indexed = await pageByEmailIndex(db, 'sqlite', org, filter, page);
          if (indexed) indexedPages++;
          expect(indexed?.contacts ?? rows, `${email} page ${page.page}`).toEqual(rows);
          // A page with rows learns the total on the way; whatever total it learns is right.
          if (indexed && rows.length > 0) expect(indexed.total).toBe(total);
          if (indexed?.total !== undefined) expect(indexed.total).toBe(total);
        }
        const count = await countByEmailIndex(db, 'sqlite', org, filter);
        if (count !== undefined) indexedCounts++;
        expect(count ?? total).toBe(total);
      }
    }
    // Both strategies were taken; a term that matches most contacts walks instead.
    expect(indexedPages).toBeGreaterThan(10);
    expect(indexedCounts).toBeGreaterThan(5);
    expect(await pageByEmailIndex(db, 'sqlite', org, { email: 'example' }, { page: 1, limit: 20 })).toBe(
      undefined,
    );
    expect(await search(db, org, 'WE"IRD%_X@')).toEqual([`${org}-5`]);
    expect(await pageByEmailIndex(db, 'sqlite', org, { email: 'pe' }, { page: 1, limit: 20 })).toBe(
      undefined,
    );
    expect(await pageByEmailIndex(db, 'postgres', org, { email: 'person1' }, { page: 1, limit: 20 })).toBe(
      undefined,
    );
  });

  it('follows address changes and deletes', async () => {
    const org = (await t.services.orgs.create('triggers')).id;
    const c = t.services.contacts;
    const a = await c.create(org, { email: 'alpha.one@trig.example' });
    const b = await c.create(org, { email: 'beta.two@trig.example' });
    const db = t.ts.store.db;
    expect(await search(db, org, 'alpha.one')).toEqual([a.id]);

    await c.update(org, { id: a.id, email: 'gamma.three@trig.example' });
    await c.update(org, { id: b.id, firstName: 'Same address' });
    expect(await search(db, org, 'alpha.one')).toEqual([]);
    expect(await search(db, org, 'gamma.three')).toEqual([a.id]);
    expect(await search(db, org, 'beta.two')).toEqual([b.id]);

    await c.delete(org, { id: b.id });
    expect(await search(db, org, 'beta.two')).toEqual([]);
    await expectIndexExact(t.ts.store);

    // Many at once, as an organisation's cascade deletes them.
    await t.ts.store.write((trx) => trx.deleteFrom('contacts').where('organization_id', '=', org).execute());
    const left = await sql<{ n: number }>`select count(*) as n from contacts_search
      where contacts_search match '"trig.example"'`.execute(db);
    expect(left.rows[0]!.n).toBe(0);
    await expectIndexExact(t.ts.store);
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
      // Migration 0002's count trigger re-adds a count row for the organisation being deleted, which its
      // foreign key refuses (a bug of its own); without it, the cascade itself is what is tested here.
      await ts.store.write((trx) => sql`drop trigger contacts_count_del`.execute(trx));
      await ts.store.write((trx) => trx.deleteFrom('organizations').where('id', '=', org).execute());
      expect(await search(ts.store.db, org, 'cascade.example')).toEqual([]);
      await expectIndexExact(ts.store);
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
    const vacuum = new BetterSqlite3(path.join(t.ts.dataDir, 'mailroom.sqlite'));
    vacuum.exec('VACUUM');
    vacuum.close();

    const db = t.ts.store.db;
    await expectIndexExact(t.ts.store);
    expect(await search(db, org, 'vac250@')).toEqual([`${org}-250`]);
    expect(await search(db, org, 'vac251@')).toEqual([]);
    const made = await t.services.contacts.create(org, { email: 'after.vacuum@vacuum.example' });
    expect(await search(db, org, 'after.vac')).toEqual([made.id]);
    await expectIndexExact(t.ts.store);
  });
});

describe('contacts not yet in the index (above its watermark)', () => {
  let ts: TestStore;
  useStore('sqlite', (opened) => (ts = opened));
  const ORG = 'org-tail';
  const keysOf = (db: Executor) =>
    sql<{ id: string; k: number }>`select id, search_key as k from contacts order by 2`
      .execute(db)
      .then((r) => r.rows);
  // Inside one write transaction the store's own indexer cannot run: what a search finds there is
  // found above the watermark.
  const searchIn = (trx: Executor, email: string) =>
    pageByEmailIndex(trx, 'sqlite', ORG, { email }, { page: 1, limit: 20 }).then((p) =>
      p?.contacts.map((c) => (JSON.parse(c) as { id: string }).id),
    );
  const countIn = (trx: Executor, email: string) => countByEmailIndex(trx, 'sqlite', ORG, { email });

  it('are found at once, then through the index, with the same answers', async () => {
    await ts.store.write((trx) =>
      trx
        .insertInto('organizations')
        .values({ id: ORG, name: 't', created_at: new Date(BASE).toISOString() })
        .execute(),
    );
    await seed(
      ts.store,
      ORG,
      Array.from({ length: 200 }, (_, i) => `old${i}@tail.example`),
    );
    await indexAll(ts.store);
    const answers = await ts.store.write(async (trx) => {
      await insertContacts(trx, [
        contact(ORG, 500, 'new.one@tail.example'),
        contact(ORG, 501, 'new.two@tail.example'),
      ]);
      const w = await sql<{ w: number }>`select indexed_to as w from contacts_search_state`.execute(trx);
      const keys = await keysOf(trx);
      // Both new contacts sit above the watermark: not in the index, yet found.
      for (const id of [`${ORG}-500`, `${ORG}-501`])
        expect(keys.find((r) => r.id === id)!.k).toBeGreaterThan(w.rows[0]!.w);
      return {
        one: await searchIn(trx, 'NEW.ONE@'),
        both: (await searchIn(trx, 'new.'))!.sort(),
        count: await countIn(trx, 'new.'),
        old: await searchIn(trx, 'old17@'),
      };
    });
    expect(answers).toEqual({
      one: [`${ORG}-500`],
      both: [`${ORG}-501`, `${ORG}-500`].sort(),
      count: 2,
      old: [`${ORG}-17`],
    });
    await indexAll(ts.store);
    await ts.store.write(async (trx) => {
      expect(await searchIn(trx, 'NEW.ONE@')).toEqual(answers.one);
      expect((await searchIn(trx, 'new.'))!.sort()).toEqual(answers.both);
      expect(await countIn(trx, 'new.')).toBe(2);
    });
    await expectIndexExact(ts.store);
  });

  it('follow address changes and deletes made before they are indexed', async () => {
    await ts.store.write(async (trx) => {
      await insertContacts(trx, [
        contact(ORG, 600, 'moving@tail.example'),
        contact(ORG, 601, 'leaving@tail.example'),
      ]);
      await trx
        .updateTable('contacts')
        .set({ email: 'moved@tail.example', email_lower: 'moved@tail.example' })
        .where('id', '=', `${ORG}-600`)
        .execute();
      await trx.deleteFrom('contacts').where('id', '=', `${ORG}-601`).execute();
      expect(await searchIn(trx, 'moving@')).toEqual([]);
      expect(await searchIn(trx, 'moved@')).toEqual([`${ORG}-600`]);
      expect(await searchIn(trx, 'leaving@')).toEqual([]);
    });
    await expectIndexExact(ts.store);
    expect(await search(ts.store.db, ORG, 'moved@')).toEqual([`${ORG}-600`]);
    expect(await search(ts.store.db, ORG, 'moving@')).toEqual([]);
  });

  it('never take the key of a deleted indexed contact, so none is taken for indexed too soon', async () => {
    await indexAll(ts.store);
    const top = (await keysOf(ts.store.db)).at(-1)!;
    await ts.store.write((trx) => trx.deleteFrom('contacts').where('id', '=', top.id).execute());
    await ts.store.write(async (trx) => {
      await insertContacts(trx, [contact(ORG, 700, 'reborn@tail.example')]);
      const made = (await keysOf(trx)).find((r) => r.id === `${ORG}-700`)!;
      expect(made.k).toBeGreaterThan(top.k);
      expect(await searchIn(trx, 'reborn@')).toEqual([`${ORG}-700`]);
    });
    await expectIndexExact(ts.store);
    expect(await search(ts.store.db, ORG, 'reborn@')).toEqual([`${ORG}-700`]);
  });

  it('keep a watermark whose row cannot be deleted (every new key would be NULL without it)', async () => {
    await expect(
      ts.store.write((trx) => sql`delete from contacts_search_state`.execute(trx)),
    ).rejects.toThrow(/keeps its row/);
    const w = await sql<{ n: number }>`select count(*) as n from contacts_search_state`.execute(ts.store.db);
    expect(w.rows[0]!.n).toBe(1);
  });

  it('are indexed by the store itself, a moment after they are written', async () => {
    await seed(
      ts.store,
      ORG,
      Array.from({ length: 50 }, (_, i) => `later${i}@tail.example`),
      800,
    );
    const pending = () =>
      sql<{ n: number }>`select count(*) as n from contacts
        where search_key > (select indexed_to from contacts_search_state)`
        .execute(ts.store.db)
        .then((r) => r.rows[0]!.n);
    const deadline = Date.now() + 5_000;
    while ((await pending()) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(await pending()).toBe(0);
    await expectIndexedToWatermark(ts.store.db);
  });
});

describe('the store indexing new contacts on its own', () => {
  let dir: string;
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('says once when it starts failing, and again only after it has recovered', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-indexer-'));
    const told: string[] = [];
    const store = createStore({
      dataDir: dir,
      onBackgroundError: (err, what) => told.push(`${what}: ${(err as Error).message}`),
    });
    const settle = () => new Promise((r) => setTimeout(r, 300));
    try {
      await store.migrate();
      await store.write((trx) =>
        trx.insertInto('organizations').values({ id: 'o', name: 'o', created_at: 'x' }).execute(),
      );
      await settle();
      expect(told).toEqual([]);
      // The index's table gone: every round fails the same way, for several rounds.
      await store.write((trx) =>
        sql`alter table contacts_search rename to contacts_search_away`.execute(trx),
      );
      await seed(store, 'o', ['one@fail.example']);
      await settle();
      expect(told).toHaveLength(1);
      expect(told[0]).toMatch(/^indexing new contacts for search: .*contacts_search/);
      // Searches stay exact meanwhile: the contact is read from the table.
      await store.write((trx) =>
        sql`alter table contacts_search_away rename to contacts_search`.execute(trx),
      );
      await settle();
      expect(await search(store.db, 'o', 'one@fail')).toEqual(['o-0']);
      await store.write((trx) =>
        sql`alter table contacts_search rename to contacts_search_away`.execute(trx),
      );
      await seed(store, 'o', ['two@fail.example'], 1);
      await settle();
      expect(told).toHaveLength(2);
    } finally {
      await store.close();
    }
  });
});

describe('migration 0006 on a database indexed by migration 0003 alone', () => {
  it('takes every contact already indexed as indexed, and indexes new ones after them', async () => {
    const emails = Array.from({ length: 120 }, (_, i) => `five${i}@before.example`);
    await onUpgradedStore({ migration: '0005_counts_per_statement', org: 'org-5', emails }, async (store) => {
      expect(await store.migrate()).toEqual([
        '0006_deferred_contact_search',
        '0007_unsubscribed_only_index',
        '0008_stored_contact_json',
      ]);
      const w = await sql<{ w: number; top: number }>`select indexed_to as w,
        (select max(search_key) from contacts) as top from contacts_search_state`.execute(store.db);
      expect(w.rows[0]!.w).toBe(w.rows[0]!.top);
      await expectIndexedToWatermark(store.db);
      expect(await search(store.db, 'org-5', 'five17@')).toEqual(['org-5-17']);
      await seed(store, 'org-5', ['six@after.example'], 120);
      expect(await search(store.db, 'org-5', 'six@after')).toEqual(['org-5-120']);
      await expectIndexExact(store);
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
    await onUpgradedStore(older, async (store) => {
      expect(await store.migrate()).toEqual([
        '0003_contact_search',
        '0004_email_counts',
        '0005_counts_per_statement',
        '0006_deferred_contact_search',
        '0007_unsubscribed_only_index',
        '0008_stored_contact_json',
      ]);
      await expectIndexExact(store);
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
      await expectIndexExact(store);
    });
  });
});
