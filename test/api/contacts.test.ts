// Contacts: success shapes, PUT semantics (id + email, tags replace, customFields merge), DELETE, 409s.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { ISO_MS, createContact, expect400, expectError, uniqueEmail, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

const CONTACT_KEYS = [
  'createdAt',
  'customFields',
  'email',
  'firstName',
  'id',
  'lastName',
  'tags',
  'unsubscribed',
].sort();

describe.each(storeKinds())('contacts on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const post = (payload: object) => t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload });
  const put = (payload: object) => t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload });
  const find = async (email: string) => {
    const res = await t.call({ method: 'GET', url: '/api/v1/contacts', auth, query: { email } });
    return res.json().contacts as Record<string, unknown>[];
  };

  it('POST answers 201 {success, contact} with every field', async () => {
    const email = uniqueEmail();
    const res = await post({
      email: `  ${email} `,
      firstName: 'Ada',
      lastName: 'Lovelace',
      tags: ['vip', 'beta'],
      customFields: { plan: 'pro', seats: 3, trial: false },
    });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['contact', 'success']);
    expect(body.success).toBe(true);
    expect(Object.keys(body.contact).sort()).toEqual(CONTACT_KEYS);
    expect(body.contact).toMatchObject({
      email,
      firstName: 'Ada',
      lastName: 'Lovelace',
      tags: ['vip', 'beta'],
      customFields: { plan: 'pro', seats: 3, trial: false },
      unsubscribed: false,
    });
    expect(typeof body.contact.id).toBe('string');
    expect(body.contact.createdAt).toMatch(ISO_MS);
    expect(await find(email)).toEqual([body.contact]);
  });

  it('POST with only an email gives empty tags and fields; unsubscribed may be set', async () => {
    const res = await post({ email: uniqueEmail(), unsubscribed: true });
    expect(res.statusCode).toBe(201);
    expect(res.json().contact).toMatchObject({ tags: [], customFields: {}, unsubscribed: true });
    // A tag given twice is kept once (docs/behaviour.md), in the order first given.
    const tagged = await post({ email: uniqueEmail(), tags: ['b', 'a', 'b', 'a'] });
    expect(tagged.json().contact.tags).toEqual(['b', 'a']);
  });

  it('GET answers {success, contacts, pagination}', async () => {
    const { auth: own } = await t.newKey();
    const c = await createContact(t, own, { tags: ['a'] });
    const res = await t.call({ method: 'GET', url: '/api/v1/contacts', auth: own });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['contacts', 'pagination', 'success']);
    expect(body.success).toBe(true);
    expect(body.pagination).toEqual({ page: 1, limit: 20, total: 1, pages: 1 });
    expect(body.contacts).toHaveLength(1);
    expect(Object.keys(body.contacts[0]).sort()).toEqual(CONTACT_KEYS);
    expect(body.contacts[0]).toMatchObject({ id: c.id, email: c.email, tags: ['a'] });
  });

  it('GET with an empty email or tag filters nothing; an empty unsubscribed is a 400', async () => {
    const { auth: own } = await t.newKey();
    const tagged = await createContact(t, own, { tags: ['a'] });
    const plain = await createContact(t, own);
    const ids = async (url: string) => {
      const res = await t.call({ method: 'GET', url, auth: own });
      expect(res.statusCode, res.body).toBe(200);
      return {
        ids: res.json().contacts.map((c: { id: string }) => c.id),
        total: res.json().pagination.total,
      };
    };
    const all = { ids: [plain.id, tagged.id], total: 2 };
    expect(await ids('/api/v1/contacts?email=&tag=')).toEqual(all);
    expect(await ids('/api/v1/contacts?tag=')).toEqual(all);
    expect(await ids('/api/v1/contacts?tag=&unsubscribed=false')).toEqual(all);
    expect(await ids('/api/v1/contacts?tag=&page=2&limit=1')).toEqual({ ids: [tagged.id], total: 2 });
    expect400(await t.call({ method: 'GET', url: '/api/v1/contacts?unsubscribed=', auth: own }), 'contacts', [
      'unsubscribed',
    ]);
  });

  it('PUT by id replaces tags, merges customFields and null removes a field', async () => {
    const c = await createContact(t, auth, {
      firstName: 'A',
      tags: ['one', 'two'],
      customFields: { plan: 'free', seats: 1, keep: 'yes' },
    });
    const res = await put({
      id: c.id,
      lastName: 'B',
      tags: ['three'],
      customFields: { plan: 'pro', seats: null, added: true },
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['contact', 'success']);
    expect(Object.keys(body.contact).sort()).toEqual(CONTACT_KEYS);
    expect(body.contact).toMatchObject({
      id: c.id,
      email: c.email,
      firstName: 'A',
      lastName: 'B',
      tags: ['three'],
      customFields: { plan: 'pro', keep: 'yes', added: true },
    });
    expect(body.contact.customFields).not.toHaveProperty('seats');
    expect((await find(c.email))[0]).toEqual(body.contact);
    const byTag = await t.call({ method: 'GET', url: '/api/v1/contacts?tag=one', auth });
    expect(byTag.json().contacts.map((k: { id: string }) => k.id)).not.toContain(c.id);
  });

  it('PUT by email identifies by email; id + email changes the address', async () => {
    const c = await createContact(t, auth);
    const byEmail = await put({ email: c.email.toUpperCase(), firstName: 'Found', unsubscribed: true });
    expect(byEmail.statusCode).toBe(200);
    expect(byEmail.json().contact).toMatchObject({
      id: c.id,
      email: c.email,
      firstName: 'Found',
      unsubscribed: true,
    });
    const next = uniqueEmail('moved');
    const moved = await put({ id: c.id, email: next });
    expect(moved.statusCode).toBe(200);
    expect(moved.json().contact).toMatchObject({ id: c.id, email: next, firstName: 'Found' });
    expect(await find(c.email)).toEqual([]);
    expect((await find(next)).map((k) => k.id)).toEqual([c.id]);
  });

  it('PUT to an unknown contact is a 404; without id or email or change is a 400', async () => {
    expectError(await put({ id: 'nope', firstName: 'x' }), 404, 'contacts');
    // Any id Mailroom never issued is not found, however long (up to the 1024 of contactIds).
    expectError(await put({ id: 'x'.repeat(1024), firstName: 'x' }), 404, 'contacts');
    expect400(await put({ id: 'x'.repeat(1025), firstName: 'x' }), 'contacts', ['id']);
    expectError(await put({ email: uniqueEmail(), firstName: 'x' }), 404, 'contacts');
    expect400(await put({ firstName: 'x' }), 'contacts', ['id']);
    const c = await createContact(t, auth);
    expectError(await put({ id: c.id }), 400, 'contacts');
    expect400(await put({ id: c.id, email: 'not-an-address' }), 'contacts', ['email']);
  });

  it('PUT changing the address to one in use (any case) is a 409', async () => {
    const a = await createContact(t, auth);
    const b = await createContact(t, auth);
    expectError(await put({ id: b.id, email: a.email.toUpperCase() }), 409, 'contacts');
    const self = await put({ id: a.id, email: a.email.toUpperCase() });
    expect(self.statusCode).toBe(200);
    expect(self.json().contact.email).toBe(a.email.toUpperCase());
  });

  it('DELETE by id or by email answers {success, message}', async () => {
    const a = await createContact(t, auth);
    const b = await createContact(t, auth);
    const byId = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id: a.id } });
    expect(byId.statusCode).toBe(200);
    expect(Object.keys(byId.json()).sort()).toEqual(['message', 'success']);
    expect(byId.json().success).toBe(true);
    const byEmail = await t.call({
      method: 'DELETE',
      url: '/api/v1/contacts',
      auth,
      query: { email: b.email.toUpperCase() },
    });
    expect(byEmail.statusCode).toBe(200);
    expect(await find(a.email)).toEqual([]);
    expect(await find(b.email)).toEqual([]);
    const again = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id: a.id } });
    expectError(again, 404, 'contacts');
    expect400(await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth }), 'contacts', ['id']);
    for (const email of ['', '  ']) {
      const blank = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { email } });
      expect400(blank, 'contacts', ['email']);
    }
    const long = await t.call({
      method: 'DELETE',
      url: '/api/v1/contacts',
      auth,
      query: { id: 'x'.repeat(65) },
    });
    expectError(long, 404, 'contacts');
  });

  it('DELETE by an email whose + a query string made a space says so in its 404', async () => {
    const plus = await createContact(t, auth, { email: 'ann+news@acme.test' });
    const del = (url: string) => t.call({ method: 'DELETE', url, auth });
    const spaced = await del('/api/v1/contacts?email=ann+news@acme.test');
    expectError(spaced, 404, 'contacts');
    expect(spaced.json().error).toBe(
      'Contact ann news@acme.test not found (a + in a query string is a space: write it as %2B)',
    );
    const both = await del(`/api/v1/contacts?id=${plus.id}&email=ann+news@acme.test`);
    expect(both.json().error).toMatch(/not found \(a \+ in a query string is a space: write it as %2B\)$/);
    const unknownId = await del('/api/v1/contacts?id=nobody&email=ann+news@acme.test');
    expect(unknownId.json().error).toBe('Contact nobody not found');
    const missing = await del('/api/v1/contacts?email=nobody@acme.test');
    expect(missing.json().error).toBe('Contact nobody@acme.test not found');
    expect((await del('/api/v1/contacts?email=ann%2Bnews@acme.test')).statusCode).toBe(200);
  });

  it('DELETE with both id and email deletes only a contact that has both', async () => {
    const a = await createContact(t, auth);
    const b = await createContact(t, auth);
    const del = (query: Record<string, string>) =>
      t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query });
    expectError(await del({ id: a.id, email: b.email }), 404, 'contacts');
    expect((await find(a.email)).map((c) => c.id)).toEqual([a.id]);
    expect((await find(b.email)).map((c) => c.id)).toEqual([b.id]);
    expect((await del({ id: a.id, email: ` ${a.email.toUpperCase()} ` })).statusCode).toBe(200);
    expect(await find(a.email)).toEqual([]);
  });

  it('deleting a contact removes it from its lists', async () => {
    const list = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'L' } });
    const listId = list.json().list.id;
    const c = await createContact(t, auth);
    const added = await t.call({
      method: 'POST',
      url: `/api/v1/lists/${listId}/contacts`,
      auth,
      payload: { contactIds: [c.id] },
    });
    expect(added.json()).toMatchObject({ success: true, added: 1 });
    const before = await t.call({ method: 'GET', url: `/api/v1/lists/${listId}`, auth });
    expect(before.json().list.contactCount).toBe(1);
    const deleted = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { id: c.id } });
    expect(deleted.statusCode).toBe(200);
    const got = await t.call({ method: 'GET', url: `/api/v1/lists/${listId}`, auth });
    expect(got.json().list.contactCount).toBe(0);
  });

  it('a duplicate email is a 409, also differing only in case', async () => {
    const email = uniqueEmail('dup');
    expect((await post({ email })).statusCode).toBe(201);
    expect(expectError(await post({ email }), 409, 'contacts')).toEqual(['email']);
    expectError(await post({ email: email.toUpperCase() }), 409, 'contacts');
    expectError(await post({ email: ` ${email} ` }), 409, 'contacts');
  });

  it('the same email in two organisations is fine', async () => {
    const email = uniqueEmail('shared');
    const other = (await t.newKey()).auth;
    expect((await post({ email })).statusCode).toBe(201);
    const res = await t.call({ method: 'POST', url: '/api/v1/contacts', auth: other, payload: { email } });
    expect(res.statusCode).toBe(201);
  });

  it('20 parallel creates of one email give exactly one 201, the rest 409', async () => {
    const email = uniqueEmail('race');
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => post({ email: i % 2 ? email : email.toUpperCase() })),
    );
    const codes = results.map((r) => r.statusCode).sort();
    expect(codes.filter((c) => c === 201)).toHaveLength(1);
    expect(codes.filter((c) => c === 409)).toHaveLength(19);
    for (const r of results.filter((r) => r.statusCode === 409)) expectError(r, 409, 'contacts');
    expect(await find(email)).toHaveLength(1);
  });

  it('a taken email among parallel creates fails only its own request; the others keep their tags', async () => {
    const taken = uniqueEmail('taken');
    expect((await post({ email: taken })).statusCode).toBe(201);
    const fresh = Array.from({ length: 12 }, (_, i) => ({
      email: uniqueEmail(`batch${i}`),
      tags: [`t${i}`],
    }));
    const results = await Promise.all([
      ...fresh.slice(0, 6).map((body) => post(body)),
      post({ email: taken.toUpperCase(), tags: ['never'] }),
      ...fresh.slice(6).map((body) => post(body)),
    ]);
    expectError(results[6]!, 409, 'contacts');
    const created = results.filter((_, i) => i !== 6);
    for (const [i, r] of created.entries()) {
      expect(r.statusCode).toBe(201);
      expect(r.json().contact).toMatchObject({ email: fresh[i]!.email, tags: fresh[i]!.tags });
      expect(await find(fresh[i]!.email)).toHaveLength(1);
    }
    const never = await t.call({ method: 'GET', url: '/api/v1/contacts', auth, query: { tag: 'never' } });
    expect(never.json().contacts).toEqual([]);
    const tagged = await t.call({ method: 'GET', url: '/api/v1/contacts', auth, query: { tag: 't7' } });
    expect(tagged.json().contacts.map((c: { email: string }) => c.email)).toEqual([fresh[7]!.email]);
  });
});

