// DKIM: the relay receives a signature that an independent verifier (mailauth) accepts, with the public key
// served by a resolver stub instead of DNS.
import { generateKeyPairSync } from 'node:crypto';
import { dkimVerify } from 'mailauth';
import { describe, expect, it } from 'vitest';
import { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import { storeKinds } from '../helpers/stores.js';
import { sendEmail, settled, useDelivery } from './harness.js';

const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const DKIM = {
  domainName: 'mailroom.test',
  keySelector: 'mr2026',
  privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
};
const DNS_NAME = 'mr2026._domainkey.mailroom.test';
const TXT = `v=DKIM1; k=rsa; p=${publicKey.export({ type: 'spki', format: 'der' }).toString('base64')}`;

async function resolver(name: string, type: string): Promise<string[][]> {
  if (name === DNS_NAME && type === 'TXT') return [[TXT]];
  throw Object.assign(new Error(`no ${type} record for ${name}`), { code: 'ENOTFOUND' });
}

describe.each(storeKinds())('DKIM on %s', (kind) => {
  const d = useDelivery(kind, { mailer: { dkim: DKIM } });

  it('signs every message so that an independent verifier passes it', async () => {
    const { t, auth, sink } = d;
    const id = await sendEmail(t, auth, {
      to: ['Dora <dora@example.org>'],
      bcc: ['audit@example.org'],
      subject: 'Signed — ünïcödé',
      text: 'signed body',
      html: `<p>${'long line '.repeat(300)}</p>`,
      headers: { 'X-Order': '42' },
    });
    expect((await settled(t, auth, id)).status).toBe('sent');
    const { raw } = sink.messages[0]!;
    const result = await dkimVerify(raw, { resolver });
    expect(result.results).toHaveLength(1);
    expect(result.results[0]).toMatchObject({
      signingDomain: 'mailroom.test',
      selector: 'mr2026',
      status: { result: 'pass' },
    });

    // The same check fails for a message altered on the way: the verifier is really checking.
    const tampered = Buffer.from(raw.toString('utf8').replace('signed body', 'signed bodY'));
    const bad = await dkimVerify(tampered, { resolver });
    expect(bad.results[0]?.status.result).not.toBe('pass');
  });

  it('signs bodies with bare CRs and one-click unsubscribe headers so that the signature verifies', async () => {
    const { t, auth, sink } = d;
    const id = await sendEmail(t, auth, {
      to: ['dora@example.org'],
      subject: 'Bare CR',
      // Line endings converted twice (\r\r\n), a lone CR, and in QP-encoded text: the wire makes each CR a
      // line break after nodemailer signed the body.
      text: 'abc\r\r\nx é\ry',
      html: '<p>a</p>\r<p>b</p>',
      headers: {
        'List-Unsubscribe': '<https://mailroom.test/u?id=1>',
        'List-Unsubscribe-Post': 'List-Unsubscribe=One-Click',
      },
    });
    expect((await settled(t, auth, id)).status).toBe('sent');
    const { raw } = sink.messages[0]!;
    const result = await dkimVerify(raw, { resolver });
    expect(result.results[0]?.status.result).toBe('pass');
    // RFC 8058: one-click unsubscribe is honoured only when both headers are signed.
    const signed = /^DKIM-Signature:[^]*?\bh=([^;]+);/im.exec(raw.toString('latin1'))![1]!.replace(/\s/g, '');
    expect(signed.toLowerCase().split(':')).toEqual(
      expect.arrayContaining(['list-unsubscribe', 'list-unsubscribe-post']),
    );
  });

  it('refuses to start with a DKIM key that is not a usable private key', () => {
    expect(
      () =>
        new SmtpMailer({
          url: d.sink.url,
          dkim: { ...DKIM, privateKey: '-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----' },
        }),
    ).toThrow(/DKIM_PRIVATE_KEY/);
  });

  it('refuses keys nodemailer cannot sign rsa-sha256 with, or verifiers refuse: EC, Ed25519, RSA under 1024 bits', () => {
    const pem = (key: ReturnType<typeof generateKeyPairSync>['privateKey']) =>
      key.export({ type: 'pkcs8', format: 'pem' }).toString();
    const cases = [
      [pem(generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey), 'got ec'],
      [pem(generateKeyPairSync('ed25519').privateKey), 'got ed25519'],
      [pem(generateKeyPairSync('rsa', { modulusLength: 512 }).privateKey), 'got 512-bit RSA'],
    ] as const;
    for (const [privateKey, got] of cases) {
      expect(() => new SmtpMailer({ url: d.sink.url, dkim: { ...DKIM, privateKey } })).toThrow(
        `DKIM_PRIVATE_KEY must be an RSA key of at least 1024 bits (2048 recommended), ${got}`,
      );
    }
    const rsa1024 = pem(generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey);
    expect(() => new SmtpMailer({ url: d.sink.url, dkim: { ...DKIM, privateKey: rsa1024 } })).not.toThrow();
  });
});
