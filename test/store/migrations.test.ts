// A SQLite migration run is one transaction: one that fails part-way (here: the disk fills) leaves the
// schema exactly as it was, reports SQLite's own error, and a later run with room applies everything.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Kysely, SqliteDialect, sql } from '../../src/store/kysely.js';
import { afterEach, describe, expect, it } from 'vitest';
import { migrateToLatest, migrationNames } from '../../src/store/migrations.js';
import { Sqlite } from '../../src/store/sqlite-driver.js';

describe('migration names', () => {
  it('are the ones stores have recorded, in order: a name changed or dropped would be run again or lost', () => {
    // Upgrade tests take the names from migrationNames (migrationsFrom); this pins the list itself.
    expect(migrationNames()).toEqual([
      '0001_initial',
      '0002_contact_counts',
      '0003_contact_search',
      '0004_email_counts',
      '0005_counts_per_statement',
      '0006_deferred_contact_search',
      '0007_unsubscribed_only_index',
      '0008_stored_contact_json',
      '0009_search_index_file',
      '0010_created_index_with_address',
      '0011_address_versions',
      '0012_address_chunks',
      '0013_marked_default_organization',
      '0014_list_counts_per_statement',
      '0015_address_chunks_by_domain',
      '0016_contact_addresses',
      '0017_no_blank_contact_tags',
      '0018_email_bodies',
      '0019_subscription_in_walked_indexes',
    ]);
  });
});

describe('SQLite migrations', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('that fail part-way leave no table behind and report the real error', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-migrations-'));
    dirs.push(dir);
    const conn = new Sqlite(path.join(dir, 'mailroom.sqlite'));
    conn.pragma('journal_mode = WAL');
    const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database: conn }) });
    const tables = async () =>
      (await sql<{ name: string }>`select name from sqlite_master where type = 'table'`.execute(db)).rows
        .length;
    try {
      // Room for a few tables, not for the whole schema.
      conn.pragma('max_page_count = 12');
      await expect(migrateToLatest(db, 'sqlite')).rejects.toThrow(/database or disk is full/);
      expect(await tables()).toBe(0);
      conn.pragma('max_page_count = 1000000');
      expect((await migrateToLatest(db, 'sqlite')).applied[0]).toBe('0001_initial');
      expect(await migrateToLatest(db, 'sqlite')).toEqual({ applied: [], newer: [] });
      expect(await tables()).toBeGreaterThan(10);
      expect(conn.pragma('busy_timeout', { simple: true })).toBe(5000);
    } finally {
      await db.destroy();
    }
  });
});
