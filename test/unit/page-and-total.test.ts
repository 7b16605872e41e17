// pageAndTotal (paging.ts): a page and its total as of one moment, even when the page comes back empty
// and its total has to be counted after it.
import { describe, expect, it } from 'vitest';
import { uuidIds, systemClock } from '../../src/clock.js';
import { ContactsService } from '../../src/contacts/contacts.service.js';
import { agreeingTotal, pageAndTotal } from '../../src/paging.js';
import type { Store } from '../../src/store/store.js';

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

  // Several filters' total is counted by a statement of its own, after the page: writes committed between
  // the two moved it (helper-138: page 2 of 100 a page answered with 2 contacts and a total of 100, so
  // `pages` 1; a short page 3 with a total of 249).
  it('makes a total counted apart agree with the page read before it', async () => {
    const page = { page: 2, limit: 100 };
    const read = async () => ({ rows: [1, 2], total: undefined });
    expect((await pageAndTotal(page, read, async () => 100)).total).toBe(102);
    expect((await pageAndTotal(page, read, async () => 180)).total).toBe(102);
    const full = async () => ({ rows: Array.from({ length: 100 }, (_, i) => i), total: undefined });
    expect((await pageAndTotal(page, full, async () => 150)).total).toBe(200);
    expect((await pageAndTotal(page, full, async () => 250)).total).toBe(250);
  });
});

describe('agreeingTotal', () => {
  it('changes nothing a page read in the same snapshot could have come with', () => {
    const page = { page: 3, limit: 10 };
    expect(agreeingTotal(page, 10, 35)).toBe(35); // a full page, more after it
    expect(agreeingTotal(page, 10, 30)).toBe(30); // a full page that ends the result
    expect(agreeingTotal(page, 4, 24)).toBe(24); // a short page ends it
    expect(agreeingTotal(page, 0, 7)).toBe(7); // past the end: an empty page says nothing of the total
  });

  it('makes a total that moved agree with the page', () => {
    const page = { page: 3, limit: 10 };
    expect(agreeingTotal(page, 4, 49)).toBe(24);
    expect(agreeingTotal(page, 10, 12)).toBe(30);
  });
});

describe('ContactsService.page with an email term alone', () => {
  // An email search's total is kept under the addresses' version read before its page: a write committed
  // between the two reads is in one and not the other (helper-138: page 3 of 100 a page answered 44
  // contacts with a total of 249).
  it('answers a total that agrees with the page', async () => {
    const contacts = new ContactsService({} as Store, systemClock, uuidIds);
    const found = { contacts: Array.from({ length: 44 }, (_, i) => `{"id":"${i}"}`), total: 249 };
    Object.assign(contacts, { search: { page: async () => found } });
    const got = await contacts.page('org', { page: 3, limit: 100, email: 'race' });
    expect(got.pagination).toEqual({ page: 3, limit: 100, total: 244, pages: 3 });
  });
});
