// The hot reads run as named statements on PostgreSQL (store/named-statements.ts): PostgreSQL then keeps one
// generic plan for each, and that plan must be the one it would have made for the values asked for.
import { Kysely, PostgresDialect, sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNameable, nameStatement, nameStatementsOn } from '../../src/store/named-statements.js';
import { insertContacts, pageContacts } from '../../src/contacts/contacts.repository.js';
import {
  countEmails,
  findEmail,
  listEvents,
  listRecipients,
  pageEmails,
} from '../../src/emails/emails.repository.js';
import { findList, pageLists } from '../../src/lists/lists.repository.js';
import type { Database } from '../../src/store/schema.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { noPostgres } from '../helpers/stores.js';
import { contactRow } from '../helpers/rows.js';

describe('which statements may run named', () => {
  it('not those with a bound LIMIT or OFFSET, nor those selecting *', () => {
    expect(isNameable('select "id" from "lists" where "organization_id" = $1 order by "id" limit 20')).toBe(
      true,
    );
    expect(isNameable('select count(*) as "n" from "lists" where "organization_id" = $1')).toBe(true);
    expect(isNameable('select "id" from "lists" order by "id" limit cast($1 as bigint)')).toBe(false);
    expect(isNameable('select "id" from "lists" order by "id" limit 20 offset cast($2 as bigint)')).toBe(
      false,
    );
    expect(isNameable('select "id" from "t" limit 20 offset (select cast($2 as bigint))')).toBe(false);
    expect(isNameable('select "id" from "t" limit $1')).toBe(false);
    expect(isNameable('select * from "lists" where "id" = $1')).toBe(false);
    expect(isNameable('select "lists".*, "x" from "lists" where "id" = $1')).toBe(false);
    expect(isNameable('select "x", "lists".* from "lists" where "id" = $1')).toBe(false);
  });
});

describe('a named statement PostgreSQL refuses as stale', () => {
  // A client that refuses the statement by name as a stale plan, then fails the unnamed rerun with `rerun`.
  function clientFailingRerunWith(rerun: Error) {
    const calls: unknown[] = [];
    const client = {
      query(config: unknown, _values?: unknown) {
        calls.push(config);
        if (typeof config === 'object') {
          const stale = Object.assign(new Error('cached plan must not change result type'), {
            code: '0A000',
          });
          return Promise.reject(stale);
        }
        return Promise.reject(rerun);
      },
    };
    nameStatementsOn(client as unknown as pg.ClientBase);
    return { client, calls };
  }
  const text = 'select "name" from "lists" where "id" = $1 and "organization_id" = $2 -- stale rerun';

  it('reports a store failure of its unnamed rerun, not the stale plan', async () => {
    nameStatement(text);
    const lost = new Error('Connection terminated unexpectedly');
    const { client, calls } = clientFailingRerunWith(lost);
    await expect(client.query(text, ['a', 'b'])).rejects.toBe(lost);
    expect(calls).toEqual([{ name: expect.stringMatching(/^mailroom_/), text, values: ['a', 'b'] }, text]);
  });

  it("keeps the stale plan's error when the rerun fails otherwise (inside an aborted transaction)", async () => {
    nameStatement(text);
    const aborted = Object.assign(new Error('current transaction is aborted'), { code: '25P02' });
    const { client } = clientFailingRerunWith(aborted);
    await expect(client.query(text, ['a', 'b'])).rejects.toMatchObject({ code: '0A000' });
  });
});

