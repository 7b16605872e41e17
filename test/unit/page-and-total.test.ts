// pageAndTotal (paging.ts): a page and its total as of one moment, even when the page comes back empty
// and its total has to be counted after it.
import { describe, expect, it } from 'vitest';
import { pageAndTotal } from '../../src/paging.js';

/** A result that grows by `joins` items after each read of a page: items joining it between two reads. */
function growing(size: number, joins: number) {
  let items = size;
  let reads = 0;
  const page = { page: 3, limit: 10 };
  return {
    page,
    reads: () => reads,
    // An empty page carries no total; a page with rows carries the count its own statement read.
    read: async () => {
      reads++;
      const rows = Array.from({ length: Math.max(0, Math.min(page.limit, items - 20)) }, (_, i) => i);
      const total = rows.length > 0 ? items : undefined;
      items += joins;
      return { rows, total };
    },
    count: async () => items,
  };
}

describe('pageAndTotal', () => {
  it('reads an empty page again when its total, counted after it, says it should have had rows', async () => {
    // 20 items when page 3 is read (empty), 25 by the count: page 3 is read again, and holds them.
    const r = growing(20, 5);
    const { rows, total } = await pageAndTotal(r.page, r.read, r.count);
    expect(r.reads()).toBe(2);
    expect(rows.length).toBeGreaterThan(0);
    expect(total).toBeGreaterThan(20);
  });

  it('answers an empty page past the end with its counted total, read once', async () => {
    const r = growing(15, 0);
    expect(await pageAndTotal(r.page, r.read, r.count)).toEqual({ rows: [], total: 15 });
    expect(r.reads()).toBe(1);
  });

  it('gives up after three reads of a page that keeps coming back empty', async () => {
    let reads = 0;
    const read = async () => (reads++, { rows: [] as number[], total: undefined });
    const got = await pageAndTotal({ page: 3, limit: 10 }, read, async () => 100);
    expect([reads, got]).toEqual([3, { rows: [], total: 100 }]);
  });
});
