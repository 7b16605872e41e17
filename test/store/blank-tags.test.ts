// Contact tags of whitespace alone, which releases before 2026-11-26 stored and the API now refuses: the
// upgrade removes them (migration 0017), so a client that reads a contact and writes it back whole gets a
// 200, not a 400 for a tag it never sent; the tag's rows and counts go with it.
import { sql } from '../../src/store/kysely.js';
import { describe, expect, it } from 'vitest';
import { insertContacts } from '../../src/contacts/contacts.repository.js';
import { renderContact } from '../../src/contacts/contact-fields.js';
import type { Store } from '../../src/store/store.js';
import { withUpgradedApp } from '../helpers/app.js';
import { contactRow } from '../helpers/rows.js';
import { migrationsFrom, storeKinds } from '../helpers/stores.js';

const ORG = 'org-old';
const AT = '2026-11-20T00:00:00.000Z';
const BLANK = '   ';

/** Each contact as an older release stored it: its tags, and (as releases since 0008 did) its JSON. */
const TAGS: Record<string, string[]> = {
  mixed: ['vip', BLANK, 'b'],
  blanks: ['\t', '\u00a0\u3000', ' '],
  edges: [' vip ', 'a\u200b'],
  none: [],
};

function oldContact(name: string, i: number) {
  const row = { ...contactRow(ORG, `c-${i}-${name}`, `${name}@old.example`, AT), first_name: 'Ann' };
  const tags = TAGS[name]!;
  const stored = { ...row, tags: JSON.stringify(tags) };
  return { row: { ...stored, json: renderContact(stored) }, tags };
}

async function tagCount(store: Store, tag: string): Promise<number> {
  const { rows } = await sql<{ n: number | string | null }>`select sum(n) as n from contact_counts
    where organization_id = ${ORG} and bucket = ${`tag:${tag}`}`.execute(store.db);
  return Number(rows[0]?.n ?? 0);
}

describe.each(storeKinds())('contacts with blank tags from an older release, on %s', (kind) => {
  it('lose those tags at the upgrade and can be written back as they are read', async () => {
    await withUpgradedApp(
      kind,
      '0016_contact_addresses',
      async (db) => {
        await db.insertInto('organizations').values({ id: ORG, name: 'Old', created_at: AT }).execute();
        await insertContacts(db, Object.keys(TAGS).map(oldContact));
      },
      async (t, { applied }) => {
        const store = t.ts.store;
        const { auth } = await t.newKey(undefined, ORG);
        const listed = (await t.call({ method: 'GET', url: '/api/v1/contacts?limit=100', auth })).json();
        const byEmail = Object.fromEntries(
          listed.contacts.map((c: { email: string; tags: string[] }) => [c.email.split('@')[0], c]),
        );
        // Read, change one field, write the whole contact back.
        for (const contact of listed.contacts) {
          const { createdAt: _, ...rest } = contact;
          const res = await t.call({
            method: 'PUT',
            url: '/api/v1/contacts',
            auth,
            payload: { ...rest, firstName: 'Bea' },
          });
          expect(res.statusCode, res.body).toBe(200);
          expect(res.json().contact).toEqual({ ...contact, firstName: 'Bea' });
        }

        // What the first read showed: the blank tags were gone already.
        expect(Object.fromEntries(Object.entries(byEmail).map(([k, c]) => [k, c.tags]))).toEqual({
          mixed: ['vip', 'b'],
          blanks: [],
          // Not blank: edge spaces and other marks are kept as sent (docs/behaviour.md).
          edges: [' vip ', 'a\u200b'],
          none: [],
        });

        const page = async (tag: string) =>
          (
            await t.call({ method: 'GET', url: `/api/v1/contacts?tag=${encodeURIComponent(tag)}`, auth })
          ).json();
        expect((await page(BLANK)).pagination.total).toBe(0);
        expect((await page('vip')).contacts.map((c: { email: string }) => c.email)).toEqual([
          'mixed@old.example',
        ]);
        for (const tag of [BLANK, '\t', '\u00a0\u3000', ' ']) expect(await tagCount(store, tag)).toBe(0);
        expect(await tagCount(store, 'vip')).toBe(1);
        expect(await tagCount(store, ' vip ')).toBe(1);
        const tagRows = await store.db.selectFrom('contact_tags').select('tag').execute();
        expect(tagRows.map((r) => r.tag).sort()).toEqual([' vip ', 'a\u200b', 'b', 'vip'].sort());
        expect(applied).toEqual(migrationsFrom('0017_no_blank_contact_tags'));
      },
    );
  });
});
