// The counts that triggers keep (migrations 0002, 0004, 0005) against the rows themselves, on both stores:
// through an upgrade of a store that already holds contacts and emails, through deleting an organisation,
// and under multi-row writes from two processes at once (on PostgreSQL, 0002's per-row counters could
// deadlock there). Also the version of an organisation's addresses (0009 on SQLite, 0011 on PostgreSQL),
// under which an email search's total is kept.
import { sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { insertContact, insertContacts } from '../../src/contacts/contacts.repository.js';
import { foldCountShards } from '../../src/store/counts.js';
import { addressesVersion } from '../../src/search/contact-search.repository.js';
import type { NewContact, NewEmail } from '../../src/store/schema.js';
import type { Executor, Store } from '../../src/store/store.js';
import { emailRow } from '../helpers/rows.js';
import { eventually } from '../helpers/smtp.js';
import {
  type TestStore,
  useStore,
  storeKinds,
  olderStore,
  noPostgres,
  migrationsFrom,
} from '../helpers/stores.js';

const AT = '2031-01-01T00:00:00.000Z';
const TAGS = [['a', 'b'], ['b', 'a'], ['c'], []];
const STATUSES = ['queued', 'sending', 'sent', 'deferred', 'failed'];

function contact(org: string, i: number): { row: NewContact; tags: string[] } {
  return {
    row: {
      id: `${org}-c${i}`,
      organization_id: org,
      email: `c${i}@${org}.example`,
      email_lower: `c${i}@${org}.example`,
      first_name: null,
      last_name: null,
      unsubscribed: i % 3 === 0 ? 1 : 0,
      custom_fields: '{}',
      tags: '[]',
      created_at: AT,
      updated_at: AT,
    },
    tags: TAGS[i % TAGS.length]!,
  };
}

function email(org: string, i: number): NewEmail {
  return emailRow(org, `${org}-e${i}`, AT, { message_id: `<${i}@example.org>` });
}

type Counts = Record<string, number>;

async function bucketSums(db: Executor, table: 'contact_counts' | 'email_counts', org: string) {
  const rows = await db
    .selectFrom(table)
    .select(['bucket', (eb) => eb.fn.sum<number | string>('n').as('n')])
    .where('organization_id', '=', org)
    // Not a count: the version of the organisation's addresses (migration 0011), tested on its own.
    .where('bucket', '<>', 'addresses')
    .groupBy('bucket')
    .execute();
  return nonZero(rows);
}

function nonZero(rows: { bucket: string; n: number | string }[]): Counts {
  return Object.fromEntries(rows.map((r) => [r.bucket, Number(r.n)]).filter(([, n]) => n !== 0));
}

/** Every maintained count of the organisation equals count(*) over its rows; returns the contact counts. */
async function expectExact(db: Executor, org: string): Promise<Counts> {
  const contacts = await sql<{ bucket: string; n: number | string }>`
    select 'all' as bucket, count(*) as n from contacts where organization_id = ${org}
    union all select 'unsubscribed:' || unsubscribed, count(*) from contacts
      where organization_id = ${org} group by unsubscribed
    union all select 'tag:' || tag, count(*) from contact_tags where organization_id = ${org} group by tag`.execute(
    db,
  );
  const emails = await sql<{ bucket: string; n: number | string }>`
    select 'all' as bucket, count(*) as n from emails where organization_id = ${org}
    union all select 'status:' || status, count(*) from emails
      where organization_id = ${org} group by status`.execute(db);
  const maintained = await bucketSums(db, 'contact_counts', org);
  expect(maintained, `contact counts of ${org}`).toEqual(nonZero(contacts.rows));
  expect(await bucketSums(db, 'email_counts', org), `email counts of ${org}`).toEqual(nonZero(emails.rows));
  return maintained;
}

async function setStatus(db: Executor, ids: string[], status: string): Promise<void> {
  await db.updateTable('emails').set({ status, updated_at: AT }).where('id', 'in', ids).execute();
}

async function newOrg(store: Store, id: string): Promise<string> {
  await store.write((trx) =>
    trx.insertInto('organizations').values({ id, name: id, created_at: AT }).execute(),
  );
  return id;
}

describe.each(storeKinds())('maintained counts on %s', (kind) => {
  let ts: TestStore;
  useStore(kind, (opened) => (ts = opened));

  it('count the rows a store already holds when it is upgraded, and keep counting after', async () => {
    const old = await olderStore(kind, '0003_contact_search');
    let store: Store | undefined;
    try {
      for (const org of ['up1', 'up2']) {
        await old.db.insertInto('organizations').values({ id: org, name: org, created_at: AT }).execute();
        await insertContacts(
          old.db,
          Array.from({ length: 40 }, (_, i) => contact(org, i)),
        );
        await old.db
          .deleteFrom('contacts')
          .where('id', 'in', [`${org}-c1`, `${org}-c2`])
          .execute();
        await old.db.updateTable('contacts').set({ unsubscribed: 1 }).where('id', '=', `${org}-c4`).execute();
        await old.db
          .insertInto('emails')
          .values(Array.from({ length: 30 }, (_, i) => email(org, i)))
          .execute();
        for (const [i, status] of STATUSES.entries()) {
          await setStatus(
            old.db,
            Array.from({ length: 5 }, (_, j) => `${org}-e${i * 5 + j}`),
            status,
          );
        }
      }
      await old.db.destroy();

      store = old.open();
      expect((await store.migrate()).applied).toEqual(migrationsFrom('0004_email_counts'));
      expect(await expectExact(store.db, 'up1')).toMatchObject({
        all: 38,
        'tag:a': 19,
        'unsubscribed:1': 15,
      });
      await expectExact(store.db, 'up2');

      // Writes after the upgrade: batched creates, a multi-row status change, deletes.
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => contact('up1', 100 + i)).map(({ row, tags }) =>
          insertContact(store!, row, tags),
        ),
      );
      const up1 = store;
      await up1.write((trx) => setStatus(trx, ['up1-e0', 'up1-e1', 'up1-e10', 'up1-e20'], 'sent'));
      await up1.write((trx) =>
        trx.deleteFrom('contacts').where('id', 'in', ['up1-c6', 'up1-c101']).execute(),
      );
      await up1.write((trx) => trx.deleteFrom('contact_tags').where('contact_id', '=', 'up1-c5').execute());
      expect(await expectExact(store.db, 'up1')).toMatchObject({ all: 56 });
      await expectExact(store.db, 'up2');
    } finally {
      await store?.close();
      await old.drop();
    }
  });

  it('let an organisation with contacts, tags and emails be deleted, and keep the others', async () => {
    const { store } = ts;
    const gone = await newOrg(store, 'gone');
    const kept = await newOrg(store, 'kept');
    for (const org of [gone, kept]) {
      await store.write((trx) =>
        insertContacts(
          trx,
          Array.from({ length: 12 }, (_, i) => contact(org, i)),
        ),
      );
      await store.append([{ table: 'emails', rows: Array.from({ length: 6 }, (_, i) => email(org, i)) }]);
      await store.write((trx) => setStatus(trx, [`${org}-e0`, `${org}-e1`], 'sent'));
    }
    await store.write((trx) => trx.deleteFrom('organizations').where('id', '=', gone).execute());

    for (const table of ['contacts', 'contact_tags', 'emails', 'contact_counts', 'email_counts'] as const) {
      const { n } = await store.db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<number | string>().as('n'))
        .where('organization_id', '=', gone)
        .executeTakeFirstOrThrow();
      expect(Number(n), table).toBe(0);
    }
    expect(await expectExact(store.db, kept)).toMatchObject({ all: 12 });
  });

  it('stay exact under multi-row writes from two processes at once, folded meanwhile', async () => {
    const org = await newOrg(ts.store, 'busy');
    const stores = [ts.store, ts.reopen()];
    let writing = true;
    const folds = (async () => {
      if (kind !== 'postgres') return 0;
      let n = 0;
      for (; writing; n++) {
        await foldCountShards(ts.store.db);
        await new Promise((r) => setTimeout(r, 5));
      }
      return n;
    })();
    try {
      await Promise.all(
        stores.map(async (store, p) => {
          // Contact creates with the same tags in opposite orders, batched by the store.
          const creates = Array.from({ length: 120 }, (_, i) => contact(org, p * 1000 + i)).map(
            ({ row, tags }) => insertContact(store, row, tags),
          );
          // Emails accepted in batches, then moved through delivery's statuses in multi-row updates.
          const emails = (async () => {
            for (let b = 0; b < 6; b++) {
              const rows = Array.from({ length: 20 }, (_, i) => email(org, p * 1000 + b * 20 + i));
              await store.append([{ table: 'emails', rows }]);
              const ids = rows.map((r) => r.id);
              await store.write((trx) => setStatus(trx, ids, 'sending'));
              await store.write(async (trx) => {
                await setStatus(trx, ids.slice(0, 12), 'sent');
                await setStatus(trx, ids.slice(12), b % 2 ? 'failed' : 'deferred');
              });
            }
          })();
          await Promise.all([...creates, emails]);
        }),
      );
      writing = false;
      if (kind === 'postgres') {
        expect(await folds).toBeGreaterThan(0);
        // Once no transaction holds them, every bucket folds into a single row.
        await foldCountShards(ts.store.db);
        for (const table of ['contact_counts', 'email_counts'] as const) {
          const shards = await ts.store.db
            .selectFrom(table)
            .select('shard')
            .where('organization_id', '=', org)
            .execute();
          expect(new Set(shards.map((r) => r.shard)), table).toEqual(new Set([0]));
        }
      }
      expect(await expectExact(ts.store.db, org)).toMatchObject({ all: 240, 'tag:a': 120, 'tag:b': 120 });
      expect(await bucketSums(ts.store.db, 'email_counts', org)).toMatchObject({
        all: 240,
        'status:sent': 144,
        'status:failed': 48,
        'status:deferred': 48,
      });
    } finally {
      writing = false;
      await stores[1]!.close();
    }
  });
});

