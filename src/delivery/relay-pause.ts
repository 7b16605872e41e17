// When the relay itself fails (no connection, TLS, AUTH refused), every email would fail the same way: the
// worker stops claiming and checks the relay with a connection that sends nothing, until it answers.
import type { Logger } from 'pino';
import type { DeliveryError } from './mailer.js';
import { LogThrottle } from './log-throttle.js';

export interface RelayPauseOptions {
  /** Mailer.check: connects and authenticates, sends nothing. */
  check: () => Promise<void>;
  /** The relay as logged (Mailer.description: scheme, host and port, no credentials). */
  relay: string;
  logger: Logger;
  /** Called once claims may go on: a check got through, or a send did. */
  onResume: () => void;
  firstCheckMs?: number;
  maxCheckMs?: number;
  /**
   * A check taking longer fails (the worker's send bound): a relay trickling its reply never trips the SMTP
   * timeouts, and a check that never settled would leave claims stopped for good.
   */
  checkTimeoutMs?: number;
}

/**
 * The first check waits a second, then the wait doubles up to a minute while the relay keeps failing: mail
 * flows again within a minute of the relay's return (it was five minutes, which after an outage of a few
 * minutes left delivery waiting minutes more), for one connection and login a minute while it is down.
 */
export const FIRST_CHECK_MS = 1_000;
export const MAX_CHECK_MS = 60_000;
export const CHECK_TIMEOUT_MS = 10 * 60_000;
const STILL_DOWN_LOG_EVERY_MS = 5 * 60_000;

/**
 * `checking`: a send failed for what may be the relay (or the worker just started), and a check says
 * whether it is; `paused`: a check failed, and checks go on until one gets through.
 */
type State = 'open' | 'checking' | 'paused';

/**
 * Claims stop while the relay itself fails, so an outage costs the emails being sent when it began one
 * attempt each, not every queued email an attempt per retry (DELIVERY_MAX_ATTEMPTS would fail them all
 * within a long outage), and a wrong password costs the relay's account one AUTH attempt per check instead
 * of one per email. A send's fault pauses nothing until a check confirms it: a connection cut over one
 * message, or a 421 to it, is that message's, and must not hold up everyone else's.
 */
export class RelayPause {
  private state: State = 'open';
  private since = 0;
  /** Checks failed in this pause: each doubles the wait for the next. */
  private failedChecks = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Checks begun so far: a check's answer counts only if none began after it. */
  private checks = 0;
  private stopped = false;
  private readonly stillDownLog = new LogThrottle(STILL_DOWN_LOG_EVERY_MS);

  constructor(private readonly o: RelayPauseOptions) {}

  /** Whether claims must wait: the relay is being checked, or failed its check. */
  get holding(): boolean {
    return this.state !== 'open';
  }

  get paused(): boolean {
    return this.state === 'paused';
  }

  /** A send failed for what may be the relay: checked at once, unless a check is already due. */
  failed(err: DeliveryError): void {
    if (this.state !== 'open' || this.stopped) return;
    this.state = 'checking';
    void this.checkNow(err.message);
  }

  /** The relay took a send, or answered it (whatever it said of the message): it works. */
  answered(): void {
    if (this.state === 'paused') this.resume();
    else if (this.state === 'checking') {
      // No need to wait for the check's answer (checks: it no longer counts).
      this.checks++;
      this.state = 'open';
      this.o.onResume();
    }
  }

  /** Claims wait for a first check, which says in the log whether the relay answers. */
  checkAtStart(): void {
    if (this.state !== 'open' || this.stopped) return;
    this.state = 'checking';
    void this.checkNow(undefined);
  }

  /** Checks go on again after stop(), where a pause or a check was left. */
  start(): void {
    this.stopped = false;
    if (this.state === 'paused') this.schedule(this.nextWaitMs());
    else if (this.state === 'checking') void this.checkNow(undefined);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  /** `sendError`: the send's fault that asked for this check; undefined for a check at start. */
  private async checkNow(sendError: string | undefined): Promise<void> {
    const check = ++this.checks;
    const state = this.state;
    let fault: string | undefined;
    try {
      await this.bounded(this.o.check());
    } catch (err) {
      fault = (err as Error).message;
    }
    // A later check (or a send that got through) has said more since.
    if (check !== this.checks || this.state !== state || this.stopped) return;
    if (fault === undefined) {
      if (state === 'paused') this.resume();
      else {
        this.state = 'open';
        if (sendError === undefined)
          this.o.logger.info({ relay: this.o.relay }, 'delivery: the relay answers');
        this.o.onResume();
      }
      return;
    }
    if (state === 'checking') {
      this.state = 'paused';
      this.since = Date.now();
      this.failedChecks = 0;
      this.stillDownLog.reset();
      this.stillDownLog.due();
      const checkInMs = this.nextWaitMs();
      this.o.logger.error(
        { relay: this.o.relay, lastError: fault, checkInMs },
        'delivery paused: the relay failed; no email is claimed until it answers again (checked with a connection that sends nothing)',
      );
      this.schedule(checkInMs);
      return;
    }
    this.failedChecks++;
    const checkInMs = this.nextWaitMs();
    if (this.stillDownLog.due()) {
      this.o.logger.warn(
        { relay: this.o.relay, lastError: fault, pausedForMs: Date.now() - this.since, checkInMs },
        'delivery still paused: the relay fails (logged again at most every five minutes)',
      );
    }
    this.schedule(checkInMs);
  }

  private nextWaitMs(): number {
    const first = this.o.firstCheckMs ?? FIRST_CHECK_MS;
    return Math.min(first * 2 ** Math.min(this.failedChecks, 20), this.o.maxCheckMs ?? MAX_CHECK_MS);
  }

  private schedule(waitMs: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      if (this.state === 'paused' && !this.stopped) void this.checkNow(undefined);
    }, waitMs);
    this.timer.unref();
  }

  /** The check, failed once it has taken longer than checkTimeoutMs. */
  private async bounded(check: Promise<void>): Promise<void> {
    const ms = this.o.checkTimeoutMs ?? CHECK_TIMEOUT_MS;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the check of the relay did not finish within ${ms} ms`)),
        ms,
      );
    });
    try {
      await Promise.race([check, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  private resume(): void {
    this.state = 'open';
    clearTimeout(this.timer);
    const pausedForMs = Date.now() - this.since;
    this.o.logger.info({ relay: this.o.relay, pausedForMs }, 'delivery resumed: the relay answers again');
    this.o.onResume();
  }
}
