// The delivery worker: claims due emails with a lease (leases.ts), sends each through the Mailer outside
// any transaction, and records per-recipient results. Many workers (processes) can share one database.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Clock, Ids } from '../clock.js';
import { DEFAULT_LEASE_MS } from '../config.js';
import type { EventRow, RecipientRow } from '../emails/emails.repository.js';
import { removeExpiredIdempotencyKeys } from '../emails/emails.service.js';
import type { EmailRetention } from '../emails/retention.js';
import type { EmailRow } from '../store/schema.js';
import type { Store } from '../store/store.js';
import {
  DeliveryError,
  type DeliveryResult,
  type Mailer,
  NotStartedError,
  type OutgoingMessage,
} from './mailer.js';
import { type Verdict, judgeFailure, judgeResult, pendingRecipients, settle, toMessage } from './outcome.js';
import { FAILURE_LOG_EVERY_MS, Leases } from './leases.js';
import { LogThrottle } from './log-throttle.js';
import { RelayPause } from './relay-pause.js';
import { type AttemptResult, ResultRecorder } from './recorder.js';
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
  /** How long a claim lasts unless renewed; a crashed worker's emails are sent again after at most this. */
  leaseMs?: number;
  pollMs?: number;
  /**
   * A send that has not settled by then counts as a temporary failure, so a relay that trickles bytes
   * forever (never tripping the socket timeout) cannot hold a renewed lease forever.
   */
  sendTimeoutMs?: number;
  /** The longest wait between tries to record a result the store refused (RECORD_RETRY_FIRST_MS doubling). */
  recordRetryMaxMs?: number;
  random?: () => number;
  /** EMAIL_RETENTION_DAYS's removals, started and stopped with the worker (on a timer of their own). */
  retention?: EmailRetention | undefined;
  /** Claims wait for a first check of the relay (Mailer.check), and the log says whether it answers. */
  checkRelayAtStart?: boolean;
  /** The wait before the first check of a relay that failed (RelayPause; doubling while it fails). */
  relayFirstCheckMs?: number;
}

export const DEFAULT_SEND_TIMEOUT_MS = 10 * 60_000;
/** How long a result may wait for company before it is written alone. */
const RESULT_HOLD_MS = 20;
/** While claims fail (the store is down), the wait between tries doubles up to this. */
const MAX_CLAIM_BACKOFF_MS = 5_000;
/**
 * A result the store refused (a dropped connection, a restart, a full disk) is tried again, the wait doubling
 * up to recordRetryMaxMs, until the store takes it: given up, the email would be claimed again after its
 * lease and sent twice. The worker holds the email meanwhile (no claim of its own retakes it; renewals go
 * on); only stop() giving up ends the tries.
 */
const RECORD_RETRY_FIRST_MS = 100;
const DEFAULT_RECORD_RETRY_MAX_MS = 1_000;

export class DeliveryWorker {
  readonly owner = randomUUID();
  private readonly leaseMs: number;
  private readonly leaseMargin: number;
  private readonly pollMs: number;
  private readonly sendTimeoutMs: number;
  private readonly recordRetryMaxMs: number;
  /** Sends in progress: the slots `concurrency` bounds. */
  private sending = 0;
  /**
   * Results the store refused, tried again until it takes them: each keeps its slot, so a store that
   * refuses results (and not claims) cannot make the worker hold ever more emails it may not record.
   */
  private stalled = 0;
  /** When a refused result was last logged: at most once a minute for the whole worker. */
  private readonly recordFailureLog = new LogThrottle(FAILURE_LOG_EVERY_MS);
  /** Attempts not yet recorded (sending, or their result waiting for its commit). */
  private inflight = new Set<Promise<void>>();
  private readonly leases: Leases;
  /**
   * Claims wait until this many slots are free, so a busy worker claims (and records) in batches that share
   * a commit, instead of one small transaction per finished send.
   */
  private readonly claimBatch: number;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** stop() gave up waiting for the sends in flight; their failures are not recorded (send). */
  private abandoned = false;
  private ticking: Promise<void> | undefined;
  private wanted = false;
  private lastCleanup = 0;
  /** Claims failed in a row, and when that was last logged. */
  private failures = 0;
  private readonly claimFailureLog = new LogThrottle(FAILURE_LOG_EVERY_MS);
  private readonly recorder: ResultRecorder;
  /** Claims stop while the relay itself fails (Mailer.check tells whether it does). */
  private readonly relay: RelayPause | undefined;

