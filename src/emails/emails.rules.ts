// The rules of contract.md "Email sending" that a JSON schema cannot say: address syntax, CR/LF, refused
// header names, the cc+bcc total, and which From is used. Everything is reported at once, by field path.
import type { Static } from 'typebox';
import { DetailCollector, type ErrorDetail } from '../errors.js';
import { type ParsedAddress, domainOf, formatMailbox, parseMailbox } from '../validation/addresses.js';
import { isPrintableAscii } from '../validation/characters.js';
import { isObject } from '../validation/guards.js';
import type { SendEmailBody } from './emails.schemas.js';

export const MAX_TO = 50;
export const MAX_CC_BCC = 50;

/** An email's delivery states (contract.md): queued → sending → sent | deferred | failed. */
export const EMAIL_STATUSES = ['queued', 'sending', 'sent', 'deferred', 'failed'] as const;
export type EmailStatus = (typeof EMAIL_STATUSES)[number];
/** An email's events: one each time it enters a state (docs/behaviour.md). */
export const EMAIL_EVENT_TYPES = EMAIL_STATUSES;

export type SendEmailInput = Static<typeof SendEmailBody>;

export const REFUSED_HEADERS = new Set(
  [
    'From',
    'Sender',
    'To',
    'Cc',
    'Bcc',
    'Reply-To',
    'Subject',
    'Date',
    'Message-ID',
    'Return-Path',
    'Received',
    'DKIM-Signature',
    'MIME-Version',
    'Content-Type',
    'Content-Transfer-Encoding',
    // Not in the contract's list, but as structural: at the top it makes mail clients show the body as a file.
    'Content-Disposition',
    // Nor these: what receiving servers write about a message's trust and route (RFC 8601, 7208, 8617).
    // A sender's own copy would pass for their verdict with filters and clients that do not strip it.
    'Authentication-Results',
    'Received-SPF',
    'Delivered-To',
  ].map((h) => h.toLowerCase()),
);

/**
 * Whole families Mailroom keeps for itself: `Content-*` (but Content-Language and Content-Description)
 * describe the MIME structure it builds, and `Content-Base` or `Content-Location` could point mail clients at
 * other files; `Resent-*` name senders and recipients, getting around the From rule in clients that show
 * them; `ARC-*` are a receiving server's sealed record of the authentication it saw (RFC 8617).
 */
const REFUSED_PREFIXES = ['content-', 'resent-', 'arc-'];
/** Content-* headers that say nothing about the structure: a localised message's language, a label. */
const ALLOWED_CONTENT = new Set(['content-language', 'content-description']);

/** Whether a custom header name is reserved: Mailroom's own, or other mail servers' (refused in `headers`). */
export function isRefusedHeader(name: string): boolean {
  const lower = name.toLowerCase();
  if (ALLOWED_CONTENT.has(lower)) return false;
  return REFUSED_HEADERS.has(lower) || REFUSED_PREFIXES.some((prefix) => lower.startsWith(prefix));
}

/**
 * Headers whose values are message ids (RFC 5322), structured fields (OTP-Token) or a mailing list's URLs and
 * id (RFC 2369, 2919, 8058): an encoded-word in them reads as literal text, and clients lose the message, the
 * unsubscribe link or the list. So they go out as written and must be printable ASCII (a URL percent-encodes
 * the rest): raw 8-bit may be refused by relays without SMTPUTF8.
 */
const UNENCODABLE_HEADERS = new Set([
  'in-reply-to',
  'references',
  'otp-token',
  'list-id',
  'list-help',
  'list-unsubscribe',
  'list-unsubscribe-post',
  'list-subscribe',
  'list-post',
  'list-owner',
  'list-archive',
]);

/** Headers whose value is a list of message ids (RFC 5322 3.6.4): In-Reply-To, References. */
export const isMessageIdHeader = (name: string): boolean => /^(in-reply-to|references)$/i.test(name);

/**
 * One or more message ids, separated by white space, each with or without its angle brackets. A comment,
 * a comma or a space inside an id went out broken (`<a@x> (c)` as `<a@x> (c)>`, `hello world` as one id
 * `<hello world>`): nodemailer brackets the whole value, not each id.
 */
const MESSAGE_ID = String.raw`(?:<[^<>\s(),;"\\]+>|[^<>\s(),;"\\]+)`;
const MESSAGE_IDS = new RegExp(String.raw`^\s*${MESSAGE_ID}(?:\s+${MESSAGE_ID})*\s*$`);

/** Whether a custom header's value must go out as written, never MIME-encoded (UNENCODABLE_HEADERS). */
export const isUnencodableHeader = (name: string): boolean => UNENCODABLE_HEADERS.has(name.toLowerCase());

/** A custom header's name: an RFC 5322 field name (printable US-ASCII except colon), this long at most. */
export const HEADER_NAME_PATTERN = '^[!-9;-~]+$';
export const MAX_HEADER_NAME = 100;
const FIELD_NAME = new RegExp(HEADER_NAME_PATTERN);
const CRLF = /[\r\n]/;

export interface Recipient {
  kind: 'to' | 'cc' | 'bcc';
  address: string;
}

export interface NormalizedEmail {
  from: string;
  fromReplaced: boolean;
  to: string[];
  cc: string[];
  bcc: string[];
  replyTo: string[];
  subject: string;
  html: string | null;
  text: string | null;
  headers: Record<string, string>;
  tags: { name: string; value: string }[];
  /** Envelope recipients, each address once (to before cc before bcc). */
  recipients: Recipient[];
}

