// Emails: the send answer, the stored record, paging and the status filter, and the numeric bounds.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { ISO_MS, UUID, addressOfLength, expect400, expectError, useApp, x } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';
import { hashOf } from '../../src/emails/emails.service.js';

const base = { to: 'a@example.com', subject: 'Hi', text: 'Hello' };
const many = (n: number, p = 'r') => Array.from({ length: n }, (_, i) => `${p}${i}@example.com`);

describe.each(storeKinds())('emails on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const send = (payload: object, key = auth) =>
    t.call({ method: 'POST', url: '/api/v1/emails', auth: key, payload });
  /** A send with an Idempotency-Key, by the API key `as`. */
  const sendWithKey = (as: string, payload: object, key: string) =>
    t.call({ method: 'POST', url: '/api/v1/emails', auth: as, payload, headers: { 'idempotency-key': key } });

  it('POST answers 200 {id (UUID), message} with no success field', async () => {
    const res = await send(base);
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['id', 'message']);
    expect(body.id).toMatch(UUID);
    expect(body.message).toBe('Email queued for delivery');
  });

  it('GET /api/v1/emails/:id returns the stored record', async () => {
    const payload = {
      to: ['Ann <ann@example.com>', 'bob@example.com'],
      cc: 'cc@example.com',
      bcc: ['bcc@example.com'],
      replyTo: 'reply@example.com',
      subject: 'Report',
      html: '<p>Hi</p>',
      headers: { 'X-Campaign': 'spring' },
      tags: [{ name: 'kind', value: 'report' }],
    };
    const { id } = (await send(payload)).json();
    const res = await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(
      [
        'id',
        'status',
        'from',
        'to',
        'cc',
        'bcc',
        'replyTo',
        'subject',
        'tags',
        'createdAt',
        'updatedAt',
        'attempts',
        'lastError',
        'recipients',
        'events',
      ].sort(),
    );
    expect(body).toMatchObject({
      id,
      status: 'queued',
      to: ['Ann <ann@example.com>', 'bob@example.com'],
      cc: ['cc@example.com'],
      bcc: ['bcc@example.com'],
      replyTo: ['reply@example.com'],
      subject: 'Report',
      tags: [{ name: 'kind', value: 'report' }],
      attempts: 0,
      lastError: null,
    });
    expect(typeof body.from).toBe('string');
    expect(body.createdAt).toMatch(ISO_MS);
    expect(body.updatedAt).toMatch(ISO_MS);
    expect(body.recipients).toEqual([
      { email: 'ann@example.com', status: 'queued', response: null },
      { email: 'bob@example.com', status: 'queued', response: null },
      { email: 'cc@example.com', status: 'queued', response: null },
      { email: 'bcc@example.com', status: 'queued', response: null },
    ]);
    expect(body.events.length).toBeGreaterThan(0);
    expect(Object.keys(body.events[0]).sort()).toEqual(['at', 'detail', 'type']);
    expect(body.events[0].type).toBe('queued');
    expect(body.events[0].at).toMatch(ISO_MS);
  });

  it("lists an email's events by the time each gives, whichever host's clock made its id", async () => {
    const { id } = (await send({ to: 'events@example.com', subject: 'Order', text: 't' })).json();
    // As a worker whose host's clock ran behind would write it: an id older than the email's, a later time.
    await t.ts.store.write((trx) =>
      trx
        .insertInto('email_events')
        .values({
          id: '00000000-0000-7000-8000-000000000001',
          email_id: id,
          type: 'sending',
          at: '2999-01-01T00:00:00.000Z',
          detail: 'attempt 1',
        })
        .execute(),
    );
    const res = await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth });
    expect(res.json().events.map((e: { type: string }) => e.type)).toEqual(['queued', 'sending']);
  });

  it('GET an email by its id in upper case answers its record, its id as made (lower case)', async () => {
    const { id } = (await send({ to: 'upper@example.com', subject: 'Case', text: 't' })).json();
    const upper = await t.call({ method: 'GET', url: `/api/v1/emails/${String(id).toUpperCase()}`, auth });
    expect(upper.statusCode, upper.body).toBe(200);
    expect(upper.json()).toMatchObject({ id, subject: 'Case', to: ['upper@example.com'] });
  });

  it('GET an unknown email is a 404 in the emails error shape', async () => {
    const unknown = '0190b5a4-0000-7000-8000-000000000000';
    expectError(await t.call({ method: 'GET', url: `/api/v1/emails/${unknown}`, auth }), 404, 'emails');
    expectError(await t.call({ method: 'GET', url: '/api/v1/emails/not-a-uuid', auth }), 404, 'emails');
  });

  it('GET /api/v1/emails pages newest first and filters by status', async () => {
    const { auth: own } = await t.newKey();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await send({ ...base, subject: `s${i}` }, own)).json().id);
    const page = (query: Record<string, string>) =>
      t.call({ method: 'GET', url: '/api/v1/emails', auth: own, query });
    const all = await page({});
    expect(all.statusCode).toBe(200);
    expect(Object.keys(all.json()).sort()).toEqual(['emails', 'pagination']);
    expect(all.json().pagination).toEqual({ page: 1, limit: 20, total: 5, pages: 1 });
    expect(all.json().emails.map((e: { id: string }) => e.id)).toEqual([...ids].reverse());
    expect(all.json().emails[0]).not.toHaveProperty('recipients');
    expect(all.json().emails[0]).not.toHaveProperty('events');
    const p1 = (await page({ limit: '2', page: '1' })).json();
    const p3 = (await page({ limit: '2', page: '3' })).json();
    expect(p1.pagination).toEqual({ page: 1, limit: 2, total: 5, pages: 3 });
    expect(p1.emails.map((e: { id: string }) => e.id)).toEqual([ids[4], ids[3]]);
    expect(p3.emails.map((e: { id: string }) => e.id)).toEqual([ids[0]]);
    expect(p3.pagination).toEqual({ page: 3, limit: 2, total: 5, pages: 3 });
    // Pages after the first find their ids first (emails.repository.ts newestFirst): the same rows.
    for (const query of [{}, { status: 'queued' }] as Record<string, string>[]) {
      const p2 = (await page({ ...query, limit: '2', page: '2' })).json();
      expect(p2.emails.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]]);
      expect(p2.pagination).toEqual({ page: 2, limit: 2, total: 5, pages: 3 });
      expect(p2.emails[0]).toEqual(all.json().emails[2]);
    }
    // A page with rows carries its total; an empty one past the end reads it alone.
    for (const query of [{}, { status: 'queued' }] as Record<string, string>[]) {
      const past = (await page({ ...query, limit: '2', page: '4' })).json();
      expect(past).toEqual({ emails: [], pagination: { page: 4, limit: 2, total: 5, pages: 3 } });
    }
    expect((await page({ status: 'queued' })).json().pagination.total).toBe(5);
    expect((await page({ status: 'sent' })).json()).toMatchObject({ emails: [], pagination: { total: 0 } });
    // Empty, as query builders send an unset field: every status, as `?tag=` is on contacts.
    expect((await page({ status: '' })).json().pagination.total).toBe(5);
    const bogus = await page({ status: 'bogus' });
    expect400(bogus, 'emails', ['status']);
    expect(bogus.json().details[0].message).toBe('must be one of: queued, sending, sent, deferred, failed');
    expect400(await page({ limit: '101' }), 'emails', ['limit']);
    expect400(await page({ page: '0' }), 'emails', ['page']);
  });

  it('Idempotency-Key: the same body answers the first response, another body is a 409', async () => {
    const { auth: own } = await t.newKey();
    const post = (payload: object, key: string) => sendWithKey(own, payload, key);
    const first = await post(base, 'k-1');
    const again = await post({ ...base }, 'k-1');
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first.json());
    expectError(await post({ ...base, subject: 'other' }, 'k-1'), 409, 'emails');
    const list = await t.call({ method: 'GET', url: '/api/v1/emails', auth: own });
    expect(list.json().pagination.total).toBe(1);
    expect((await post(base, 'k-2')).json().id).not.toBe(first.json().id);
    // Compared as sent, less fields set to null (docs/behaviour.md, "Idempotency"): `cc: null` is the same body, a
    // one-address array in place of the string another.
    expect((await post({ ...base, cc: null }, 'k-1')).json()).toEqual(first.json());
    expectError(await post({ ...base, to: [base.to] }, 'k-1'), 409, 'emails');
    expect400(await post(base, x(257)), 'emails', ['Idempotency-Key']);
    expect((await post(base, x(256))).statusCode).toBe(200);
    // Sent twice, Node would join the two into one key, "k-3, k-4", that neither retry sends alone.
    const twice = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth: own,
      payload: base,
      headers: { 'idempotency-key': ['k-3', 'k-4'] },
    });
    expect400(twice, 'emails', ['Idempotency-Key']);
    // Told together with what is wrong with the body (helper-94: only the body's fields were named).
    const both = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth: own,
      payload: { to: base.to },
      headers: { 'idempotency-key': ['k-3', 'k-4'] },
    });
    expect400(both, 'emails', ['Idempotency-Key', 'subject', 'html']);
    expect(both.json().details[0]).toEqual({ field: 'Idempotency-Key', message: 'must be sent once' });
    const longAndBad = await post({ ...base, to: 7 }, x(257));
    expect400(longAndBad, 'emails', ['Idempotency-Key', 'to']);
    expect((await t.call({ method: 'GET', url: '/api/v1/emails', auth: own })).json().pagination.total).toBe(
      3,
    );
  });

  it('Idempotency-Key: a retry of a body an earlier release accepted gets its first answer, not a 400', async () => {
    const { auth: own } = await t.newKey();
    const post = (payload: object, key: string) => sendWithKey(own, payload, key);
    // Accepted before List-* values had to be printable ASCII (helper-114: its retry, after an upgrade or
    // to a newer process of a rolling deploy, was refused, and a client would send it again under a new key).
    const old = { ...base, headers: { 'List-Unsubscribe': '<https://ex.test/ü>' }, cc: null };
    const first = await post(base, 'k-old');
    // The key's record as that release left it: the digest of that body, as its validator handed it on.
    const { cc: _none, ...validated } = old;
    await t.ts.store.write((trx) =>
      trx
        .updateTable('idempotency_keys')
        .set({ request_hash: hashOf(validated) })
        .where('key', '=', 'k-old')
        .execute(),
    );
    const again = await post(old, 'k-old');
    expect(again.statusCode, again.body).toBe(200);
    expect(again.json()).toEqual(first.json());
    // Today's rules still refuse it under another key, and another body under that one.
    expect400(await post(old, 'k-new'), 'emails', ['headers.List-Unsubscribe']);
    expect400(await post({ ...old, subject: '   ' }, 'k-old'), 'emails', [
      'subject',
      'headers.List-Unsubscribe',
    ]);
    // A body no valid request could be is refused without a look (helper-116: its digest, nested 200,000
    // deep, overflowed the stack: a 500).
    const deep = `{"to":"a@example.com","subject":"Hi","text":"Hello","tags":${'['.repeat(200_000)}${']'.repeat(200_000)}}`;
    expect400(
      await t.call({
        method: 'POST',
        url: '/api/v1/emails',
        auth: own,
        payload: deep,
        headers: { 'idempotency-key': 'k-old', 'content-type': 'application/json' },
      }),
      'emails',
      ['tags[0]'],
    );
    const list = await t.call({ method: 'GET', url: '/api/v1/emails', auth: own });
    expect(list.json().pagination.total).toBe(1);
  });

  it('Idempotency-Key: its 256 characters are characters, not the bytes that carry them', async () => {
    // Node hands a header's bytes over one character each (Latin-1), as a client's UTF-8 arrives.
    const asSent = (key: string) => Buffer.from(key).toString('latin1');
    const post = (key: string) =>
      t.call({
        method: 'POST',
        url: '/api/v1/emails',
        auth,
        payload: base,
        headers: { 'idempotency-key': key },
      });
    const first = await post(asSent('к'.repeat(256)));
    expect(first.statusCode, first.body).toBe(200);
    expect((await post(asSent('к'.repeat(256)))).json().id).toBe(first.json().id);
    const long = await post(asSent('к'.repeat(257)));
    expect400(long, 'emails', ['Idempotency-Key']);
    expect(long.json().details[0].message).toBe('must be at most 256 characters');
    expect400(await post(x(1500)), 'emails', ['Idempotency-Key']);
    // Bytes that are not UTF-8 are counted one character each.
    expect((await post('\xe9'.repeat(256))).statusCode).toBe(200);
    expect400(await post('\xe9'.repeat(257)), 'emails', ['Idempotency-Key']);
  });

  it('an expired Idempotency-Key sent again by several requests at once makes one new email', async () => {
    const { auth: own } = await t.newKey();
    const post = (key: string) =>
      t.call({
        method: 'POST',
        url: '/api/v1/emails',
        auth: own,
        payload: base,
        headers: { 'idempotency-key': key },
      });
    const rounds = 20;
    for (let round = 0; round < rounds; round++) {
      const key = `expiring-${round}`;
      const first = (await post(key)).json().id as string;
      // 25 hours old: past the 24 h the key is kept.
      await t.ts.store.write((trx) =>
        trx
          .updateTable('idempotency_keys')
          .set({ created_at: new Date(Date.now() - 25 * 3600_000).toISOString() })
          .where('key', '=', key)
          .execute(),
      );
      const answers = await Promise.all(Array.from({ length: 6 }, () => post(key)));
      for (const r of answers) expect(r.statusCode, r.body).toBe(200);
      const ids = new Set(answers.map((r) => r.json().id as string));
      expect(ids.size).toBe(1);
      expect(ids.has(first)).toBe(false);
    }
    const list = await t.call({ method: 'GET', url: '/api/v1/emails?limit=100', auth: own });
    expect(list.json().pagination.total).toBe(2 * rounds);
  });

  it('from outside the MAIL_FROM domain is replaced by MAIL_FROM', async () => {
    const { id } = (await send({ ...base, from: 'Boss <boss@elsewhere.example>' })).json();
    const got = await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth });
    expect(got.json().from).toBe('Mailroom <noreply@localhost>');
    expect400(await send({ ...base, from: 'not an address' }), 'emails', ['from']);
  });

  describe('bounds', () => {
    it('an address of 254 characters is accepted, 255 refused', async () => {
      expect((await send({ ...base, to: addressOfLength(254) })).statusCode).toBe(200);
      expect400(await send({ ...base, to: [base.to, addressOfLength(255)] }), 'emails', ['to[1]']);
      expect400(await send({ ...base, cc: `Name <${addressOfLength(255)}>` }), 'emails', ['cc']);
    });

    it('subject 998 accepted, 999 refused; empty refused', async () => {
      expect((await send({ ...base, subject: x(998) })).statusCode).toBe(200);
      expect400(await send({ ...base, subject: x(999) }), 'emails', ['subject']);
      expect400(await send({ ...base, subject: '' }), 'emails', ['subject']);
    });

    it('50 to accepted, 51 refused', async () => {
      expect((await send({ ...base, to: many(50) })).statusCode).toBe(200);
      expect400(await send({ ...base, to: many(51) }), 'emails', ['to']);
      expect400(await send({ ...base, to: [] }), 'emails', ['to']);
      expect((await send({ ...base, cc: [], bcc: [], replyTo: [] })).statusCode).toBe(200);
    });

    it('cc + bcc: 50 together accepted, 51 refused', async () => {
      expect((await send({ ...base, cc: many(25, 'c'), bcc: many(25, 'b') })).statusCode).toBe(200);
      expect400(await send({ ...base, cc: many(25, 'c'), bcc: many(26, 'b') }), 'emails', ['bcc']);
      expect400(await send({ ...base, cc: many(51, 'c') }), 'emails', ['cc']);
      expect((await send({ ...base, bcc: many(50, 'b') })).statusCode).toBe(200);
    });

    it('tags: 10 accepted, 11 refused; name and value shape', async () => {
      const tags = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `n${i}`, value: 'v' }));
      expect((await send({ ...base, tags: tags(10) })).statusCode).toBe(200);
      expect400(await send({ ...base, tags: tags(11) }), 'emails', ['tags']);
      expect400(await send({ ...base, tags: [{ name: 'ok', value: 'has space' }] }), 'emails', [
        'tags[0].value',
      ]);
      expect400(await send({ ...base, tags: [{ name: x(257), value: 'v' }] }), 'emails', ['tags[0].name']);
      // Each told what is wrong with it: its length, or its characters.
      const told = async (tag: { name: string; value: string }) =>
        (await send({ ...base, tags: [tag] })).json().details as { field: string; message: string }[];
      expect(await told({ name: 'a', value: x(257) })).toEqual([
        { field: 'tags[0].value', message: 'must be at most 256 characters' },
      ]);
      expect(await told({ name: '', value: 'v' })).toEqual([
        { field: 'tags[0].name', message: 'must not be empty' },
      ]);
      expect(await told({ name: 'a.b', value: 'v' })).toEqual([
        { field: 'tags[0].name', message: 'must hold only letters (A-Z, a-z), digits, _ and -' },
      ]);
      expect((await send({ ...base, tags: [{ name: x(256), value: x(256) }] })).statusCode).toBe(200);
      expect400(await send({ ...base, tags: [{ name: 'a' }] }), 'emails', ['tags[0].value']);
      expect400(await send({ ...base, tags: [{ name: 'a', value: 'b', extra: 1 }] }), 'emails', [
        'tags[0].extra',
      ]);
    });
  });
});
