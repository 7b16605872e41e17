// The pooled nodemailer transport that speaks to the relay (it runs on the SMTP thread), and how its
// answers and errors become delivery results, with the relay's address kept out of what is stored.
import { relayForm } from './relay-address.js';
import { BlockList, isIP } from 'node:net';
import { Transform } from 'node:stream';
import nodemailer, { type Transporter } from 'nodemailer';
import type Mail from 'nodemailer/lib/mailer/index.js';
import type SMTPPool from 'nodemailer/lib/smtp-pool/index.js';
import {
  DeliveryError,
  type DeliveryResult,
  type DkimOptions,
  NotStartedError,
  type OutgoingMessage,
  type RecipientFailure,
  mailOptions,
} from './mailer.js';

export interface SmtpError extends Error {
  code?: string;
  responseCode?: number;
  response?: string;
  rejectedErrors?: SmtpError[];
  recipient?: string;
  /** The SMTP command the answer was to (nodemailer's `command`: 'MAIL FROM', 'RCPT TO', 'DATA'). */
  command?: string;
}

export interface SmtpMailerOptions {
  url: string;
  /** SMTP_REQUIRE_TLS; unset: required when the URL has credentials and the relay is not on loopback. */
  requireTls?: boolean | undefined;
  dkim?: DkimOptions | undefined;
  maxConnections?: number;
  connectionTimeoutMs?: number;
  socketTimeoutMs?: number;
}

interface Waiting {
  id: string;
  startBy: number;
  begin: () => void;
  refuse: (err: Error) => void;
}

/** The pooled nodemailer transport itself; it runs on the SMTP thread. */
export class SmtpRelay {
  private readonly transport: Transporter<SMTPPool.SentMessageInfo>;
  private readonly maxConnections: number;
  /**
   * Sends wait here for a connection, oldest first, rather than in the pool's own queue: a send is handed to
   * nodemailer only while its startBy holds (SendOptions), checked when its turn comes.
   */
  private readonly waiting: Waiting[] = [];
  private active = 0;
  /** Whether next() is set to run (nextSoon). */
  private nextSet = false;
  /** Sends handed to nodemailer, by email id: cancel() aborts them. */
  private readonly begun = new Map<string, AbortController>();
  /** The relay's host as configured, kept out of what is stored (relayText). */
  private readonly host: string;

