// Email substring search on SQLite through the trigram index in its own file (search-file.ts,
// attached to the store's reader as `search`, keyed by contacts.search_key), with the contacts not in it yet
// (above its watermark: written or readdressed in the last moments) read from contacts directly, so the
// answer is exact either way. The index may still hold keys no contact has any more (deleted or
// readdressed since); the join to contacts drops them. The index finds every match fast, but a match then
// costs a row lookup and a place in the sort; when most contacts match, walking the organisation's
// created_at index (the caller's plain path) finds a page after a few rows instead. So: count the
// matches up to a cap first, and take the index only when it is the cheaper way. Many matches are
// counted, and paged when a walk would be long (matches that are all old), through the index file's
// address chunks instead (contact-chunks.repository.ts). undefined means "use the plain path".
import type { RawBuilder } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import { containsText, dialectOf, ftsPhrase, isTrigramSearchable } from '../store/dialect.js';
import { isChunkSearchable } from './address-chunks.js';
import { countByChunks, pageByChunks } from './contact-chunks.repository.js';
import type { Page } from '../paging.js';
import { addressChanges, organizationSize, tagSize } from '../contacts/contact-counts.repository.js';
import { contactJson } from '../contacts/contact-fields.js';
import { rowCount } from '../store/prepared.js';
import { isUnreadable } from './search-file.js';
import { ISSUED_KEY_SQL, ISSUED_RETIRED_SQL } from './search-index.js';
import { walkNewest } from './contact-walk.js';
import type { ContactFilter } from '../contacts/contacts.repository.js';
import { matchCase } from '../validation/addresses.js';

/**
 * One match read through the index costs about as much as this many contacts walked in created_at
 * order or scanned in the email index.
 */
const MATCH_COST = 15;
/** A pass over the organisation's address chunks costs about this many contacts walked, per contact. */
const CHUNK_COST = 0.4;

/**
 * With a tag, the plain path walks the tag's contacts, at most all of them, each looked up at about the
 * cost of a match read through the index (a million contacts: 2–5 µs a contact with the tag, 1–4 µs a
 * match): past as many matches as the tag has contacts, the index costs more. So a tag no contact has
 * takes the index only for a term none holds. Without a tag, no bound.
 */
async function taggedCap(db: Executor, organizationId: string, filter: ContactFilter): Promise<number> {
  if (filter.tag === undefined) return Infinity;
  return tagSize(db, organizationId, filter.tag);
}

/**
 * Keys of every contact (all organisations) whose address holds the term, at most `limit` of them: from
 * the index, and from the few contacts above its watermark, which it does not hold yet. Some may be keys
 * no contact holds any more; a join to contacts drops them.
 */
function matchingKeys(term: string, limit: number): RawBuilder<{ k: number }> {
  const phrase = ftsPhrase(term);
  return sql<{ k: number }>`select rowid as k from search.contacts_search
    where contacts_search match ${phrase}
    union all
    select search_key from contacts
    where search_key > (select indexed_to from search.search_state) and instr(email_lower, ${term}) > 0
    limit ${rowCount(limit)}`;
}

/**
 * The index's rows, or undefined (the plain path) when its file is damaged: searches go on, scanning,
 * while the search thread lays it out anew (search-thread.ts).
 */
async function unlessDamaged<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    if (isUnreadable(err)) return undefined;
    throw err;
  }
}

/** The contact conditions besides the substring: its organisation, and subscription state and tag if asked. */
function contactConditions(organizationId: string, filter: ContactFilter): RawBuilder<unknown> {
  const unsubscribed =
    filter.unsubscribed === undefined ? sql`` : sql`and c.unsubscribed = ${filter.unsubscribed ? 1 : 0}`;
  const tag =
    filter.tag === undefined
      ? sql``
      : sql`and exists (select 1 from contact_tags t where t.contact_id = c.id and t.tag = ${filter.tag})`;
  return sql`c.organization_id = ${organizationId} ${unsubscribed} ${tag}`;
}

