// SMTP delivery as the worker sees it: a Mailer whose sends run on a thread of their own (smtp-thread.ts),
// and the messages that pass between the two.
import type { Worker } from 'node:worker_threads';
import { checkDkim } from '../config.js';
import { startThread } from '../threads.js';
import {
  DeliveryError,
  type DeliveryResult,
  type Mailer,
  NotStartedError,
  type OutgoingMessage,
  type SendOptions,
} from './mailer.js';
import type { SmtpMailerOptions } from './smtp-relay.js';

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

  send(message: OutgoingMessage, options: SendOptions = {}): Promise<DeliveryResult> {
    if (this.closed) return Promise.reject(new DeliveryError('the mailer is closed', false));
    return this.live().send(message, options.startBy);
  }

  extend(emailIds: string[], startBy: number): void {
    if (!this.closed && !this.thread.gone) this.thread.extend(emailIds, startBy);
  }

  cancel(emailId: string): void {
    if (!this.closed && !this.thread.gone) this.thread.cancel(emailId);
  }

  check(): Promise<void> {
    if (this.closed) return Promise.reject(new DeliveryError('the mailer is closed', false));
    return this.live().check();
  }

  /** A thread that died (it should not) is replaced when next asked; its unanswered sends were deferred. */
  private live(): SmtpThread {
    if (this.thread.gone) this.thread = new SmtpThread(this.options);
    return this.thread;
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
  /** Sends and checks not answered yet, by request id (a check resolves with undefined). */
  private readonly waiting = new Map<
    number,
    { resolve: (r: DeliveryResult | undefined) => void; reject: (e: Error) => void }
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
      if ('result' in reply) waiter.resolve(reply.result);
      else if ('checked' in reply) waiter.resolve(undefined);
      else if (reply.error.notStarted) waiter.reject(new NotStartedError(reply.error.message));
      else {
        const { message, permanent, relayFault } = reply.error;
        waiter.reject(new DeliveryError(message, permanent, relayFault));
      }
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

  send(message: OutgoingMessage, startBy: number | undefined): Promise<DeliveryResult> {
    return this.ask((id) => ({ kind: 'send', id, message, startBy })) as Promise<DeliveryResult>;
  }

  async check(): Promise<void> {
    await this.ask((id) => ({ kind: 'check', id }));
  }

  private ask(request: (id: number) => ThreadRequest): Promise<DeliveryResult | undefined> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (this.waiting.size === 0) this.worker.ref();
      this.waiting.set(id, { resolve, reject });
      this.worker.postMessage(request(id));
    });
  }

  extend(ids: string[], startBy: number): void {
    this.worker.postMessage({ kind: 'extend', ids, startBy } satisfies ThreadRequest);
  }

  cancel(emailId: string): void {
    this.worker.postMessage({ kind: 'cancel', emailId } satisfies ThreadRequest);
  }

  private settled(id: number): void {
    this.waiting.delete(id);
    if (this.waiting.size === 0) this.worker.unref();
  }

  /** Closes the pool (QUIT on idle connections); a connection still stuck after a second is cut. */
  async close(): Promise<void> {
    if (this.gone) return;
    this.worker.postMessage({ kind: 'close' } satisfies ThreadRequest);
    let grace: NodeJS.Timeout | undefined;
    const cut = new Promise<void>((resolve) => {
      grace = setTimeout(() => void this.worker.terminate().then(() => resolve()), CLOSE_GRACE_MS);
    });
    await Promise.race([this.exited, cut]);
    clearTimeout(grace);
    await this.exited;
  }
}

/** What the main thread asks of the SMTP thread. */
export type ThreadRequest =
  /** A message to send; startBy is SendOptions.startBy. */
  | { kind: 'send'; id: number; message: OutgoingMessage; startBy: number | undefined }
  /** Mailer.check: connect and authenticate, send nothing. */
  | { kind: 'check'; id: number }
  /** Later startBy for sends not begun yet (Mailer.extend). */
  | { kind: 'extend'; ids: string[]; startBy: number }
  /** An email whose send is dropped if not begun yet, aborted if it has (Mailer.cancel). */
  | { kind: 'cancel'; emailId: string }
  | { kind: 'close' };

/** The SMTP thread's answer to a send or a check. */
export type ThreadReply =
  | { id: number; result: DeliveryResult }
  | { id: number; checked: true }
  | { id: number; error: { message: string; permanent: boolean; relayFault: boolean; notStarted: boolean } };

function relayName(url: URL): string {
  return `SMTP relay ${url.protocol}//${url.hostname}:${url.port || (url.protocol === 'smtps:' ? 465 : 587)}`;
}
