// The organisation keys go to when none is named (contract.md: "the default organisation, created on first
// use"): one marked as such (migration 0013), never simply the oldest, which may be a customer's.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { uuidIds, systemClock } from '../../src/clock.js';
import { OrgsService } from '../../src/orgs/orgs.service.js';
import type { Store } from '../../src/store/store.js';
import { olderStore, storeKinds, useStore, migrationsFrom } from '../helpers/stores.js';

const orgs = (store: Store) => new OrgsService(store, systemClock, uuidIds);

async function marked(store: Store): Promise<string[]> {
  const rows = await store.db.selectFrom('organizations').select('id').where('is_default', '=', 1).execute();
  return rows.map((r) => r.id);
}

describe.each(storeKinds())('the default organisation on %s', (kind) => {
  let store: Store;
  useStore(kind, (ts) => (store = ts.store));

  it('is one of its own, not an organisation made before it; made once, even by callers at once', async () => {
    const service = orgs(store);
    const acme = await service.create('Acme');
    const all = await Promise.all(Array.from({ length: 6 }, () => service.getOrCreateDefault()));
    const ids = new Set(all.map((o) => o.id));
    expect(ids.size).toBe(1);
    const [id] = ids;
    expect(id).not.toBe(acme.id);
    expect(all[0]!.name).toBe('Default');
    expect(await marked(store)).toEqual([id]);
    await service.create('Later');
    expect((await service.getOrCreateDefault()).id).toBe(id);
  });
});

describe.each(storeKinds())('migration 0013 on %s', (kind) => {
  for (const [first, kept] of [
    ['Default', true],
    ['Acme', false],
  ] as const) {
    it(`${kept ? 'keeps' : 'does not take'} an oldest organisation named ${first} as the default`, async () => {
      const old = await olderStore(kind, '0012_address_chunks');
      try {
        for (const [i, name] of [first, 'Other'].entries()) {
          await sql`insert into organizations (id, name, created_at)
            values (${`org-${i}`}, ${name}, ${`2026-01-0${i + 1}T00:00:00.000Z`})`.execute(old.db);
        }
        await old.db.destroy();
        const upgraded = old.open();
        try {
          expect((await upgraded.migrate()).applied).toEqual(
            migrationsFrom('0013_marked_default_organization'),
          );
          const chosen = await orgs(upgraded).getOrCreateDefault();
          if (kept) expect(chosen.id).toBe('org-0');
          else expect(['org-0', 'org-1']).not.toContain(chosen.id);
          expect(await marked(upgraded)).toEqual([chosen.id]);
        } finally {
          await upgraded.close();
        }
      } finally {
        await old.drop();
      }
    });
  }
});