  constructor(private readonly options: SmtpMailerOptions) {
    const url = new URL(options.url);
    this.host = hostOf(url);
    this.maxConnections = options.maxConnections ?? 5;
    const auth = url.username
      ? { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) }
      : undefined;
    this.transport = nodemailer.createTransport({
      pool: true,
      host: this.host,
      port: url.port ? Number(url.port) : url.protocol === 'smtps:' ? 465 : 587,
      secure: url.protocol === 'smtps:',
      auth,
      requireTLS: tlsRequired(options.url, options.requireTls),
      // Credentials are used or the send fails: a relay that does not offer AUTH would otherwise get the
      // mail unauthenticated, without a word.
      forceAuth: auth !== undefined,
      maxConnections: this.maxConnections,
      maxMessages: Infinity,
      connectionTimeout: options.connectionTimeoutMs ?? 30_000,
      greetingTimeout: options.connectionTimeoutMs ?? 30_000,
      socketTimeout: options.socketTimeoutMs ?? 60_000,
      disableFileAccess: true,
      disableUrlAccess: true,
    });
    // nodemailer's stage for plugins that see the built message (before DKIM signs it).
    this.transport.use('stream', (mail, done) => {
      mail.message.transform(() => coalesced());
      done();
    });
  }

  async send(message: OutgoingMessage, startBy = Infinity): Promise<DeliveryResult> {
    await new Promise<void>((begin, refuse) => {
      this.waiting.push({ id: message.id, startBy, begin, refuse });
      this.nextSoon();
    });
    const abort = new AbortController();
    this.begun.set(message.id, abort);
    try {
      return await this.transmit(message, abort.signal);
    } finally {
      if (this.begun.get(message.id) === abort) this.begun.delete(message.id);
      this.active--;
      this.nextSoon();
    }
  }

  /** Connects, greets, starts TLS and authenticates as a send would, then quits (nodemailer's verify). */
  async check(): Promise<void> {
    try {
      await this.transport.verify();
    } catch (err) {
      throw new DeliveryError(relayText(err as SmtpError, this.host), false, true);
    }
  }

  /** Sends not begun yet of these emails may begin until `startBy`: their leases were renewed. */
  extend(emailIds: string[], startBy: number): void {
    const ids = new Set(emailIds);
    for (const w of this.waiting) if (ids.has(w.id)) w.startBy = Math.max(w.startBy, startBy);
  }

  /**
   * Drops this email's send not begun yet, and closes the connection of one talking to the relay
   * (nodemailer's abort; bytes already written still go out): the worker gave up waiting for it
   * (Mailer.cancel).
   */
  cancel(emailId: string): void {
    for (let i = this.waiting.length - 1; i >= 0; i--) {
      const turn = this.waiting[i]!;
      if (turn.id !== emailId) continue;
      this.waiting.splice(i, 1);
      turn.refuse(new NotStartedError('the worker stopped waiting for it'));
    }
    this.begun.get(emailId)?.abort(new Error('the worker stopped waiting for it'));
  }

  /**
   * next(), once the messages the thread has in hand are read: one kept from its CPU reads a send whose
   * startBy has passed together with the renewals posted behind it (extend), and the lease they renewed stands.
   */
  private nextSoon(): void {
    if (this.nextSet) return;
    this.nextSet = true;
    setImmediate(() => {
      this.nextSet = false;
      this.next();
    });
  }

  /** Begins waiting sends while connections are free; one whose startBy has passed is refused. */
  private next(): void {
    while (this.active < this.maxConnections && this.waiting.length > 0) {
      const turn = this.waiting.shift()!;
      if (Date.now() > turn.startBy) {
        turn.refuse(new NotStartedError('its lease ran out before a connection to the relay was free'));
        continue;
      }
      this.active++;
      turn.begin();
    }
  }

  private async transmit(message: OutgoingMessage, signal: AbortSignal): Promise<DeliveryResult> {
    try {
      // nodemailer 10 takes `signal` (its types here predate it).
      const options = { ...mailOptions(message, this.options.dkim), signal } as Mail.Options;
      const info = await this.transport.sendMail(options);
      const accepted = (info.accepted ?? []).map(String);
      // RCPT TO goes in the envelope's order: a 552 reads as "too many" only after one the relay accepted.
      // Addresses as nodemailer reports them (relayForm). One accepted that cannot be placed counts as
      // before every other: a 552 then waits for its own attempt rather than fail for good.
      const place = new Map<string, number>();
      message.recipients.forEach((address, i) => {
        const key = relayForm(address);
        if (!place.has(key)) place.set(key, i);
      });
      const firstAccepted = Math.min(...accepted.map((a) => place.get(relayForm(a)) ?? -1));
      const rejectedErrors = ((info as { rejectedErrors?: SmtpError[] }).rejectedErrors ?? []).map((e) =>
        toFailure(e, this.host, firstAccepted < (place.get(relayForm(e.recipient ?? '')) ?? Infinity)),
      );
      return {
        accepted,
        rejected: rejectedErrors,
        // The relay's answer to the message's data.
        response: messageReply(info.response ?? '', this.host),
      };
    } catch (err) {
      const e = err as SmtpError;
      if (e.rejectedErrors && e.rejectedErrors.length > 0) {
        // Every recipient was refused at RCPT TO: each gets its own verdict.
        return {
          accepted: [],
          rejected: e.rejectedErrors.map((r) => toFailure(r, this.host, false)),
          response: relayText(e, this.host),
        };
      }
      // A send the worker cut off (cancel) says nothing of the relay.
      throw new DeliveryError(relayText(e, this.host), isPermanent(e), !signal.aborted && isRelayFault(e));
    }
  }

  close(): void {
    for (const turn of this.waiting.splice(0)) turn.refuse(new NotStartedError('the mailer closed'));
    this.transport.close();
  }
}

/**
 * Whether a send must go over TLS (STARTTLS on smtp://, where the relay not offering it fails the send):
 * as SMTP_REQUIRE_TLS says; unset, when SMTP_URL has credentials, which a relay off this host would
 * otherwise get in plain text if it does not offer STARTTLS (or a man in the middle strips it).
 */
