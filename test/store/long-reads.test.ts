// Reads that may take long run on the SQLite store's long-read thread (store/long-reads.ts): the same rows
// as the store's reader gives, the event loop free meanwhile, errors with SQLite's code, and the contact
// pages that may take long (several conditions, deep pages) asked of it, the rest not.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { sql } from '../../src/store/kysely.js';
import { systemClock, uuidIds } from '../../src/clock.js';
import { ContactsService } from '../../src/contacts/contacts.service.js';
import { EmailsService } from '../../src/emails/emails.service.js';
import { countContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import type { Executor, Store } from '../../src/store/store.js';
import { createTestStore, type TestStore } from '../helpers/stores.js';

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
  /** The statements the service asked of the long reads. */
  let asked: number;

  beforeEach(async () => {
    ts = await createTestStore('sqlite');
    asked = 0;
    const inner = ts.store;
    const store: Store = Object.create(inner) as Store;
    Object.defineProperty(store, 'longReads', {
      value: inner.longReads.withPlugin({
        transformQuery: ({ node }) => {
          asked++;
          return node;
        },
        transformResult: ({ result }) => Promise.resolve(result),
      }),
    });
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

  it('asks the long reads for deep pages of emails', async () => {
    for (const [query, there] of [
      [{ page: 2001, limit: 5 }, true],
      [{ page: 101, limit: 100, status: 'sent' as const }, true],
      [{ page: 2000, limit: 5 }, false],
      [{ page: 1, limit: 100, status: 'queued' as const }, false],
    ] as const) {
      const from = asked;
      const found = await emails.page(org, query);
      expect(found.emails).toEqual([]);
      expect(asked > from, JSON.stringify(query)).toBe(there);
    }
  });

  it('asks the long reads for pages of several conditions and deep pages, not for the rest', async () => {
    const pageOf = async (query: Parameters<ContactsService['page']>[1]) => {
      const from = asked;
      const found = await contacts.page(org, query);
      const there = asked > from;
      asked = from;
      return { there, found };
    };
    const combined = await pageOf({ page: 1, limit: 5, tag: 'even', email: 'club' });
    expect(combined.there).toBe(true);
    expect(combined.found.pagination.total).toBe(30);
    expect((await pageOf({ page: 1, limit: 5, tag: 'even', unsubscribed: true })).there).toBe(true);
    expect((await pageOf({ page: 1, limit: 5, email: 'club', unsubscribed: false })).there).toBe(true);
    expect((await pageOf({ page: 2001, limit: 5 })).there).toBe(true);
    expect((await pageOf({ page: 101, limit: 100, tag: 'even' })).there).toBe(true);
    // One condition, not deep: on the event loop, microseconds.
    for (const query of [
      { page: 1, limit: 5 },
      { page: 3, limit: 5, tag: 'even' },
      { page: 1, limit: 5, unsubscribed: true },
      { page: 2000, limit: 5 },
      { page: 1, limit: 5, email: 'club' },
    ]) {
      expect((await pageOf(query)).there, JSON.stringify(query)).toBe(false);
    }
  });
});
