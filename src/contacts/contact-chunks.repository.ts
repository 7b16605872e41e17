// Email substring reads on SQLite that many contacts match, through the index file's address chunks
// (store/address-chunks.ts, searched by store/chunk-functions.ts): a count, and a page. A chunk holds the
// contacts at or below the index's watermark; those above it (written or readdressed in the last moments)
// are read from contacts, and keys retired but not yet taken out of the chunks are left out, so every
// answer is exact. Each read is one statement, so one snapshot of both files.
import { type RawBuilder, sql } from 'kysely';
import type { Executor } from '../store/store.js';
import type { Page } from '../paging.js';
import { contactJson } from './contact-fields.js';
import { rowCount } from '../store/prepared.js';

/** Keys retired and not yet taken out of the chunks, above which these reads decline (a big delete). */
const STALE_MAX = 10_000;
/**
 * Keys issued above the index's watermark, above which these reads decline: the contacts above it are
 * looked up by key, in every organisation (the index being built, after an upgrade or a repair).
 */
const BEHIND_MAX = 10_000;

const staleKeys = sql`from contacts_search_retired where id > (select retired_seen from search.search_state)`;
/** Whether the chunks are too far behind the contacts to be read (the caller scans instead). */
const unready = sql`((select count(*) ${staleKeys}) > ${STALE_MAX}
  or coalesce((select max(search_key) from contacts), 0) - (select indexed_to from search.search_state)
    > ${BEHIND_MAX})`;

/**
 * The stale keys held in the organisation's chunks, as a JSON array for the chunk functions: those of
 * other organisations would only make its chunks be read address by address.
 */
function stale(organizationId: string): RawBuilder<string> {
  return sql`(select json_group_array(r.search_key) from contacts_search_retired r
    cross join search.address_chunk_keys k on k.key = r.search_key
    cross join search.address_chunks held on held.id = k.chunk
    where r.id > (select retired_seen from search.search_state) and held.organization_id = ${organizationId})`;
}

/** Contacts of the organisation above the index's watermark whose address holds the term. */
function tail(organizationId: string, term: string): RawBuilder<{ k: number }> {
  // `+`: the search_key index, not the organisation's, finds the few contacts above the watermark.
  return sql`select search_key as k from contacts c
    where c.search_key > (select indexed_to from search.search_state)
      and +c.organization_id = ${organizationId} and instr(c.email_lower, ${term}) > 0`;
}

/**
 * The organisation's contacts whose address holds `term`, counted in the chunks: NULL while they are too
 * far behind the contacts (unready).
 */
export function chunkCount(organizationId: string, term: string): RawBuilder<number | null> {
  const held = stale(organizationId);
  return sql<number | null>`(select case when ${unready} then null else
      (select coalesce(sum(coalesce(
          mailroom_chunk_count(ch.addresses, ch.first_key, ch.last_key, ${term}, ${held}),
          mailroom_chunk_count_except(ch.addresses, ch.entries, ${term}, ${held}))), 0)
        from search.address_chunks ch where ch.organization_id = ${organizationId})
      + (select count(*) from (${tail(organizationId, term)}))
    end)`;
}

/** Names one page search to the chunk functions, which share it between two calls (chunk-functions.ts). */
let searches = 0;

/**
 * A page of the organisation's contacts whose address holds `term`, and their total, from one pass over
 * its chunks, newest first: past the chunks that may hold the page, each is only counted. Undefined when
 * the chunks cannot say (too far behind the contacts, or too many contacts created in the same
 * millisecond as the page's last); then the caller walks.
 */
export async function pageByChunks(
  db: Executor,
  organizationId: string,
  term: string,
  page: Page,
): Promise<{ contacts: string[]; total: number } | undefined> {
  const nonce = ++searches;
  const reach = page.page * page.limit;
  // The chunks newest first (their LIMIT keeps the ORDER BY, which SQLite may drop from a subquery that
  // an aggregate reads; the order only saves work): the page's matches are found first, and the older
  // chunks are only counted. The sort carries rowids only; the page's rows are read again to be rendered.
  // Whether the chunks can be read, and their stale keys, once for the statement (the stale keys only
  // when it can: they are many when it cannot), read as scalar subqueries: with the chunks the only
  // table the aggregate loops over, SQLite hands them over as its index yields them, where a join made
  // it copy all of them into a temporary table first (at a million contacts, 25 ms of a 50 ms search).
  // Each chunk's entries are read only when `wants` says it may hold the page and `holds` finds the term
  // in it (the CASEs are lazy): a term whose matches are all old passes over most chunks before it has a
  // page's worth, and reading each one's entries cost more than searching it again.
  const query = sql<{ unready: number; total: number | null; r: number | null; json: string | null }>`
    with s as materialized (
      select u.unready, case when u.unready then '[]' else ${stale(organizationId)} end as held
      from (select ${unready} as unready) u),
    agg as materialized (
      select mailroom_chunk_page(${nonce}, ch.addresses,
          case when mailroom_chunk_wants(${nonce}, ch.newest, ch.first_key, ch.last_key,
              (select held from s))
            then case when mailroom_chunk_holds(${nonce}, ch.addresses, ch.first_key, ${term})
              then (select entries from search.address_chunks e where e.id = ch.id) end end,
          ch.first_key, ch.last_key, ${term}, (select held from s), ${reach}) as r
        from (select id, addresses, newest, first_key, last_key from search.address_chunks
          where organization_id = ${organizationId} order by first_key desc limit 1000000000) ch
        where not (select unready from s)),
      t as materialized (${tail(organizationId, term)}),
      candidates as (select value as k from agg, json_each(agg.r, '$.keys') union all select k from t)
    select (select unready from s) as unready,
      (select json_extract(r, '$.n') from agg) + (select count(*) from t) as total, p.r,
      ${contactJson('sqlite', 'c')} as json
    from (select 1) left join (
      select c.rowid as r, c.created_at, c.id
      from candidates cross join contacts c on c.search_key = candidates.k
      order by c.created_at desc, c.id desc
      limit ${rowCount(page.limit)} offset ${rowCount(reach - page.limit)}) p on 1
    left join contacts c on c.rowid = p.r
    order by p.created_at desc, p.id desc`;
  const rows = (await query.execute(db)).rows;
  const first = rows[0];
  if (!first || first.unready || first.total === null) return undefined;
  return { contacts: rows.filter((r) => r.r !== null).map((r) => r.json!), total: Number(first.total) };
}

/**
 * The page found by walking at most `budget` (-1: all) of the organisation's newest contacts, testing each address
 * in its created_at index (migration 0010): every match among them, in page order. The caller knows how
 * many rows a complete page has; fewer means the page lies further back (or a contact just went).
 */
export async function walkNewest(
  db: Executor,
  organizationId: string,
  term: string,
  page: Page,
  budget: number,
): Promise<string[]> {
  const query = sql<{ json: string }>`select ${contactJson('sqlite', 'c')} as json from (
      select w.r, w.created_at, w.id from (
        select rowid as r, created_at, id, email_lower from contacts
        where organization_id = ${organizationId}
        order by created_at desc, id desc limit ${rowCount(budget)}) w
      where instr(w.email_lower, ${term}) > 0
      order by w.created_at desc, w.id desc
      limit ${rowCount(page.limit)} offset ${rowCount((page.page - 1) * page.limit)}) p
    cross join contacts c on c.rowid = p.r
    order by p.created_at desc, p.id desc`;
  return (await query.execute(db)).rows.map((r) => r.json);
}
