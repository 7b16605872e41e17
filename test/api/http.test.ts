// The HTTP envelope: unknown routes, content types, bad JSON, body limit, rate-limit headers and 429.
import { gzipSync } from 'node:zlib';
import { describe, expect, it, vi } from 'vitest';
import net from 'node:net';
import { routeTable } from '../../src/app.js';
import { originForm, routedTarget } from '../../src/http/client-errors.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { expect400, expectError, expectRateHeaders, useApp, x } from '../helpers/api.js';
import { connect, jsonBody, statuses } from '../helpers/raw-http.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('http envelope on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]), { BODY_LIMIT_BYTES: '2048' });

  const raw = (url: string, payload: string, contentType = 'application/json', method = 'POST' as const) =>
    t.call({ method, url, auth, payload, headers: { 'content-type': contentType } });

  it('an unknown route is a JSON 404 in its family shape, with rate-limit headers', async () => {
    for (const [url, fam] of [
      ['/api/v1/nothing', 'contacts'],
      ['/api/v1/lists/a/b/c', 'contacts'],
      ['/api/v1/emails/a/b', 'emails'],
      ['/nowhere', 'contacts'],
    ] as const) {
      const res = await t.call({ method: 'GET', url, auth });
      expectError(res, 404, fam);
      expectRateHeaders(res);
    }
    expectError(await t.call({ method: 'PATCH', url: '/api/v1/lists', auth }), 404, 'contacts');
    // The route is found before the key is checked: a typo in a path is not reported as a key problem.
    expectError(await t.call({ method: 'GET', url: '/api/v1/nothing' }), 404, 'contacts');
    expectError(await t.call({ method: 'GET', url: '/api/v1/emails/a/b', auth: 'mr_nope' }), 404, 'emails');
    // A path with an empty id is no route either: the same 404 with a key, without one, or with a bad one.
    for (const [url, fam] of [
      ['/api/v1/lists/', 'contacts'],
      ['/api/v1/emails/', 'emails'],
      ['/api/v1/lists//contacts', 'contacts'],
    ] as const) {
      for (const key of [auth, undefined, 'Bearer mr_nope']) {
        const res = await t.call({
          method: url.endsWith('contacts') ? 'POST' : 'GET',
          url,
          ...(key ? { auth: key } : {}),
        });
        expectError(res, 404, fam);
        expect(res.json().error, `${url} ${key}`).toMatch(/^Route (GET|POST) \/api\/v1\/\w+\/.* not found$/);
      }
    }
  });

  it('a body that is not application/json is a 415', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const res = await raw('/api/v1/lists', 'name=x', type);
      expectError(res, 415, 'contacts');
      expect(res.json().details).toEqual([{ field: 'Content-Type', message: 'must be application/json' }]);
      expectRateHeaders(res);
    }
    expectError(await raw('/api/v1/emails', 'to=x', 'text/plain'), 415, 'emails');
    const charset = await raw('/api/v1/lists', '{"name":"x"}', 'application/json; charset=utf-8');
    expect(charset.statusCode).toBe(201);
    for (const other of ['latin1', 'ISO-8859-1', 'utf-16']) {
      const res = await raw('/api/v1/lists', '{"name":"x"}', `application/json; charset=${other}`);
      expectError(res, 415, 'contacts');
      expect(res.json().details).toEqual([
        { field: 'Content-Type', message: 'charset must be utf-8, or left out' },
      ]);
    }
    // An empty one is named as such, not left out of the sentence.
    const empty = await raw('/api/v1/lists', '{"name":"x"}', 'application/json; charset=');
    expect([empty.statusCode, empty.json().error]).toEqual([
      415,
      'Request body must be UTF-8 JSON, not an empty charset',
    ]);
    expect((await raw('/api/v1/lists', '{"name":"x"}', 'application/json;charset="UTF8"')).statusCode).toBe(
      201,
    );
    // ASCII is UTF-8; and a request with no body has no charset to be wrong about.
    expect(
      (await raw('/api/v1/lists', '{"name":"x"}', 'application/json; charset=us-ascii')).statusCode,
    ).toBe(201);
    const list = (await raw('/api/v1/lists', '{"name":"x"}', 'application/json')).json().list.id as string;
    const bodiless = await t.call({
      method: 'DELETE',
      url: `/api/v1/lists/${list}`,
      auth,
      headers: { 'content-type': 'application/json; charset=ISO-8859-1' },
    });
    expect(bodiless.statusCode, bodiless.body).toBe(200);
  });

  it('a compressed body is a 415 naming Content-Encoding, not a body of broken bytes; identity is fine', async () => {
    const send = (url: string, payload: string | Buffer, coding: string) =>
      t.call({
        method: 'POST',
        url,
        auth,
        payload,
        headers: { 'content-type': 'application/json', 'content-encoding': coding },
      });
    const total = async () =>
      (await t.call({ method: 'GET', url: '/api/v1/lists', auth })).json().pagination.total as number;
    const before = await total();
    for (const [url, fam] of [
      ['/api/v1/lists', 'contacts'],
      ['/api/v1/emails', 'emails'],
    ] as const) {
      const gz = await send(url, gzipSync('{"name":"gz"}'), 'gzip');
      expectError(gz, 415, fam);
      expect(gz.json().details).toEqual([{ field: 'Content-Encoding', message: expect.any(String) }]);
      expectRateHeaders(gz);
      // Declared but not applied: still refused, as the body is not what the header says.
      expectError(await send(url, '{"name":"plain"}', 'br'), 415, fam);
    }
    expect(await total()).toBe(before);
    for (const coding of ['identity', 'Identity ', '']) {
      const ok = await send('/api/v1/lists', '{"name":"x"}', coding);
      expect(ok.statusCode, `${coding}: ${ok.body}`).toBe(201);
    }
  });

  it('a parameter the route reads with broken %-encoding is a 400 naming it; sound ones are decoded', async () => {
    const created = await raw('/api/v1/contacts', '{"email":"50%off+q@acme.test","tags":["a b"]}');
    expect(created.statusCode).toBe(201);
    const found = await t.call({ method: 'GET', url: '/api/v1/contacts?email=50%25OFF%2Bq&tag=a+b', auth });
    expect(found.json().contacts.map((c: { email: string }) => c.email)).toEqual(['50%off+q@acme.test']);
    // Fastify's own parser would search for the undecoded text "50%off" and find nothing, silently.
    expect400(
      await t.call({ method: 'GET', url: '/api/v1/contacts?email=50%off&tag=a%41', auth }),
      'contacts',
      ['email'],
    );
    expect400(await t.call({ method: 'GET', url: '/api/v1/emails?status=sent%E0%A4', auth }), 'emails', [
      'status',
    ]);
    // A parameter the route does not read is ignored however it is written, as any unknown one is.
    expect(
      (await t.call({ method: 'GET', url: '/api/v1/contacts?utm=50%off&x%ZZ=1', auth })).statusCode,
    ).toBe(200);
    expect((await t.call({ method: 'GET', url: '/api/v1/lists?utm=50%off', auth })).statusCode).toBe(200);
    // Nor do characters no store keeps, in its value or its name, make a 400 of it.
    for (const url of [
      '/api/v1/contacts?utm=a%00b',
      '/api/v1/emails?x%00=1&utm=%ED%A0%80',
      '/api/v1/lists?u=%00&u=1',
    ])
      expect((await t.call({ method: 'GET', url, auth })).statusCode, url).toBe(200);
    // The ones it reads still are.
    expect400(await t.call({ method: 'GET', url: '/api/v1/contacts?tag=a%00&utm=%00', auth }), 'contacts', [
      'tag',
    ]);
    const del = await t.call({ method: 'DELETE', url: '/api/v1/contacts?email=50%off%2Bq@acme.test', auth });
    expect400(del, 'contacts', ['email']);
  });

  it('bad JSON is a 400; an empty or non-object body too', async () => {
    expectError(await raw('/api/v1/lists', '{"name":'), 400, 'contacts');
    expectError(await raw('/api/v1/emails', '{oops}'), 400, 'emails');
    expectError(await raw('/api/v1/lists', ''), 400, 'contacts');
    expect400(await raw('/api/v1/lists', '"name"'), 'contacts', ['body']);
    expect400(await raw('/api/v1/lists', 'null'), 'contacts', ['body']);
    expectError(await raw('/api/v1/lists', '{"__proto__":{"x":1},"name":"a"}'), 400, 'contacts');
  });

  it('a body over BODY_LIMIT_BYTES is a 413 with rate-limit headers', async () => {
    const res = await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: x(3000) } });
    expectError(res, 413, 'contacts');
    // It says how large a body may be.
    expect(res.json()).toMatchObject({
      error: 'Request body is larger than the 2048 bytes the server accepts',
    });
    expectRateHeaders(res);
    const mail = { to: 'a@example.com', subject: 's', text: x(3000) };
    expectError(await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: mail }), 413, 'emails');
  });

  it('2xx answers carry the rate-limit headers, Reset in unix seconds', async () => {
    const res = await t.call({ method: 'GET', url: '/api/v1/lists', auth });
    expect(res.statusCode).toBe(200);
    expectRateHeaders(res);
    expect(Number(res.headers['x-ratelimit-limit'])).toBe(600);
  });

  it('X-RateLimit-Reset is the same on every request of one window, from second to second', async () => {
    const resets = new Set<string>();
    for (let i = 0; i < 12; i++) {
      const res = await t.call({ method: 'GET', url: '/api/v1/lists', auth });
      expectRateHeaders(res);
      resets.add(res.headers['x-ratelimit-reset'] as string);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect([...resets]).toHaveLength(1);
  });

  it('X-RateLimit-Reset is the window end even when a second ticks over while a request is answered', async () => {
    const first = await t.call({ method: 'GET', url: '/api/v1/lists', auth });
    const end = Number(first.headers['x-ratelimit-reset']) * 1000;
    // A clock that moves a millisecond at each reading, started closer and closer to a whole second well
    // inside the window: in one of these requests or another, the second ticks over between the count and
    // the header's conversion, wherever the readings between them are.
    const resets = new Set<string>();
    try {
      for (let lead = 1; lead <= 80; lead++) {
        let now = end - 20_000 - lead;
        vi.spyOn(Date, 'now').mockImplementation(() => now++);
        const res = await t.call({ method: 'GET', url: '/api/v1/lists', auth });
        expect(res.statusCode).toBe(200);
        resets.add(res.headers['x-ratelimit-reset'] as string);
        vi.mocked(Date.now).mockRestore();
      }
    } finally {
      vi.restoreAllMocks();
    }
    expect([...resets]).toEqual([String(end / 1000)]);
  });

  it('NUL in a body string or a query is a 400 naming the field; in a path id a 404', async () => {
    expect400(
      await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'a\u0000b' } }),
      'contacts',
      ['name'],
    );
    const contact = { email: 'nul@example.com', tags: ['ok', 'a\u0000'], customFields: { plan: 'x\u0000' } };
    const res = await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: contact });
    expect400(res, 'contacts', ['tags[1]', 'customFields.plan']);
    const mail = { to: 'a@example.com', subject: 's\u0000', html: '\u0000' };
    expect400(await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: mail }), 'emails', [
      'subject',
      'html',
    ]);
    expect400(await t.call({ method: 'GET', url: '/api/v1/contacts?email=%00', auth }), 'contacts', [
      'email',
    ]);
    // Ids no resource can have (a NUL, over 64 characters, over the router's 2,048) are not found like any
    // unknown id, named after the resource, without echoing the id.
    for (const [method, url, family, error] of [
      ['GET', '/api/v1/lists/%00', 'contacts', 'List not found'],
      ['GET', `/api/v1/emails/${x(200)}`, 'emails', 'Email not found'],
      ['DELETE', `/api/v1/lists/${x(65)}`, 'contacts', 'List not found'],
      ['POST', `/api/v1/lists/${x(65)}/contacts`, 'contacts', 'List not found'],
      ['GET', `/api/v1/lists/${x(5000)}`, 'contacts', 'List not found'],
      ['GET', `/api/v1/emails/${x(5000)}`, 'emails', 'Email not found'],
      ['GET', `/api/v1/%6cists/${x(5000)}`, 'contacts', 'List not found'],
    ] as const) {
      const res = await t.call({
        method,
        url,
        auth,
        payload: method === 'POST' ? { contactIds: ['c'] } : undefined,
      });
      expectError(res, 404, family);
      expect(res.json().error, url.slice(0, 40)).toBe(error);
    }
    // Where no route has that shape, the unknown route's 404, as with a short id.
    for (const [method, url] of [
      ['GET', `/api/v1/lists/${x(5000)}/bogus`],
      ['PUT', `/api/v1/lists/${x(5000)}/contacts`],
      ['GET', `/api/v1/emails/${x(5000)}/x`],
    ] as const) {
      const res = await t.call({ method, url, auth });
      expectError(res, 404, url.startsWith('/api/v1/emails') ? 'emails' : 'contacts');
      expect(res.json().error).toBe(`Route ${method} ${url} not found`);
    }
    for (const [url, family] of [
      ['/api/v1/lists/%zz', 'contacts'],
      ['/api/v1/emails/%zz', 'emails'],
    ] as const) {
      const res = await t.call({ method: 'GET', url, auth });
      expectError(res, 400, family);
      expect(res.json().details).toEqual([{ field: 'path', message: 'has broken %-encoding' }]);
    }
  });

  it('a lone UTF-16 surrogate in a body string or key is a 400 naming the field', async () => {
    const send = (url: string, json: string) => raw(url, json);
    expect400(await send('/api/v1/lists', '{"name":"\\ud800"}'), 'contacts', ['name']);
    expect400(await send('/api/v1/lists', '{"name":"a\\udfffb"}'), 'contacts', ['name']);
    const contact = '{"email":"s@example.com","tags":["ok","\\udc00"],"customFields":{"\\ud83d":1}}';
    expect400(await send('/api/v1/contacts', contact), 'contacts', ['tags[1]', 'customFields']);
    const mail = '{"to":"a@example.com","subject":"\\ud800x","text":"t"}';
    expect400(await send('/api/v1/emails', mail), 'emails', ['subject']);
    // A well-formed pair (an emoji) is text like any other, and reads back as sent.
    const ok = await send('/api/v1/lists', '{"name":"\\ud83d\\ude00"}');
    expect(ok.statusCode, ok.body).toBe(201);
    const id = ok.json().list.id as string;
    expect((await t.call({ method: 'GET', url: `/api/v1/lists/${id}`, auth })).json().list.name).toBe('😀');
  });

  it('a body that is not valid UTF-8 is a 400 naming body, and nothing is stored', async () => {
    const json = (...parts: (string | number[])[]) =>
      Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
    const send = (url: string, payload: Buffer, contentType = 'application/json') =>
      t.call({ method: 'POST', url, auth, payload, headers: { 'content-type': contentType } });
    const total = async () =>
      (await t.call({ method: 'GET', url: '/api/v1/lists', auth })).json().pagination.total as number;
    const before = await total();
    // Latin-1 é; a lone continuation byte; a lead byte cut short. Decoded as they came, each was stored as
    // U+FFFD in place of what the client meant.
    expect400(await send('/api/v1/lists', json('{"name":"caf', [0xe9], '"}')), 'contacts', ['body']);
    // Declared Latin-1, it is refused for its charset first (a 415 naming Content-Type).
    const latin1 = 'application/json; charset=iso-8859-1';
    expectError(await send('/api/v1/lists', json('{"name":"', [0xff, 0xfe], '"}'), latin1), 415, 'contacts');
    const mail = json('{"to":"a@example.com","text":"t","subject":"', [0xc3, 0x28], '"}');
    expect400(await send('/api/v1/emails', mail), 'emails', ['body']);
    expect(await total()).toBe(before);
    // Multi-byte UTF-8 is text like any other.
    const ok = await send('/api/v1/lists', json('{"name":"caf', [0xc3, 0xa9], '"}'));
    expect(ok.statusCode, ok.body).toBe(201);
    expect(ok.json().list.name).toBe('café');
  });

  it('a body with fields on a route that takes none is a 400 naming them; none, or {}, is fine', async () => {
    const list = (
      await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'kept' } })
    ).json().list.id as string;
    const listUrl = `/api/v1/lists/${list}`;
    expect400(await t.call({ method: 'DELETE', url: listUrl, auth, payload: { foo: 1 } }), 'contacts', [
      'foo',
    ]);
    expect((await t.call({ method: 'GET', url: listUrl, auth })).statusCode).toBe(200);
    const email = 'bodyless@example.com';
    await t.call({ method: 'POST', url: '/api/v1/contacts', auth, payload: { email } });
    // The contact is named in the query string; one named in a body would otherwise be ignored.
    const byBody = await t.call({ method: 'DELETE', url: '/api/v1/contacts', auth, payload: { email } });
    expect400(byBody, 'contacts', ['email']);
    const inBoth = { method: 'DELETE' as const, url: `/api/v1/contacts?email=${email}`, auth };
    expect400(await t.call({ ...inBoth, payload: { email, id: 'x' } }), 'contacts', ['email', 'id']);
    expect400(await t.call({ ...inBoth, payload: [email] }), 'contacts', ['body']);
    const listed = await t.call({ method: 'GET', url: `/api/v1/contacts?email=${email}`, auth });
    expect(listed.json().pagination.total).toBe(1);
    expect((await t.call({ ...inBoth, payload: {} })).statusCode).toBe(200);
    expect((await t.call({ method: 'DELETE', url: listUrl, auth })).statusCode).toBe(200);
  });

  it('health, the OpenAPI document and the docs page need no key', async () => {
    const health = await t.call({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toEqual({ status: 'ok' });
    // Exempt from the limit (contract.md), yet it shows the caller's standing, as every answer does.
    expectRateHeaders(health);
    const docs = await t.call({ method: 'GET', url: '/docs' });
    const page =
      docs.statusCode === 302 ? await t.call({ method: 'GET', url: docs.headers.location! }) : docs;
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/text\/html/);
    expect(page.body).not.toMatch(/https?:\/\/(cdn|unpkg|cdnjs)/);
    expect(page.body).toContain('<title>Mailroom API</title>');
    // Its own files only, and over whatever scheme it was reached by: `upgrade-insecure-requests` would
    // send a browser on a plain-HTTP server to fetch them over HTTPS, and the page would stay blank.
    const csp = String(page.headers['content-security-policy']);
    expect(csp).toMatch(/default-src 'self'/);
    expect(csp).not.toMatch(/upgrade-insecure-requests/);
    // Nothing from elsewhere: no https: wildcard, no validator badge.
    expect(csp).not.toMatch(/https:|validator\.swagger\.io/);
    expect(csp).toMatch(/img-src 'self' data:;/);
  });

  it('the OpenAPI document is 3.1 and has every route of the table', async () => {
    const res = await t.call({ method: 'GET', url: '/api/v1/openapi.json' });
    expect(res.statusCode).toBe(200);
    const doc = res.json();
    expect(doc.openapi).toMatch(/^3\.1\./);
    const routes = routeTable(t.services).map(
      ([method, url]) => `${method.toLowerCase()} ${url.replace(/:(\w+)/g, '{$1}')}`,
    );
    expect(routes).toHaveLength(14);
    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(
      ([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`),
    );
    expect(documented.sort()).toEqual(expect.arrayContaining(routes));
    expect(doc.paths['/api/v1/contacts'].post.requestBody).toBeDefined();
    // Each operation names the key's permission it needs (a role of the bearer requirement, OpenAPI 3.1).
    for (const [method, url, permission] of routeTable(t.services)) {
      const op = doc.paths[url.replace(/:(\w+)/g, '{$1}')][method.toLowerCase()];
      expect(op.security, `${method} ${url}`).toEqual([{ bearer: [permission] }]);
    }
    // The endpoints that need no key are documented too, and say so.
    const health = doc.paths['/health'].get;
    expect(health.security).toEqual([]);
    expect(Object.keys(health.responses).sort()).toEqual(['200', '400', '408', '431', '503']);
    expect(doc.paths['/api/v1/openapi.json'].get.security).toEqual([]);
    const itself = doc.paths['/api/v1/openapi.json'].get;
    expect(Object.keys(itself.responses).sort()).toEqual(['200', '400', '408', '429', '431', '503']);
  });

  it('the OpenAPI document names the shapes it returns once, and every operation refers to them', async () => {
    const doc = (await t.call({ method: 'GET', url: '/api/v1/openapi.json' })).json() as OpenApiDoc;
    const schemas = doc.components.schemas;
    expect(Object.keys(schemas)).toEqual(
      expect.arrayContaining([
        'Contact',
        'List',
        'CreatedList',
        'Email',
        'EmailSummary',
        'Pagination',
        'Error',
      ]),
    );
    const json = (path: string, method: string, status: string) =>
      JSON.stringify(doc.paths[path]![method]!.responses[status]!.content!['application/json']!.schema);
    // A page and a create return the same Contact; each error family its own body.
    expect(json('/api/v1/contacts', 'get', '200')).toContain(
      '"items":{"$ref":"#/components/schemas/Contact"}',
    );
    expect(json('/api/v1/contacts', 'post', '201')).toContain(
      '"contact":{"$ref":"#/components/schemas/Contact"}',
    );
    expect(json('/api/v1/lists/{id}', 'get', '404')).toBe('{"$ref":"#/components/schemas/Error"}');
    expect(json('/api/v1/emails/{id}', 'get', '404')).toBe('{"$ref":"#/components/schemas/EmailError"}');
    expect(json('/api/v1/emails/{id}', 'get', '200')).toBe('{"$ref":"#/components/schemas/Email"}');
    // The create-list answer has no updatedAt (api-v1.md), the list read has it.
    expect(Object.keys(schemas.CreatedList!.properties!)).not.toContain('updatedAt');
    expect(Object.keys(schemas.List!.properties!)).toContain('updatedAt');
    // Every reference resolves, and nothing is named that no operation uses.
    const refs = new Set(
      [...JSON.stringify(doc).matchAll(/"#\/components\/schemas\/(\w+)"/g)].map((m) => m[1]),
    );
    expect([...refs].sort()).toEqual(Object.keys(schemas).sort());
  });

  it('the OpenAPI document names each operation, and lists the statuses and headers each can answer', async () => {
    const doc = (await t.call({ method: 'GET', url: '/api/v1/openapi.json' })).json() as OpenApiDoc;
    const ops = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item).map(([method, op]) => ({ path, method, op })),
    );
    const ids = ops.map(({ op }) => op.operationId);
    expect(ids.every((id) => typeof id === 'string' && /^[a-z][A-Za-z]+$/.test(id))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    const statuses = (path: string, method: string) => Object.keys(doc.paths[path]![method]!.responses);
    // A page cannot conflict, find nothing or carry a body; a create reads a body and can conflict.
    expect(statuses('/api/v1/lists', 'get').sort()).toEqual(
      ['200', '400', '401', '403', '408', '429', '431', '500', '503'].sort(),
    );
    expect(statuses('/api/v1/lists/{id}', 'get')).toContain('404');
    expect(statuses('/api/v1/contacts', 'post')).toEqual(
      expect.arrayContaining(['201', '409', '413', '415']),
    );
    expect(statuses('/api/v1/contacts', 'post')).not.toContain('404');
    const sendAs = (method: 'DELETE' | 'POST', url: string, payload: string, type: string) =>
      t.call({ method, url, auth, payload, headers: { 'content-type': type } });
    // Fastify reads a body sent with a DELETE too, so a wrong one is a 415 there as well.
    expect((await sendAs('DELETE', '/api/v1/contacts?id=x', 'x', 'text/plain')).statusCode).toBe(415);
    // An empty body is no body, whatever its Content-Type says (clients that send a form's on every call).
    const form = 'application/x-www-form-urlencoded';
    for (const type of [form, 'text/plain']) {
      const empty = await sendAs(
        'DELETE',
        `/api/v1/contacts?email=nobody-${type.length}@acme.test`,
        '',
        type,
      );
      expectError(empty, 404, 'contacts');
    }
    const list = (await t.call({ method: 'POST', url: '/api/v1/lists', auth, payload: { name: 'x' } })).json()
      .list.id as string;
    const emptyDelete = await sendAs('DELETE', `/api/v1/lists/${list}`, '', form);
    expect(emptyDelete.statusCode, emptyDelete.body).toBe(200);
    // An unknown route is a 404 whatever it is sent.
    expectError(await sendAs('POST', '/api/v1/listz', 'name=x', 'text/plain'), 404, 'contacts');
    // A create that sent nothing is told its body is missing, not its media type.
    const emptyCreate = await sendAs('POST', '/api/v1/lists', '', 'text/plain');
    expect(emptyCreate.statusCode, emptyCreate.body).toBe(400);
    expect(statuses('/api/v1/contacts', 'delete')).toEqual(expect.arrayContaining(['404', '413', '415']));
    expect(statuses('/api/v1/lists/{id}', 'delete')).toEqual(expect.arrayContaining(['404', '413', '415']));
    expect(statuses('/api/v1/emails', 'post')).toEqual(expect.arrayContaining(['200', '409', '413']));
    expect(doc.paths['/api/v1/emails']!.post!.description).toMatch(/html and text/);
    for (const { path, op } of ops) {
      for (const [status, response] of Object.entries(op.responses)) {
        expect([path, status, response.description]).not.toEqual([path, status, 'Default Response']);
        const headers = Object.keys(response.headers ?? {});
        // Node answers a 431 before a request exists: nothing to count it against, so no rate-limit headers.
        if (status === '431') {
          expect([path, status, headers]).toEqual([path, status, []]);
          continue;
        }
        expect([path, status, headers]).toEqual([path, status, expect.arrayContaining(RATE_HEADERS)]);
        if (status === '429') expect(headers).toContain('Retry-After');
        expect([path, status, headers.includes('WWW-Authenticate')]).toEqual([
          path,
          status,
          status === '401',
        ]);
        // Every such answer carries them: a generated client should not type them as optional. But a 503,
        // which a shutting-down server gives before counting, and a 408 Node gives for late headers.
        for (const [name, header] of Object.entries(response.headers ?? {})) {
          const type = name === 'WWW-Authenticate' ? 'string' : 'integer';
          expect([path, status, name, header]).toMatchObject([
            path,
            status,
            name,
            { required: status !== '503' && status !== '408', schema: { type } },
          ]);
        }
      }
    }
    // Status values are strings of a known set, typed as such for generated clients.
    const emailSchema = named(doc, doc.paths['/api/v1/emails/{id}']!.get!.responses['200']!);
    expect(emailSchema.properties!.status).toMatchObject({ type: 'string', enum: expect.any(Array) });
    // So are event types and ids; a success is `true`, as an error's `success` is false.
    expect(JSON.stringify(doc.components.schemas.EmailEvent)).toContain(
      '"enum":["queued","sending","sent","deferred","failed"]',
    );
    expect(emailSchema.properties!.id).toMatchObject({ type: 'string', format: 'uuid' });
    expect(JSON.stringify(doc.paths['/api/v1/lists']!.get!.responses['200'])).toContain(
      '"success":{"type":"boolean","enum":[true]}',
    );
    // What each operation's 409 means; the error body of a 408 and a 431 (the path's family).
    const description = (path: string, method: string, status: string) =>
      doc.paths[path]![method]!.responses[status]!.description;
    const schemaOf = (path: string, method: string, status: string) =>
      JSON.stringify(doc.paths[path]![method]!.responses[status]!.content!['application/json']!.schema);
    expect(description('/api/v1/emails', 'post', '409')).toMatch(/^The Idempotency-Key was used/);
    expect(description('/api/v1/contacts', 'post', '409')).toMatch(/already has this email address/);
    expect(schemaOf('/api/v1/emails', 'post', '431')).toBe('{"$ref":"#/components/schemas/EmailError"}');
    expect(schemaOf('/api/v1/emails', 'post', '408')).toBe('{"$ref":"#/components/schemas/EmailError"}');
    // Bounds the rules check in messages of their own, as the document can say them.
    const send = doc.paths['/api/v1/emails']!.post as unknown as {
      parameters: Record<string, unknown>[];
      requestBody: { content: { 'application/json': { schema: { properties: Record<string, unknown> } } } };
    };
    expect(send.parameters.find((p) => p.in === 'header')).toMatchObject({
      name: 'Idempotency-Key',
      schema: { type: 'string', minLength: 1, maxLength: 256 },
    });
    expect(send.requestBody.content['application/json'].schema.properties.headers).toMatchObject({
      propertyNames: { maxLength: 100, pattern: '^[!-9;-~]+$' },
    });
    const limit = doc.paths['/health']!.get!.responses['200']!.headers!['X-RateLimit-Limit'] as {
      description: string;
    };
    expect(limit.description).toMatch(/per client address/);
    const filter = (
      doc.paths['/api/v1/emails']!.get as unknown as { parameters: Record<string, unknown>[] }
    ).parameters.find((p) => p.name === 'status');
    expect(filter).toMatchObject({ schema: { type: 'string', enum: expect.arrayContaining(['deferred']) } });
  });
});

const RATE_HEADERS = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];

type SchemaOrRef = { $ref?: string; properties?: Record<string, Record<string, unknown>> };
interface OpenApiResponse {
  description: string;
  headers?: Record<string, unknown>;
  content?: Record<string, { schema: SchemaOrRef }>;
}
interface OpenApiDoc {
  components: { schemas: Record<string, SchemaOrRef> };
  paths: Record<
    string,
    Record<string, { operationId?: string; description?: string; responses: Record<string, OpenApiResponse> }>
  >;
}

/** A response's JSON schema, the named one it refers to if it does. */
function named(doc: OpenApiDoc, response: OpenApiResponse): SchemaOrRef {
  const schema = response.content!['application/json']!.schema;
  const ref = schema.$ref?.replace('#/components/schemas/', '');
  return ref === undefined ? schema : doc.components.schemas[ref]!;
}

describe.each(storeKinds())('rate limit on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]), { RATE_LIMIT_PER_MINUTE: '3' });

  it('answers 429 with Retry-After after RATE_LIMIT_PER_MINUTE requests, per key', async () => {
    const get = (key = auth) => t.call({ method: 'GET', url: '/api/v1/lists', auth: key });
    const first = await get();
    expect(first.headers['x-ratelimit-limit']).toBe('3');
    expect(first.headers['x-ratelimit-remaining']).toBe('2');
    await get();
    await get();
    const asked = Math.floor(Date.now() / 1000);
    const limited = await get();
    const answered = Math.floor(Date.now() / 1000);
    expectError(limited, 429, 'contacts');
    expectRateHeaders(limited);
    // Retry-After counts, from the second the answer was made in, to the whole second the window ends on:
    // the time X-RateLimit-Reset shows. However slow the answer, it was made between asking and hearing.
    const retryAfter = Number(limited.headers['retry-after']);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(61);
    const madeAt = Number(limited.headers['x-ratelimit-reset']) - retryAfter;
    expect(madeAt).toBeGreaterThanOrEqual(asked);
    expect(madeAt).toBeLessThanOrEqual(answered);
    const mail = await t.call({ method: 'GET', url: '/api/v1/emails', auth });
    expectError(mail, 429, 'emails');
    const other = (await t.newKey()).auth;
    expect((await get(other)).headers['x-ratelimit-remaining']).toBe('2');
    const missing = await t.call({ method: 'GET', url: '/api/v1/nothing', auth: other });
    expect(missing.statusCode).toBe(404);
    expect(missing.headers['x-ratelimit-remaining']).toBe('1');
  });

  it('a health probe is never refused nor counted, and shows where its address stands', async () => {
    const from = (remoteAddress: string, url: string) => t.call({ method: 'GET', url, remoteAddress });
    const counted = await from('10.8.8.8', '/api/v1/lists');
    await from('10.8.8.8', '/api/v1/lists');
    const spent = await from('10.8.8.8', '/api/v1/lists');
    expect(spent.headers['x-ratelimit-remaining']).toBe('0');
    for (let i = 0; i < 5; i++) {
      const health = await from('10.8.8.8', '/health');
      expect(health.statusCode).toBe(200);
      expect([health.headers['x-ratelimit-limit'], health.headers['x-ratelimit-remaining']]).toEqual([
        '3',
        '0',
      ]);
      expect(health.headers['x-ratelimit-reset']).toBe(counted.headers['x-ratelimit-reset']);
    }
    expect((await from('10.8.8.8', '/api/v1/lists')).statusCode).toBe(429);
    const half = await from('10.8.8.9', '/api/v1/lists');
    expect((await from('10.8.8.9', '/health')).headers['x-ratelimit-remaining']).toBe('2');
    expect((await from('10.8.8.9', '/api/v1/lists')).headers['x-ratelimit-remaining']).toBe('1');
    expect(half.statusCode).toBe(401);
    // An address that sent nothing yet: a full budget, and no window running (Reset is now).
    const fresh = await from('10.7.7.7', '/health');
    expect(fresh.headers['x-ratelimit-remaining']).toBe('3');
    expect(Number(fresh.headers['x-ratelimit-reset'])).toBeLessThanOrEqual(Math.floor(Date.now() / 1000));
  });

  // Converted after the store's ping, a Reset crossed into the next second whenever one ticked over
  // meanwhile: one second later than the window's (seen under load; helper-143 traced it).
  it("a health probe's Reset is the window's however long its ping takes", async () => {
    const counted = await t.call({ method: 'GET', url: '/api/v1/lists', remoteAddress: '10.6.6.6' });
    const ping = t.ts.store.ping.bind(t.ts.store);
    const slow = vi.spyOn(t.ts.store, 'ping').mockImplementation(async () => {
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      return ping();
    });
    try {
      const health = await t.call({ method: 'GET', url: '/health', remoteAddress: '10.6.6.6' });
      expect(health.statusCode).toBe(200);
      expect(health.headers['x-ratelimit-reset']).toBe(counted.headers['x-ratelimit-reset']);
    } finally {
      slow.mockRestore();
    }
  });

  it('requests without a valid key are limited per client address', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 5; i++) {
      const res = await t.call({ method: 'GET', url: '/api/v1/lists', remoteAddress: '10.9.9.9' });
      codes.push(res.statusCode);
    }
    expect(codes).toEqual([401, 401, 401, 429, 429]);
    const elsewhere = await t.call({ method: 'GET', url: '/api/v1/lists', remoteAddress: '10.9.9.8' });
    expect(elsewhere.statusCode).toBe(401);
  });

  it('an IPv6 client is counted by its /64, an IPv4 one written as IPv6 as that IPv4 address', async () => {
    const from = async (remoteAddress: string) =>
      (await t.call({ method: 'GET', url: '/api/v1/lists', remoteAddress })).statusCode;
    // Three addresses of one /64 (as one host's privacy addresses are) share its budget of 3.
    const one = ['2001:db8:5:6::1', '2001:db8:5:6:a::2', '2001:db8:5:6:ffff:ffff:ffff:ffff'];
    expect([...(await Promise.all(one.map(from))), await from('2001:db8:5:6::9')]).toEqual([
      401, 401, 401, 429,
    ]);
    // A health probe from the same /64 shows that standing; the next /64 has a budget of its own.
    const probe = await t.call({ method: 'GET', url: '/health', remoteAddress: '2001:db8:5:6::77' });
    expect(probe.headers['x-ratelimit-remaining']).toBe('0');
    expect(await from('2001:db8:5:7::1')).toBe(401);
    // A link-local client's zone may hold what ipaddr.js refuses (a VLAN's or a bridge's interface name):
    // counted all the same, never a 500 (helper-142).
    expect(await from('fe80::1%eth0.100')).toBe(401);
    // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d: the same client, the same budget.
    expect([
      await from('10.9.8.7'),
      await from('::ffff:10.9.8.7'),
      await from('10.9.8.7'),
      await from('::ffff:10.9.8.7'),
    ]).toEqual([401, 401, 401, 429]);
  });

  it('a URL with broken %-encoding is counted like any request and carries the headers', async () => {
    const bad = (remoteAddress: string, key?: string) =>
      t.call({ method: 'GET', url: '/api/v1/lists/%ZZ', remoteAddress, auth: key });
    const first = await bad('10.9.9.7');
    expectError(first, 400, 'contacts');
    expectRateHeaders(first);
    expect(first.headers['x-ratelimit-remaining']).toBe('2');
    await bad('10.9.9.7');
    await bad('10.9.9.7');
    const limited = await bad('10.9.9.7');
    expectError(limited, 429, 'contacts');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    // With a valid key it counts against the key, as every other request of that key does.
    const key = (await t.newKey()).auth;
    const keyed = await bad('10.9.9.7', key);
    expectError(keyed, 400, 'contacts');
    expect(keyed.headers['x-ratelimit-remaining']).toBe('2');
    const mail = await t.call({ method: 'GET', url: '/api/v1/emails/%ZZ', auth: key });
    expectError(mail, 400, 'emails');
    expect(mail.headers['x-ratelimit-remaining']).toBe('1');
  });

  it('the docs page, its document and its files are limited per address', async () => {
    const docs = (url: string) => t.call({ method: 'GET', url, remoteAddress: '10.9.9.6' });
    const page = await docs('/docs');
    const json = await docs('/docs/json');
    const css = await docs('/docs/static/swagger-ui.css');
    expect([page, json, css].map((r) => r.statusCode)).toEqual([200, 200, 200]);
    for (const res of [page, json, css]) expectRateHeaders(res);
    expect([page, json, css].map((r) => r.headers['x-ratelimit-remaining'])).toEqual(['2', '1', '0']);
    expectError(await docs('/docs/json'), 429, 'contacts');
  });

  it('an unknown path counts against the key under /api/, and against the address elsewhere (docs/behaviour.md)', async () => {
    const key = (await t.newKey()).auth;
    const call = (url: string) => t.call({ method: 'GET', url, auth: key, remoteAddress: '10.9.9.5' });
    const outside = await call('/v1/lists');
    expectError(outside, 404, 'contacts');
    expect(outside.headers['x-ratelimit-remaining']).toBe('2');
    const under = await call('/api/v1/nope');
    expectError(under, 404, 'contacts');
    expect(under.headers['x-ratelimit-remaining']).toBe('2');
    // The key's budget and the address's, each used once more.
    expect((await call('/api/v1/lists')).headers['x-ratelimit-remaining']).toBe('1');
    expect((await call('/nope')).headers['x-ratelimit-remaining']).toBe('1');
  });
});

describe('the client address behind a proxy (TRUST_PROXY)', () => {
  /** Statuses of requests without a key from `remoteAddress`, each forwarded for the address given. */
  async function statuses(
    env: Record<string, string>,
    remoteAddress: string,
    forwardedFor: string[],
    url = '/api/v1/lists',
  ) {
    const t = await createTestApp('sqlite', { RATE_LIMIT_PER_MINUTE: '2', ...env });
    try {
      const out: number[] = [];
      for (const client of forwardedFor) {
        const res = await t.call({
          method: 'GET',
          url,
          remoteAddress,
          headers: { 'x-forwarded-for': client },
        });
        out.push(res.statusCode);
      }
      return out;
    } finally {
      await t.close();
    }
  }

  const sameClient = ['203.0.113.5', '203.0.113.5', '203.0.113.5'];
  const twoClients = ['203.0.113.5', '203.0.113.5', '203.0.113.6'];

  it('is the connection’s when unset: X-Forwarded-For is not believed', async () => {
    expect(await statuses({}, '10.0.0.1', twoClients)).toEqual([401, 401, 429]);
  });

  it('is the one the nearest proxy forwarded with TRUST_PROXY=1', async () => {
    expect(await statuses({ TRUST_PROXY: '1' }, '10.0.0.1', sameClient)).toEqual([401, 401, 429]);
    expect(await statuses({ TRUST_PROXY: '1' }, '10.0.0.1', twoClients)).toEqual([401, 401, 401]);
  });

  // Answered before routing (Fastify's frameworkErrors), they had the proxy's address: every client
  // behind it shared one budget for them (helper-142).
  it('is the forwarded one for a URL refused before routing too', async () => {
    const env = { TRUST_PROXY: '1' };
    expect(await statuses(env, '10.0.0.1', twoClients, '/api/v1/lists/%ZZ')).toEqual([400, 400, 400]);
    expect(await statuses(env, '10.0.0.1', sameClient, '/api/v1/lists/%ZZ')).toEqual([400, 400, 429]);
  });

  it('is forwarded only by the proxies listed, by address or range', async () => {
    const env = { TRUST_PROXY: '10.0.0.0/8, 192.0.2.7' };
    expect(await statuses(env, '10.1.2.3', twoClients)).toEqual([401, 401, 401]);
    expect(await statuses(env, '192.0.2.7', twoClients)).toEqual([401, 401, 401]);
    // Not a listed proxy: what it says it forwards is not believed.
    expect(await statuses(env, '192.0.2.8', twoClients)).toEqual([401, 401, 429]);
  });
});

describe("a connection's idle cut", () => {
  it('never comes before the 408 of a longer REQUEST_TIMEOUT_MS could be written', async () => {
    // Node cuts a connection quiet for server.timeout without an answer; a body paused past 60 s under
    // REQUEST_TIMEOUT_MS=120000 was cut so, with no 408. The 408 comes within 1.5 × the request timeout.
    for (const [timeout, idle] of [
      ['30000', 60_000],
      ['120000', 240_000],
    ] as const) {
      const t = await createTestApp('sqlite', { REQUEST_TIMEOUT_MS: timeout });
      try {
        expect(t.app.server.timeout).toBe(idle);
      } finally {
        await t.close();
      }
    }
  });
});

describe('a request target in absolute form (RFC 9112 3.2.2)', () => {
  it('is read by its path: no-store on /api/, and the key counted on unknown /api/ routes', async () => {
    const t = await createTestApp('sqlite', { RATE_LIMIT_PER_MINUTE: '5' });
    try {
      const { auth } = await t.newKey();
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = t.app.server.address() as net.AddressInfo;
      const ask = (target: string) =>
        new Promise<string>((resolve, reject) => {
          const socket = net.connect(port, '127.0.0.1');
          let answer = '';
          socket.on('data', (c: Buffer) => (answer += c.toString()));
          socket.on('end', () => resolve(answer));
          socket.on('error', reject);
          socket.write(
            `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: ${auth}\r\nConnection: close\r\n\r\n`,
          );
        });
      const listed = await ask(`http://127.0.0.1:${port}/api/v1/contacts?limit=1`);
      expect(listed).toMatch(/^HTTP\/1\.1 200 /);
      expect(listed).toMatch(/^cache-control: no-store\r$/im);
      const unknown = await ask(`http://127.0.0.1:${port}/api/v1/nope`);
      expect(unknown).toMatch(/^HTTP\/1\.1 404 /);
      expect(unknown).toMatch(/^cache-control: no-store\r$/im);
      // Counted against the key, as the same path in origin form is: the key's third request.
      expect(unknown).toMatch(/^x-ratelimit-remaining: 3\r$/im);
      expect(originForm('https://h')).toBe('/');
      expect(originForm('http://h?x=1')).toBe('/?x=1');
      expect(originForm('/api/v1/lists')).toBe('/api/v1/lists');
    } finally {
      await t.close();
    }
  });
});

describe('a transfer coding other than chunked (RFC 9112 6.1)', () => {
  it('is a 501 naming Transfer-Encoding, given before the body is read; chunked alone is fine', async () => {
    const t = await createTestApp('sqlite');
    try {
      const { auth } = await t.newKey();
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = t.app.server.address() as net.AddressInfo;
      const post = async (url: string, coding: string, body: Buffer) => {
        const client = connect(port);
        const chunk = Buffer.concat([
          Buffer.from(`${body.length.toString(16)}\r\n`),
          body,
          Buffer.from('\r\n0\r\n\r\n'),
        ]);
        await client.write(
          `POST ${url} HTTP/1.1\r\nHost: x\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\n` +
            `Transfer-Encoding: ${coding}\r\nConnection: close\r\n\r\n`,
        );
        await client.write(chunk);
        await client.closed;
        const answer = client.answer();
        return {
          status: statuses(answer)[0],
          body: jsonBody<{ success?: boolean; list?: { name: string } }>(answer),
        };
      };
      const gz = await post('/api/v1/emails', 'gzip, chunked', gzipSync('{"name":"gz"}'));
      expect(gz).toEqual({
        status: 501,
        body: {
          error: 'Transfer-Encoding gzip, chunked is not supported',
          details: [{ field: 'Transfer-Encoding', message: expect.any(String) }],
          requestId: expect.any(String),
        },
      });
      const list = await post('/api/v1/lists', 'gzip, chunked', gzipSync('{"name":"gz"}'));
      expect([list.status, list.body.success]).toEqual([501, false]);
      const doc = (await t.call({ method: 'GET', url: '/api/v1/openapi.json' })).json();
      expect(doc.paths['/api/v1/emails'].post.responses['501'].description).toMatch(/Transfer-Encoding/);
      expect(doc.paths['/api/v1/emails'].get.responses['501']).toBeUndefined();
      // A DELETE may carry a body too, and be answered so.
      expect(doc.paths['/api/v1/contacts'].delete.responses['501']).toBeDefined();
      const plain = await post('/api/v1/lists', 'Chunked', Buffer.from('{"name":"plain"}'));
      expect([plain.status, plain.body.list?.name]).toEqual([201, 'plain']);
      // An empty element of the list is none (RFC 9110 5.6.1), as Node reads it.
      const listed = await post('/api/v1/lists', ' , chunked', Buffer.from('{"name":"listed"}'));
      expect([listed.status, listed.body.list?.name]).toEqual([201, 'listed']);
    } finally {
      await t.close();
    }
  });
});

describe('a CONNECT request (a proxy tunnel)', () => {
  it('is an unknown route: a 404 in JSON, then the connection closes', async () => {
    const t = await createTestApp('sqlite');
    try {
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = t.app.server.address() as net.AddressInfo;
      const client = connect(port);
      await client.write('CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n');
      await client.closed;
      const answer = client.answer();
      expect(answer).toMatch(/^HTTP\/1\.1 404 Not Found\r\n/);
      expect(jsonBody(answer)).toEqual({
        success: false,
        error: 'Route CONNECT example.com:443 not found',
      });
      // A client that resets the connection as its answer is written: the error it meets is the socket's
      // own, not one thrown out of the process (Node took its listener off this socket).
      for (let i = 0; i < 20; i++) {
        const reset = net.connect(port, '127.0.0.1');
        reset.on('error', () => undefined);
        await new Promise<void>((resolve) => reset.once('connect', resolve));
        reset.write(`CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n${'x'.repeat(100_000)}`);
        reset.resetAndDestroy();
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect((await t.call({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    } finally {
      await t.close();
    }
  });
});

describe('a path with letters percent-encoded (RFC 3986 2.3)', () => {
  it('is read as the router reads it: no-store on /api/, and the error body of its family', async () => {
    const t = await createTestApp('sqlite');
    try {
      const { auth } = await t.newKey();
      const listed = await t.call({ method: 'GET', url: '/%61pi/v1/lists', auth });
      expect(listed.statusCode).toBe(200);
      expect(listed.headers['cache-control']).toBe('no-store');
      const id = '01a23d94-993e-7518-b31d-688b2656a36c';
      const unknownRoute = await t.call({ method: 'POST', url: `/api/v1/%65mails/${id}`, auth });
      expect([unknownRoute.statusCode, unknownRoute.json()]).toEqual([
        404,
        { error: `Route POST /api/v1/emails/${id} not found` },
      ]);
      const unknownId = await t.call({ method: 'GET', url: `/api/v1/%65m%61ils/${id}`, auth });
      expect([unknownId.statusCode, unknownId.json()]).toEqual([404, { error: `Email ${id} not found` }]);
      const broken = await t.call({ method: 'GET', url: '/api/v1/%65mails/%zz', auth });
      expect(broken.statusCode).toBe(400);
      expect(broken.json()).not.toHaveProperty('success');
      // Only unreserved characters: an encoded slash stays one character of the id; the query is as sent.
      const slash = await t.call({ method: 'GET', url: '/api/v1/lists/a%2Fb', auth });
      expect([slash.statusCode, slash.json()]).toMatchObject([404, { success: false }]);
      const query = await t.call({ method: 'GET', url: '/api/v1/contacts?email=%25', auth });
      expect(query.statusCode).toBe(200);
      expect(routedTarget('/%61pi/v1/lists?email=%61')).toBe('/api/v1/lists?email=%61');
    } finally {
      await t.close();
    }
  });
});

describe('the Host header (RFC 9112 3.2)', () => {
  /** Sends the request head (and body) with the key on a connection of its own; its answer, and body parsed. */
  const asker =
    (port: number, auth: string) =>
    async (head: string, body = '') => {
      const client = connect(port);
      await client.write(`${head}\r\nAuthorization: ${auth}\r\nConnection: close\r\n\r\n${body}`);
      await client.closed;
      const answer = client.answer();
      return { answer, body: jsonBody(answer) };
    };

  it("missing from HTTP/1.1 is a 400 in the contract's shape, counted, on a known route, an unknown one and /health", async () => {
    const t = await createTestApp('sqlite', { RATE_LIMIT_PER_MINUTE: '8' });
    try {
      const { auth } = await t.newKey();
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = t.app.server.address() as net.AddressInfo;
      const ask = asker(port, auth);
      const hostDetail = { field: 'Host', message: 'is required in an HTTP/1.1 request' };
      // Paths the router refuses before any hook runs (an id past its length, broken %-encoding) too.
      const paths = ['/api/v1/lists', '/api/v1/nope', '/health', `/api/v1/lists/${'a'.repeat(3000)}`, '/%zz'];
      for (const path of paths) {
        const { answer, body } = await ask(`GET ${path} HTTP/1.1`);
        expect(answer, path).toMatch(/^HTTP\/1\.1 400 /);
        expect(answer, path).toMatch(/^content-type: application\/json/im);
        expect(body, path).toMatchObject({ success: false, details: [hostDetail] });
      }
      // A probe's answer shows its address's standing, this one too (a probe is not counted).
      expect((await ask('GET /health HTTP/1.1')).answer).toMatch(/^x-ratelimit-remaining: \d+\r$/im);
      const sent = await ask(
        'POST /api/v1/emails HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2',
        '{}',
      );
      expect(sent.answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(sent.body).toMatchObject({ details: [hostDetail] });
      expect(sent.body).not.toHaveProperty('success');
      // Counted against the key like any request: the key's fourth API request of eight.
      expect(sent.answer).toMatch(/^x-ratelimit-remaining: 4\r$/im);
      // HTTP/1.0 has no Host requirement.
      expect((await ask('GET /api/v1/lists HTTP/1.0')).answer).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      await t.close();
    }
  });

  it('two Host lines, or one that is no host, are a 400 in any version; an empty Host is fine', async () => {
    const t = await createTestApp('sqlite');
    try {
      const { auth } = await t.newKey();
      await t.app.listen({ port: 0, host: '127.0.0.1' });
      const { port } = t.app.server.address() as net.AddressInfo;
      const ask = asker(port, auth);
      // The same clause of RFC 9112 as a missing Host.
      const refused = {
        'Host: a\r\nHost: b': 'must be sent once',
        'Host: a b': 'must be a host name or address, and a port if any',
        'Host: [::1': 'must be a host name or address, and a port if any',
        'Host: a:b': 'must be a host name or address, and a port if any',
      };
      for (const [header, message] of Object.entries(refused)) {
        for (const version of ['1.1', '1.0']) {
          const { answer, body } = await ask(`GET /api/v1/lists HTTP/${version}\r\n${header}`);
          expect(answer, header).toMatch(/^HTTP\/1\.1 400 /);
          expect(body, header).toMatchObject({ details: [{ field: 'Host', message }] });
        }
      }
      for (const header of ['Host: [::1]:3000', 'Host: my_box.local:80', 'Host: 10.0.0.7', 'Host:']) {
        expect((await ask(`GET /health HTTP/1.1\r\n${header}`)).answer, header).toMatch(/^HTTP\/1\.1 200 /);
      }
    } finally {
      await t.close();
    }
  });
});
