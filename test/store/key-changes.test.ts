// Word between processes that API keys changed (store/key-changes.ts): each store below stands for a
// process of its own on the same data.
import { mkdtempSync, rmSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { fileKeyChanges, postgresKeyChanges } from '../../src/store/key-changes.js';
import { eventually } from '../helpers/smtp.js';
import { createTestDatabase, noPostgres } from '../helpers/stores.js';
import { startPgProxy } from '../helpers/pg-proxy.js';
import pg from 'pg';

/** Counts what a subscriber hears. */
function ear() {
  let heard = 0;
  return { hear: () => heard++, heard: () => heard };
}

describe('key changes on SQLite (a watched file in DATA_DIR)', () => {
  it('reach another process on the same DATA_DIR, also after the file was deleted', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-keys-'));
    const server = fileKeyChanges(dir);
    const cli = fileKeyChanges(dir);
    const { hear, heard } = ear();
    const stop = server.subscribe(hear);
    try {
      await cli.announce();
      await eventually(() => heard() > 0, 10_000, 'the first announcement');
      // Deleted (an operator tidying DATA_DIR): the watch followed the old file; it watches the path again.
      const beforeDelete = heard();
      unlinkSync(path.join(dir, 'keys-changed'));
      // The deletion is heard too (whoever deleted it may have changed keys); its events all in, only a
      // new watch can hear what follows.
      await eventually(() => heard() > beforeDelete, 10_000, 'the deletion');
      await new Promise((r) => setTimeout(r, 300));
      const before = heard();
      await eventually(
        async () => {
          await cli.announce();
          return heard() > before;
        },
        10_000,
        'an announcement after the file was deleted',
      );
      // Stopped: nothing more is heard. A third process hears the next announcement, and with it (one
      // inotify queue serves every watch of this process) the stopped one would have.
      stop();
      const after = heard();
      const other = fileKeyChanges(dir);
      const witness = ear();
      const stopWitness = other.subscribe(witness.hear);
      try {
        await eventually(
          async () => {
            await cli.announce();
            return witness.heard() > 0;
          },
          10_000,
          'another process to hear an announcement',
        );
        expect(heard()).toBe(after);
      } finally {
        stopWitness();
        await other.close();
      }
    } finally {
      stop();
      await server.close();
      await cli.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(noPostgres())('key changes on PostgreSQL (NOTIFY)', () => {
  it('reach another process on the same database, and its listening connection ends with it', async () => {
    const db = await createTestDatabase();
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const notify = async (channel: string) =>
      void (await pool.query('select pg_notify($1, $2)', [channel, '']));
    const server = postgresKeyChanges(db.url, notify);
    const cli = postgresKeyChanges(db.url, notify);
    const listening = async () =>
      Number(
        (
          await pool.query<{ n: string }>(
            `select count(*) as n from pg_stat_activity where datname = current_database() and query ilike 'LISTEN%'`,
          )
        ).rows[0]!.n,
      );
    const { hear, heard } = ear();
    const stop = server.subscribe(hear);
    try {
      // LISTEN is in place once its connection shows it; announced before, the word would be lost.
      await eventually(async () => (await listening()) === 1, 10_000, 'the LISTEN connection');
      await cli.announce();
      await eventually(() => heard() > 0, 10_000, 'the announcement');
      stop();
      await eventually(async () => (await listening()) === 0, 10_000, 'the LISTEN connection to end');
    } finally {
      stop();
      await server.close();
      await cli.close();
      await pool.end();
      await db.drop();
    }
  });

  it('tell of a lost listening connection once, drop lookups while it is lost, and tell when it is back', async () => {
    const db = await createTestDatabase();
    const proxy = await startPgProxy(db.url);
    const server = postgresKeyChanges(proxy.url, async () => undefined);
    const events: string[] = [];
    const stop = server.subscribe((event) => events.push(event));
    try {
      await eventually(() => proxy.connections > 0, 10_000, 'the LISTEN connection');
      await new Promise((r) => setTimeout(r, 300));
      expect(events).toEqual([]);
      // The database gone for several tries to connect again: one 'lost', an 'unheard' for each try.
      proxy.down = true;
      await eventually(() => events.filter((e) => e === 'unheard').length >= 3, 15_000, 'three tries');
      proxy.down = false;
      await eventually(() => events.includes('back'), 15_000, 'listening again');
      expect(events[0]).toBe('lost');
      expect(events.at(-1)).toBe('back');
      expect(events.slice(1, -1).every((e) => e === 'unheard')).toBe(true);
      // Listening again: a notification is heard as an announcement.
      const pool = new pg.Pool({ connectionString: db.url, max: 1 });
      try {
        await eventually(
          async () => {
            await pool.query(`select pg_notify('mailroom_keys', '')`);
            return events.at(-1) === 'announced';
          },
          10_000,
          'an announcement after the outage',
        );
      } finally {
        await pool.end();
      }
      expect(events.filter((e) => e === 'lost' || e === 'back')).toEqual(['lost', 'back']);
    } finally {
      stop();
      await server.close();
      await proxy.close();
      await db.drop();
    }
  });
});
