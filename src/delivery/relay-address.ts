// An address as the relay's answers name it. nodemailer writes each envelope address with its domain put
// through the WHATWG host rules (lower case, and a domain that reads as an IPv4 number in dotted form:
// `0x7f.0x1` goes out as `127.0.0.1`), and reports what the relay accepted and refused in that form. So
// Mailroom's recipients are matched to those answers in the same form, and without case.
import { domainToASCII } from 'node:url';

export function relayForm(address: string): string {
  const at = address.lastIndexOf('@');
  if (at < 0) return address.toLowerCase();
  const domain = address.slice(at + 1);
  // A domain the rules refuse (a literal such as `[127.0.0.1]`) is kept as written, as nodemailer keeps it.
  return `${address.slice(0, at + 1)}${domainToASCII(domain) || domain}`.toLowerCase();
}