  constructor(private readonly o: WorkerOptions) {
    // Results wait for the next claim (or a short while) and are written in its commit.
    this.recorder = new ResultRecorder(o.store, this.owner, RESULT_HOLD_MS);
    this.claimBatch = Math.max(1, Math.floor(o.concurrency / 2));
    this.leaseMs = o.leaseMs ?? DEFAULT_LEASE_MS;
    this.pollMs = o.pollMs ?? 250;
    this.sendTimeoutMs = o.sendTimeoutMs ?? DEFAULT_SEND_TIMEOUT_MS;
    this.recordRetryMaxMs = o.recordRetryMaxMs ?? DEFAULT_RECORD_RETRY_MAX_MS;
    const { store, clock, ids, logger } = o;
    // A send waiting for a connection begins only while its lease holds, with this much to spare.
    this.leaseMargin = Math.min(this.leaseMs / 5, 5_000);
    this.leases = new Leases({
      store,
      clock,
      ids,
      logger,
      owner: this.owner,
      leaseMs: this.leaseMs,
      onRenewed: (emailIds, until) => o.mailer.extend?.(emailIds, this.startBy(until)),
    });
    const check = o.mailer.check?.bind(o.mailer);
    this.relay =
      check &&
      new RelayPause({
        check,
        relay: o.mailer.description,
        logger,
        onResume: () => this.notify(),
        firstCheckMs: o.relayFirstCheckMs,
        checkTimeoutMs: this.sendTimeoutMs,
      });
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.leases.start();
    this.o.retention?.start();
    this.relay?.start();
    if (this.o.checkRelayAtStart) this.relay?.checkAtStart();
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

  /**
   * Stops claiming and waits (bounded) for in-flight sends and their results. A send still running at the
   * deadline keeps its lease until it runs out, then the email is claimed again: late, never lost.
   */
  async stop(timeoutMs = 10_000): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.relay?.stop();
    // A removal under way ends after its statement: a commit, never a send.
    let removing = this.o.retention !== undefined;
    const retention = this.o.retention?.stop().finally(() => (removing = false));
    const drained = (async () => {
      // A claim in progress turns into sends that must be waited for too.
      await this.ticking;
      await Promise.allSettled([...this.inflight]);
      await retention;
      // Renewals go on while sends finish; once none is held, the last one under way is waited for too.
      await this.leases.stop();
      return true;
    })();
    let deadline: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((r) => {
      deadline = setTimeout(() => r(false), timeoutMs);
    });
    const finished = await Promise.race([drained, timedOut]);
    clearTimeout(deadline);
    // Drained: stopped already. Given up on: no more renewals, without waiting for one under way.
    void this.leases.stop();
    if (!finished) {
      this.abandoned = true;
      // What was still going on: a claim (its emails are claimed again after their lease), sends (the same),
      // a removal of emails past their retention (it ends after its statement; on PostgreSQL its lock's
      // connection within twice the store's query timeout).
      this.o.logger.warn(
        { claiming: this.ticking !== undefined, inflight: this.inflight.size, removing },
        'delivery stopped before all it was doing ended; emails claimed or in flight are sent again after their lease',
      );
    }
  }

  private tick(): Promise<void> {
    this.ticking ??= this.claimAndSend().finally(() => {
      this.ticking = undefined;
      if (this.running) {
        clearTimeout(this.timer);
        this.timer = setTimeout(() => void this.tick(), this.wanted ? 0 : this.nextPollMs());
      }
    });
    return this.ticking;
  }

  private nextPollMs(): number {
    if (this.failures === 0) return this.pollMs;
    return Math.min(MAX_CLAIM_BACKOFF_MS, this.pollMs * 2 ** Math.min(this.failures, 20));
  }

