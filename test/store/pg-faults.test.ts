// A PostgreSQL backend terminated while Mailroom holds its connection (mid-transaction) must fail that
// one write as "store unavailable" and leave the process and the pool working.
import { sql } from 'kysely';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isStoreUnavailable } from '../../src/store/dialect.js';
import { TEST_DATABASE_URL, type TestStore, useStore } from '../helpers/stores.js';

describe.skipIf(!TEST_DATABASE_URL)('PostgreSQL faults', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  it('survive a backend terminated inside a transaction', async () => {
    const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
    await admin.connect();
    try {
      const failed = ts.store.write(async (trx) => {
        const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
        await admin.query('select pg_terminate_backend($1)', [rows[0]!.pid]);
        // Between two queries of the transaction, as kysely is while a service awaits something else.
        await new Promise((r) => setTimeout(r, 200));
        await sql`select 1`.execute(trx);
      });
      const err = await failed.then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeDefined();
      expect(isStoreUnavailable(err)).toBe(true);
      // The process is still here and the pool hands out a working connection.
      const { rows } = await sql<{ one: number }>`select 1 as one`.execute(ts.store.db);
      expect(rows[0]!.one).toBe(1);
    } finally {
      await admin.end();
    }
  });
});
