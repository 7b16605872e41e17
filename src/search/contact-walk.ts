// Walks of an organisation's created_at index, newest first, testing each contact's address: how an email
// search finds a page among the newest contacts, or the page after a kept one
// (contacts/contacts.repository.ts), on both stores. One query shape, two dialects.
import { type RawBuilder, type SqlBool, sql } from 'kysely';
import type { Executor } from '../store/store.js';
import type { DialectName } from '../store/dialect.js';
import type { Page } from '../paging.js';
import { rowCount } from '../store/prepared.js';
import { contactJson } from '../contacts/contact-fields.js';

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
