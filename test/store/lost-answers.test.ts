// PostgreSQL committed a write and the network lost its answer: the connection dies after the commit,
// before a byte of "done" reaches Mailroom. What Mailroom tells its client must then be true of the
// store: an accepted email or a created contact is answered as accepted or created, never as a 500 or a
// 409 for the very row the request wrote, and it is in the store exactly once.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CompiledQuery } from '../../src/store/kysely.js';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uuidIds } from '../../src/clock.js';
import { insertContact } from '../../src/contacts/contacts.repository.js';
import { LOOK_TRIES } from '../../src/store/appender.js';
import { isStoreUnavailable } from '../../src/store/dialect.js';
import { type Store, createStore } from '../../src/store/store.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { type PgProxy, startPgProxy } from '../helpers/pg-proxy.js';
import { contactRow } from '../helpers/rows.js';
import { createTestDatabase, noPostgres } from '../helpers/stores.js';
import { SmtpMailer } from '../../src/delivery/smtp-mailer.js';
import { TEST_ENV, basicEmail, getEmail, sendEmail, settled, startWorker } from '../delivery/harness.js';
import { eventually, startSmtpSink } from '../helpers/smtp.js';

describe.skipIf(noPostgres())('an answer PostgreSQL gave and the network lost', () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let direct: Store, proxied: Store, proxy: PgProxy, t: TestApp, auth: string;
  let dataDir: string;

  beforeAll(async () => {
    // Made here, not in the suite's body, which runs (and would leave it behind) when the suite is skipped.
    dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-lost-'));
    database = await createTestDatabase();
    direct = createStore({ databaseUrl: database.url, dataDir });
    await direct.migrate();
    proxy = await startPgProxy(database.url);
    // A short query timeout, for the answer that never comes (below); the others are cut, not late.
    const open = () => createStore({ databaseUrl: proxy.url, dataDir, poolSize: 10, queryTimeoutMs: 2_000 });
    proxied = open();
    const ts = {
      kind: 'postgres' as const,
      store: proxied,
      dataDir,
      databaseUrl: proxy.url,
      reopen: open,
      destroy: async () => undefined,
    };
    t = await createTestApp('postgres', TEST_ENV, ts);
    auth = (await t.newKey()).auth;
  });
  afterAll(async () => {
    await t?.close();
    await proxied?.close();
    await direct?.close();
    await proxy?.close();
    await database?.drop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  const sends = (n: number, tag: string) =>
    Promise.all(
      Array.from({ length: n }, (_, i) =>
        t.call({
          method: 'POST',
          url: '/api/v1/emails',
          auth,
          payload: basicEmail(`r${i}@lost.example`, { subject: `${tag} ${i}` }),
        }),
      ),
    );

  /** The ids of the stored emails whose subject begins with `tag` and a space, in order. */
  const storedEmails = async (tag: string) =>
    (
      await direct.db
        .selectFrom('emails')
        .select('id')
        .where('subject', 'like', `${tag} %`)
        .orderBy('id')
        .execute()
    ).map((r) => r.id);
  const idOf = (res: { json: () => unknown } | undefined) => (res!.json() as { id: string }).id;

  it('answers an accepted email as accepted, alone or in a batch, and keeps it once', async () => {
    for (const n of [1, 8]) {
      const tag = `lost-${n}`;
      const before = proxy.lost;
      proxy.loseAnswerTo('into "emails"');
      const answers = await sends(n, tag);
      expect(proxy.lost).toBe(before + 1);
      for (const res of answers) expect(res.statusCode, res.body).toBe(200);
      expect(await storedEmails(tag)).toEqual(answers.map(idOf).sort());
    }
  });

  it('looks again for an email whose look failed at once, and answers it as accepted', async () => {
    const before = proxy.lost;
    // The write's answer lost, then the look's (the connection cut as it answers: a quick failure).
    proxy.loseAnswersTo(['into "emails"', 'as "one" from "emails"']);
    const [res] = await sends(1, 'looked-again').finally(() => proxy.disarm());
    expect(proxy.lost).toBe(before + 2);
    expect(res!.statusCode, res!.body).toBe(200);
    expect(await storedEmails('looked-again')).toEqual([idOf(res)]);
  });

  it('looks an email whose answer never comes up on another connection than the one that waited', async () => {
    // The connection stays open and silent (a network that went quiet): the pool gives up after its
    // query timeout. That connection still waits for the answer; the pool hands out the connection used
    // last first, so a look-up on it waited as long again, and a committed email was answered 503.
    proxy.loseAnswerTo('into "emails"', Infinity);
    try {
      const [res] = await sends(1, 'silent');
      expect(res!.statusCode, res!.body).toBe(200);
      expect(await storedEmails('silent')).toEqual([idOf(res)]);
    } finally {
      proxy.cutNow();
    }
  });

  it('answers an email whose write reaches PostgreSQL after the pool gave up as accepted', async () => {
    // The request is on its way (held 3 s here) when the pool's 2 s run out: a look finds nothing yet, and
    // the write may still commit after it. Written once more by the same ids, one of the two collides.
    const before = proxy.delivered;
    proxy.holdRequest('into "emails"', 3_000);
    const [res] = await sends(1, 'late');
    expect(res!.statusCode, res!.body).toBe(200);
    // The 200 is true: the second write is in (the held one, sent on late, collides with it).
    await eventually(() => proxy.delivered === before + 1, 10_000, 'the held request to be sent on');
    const id = (res!.json() as { id: string }).id;
    expect(await storedEmails('late')).toEqual([id]);
  });

  it('does not write again an email whose statement PostgreSQL itself stopped', async () => {
    // Inserts wait behind a SHARE lock (reads do not) until the store's statement_timeout (1.8 s here)
    // stops them: PostgreSQL answers with an error, and that statement is over, so it cannot commit late.
    // Written again, it would only wait on the same lock as long again before the same 503.
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('lock table emails in share mode');
      const before = proxy.ran('into "emails"');
      const [res] = await sends(1, 'stopped');
      expect(res!.statusCode, res!.body).toBe(503);
      expect(proxy.ran('into "emails"')).toBe(before + 1);
    } finally {
      await holder.query('rollback');
      await holder.end();
    }
    expect(await storedEmails('stopped')).toEqual([]);
  });

  it('answers a created contact as created, alone or in a batch, and keeps it once', async () => {
    for (const n of [1, 8]) {
      const before = proxy.lost;
      proxy.loseAnswerTo('into "contacts"');
      const answers = await Promise.all(
        Array.from({ length: n }, (_, i) =>
          t.call({
            method: 'POST',
            url: '/api/v1/contacts',
            auth,
            payload: { email: `c${n}-${i}@lost.example` },
          }),
        ),
      );
      expect(proxy.lost).toBe(before + 1);
      for (const res of answers) expect(res.statusCode, res.body).toBe(201);
      const stored = await direct.db
        .selectFrom('contacts')
        .select('id')
        .where('email', 'like', `c${n}-%`)
        .orderBy('id')
        .execute();
      const ids = answers.map((res) => (res.json() as { contact: { id: string } }).contact.id).sort();
      expect(stored.map((r) => r.id)).toEqual(ids);
    }
  });

  it('answers a send with an Idempotency-Key whose commit answer was lost as unavailable, and its retry as the first', async () => {
    const send = () =>
      t.call({
        method: 'POST',
        url: '/api/v1/emails',
        auth,
        headers: { 'idempotency-key': 'order-1' },
        payload: basicEmail('keyed@lost.example', { subject: 'keyed once' }),
      });
    // Its own transaction (the key is read first): the answer lost is the COMMIT's. Whether the commit
    // was made cannot be told without the key's record, so the client is told to try again, and the
    // retry, with the same key, finds what the first attempt wrote.
    proxy.loseAnswerTo('commit\0'); // the COMMIT statement itself, as sent
    const first = await send();
    expect(first.statusCode, first.body).toBe(503);
    const keyed = () =>
      direct.db.selectFrom('emails').select('id').where('subject', '=', 'keyed once').execute();
    const committed = await keyed();
    expect(committed).toHaveLength(1);
    const retry = await send();
    expect(retry.statusCode, retry.body).toBe(200);
    expect((retry.json() as { id: string }).id).toBe(committed[0]!.id);
    expect(await keyed()).toEqual(committed);
  });

  // One batch for certain (appends made in one tick go together), through the store itself.
  const contacts = (org: string, prefix: string, n: number) =>
    Array.from({ length: n }, (_, i) =>
      contactRow(org, uuidIds.next(), `${prefix}${i}@lost.example`, new Date().toISOString()),
    );
  const storedIds = async (prefix: string) =>
    (
      await direct.db
        .selectFrom('contacts')
        .select('id')
        .where('email', 'like', `${prefix}%`)
        .orderBy('id')
        .execute()
    ).map((r) => r.id);

  /**
   * Appends `rows` as one batch while the organisation's row is locked elsewhere: the insert (whose
   * foreign key needs it) waits, its connection is cut, and once Mailroom has settled the lock goes.
   */
  async function lateBatch(org: string, rows: ReturnType<typeof contacts>) {
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from organizations where id = $1 for update', [org]);
      proxy.loseAnswerTo('into "contacts"', Infinity);
      const settled = Promise.allSettled(
        rows.map((row) => insertContact(proxied, { ...row, json: null }, [])),
      );
      // Cut once PostgreSQL holds the insert, waiting for the lock (asked on another connection: inside
      // the holder's transaction pg_stat_activity would not change).
      await eventually(
        async () =>
          (
            await direct.db.executeQuery<unknown>(
              CompiledQuery.raw(
                `select 1 from pg_stat_activity where wait_event_type = 'Lock' and query like '%into "contacts"%'`,
              ),
            )
          ).rows.length > 0,
        10_000,
        'the insert to wait for the lock',
      );
      proxy.cutNow();
      // Mailroom's look finds nothing (or fails), and the rows it writes again alone wait behind the first.
      await new Promise((r) => setTimeout(r, 300));
      await holder.query('commit');
      return await settled;
    } finally {
      await holder.end();
    }
  }

  it('settles every append of a batch whose answer was lost as written', async () => {
    const org = (await t.newKey()).organizationId;
    const rows = contacts(org, 'batch-', 8);
    proxy.loseAnswerTo('into "contacts"');
    await Promise.all(rows.map((row) => insertContact(proxied, { ...row, json: null }, [])));
    expect(await storedIds('batch-')).toEqual(rows.map((r) => r.id).sort());
  });

  it('finds a batch that committed only after its answer was lost, when written again alone', async () => {
    const org = (await t.newKey()).organizationId;
    const rows = contacts(org, 'late-', 8);
    // Mailroom finds nothing, and writes each contact again alone, behind the first attempt.
    const outcomes = await lateBatch(org, rows);
    expect(outcomes.map((o) => o.status)).toEqual(rows.map(() => 'fulfilled'));
    expect(await storedIds('late-')).toEqual(rows.map((r) => r.id).sort());
  });

  it('does not look for rows whose write could not even connect', async () => {
    const org = (await t.newKey()).organizationId;
    // A store of its own behind a proxy of its own, with no connection open yet; each try to connect
    // times out after 5 s.
    const own = await startPgProxy(database.url);
    const fresh = createStore({ databaseUrl: own.url, dataDir, poolSize: 2 });
    own.unanswered = true;
    try {
      const [row] = contacts(org, 'unconnected-', 1);
      const failed = await insertContact(fresh, { ...row!, json: null }, []).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(isStoreUnavailable(failed)).toBe(true);
      // The write's try to connect (pg-pool opens a second as the first times out): no more for a look,
      // which could only wait as long again (it made 4 in all).
      expect(own.connections).toBeLessThanOrEqual(2);
    } finally {
      own.unanswered = false;
      await fresh.close();
      await own.close();
    }
  }, 20_000);

  it('never answers a collision with its own rows when whether they are in cannot be told', async () => {
    const org = (await t.newKey()).organizationId;
    const rows = contacts(org, 'undecided-', 8);
    const before = proxy.lost;
    // As in the late batch above, and then every look for the batch's rows loses its answer too (each
    // a quick failure, looked for again up to LOOK_TRIES times).
    const rearm = setInterval(() => {
      if (proxy.lost > before && proxy.lost <= before + LOOK_TRIES && !proxy.armed) {
        proxy.loseAnswerTo('as "one" from "contacts"');
      }
    }, 2);
    const outcomes = await lateBatch(org, rows).finally(() => {
      clearInterval(rearm);
      proxy.disarm();
    });
    expect(proxy.lost).toBe(before + 1 + LOOK_TRIES);
    // Whether they are in could not be told: each caller is told of an outage.
    expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(rows.length);
    // Every caller was answered before the lock went: the first attempt commits a moment after it.
    await eventually(
      async () => (await storedIds('undecided-')).length === rows.length,
      10_000,
      'the first attempt to commit',
    );
    expect(await storedIds('undecided-')).toEqual(rows.map((r) => r.id).sort());
    // Written, or an outage (503: not known to be written); never a unique violation (a 409 or a 500).
    for (const o of outcomes) if (o.status === 'rejected') expect(isStoreUnavailable(o.reason)).toBe(true);
  });

  it("delivers every email once while the answers to three of the worker's commits are lost", async () => {
    const sink = await startSmtpSink();
    const mailer = new SmtpMailer({ url: sink.url });
    // A lost claim leaves its emails leased: they are due again when the lease runs out.
    const worker = startWorker(t, mailer, { leaseMs: 1_500 });
    try {
      // The worker's commits are its claims and its results (the sends above are single statements): each
      // lost one is cut after PostgreSQL committed it, and the next is armed, three times in all.
      const before = proxy.lost;
      proxy.loseAnswerTo('commit\0');
      const rearm = setInterval(() => {
        if (proxy.lost < before + 3 && !proxy.armed) proxy.loseAnswerTo('commit\0');
      }, 5);
      const ids: string[] = [];
      try {
        for (let i = 0; i < 12; i++) {
          ids.push(await sendEmail(t, auth, basicEmail(`w${i}@lost.example`, { subject: `worker ${i}` })));
          await new Promise((r) => setTimeout(r, 40));
        }
        await eventually(() => proxy.lost === before + 3, 20_000, 'three lost commit answers');
      } finally {
        clearInterval(rearm);
      }
      for (const id of ids) expect((await settled(t, auth, id)).status).toBe('sent');
      const copies = ids.map((_, i) => sink.deliveredTo(`w${i}@lost.example`).length);
      expect(copies).toEqual(ids.map(() => 1));
    } finally {
      await worker.stop();
      await mailer.close();
      await sink.close();
    }
  });

  it('takes a result whose commit answer was lost for recorded, not for a lease lost', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const sink = await startSmtpSink({ hold: () => released });
    const mailer = new SmtpMailer({ url: sink.url });
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void lines.push(line) });
    const worker = startWorker(t, mailer, { logger });
    try {
      // Everything sent before has been delivered: the next commit is this email's result.
      const due = () =>
        direct.db
          .selectFrom('emails')
          .select('id')
          .where('status', 'in', ['queued', 'sending', 'deferred'])
          .execute();
      await eventually(async () => (await due()).length === 0, 20_000, 'the earlier emails delivered');
      const id = await sendEmail(t, auth, basicEmail('result@lost.example', { subject: 'result lost' }));
      await eventually(() => sink.messages.length === 1, 10_000, 'the send in flight');
      const before = proxy.lost;
      proxy.loseAnswerTo('commit\0');
      release();
      // Read through the API only then: an email's read is a transaction too, with a COMMIT of its own.
      await eventually(() => proxy.lost === before + 1, 10_000, 'the result commit cut');
      expect((await settled(t, auth, id)).status).toBe('sent');
      const view = await getEmail(t, auth, id);
      expect(view.events.filter((e) => e.type === 'sent')).toHaveLength(1);
      expect(view.recipients.map((r) => r.status)).toEqual(['sent']);
      // The worker writes the result again after a short wait (saying so), then says what became of it.
      const said = () =>
        lines
          .map((line) => JSON.parse(line) as { msg: string; emailId?: string })
          .filter((l) => l.emailId === id)
          .map((l) => l.msg);
      const retried = 'delivery: recording the result failed; trying again';
      await eventually(() => said().some((msg) => msg !== retried), 10_000, 'the worker to log the result');
      // The result's own commit was the one cut: its first write failed.
      expect(said()[0]).toBe(retried);
      expect(said().filter((msg) => msg !== retried)).toEqual(['delivered']);
    } finally {
      await worker.stop();
      await mailer.close();
      await sink.close();
    }
  });
});
