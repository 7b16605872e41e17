// The messenger side of delivery: SMTP through nodemailer's pooled transport, or a file outbox when no relay
// is configured. Both build the MIME with nodemailer; Mailroom never writes MIME or SMTP itself.
import { createPrivateKey } from 'node:crypto';
import { mkdir, open, rename } from 'node:fs/promises';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import nodemailer, { type Transporter } from 'nodemailer';
import type SMTPPool from 'nodemailer/lib/smtp-pool/index.js';
import type Mail from 'nodemailer/lib/mailer/index.js';
import { encodeWord } from 'nodemailer/lib/mime-funcs';
import { ConfigError } from '../config.js';
import { startThread } from '../threads.js';

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

export interface Mailer {
  readonly description: string;
  send(message: OutgoingMessage): Promise<DeliveryResult>;
  close(): Promise<void>;
}

export interface DkimOptions {
  domainName: string;
  keySelector: string;
  privateKey: string;
}

/** Fails at start-up, naming the variable, rather than at the first send, when the key cannot sign. */
function checkDkim(dkim: DkimOptions | undefined): void {
  if (!dkim) return;
  try {
    createPrivateKey(dkim.privateKey);
  } catch (err) {
    throw new ConfigError(`DKIM_PRIVATE_KEY is not a usable private key (${(err as Error).message})`);
  }
}

/**
 * A subject nodemailer can fold into lines of at most 998 octets. It folds at whitespace only, so a word
 * of 900+ characters (the API allows 998) went out on a line of 999; such a subject is given as MIME
 * encoded-words (RFC 2047, nodemailer's own encoder), which fold between words and decode to the same text.
 */
export function foldableSubject(subject: string): string {
  return /\S{900}/.test(subject) ? encodeWord(subject, 'Q', 52) : subject;
}

function mailOptions(m: OutgoingMessage, dkim: DkimOptions | undefined): Mail.Options {
  return {
    messageId: m.messageId,
    date: m.date,
    from: m.from,
    to: m.to.length > 0 ? m.to : undefined,
    cc: m.cc.length > 0 ? m.cc : undefined,
    replyTo: m.replyTo.length > 0 ? m.replyTo : undefined,
    subject: foldableSubject(m.subject),
    text: m.text ?? undefined,
    html: m.html ?? undefined,
    headers: m.headers,
    envelope: { from: m.envelopeFrom, to: m.recipients },
    // Content is never read from files or URLs, whatever a field contains.
    disableFileAccess: true,
    disableUrlAccess: true,
    textEncoding: 'quoted-printable',
    dkim,
  };
}

interface SmtpError extends Error {
  code?: string;
  responseCode?: number;
  response?: string;
  rejectedErrors?: SmtpError[];
  recipient?: string;
}

export interface SmtpMailerOptions {
  url: string;
  dkim?: DkimOptions | undefined;
  maxConnections?: number;
  connectionTimeoutMs?: number;
  socketTimeoutMs?: number;
}

/**
 * SMTP through a pooled nodemailer transport on a thread of its own: building the MIME and speaking SMTP is
 * most of the CPU a delivery costs, and on the main thread it would compete with the HTTP API and the
 * store. The thread only turns messages into relay answers; claims, leases and results stay here.
 */
export class SmtpMailer implements Mailer {
  readonly description: string;
  private thread: SmtpThread;
  private closed = false;

  constructor(private readonly options: SmtpMailerOptions) {
    checkDkim(options.dkim);
    this.description = relayName(new URL(options.url));
    this.thread = new SmtpThread(options);
  }

  send(message: OutgoingMessage): Promise<DeliveryResult> {
    if (this.closed) return Promise.reject(new DeliveryError('the mailer is closed', false));
    // A thread that died (it should not) is replaced at the next send; its unanswered sends were deferred.
    if (this.thread.gone) this.thread = new SmtpThread(this.options);
    return this.thread.send(message);
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.thread.close();
  }
}

const CLOSE_GRACE_MS = 1_000;

/** One SMTP thread and the sends it has not answered yet. */
class SmtpThread {
  gone = false;
  private readonly worker: Worker;
  private readonly waiting = new Map<
    number,
    { resolve: (r: DeliveryResult) => void; reject: (e: Error) => void }
  >();
  private nextId = 0;
  private readonly exited: Promise<void>;

  constructor(options: SmtpMailerOptions) {
    this.worker = startThread(import.meta.url, 'smtp-thread', options);
    // Idle, the thread keeps nothing alive; a send in progress does (see send).
    this.worker.unref();
    this.worker.on('message', (reply: ThreadReply) => {
      const waiter = this.waiting.get(reply.id);
      if (!waiter) return;
      this.settled(reply.id);
      if (reply.result) waiter.resolve(reply.result);
      else waiter.reject(new DeliveryError(reply.error!.message, reply.error!.permanent));
    });
    let failure = 'it stopped';
    this.worker.on('error', (err) => {
      failure = err.message;
    });
    this.exited = new Promise((resolve) => {
      this.worker.once('exit', () => {
        this.gone = true;
        // Sends the thread never answered are temporary failures: they are retried.
        for (const [id, waiter] of this.waiting) {
          this.settled(id);
          waiter.reject(new DeliveryError(`SMTP thread: ${failure} before the relay answered`, false));
        }
        resolve();
      });
    });
  }

