// A worker's leases: claiming due emails under a lease (with a `sending` event each), then holding those
// leases, renewed on a heartbeat, until each email's result is recorded.
import type { Logger } from 'pino';
import type { Clock, Ids } from '../clock.js';
import { type RecipientRow, insertEvents } from '../emails/emails.repository.js';
import type { EmailRow } from '../store/schema.js';
import type { Store } from '../store/store.js';
import * as queue from './queue.repository.js';
import { LogThrottle } from './log-throttle.js';

export interface ClaimedEmail {
  email: EmailRow;
  recipients: RecipientRow[];
  /** When the claim's lease ends unless renewed (epoch ms). */
  leaseUntil: number;
}

export interface LeaseOptions {
  store: Store;
  clock: Clock;
  ids: Ids;
  logger: Logger;
  /** The worker whose leases these are. */
  owner: string;
  leaseMs: number;
  /** Told of the emails whose leases a renewal extended, and until when (epoch ms). */
  onRenewed?: (emailIds: string[], leaseUntil: number) => void;
}

/**
 * A failing store (claims, renewals, results) is logged when it starts failing, then at most this often
 * until it works again.
 */
export const FAILURE_LOG_EVERY_MS = 60_000;

export class Leases {
  /**
   * Emails this worker holds a lease on, for renewal: from the claim until the result is recorded. A claim
   * skips them (claimDue's `holding`), so an email is never held twice: its lease may run out in the store
   * meanwhile (an outage longer than the lease), but only another worker may then claim it.
   */
  private held = new Set<string>();
  private heartbeat: NodeJS.Timeout | undefined;
  /** Renewals under way: stop() waits for them, so a stopped worker writes nothing more. */
  private readonly renewing = new Set<Promise<void>>();
  /** When a failed renewal was last logged: while the store is down, at most once a minute. */
  private readonly failureLog = new LogThrottle(FAILURE_LOG_EVERY_MS);

  constructor(private readonly o: LeaseOptions) {}

  /** Renews the held leases every quarter of a lease until stop(). */
  start(): void {
    this.heartbeat = setInterval(
      () => {
        const renewal = this.renew().finally(() => this.renewing.delete(renewal));
        this.renewing.add(renewal);
      },
      Math.max(10, this.o.leaseMs / 4),
    );
    this.heartbeat.unref();
  }

  /**
   * Stops renewing; resolves once the renewals under way have ended. One left running wrote after the worker
   * had stopped: on SQLite it then waited out busy_timeout, the event loop stopped, behind another's lock.
   */
  async stop(): Promise<void> {
    clearInterval(this.heartbeat);
    await Promise.all([...this.renewing]);
  }

  hold(emailId: string): void {
    this.held.add(emailId);
  }

  release(emailId: string): void {
    this.held.delete(emailId);
  }

  async claim(limit: number, askFirst: boolean): Promise<ClaimedEmail[]> {
    const { store, owner } = this.o;
    const now = this.o.clock.now();
    const at = now.toISOString();
    const until = now.getTime() + this.o.leaseMs;
    const leaseUntil = new Date(until).toISOString();
    // A poll of an idle queue takes no write lock (anyDue).
    if (askFirst && !(await queue.anyDue(store.db, at))) return [];
    return store.batch(async (trx) => {
      const emails = await queue.claimDue(trx, store.dialect, {
        now: at,
        leaseUntil,
        owner,
        limit,
        holding: [...this.held],
      });
      if (emails.length === 0) return [];
      const ids = emails.map((e) => e.id);
      const recipients = await queue.recipientsOf(trx, ids);
      const bodies = new Map((await queue.bodiesOf(trx, ids)).map((b) => [b.id, b]));
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
        email: {
          ...email,
          html: bodies.get(email.id)?.html ?? null,
          text: bodies.get(email.id)?.text ?? null,
        },
        recipients: recipients.filter((r) => r.email_id === email.id),
        leaseUntil: until,
      }));
    });
  }

  private async renew(): Promise<void> {
    if (this.held.size === 0) {
      // Nothing to renew says nothing of the store: the next refusal starts a new outage, logged.
      this.failureLog.reset();
      return;
    }
    const until = this.o.clock.now().getTime() + this.o.leaseMs;
    const leaseUntil = new Date(until).toISOString();
    try {
      // Batched with the results, so renewals and results never lock the same rows in opposite orders.
      const renewed = await this.o.store.batch((trx) =>
        queue.renewLeases(trx, this.o.owner, [...this.held], leaseUntil),
      );
      // Only those still this worker's: a lease another worker took over is not extended here.
      if (renewed.length > 0) this.o.onRenewed?.(renewed, until);
      this.failureLog.reset();
    } catch (err) {
      if (!this.failureLog.due()) return;
      this.o.logger.warn({ err }, 'delivery: renewing leases failed (logged again at most once a minute)');
    }
  }
}
