// The SQLite WAL is copied into the database file by a thread of its own, not by the writer's commits.
import { mkdtempSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { startCheckpointer } from '../../src/store/checkpointer.js';
import { type Store, createStore } from '../../src/store/store.js';

/** Commits one organisation row whose name is `name`: a write of that many bytes. */
const writeRow = (store: Store, i: number, name: string) =>
  store.write((trx) =>
    trx
      .insertInto('organizations')
      .values({ id: `o${i}`, name, created_at: '2026-01-01T00:00:00.000Z' })
      .execute(),
  );

describe('background WAL checkpoints (SQLite)', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'mailroom-ckpt-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('copy the WAL into the database file while the writer leaves it to them', async () => {
    const failures: unknown[] = [];
    const store = createStore({ dataDir: dir, onBackgroundError: (err) => failures.push(err) });
    await store.migrate();
    const db = path.join(dir, 'mailroom.sqlite');
    const before = statSync(db).size;
    const name = 'x'.repeat(400_000);
    // 8 MB in 20 commits: under the writer's own backstop (3,000 frames, 12 MiB), so only the thread
    // copies any of it into the database file before the store closes.
    for (let i = 0; i < 20; i++) {
      await writeRow(store, i, name);
      await new Promise((r) => setTimeout(r, 20));
    }
    // The thread starts within a second (from the TypeScript sources, in tests) and copies every 50 ms.
    for (let i = 0; i < 100 && statSync(db).size < before + 6 * 2 ** 20; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(statSync(db).size).toBeGreaterThan(before + 6 * 2 ** 20);
    expect(failures).toEqual([]);
    await store.close();
  });

  it('bound the WAL when commits land back to back', async () => {
    const store = createStore({ dataDir: dir });
    await store.migrate();
    const wal = path.join(dir, 'mailroom.sqlite-wal');
    const name = 'x'.repeat(20_000);
    let largest = 0;
    // 40 MB in 2,000 commits with no pause between them: the thread rarely finds every frame copied, and
    // the writer's backstop then copies the rest, so the WAL starts over well before 40 MB.
    for (let i = 0; i < 2000; i++) {
      await writeRow(store, i, name);
      if (i % 50 === 0) largest = Math.max(largest, statSync(wal).size);
    }
    expect(largest).toBeLessThan(16 * 2 ** 20);
    await store.close();
  });

  it('hand checkpoints back to the writer if the thread stops, and say so', async () => {
    const file = path.join(dir, 'db.sqlite');
    const writer = new Sqlite(file);
    writer.pragma('journal_mode = WAL');
    // The thread cannot open a file that is gone: it stops at once.
    unlinkSync(file);
    let onError!: (err: unknown) => void;
    const stopped = new Promise<unknown>((resolve) => (onError = resolve));
    const checkpointer = startCheckpointer(writer, { synchronous: 'FULL', onError });
    expect(writer.pragma('wal_autocheckpoint', { simple: true })).toBe(3_000);
    expect(await stopped).toMatchObject({ code: 'SQLITE_CANTOPEN' });
    expect(writer.pragma('wal_autocheckpoint', { simple: true })).toBe(1_000);
    await checkpointer.close();
    writer.close();
  });
});
