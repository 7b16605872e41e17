// Fills migration 0003's trigram index (SQLite) with the contacts above its watermark (migration 0006), in
// bulk: the SQLite store runs this every SEARCH_INDEX_EVERY_MS while contacts wait. Until then a search
// reads the contacts above the watermark directly (contact-search.repository.ts), so what it finds never
// depends on whether this has run.
import { sql } from 'kysely';
import { rowCount } from './prepared.js';
import type { Executor } from './store.js';

/** How many contacts one run indexes: large enough to be cheap per contact, small enough to be brief. */
export const INDEX_BATCH = 1000;

/** Indexes up to `limit` contacts above the watermark, in key order, and moves it; returns how many. */
export async function indexPendingContacts(trx: Executor, limit = INDEX_BATCH): Promise<number> {
  const { rows } = await sql<{ from_key: number; to_key: number | null; n: number }>`
    select (select indexed_to from contacts_search_state) as from_key, max(search_key) as to_key,
      count(*) as n
    from (select search_key from contacts
      where search_key > (select indexed_to from contacts_search_state)
      order by search_key limit ${rowCount(limit)})`.execute(trx);
  const batch = rows[0];
  if (!batch || batch.to_key === null || batch.n === 0) return 0;
  await sql`insert into contacts_search (rowid, email_lower)
    select search_key, email_lower from contacts
    where search_key > ${batch.from_key} and search_key <= ${batch.to_key}`.execute(trx);
  await sql`update contacts_search_state set indexed_to = ${batch.to_key}`.execute(trx);
  return Number(batch.n);
}

/** Whether any contact waits to be indexed; a read, for deciding whether to take the write lock at all. */
export async function hasPendingContacts(db: Executor): Promise<boolean> {
  const { rows } = await sql<{ pending: number }>`select exists (select 1 from contacts
      where search_key > (select indexed_to from contacts_search_state)) as pending`.execute(db);
  return Number(rows[0]?.pending ?? 0) === 1;
}
