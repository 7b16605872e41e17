// The messenger side of delivery: what the worker hands a Mailer and what it gets back. SMTP goes through a
// relay (smtp-mailer.ts), or messages go to a file outbox when none is configured (file-outbox.ts). Both
// build the MIME with nodemailer from mailOptions below; Mailroom never writes MIME or SMTP itself.
import type Mail from 'nodemailer/lib/mailer/index.js';
import { encodeWord } from 'nodemailer/lib/mime-funcs';
import { ENCODED_WORD } from '../validation/addresses.js';
import { isPrintableAscii } from '../validation/characters.js';
import { isUnencodableHeader } from '../emails/emails.rules.js';

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

/** The whole message failed; `permanent` is a 5xx for the message, otherwise it will be retried. */
export class DeliveryError extends Error {
  constructor(
    message: string,
    readonly permanent: boolean,
  ) {
    super(message);
  }
}

/** The send was never begun: no verdict on the email, whose lease may be another worker's by now. */
export class NotStartedError extends Error {}

export interface SendOptions {
  /**
   * Epoch ms past which the message is not handed to the relay: a send still waiting for a connection then
   * rejects with NotStartedError. The worker gives its lease's end, less a margin, so that a paused process
   * does not send, once it runs again, mail whose lease ran out meanwhile (another worker sends it).
   */
  startBy?: number | undefined;
}

export interface Mailer {
  readonly description: string;
  send(message: OutgoingMessage, options?: SendOptions): Promise<DeliveryResult>;
  /** A later startBy for these emails' sends (by OutgoingMessage.id) not begun yet: their leases were renewed. */
  extend?(emailIds: string[], startBy: number): void;
  /**
   * Stops this email's send: dropped if it has not begun (it rejects with NotStartedError), its connection
   * closed if it is talking to the relay. The worker stopped waiting for it and records it deferred, so it
   * must not go out later as well as on its retry: certain for a send not begun, or stuck before its data;
   * data already written may still be taken by the relay.
   */
  cancel?(emailId: string): void;
  close(): Promise<void>;
}

export interface DkimOptions {
  domainName: string;
  keySelector: string;
  privateKey: string;
}

/**
 * A subject nodemailer can fold into lines of at most 998 octets. It folds at whitespace only, so a word
 * of 900+ characters (the API allows 998) went out on a line of 999; such a subject is given as MIME
 * encoded-words (RFC 2047, nodemailer's own encoder), which fold between words and decode to the same text.
 * So is a subject with a run of 60 spaces, which folding would turn into lines of spaces alone (obsolete
 * syntax: readers shrink the run).
 */
export function foldableSubject(subject: string): string {
  return /\S{900}|[ \t]{60}/.test(subject) ? encodeWord(subject, 'Q', 52) : literal(subject);
}

/**
 * A subject that holds what reads as a MIME encoded-word (`=?UTF-8?B?SGFja2Vk?=`), itself encoded: sent as
 * it is, mail clients decode it ("Hacked"), and the recipient reads other words than the API stored and
 * shows. (Display names cannot be: an encoded-word may not be quoted, so the API refuses such names.)
 */
function literal(text: string): string {
  return ENCODED_WORD.test(text) ? encodeWord(text, 'Q', 52) : text;
}

/**
 * Custom headers as the API took them. A value of printable ASCII goes out as written, folded at its spaces
 * as nodemailer folds every header: left to nodemailer, any value with a `"` went out as an encoded-word
 * (`X-SMTPAPI: =?UTF-8?Q?=7B=22category=22...`), which relays reading JSON metadata headers cannot read.
 * MIME-encoded here (RFC 2047, as subjects that need it): values with other characters; with what reads as
 * an encoded-word (`=?`: written out, readers would decode it to other text than was sent); with a space or
 * tab at either end (parsers drop them); with a run of 60 spaces, which folding would turn into lines of
 * spaces alone (obsolete syntax, and readers shrink the run). Nodemailer itself encodes only values with a
 * `"` or a non-ASCII character, so it sent the others raw. Never encoded: headers that cannot be
 * (isUnencodableHeader, printable ASCII by then), and In-Reply-To and References, which nodemailer writes as
 * message ids, with the angle brackets an id lacks.
 */
function customHeaders(headers: Record<string, string>): Mail.Headers {
  const out: Record<string, string | { prepared: true; foldLines: true; value: string }> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (MESSAGE_ID_HEADERS.has(name.toLowerCase())) out[name] = value;
    else {
      // An unencodable header is printable ASCII since the API refused others; one accepted before that
      // (queued across the upgrade) is encoded as it used to be rather than sent as raw 8-bit.
      const asWritten = (isUnencodableHeader(name) && isPrintableAscii(value)) || writable(value);
      out[name] = { prepared: true, foldLines: true, value: asWritten ? value : encodeWord(value, 'Q', 52) };
    }
  }
  return out as Mail.Headers;
}

const MESSAGE_ID_HEADERS = new Set(['in-reply-to', 'references']);

/** Whether a text reads back as written in a header: printable ASCII with nothing parsers change. */
function writable(text: string): boolean {
  return isPrintableAscii(text) && !text.includes('=?') && !/^[ \t]|[ \t]$|[ \t]{60}/.test(text);
}

/**
 * A body whose bare CRs are line breaks (CRLF), as the SMTP client makes them on the wire anyway: nodemailer
 * signs the body as given, so a `\r\r\n` left in broke the DKIM signature of every such message, and the
 * file outbox dropped the CR and joined the lines.
 */
function lines(body: string | null): string | undefined {
  return body?.replace(/\r(?!\n)/g, '\r\n') ?? undefined;
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
  return {
    messageId: m.messageId,
    date: m.date,
    from: m.from,
    to: m.to.length > 0 ? m.to : undefined,
    cc: m.cc.length > 0 ? m.cc : undefined,
    replyTo: m.replyTo.length > 0 ? m.replyTo : undefined,
    subject: foldableSubject(m.subject),
    text: lines(m.text),
    html: lines(m.html),
    headers: customHeaders(m.headers),
    envelope: { from: m.envelopeFrom, to: m.recipients },
    // Content is never read from files or URLs, whatever a field contains.
    disableFileAccess: true,
    disableUrlAccess: true,
    textEncoding: 'quoted-printable',
    dkim: dkim && { ...dkim, headerFieldNames: SIGNED_HEADERS },
  };
}
