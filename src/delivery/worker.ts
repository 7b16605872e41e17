// The delivery worker: claims due emails with a lease, sends each through the Mailer outside any
// transaction, and records per-recipient results. Many workers (processes) can share one database.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock, Ids } from '../clock.js';
import {
  type EventRow,
  type RecipientRow,
  deleteExpiredIdempotency,
  insertEvents,
} from '../emails/emails.repository.js';
import type { EmailRow } from '../store/schema.js';
import type { Store } from '../store/store.js';
import { parseConfiguredMailbox } from '../validation/addresses.js';
import { DeliveryError, type DeliveryResult, type Mailer, type OutgoingMessage } from './mailer.js';
import * as queue from './queue.repository.js';
import { retryDelayMs } from './retry.js';

export interface WorkerOptions {
  store: Store;
  mailer: Mailer;
  clock: Clock;
  ids: Ids;
  logger: Logger;
  retryBaseMs: number;
  maxAttempts: number;
  concurrency: number;
  /** How long a claim lasts before another worker may take the email again. */
  leaseMs?: number;
  pollMs?: number;
  random?: () => number;
}

interface Verdict {
  status: 'sent' | 'deferred' | 'failed';
  response: string;
}

const parseList = (text: string): string[] => JSON.parse(text) as string[];

export class DeliveryWorker {
  readonly owner = randomUUID();
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private inflight = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private ticking = false;
  private wanted = false;
  private lastCleanup = 0;

  constructor(private readonly o: WorkerOptions) {
    this.leaseMs = o.leaseMs ?? 5 * 60_000;
    this.pollMs = o.pollMs ?? 250;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.notify();
  }

