// Workers on several hosts share one PostgreSQL database: they read leases by the database's clock, measured
// against their own (store/store-clock.ts), so a host whose clock runs ahead does not take over emails another
// worker still sends. A send's deadline for beginning is handed to the mailer in the host's time.
import pino from 'pino';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { Clock } from '../../src/clock.js';
import type { Mailer } from '../../src/delivery/mailer.js';
import type { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import {
  CLOCK_MAX_RTT_MS,
  CLOCK_RETRY_MS,
  CLOCK_SYNC_EVERY_MS,
  CLOCK_WARN_MS,
  StoreClock,
  databaseTimeMs,
  processClock,
} from '../../src/store/store-clock.js';
import type { TestApp } from '../helpers/app.js';
import { type SmtpSink, eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { basicEmail, sendEmail, settled, startWorker, useDelivery } from './harness.js';

/** A host clock running `aheadMs` ahead of the real one. */
const hostAhead = (aheadMs: number): Clock => ({ now: () => new Date(Date.now() + aheadMs) });

function capturing() {
  const lines: { level: number; msg: string; offsetMs?: number }[] = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, logger };
}

describe('the store clock', () => {
  it('keeps the offset of the quickest of three round trips, and the last one when the store does not answer', async () => {
    let now = 1_000_000;
    const base: Clock = { now: () => new Date(now) };
    // Round trips of 40, 10 and 30 ms; the database reads 5 s ahead of the host at the middle of each, and
    // the slow ones' readings are off (as a reading taken early or late in a long trip is).
    const trips = [
      { rtt: 40, skew: 5_000 + 15 },
      { rtt: 10, skew: 5_000 },
      { rtt: 30, skew: 5_000 - 12 },
    ];
    let failing = false;
    let trip = 0;
    const clock = new StoreClock(
      async () => {
        if (failing) throw new Error('Connection terminated unexpectedly');
        const { rtt, skew } = trips[trip++ % 3]!;
        now += rtt / 2;
        const at = now + skew;
        now += rtt / 2;
        return at;
      },
      pino({ level: 'silent' }),
      base,
    );
    await clock.sync();
    expect(clock.aheadMs()).toBe(5_000);
    expect(clock.now().getTime()).toBe(now + 5_000);
    failing = true;
    await clock.sync();
    expect(clock.aheadMs()).toBe(5_000);
    // A step back of the host's clock during a trip makes no reading: the offset stands.
    failing = false;
    const stepped = new StoreClock(
      async () => {
        now -= 60_000;
        return now + 5_000;
      },
      pino({ level: 'silent' }),
      base,
    );
    await stepped.sync();
    expect(stepped.aheadMs()).toBe(0);
  });

  it("uses no slow reading, and tries again soon while it has none, warning once that it runs on the host's clock", async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const { lines, logger } = capturing();
    let now = 1_000_000;
    let trip = CLOCK_MAX_RTT_MS + 50;
    let reads = 0;
    // The database 5 s ahead; a reading's round trip as long as `trip` (a pool slow to hand out a connection).
    const clock = new StoreClock(
      async () => {
        reads++;
        now += trip / 2;
        const at = now + 5_000;
        now += trip / 2;
        return at;
      },
      logger,
      { now: () => new Date(now) },
    );
    try {
      await clock.start();
      expect([clock.aheadMs(), reads]).toEqual([0, 3]);
      expect(lines.map((l) => l.level)).toEqual([40]);
      // Tried again after CLOCK_RETRY_MS (still slow: no second warning), then quick.
      await vi.advanceTimersByTimeAsync(CLOCK_RETRY_MS);
      expect([clock.aheadMs(), reads, lines.length]).toEqual([0, 6, 1]);
      trip = 2;
      await vi.advanceTimersByTimeAsync(CLOCK_RETRY_MS);
      expect([clock.aheadMs(), reads]).toEqual([5_000, 9]);
      // Measured: the next sync a minute later, not sooner; a slow one then keeps the offset.
      trip = CLOCK_MAX_RTT_MS + 50;
      await vi.advanceTimersByTimeAsync(CLOCK_SYNC_EVERY_MS - 1);
      expect(reads).toBe(9);
      await vi.advanceTimersByTimeAsync(1);
      expect([clock.aheadMs(), reads]).toEqual([5_000, 12]);
    } finally {
      clock.stop();
      vi.useRealTimers();
    }
  });

  it("never turns back by a reading's error, and takes a larger step back at once", async () => {
    let now = 1_000_000;
    let skew = 5_000;
    const clock = new StoreClock(async () => now + skew, pino({ level: 'silent' }), {
      now: () => new Date(now),
    });
    await clock.sync();
    const first = clock.now().getTime();
    expect(first).toBe(1_005_000);
    // A reading 100 ms lower: time stands still until the host's clock has caught up, then runs on.
    skew = 4_900;
    await clock.sync();
    expect(clock.now().getTime()).toBe(first);
    now += 60;
    expect(clock.now().getTime()).toBe(first);
    now += 60;
    expect(clock.now().getTime()).toBe(first + 20);
    // Five seconds lower: taken at once.
    skew = -100;
    await clock.sync();
    expect(clock.now().getTime()).toBe(now - 100);
  });

  it('logs an offset over a second when it appears, when it moves as much again, and when it ends', async () => {
    const { lines, logger } = capturing();
    let skew = 200;
    const clock = new StoreClock(async () => Date.now() + skew, logger);
    const offsets = async (...skews: number[]) => {
      for (const s of skews) {
        skew = s;
        await clock.sync();
      }
      return lines.map((l) => [l.level, Math.round((l.offsetMs ?? 0) / 1_000)]);
    };
    expect(await offsets(200, -300)).toEqual([]);
    expect(await offsets(CLOCK_WARN_MS * 3, CLOCK_WARN_MS * 3.5)).toEqual([[40, 3]]);
    expect(await offsets(CLOCK_WARN_MS * 5, 100)).toEqual([
      [40, 3],
      [40, 5],
      [30, 0],
    ]);
  });
});

