// Address rules shared by contacts and emails (contract.md): one address per string, bare `a@b.example` or
// `Name <a@b.example>`. The address itself is ajv-formats' RFC 5321 dot-atom check (no quotes, comments or
// group syntax, a dotted domain) plus the 254-character limit; display names carry no CR/LF.
import { fullFormats } from 'ajv-formats/dist/formats.js';
import { longerThan } from './guards.js';

const EMAIL = fullFormats.email as RegExp;
export const MAX_ADDRESS = 254;

export interface ParsedAddress {
  name: string | undefined;
  address: string;
}

/** RFC 5321's bounds on a local part, and RFC 1035's on a domain label. */
const MAX_LOCAL_PART = 64;
const MAX_LABEL = 63;

/**
 * The dot-atom check, within the lengths a relay accepts (RFC 5321: a local part of at most 64 octets; a
 * domain label at most 63), and a top-level domain that is not all digits (`x@1.2.3.4` is no host name):
 * otherwise such an address is accepted with a 200 and then fails at the relay.
 */
export function isValidEmail(address: string): boolean {
  if (address.length > MAX_ADDRESS || !EMAIL.test(address)) return false;
  const at = address.lastIndexOf('@');
  if (at > MAX_LOCAL_PART) return false;
  const labels = address.slice(at + 1).split('.');
  return labels.every((label) => label.length <= MAX_LABEL) && !/^\d+$/.test(labels.at(-1)!);
}

/** What is wrong with an address, if anything: its length first, so a long one is told the limit. */
export function addressProblem(address: string): string | undefined {
  if (longerThan(address, MAX_ADDRESS)) return `must be at most ${MAX_ADDRESS} characters`;
  return isValidEmail(address) ? undefined : 'must be a valid email address';
}

/**
 * An address (or a term looked for in addresses) as it is matched, ignoring case: ASCII letters lowered,
 * nothing else. Addresses are ASCII; String#toLowerCase would also turn U+212A (KELVIN SIGN) into `k`, so a
 * term no address can hold would find, update or delete an ASCII contact.
 */
export function matchCase(text: string): string {
  return text.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
}

/** An address string with its display name: the schema's bound, kept here too (the rules run anyway). */
export const MAX_MAILBOX = 1000;

/**
 * `Name <address>`: the name and what the last `<` and the final `>` enclose, found by a scan: a regex
 * (`^(.*?)\s*<([^<>]*)>$`) backtracks quadratically on a long run of spaces before a `<`, holding the event
 * loop for seconds.
 */
function splitAngle(value: string): { name: string; address: string } | undefined {
  if (!value.endsWith('>')) return undefined;
  const open = value.lastIndexOf('<');
  if (open < 0) return undefined;
  const address = value.slice(open + 1, -1);
  if (address.includes('>')) return undefined;
  return { name: value.slice(0, open), address };
}

/** What reads as a MIME encoded-word (RFC 2047) to a mail client. */
export const ENCODED_WORD = /=\?[^?\s]+\?[BbQq]\?[^?\s]*\?=/;

/** Returns the parsed mailbox, or a message saying what is wrong with it. */
export function parseMailbox(input: string): ParsedAddress | string {
  // Bounded before any other look at it: the rules run even where the schema refused the value.
  if (input.length > MAX_MAILBOX) return `must be at most ${MAX_MAILBOX} characters`;
  if (/[\r\n\0]/.test(input)) return 'must not contain line breaks';
  const value = input.trim();
  if (value === '') return 'must not be empty';
  const angle = splitAngle(value);
  if (!angle) {
    // Told the limit only if it reads as one address: `Name <a@b.example` (no `>`) is no address too long.
    if (/[\s<>"]/.test(value)) return 'must be a valid email address';
    return addressProblem(value) ?? { name: undefined, address: value };
  }
  const rawName = angle.name.trim();
  const address = angle.address.trim();
  // The address alone is bounded: the whole string may be within 254 with its name.
  if (longerThan(address, MAX_ADDRESS)) return `address must be at most ${MAX_ADDRESS} characters`;
  if (!isValidEmail(address)) return 'must be a valid email address';
  let name = rawName;
  if (name.startsWith('"') && name.endsWith('"') && name.length >= 2) {
    // One quoted string, whole: `\` escapes the character after it, so `"a\"` never ends and in
    // `"a\\" b"` the string ends after `a\\`, with ` b"` left over.
    const quoted = /^"((?:[^"\\]|\\.)*)"$/s.exec(name);
    if (!quoted) return 'display name has an unescaped quote';
    // Without the white space at its ends, which nodemailer trims from the name it writes (NBSP too):
    // kept, the name stored and shown would not be the one sent (helper-144).
    name = quoted[1]!.replace(/\\(.)/gs, '$1').trim();
  } else if (/[",;:<>@()[\]\\]/.test(name)) {
    // An unquoted comma, semicolon or colon would make mail clients read several addresses or a group.
    return 'display name with special characters must be quoted';
  }
  if (longerThan(name, 256)) return 'display name must be at most 256 characters';
  // nodemailer drops them from the name it writes: the recipient would read another name than was stored.
  if (hasControl(name)) return 'display name must not contain control characters';
  // Mail clients decode `=?UTF-8?B?QWRtaW4=?=` to "Admin"; sent encoded again, it may not be quoted (RFC
  // 2047), so it could not arrive as written either way. Names are plain text; Mailroom encodes them.
  if (ENCODED_WORD.test(name)) {
    return 'display name must be plain text, not a MIME encoded-word (=?charset?B?…?=): Mailroom encodes it';
  }
  return { name: name === '' ? undefined : name, address };
}

/** Whether the text holds a C0 control character other than a tab, or DEL. */
function hasControl(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if ((code < 0x20 && code !== 0x09) || code === 0x7f) return true;
  }
  return false;
}

export function formatMailbox(m: ParsedAddress): string {
  if (!m.name) return m.address;
  // Quote only names that need it, so what the client wrote is what it reads back.
  if (!/[",;:<>@()[\]\\.]/.test(m.name)) return `${m.name} <${m.address}>`;
  return `"${m.name.replace(/(["\\])/g, '\\$1')}" <${m.address}>`;
}

export function domainOf(address: string): string {
  return address.slice(address.lastIndexOf('@') + 1).toLowerCase();
}

/** The operator's MAIL_FROM: the same syntax, but a dotless domain such as `localhost` is allowed. */
export function parseConfiguredMailbox(input: string): ParsedAddress | undefined {
  const strict = parseMailbox(input);
  if (typeof strict !== 'string') return strict;
  const m = /^\s*(?:(.*?)\s*<([^\s@<>]+@[A-Za-z0-9-]+)>|([^\s@<>]+@[A-Za-z0-9-]+))\s*$/.exec(input);
  if (!m || /[\r\n]/.test(input)) return undefined;
  const name = m[1]?.replace(/^"(.*)"$/, '$1').trim();
  return { name: name || undefined, address: (m[2] ?? m[3])! };
}
