// store.snapshot on PostgreSQL: reads inside it agree with one another even when a write commits between
// them (each read on its own pooled connection saw a state of its own). SQLite's reads asked for together
// share one read transaction by construction (sqlite-reads.ts); there is nothing in between to commit.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { type TestStore, useStore, noPostgres } from '../helpers/stores.js';

describe.skipIf(noPostgres())('store.snapshot on PostgreSQL', () => {
  let ts: TestStore;
  useStore('postgres', (opened) => (ts = opened));

  const organizations = async (db: TestStore['store']['db']) =>
    Number((await sql<{ n: string }>`select count(*) as n from organizations`.execute(db)).rows[0]!.n);

  it('reads one state while another write commits between its reads', async () => {
    const [before, after, outside] = await ts.store.snapshot(async (db) => {
      const first = await organizations(db);
      await ts.store.write((trx) =>
        trx
          .insertInto('organizations')
          .values({ id: 'snapshot-org', name: 'later', created_at: new Date().toISOString() })
          .execute(),
      );
      return [first, await organizations(db), await organizations(ts.store.db)];
    });
    expect(after).toBe(before);
    expect(outside).toBe(before + 1);
  });

  it('refuses writes', async () => {
    await expect(
      ts.store.snapshot((db) =>
        db
          .insertInto('organizations')
          .values({ id: 'x', name: 'x', created_at: new Date().toISOString() })
          .execute(),
      ),
    ).rejects.toThrow(/read-only transaction/);
  });
});
