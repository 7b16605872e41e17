// The address, header and body rules of contract.md "Email sending", each as a 400 naming its field.
import { describe, expect, it } from 'vitest';
import type { TestApp } from '../helpers/app.js';
import { expect400, useApp } from '../helpers/api.js';
import { storeKinds } from '../helpers/stores.js';

const base = { to: 'a@example.com', subject: 'Hi', text: 'Hello' };

const BAD_ADDRESSES = [
  'plain',
  'a b@example.com',
  'a@b@example.com',
  '"quoted"@example.com',
  '"a b"@example.com',
  'a@example.com (comment)',
  '(comment)a@example.com',
  'undisclosed-recipients:;',
  'group: a@example.com;',
  'a@localhost',
  'a@example',
  // Past what a relay takes (RFC 5321 and 1035): a local part over 64, a label over 63, a numeric TLD.
  `${'l'.repeat(65)}@example.com`,
  `a@${'d'.repeat(64)}.example.com`,
  'a@1.2.3.4',
  'Name <a@localhost>',
  'Name <a@example.com',
  // A quoted display name that never ends (its last quote is escaped), or ends before the name does.
  '"abc\\" <a@example.com>',
  '"a\\\\" b" <a@example.com>',
  '"a"b" <a@example.com>',
  '<>',
  'a@example.com, b@example.com',
  'a@example.com; b@example.com',
  'Name, Other <a@example.com>',
  'Name\r\nBcc: x@example.com <a@example.com>',
  'Name\n <a@example.com>',
  'a@example.com\r\n',
  '',
];

// As contract.md lists them, written independently of the source's table, and the Content-* and Resent-*
// families (docs/behaviour.md).
const REFUSED = (
  'From Sender To Cc Bcc Reply-To Subject Date Message-ID Return-Path Received DKIM-Signature ' +
  'MIME-Version Content-Type Content-Transfer-Encoding Content-Disposition ' +
  // And the families docs/behaviour.md names: every Content-* and Resent-* header.
  'Content-Base Content-Location Content-ID content-id Resent-From Resent-Bcc RESENT-SENDER ' +
  // Receiving servers' verdicts on trust and route, which a sender must not be able to forge.
  'Authentication-Results ARC-Seal ARC-Message-Signature arc-authentication-results Received-SPF Delivered-To'
).split(' ');

