// PostgreSQL databases of a test run, made and dropped through TEST_DATABASE_URL. Without vitest's runtime,
// so the global setup (test/global-postgres.ts) can use them as well as the tests (through stores.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL;

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** A new database, empty, or a copy of `template`, dropped by `drop`. */
export async function createTestDatabase(
  template?: string,
): Promise<{ name: string; url: string; drop: () => Promise<void> }> {
  const name = `mailroom_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
  await admin.end();
  return {
    name,
    url: withDatabase(TEST_DATABASE_URL!, name),
    drop: async () => {
      const c = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await c.connect();
      // A pool ended just before (pg-pool's end() resolves once its clients are told to end, not once
      // they have) may still be closing: FORCE would cut it, and a pool without an error listener throws
      // that out of the test run. Give closing connections a moment; force only what stays open.
      for (let i = 0; i < 40; i++) {
        const { rows } = await c.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
          [name],
        );
        if (rows[0]!.n === 0) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}
