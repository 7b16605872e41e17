import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('smoke on %s', (kind) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp(kind);
  });
  afterAll(() => t.close());

  it('creates a list and reads it back', async () => {
    const { auth } = await t.newKey();
    const created = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'News' } });
    expect(created.statusCode).toBe(201);
    const id = created.json().list.id;
    const got = await t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth });
    expect(got.json()).toMatchObject({ success: true, list: { id, name: 'News', contactCount: 0 } });
  });
});
