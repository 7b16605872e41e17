// Contact field bounds at max and max+1 (contract.md), body types and query-string coercion.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { addressOfLength, createContact, expect400, uniqueEmail, x, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

const fields = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));

describe.each(storeKinds())('contact limits on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const post = (payload: Record<string, unknown>) =>
    t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email: uniqueEmail(), ...payload } });
  const put = (payload: object) => t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload });
  const get = (query: Record<string, string>) =>
    t.call({ method: 'GET', url: '/api/v1/contacts', auth, query });

  it('email of 254 characters is accepted, 255 refused', async () => {
    const ok = await post({ email: addressOfLength(254) });
    expect(ok.statusCode, ok.body).toBe(201);
    const long = await post({ email: addressOfLength(255) });
    expect400(long, 'contacts', ['email']);
    expect(long.json().details[0].message).toBe('must be at most 254 characters');
    // The limit is on the address once trimmed, and a longer one is told the limit, whatever its length.
    const padded = await post({ email: ` ${' '.repeat(80)}z${addressOfLength(254).slice(1)}\t ` });
    expect(padded.statusCode, padded.body).toBe(201);
    const huge = await post({ email: addressOfLength(400) });
    expect400(huge, 'contacts', ['email']);
    expect(huge.json().details[0].message).toBe('must be at most 254 characters');
    const c = await createContact(t, auth);
    const renamed = await put({ id: c.id, email: addressOfLength(300) });
    expect400(renamed, 'contacts', ['email']);
    expect(renamed.json().details[0].message).toBe('must be at most 254 characters');
  });

  it("an email naming the contact to update (no id) is a 400 when blank or longer than a lookup, as a delete's", async () => {
    for (const blank of ['', '   ', '\t']) {
      const res = await put({ email: blank, firstName: 'x' });
      expect400(res, 'contacts', ['email']);
      expect(res.json().details[0].message).toBe(blank === '' ? 'must not be empty' : 'must not be blank');
    }
    const long = await put({ email: addressOfLength(321), firstName: 'x' });
    expect400(long, 'contacts', ['email']);
    expect(long.json().details[0].message).toBe('must be at most 320 characters');
    // Within the bound, an address no contact has is not found, as before.
    expect((await put({ email: addressOfLength(320), firstName: 'x' })).statusCode).toBe(404);
  });

  it('matches addresses ignoring the case of ASCII letters only: the KELVIN SIGN is not a k', async () => {
    const c = await createContact(t, auth, { email: uniqueEmail('walk') });
    const kelvin = c.email.replace('k', '\u212a');
    expect((await put({ email: kelvin, firstName: 'kelvin' })).statusCode).toBe(404);
    const del = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, query: { email: kelvin } });
    expect(del.statusCode).toBe(404);
    const found = await get({ email: kelvin.slice(0, 6) });
    expect(found.json().pagination.total).toBe(0);
    // The contact is as it was, and found by its address in any ASCII case.
    const upper = await get({ email: c.email.toUpperCase() });
    expect(upper.json().contacts.map((r: { id: string; firstName: unknown }) => [r.id, r.firstName])).toEqual(
      [[c.id, null]],
    );
  });

  it.each([
    'plain',
    'a b@example.com',
    'a@b@example.com',
    'a@localhost',
    `${'l'.repeat(65)}@example.com`,
    `a@${'d'.repeat(64)}.example.com`,
    'a@10.0.0.1',
    '"quoted"@example.com',
    'a@example.com (comment)',
    'Name <a@example.com>',
    '',
    '   ',
  ])('email %j is refused', async (email) => {
    const res = await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email } });
    expect400(res, 'contacts', ['email']);
  });

  it('firstName and lastName: 100 accepted, 101 refused', async () => {
    expect((await post({ firstName: x(100), lastName: x(100) })).statusCode).toBe(201);
    expect400(await post({ firstName: x(101) }), 'contacts', ['firstName']);
    expect400(await post({ lastName: x(101) }), 'contacts', ['lastName']);
    const c = await createContact(t, auth);
    expect400(await put({ id: c.id, firstName: x(101) }), 'contacts', ['firstName']);
  });

  it('lengths are characters (code points), not UTF-16 units: names and custom field keys alike', async () => {
    const emoji = (n: number) => '😀'.repeat(n);
    expect((await post({ firstName: emoji(100), customFields: { [emoji(100)]: 1 } })).statusCode).toBe(201);
    expect400(await post({ firstName: emoji(101) }), 'contacts', ['firstName']);
    const long = await post({ customFields: { [emoji(101)]: 1 } });
    expect400(long, 'contacts', [`customFields.${emoji(101)}`]);
    expect(long.json().details[0].message).toBe('key must be at most 100 characters');
    // A key of spaces alone is told so, not "1 to 100 characters" it has.
    for (const blank of [' ', '\n', '\u00a0']) {
      const res = await post({ customFields: { [blank]: 1 } });
      expect400(res, 'contacts', [`customFields.${blank}`]);
      expect(res.json().details[0].message).toBe('key must not be empty or only spaces');
    }
  });

  it('tags: 50 accepted, 51 refused; 64 characters accepted, 65 refused', async () => {
    const tags = (n: number) => Array.from({ length: n }, (_, i) => `t${i}`);
    expect((await post({ tags: tags(50) })).statusCode).toBe(201);
    expect400(await post({ tags: tags(51) }), 'contacts', ['tags']);
    expect((await post({ tags: [x(64)] })).statusCode).toBe(201);
    expect400(await post({ tags: ['ok', x(65)] }), 'contacts', ['tags[1]']);
    const blank = await post({ tags: ['ok', ' '] });
    expect400(blank, 'contacts', ['tags[1]']);
    expect(blank.json().details[0].message).toBe('must not be blank');
    const c = await createContact(t, auth);
    expect400(await put({ id: c.id, tags: tags(51) }), 'contacts', ['tags']);
    expect400(await put({ id: c.id, tags: [x(65)] }), 'contacts', ['tags[0]']);
  });

  it('customFields: 50 keys accepted, 51 refused, also after a merge', async () => {
    expect((await post({ customFields: fields(50) })).statusCode).toBe(201);
    expect400(await post({ customFields: fields(51) }), 'contacts', ['customFields']);
    const c = await createContact(t, auth, { customFields: fields(50) });
    expect400(await put({ id: c.id, customFields: { extra: 1 } }), 'contacts', ['customFields']);
    const swap = await put({ id: c.id, customFields: { k0: null, extra: 1 } });
    expect(swap.statusCode, swap.body).toBe(200);
    // The 50 keys are what the contact holds: one update may remove all 50 and set 50 others.
    const nulls = Object.fromEntries(Object.keys(swap.json().contact.customFields).map((k) => [k, null]));
    const fresh = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`n${i}`, i]));
    const replaced = await put({ id: c.id, customFields: { ...nulls, ...fresh } });
    expect(replaced.statusCode, replaced.body).toBe(200);
    expect(replaced.json().contact.customFields).toEqual(fresh);
    // On create a null is simply not stored.
    const created = await post({ customFields: { ...fields(50), gone: null } });
    expect(created.statusCode, created.body).toBe(201);
    expect(Object.keys(created.json().contact.customFields)).toHaveLength(50);
    // A request names at most 100 keys.
    const many = Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`m${i}`, null]));
    expect400(await put({ id: c.id, customFields: many }), 'contacts', ['customFields']);
  });

  it('customFields keys are free: line breaks and other separators are kept as sent', async () => {
    const keys = { 'line\nbreak': 'x', 'a\u2028b': 1, 'c\u2029d': true, 'e\rf': null, 'tab\tkey': 'y' };
    const res = await post({ customFields: keys });
    expect(res.statusCode, res.body).toBe(201);
    const stored = { 'line\nbreak': 'x', 'a\u2028b': 1, 'c\u2029d': true, 'tab\tkey': 'y' };
    expect(res.json().contact.customFields).toEqual(stored);
    const updated = await put({ id: res.json().contact.id, customFields: { 'note\r': 'z' } });
    expect(updated.statusCode, updated.body).toBe(200);
    expect(updated.json().contact.customFields).toEqual({ ...stored, 'note\r': 'z' });
    const page = await get({ email: res.json().contact.email });
    expect(page.json().contacts[0].customFields).toEqual({ ...stored, 'note\r': 'z' });
  });

  it('customFields over 16 KiB in all are refused, also after a merge', async () => {
    const big = { a: x(8000), b: x(8000) };
    expect((await post({ customFields: big })).statusCode).toBe(201);
    expect400(await post({ customFields: { ...big, c: x(1000) } }), 'contacts', ['customFields']);
    const c = await createContact(t, auth, { customFields: big });
    expect400(await put({ id: c.id, customFields: { c: x(1000) } }), 'contacts', ['customFields']);
  });

  it('customFields values must be flat; the path names the key', async () => {
    expect400(await post({ customFields: { plan: { tier: 1 } } }), 'contacts', ['customFields.plan']);
    expect400(await post({ customFields: { plan: [1] } }), 'contacts', ['customFields.plan']);
    const typed = await post({ customFields: { plan: {} } });
    expect(typed.json().details[0].message).toBe('must be a string, a number, a boolean or null');
    expect400(await post({ customFields: 'x' }), 'contacts', ['customFields']);
    expect400(await post({ customFields: [] }), 'contacts', ['customFields']);
    // A key of digits is a key, however its value fails: `customFields.8`, never `customFields[8]`.
    const digits = await post({ customFields: { 7: 'a\u0000', 8: {} } });
    expect400(digits, 'contacts', ['customFields.7', 'customFields.8']);
  });

  it('body types are not coerced and unknown fields are named', async () => {
    expect400(await post({ firstName: 42 }), 'contacts', ['firstName']);
    expect400(await post({ unsubscribed: 'true' }), 'contacts', ['unsubscribed']);
    expect400(await post({ tags: 'vip' }), 'contacts', ['tags']);
    expect400(await post({ tags: [1] }), 'contacts', ['tags[0]']);
    expect400(await post({ nickname: 'x', age: 3 }), 'contacts', ['nickname', 'age']);
    const res = await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email: 42 } });
    expect400(res, 'contacts', ['email']);
    expect400(await put({ id: 5, firstName: 'x' }), 'contacts', ['id']);
    expect400(await put({ id: 'x', status: 'x' }), 'contacts', ['status']);
  });

  it('every offending field is listed in one answer', async () => {
    const res = await post({ firstName: 1, lastName: x(101), tags: [x(65)], customFields: { plan: {} } });
    expect400(res, 'contacts', ['firstName', 'lastName', 'tags[0]', 'customFields.plan']);
    const both = await post({
      email: 'not an address',
      firstName: 42,
      customFields: { ...fields(51), x: {} },
    });
    expect400(both, 'contacts', ['email', 'firstName', 'customFields', 'customFields.x']);
    const c = await createContact(t, auth);
    expect400(await put({ lastName: 7 }), 'contacts', ['id', 'lastName']);
    expect400(await put({ id: c.id, email: 'bad', tags: 'x' }), 'contacts', ['email', 'tags']);
  });

  it('query strings are coerced and bounded', async () => {
    expect((await get({ limit: '5' })).json().pagination.limit).toBe(5);
    expect((await get({ limit: '100' })).statusCode).toBe(200);
    expect400(await get({ limit: '101' }), 'contacts', ['limit']);
    expect400(await get({ limit: '0' }), 'contacts', ['limit']);
    expect400(await get({ limit: 'abc' }), 'contacts', ['limit']);
    expect400(await get({ limit: '2.5' }), 'contacts', ['limit']);
    expect400(await get({ page: '0' }), 'contacts', ['page']);
    expect400(await get({ page: '-1' }), 'contacts', ['page']);
    expect400(await get({ unsubscribed: 'yes' }), 'contacts', ['unsubscribed']);
    expect400(await get({ unsubscribed: '1' }), 'contacts', ['unsubscribed']);
    expect400(await get({ page: 'x', limit: 'y' }), 'contacts', ['page', 'limit']);
    expect((await get({ unsubscribed: 'false' })).statusCode).toBe(200);
    const lists = await t.call({ method: 'GET', url: '/api/v1/lists?limit=101&page=0', auth });
    expect400(lists, 'contacts', ['limit', 'page']);
  });
});
