// Paging (defaults, last page, no overlap, pages math, newest first) and the contact filters.
import { beforeAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { createContact, createList, expect400, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

type Row = { id: string; createdAt: string };
const ids = (rows: Row[]) => rows.map((r) => r.id);

describe.each(storeKinds())('paging and filters on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  async function pageOf(url: string, query: Record<string, string> = {}, key = auth) {
    const res = await t.call({ method: 'GET', url, auth: key, query });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json();
    return { rows: (body.lists ?? body.contacts) as Row[], pagination: body.pagination };
  }

  describe('lists', () => {
    let key: string;
    const created: string[] = [];
    beforeAll(async () => {
      key = (await t.newKey()).auth;
      for (let i = 0; i < 23; i++) created.push(await createList(t, key, `list ${i}`));
      // Another organisation's lists are in no page and no total.
      const other = (await t.newKey()).auth;
      for (let i = 0; i < 3; i++) await createList(t, other, `other ${i}`);
    });

    it('defaults to page 1, limit 20, newest first', async () => {
      const { rows, pagination } = await pageOf('/api/v1/lists', {}, key);
      expect(pagination).toEqual({ page: 1, limit: 20, total: 23, pages: 2 });
      expect(ids(rows)).toEqual([...created].reverse().slice(0, 20));
    });

    it('pages do not overlap, cover everything and end on a short last page', async () => {
      for (const limit of [1, 5, 7, 23, 100]) {
        const seen: string[] = [];
        const pages = Math.ceil(23 / limit);
        for (let page = 1; page <= pages + 1; page++) {
          const res = await pageOf('/api/v1/lists', { page: String(page), limit: String(limit) }, key);
          expect(res.pagination).toEqual({ page, limit, total: 23, pages });
          const expected = page < pages ? limit : page === pages ? 23 - limit * (pages - 1) : 0;
          expect(res.rows).toHaveLength(expected);
          seen.push(...ids(res.rows));
        }
        expect(seen).toEqual([...created].reverse());
      }
    });

    it('an empty organisation has zero pages', async () => {
      const empty = (await t.newKey()).auth;
      const res = await pageOf('/api/v1/lists', {}, empty);
      expect(res).toEqual({ rows: [], pagination: { page: 1, limit: 20, total: 0, pages: 0 } });
    });
  });

  describe('contacts', () => {
    let key: string;
    const created: { id: string; email: string }[] = [];
    beforeAll(async () => {
      key = (await t.newKey()).auth;
      const specs: Record<string, unknown>[] = [
        { email: 'ann.percent%sign@example.com', tags: ['vip'] },
        { email: 'bob_under@example.com', tags: ['vip', 'beta'], unsubscribed: true },
        { email: 'annXpercentYsign@example.com', tags: ['VIP'] },
        { email: 'bobXunder@example.com', tags: ['vipp'] },
        { email: 'Carol@Example.com', unsubscribed: true },
      ];
      for (let i = 0; i < 7; i++) specs.push({ email: `filler${i}@other.test` });
      for (const spec of specs) created.push(await createContact(t, key, spec));
    });
    const emails = (rows: Row[]) => rows.map((r) => (r as unknown as { email: string }).email);

    it('pages newest first with the pages math', async () => {
      const all = await pageOf('/api/v1/contacts', {}, key);
      expect(all.pagination).toEqual({ page: 1, limit: 20, total: 12, pages: 1 });
      expect(ids(all.rows)).toEqual(created.map((c) => c.id).reverse());
      const last = await pageOf('/api/v1/contacts', { page: '3', limit: '5' }, key);
      expect(last.pagination).toEqual({ page: 3, limit: 5, total: 12, pages: 3 });
      expect(ids(last.rows)).toEqual(
        created
          .slice(0, 2)
          .map((c) => c.id)
          .reverse(),
      );
      const p1 = await pageOf('/api/v1/contacts', { page: '1', limit: '5' }, key);
      const p2 = await pageOf('/api/v1/contacts', { page: '2', limit: '5' }, key);
      expect(new Set([...ids(p1.rows), ...ids(p2.rows), ...ids(last.rows)]).size).toBe(12);
      for (let i = 1; i < all.rows.length; i++) {
        expect(all.rows[i - 1]!.createdAt >= all.rows[i]!.createdAt).toBe(true);
      }
    });

    it('answers the last page the API allows, its offset past 32 bits, with no rows and the total', async () => {
      // A page with rows carries its filter's maintained count; an empty one past the end reads it alone.
      const filters: [Record<string, string>, number][] = [
        [{}, 12],
        [{ tag: 'vip' }, 2],
        [{ unsubscribed: 'true' }, 2],
        [{ unsubscribed: 'false' }, 10],
        [{ email: 'other.test' }, 7],
      ];
      for (const [query, total] of filters) {
        const res = await pageOf('/api/v1/contacts', { ...query, page: '1000000000', limit: '100' }, key);
        expect(res.rows).toEqual([]);
        expect(res.pagination).toEqual({
          page: 1_000_000_000,
          limit: 100,
          total,
          pages: Math.ceil(total / 100),
        });
      }
    });

    it('email is a case-insensitive substring with % and _ taken literally', async () => {
      const q = async (email: string) =>
        emails((await pageOf('/api/v1/contacts', { email }, key)).rows).sort();
      expect(await q('%')).toEqual(['ann.percent%sign@example.com']);
      expect(await q('t%s')).toEqual(['ann.percent%sign@example.com']);
      expect(await q('_')).toEqual(['bob_under@example.com']);
      expect(await q('b_u')).toEqual(['bob_under@example.com']);
      expect(await q('CAROL@EXAMPLE')).toEqual(['Carol@Example.com']);
      expect(await q('ANN')).toEqual(['ann.percent%sign@example.com', 'annXpercentYsign@example.com']);
      expect(await q('\\')).toEqual([]);
      expect(await q('other.test')).toHaveLength(7);
      const counted = await pageOf('/api/v1/contacts', { email: 'other.test', limit: '3' }, key);
      expect(counted.pagination).toEqual({ page: 1, limit: 3, total: 7, pages: 3 });
    });

    it('tag is an exact tag', async () => {
      const q = async (tag: string) => emails((await pageOf('/api/v1/contacts', { tag }, key)).rows).sort();
      expect(await q('vip')).toEqual(['ann.percent%sign@example.com', 'bob_under@example.com']);
      expect(await q('VIP')).toEqual(['annXpercentYsign@example.com']);
      expect(await q('beta')).toEqual(['bob_under@example.com']);
      expect(await q('vi')).toEqual([]);
      expect(await q('%')).toEqual([]);
    });

    it('tag pages walk the tagged contacts in the unfiltered order, ties by id, without gaps', async () => {
      const own = (await t.newKey()).auth;
      // Created in parallel, so many share a millisecond: the order then rests on the id.
      const made = await Promise.all(
        Array.from({ length: 30 }, (_, i) => createContact(t, own, i % 3 === 0 ? {} : { tags: ['walk'] })),
      );
      const all = await pageOf('/api/v1/contacts', { limit: '100' }, own);
      expect(all.rows).toHaveLength(made.length);
      const tagged = new Set(made.filter((_, i) => i % 3 !== 0).map((c) => c.id));
      const expected = ids(all.rows).filter((id) => tagged.has(id));
      for (const limit of [1, 3, 7, 20]) {
        const pages = Math.ceil(expected.length / limit);
        const walked: string[] = [];
        for (let page = 1; page <= pages + 1; page++) {
          const res = await pageOf(
            '/api/v1/contacts',
            { tag: 'walk', page: String(page), limit: String(limit) },
            own,
          );
          expect(res.pagination).toEqual({ page, limit, total: expected.length, pages });
          walked.push(...ids(res.rows));
        }
        expect(walked).toEqual(expected);
      }
    });

    it('unsubscribed true or false, combined with other filters', async () => {
      const q = async (query: Record<string, string>) =>
        emails((await pageOf('/api/v1/contacts', query, key)).rows).sort();
      expect(await q({ unsubscribed: 'true' })).toEqual(['Carol@Example.com', 'bob_under@example.com']);
      expect(await q({ unsubscribed: 'false' })).toHaveLength(10);
      expect(await q({ unsubscribed: 'true', tag: 'vip' })).toEqual(['bob_under@example.com']);
      expect(await q({ unsubscribed: 'false', tag: 'vip', email: 'ann' })).toEqual([
        'ann.percent%sign@example.com',
      ]);
      const total = await pageOf('/api/v1/contacts', { unsubscribed: 'false', limit: '4' }, key);
      expect(total.pagination).toEqual({ page: 1, limit: 4, total: 10, pages: 3 });
      // The last page, and pages past the end (answered from the count, without walking the contacts).
      for (const [page, rows] of [
        [3, 2],
        [4, 0],
        [1_000_000, 0],
      ] as const) {
        const res = await pageOf(
          '/api/v1/contacts',
          { unsubscribed: 'false', limit: '4', page: String(page) },
          key,
        );
        expect(res.rows).toHaveLength(rows);
        expect(res.pagination).toEqual({ page, limit: 4, total: 10, pages: 3 });
      }
    });
  });

  it('page and limit are plain decimal integers, on every paged route', async () => {
    // Texts that Number() reads as a number, but that are not integers as a client writes them; and the
    // empty text (`?limit=`), which Number() reads as 0 and which, unlike an empty filter, is refused.
    const texts = ['0x3', '0b11', '0o3', ' 1', '\t\n3', '+2', '1e1', '3.0', '3 ', '１', ''];
    for (const [url, fam] of [
      ['/api/v1/lists', 'contacts'],
      ['/api/v1/contacts', 'contacts'],
      ['/api/v1/emails', 'emails'],
    ] as const) {
      for (const text of texts) {
        for (const name of ['page', 'limit']) {
          const res = await t.call({ method: 'GET', url, auth, query: { [name]: text } });
          expect400(res, fam, [name]);
        }
      }
      const ok = await t.call({ method: 'GET', url, auth, query: { page: '01', limit: '007' } });
      expect(ok.statusCode, ok.body).toBe(200);
      expect(ok.json().pagination).toMatchObject({ page: 1, limit: 7 });
    }
  });
});
