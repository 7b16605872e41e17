// EMAIL_RETENTION_DAYS: the worker removes emails that ended (sent, failed) once they are that many days
// old, with their recipients and events, a few slices at a time; emails still on their way stay, however
// old, and so does every email when it is not set.
import { describe, expect, it } from 'vitest';
import { removeFinishedEmails } from '../../src/emails/emails.service.js';
import { storeKinds } from '../helpers/stores.js';
import {
  basicEmail,
  getEmail,
  sendEmail,
  settled,
  startWorker,
  untilStatus,
  useDelivery,
} from './harness.js';

const DAY_MS = 86_400_000;

describe.each(storeKinds())('emails past their retention on %s', (kind) => {
  const ctx = useDelivery(kind, { worker: false });

  /** Makes the emails look `days` old. */
  async function age(ids: string[], days: number): Promise<void> {
    const at = new Date(Date.now() - days * DAY_MS).toISOString();
    await ctx.t.ts.store.write((trx) =>
      trx.updateTable('emails').set({ created_at: at }).where('id', 'in', ids).execute(),
    );
  }

  async function rowsOf(ids: string[]): Promise<number[]> {
    const db = ctx.t.ts.store.db;
    const count = async (
      table: 'emails' | 'email_recipients' | 'email_events',
      column: 'id' | 'email_id',
    ) => {
      const row = await db
        .selectFrom(table)
        .select((eb) => eb.fn.countAll<number | string>().as('n'))
        .where(column, 'in', ids)
        .executeTakeFirstOrThrow();
      return Number(row.n);
    };
    return [
      await count('emails', 'id'),
      await count('email_recipients', 'email_id'),
      await count('email_events', 'email_id'),
    ];
  }

  it('the worker removes what ended before then, with its recipients and events, and keeps the rest', async () => {
    const { t, auth, script } = ctx;
    script.onRcpt = (address) =>
      address.startsWith('refused') ? { code: 550, message: 'No such user' } : undefined;
    const sent = await sendEmail(t, auth, basicEmail('old@retention.test'));
    const failed = await sendEmail(t, auth, basicEmail('refused@retention.test'));
    const recent = await sendEmail(t, auth, basicEmail('recent@retention.test'));
    let worker = startWorker(t, ctx.mailer);
    await settled(t, auth, sent);
    await settled(t, auth, failed);
    await settled(t, auth, recent);
    await worker.stop();
    // Still on its way: the relay defers it, however old it is.
    script.onRcpt = () => ({ code: 451, message: 'Try again later' });
    const waiting = await sendEmail(t, auth, basicEmail('waiting@retention.test'));
    worker = startWorker(t, ctx.mailer, { retryBaseMs: 60_000, maxAttempts: 10 });
    await untilStatus(t, auth, waiting, 'deferred');
    await worker.stop();
    expect((await getEmail(t, auth, failed)).status).toBe('failed');
    await age([sent, failed, waiting], 31);
    await age([recent], 29);
    expect(await rowsOf([sent, failed])).toEqual([2, 2, expect.any(Number) as number]);

    worker = startWorker(t, ctx.mailer, { retentionDays: 30, retryBaseMs: 60_000 });
    try {
      await expect.poll(() => rowsOf([sent, failed]), { timeout: 10_000 }).toEqual([0, 0, 0]);
    } finally {
      await worker.stop();
    }
    for (const id of [sent, failed]) {
      expect((await t.call({ method: 'GET', url: `/api/v1/emails/${id}`, auth })).statusCode).toBe(404);
    }
    expect((await getEmail(t, auth, recent)).status).toBe('sent');
    expect((await getEmail(t, auth, waiting)).status).toBe('deferred');
    const page = await t.call({ method: 'GET', url: '/api/v1/emails', auth });
    const body = page.json() as { emails: { id: string }[]; pagination: { total: number } };
    expect(body.emails.map((e) => e.id).sort()).toEqual([recent, waiting].sort());
    expect(body.pagination.total).toBe(2);
    const sentOnly = await t.call({ method: 'GET', url: '/api/v1/emails?status=sent', auth });
    expect((sentOnly.json() as { pagination: { total: number } }).pagination.total).toBe(1);
  });

  it('removes a slice a commit, a few commits a call, and says whether any may be left', async () => {
    // An organisation of its own, its emails older than the other test's.
    const { t } = ctx;
    const { auth } = await t.newKey();
    const worker = startWorker(t, ctx.mailer);
    const ids: string[] = [];
    try {
      for (let i = 0; i < 5; i++) ids.push(await sendEmail(t, auth, basicEmail(`slice${i}@retention.test`)));
      for (const id of ids) await settled(t, auth, id);
    } finally {
      await worker.stop();
    }
    await age(ids, 400);
    const before = new Date(Date.now() - 365 * DAY_MS);
    const store = t.ts.store;
    expect(await removeFinishedEmails(store, before, 2, 2)).toEqual({ removed: 4, more: true });
    expect(await removeFinishedEmails(store, before, 2, 2)).toEqual({ removed: 1, more: false });
    expect(await removeFinishedEmails(store, before, 2, 2)).toEqual({ removed: 0, more: false });
    expect((await rowsOf(ids))[0]).toBe(0);
  });
});