export function tlsRequired(smtpUrl: string, setting: boolean | undefined): boolean {
  if (setting !== undefined) return setting;
  const url = new URL(smtpUrl);
  return url.username !== '' && !isLoopback(hostOf(url));
}

/** An IPv6 address without the URL's brackets, as a connection takes it (`[::1]` is no host name). */
function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

function isLoopback(host: string): boolean {
  const name = host.toLowerCase().replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  const family = isIP(name);
  return family !== 0 && LOOPBACK.check(name, family === 6 ? 'ipv6' : 'ipv4');
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');

/** The least a piece of a message handed to the socket holds, but its last. */
export const MESSAGE_PIECE_BYTES = 64 * 1024;

/**
 * The message in pieces of MESSAGE_PIECE_BYTES or more (the last may be shorter). nodemailer writes each
 * part's headers, boundary and body as chunks of their own, each a write to the relay's socket (8 for text
 * and HTML); joined, a short message goes out in one write plus the end of DATA, the relay reads it at once,
 * and each delivery costs less CPU.
 */
export function coalesced(): Transform {
  let pieces: Buffer[] = [];
  let size = 0;
  const joined = () => {
    // A piece large enough alone goes as it is: a body encoded in one chunk is not copied once more.
    const out = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, size);
    pieces = [];
    size = 0;
    return out;
  };
  return new Transform({
    transform(chunk: Buffer, _encoding, done) {
      pieces.push(chunk);
      size += chunk.length;
      done(null, size >= MESSAGE_PIECE_BYTES ? joined() : undefined);
    },
    flush(done) {
      done(null, size > 0 ? joined() : undefined);
    },
  });
}

/**
 * A socket error's text without the relay's address (`connect ECONNREFUSED 10.0.0.7:25`): it is stored as
 * the email's lastError, which every key of the organisation can read, and the relay is the operator's. So
 * is what the relay says of the connection (its greeting, EHLO, AUTH, MAIL FROM): every address in it goes.
 */
export function withoutAddress(message: string, host: string): string {
  return (
    withoutHost(message, host)
      .replace(/^((?:connect|getaddrinfo|query[A-Za-z]*) E[A-Z_]+) (?!\(the relay\))\S+/, '$1 (the relay)')
      .replace(/\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b/g, '(the relay)')
      // IPv6: compressed (`fd00::7`, `::1`) or with at least five groups, so that a time (12:34:56) stays.
      .replace(
        /\[?(?:[0-9a-f]{0,4}(?::[0-9a-f]{1,4})*::(?:[0-9a-f]{1,4}(?::[0-9a-f]{1,4})*)?|(?:[0-9a-f]{1,4}:){4,7}[0-9a-f]{1,4})\]?(?::\d+)?/gi,
        '(the relay)',
      )
  );
}

/**
 * `message` without the relay's configured host name, wherever it stands as a name or address of its own.
 * Alone it is what a reply about the message loses (messageReply): its other addresses are not the relay's
 * (`Client host [198.51.100.7] blocked` is Mailroom's own; `queued as 8a3f::2b1c` is how the relay's operator
 * traces the message), so they stay.
 */
export function withoutHost(message: string, host: string): string {
  if (host === '') return message;
  // Wherever it appears (a greeting, a TLS name check, a DNS failure, a reply), in any case, as a name or
  // address of its own: not `mail` in `bob@mail.example.org` or `mailbox`, nor 10.0.0.7 in 10.0.0.71.
  // An IPv6 address takes no port here: `fd00::7:1234` is another address. Not the local part of an address.
  const literal = host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const pattern = host.includes(':')
    ? `(?<![\\w.:-])${literal}(?![\\w@-]|[.:]\\w)`
    : `(?<![\\w.-])${literal}(?::\\d+)?(?![\\w@-]|\\.\\w)`;
  return message.replace(new RegExp(pattern, 'gi'), '(the relay)');
}

/**
 * Whether the relay itself may have failed rather than this message: no connection or a lost one, TLS, a
 * greeting nodemailer cannot read, AUTH refused or impossible, or a 421. nodemailer does not say at which
 * stage a connection was lost, so the worker asks the relay (RelayPause).
 */
