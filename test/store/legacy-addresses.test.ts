// Contact addresses that releases before 2026-11-26 stored and the API has refused since (8df8fe7): a local
// part over 64 characters, a domain label over 63, an all-digit top-level domain. A client that reads such
// a contact and writes it back with its id and unchanged email gets a 200; every other use of the address
// (a create, a change to it, another contact's) is the 400 it was.
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { renderContact } from '../../src/contacts/contact-fields.js';
import { type TestApp, withUpgradedApp } from '../helpers/app.js';
import { contactRow } from '../helpers/rows.js';
import { eventually } from '../helpers/smtp.js';
import { type StoreKind, anyWaitingForLock, storeKinds } from '../helpers/stores.js';

const ORG = 'org-old';
const AT = '2026-11-25T00:00:00.000Z';
/** Each valid before 8df8fe7, each refused since; the keys name the contacts' ids. */
const OLD = {
  local: `${'L'.repeat(65)}@Old.example`,
  label: `ann@${'d'.repeat(64)}.example`,
  digits: 'bob@10.0.0.1',
};
const INVALID = {
  success: false,
  error: 'Validation failed',
  details: [{ field: 'email', message: 'must be a valid email address' }],
};

/** An app on a store at migration 0012 (the newest before 8df8fe7) holding OLD's contacts, upgraded. */
function withOldContacts(kind: StoreKind, run: (t: TestApp, auth: string, url?: string) => Promise<void>) {
  return withUpgradedApp(
    kind,
    '0012_address_chunks',
    async (db) => {
      await db.insertInto('organizations').values({ id: ORG, name: 'Old', created_at: AT }).execute();
      const rows = Object.entries(OLD).map(([id, email]) => {
        const row = { ...contactRow(ORG, id, email, AT), first_name: 'Ann' };
        return { row: { ...row, json: renderContact(row) }, tags: [] };
      });
      await insertContacts(db, rows);
    },
    async (t, { url }) => {
      const { auth } = await t.newKey(undefined, ORG);
      await run(t, auth, url);
    },
  );
}

