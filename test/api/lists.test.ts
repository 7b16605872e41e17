// Lists: every endpoint's success shape field by field, and the bounds of api-v1.md 4.1.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import {
  ISO_MS,
  createContact,
  createList,
  expect400,
  expectError,
  getList,
  x,
  useApp,
} from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('lists on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const post = (payload: object) => t.call({ method: 'POST', url: '/api/v1/lists', auth, payload });

  it('POST answers 201 {success, list} without updatedAt', async () => {
    const res = await post({ name: 'News', description: 'Weekly' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['list', 'success']);
    expect(body.success).toBe(true);
    expect(Object.keys(body.list).sort()).toEqual(['contactCount', 'createdAt', 'description', 'id', 'name']);
    expect(body.list).toMatchObject({ name: 'News', description: 'Weekly', contactCount: 0 });
    expect(typeof body.list.id).toBe('string');
    expect(body.list.createdAt).toMatch(ISO_MS);
  });

  it('GET one answers {success, list} with updatedAt', async () => {
    const id = await createList(t, auth, 'One');
    const res = await t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['list', 'success']);
    expect(body.success).toBe(true);
    expect(Object.keys(body.list).sort()).toEqual(
      ['contactCount', 'createdAt', 'description', 'id', 'name', 'updatedAt'].sort(),
    );
    expect(body.list).toMatchObject({ id, name: 'One', contactCount: 0 });
    expect(body.list.createdAt).toMatch(ISO_MS);
    expect(body.list.updatedAt).toMatch(ISO_MS);
  });

  it('GET all answers {success, lists, pagination} with updatedAt on each list', async () => {
    const { auth: own } = await t.newKey();
    const a = await createList(t, own, 'A');
    const b = await createList(t, own, 'B');
    const res = await t.call({ method: 'GET', url: '/api/v1/lists', auth: own });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['lists', 'pagination', 'success']);
    expect(body.success).toBe(true);
    expect(body.pagination).toEqual({ page: 1, limit: 20, total: 2, pages: 1 });
    expect(body.lists.map((l: { id: string }) => l.id)).toEqual([b, a]);
    for (const l of body.lists) {
      expect(Object.keys(l).sort()).toEqual(
        ['contactCount', 'createdAt', 'description', 'id', 'name', 'updatedAt'].sort(),
      );
      expect(l.updatedAt).toMatch(ISO_MS);
    }
  });

  it('PUT changes only the given fields and answers {success, list}', async () => {
    const create = await post({ name: 'Old', description: 'Keep' });
    const { id, createdAt } = create.json().list;
    const res = await t.call({ method: 'PUT', url: `/api/v1/lists/${id}`, auth, payload: { name: 'New' } });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['list', 'success']);
    expect(body.list).toMatchObject({ id, name: 'New', description: 'Keep', contactCount: 0, createdAt });
    expect(body.list.updatedAt).toMatch(ISO_MS);
    expect(body.list.updatedAt >= createdAt).toBe(true);
    const desc = await t.call({
      method: 'PUT',
      url: `/api/v1/lists/${id}`,
      auth,
      payload: { description: 'Changed' },
    });
    expect(desc.json().list).toMatchObject({ name: 'New', description: 'Changed' });
    expect(await getList(t, auth, id)).toMatchObject({ name: 'New', description: 'Changed' });
  });

  it('PUT with no field, an empty name or an unknown id fails', async () => {
    const id = await createList(t, auth);
    const put = (url: string, payload: object) => t.call({ method: 'PUT', url, auth, payload });
    // The fields it may have; a name of null is "not given" (docs/behaviour.md, decisions), which the answer says
    // rather than "no key". A description of null clears it: not said to count as not given.
    const message = 'must have at least 1 of: name, description; name: null counts as not given';
    for (const body of [{}, { name: null }]) {
      const nothing = await put(`/api/v1/lists/${id}`, body);
      expect400(nothing, 'contacts', ['body']);
      expect(nothing.json().details).toStrictEqual([{ field: 'body', message }]);
    }
    const cleared = await put(`/api/v1/lists/${id}`, { description: null });
    expect(cleared.statusCode).toBe(200);
    expect(cleared.json().list.description).toBeNull();
    expect400(await put(`/api/v1/lists/${id}`, { name: '' }), 'contacts', ['name']);
    expectError(await put('/api/v1/lists/nope', { name: 'x' }), 404, 'contacts');
  });

  it('DELETE answers {success, message} and keeps the contacts', async () => {
    const id = await createList(t, auth);
    const c = await createContact(t, auth);
    await t.call({
      method: 'POST',
      url: `/api/v1/lists/${id}/contacts`,
      auth,
      payload: { contactIds: [c.id] },
    });
    const res = await t.call({ method: 'DELETE', url: `/api/v1/lists/${id}`, auth });
    expect(res.statusCode).toBe(200);
    expect(Object.keys(res.json()).sort()).toEqual(['message', 'success']);
    expect(res.json().success).toBe(true);
    expect(typeof res.json().message).toBe('string');
    expectError(await t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth }), 404, 'contacts');
    expectError(await t.call({ method: 'DELETE', url: `/api/v1/lists/${id}`, auth }), 404, 'contacts');
    const contacts = await t.call({ method: 'GET', url: `/api/v1/contacts?email=${c.email}`, auth });
    expect(contacts.json().contacts.map((k: { id: string }) => k.id)).toEqual([c.id]);
  });

  it('adds and removes contacts with added/removed/notFound', async () => {
    const id = await createList(t, auth);
    const a = await createContact(t, auth);
    const b = await createContact(t, auth);
    const url = `/api/v1/lists/${id}/contacts`;
    const updatedAt = () =>
      t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth }).then((r) => r.json().list.updatedAt);
    const made = await updatedAt();
    // Later than the list's own write by the millisecond timestamps it would show otherwise.
    await new Promise((r) => setTimeout(r, 5));
    const add = await t.call({ method: 'POST', url, auth, payload: { contactIds: [a.id, 'missing', a.id] } });
    expect(add.statusCode).toBe(200);
    expect(Object.keys(add.json()).sort()).toEqual(['added', 'message', 'notFound', 'success']);
    expect(add.json()).toMatchObject({ success: true, added: 1, notFound: ['missing'] });
    expect(typeof add.json().message).toBe('string');
    const again = await t.call({ method: 'POST', url, auth, payload: { contactIds: [a.id, b.id] } });
    expect(again.json()).toMatchObject({ added: 1, notFound: [] });
    expect((await getList(t, auth, id)).contactCount).toBe(2);

    const rm = await t.call({ method: 'DELETE', url, auth, payload: { contactIds: [a.id, 'missing'] } });
    expect(rm.statusCode).toBe(200);
    expect(Object.keys(rm.json()).sort()).toEqual(['message', 'removed', 'success']);
    expect(rm.json()).toMatchObject({ success: true, removed: 1 });
    const rmAgain = await t.call({ method: 'DELETE', url, auth, payload: { contactIds: [a.id] } });
    expect(rmAgain.json().removed).toBe(0);
    expect((await getList(t, auth, id)).contactCount).toBe(1);
    // Members come and go; the list itself (its name, its description) was not written (docs/behaviour.md).
    expect(await updatedAt()).toBe(made);
  });

  it('any id up to 1024 characters is an id: unknown ones are listed in notFound, not refused', async () => {
    const id = await createList(t, auth);
    const c = await createContact(t, auth);
    const url = `/api/v1/lists/${id}/contacts`;
    const long = x(65);
    const longest = x(1024, 'b');
    const add = await t.call({ method: 'POST', url, auth, payload: { contactIds: [c.id, long, longest] } });
    expect(add.statusCode, add.body).toBe(200);
    expect(add.json()).toMatchObject({ added: 1, notFound: [long, longest] });
    const rm = await t.call({ method: 'DELETE', url, auth, payload: { contactIds: [long, c.id] } });
    expect(rm.statusCode, rm.body).toBe(200);
    expect(rm.json().removed).toBe(1);
    for (const method of ['POST', 'DELETE'] as const) {
      const over = await t.call({ method, url, auth, payload: { contactIds: [x(1025)] } });
      expect400(over, 'contacts', ['contactIds[0]']);
      expect400(await t.call({ method, url, auth, payload: { contactIds: [''] } }), 'contacts', [
        'contactIds[0]',
      ]);
    }
  });

  it('add/remove contacts on an unknown list is a 404', async () => {
    const c = await createContact(t, auth);
    for (const method of ['POST', 'DELETE'] as const) {
      const res = await t.call({
        method,
        url: '/api/v1/lists/unknown/contacts',
        auth,
        payload: { contactIds: [c.id] },
      });
      expectError(res, 404, 'contacts');
    }
  });

  describe('bounds', () => {
    it('name 100 is accepted, 101 is refused; empty or missing name is refused', async () => {
      expect((await post({ name: x(100) })).statusCode).toBe(201);
      expect400(await post({ name: x(101) }), 'contacts', ['name']);
      expect400(await post({ name: '' }), 'contacts', ['name']);
      expect400(await post({}), 'contacts', ['name']);
    });

    it('description 500 is accepted, 501 is refused, on create and update', async () => {
      expect((await post({ name: 'd', description: x(500) })).statusCode).toBe(201);
      expect400(await post({ name: 'd', description: x(501) }), 'contacts', ['description']);
      const id = await createList(t, auth);
      const put = (payload: object) => t.call({ method: 'PUT', url: `/api/v1/lists/${id}`, auth, payload });
      expect((await put({ description: x(500), name: x(100) })).statusCode).toBe(200);
      expect400(await put({ description: x(501), name: x(101) }), 'contacts', ['description', 'name']);
    });

    it('contactIds: 100 accepted, 101 and 0 refused, on add and remove', async () => {
      const id = await createList(t, auth);
      const url = `/api/v1/lists/${id}/contacts`;
      const ids = (n: number) => Array.from({ length: n }, (_, i) => `id-${i}`);
      for (const method of ['POST', 'DELETE'] as const) {
        const ok = await t.call({ method, url, auth, payload: { contactIds: ids(100) } });
        expect(ok.statusCode, ok.body).toBe(200);
        expect400(await t.call({ method, url, auth, payload: { contactIds: ids(101) } }), 'contacts', [
          'contactIds',
        ]);
        expect400(await t.call({ method, url, auth, payload: { contactIds: [] } }), 'contacts', [
          'contactIds',
        ]);
        expect400(await t.call({ method, url, auth, payload: {} }), 'contacts', ['contactIds']);
        expect400(await t.call({ method, url, auth, payload: { contactIds: 'abc' } }), 'contacts', [
          'contactIds',
        ]);
        expect400(await t.call({ method, url, auth, payload: { contactIds: ['a', 7] } }), 'contacts', [
          'contactIds[1]',
        ]);
      }
      expect((await post({ name: 'x' })).statusCode).toBe(201);
    });

    it('types are not coerced and unknown fields are named', async () => {
      expect400(await post({ name: 42 }), 'contacts', ['name']);
      expect400(await post({ name: 'ok', description: false }), 'contacts', ['description']);
      expect400(await post({ name: 'ok', color: 'red', size: 1 }), 'contacts', ['color', 'size']);
      expect400(await post(['name']), 'contacts', ['body']);
    });
  });
});
