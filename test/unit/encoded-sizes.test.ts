// The sizes a body takes in quoted-printable and in base64 (delivery/mailer.ts encodedSizes), which choose a
// part's encoding and give the SIZE declared to the relay: as nodemailer writes them.
import MailComposer from 'nodemailer/lib/mail-composer/index.js';
import { describe, expect, it } from 'vitest';
import { encodedSizes } from '../../src/delivery/mailer.js';

/** The bytes of a text part's body as nodemailer writes it, CRLF line breaks given (as on the wire). */
async function written(text: string, encoding: 'quoted-printable' | 'base64'): Promise<number> {
  const content = text.replace(/(?<!\r)\n/g, '\r\n');
  const mail = new MailComposer({ text: { content, contentTransferEncoding: encoding } as never });
  const raw = await new Promise<Buffer>((resolve, reject) =>
    mail.compile().build((err, message) => (err ? reject(err) : resolve(message))),
  );
  const message = raw.toString('binary');
  return message.length - message.indexOf('\r\n\r\n') - 4;
}

describe('encodedSizes', () => {
  const bodies: Record<string, string> = {
    'Latin with = and an accent': 'Hello = world, the café opens at nine today.\n'.repeat(2000),
    Polish: 'Zażółć gęślą jaźń, dziękujemy za zamówienie.\n'.repeat(2000),
    'one long line, a sixth escaped': `${'ł'}${'a'.repeat(10)}`.repeat(1000),
    'short lines around the threshold': `ł${'a'.repeat(9)}\n`.repeat(1000),
    '`=` runs': 'a='.repeat(100_000),
    'a space before each line break': 'a \n'.repeat(60_000),
    'Japanese among tags': '<p style="color:#333">ご注文ありがとうございます。</p>\n'.repeat(300),
    'emoji (surrogate pairs)': '🎉 party time 🎉\n'.repeat(3000),
    'ASCII in lines of 200': `${'word '.repeat(40)}\n`.repeat(1000),
    'control characters and tabs': '\u0001\u0002\tabc\u0007 \t\n'.repeat(1000),
  };
  for (const [name, text] of Object.entries(bodies)) {
    it(`counts what nodemailer writes: ${name}`, async () => {
      const sizes = encodedSizes(text);
      expect(sizes.base64).toBe(await written(text, 'base64'));
      // Within a soft line break's few bytes where the last line fills exactly.
      expect(Math.abs(sizes.quotedPrintable - (await written(text, 'quoted-printable')))).toBeLessThanOrEqual(
        3,
      );
    });
  }
});
