// An email term alone, in an organisation of TWO_PARTS_FROM contacts or more (lowered here to 1,000), is
// found anew and counted on the long-read thread (search/email-search.ts), its pass over the address
// chunks shared with the search thread as the reader's is; a page kept, or walked on from a kept one,
// stays on the event loop. And a long-read thread that stops has its reads run on the event loop.
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { systemClock, uuidIds } from '../../src/clock.js';
import { ContactsService } from '../../src/contacts/contacts.service.js';
import { countContacts, insertContacts } from '../../src/contacts/contacts.repository.js';
import { countByChunks } from '../../src/search/contact-chunks.repository.js';
import type * as Chunks from '../../src/search/contact-chunks.repository.js';
import { readerBeside } from '../../src/search/search-indexer.js';
import { SEARCH_FILE } from '../../src/search/search-file.js';
import { startLongReads } from '../../src/store/long-reads.js';
import { sqliteFile } from '../../src/store/sqlite-store.js';
import { sql } from '../../src/store/kysely.js';
import type { NewContact } from '../../src/store/schema.js';
import type { Store } from '../../src/store/store.js';
import { contactRow } from '../helpers/rows.js';
import { threadsStarted } from '../helpers/recorded-threads.js';
import { createTestStore, type TestStore } from '../helpers/stores.js';
import { watchLongReads } from '../helpers/watched-long-reads.js';

vi.mock('../../src/search/contact-chunks.repository.js', async (original) => ({
  ...(await original<typeof Chunks>()),
  TWO_PARTS_FROM: 1_000,
}));

vi.mock('../../src/threads.js', () => import('../helpers/recorded-threads.js'));

async function seedOrganization(store: Store, org: string, size: number): Promise<void> {
  await store.write((trx) =>
    trx
      .insertInto('organizations')
      .values({ id: org, name: org, created_at: '2026-01-01T00:00:00.000Z' })
      .execute(),
  );
  const rows = Array.from({ length: size }, (_, i) => ({
    row: contactRow(
      org,
      `${org}-${i}`,
      `m${i}@d${i % 9}.test`,
      new Date(Date.UTC(2026, 0, 1) + i).toISOString(),
    ) as NewContact,
    tags: [],
  }));
  for (let i = 0; i < rows.length; i += 500) {
    await store.write((trx) => insertContacts(trx, rows.slice(i, i + 500)));
  }
}

