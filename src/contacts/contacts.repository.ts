import { type SqlBool, sql } from 'kysely';
import type { Executor } from '../store/store.js';
import type { ContactRow } from '../store/schema.js';
import { type DialectName, containsPattern, forUpdate } from '../store/dialect.js';
import type { Page } from '../http/schemas.js';

export interface ContactFilter {
  email?: string | undefined;
  tag?: string | undefined;
  unsubscribed?: boolean | undefined;
}

export async function insertContact(db: Executor, row: ContactRow, tags: string[]): Promise<void> {
  await db.insertInto('contacts').values(row).execute();
  await insertTags(db, row, tags);
}

async function insertTags(
  db: Executor,
  row: Pick<ContactRow, 'id' | 'organization_id' | 'created_at'>,
  tags: string[],
) {
  if (tags.length === 0) return;
  await db
    .insertInto('contact_tags')
    .values(
      tags.map((tag) => ({
        contact_id: row.id,
        organization_id: row.organization_id,
        tag,
        contact_created_at: row.created_at,
      })),
    )
    .execute();
}

export async function replaceTags(db: Executor, row: ContactRow, tags: string[]): Promise<void> {
  await db.deleteFrom('contact_tags').where('contact_id', '=', row.id).execute();
  await insertTags(db, row, tags);
}

export function findContactById(
  db: Executor,
  organizationId: string,
  id: string,
  lock?: DialectName,
): Promise<ContactRow | undefined> {
  const q = db
    .selectFrom('contacts')
    .selectAll()
    .where('id', '=', id)
    .where('organization_id', '=', organizationId);
  return (lock ? forUpdate(lock, q) : q).executeTakeFirst();
}

export function findContactByEmail(
  db: Executor,
  organizationId: string,
  email: string,
  lock?: DialectName,
): Promise<ContactRow | undefined> {
  const q = db
    .selectFrom('contacts')
    .selectAll()
    .where('organization_id', '=', organizationId)
    .where('email_lower', '=', email.toLowerCase());
  return (lock ? forUpdate(lock, q) : q).executeTakeFirst();
}

function filtered(db: Executor, organizationId: string, filter: ContactFilter) {
  let q = db.selectFrom('contacts').where('contacts.organization_id', '=', organizationId);
  if (filter.unsubscribed !== undefined)
    q = q.where('contacts.unsubscribed', '=', filter.unsubscribed ? 1 : 0);
  if (filter.email !== undefined && filter.email !== '') {
    // ESCAPE makes `%` and `_` in the filter literal; kysely has no LIKE … ESCAPE operator, hence raw SQL.
    const pattern = containsPattern(filter.email.toLowerCase());
    q = q.where(sql<SqlBool>`contacts.email_lower like ${pattern} escape '\\'`);
  }
  if (filter.tag !== undefined) {
    const tag = filter.tag;
    q = q.where('contacts.id', 'in', (eb) =>
      eb
        .selectFrom('contact_tags')
        .select('contact_tags.contact_id')
        .where('contact_tags.organization_id', '=', organizationId)
        .where('contact_tags.tag', '=', tag),
    );
  }
  return q;
}

export function pageContacts(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
): Promise<ContactRow[]> {
  return filtered(db, organizationId, filter)
    .selectAll('contacts')
    .orderBy('contacts.created_at', 'desc')
    .orderBy('contacts.id', 'desc')
    .limit(page.limit)
    .offset((page.page - 1) * page.limit)
    .execute();
}

export async function countContacts(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number> {
  const row = await filtered(db, organizationId, filter)
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function updateContact(db: Executor, id: string, changes: Partial<ContactRow>): Promise<void> {
  await db.updateTable('contacts').set(changes).where('id', '=', id).execute();
}

export async function deleteContact(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('contacts').where('id', '=', id).execute();
}
