// The SQLite WAL is copied into the database file by a thread of its own, not by the writer's commits.
import { mkdtempSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { startCheckpointer } from '../../src/store/checkpointer.js';
import { createStore } from '../../src/store/store.js';

describe('background WAL checkpoints (SQLite)', () => {
  let dir: string;
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('keep the WAL small while the writer leaves checkpoints to the thread', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-ckpt-'));
    const store = createStore({ dataDir: dir });
    await store.migrate();
    const wal = path.join(dir, 'mailroom.sqlite-wal');
    const name = 'x'.repeat(400_000);
    let largest = 0;
    // 48 MB in 120 commits. The writer alone would checkpoint only at 10,000 frames (40 MB): without the
    // thread the WAL would grow that large.
    for (let i = 0; i < 120; i++) {
      await store.write((trx) =>
        trx
          .insertInto('organizations')
          .values({ id: `o${i}`, name, created_at: '2026-01-01T00:00:00.000Z' })
          .execute(),
      );
      largest = Math.max(largest, statSync(wal).size);
      await new Promise((r) => setTimeout(r, 10));
    }
    // The thread starts its work within a second (from the TypeScript sources, in tests): well before 24 MB.
    expect(largest).toBeLessThan(24 * 2 ** 20);
    // What was checkpointed is in the database file itself.
    expect(statSync(path.join(dir, 'mailroom.sqlite')).size).toBeGreaterThan(24 * 2 ** 20);
    const rows = await store.db.selectFrom('organizations').select('id').execute();
    expect(rows).toHaveLength(120);
    await store.close();
  });

  it('hand checkpoints back to the writer if the thread stops', async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-ckpt-'));
    const file = path.join(dir, 'db.sqlite');
    const writer = new BetterSqlite3(file);
    writer.pragma('journal_mode = WAL');
    // The thread cannot open a file that is gone: it stops at once.
    unlinkSync(file);
    let onStop!: (err: unknown) => void;
    const stopped = new Promise<unknown>((resolve) => (onStop = resolve));
    const checkpointer = startCheckpointer(writer, { synchronous: 'FULL', onStop });
    expect(writer.pragma('wal_autocheckpoint', { simple: true })).toBe(10_000);
    expect(await stopped).toMatchObject({ code: 'SQLITE_CANTOPEN' });
    expect(writer.pragma('wal_autocheckpoint', { simple: true })).toBe(1_000);
    await checkpointer.close();
    writer.close();
  });
});
