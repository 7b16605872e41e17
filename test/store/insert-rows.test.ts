// insertRows writes the multi-row INSERTs of appends itself when every row has the same columns, and
// leaves rows it cannot write that way (differing columns, undefined values) to kysely; either way each
// row is stored as given, on both stores, split into statements under the bound-value limit.
import { describe, expect, it, vi } from 'vitest';
import { insertRows } from '../../src/store/appender.js';
import { type TestStore, storeKinds, useStore } from '../helpers/stores.js';

const AT = '2031-01-01T00:00:00.000Z';
const list = (id: string, description: string | null) => ({
  id,
  organization_id: 'org',
  name: `name ${id} with 'quote' "and" ? $1`,
  description,
  created_at: AT,
  updated_at: AT,
});

describe.each(storeKinds())('insertRows on %s', (kind) => {
  let ts: TestStore;
  useStore(kind, async (opened) => {
    ts = opened;
    await ts.store.write((trx) =>
      trx.insertInto('organizations').values({ id: 'org', name: 'o', created_at: AT }).execute(),
    );
  });
  const stored = (prefix: string) =>
    ts.store.db
      .selectFrom('lists')
      .select(['id', 'organization_id', 'name', 'description', 'contact_count', 'created_at', 'updated_at'])
      .where('id', 'like', `${prefix}%`)
      .orderBy('id')
      .execute();

  it('stores rows of the same columns as given, in statements under the bound-value limit', async () => {
    const rows = Array.from({ length: 7 }, (_, i) => list(`same-${i}`, i % 2 ? null : `d${i}`));
    // 6 columns and at most 13 values per statement: statements of 2 rows, the last of 1.
    await ts.store.write((trx) => insertRows(trx, [{ table: 'lists', rows }], 13));
    expect(await stored('same-')).toEqual(rows.map((r) => ({ ...r, contact_count: 0 })));
  });

  it('splits statements at MAX_STATEMENT_CHARS of text: a driver copies every value of one at once', async () => {
    // About 470 characters a row, at most 1,000 a statement: 2, 2 and then the last alone (over alone).
    const rows = Array.from({ length: 4 }, (_, i) => list(`long-${i}`, 'x'.repeat(400)));
    rows.push(list('long-4', 'y'.repeat(5_000)));
    const statements = await ts.store.write(async (trx) => {
      const executed = vi.spyOn(trx, 'executeQuery');
      await insertRows(trx, [{ table: 'lists', rows }], undefined, 1_000);
      return executed.mock.calls.length;
    });
    expect(statements).toBe(3);
    expect(await stored('long-')).toEqual(rows.map((r) => ({ ...r, contact_count: 0 })));
  });

  it('leaves rows of differing columns, or with undefined values, to kysely', async () => {
    const { description: _left, ...without } = list('mixed-1', null);
    const rows = [list('mixed-0', 'kept'), without, { ...list('mixed-2', null), description: undefined }];
    await ts.store.write((trx) =>
      insertRows(trx, [{ table: 'lists', rows: rows as ReturnType<typeof list>[] }]),
    );
    expect((await stored('mixed-')).map((r) => [r.id, r.description])).toEqual([
      ['mixed-0', 'kept'],
      ['mixed-1', null],
      ['mixed-2', null],
    ]);
  });

  it('fails the whole statement when one row is refused, as before', async () => {
    const rows = [list('dup-0', null), list('dup-0', null)];
    await expect(ts.store.write((trx) => insertRows(trx, [{ table: 'lists', rows }]))).rejects.toThrow();
    expect(await stored('dup-')).toEqual([]);
  });
});
