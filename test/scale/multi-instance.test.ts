// Several real API and worker processes on one PostgreSQL database, delivering into one SMTP sink.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type MailroomProcess, cli, pool, startProcess } from '../helpers/process.js';
import { type SmtpSink, startSmtpSink } from '../helpers/smtp.js';
import { TEST_DATABASE_URL, createTestDatabase, noPostgres } from '../helpers/stores.js';

if (!TEST_DATABASE_URL)
  console.warn('\n*** TEST_DATABASE_URL is not set: multi-instance PostgreSQL tests are SKIPPED ***\n');

async function waitFor(check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
}

/** Subjects that arrived, and how many times each. */
function arrivals(sink: SmtpSink, prefix: string): Map<string, number> {
  const seen = new Map<string, number>();
  for (const m of sink.messages) {
    const subject = /^Subject: (.*)$/m.exec(m.raw.toString('latin1'))?.[1]?.trim() ?? '';
    if (subject.startsWith(prefix)) seen.set(subject, (seen.get(subject) ?? 0) + 1);
  }
  return seen;
}

describe.skipIf(noPostgres())('many processes on one PostgreSQL', () => {
  let db: Awaited<ReturnType<typeof createTestDatabase>>;
  let sink: SmtpSink;
  let dataDir: string;
  let env: Record<string, string>;
  let auth: string;
  const procs: MailroomProcess[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    sink = await startSmtpSink();
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
    await waitFor(() => arrivals(sink, 'bulk-').size >= 5000, 120_000);
    await new Promise((r) => setTimeout(r, 500));
    const seen = arrivals(sink, 'bulk-');
    expect(seen.size).toBe(5000);
    expect([...seen.values()].filter((n) => n > 1)).toEqual([]);
    await Promise.all([...apis, ...workers].map((p) => p.kill()));

    // The emails counts that five processes' statements kept (migration 0005) equal the rows.
    const counts = await query<{ bucket: string; n: string }>(
      `SELECT bucket, sum(n) AS n FROM email_counts GROUP BY bucket HAVING sum(n) <> 0 ORDER BY bucket`,
    );
    expect(counts).toEqual([
      { bucket: 'all', n: '5000' },
      { bucket: 'status:sent', n: '5000' },
    ]);
    // Backends report their statistics when they exit; give the killed processes' a moment.
    await new Promise((r) => setTimeout(r, 1000));
    const [stats] = await query<{ deadlocks: string }>(
      `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`,
    );
    expect(stats!.deadlocks).toBe('0');
  }, 240_000);

  it('a worker killed mid-run loses nothing; duplicates only among what it had in flight', async () => {
    const api = await startProcess(['serve', '--no-worker'], env);
    // Slow answers keep sends in flight, so the kill lands mid-send.
    const workers = await Promise.all(
      [0, 1, 2].map(() => startProcess(['worker'], { ...env, DELIVERY_CONCURRENCY: '10' })),
    );
    procs.push(api, ...workers);
    const total = 1500;
    const accepting = accept([api], total, 'kill');
    await waitFor(() => arrivals(sink, 'kill-').size >= 200, 60_000);
    await workers[0]!.kill('SIGKILL');
    await accepting;
    await waitFor(() => arrivals(sink, 'kill-').size >= total, 120_000);
    await new Promise((r) => setTimeout(r, 500));
    const seen = arrivals(sink, 'kill-');
    expect(seen.size).toBe(total);
    const duplicated = [...seen.entries()].filter(([, n]) => n > 1).map(([s]) => s);
    console.info(`killed worker: ${duplicated.length} duplicate deliveries of ${total}`);
    // The killed worker had at most DELIVERY_CONCURRENCY sends in flight.
    expect(duplicated.length).toBeLessThanOrEqual(10);
    for (const subject of duplicated) {
      const copies = sink.messages.filter((m) =>
        m.raw.toString('latin1').includes(`Subject: ${subject}\r\n`),
      );
      const ids = new Set(await Promise.all(copies.map(async (m) => (await simpleParser(m.raw)).messageId)));
      expect(ids.size).toBe(1);
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
    await waitFor(() => arrivals(sink, 'outage-').size >= 2, 30_000);
    expect([...arrivals(sink, 'outage-').keys()].sort()).toEqual(['outage-after', 'outage-before']);
  }, 120_000);
});
