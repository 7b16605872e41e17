import { sql } from '../../src/store/kysely.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMaintainedCount } from '../../src/contacts/contact-counts.repository.js';
import { type TestApp, createTestApp } from '../helpers/app.js';
import { storeKinds } from '../helpers/stores.js';

describe.each(storeKinds())('maintained contact counts on %s', (kind) => {
  let t: TestApp;
  beforeAll(async () => {
    t = await createTestApp(kind);
  });
  afterAll(() => t.close());

  async function actual(orgId: string, where: string): Promise<number> {
    const { rows } = await sql<{
      n: number | string;
    }>`select count(*) as n from contacts c where c.organization_id = ${orgId} and ${sql.raw(where)}`.execute(
      t.ts.store.db,
    );
    return Number(rows[0]!.n);
  }

  it('equal count(*) for every bucket after creates, updates, tag changes and deletes', async () => {
    const org = (await t.services.orgs.create('counts')).id;
    const other = (await t.services.orgs.create('other')).id;
    const { contacts } = t.services;
    await contacts.createJson(other, { email: 'x@other.test', tags: ['a'] });
    const made = await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const json = await contacts.createJson(org, {
          email: `c${i}@count.test`,
          tags: i % 2 ? ['a', 'b'] : ['b'],
          unsubscribed: i % 3 === 0,
        });
        return JSON.parse(json) as { id: string };
      }),
    );
    await Promise.all(
      made.slice(0, 10).map((c) => contacts.update(org, { id: c.id, unsubscribed: true, tags: ['c'] })),
    );
    await Promise.all(made.slice(10, 15).map((c) => contacts.delete(org, { id: c.id })));
    await contacts.update(org, { id: made[20]!.id, unsubscribed: false });

    const db = t.ts.store.db;
    expect(await findMaintainedCount(db, org, {})).toBe(await actual(org, '1 = 1'));
    expect(await findMaintainedCount(db, org, {})).toBe(35);
    for (const u of [true, false]) {
      expect(await findMaintainedCount(db, org, { unsubscribed: u })).toBe(
        await actual(org, `c.unsubscribed = ${u ? 1 : 0}`),
      );
    }
    for (const tag of ['a', 'b', 'c', 'none']) {
      expect(await findMaintainedCount(db, org, { tag })).toBe(
        await actual(
          org,
          `exists (select 1 from contact_tags t where t.contact_id = c.id and t.tag = '${tag}')`,
        ),
      );
    }
    expect(await findMaintainedCount(db, other, { tag: 'a' })).toBe(1);
    expect(await findMaintainedCount(db, org, { email: 'c1' })).toBeUndefined();
    expect(await findMaintainedCount(db, org, { tag: 'a', unsubscribed: true })).toBeUndefined();
  });
});
