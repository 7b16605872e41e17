// Several real API and worker processes on one PostgreSQL database, delivering into one SMTP sink.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, cli, pool, startProcess } from '../helpers/process.js';
import { type SmtpSink, eventually, startSmtpSink } from '../helpers/smtp.js';
import { TEST_DATABASE_URL, createTestDatabase, noPostgres } from '../helpers/stores.js';

/** The subject of each message a sink received, read once per message (the bulk test reads thousands). */
function subjectsOf(sink: SmtpSink): (prefix: string) => Map<string, number> {
  const subjects: string[] = [];
  return (prefix) => {
    for (const m of sink.messages.slice(subjects.length)) {
      subjects.push(/^Subject: (.*)$/m.exec(m.raw.toString('latin1'))?.[1]?.trim() ?? '');
    }
    const seen = new Map<string, number>();
    for (const subject of subjects) {
      if (subject.startsWith(prefix)) seen.set(subject, (seen.get(subject) ?? 0) + 1);
    }
    return seen;
  };
}

describe.skipIf(noPostgres())('many processes on one PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sink: SmtpSink;
  let dataDir: string;
  let env: Record<string, string>;
  let auth: string;
  /** Subjects that arrived at the sink, and how many times each. */
  let arrivals: (prefix: string) => Map<string, number>;
  const procs: MailroomProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    sink = await startSmtpSink();
    arrivals = subjectsOf(sink);
    dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-scale-'));
    env = {
      DATABASE_URL: db.url,
      DATA_DIR: dataDir,
      SMTP_URL: sink.url,
      MAIL_FROM: 'Scale <scale@mailroom.test>',
      RATE_LIMIT_PER_MINUTE: '10000000',
      DELIVERY_RETRY_BASE_MS: '200',
      DELIVERY_LEASE_MS: '3000',
    };
    await cli(['migrate'], env);
    auth = `Bearer ${(await cli(['keys', 'create', '--name', 'scale', '--permissions', 'sendEmails'], env)).key as string}`;
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.kill('SIGKILL')));
    await sink?.close();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  async function accept(apis: MailroomProcess[], count: number, prefix: string): Promise<void> {
    const statuses = await pool(count, 32, async (i) => {
      const res = await fetch(`${apis[i % apis.length]!.url}/api/v1/emails`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: JSON.stringify({ to: `r${i}@example.test`, subject: `${prefix}-${i}`, text: `message ${i}` }),
      });
      return res.status;
    });
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  }

  async function query<R>(text: string): Promise<R[]> {
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      return (await client.query(text)).rows as R[];
    } finally {
      await client.end();
    }
  }

  it('2 API processes and 3 workers deliver 5,000 emails exactly once, counted, without a deadlock', async () => {
    const apis = await Promise.all([0, 1].map(() => startProcess(['serve', '--no-worker'], env)));
    const workers = await Promise.all([0, 1, 2].map(() => startProcess(['worker'], env)));
    procs.push(...apis, ...workers);
    await accept(apis, 5000, 'bulk');
    await eventually(() => arrivals('bulk-').size >= 5000, 120_000, 'all 5,000 at the sink');
    // Stopped (SIGTERM), each worker finishes and records what it was sending: nothing can arrive later.
    await Promise.all([...apis, ...workers].map((p) => p.kill()));
    const seen = arrivals('bulk-');
    expect(seen.size).toBe(5000);
    expect([...seen.values()].filter((n) => n > 1)).toEqual([]);

    // The emails counts that five processes' statements kept (migration 0005) equal the rows.
    const counts = await query<{ bucket: string; n: string }>(
      `SELECT bucket, sum(n) AS n FROM email_counts GROUP BY bucket HAVING sum(n) <> 0 ORDER BY bucket`,
    );
    expect(counts).toEqual([
      { bucket: 'all', n: '5000' },
      { bucket: 'status:sent', n: '5000' },
    ]);
    // Backends report their statistics as they exit: once the stopped processes' are gone, theirs are in.
    await eventually(
      async () =>
        (
          await query<{ n: string }>(
            `SELECT count(*) AS n FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()`,
          )
        )[0]!.n === '0',
      20_000,
      'the stopped processes to leave the database',
    );
    const [stats] = await query<{ deadlocks: string }>(
      `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`,
    );
    expect(stats!.deadlocks).toBe('0');
  }, 240_000);

  it('a worker killed mid-send loses nothing; only what it had in flight arrives twice, as the same message', async () => {
    // The doomed worker's relay takes each message and never answers: the worker dies with every send in
    // flight, each of them already taken by the relay (docs/scaling.md: only emails in flight at a crash can go
    // out twice, with the same Message-ID). Once its leases run out, the other workers send them.
    const doomedSink = await startSmtpSink({ hold: () => new Promise(() => undefined) });
    try {
      const api = await startProcess(['serve', '--no-worker'], env);
      procs.push(api);
      const total = 300;
      await accept([api], total, 'kill');
      const workerEnv = { ...env, DELIVERY_CONCURRENCY: '10' };
      const doomed = await startProcess(['worker'], { ...workerEnv, SMTP_URL: doomedSink.url });
      procs.push(doomed);
      // All its slots busy, it claims no more.
      await eventually(() => doomedSink.messages.length === 10, 30_000, "the doomed worker's 10 sends");
      const held = await query<{ subject: string; lease_owner: string }>(
        `SELECT subject, lease_owner FROM emails WHERE status = 'sending'`,
      );
      expect(new Set(held.map((r) => r.lease_owner)).size).toBe(1);
      const heldSubjects = held.map((r) => r.subject).sort();
      expect(heldSubjects).toEqual([...subjectsOf(doomedSink)('kill-').keys()].sort());

      const others = await Promise.all([0, 1].map(() => startProcess(['worker'], workerEnv)));
      procs.push(...others);
      // Killed while the others deliver.
      await eventually(() => arrivals('kill-').size >= 50, 60_000, 'the other workers delivering');
      await doomed.kill('SIGKILL');
      await eventually(() => arrivals('kill-').size >= total, 120_000, `all ${total} at the sink`);
      await Promise.all([api, ...others].map((p) => p.kill()));

      // None lost; the ten it held arrived once more each, and nothing else did.
      const seen = arrivals('kill-');
      expect(seen.size).toBe(total);
      expect([...seen.values()].filter((n) => n > 1)).toEqual([]);
      for (const subject of heldSubjects) {
        const copies = [...doomedSink.messages, ...sink.messages].filter((m) =>
          m.raw.toString('latin1').includes(`Subject: ${subject}\r\n`),
        );
        expect(copies, subject).toHaveLength(2);
        const ids = await Promise.all(copies.map(async (m) => (await simpleParser(m.raw)).messageId));
        expect(new Set(ids).size, subject).toBe(1);
      }
      // Each was claimed twice: by the doomed worker, then once more after its lease.
      const attempts = await query<{ subject: string; status: string; attempts: number | string }>(
        `SELECT subject, status, attempts FROM emails WHERE subject LIKE 'kill-%'`,
      );
      const twice = attempts.filter((r) => Number(r.attempts) !== 1).map((r) => r.subject);
      expect(twice.sort()).toEqual(heldSubjects);
      expect(attempts.filter((r) => r.status !== 'sent')).toEqual([]);
      expect(attempts.filter((r) => Number(r.attempts) > 2)).toEqual([]);
    } finally {
      await doomedSink.close();
    }
  }, 240_000);

  it('answers 503 while the database refuses connections, and recovers without a restart', async () => {
    const api = await startProcess(['serve'], env);
    procs.push(api);
    const post = (subject: string) =>
      fetch(`${api.url}/api/v1/emails`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: JSON.stringify({ to: 'outage@example.test', subject, text: 'x' }),
      });
    expect((await post('outage-before')).status).toBe(200);

    const admin = new (await import('pg')).default.Client({ connectionString: TEST_DATABASE_URL });
    await admin.connect();
    const name = new URL(db.url).pathname.slice(1);
    try {
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
      await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [name]);
      const during = await post('outage-during');
      expect(during.status).toBe(503);
      const body = (await during.json()) as Record<string, unknown>;
      expect(body).toMatchObject({ error: expect.any(String), requestId: expect.any(String) });
      expect(body).not.toHaveProperty('success');
      const health = await fetch(`${api.url}/health`).catch((err: unknown) => {
        throw new Error(`health check failed (${String(err)}); server output:\n${api.output()}`);
      });
      expect(health.status).toBe(503);
    } finally {
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`);
      await admin.end();
    }
    let after = 0;
    for (let i = 0; i < 50 && after !== 200; i++) {
      after = (await post('outage-after')).status;
      if (after !== 200) await new Promise((r) => setTimeout(r, 200));
    }
    expect(after).toBe(200);
    await eventually(() => arrivals('outage-').size >= 2, 30_000, 'both emails at the sink');
    expect([...arrivals('outage-').keys()].sort()).toEqual(['outage-after', 'outage-before']);
  }, 120_000);
});
