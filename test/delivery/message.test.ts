// What the relay receives: envelope, headers, bodies and encodings, exactly as the API was asked.
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { type AddressObject, simpleParser } from 'mailparser';
import { describe, expect, it } from 'vitest';
import { FileOutboxMailer } from '../../src/delivery/file-outbox.js';
import { eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { sendEmail, settled, startWorker, useDelivery } from './harness.js';

const addresses = (a: AddressObject | AddressObject[] | undefined) =>
  (Array.isArray(a) ? a : a ? [a] : []).flatMap((o) => o.value.map((v) => v.address));

describe.each(storeKinds())('message content on %s', (kind) => {
  const d = useDelivery(kind);

  it('puts Bcc only in the envelope and keeps Reply-To, custom headers, Message-ID and Date', async () => {
    const { t, sink, auth } = d;
    const id = await sendEmail(t, auth, {
      to: ['Ann <ann@example.org>', 'bob@example.org'],
      cc: ['carol@example.org'],
      bcc: ['secret@example.org'],
      replyTo: 'Support <support@mailroom.test>',
      subject: 'Envelope check',
      text: 'plain part',
      html: '<p>html part</p>',
      headers: { 'X-Campaign': 'spring-42' },
    });
    const email = await settled(t, auth, id);
    expect(email.status).toBe('sent');
    expect(email.recipients.map((r) => r.status)).toEqual(['sent', 'sent', 'sent', 'sent']);

    expect(sink.messages).toHaveLength(1);
    const { envelope, raw } = sink.messages[0]!;
    expect(envelope.from).toBe('noreply@mailroom.test');
    expect([...envelope.to].sort()).toEqual(
      ['ann@example.org', 'bob@example.org', 'carol@example.org', 'secret@example.org'].sort(),
    );
    const text = raw.toString('utf8');
    expect(text).not.toMatch(/^bcc:/im);
    expect(text).not.toContain('secret@example.org');

    const parsed = await simpleParser(raw);
    expect(addresses(parsed.to)).toEqual(['ann@example.org', 'bob@example.org']);
    expect(addresses(parsed.cc)).toEqual(['carol@example.org']);
    expect(parsed.bcc).toBeUndefined();
    expect(parsed.replyTo?.value[0]?.address).toBe('support@mailroom.test');
    expect(parsed.from?.value[0]).toMatchObject({ address: 'noreply@mailroom.test', name: 'Mailroom' });
    expect(parsed.headers.get('x-campaign')).toBe('spring-42');
    const row = await t.ts.store.db
      .selectFrom('emails')
      .select(['message_id', 'created_at'])
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(parsed.messageId).toBe(row.message_id);
    expect(parsed.date?.toISOString()).toBe(
      new Date(Math.floor(Date.parse(row.created_at) / 1000) * 1000).toISOString(),
    );
    expect(parsed.headers.get('content-type')).toMatchObject({ value: 'multipart/alternative' });
    expect(parsed.text?.trim()).toBe('plain part');
    expect(parsed.html).toContain('<p>html part</p>');
  });

  it('sends printable ASCII header values as written, quotes and all; encodes the others', async () => {
    const { t, sink, auth } = d;
    const verbatim = {
      'X-SMTPAPI': '{"category":["receipt"],"unique_args":{"order":"42"}}',
      'List-Id': '"Acme News" <news.acme.test>',
      'X-Quote': 'say "hi"',
      // Never encoded (a client would not find the link), whatever it holds.
      'List-Unsubscribe': '<https://acme.test/u?t=a=?b>',
    };
    // Encoded: non-ASCII; what reads as an encoded-word (readers would show "a b", or "Hacked"); a space or
    // tab at an end, which parsers drop from a value written out; a run of spaces folding would make lines
    // of spaces alone. Nodemailer encodes only values with a `"` or non-ASCII: the others are Mailroom's.
    const encoded = {
      'X-Accents': 'ünï "q"',
      'X-Look': '=?utf-8?q?a b?= "x"',
      'X-Trail': 'say "hi" ',
      'X-Ew': '=?UTF-8?B?SGFja2Vk?=',
      'X-Tr': 'trail   ',
      'X-Sp': '  lead',
      'X-Tab': '\tstart',
      'X-Run': `a${' '.repeat(100)}b`,
    };
    const ids = { 'In-Reply-To': 'abc@x.test <d@x.test>', References: '<a@x.test>  b@y.test' };
    const headers = { ...verbatim, ...encoded, ...ids };
    // A subject's run of spaces is encoded too, as it reads back whole.
    const subject = `Headers${' '.repeat(100)}run`;
    const id = await sendEmail(t, auth, { to: 'ann@example.org', subject, text: 'x', headers });
    expect((await settled(t, auth, id)).status).toBe('sent');
    const { raw } = sink.messages[0]!;
    const unfolded = raw
      .toString('latin1')
      .split('\r\n\r\n')[0]!
      .replace(/\r\n[ \t]/g, ' ');
    const valueOf = (name: string) => new RegExp(`^${name}: (.*)$`, 'im').exec(unfolded)![1];
    for (const [name, value] of Object.entries(verbatim)) expect(valueOf(name)).toBe(value);
    for (const [name, value] of Object.entries(encoded)) {
      // One encoded-word or several, folded between them (the space between two is not part of the text).
      const words = valueOf(name)!.split(' ');
      const decoded = words.map((w) => {
        const word = /^=\?UTF-8\?Q\?(\S+)\?=$/.exec(w)![1]!;
        return word.replace(/_/g, '%20').replace(/=([0-9A-F]{2})/g, '%$1');
      });
      expect(decodeURIComponent(decoded.join('').replace(/[^%\w]/g, encodeURIComponent))).toBe(value);
    }
    expect((await simpleParser(raw)).subject).toBe(subject);
    // No header line is spaces alone (RFC 5322 forbids generating them).
    expect(raw.toString('latin1').split('\r\n\r\n')[0]!.split('\r\n')).not.toContainEqual(
      expect.stringMatching(/^[ \t]*$/),
    );
    // Each message id gets the angle brackets it lacks (docs/behaviour.md): nodemailer bracketed the value
    // as a whole, `<abc@x.test <d@x.test>` (helper-144).
    expect(valueOf('In-Reply-To')).toBe('<abc@x.test> <d@x.test>');
    expect(valueOf('References')).toBe('<a@x.test> <b@y.test>');
  });

  it('a subject with a space or tab at either end arrives with it', async () => {
    const { t, sink, auth } = d;
    // Parsers (and mail clients) drop a header value's edge whitespace unless it is encoded.
    for (const subject of ['  padded  ', '\tTabbed', 'Trailing ', ' Grüße ']) {
      const id = await sendEmail(t, auth, { to: 'ann@example.org', subject, text: 'x' });
      expect((await settled(t, auth, id)).status).toBe('sent');
      expect((await simpleParser(sink.messages.at(-1)!.raw)).subject).toBe(subject);
    }
  });

  it('round-trips unicode and never writes a line over 998 octets', async () => {
    const { t, sink, auth } = d;
    const subject = 'Grüße aus Zürich — 東京 🚀 ' + 'ü'.repeat(200);
    const body = 'Привет, мир! ' + 'ß'.repeat(300) + ' 👋';
    const longHtml = `<p>${'x'.repeat(5000)}</p>`;
    const id = await sendEmail(t, auth, { to: ['u@example.org'], subject, text: body, html: longHtml });
    expect((await settled(t, auth, id)).status).toBe('sent');
    const { raw } = sink.messages[0]!;
    const longest = Math.max(
      ...raw
        .toString('binary')
        .split('\r\n')
        .map((l) => l.length),
    );
    expect(longest).toBeLessThanOrEqual(998);
    const parsed = await simpleParser(raw);
    expect(parsed.subject).toBe(subject);
    expect(parsed.text?.trim()).toBe(body);
    expect(parsed.html).toBe(longHtml);
  });

  it('sends each body part in the smaller of quoted-printable and base64', async () => {
    const { t, sink, auth } = d;
    // [text, html, the text part's encoding, the html part's]
    const cases = [
      // Most bytes escaped: base64 (4/3 of them) against quoted-printable's nearly 3 times.
      [
        'Привет, мир! Это письмо почти целиком на русском. '.repeat(200),
        `<p>Grüße, ${'plain words '.repeat(100)}</p>`,
        'base64',
        'quoted-printable',
      ],
      // Japanese among HTML tags: the Latin letters outnumber the Japanese ones (nodemailer alone chose
      // quoted-printable, about twice the size), but most bytes are escaped.
      [
        'Hello = world, the café opens at nine today.\n',
        '<p style="color:#333;font-family:sans-serif">ご注文ありがとうございます。</p>\n'.repeat(300),
        'quoted-printable',
        'base64',
      ],
      // Printable ASCII in short lines: 7bit, as written.
      ['Plain ASCII text.\n', '<p>Plain</p>', '7bit', '7bit'],
      // Printable ASCII that nodemailer would send in quoted-printable (a line past 76 characters, or text
      // past 128 KiB): made mostly of what it escapes (`=`, a space before each line break), base64.
      ['a==='.repeat(40_000), 'a \n'.repeat(50_000), 'base64', 'base64'],
      [`${'word '.repeat(40)}\n`.repeat(700), '<p>Plain</p>', 'quoted-printable', '7bit'],
    ] as const;
    for (const [i, [text, html, textEncoding, htmlEncoding]] of cases.entries()) {
      const to = `enc-${i}@example.org`;
      const id = await sendEmail(t, auth, { to, subject: 'Encodings', text, html });
      expect((await settled(t, auth, id)).status).toBe('sent');
      const { raw } = sink.deliveredTo(to)[0]!;
      const parts = raw.toString('binary').split(/^--/m);
      const encodingOf = (type: string) =>
        parts
          .find((p) => new RegExp(`^Content-Type: ${type}`, 'mi').test(p))
          ?.match(/^Content-Transfer-Encoding: (\S+)/im)?.[1];
      expect([encodingOf('text/plain'), encodingOf('text/html')]).toEqual([textEncoding, htmlEncoding]);
      // base64 carries the text in its canonical form (RFC 2045 6.8): every line break CRLF.
      for (const part of parts.filter((p) => /^Content-Transfer-Encoding: base64/im.test(p))) {
        const decoded = Buffer.from(part.slice(part.indexOf('\r\n\r\n')), 'base64').toString('utf8');
        expect(decoded).not.toMatch(/(?<!\r)\n/);
      }
      // Neither encoding is past 4/3 of the bodies as the request carries them (a line break `\n` there is
      // two bytes, as its CRLF on the wire), with line breaks; quoted-printable alone would be nearly 3 times
      // the first case's text, twice the second's html, 2.5 times the fourth's text.
      const octets = Buffer.byteLength(JSON.stringify(text)) + Buffer.byteLength(JSON.stringify(html));
      if (octets > 10_000) expect(raw.length).toBeLessThan(octets * 1.45);
      const parsed = await simpleParser(raw);
      expect(parsed.text).toBe(text);
      expect(parsed.html).toBe(html);
    }
  });

  it('sends html alone as a single HTML part, with no plain-text version made up', async () => {
    const { t, sink, auth } = d;
    const id = await sendEmail(t, auth, { to: 'html@example.org', subject: 'H', html: '<p>Hi</p>' });
    expect((await settled(t, auth, id)).status).toBe('sent');
    const parsed = await simpleParser(sink.deliveredTo('html@example.org')[0]!.raw);
    expect(parsed.headers.get('content-type')).toMatchObject({ value: 'text/html' });
    expect(String(parsed.html).trim()).toBe('<p>Hi</p>');
  });

  it('folds a subject of one 998-character word into lines of at most 998 octets', async () => {
    const { t, sink, auth } = d;
    for (const subject of [
      'S'.repeat(998),
      `Re: ${'x'.repeat(994)}`,
      `${'w '.repeat(40)}${'y'.repeat(900)}`,
    ]) {
      const to = `fold-${subject.length}-${subject.charCodeAt(0)}@example.org`;
      const id = await sendEmail(t, auth, { to, subject, text: 'x' });
      expect((await settled(t, auth, id)).status).toBe('sent');
      const delivered = sink.deliveredTo(to);
      expect(delivered).toHaveLength(1);
      const { raw } = delivered[0]!;
      const lines = raw.toString('binary').split('\r\n');
      expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(998);
      expect((await simpleParser(raw)).subject).toBe(subject);
    }
  });

  it('delivers a subject that reads as a MIME encoded-word as the text sent; refuses such a name', async () => {
    const { t, sink, auth } = d;
    const to = 'words@example.org';
    const id = await sendEmail(t, auth, { to, subject: '=?UTF-8?B?SGFja2Vk?=', text: 'x' });
    expect((await settled(t, auth, id)).status).toBe('sent');
    // Sent as it was, mail clients showed "Hacked".
    expect((await simpleParser(sink.deliveredTo(to)[0]!.raw)).subject).toBe('=?UTF-8?B?SGFja2Vk?=');
    // A name cannot be sent that way (an encoded-word may not be quoted): it is refused, naming the field.
    const res = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth,
      payload: {
        to: `=?UTF-8?B?QWRtaW4=?= <${to}>`,
        replyTo: ['"=?utf-8?q?Support?=" <h@example.org>'],
        subject: 's',
        text: 'x',
      },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json().details.map((x: { field: string }) => x.field)).toEqual(['to', 'replyTo[0]']);
    expect(res.json().details[0].message).toMatch(/^display name must be plain text/);
  });

  it('writes DATA_DIR/outbox/<id>.eml, parseable, and calls the email sent when there is no relay', async () => {
    const { t, auth } = d;
    const outbox = path.join(t.ts.dataDir, 'outbox');
    const fileMailer = new FileOutboxMailer(outbox);
    // A second worker on the same store would race the SMTP one for due emails; pause that one.
    await d.worker.stop();
    const fileWorker = startWorker(t, fileMailer);
    try {
      const id = await sendEmail(t, auth, {
        to: ['file@example.org'],
        bcc: ['hidden@example.org'],
        subject: 'Outbox ✓',
        html: '<b>saved</b>',
        // A bare CR is a line break, as over SMTP (the outbox dropped it, joining the lines).
        text: 'bare\rcr',
      });
      expect((await settled(t, auth, id)).status).toBe('sent');
      const parsed = await simpleParser(await readFile(path.join(outbox, `${id}.eml`)));
      expect(parsed.text?.trim().split(/\r?\n/)).toEqual(['bare', 'cr']);
      expect(parsed.subject).toBe('Outbox ✓');
      expect(addresses(parsed.to)).toEqual(['file@example.org']);
      expect(parsed.bcc).toBeUndefined();
      expect(parsed.html).toContain('<b>saved</b>');
      // Bodies are readable by the service's user only.
      expect((await stat(outbox)).mode & 0o777).toBe(0o700);
      expect((await stat(path.join(outbox, `${id}.eml`))).mode & 0o777).toBe(0o600);
    } finally {
      await fileWorker.stop();
      d.worker = startWorker(t, d.mailer);
    }
  });
});