describe.skipIf(noPostgres())('named statements on postgres', () => {
  let t: TestApp;
  let pool: pg.Pool;
  let db: Kysely<Database>;
  /** The values each statement text last ran with. */
  const ran = new Map<string, unknown[]>();
  let org: string;
  let listId: string;
  let emailId: string;

  beforeAll(async () => {
    t = await createTestApp('postgres');
    org = (await t.services.orgs.create('named')).id;
    const other = (await t.services.orgs.create('other')).id;
    // Enough rows that the planner weighs its indexes against reading the tables whole.
    const base = Date.parse('2026-01-01T00:00:00.000Z');
    const rows = Array.from({ length: 20_000 }, (_, i) => {
      const owner = i % 10 === 9 ? other : org;
      const row = contactRow(
        owner,
        `c${i}`,
        `p${i}@named.test`,
        new Date(base + i).toISOString(),
        i % 20 === 0,
      );
      return { row: { ...row, json: null }, tags: i % 10 === 0 ? ['vip'] : [] };
    });
    await t.ts.store.write((trx) => insertContacts(trx, rows));
    listId = (await t.services.lists.create(org, { name: 'Named' })).id;
    for (let i = 0; i < 30; i++) {
      const sent = await t.services.emails.send(org, { to: [`e${i}@named.test`], subject: 's', text: 't' });
      emailId = sent.id;
    }
    await sql`analyze`.execute(t.ts.store.db);

    // One connection, so that its named statements can be read back; each call's values are kept.
    pool = new pg.Pool({ connectionString: t.ts.databaseUrl, max: 1 });
    pool.on('connect', (client) => {
      nameStatementsOn(client);
      const query = client.query as unknown as (...args: unknown[]) => unknown;
      (client as unknown as { query: unknown }).query = (
        text: unknown,
        values: unknown,
        ...rest: unknown[]
      ) => {
        if (typeof text === 'string' && Array.isArray(values)) ran.set(text, values);
        return query.call(client, text, values, ...rest);
      };
    });
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  }, 60_000);

  afterAll(async () => {
    await db?.destroy();
    await t?.close();
  });

  const reads = () => [
    pageContacts(db, org, {}, { page: 1, limit: 20 }),
    pageContacts(db, org, { unsubscribed: true }, { page: 1, limit: 20 }),
    pageContacts(db, org, { tag: 'vip' }, { page: 1, limit: 20 }),
    pageLists(db, org, { page: 1, limit: 20 }),
    findList(db, org, listId),
    pageEmails(db, org, undefined, { page: 1, limit: 20 }),
    pageEmails(db, org, 'queued', { page: 1, limit: 20 }),
    findEmail(db, org, emailId),
    listRecipients(db, emailId),
    listEvents(db, emailId),
    countEmails(db, org, undefined),
  ];

  const named = async () =>
    (
      await sql<{ name: string; statement: string; generic_plans: string }>`
        select name, statement, generic_plans from pg_prepared_statements where not from_sql`.execute(db)
    ).rows;

  it('are the hot reads, planned once for all values after a few runs', async () => {
    for (let i = 0; i < 8; i++) await Promise.all(reads());
    const rows = await named();
    // Each read above has a shape of its own, and each is named.
    expect(rows.length).toBe(reads().length);
    for (const row of rows) {
      expect(ran.has(row.statement)).toBe(true);
      expect(isNameable(row.statement)).toBe(true);
      expect({ name: row.name, generic: Number(row.generic_plans) > 0 }).toEqual({
        name: row.name,
        generic: true,
      });
    }
  });

  it('keep the plan PostgreSQL makes for the values asked for', async () => {
    const rows = await named();
    expect(rows.length).toBe(reads().length);
    await db.connection().execute(async (conn) => {
      const planOf = async (mode: string, name: string, values: unknown[]) => {
        await sql.raw(`set plan_cache_mode = ${mode}`).execute(conn);
        const args = values.map((v) =>
          typeof v === 'number' ? String(v) : pg.Client.prototype.escapeLiteral(String(v)),
        );
        const { rows } = await sql
          .raw<{ 'QUERY PLAN': string }>(`explain (costs off) execute ${name}(${args.join(', ')})`)
          .execute(conn);
        // The values appear as written in a custom plan and as $n in the generic one: the same plan either way.
        const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
        return plan.replace(/'(?:[^']|'')*'::\w+/g, '?').replace(/\$\d+/g, '?');
      };
      try {
        for (const { name, statement } of rows) {
          const values = ran.get(statement)!;
          const generic = await planOf('force_generic_plan', name, values);
          const custom = await planOf('force_custom_plan', name, values);
          expect({ name, plan: generic }).toEqual({ name, plan: custom });
        }
      } finally {
        await sql`reset plan_cache_mode`.execute(conn);
      }
    });
  });

  it('leave page sizes other than the usual ones unnamed, planned for their page', async () => {
    const before = (await named()).length;
    const odd = await pageContacts(db, org, {}, { page: 1, limit: 7 });
    const usual = await pageContacts(db, org, {}, { page: 1, limit: 10 });
    expect(odd.contacts).toEqual(usual.contacts.slice(0, 7));
    expect(odd.total).toBe(usual.total);
    // The size-10 first page is a statement of its own; the size-7 one is not named at all.
    expect((await named()).length).toBe(before + 1);
  });

  it('keep answering on their connection after a migration changes the type of a column they read', async () => {
    const list = await findList(db, org, listId);
    await sql`alter table lists alter column description type varchar(500)`.execute(t.ts.store.db);
    // PostgreSQL now refuses the named statement on this connection; it runs unnamed there instead.
    expect(await findList(db, org, listId)).toEqual(list);
    expect(await findList(db, org, listId)).toEqual(list);
  });
});
