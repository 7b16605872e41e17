// EMAIL_RETENTION_DAYS: emails that ended (sent, failed) are removed with their recipients and events once
// that many days have passed since they were accepted. Each delivery worker runs it on a timer of its own,
// never inside a delivery poll. A run walks the email ids in order: they are UUID v7, so the oldest come
// first and "accepted before the cutoff" is an id bound, read from the primary key's index alone, however
// many organisations there are. Each slice is read without a lock and its ended emails are deleted in a
// commit of their own, followed by a pause, so a first run over years of mail takes a fifth of the store's
// writer at most. Emails still on their way stay, however old; the next run looks at them again.
import type { Logger } from 'pino';
import { type Clock, firstIdAt } from '../clock.js';
import type { Store } from '../store/store.js';
import type { EmailStatus } from './emails.schemas.js';
import * as repo from './emails.repository.js';

export const DAY_MS = 86_400_000;
/** The states an email does not leave. */
const ENDED: readonly EmailStatus[] = ['sent', 'failed'];
/** How often a run starts. */
const EVERY_MS = 10 * 60_000;
/** The first run, this long after start-up: not in the rush of a start. */
const FIRST_RUN_MS = 60_000;
/** After a run that failed (the store was unavailable), the next one starts this soon. */
const RETRY_MS = 60_000;
/** Emails read a slice; the ended ones among them are deleted in one commit (about 5 ms on SQLite). */
const SLICE = 100;
/** The pause after each slice's delete: this at least, and four times as long as the delete took. */
const MIN_PAUSE_MS = 20;

export interface RetentionOptions {
  store: Store;
  clock: Clock;
  logger: Logger;
  /** EMAIL_RETENTION_DAYS. */
  days: number;
  /** When the first run starts after start(); FIRST_RUN_MS unless given (tests). */
  firstRunMs?: number;
  /** Emails read a slice (tests). */
  slice?: number;
}

export class EmailRetention {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** Emails the run under way has removed so far. */
  private removed = 0;
  /** Ends a run's pause early when the retention stops. */
  private wake: (() => void) | undefined;

  constructor(private readonly o: RetentionOptions) {}

  start(): void {
    this.stopped = false;
    this.schedule(this.o.firstRunMs ?? FIRST_RUN_MS);
  }

  /** Cancels the next run and ends the one under way after its current slice. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
    await this.running;
  }

  /**
   * Removes the ended emails accepted more than `days` days before now; how many. Stops early, between
   * slices, once the retention stops.
   */
  async run(): Promise<number> {
    const below = firstIdAt(new Date(this.o.clock.now().getTime() - this.o.days * DAY_MS));
    const slice = this.o.slice ?? SLICE;
    let after = '';
    this.removed = 0;
    while (!this.stopped) {
      const rows = await repo.emailsInIdOrder(this.o.store.db, after, below, slice);
      if (rows.length === 0) break;
      after = rows[rows.length - 1]!.id;
      const ended = rows.filter((r) => (ENDED as readonly string[]).includes(r.status)).map((r) => r.id);
      if (ended.length > 0) {
        const started = performance.now();
        this.removed += await this.o.store.write((trx) => repo.deleteEmailsIn(trx, ended, ENDED));
        await this.pause(Math.max(MIN_PAUSE_MS, 4 * (performance.now() - started)));
      }
      if (rows.length < slice) break;
    }
    return this.removed;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.runAndLog().finally(() => (this.running = undefined));
    }, ms);
    this.timer.unref();
  }

  private async runAndLog(): Promise<void> {
    const { logger, days } = this.o;
    let next = EVERY_MS;
    try {
      const removed = await this.run();
      if (removed > 0) logger.info({ removed, retentionDays: days }, 'removed emails past their retention');
    } catch (err) {
      next = RETRY_MS;
      logger.warn(
        { err, removed: this.removed },
        'removing emails past their retention failed; tried again in a minute',
      );
    }
    this.schedule(next);
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}