type Loose = Record<string, unknown>;

const asList = (v: unknown): unknown[] => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
const missing = (v: unknown): boolean => v === undefined || v === null || v === '';

/** Parses the strings among `value`; values of another type are left for the schema to report. */
function mailboxes(errors: DetailCollector, field: string, value: unknown): ParsedAddress[] {
  const out: ParsedAddress[] = [];
  asList(value).forEach((raw, i) => {
    if (typeof raw !== 'string') return;
    const parsed = parseMailbox(raw);
    const path = Array.isArray(value) ? `${field}[${i}]` : field;
    if (typeof parsed === 'string') errors.add(path, parsed);
    else out.push(parsed);
  });
  return out;
}

/** The rules beyond the schema; tolerant of wrong types, so they can run beside a failed schema check. */
function checkRules(body: Loose, errors: DetailCollector) {
  const to = mailboxes(errors, 'to', body.to);
  const cc = mailboxes(errors, 'cc', body.cc);
  const bcc = mailboxes(errors, 'bcc', body.bcc);
  const replyTo = mailboxes(errors, 'replyTo', body.replyTo);
  const from = mailboxes(errors, 'from', body.from);

  const ccCount = asList(body.cc).length;
  const bccCount = asList(body.bcc).length;
  if (ccCount <= MAX_CC_BCC && bccCount <= MAX_CC_BCC && ccCount + bccCount > MAX_CC_BCC) {
    errors.add('bcc', `cc and bcc together must have at most ${MAX_CC_BCC} addresses`);
  }
  if (typeof body.subject === 'string' && CRLF.test(body.subject))
    errors.add('subject', 'must not contain line breaks');
  if (missing(body.html) && missing(body.text)) errors.add('html', 'html or text is required');

  const headers: Record<string, string> = {};
  // Header names are case-insensitive (RFC 5322): X-Ref and x-ref would both go out, as two headers.
  const names = new Map<string, string>();
  for (const [name, value] of Object.entries(isObject(body.headers) ? body.headers : {})) {
    const field = `headers.${name}`;
    const first = names.get(name.toLowerCase());
    names.set(name.toLowerCase(), first ?? name);
    if (!FIELD_NAME.test(name) || name.length > MAX_HEADER_NAME) {
      errors.add(
        field,
        `is not a valid header name: at most ${MAX_HEADER_NAME} printable ASCII characters, without \`:\``,
      );
    } else if (isRefusedHeader(name)) {
      // Not all are Mailroom's own (Resent-*, ARC-*, Received-SPF are other parties' to write).
      errors.add(field, 'is reserved: Mailroom builds it, or only mail servers on the way may write it');
    } else if (first !== undefined) {
      errors.add(field, `is the header ${first} again (header names are case-insensitive): give it once`);
    } else if (typeof value !== 'string') continue;
    else if (CRLF.test(value)) errors.add(field, 'must not contain line breaks');
    else if (isUnencodableHeader(name) && !isPrintableAscii(value)) {
      errors.add(field, 'must be printable ASCII (percent-encode a URL): this header cannot be MIME-encoded');
    } else if (isMessageIdHeader(name) && !MESSAGE_IDS.test(value)) {
      errors.add(field, 'must be message ids separated by spaces, such as <a@acme.test> <b@acme.test>');
    } else headers[name] = value;
  }
  return { to, cc, bcc, replyTo, from, headers };
}

/** For the schema (withRules): every rule broken by a body, whatever else is wrong with it. */
export function emailBodyRules(body: Loose): ErrorDetail[] {
  const errors = new DetailCollector();
  checkRules(body, errors);
  return errors.details;
}

/** `defaultFrom` is MAIL_FROM, parsed once by the caller. */
export function normalizeEmail(body: SendEmailInput, defaultFrom: ParsedAddress): NormalizedEmail {
  const errors = new DetailCollector();
  const { to, cc, bcc, replyTo, from, headers } = checkRules(body, errors);
  errors.throwIfAny();
  const html = body.html ?? null;
  const text = body.text ?? null;

  // `from` is used only when it is in MAIL_FROM's domain; otherwise MAIL_FROM is used (contract.md).
  const requested = from[0];
  const allowed = requested !== undefined && domainOf(requested.address) === domainOf(defaultFrom.address);

  const recipients: Recipient[] = [];
  const seen = new Set<string>();
  const kinds: [Recipient['kind'], ParsedAddress[]][] = [
    ['to', to],
    ['cc', cc],
    ['bcc', bcc],
  ];
  for (const [kind, list] of kinds) {
    for (const m of list) {
      const key = m.address.toLowerCase();
      if (seen.has(key)) continue;
      seen.add(key);
      recipients.push({ kind, address: m.address });
    }
  }

  return {
    from: formatMailbox(allowed ? requested : defaultFrom),
    fromReplaced: requested !== undefined && !allowed,
    to: to.map(formatMailbox),
    cc: cc.map(formatMailbox),
    bcc: bcc.map(formatMailbox),
    replyTo: replyTo.map(formatMailbox),
    subject: body.subject,
    html,
    text,
    headers,
    tags: body.tags ?? [],
    recipients,
  };
}
