// Property-based: random JSON bodies, query strings, path ids and raw payloads to every endpoint never give
// a 5xx, and every 4xx has its family's error shape. FUZZ_RUNS sets the runs per endpoint and kind of input
// (default 30); the number of requests sent is printed per store.
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { createContact, createList, expectError, useApp } from '../helpers/api.js';
import { type BodyKind, nearlyValidBody, query, rawPayload, text, wildBody } from '../helpers/arbitraries.js';
import { storeKinds } from '../helpers/stores.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 30);

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';
const ENDPOINTS: [Method, string, BodyKind][] = [
  ['GET', '/api/v1/lists', 'lists'],
  ['POST', '/api/v1/lists', 'lists'],
  ['GET', '/api/v1/lists/:id', 'lists'],
  ['PUT', '/api/v1/lists/:id', 'lists'],
  ['DELETE', '/api/v1/lists/:id', 'lists'],
  ['POST', '/api/v1/lists/:id/contacts', 'members'],
  ['DELETE', '/api/v1/lists/:id/contacts', 'members'],
  ['GET', '/api/v1/contacts', 'contacts'],
  ['POST', '/api/v1/contacts', 'contacts'],
  ['PUT', '/api/v1/contacts', 'contacts'],
  ['DELETE', '/api/v1/contacts', 'contacts'],
  ['POST', '/api/v1/emails', 'emails'],
  ['GET', '/api/v1/emails', 'emails'],
  ['GET', '/api/v1/emails/:id', 'emails'],
];

const qs = (q: Record<string, string | string[]>) => {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) for (const one of [v].flat()) s.append(k, one);
  return s.toString();
};

describe.each(storeKinds())('fuzz on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]), { RATE_LIMIT_PER_MINUTE: '10000000' });
  const statuses: Record<number, number> = {};
  afterAll(() => {
    const total = Object.values(statuses).reduce((a, b) => a + b, 0);
    console.log(`fuzz on ${kind}: ${total} requests, none 5xx; by status ${JSON.stringify(statuses)}`);
  });

  async function check(
    method: Method,
    url: string,
    extra: { payload?: string; headers?: Record<string, string> } = {},
  ) {
    const res = await t.call({ method, url, auth, ...extra });
    statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
    const where = `${method} ${url} ${String(extra.payload).slice(0, 300)}`;
    expect(res.statusCode, `${where} -> ${res.body}`).toBeLessThan(500);
    if (res.statusCode >= 400) {
      expectError(res, res.statusCode, url.startsWith('/api/v1/emails') ? 'emails' : 'contacts');
    }
  }

  it.each(ENDPOINTS)('%s %s never answers 5xx', async (method, route, family) => {
    const listId = await createList(t, auth);
    const contact = await createContact(t, auth);
    const ids = [listId, contact.id];
    const id = fc.oneof(
      fc.constantFrom(...ids, '00000000-0000-7000-8000-000000000000'),
      fc.string({ minLength: 1, maxLength: 80 }),
      text.filter((s) => s.length > 0),
    );
    const withId = (raw: string) => route.replace(':id', encodeURIComponent(raw));
    const json = (b: unknown) => ({
      payload: JSON.stringify(b),
      headers: { 'content-type': 'application/json' },
    });

    await fc.assert(
      fc.asyncProperty(id, query, async (rawId, q) => check(method, `${withId(rawId)}?${qs(q)}`)),
      { numRuns: RUNS },
    );
    if (method === 'GET') return;
    for (const body of [wildBody, nearlyValidBody(family, ids)]) {
      await fc.assert(
        fc.asyncProperty(id, body, async (rawId, b) => check(method, withId(rawId), json(b))),
        { numRuns: RUNS },
      );
    }
    await fc.assert(
      fc.asyncProperty(nearlyValidBody(family, ids), async (b) => check(method, withId(listId), json(b))),
      { numRuns: RUNS },
    );
    await fc.assert(
      fc.asyncProperty(rawPayload, async (r) =>
        check(method, withId(listId), { payload: r.payload, headers: { 'content-type': r.type } }),
      ),
      { numRuns: Math.ceil(RUNS / 3) },
    );
  });
});
