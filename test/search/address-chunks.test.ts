// Counting an email substring in the index file's address chunks (SQLite): the count equals the plain scan's
// for terms that most contacts hold and terms too short for the trigram index, across chunk boundaries and
// organisations, with contacts not indexed yet, and with keys retired but not yet taken out of their chunks.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from '../../src/store/kysely.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countContacts, insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import { countByEmailIndex, pageByEmailIndex } from '../../src/search/contact-search.repository.js';
import {
  ALONE,
  countByChunksInTwo,
  pageByChunks,
  pageByChunksInTwo,
} from '../../src/search/contact-chunks.repository.js';
import { organizationSize } from '../../src/contacts/contact-counts.repository.js';
import { Finder, MAX_TIES, Newest } from '../../src/search/chunk-functions.js';
import { Sqlite, openQueryOnly } from '../../src/store/sqlite-driver.js';
import { CHUNK_CHARS, END, isDamagedChunk } from '../../src/search/address-chunks.js';
import { SearchIndexer } from '../../src/search/search-index.js';
import { SEARCH_FILE, attachSearchFile } from '../../src/search/search-file.js';
import type { ReaderBeside } from '../../src/search/search-indexer.js';
import { type Store, createStore } from '../../src/store/store.js';
import { readChunks } from '../helpers/chunks.js';
import { contactRow } from '../helpers/rows.js';

const AT = '2031-01-01T00:00:00.000Z';
const BIG = 'org-big';
const SMALL = 'org-small';

function row(org: string, i: number, email: string) {
  return { row: contactRow(org, `${org}-${i}`, email, AT, i % 4 === 0), tags: [] };
}

/** Addresses with common parts (every domain, `ab` twice in one address), rare ones, and non-ASCII. */
function address(i: number): string {
  if (i % 250 === 7) return `Über.${i}@Straße${i % 3}.example`;
  return `person${i}.abab@site${i % 7}.example`;
}

const TERMS = [
  'example', // every contact
  'site3', // one in seven
  'person12', // a few
  'abab', // twice in one address: counted once
  'ab', // too short for the trigram index
  'e',
  'über', // not ASCII
  'straße1.',
  'person2999.',
  'zzz', // none
  '%', // none: taken literally
];

