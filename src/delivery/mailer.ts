// The messenger side of delivery: what the worker hands a Mailer and what it gets back. SMTP goes through a
// relay (smtp-mailer.ts), or messages go to a file outbox when none is configured (file-outbox.ts). Both
// build the MIME with nodemailer from mailOptions below; Mailroom never writes MIME or SMTP itself.
import type Mail from 'nodemailer/lib/mailer/index.js';
import { encodeWord, hasLongerLines, isPlainText } from 'nodemailer/lib/mime-funcs';
import { ENCODED_WORD } from '../validation/addresses.js';
import { isPrintableAscii } from '../validation/characters.js';
import { isMessageIdHeader, isUnencodableHeader } from '../emails/emails.rules.js';

export interface OutgoingMessage {
  id: string;
  messageId: string;
  date: Date;
  from: string;
  /** Envelope sender: the bare address of `from`. */
  envelopeFrom: string;
  to: string[];
  cc: string[];
  replyTo: string[];
  subject: string;
  html: string | null;
  text: string | null;
  headers: Record<string, string>;
  /** Envelope recipients still to deliver; Bcc lives only here, never in the headers. */
  recipients: string[];
}

export interface RecipientFailure {
  address: string;
  response: string;
  permanent: boolean;
}

export interface DeliveryResult {
  accepted: string[];
  rejected: RecipientFailure[];
  response: string;
}

/**
 * The whole message failed; `permanent` is a 5xx for the message, otherwise it will be retried.
 * `relayFault`: the relay itself may have failed (no connection, TLS, its greeting, AUTH, a 421), not only
 * this message: the worker checks the relay, and stops claiming while it fails (RelayPause).
 */
export class DeliveryError extends Error {
  constructor(
    message: string,
    readonly permanent: boolean,
    readonly relayFault = false,
  ) {
    super(message);
  }
}

/** The send was never begun: no verdict on the email, whose lease may be another worker's by now. */
export class NotStartedError extends Error {}

export interface SendOptions {
  /**
   * Epoch ms past which the message is not handed to the relay: a send still waiting for a connection then
   * rejects with NotStartedError. The worker gives its lease's end less a margin, so a process paused
   * meanwhile does not send mail whose lease ran out (another worker sends it).
   */
  startBy?: number | undefined;
}

export interface Mailer {
  readonly description: string;
  send(message: OutgoingMessage, options?: SendOptions): Promise<DeliveryResult>;
  /** A later startBy for these emails' sends (by OutgoingMessage.id) not begun yet: their leases were renewed. */
  extend?(emailIds: string[], startBy: number): void;
  /**
   * Stops this email's send: dropped if not begun (it rejects with NotStartedError), its connection closed if
   * talking to the relay. The worker records it deferred, so it must not also go out later: certain before
   * its data, but data already written may still be taken by the relay.
   */
  cancel?(emailId: string): void;
  /**
   * Connects to the relay as a send would (TLS, AUTH) and quits, sending nothing; rejects with the
   * DeliveryError a send would get. Absent where there is no relay to fail.
   */
  check?(): Promise<void>;
  close(): Promise<void>;
}

export interface DkimOptions {
  domainName: string;
  keySelector: string;
  privateKey: string;
}

/**
 * A subject nodemailer can fold into lines of at most 998 octets, and that reads back as stored. It folds
 * only at whitespace, so a subject with a word of 900+ characters (the API allows 998), or a run of 60
 * spaces (folding would leave lines of spaces alone, which readers shrink), goes as RFC 2047 encoded-words:
 * they fold between words and decode to the same text. So does one with a space or tab at either end, which
 * parsers drop from a value written out.
 */
export function foldableSubject(subject: string): string {
  return /\S{900}/.test(subject) || READERS_CHANGE.test(subject)
    ? encodeWord(subject, 'Q', 52)
    : literal(subject);
}

/**
 * Whitespace that readers change in a header value written out: dropped at either end, a run of 60 folded
 * into lines of spaces alone.
 */
const READERS_CHANGE = /^[ \t]|[ \t]$|[ \t]{60}/;

