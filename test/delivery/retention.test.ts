// EMAIL_RETENTION_DAYS: emails that ended (sent, failed) and were accepted more than that many days ago are
// removed with their recipients and events, in slices; emails still on their way stay however old, and a
// delivery worker runs the removal on a timer of its own.
import pg from 'pg';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../src/clock.js';
import { DAY_MS, EmailRetention } from '../../src/emails/retention.js';
import { eventually } from '../helpers/smtp.js';
import { anyWaitingForLock, storeKinds } from '../helpers/stores.js';
import {
  basicEmail,
  getEmail,
  sendEmail,
  settled,
  startWorker,
  untilStatus,
  useDelivery,
} from './harness.js';

const DAYS = 30;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(storeKinds())('emails past their retention on %s', (kind) => {
  // Retries a minute apart: a deferred email stays deferred for the test.
  const ctx = useDelivery(kind, { worker: { retryBaseMs: 60_000, maxAttempts: 10 } });

  /** A clock for which `cutoff` (host ms) is exactly DAYS days ago. */
  const clockAt = (cutoff: number): Clock => ({ now: () => new Date(cutoff + DAYS * DAY_MS) });

  const retention = (cutoff: number, more: { slice?: number; firstRunMs?: number } = {}) =>
    new EmailRetention({
      store: ctx.t.ts.store,
      clock: clockAt(cutoff),
      logger: pino({ level: 'silent' }),
      days: DAYS,
      ...more,
    });

  /** Emails, recipients and events left of these emails. */
  async function rowsOf(ids: string[]): Promise<number[]> {
    const db = ctx.t.ts.store.db;
    const count = async (table: 'emails' | 'email_recipients' | 'email_events', column: 'id' | 'email_id') =>
      Number(
        (
          await db
            .selectFrom(table)
            .select((eb) => eb.fn.countAll<number | string>().as('n'))
            .where(column, 'in', ids)
            .executeTakeFirstOrThrow()
        ).n,
      );
    return [
      await count('emails', 'id'),
      await count('email_recipients', 'email_id'),
      await count('email_events', 'email_id'),
    ];
  }

  /** Emails sent and delivered for a new organisation: its key and their ids. */
  async function sentEmails(n: number, to: string): Promise<{ auth: string; ids: string[] }> {
    const { auth } = await ctx.t.newKey();
    const ids: string[] = [];
    for (let i = 0; i < n; i++)
      ids.push(await sendEmail(ctx.t, auth, basicEmail(`${to}${i}@retention.test`)));
    for (const id of ids) await settled(ctx.t, auth, id);
    return { auth, ids };
  }

  /** A moment after every id made so far and before every one made later. */
  async function now(): Promise<number> {
    await sleep(3);
    const at = Date.now();
    await sleep(3);
    return at;
  }

  it('removes what ended before the cutoff with its recipients and events, and keeps the rest', async () => {
    const { t } = ctx;
    const { auth } = await t.newKey();
    ctx.script.onRcpt = (address) => {
      if (address.startsWith('refused')) return { code: 550, message: 'No such user' };
      if (address.startsWith('later')) return { code: 451, message: 'Try again later' };
      return undefined;
    };
    const sent = await sendEmail(t, auth, basicEmail('old@retention.test'));
    const failed = await sendEmail(t, auth, basicEmail('refused@retention.test'));
    // Still on its way (the relay defers it, and the worker retries long after this test): it stays.
    const waiting = await sendEmail(t, auth, basicEmail('later@retention.test'));
    await settled(t, auth, sent);
    expect((await settled(t, auth, failed)).status).toBe('failed');
    await untilStatus(t, auth, waiting, 'deferred');
    const cutoff = await now();
    const recent = await sendEmail(t, auth, basicEmail('recent@retention.test'));
    await settled(t, auth, recent);
    expect(await rowsOf([sent, failed])).toEqual([2, 2, expect.any(Number) as number]);

    expect((await retention(cutoff).run()).removed).toBeGreaterThanOrEqual(2);
    expect(await rowsOf([sent, failed])).toEqual([0, 0, 0]);
    for (const id of [sent, failed]) {
      expect((await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth })).statusCode).toBe(404);
    }
    expect((await getEmail(t, auth, recent)).status).toBe('sent');
    expect((await getEmail(t, auth, waiting)).status).toBe('deferred');
    // The organisation's totals follow.
    const page = await t.call({ method: 'GET', url: '/api/v1/emails', auth });
    const body = page.json() as { emails: { id: string }[]; pagination: { total: number } };
    expect(body.emails.map((e) => e.id).sort()).toEqual([recent, waiting].sort());
    expect(body.pagination.total).toBe(2);
    const sentOnly = await t.call({ method: 'GET', url: '/api/v1/emails?status=sent', auth });
    expect((sentOnly.json() as { pagination: { total: number } }).pagination.total).toBe(1);
  });

  it('walks every slice, across organisations, and leaves what was accepted after the cutoff', async () => {
    const first = await sentEmails(3, 'first');
    const second = await sentEmails(4, 'second');
    const cutoff = await now();
    const later = await sentEmails(2, 'later');
    expect(await retention(cutoff, { slice: 2 }).run()).toMatchObject({ finished: true });
    expect((await rowsOf([...first.ids, ...second.ids]))[0]).toBe(0);
    expect((await rowsOf(later.ids))[0]).toBe(2);
  });

  it('two runs at once remove each email once, and fail nothing', async () => {
    const { ids } = await sentEmails(6, 'twice');
    const cutoff = await now();
    const [a, b] = await Promise.all([
      retention(cutoff, { slice: 2 }).run(),
      retention(cutoff, { slice: 2 }).run(),
    ]);
    expect((await rowsOf(ids))[0]).toBe(0);
    // Each email counted by the run that removed it (and other tests' leftovers, if any, likewise).
    expect(a.removed + b.removed).toBeGreaterThanOrEqual(6);
  });

  it.skipIf(kind !== 'postgres')(
    "one process's run at a time: a run while another's is under way walks nothing and says so",
    async () => {
      const { ids } = await sentEmails(2, 'alone');
      const cutoff = await now();
      // Another process's run, as the store sees it: the same lock, held on a connection of its own.
      let release!: () => void;
      let entered!: () => void;
      const inside = new Promise<void>((r) => (entered = r));
      const other = ctx.t.ts.store.alone('email retention', async () => {
        entered();
        await new Promise<void>((r) => (release = r));
      });
      await inside;
      try {
        expect(await retention(cutoff).run()).toEqual({ removed: 0, finished: false, elsewhere: true });
        expect((await rowsOf(ids))[0]).toBe(2);
      } finally {
        release();
        await other;
      }
      const { elsewhere } = await retention(cutoff).run();
      expect(elsewhere).toBeUndefined();
      expect((await rowsOf(ids))[0]).toBe(0);
    },
  );

  it.skipIf(kind !== 'postgres')(
    'the lock goes with a run that fails, and a run whose lock connection ends stops walking',
    async () => {
      const store = ctx.t.ts.store;
      await expect(
        store.alone('email retention', () => Promise.reject(new Error('a failed run'))),
      ).rejects.toThrow('a failed run');
      expect(await store.alone('email retention', () => Promise.resolve('ran'))).toBe('ran');

      const { ids } = await sentEmails(6, 'cut');
      const cutoff = await now();
      const killer = new pg.Client({ connectionString: ctx.t.ts.databaseUrl });
      await killer.connect();
      try {
        // Slices of one, each delete followed by a pause of 20 ms or more: the run is still walking when
        // its lock's connection is ended, as a server restart or a pooler would end it.
        const running = retention(cutoff, { slice: 1 }).run();
        await expect
          .poll(() => rowsOf(ids).then((n) => n[0]), { interval: 2, timeout: 10_000 })
          .toBeLessThan(6);
        // This test's database only: other runs may share the server.
        const { rowCount } = await killer.query(
          `select pg_terminate_backend(pid) from pg_stat_activity
            where application_name = 'mailroom: email retention' and datname = current_database()`,
        );
        expect(rowCount).toBe(1);
        const { finished, elsewhere } = await running;
        expect(finished).toBe(false);
        expect(elsewhere).toBeUndefined();
        expect((await rowsOf(ids))[0]).toBeGreaterThan(0);
        // The lock went with its connection: the next run has it, and removes the rest.
        expect((await retention(cutoff).run()).finished).toBe(true);
        expect((await rowsOf(ids))[0]).toBe(0);
      } finally {
        await killer.end();
      }
    },
  );

  it('a stop ends the run under way between slices', async () => {
    const { ids } = await sentEmails(6, 'stopped');
    const cutoff = await now();
    const r = retention(cutoff, { slice: 1 });
    const running = r.run();
    // Each slice's delete is followed by a pause of 20 ms at least: stopped after the first of these.
    await expect.poll(() => rowsOf(ids).then((n) => n[0]), { interval: 2 }).toBeLessThan(6);
    await r.stop();
    const { removed, finished } = await running;
    const left = (await rowsOf(ids))[0]!;
    expect(left).toBeGreaterThan(0);
    expect(removed).toBeGreaterThanOrEqual(6 - left);
    expect(finished).toBe(false);
  });

  it('a worker given the retention runs it on a timer of its own, and stops it with itself', async () => {
    const { ids } = await sentEmails(2, 'timer');
    const cutoff = await now();
    const worker = startWorker(ctx.t, ctx.mailer, { retention: retention(cutoff, { firstRunMs: 10 }) });
    try {
      await expect.poll(() => rowsOf(ids).then((n) => n[0]), { timeout: 10_000 }).toBe(0);
    } finally {
      await worker.stop();
    }
  });
  it('keeps an email whose createdAt is recent, whatever its id says', async () => {
    // On PostgreSQL createdAt follows the database's clock and the id the accepting host's: a host
    // whose clock runs behind makes ids that look older than the email is.
    const { ids } = await sentEmails(2, 'skewed');
    const cutoff = await now();
    const later = new Date(cutoff + 2 * DAY_MS).toISOString();
    await ctx.t.ts.store.write((trx) =>
      trx.updateTable('emails').set({ created_at: later }).where('id', '=', ids[0]!).execute(),
    );
    await retention(cutoff).run();
    expect((await rowsOf([ids[0]!]))[0]).toBe(1);
    expect((await rowsOf([ids[1]!]))[0]).toBe(0);
  });

  it.skipIf(kind !== 'postgres')(
    "a stop during a delete that waits for a lock ends the run with it, and the worker's stop is bounded",
    async () => {
      const { ids } = await sentEmails(3, 'locked');
      const cutoff = await now();
      const holder = new pg.Client({ connectionString: ctx.t.ts.databaseUrl });
      const watcher = new pg.Client({ connectionString: ctx.t.ts.databaseUrl });
      await Promise.all([holder.connect(), watcher.connect()]);
      try {
        // The delete's cascade to the events waits for this.
        await holder.query('begin');
        await holder.query('lock table email_events in share mode');
        // The worker runs the removal on its timer, at once; the first delete waits for the lock.
        const r = retention(cutoff, { slice: 1, firstRunMs: 0 });
        const worker = startWorker(ctx.t, ctx.mailer, { retention: r });
        await eventually(() => anyWaitingForLock(watcher), 10_000, 'the delete waiting for the lock');
        await sleep(1_200);
        // The worker's stop waits for the removal no longer than its own bound.
        let stopped = false;
        const stopping = worker.stop(300).then(() => (stopped = true));
        await sleep(1_000);
        expect(stopped).toBe(true);
        await stopping;
        // Once the delete has its lock and commits, the run ends, without the pause that follows a delete
        // (four times the 2.2 s it took, at most 2 s).
        const released = performance.now();
        await holder.query('commit');
        await r.stop();
        expect(performance.now() - released).toBeLessThan(1_500);
        // No slice after the one that waited.
        expect((await rowsOf(ids))[0]).toBeGreaterThanOrEqual(2);
      } finally {
        await holder.query('rollback').catch(() => undefined);
        await Promise.all([holder.end(), watcher.end()]);
      }
    },
  );
});