describe.each(storeKinds())('email validation on %s', (kind) => {
  let t: TestApp, auth: string;
  useApp(kind, (app, key) => ([t, auth] = [app, key]));

  const send = (payload: object) => t.call({ method: 'POST', url: '/api/v1/emails', auth, payload });

  it.each(BAD_ADDRESSES)('address %j is refused in to, cc, bcc and replyTo', async (address) => {
    expect400(await send({ ...base, to: address }), 'emails', ['to']);
    expect400(await send({ ...base, to: ['ok@example.com', address] }), 'emails', ['to[1]']);
    expect400(await send({ ...base, cc: address }), 'emails', ['cc']);
    expect400(await send({ ...base, bcc: [address] }), 'emails', ['bcc[0]']);
    expect400(await send({ ...base, replyTo: address }), 'emails', ['replyTo']);
  });

  it('a huge address string, or more of them than allowed, is a 400 naming each, answered at once', async () => {
    // Each was parsed whole by the address rules, which run beside the schema: a regex in them backtracked
    // for seconds on spaces before a lone `<`, holding every other request.
    const huge = `a${' '.repeat(200_000)}<`;
    expect400(await send({ ...base, to: huge }), 'emails', ['to']);
    const many = Array.from({ length: 60 }, () => `a${' '.repeat(20_000)}<`);
    const res = await send({ ...base, to: many, cc: huge, replyTo: huge });
    expect(res.statusCode).toBe(400);
    expect(res.json().details.map((d: { field: string }) => d.field)).toEqual(
      expect.arrayContaining(['to', 'cc', 'replyTo']),
    );
  });

  it('accepts bare addresses, display names and quoted display names', async () => {
    const res = await send({
      ...base,
      to: [
        'a@example.com',
        'Ann Example <ann@example.com>',
        '"Doe, Jane" <jane@example.com>',
        '"John \\"JJ\\" Doe" <john@example.com>',
        '"back\\\\slash" <b@example.com>',
      ],
    });
    expect(res.statusCode, res.body).toBe(200);
    const sent = await t.call({ method: 'GET', url: `/api/v1/emails/${res.json().id}`, auth });
    expect(sent.json().to).toEqual([
      'a@example.com',
      'Ann Example <ann@example.com>',
      '"Doe, Jane" <jane@example.com>',
      '"John \\"JJ\\" Doe" <john@example.com>',
      '"back\\\\slash" <b@example.com>',
    ]);
  });

  it('51 addresses joined by commas in one to string are refused', async () => {
    const joined = Array.from({ length: 51 }, (_, i) => `r${i}@example.com`).join(',');
    expect400(await send({ ...base, to: joined }), 'emails', ['to']);
  });

  it('CR or LF in the subject is refused', async () => {
    expect400(await send({ ...base, subject: 'Hi\r\nBcc: x@example.com' }), 'emails', ['subject']);
    expect400(await send({ ...base, subject: 'Hi\nthere' }), 'emails', ['subject']);
    expect400(await send({ ...base, subject: 'Hi\rthere' }), 'emails', ['subject']);
  });

  it('a blank subject or header value is refused: the message would go out without that header', async () => {
    for (const blank of [' ', ' \t ']) {
      const res = await send({ ...base, subject: blank, headers: { 'X-Campaign': blank } });
      expect400(res, 'emails', ['subject', 'headers.X-Campaign']);
      expect(res.json().details[0].message).toBe('must not be blank');
    }
    expect400(await send({ ...base, headers: { 'X-Campaign': '' } }), 'emails', ['headers.X-Campaign']);
    expect((await send({ ...base, subject: ' Hi ' })).statusCode).toBe(200);
  });

  it.each(REFUSED)('header %s is refused, in any case', async (name) => {
    for (const variant of [name, name.toLowerCase(), name.toUpperCase()]) {
      const res = await send({ ...base, headers: { [variant]: 'x' } });
      expect400(res, 'emails', [`headers.${variant}`]);
      // Not "set by Mailroom": ARC-* and Received-SPF are other servers' to write.
      expect(res.json().details[0].message).toMatch(/^is reserved: /);
    }
  });

  it('Content-Language and Content-Description are allowed, unlike the rest of Content-*', async () => {
    const res = await send({
      ...base,
      headers: { 'Content-Language': 'de-CH', 'content-description': 'Receipt' },
    });
    expect(res.statusCode, res.body).toBe(200);
  });

  it('header values must be strings without CR/LF; names must be field names', async () => {
    expect400(await send({ ...base, headers: { 'X-A': { prepared: true } } }), 'emails', ['headers.X-A']);
    expect400(await send({ ...base, headers: { 'X-A': 1 } }), 'emails', ['headers.X-A']);
    expect400(await send({ ...base, headers: { 'X-A': null } }), 'emails', ['headers.X-A']);
    expect400(await send({ ...base, headers: { 'X-A': 'a\r\nBcc: b@example.com' } }), 'emails', [
      'headers.X-A',
    ]);
    expect400(await send({ ...base, headers: { 'X-A': 'a\nb' } }), 'emails', ['headers.X-A']);
    expect400(await send({ ...base, headers: { 'Bad Name': 'x' } }), 'emails', ['headers.Bad Name']);
    expect400(await send({ ...base, headers: { 'X:A': 'x' } }), 'emails', ['headers.X:A']);
    // A line break in a name is a bad name, not an unknown field (the schema once matched names by `.*`).
    for (const name of ['X-A\nB', 'X-A\r', 'X\u2028A']) {
      const res = await send({ ...base, headers: { [name]: 'x' } });
      expect400(res, 'emails', [`headers.${name}`]);
      expect(res.json().details[0].message).not.toMatch(/not an allowed field/);
    }
    expect400(await send({ ...base, headers: 'X-A: b' }), 'emails', ['headers']);
    // One header named twice in another case would go out twice.
    const twice = await send({ ...base, headers: { 'X-Entity-Ref-ID': '1234', 'x-entity-ref-id': 'dup' } });
    expect400(twice, 'emails', ['headers.x-entity-ref-id']);
    expect(twice.json().details[0].message).toBe(
      'is the header X-Entity-Ref-ID again (header names are case-insensitive): give it once',
    );
    const ok = await send({ ...base, headers: { 'X-Campaign': 'spring', 'List-Unsubscribe': '<x>' } });
    expect(ok.statusCode, ok.body).toBe(200);
  });

  it('In-Reply-To, References, OTP-Token and List-* values must be printable ASCII (they cannot be MIME-encoded)', async () => {
    const headers = {
      'In-Reply-To': '<réf@x.test>',
      references: '<ü@x.test> <b@x.test>',
      'OTP-Token': 'ünï',
      // Encoded whole, a client no longer finds the unsubscribe link nor the list's id.
      'List-Unsubscribe': '<https://shop.test/unsubscribe?name=Zoë>',
      'List-Id': 'Café news <news.shop.test>',
    };
    const res = await send({ ...base, headers });
    expect400(res, 'emails', [
      'headers.In-Reply-To',
      'headers.references',
      'headers.OTP-Token',
      'headers.List-Unsubscribe',
      'headers.List-Id',
    ]);
    expect(res.json().details[0].message).toBe(
      'must be printable ASCII (percent-encode a URL): this header cannot be MIME-encoded',
    );
    const ascii = {
      'In-Reply-To': '<ref@x.test>',
      References: '<a@x.test>\t<b@x.test>',
      'X-Other': 'ünï',
      'List-Unsubscribe': '<https://shop.test/unsubscribe?name=Zo%C3%AB>',
    };
    expect((await send({ ...base, headers: ascii })).statusCode).toBe(200);
  });

  // A comment, a comma or a quote went out broken: `<a@x.test> (c)` as `<a@x.test> (c)>` (helper-144).
  it('In-Reply-To and References must be message ids separated by spaces', async () => {
    const headers = { 'In-Reply-To': '<a@x.test> (c)', References: '<a@x.test>,<b@x.test>' };
    const res = await send({ ...base, headers });
    expect400(res, 'emails', ['headers.In-Reply-To', 'headers.References']);
    expect(res.json().details[0].message).toBe(
      'must be message ids separated by spaces, such as <a@acme.test> <b@acme.test>',
    );
    for (const value of ['<a@x>', 'a@x', ' <a@x>\t b@y ', '<12345>']) {
      const ok = await send({ ...base, headers: { References: value } });
      expect(ok.statusCode, `${value}: ${ok.body}`).toBe(200);
    }
  });

  it('html and text both missing is refused; either one is enough', async () => {
    expect400(await send({ to: base.to, subject: 'x' }), 'emails', ['html']);
    // Empty counts as not given (docs/behaviour.md); spaces are something to send.
    expect400(await send({ to: base.to, subject: 'x', text: '', html: '' }), 'emails', ['html']);
    expect((await send({ to: base.to, subject: 'x', text: ' ' })).statusCode).toBe(200);
    expect((await send({ to: base.to, subject: 'x', html: '<b>x</b>' })).statusCode).toBe(200);
    expect((await send({ to: base.to, subject: 'x', text: 'x' })).statusCode).toBe(200);
  });

  it('attachments and raw are unknown fields', async () => {
    expect400(await send({ ...base, attachments: [] }), 'emails', ['attachments']);
    expect400(await send({ ...base, raw: 'From: x' }), 'emails', ['raw']);
  });

  it('a field named body is an unknown field like any other: the rest of the body is still checked', async () => {
    // Named as the request part is: it was taken for the whole body refused, and every other problem was
    // dropped, here that the text went in `body` and the email has none.
    const res = await send({ to: base.to, subject: 'x', body: 'Hello' });
    expect400(res, 'emails', ['body', 'html']);
    expect(res.json().details).toEqual(
      expect.arrayContaining([
        { field: 'html', message: 'html or text is required' },
        { field: 'body', message: 'is not an allowed field' },
      ]),
    );
    expect400(await send({ ...base, body: 'Hello', to: 7 }), 'emails', ['body', 'to']);
    // The body itself of the wrong type is still told alone.
    const notObject = await send(['x']);
    expect(notObject.json().details).toEqual([{ field: 'body', message: 'must be an object' }]);
  });

  it('a key that is the empty string is an unknown field named "", and hides nothing either', async () => {
    const res = await send({ '': 1, to: ['bad'], subject: '', cc: 7 });
    expect400(res, 'emails', ['', 'to[0]', 'subject', 'cc', 'html']);
    expect(res.json().details).toContainEqual({ field: '', message: 'is not an allowed field' });
  });

  it('a problem of the body and one of a field named body that read the same are told once', async () => {
    const res = await send({ ...base, 'a\u0000': 1, body: { 'b\u0000': 1 } });
    const details = res.json().details as { field: string; message: string }[];
    expect(details.filter((d) => d.field === 'body')).toEqual([
      { field: 'body', message: 'keys must not contain NUL characters' },
    ]);
  });

  it('types are not coerced and every offending field is listed', async () => {
    expect400(await send({ ...base, subject: 42 }), 'emails', ['subject']);
    expect400(await send({ ...base, to: 42 }), 'emails', ['to']);
    expect400(await send({ ...base, to: ['ok@example.com', 7] }), 'emails', ['to[1]']);
    expect400(await send({ ...base, html: true }), 'emails', ['html']);
    expect400(await send({}), 'emails', ['to', 'subject', 'html']);
    const res = await send({
      to: ['ok@example.com', 'bad'],
      subject: 'a\nb',
      text: 'x',
      cc: 'also bad',
      tags: [{ name: 'ok', value: 'no spaces' }],
      headers: { Bcc: 'x' },
    });
    expect400(res, 'emails', ['to[1]', 'subject', 'cc', 'tags[0].value', 'headers.Bcc']);
  });
});