export function isRelayFault(e: SmtpError): boolean {
  return e.responseCode === 421 || RELAY_FAULT_CODES.has(e.code ?? '');
}

const RELAY_FAULT_CODES = new Set([
  'ECONNECTION',
  'ETIMEDOUT',
  'ESOCKET',
  'EDNS',
  'ETLS',
  'EPROTOCOL',
  'EAUTH',
  'ENOAUTH',
  'EPROXY',
]);

/**
 * Only a refusal of this message (its recipients, its data or its size) is final. A 5xx to the greeting,
 * EHLO, AUTH or MAIL FROM says the relay, its credentials or the sender is wrong, which an operator can fix,
 * so those emails wait (a relay wanting AUTH answers 530 to MAIL FROM; one refusing MAIL_FROM's domain, 550);
 * but a 552 there that speaks of size answers the message's SIZE (RFC 1870).
 */
function isPermanent(e: SmtpError): boolean {
  if (e.code !== 'EENVELOPE' && e.code !== 'EMESSAGE') return false;
  // No reply code: nodemailer refused the message itself (an invalid address, larger than the relay's SIZE).
  if (typeof e.responseCode !== 'number') return true;
  if (e.command === 'MAIL FROM') return e.responseCode === 552 && /size/i.test(e.response ?? '');
  return e.responseCode >= 500;
}

/**
 * What a failure of nodemailer's says, as stored for the organisation. The relay's reply about the message
 * itself (to RCPT TO, to its data) without its configured host name (withoutHost); anything else without
 * any address (withoutAddress): a fault of the connection, the relay's greeting, EHLO, AUTH and MAIL FROM
 * replies, and a 421 at any stage (the relay closing the connection speaks of itself).
 */
export function relayText(e: SmtpError, host: string): string {
  const aboutMessage =
    e.response !== undefined && (e.command === 'RCPT TO' || e.command === 'DATA') && e.responseCode !== 421;
  if (aboutMessage) return messageReply(e.response!, host);
  // A refusal of STARTTLS or AUTH names the command: `502 command not recognized` alone does not say which.
  const step =
    e.response !== undefined && /^(?:STARTTLS|AUTH\b)/.test(e.command ?? '') ? `${e.command}: ` : '';
  return clipped(withoutAddress(window(step + (e.response ?? `${e.code ?? 'ERROR'}: ${e.message}`)), host));
}

/** A reply of the relay's about the message itself, as stored (withoutHost). */
function messageReply(text: string, host: string): string {
  return clipped(withoutHost(window(text), host));
}

/** The most of a relay's reply that is kept (RFC 5321 lets a line be 512 octets; nodemailer takes a megabyte). */
export const MAX_REPLY_CHARS = 2_000;

/**
 * What of a reply the scrubbing regexes read: bounded (some take time in the square of a run of text), and
 * longer than what is kept, so that no address is cut in two at the clip and left half shown.
 */
function window(text: string): string {
  return text.slice(0, 2 * MAX_REPLY_CHARS);
}

function clipped(text: string): string {
  return text.length > MAX_REPLY_CHARS ? `${text.slice(0, MAX_REPLY_CHARS)}…` : text;
}

function toFailure(e: SmtpError, host: string, acceptedBefore: boolean): RecipientFailure {
  return {
    address: e.recipient ?? '',
    response: relayText(e, host),
    permanent: refusedForGood(e, acceptedBefore),
  };
}

/**
 * Whether a relay's refusal of one recipient is final: a 5xx (contract.md), but for a 552 to RCPT TO meaning
 * too many recipients, which RFC 5321 (4.5.3.1.10) has clients read as a 452: after a recipient the relay
 * accepted before it in this transaction, or when it says so (5.5.3, RFC 3463). Deferred, it is offered again
 * with only the recipients still owed; a 552 there, as whenever the relay accepted none before it, refuses the
 * mailbox (full, or policy) and is final.
 */
function refusedForGood(e: SmtpError, acceptedBefore: boolean): boolean {
  if (typeof e.responseCode !== 'number' || e.responseCode < 500) return false;
  if (e.responseCode !== 552 || e.command !== 'RCPT TO') return true;
  return !(acceptedBefore || /^\d{3}[ -]5\.5\.3\b/.test(e.response ?? ''));
}
