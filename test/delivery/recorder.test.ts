// Results recorded in batches: one write per kind of outcome, and never over a claim that lost its lease.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidIds } from '../../src/clock.js';
import { claimDue } from '../../src/delivery/queue.repository.js';
import { type AttemptResult, ResultRecorder } from '../../src/delivery/recorder.js';
import { ALONE_ROUND } from '../../src/store/batch-queue.js';
import type { Store } from '../../src/store/store.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('result recorder on %s', (kind) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp(kind);
  });
  afterAll(() => t.close());

  it('records many results at once, each only where its claim still holds the lease', async () => {
    const { store } = t.ts;
    const org = (await t.services.orgs.create('recorder')).id;
    const sent = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        t.services.emails.send(org, {
          to: [`a${i}@example.test`, `b${i}@example.test`],
          subject: 's',
          text: 't',
        }),
      ),
    );
    const ids = sent.map((s) => s.id);
    const future = new Date(Date.now() + 60_000).toISOString();
    const claim = (owner: string) =>
      store.write((trx) =>
        claimDue(trx, store.dialect, { now: future, leaseUntil: future, owner, limit: 100 }),
      );
    expect(await claim('w1')).toHaveLength(30);
    // Email 29's lease ran out and another worker claimed it: w1's late result must not land.
    await store.write((trx) =>
      trx.updateTable('emails').set({ lease_owner: 'w2', attempts: 2 }).where('id', '=', ids[29]!).execute(),
    );

    const at = new Date().toISOString();
    const recorder = new ResultRecorder(store, 'w1');
    const result = (i: number): AttemptResult => {
      const deferred = i % 10 === 9;
      return {
        emailId: ids[i]!,
        attempts: 1,
        status: deferred ? 'deferred' : 'sent',
        nextAttemptAt: deferred ? future : null,
        lastError: deferred ? `421 busy ${i}` : null,
        at,
        verdicts: new Map([
          [0, { status: 'sent', response: '250 ok' }],
          [
            1,
            deferred
              ? { status: 'deferred', response: `421 busy ${i}` }
              : { status: 'sent', response: `250 q${i}` },
          ],
        ]),
        events: [
          { id: uuidIds.next(), email_id: ids[i]!, type: deferred ? 'deferred' : 'sent', at, detail: 'd' },
        ],
      };
    };
    const recorded = await Promise.all(ids.map((_, i) => recorder.record(result(i))));
    expect(recorded).toEqual(ids.map((_, i) => i !== 29));

    for (const i of [0, 9, 29]) {
      const view = await t.services.emails.get(org, ids[i]!);
      if (i === 29) {
        expect(view.status).toBe('sending');
        expect(view.recipients.map((r) => r.status)).toEqual(['queued', 'queued']);
        expect(view.events.map((e) => e.type)).toEqual(['queued']);
        continue;
      }
      const deferred = i === 9;
      expect(view.status).toBe(deferred ? 'deferred' : 'sent');
      expect(view.lastError).toBe(deferred ? '421 busy 9' : null);
      expect(view.recipients).toEqual([
        { email: `a${i}@example.test`, status: 'sent', response: '250 ok' },
        {
          email: `b${i}@example.test`,
          status: deferred ? 'deferred' : 'sent',
          response: deferred ? '421 busy 9' : `250 q${i}`,
        },
      ]);
      expect(view.events.map((e) => e.type)).toEqual(['queued', deferred ? 'deferred' : 'sent']);
    }
    const leased = await store.db
      .selectFrom('emails')
      .select('id')
      .where('lease_owner', 'is not', null)
      .execute();
    expect(leased.map((r) => r.id)).toEqual([ids[29]]);
  });

  it("writes only the current attempt's recipients and events when a stale attempt's result shares its batch", async () => {
    const { store } = t.ts;
    const org = (await t.services.orgs.create('recorder-stale')).id;
    const { id } = await t.services.emails.send(org, { to: ['stale@example.test'], subject: 's', text: 't' });
    const future = new Date(Date.now() + 60_000).toISOString();
    // Claimed twice by one worker (as a lease that ran out and was taken again): attempt 2 is current.
    await store.write((trx) =>
      trx
        .updateTable('emails')
        .set({
          status: 'sending',
          lease_owner: 'w1',
          lease_until: future,
          next_attempt_at: future,
          attempts: 2,
        })
        .where('id', '=', id)
        .execute(),
    );

    const at = new Date().toISOString();
    const result = (attempts: number, status: 'deferred' | 'failed', response: string): AttemptResult => ({
      emailId: id,
      attempts,
      status,
      nextAttemptAt: status === 'deferred' ? future : null,
      lastError: response,
      at,
      verdicts: new Map([[0, { status, response }]]),
      events: [{ id: uuidIds.next(), email_id: id, type: status, at, detail: response }],
    });
    const recorder = new ResultRecorder(store, 'w1');
    // One batch: both are held until the same flush.
    const recorded = await Promise.all([
      recorder.record(result(1, 'deferred', '451 later')),
      recorder.record(result(2, 'failed', '550 no such user')),
    ]);
    expect(recorded).toEqual([false, true]);
    const view = await t.services.emails.get(org, id);
    expect([view.status, view.lastError]).toEqual(['failed', '550 no such user']);
    expect(view.recipients).toEqual([
      { email: 'stale@example.test', status: 'failed', response: '550 no such user' },
    ]);
    expect(view.events.map((e) => [e.type, e.detail])).toEqual([
      ['queued', null],
      ['failed', '550 no such user'],
    ]);
  });
});

describe('result recorder behind a lock', () => {
  // What the store answers a batch of results each time: PostgreSQL's statement_timeout after a lock wait
  // (a row's or the table's), SQLite's write lock held by another process past busy_timeout.
  const timeout = Object.assign(new Error('canceling statement due to statement timeout'), { code: '57014' });
  const busy = Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });

  it.each([
    // One after another, each result waited the timeout out again (21 writes); a round of them all timing
    // out too means the lock is the table's, and the rest are refused with the batch's error at once.
    ['a timeout, again in rounds', timeout, 1 + ALONE_ROUND],
    // Each alone would wait for the same lock, with the event loop stopped: not written again here (the
    // worker tries each result again later).
    ['SQLite busy, not again', busy, 1],
  ])('writes the results of a batch refused for %s', async (_what, refusal, expected) => {
    let writes = 0;
    const store = {
      batch: () => {
        writes++;
        return Promise.reject(refusal);
      },
    } as unknown as Store;
    const recorder = new ResultRecorder(store, 'w1');
    const at = new Date().toISOString();
    const outcomes = await Promise.allSettled(
      Array.from({ length: 20 }, (_, i) =>
        recorder.record({
          emailId: `e${i}`,
          attempts: 1,
          status: 'sent',
          nextAttemptAt: null,
          lastError: null,
          at,
          verdicts: new Map(),
          events: [],
        }),
      ),
    );
    expect(outcomes.map((o) => o.status)).toEqual(Array(20).fill('rejected'));
    expect(writes).toBe(expected);
  });
});