/**
 * A page through the FTS5 index, with the filter's total, when at most `cap` contacts (of every
 * organisation) hold the term; undefined when more do.
 */
async function pageByTrigrams(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  term: string,
  page: Page,
  cap: number,
): Promise<{ contacts: string[]; total?: number } | undefined> {
  const reach = page.page * page.limit;
  // One statement, so one snapshot: an address change gives the contact a new key, and a second
  // statement could find neither its old key (gone) nor its new one (not collected). The keys are
  // collected once (materialized), and past the cap the join is never run: a WHERE term on no table of
  // the query is tested before its loops. The sort carries only rowids (whole rows are read again for
  // the one page), and counts every match on the way, so the caller need not count them again; a page
  // past the end learns no total.
  const query = sql<{
    keys: number;
    r: number | null;
    match_total: number | null;
    json: string | null;
  }>`with m as materialized (${matchingKeys(term, cap + 1)}),
      n as (select count(*) as keys from m)
    select n.keys, p.r, p.match_total, ${contactJson('sqlite', 'c')} as json
    from n left join (
      select c.rowid as r, count(*) over () as match_total,
        row_number() over (order by c.created_at desc, c.id desc) as ord
      from m cross join contacts c on c.search_key = m.k
      where (select keys from n) <= ${cap} and ${contactConditions(organizationId, filter)}
      order by c.created_at desc, c.id desc
      limit ${rowCount(page.limit)} offset ${rowCount(reach - page.limit)}) p on 1
    left join contacts c on c.rowid = p.r
    order by p.ord`;
  const { rows } = await query.execute(db);
  const keys = rows[0]?.keys ?? 0;
  if (keys > cap) return undefined;
  if (keys === 0) return { contacts: [], total: 0 };
  const found = rows.filter((r) => r.r !== null);
  return { contacts: found.map((r) => r.json!), total: found[0]?.match_total ?? undefined };
}

/**
 * A walk expected to test more contacts than this is left to the caller's plain walk, which costs a third
 * less per contact than a walk with a budget: a deep page of an even term. Up to it, a walk with a budget of
 * twice that goes first, and the matches are looked up when it falls short: matches all older than the
 * rest (an import) would make a plain walk pass every newer contact.
 */
const LONG_WALK = 100_000;

/** The deepest page (offset + limit) read from the chunks without a known total. */
const DEEP_REACH = 2_000;

export async function pageByEmailIndex(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
  knownTotal?: number,
): Promise<{ contacts: string[]; total?: number } | undefined> {
  if (dialectOf(db) !== 'sqlite' || filter.email === undefined) return undefined;
  const term = matchCase(filter.email);
  const size = await organizationSize(db, organizationId);
  const reach = page.page * page.limit;
  // A page past the organisation's contacts holds none of them. Asked of the index, whose keys are every
  // organisation's, a huge page number would raise the cap below to read other organisations' matches, on
  // the event loop, for nothing.
  if (reach - page.limit >= size) return { contacts: [] };
  return unlessDamaged(async () => {
    if (isTrigramSearchable(term)) {
      // A walk reads about reach × size / m contacts to fill the page; the index m matches, at MATCH_COST
      // each. The two cost the same at this cap. With a tag, fewer: the tag's walk (taggedCap).
      const cap = Math.min(
        Math.floor(Math.sqrt((reach * size) / MATCH_COST)),
        await taggedCap(db, organizationId, filter),
      );
      // The organisation's matches already known (a kept total) and too many: no probe for them.
      if (knownTotal === undefined || knownTotal <= cap) {
        const found = await pageByTrigrams(db, organizationId, filter, term, page, cap);
        if (found) return found;
      }
    }
    // Many matches, or a term too short for the index. The chunks know addresses only: with a
    // subscription or a tag beside the term, the caller walks (a tag's contacts, each looked up).
    if (filter.unsubscribed !== undefined || filter.tag !== undefined || !isChunkSearchable(term)) {
      return undefined;
    }
    if (knownTotal !== undefined) {
      const offset = reach - page.limit;
      if (offset >= knownTotal) return { contacts: [], total: knownTotal };
      // Matches spread through time fill a page after walking about this many of the newest contacts.
      const expected = (reach * size) / Math.max(knownTotal, 1);
      if (expected > LONG_WALK) return undefined;
      // Matches that are all old (a domain imported long ago) would make the walk long: past twice what
      // it should take (and at least a few thousand contacts, which cost little), the chunks find them.
      const budget = Math.max(5_000, Math.ceil(2 * expected));
      // A budget past the organisation's size walks all of it (no limit: a contact may have come since).
      const whole = budget >= size;
      const matches = containsText('sqlite', 'email_lower', term);
      const walked = await walkNewest(db, 'sqlite', organizationId, matches, page, whole ? -1 : budget);
      // A full page is the page; a short one is, only when the walk went through every contact.
      if (walked.length === page.limit || whole) return { contacts: walked };
      // The matches are old. Few of them are read through the index for less than a pass over the chunks.
      if (isTrigramSearchable(term) && knownTotal * MATCH_COST < size * CHUNK_COST) {
        const found = await pageByTrigrams(db, organizationId, filter, term, page, 2 * knownTotal);
        if (found) return { contacts: found.contacts };
      }
    }
    // A deep page (or one past the end) would carry every match before it out of the chunks: the
    // caller's walk, and a count, cost less.
    if (knownTotal === undefined && reach > DEEP_REACH) return undefined;
    return pageByChunks(db, organizationId, term, page, size);
  });
}

