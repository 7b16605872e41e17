// The budget a request without a valid key counts against: its client address, or an IPv6 client's /64.
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * `ip` as a rate-limit key. A host is usually given a whole IPv6 /64 (SLAAC, privacy addresses that change
 * every few hours), so counting each IPv6 address apart would hand one client 2^64 budgets; its /64 is
 * counted as one, as an IPv4 address is. An IPv4 address written as IPv6 (`::ffff:10.0.0.1`, how a
 * dual-stack listener sees IPv4 clients) counts as that IPv4 address. Anything unparsable stays as given.
 */
export function addressBucket(ip: string): string {
  if (isIP(ip) === 0) return ip;
  const parsed = ipaddr.process(ip);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  const prefix = (parsed as ipaddr.IPv6).parts.slice(0, 4);
  return `${new ipaddr.IPv6([...prefix, 0, 0, 0, 0]).toString()}/64`;
}
