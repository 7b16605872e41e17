// The budget a request without a valid key counts against: its client address, or an IPv6 client's /64.
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/** IPv6 ranges whose addresses are told apart one by one: a /64 of them is not one client. */
const ONE_BY_ONE = new Set(['linkLocal', 'loopback', 'teredo', 'unspecified', 'multicast']);

/**
 * `ip` as a rate-limit key. A routed IPv6 client usually holds a whole /64 (SLAAC, privacy addresses that
 * change every few hours), so counting each address apart would hand one client 2^64 budgets; its /64 is
 * counted as one, as an IPv4 address is (so the hosts of one IPv6 subnet share a budget, as hosts behind
 * one IPv4 NAT do). An IPv4 address written as IPv6 (`::ffff:10.0.0.1`, how a dual-stack listener sees
 * IPv4 clients; `64:ff9b::a00:1`, a NAT64 translator's; `::ffff:0:a00:1`, SIIT's) counts as that IPv4
 * address. Link-local (each with its zone: hosts on different links), loopback, Teredo and the like count
 * one address each. Anything unparsable stays as given.
 */
export function addressBucket(ip: string): string {
  // Node accepts zones ipaddr.js does not (`%eth0.100`, `%br-1a2b`): parsed without, kept for link-local.
  const zone = ip.indexOf('%');
  const bare = zone === -1 ? ip : ip.slice(0, zone);
  if (isIP(bare) === 0 || !ipaddr.isValid(bare)) return ip;
  const parsed = ipaddr.process(bare);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const v6 = parsed as ipaddr.IPv6;
  const range = v6.range();
  if (carriesIPv4(v6)) {
    const [high, low] = v6.parts.slice(6) as [number, number];
    return ipaddr.fromByteArray([high >> 8, high & 0xff, low >> 8, low & 0xff]).toString();
  }
  if (ONE_BY_ONE.has(range)) return v6.toString() + ip.slice(bare.length);
  return `${new ipaddr.IPv6([...v6.parts.slice(0, 4), 0, 0, 0, 0]).toString()}/64`;
}

/**
 * Whether the address is an IPv4 one in its last 32 bits: NAT64's well-known prefix (64:ff9b::/96; the
 * local-use 64:ff9b:1::/48 lays IPv4 out by its own prefix length, so it is not read here) or SIIT's
 * IPv4-translated form (::ffff:0:a.b.c.d).
 */
function carriesIPv4(v6: ipaddr.IPv6): boolean {
  const [a, b, c, d, e, f] = v6.parts;
  return (
    (a === 0x64 && b === 0xff9b && c === 0 && d === 0 && e === 0 && f === 0) ||
    (a === 0 && b === 0 && c === 0 && d === 0 && e === 0xffff && f === 0)
  );
}
