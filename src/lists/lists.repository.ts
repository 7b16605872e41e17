import type { ExpressionBuilder } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import type { Database, ListRow } from '../store/schema.js';
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

/** Memberships of the list only if it is the organisation's (another organisation's list loses nothing). */
const ofOrganizationList =
  (listId: string, organizationId: string) => (eb: ExpressionBuilder<Database, 'list_members'>) =>
    eb.exists(
      eb
        .selectFrom('lists')
        .select('id')
        .where('id', '=', listId)
        .where('organization_id', '=', organizationId),
    );

/**
 * PostgreSQL walks a list's members in contact id order on the primary key's index for the rest of the
 * transaction: without fresh planner statistics (a list filled a moment ago) it would read every remaining
 * member by bitmap and sort them for each slice, so a delete would grow with the square of the list.
 */
async function walkMembersByIndex(db: Executor): Promise<void> {
  await sql`set local enable_bitmapscan = off`.execute(db);
  await sql`set local enable_sort = off`.execute(db);
}

/**
 * Passes of deleteList's lock on the members left, at most: each locks those committed since the one
 * before (READ COMMITTED: a statement sees what was committed when it began).
 */
const LOCK_PASSES = 4;

export async function deleteList(db: Executor, organizationId: string, id: string): Promise<boolean> {
  if (dialectOf(db) === 'postgres') {
    // The members left are locked first, in contact id order, then the list's row: the order in which a
    // removal (or a slice of this delete) locks members and then the list's row for its contactCount;
    // deleting the list first would cascade the other way round and deadlock with removals. Members added
    // while a pass waited are locked by the next pass, until one finds no more, or the cascade would meet
    // them after the list's row. Counted, not sent back: the members left can be many.
    await walkMembersByIndex(db);
    const left = db
      .selectFrom('list_members')
      .select('contact_id')
      .where('list_id', '=', id)
      .where(ofOrganizationList(id, organizationId))
      .orderBy('contact_id')
      .forUpdate();
    const lockLeft = sql<{ n: number | string }>`select count(*) as n from (${left}) as l`;
    let locked = -1;
    for (let pass = 0; pass < LOCK_PASSES; pass++) {
      const n = Number((await lockLeft.execute(db)).rows[0]!.n);
      if (n === locked) break;
      locked = n;
    }
  }
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
  // taken in id order, so that a transaction locking several in that order cannot deadlock with it); one deleted meanwhile is not found.
  // Another organisation's contacts among the ids are locked too, harmlessly, and dropped below. Unlocked, a
  // deletion committed before the memberships' insert would fail its foreign key, and a request adding
  // contacts being deleted could run out of retries (a 500).
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
 * Removes up to `limit` of the list's memberships if the list is the organisation's: a slice of a list's
 * delete, one a commit (ListsService.delete). Returns how many, and on PostgreSQL the cursor to pass as
 * `after` next. SQLite (one writer) finds and deletes a slice by where its rows are stored, far faster than
 * probing the primary key per contact. PostgreSQL takes the next `limit` members in contact id order, locked
 * in that order as removeMembers locks them: locked as stored, a slice and a removal could each hold a
 * membership the other waits for, and deadlock.
 */
export async function removeSomeMembers(
  db: Executor,
  organizationId: string,
  listId: string,
  limit: number,
  after?: string,
): Promise<{ removed: number; last?: string }> {
  const ours = ofOrganizationList(listId, organizationId);
  const dialect = dialectOf(db);
  const at = rowLocator(dialect);
  if (dialect === 'sqlite') {
    const slice = db
      .selectFrom('list_members')
      .select(at.as('at'))
      .where('list_id', '=', listId)
      .where(ours)
      .limit(limit);
    const result = await db.deleteFrom('list_members').where(at, 'in', slice).executeTakeFirst();
    return { removed: Number(result.numDeletedRows) };
  }
  await walkMembersByIndex(db);
  let slice = db
    .selectFrom('list_members')
    .select(at.as('at'))
    .where('list_id', '=', listId)
    .where(ours)
    .orderBy('contact_id')
    .limit(limit)
    .forUpdate();
  if (after !== undefined) slice = slice.where('contact_id', '>', after);
  const { rows } = await sql<{ removed: number | string; last: string | null }>`
    with gone as (${db.deleteFrom('list_members').where(at, 'in', slice).returning('contact_id')})
    select count(*) as removed, max(contact_id) as last from gone`.execute(db);
  const row = rows[0]!;
  return { removed: Number(row.removed), last: row.last ?? after };
}

export async function removeMembers(db: Executor, listId: string, contactIds: string[]): Promise<number> {
  if (dialectOf(db) === 'postgres') {
    // One statement that deletes what it locked, in contact id order, as a list's delete locks its members
    // (removeSomeMembers, deleteList): deleted by a second statement, members added in between would be
    // deleted too, locked as stored, and deadlock with a list's delete. Found from the ids, an index probe
    // each: asked for in contact id order off the index, PostgreSQL with stale statistics may walk every
    // member of a large list to pick out the hundred.
    const locked = sql`(select m.ctid from unnest(${contactIds}::text[]) as ids(id)
      join list_members m on m.list_id = ${listId} and m.contact_id = ids.id
      order by ids.id for update of m)`;
    const result = await db
      .deleteFrom('list_members')
      .where(rowLocator('postgres'), 'in', locked)
      .executeTakeFirst();
    return Number(result.numDeletedRows);
  }
  const result = await db
    .deleteFrom('list_members')
    .where('list_id', '=', listId)
    .where('contact_id', 'in', contactIds)
    .executeTakeFirst();
  return Number(result.numDeletedRows);
}
