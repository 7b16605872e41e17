// Edges a careful client hits: JSON content type on body-less calls, blank names, null for optional strings,
// prototype keys, header field names, deep nesting, one detail per field, and what the OpenAPI document asks
// clients to send.
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TestApp, createTestApp } from '../helpers/app.js';
import {
  createContact,
  createList,
  expect400,
  expectError,
  expectRateHeaders,
  uniqueEmail,
} from '../helpers/api.js';
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

  it('null for an optional field means none, on create and update', async () => {
    const contact = await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      payload: {
        email: uniqueEmail(),
        firstName: null,
        lastName: null,
        tags: null,
        customFields: null,
        unsubscribed: null,
      },
    });
    expect(contact.statusCode, contact.body).toBe(201);
    expect(contact.json().contact).toMatchObject({
      firstName: null,
      lastName: null,
      tags: [],
      customFields: {},
      unsubscribed: false,
    });
    const id = contact.json().contact.id as string;
    // On update, null clears a field that can be cleared, and means "not given" for the identifying ones.
    const named = await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id, email: null, firstName: 'Ann' },
    });
    expect(named.statusCode, named.body).toBe(200);
    expect(named.json().contact).toMatchObject({ firstName: 'Ann', email: contact.json().contact.email });
    const cleared = await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id, firstName: null },
    });
    expect(cleared.json().contact.firstName).toBeNull();
    // Tags and custom fields cannot be null; there null means "not given", and they are kept.
    await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id, tags: ['vip'], customFields: { plan: 'pro' }, unsubscribed: true },
    });
    const kept = await t.call({
      method: 'PUT',
      url: '/api/v1/contacts',
      auth,
      payload: { id, tags: null, customFields: null, unsubscribed: null, lastName: 'Lee' },
    });
    expect(kept.json().contact).toMatchObject({
      tags: ['vip'],
      customFields: { plan: 'pro' },
      unsubscribed: true,
      lastName: 'Lee',
    });
    const list = await createList(t, auth, 'Kept');
    const renamed = await t.call({
      method: 'PUT',
      url: `/api/v1/lists/${list}`,
      auth,
      payload: { name: null, description: 'd' },
    });
    expect(renamed.json().list).toMatchObject({ name: 'Kept', description: 'd' });
    const mail = {
      to: 'a@example.com',
      subject: 's',
      text: 't',
      html: null,
      from: null,
      cc: null,
      bcc: null,
      replyTo: null,
      headers: null,
      tags: null,
    };
    const sent = await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: mail });
    expect(sent.statusCode, sent.body).toBe(200);
    const stored = await t.call({ method: 'GET', url: `/api/v1/emails/${sent.json().id}`, auth });
    expect(stored.json()).toMatchObject({ cc: [], bcc: [], replyTo: [], tags: [] });
    // A required string is still required.
    expect400(
      await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: { ...mail, subject: null } }),
      'emails',
      ['subject'],
    );
    const doc = (await t.call({ method: 'GET', url: '/api/v1/openapi.json' })).json();
    const create = doc.paths['/api/v1/contacts'].post.requestBody.content['application/json'].schema;
    expect(create.properties.firstName.type).toEqual(['string', 'null']);
    expect(create.properties.tags.type).toEqual(['array', 'null']);
    expect(create.properties.email.type).toBe('string');
    const send = doc.paths['/api/v1/emails'].post.requestBody.content['application/json'].schema;
    expect(send.properties.cc.anyOf).toContainEqual({ type: 'null' });
    expect(send.properties.to.anyOf).not.toContainEqual({ type: 'null' });
  });

  it('a body nested 10,000 levels deep is a 400 naming the field, on every route with a body', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const list = await createList(t, auth);
    const cases: [string, string, string, string, 'contacts' | 'emails'][] = [
      ['POST', '/api/v1/lists', '{"name":%}', 'name', 'contacts'],
      ['PUT', `/api/v1/lists/${list}`, '{"description":%}', 'description', 'contacts'],
      ['POST', `/api/v1/lists/${list}/contacts`, '{"contactIds":%}', 'contactIds[0]', 'contacts'],
      ['DELETE', `/api/v1/lists/${list}/contacts`, '{"contactIds":[%]}', 'contactIds[0]', 'contacts'],
      [
        'POST',
        '/api/v1/contacts',
        '{"email":"d@example.com","customFields":{"a":%}}',
        'customFields.a',
        'contacts',
      ],
      ['PUT', '/api/v1/contacts', '{"email":"d@example.com","tags":%}', 'tags[0]', 'contacts'],
      ['POST', '/api/v1/emails', '{"to":%,"subject":"s","text":"t"}', 'to[0]', 'emails'],
      ['POST', '/api/v1/emails', '{"to":"a@example.com","subject":%,"text":"t"}', 'subject', 'emails'],
    ];
    for (const [method, url, template, field, fam] of cases) {
      const payload = template.replace('%', deep(10_000));
      const res = await t.call({
        method: method as 'POST',
        url,
        auth,
        payload,
        headers: { 'content-type': 'application/json' },
      });
      expect400(res, fam, [field]);
      expectRateHeaders(res);
    }
    // A field that is not allowed is told so, once: not also that what it holds is nested too deep.
    for (const [url, body, fam] of [
      ['/api/v1/lists', '{"name":"n","extra":%}', 'contacts'],
      ['/api/v1/emails', '{"to":"a@example.com","subject":"s","text":"t","extra":{"a":%}}', 'emails'],
    ] as const) {
      const res = await t.call({
        method: 'POST',
        url,
        auth,
        payload: body.replace('%', deep(40)),
        headers: { 'content-type': 'application/json' },
      });
      expect400(res, fam, ['extra']);
      expect(res.json().details).toEqual([{ field: 'extra', message: 'is not an allowed field' }]);
    }
    // A million levels (2 MB) too: nothing on the way walks it recursively or serialises it.
    const fields = `{"email":"deep@example.com","customFields":{"a":${deep(1_000_000)}}}`;
    const res = await t.call({
      method: 'POST',
      url: '/api/v1/contacts',
      auth,
      payload: fields,
      headers: { 'content-type': 'application/json' },
    });
    expect400(res, 'contacts', ['customFields.a']);
  });

  it('a huge object or array is a 400 naming its field, not a 500; a long list of problems is cut at 100', async () => {
    const many = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));
    const post = (url: string, payload: object) => t.call({ method: 'POST', url, auth, payload });
    // A detail for each entry overflowed the stack (a 500) past ~125,000, and checking each one held the
    // event loop for seconds.
    const fields = Object.fromEntries(many(130_000, (i) => [`f${i}`, 1] as const));
    const cases: [string, object, string, 'contacts' | 'emails'][] = [
      ['/api/v1/lists', { name: 'x', ...fields }, 'f0', 'contacts'],
      ['/api/v1/contacts', { email: uniqueEmail(), tags: many(200_000, (i) => i) }, 'tags', 'contacts'],
      [
        '/api/v1/contacts',
        {
          email: uniqueEmail(),
          customFields: Object.fromEntries(many(200_000, (i) => [`k${i}`, 1] as const)),
        },
        'customFields',
        'contacts',
      ],
      ['/api/v1/emails', { to: many(150_000, (i) => `bad${i}`), subject: 's', text: 'x' }, 'to', 'emails'],
      // Many containers each under 1,000 entries: a million in all took over a minute to check one by one.
      [
        '/api/v1/emails',
        {
          to: 'a@example.com',
          subject: 's',
          text: 'x',
          tags: many(999, () => Object.fromEntries(many(999, (i) => [`k${i}`, 0] as const))),
        },
        'tags',
        'emails',
      ],
      // null is "none" there too, so the field at fault is named, not `tags: null`.
      [
        '/api/v1/contacts',
        {
          email: uniqueEmail(),
          tags: null,
          customFields: Object.fromEntries(many(3_000, (i) => [`k${i}`, 1] as const)),
        },
        'customFields',
        'contacts',
      ],
    ];
    for (const [url, payload, field, family] of cases) {
      const res = await post(url, payload);
      expectError(res, 400, family);
      const details = res.json().details as { field: string }[];
      expect(details.length, url).toBeLessThanOrEqual(3);
      expect(
        details.map((d) => d.field),
        url,
      ).toContain(field);
    }
    // Under that size, every problem is still checked, and the first 100 are listed.
    const unknown = await post('/api/v1/lists', {
      name: 'x',
      ...Object.fromEntries(many(900, (i) => [`u${i}`, 1] as const)),
    });
    const details = unknown.json().details as { field: string; message: string }[];
    expect(details).toHaveLength(101);
    expect(details[0]).toEqual({ field: 'u0', message: 'is not an allowed field' });
    expect(details[100]).toEqual({ field: 'body', message: 'and 800 more problems not listed' });
  });

  it('a query parameter given twice is a 400 saying so, not that it has the wrong type', async () => {
    for (const [url, field] of [
      ['/api/v1/contacts?limit=2&limit=3', 'limit'],
      ['/api/v1/contacts?unsubscribed=true&unsubscribed=false', 'unsubscribed'],
      ['/api/v1/contacts?email=a&email=b', 'email'],
      ['/api/v1/emails?status=sent&status=failed', 'status'],
    ] as const) {
      const res = await t.call({ method: 'GET', url, auth });
      expect400(res, url.startsWith('/api/v1/emails') ? 'emails' : 'contacts', [field]);
      expect(res.json().details[0].message, url).toBe('must be given once');
    }
  });

  it('names each offending field once, with its most telling message', async () => {
    const detailsOf = (res: LightMyRequestResponse, fam: 'contacts' | 'emails') => {
      expectError(res, 400, fam);
      return res.json().details as { field: string; message: string }[];
    };
    const post = (url: string, payload: object) => t.call({ method: 'POST', url, auth, payload });
    expect(detailsOf(await post('/api/v1/lists', { name: '' }), 'contacts')).toEqual([
      { field: 'name', message: 'must not be empty' },
    ]);
    expect(detailsOf(await post('/api/v1/contacts', { email: '' }), 'contacts')).toEqual([
      { field: 'email', message: 'must not be empty' },
    ]);
    const mail = { to: 'a@example.com', subject: 's', text: 't' };
    expect(detailsOf(await post('/api/v1/emails', { ...mail, from: ['x@localhost'] }), 'emails')).toEqual([
      { field: 'from', message: 'must be a string' },
    ]);
    expect(detailsOf(await post('/api/v1/emails', { ...mail, headers: { 'X-A\n': 'v' } }), 'emails')).toEqual(
      [
        {
          field: 'headers.X-A\n',
          message: 'is not a valid header name: at most 100 printable ASCII characters, without `:`',
        },
      ],
    );
    expect(
      detailsOf(
        await post('/api/v1/emails', { ...mail, headers: { [`X-${'a'.repeat(99)}`]: 'v' } }),
        'emails',
      ),
    ).toEqual([
      {
        field: `headers.X-${'a'.repeat(99)}`,
        message: 'is not a valid header name: at most 100 printable ASCII characters, without `:`',
      },
    ]);
    // Different fields are all still named, each once.
    const many = await post('/api/v1/contacts', { email: 'bad', firstName: 1, tags: [''] });
    expect(
      detailsOf(many, 'contacts')
        .map((d) => d.field)
        .sort(),
    ).toEqual(['email', 'firstName', 'tags[0]']);
  });

  it('names __proto__ keys as the problem, not as bad JSON', async () => {
    const raw = (payload: string) =>
      t.call({
        method: 'POST',
        url: '/api/v1/contacts',
        auth,
        headers: { 'content-type': 'application/json' },
        payload,
      });
    const res = await raw('{"email":"p@example.com","customFields":{"__proto__":{"x":1}}}');
    // Named where it is, as any offending value is.
    expect400(res, 'contacts', ['customFields.__proto__']);
    expect(res.json().error).toMatch(/forbidden key/);
    const nested = await raw('{"email":"p@example.com","tags":["a",{"constructor":{"prototype":1}}]}');
    expect400(nested, 'contacts', ['tags[1].constructor']);
    // Broken JSON that happens to hold such a key is broken JSON.
    const broken = await raw('{"email":"p@example.com","constructor":"x",}');
    expect400(broken, 'contacts', ['body']);
    expect(broken.json().error).toBe('Request body is not valid JSON');
    // In a body past 64 KiB the key is not looked for by path (a second parse and a walk of every key of a
    // 10 MiB body held the server for seconds): the body is named.
    const big = await raw(`{"email":"p@example.com","x":[${'{},'.repeat(30_000)}{"__proto__":1}]}`);
    expect400(big, 'contacts', ['body']);
    expect(big.json().error).toMatch(/forbidden key/);
    // A big body that is broken JSON is broken JSON, whatever keys it holds.
    const bigBroken = await raw(`{"email":"p@example.com","constructor":"x","n":"${'a'.repeat(70_000)}",}`);
    expect400(bigBroken, 'contacts', ['body']);
    expect(bigBroken.json().error).toBe('Request body is not valid JSON');
  });

  it('answers an unknown route 404 without parsing its JSON body, whatever it holds', async () => {
    // Parsed, a 10 MiB body held the event loop for seconds, with no key asked for.
    for (const [method, url] of [
      ['POST', '/nope'],
      ['POST', '/api/v1/nope'],
      ['PUT', '/api/v1/emails'],
    ] as const) {
      for (const payload of ['{"a":', '{"__proto__":1}', '{"a":1}']) {
        const res = await t.call({ method, url, headers: { 'content-type': 'application/json' }, payload });
        expectError(res, 404, url.startsWith('/api/v1/emails') ? 'emails' : 'contacts');
      }
    }
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
    for (const name of ['page', 'limit']) {
      const param = params.find((p) => p.name === name);
      expect(param, name).toBeDefined();
      expect(param!.required).not.toBe(true);
    }
  });
});
