// The page caches of a SQLite store's connections (sqlite-driver.ts, withSmallCache): SQLite's own 2,000
// KiB on every connection but the writer's, and on the index file attached to a reader, where better-sqlite3
// would give each 16 MiB; the server held 20-45 MiB more at a million contacts that way. The checkpoint
// thread's connection is not reached from here.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { sql } from '../../src/store/kysely.js';
import { afterAll, expect, it } from 'vitest';
import { createStore } from '../../src/store/store.js';
import { SEARCH_FILE, openSearchFile } from '../../src/search/search-file.js';
import { readerBeside } from '../../src/search/search-indexer.js';
import { Sqlite, openQueryOnly } from '../../src/store/sqlite-driver.js';
import { eventually } from '../helpers/smtp.js';

const dir = mkdtempSync(path.join(tmpdir(), 'mailroom-caches-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The page cache size SQLite reports for `schema` (negative: KiB). */
const CACHE = (schema: string) =>
  `select cache_size as kib from pragma_cache_size where schema = '${schema}'`;

it("gives every connection but the writer's SQLite's 2,000 KiB page cache, attached index files too", async () => {
  const store = createStore({ dataDir: dir });
  try {
    await store.migrate();
    const kib = async (schema: string) =>
      (await sql.raw<{ kib: number }>(CACHE(schema)).execute(store.db)).rows;
    expect(await kib('main')).toEqual([{ kib: -2000 }]);
    expect(await kib('search')).toEqual([{ kib: -2000 }]);
    // The writer keeps better-sqlite3's larger one (16 MiB): the pages its inserts touch.
    const writer = await store.write((trx) => sql.raw<{ kib: number }>(CACHE('main')).execute(trx));
    expect(writer.rows[0]!.kib).toBeLessThan(-2000);

    // The search thread's reader, as the store's.
    const beside = readerBeside(store.db)!;
    let rows: unknown[] | undefined;
    await eventually(
      async () => {
        const read = await beside.readBeside(`${CACHE('main')} union all ${CACHE('search')}`, [], 1_000);
        if (!read) return false;
        try {
          rows = await read.rows;
        } finally {
          read.release();
        }
        return true;
      },
      10_000,
      'the search thread to take a read up',
    );
    expect(rows).toEqual([{ kib: -2000 }, { kib: -2000 }]);
  } finally {
    await store.close();
  }
  // The indexer's two connections are opened as these are (search-index.ts).
  for (const open of [
    () => openQueryOnly(path.join(dir, 'mailroom.sqlite')),
    () => openSearchFile(path.join(dir, SEARCH_FILE)),
  ]) {
    const conn = open();
    try {
      expect(conn.prepare(CACHE('main')).all()).toEqual([{ kib: -2000 }]);
    } finally {
      conn.close();
    }
  }
  // better-sqlite3's own, which the above would keep without withSmallCache.
  const plain = new Sqlite(':memory:');
  try {
    expect(plain.prepare(CACHE('main')).all()).toEqual([{ kib: -16000 }]);
  } finally {
    plain.close();
  }
});