describe('counting an email substring in address chunks', () => {
  let dir: string;
  let store: Store;
  const chunks = () => readChunks(path.join(dir, SEARCH_FILE));
  const withIndexer = (indexBatch: number, fn: (ix: SearchIndexer) => unknown) => {
    const ix = new SearchIndexer(path.join(dir, 'mailroom.sqlite'), path.join(dir, SEARCH_FILE), {
      indexBatch,
    });
    try {
      fn(ix);
    } finally {
      ix.close();
    }
  };
  const step = (batch: number) => withIndexer(batch, (ix) => ix.step());
  const catchUp = () => withIndexer(1000, (ix) => ix.catchUp());
  const keysOf = async (ids: string[]) =>
    (
      await sql<{ k: number }>`select search_key as k from contacts where id in (${sql.join(ids)})`.execute(
        store.db,
      )
    ).rows.map((r) => r.k);

  /** Each term's count through the chunks (or the index) beside the plain scan's; both must agree. */
  async function expectCountsExact(): Promise<number> {
    let byChunks = 0;
    for (const org of [BIG, SMALL]) {
      for (const email of TERMS) {
        const plain = await countContacts(store.db, org, { email }, { searchIndex: false });
        const indexed = await countByEmailIndex(store.db, org, { email });
        expect(indexed ?? plain, `${org} ${email}`).toBe(plain);
        if (indexed !== undefined) byChunks++;
        // Through the service's path (search index on) the answer is the same.
        expect(await countContacts(store.db, org, { email }), `${org} ${email}`).toBe(plain);
      }
    }
    return byChunks;
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-chunks-'));
    // No search thread: the index moves only when a test steps it.
    store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await store.migrate();
    for (const id of [BIG, SMALL]) {
      await store.write((trx) =>
        trx.insertInto('organizations').values({ id, name: id, created_at: AT }).execute(),
      );
    }
    const big = Array.from({ length: 3000 }, (_, i) => row(BIG, i, address(i)));
    const small = Array.from({ length: 300 }, (_, i) => row(SMALL, i, address(i * 11)));
    for (const rows of [big, small]) {
      for (let i = 0; i < rows.length; i += 500) {
        await store.write((trx) => insertContacts(trx, rows.slice(i, i + 500)));
      }
    }
  });
  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('equals the plain scan before, while and after the contacts are indexed', async () => {
    // Nothing indexed: every contact is above the watermark and counted from contacts.
    expect(await expectCountsExact()).toBeGreaterThan(10);
    step(1700);
    expect(chunks().length).toBe(1700);
    expect(await expectCountsExact()).toBeGreaterThan(10);
    catchUp();
    expect(chunks().length).toBe(3300);
    expect(await expectCountsExact()).toBeGreaterThan(10);
  });

  it('fills each chunk to about CHUNK_CHARS before starting the next, across steps', async () => {
    const { rows } = await sql<{ chars: number }>`select length(addresses) as chars from search.address_chunks
      where organization_id = ${BIG} order by first_key`.execute(store.db);
    // 3,000 addresses of about 28 characters, indexed in two steps: the first step's last chunk was filled after.
    expect(rows.length).toBeGreaterThan(4);
    const longest = 40;
    for (const { chars } of rows.slice(0, -1)) {
      expect(chars).toBeGreaterThanOrEqual(CHUNK_CHARS);
      expect(chars).toBeLessThan(CHUNK_CHARS + longest);
    }
    expect(rows.at(-1)!.chars).toBeLessThan(CHUNK_CHARS + longest);
  });

  it('leaves out keys retired and not yet taken out of their chunks', async () => {
    // Deleted and readdressed, in the chunks and above the watermark alike; the index is not stepped.
    const retired = await keysOf([`${BIG}-3`, `${BIG}-1757`, `${BIG}-2999`, `${BIG}-10`, `${BIG}-507`]);
    await store.write(async (trx) => {
      await trx
        .deleteFrom('contacts')
        .where('id', 'in', [`${BIG}-3`, `${BIG}-1757`, `${BIG}-2999`])
        .execute();
      for (const [id, email] of [
        [`${BIG}-10`, 'moved.ab@site3.example'],
        [`${BIG}-507`, 'Moved.Über@site3.example'],
      ] as const) {
        await trx
          .updateTable('contacts')
          .set({ email, email_lower: email.toLowerCase() })
          .where('id', '=', id)
          .execute();
      }
      await insertContacts(trx, [row(BIG, 5000, 'late.abab@site3.example')]);
    });
    const held = new Set(chunks().map((e) => e.key));
    expect(retired.every((k) => held.has(k))).toBe(true);
    expect(await expectCountsExact()).toBeGreaterThan(10);
    catchUp();
    expect(chunks().some((e) => retired.includes(e.key))).toBe(false);
    expect(await expectCountsExact()).toBeGreaterThan(10);
  });

  it('gives way to the plain scan while the chunks are far behind: keys to take out, or to add', async () => {
    const org = 'org-leaving';
    await store.write((trx) =>
      trx.insertInto('organizations').values({ id: org, name: org, created_at: AT }).execute(),
    );
    const rows = Array.from({ length: 10_001 }, (_, i) => row(org, i, `gone${i}@leaving.example`));
    for (let i = 0; i < rows.length; i += 2000) {
      await store.write((trx) => insertContacts(trx, rows.slice(i, i + 2000)));
    }
    // 10,001 contacts of another organisation not indexed yet: every count would look them all up.
    expect(await countByEmailIndex(store.db, BIG, { email: 'ab' })).toBeUndefined();
    expect(await countContacts(store.db, BIG, { email: 'ab' })).toBe(
      await countContacts(store.db, BIG, { email: 'ab' }, { searchIndex: false }),
    );
    catchUp();
    await store.write((trx) => trx.deleteFrom('contacts').where('organization_id', '=', org).execute());
    // 10,001 retired keys wait: the chunk count declines, the plain count answers.
    expect(await countByEmailIndex(store.db, BIG, { email: 'example' })).toBeUndefined();
    expect(await countContacts(store.db, BIG, { email: 'example' })).toBe(
      await countContacts(store.db, BIG, { email: 'example' }, { searchIndex: false }),
    );
    catchUp();
    expect(await countByEmailIndex(store.db, BIG, { email: 'example' })).toBeDefined();
    expect(await expectCountsExact()).toBeGreaterThan(10);
    expect(chunks().some((e) => e.organizationId === org)).toBe(false);
  });

  it('never counts a term holding a newline across two addresses', async () => {
    // Too short for the trigram index, and a newline ends each address in a chunk: it scans.
    expect(await countByEmailIndex(store.db, BIG, { email: 'e\n' })).toBeUndefined();
    for (const email of ['e\n', 'example\nperson', '.example\n']) {
      expect(await countContacts(store.db, BIG, { email }), email).toBe(0);
    }
  });
});