export async function countByEmailIndex(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  if (dialectOf(db) !== 'sqlite' || filter.email === undefined) return undefined;
  const term = matchCase(filter.email);
  const size = await organizationSize(db, organizationId);
  // The chunks know addresses only: with a subscription filter beside the term, the FTS5 count, or the
  // chunks' count of the term less its unsubscribed contacts (for subscribed ones), or a scan; with a tag,
  // the FTS5 count or a walk of the tag's contacts.
  const chunks = filter.unsubscribed !== true && filter.tag === undefined && isChunkSearchable(term);
  // Read around as a page is (pageByEmailIndex): once a read finds the file damaged, the caller scans.
  return unlessDamaged(async () => {
    if (isTrigramSearchable(term)) {
      // Few matches are counted through the FTS5 index and a join: up to 1 % of the organisation, where
      // that is clearly cheaper than reading every chunk, and with a tag, than its walk (taggedCap). One
      // statement, so the index is searched once; NULL for more.
      const cap = Math.min(Math.floor(size / 100), await taggedCap(db, organizationId, filter));
      const { rows } = await sql<{ n: number | null }>`with m as materialized (${matchingKeys(term, cap + 1)})
        select case when (select count(*) from m) > ${cap} then null else (
          select count(*) from m cross join contacts c on c.search_key = m.k
          where ${contactConditions(organizationId, filter)}) end as n`.execute(db);
      const few = rows[0]?.n;
      if (few !== null && few !== undefined) return Number(few);
    }
    if (!chunks) return undefined;
    return countByChunks(db, organizationId, term, size, { subscribed: filter.unsubscribed === false });
  });
}

/**
 * A value that changes whenever a contact of the organisation is added, deleted or readdressed, and never
 * comes back. A count of an email filter alone depends on nothing else, so it holds while this does.
 * SQLite: the highest search key issued and the highest retired id (migration 0009), for every
 * organisation at once. PostgreSQL: the organisation's count of such changes (migration 0011).
 */
export async function addressesVersion(db: Executor, organizationId: string): Promise<string | undefined> {
  if (dialectOf(db) === 'postgres') return String(await addressChanges(db, organizationId));
  const { rows } = await sql<{ v: string }>`select
      (select ${sql.raw(ISSUED_KEY_SQL)} from contacts_search_state) || ':' || ${sql.raw(ISSUED_RETIRED_SQL)} as v`.execute(
    db,
  );
  return rows[0]?.v;
}
