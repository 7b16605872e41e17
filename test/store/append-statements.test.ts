// PostgreSQL: a batch of appends is one statement padded to a power of two rows a table, which runs named
// (store/append-statements.ts). Each append must still store exactly its rows, values as given, with
// PostgreSQL's own refusals (a value too long for its column), and keep working after a migration changes
// a column's type under the cached statement.
import { Kysely, PostgresDialect, sql } from '../../src/store/kysely.js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Appender, MAX_STATEMENT_CHARS } from '../../src/store/appender.js';
import { nameStatementsOn } from '../../src/store/named-statements.js';
import { createTestDatabase, noPostgres } from '../helpers/stores.js';
import { type PgProxy, startPgProxy } from '../helpers/pg-proxy.js';

interface Tables {
  parents: { id: string; code: string; n: number; at: string; flag: boolean; note: string | null };
  children: { parent_id: string; position: number; label: string };
  loose: { a: string | null; b: number; c?: string };
  fixed: { id: string; c: string; b: string };
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
  /** INSERT statements sent for parents, so far. */
  let parentInserts = 0;

  beforeAll(async () => {
    database = await createTestDatabase();
    proxy = await startPgProxy(database.url);
    // One connection, so that its named statements can be read back and a second run is a Bind alone.
    pool = new pg.Pool({ connectionString: proxy.url, max: 1 });
    pool.on('connect', (client) => {
      nameStatementsOn(client);
      const query = client.query as unknown as (...args: unknown[]) => unknown;
      (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text;
        if (text?.startsWith('insert into "parents"')) parentInserts++;
        return query.apply(client, args);
      };
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
    await sql`create table fixed (id text primary key, c char(4), b bit(3))`.execute(db);
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
    for (const count of [1, 2, 3, 5, 8, 9, 17, 33, 64, 65, 70, 400]) {
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
    expect(all.rows[0]!.n).toBe(1 + 2 + 3 + 5 + 8 + 9 + 17 + 33 + 64 + 65 + 70 + 400);
  });

  it('runs each padded shape named, planned once it has run often enough', async () => {
    for (let i = 0; i < 8; i++) {
      await appender.append([{ table: 'parents', rows: [parent(`named-${i}-a`), parent(`named-${i}-b`)] }]);
    }
    const { rows } = await sql<{ statement: string; runs: number; generic: number }>`select statement,
        (generic_plans + custom_plans)::int as runs, generic_plans::int as generic from pg_prepared_statements
        where statement like '%into "parents"%'`.execute(db);
    const two = rows.find(
      (r) =>
        r.statement.startsWith('insert into "parents"') &&
        /values \(\$1::text, [^)]*\), \(\$7, /.test(r.statement),
    );
    expect(two, JSON.stringify(rows.map((r) => r.statement.slice(0, 120)))).toBeDefined();
    expect(two!.runs).toBeGreaterThanOrEqual(8);
    expect(two!.generic).toBeGreaterThan(0);
    // Rows of more than 2,048 values (400 of 6 columns) are written exactly and not named.
    expect(rows.some((r) => r.statement.includes('$768)'))).toBe(true);
    expect(rows.every((r) => !r.statement.includes('$2400'))).toBe(true);
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

  it('casts to char(n) and bit(n) as the column takes them: nothing cut, too long refused', async () => {
    await appender.append([
      {
        table: 'fixed',
        rows: [
          { id: 'f1', c: 'abcd', b: '101' },
          { id: 'f2', c: 'ab', b: '011' },
        ],
      },
    ]);
    await expect(
      appender.append([{ table: 'fixed', rows: [{ id: 'f3', c: 'abcdef', b: '101' }] }]),
    ).rejects.toMatchObject({ code: '22001' });
    const { rows } = await sql<{ id: string; c: string; b: string }>`select id, c, b::text as b from fixed
        order by id`.execute(db);
    expect(rows).toEqual([
      { id: 'f1', c: 'abcd', b: '101' },
      { id: 'f2', c: 'ab  ', b: '011' },
    ]);
  });

  it('sends a statement whose value PostgreSQL refused once only, when no column changed', async () => {
    const before = parentInserts;
    await expect(
      appender.append([{ table: 'parents', rows: [{ ...parent('bad-1'), n: 'many' as unknown as number }] }]),
    ).rejects.toMatchObject({ code: '22P02' });
    expect(parentInserts).toBe(before + 1);
  });

  it('writes a batch past MAX_STATEMENT_CHARS of text a row at a time, in one transaction', async () => {
    const note = 'n'.repeat(MAX_STATEMENT_CHARS * 0.6);
    const before = parentInserts;
    // The first runs at once, alone; the other two wait and go together, over the bound together.
    await Promise.all(
      ['big-0', 'big-1', 'big-2'].map((id) =>
        appender.append([{ table: 'parents', rows: [{ ...parent(id), note }] }]),
      ),
    );
    expect(parentInserts).toBe(before + 3);
    expect((await stored('big-')).parents.map((p) => [p.id, p.note?.length])).toEqual(
      ['big-0', 'big-1', 'big-2'].map((id) => [id, note.length]),
    );
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

  it('names the rows of a column a migration added meanwhile', async () => {
    await appender.append([{ table: 'loose', rows: [{ a: 'before', b: 10 }] }]);
    await sql`alter table loose add column c text`.execute(db);
    try {
      await appender.append([{ table: 'loose', rows: [{ a: 'after', b: 11, c: 'new' }] }]);
      await appender.append([{ table: 'loose', rows: [{ a: 'again', b: 12, c: 'newer' }] }]);
      const named = await sql<{ statement: string }>`select statement from pg_prepared_statements
          where statement like 'insert into "loose" ("a", "b", "c")%'`.execute(db);
      expect(named.rows).toHaveLength(1);
      const { rows } = await sql`select a, b, c from loose where b >= 10 order by b`.execute(db);
      expect(rows).toEqual([
        { a: 'before', b: 10, c: null },
        { a: 'after', b: 11, c: 'new' },
        { a: 'again', b: 12, c: 'newer' },
      ]);
    } finally {
      await sql`alter table loose drop column c`.execute(db);
    }
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
