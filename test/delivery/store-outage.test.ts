// The worker while its store refuses every claim (PostgreSQL down, a full disk): it backs off instead of
// retrying every poll, logs the fault once rather than at every try, and delivers what is due once the
// store answers again. The outage is a fake: a real store cannot be made to refuse on cue in-process.
// A worker does not claim again an email its own send holds, whose lease ran out in the store; and it
// records a result for as long as the store refuses it.
// And while another process holds SQLite's write lock: an idle worker's polls do not wait for it.
import Database from 'better-sqlite3';
import path from 'node:path';
import pino from 'pino';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { type Mailer, NotStartedError } from '../../src/delivery/mailer.js';
import { ResultRecorder } from '../../src/delivery/recorder.js';
import type { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import type { Store } from '../../src/store/store.js';
import type { TestApp } from '../helpers/app.js';
import { type SmtpSink, eventually } from '../helpers/smtp.js';
import { storeKinds } from '../helpers/stores.js';
import { basicEmail, sendEmail, settled, startWorker, useDelivery } from './harness.js';

/**
 * The store, except that `batch` (claims, leases, results) fails while `down` is set, or `failNext` times.
 * Counts the batches (`claims`, with the time of each refused one) and the reads the worker begins
 * (`reads`: an idle poll is one).
 */
function flaky(store: Store) {
  const state = {
    store,
    down: false,
    claims: 0,
    failNext: 0,
    reads: 0,
    readFrom: [] as string[],
    refusedAt: [] as number[],
  };
  const db = new Proxy(store.db, {
    get(target, prop) {
      if (prop === 'selectFrom') {
        state.reads++;
        return (from: Parameters<typeof target.selectFrom>[0]) => {
          state.readFrom.push(String(from));
          return target.selectFrom(from);
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  state.store = new Proxy(store, {
    get(target, prop) {
      if (prop === 'db') return db;
      if (prop === 'batch') {
        return (...args: Parameters<Store['batch']>) => {
          state.claims++;
          const fail = state.down || state.failNext > 0;
          if (state.failNext > 0) state.failNext--;
          if (!fail) return target.batch(...args);
          state.refusedAt.push(performance.now());
          return Promise.reject(new Error('Connection terminated unexpectedly'));
        };
      }
      const value: unknown = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return state;
}

/**
 * Waits for ten polls of the worker's idle queue; fails at once if one takes a write transaction. A time-out
 * says which reads came, the event loop's longest stop meanwhile (one of about 10 s: something on it waited
 * for a lock, as busy_timeout or SQLite's WAL read retries would make it) and what the worker logged.
 */
async function tenIdlePolls(
  counted: ReturnType<typeof flaky>,
  what: string,
  logged: () => string[] = () => [],
): Promise<true> {
  let last = performance.now();
  let longest = 0;
  const beat = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 10);
  try {
    return await eventually(
      () => {
        if (counted.claims > 0) throw new Error(`a poll took a write transaction (${what})`);
        return counted.reads >= 10;
      },
      10_000,
      () =>
        `ten polls ${what} (${counted.reads} reads came, the first from ${counted.readFrom.slice(0, 12).join(', ')}; the event ` +
        `loop's longest stop ${Math.round(Math.max(longest, performance.now() - last))} ms; the worker ` +
        `logged ${JSON.stringify(logged())})`,
    );
  } finally {
    clearInterval(beat);
  }
}

/** A logger that keeps what it logs at `level` and above, parsed, in `lines`. */
function capturing(level: 'info' | 'warn') {
  const lines: { level: number; msg: string; emailId?: string }[] = [];
  const logger = pino({ level }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, logger };
}

/**
 * A mailer that sends through `mailer`, and calls `afterFirst` once the first send is over (before its
 * result is recorded). Counts its sends.
 */
function afterFirstSend(mailer: Mailer, afterFirst: () => void) {
  const counted = {
    sends: 0,
    mailer: {
      description: mailer.description,
      close: async () => undefined,
      send: async (message, options) => {
        const result = await mailer.send(message, options);
        if (counted.sends++ === 0) afterFirst();
        return result;
      },
    } satisfies Mailer,
  };
  return counted;
}

/** The email's lease and due time, as the store holds them. */
const leaseOf = (t: TestApp, id: string) =>
  t.ts.store.db
    .selectFrom('emails')
    .select(['lease_owner', 'lease_until', 'next_attempt_at'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();

describe.each(storeKinds())('the worker and its store, on %s', (kind) => {
  const ctx = useDelivery(kind, { worker: false });
  let t: TestApp, sink: SmtpSink, mailer: SmtpMailer, auth: string;
  beforeAll(() => {
    ({ t, sink, mailer, auth } = ctx);
  });

  it('backs off, logs once, and delivers when the store is back', async () => {
    const { lines, logger } = capturing('info');
    const outage = flaky(t.ts.store);
    outage.down = true;
    const worker = startWorker(t, mailer, { store: outage.store, logger, pollMs: 20 });
    try {
      const id = await sendEmail(t, auth, basicEmail('after-outage@example.org'));
      await eventually(() => outage.refusedAt.length >= 5, 15_000, 'five refused claims');
      // Each wait is twice the one before, from twice pollMs (a retry every poll would wait 20 ms each
      // time). Only lower bounds: a slow machine makes the waits longer, never shorter. The timestamps are
      // taken when the claims were refused; the worker sets its timer after that.
      const [first, ...later] = outage.refusedAt.slice(0, 5);
      let previous = first!;
      later.forEach((at, i) => {
        expect(at - previous, `wait ${i + 1} of ${JSON.stringify(outage.refusedAt)}`).toBeGreaterThanOrEqual(
          20 * 2 ** (i + 1) - 1,
        );
        previous = at;
      });
      const errors = lines.filter((l) => l.level >= 50);
      expect(errors.map((l) => l.msg)).toEqual([expect.stringContaining('claiming failed')]);

      outage.down = false;
      expect((await settled(t, auth, id)).status).toBe('sent');
      expect(sink.deliveredTo('after-outage@example.org')).toHaveLength(1);
      await eventually(
        () => lines.some((l) => l.msg === 'delivery: claiming works again'),
        5_000,
        'recovery logged',
      );
    } finally {
      await worker.stop();
    }
  });

  // An idle worker.
  it('polls without writing, and claims once something is due', async () => {
    const counted = flaky(t.ts.store);
    const worker = startWorker(t, mailer, { store: counted.store, pollMs: 20 });
    try {
      // Polls of the idle queue are reads, none of which takes a write transaction.
      await tenIdlePolls(counted, 'of the idle queue');
      const id = await sendEmail(t, auth, basicEmail('idle-poll@example.org'));
      expect((await settled(t, auth, id)).status).toBe('sent');
      expect(counted.claims).toBeGreaterThan(0);
    } finally {
      await worker.stop();
    }
  });

  it('records a result the store refused at first, and sends the email once', async () => {
    const { lines, logger } = capturing('warn');
    const outage = flaky(t.ts.store);
    // Once the first send is over, the next two writes through the store (the result's, or a renewal
    // between its tries) are refused.
    const refusing = afterFirstSend(mailer, () => (outage.failNext = 2));
    // A short lease: had the result been given up, the email would have gone out again after it.
    const worker = startWorker(t, refusing.mailer, { store: outage.store, logger, leaseMs: 2_000 });
    try {
      const id = await sendEmail(t, auth, basicEmail('recorded-late@example.org'));
      const email = await settled(t, auth, id);
      expect([email.status, email.attempts]).toEqual(['sent', 1]);
      expect(outage.failNext, 'both refusals were met').toBe(0);
      expect(lines.some((l) => /recording the result failed; trying again/.test(l.msg))).toBe(true);
      // Recorded for good: no lease left to run out, and never due again, so no later claim can send it.
      expect(await leaseOf(t, id)).toEqual({ lease_owner: null, lease_until: null, next_attempt_at: null });
      expect([refusing.sends, sink.deliveredTo('recorded-late@example.org').length]).toEqual([1, 1]);
    } finally {
      await worker.stop();
    }
  });

  it('tells the mailer of each renewal, and leaves an email whose send never began to its next claim', async () => {
    const extended: string[][] = [];
    const startBys: number[] = [];
    let sends = 0;
    // The first send waits until a renewal was told to the mailer, then is refused unbegun, as a paused
    // process's would be.
    const mailerOf: Mailer = {
      description: mailer.description,
      close: async () => undefined,
      extend: (ids) => void extended.push(ids),
      send: async (message, options) => {
        startBys.push(options?.startBy ?? NaN);
        // The next claim's send, without its deadline: a loaded host's SMTP thread may begin it past its 80 ms
        // margin, and what this test reads of deadlines is in startBys.
        if (sends++ > 0) return mailer.send(message);
        await eventually(
          () => extended.some((ids) => ids.includes(message.id)),
          10_000,
          'a renewal told to the mailer',
        );
        throw new NotStartedError('its lease ran out before a connection to the relay was free');
      },
    };
    const worker = startWorker(t, mailerOf, { leaseMs: 400 });
    try {
      const id = await sendEmail(t, auth, basicEmail('not-begun@example.org'));
      const email = await settled(t, auth, id);
      // No verdict on the first attempt (no deferral): the next claim sent it, once.
      expect([email.status, email.attempts]).toEqual(['sent', 2]);
      expect(email.events.map((e) => e.type)).toEqual(['queued', 'sending', 'sending', 'sent']);
      expect(sink.deliveredTo('not-begun@example.org')).toHaveLength(1);
      // Each send may begin until its lease's end, less a fifth of the lease (80 ms here); the lease runs
      // from the claim, the time of its `sending` event.
      const claimedAt = email.events.filter((e) => e.type === 'sending').map((e) => Date.parse(e.at));
      expect(startBys).toEqual(claimedAt.map((at) => at + 400 - 80));
    } finally {
      await worker.stop();
    }
  });

  it('does not claim again an email its own send still holds when the store says its lease ran out', async () => {
    // The first send of the email waits for its release: a relay slower than the lease.
    let release!: () => void;
    const relayed = new Promise<void>((resolve) => (release = resolve));
    let sends = 0;
    const slow: Mailer = {
      description: mailer.description,
      close: async () => undefined,
      send: async (message, options) => {
        if (message.recipients.includes('held@example.org') && sends++ === 0) await relayed;
        return mailer.send(message, options);
      },
    };
    // Renewals (every quarter of the lease) do not come during the test: the store alone says the lease ended.
    const worker = startWorker(t, slow, { leaseMs: 60_000 });
    try {
      const id = await sendEmail(t, auth, basicEmail('held@example.org'));
      await eventually(() => sends === 1, 5_000, 'the send started');
      // As after an outage longer than the lease: ended in the store, and still this worker's.
      const past = new Date(Date.now() - 1_000).toISOString();
      await t.ts.store.write((trx) =>
        trx
          .updateTable('emails')
          .set({ lease_until: past, next_attempt_at: past })
          .where('id', '=', id)
          .execute(),
      );
      // A claim after that takes the other email; it would have taken the held one first (due earlier).
      const other = await sendEmail(t, auth, basicEmail('claimed-after@example.org'));
      expect((await settled(t, auth, other)).status).toBe('sent');
      expect(sends).toBe(1);
      release();
      const email = await settled(t, auth, id);
      expect([email.status, email.attempts]).toEqual(['sent', 1]);
      expect(email.events.map((e) => e.type)).toEqual(['queued', 'sending', 'sent']);
      expect([sends, sink.deliveredTo('held@example.org').length]).toEqual([1, 1]);
    } finally {
      release();
      await worker.stop();
    }
  });

  it('tries a refused result past any fixed number of tries (60 here) and past the lease, and records it once the store is back', async () => {
    const { lines, logger } = capturing('warn');
    const outage = flaky(t.ts.store);
    let downSince = 0;
    // The store goes down as the first send ends: its result, renewals and claims are all refused.
    const refusing = afterFirstSend(mailer, () => {
      outage.down = true;
      downSince = performance.now();
    });
    const worker = startWorker(t, refusing.mailer, {
      store: outage.store,
      logger,
      leaseMs: 400,
      recordRetryMaxMs: 20,
    });
    try {
      const id = await sendEmail(t, auth, basicEmail('outlasted@example.org'));
      // Three leases long: the lease runs out in the store, and the result is refused some 60 times. (Tries
      // given up after a fixed number, 8 over 16 s before, left the delivered email to be claimed and sent
      // again; the count below is what tells this loop from one that gives up later than the outage.)
      await eventually(
        () => refusing.sends === 1 && performance.now() - downSince >= 1_200,
        10_000,
        'an outage of three leases',
      );
      const refused = outage.refusedAt.length;
      outage.down = false;
      const email = await settled(t, auth, id);
      expect([email.status, email.attempts]).toEqual(['sent', 1]);
      expect(refused).toBeGreaterThan(30);
      expect([refusing.sends, sink.deliveredTo('outlasted@example.org').length]).toEqual([1, 1]);
      expect(await leaseOf(t, id)).toEqual({ lease_owner: null, lease_until: null, next_attempt_at: null });
      // Said once, not at every try (nor at every renewal refused meanwhile, four a lease).
      expect(lines.filter((l) => /recording the result failed; trying again/.test(l.msg))).toHaveLength(1);
      expect(lines.filter((l) => /renewing leases failed/.test(l.msg))).toHaveLength(1);
    } finally {
      outage.down = false;
      await worker.stop();
    }
  });

  it('claims no more than its concurrency while the store refuses only its results', async () => {
    const counted = flaky(t.ts.store);
    const sent: string[] = [];
    // Counts sends that went out, and passes renewals on as the worker's own mailer takes them: without
    // them a send the loaded SMTP thread began past its first lease's margin was refused, freeing its slot.
    const counting: Mailer = {
      description: mailer.description,
      close: async () => undefined,
      send: async (message, options) => {
        const result = await mailer.send(message, options);
        sent.push(message.recipients[0]!);
        return result;
      },
      extend: (emailIds, startBy) => mailer.extend?.(emailIds, startBy),
    };
    // Results refused, claims and renewals taken (a result the store cannot hold, say).
    const refuse = vi
      .spyOn(ResultRecorder.prototype, 'record')
      .mockRejectedValue(new Error('value too long for type character varying'));
    // The worker's warnings: which emails it left unsent to their next claim, their sends not begun in time.
    const { lines, logger } = capturing('warn');
    const worker = startWorker(t, counting, {
      store: counted.store,
      concurrency: 2,
      leaseMs: 400,
      recordRetryMaxMs: 20,
      logger,
    });
    try {
      const to = Array.from({ length: 6 }, (_, i) => `bounded${i}@example.org`);
      const ids = await Promise.all(to.map((address) => sendEmail(t, auth, basicEmail(address))));
      await eventually(() => sent.length === 2, 5_000, 'two sends');
      // Ten renewals later (every 100 ms, two and a half leases), the two stalled results still hold both
      // slots: nothing more sent.
      const batches = counted.claims;
      await eventually(() => counted.claims >= batches + 10, 5_000, 'ten renewals');
      expect(sent).toHaveLength(2);
      refuse.mockRestore();
      const emails = await Promise.all(ids.map((id) => settled(t, auth, id)));
      // Each sent once, at its first attempt, or at a later one for each time its send did not begin in time
      // (a loaded CI host, with a 200 ms lease then, kept a claimed pair's SMTP thread past its 40 ms margin).
      const unbegun = (id: string) =>
        lines.filter((l) => l.emailId === id && /not sent; left to its next claim/.test(l.msg)).length;
      expect(emails.map((e) => [e.status, e.attempts])).toEqual(ids.map((id) => ['sent', 1 + unbegun(id)]));
      expect([...sent].sort()).toEqual([...to].sort());
    } finally {
      refuse.mockRestore();
      await worker.stop();
    }
  });

  // SQLite's one write lock, held by another connection as another process would; PostgreSQL has no such lock.
  if (kind === 'sqlite') {
    it('does not stop the event loop while another process holds the write lock', async () => {
      const other = new Database(path.join(t.ts.dataDir, 'mailroom.sqlite'));
      other.exec('begin immediate');
      const counted = flaky(t.ts.store);
      const lines: string[] = [];
      const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line.trim()) });
      const worker = startWorker(t, mailer, { store: counted.store, pollMs: 20, logger });
      try {
        // A claim would take the write lock: better-sqlite3 would wait out busy_timeout (seconds) with the
        // event loop stopped. Polls are reads, which the lock does not hold up, and nothing is claimed.
        await tenIdlePolls(counted, 'while the lock is held', () => lines);
      } finally {
        other.exec('rollback');
        other.close();
        await worker.stop();
      }
    });
  }
});