// The list's bytes are those of each contact as it was created, newest first, whichever read path serves
// the page (the unfiltered and tag pages are prepared reads; the SQLite reader builds their rows itself).
describe.each(storeKinds())('contact pages, byte for byte, on %s', (kind) => {
  let t: TestApp;
  useApp(kind, (app) => (t = app));

  it('GET answers exactly the contacts as created, in order, with every kind of value', async () => {
    const { auth } = await t.newKey();
    const specs: Record<string, unknown>[] = [
      {},
      { tags: [], customFields: {}, unsubscribed: false },
      { firstName: 'Zoë "Q"', lastName: "O'Brien \\ ✓", tags: ['vip', 'b"q', 'ünï'], unsubscribed: true },
      { tags: ['vip'], customFields: { plan: 'pro', seats: 3, ratio: 0.1, big: 2 ** 53 - 1, trial: false } },
      { customFields: { note: 'line\nbreak\ttab \u0001 \u2028', empty: '' } },
    ];
    const created: unknown[] = [];
    for (const [i, spec] of specs.entries()) {
      // Two share a marker for the email filters: 'z.' reads by LIKE; 'z.qx' through SQLite's trigram index.
      // The dot keeps the marker out of the other addresses' random part (base 36).
      const res = await t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        payload: { email: uniqueEmail(i === 2 || i === 3 ? 'Z.qX' : 'c'), ...spec },
      });
      expect(res.statusCode, res.body).toBe(201);
      // Built from what was sent, not from POST's answer: both come through the same mapping.
      const { id, email, createdAt } = res.json().contact as Record<string, string>;
      const contact = {
        id,
        email,
        firstName: spec.firstName ?? null,
        lastName: spec.lastName ?? null,
        tags: spec.tags ?? [],
        customFields: spec.customFields ?? {},
        unsubscribed: spec.unsubscribed ?? false,
        createdAt,
      };
      // POST answers with the text stored for pages: the same bytes too.
      expect(res.body).toBe(JSON.stringify({ success: true, contact }));
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
      created.push(contact);
    }
    const newestFirst = [...created].reverse();
    const get = async (query: Record<string, string>) => {
      const res = await t.call({ method: 'GET', url: '/api/v1/contacts', auth, query });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
      return res.body;
    };
    const body = (contacts: unknown[], page: number, limit: number, total: number) =>
      JSON.stringify({
        success: true,
        contacts,
        pagination: { page, limit, total, pages: Math.ceil(total / limit) },
      });

    expect(await get({})).toBe(body(newestFirst, 1, 20, 5));
    for (const page of [1, 2, 3]) {
      const slice = newestFirst.slice((page - 1) * 2, page * 2);
      expect(await get({ page: String(page), limit: '2' })).toBe(body(slice, page, 2, 5));
    }
    const vip = newestFirst.filter((c) => (c as { tags: string[] }).tags.includes('vip'));
    expect(await get({ tag: 'vip' })).toBe(body(vip, 1, 20, 2));
    expect(await get({ tag: 'vip', page: '2', limit: '1' })).toBe(body(vip.slice(1), 2, 1, 2));
    const unsubscribed = newestFirst.filter((c) => (c as { unsubscribed: boolean }).unsubscribed);
    expect(await get({ unsubscribed: 'true' })).toBe(body(unsubscribed, 1, 20, 1));
    const subscribed = newestFirst.filter((c) => !(c as { unsubscribed: boolean }).unsubscribed);
    expect(await get({ unsubscribed: 'false', limit: '3' })).toBe(body(subscribed.slice(0, 3), 1, 3, 4));
    expect(await get({ tag: 'vip', unsubscribed: 'true' })).toBe(body(unsubscribed, 1, 20, 1));
    const marked = newestFirst.filter((c) => (c as { email: string }).email.startsWith('Z.qX'));
    for (const email of ['z.', 'z.qx', 'Z.QX']) {
      expect(await get({ email })).toBe(body(marked, 1, 20, 2));
      expect(await get({ email, page: '2', limit: '1' })).toBe(body(marked.slice(1), 2, 1, 2));
    }
    expect(await get({ email: 'z.qx', unsubscribed: 'true' })).toBe(body(unsubscribed, 1, 20, 1));
  });

  // Pages read each contact's stored text (migration 0008) where it has one and render it otherwise: after
  // updates through the API, after a write that bypasses the service, and for contacts stored before 0008.
  it('GET answers each contact as it now is, however it was written', async () => {
    const { auth, organizationId } = await t.newKey();
    const db = t.ts.store.db;
    const put = async (payload: Record<string, unknown>) => {
      const res = await t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload });
      expect(res.statusCode, res.body).toBe(200);
      return res.json().contact as Record<string, unknown>;
    };
    const ids: string[] = [];
    for (const i of [0, 1, 2]) {
      const res = await t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        payload: { email: uniqueEmail(`u${i}`), tags: ['old'], customFields: { keep: i } },
      });
      expect(res.statusCode, res.body).toBe(201);
      ids.push(res.json().contact.id as string);
    }
    const now = new Map<string, unknown>();
    now.set(ids[0]!, await put({ id: ids[0], firstName: 'Ada "\u00e9" \n ✓', tags: ['new', 'ünï'] }));
    now.set(
      ids[1]!,
      await put({ id: ids[1], unsubscribed: true, customFields: { plan: 'pro', keep: null } }),
    );
    now.set(ids[2]!, await put({ id: ids[2], email: uniqueEmail('MOVED'), lastName: null }));
    const page = async () => {
      const res = await t.call({ method: 'GET', url: '/api/v1/contacts', auth });
      expect(res.statusCode, res.body).toBe(200);
      return res.body;
    };
    const expected = () =>
      JSON.stringify({
        success: true,
        contacts: [...ids].reverse().map((id) => now.get(id)),
        pagination: { page: 1, limit: 20, total: 3, pages: 1 },
      });
    expect(await page()).toBe(expected());
    const stored = await db.selectFrom('contacts').select(['id', 'json']).where('id', 'in', ids).execute();
    expect(stored).toHaveLength(3);
    for (const row of stored) expect(JSON.parse(row.json!)).toEqual(now.get(row.id));

    // A writer that changes a shown column without writing the text: the stale text is cleared.
    await t.ts.store.write((trx) =>
      trx.updateTable('contacts').set({ first_name: 'Direct' }).where('id', '=', ids[1]!).execute(),
    );
    now.set(ids[1]!, { ...(now.get(ids[1]!) as object), firstName: 'Direct' });
    const cleared = await db
      .selectFrom('contacts')
      .select('json')
      .where('id', '=', ids[1]!)
      .executeTakeFirst();
    expect(cleared?.json).toBeNull();
    expect(await page()).toBe(expected());
    // A column no one sees changes: the text stays.
    await t.ts.store.write((trx) =>
      trx
        .updateTable('contacts')
        .set({ updated_at: new Date().toISOString() })
        .where('id', '=', ids[0]!)
        .execute(),
    );
    const kept = await db.selectFrom('contacts').select('json').where('id', '=', ids[0]!).executeTakeFirst();
    expect(kept?.json).not.toBeNull();
    // A PUT of the values it already has (a sync resending it) keeps the text too.
    const same = now.get(ids[0]!) as { firstName: string; tags: string[] };
    expect(await put({ id: ids[0], firstName: same.firstName, tags: same.tags })).toEqual(now.get(ids[0]!));
    const resent = await db
      .selectFrom('contacts')
      .select('json')
      .where('id', '=', ids[0]!)
      .executeTakeFirst();
    expect(resent?.json).toBe(kept?.json);
    expect(await page()).toBe(expected());

    // As stored before 0008: no text at all.
    await t.ts.store.write((trx) =>
      trx.updateTable('contacts').set({ json: null }).where('organization_id', '=', organizationId).execute(),
    );
    expect(await page()).toBe(expected());
    // Updated again through the API, each gets its text back.
    now.set(ids[2]!, await put({ id: ids[2], firstName: 'Back' }));
    expect(await page()).toBe(expected());
    const back = await db.selectFrom('contacts').select('json').where('id', '=', ids[2]!).executeTakeFirst();
    expect(JSON.parse(back!.json!)).toEqual(now.get(ids[2]!));
  });
});
