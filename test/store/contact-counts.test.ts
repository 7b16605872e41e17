import { sql } from '../../src/store/kysely.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findMaintainedCount } from '../../src/contacts/contact-counts.repository.js';
import { countContacts } from '../../src/contacts/contacts.repository.js';
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

  it('count a tag among subscribed or unsubscribed contacts as the rows say, from either side', async () => {
    // Tag `few` is on fewer contacts than are unsubscribed, `many` on more: on SQLite each is counted from
    // its smaller side (the tag's contacts, or the unsubscribed ones); subscribed ones as the rest.
    const org = (await t.services.orgs.create('tag and subscription')).id;
    const other = (await t.services.orgs.create('beside')).id;
    const { contacts } = t.services;
    await contacts.createJson(other, { email: 'y@other.test', tags: ['few', 'many'], unsubscribed: true });
    const made = await Promise.all(
      Array.from({ length: 60 }, async (_, i) => {
        const tags = [...(i % 10 === 0 ? ['few'] : []), ...(i % 5 !== 0 ? ['many'] : [])];
        const json = await contacts.createJson(org, {
          email: `t${i}@tags.test`,
          tags,
          unsubscribed: i % 4 === 0,
        });
        return JSON.parse(json) as { id: string };
      }),
    );
    const db = t.ts.store.db;
    const check = async () => {
      for (const tag of ['few', 'many', 'none']) {
        for (const unsubscribed of [true, false]) {
          const where = `c.unsubscribed = ${unsubscribed ? 1 : 0} and exists (select 1 from contact_tags t
            where t.contact_id = c.id and t.tag = '${tag}')`;
          expect(await countContacts(db, org, { tag, unsubscribed }), `${tag} ${unsubscribed}`).toBe(
            await actual(org, where),
          );
        }
      }
    };
    expect(await findMaintainedCount(db, org, { tag: 'few' })).toBeLessThan(15);
    expect(await findMaintainedCount(db, org, { tag: 'many' })).toBeGreaterThan(15);
    await check();
    expect(await countContacts(db, org, { tag: 'few', unsubscribed: true })).toBe(3);
    expect(await countContacts(db, org, { tag: 'many', unsubscribed: false })).toBe(36);
    // Unsubscribed, retagged and deleted: still as the rows say.
    await Promise.all(made.slice(0, 20).map((c) => contacts.update(org, { id: c.id, unsubscribed: true })));
    await contacts.update(org, { id: made[21]!.id, tags: ['few', 'many'] });
    await Promise.all(made.slice(40, 50).map((c) => contacts.delete(org, { id: c.id })));
    await check();
  });
});
