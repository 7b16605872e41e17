// Walks of an organisation's created_at index, newest first, testing each contact's address: how an email
// search finds a page among the newest contacts, or the page after a kept one, on both stores. One query
// shape, two dialects. And a kept page's contacts, read again by id.
import type { RawBuilder, SqlBool } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import { type DialectName, containsText, dialectOf } from '../store/dialect.js';
import type { Page } from '../paging.js';
import { rowCount } from '../store/prepared.js';
import { contactJson } from '../contacts/contact-fields.js';
import { organizationSize } from '../contacts/contact-counts.repository.js';
import { matchCase } from '../validation/addresses.js';

/**
 * The contacts that `matches` among the first `budget` (-1: all) of those `where` selects, walked newest
 * first, cut to `window` (`limit … offset …`): each as its API JSON text with its order keys, k1 and k2.
 * SQLite walks its created_at index, which holds each address (migration 0010), and reads only the page's
 * rows, so on SQLite `matches` may test `email_lower` alone; PostgreSQL renders only the matches.
 */
export function walkInOrder(
  dialect: DialectName,
  where: RawBuilder<SqlBool>,
  matches: RawBuilder<SqlBool>,
  budget: number,
  window: RawBuilder<unknown>,
): RawBuilder<{ json: string; k1: string; k2: string }> {
  return dialect === 'sqlite'
    ? sql`select ${contactJson('sqlite', 'c')} as json, p.created_at as k1, p.id as k2 from (
        select w.r, w.created_at, w.id from (
          select rowid as r, created_at, id, email_lower from contacts where ${where}
          order by created_at desc, id desc limit ${rowCount(budget)}) w
        where ${matches}
        order by w.created_at desc, w.id desc ${window}) p
      cross join contacts c on c.rowid = p.r`
    : sql`select ${contactJson('postgres', 'c')} as json, c.created_at as k1, c.id as k2 from (
        select * from contacts where ${where}
        order by created_at desc, id desc limit ${rowCount(budget)}) c
      where ${matches}
      order by c.created_at desc, c.id desc ${window}`;
}

/**
 * The page among the organisation's `budget` (-1: all) newest contacts that `matches`, in page order. The
 * caller knows how many rows a complete page has; fewer means the page lies further back (or a contact
 * just went).
 */
export async function walkNewest(
  db: Executor,
  dialect: DialectName,
  organizationId: string,
  matches: RawBuilder<SqlBool>,
  page: Page,
  budget: number,
): Promise<string[]> {
  const window = sql`limit ${rowCount(page.limit)} offset ${rowCount((page.page - 1) * page.limit)}`;
  return walkPage(
    db,
    walkInOrder(dialect, sql`organization_id = ${organizationId}`, matches, budget, window),
  );
}

/** The contacts a walk (walkInOrder) selects, as their API JSON text, in page order. */
export async function walkPage(
  db: Executor,
  walk: RawBuilder<{ json: string; k1: string; k2: string }>,
): Promise<string[]> {
  const { rows } = await sql<{
    json: string;
  }>`select json from (${walk}) p order by k1 desc, k2 desc`.execute(db);
  return rows.map((r) => r.json);
}

/** The longest walk pageAfterContact takes; a page that would need a longer one is found anew. */
const AFTER_WALK_MAX = 20_000;

/**
 * A page of an email search that starts `after.skip` matches after the contact `after.id`, the last of a
 * page kept at the same version of the addresses (so the same contacts match, in the same order): the
 * contacts older than it in page order, walked in the organisation's created_at index, at most twice what
 * matches spread through time would need (5,000 to AFTER_WALK_MAX contacts). Paging on, or jumping up to
 * PAGES_BACK pages ahead (email-search.ts), then costs a walk from where a kept page stopped, not a sort or
 * a pass over every match, whatever the term. Undefined unless the walk fills the page, or reaches the
 * oldest contact.
 */
export async function pageAfterContact(
  db: Executor,
  organizationId: string,
  term: string,
  after: { id: string; skip: number },
  page: Page,
  knownTotal: number | undefined,
): Promise<string[] | undefined> {
  const anchor = await db
    .selectFrom('contacts')
    .select('created_at')
    .where('organization_id', '=', organizationId)
    .where('id', '=', after.id)
    .executeTakeFirst();
  if (!anchor) return undefined;
  const size = await organizationSize(db, organizationId);
  const reach = after.skip + page.limit;
  const expected = knownTotal === undefined ? 0 : (reach * size) / Math.max(knownTotal, 1);
  // A walk expected to pass more than the longest one allowed would mostly be wasted.
  if (expected > AFTER_WALK_MAX) return undefined;
  const budget = Math.min(AFTER_WALK_MAX, Math.max(5_000, Math.ceil(2 * expected)));
  const older = sql<SqlBool>`organization_id = ${organizationId} and (created_at, id) < (${anchor.created_at}, ${after.id})`;
  const window = sql`limit ${rowCount(page.limit)} offset ${rowCount(after.skip)}`;
  const dialect = dialectOf(db);
  const matches = containsText(dialect, 'email_lower', matchCase(term));
  const pageQuery = walkInOrder(dialect, older, matches, budget, window);
  const walked = await walkPage(db, pageQuery);
  if (walked.length === page.limit) return walked;
  // A short page ends the search only if the walk reached the oldest contact, not its budget: the page is
  // read again with the contacts the walk passes counted, in one statement (one snapshot), which only a
  // last page costs. (The kept total cannot say so: it may have been counted after the kept page was read.)
  const { rows } = await sql<{ walked: number | string; json: string | null }>`select w.walked, p.json
    from (select count(*) as walked from (select 1 from contacts where ${older}
        order by created_at desc, id desc limit ${rowCount(budget)}) x) w
      left join (${pageQuery}) p on 1 = 1
    order by p.k1 desc, p.k2 desc`.execute(db);
  if (Number(rows[0]!.walked) >= budget) return undefined;
  return rows.flatMap((r) => (r.json === null ? [] : [r.json]));
}

/**
 * The organisation's contacts with these ids whose address still holds `term`, as their API JSON text, in
 * the order given; the others left out (deleted, or their address changed since the ids were found).
 */
export async function contactsInOrder(
  db: Executor,
  organizationId: string,
  ids: string[],
  term: string,
): Promise<string[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .selectFrom('contacts')
    .select(['contacts.id', contactJson(dialectOf(db)).as('json')])
    .where('contacts.organization_id', '=', organizationId)
    .where('contacts.id', 'in', ids)
    .where(containsText(dialectOf(db), 'contacts.email_lower', matchCase(term)))
    .execute();
  const byId = new Map(rows.map((r) => [r.id, r.json]));
  return ids.flatMap((id) => byId.get(id) ?? []);
}