/**
 * A subject holding what reads as a MIME encoded-word (`=?UTF-8?B?SGFja2Vk?=`) is itself encoded, or mail
 * clients would decode it and show other words than the API stored. (Display names cannot be: an encoded-word
 * may not be quoted, so the API refuses such names.)
 */
function literal(text: string): string {
  return ENCODED_WORD.test(text) ? encodeWord(text, 'Q', 52) : text;
}

/**
 * Custom headers as the API took them. Printable ASCII goes out as written, folded at its spaces: nodemailer
 * would encode a value with a `"`, which relays reading JSON metadata headers (X-SMTPAPI) then cannot read.
 * Encoded (RFC 2047): other characters, and what readers would change if sent raw: `=?` (decoded), a space or
 * tab at either end (dropped), a run of 60 spaces (folded into lines of spaces alone). Never encoded: headers
 * that cannot be (isUnencodableHeader), and In-Reply-To and References, which nodemailer writes as message
 * ids, in angle brackets.
 */
function customHeaders(headers: Record<string, string>): Mail.Headers {
  const out: Record<string, string | { prepared: true; foldLines: true; value: string }> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (isMessageIdHeader(name)) out[name] = messageIds(value);
    else {
      // An unencodable header is printable ASCII, as the API refuses others; one queued before the API did so
      // is still encoded rather than sent as raw 8-bit.
      const asWritten = (isUnencodableHeader(name) && isPrintableAscii(value)) || writable(value);
      out[name] = { prepared: true, foldLines: true, value: asWritten ? value : encodeWord(value, 'Q', 52) };
    }
  }
  return out as Mail.Headers;
}

/**
 * Each id of an In-Reply-To or References value in its angle brackets, one space between them: nodemailer
 * brackets the value as a whole (`a@x b@y` went out as `<a@x b@y>`). The API takes only ids (emails.rules.ts);
 * an email queued before it did still goes out one id a word.
 */
function messageIds(value: string): string {
  return value
    .trim()
    .split(/\s+/)
    .map((id) => `<${id.replace(/^<|>$/g, '')}>`)
    .join(' ');
}

/** Whether a text reads back as written in a header: printable ASCII with nothing parsers change. */
function writable(text: string): boolean {
  return isPrintableAscii(text) && !text.includes('=?') && !READERS_CHANGE.test(text);
}

/**
 * Bare CRs made line breaks (CRLF), as the SMTP client makes them on the wire anyway: nodemailer signs the
 * body as given, so a `\r\r\n` left in would break the DKIM signature, and the file outbox would drop the CR
 * and join the lines.
 */
function lines(body: string | null): string | undefined {
  return body?.replace(/\r(?!\n)/g, '\r\n') ?? undefined;
}

/**
 * A body part in the smaller of the two transfer encodings (encodedSizes). nodemailer's own choice counts
 * letters (quoted-printable while Latin letters outnumber the rest), which sent Polish or Vietnamese text,
 * or Japanese HTML among its tags, at about twice its size where base64 takes 1.37 times; and it sends
 * printable ASCII in quoted-printable once a line passes 76 characters or the text 128 KiB, each `=` then
 * three bytes. Printable ASCII in lines of at most 76 characters it sends as written (7bit).
 */
function bodyPart(body: string | null): { part: Mail.Options['text']; size: number } {
  const content = lines(body);
  if (content === undefined) return { part: undefined, size: 0 };
  if (isPlainText(content) && !hasLongerLines(content, 76)) {
    // Each bare line break goes out as CRLF.
    return { part: content, size: content.length + (content.match(BARE_LF)?.length ?? 0) };
  }
  const { quotedPrintable, base64 } = encodedSizes(content);
  if (quotedPrintable <= base64) {
    const part = { content, contentTransferEncoding: 'quoted-printable' } as Mail.AttachmentLike;
    return { part, size: quotedPrintable };
  }
  // Text is encoded in its canonical form, each line break CRLF (RFC 2045 6.8): quoted-printable and 7bit
  // lines get theirs on the wire, base64 carries what it is given.
  const canonical = content.replace(BARE_LF, '\r\n');
  const part = { content: canonical, contentTransferEncoding: 'base64' } as Mail.AttachmentLike;
  return { part, size: base64 };
}

/** A line break without its CR (lines() leaves no CR without its LF). */
const BARE_LF = /(?<!\r)\n/g;

