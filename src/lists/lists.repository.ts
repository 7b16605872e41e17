import type { Executor } from '../store/store.js';
import type { ListRow } from '../store/schema.js';
import { type Page, offsetOf } from '../paging.js';
import { inWindow, pagedShape, prepared } from '../store/prepared.js';
import { dialectOf, rowLocator } from '../store/dialect.js';
import { pageTotal } from '../store/counts.js';

export async function insertList(db: Executor, row: Omit<ListRow, 'contact_count'>): Promise<void> {
  await db.insertInto('lists').values(row).execute();
}

// Columns named, not `*`: a named statement's columns must not change under it (named-statements.ts).
const LIST_FIELDS = [
  'id',
  'organization_id',
  'name',
  'description',
  'contact_count',
  'created_at',
  'updated_at',
] as const;

const listById = prepared((db, organizationId: string, id: string) =>
  db
    .selectFrom('lists')
    .select(LIST_FIELDS)
    .where('id', '=', id)
    .where('organization_id', '=', organizationId),
);

export function findList(db: Executor, organizationId: string, id: string): Promise<ListRow | undefined> {
  return listById.first(db, organizationId, id);
}

const listCount = (db: Executor, organizationId: string) =>
  db
    .selectFrom('lists')
    .select((eb) => eb.fn.countAll<number | string>().as('n'))
    .where('organization_id', '=', organizationId);

// Newest first, compiled once: the page is a prepared shape like the lookup by id. Each row carries the
// organisation's count of lists (uncorrelated, so read once a statement): PostgreSQL answers a page and its
// total in one round trip, from one snapshot, as the contacts and emails pages do (store/counts.ts).
const listsPage = pagedShape((db, window, organizationId: string) =>
  inWindow(
    db
      .selectFrom('lists')
      .select(LIST_FIELDS)
      .select(listCount(db, organizationId).as('total'))
      .where('organization_id', '=', organizationId)
      .orderBy('created_at', 'desc')
      .orderBy('id', 'desc'),
    window,
  ),
);

/** A page of lists, and their total when the page has rows (an empty one carries none: countLists). */
export async function pageLists(
  db: Executor,
  organizationId: string,
  page: Page,
): Promise<{ rows: ListRow[]; total: number | undefined }> {
  const rows = await listsPage.all(db, page.limit, offsetOf(page), organizationId);
  return { rows, total: pageTotal(rows) };
}

export async function countLists(db: Executor, organizationId: string): Promise<number> {
  const row = await listCount(db, organizationId).executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function updateList(
  db: Executor,
  organizationId: string,
  id: string,
  changes: { name?: string; description?: string | null; updated_at: string },
): Promise<boolean> {
  const result = await db
    .updateTable('lists')
    .set(changes)
    .where('id', '=', id)
    .where('organization_id', '=', organizationId)
    .executeTakeFirst();
  return Number(result.numUpdatedRows) > 0;
}

export async function deleteList(db: Executor, organizationId: string, id: string): Promise<boolean> {
  const result = await db
    .deleteFrom('lists')
    .where('id', '=', id)
    .where('organization_id', '=', organizationId)
    .executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

/** Ids among `contactIds` that are contacts of the organisation. */
export async function existingContactIds(
  db: Executor,
  organizationId: string,
  contactIds: string[],
): Promise<string[]> {
  // Looked up by primary key alone and filtered here: with both conditions in SQL, SQLite may walk the
  // organisation's index (every contact it has) instead of probing 100 keys.
  let query = db.selectFrom('contacts').select(['id', 'organization_id']).where('id', 'in', contactIds);
  // On PostgreSQL the contacts found stay until the caller commits (FOR KEY SHARE blocks their deletion;
  // taken in id order, as against a transaction deleting several); one deleted meanwhile is not found.
  // Another organisation's contacts among the ids are locked too, harmlessly, and dropped below.
  // Otherwise each deletion committed between this read and the memberships' insert failed the insert's
  // foreign key, and a request adding contacts that were being deleted ran out of retries (a 500).
  if (dialectOf(db) === 'postgres') query = query.orderBy('id').forKeyShare();
  const rows = await query.execute();
  return rows.filter((r) => r.organization_id === organizationId).map((r) => r.id);
}

/** Inserts memberships that do not exist yet; returns how many were new. */
export async function addMembers(
  db: Executor,
  listId: string,
  contactIds: string[],
  at: string,
): Promise<number> {
  if (contactIds.length === 0) return 0;
  const result = await db
    .insertInto('list_members')
    .values(contactIds.map((contact_id) => ({ list_id: listId, contact_id, created_at: at })))
    .onConflict((oc) => oc.columns(['list_id', 'contact_id']).doNothing())
    .executeTakeFirst();
  return Number(result.numInsertedOrUpdatedRows ?? 0);
}

/**
 * Removes up to `limit` of the list's memberships if the list is the organisation's; how many it removed.
 * What deleting a list does before deleting it, a slice a commit (ListsService.delete). Found and deleted
 * by where they are stored: probing the primary key for each of 2,000 contact ids took 5 times as long.
 */
export async function removeSomeMembers(
  db: Executor,
  organizationId: string,
  listId: string,
  limit: number,
): Promise<number> {
  const at = rowLocator(dialectOf(db));
  const slice = db
    .selectFrom('list_members')
    .select(at.as('at'))
    .where('list_id', '=', listId)
    .where(({ exists, selectFrom }) =>
      exists(
        selectFrom('lists')
          .select('id')
          .where('id', '=', listId)
          .where('organization_id', '=', organizationId),
      ),
    )
    .limit(limit);
  const result = await db
    .deleteFrom('list_members')
    .where((eb) => eb(at, 'in', slice))
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}

export async function removeMembers(db: Executor, listId: string, contactIds: string[]): Promise<number> {
  const result = await db
    .deleteFrom('list_members')
    .where('list_id', '=', listId)
    .where('contact_id', 'in', contactIds)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
