// PostgreSQL's narrow table of addresses (migration 0016), where the trigram index finds an email term's
// matches: it holds each contact's organisation, created_at, address and subscription, and nothing else,
// through multi-row inserts, deletes, readdresses, unsubscribes, an organisation's deletion, and for the
// contacts a store held before it was upgraded; and the trigram index is on it, not on contacts.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import type { Executor } from '../../src/store/store.js';
import { type TestStore, noPostgres, olderStore, useStore, migrationsFrom } from '../helpers/stores.js';
import { contactRow } from '../helpers/rows.js';
import { eventually } from '../helpers/smtp.js';

const AT = '2031-06-01T00:00:00.000Z';

/** The narrow table's rows against what contacts say they should be, both sorted by id. */
async function compare(db: Executor) {
  const columns = sql`id, organization_id, created_at, email_lower, unsubscribed`;
  const held = await sql`select ${columns} from contact_addresses order by id`.execute(db);
  const truth = await sql`select ${columns} from contacts order by id`.execute(db);
  return { held: held.rows, truth: truth.rows };
}

async function newOrg(db: Executor, id: string): Promise<void> {
  await db.insertInto('organizations').values({ id, name: id, created_at: AT }).execute();
}

function rows(org: string, n: number, prefix: string) {
  return Array.from({ length: n }, (_, i) => ({
    row: contactRow(org, `${prefix}${i}`, `${prefix}${i}@Example${i % 3}.test`, AT, i % 4 === 0),
    tags: [],
  }));
}

describe.skipIf(noPostgres())('the narrow table of addresses on postgres', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  it('holds every contact’s address, created_at and subscription through writes of each kind', async () => {
    const db = ts.store.db;
    await newOrg(db, 'na1');
    await newOrg(db, 'na2');
    await insertContacts(db, rows('na1', 300, 'a'));
    await insertContacts(db, rows('na2', 50, 'b'));
    // A multi-row delete, a readdress, an unsubscribe, a resubscribe and a change of name alone.
    await db.deleteFrom('contacts').where('id', 'in', ['a1', 'a2', 'a250']).execute();
    await db.updateTable('contacts').set({ email_lower: 'moved@else.test' }).where('id', '=', 'a3').execute();
    await db.updateTable('contacts').set({ unsubscribed: 1 }).where('id', '=', 'a5').execute();
    await db.updateTable('contacts').set({ unsubscribed: 0 }).where('id', '=', 'a8').execute();
    await db.updateTable('contacts').set({ first_name: 'Ann' }).where('id', '=', 'a9').execute();
    // A multi-row update touching both organisations at once.
    await db
      .updateTable('contacts')
      .set({ unsubscribed: 1 })
      .where('id', 'in', ['a10', 'b11', 'b12'])
      .execute();
    const { held, truth } = await compare(db);
    expect(held).toHaveLength(347);
    expect(held).toEqual(truth);
    expect(held.find((r) => (r as { id: string }).id === 'a3')).toMatchObject({
      email_lower: 'moved@else.test',
    });
    // Deleting an organisation takes its contacts' rows (the cascade's delete), and no other's.
    await db.deleteFrom('organizations').where('id', '=', 'na2').execute();
    const after = await compare(db);
    expect(after.held).toHaveLength(297);
    expect(after.held).toEqual(after.truth);
  });

  it('carries the trigram index, and contacts no longer do', async () => {
    const { rows: indexes } = await sql<{ tablename: string; indexname: string }>`select tablename, indexname
      from pg_indexes where indexdef like '%gin_trgm_ops%' order by indexname`.execute(ts.store.db);
    expect(indexes).toEqual([{ tablename: 'contact_addresses', indexname: 'contact_addresses_trgm' }]);
  });

  it('is filled with the contacts a store held before 0016, and the old index on contacts is dropped', async () => {
    const old = await olderStore('postgres', '0015_address_chunks_by_domain');
    const store = old.open();
    try {
      await newOrg(old.db, 'up16');
      // More than the migration copies in one statement (50,000), written in one here.
      await sql`insert into contacts (id, organization_id, email, email_lower, unsubscribed, custom_fields,
          tags, created_at, updated_at)
        select 'u' || i, 'up16', 'U' || i || '@Old.test', 'u' || i || '@old.test', i % 3 / 2, '{}', '[]',
          ${AT}, ${AT}
        from generate_series(1, 50120) i`.execute(old.db);
      await sql`create extension if not exists pg_trgm`.execute(old.db);
      await sql`create index contacts_email_trgm on contacts using gin (email_lower gin_trgm_ops)`.execute(
        old.db,
      );
      await old.db.destroy();
      expect(await store.migrate()).toEqual({
        applied: migrationsFrom('0016_contact_addresses'),
        warnings: [],
      });
      const { held, truth } = await compare(store.db);
      expect(held).toHaveLength(50_120);
      expect(held).toEqual(truth);
      // The new index is built as the store migrates; the old one is dropped in the background after.
      const trigramIndexes = async () =>
        (
          await sql<{ indexname: string }>`select indexname from pg_indexes
            where indexdef like '%gin_trgm_ops%'`.execute(store.db)
        ).rows;
      await eventually(async () => (await trigramIndexes()).length === 1, 10_000, 'the old index dropped');
      expect(await trigramIndexes()).toEqual([{ indexname: 'contact_addresses_trgm' }]);
      // And the triggers keep it from there.
      await insertContacts(store.db, rows('up16', 5, 'v'));
      expect((await compare(store.db)).held).toHaveLength(50_125);
    } finally {
      await old.db.destroy().catch(() => undefined);
      await store.close();
      await old.drop();
    }
  });
});
