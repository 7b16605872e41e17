// PostgreSQL: a batch of appends is one statement padded to a power of two rows a table, which runs named
// (store/append-statements.ts). Each append must still store exactly its rows, values as given, with
// PostgreSQL's own refusals (a value too long for its column), and keep working after a migration changes
// a column's type under the cached statement.
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Appender } from '../../src/store/appender.js';
import { nameStatementsOn } from '../../src/store/named-statements.js';
import { createTestDatabase, noPostgres } from '../helpers/stores.js';
import { type PgProxy, startPgProxy } from '../helpers/pg-proxy.js';

interface Tables {
  parents: { id: string; code: string; n: number; at: string; flag: boolean; note: string | null };
  children: { parent_id: string; position: number; label: string };
  loose: { a: string | null; b: number };
}

const AT = '2031-01-01T00:00:00.000Z';
const parent = (id: string, n = 0) => ({ id, code: 'abc', n, at: AT, flag: n % 2 === 0, note: null });
const child = (parentId: string, position: number) => ({
  parent_id: parentId,
  position,
  label: `it's "${position}" $1 ?`,
});

describe.skipIf(noPostgres())('appends as named statements on postgres', () => {
  let database: { url: string; drop: () => Promise<void> };
  let proxy: PgProxy;
  let pool: pg.Pool;
  let db: Kysely<Tables>;
  let appender: Appender<Tables>;

  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startPgProxy(database.url);
    // One connection, so that its named statements can be read back and a second run is a Bind alone.
    pool = new pg.Pool({ connectionString: proxy.url, max: 1 });
    pool.on('connect', (client) => {
      nameStatementsOn(client);
      // The lost answer's connection is cut: its client says so once more after its query failed.
      client.on('error', () => undefined);
    });
    pool.on('error', () => undefined);
    db = new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
    await sql`create table parents (id text primary key, code varchar(3) not null, n integer not null,
        at timestamptz not null, flag boolean not null, note text)`.execute(db);
    await sql`create table children (parent_id text not null references parents (id), position integer not null,
        label text not null, primary key (parent_id, position))`.execute(db);
    await sql`create table loose (a text, b integer not null)`.execute(db);
    appender = new Appender<Tables>((fn) => db.transaction().execute(fn), { direct: db });
  });

  afterAll(async () => {
    await db?.destroy();
    await proxy?.close();
    await database?.drop();
  });

  const stored = async (prefix: string) => ({
    parents: await db
      .selectFrom('parents')
      .select([
        'id',
        'code',
        'n',
        sql<string>`to_char(at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`.as('at'),
        'flag',
        'note',
      ])
      .where('id', 'like', `${prefix}%`)
      .orderBy('id')
      .execute(),
    children: await db
      .selectFrom('children')
      .selectAll()
      .where('parent_id', 'like', `${prefix}%`)
      .orderBy('parent_id')
      .orderBy('position')
      .execute(),
  });

  it('stores exactly the rows of each append, 1 to 70 a table, none of the padding', async () => {
    for (const count of [1, 2, 3, 5, 8, 9, 17, 33, 64, 65, 70]) {
      const id = (i: number) => `p${count}-${String(i).padStart(3, '0')}`;
      const parents = Array.from({ length: count }, (_, i) => parent(id(i), i));
      // Children in another count than their parents: each table is padded on its own.
      const children = parents.flatMap((p, i) => (i % 3 === 0 ? [child(p.id, 0), child(p.id, 1)] : []));
      await appender.append([
        { table: 'parents', rows: parents },
        { table: 'children', rows: children },
      ]);
      expect(await stored(`p${count}-`)).toEqual({ parents, children });
    }
    const all = await sql<{ n: number }>`select count(*)::int as n from parents`.execute(db);
    expect(all.rows[0]!.n).toBe(1 + 2 + 3 + 5 + 8 + 9 + 17 + 33 + 64 + 65 + 70);
  });

  it('runs each padded shape named, planned once it has run often enough', async () => {
    for (let i = 0; i < 8; i++) {
      await appender.append([{ table: 'parents', rows: [parent(`named-${i}-a`), parent(`named-${i}-b`)] }]);
    }
    const { rows } = await sql<{ statement: string; runs: number; generic: number }>`select statement,
        (generic_plans + custom_plans)::int as runs, generic_plans::int as generic from pg_prepared_statements
        where statement like 'insert into "parents"%'`.execute(db);
    const two = rows.find((r) => /values \(\$1::text, [^)]*\), \(\$7, /.test(r.statement));
    expect(two, JSON.stringify(rows.map((r) => r.statement.slice(0, 120)))).toBeDefined();
    expect(two!.runs).toBeGreaterThanOrEqual(8);
    expect(two!.generic).toBeGreaterThan(0);
    // Above 64 rows a table, a batch is written exactly and not named.
    expect(rows.every((r) => !r.statement.includes('$390,'))).toBe(true);
  });

  it("leaves PostgreSQL's refusals as they were: a value too long for varchar(3) is refused, not cut", async () => {
    await expect(
      appender.append([{ table: 'parents', rows: [{ ...parent('long-1'), code: 'abcd' }] }]),
    ).rejects.toMatchObject({ code: '22001' });
    await expect(
      appender.append([{ table: 'parents', rows: [parent('dup-1'), parent('dup-1')] }]),
    ).rejects.toMatchObject({ code: '23505' });
    expect(await stored('long-')).toEqual({ parents: [], children: [] });
    expect(await stored('dup-')).toEqual({ parents: [], children: [] });
  });

  it('writes rows whose first column is NULL, or whose columns differ, as kysely does', async () => {
    await appender.append([
      {
        table: 'loose',
        rows: [
          { a: null, b: 1 },
          { a: 'x', b: 2 },
        ],
      },
    ]);
    await appender.append([{ table: 'loose', rows: [{ a: 'y', b: 3 }, { b: 4 } as Tables['loose']] }]);
    const { rows } = await sql<{ a: string | null; b: number }>`select a, b from loose order by b`.execute(
      db,
    );
    expect(rows).toEqual([
      { a: null, b: 1 },
      { a: 'x', b: 2 },
      { a: 'y', b: 3 },
      { a: null, b: 4 },
    ]);
  });

  it("reads a table's columns again when a migration changed one's type under its cached statement", async () => {
    await appender.append([{ table: 'parents', rows: [parent('typed-1', 7)] }]);
    await sql`alter table parents alter column n type text using n::text`.execute(db);
    try {
      // The cached statement casts n to integer: 'seven' is refused, and the append is built again.
      await appender.append([
        { table: 'parents', rows: [{ ...parent('typed-2'), n: 'seven' as unknown as number }] },
      ]);
      const { rows } = await sql<{ id: string; n: string }>`select id, n from parents
          where id like 'typed-%' order by id`.execute(db);
      expect(rows).toEqual([
        { id: 'typed-1', n: '7' },
        { id: 'typed-2', n: 'seven' },
      ]);
    } finally {
      await sql`delete from parents where id like 'typed-%'`.execute(db);
      await sql`alter table parents alter column n type integer using n::integer`.execute(db);
    }
  });

  it('a lost answer to a named run (a Bind alone on the wire) is found committed, as before', async () => {
    await appender.append([{ table: 'parents', rows: [parent('lost-0')] }]);
    const before = proxy.lost;
    proxy.loseAnswerTo('into "parents"');
    await appender.append([{ table: 'parents', rows: [parent('lost-1')] }]);
    expect(proxy.lost).toBe(before + 1);
    expect((await stored('lost-')).parents.map((p) => p.id)).toEqual(['lost-0', 'lost-1']);
  });
});
