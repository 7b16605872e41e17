// prepared(): a query shape compiled once per store and run with new values must answer exactly what the
// same kysely query answers, on both stores, whatever text the values hold.
import type { RawBuilder } from 'kysely';
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { prepared, rowCount } from '../../src/store/prepared.js';
import type { Executor } from '../../src/store/store.js';
import { type TestStore, storeKinds, useStore } from '../helpers/stores.js';

const HOSTILE = [
  "' or '1'='1",
  "x'); drop table lists; --",
  '$1',
  '?',
  ':id',
  '%',
  '\\',
  '"lists"',
  'ünïcödé ✓',
];

describe.each(storeKinds())('prepared queries on %s', (kind) => {
  let ts: TestStore;
  let db: Executor;
  const orgs = ['org-a', 'org-b'];

  useStore(kind, async (opened) => {
    ts = opened;
    db = ts.store.db;
    const names = ['plain', ...HOSTILE];
    await ts.store.write(async (trx) => {
      for (const org of orgs) {
        await trx.insertInto('organizations').values({ id: org, name: org, created_at: 'x' }).execute();
        for (const [i, name] of names.entries()) {
          const at = `2026-01-01T00:00:${String(i).padStart(2, '0')}.000Z`;
          await trx
            .insertInto('lists')
            .values({
              id: `${org}-${i}`,
              organization_id: org,
              name,
              description: i % 2 ? null : 'd',
              created_at: at,
              updated_at: at,
            })
            .execute();
        }
      }
    });
  });

  const byId = prepared((db, organizationId: string, id: string) =>
    db.selectFrom('lists').selectAll().where('id', '=', id).where('organization_id', '=', organizationId),
  );

  it('binds each call its own values, in the order the SQL uses them', async () => {
    for (const org of orgs) {
      for (const i of [0, 3, 5]) {
        const row = await byId.first(db, org, `${org}-${i}`);
        expect(row?.id).toBe(`${org}-${i}`);
        expect(row?.organization_id).toBe(org);
      }
    }
    // Another organisation's id is not found: the two values were not swapped.
    expect(await byId.first(db, 'org-a', 'org-b-0')).toBeUndefined();
  });

  // One argument used twice, a constant the shape holds, numbers for limit and offset.
  const pageQuery = (
    db: Executor,
    organizationId: string,
    name: string,
    limit: number | RawBuilder<number>,
    offset: number | RawBuilder<number>,
  ) =>
    db
      .selectFrom('lists')
      .select(['id', 'name', 'description'])
      .where('organization_id', '=', organizationId)
      .where((eb) => eb.or([eb('name', '!=', name), eb('description', 'is not', null)]))
      .where('id', '!=', 'org-a-1')
      .where('id', '!=', sql<string>`${organizationId} || '-2'`)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc')
      .limit(limit)
      .offset(offset);
  const page = prepared(pageQuery);
  // The same with its limit and offset as rowCount values, as the prepared pages take them.
  const countedPage = prepared((db, organizationId: string, name: string, limit: number, offset: number) =>
    pageQuery(db, organizationId, name, rowCount(limit), rowCount(offset)),
  );

  it('answers what the same kysely query answers', async () => {
    for (const org of orgs) {
      for (const name of ['plain', ...HOSTILE]) {
        for (const [limit, offset] of [
          [3, 0],
          [4, 2],
          [100, 0],
        ] as const) {
          const expected = await pageQuery(db, org, name, limit, offset).execute();
          expect(expected.length).toBeGreaterThan(0);
          for (const shape of [page, countedPage]) {
            const rows = await shape.all(db, org, name, limit, offset);
            expect(rows).toEqual(expected);
            // The same keys in the same order too (the SQLite reader builds its row objects itself).
            expect(JSON.stringify(rows)).toBe(JSON.stringify(expected));
          }
        }
      }
    }
  });

  it('takes a rowCount offset past 32 bits, as the last page of the API can ask', async () => {
    const offset = (1_000_000_000 - 1) * 100;
    expect(await countedPage.all(db, 'org-a', 'plain', 100, offset)).toEqual([]);
    expect(await page.all(db, 'org-a', 'plain', 100, offset)).toEqual([]);
  });

  it('treats values that look like SQL as values', async () => {
    for (const [i, name] of HOSTILE.entries()) {
      const byName = prepared((db, organizationId: string, name: string) =>
        db
          .selectFrom('lists')
          .select('id')
          .where('organization_id', '=', organizationId)
          .where('name', '=', name),
      );
      expect(await byName.all(db, 'org-a', name)).toEqual([{ id: `org-a-${i + 1}` }]);
      expect(await byId.first(db, 'org-a', name)).toBeUndefined();
    }
    const { rows } = await sql<{ n: number | string }>`select count(*) as n from lists`.execute(db);
    expect(Number(rows[0]!.n)).toBe(orgs.length * (HOSTILE.length + 1));
  });

  it('runs inside a transaction, and sees its uncommitted writes', async () => {
    const seen = await ts.store.write(async (trx) => {
      await trx.updateTable('lists').set({ name: 'renamed' }).where('id', '=', 'org-b-0').execute();
      const row = await byId.first(trx, 'org-b', 'org-b-0');
      await trx.updateTable('lists').set({ name: 'plain' }).where('id', '=', 'org-b-0').execute();
      return row?.name;
    });
    expect(seen).toBe('renamed');
  });

  // On SQLite, reads asked for together run together (store/sqlite-reads.ts): each keeps its own answer.
  it('answers many reads asked for at once, each with its own rows, and fails only a failing one', async () => {
    const broken = prepared((db, id: string) =>
      db
        .selectFrom('lists')
        .select(sql<string>`no_such_column`.as('x'))
        .where('id', '=', id),
    );
    const ids = orgs.flatMap((org) => [0, 1, 2, 3, 4, 5].map((i) => [org, `${org}-${i}`] as const));
    const [bad, ...rows] = await Promise.allSettled([
      broken.all(db, 'org-a-0'),
      ...ids.map(([org, id]) => byId.first(db, org, id)),
      byId.first(db, 'org-a', 'org-b-0'),
    ]);
    expect(bad.status).toBe('rejected');
    expect(rows.map((r) => (r.status === 'fulfilled' ? r.value?.id : 'failed'))).toEqual([
      ...ids.map(([, id]) => id),
      undefined,
    ]);
  });

  it('sees a write committed before the read was asked for', async () => {
    await ts.store.write((trx) =>
      trx.updateTable('lists').set({ name: 'seen' }).where('id', '=', 'org-a-4').execute(),
    );
    const [row] = await Promise.all([byId.first(db, 'org-a', 'org-a-4'), byId.first(db, 'org-a', 'org-a-3')]);
    expect(row?.name).toBe('seen');
    await ts.store.write((trx) =>
      trx.updateTable('lists').set({ name: HOSTILE[3]! }).where('id', '=', 'org-a-4').execute(),
    );
  });

  it('refuses a shape that drops, inlines or alters an argument', async () => {
    const dropped = prepared((db, _id: string) => db.selectFrom('lists').select('id').where('id', '=', 'x'));
    await expect(dropped.all(db, 'org-a-0')).rejects.toThrow(/binds 0 of its 1/);
    const inlined = prepared((db, id: string) =>
      db.selectFrom('lists').select('id').where('id', '=', sql.lit(id)),
    );
    await expect(inlined.all(db, 'org-a-0')).rejects.toThrow(/inlines/);
    const altered = prepared((db, id: string) =>
      db.selectFrom('lists').select('id').where('id', 'like', `${id}%`),
    );
    await expect(altered.all(db, 'org-a-0')).rejects.toThrow(/alters/);
  });
});