  private async claimAndSend(): Promise<void> {
    // A poll asks whether anything is due before claiming (anyDue), unless right after a full claim
    // (there is probably more) or with results held: those are written anyway, in the claim's commit (a
    // read awaited first would let them commit on their own on PostgreSQL). Sends in flight write nothing.
    const idle = !this.wanted && !this.recorder.holding();
    this.wanted = false;
    const free = this.o.concurrency - this.sending - this.stalled;
    // All slots busy: no claim is tried, so nothing is learnt about the store either way. Nor while the
    // relay fails: a claimed email would only fail too, spending an attempt (RelayPause).
    if (free >= this.claimBatch && !this.relay?.holding) {
      try {
        // Held results go in the claim's commit (on SQLite both join one group commit).
        this.recorder.flush();
        const claimed = await this.leases.claim(free, idle);
        for (const job of claimed) this.deliver(job.email, job.recipients, job.leaseUntil);
        if (claimed.length === free) this.wanted = true;
      } catch (err) {
        this.claimFailed(err);
        return;
      }
      if (this.failures > 0) {
        this.o.logger.info({ failures: this.failures }, 'delivery: claiming works again');
        this.failures = 0;
      }
    }
    try {
      await this.cleanupIdempotency();
    } catch (err) {
      this.o.logger.warn({ err }, 'delivery: removing expired idempotency keys failed; tried again later');
    }
  }

  private claimFailed(err: unknown): void {
    this.failures++;
    if (this.failures === 1) this.claimFailureLog.reset();
    if (this.claimFailureLog.due()) {
      this.o.logger.error(
        { err, failures: this.failures },
        'delivery: claiming failed; retrying with backoff (logged again at most once a minute)',
      );
    }
  }

  /**
   * Sends one claimed email and records its result. The slot is free once the send is over; the lease is
   * held (and renewed) until the result is committed.
   */
  private deliver(email: EmailRow, recipients: RecipientRow[], leaseUntil: number): void {
    this.leases.hold(email.id);
    this.sending++;
    const attempt = this.attempt(email, recipients, this.startBy(leaseUntil)).finally(() => {
      this.leases.release(email.id);
      this.inflight.delete(attempt);
    });
    this.inflight.add(attempt);
  }

  /**
   * By when (the host's epoch ms, as the mailer reads it) a send under a lease ending at `leaseUntil` (the
   * worker's clock: on PostgreSQL the database's) may still begin.
   */
  private startBy(leaseUntil: number): number {
    return leaseUntil - this.leaseMargin - (this.o.clock.aheadMs?.() ?? 0);
  }

  private async attempt(email: EmailRow, recipients: RecipientRow[], startBy: number): Promise<void> {
    let recorded: Promise<void>;
    try {
      const judged = await this.send(recipients, email, startBy);
      // Queued with the recorder at once, before the flush below can look for it. Nothing to record for
      // a send cut off by the shutdown: it keeps its lease and goes out again after it, as stop() says.
      recorded = judged ? this.record(email, recipients, judged) : Promise.resolve();
    } finally {
      this.sending--;
      // The last send out: nothing else will come to share a commit with the held results.
      if (this.sending === 0) this.recorder.flush();
      this.notify();
    }
    try {
      await recorded;
    } catch (err) {
      // Only once stop() gave up on it: the lease runs out and the email is claimed again (recipients
      // already recorded are not re-sent).
      this.log(email).error({ err }, 'delivery: recording the result failed');
    }
  }

  /**
   * Per-recipient verdicts of one attempt; a failed send is a verdict too, never an exception. Undefined for
   * a send that failed after stop() gave up on it, or never began (NotStartedError): that is no verdict on
   * the email, and recording one would defer it instead of leaving it to its lease.
   */
  private async send(
    recipients: RecipientRow[],
    email: EmailRow,
    startBy: number,
  ): Promise<Map<number, Verdict> | undefined> {
    const pending = pendingRecipients(recipients);
    if (pending.length === 0) return new Map();
    const message = toMessage(email, pending);
    // The bodies are the message's now, and the mailer's once handed over (the SMTP thread's copy): the row
    // keeps none through the send and its recording (up to DELIVERY_CONCURRENCY emails of 10 MiB each).
    email.html = email.text = null;
    try {
      const result = await this.sendBounded(message, startBy);
      this.relay?.answered();
      return judgeResult(pending, result);
    } catch (err) {
      if (err instanceof DeliveryError && err.relayFault) this.relay?.failed(err);
      if (err instanceof NotStartedError) {
        // Its lease ran out while it waited (a paused process): another worker may send it now.
        this.log(email).warn({ reason: err.message }, 'delivery: not sent; left to its next claim');
        return undefined;
      }
      if (this.abandoned) return undefined;
      return judgeFailure(pending, err);
    }
  }

  private log(email: EmailRow): Logger {
    return this.o.logger.child({ emailId: email.id, attempt: Number(email.attempts) });
  }

