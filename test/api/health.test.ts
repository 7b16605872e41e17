// /health on PostgreSQL pings on a connection of its own: through the pool it queued behind requests, so a
// few slow ones (deep pages at a million contacts) made it take seconds, and a load balancer would pull a
// server whose store answers.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { createTestApp } from '../helpers/app.js';
import { noPostgres } from '../helpers/stores.js';

describe.skipIf(noPostgres())('GET /health on PostgreSQL', () => {
  it('answers while every connection of the pool is busy', async () => {
    const t = await createTestApp('postgres');
    try {
      expect((await t.call({ method: 'GET', url: '/health' })).statusCode).toBe(200);
      // Every one of the pool's 10 connections (test/helpers/stores.ts) held for 4 s.
      let oneDone = false;
      const sleeps = Array.from({ length: 10 }, () =>
        sql`select pg_sleep(4)`.execute(t.ts.store.db).then(() => (oneDone = true)),
      );
      await new Promise((r) => setTimeout(r, 300));
      const health = await t.call({ method: 'GET', url: '/health' });
      expect(health.statusCode).toBe(200);
      // Answered while they still ran, not once one of them let its connection go.
      expect(oneDone).toBe(false);
      await Promise.all(sleeps);
    } finally {
      await t.close();
    }
  }, 30_000);

  it('answers 200 after PostgreSQL ended its connection, as a restart does', async () => {
    const t = await createTestApp('postgres');
    try {
      expect((await t.call({ method: 'GET', url: '/health' })).statusCode).toBe(200);
      // Every other backend of the test's database ended: the pool's and /health's own.
      await sql`select pg_terminate_backend(pid) from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()`.execute(t.ts.store.db);
      expect((await t.call({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    } finally {
      await t.close();
    }
  }, 30_000);
});
