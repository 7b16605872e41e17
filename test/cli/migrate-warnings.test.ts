// What `mailroom migrate` says when the store migrated but could not do all it should: a role that may not
// create pg_trgm gets its migrations, and a warning beside them (not among them), in JSON and in text; and
// what every command says of a store a newer release has migrated.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { MAIN, baseEnv, cli, scratchDir } from '../helpers/process.js';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import {
  TEST_DATABASE_URL,
  createTestDatabase,
  noPostgres,
  olderStore,
  storeKinds,
} from '../helpers/stores.js';
import { migrationNames } from '../../src/store/migrations.js';

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

describe.each(storeKinds())('a store a newer release has migrated, on %s', (kind) => {
  it('is opened with a warning naming what this release does not know, by migrate and every command', async () => {
    const db = kind === 'postgres' ? await createTestDatabase() : undefined;
    const dataDir = scratchDir('mailroom-newer-release-');
    const env = { DATA_DIR: dataDir, ...(db ? { DATABASE_URL: db.url } : {}) };
    try {
      expect((await cli(['migrate'], env)).applied).toContain('0001_initial');
      // What a later release's migration leaves in kysely's table.
      const future = '9999_from_a_newer_release';
      if (db) {
        const client = new pg.Client({ connectionString: db.url });
        await client.connect();
        await client
          .query(`insert into kysely_migration (name, timestamp) values ($1, $2)`, [
            future,
            new Date().toISOString(),
          ])
          .finally(() => client.end());
      } else {
        const file = new Sqlite(path.join(dataDir, 'mailroom.sqlite'));
        file
          .prepare('insert into kysely_migration (name, timestamp) values (?, ?)')
          .run(future, new Date().toISOString());
        file.close();
      }
      const warning = expect.stringMatching(
        new RegExp(`newer release of Mailroom \\(${future}, unknown to this one\\)`),
      );
      expect(await cli(['migrate'], env)).toEqual({ applied: [], warnings: [warning] });
      // Any other command says so on stderr, and does its work.
      const listed = await promisify(execFile)(process.execPath, [...MAIN, 'orgs', 'list'], {
        env: baseEnv(env),
      });
      expect(listed.stderr).toMatch(
        new RegExp(`^warning: the store was migrated by a newer release.*${future}`, 'm'),
      );
    } finally {
      await db?.drop();
    }
  }, 60_000);
});

describe('migrate on a SQLite store an earlier release left', () => {
  // helper-114: a server of that release left running went on with the new schema, its email searches all
  // 500s, and migrate said nothing.
  it('reminds that servers still on it must be restarted, as does a process that upgrades it; a new store gets no such warning', async () => {
    const names = migrationNames();
    const older = await olderStore('sqlite', names.at(-2)!);
    await older.db.destroy();
    try {
      const upgraded = await cli(['migrate'], { DATA_DIR: older.dir! });
      expect(upgraded).toEqual({
        applied: [names.at(-1)],
        warnings: [expect.stringMatching(/^restart every server and worker on this DATA_DIR/)],
      });
      expect(await cli(['migrate'], { DATA_DIR: older.dir! })).toEqual({ applied: [] });
      const fresh = await cli(['migrate'], { DATA_DIR: scratchDir('mailroom-fresh-') });
      expect(fresh.warnings).toBeUndefined();
    } finally {
      await older.drop();
    }
    // A server or worker that upgrades it at start says so too (logged as a warning, as every store's).
    const another = await olderStore('sqlite', names.at(-2)!);
    await another.db.destroy();
    const store = another.open();
    try {
      expect((await store.migrate()).warnings).toEqual([
        expect.stringMatching(/^restart every server and worker on this DATA_DIR/),
      ]);
    } finally {
      await store.close();
      await another.drop();
    }
  }, 60_000);
});
