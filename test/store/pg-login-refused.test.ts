// PostgreSQL refusing Mailroom's new connections at login (its database dropped, its role unknown or its
// password rotated) is the store out of reach: the API answers 503 in its family's shape, as /health does,
// not a 500 for an unexpected fault.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { failedToConnect, isStoreUnavailable } from '../../src/store/dialect.js';
import { createTestApp } from '../helpers/app.js';
import { TEST_DATABASE_URL, noPostgres } from '../helpers/stores.js';

/** The error connecting with `change` made to TEST_DATABASE_URL gives. */
async function connectError(change: (url: URL) => void): Promise<unknown> {
  const url = new URL(TEST_DATABASE_URL!);
  change(url);
  const client = new pg.Client({ connectionString: url.toString() });
  client.on('error', () => undefined);
  return client.connect().then(
    () => client.end(),
    (err: unknown) => err,
  );
}

describe.skipIf(noPostgres())('PostgreSQL refusing a login', () => {
  it.each([
    ['a database that does not exist', '3D000', (url: URL) => void (url.pathname = '/mailroom_no_such_db')],
    ['a role that does not exist', '28000', (url: URL) => void (url.username = 'mailroom_no_such_role')],
  ])('takes %s for the store being unavailable, before anything was sent', async (_what, code, change) => {
    const err = await connectError(change);
    expect((err as { code?: string }).code).toBe(code);
    expect(isStoreUnavailable(err)).toBe(true);
    expect(failedToConnect(err)).toBe(true);
  });

  it('answers 503 in each family’s shape once its database is dropped, as /health does', async () => {
    const t = await createTestApp('postgres');
    try {
      const { auth } = await t.newKey();
      // Its key is known (kept), so each request reaches the store.
      expect((await t.call({ method: 'GET', url: '/api/v1/lists', auth })).statusCode).toBe(200);
      const name = new URL(t.ts.databaseUrl!).pathname.slice(1);
      const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await admin.connect();
      try {
        await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      } finally {
        await admin.end();
      }
      const health = await t.call({ method: 'GET', url: '/health' });
      expect([health.statusCode, health.json()]).toEqual([503, { status: 'unavailable' }]);
      const lists = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'x' } });
      expect(lists.statusCode).toBe(503);
      expect(lists.json()).toMatchObject({
        success: false,
        error: 'The store is unavailable; try again shortly',
      });
      const emails = await t.call({ method: 'GET', url: '/api/v1/emails', auth });
      expect(emails.statusCode).toBe(503);
      expect(emails.json()).not.toHaveProperty('success');
      expect(emails.json()).toMatchObject({ error: 'The store is unavailable; try again shortly' });
    } finally {
      await t.close();
    }
  });
});
