// Email substring pages on PostgreSQL (contact-search-postgres.repository.ts): the walk with a budget, and
// the page sorted out of the trigram index's matches when the walk does not fill it. The budget is made
// small here so both run on a few hundred contacts; every page is checked against the same filter done in
// JavaScript, with matches that are all old, spread, rare or none, ties in created_at, and the
// unsubscribed filter beside the term.
import { Kysely, PostgresDialect, sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { pageByEmailOnPostgres } from '../../src/search/contact-search-postgres.repository.js';
import type { ContactFilter } from '../../src/contacts/contacts.repository.js';
import { type TestStore, useStore, noPostgres } from '../helpers/stores.js';
import { contactRow } from '../helpers/rows.js';
import type { ContactRow, Database } from '../../src/store/schema.js';
import { allowSnapshotConnections } from '../../src/store/snapshot.js';

const BASE = Date.parse('2031-03-01T00:00:00.000Z');
const ORG = 'org-pg-search';
const COUNT = 600;

/** The oldest 150 hold `legacy`; the rest are spread over 7 domains. Three contacts share each second. */
function row(org: string, i: number): ContactRow {
  const email = i < 150 ? `Old${i}@Legacy.test` : `n${i}@d${i % 7}.test`;
  // Ids not in created_at order, so ties must be broken by id and not by insertion.
  const id = `${org}-${String((i * 7919) % COUNT).padStart(4, '0')}`;
  const at = new Date(BASE + Math.floor(i / 3) * 1000).toISOString();
  return { ...contactRow(org, id, email, at, i % 4 === 0), json: null };
}

describe.skipIf(noPostgres())('email substring pages on postgres', () => {
  let ts: TestStore;
  const rows: ContactRow[] = [];
  useStore('postgres', (opened) => (ts = opened));

  beforeAll(async () => {
    for (const org of [ORG, 'org-pg-other']) {
      await ts.store.write((trx) =>
        trx
          .insertInto('organizations')
          .values({ id: org, name: org, created_at: new Date(BASE).toISOString() })
          .execute(),
      );
      const made = Array.from({ length: COUNT }, (_, i) => row(org, i));
      await ts.store.write((trx) =>
        insertContacts(
          trx,
          made.map((r) => ({ row: r, tags: [] })),
        ),
      );
      if (org === ORG) rows.push(...made);
    }
  });

  function expected(filter: ContactFilter): string[] {
    return rows
      .filter((r) => r.email_lower.includes(filter.email!.toLowerCase()))
      .filter((r) => filter.unsubscribed === undefined || r.unsubscribed === (filter.unsubscribed ? 1 : 0))
      .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id))
      .map((r) => r.id);
  }

  /** The page's ids and its total, where this path answers. */
  async function answer(filter: ContactFilter, p: number, limit: number, total?: number, tuning = {}) {
    const got = await pageByEmailOnPostgres(ts.store.db, ORG, filter, { page: p, limit }, total, {
      walkBudget: 40,
      ...tuning,
    });
    return (
      got && { contacts: got.contacts?.map((j) => (JSON.parse(j) as { id: string }).id), total: got.total }
    );
  }

  async function page(filter: ContactFilter, p: number, limit: number, total?: number, budget = 40) {
    return (await answer(filter, p, limit, total, { walkBudget: budget }))?.contacts;
  }

  /**
   * An organisation of its own with `count` contacts, the i-th at `address(i)`, made i ms after BASE and
   * named `${org}-` and i in five digits: its rows, oldest first.
   */
  async function seedOrganization(org: string, count: number, address: (i: number) => string) {
    await ts.store.write((trx) =>
      trx
        .insertInto('organizations')
        .values({ id: org, name: org, created_at: new Date(BASE).toISOString() })
        .execute(),
    );
    const made = Array.from({ length: count }, (_, i) => {
      const at = new Date(BASE + i).toISOString();
      return { ...contactRow(org, `${org}-${String(i).padStart(5, '0')}`, address(i), at), json: null };
    });
    for (let i = 0; i < made.length; i += 5_000) {
      const batch = made.slice(i, i + 5_000);
      await ts.store.write((trx) =>
        insertContacts(
          trx,
          batch.map((row) => ({ row, tags: [] })),
        ),
      );
    }
    return made;
  }

  it('walks the newest contacts, and sorts the matches when the walk does not fill the page', async () => {
    const filters: ContactFilter[] = [
      { email: 'LEGACY' }, // all old: the walk never reaches them
      { email: 'd3.test' }, // spread, one in seven
      { email: '.test' }, // every contact
      { email: 'n59' }, // rare
      { email: 'old14' }, // rare and old
      { email: 'nobody' },
      { email: 'legacy', unsubscribed: true },
      { email: 'd2.', unsubscribed: false },
      { email: 'old1', unsubscribed: false }, // old, and some share their second
    ];
    let answered = 0;
    for (const filter of filters) {
      const want = expected(filter);
      for (const limit of [7, 20]) {
        for (const known of [undefined, want.length]) {
          const pages = Math.ceil(want.length / limit) + 1;
          for (const p of [1, 2, 3, Math.max(1, pages - 1), pages]) {
            const got = await answer(filter, p, limit, known);
            const step = `${JSON.stringify(filter)} page ${p} of ${limit}, total ${known}`;
            // undefined: the plain walk's page (a walk expected to pass most of the organisation).
            if (got === undefined) continue;
            answered++;
            expect(got.contacts, step).toEqual(want.slice((p - 1) * limit, p * limit));
            if (got.total !== undefined) expect(got.total, step).toBe(want.length);
          }
        }
      }
    }
    // Most of these pages (9 filters × 2 limits × 2 × 5) were answered here, not left to the plain walk.
    expect(answered).toBeGreaterThan(100);
  });

  it('answers page 1 of old matches itself, and leaves what it cannot do to the plain walk', async () => {
    // The sorted path, not the plain walk, gives the page of a term whose matches the budget never reaches.
    expect(await page({ email: 'legacy' }, 1, 20)).toEqual(expected({ email: 'legacy' }).slice(0, 20));
    expect(await page({ email: 'legacy' }, 1, 20, 150)).toEqual(expected({ email: 'legacy' }).slice(0, 20));
    // Too short for a trigram; a tag beside the term; a budget that covers the organisation; a deep page
    // without a total; a walk expected to be long.
    expect(await page({ email: 'n5' }, 1, 20)).toBeUndefined();
    expect(
      await pageByEmailOnPostgres(
        ts.store.db,
        ORG,
        { email: 'legacy', tag: 'x' },
        { page: 1, limit: 20 },
        undefined,
      ),
    ).toBeUndefined();
    expect(await page({ email: 'legacy' }, 1, 20, undefined, COUNT)).toBeUndefined();
    // A deep page asked before its total: the total is counted first, and here says there is no page.
    expect(await answer({ email: '.test' }, 200, 20)).toEqual({ contacts: [], total: COUNT });
    expect(await answer({ email: 'legacy' }, 101, 20)).toEqual({ contacts: [], total: 150 });
    expect(await page({ email: '.test' }, 25, 20, COUNT)).toBeUndefined();
    // With a total: twice the walk spread matches would need (here 2 × 160 contacts) before the sort.
    expect(await page({ email: 'legacy' }, 2, 20, 150)).toEqual(expected({ email: 'legacy' }).slice(20, 40));
    // Past the end of a known total: nothing to read.
    expect(await page({ email: 'legacy' }, 9, 20, 150)).toEqual([]);
    // A known total few enough to sort for less than the walk to them (100 × 600 contacts for one match),
    // within the trigram index's time (none under 100,000 contacts: the plain walk then).
    expect(expected({ email: 'old149' })).toHaveLength(1);
    expect((await answer({ email: 'old149' }, 1, 100, 1, { trigramMs: 10_000 }))?.contacts).toEqual(
      expected({ email: 'old149' }),
    );
    expect(await page({ email: 'old149' }, 1, 100, 1)).toBeUndefined();
  });

  it('counts the matches it sorts (beside the page), so the caller need not count them again', async () => {
    for (const filter of [{ email: 'legacy' }, { email: 'LEGACY', unsubscribed: true }, { email: 'n59' }]) {
      expect((await answer(filter, 1, 20))?.total, JSON.stringify(filter)).toBe(expected(filter).length);
    }
    // A page past the end sorts nothing out, and still learns the total; a walked page counts nothing.
    expect(await answer({ email: 'legacy' }, 9, 20)).toEqual({
      contacts: [],
      total: expected({ email: 'legacy' }).length,
    });
    expect((await answer({ email: '.test' }, 1, 20))?.total).toBeUndefined();
  });

  // The other organisation holds the same contacts; these tests add to it.
  const OTHER = 'org-pg-other';
  /** The search of `legacy` in OTHER, on a pool of its own whose every statement is `seen` (and `after`). */
  async function searchLegacy(
    p: number,
    limit: number,
    known: number | undefined,
    seen: string[],
    after: (sql: string) => Promise<void> = async () => undefined,
    /** Connections a count in parts may take at once (one: the count and the page in one transaction). */
    connections = 1,
    /** The trigram index's time for the count (ms): none, so the address chunks count, unless given. */
    trigramMs = 0,
  ) {
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({
        pool: new pg.Pool({ connectionString: ts.databaseUrl, max: connections + 1 }),
      }),
      log: async (event) => {
        seen.push(event.query.sql);
        await after(event.query.sql);
      },
    });
    if (connections > 1) allowSnapshotConnections(db, connections);
    try {
      return await pageByEmailOnPostgres(db, OTHER, { email: 'legacy' }, { page: p, limit }, known, {
        walkBudget: 40,
        trigramMs,
      });
    } finally {
      await db.destroy();
    }
  }

  /** OTHER's contacts that hold `legacy`, as the store holds them now. */
  async function legacyNow(): Promise<number> {
    const { rows } = await sql<{ n: string }>`select count(*) as n from contacts
      where organization_id = ${OTHER} and email_lower like '%legacy%'`.execute(ts.store.db);
    return Number(rows[0]!.n);
  }

  /**
   * The search of `legacy` in OTHER's newest 400, page 1, where right after the first statement `marked`
   * (a part of the count), before the page, another client adds a match, which the answer must not see.
   */
  async function searchWithLateMatch(connections: number, trigramMs: number, marked: RegExp) {
    const before = await legacyNow();
    let added = false;
    const seen: string[] = [];
    const tag = `late-${trigramMs}-${connections}`;
    const got = await searchLegacy(
      1,
      400,
      undefined,
      seen,
      async (sql) => {
        if (added || !marked.test(sql)) return;
        added = true;
        const at = new Date(BASE + 20_000_000 + trigramMs + connections).toISOString();
        const made = { ...contactRow(OTHER, tag, `${tag}@legacy.test`, at), json: null };
        await ts.store.write((trx) => insertContacts(trx, [{ row: made, tags: [] }]));
      },
      connections,
      trigramMs,
    );
    expect(added).toBe(true);
    expect(got?.contacts, `${connections} connections`).toHaveLength(before);
    expect(got?.total).toBe(before);
    expect(await legacyNow()).toBe(before + 1);
    return seen;
  }

  /** The statement that sorts and counts the matches through the trigram index. */
  const TRIGRAM_SEARCH = /with m as materialized \(\s*select created_at, id from contact_addresses/i;
  /** The statement that sorts the page alone out of the matches. */
  const SORT_PAGE = /from \(select created_at, id from contact_addresses/i;

  it('counts the matches in the address chunks first, in one snapshot with the page, and sorts no page of none', async () => {
    // In one transaction, and in two parts on two connections.
    for (const connections of [1, 2]) {
      const seen = await searchWithLateMatch(connections, 0, /string_to_array/);
      // Two parts, or one; none through the trigram index.
      expect(seen.filter((q) => q.includes('string_to_array'))).toHaveLength(connections);
      expect(seen.filter((q) => TRIGRAM_SEARCH.test(q))).toEqual([]);
    }
    // A term no contact holds (which pg_trgm would look for in every address with a word beginning `t`),
    // or a page past the end: the count alone.
    for (const [filter, p, trigramMs] of [
      [{ email: 'q.t' }, 1, 0],
      [{ email: 'legacy' }, 99, 0],
      [{ email: 'q.t' }, 1, 1000],
      [{ email: 'legacy' }, 99, 1000],
    ] as const) {
      const asked: string[] = [];
      const db = new Kysely<Database>({
        dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: ts.databaseUrl, max: 1 }) }),
        log: (event) => void asked.push(event.query.sql),
      });
      try {
        const answer = await pageByEmailOnPostgres(db, OTHER, filter, { page: p, limit: 20 }, undefined, {
          walkBudget: 40,
          trigramMs,
        });
        expect(answer).toEqual({ contacts: [], total: filter.email === 'legacy' ? await legacyNow() : 0 });
      } finally {
        await db.destroy();
      }
      // Through the chunks, no page is sorted; through the trigram index, the one statement and nothing else.
      expect(asked.filter((q) => SORT_PAGE.test(q))).toEqual([]);
      if (trigramMs > 0) {
        expect(asked.filter((q) => TRIGRAM_SEARCH.test(q))).toHaveLength(1);
        expect(asked.filter((q) => q.includes('string_to_array'))).toEqual([]);
      }
    }
  });

  it('sorts and counts a few matches through the trigram index, in one statement', async () => {
    for (const connections of [1, 2]) {
      const seen = await searchWithLateMatch(connections, 10_000, TRIGRAM_SEARCH);
      // The chunks were not read; the timeout went with its savepoint.
      expect(seen.filter((q) => q.includes('string_to_array'))).toEqual([]);
      expect(seen.filter((q) => /rollback to savepoint/i.test(q))).toHaveLength(1);
    }
  });

  it('sorts old matches after a walk with a budget falls short, and leaves a few spread ones to the plain walk', async () => {
    // 60,000 contacts: the oldest 3,000 hold `relic`; 38 of the others, spread, hold `qz`.
    const org = 'org-pg-relics';
    const made = await seedOrganization(org, 60_000, (i) =>
      i < 3_000 ? `relic${i}@old.test` : i % 1_500 === 0 ? `qz${i}@new.test` : `n${i}@new.test`,
    );
    const ids = async (filter: ContactFilter, p: number, limit: number, total: number) => {
      const got = await pageByEmailOnPostgres(ts.store.db, org, filter, { page: p, limit }, total);
      return got?.contacts?.map((j) => (JSON.parse(j) as { id: string }).id);
    };
    // Page 63 of 20 of the 3,000: a walk of spread matches would reach it after 25,200 contacts, and they
    // are too many to sort before walking (MATCH_COST). Twice that walk, from the newest, finds none; they
    // are sorted (the plain walk would pass all 57,000 newer contacts). Newest first: relic1759 to relic1740.
    expect(await ids({ email: 'relic' }, 63, 20, 3_000)).toEqual(
      Array.from({ length: 20 }, (_, k) => made[1_759 - k]!.id),
    );
    // 38 spread matches of `qz`, page 1 of 100: expected after about 158,000 contacts, past LONG_WALK, and
    // too few to be worth that walk; sorted first only within the trigram index's time (none under 100,000
    // contacts), so the plain walk's. (Here a budget would cover the whole organisation, which is the plain
    // walk too: the SQLite test, where that walks every contact itself, tells LONG_WALK apart.)
    expect(await ids({ email: 'qz' }, 1, 100, 38)).toBeUndefined();
  });

  it('counts in the address chunks when the trigram index takes longer than its time, in a transaction too', async () => {
    // 20,000 old matches: more than the trigram index counts in 1 ms. 40 newer contacts hold none.
    const org = 'org-pg-slow-trigram';
    const made = await seedOrganization(org, 20_040, (i) =>
      i < 20_000 ? `slow${i}@old${i % 5}.test` : `new${i}@d.test`,
    );
    const want = made
      .filter((r) => r.email.startsWith('slow1'))
      .map((r) => r.id)
      .reverse();
    const seen: string[] = [];
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: ts.databaseUrl, max: 3 }) }),
      log: (event) => void seen.push(event.query.sql),
    });
    allowSnapshotConnections(db, 2);
    const tuning = { walkBudget: 40, trigramMs: 1 };
    const search = (conn: Kysely<Database>, p: number) =>
      pageByEmailOnPostgres(conn, org, { email: 'SLOW1' }, { page: p, limit: 20 }, undefined, tuning);
    const ids = (answer: { contacts?: string[] } | undefined) =>
      answer?.contacts?.map((j) => (JSON.parse(j) as { id: string }).id);
    try {
      for (const p of [1, 3]) {
        const answer = await search(db, p);
        expect(answer?.total).toBe(want.length);
        expect(ids(answer)).toEqual(want.slice((p - 1) * 20, p * 20));
      }
      // In the caller's transaction: the stopped count is rolled back to its savepoint, and the rest runs.
      const inTrx = await db.transaction().execute(async (trx) => {
        const answer = await search(trx, 2);
        await sql`select 1`.execute(trx);
        return answer;
      });
      expect(inTrx?.total).toBe(want.length);
      expect(ids(inTrx)).toEqual(want.slice(20, 40));
      // Each of the three tried the trigram index, and counted in the chunks: in two parts, or one in the
      // transaction.
      expect(seen.filter((q) => TRIGRAM_SEARCH.test(q))).toHaveLength(3);
      expect(seen.filter((q) => q.includes('string_to_array'))).toHaveLength(5);
      // Then each sorted its page out of the matches.
      expect(seen.filter((q) => SORT_PAGE.test(q))).toHaveLength(3);
      // A deep page of a term every old contact holds, asked before its total: counted first (in the
      // chunks), then walked with a budget; or, with a budget as large as the organisation, left to the
      // plain walk, with the total.
      const all = made
        .filter((r) => r.email.startsWith('slow'))
        .map((r) => r.id)
        .reverse();
      const deep = (budget: number) =>
        pageByEmailOnPostgres(db, org, { email: 'slow' }, { page: 101, limit: 20 }, undefined, {
          walkBudget: budget,
          trigramMs: 1,
        });
      const walked = await deep(40);
      expect(walked?.total).toBe(20_000);
      expect(ids(walked)).toEqual(all.slice(2000, 2020));
      expect(await deep(20_040)).toEqual({ total: 20_000 });
    } finally {
      await db.destroy();
    }
    // On a pool of one connection, outside a transaction: the trigram index in a transaction of its own,
    // then the chunks in one part, in another.
    const one: string[] = [];
    const single = new Kysely<Database>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: ts.databaseUrl, max: 1 }) }),
      log: (event) => void one.push(event.query.sql),
    });
    try {
      const got = await search(single, 2);
      expect(got?.total).toBe(want.length);
      expect(ids(got)).toEqual(want.slice(20, 40));
      expect(one.filter((q) => TRIGRAM_SEARCH.test(q))).toHaveLength(1);
      expect(one.filter((q) => q.includes('string_to_array'))).toHaveLength(1);
    } finally {
      await single.destroy();
    }
  });

  it('counts nothing when the caller knows the total', async () => {
    const seen: string[] = [];
    const got = await searchLegacy(2, 20, 151, seen);
    expect(got?.contacts).toHaveLength(20);
    expect(got?.total).toBeUndefined();
    expect(seen.filter((q) => /count\(/i.test(q))).toEqual([]);
  });
});
