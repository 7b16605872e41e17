// Reads that may take long run on the SQLite store's long-read thread (store/long-reads.ts): the same rows
// as the store's reader gives, the event loop free meanwhile, errors with SQLite's code, and the contact
// pages that may take long (several conditions, deep pages) asked of it, the rest not.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from '../../src/store/kysely.js';
import { systemClock, uuidIds } from '../../src/clock.js';
import { ContactsService } from '../../src/contacts/contacts.service.js';
import { EmailsService } from '../../src/emails/emails.service.js';
import { countContacts, insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import { isStoreUnavailable } from '../../src/store/dialect.js';
import type { NewContact } from '../../src/store/schema.js';
import { contactRow } from '../helpers/rows.js';
import type { Executor } from '../../src/store/store.js';
import { createTestStore, type TestStore } from '../helpers/stores.js';
import { watchLongReads } from '../helpers/watched-long-reads.js';

/** Counts how many event-loop turns pass while `read` runs. */
async function turnsDuring(read: Promise<unknown>): Promise<number> {
  let turns = 0;
  let done = false;
  const turn = (): void => {
    if (done) return;
    turns++;
    setImmediate(turn);
  };
  setImmediate(turn);
  await read;
  done = true;
  return turns;
}

/** A read that takes a while of CPU wherever it runs: three million steps of a recursive query. */
const slowRead = (db: Executor) =>
  sql<{ n: number }>`with recursive s(i) as (select 1 union all select i + 1 from s where i < 3000000)
    select count(*) as n from s`.execute(db);

describe('long reads on sqlite', () => {
  let ts: TestStore;
  let org: string;
  let contacts: ContactsService;
  let emails: EmailsService;
  /** The statements the services asked of the long reads. */
  let asked: string[];

  beforeEach(async () => {
    ts = await createTestStore('sqlite');
    const inner = ts.store;
    const watched = watchLongReads(inner);
    asked = watched.asked;
    const store = watched.store;
    contacts = new ContactsService(store, systemClock, uuidIds);
    emails = new EmailsService(store, systemClock, uuidIds, { mailFrom: 'Mailroom <mail@mailroom.test>' });
    org = 'org-long';
    await inner.write((trx) =>
      trx
        .insertInto('organizations')
        .values({ id: org, name: org, created_at: '2026-01-01T00:00:00.000Z' })
        .execute(),
    );
    for (let i = 0; i < 60; i++) {
      await contacts.createJson(org, {
        email: `member${i}@club${i % 7}.test`,
        unsubscribed: i % 3 === 0,
        tags: [...(i % 2 === 0 ? ['even'] : []), ...(i % 5 === 0 ? ['five'] : [])],
      });
    }
  });

  afterEach(async () => {
    await ts.destroy();
  });

  it('gives the rows the store reader gives, for pages and counts of several conditions', async () => {
    const filters = [
      { tag: 'even', email: 'club3' },
      { tag: 'five', unsubscribed: true },
      { tag: 'even', unsubscribed: false },
      { email: 'member1', unsubscribed: false },
      { tag: 'five', email: 'member', unsubscribed: false },
      { tag: 'nobody', email: 'club' },
    ];
    for (const filter of filters) {
      for (const page of [
        { page: 1, limit: 7 },
        { page: 2, limit: 4 },
        { page: 9, limit: 10 },
      ]) {
        const here = await pageContacts(ts.store.db, org, filter, page);
        const there = await pageContacts(ts.store.longReads, org, filter, page);
        expect(there, JSON.stringify({ filter, page })).toEqual(here);
      }
      const total = await countContacts(ts.store.db, org, filter);
      expect(total > 0, JSON.stringify(filter)).toBe(filter.tag !== 'nobody');
      expect(await countContacts(ts.store.longReads, org, filter)).toBe(total);
    }
  });

  it('keeps the event loop turning while a read runs, where the store reader stops it', async () => {
    expect(await turnsDuring(slowRead(ts.store.db))).toBe(0);
    expect(await turnsDuring(slowRead(ts.store.longReads))).toBeGreaterThan(0);
    const [{ n }] = (await slowRead(ts.store.longReads)).rows as [{ n: number }];
    expect(n).toBe(3_000_000);
  });

  it("fails a read with SQLite's error and code", async () => {
    const failed = await sql`select * from no_such_table`
      .execute(ts.store.longReads)
      .catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(Error);
    expect((failed as Error).message).toMatch(/no such table: no_such_table/);
    expect((failed as { code?: string }).code).toBe('SQLITE_ERROR');
    // The thread goes on reading after a failure.
    expect((await sql<{ one: number }>`select 1 as one`.execute(ts.store.longReads)).rows).toEqual([
      { one: 1 },
    ]);
  });

  it('sees every write committed before the read was asked', async () => {
    const before = await countContacts(ts.store.longReads, org, { tag: 'even', email: 'fresh' });
    expect(before).toBe(0);
    await contacts.createJson(org, { email: 'fresh1@club0.test', tags: ['even'] });
    expect(await countContacts(ts.store.longReads, org, { tag: 'even', email: 'fresh' })).toBe(1);
  });

  it('fails the reads not answered yet as the store unavailable when interrupted, and reads on after', async () => {
    const running = slowRead(ts.store.longReads).catch((err: unknown) => err);
    const queued = slowRead(ts.store.longReads).catch((err: unknown) => err);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await ts.store.interrupt()).toBe(2);
    for (const err of await Promise.all([running, queued])) {
      expect((err as { code?: string }).code).toBe('SQLITE_INTERRUPT');
      expect(isStoreUnavailable(err)).toBe(true);
    }
    expect(await ts.store.interrupt()).toBe(0);
    expect((await sql<{ one: number }>`select 1 as one`.execute(ts.store.longReads)).rows).toEqual([
      { one: 1 },
    ]);
  });

  it('asks the long reads for deep pages of emails', async () => {
    // 16,700 entries skipped: 2 ms by the cost model (store/long-reads.ts).
    for (const [query, there] of [
      [{ page: 168, limit: 100 }, true],
      [{ page: 836, limit: 20, status: 'sent' as const }, true],
      [{ page: 167, limit: 100 }, false],
      [{ page: 1, limit: 100, status: 'queued' as const }, false],
    ] as const) {
      const from = asked.length;
      const found = await emails.page(org, query);
      expect(found.emails).toEqual([]);
      expect(asked.length > from, JSON.stringify(query)).toBe(there);
    }
  });

  it('asks the long reads for the pages expected to take long, by the maintained counts, not for the rest', async () => {
    // 20,000 contacts, 10 of them subscribed; a tag on 1,000 and one on 10.
    const big = 'org-big';
    await ts.store.write((trx) =>
      trx
        .insertInto('organizations')
        .values({ id: big, name: big, created_at: '2026-01-01T00:00:00.000Z' })
        .execute(),
    );
    const rows = Array.from({ length: 20_000 }, (_, i) => {
      const at = new Date(Date.UTC(2026, 0, 1) + i).toISOString();
      const tags = [...(i % 20 === 0 ? ['big'] : []), ...(i % 2000 === 1 ? ['small'] : [])];
      const row = contactRow(big, `big-${i}`, `c${i}@d${i % 50}.test`, at, i % 2000 !== 5);
      return { row: { ...row, tags: JSON.stringify(tags) } as NewContact, tags };
    });
    for (let i = 0; i < rows.length; i += 1000) {
      await ts.store.write((trx) => insertContacts(trx, rows.slice(i, i + 1000)));
    }
    const pageOf = async (organization: string, query: Parameters<ContactsService['page']>[1]) => {
      const from = asked.length;
      await contacts.page(organization, query);
      return asked.length > from;
    };
    for (const [query, there] of [
      // A tag beside other conditions: its 1,000 contacts looked up at most (3 ms), or its 10.
      [{ tag: 'big', unsubscribed: true }, true],
      [{ tag: 'big', email: 'c1' }, true],
      [{ tag: 'small', email: 'c1' }, false],
      [{ tag: 'small', unsubscribed: false }, false],
      [{ tag: 'big' }, false],
      // Subscribed contacts, 1 in 2,000: page 1 walks all 20,000 index entries (2.4 ms).
      [{ unsubscribed: false }, true],
      [{ unsubscribed: true }, false],
      // A term with a subscription: every contact at worst.
      [{ email: 'c1', unsubscribed: true }, true],
      [{}, false],
      // Deep pages: past 16,667 entries.
      [{ page: 835 }, true],
      [{ page: 834 }, false],
      [{ page: 835, tag: 'big' }, true],
      // A term alone: its deep page found anew walks every contact before it at worst.
      [{ page: 835, email: 'd1' }, true],
      [{ page: 834, email: 'd1' }, false],
      [{ page: 1, email: 'd1' }, false],
    ] as const) {
      expect(await pageOf(big, { page: 1, limit: 20, ...query }), JSON.stringify(query)).toBe(there);
    }
    // The small organisation's filters together: a tag on 30 contacts, or 60 contacts in all.
    for (const query of [
      { tag: 'even', email: 'club' },
      { tag: 'even', unsubscribed: true },
      { email: 'club', unsubscribed: false },
      { unsubscribed: false },
    ]) {
      expect(await pageOf(org, { page: 1, limit: 5, ...query }), JSON.stringify(query)).toBe(false);
    }
  });
});
