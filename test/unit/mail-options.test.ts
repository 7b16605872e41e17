// mailOptions (delivery/mailer.ts): the message an email becomes, built by nodemailer as a relay gets it.
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { describe, expect, it } from 'vitest';
import { type OutgoingMessage, mailOptions } from '../../src/delivery/mailer.js';

function message(headers: Record<string, string>): OutgoingMessage {
  return {
    id: 'e1',
    messageId: '<e1@shop.test>',
    date: new Date('2026-12-01T00:00:00Z'),
    from: 'shop@shop.test',
    envelopeFrom: 'shop@shop.test',
    to: ['ann@acme.test'],
    cc: [],
    replyTo: [],
    subject: 'Hi',
    html: null,
    text: 'Hello',
    headers,
    recipients: ['ann@acme.test'],
  };
}

async function headerLines(headers: Record<string, string>): Promise<string[]> {
  const raw = await new MailComposer(mailOptions(message(headers), undefined)).compile().build();
  return raw.toString('latin1').split('\r\n\r\n')[0]!.split('\r\n');
}

describe('mailOptions', () => {
  it('encodes a List-* value accepted before such values had to be ASCII, rather than send raw 8-bit', async () => {
    // The API refuses these now (they cannot be encoded and still be read as a link or an id); an email
    // queued before the upgrade goes out as it did then, never as 8-bit a relay without SMTPUTF8 refuses.
    const lines = await headerLines({ 'List-Id': 'Liste für Kunden <news.shop.test>' });
    for (const line of lines) expect(line).toMatch(/^[\x20-\x7e\t]*$/);
    expect(lines.join('\n')).toMatch(/^List-ID: =\?UTF-8\?Q\?/im);
    // Printable ASCII goes out as written.
    expect(await headerLines({ 'List-Unsubscribe': '<https://shop.test/u?t=a=?b>' })).toContain(
      'List-Unsubscribe: <https://shop.test/u?t=a=?b>',
    );
  });
});