describe.each(storeKinds())('contacts with addresses from an older release, on %s', (kind) => {
  it('can be written back with their id and the address they hold', async () => {
    await withOldContacts(kind, async (t, auth) => {
      const put = (payload: object) => t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload });
      const listed = (await t.call({ method: 'GET', url: '/api/v1/contacts?limit=100', auth })).json();
      expect(listed.contacts.map((c: { email: string }) => c.email).sort()).toEqual(
        Object.values(OLD).sort(),
      );
      // Read, change one field, write the whole contact back.
      for (const contact of listed.contacts) {
        const { createdAt: _, ...rest } = contact;
        const res = await put({ ...rest, firstName: 'Bea' });
        expect(res.statusCode, res.body).toBe(200);
        expect(res.json().contact).toEqual({ ...contact, firstName: 'Bea' });
      }
      // The address alone, and as sent with spaces around it (trimmed, as every address is).
      expect((await put({ id: 'local', email: OLD.local })).statusCode).toBe(200);
      const spaced = await put({ id: 'digits', email: ` ${OLD.digits} `, lastName: 'Lee' });
      expect(spaced.statusCode, spaced.body).toBe(200);
      expect(spaced.json().contact).toMatchObject({ email: OLD.digits, lastName: 'Lee' });
      // What else is wrong with such a body is told without the address.
      const long = await put({ id: 'label', email: OLD.label, firstName: 'x'.repeat(101), extra: 1 });
      expect(long.statusCode).toBe(400);
      expect(long.json().details).toEqual([
        { field: 'extra', message: 'is not an allowed field' },
        { field: 'firstName', message: 'must be at most 100 characters' },
      ]);
      // A body past the validator's entry bound is checked only up to its first problem (tooManyEntries):
      // the address is not let through then, or what was not checked would be written.
      const fields = Object.fromEntries(Array.from({ length: 2_001 }, (_, i) => [`k${i}`, i]));
      const huge = await put({ id: 'local', email: OLD.local, customFields: fields });
      expect(huge.json().details).toEqual([{ field: 'customFields', message: 'must have at most 100 keys' }]);
      // Looked up by the address, without an id, as ever: those lookups never checked it.
      expect((await put({ email: OLD.label, lastName: 'Lee' })).statusCode).toBe(200);
      const url = `/api/v1/contacts?email=${encodeURIComponent(OLD.digits)}`;
      expect((await t.call({ method: 'DELETE', url, auth })).statusCode).toBe(200);
    });
  });

  it('refuses the address anywhere else, as before', async () => {
    await withOldContacts(kind, async (t, auth) => {
      const put = (payload: object) => t.call({ method: 'PUT', url: '/api/v1/contacts', auth, payload });
      const created = await t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        payload: { email: 'new@acme.test' },
      });
      const other = created.json().contact.id as string;
      const refusals = [
        await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email: `x${OLD.digits}` } }),
        // Another contact's address, an address its contact does not hold, another case, an unknown id.
        await put({ id: other, email: OLD.local }),
        await put({ id: 'local', email: OLD.label }),
        await put({ id: 'local', email: OLD.local.toLowerCase() }),
        await put({ id: 'gone', email: OLD.digits }),
      ];
      for (const res of refusals) {
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json()).toEqual(INVALID);
      }
      // With other problems, all are told, the address's included.
      const both = await put({ id: other, email: OLD.label, firstName: 'x'.repeat(101) });
      expect(both.json().details).toEqual([
        { field: 'firstName', message: 'must be at most 100 characters' },
        { field: 'email', message: 'must be a valid email address' },
      ]);
      // Nothing changed.
      const listed = (await t.call({ method: 'GET', url: '/api/v1/contacts?limit=100', auth })).json();
      expect(
        Object.fromEntries(listed.contacts.map((c: { id: string; email: string }) => [c.id, c.email])),
      ).toEqual({
        ...OLD,
        [other]: 'new@acme.test',
      });
    });
  });

  it('reads a refused body no further than the validator did, and keeps the address only for a body it checked whole', async () => {
    await withOldContacts(kind, async (t) => {
      const contacts = t.services.contacts;
      const keys = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]));
      // A refused body of 100,000 keys, as the route hands it over: read past the entry bound, each read
      // is event-loop time the validator's bound was there to save (copied whole, a 10 MB body's seconds).
      let reads = 0;
      const counted = new Proxy(
        { id: 'local', email: OLD.local, ...keys(100_000) },
        { get: (target, key, receiver) => (reads++, Reflect.get(target, key, receiver)) },
      );
      const extra = [{ field: 'k0', message: 'is not an allowed field' }];
      await expect(contacts.update(ORG, counted as never, extra)).rejects.toMatchObject({ details: extra });
      expect(reads).toBeLessThan(5_000);
      // Past the bound, with the address refused alone (as it would be were its rule checked first), the
      // rest was never checked: the held address is no reason to write it.
      const refusal = INVALID.details;
      const past = { id: 'local', email: OLD.local, firstName: 'Bea', ...keys(2_001) };
      await expect(contacts.update(ORG, past as never, refusal)).rejects.toMatchObject({ details: refusal });
    });
  });

  it.runIf(kind === 'postgres')('checks the address again once it holds the row', async () => {
    await withOldContacts(kind, async (t, auth, url) => {
      const holder = new pg.Client({ connectionString: url });
      const watcher = new pg.Client({ connectionString: url });
      await holder.connect();
      await watcher.connect();
      try {
        // Another writer holds the contact while the PUT reads it, and readdresses it before letting go.
        await holder.query('begin');
        await holder.query('select id from contacts where id = $1 for update', ['local']);
        const pending = t.call({
          method: 'PUT',
          url: '/api/v1/contacts',
          auth,
          payload: { id: 'local', email: OLD.local, firstName: 'Bea' },
        });
        await eventually(() => anyWaitingForLock(watcher), 10_000, 'the PUT waiting for the row');
        await holder.query(
          "update contacts set email = 'new@acme.test', email_lower = 'new@acme.test' where id = $1",
          ['local'],
        );
        await holder.query('commit');
        const res = await pending;
        expect(res.statusCode, res.body).toBe(400);
        expect(res.json()).toEqual(INVALID);
        const row = await watcher.query('select email, first_name from contacts where id = $1', ['local']);
        expect(row.rows).toEqual([{ email: 'new@acme.test', first_name: 'Ann' }]);
      } finally {
        await holder.end();
        await watcher.end();
      }
    });
  });
});
