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
  /** Called once the relay answers again: claims may resume. */
  onResume: () => void;
  firstCheckMs?: number;
  maxCheckMs?: number;
  /**
   * A check taking longer fails (the worker's send bound): a relay trickling its reply never trips the SMTP
   * timeouts, and a check that never settled would leave claims stopped for good.
   */
  checkTimeoutMs?: number;
}

/** The first check waits a second, then the wait doubles up to five minutes while the relay keeps failing. */
export const FIRST_CHECK_MS = 1_000;
export const MAX_CHECK_MS = 5 * 60_000;
export const CHECK_TIMEOUT_MS = 10 * 60_000;
const STILL_DOWN_LOG_EVERY_MS = 5 * 60_000;

/**
 * Claims stop from a send's relay fault until a check gets through (or a send in flight does), so an outage
 * costs the emails claimed when it began one attempt each, not every queued email an attempt per retry
 * (DELIVERY_MAX_ATTEMPTS would fail them all within a long outage), and a wrong password costs the relay's
 * account one AUTH attempt per check instead of one per email.
 */
export class RelayPause {
  private since: number | undefined;
  /**
   * Checks failed, and pauses ended by a check but followed by no send getting through (a relay that
   * passes checks and fails every message): each doubles the wait for the next check. A send that gets
   * through starts it over.
   */
  private failedChecks = 0;
  /** The last pause ended by a check, and no send has got through since. */
  private onlyChecked = false;
  private timer: NodeJS.Timeout | undefined;
  /** Pauses so far: tells a check's answer from an earlier pause's. */
  private pauses = 0;
  private stopped = false;
  private readonly stillDownLog = new LogThrottle(STILL_DOWN_LOG_EVERY_MS);

  constructor(private readonly o: RelayPauseOptions) {}

  get paused(): boolean {
    return this.since !== undefined;
  }

  /** A send failed for a relay fault: pause, unless already paused (the rest of a batch failing alike). */
  failed(err: DeliveryError): void {
    if (this.paused || this.stopped) return;
    this.since = Date.now();
    this.pauses++;
    const fields = { relay: this.o.relay, lastError: err.message };
    if (this.onlyChecked) {
      // The same fault as before the last check: logged as the pause going on, and the waits go on growing.
      this.failedChecks++;
      const checkInMs = this.nextWaitMs();
      if (this.stillDownLog.due()) {
        this.o.logger.warn(
          { ...fields, checkInMs },
          'delivery still paused: the relay passes a check but fails sends (logged again at most every five minutes)',
        );
      }
      this.schedule(checkInMs);
      return;
    }
    this.failedChecks = 0;
    this.stillDownLog.reset();
    this.stillDownLog.due();
    const checkInMs = this.nextWaitMs();
    this.o.logger.error(
      { ...fields, checkInMs },
      'delivery paused: the relay failed; no email is claimed until it answers again (checked with a connection that sends nothing)',
    );
    this.schedule(checkInMs);
  }

  /** The relay took a send, or answered it (whatever it said of the message): it works. */
  answered(): void {
    this.onlyChecked = false;
    if (this.paused) this.resume(true);
  }

  /** Checks once now, not pausing on success: what an operator reads at start-up. */
  async checkAtStart(): Promise<void> {
    try {
      await this.bounded(this.o.check());
      this.o.logger.info({ relay: this.o.relay }, 'delivery: the relay answers');
    } catch (err) {
      if (!this.paused) this.failed(err as DeliveryError);
    }
  }

  /** Checks go on again after stop(), where a pause was left. */
  start(): void {
    this.stopped = false;
    if (this.paused) this.schedule(this.nextWaitMs());
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private nextWaitMs(): number {
    const first = this.o.firstCheckMs ?? FIRST_CHECK_MS;
    return Math.min(first * 2 ** Math.min(this.failedChecks, 20), this.o.maxCheckMs ?? MAX_CHECK_MS);
  }

  private schedule(waitMs: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.checkNow(), waitMs);
    this.timer.unref();
  }

  private async checkNow(): Promise<void> {
    const pause = this.pauses;
    if (!this.paused || this.stopped) return;
    try {
      await this.bounded(this.o.check());
    } catch (err) {
      // A check begun in an earlier pause says nothing of this one.
      if (this.pauses !== pause || !this.paused || this.stopped) return;
      this.failedChecks++;
      const waitMs = this.nextWaitMs();
      if (this.stillDownLog.due()) {
        this.o.logger.warn(
          {
            relay: this.o.relay,
            lastError: (err as Error).message,
            pausedForMs: Date.now() - this.since!,
            checkInMs: waitMs,
          },
          'delivery still paused: the relay fails (logged again at most every five minutes)',
        );
      }
      this.schedule(waitMs);
      return;
    }
    if (this.pauses === pause && this.paused && !this.stopped) this.resume(false);
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

  /** Claims resume: after a send got through, or only a check (which a relay failing sends may pass). */
  private resume(bySend: boolean): void {
    const pausedForMs = Date.now() - this.since!;
    this.since = undefined;
    clearTimeout(this.timer);
    // After a pause that goes on (onlyChecked), only a send getting through is news.
    if (bySend || !this.onlyChecked) {
      this.o.logger.info({ relay: this.o.relay, pausedForMs }, 'delivery resumed: the relay answers again');
    }
    // The first pause after a check let claims resume is logged at once; those after it, throttled.
    if (!bySend && !this.onlyChecked) this.stillDownLog.reset();
    this.onlyChecked = !bySend;
    this.o.onResume();
  }
}
