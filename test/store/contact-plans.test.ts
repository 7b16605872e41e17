// The SQLite query plans a filtered contacts page or count depends on: unsubscribed contacts through the
// index of them alone (0007), subscribed ones and email terms by walking the organisation's created_at
// index, which holds each address (0010) and subscription (0019), as the walk of the newest contacts
// does; none sorts. A tag's unsubscribed contacts, when fewer, counted in their index. A page of the
// address chunks reads each chunk once, as the index yields it. On PostgreSQL, a tag page near its end
// walks the tag index too.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import type { CompiledQuery } from 'kysely';
import { Kysely, PostgresDialect, SqliteDialect, sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { countContacts, insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import { pageByChunks } from '../../src/search/contact-chunks.repository.js';
import { walkNewest } from '../../src/search/contact-walk.js';
import { containsText } from '../../src/store/dialect.js';
import { SEARCH_FILE, attachSearchFile } from '../../src/search/search-file.js';
import type { Database } from '../../src/store/schema.js';
import { createStore } from '../../src/store/store.js';
import { contactRow } from '../helpers/rows.js';
import { type TestStore, noPostgres, useStore } from '../helpers/stores.js';

const AT = '2031-01-01T00:00:00.000Z';

describe('contact page plans on sqlite', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-plans-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('read unsubscribed contacts through their own index, subscribed ones and email terms in created_at order', async () => {
    const store = createStore({ dataDir: dir });
    await store.migrate();
    await store.close();
    const conn = new Sqlite(path.join(dir, 'mailroom.sqlite'));
    const ran: CompiledQuery[] = [];
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: conn }),
      log: (event) => void ran.push(event.query),
    });
    try {
      // One contact: a page past an organisation's contacts is answered without a query (contact-search).
      await db.insertInto('organizations').values({ id: 'org', name: 'org', created_at: AT }).execute();
      await insertContacts(db, [{ row: contactRow('org', 'c-1', 'ab@plans.example', AT), tags: ['vip'] }]);
      for (const [filter, index] of [
        // Unsubscribed contacts alone: the page's ids from that index by itself, then only its rows.
        [{ unsubscribed: true }, 'COVERING INDEX contacts_org_unsubscribed_email'],
        [{ unsubscribed: false }, 'INDEX contacts_org_created_subscription'],
        // An email term walked in page order (a short one, never the trigram index; with a subscription
        // filter, which the address chunks do not know) tests each address and subscription in the index
        // (migrations 0010, 0019), reading only the contacts it keeps. So does the walk of the newest
        // contacts alone.
        [{ email: 'ab', unsubscribed: false }, 'INDEX contacts_org_created_subscription'],
        [{ email: 'ab', unsubscribed: true }, 'INDEX contacts_org_unsubscribed_email'],
        [{ email: 'ab', walk: true }, 'COVERING INDEX contacts_org_created_subscription'],
        // Counted the same way (where no maintained count or search index answers), reading no contact.
        [
          { email: 'ab', unsubscribed: false, count: true },
          'COVERING INDEX contacts_org_created_subscription',
        ],
        [{ email: 'ab', unsubscribed: true, count: true }, 'COVERING INDEX contacts_org_unsubscribed_email'],
        // A tag on more contacts than are unsubscribed: its unsubscribed contacts are found in their index,
        // the subscribed ones as the rest of the tag's count, not by looking up each contact with the tag.
        [{ tag: 'vip', unsubscribed: false, count: true }, 'COVERING INDEX contacts_org_unsubscribed_email'],
      ] as const) {
        ran.length = 0;
        const page = { page: 1, limit: 20 };
        if ('count' in filter) {
          const { count: _, ...counted } = filter;
          await countContacts(db, 'org', counted, { searchIndex: false });
        } else if ('walk' in filter) {
          await walkNewest(
            db,
            'sqlite',
            'org',
            containsText('sqlite', 'email_lower', filter.email),
            page,
            5000,
          );
        } else await pageContacts(db, 'org', filter, page);
        const query = ran.at(-1)!;
        const plan = (
          conn.prepare(`explain query plan ${query.sql}`).all(...query.parameters) as { detail: string }[]
        )
          .map((r) => r.detail)
          .join('\n');
        expect(plan, JSON.stringify(filter)).toContain(`USING ${index}`);
        expect(plan).not.toContain('TEMP B-TREE');
      }
    } finally {
      await db.destroy();
    }
  });
  it('pass the address chunks to the page search as the index yields them, never copying them first', async () => {
    const store = createStore({ dataDir: dir, backgroundSearchIndex: false });
    await store.migrate();
    await store.close();
    const conn = new Sqlite(path.join(dir, 'mailroom.sqlite'));
    attachSearchFile(conn, path.join(dir, SEARCH_FILE));
    const ran: CompiledQuery[] = [];
    const db = new Kysely<Database>({
      dialect: new SqliteDialect({ database: conn }),
      log: (event) => void ran.push(event.query),
    });
    try {
      await pageByChunks(db, 'org', 'example', { page: 1, limit: 20 });
      const query = ran.at(-1)!;
      const plan = (
        conn.prepare(`explain query plan ${query.sql}`).all(...query.parameters) as { detail: string }[]
      ).map((r) => r.detail);
      // Materialised, the chunks (16k characters each) were all copied into a temporary table before the
      // search read them: at a million contacts that took longer than the search itself (50 ms against 25).
      expect(plan).toContain('CO-ROUTINE ch');
      expect(plan).not.toContain('MATERIALIZE ch');
    } finally {
      await db.destroy();
    }
  });
});

