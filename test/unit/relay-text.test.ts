// What an organisation may read of a relay failure: the error, never where the operator's relay is.
import { describe, expect, it } from 'vitest';
import { settle } from '../../src/delivery/outcome.js';
import {
  MAX_REPLY_CHARS,
  type SmtpError,
  relayText,
  tlsRequired,
  withoutAddress,
  withoutHost,
} from '../../src/delivery/smtp-relay.js';

describe('what is stored of what the relay and nodemailer say', () => {
  it('takes out IPv4 and IPv6 addresses and the configured host name', () => {
    const host = 'relay.corp.internal';
    for (const [message, shown] of [
      ['connect ECONNREFUSED 10.0.0.7:25', 'connect ECONNREFUSED (the relay)'],
      ['connect ECONNREFUSED ::1:25', 'connect ECONNREFUSED (the relay)'],
      ['queryAaaa ETIMEOUT relay.corp.internal', 'queryAaaa ETIMEOUT (the relay)'],
      ['getaddrinfo ENOTFOUND relay.corp.internal', 'getaddrinfo ENOTFOUND (the relay)'],
      ['DNS lookup for relay.corp.internal timed out', 'DNS lookup for (the relay) timed out'],
      [
        'Invalid greeting. response=421 relay.corp.internal [fd00::7] busy',
        'Invalid greeting. response=421 (the relay) (the relay) busy',
      ],
      ['peer 2001:db8:0:0:1:0:0:1 went away', 'peer (the relay) went away'],
    ]) {
      expect(withoutAddress(message!, host)).toBe(shown);
    }
  });

  it('keeps what is not an address', () => {
    for (const message of [
      '421 try again at 12:34:56',
      '550 5.1.1 <ann@example.org>: user unknown',
      'ETIMEDOUT: Greeting never received',
    ]) {
      expect(withoutAddress(message, 'relay.corp.internal')).toBe(message);
    }
  });

  it("keeps in a reply about the message the addresses that are not the relay's, and takes out its name", () => {
    const host = 'relay.corp.internal';
    for (const [message, shown] of [
      ['554 5.7.1 Client host [198.51.100.7] blocked using zen.spamhaus.org', undefined],
      ['250 2.0.0 Ok: queued as 8a3f::2b1c', undefined],
      ['550 5.1.1 relay.corp.internal:25 says no', '550 5.1.1 (the relay) says no'],
    ]) {
      expect(withoutHost(message!, host)).toBe(shown ?? message);
    }
  });

  it('takes the relay out of a reply only as a name or address of its own, in any case', () => {
    for (const [message, host, shown] of [
      ['421 [10.0.0.71] busy', '10.0.0.7', undefined],
      ['550 <bob@mail.example.org>: mailbox full', 'mail', undefined],
      ['421 mail says: try later', 'mail', '421 (the relay) says: try later'],
      ['421 RELAY.Corp.Internal:25 busy', 'relay.corp.internal', '421 (the relay) busy'],
      ['250 ok from relay.corp.internal.', 'relay.corp.internal', '250 ok from (the relay).'],
      // An IPv6 relay: another address that starts with its own, or its own in brackets.
      ['421 [fd00::7:1234] busy', 'fd00::7', undefined],
      ['421 [fd00::7] busy', 'fd00::7', '421 [(the relay)] busy'],
      // Its name as an address's local part is not the relay; as the domain it is.
      ['550 <relay.corp@example.org> unknown', 'relay.corp', undefined],
      ['550 ask postmaster@relay.corp', 'relay.corp', '550 ask postmaster@(the relay)'],
      // A name beside a colon is still the relay's.
      ['421 relay.corp:Service not available', 'relay.corp', '421 (the relay):Service not available'],
      ['550 rejected by host:relay.corp', 'relay.corp', '550 rejected by host:(the relay)'],
    ]) {
      expect(withoutHost(message!, host!)).toBe(shown ?? message);
    }
  });

  it('keeps the addresses of a reply about the message, and of nothing else', () => {
    const host = 'relay.corp.internal';
    const failure = (fields: Partial<SmtpError>) =>
      relayText(Object.assign(new Error(fields.message ?? 'failed'), fields) as SmtpError, host);
    const blocked = '554 5.7.1 Client host [198.51.100.7] blocked';
    // A recipient refused, or the data: as the relay said it.
    expect(failure({ command: 'RCPT TO', responseCode: 554, response: blocked })).toBe(blocked);
    expect(failure({ code: 'EMESSAGE', command: 'DATA', responseCode: 554, response: blocked })).toBe(
      blocked,
    );
    // The relay closing the connection (421), even at RCPT TO or DATA; its other replies; connection faults.
    for (const fields of [
      { command: 'DATA', responseCode: 421, response: '421 4.3.2 relay.corp.internal [10.0.0.7] closing' },
      { command: 'RCPT TO', responseCode: 421, response: '421 4.3.2 relay.corp.internal [10.0.0.7] closing' },
      { command: 'MAIL FROM', responseCode: 550, response: '550 10.0.0.7 refuses [198.51.100.7]' },
      { command: 'CONN', code: 'ESOCKET', message: 'connect ECONNREFUSED 10.0.0.7:25' },
    ]) {
      const shown = failure(fields);
      expect([shown, shown.includes('10.0.0.7') || shown.includes('relay.corp')]).toEqual([shown, false]);
    }
    expect(failure({ command: 'CONN', code: 'ESOCKET', message: 'read ECONNRESET' })).toBe(
      'ESOCKET: read ECONNRESET',
    );
  });

  it('names STARTTLS or AUTH when the relay refused it, as its reply alone does not say which', () => {
    const failure = (fields: Partial<SmtpError>) =>
      relayText(Object.assign(new Error('failed'), fields) as SmtpError, 'relay.test');
    const unknown = '502 5.5.2 Error: command not recognized';
    expect(failure({ code: 'ETLS', command: 'STARTTLS', response: unknown })).toBe(`STARTTLS: ${unknown}`);
    expect(failure({ code: 'EAUTH', command: 'AUTH PLAIN', response: unknown })).toBe(
      `AUTH PLAIN: ${unknown}`,
    );
    expect(failure({ code: 'EAUTH', command: 'API', message: 'Missing credentials' })).toBe(
      'EAUTH: Missing credentials',
    );
  });

  it('requires TLS for credentials to a relay off this host unless SMTP_REQUIRE_TLS says otherwise', () => {
    for (const [url, required] of [
      ['smtp://u:p@relay.example.org', true],
      ['smtp://u:p@192.0.2.7:25', true],
      ['smtp://u:p@[2001:db8::7]:25', true],
      ['smtp://relay.example.org', false],
      ['smtp://u:p@localhost:1025', false],
      ['smtp://u:p@mail.localhost', false],
      ['smtp://u:p@127.0.0.1:25', false],
      ['smtp://u:p@127.1.2.3', false],
      ['smtp://u:p@[::1]:25', false],
      ['smtp://u:p@[::ffff:127.0.0.1]:25', false],
    ] as const) {
      expect([url, tlsRequired(url, undefined)]).toEqual([url, required]);
      expect(tlsRequired(url, true)).toBe(true);
      expect(tlsRequired(url, false)).toBe(false);
    }
  });

  it('keeps at most MAX_REPLY_CHARS of a reply, and stores a reply of several lines on one', () => {
    const long = relayText(
      Object.assign(new Error('x'), {
        command: 'DATA',
        responseCode: 250,
        response: `250 ${' '.repeat(100_000)}queued`,
      }) as SmtpError,
      'relay.corp',
    );
    expect(long).toBe(`250 ${' '.repeat(MAX_REPLY_CHARS - 4)}…`);
    const recipients = ['a@example.org', 'b@example.org'].map((address, position) => ({
      email_id: 'e',
      position,
      kind: 'to',
      address,
      status: 'queued',
      response: null,
      updated_at: '2031-01-01T00:00:00.000Z',
    }));
    const reply = '550-5.1.1 The account does not exist.\r\n\r\n550-Please check it. \n550 5.1.1 https://x';
    const { details, lastError } = settle(
      recipients,
      new Map([
        [0, { status: 'failed' as const, response: reply }],
        [1, { status: 'failed' as const, response: ` ${' '.repeat(50_000)}x\n 550 no ` }],
      ]),
      1,
      5,
    );
    const joined = '550-5.1.1 The account does not exist. 550-Please check it. 550 5.1.1 https://x';
    expect(details.failed).toBe(`a@example.org: ${joined}\nb@example.org: x 550 no`);
    expect(lastError).toBe('x 550 no');
    // The clip comes after the scrub: an address at the clip is not left half shown.
    const atClip = relayText(
      Object.assign(new Error('x'), {
        command: 'MAIL FROM',
        responseCode: 550,
        response: `550 ${'a'.repeat(MAX_REPLY_CHARS - 10)} 10.20.30.40 refused`,
      }) as SmtpError,
      'relay.corp',
    );
    expect(atClip).not.toMatch(/10\.2/);
  });
});