describe('a page of an email substring from address chunks', () => {
  const ORG = 'org-pages';
  const T0 = Date.parse('2031-01-01T00:00:00.000Z');
  let dir: string;
  let store: Store;
  const at = (ms: number) => new Date(T0 + ms).toISOString();
  const catchUp = () => {
    const ix = new SearchIndexer(path.join(dir, 'mailroom.sqlite'), path.join(dir, SEARCH_FILE));
    try {
      ix.catchUp();
    } finally {
      ix.close();
    }
  };
  const contact = (i: number, email: string, created: number) => ({
    row: contactRow(ORG, `${ORG}-${String(i).padStart(5, '0')}`, email, at(created)),
    tags: [],
  });
  const write = async (rows: ReturnType<typeof contact>[]) => {
    for (let i = 0; i < rows.length; i += 500) {
      await store.write((trx) => insertContacts(trx, rows.slice(i, i + 500)));
    }
  };
  /**
   * The search thread's half of a search in two parts, run at once on a reader of the test's own (as the
   * thread's; the thread's side is contact-search's test), then `before` ahead of this thread's half,
   * and `after` once it is done, before the page is read.
   */
  let besideConn: InstanceType<typeof Sqlite>;
  type Meddle = () => Promise<void> | void;
  const beside = ({ before, after }: { before?: Meddle; after?: Meddle } = {}): ReaderBeside => ({
    async readBeside(text, parameters) {
      const rows = besideConn.prepare(text).all(...parameters);
      await before?.();
      return {
        // Asked for once this thread's half is done.
        get rows() {
          return Promise.resolve(after?.()).then(() => rows);
        },
        release: () => undefined,
      };
    },
  });

  const TERMS = ['olddomain', 'example', 'late', '7', 'person1', 'tied', 'moved', 'zzz'];
  const PAGES = [
    { page: 1, limit: 20 },
    { page: 3, limit: 7 },
    { page: 50, limit: 20 },
    { page: 1, limit: 100 },
    { page: 400, limit: 20 },
  ];

  /** Every term and page, through the chunks, and through the index with and without a known total. */
  async function expectPagesExact(): Promise<void> {
    for (const email of TERMS) {
      const total = await countContacts(store.db, ORG, { email }, { searchIndex: false });
      for (const page of PAGES) {
        const plain = (await pageContacts(store.db, ORG, { email }, page, { searchIndex: false })).contacts;
        const what = `${email} page ${page.page} of ${page.limit}`;
        const chunked = await pageByChunks(store.db, ORG, email, page);
        expect(chunked, what).toEqual({ contacts: plain, total });
        const inTwo = await pageByChunksInTwo(store.db, beside(), ORG, email, page);
        expect(inTwo, `${what}, chunks searched in two parts`).toEqual({ contacts: plain, total });
        for (const known of [undefined, total]) {
          const found = await pageByEmailIndex(store.db, ORG, { email }, page, known);
          // A deep page without a known total is left to the plain walk (undefined), unless few match.
          const walks = known === undefined && page.page * page.limit > 2000 && found === undefined;
          expect(walks ? plain : found?.contacts, `${what}, total known: ${known}`).toEqual(plain);
          if (found?.total !== undefined) expect(found.total, what).toBe(total);
        }
      }
    }
  }

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-chunk-pages-'));
    store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await store.migrate();
    await store.write((trx) =>
      trx.insertInto('organizations').values({ id: ORG, name: ORG, created_at: AT }).execute(),
    );
    // One second apart, oldest first: the oldest 300 at one domain (a list imported long ago), 50 made in
    // the same millisecond, then 200 written last but dated before all others (key order is not time).
    await write(
      Array.from({ length: 4000 }, (_, i) => {
        const domain = i < 300 ? 'olddomain' : `site${i % 7}`;
        const created = i >= 1000 && i < 1050 ? 1_000_000 : i * 1000;
        const local = i >= 1000 && i < 1050 ? `tied${i}` : `person${i}`;
        return contact(i, `${local}@${domain}.example`, created);
      }),
    );
    await write(Array.from({ length: 200 }, (_, i) => contact(5000 + i, `late${i}@site.example`, -1000 - i)));
    catchUp();
    besideConn = openQueryOnly(path.join(dir, 'mailroom.sqlite'));
    attachSearchFile(besideConn, path.join(dir, SEARCH_FILE));
  });
  afterAll(async () => {
    besideConn.close();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('equals the plain path for matches old, new, out of key order and tied, on every page', async () => {
    await expectPagesExact();
  });

  it('equals it with keys retired and contacts not indexed yet', async () => {
    // Old contacts readdressed take new keys but keep their time; some of each kind go; new ones come.
    await store.write(async (trx) => {
      for (const i of [3, 250, 1020, 3999]) {
        const email = `moved${i}@olddomain.example`;
        await trx
          .updateTable('contacts')
          .set({ email, email_lower: email })
          .where('id', '=', `${ORG}-${String(i).padStart(5, '0')}`)
          .execute();
      }
      await trx
        .deleteFrom('contacts')
        .where('id', 'in', [`${ORG}-00010`, `${ORG}-01001`, `${ORG}-03998`, `${ORG}-05003`])
        .execute();
    });
    await write([
      contact(9000, 'fresh.person1@olddomain.example', 5_000_000),
      contact(9001, 'late.x@x.example', -1),
    ]);
    await expectPagesExact();
    catchUp();
    await expectPagesExact();
  });

  it('searches in two parts only while both see the same chunks and stale keys; otherwise in one', async () => {
    const page = { page: 1, limit: 20 };
    const expectExact = async (found: unknown) => {
      const total = await countContacts(store.db, ORG, { email: 'site' }, { searchIndex: false });
      expect(found).toEqual({
        contacts: (await pageContacts(store.db, ORG, { email: 'site' }, page, { searchIndex: false }))
          .contacts,
        total,
      });
    };
    // Both halves read together, with contacts not indexed yet: one answer, the tail's matches in it.
    await write([
      contact(9100, 'tail.one@site.example', 7_000_000),
      contact(9101, 'tail.two@x.example', 7_000_001),
    ]);
    await expectExact(await pageByChunksInTwo(store.db, beside(), ORG, 'site', page));
    // An indexed contact deleted after the thread's half (its key now stale to this thread's half only).
    const gone = (i: number) => async () => {
      const id = `${ORG}-${String(i).padStart(5, '0')}`;
      await store.write((trx) => trx.deleteFrom('contacts').where('id', '=', id).execute());
    };
    expect(await pageByChunksInTwo(store.db, beside({ before: gone(21) }), ORG, 'site', page)).toBe(ALONE);
    await expectExact(await pageByChunks(store.db, ORG, 'site', page));
    // The same after both halves, before the page.
    expect(await pageByChunksInTwo(store.db, beside({ after: gone(28) }), ORG, 'site', page)).toBe(ALONE);
    await expectExact(await pageByChunks(store.db, ORG, 'site', page));
    // The index moved on after the thread's half (another process's indexer, say), or after both.
    expect(await pageByChunksInTwo(store.db, beside({ before: catchUp }), ORG, 'site', page)).toBe(ALONE);
    await write([contact(9102, 'tail.three@site.example', 7_000_002)]);
    expect(await pageByChunksInTwo(store.db, beside({ after: catchUp }), ORG, 'site', page)).toBe(ALONE);
    await expectExact(await pageByChunksInTwo(store.db, beside(), ORG, 'site', page));
    // A count in two parts: the same, in two statements (this thread's counts the tail).
    const total = () => countContacts(store.db, ORG, { email: 'site' }, { searchIndex: false });
    await write([contact(9103, 'tail.four@site.example', 7_000_003)]);
    expect(await countByChunksInTwo(store.db, beside(), ORG, 'site')).toBe(await total());
    expect(await countByChunksInTwo(store.db, beside({ before: gone(35) }), ORG, 'site')).toBe(ALONE);
    expect(await countByChunksInTwo(store.db, beside({ before: catchUp }), ORG, 'site')).toBe(ALONE);
    expect(await countByChunksInTwo(store.db, beside(), ORG, 'site')).toBe(await total());
    // The thread gone or busy, or its read failed.
    const none: ReaderBeside = { readBeside: () => Promise.resolve(undefined) };
    expect(await pageByChunksInTwo(store.db, none, ORG, 'site', page)).toBe(ALONE);
    expect(await countByChunksInTwo(store.db, none, ORG, 'site')).toBe(ALONE);
    const failing: ReaderBeside = {
      readBeside: () =>
        Promise.resolve({ rows: Promise.reject(new Error('stopped')), release: () => undefined }),
    };
    expect(await pageByChunksInTwo(store.db, failing, ORG, 'site', page)).toBe(ALONE);
    expect(await countByChunksInTwo(store.db, failing, ORG, 'site')).toBe(ALONE);
  });

  it('walks only the newest contacts for a known total, then the index (few matches) or the chunks (many) for matches further back', async () => {
    // Newer than all the others: a walk of the newest thousands finds none of the old domain's.
    await write(
      Array.from({ length: 10_000 }, (_, i) => contact(30_000 + i, `filler${i}@new.example`, 6_000_000 + i)),
    );
    catchUp();
    // olddomain (302) and late (200) are read through the index; site (3,900 of 14,198) from the chunks.
    for (const email of ['olddomain', 'late', 'filler99', 'site']) {
      const total = await countContacts(store.db, ORG, { email }, { searchIndex: false });
      for (const page of [PAGES[0]!, PAGES[1]!, { page: 2, limit: 100 }]) {
        const plain = (await pageContacts(store.db, ORG, { email }, page, { searchIndex: false })).contacts;
        const found = await pageByEmailIndex(store.db, ORG, { email }, page, total);
        expect(found?.contacts, `${email} page ${page.page}`).toEqual(plain);
      }
    }
  });

  it('declines when more contacts share the page boundary millisecond than it would carry', async () => {
    const many = Array.from({ length: MAX_TIES + 100 }, (_, i) =>
      contact(50_000 + i, `same${i}@tie.example`, 9_000_000),
    );
    await write(many);
    catchUp();
    expect(await pageByChunks(store.db, ORG, 'tie.example', { page: 1, limit: 20 })).toBeUndefined();
    const plain = (
      await pageContacts(
        store.db,
        ORG,
        { email: 'tie.example' },
        { page: 1, limit: 20 },
        { searchIndex: false },
      )
    ).contacts;
    // In two parts each half carries about half of them, within its own limit: the page is exact.
    expect(await pageByChunksInTwo(store.db, beside(), ORG, 'tie.example', { page: 1, limit: 20 })).toEqual({
      contacts: plain,
      total: many.length,
    });
    const page = await pageContacts(store.db, ORG, { email: 'tie.example' }, { page: 1, limit: 20 });
    expect(page.contacts).toEqual(plain);
  });

  it('leaves a deep page to the plain walk when the total is not known; one past the contacts is empty', async () => {
    // A term too short for the trigram index, which would answer a page past the end itself.
    const size = await organizationSize(store.db, ORG);
    const deep = { page: Math.floor(size / 20), limit: 20 };
    expect(deep.page * deep.limit).toBeGreaterThan(2_000);
    expect(await pageByEmailIndex(store.db, ORG, { email: 'e' }, deep)).toBeUndefined();
    // Past the organisation's contacts there is nothing to walk for (nor to read from the index).
    for (const page of [Math.ceil(size / 20) + 1, 1_000_000]) {
      expect(await pageByEmailIndex(store.db, ORG, { email: 'e' }, { page, limit: 20 })).toEqual({
        contacts: [],
      });
    }
  });

  it("places contacts whose created_at is not in the API's form by the database's order", async () => {
    // Written some other way (an import): the text order, which the page follows, is not the time order.
    await store.write((trx) =>
      insertContacts(trx, [
        { row: contactRow(ORG, 'odd-1', 'odd.one@oddtime.example', '2031-01-01T00:00:00Z'), tags: [] },
        { row: contactRow(ORG, 'odd-2', 'odd.two@oddtime.example', '2031-01-01T00:00:00.500Z'), tags: [] },
        { row: contactRow(ORG, 'odd-3', 'odd-three@oddtime.example', 'yesterday'), tags: [] },
      ]),
    );
    catchUp();
    for (const [email, total] of [
      ['odd.one@oddtime', 1],
      ['oddtime', 3],
      ['odd.', 2], // odd-1 ('…00Z') comes before odd-2 ('…00.500Z') as text, after it as time
    ] as const) {
      for (const page of [1, 2, 3].map((p) => ({ page: p, limit: 1 }))) {
        const plain = await pageContacts(store.db, ORG, { email }, page, { searchIndex: false });
        expect(await pageByChunks(store.db, ORG, email, page), `${email} page ${page.page}`).toEqual({
          contacts: plain.contacts,
          total,
        });
      }
    }
  });

  it('reads around a damaged chunk, and the indexer lays the file out anew', async () => {
    const file = path.join(dir, SEARCH_FILE);
    const damage = new Sqlite(file);
    damage
      .prepare('update address_chunks set entries = ? where id = (select max(id) from address_chunks)')
      .run(Buffer.alloc(12));
    damage.close();
    const page = { page: 1, limit: 20 };
    const plain = await pageContacts(store.db, ORG, { email: 'example' }, page, { searchIndex: false });
    expect(await pageContacts(store.db, ORG, { email: 'example' }, page)).toEqual(plain);
    expect(await countContacts(store.db, ORG, { email: 'example' })).toBe(
      await countContacts(store.db, ORG, { email: 'example' }, { searchIndex: false }),
    );
    await write([contact(70_000, 'after.damage@site.example', 9_500_000)]);
    let failure: unknown;
    try {
      catchUp();
    } catch (err) {
      failure = err;
    }
    expect(isDamagedChunk(failure)).toBe(true);
  });

  it('walks every contact for a deep page of a known total when twice the walk it expects covers them', async () => {
    // About 24,000 contacts by now: page 3 of 100 of the old domain's 300 (a term too short for the
    // trigram index) is expected after a walk of all of them, past 20,000 (which left it to the caller's
    // plain walk until 2026-11-29) and within LONG_WALK.
    const page = { page: 3, limit: 100 };
    const total = await countContacts(store.db, ORG, { email: 'ol' }, { searchIndex: false });
    const plain = (await pageContacts(store.db, ORG, { email: 'ol' }, page, { searchIndex: false })).contacts;
    expect(plain.length).toBeGreaterThan(0);
    expect(await pageByEmailIndex(store.db, ORG, { email: 'ol' }, page, total)).toEqual({
      contacts: plain,
    });
    const found = await pageContacts(store.db, ORG, { email: 'ol' }, page, { knownTotal: total });
    expect(found.contacts).toEqual(plain);
  });

  it('finds old matches in the chunks after a walk with a budget falls short; past LONG_WALK, leaves it', async () => {
    // 60,000 contacts of an organisation of their own, in a store of their own: the oldest 3,000 hold
    // `relic`; 38 of the others, spread, hold `qz`.
    const ownDir = mkdtempSync(path.join(tmpdir(), 'mailroom-relics-'));
    const own = createStore({ dataDir: ownDir, backgroundSearchIndex: false });
    try {
      await own.migrate();
      const org = 'org-relics';
      await own.write((trx) =>
        trx.insertInto('organizations').values({ id: org, name: org, created_at: AT }).execute(),
      );
      const address = (i: number) =>
        i < 3_000 ? `relic${i}@old.test` : i % 1_500 === 0 ? `qz${i}@new.test` : `n${i}@new.test`;
      const rows = Array.from({ length: 60_000 }, (_, i) => ({
        row: contactRow(org, `${org}-${String(i).padStart(5, '0')}`, address(i), at(i)),
        tags: [],
      }));
      for (let i = 0; i < rows.length; i += 500) {
        await own.write((trx) => insertContacts(trx, rows.slice(i, i + 500)));
      }
      const ix = new SearchIndexer(path.join(ownDir, 'mailroom.sqlite'), path.join(ownDir, SEARCH_FILE));
      try {
        ix.catchUp();
      } finally {
        ix.close();
      }
      // Page 63 of 20: a walk of spread matches would reach it after 25,200 contacts, and the matches are
      // too many to look up through the trigram index first. Twice that walk, from the newest, finds none;
      // the chunks find the page (the plain walk would pass all 57,000 newer contacts).
      const relic = { email: 'relic' };
      const total = await countContacts(own.db, org, relic, { searchIndex: false });
      expect(total).toBe(3_000);
      const deep = { page: 63, limit: 20 };
      const plain = (await pageContacts(own.db, org, relic, deep, { searchIndex: false })).contacts;
      expect(plain).toHaveLength(20);
      expect((await pageByEmailIndex(own.db, org, relic, deep, total))?.contacts).toEqual(plain);
      // 38 spread matches of a term too short for the trigram index: page 1 of 100 is expected after about
      // 158,000 contacts, past LONG_WALK: the caller's plain walk.
      const qz = { email: 'qz' };
      const few = await countContacts(own.db, org, qz, { searchIndex: false });
      expect(few).toBe(38);
      expect(await pageByEmailIndex(own.db, org, qz, { page: 1, limit: 100 }, few)).toBeUndefined();
    } finally {
      await own.close();
      rmSync(ownDir, { recursive: true, force: true });
    }
  });
});