  send(message: OutgoingMessage): Promise<DeliveryResult> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.waiting.size === 0) this.worker.ref();
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage({ id, message } satisfies ThreadRequest);
    });
  }

  private settled(id: number): void {
    this.waiting.delete(id);
    if (this.waiting.size === 0) this.worker.unref();
  }

  /** Closes the pool (QUIT on idle connections); a connection still stuck after a second is cut. */
  async close(): Promise<void> {
    if (this.gone) return;
    this.worker.postMessage({ close: true } satisfies ThreadRequest);
    let grace: NodeJS.Timeout | undefined;
    const cut = new Promise<void>((resolve) => {
      grace = setTimeout(() => void this.worker.terminate().then(() => resolve()), CLOSE_GRACE_MS);
    });
    await Promise.race([this.exited, cut]);
    clearTimeout(grace);
    await this.exited;
  }
}

export interface ThreadRequest {
  id?: number;
  message?: OutgoingMessage;
  close?: boolean;
}

export interface ThreadReply {
  id: number;
  result?: DeliveryResult;
  error?: { message: string; permanent: boolean };
}

function relayName(url: URL): string {
  return `SMTP relay ${url.protocol}//${url.hostname}:${url.port || (url.protocol === 'smtps:' ? 465 : 587)}`;
}

/** The pooled nodemailer transport itself; it runs on the SMTP thread. */
export class SmtpRelay {
  private readonly transport: Transporter<SMTPPool.SentMessageInfo>;
  /** What the relay and nodemailer say, as stored for the organisation (withoutAddress). */
  private readonly scrub: (text: string) => string;

  constructor(private readonly options: SmtpMailerOptions) {
    const url = new URL(options.url);
    this.scrub = (text) => withoutAddress(text, url.hostname.replace(/^\[|\]$/g, ''));
    this.transport = nodemailer.createTransport({
      pool: true,
      host: url.hostname,
      port: url.port ? Number(url.port) : url.protocol === 'smtps:' ? 465 : 587,
      secure: url.protocol === 'smtps:',
      auth: url.username
        ? { user: decodeURIComponent(url.username), pass: decodeURIComponent(url.password) }
        : undefined,
      maxConnections: options.maxConnections ?? 5,
      maxMessages: Infinity,
      connectionTimeout: options.connectionTimeoutMs ?? 30_000,
      greetingTimeout: options.connectionTimeoutMs ?? 30_000,
      socketTimeout: options.socketTimeoutMs ?? 60_000,
      disableFileAccess: true,
      disableUrlAccess: true,
    });
  }

  async send(message: OutgoingMessage): Promise<DeliveryResult> {
    try {
      const info = await this.transport.sendMail(mailOptions(message, this.options.dkim));
      const rejectedErrors = ((info as { rejectedErrors?: SmtpError[] }).rejectedErrors ?? []).map((e) =>
        toFailure(e, this.scrub),
      );
      return {
        accepted: (info.accepted ?? []).map(String),
        rejected: rejectedErrors,
        response: this.scrub(info.response ?? ''),
      };
    } catch (err) {
      const e = err as SmtpError;
      if (e.rejectedErrors && e.rejectedErrors.length > 0) {
        // Every recipient was refused at RCPT TO: each gets its own verdict.
        return {
          accepted: [],
          rejected: e.rejectedErrors.map((r) => toFailure(r, this.scrub)),
          response: this.scrub(e.response ?? e.message),
        };
      }
      throw new DeliveryError(this.scrub(e.response ?? `${e.code ?? 'ERROR'}: ${e.message}`), isPermanent(e));
    }
  }

  close(): void {
    this.transport.close();
  }
}

/**
 * A socket error's text without the relay's address (`connect ECONNREFUSED 10.0.0.7:25`): it is stored as
 * the email's lastError, which every key of the organisation can read, and the relay is the operator's.
 */
export function withoutAddress(message: string, host = ''): string {
  let text = message;
  // The configured host name, wherever it appears (a greeting, a TLS name check, a DNS failure).
  if (host !== '') {
    const literal = host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    text = text.replace(new RegExp(`${literal}(?::\\d+)?`, 'g'), '(the relay)');
  }
  return (
    text
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
 * Only a refusal of this message (its envelope or its data) is final. A 5xx to AUTH, EHLO or the greeting
 * says the relay or its credentials are wrong, which an operator can fix: those emails wait, they do not fail.
 */
function isPermanent(e: SmtpError): boolean {
  if (e.code !== 'EENVELOPE' && e.code !== 'EMESSAGE') return false;
  // No reply code: nodemailer refused the message itself (an invalid address, too large for the relay).
  return typeof e.responseCode !== 'number' || e.responseCode >= 500;
}

function toFailure(e: SmtpError, scrub: (text: string) => string): RecipientFailure {
  return {
    address: e.recipient ?? '',
    response: scrub(e.response ?? e.message),
    permanent: typeof e.responseCode === 'number' && e.responseCode >= 500,
  };
}

/** Writes each message as DATA_DIR/outbox/<id>.eml (synced, then renamed into place) and calls it sent. */
export class FileOutboxMailer implements Mailer {
  readonly description: string;
  private readonly transport = nodemailer.createTransport({
    streamTransport: true,
    buffer: true,
    newline: 'unix',
  });

  constructor(
    private readonly dir: string,
    private readonly dkim?: DkimOptions,
  ) {
    checkDkim(dkim);
    this.description = `file outbox ${dir}`;
  }

  async send(message: OutgoingMessage): Promise<DeliveryResult> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const info = await this.transport.sendMail(mailOptions(message, this.dkim));
    const file = path.join(this.dir, `${message.id}.eml`);
    const tmp = `${file}.tmp`;
    const handle = await open(tmp, 'w', 0o600);
    try {
      await handle.writeFile(info.message as Buffer);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
    // The rename is durable only once the directory entry is on disk too.
    const dir = await open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
    return {
      accepted: message.recipients,
      rejected: [],
      response: `written to outbox/${path.basename(file)}`,
    };
  }

  async close(): Promise<void> {}
}