// What only PostgreSQL has: many connections writing at once, and migrations under live traffic.
describe.skipIf(noPostgres())('maintained counts on postgres, with concurrent connections', () => {
  const kind = 'postgres';
  let ts: TestStore;
  useStore(kind, (opened) => (ts = opened));

  it('are upgraded without locking out readers of contacts and tags', async () => {
    const old = await olderStore(kind, '0004_email_counts');
    await old.db.insertInto('organizations').values({ id: 'live', name: 'live', created_at: AT }).execute();
    await insertContacts(
      old.db,
      Array.from({ length: 10 }, (_, i) => contact('live', i)),
    );
    await old.db.destroy();
    const store = old.open();
    const reader = new pg.Client({ connectionString: old.url });
    const pool = new pg.Pool({ connectionString: old.url, max: 1 });
    try {
      // A tag page reads contact_tags, then contacts, in one transaction.
      await reader.connect();
      await reader.query('BEGIN');
      await reader.query(`SELECT count(*) FROM contact_tags`);
      const readerPid = (await reader.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      let done = false;
      const migrated = store.migrate().finally(() => (done = true));
      // The migration either ends or waits for a lock the reader holds; a wait would last until the reader
      // commits, which here it does only after the migration.
      const blocked = async () =>
        (
          await pool.query<{ pid: number }>(
            'SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))',
            [readerPid],
          )
        ).rows.length > 0;
      await eventually(
        async () => {
          if (done) return true;
          if (await blocked()) throw new Error('the migration waits for a lock the reader holds');
          return false;
        },
        20_000,
        'the migration to end',
      );
      await migrated;
      expect((await reader.query(`SELECT count(*) AS n FROM contacts`)).rows[0].n).toBe('10');
      await reader.query('COMMIT');
      await expectExact(store.db, 'live');
    } finally {
      await pool.end();
      await reader.end();
      await store.close();
      await old.drop();
    }
  });

  it('an open transaction never holds up another one counting in the same organisation', async () => {
    const org = await newOrg(ts.store, 'parallel');
    const holder = new pg.Client({ connectionString: ts.databaseUrl });
    const other = new pg.Client({ connectionString: ts.databaseUrl });
    await Promise.all([holder.connect(), other.connect()]);
    try {
      // Counted in a shard per transaction (txid % 8), some pair of these would share one and wait: the
      // other connection uses up 0-7 transaction ids before each of its transactions.
      // A wait for the holder's locks would last until its commit, which comes after: any wait at all is
      // the fault, so a lock wait fails the statement (a slow machine makes statements slow, not waits).
      await other.query(`SET lock_timeout = '3s'`);
      const insert = `INSERT INTO emails (id, organization_id, status, from_address, to_addresses,
            cc_addresses, bcc_addresses, reply_to, subject, headers, tags, message_id, created_at, updated_at)
          VALUES ($1, $2, 'queued', 'a@x.org', '[]', '[]', '[]', '[]', 's', '{}', '[]', $1, $3, $3)`;
      for (let i = 0; i < 16; i++) {
        await holder.query('BEGIN');
        await holder.query(insert, [`held-${i}`, org, AT]);
        await holder.query(`UPDATE emails SET status = 'sending' WHERE id = $1`, [`held-${i}`]);
        for (let k = 0; k < i % 8; k++) await other.query('SELECT txid_current()');
        await other.query('BEGIN');
        await other.query(insert, [`free-${i}`, org, AT]);
        await other.query(`UPDATE emails SET status = 'sending' WHERE id = $1`, [`free-${i}`]);
        await other.query('COMMIT');
        await holder.query('COMMIT');
      }
    } finally {
      await Promise.all([holder.end(), other.end()]);
    }
    expect(await bucketSums(ts.store.db, 'email_counts', org)).toEqual({ all: 32, 'status:sending': 32 });
  });
});

describe.each(storeKinds())("the version of an organisation's addresses on %s", (kind) => {
  let ts: TestStore;
  useStore(kind, (opened) => (ts = opened));

  it('is new after every contact added, deleted or readdressed, by any connection, and the same otherwise', async () => {
    const { store } = ts;
    const org = await newOrg(store, 'v1');
    const other = await newOrg(store, 'v2');
    const version = () => addressesVersion(store.db, org);
    const seen = new Set<string>();
    const expectNew = async (step: string) => {
      const v = await version();
      expect(v, step).toBeDefined();
      expect([...seen], step).not.toContain(v);
      seen.add(v!);
    };
    const readdress = (id: string, email: string, email_lower = email) =>
      store.write((trx) =>
        trx.updateTable('contacts').set({ email, email_lower }).where('id', '=', id).execute(),
      );

    await expectNew('no contacts');
    await store.write((trx) =>
      insertContacts(
        trx,
        [0, 1, 2, 3].map((i) => contact(org, i)),
      ),
    );
    await expectNew('four added in one statement');
    await insertContact(store, contact(org, 4).row, []);
    await expectNew('one appended');

    // Everything but the address: subscription, names, tags, JSON, and the address's case alone.
    const before = await version();
    await store.write((trx) =>
      trx
        .updateTable('contacts')
        .set({ unsubscribed: 1, first_name: 'x', tags: '["z"]', json: null })
        .where('organization_id', '=', org)
        .execute(),
    );
    await readdress(`${org}-c1`, 'C1@V1.EXAMPLE', 'c1@v1.example');
    await store.write((trx) => trx.deleteFrom('contact_tags').where('organization_id', '=', org).execute());
    expect(await version(), 'nothing but addresses changed').toBe(before);

    await readdress(`${org}-c1`, 'new@v1.example');
    await expectNew('readdressed');
    await readdress(`${org}-c1`, 'c1@v1.example');
    await expectNew('readdressed back');
    await store.write((trx) =>
      trx
        .updateTable('contacts')
        .set({ email_lower: sql<string>`'x' || email_lower` })
        .where('id', 'in', [`${org}-c2`, `${org}-c3`])
        .execute(),
    );
    await expectNew('two readdressed in one statement');
    await store.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${org}-c0`).execute());
    await expectNew('one deleted');

    const second = ts.reopen();
    try {
      await second.write((trx) => insertContacts(trx, [contact(org, 9)]));
      await expectNew('added from another connection');
      await second.write((trx) => trx.deleteFrom('contacts').where('id', '=', `${org}-c9`).execute());
      await expectNew('deleted from another connection');
    } finally {
      await second.close();
    }

    await store.write((trx) => insertContacts(trx, [contact(other, 0)]));
    // PostgreSQL keeps a version per organisation; SQLite's is one for all of them.
    if (kind === 'postgres') {
      expect(await version(), "another organisation's contact").toBe([...seen].at(-1));
      await foldCountShards(store.db);
      expect(await version(), 'after the shards were folded').toBe([...seen].at(-1));
    } else {
      await expectNew("another organisation's contact");
    }
  });
});
