// The real server process, killed and stopped: every accepted email is delivered after a restart. A SIGKILL
// may re-send what was in flight (same Message-ID); a SIGTERM finishes in-flight sends and re-sends nothing.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStore } from '../../src/store/store.js';
import { type MailroomProcess, cli, pool, startProcess } from '../helpers/process.js';
import { type SmtpSink, eventually, startSmtpSink } from '../helpers/smtp.js';
import { type StoreKind, createTestDatabase, storeKinds } from '../helpers/stores.js';
import { MAIL_FROM } from './harness.js';

const CONCURRENCY = 20;

interface Deployment {
  env: Record<string, string>;
  destroy(): Promise<void>;
}

/** A data directory (and, for PostgreSQL, a fresh database) shared by every process of one test. */
async function deployment(kind: StoreKind, sink: SmtpSink): Promise<Deployment> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'mailroom-crash-'));
  const db = kind === 'postgres' ? await createTestDatabase() : undefined;
  return {
    env: {
      DATA_DIR: dataDir,
      ...(db ? { DATABASE_URL: db.url } : {}),
      SMTP_URL: sink.url,
      MAIL_FROM,
      DELIVERY_RETRY_BASE_MS: '50',
      DELIVERY_CONCURRENCY: String(CONCURRENCY),
      // A killed server's claims come back after this; short so the test does not wait minutes.
      DELIVERY_LEASE_MS: '2000',
      RATE_LIMIT_PER_MINUTE: '100000',
    },
    async destroy() {
      await db?.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function accept(url: string, key: string, count: number, prefix: string): Promise<string[]> {
  return pool(count, 10, async (i) => {
    const res = await fetch(`${url}/api/v1/emails`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        to: [`${prefix}${i}@example.org`],
        subject: `${prefix} ${i}`,
        text: `message ${i}`,
      }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { id: string }).id;
  });
}

/** Per recipient: how many copies arrived, and whether all copies carry one Message-ID. */
function tally(sink: SmtpSink, prefix: string, count: number) {
  const copies = Array.from({ length: count }, (_, i) => sink.deliveredTo(`${prefix}${i}@example.org`));
  return {
    lost: copies.filter((c) => c.length === 0).length,
    duplicates: copies.reduce((n, c) => n + Math.max(0, c.length - 1), 0),
    mixedIds: copies.filter((c) => new Set(c.map((m) => m.messageId)).size > 1).length,
  };
}

/** What the store holds, read directly while no server runs. */
async function statusesIn(env: Record<string, string>): Promise<Record<string, number>> {
  const store = createStore({ databaseUrl: env.DATABASE_URL, dataDir: env.DATA_DIR! });
  try {
    const rows = await store.db
      .selectFrom('emails')
      .select((eb) => ['status', eb.fn.countAll<number | string>().as('n')])
      .groupBy('status')
      .execute();
    return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
  } finally {
    await store.close();
  }
}

async function countByStatus(url: string, key: string, status: string): Promise<number> {
  const res = await fetch(`${url}/api/v1/emails?status=${status}&limit=1`, {
    headers: { authorization: `Bearer ${key}` },
  });
  return ((await res.json()) as { pagination: { total: number } }).pagination.total;
}

describe.each(storeKinds())('server process crash and shutdown on %s', (kind) => {
  let sink: SmtpSink;
  beforeAll(async () => {
    // Slow answers keep sends in flight when the process dies.
    sink = await startSmtpSink({ dataDelayMs: 100 });
  });
  afterAll(() => sink.close());

  /**
   * Runs a server on a new deployment with a sendEmails key; `stop` ends it with a signal, then the same
   * deployment is served again and the test waits until `count` emails to `prefix<i>@` are all sent.
   */
  async function serveStopRestart(prefix: string, count: number, signal: NodeJS.Signals) {
    const d = await deployment(kind, sink);
    const first = await startProcess(['serve'], d.env);
    let second: MailroomProcess | undefined;
    try {
      const created = await cli(['keys', 'create', '--name', 'x', '--permissions', 'sendEmails'], d.env);
      const key = created.key as string;
      const ids = await accept(first.url, key, count, prefix);
      await first.kill(signal);
      const atStop = sink.messages.length;
      const exitCode = first.child.exitCode;
      const statuses = await statusesIn(d.env);

      second = await startProcess(['serve'], d.env);
      await eventually(() => tally(sink, prefix, count).lost === 0, 40_000, `all ${count} at the sink`).catch(
        async (err: Error) => {
          const now = JSON.stringify(await statusesIn(d.env));
          throw new Error(`${err.message}; store ${now}; server log:\n${second?.output().slice(-3000)}`);
        },
      );
      const { url } = second;
      await eventually(async () => (await countByStatus(url, key, 'sent')) === count, 20_000, 'all sent');
      return { ids, atStop, exitCode, statuses, ...tally(sink, prefix, count) };
    } finally {
      await first.kill('SIGKILL');
      await second?.kill('SIGTERM');
      await d.destroy();
    }
  }

  it('delivers all 150 emails accepted just before a SIGKILL, once restarted', async () => {
    const result = await serveStopRestart('kill', 150, 'SIGKILL');
    console.info(
      `[crash ${kind}] 150 accepted; at the kill: ${result.atStop} at the sink, store ${JSON.stringify(result.statuses)}; ${result.duplicates} duplicates`,
    );
    expect(new Set(result.ids).size).toBe(150);
    expect(result.lost).toBe(0);
    // Only a send in flight at the kill can arrive twice, and then as the same message.
    expect(result.duplicates).toBeLessThanOrEqual(CONCURRENCY);
    expect(result.mixedIds).toBe(0);
  }, 90_000);

  it('finishes in-flight sends on SIGTERM and re-sends nothing after a restart', async () => {
    const result = await serveStopRestart('term', 60, 'SIGTERM');
    expect(result.exitCode).toBe(0);
    // Nothing was left claimed: what was in flight finished, the rest is still queued.
    expect(result.statuses.sending ?? 0).toBe(0);
    expect(result).toMatchObject({ lost: 0, duplicates: 0, mixedIds: 0 });
  }, 90_000);
});