describe.each(storeKinds())('idempotency on %s', (kind) => {
  const d = useDelivery(kind);

  it('answers a repeated key with the first response and sends once; another body is a 409', async () => {
    const { t, sink } = d;
    const { auth } = await t.newKey();
    const body = { to: ['idem@example.org'], subject: 'Once', text: 'only once' };
    const headers = { 'idempotency-key': 'order-1001' };
    const first = await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: body, headers });
    const again = await t.call({ method: 'POST', url: '/api/v1/emails', auth, payload: body, headers });
    expect(first.statusCode).toBe(200);
    expect(again.statusCode).toBe(200);
    expect(again.json()).toEqual(first.json());
    const id = (first.json() as { id: string }).id;
    expect((await settled(t, auth, id)).status).toBe('sent');

    const other = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth,
      payload: { ...body, subject: 'Different' },
      headers,
    });
    expect(other.statusCode).toBe(409);
    expect(other.json()).toEqual({ error: expect.any(String), details: expect.any(Array) });

    // Another organisation's identical key is its own.
    const { auth: otherOrg } = await t.newKey();
    const separate = await t.call({
      method: 'POST',
      url: '/api/v1/emails',
      auth: otherOrg,
      payload: body,
      headers,
    });
    expect(separate.statusCode).toBe(200);
    expect((separate.json() as { id: string }).id).not.toBe(id);
    await settled(t, otherOrg, (separate.json() as { id: string }).id);
    expect(sink.deliveredTo('idem@example.org')).toHaveLength(2);
  });

  it('makes exactly one email from 10 concurrent requests with the same key', async () => {
    const { t, sink } = d;
    const { auth } = await t.newKey();
    const body = { to: ['burst@example.org'], subject: 'Burst', text: 'one of ten' };
    const responses = await Promise.all(
      Array.from({ length: 10 }, () =>
        t.call({
          method: 'POST',
          url: '/api/v1/emails',
          auth,
          payload: body,
          headers: { 'idempotency-key': 'burst-key' },
        }),
      ),
    );
    expect(responses.map((r) => r.statusCode)).toEqual(Array(10).fill(200));
    const ids = new Set(responses.map((r) => (r.json() as { id: string }).id));
    expect(ids.size).toBe(1);
    const [id] = [...ids];
    expect((await settled(t, auth, id!)).status).toBe('sent');
    const list = await t.call({ method: 'GET', url: '/api/v1/emails', auth });
    expect((list.json() as { emails: unknown[] }).emails).toHaveLength(1);
    await eventually(() => sink.deliveredTo('burst@example.org').length === 1);
    expect(sink.deliveredTo('burst@example.org')).toHaveLength(1);
  });
});