describe('an email term alone, on sqlite', () => {
  let ts: TestStore;
  let contacts: ContactsService;
  /** The statements asked of the long reads. */
  let asked: string[];
  /** How many of them count. */
  const counted = () => asked.filter((statement) => statement.includes('count(')).length;

  beforeEach(async () => {
    ts = await createTestStore('sqlite');
    const inner = ts.store;
    const watched = watchLongReads(inner);
    asked = watched.asked;
    contacts = new ContactsService(watched.store, systemClock, uuidIds);
    await seedOrganization(inner, 'big', 25_000);
    await seedOrganization(inner, 'small', 900);
  });

  afterEach(async () => {
    await ts.destroy();
  });

  it('is found anew and counted beside the event loop from TWO_PARTS_FROM contacts, and kept on it', async () => {
    const pageOf = async (org: string, email: string, page: number) => {
      const from = asked.length;
      const found = await contacts.page(org, { page, limit: 10, email });
      return { there: asked.length > from, found };
    };
    const truth = (org: string, email: string) =>
      countContacts(ts.store.db, org, { email }, { searchIndex: false });
    const first = await pageOf('big', 'd3', 1);
    expect(first.there).toBe(true);
    expect(first.found.pagination.total).toBe(await truth('big', 'd3'));
    expect(first.found.contacts).toHaveLength(10);
    // Kept: the same page again, and the next walked on from it, on the event loop.
    expect((await pageOf('big', 'd3', 1)).there).toBe(false);
    expect((await pageOf('big', 'd3', 2)).there).toBe(false);
    // Under TWO_PARTS_FROM: on the event loop.
    const small = await pageOf('small', 'd3', 1);
    expect(small.there).toBe(false);
    expect(small.found.pagination.total).toBe(await truth('small', 'd3'));
    // A page of a new term that learns no total on the way (a walk, 2,500 matches deep of 2,778): its
    // count too.
    const countedBefore = counted();
    const walked = await pageOf('big', 'd7', 250);
    expect([walked.there, counted() > countedBefore]).toEqual([true, true]);
    expect(walked.found.pagination.total).toBe(await truth('big', 'd7'));
    expect(walked.found.contacts).toHaveLength(10);
    // A page whose walk on from a kept one is refused (11 matches among 25,000: the walk would pass about
    // 23,000 contacts) is found anew, beside the event loop too (helper-136: it was read on it).
    const rare = await pageOf('big', 'm1234', 1);
    expect([rare.there, rare.found.pagination.total]).toEqual([true, 11]);
    const second = await pageOf('big', 'm1234', 2);
    expect(second.there).toBe(true);
    expect(second.found.contacts.map((c) => (JSON.parse(c) as { email: string }).email)).toEqual([
      'm1234@d1.test',
    ]);
  });

  it('is read on the event loop while the long-read thread has another read in hand', async () => {
    // A read of the thread's for a while: three million steps of a recursive query.
    const busy = sql`with recursive s(i) as (select 1 union all select i + 1 from s where i < 3000000)
      select count(*) as n from s`.execute(ts.store.longReads);
    await vi.waitFor(() => expect(ts.store.longReadsIdle()).toBe(false), { interval: 1 });
    const [from, countedBefore] = [asked.length, counted()];
    const found = await contacts.page('big', { page: 1, limit: 10, email: 'd5' });
    // One that learns no total on the way: counted on the event loop too.
    const walked = await contacts.page('big', { page: 250, limit: 10, email: 'd6' });
    const stillBusy = !ts.store.longReadsIdle();
    expect([asked.length, counted()]).toEqual([from, countedBefore]);
    expect(found.pagination.total).toBe(
      await countContacts(ts.store.db, 'big', { email: 'd5' }, { searchIndex: false }),
    );
    expect(walked.pagination.total).toBe(
      await countContacts(ts.store.db, 'big', { email: 'd6' }, { searchIndex: false }),
    );
    await busy;
    expect(ts.store.longReadsIdle()).toBe(true);
    // The search answered before the thread's read did (else the check proved nothing).
    expect(stillBusy).toBe(true);
  });

  it('shares a pass over the address chunks with the search thread, as the reader does', async () => {
    const beside = readerBeside(ts.store.longReads);
    expect(beside).toBeDefined();
    expect(beside).toBe(readerBeside(ts.store.db));
    const asks = vi.spyOn(beside!, 'readBeside');
    // Told the organisation is of 100,000 (the chunks' own threshold, not lowered inside their module).
    const count = await countByChunks(ts.store.longReads, 'big', 'd4', 100_000);
    expect(asks).toHaveBeenCalled();
    // Undefined while the chunks are too far behind (a new store): then the caller counts otherwise.
    if (count !== undefined)
      expect(count).toBe(await countContacts(ts.store.db, 'big', { email: 'd4' }, { searchIndex: false }));
  });

  it('runs the reads of a long-read thread that stopped on the event loop, as those asked until a new one', async () => {
    const told: unknown[] = [];
    let here = 0;
    const reads = startLongReads({
      data: { databaseFile: sqliteFile(ts.dataDir), indexFile: path.join(ts.dataDir, SEARCH_FILE) },
      fallback: () => {
        here++;
        return ts.store.db;
      },
      onError: (err) => told.push(err),
    });
    const started = threadsStarted.length;
    const answer = sql<{ one: number }>`select 1 as one`.execute(reads.db);
    // Stopped as soon as it exists: long before it could have booted and read.
    while (threadsStarted.length === started) await new Promise((resolve) => setImmediate(resolve));
    const thread = threadsStarted.at(-1)!;
    expect(thread.module).toBe('long-read-thread');
    await thread.worker.terminate();
    expect((await answer).rows).toEqual([{ one: 1 }]);
    expect([here, told.length]).toEqual([1, 1]);
    // Until a new thread starts (10 s later), reads run on the event loop too.
    expect((await sql<{ two: number }>`select 2 as two`.execute(reads.db)).rows).toEqual([{ two: 2 }]);
    expect(here).toBe(2);
    await reads.close();
  });
});