describe.each(storeKinds())('the worker and its clock on %s', (kind) => {
  const ctx = useDelivery(kind, { worker: false });
  let t: TestApp, sink: SmtpSink, mailer: SmtpMailer, auth: string;
  beforeAll(() => {
    ({ t, sink, mailer, auth } = ctx);
  });

  it("reads time by the database's clock on PostgreSQL, by the host's on SQLite", async () => {
    const clock = await processClock(t.ts.store, pino({ level: 'silent' }));
    try {
      expect(clock instanceof StoreClock).toBe(kind === 'postgres');
      // The same host: no offset to speak of.
      expect(Math.abs(clock.now().getTime() - Date.now())).toBeLessThan(1_000);
    } finally {
      clock.stop?.();
    }
  });

  it("gives the mailer each send's deadline to begin in the host's time, not its own clock's", async () => {
    // A worker clock 10 s ahead of the host's: its lease ends 10 s earlier by the host's clock.
    const clock: Clock = { now: () => new Date(Date.now() + 10_000), aheadMs: () => 10_000 };
    const startBys: number[] = [];
    const extended: number[] = [];
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const recording: Mailer = {
      description: mailer.description,
      close: async () => undefined,
      extend: (_ids, startBy) => void extended.push(startBy),
      send: async (message, options) => {
        startBys.push(options?.startBy ?? NaN);
        await released;
        // Without its deadline, which this test reads in startBys: released after a renewal, 100 ms or more
        // into the 400 ms lease, the send could miss it on a loaded host's SMTP thread.
        return mailer.send(message);
      },
    };
    const worker = startWorker(t, recording, { clock, leaseMs: 400 });
    try {
      const id = await sendEmail(t, auth, basicEmail('host-time@example.org'));
      await eventually(() => extended.length > 0, 5_000, 'a renewal told to the mailer');
      release();
      const email = await settled(t, auth, id);
      expect([email.status, email.attempts]).toEqual(['sent', 1]);
      // The lease runs from the claim (its `sending` event, in the worker's clock) for 400 ms, less a fifth
      // to spare; in the host's time 10 s earlier.
      const claimedAt = Date.parse(email.events.find((e) => e.type === 'sending')!.at);
      expect(startBys).toEqual([claimedAt + 400 - 80 - 10_000]);
      // A renewal's too: within its lease from now, by the host's clock.
      expect(extended[0]! - Date.now()).toBeLessThan(400);
    } finally {
      release();
      await worker.stop();
    }
  });

  // PostgreSQL only: on SQLite every worker is on one host, and its clock is the host's.
  if (kind === 'postgres')
    it("does not take over another worker's email when its host's clock runs ahead by more than a lease", async () => {
      // Worker A sends held@ slowly, one email at a time, renewing its 2 s lease as it goes.
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      const sentBy = { a: [] as string[], b: [] as string[] };
      const through = (who: 'a' | 'b', hold: boolean): Mailer => ({
        description: mailer.description,
        close: async () => undefined,
        send: async (message, options) => {
          sentBy[who].push(...message.recipients);
          if (hold) await released;
          return mailer.send(message, options);
        },
      });
      const a = startWorker(t, through('a', true), { leaseMs: 2_000, concurrency: 1 });
      // Worker B's host runs 10 s ahead: by its own clock, A's lease ended long ago.
      const clockB = new StoreClock(
        () => databaseTimeMs(t.ts.store),
        pino({ level: 'silent' }),
        hostAhead(10_000),
      );
      await clockB.start();
      let b: ReturnType<typeof startWorker> | undefined;
      try {
        const held = await sendEmail(t, auth, basicEmail('held-by-a@example.org'));
        await eventually(() => sentBy.a.length === 1, 5_000, 'worker A sending');
        b = startWorker(t, through('b', false), { clock: clockB, leaseMs: 2_000 });
        // A is busy, so B claims the next email, and would have claimed A's with it (due before it, by B's
        // host's clock).
        const probe = await sendEmail(t, auth, basicEmail('probe@example.org'));
        expect((await settled(t, auth, probe)).status).toBe('sent');
        expect(sentBy.b).toEqual(['probe@example.org']);
        release();
        const email = await settled(t, auth, held);
        expect([email.status, email.attempts]).toEqual(['sent', 1]);
        expect(sink.deliveredTo('held-by-a@example.org')).toHaveLength(1);
      } finally {
        release();
        clockB.stop();
        await a.stop();
        await b?.stop();
      }
    });
});