  private async sendBounded(message: OutgoingMessage, startBy: number): Promise<DeliveryResult> {
    // The timer keeps the id alone, not the message and its bodies.
    const { id } = message;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        // Deferred now and sent again on retry: it must not also go out from the relay's queue later, nor
        // reach the relay's data stage now (its connection is closed; data already written may arrive).
        this.o.mailer.cancel?.(id);
        reject(new DeliveryError(`send did not finish within ${this.sendTimeoutMs} ms`, false));
      }, this.sendTimeoutMs);
    });
    try {
      return await Promise.race([this.o.mailer.send(message, { startBy }), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Records one attempt's verdicts (trying until the store takes them), and logs what became of it. */
  private async record(
    email: EmailRow,
    recipients: RecipientRow[],
    judged: Map<number, Verdict>,
  ): Promise<void> {
    const result = this.resultOf(email, recipients, judged);
    const log = this.log(email);
    let recorded = await this.recordUntilTaken(result, log);
    if (!recorded) recorded = await this.recorder.stands(result).catch(() => false);
    if (!recorded) {
      log.warn('delivery: lease was lost before the result was recorded');
      return;
    }
    // A relay's answer quotes the recipient (`451 <ann@acme.test>: try later`); addresses are personal
    // data, kept in the email's record, not in the log (SECURITY.md).
    const { status, lastError, nextAttemptAt } = result;
    const error = lastError === null ? null : withoutMailAddresses(lastError);
    if (status === 'sent') log.info('delivered');
    else if (status === 'deferred') log.warn({ nextAttempt: nextAttemptAt, lastError: error }, 'deferred');
    else log.warn({ lastError: error }, 'failed');
  }

  /** The email's state after this attempt: its status, the next try, each recipient's verdict, the events. */
  private resultOf(email: EmailRow, recipients: RecipientRow[], judged: Map<number, Verdict>): AttemptResult {
    const now = this.o.clock.now();
    const at = now.toISOString();
    const attempts = Number(email.attempts);
    const { status, verdicts, lastError, details } = settle(recipients, judged, attempts, this.o.maxAttempts);
    const nextAttemptAt =
      status === 'deferred'
        ? new Date(now.getTime() + retryDelayMs(attempts, this.o.retryBaseMs, this.o.random)).toISOString()
        : null;
    const events: EventRow[] = (['sent', 'deferred', 'failed'] as const)
      .filter((type) => details[type] !== undefined)
      .map((type) => ({ id: this.o.ids.next(), email_id: email.id, type, at, detail: details[type]! }));
    return { emailId: email.id, attempts, status, nextAttemptAt, lastError, at, verdicts, events };
  }

  /**
   * Writes the result, trying again for as long as the store refuses it (RECORD_RETRY_FIRST_MS doubling);
   * whether this claim still held the lease. Throws only once stop() gave up waiting.
   */
  private async recordUntilTaken(result: AttemptResult, log: Logger): Promise<boolean> {
    let tries = 0;
    try {
      for (; ; tries++) {
        try {
          // Written only while this claim holds the lease: a retry after the lease was lost writes nothing.
          return await this.recorder.record(result);
        } catch (err) {
          if (this.abandoned) throw err;
          // Stalled from the first refusal until the store takes it (or stop() gives up).
          if (tries === 0) this.stalled++;
          if (this.recordFailureLog.due()) {
            // Logged again at most once a minute: tries go on for as long as the store refuses.
            log.warn(
              { err: (err as Error).message, tries: tries + 1, stalled: this.stalled },
              'delivery: recording the result failed; trying again',
            );
          }
          const wait = Math.min(RECORD_RETRY_FIRST_MS * 2 ** Math.min(tries, 20), this.recordRetryMaxMs);
          await new Promise((resolve) => setTimeout(resolve, wait));
        }
      }
    } finally {
      if (tries > 0) this.stalled--;
    }
  }

  private async cleanupIdempotency(): Promise<void> {
    const now = this.o.clock.now();
    if (now.getTime() - this.lastCleanup < 10 * 60_000) return;
    this.lastCleanup = now.getTime();
    await removeExpiredIdempotencyKeys(this.o.store, now);
  }
}

/**
 * The text with every email address in it written as `<address>` (the relay's own address is
 * smtp-relay.ts withoutAddress's business).
 */
function withoutMailAddresses(text: string): string {
  return text.replace(/[^\s<>"'(),;:[\]]+@[^\s<>"'(),;:[\]]+/g, '<address>');
}
