// GET /api/v1/contacts?email=…: a case-insensitive, literal substring of the address, on both stores. On
// SQLite terms of three or more characters go through the trigram index when few contacts match and walk
// the organisation otherwise; every answer here is checked against the same filter done in JavaScript.
import { beforeAll, describe, expect, it } from 'vitest';
import type { Kysely } from 'kysely';
import { sql } from '../../src/store/kysely.js';
import type { TestApp } from '../helpers/app.js';
import { createContact, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { pageAfterContact } from '../../src/search/contact-walk.js';
import { contactRow } from '../helpers/rows.js';
import type { ContactRow, Database } from '../../src/store/schema.js';

const BASE = Date.parse('2030-01-01T00:00:00.000Z');

/** Address i of a seeded organisation: mixed case, some with `%`, `_` or a look-alike. */
function address(i: number): string {
  if (i % 50 === 7) return `Pct%Lit${i}@Odd.Test`;
  if (i % 45 === 8) return `und_lit${i}@odd.test`;
  if (i % 40 === 9) return `undXlit${i}@odd.test`;
  return `User${i}@Dom${i % 13}.test`;
}

describe.each(storeKinds())('email substring search on %s', (kind) => {
  let t: TestApp, auth: string, org: string;
  const rows: ContactRow[] = [];
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  async function seed(organizationId: string, count: number, label: string): Promise<ContactRow[]> {
    const made = Array.from({ length: count }, (_, i) => {
      const email = label === '' ? address(i) : `${label}${address(i)}`;
      // Not in insertion order, so the page order must come from created_at and not from the index.
      const at = new Date(BASE + ((i * 37) % count) * 1000).toISOString();
      // Stored without its JSON text, as before migration 0008: every page renders these.
      const row: ContactRow = {
        ...contactRow(
          organizationId,
          `${organizationId}-${String(i).padStart(4, '0')}`,
          email,
          at,
          i % 4 === 0,
        ),
        json: null,
      };
      return { row, tags: [] };
    });
    for (let i = 0; i < made.length; i += 100) {
      await t.ts.store.write((trx) => insertContacts(trx, made.slice(i, i + 100)));
    }
    return made.map((m) => m.row);
  }

  beforeAll(async () => {
    const key = await t.newKey(['readContacts', 'writeContacts']);
    [auth, org] = [key.auth, key.organizationId];
    rows.push(...(await seed(org, 300, '')));
    // Another organisation with look-alike addresses: never seen, never counted.
    await seed((await t.newKey()).organizationId, 120, '');
  });

  function expected(term: string, unsubscribed?: boolean): ContactRow[] {
    return rows
      .filter((r) => r.email_lower.includes(term.toLowerCase()))
      .filter((r) => unsubscribed === undefined || r.unsubscribed === (unsubscribed ? 1 : 0))
      .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id));
  }

  /** The ids of contacts given as their API JSON text. */
  const idsOf = (contacts: string[] | undefined) =>
    contacts?.map((json) => (JSON.parse(json) as { id: string }).id);

  /** A search, with this organisation's key unless another's is given. */
  async function search(query: Record<string, string>, as = auth) {
    const res = await t.call({ method: 'GET', url: '/api/v1/contacts', auth: as, query });
    expect(res.statusCode, res.body).toBe(200);
    const body = res.json() as { contacts: { id: string }[]; pagination: { total: number; pages: number } };
    return { ids: body.contacts.map((c) => c.id), pagination: body.pagination };
  }

  async function expectPages(term: string, limit: number, unsubscribed?: boolean): Promise<void> {
    const want = expected(term, unsubscribed).map((r) => r.id);
    const extra: Record<string, string> =
      unsubscribed === undefined ? {} : { unsubscribed: String(unsubscribed) };
    const pages = Math.max(1, Math.ceil(want.length / limit));
    for (let page = 1; page <= Math.min(pages + 1, 4); page++) {
      const got = await search({ email: term, limit: String(limit), page: String(page), ...extra });
      expect(got.ids, `${term} page ${page}`).toEqual(want.slice((page - 1) * limit, page * limit));
      expect(got.pagination.total, `${term} total`).toBe(want.length);
    }
  }

  it('matches any part of the address, ignoring case, in page order with the right total', async () => {
    // Selective and unselective terms, so both the index and the ordered walk answer on SQLite.
    for (const term of ['user12', 'USER1', 'User29@', '@dom3.', 'DOM1', '.test', 'odd.test', 'ser2']) {
      await expectPages(term, 20);
      await expectPages(term, 7);
    }
    expect(expected('user12').length).toBeGreaterThan(0);
  });

  it('treats % and _ as themselves', async () => {
    await expectPages('pct%lit', 20);
    await expectPages('%lit', 5);
    await expectPages('und_lit', 20);
    await expectPages('_lit', 5);
    await expectPages('%', 20);
    await expectPages('_', 20);
    expect(expected('und_lit').length).toBeGreaterThan(0);
    expect(expected('und_lit').some((r) => r.email.startsWith('undX'))).toBe(false);
  });

  it('takes a double quote or search syntax as plain text', async () => {
    for (const term of ['"', 'a"b', '" OR "', 'user1" OR "dom', 'user*', 'NEAR(user dom)', 'dom1 user1']) {
      const got = await search({ email: term });
      expect(got.ids, term).toEqual([]);
      expect(got.pagination.total).toBe(0);
    }
  });

  it('trims the term, as every address that looks a contact up is trimmed', async () => {
    // `+` is a space in a query string; no address holds one.
    const got = await search({ email: ' \tUSER12 ', limit: '100' });
    expect(got.ids).toEqual(expected('user12').map((r) => r.id));
    expect(got.pagination.total).toBe(expected('user12').length);
    const url = '/api/v1/contacts?email=+user12+&limit=100';
    const plus = (await t.call({ method: 'GET', url, auth })).json() as { contacts: { id: string }[] };
    expect(plus.contacts.map((c) => c.id)).toEqual(got.ids);
    // Spaces alone are an empty filter: none at all, as `?email=` is.
    expect((await search({ email: '  ' })).pagination.total).toBe(rows.length);
  });

  it('one- and two-character terms match too', async () => {
    for (const term of ['9', 'r2', '@d', 'Q', 'zz']) await expectPages(term, 20);
  });

  it('combines with the unsubscribed filter', async () => {
    for (const term of ['user12', 'dom4', 'u']) {
      await expectPages(term, 20, true);
      await expectPages(term, 20, false);
    }
    // Contacts unsubscribed, readdressed and deleted through the API: in the total they should be (pages
    // of 1, so that the total is counted, not read off a short page).
    const made: string[] = [];
    for (const email of ['Sea.Otter1@Kelp.test', 'Sea.Otter2@Kelp.test']) {
      const post = await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email } });
      made.push(post.json().contact.id as string);
    }
    const totals = async (term: string) =>
      Promise.all(
        [false, true].map(async (unsubscribed) => {
          const got = await search({ email: term, unsubscribed: String(unsubscribed), limit: '1' });
          return got.pagination.total;
        }),
      );
    const put = (payload: Record<string, unknown>) =>
      t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload: { id: made[0], ...payload } });
    expect(await totals('otter')).toEqual([2, 0]);
    await put({ unsubscribed: true });
    expect(await totals('otter')).toEqual([1, 1]);
    await put({ email: 'river.otter@kelp.test' });
    expect(await totals('sea.otter')).toEqual([1, 0]);
    expect(await totals('river.otter')).toEqual([0, 1]);
    for (const id of made) await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id } });
    expect(await totals('otter')).toEqual([0, 0]);
  });

  it('answers a deep page asked first with its rows and the total', async () => {
    // Past the 2,000th match before the total is known: on PostgreSQL the total is counted first, and
    // here (a small organisation) the page is then the plain walk's, which carries that total.
    const key = await t.newKey(['readContacts', 'writeContacts']);
    const made = Array.from({ length: 2_100 }, (_, i) => {
      const at = new Date(BASE + i * 1000).toISOString();
      const email = i % 50 === 0 ? `other${i}@herd.test` : `deep${i}@herd.test`;
      return {
        row: { ...contactRow(key.organizationId, `${key.organizationId}-d${i}`, email, at), json: null },
        tags: [],
      };
    });
    for (let i = 0; i < made.length; i += 500) {
      await t.ts.store.write((trx) => insertContacts(trx, made.slice(i, i + 500)));
    }
    const want = made
      .filter((m) => m.row.email_lower.includes('deep'))
      .map((m) => m.row.id)
      .reverse();
    for (const page of [101, 103, 104, 1]) {
      const got = await search({ email: 'DEEP', limit: '20', page: String(page) }, key.auth);
      expect(got.ids, `page ${page}`).toEqual(want.slice((page - 1) * 20, page * 20));
      expect(got.pagination.total).toBe(want.length);
    }
    expect(want.length).toBe(2_058);
  });

  it('combines with a tag, in pages and totals, as contacts are unsubscribed and readdressed', async () => {
    // An organisation of its own: two in three contacts tagged `herd`, a quarter unsubscribed.
    const key = await t.newKey(['readContacts', 'writeContacts']);
    const made = Array.from({ length: 90 }, (_, i) => {
      const at = new Date(BASE + ((i * 37) % 90) * 1000).toISOString();
      const row = contactRow(key.organizationId, `${key.organizationId}-t${i}`, address(i), at, i % 4 === 0);
      return { row: { ...row, json: null }, tags: i % 3 === 0 ? [] : ['herd'] };
    });
    await t.ts.store.write((trx) => insertContacts(trx, made));
    const want = (term: string, unsubscribed?: boolean) =>
      made
        .filter((m) => m.tags.length > 0 && m.row.email_lower.includes(term.toLowerCase()))
        .filter((m) => unsubscribed === undefined || m.row.unsubscribed === (unsubscribed ? 1 : 0))
        .map((m) => m.row)
        .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id))
        .map((r) => r.id);
    const check = async (term: string, unsubscribed?: boolean) => {
      const ids = want(term, unsubscribed);
      const extra: Record<string, string> =
        unsubscribed === undefined ? {} : { unsubscribed: String(unsubscribed) };
      for (const page of [1, 2]) {
        const got = await search(
          { tag: 'herd', email: term, limit: '4', page: String(page), ...extra },
          key.auth,
        );
        expect(got.ids, `${term} ${unsubscribed} page ${page}`).toEqual(ids.slice((page - 1) * 4, page * 4));
        expect(got.pagination.total, `${term} ${unsubscribed} total`).toBe(ids.length);
      }
    };
    const terms = ['user1', 'DOM3', 'user', 'lit', 'zz', 'r2'];
    for (const term of terms)
      for (const unsubscribed of [undefined, true, false]) await check(term, unsubscribed);
    expect(want('user1').length).toBeGreaterThan(4);
    // Unsubscribed and readdressed through the API: the pages and totals follow.
    const put = (i: number, payload: Record<string, unknown>) =>
      t.call({
        method: 'PUT',
        url: '/api/v1/contacts',
        auth: key.auth,
        payload: { id: made[i]!.row.id, ...payload },
      });
    for (const [i, payload] of [
      [1, { unsubscribed: true }],
      [10, { email: 'moved10@elsewhere.test' }],
      [4, { unsubscribed: false }],
    ] as const) {
      expect((await put(i, payload)).statusCode).toBe(200);
      if ('unsubscribed' in payload) made[i]!.row.unsubscribed = payload.unsubscribed ? 1 : 0;
      if ('email' in payload) made[i]!.row.email_lower = payload.email;
    }
    for (const term of ['user1', 'moved', 'user']) {
      for (const unsubscribed of [undefined, true, false]) await check(term, unsubscribed);
    }
    expect(want('moved')).toEqual([made[10]!.row.id]);
  });

  it('finds a contact created, renamed or deleted through the API as it is now', async () => {
    const post = await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      payload: { email: 'Fresh.Quokka@Zoo.Test' },
    });
    expect(post.statusCode).toBe(201);
    const id = post.json().contact.id as string;
    expect((await search({ email: 'quokka@zoo' })).ids).toEqual([id]);

    const put = await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id, email: 'renamed.wombat@zoo.test' },
    });
    expect(put.statusCode).toBe(200);
    expect((await search({ email: 'quokka' })).ids).toEqual([]);
    expect((await search({ email: 'WOMBAT' })).ids).toEqual([id]);

    const del = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id } });
    expect(del.statusCode).toBe(200);
    expect((await search({ email: 'wombat' })).ids).toEqual([]);
  });

  it('gives the right total for the same search as contacts are added, deleted or readdressed, by anyone', async () => {
    // More matches than the index takes for a page of 2, and than it counts: the total is counted by the
    // walk, and on SQLite kept for the next request until the addresses change.
    const ids: string[] = [];
    for (let i = 0; i < 12; i++) {
      const res = await t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        payload: { email: `kept-total${i}@herd.test` },
      });
      ids.push(res.json().contact.id as string);
    }
    const total = async (want: number, step: string) => {
      for (let i = 0; i < 2; i++) {
        const got = await search({ email: 'KEPT-TOTAL', limit: '2' });
        expect(got.pagination.total, `${step}, request ${i + 1}`).toBe(want);
        expect(got.ids).toHaveLength(2);
      }
    };
    await total(12, 'created');
    await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      payload: { email: 'kept-total-x@herd.test' },
    });
    await total(13, 'one more');
    await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id: ids[0]! } });
    await total(12, 'one deleted');
    const readdress = (email: string) =>
      t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload: { id: ids[1], email } });
    await readdress('away@herd.test');
    await total(11, 'one readdressed away');
    await readdress('kept-totalz@herd.test');
    await total(12, 'and back');
    // Written on a connection of its own, as another process (the CLI, a second server) would.
    const other = t.ts.reopen();
    try {
      const at = new Date().toISOString();
      const row: ContactRow = {
        id: `${org}-other`,
        organization_id: org,
        email: 'kept-total-other@herd.test',
        email_lower: 'kept-total-other@herd.test',
        first_name: null,
        last_name: null,
        unsubscribed: 0,
        custom_fields: '{}',
        tags: '[]',
        created_at: at,
        updated_at: at,
        json: null,
      };
      await other.write((trx) => insertContacts(trx, [{ row, tags: [] }]));
      await total(13, 'one more from another connection');
      await other.write((trx) => trx.deleteFrom('contacts').where('id', '=', row.id).execute());
      await total(12, 'deleted from another connection');
    } finally {
      await other.close();
    }
  });
  it('keeps a page while the addresses stay as they were, each contact on it read as it is now', async () => {
    const made: string[] = [];
    for (let i = 0; i < 12; i++) {
      const res = await t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        payload: { email: `kept-page${i}@flock.test`, firstName: `F${i}` },
      });
      made.push(res.json().contact.id as string);
    }
    const page2 = async () => {
      const res = await t.call({
        method: 'GET',
        url: '/api/v1/contacts',
        auth,
        query: { email: 'KEPT-PAGE', limit: '5', page: '2' },
      });
      expect(res.statusCode, res.body).toBe(200);
      return res.json() as {
        contacts: { id: string; firstName: string | null; unsubscribed: boolean }[];
        pagination: { total: number };
      };
    };
    // Newest first: page 2 holds the 7th to 3rd made. Ten at once agree with each other.
    const first = await Promise.all(Array.from({ length: 10 }, page2));
    for (const got of first) {
      expect(got.contacts.map((c) => c.id)).toEqual(made.slice(2, 7).reverse());
      expect(got.pagination.total).toBe(12);
    }
    // Other fields change without changing the page: it shows them as they are now.
    const onPage = made[4]!;
    await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id: onPage, firstName: 'Renamed' },
    });
    await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id: made[5], unsubscribed: true },
    });
    const renamed = await page2();
    expect(renamed.contacts.map((c) => c.id)).toEqual(made.slice(2, 7).reverse());
    expect(renamed.contacts.find((c) => c.id === onPage)?.firstName).toBe('Renamed');
    expect(renamed.contacts.find((c) => c.id === made[5])?.unsubscribed).toBe(true);
    // An address change, a delete, a new contact: the page is worked out again.
    await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id: onPage, email: 'gone@flock.test' },
    });
    const readdressed = made.filter((id) => id !== onPage);
    expect((await page2()).contacts.map((c) => c.id)).toEqual(readdressed.slice(1, 6).reverse());
    await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id: made[11]! } });
    const deleted = readdressed.filter((id) => id !== made[11]);
    const afterDelete = await page2();
    expect(afterDelete.contacts.map((c) => c.id)).toEqual(deleted.slice(0, 5).reverse());
    expect(afterDelete.pagination.total).toBe(10);
    const added = await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      payload: { email: 'kept-page-new@flock.test' },
    });
    const withNew = [...deleted, added.json().contact.id as string];
    const afterAdd = await page2();
    expect(afterAdd.contacts.map((c) => c.id)).toEqual(withNew.slice(1, 6).reverse());
    expect(afterAdd.pagination.total).toBe(11);
  });

  it('never shows a contact whose address no longer holds the term, while addresses change under a kept page', async () => {
    // A request that read the addresses' version just before a change committed found the page kept under
    // that version, and read its contacts by id: one readdressed meanwhile came back with its new address.
    for (let round = 0; round < 4; round++) {
      const term = `drift${round}x`;
      const made: string[] = [];
      for (let i = 0; i < 16; i++)
        made.push((await createContact(t, auth, { email: `${term}${i}@flock.test` })).id);
      const query = { email: term, limit: '50' };
      expect((await search(query)).pagination.total).toBe(16);
      const moves = made.slice(0, 8).map((id, i) =>
        t.call({
          method: 'PUT',
          url: '/api/v1/contacts',
          auth,
          payload: { id, email: `moved${round}-${i}@flock.test` },
        }),
      );
      const reads = Array.from({ length: 8 }, () =>
        t.call({ method: 'GET', url: '/api/v1/contacts', auth, query }),
      );
      const [moved, read] = await Promise.all([Promise.all(moves), Promise.all(reads)]);
      for (const r of moved) expect(r.statusCode, r.body).toBe(200);
      for (const r of read) {
        expect(r.statusCode, r.body).toBe(200);
        const emails = (r.json() as { contacts: { email: string }[] }).contacts.map((c) => c.email);
        expect(
          emails.filter((email) => !email.includes(term)),
          `round ${round}`,
        ).toEqual([]);
      }
      const after = await search(query);
      expect(after.ids).toEqual(made.slice(8).reverse());
      expect(after.pagination.total).toBe(8);
    }
  });

  it('reads the page after a kept one from where it stopped, and only what it can answer so', async () => {
    const db = t.ts.store.db;
    for (const [term, limit] of [
      ['user1', 7],
      ['DOM3.', 20],
      ['odd.test', 5],
    ] as const) {
      const want = expected(term).map((r) => r.id);
      const pages = Math.ceil(want.length / limit);
      for (let page = 2; page <= pages; page++) {
        // From the page before it, and from page 1, skipping the pages between.
        for (const from of new Set([page - 1, 1])) {
          const after = { id: want[from * limit - 1]!, skip: (page - 1 - from) * limit };
          const got = await pageAfterContact(db, org, term, after, { page, limit }, want.length);
          expect(idsOf(got), `${term} page ${page} from ${from}`).toEqual(
            want.slice((page - 1) * limit, page * limit),
          );
        }
      }
      // A short last page is taken because the walk passed every older contact, whatever the total
      // says; a contact that is gone starts nothing.
      const last = { page: pages, limit };
      const after = { id: want[(pages - 1) * limit - 1]!, skip: 0 };
      for (const total of [want.length + 1, undefined]) {
        const got = await pageAfterContact(db, org, term, after, last, total);
        expect(idsOf(got)).toEqual(want.slice((pages - 1) * limit));
      }
      const gone = { id: 'no-such-contact', skip: 0 };
      expect(await pageAfterContact(db, org, term, gone, last, 99)).toBeUndefined();
    }
  });

  it('walks on through contacts that share a created_at, and gives up past its budget', async () => {
    // 6,000 contacts, three to each millisecond, ids not in that order: `tie` is held by the newest 30
    // and the oldest 30, with 5,940 between them, more than the walk's budget of 5,000.
    const other = (await t.newKey()).organizationId;
    const count = 6_000;
    const made = Array.from({ length: count }, (_, i) => {
      const email = i >= count - 30 ? `tie${i}@new.test` : i < 30 ? `tie${i}@old.test` : `other${i}@x.test`;
      const id = `${other}-${String((i * 7919) % count).padStart(4, '0')}`;
      const at = new Date(BASE + Math.floor(i / 3)).toISOString();
      return { row: { ...contactRow(other, id, email, at), json: null }, tags: [] };
    });
    for (let i = 0; i < count; i += 1_000) {
      await t.ts.store.write((trx) => insertContacts(trx, made.slice(i, i + 1_000)));
    }
    const want = made
      .map((m) => m.row)
      .filter((r) => r.email.startsWith('tie'))
      .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id))
      .map((r) => r.id);
    const db = t.ts.store.db;
    const from = (page: number, limit: number, total: number | undefined) =>
      pageAfterContact(
        db,
        other,
        'TIE',
        { id: want[(page - 1) * limit - 1]!, skip: 0 },
        { page, limit },
        total,
      );
    // Pages 2–4 of 7 each start inside a millisecond that three contacts share.
    for (const page of [2, 3, 4]) {
      expect(idsOf(await from(page, 7, want.length)), `page ${page}`).toEqual(
        want.slice((page - 1) * 7, page * 7),
      );
    }
    // Page 5 holds the last 2 of the newest and 5 of the oldest, past the budget: not answered, known total
    // or not; nor when the total says the walk would have to be longer than it may be.
    expect(await from(5, 7, want.length)).toBeUndefined();
    expect(await from(5, 7, undefined)).toBeUndefined();
    expect(await from(2, 7, 1)).toBeUndefined();
  });

  // PostgreSQL only: SQLite's triggers cannot be turned off for one connection.
  if (kind === 'postgres') {
    /** Written with the triggers off, as if past the version of the addresses a request read. */
    const unseen = async (write: (trx: Kysely<Database>) => Promise<unknown>) => {
      const other = t.ts.reopen();
      try {
        await other.write(async (trx) => {
          await sql`set local session_replication_role = replica`.execute(trx);
          await write(trx);
        });
      } finally {
        await other.close();
      }
    };
    /** A match newer than every seeded contact that the version does not see: a page found anew shows it. */
    const lateUnseen = (organizationId: string, id: string, email: string) =>
      unseen((trx) =>
        insertContacts(trx, [
          {
            row: {
              ...contactRow(organizationId, id, email, new Date(BASE + 10_000_000).toISOString()),
              json: null,
            },
            tags: [],
          },
        ]),
      );

    it('answers the page after a kept one by walking on from its last contact', async () => {
      // A newer match written with the triggers off, so the version stays: a page found anew would start
      // one contact later, the walk from where page 1 stopped does not.
      const want = expected('dom5.').map((r) => r.id);
      const page = async (n: number) => (await search({ email: 'dom5.', limit: '6', page: String(n) })).ids;
      expect(await page(1)).toEqual(want.slice(0, 6));
      await lateUnseen(org, `${org}-late5`, 'late@dom5.test');
      expect(await page(2)).toEqual(want.slice(6, 12));
      // Page 4 walks on from page 2, past page 3's matches.
      expect(await page(4)).toEqual(want.slice(18, 24));
      expect(await page(3)).toEqual(want.slice(12, 18));
      // With another limit no page before it is kept: found anew, with the late contact before the rest.
      const anew = await search({ email: 'dom5.', limit: '5', page: '2' });
      expect(anew.ids).toEqual([`${org}-late5`, ...want].slice(5, 10));
    });

    it('walks on from a kept page up to 50 pages before the one asked, and finds a page further on anew', async () => {
      // An organisation of its own, one contact a page: pages 40 and 60 are far past page 1.
      const key = await t.newKey(['readContacts', 'writeContacts']);
      const want = (await seed(key.organizationId, 70, 'far'))
        .sort((a, b) => b.created_at.localeCompare(a.created_at) || b.id.localeCompare(a.id))
        .map((r) => r.id);
      const page = async (n: number) =>
        (await search({ email: 'FAR', limit: '1', page: String(n) }, key.auth)).ids;
      expect(await page(1)).toEqual(want.slice(0, 1));
      // A newer match the version does not see (triggers off): a page found anew starts one contact later.
      const late = `${key.organizationId}-late`;
      await lateUnseen(key.organizationId, late, 'farlate@x.test');
      // 59 pages past page 1, with none kept between: anew, the late contact first.
      expect(await page(60)).toEqual([late, ...want].slice(59, 60));
      // 39 past page 1 (and 20 before page 60, which is after it): walked on from page 1.
      expect(await page(40)).toEqual(want.slice(39, 40));
    });

    it('answers a kept page from what it kept, and reads it afresh once a contact on it is gone', async () => {
      // Proves the kept page answers, and not a new read: with the triggers off, a new matching contact
      // leaves the version as it was, so only a page not kept yet shows it.
      const search = async (limit: string) => {
        const res = await t.call({
          method: 'GET',
          url: '/api/v1/contacts',
          auth,
          query: { email: 'ghost-herd', limit },
        });
        const body = res.json() as { contacts: { id: string }[]; pagination: { total: number } };
        return { ids: body.contacts.map((c) => c.id), total: body.pagination.total };
      };
      for (let i = 0; i < 3; i++) {
        await t.call({
          method: 'POST',
          url: '/api/v1/contacts',
          auth,
          payload: { email: `ghost-herd${i}@x.test` },
        });
      }
      const before = (await search('5')).ids;
      expect(before).toHaveLength(3);
      await lateUnseen(org, `${org}-ghost`, 'ghost-herd9@x.test');
      expect(await search('5')).toEqual({ ids: before, total: 3 });
      expect((await search('6')).ids).toEqual([`${org}-ghost`, ...before]);
      // A contact on the kept page gone (as if deleted after this request read the version): the page and
      // its total are read afresh, not the kept total.
      // (Two go, so the total counted afresh, 2, differs from the one kept, 3.)
      await unseen((trx) => trx.deleteFrom('contacts').where('id', 'in', before.slice(0, 2)).execute());
      expect(await search('5')).toEqual({ ids: [`${org}-ghost`, before[2]], total: 2 });
    });
  }
});
