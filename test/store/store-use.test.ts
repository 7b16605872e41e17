// Which background work a process's store does on SQLite (runtime.ts StoreUse): the server keeps the
// search index, a delivery worker beside it leaves the index to it, a one-shot CLI command does neither.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Sqlite } from '../../src/store/sqlite-driver.js';
import { afterAll, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/smtp.js';
import { loadConfig } from '../../src/config.js';
import { type StoreUse, openMigratedStore } from '../../src/store/from-config.js';
import { SEARCH_FILE } from '../../src/search/search-file.js';
import type { Store } from '../../src/store/store.js';

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function storeFor(use: StoreUse): Promise<{ store: Store; watermark: () => number }> {
  const dir = mkdtempSync(path.join(tmpdir(), `mailroom-use-${use}-`));
  dirs.push(dir);
  const config = loadConfig({ DATA_DIR: dir, LOG_LEVEL: 'silent' });
  const { store } = await openMigratedStore(config, { use });
  await store.write((trx) =>
    trx
      .insertInto('organizations')
      .values({ id: 'o', name: 'o', created_at: '2031-01-01T00:00:00.000Z' })
      .execute(),
  );
  await store.write((trx) =>
    trx
      .insertInto('contacts')
      .values({
        id: 'c',
        organization_id: 'o',
        email: 'one@use.example',
        email_lower: 'one@use.example',
        first_name: null,
        last_name: null,
        unsubscribed: 0,
        custom_fields: '{}',
        tags: '[]',
        created_at: '2031-01-01T00:00:00.000Z',
        updated_at: '2031-01-01T00:00:00.000Z',
      })
      .execute(),
  );
  const watermark = () => {
    const index = new Sqlite(path.join(dir, SEARCH_FILE), { readonly: true });
    try {
      return index.prepare('select indexed_to from search_state').pluck().get() as number;
    } finally {
      index.close();
    }
  };
  return { store, watermark };
}

describe('background work by the kind of process', () => {
  it('indexes contacts for search in the server only', async () => {
    // Opened first, so that a search thread of theirs, if any, would have had the longer time.
    const worker = await storeFor('worker');
    const oneShot = await storeFor('one-shot');
    const server = await storeFor('long-running');
    try {
      await eventually(
        () => server.watermark() > 0,
        10_000,
        "the server's search thread to index the contact",
      );
      expect(server.watermark()).toBe(1);
      expect(worker.watermark()).toBe(0);
      expect(oneShot.watermark()).toBe(0);
    } finally {
      await Promise.all([worker.store.close(), oneShot.store.close(), server.store.close()]);
    }
  });
});
