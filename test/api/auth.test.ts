// Authentication and permissions: 401 for a missing, malformed, unknown or revoked key; 403 per route.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { Permission } from '../../src/auth/keys.js';
import { KEY_CACHE_TTL_MS } from '../../src/auth/keys.service.js';
import { createServices } from '../../src/services.js';
import type { TestApp } from '../helpers/app.js';
import { expectError, expectRateHeaders, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

type Route = { method: 'GET' | 'POST' | 'PUT' | 'DELETE'; url: string; payload?: object };

/** Each route, the permission it needs, and its answer to a key holding it (ids `x` are unknown). */
const ROUTES: [Route, Permission, number][] = [
  [{ method: 'GET', url: '/api/v1/lists' }, 'readContacts', 200],
  [{ method: 'GET', url: '/api/v1/lists/x' }, 'readContacts', 404],
  [{ method: 'POST', url: '/api/v1/lists', payload: { name: 'n' } }, 'writeContacts', 201],
  [{ method: 'PUT', url: '/api/v1/lists/x', payload: { name: 'n' } }, 'writeContacts', 404],
  [{ method: 'DELETE', url: '/api/v1/lists/x' }, 'writeContacts', 404],
  [{ method: 'POST', url: '/api/v1/lists/x/contacts', payload: { contactIds: ['a'] } }, 'writeContacts', 404],
  [
    { method: 'DELETE', url: '/api/v1/lists/x/contacts', payload: { contactIds: ['a'] } },
    'writeContacts',
    404,
  ],
  [{ method: 'GET', url: '/api/v1/contacts' }, 'readContacts', 200],
  [{ method: 'POST', url: '/api/v1/contacts', payload: { email: 'a@example.com' } }, 'writeContacts', 201],
  [{ method: 'PUT', url: '/api/v1/contacts', payload: { id: 'x', firstName: 'a' } }, 'writeContacts', 404],
  [{ method: 'DELETE', url: '/api/v1/contacts?id=x' }, 'writeContacts', 404],
  [
    { method: 'POST', url: '/api/v1/emails', payload: { to: 'a@example.com', subject: 's', text: 't' } },
    'sendEmails',
    200,
  ],
  [{ method: 'GET', url: '/api/v1/emails' }, 'sendEmails', 200],
  [{ method: 'GET', url: '/api/v1/emails/x' }, 'sendEmails', 404],
];

const family = (url: string) => (url.startsWith('/api/v1/emails') ? 'emails' : 'contacts');
const PERMISSIONS: Permission[] = ['readContacts', 'writeContacts', 'sendEmails'];

describe.each(storeKinds())('auth on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));
  afterEach(() => {
    vi.restoreAllMocks();
    vi.useRealTimers();
  });

  it.each(ROUTES)('%o needs a valid key (401) holding %s (403)', async (route, permission, answer) => {
    const fam = family(route.url);
    // With the WWW-Authenticate each 401 carries (RFC 9110 11.6.1), as RFC 6750 3.1 words it: the scheme
    // alone without Bearer credentials, invalid_request for malformed ones, invalid_token for a key that is
    // not one.
    const none = 'Bearer';
    const malformed = 'Bearer error="invalid_request"';
    const refused = 'Bearer error="invalid_token"';
    const headers: [string | undefined, string][] = [
      [undefined, none],
      ['', none],
      ['Bearer', malformed],
      ['Bearer ', malformed],
      ['Basic dXNlcjpwYXNz', none],
      ['bearer mr_x', refused],
      [`Bearer mr_${'A'.repeat(43)}`, refused],
      [`${auth} extra`, malformed],
      [auth.replace('Bearer ', 'Token '), none],
    ];
    for (const [h, challenge] of headers) {
      const res = await t.call({ ...route, headers: h === undefined ? {} : { authorization: h } });
      expectError(res, 401, fam);
      expectRateHeaders(res);
      expect([h, res.headers['www-authenticate']]).toEqual([h, challenge]);
    }
    const lacking = (await t.newKey(PERMISSIONS.filter((p) => p !== permission))).auth;
    const res = await t.call({ ...route, auth: lacking });
    expectError(res, 403, fam);
    expectRateHeaders(res);
    expect(res.headers['www-authenticate']).toBeUndefined();
    const holding = (await t.newKey([permission])).auth;
    const ok = await t.call({ ...route, auth: holding });
    expect(ok.statusCode).toBe(answer);
  });

  it('the Bearer scheme is case-insensitive and may be followed by several spaces; the key is exact', async () => {
    const key = auth.slice('Bearer '.length);
    const get = (authorization: string) =>
      t.call({ method: 'GET', url: '/api/v1/lists', headers: { authorization } });
    expect((await get(`bearer ${key}`)).statusCode).toBe(200);
    expect((await get(`BEARER ${key}`)).statusCode).toBe(200);
    expectError(await get(`Bearer ${key.toUpperCase()}`), 401, 'contacts');
    // RFC 7235: credentials = auth-scheme 1*SP token68.
    expect((await get(`Bearer  ${key}`)).statusCode).toBe(200);
    expect((await get(`Bearer    ${key}`)).statusCode).toBe(200);
    expectError(await get(`Bearer\t${key}`), 401, 'contacts');
    expectError(await get(`Bearer${key}`), 401, 'contacts');
  });

  it('two Authorization headers are a 401, whichever key each holds', async () => {
    const other = (await t.newKey(['readContacts'])).auth;
    for (const pair of [
      [auth, other],
      [other, auth],
    ]) {
      const res = await t.call({
        method: 'POST',
        url: '/api/v1/lists',
        headers: { Authorization: pair },
        payload: { name: 'x' },
      });
      expectError(res, 401, 'contacts');
      expect(res.json().error).toMatch(/Authorization header sent more than once/);
      expect(res.headers['www-authenticate']).toBe('Bearer error="invalid_request"');
    }
  });

  // The cache is the service's, whatever the store: run once (10,000 lookups take 7 s on PostgreSQL).
  it.skipIf(kind !== 'sqlite')(
    'a flood of made-up keys does not push the kept lookups of real keys out',
    async () => {
      const { auth: key } = await t.newKey();
      const real = key.slice('Bearer '.length);
      // Date stands still: only eviction, never the lookups' age, could drop the kept one.
      vi.setSystemTime(Date.now());
      const keys = t.services.keys;
      expect(await keys.authenticate(real)).not.toBeNull();
      for (let i = 0; i < 10_050; i++) {
        expect(await keys.authenticate(`mr_${String(i).padStart(43, 'Z')}`)).toBeNull();
      }
      // Kept: answered without a lookup. The oldest made-up ones gave way to the newest.
      expect(keys.known(real)).toMatchObject({ organizationId: expect.any(String) });
      expect(keys.known(`mr_${String(10_049).padStart(43, 'Z')}`)).toBeNull();
      expect(keys.known(`mr_${String(0).padStart(43, 'Z')}`)).toBeUndefined();
    },
  );

  it('a key in the query string is not accepted', async () => {
    const key = auth.slice('Bearer '.length);
    for (const q of ['api_key', 'key', 'access_token', 'token', 'apiKey']) {
      expectError(await t.call({ method: 'GET', url: `/api/v1/lists?${q}=${key}` }), 401, 'contacts');
    }
    const email = await t.call({ method: 'GET', url: `/api/v1/emails?api_key=${key}` });
    expectError(email, 401, 'emails');
  });

  it('a revoked key stops working within 5 seconds', async () => {
    expect(KEY_CACHE_TTL_MS).toBeLessThanOrEqual(5_000);
    const { auth: key, keyId } = await t.newKey();
    const get = () => t.call({ method: 'GET', url: '/api/v1/lists', auth: key });
    expect((await get()).statusCode).toBe(200);
    expect((await t.services.keys.revoke(keyId)).already).toBe(false);
    // The key cache reads the injected clock (systemClock: new Date()), so Date moves on; timers stay real.
    vi.setSystemTime(Date.now() + 5_000);
    expectError(await get(), 401, 'contacts');
  });

  it('a key revoked by another process of the store is refused at once, though this server kept it', async () => {
    const { auth: key, keyId } = await t.newKey();
    const get = () => t.call({ method: 'GET', url: '/api/v1/lists', auth: key });
    expect((await get()).statusCode).toBe(200);
    // Date stands still from here: the lookup this server kept never expires, so only the word from the
    // other process (the CLI's, say) can make it refuse the key.
    vi.setSystemTime(Date.now());
    const other = t.ts.reopen();
    try {
      await createServices({ config: t.config, store: other }).keys.revoke(keyId);
      let status = 200;
      // Up to 10 s of real time (timers are real), counted in rounds since Date is not.
      for (let round = 0; round < 400 && status === 200; round++) {
        status = (await get()).statusCode;
        if (status === 200) await new Promise((r) => setTimeout(r, 25));
      }
      expect(status).toBe(401);
    } finally {
      await other.close();
    }
  });

  it('a key revoked before first use is refused at once', async () => {
    const { auth: key, keyId } = await t.newKey();
    await t.services.keys.revoke(keyId);
    expectError(await t.call({ method: 'GET', url: '/api/v1/lists', auth: key }), 401, 'contacts');
  });
});
