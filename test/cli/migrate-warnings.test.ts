// What `mailroom migrate` says when the store migrated but could not do all it should: a role that may not
// create pg_trgm gets its migrations, and a warning beside them (not among them), in JSON and in text.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { MAIN, baseEnv, cli, scratchDir } from '../helpers/process.js';
import { TEST_DATABASE_URL, createTestDatabase, noPostgres } from '../helpers/stores.js';

const UNAVAILABLE = 'pg_trgm unavailable: email substring search scans';

describe.skipIf(noPostgres())('migrate on PostgreSQL, for a role that may not create pg_trgm', () => {
  it('lists the migrations it applied, and the warning apart from them', async () => {
    const db = await createTestDatabase();
    const role = `mailroom_cli_restricted_${randomBytes(4).toString('hex')}`;
    const admin = new pg.Client({ connectionString: db.url });
    await admin.connect();
    try {
      await admin.query(`create role ${role} login`);
      await admin.query(`grant create on schema public to ${role}`);
      const url = new URL(db.url);
      url.username = role;
      const env = { DATABASE_URL: url.toString(), DATA_DIR: scratchDir('mailroom-migrate-warnings-') };
      const first = await cli(['migrate'], env);
      expect(first.warnings).toEqual([UNAVAILABLE]);
      expect((first.applied as string[]).length).toBeGreaterThan(10);
      expect((first.applied as string[]).every((name) => /^\d{4}_/.test(name))).toBe(true);
      // Nothing left to apply: a one-shot command leaves the index to servers and workers.
      expect(await cli(['migrate'], env)).toEqual({ applied: [] });
      // In text, as a line of its own after what was applied.
      await admin.query('drop schema public cascade; create schema public');
      await admin.query(`grant create, usage on schema public to ${role}`);
      const { stdout } = await promisify(execFile)(process.execPath, [...MAIN, 'migrate'], {
        env: baseEnv(env),
      });
      const lines = stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^applied: 0001_/);
      expect(lines.slice(1)).toEqual([`warning: ${UNAVAILABLE}`]);
    } finally {
      await admin.end();
      await db.drop();
      const cleanup = new pg.Client({ connectionString: TEST_DATABASE_URL });
      await cleanup.connect();
      await cleanup.query(`drop role if exists ${role}`).finally(() => cleanup.end());
    }
  }, 60_000);
});