describe.skipIf(noPostgres())('contact page plans on postgres', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  // One organisation whose one tag is on every row of contact_tags, as in the 100k bench, written newest
  // first (there, a later batch older than an earlier one), so the tag index's pages split half full and
  // it outgrows the table. With the OFFSET in view, the planner costed the walk of
  // nearly every index entry for the last page above reading the narrow table and sorting it all, and
  // sorted (at 100k, 12-20 ms where the walk takes 3-4).
  it('walk the tag index for the last page of a tag on every row, never sorting the tag', async () => {
    const count = 10_000;
    const org = '01a218c0-377b-73ba-bb20-88f4bb33597b';
    await ts.store.write((trx) =>
      trx.insertInto('organizations').values({ id: org, name: 'org', created_at: AT }).execute(),
    );
    const base = Date.parse(AT);
    const idOf = (i: number) => `01a218c0-0000-7000-8000-${String(i).padStart(12, '0')}`;
    const rows = Array.from({ length: count }, (_, n) => {
      const i = count - 1 - n; // newest first
      const at = new Date(base + i).toISOString();
      return {
        row: { ...contactRow(org, idOf(i), `c${i}@plans.example`, at), json: null },
        tags: ['vip'],
      };
    });
    await ts.store.write((trx) => insertContacts(trx, rows));
    await sql`VACUUM (ANALYZE) contacts, contact_tags`.execute(ts.store.db);
    const pool = new pg.Pool({ connectionString: ts.databaseUrl, max: 1 });
    const ran: CompiledQuery[] = [];
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({ pool }),
      log: (event) => void ran.push(event.query),
    });
    try {
      const page = await pageContacts(db, org, { tag: 'vip' }, { page: count / 20, limit: 20 });
      // The oldest 20, newest first.
      expect(page.contacts.map((json) => (JSON.parse(json) as { id: string }).id)).toEqual(
        Array.from({ length: 20 }, (_, i) => idOf(19 - i)),
      );
      expect(page.total).toBe(count);
      const query = ran.at(-1)!;
      const { rows: plan } = await pool.query<{ 'QUERY PLAN': string }>(
        `explain ${query.sql}`,
        query.parameters as unknown[],
      );
      const text = plan.map((r) => r['QUERY PLAN']).join('\n');
      expect(text).toMatch(/Index (Only )?Scan Backward using contact_tags_org_tag/);
      // (The 20 rows of the page may be sorted again after a hash join to a table this small.)
      expect(text).not.toContain('Sort Key: contact_tags.');
    } finally {
      await db.destroy();
    }
  });
});