/**
 * The bytes a body takes in each transfer encoding, as nodemailer writes them. Quoted-printable writes a
 * byte it escapes as three (non-ASCII, `=`, control characters, a space or tab before a line break), a
 * line break as CRLF, and breaks lines past 76 characters with `=` CRLF; base64 writes every three bytes
 * of the text with CRLF line breaks as four, in lines of 76.
 */
export function encodedSizes(content: string): { quotedPrintable: number; base64: number } {
  let bytes = 0;
  let quotedPrintable = 0;
  let line = 0;
  for (let i = 0; i < content.length; i++) {
    const c = content.charCodeAt(i);
    if (c === 0x0a || c === 0x0d) {
      // CR LF, or a bare LF: CRLF either way (lines() leaves no bare CR, and base64 is given CRLF).
      if (c === 0x0a) {
        bytes += 2;
        quotedPrintable += 2;
      }
      line = 0;
      continue;
    }
    let width: number;
    if (c < 0x80) {
      bytes++;
      const escaped =
        c === 0x3d ||
        c === 0x7f ||
        (c < 0x20 && c !== 0x09) ||
        ((c === 0x20 || c === 0x09) && beforeBreak(content, i));
      width = escaped ? 3 : 1;
    } else {
      // Two bytes below U+0800, and each half of a surrogate pair two of its four; three otherwise.
      const n = c < 0x800 || (c >= 0xd800 && c <= 0xdfff) ? 2 : 3;
      bytes += n;
      width = 3 * n;
    }
    if (line + width > 75) {
      quotedPrintable += 3;
      line = 0;
    }
    quotedPrintable += width;
    line += width;
  }
  const encoded = 4 * Math.ceil(bytes / 3);
  return { quotedPrintable, base64: encoded + 2 * Math.ceil(encoded / 76) };
}

/** Whether the character at `i` ends its line: quoted-printable escapes a space or tab there. */
function beforeBreak(content: string, i: number): boolean {
  const next = content.charCodeAt(i + 1);
  return Number.isNaN(next) || next === 0x0a || next === 0x0d;
}

/**
 * The headers DKIM signs: nodemailer's own list (RFC 6376's recommendations, where present) and
 * List-Unsubscribe-Post, which RFC 8058 requires signed for one-click unsubscribe to be honoured.
 */
const SIGNED_HEADERS = [
  'From:Sender:Reply-To:Subject:Date:Message-ID:To:Cc:MIME-Version:Content-Type:Content-Transfer-Encoding',
  'Content-ID:Content-Description:Resent-Date:Resent-From:Resent-Sender:Resent-To:Resent-Cc',
  'Resent-Message-ID:In-Reply-To:References:List-Id:List-Help:List-Unsubscribe:List-Subscribe:List-Post',
  'List-Owner:List-Archive:OTP-Token:List-Unsubscribe-Post',
].join(':');

/** What nodemailer builds the MIME from; every Mailer uses it, so SMTP and the outbox write one message. */
export function mailOptions(m: OutgoingMessage, dkim: DkimOptions | undefined): Mail.Options {
  const text = bodyPart(m.text);
  const html = bodyPart(m.html);
  return {
    messageId: m.messageId,
    date: m.date,
    from: m.from,
    to: m.to.length > 0 ? m.to : undefined,
    cc: m.cc.length > 0 ? m.cc : undefined,
    replyTo: m.replyTo.length > 0 ? m.replyTo : undefined,
    subject: foldableSubject(m.subject),
    text: text.part,
    html: html.part,
    headers: customHeaders(m.headers),
    // SIZE (RFC 1870): the bodies' size as they go out, short of the headers, so never more than the
    // message. A relay that announces a smaller limit is not sent the message at all: nodemailer refuses
    // it before MAIL FROM (a final failure: smtp-relay.ts isPermanent), where the relay would have taken
    // the whole message in before its 552.
    envelope: { from: m.envelopeFrom, to: m.recipients, size: text.size + html.size },
    // Content is never read from files or URLs, whatever a field contains.
    disableFileAccess: true,
    disableUrlAccess: true,
    dkim: dkim && { ...dkim, headerFieldNames: SIGNED_HEADERS },
  };
}
