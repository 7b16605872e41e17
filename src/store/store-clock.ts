// On PostgreSQL, processes on several hosts compare each other's leases, retry times and timestamps: by each
// host's clock, a worker whose clock ran ahead by most of a lease would take over emails another was still
// sending, and send them twice. So each process reads the database's clock: its host's plus an offset
// measured now and then. On SQLite every process is on the one host, and uses its clock.
import { sql } from './kysely.js';
import type { Logger } from 'pino';
import { type Clock, systemClock } from '../clock.js';
import type { Store } from './store.js';

/** How often the offset is measured again. */
export const CLOCK_SYNC_EVERY_MS = 60_000;
/** An offset larger than this is logged: when it appears, when it moves by as much again, and when it ends. */
export const CLOCK_WARN_MS = 1_000;
/** Round trips measured at each sync; the quickest one's reading is kept. */
const SAMPLES = 3;
/**
 * A reading whose round trip took longer than this is not used: the time a query waits for a pool
 * connection comes before it is sent, and would shift the offset by half that wait.
 */
export const CLOCK_MAX_RTT_MS = 250;
/** Until a first reading is used, one is tried this often. */
export const CLOCK_RETRY_MS = 5_000;

export class StoreClock implements Clock {
  private offset = 0;
  /** The last time now() gave (epoch ms). */
  private last = -Infinity;
  private timer: NodeJS.Timeout | undefined;
  private logged = 0;
  private measured = false;
  /** Whether the host's clock being used for want of a reading was said (once). */
  private warnedUnmeasured = false;
  private stopped = false;

  constructor(
    private readonly readMs: () => Promise<number>,
    private readonly logger: Logger,
    private readonly base: Clock = systemClock,
  ) {}

  now(): Date {
    let at = this.base.now().getTime() + this.offset;
    // A new offset a little below the last (a reading is off by up to half its round trip) would turn
    // time back, and events, listed by their time, out of order: time stands still instead until it has
    // caught up. A larger step back (the host's clock corrected) is taken at once: leases follow it.
    if (at < this.last && this.last - at <= CLOCK_MAX_RTT_MS) at = this.last;
    this.last = at;
    return new Date(at);
  }

  /** How far this clock is ahead of the host's (ms): a deadline in its time is this much later locally. */
  aheadMs(): number {
    return this.offset;
  }

  /**
   * Measures the offset again: the database's reading against the middle of the quickest round trip, if
   * that trip was quick. Otherwise (the store down, or slow to hand out a connection) the last offset
   * stands; until a first one is measured that is none, the host's clock, and a warning says so.
   */
  async sync(): Promise<void> {
    let best: { rtt: number; offset: number } | undefined;
    let failure: unknown;
    try {
      for (let i = 0; i < SAMPLES; i++) {
        const sent = this.base.now().getTime();
        const at = await this.readMs();
        const back = this.base.now().getTime();
        const sample = { rtt: back - sent, offset: at - (sent + back) / 2 };
        // The host's clock stepped back meanwhile: no reading (stepped forward, the trip looks slow).
        if (sample.rtt < 0) continue;
        if (!best || sample.rtt < best.rtt) best = sample;
      }
    } catch (err) {
      failure = err;
    }
    if (!best || best.rtt > CLOCK_MAX_RTT_MS) {
      if (!this.measured && !this.warnedUnmeasured) {
        this.warnedUnmeasured = true;
        this.logger.warn(
          { err: failure, roundTripMs: best?.rtt },
          "clock: the database's time could not be read quickly; this host's clock is used until it can",
        );
      }
      return;
    }
    this.measured = true;
    this.offset = Math.round(best.offset);
    const off = Math.abs(this.offset) > CLOCK_WARN_MS;
    if (off && Math.abs(this.offset - this.logged) > CLOCK_WARN_MS) {
      this.logged = this.offset;
      this.logger.warn(
        { offsetMs: this.offset },
        "clock: this host's clock is off the database's; leases and timestamps follow the database's",
      );
    } else if (!off && this.logged !== 0) {
      this.logged = 0;
      this.logger.info(
        { offsetMs: this.offset },
        "clock: this host's clock is in step with the database's again",
      );
    }
  }

  /**
   * Measures now, then every CLOCK_SYNC_EVERY_MS until stop(); every CLOCK_RETRY_MS while no reading has
   * been used yet.
   */
  async start(): Promise<void> {
    await this.sync();
    const next = () => {
      if (this.stopped) return;
      this.timer = setTimeout(
        () => void this.sync().then(next),
        this.measured ? CLOCK_SYNC_EVERY_MS : CLOCK_RETRY_MS,
      );
      this.timer.unref();
    };
    next();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/** The database's clock, in epoch milliseconds (PostgreSQL's clock_timestamp(), not the transaction's). */
export async function databaseTimeMs(store: Store): Promise<number> {
  const { rows } = await sql<{
    ms: string | number;
  }>`select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms`.execute(store.db);
  return Number(rows[0]!.ms);
}

/** The clock a process reads time by: the database's on PostgreSQL (started), the host's on SQLite. */
export async function processClock(store: Store, logger: Logger): Promise<Clock & { stop?(): void }> {
  if (store.dialect !== 'postgres') return systemClock;
  const clock = new StoreClock(() => databaseTimeMs(store), logger);
  await clock.start();
  return clock;
}
