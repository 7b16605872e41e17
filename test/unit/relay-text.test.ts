// What an organisation may read of a relay failure: the error, never where the operator's relay is.
import { describe, expect, it } from 'vitest';
import { withoutAddress, withoutHost } from '../../src/delivery/smtp-relay.js';

describe('withoutAddress', () => {
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
});