  /** Something may be due now (an email was just accepted, or a send finished). */
  notify(): void {
    if (!this.running) return;
    if (this.ticking) {
      this.wanted = true;
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), 0);
  }

  /** Stops claiming and waits (bounded) for in-flight sends; anything unfinished is re-claimed after its lease. */
  async stop(timeoutMs = 10_000): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    const drained = Promise.allSettled([...this.inflight]).then(() => true);
    const timedOut = new Promise<boolean>((r) => setTimeout(() => r(false), timeoutMs).unref());
    if (!(await Promise.race([drained, timedOut]))) {
      this.o.logger.warn(
        { inflight: this.inflight.size },
        'delivery stopped with sends in flight; they retry after the lease',
      );
    }
  }

  /** Waits until nothing is due or in flight; for tests and the CLI. */
  async drain(): Promise<void> {
    for (;;) {
      await this.tick();
      if (this.inflight.size === 0) {
        const due = await this.o.store.db
          .selectFrom('emails')
          .select('id')
          .where('next_attempt_at', '<=', this.o.clock.now().toISOString())
          .limit(1)
          .execute();
        if (due.length === 0) return;
      }
      await Promise.race([...this.inflight, new Promise((r) => setTimeout(r, 20))]);
    }
  }

  private async tick(): Promise<void> {
    if (this.ticking) return;
    this.ticking = true;
    try {
      this.wanted = false;
      const free = this.o.concurrency - this.inflight.size;
      if (free > 0) {
        const claimed = await this.claim(free);
        for (const job of claimed) this.track(this.deliver(job.email, job.recipients));
        if (claimed.length === free) this.wanted = true;
      }
      await this.cleanupIdempotency();
    } catch (err) {
      this.o.logger.error({ err }, 'delivery: claiming failed; retrying shortly');
    } finally {
      this.ticking = false;
      if (this.running) {
        clearTimeout(this.timer);
        this.timer = setTimeout(() => void this.tick(), this.wanted ? 0 : this.pollMs);
      }
    }
  }

  private track(p: Promise<void>): void {
    this.inflight.add(p);
    void p.finally(() => {
      this.inflight.delete(p);
      this.notify();
    });
  }

  private async claim(limit: number): Promise<{ email: EmailRow; recipients: RecipientRow[] }[]> {
    const now = this.o.clock.now();
    const at = now.toISOString();
    const leaseUntil = new Date(now.getTime() + this.leaseMs).toISOString();
    return this.o.store.write(async (trx) => {
      const emails = await queue.claimDue(trx, this.o.store.dialect, {
        now: at,
        leaseUntil,
        owner: this.owner,
        limit,
      });
      if (emails.length === 0) return [];
      const recipients = await queue.recipientsOf(
        trx,
        emails.map((e) => e.id),
      );
      await insertEvents(
        trx,
        emails.map((e) => ({
          id: this.o.ids.next(),
          email_id: e.id,
          type: 'sending',
          at,
          detail: `attempt ${e.attempts}`,
        })),
      );
      return emails.map((email) => ({
        email,
        recipients: recipients.filter((r) => r.email_id === email.id),
      }));
    });
  }

  private async deliver(email: EmailRow, recipients: RecipientRow[]): Promise<void> {
    const log = this.o.logger.child({ emailId: email.id, attempt: Number(email.attempts) });
    const pending = recipients.filter((r) => r.status === 'queued' || r.status === 'deferred');
    const verdicts = new Map<number, Verdict>();
    if (pending.length > 0) {
      const message = this.toMessage(email, pending);
      try {
        const result = await this.o.mailer.send(message);
        this.judge(pending, result, verdicts);
      } catch (err) {
        const permanent = err instanceof DeliveryError && err.permanent;
        const response = err instanceof Error ? err.message : String(err);
        for (const r of pending)
          verdicts.set(r.position, { status: permanent ? 'failed' : 'deferred', response });
      }
    }
    try {
      await this.record(email, recipients, verdicts, log);
    } catch (err) {
      // The lease runs out and the email is claimed again; recipients already recorded are not re-sent.
      log.error({ err }, 'delivery: recording the result failed');
    }
  }

  private judge(pending: RecipientRow[], result: DeliveryResult, verdicts: Map<number, Verdict>): void {
    const accepted = new Set(result.accepted.map((a) => a.toLowerCase()));
    const rejected = new Map(result.rejected.map((r) => [r.address.toLowerCase(), r]));
    for (const r of pending) {
      const key = r.address.toLowerCase();
      const failure = rejected.get(key);
      if (failure)
        verdicts.set(r.position, {
          status: failure.permanent ? 'failed' : 'deferred',
          response: failure.response,
        });
      else if (accepted.has(key)) verdicts.set(r.position, { status: 'sent', response: result.response });
      else
        verdicts.set(r.position, { status: 'deferred', response: 'recipient not acknowledged by the relay' });
    }
  }

  private async record(
    email: EmailRow,
    recipients: RecipientRow[],
    verdicts: Map<number, Verdict>,
    log: Logger,
  ): Promise<void> {
    const now = this.o.clock.now();
    const at = now.toISOString();
    const attempts = Number(email.attempts);
    const exhausted = attempts >= this.o.maxAttempts;
    for (const [position, v] of verdicts) {
      if (v.status === 'deferred' && exhausted) {
        verdicts.set(position, {
          status: 'failed',
          response: `${v.response} (gave up after ${attempts} attempts)`,
        });
      }
    }
    const finalStatuses = recipients.map((r) => verdicts.get(r.position)?.status ?? r.status);
    const status = finalStatuses.includes('deferred')
      ? 'deferred'
      : finalStatuses.includes('sent')
        ? 'sent'
        : 'failed';
    const errors = [...verdicts.values()].filter((v) => v.status !== 'sent');
    const lastError = errors.length > 0 ? errors[errors.length - 1]!.response : null;
    const nextAttempt =
      status === 'deferred'
        ? new Date(now.getTime() + retryDelayMs(attempts, this.o.retryBaseMs, this.o.random)).toISOString()
        : null;

    const events: EventRow[] = [];
    const byStatus = (s: Verdict['status']) =>
      recipients
        .filter((r) => verdicts.get(r.position)?.status === s)
        .map((r) => `${r.address}: ${verdicts.get(r.position)!.response}`);
    for (const type of ['sent', 'deferred', 'failed'] as const) {
      const lines = byStatus(type);
      if (lines.length > 0)
        events.push({ id: this.o.ids.next(), email_id: email.id, type, at, detail: lines.join('\n') });
    }

    const recorded = await this.o.store.write(async (trx) => {
      const held = await queue.finishAttempt(trx, email.id, this.owner, {
        status,
        next_attempt_at: nextAttempt,
        last_error: lastError,
        updated_at: at,
      });
      if (!held) return false;
      for (const r of recipients) {
        const v = verdicts.get(r.position);
        if (v)
          await queue.updateRecipient(trx, email.id, r.position, {
            status: v.status,
            response: v.response,
            updated_at: at,
          });
      }
      await insertEvents(trx, events);
      return true;
    });
    if (!recorded) log.warn('delivery: lease was lost before the result was recorded');
    else if (status === 'sent') log.info('delivered');
    else if (status === 'deferred') log.warn({ nextAttempt, lastError }, 'deferred');
    else log.warn({ lastError }, 'failed');
  }

  private toMessage(email: EmailRow, pending: RecipientRow[]): OutgoingMessage {
    const from = parseConfiguredMailbox(email.from_address);
    return {
      id: email.id,
      messageId: email.message_id,
      date: new Date(email.created_at),
      from: email.from_address,
      envelopeFrom: from?.address ?? email.from_address,
      to: parseList(email.to_addresses),
      cc: parseList(email.cc_addresses),
      replyTo: parseList(email.reply_to),
      subject: email.subject,
      html: email.html,
      text: email.text,
      headers: JSON.parse(email.headers) as Record<string, string>,
      recipients: pending.map((r) => r.address),
    };
  }

  private async cleanupIdempotency(): Promise<void> {
    const now = this.o.clock.now().getTime();
    if (now - this.lastCleanup < 10 * 60_000) return;
    this.lastCleanup = now;
    const cutoff = new Date(now - 24 * 60 * 60 * 1000).toISOString();
    await this.o.store.write((trx) => deleteExpiredIdempotency(trx, cutoff));
  }
}