describe('a page search over chunks whose times are not in key order', () => {
  it('counts a chunk too old for the page after one it searched in vain', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-chunk-order-'));
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    try {
      await store.migrate();
      const org = 'org-order';
      await store.write((trx) =>
        trx.insertInto('organizations').values({ id: org, name: org, created_at: AT }).execute(),
      );
      const T0 = Date.parse('2031-01-01T00:00:00.000Z');
      // 31 characters and the end: 512 addresses fill a chunk. In key order: 1,024 holding `hit` made
      // at 50 s, 512 without it made at 200 s, 1,024 holding it made at 100 s. Newest keys first, the last
      // group fills the page; the chunk without `hit` may hold newer contacts, so it is searched, in vain;
      // the first group is older than the page, so it is only counted, and must be.
      const group = (prefix: string, n: number, at: number, from: number) =>
        Array.from({ length: n }, (_, i) => ({
          row: contactRow(
            org,
            `${org}-${from + i}`,
            `${prefix}${String(from + i).padStart(6, '0')}@abcdefghijklmnop.test`,
            new Date(T0 + at + i).toISOString(),
          ),
          tags: [],
        }));
      for (const rows of [
        group('hit', 1024, 50_000, 0),
        group('non', 512, 200_000, 1024),
        group('hit', 1024, 100_000, 1536),
      ]) {
        await store.write((trx) => insertContacts(trx, rows));
      }
      const ix = new SearchIndexer(path.join(dir, 'mailroom.sqlite'), path.join(dir, SEARCH_FILE));
      try {
        ix.catchUp();
      } finally {
        ix.close();
      }
      expect(readChunks(path.join(dir, SEARCH_FILE)).length).toBe(2560);
      const { rows } = await sql<{ n: number }>`select count(*) as n from search.address_chunks
        where organization_id = ${org}`.execute(store.db);
      expect(rows[0]!.n).toBe(5);
      const page = { page: 1, limit: 20 };
      const plain = (await pageContacts(store.db, org, { email: 'hit' }, page, { searchIndex: false }))
        .contacts;
      expect(await pageByChunks(store.db, org, 'hit', page)).toEqual({ contacts: plain, total: 2048 });
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the newest created_at values a page search keeps', () => {
  it('are the reach greatest seen, whatever the order they come in', () => {
    let seed = 7;
    const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    for (const reach of [1, 5, 64]) {
      const newest = new Newest(reach);
      const seen: number[] = [];
      for (let i = 0; i < 1000; i++) {
        const created = Math.floor(random() * 500);
        seen.push(created);
        newest.offer(created);
        const sorted = [...seen].sort((a, b) => b - a);
        expect(newest.boundary).toBe(sorted.length < reach ? -Infinity : sorted[reach - 1]);
      }
    }
  });
});

describe('finding a term in a chunk', () => {
  it('counts each address holding it once, looked for from any of its characters', () => {
    let seed = 11;
    const random = () => (seed = (seed * 48271) % 2147483647) / 2147483647;
    const letters = 'aab.@e';
    const word = (n: number) => Array.from({ length: n }, () => letters[Math.floor(random() * 6)]).join('');
    for (let round = 0; round < 200; round++) {
      const addresses = Array.from({ length: 1 + Math.floor(random() * 30) }, () => word(1 + random() * 8));
      const chunk = addresses.map((a) => a + END).join('');
      const term = word(1 + random() * 4);
      const holding = addresses.filter((a) => a.includes(term)).length;
      for (let from = 0; from < term.length; from++) {
        const finder = new Finder(term, from);
        expect(finder.count(chunk), `${term} from ${from} in ${JSON.stringify(chunk)}`).toBe(holding);
        expect(finder.next(chunk, 0)).toBe(chunk.indexOf(term));
        // Never a find before where it was asked to start, though the part looked for is further in.
        const start = Math.floor(random() * chunk.length);
        expect(finder.next(chunk, start)).toBe(chunk.indexOf(term, start));
      }
      expect(Finder.for(term, chunk).count(chunk)).toBe(holding);
    }
  });

  it('looks for a term from a character at most half as frequent as its first, else from its start', () => {
    const chunk = ['seed1@example1.test', 'seed2@example2.test'].map((a) => a + END).join('');
    // e: ten, d and 1: two each; the earliest of the rarest.
    expect(Finder.for('eed1', chunk).from).toBe(2);
    expect(Finder.for('seed1', chunk).from).toBe(3);
    // s: four, t: four: no better than the start.
    expect(Finder.for('st', chunk).from).toBe(0);
    // A character the sample lacks is the rarest of all.
    expect(Finder.for('ez', chunk).from).toBe(1);
  });
});
