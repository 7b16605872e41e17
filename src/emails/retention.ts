// EMAIL_RETENTION_DAYS: ended emails (sent, failed) are removed, with their recipients and events, once their
// createdAt is that many days old; emails still on their way stay, however old. Each delivering process runs
// it on a timer of its own, never inside a delivery poll. Ids are UUID v7, so walking them in order finds the
// oldest first and the cutoff bounds the primary key whatever the organisations; createdAt is checked again
// in the delete, as on PostgreSQL an id carries the accepting host's clock and createdAt the database's.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { type Clock, firstIdAt } from '../clock.js';
import type { Store } from '../store/store.js';
import type { EmailStatus } from './emails.rules.js';
import * as repo from './emails.repository.js';

export const DAY_MS = 86_400_000;
/** The states an email does not leave. */
const ENDED: readonly EmailStatus[] = ['sent', 'failed'];
/** The wait between the end of a run and the start of the next. */
const EVERY_MS = 10 * 60_000;
/** The first run, this long after start-up: not in the rush of a start. */
const FIRST_RUN_MS = 60_000;
/** After a run that failed (the store was unavailable), the next one starts this soon. */
const RETRY_MS = 60_000;
/**
 * Runs in a row that found another process's under way before that is worth a warning: about 50 minutes
 * of them (a run lasts minutes at most once the first over a backlog is done).
 */
const ELSEWHERE_WARN_RUNS = 6;
/** Emails read a slice; the ended ones among them are deleted in one short commit. */
const SLICE = 100;
/**
 * The pause after each slice's delete: four times as long as the delete took, within these bounds, so a run
 * over a backlog takes about a fifth of the store's writer.
 */
const MIN_PAUSE_MS = 20;
const MAX_PAUSE_MS = 2_000;

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

/**
 * How far a run got: the emails it removed, and whether it walked to the cutoff; `elsewhere` when it did
 * not run because another process's run was under way (PostgreSQL).
 */
export interface RunResult {
  removed: number;
  finished: boolean;
  elsewhere?: boolean;
}

export class EmailRetention {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  /** Runs in a row that found another process's run under way (Store.alone). */
  private elsewhere = 0;
  /** Aborted by stop(): ends a run's walk after its statement, and its pause at once. */
  private stopping = new AbortController();

  constructor(private readonly o: RetentionOptions) {}

  start(): void {
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    this.schedule(this.o.firstRunMs ?? FIRST_RUN_MS);
  }

  /** Cancels the next run; the one under way ends once its current statement has. */
  async stop(): Promise<void> {
    this.stopping.abort();
    clearTimeout(this.timer);
    await this.running;
  }

  /**
   * Removes the ended emails made more than `days` days before now, unless another process is doing so
   * (Store.alone: on PostgreSQL each delivering process has a retention of its own, and two walking the
   * same slices would each read them all and delete nothing the other had not). `progress.removed` counts
   * them as they go, so a run that fails halfway can still say how many it removed.
   */
  async run(progress: { removed: number } = { removed: 0 }): Promise<RunResult> {
    if (this.stopping.signal.aborted) return { removed: 0, finished: false };
    const ran = await this.o.store.alone('email retention', (held) => this.walk(progress, held));
    return ran ?? { removed: 0, finished: false, elsewhere: true };
  }

  /** `held`: whether this run still has the store to itself (Store.alone); it stops when not. */
  private async walk(progress: { removed: number }, held: () => Promise<boolean>): Promise<RunResult> {
    const cutoff = new Date(this.o.clock.now().getTime() - this.o.days * DAY_MS);
    const below = firstIdAt(cutoff);
    const before = cutoff.toISOString();
    const slice = this.o.slice ?? SLICE;
    let after = '';
    while (!this.stopping.signal.aborted) {
      // Its lock lost (the connection that held it ended): another process's run may have begun.
      if (!(await held())) {
        this.o.logger.warn(
          { removed: progress.removed },
          'removing emails past their retention: the connection holding its lock ended; the next run goes on',
        );
        return { removed: progress.removed, finished: false };
      }
      const rows = await repo.emailsInIdOrder(this.o.store.db, after, below, slice);
      if (rows.length === 0) return { removed: progress.removed, finished: true };
      after = rows[rows.length - 1]!.id;
      const ended = rows.filter((r) => (ENDED as readonly string[]).includes(r.status)).map((r) => r.id);
      if (ended.length > 0) {
        const started = performance.now();
        progress.removed += await this.o.store.write((trx) =>
          repo.deleteEmailsIn(trx, ended, { statuses: ENDED, before }),
        );
        const took = performance.now() - started;
        await this.pause(Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, 4 * took)));
      } else {
        // SQLite's reads settle on the event loop: a walk past many emails still on their way (a worker
        // stopped for days) lets requests in between slices.
        await new Promise((resolve) => setImmediate(resolve));
      }
      if (rows.length < slice) return { removed: progress.removed, finished: true };
    }
    return { removed: progress.removed, finished: false };
  }

  private schedule(ms: number): void {
    if (this.stopping.signal.aborted) return;
    this.timer = setTimeout(() => {
      this.running = this.runAndLog().finally(() => (this.running = undefined));
    }, ms);
    this.timer.unref();
  }

  private async runAndLog(): Promise<void> {
    const { logger, days } = this.o;
    const progress = { removed: 0 };
    let next = EVERY_MS;
    try {
      const { removed, finished, elsewhere } = await this.run(progress);
      this.elsewhere = elsewhere ? this.elsewhere + 1 : 0;
      if (elsewhere && this.elsewhere % ELSEWHERE_WARN_RUNS === 0)
        logger.warn(
          {
            runs: this.elsewhere,
            holder: "application_name 'mailroom: email retention' in pg_stat_activity",
          },
          'removing emails past their retention: another process has held the lock at each of the last six tries (a long first run over a backlog, or a holder that is stuck)',
        );
      else if (elsewhere) logger.debug('removing emails past their retention: another process is at it');
      else if (!finished)
        logger.info({ removed, retentionDays: days }, 'removing emails past their retention: stopped');
      else if (removed > 0)
        logger.info({ removed, retentionDays: days }, 'removed emails past their retention');
    } catch (err) {
      next = RETRY_MS;
      logger.warn(
        { err, removed: progress.removed },
        'removing emails past their retention failed; tried again in a minute',
      );
    }
    this.schedule(next);
  }

  /** Waits `ms`, or less once the retention stops (at once if it has): cut short, it does not throw. */
  private pause(ms: number): Promise<void> {
    return sleep(ms, undefined, { signal: this.stopping.signal }).catch(() => undefined);
  }
}
