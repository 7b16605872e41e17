// Edges a careful client hits: JSON content type on body-less calls, blank names, null descriptions,
// prototype keys, header field names, and what the OpenAPI document asks clients to send.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { createContact, createList, expect400, expectRateHeaders } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('edges on %s', (kind) => {
  let t: TestApp;
  let auth: string;
  beforeAll(async () => {
    t = await createTestApp(kind);
    auth = (await t.newKey()).auth;
  });
  afterAll(() => t.close());

  it('DELETE with Content-Type: application/json and no body works', async () => {
    const json = { 'content-type': 'application/json' };
    const contact = await createContact(t, auth);
    const byEmail = await t.call({
      method: 'DELETE',
      url: `/api/v1/contacts?email=${encodeURIComponent(contact.email)}`,
      auth,
      headers: json,
    });
    expect(byEmail.statusCode, byEmail.body).toBe(200);
    const list = await createList(t, auth);
    const del = await t.call({ method: 'DELETE', url: `/api/v1/lists/${list}`, auth, headers: json });
    expect(del.statusCode, del.body).toBe(200);
    // A body-taking route still needs its body.
    expect400(await t.call({ method: 'POST', url: '/api/v1/lists', auth, headers: json }), 'contacts', [
      'body',
    ]);
  });

  it('refuses a blank list name, on create and update', async () => {
    expect400(
      await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: '   ' } }),
      'contacts',
      ['name'],
    );
    const list = await createList(t, auth);
    expect400(
      await t.call({ method: 'PUT', url: `/api/v1/lists/${list}`, auth, payload: { name: '\t' } }),
      'contacts',
      ['name'],
    );
  });

  it('accepts description null, which reads back as null and clears it', async () => {
    const created = await t.call({
      method: 'POST',
      url: '/api/v1/lists',
      auth,
      payload: { name: 'N', description: null },
    });
    expect(created.statusCode).toBe(201);
    expect(created.json().list.description).toBeNull();
    const list = await createList(t, auth);
    await t.call({ method: 'PUT', url: `/api/v1/lists/${list}`, auth, payload: { description: 'set' } });
    const cleared = await t.call({
      method: 'PUT',
      url: `/api/v1/lists/${list}`,
      auth,
      payload: { description: null },
    });
    expect(cleared.json().list.description).toBeNull();
  });

  it('names __proto__ keys as the problem, not as bad JSON', async () => {
    const res = await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      headers: { 'content-type': 'application/json' },
      payload: '{"email":"p@example.com","customFields":{"__proto__":{"x":1}}}',
    });
    expect400(res, 'contacts', ['body']);
    expect(res.json().error).toMatch(/forbidden key/);
  });

  it('reports a bad Idempotency-Key under the name clients send', async () => {
    const res = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth,
      headers: { 'idempotency-key': 'k'.repeat(257) },
      payload: { to: 'a@example.com', subject: 's', text: 't' },
    });
    expect400(res, 'emails', ['Idempotency-Key']);
  });

  it('documents page and limit as optional, and rate-limits the document like any API response', async () => {
    const res = await t.call({ method: 'GET', url: '/api/v1/openapi.json' });
    expectRateHeaders(res);
    const params = res.json().paths['/api/v1/contacts'].get.parameters as {
      name: string;
      required?: boolean;
    }[];
    for (const name of ['page', 'limit'])
      expect(params.find((p) => p.name === name)?.required).not.toBe(true);
  });
});
