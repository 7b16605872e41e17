// addressBucket (ratelimit/address-bucket.ts): what a keyless request's budget is keyed by.
import { describe, expect, it } from 'vitest';
import { addressBucket } from '../../src/ratelimit/address-bucket.js';

describe('addressBucket', () => {
  it('keys an IPv4 client by its address, however it is written', () => {
    expect(addressBucket('10.0.0.1')).toBe('10.0.0.1');
    expect(addressBucket('::ffff:10.0.0.1')).toBe('10.0.0.1'); // a dual-stack listener's form
    expect(addressBucket('64:ff9b::a00:1')).toBe('10.0.0.1'); // through a NAT64 translator
    expect(addressBucket('::ffff:0:a00:1')).toBe('10.0.0.1'); // SIIT's IPv4-translated form
    // A local-use NAT64 prefix places the IPv4 address by its own length: not read as the last 32 bits
    // (helper-143: 64:ff9b:1:102:3:400:: gave 0.0.0.0, one budget for every client behind it).
    expect(addressBucket('64:ff9b:1:102:3:400::')).toBe('64:ff9b:1:102::/64');
  });

  it('keys a routed IPv6 client by its /64', () => {
    expect(addressBucket('2a01:4f8:1:2::5')).toBe('2a01:4f8:1:2::/64');
    expect(addressBucket('2a01:4f8:1:2:aaaa:bbbb:cccc:dddd')).toBe('2a01:4f8:1:2::/64');
    expect(addressBucket('2a01:4f8:1:3::5')).toBe('2a01:4f8:1:3::/64');
    expect(addressBucket('fd12:3456:789a:1::1')).toBe('fd12:3456:789a:1::/64'); // unique local
  });

  // helper-142: Node takes zones ipaddr.js refuses (`-`, `.`), and the key generator threw: a 500.
  it('keys link-local, loopback and Teredo addresses one by one, a link-local one with its zone', () => {
    expect(addressBucket('fe80::1%eth-0')).toBe('fe80::1%eth-0');
    expect(addressBucket('fe80::1%eth0.100')).toBe('fe80::1%eth0.100');
    expect(addressBucket('fe80::2%eth0.100')).toBe('fe80::2%eth0.100');
    expect(addressBucket('::1')).toBe('::1');
    expect(addressBucket('2001:0:4136:e378::1')).toBe('2001:0:4136:e378::1');
  });

  it('leaves what is no address as it is', () => {
    for (const odd of ['', 'nonsense', '1.2.3', '%', 'fe80::1%', '::ffff:999.1.1.1']) {
      expect(addressBucket(odd)).toBe(odd);
    }
  });
});
