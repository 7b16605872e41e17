// Email substring reads on SQLite that many contacts match, through the index file's address chunks
// (address-chunks.ts, searched by chunk-functions.ts): a count, and a page. A chunk holds the
// contacts at or below the index's watermark; those above it (written or readdressed in the last moments)
// are read from contacts, and keys retired but not yet taken out of the chunks are left out, so every
// answer is exact. Each read is one statement, so one snapshot of both files.
import type { RawBuilder } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import type { Page } from '../paging.js';
import { contactJson } from '../contacts/contact-fields.js';
import { rowCount } from '../store/prepared.js';
import { type ReaderBeside, readerBeside } from './search-indexer.js';

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

/** How many addresses of the organisation's chunks in part `part` of `parts` (by id) hold `term`. */
function countInChunks(
  organizationId: string,
  term: string,
  held: RawBuilder<string>,
  part: number,
  parts: number,
): RawBuilder<number> {
  return sql<number>`(select coalesce(sum(coalesce(
        mailroom_chunk_count(ch.addresses, ch.first_key, ch.last_key, ${term}, ${held}),
        mailroom_chunk_count_except(ch.addresses, ch.entries, ${term}, ${held}))), 0)
      from search.address_chunks ch where ch.organization_id = ${organizationId} and ch.id % ${parts} = ${part})`;
}

/** What a count of the chunks takes: every contact holding the term, or the subscribed ones only. */
export interface ChunkCountOptions {
  /**
   * Subscribed contacts only: the chunks know addresses, not subscriptions, so the count takes out the
   * unsubscribed contacts that hold the term, counted in their own index (migration 0019: it holds each
   * address), in the statement that counts the tail, so from the same snapshot.
   */
  subscribed?: boolean;
}

/**
 * The tail's count, and for subscribed contacts only (ChunkCountOptions) less the unsubscribed ones: the
 * part of a count that reads contacts.
 */
function tailCount(
  organizationId: string,
  term: string,
  { subscribed }: ChunkCountOptions,
): RawBuilder<number> {
  const tailed = sql<number>`(select count(*) from (${tail(organizationId, term)}))`;
  if (!subscribed) return tailed;
  // The literal 1 matches the index's WHERE; a bound value would not.
  return sql<number>`(${tailed} - (select count(*) from contacts u
    where u.organization_id = ${organizationId} and u.unsubscribed = 1 and instr(u.email_lower, ${term}) > 0))`;
}

/**
 * The organisation's contacts whose address holds `term`, counted in the chunks: NULL while they are too
 * far behind the contacts (unready).
 */
function chunkCount(
  organizationId: string,
  term: string,
  options: ChunkCountOptions,
): RawBuilder<number | null> {
  return sql<number | null>`(select case when ${unready} then null else
      ${countInChunks(organizationId, term, stale(organizationId), 0, 1)}
      + ${tailCount(organizationId, term, options)}
    end)`;
}

interface CountRow extends HalfRow {
  n: number;
}

/**
 * chunkCount in two halves at once, the search thread counting one (as pageByChunksInTwo): two
 * statements, this thread's counting the tail too. Both find the same state and stale keys, or the
 * answer is ALONE (count in one statement); undefined when the chunks are too far behind (unready).
 */
export async function countByChunksInTwo(
  db: Executor,
  beside: ReaderBeside,
  organizationId: string,
  term: string,
  options: ChunkCountOptions = {},
): Promise<number | undefined | typeof ALONE> {
  const half = (i: number) => sql<CountRow>`with ${chunksNow(organizationId)}
    select s.unready, s.held, s.state, case when s.unready then 0 else
        ${countInChunks(organizationId, term, sql`s.held`, i, 2)}
        + ${i === 0 ? tailCount(organizationId, term, options) : sql`0`} end as n
    from s`;
  return inTwoHalves(db, beside, half, (mine, other) => Number(mine.n) + Number(other.n));
}

/**
 * chunkCount of an organisation of `size` contacts: from TWO_PARTS_FROM contacts in two halves at once
 * (countByChunksInTwo), else, or when the halves cannot answer together (ALONE), in one statement.
 * Undefined when the chunks are too far behind the contacts (unready).
 */
export async function countByChunks(
  db: Executor,
  organizationId: string,
  term: string,
  size: number,
  options: ChunkCountOptions = {},
): Promise<number | undefined> {
  const beside = size >= TWO_PARTS_FROM ? readerBeside(db) : undefined;
  if (beside) {
    const halves = await countByChunksInTwo(db, beside, organizationId, term, options);
    if (halves !== ALONE) return halves;
  }
  const { rows } = await sql<{
    n: number | null;
  }>`select ${chunkCount(organizationId, term, options)} as n`.execute(db);
  const n = rows[0]?.n;
  return n === null || n === undefined ? undefined : Number(n);
}

/** Names one page search to the chunk functions, which share it between two calls (chunk-functions.ts). */
let searches = 0;

/**
 * The chunks' part `part` of `parts` (by id), newest first, each searched by mailroom_chunk_page into
 * `{"n": matches, "keys": [...]}` (every match at or above the page's boundary in this part). Their LIMIT
 * keeps the ORDER BY, which SQLite may drop from a subquery that an aggregate reads; the order only saves
 * work: the page's matches are found first, and the older chunks are only counted. Whether the chunks can
 * be read, and their stale keys (only when they can be: they are many when not), are read once per
 * statement (`s`) through scalar subqueries, not a join, which makes SQLite copy every chunk into a
 * temporary table before the aggregate loops over them. A chunk's entries are read only when `wants` says
 * it may hold the page and `holds` finds the term in it (the CASEs are lazy): a term whose matches are all
 * old passes over most chunks before it has a page's worth, and searching one twice costs less than
 * reading its entries.
 */
function searchChunks(organizationId: string, term: string, reach: number, part: number, parts: number) {
  const nonce = ++searches;
  const s = chunksNow(organizationId);
  const agg = sql`agg as materialized (
      select mailroom_chunk_page(${nonce}, ch.addresses,
          case when mailroom_chunk_wants(${nonce}, ch.newest, ch.first_key, ch.last_key,
              (select held from s))
            then case when mailroom_chunk_holds(${nonce}, ch.addresses, ch.first_key, ${term})
              then (select entries from search.address_chunks e where e.id = ch.id) end end,
          ch.first_key, ch.last_key, ${term}, (select held from s), ${reach}) as r
        from (select id, addresses, newest, first_key, last_key from search.address_chunks
          where organization_id = ${organizationId} and id % ${parts} = ${part}
          order by first_key desc limit 1000000000) ch
        where not (select unready from s))`;
  return { s, agg };
}

/**
 * `s`: whether the chunks can be read (`unready`), the organisation's stale keys (`held`) and the index's
 * state, as of the statement.
 */
function chunksNow(organizationId: string): RawBuilder<unknown> {
  return sql`s as materialized (
      select u.unready, case when u.unready then '[]' else ${stale(organizationId)} end as held,
        ${indexState} as state
      from (select ${unready} as unready) u)`;
}

/**
 * What the chunks hold as of a statement: the index's watermark and the retired keys it took out (every
 * step that changes a chunk moves one), and the database it was built of ('' once it is laid out anew).
 * Two statements that find the same state and the same stale keys find the same chunks, with the same
 * matches in them.
 */
const indexState = sql<string>`(select source || ':' || indexed_to || ':' || retired_seen
    from search.search_state)`;

/**
 * The end of a statement that begins with `s` (searchChunks): the page of the organisation's contacts
 * whose address holds `term`, among `keys` (chunk matches as far as the page reaches) and the contacts
 * above the index's watermark (`t`, counted in `tail`), beside `columns`.
 */
function pageOfCandidates(
  organizationId: string,
  term: string,
  page: Page,
  keys: RawBuilder<unknown>,
  columns: RawBuilder<unknown>,
): RawBuilder<unknown> {
  const reach = page.page * page.limit;
  return sql`t as materialized (${tail(organizationId, term)}),
      candidates as (${keys} union all select k from t)
    select ${columns}, (select count(*) from t) as tail, p.r, ${contactJson('sqlite', 'c')} as json
    from (select 1) left join (
      select c.rowid as r, c.created_at, c.id
      from candidates cross join contacts c on c.search_key = candidates.k
      order by c.created_at desc, c.id desc
      limit ${rowCount(page.limit)} offset ${rowCount(reach - page.limit)}) p on 1
    left join contacts c on c.rowid = p.r
    order by p.created_at desc, p.id desc`;
}

interface PageRow {
  tail: number;
  r: number | null;
  json: string | null;
}

/** The contacts of a page's rows, and its total: the chunks' matches and the tail's. */
function pageOf(rows: PageRow[], chunkMatches: number) {
  return {
    contacts: rows.filter((r) => r.r !== null).map((r) => r.json!),
    total: chunkMatches + Number(rows[0]!.tail),
  };
}

/** Organisations from this size (contacts) have their chunks searched in two parts at once (pageByChunksInTwo). */
export const TWO_PARTS_FROM = 100_000;

/** How long the search thread gets to take up its part before this thread searches every chunk itself. */
const BESIDE_WAIT_MS = 10;

/**
 * A page of the organisation's contacts whose address holds `term`, and their total, from one pass over
 * its chunks, newest first: past the chunks that may hold the page, each is only counted. Undefined when
 * the chunks cannot say (too far behind the contacts, or too many contacts created in the same
 * millisecond as the page's last); then the caller walks. An organisation of `size` TWO_PARTS_FROM or
 * more has its chunks searched in two halves at once, one by the search thread (pageByChunksInTwo).
 */
export async function pageByChunks(
  db: Executor,
  organizationId: string,
  term: string,
  page: Page,
  size = 0,
): Promise<{ contacts: string[]; total: number } | undefined> {
  const beside = size >= TWO_PARTS_FROM ? readerBeside(db) : undefined;
  if (beside) {
    const found = await pageByChunksInTwo(db, beside, organizationId, term, page);
    if (found !== ALONE) return found;
  }
  // One statement, so one snapshot of both files. The sort carries rowids only; the page's rows are read
  // again to be rendered.
  const { s, agg } = searchChunks(organizationId, term, page.page * page.limit, 0, 1);
  const query = sql<PageRow & { unready: number; n: number | null }>`with ${s}, ${agg},
    ${pageOfCandidates(
      organizationId,
      term,
      page,
      sql`select value as k from agg, json_each(agg.r, '$.keys')`,
      sql`(select unready from s) as unready, (select json_extract(r, '$.n') from agg) as n`,
    )}`;
  const rows = (await query.execute(db)).rows;
  const first = rows[0];
  if (!first || first.unready || first.n === null) return undefined;
  return pageOf(rows, Number(first.n));
}

/** A search in two halves' answer when the chunks are to be searched in one statement instead. */
export const ALONE = Symbol('alone');

interface PartRow extends HalfRow {
  r: string | null;
}

/**
 * pageByChunks in two halves at once, on two cores: the search thread searches one (beside the event loop,
 * on its own connection), this thread the other, then picks the page out of both halves' matches and the
 * tail.
 *
 * Three statements in three snapshots, one exact answer: the thread holds the index file as it is from
 * before this thread's first statement until after the last, and each statement reads the index's state
 * and the organisation's stale keys (keys retired but not yet taken out of its chunks). Equal in all
 * three, the chunks' matches are the same in each; the last statement then counts the tail (contacts
 * above the watermark) and reads the page in its own snapshot, so the page and its total are both that
 * snapshot's. Anything else (another process indexing the same files, a contact deleted meanwhile, the
 * thread busy or gone) is ALONE: the caller searches in one statement.
 */
export async function pageByChunksInTwo(
  db: Executor,
  beside: ReaderBeside,
  organizationId: string,
  term: string,
  page: Page,
): Promise<{ contacts: string[]; total: number } | undefined | typeof ALONE> {
  const reach = page.page * page.limit;
  const part = (i: number) => {
    const { s, agg } = searchChunks(organizationId, term, reach, i, 2);
    return sql<PartRow>`with ${s}, ${agg}
      select s.unready, s.held, s.state, (select r from agg) as r from s`;
  };
  return inTwoHalves(db, beside, part, async (mine, other) => {
    if (mine.r === null || other.r === null) return ALONE;
    const halves = [JSON.parse(mine.r), JSON.parse(other.r)] as { n: number; keys: number[] }[];
    const query = sql<PageRow & HalfRow>`with ${chunksNow(organizationId)},
      ${pageOfCandidates(
        organizationId,
        term,
        page,
        sql`select value as k from json_each(${JSON.stringify(halves.flatMap((h) => h.keys))})`,
        sql`(select unready from s) as unready, (select held from s) as held, (select state from s) as state`,
      )}`;
    const rows = (await query.execute(db)).rows;
    if (!rows[0] || !sameChunks(rows[0], mine)) return ALONE;
    return pageOf(rows, halves[0]!.n + halves[1]!.n);
  });
}

/** What each statement of a search in two halves says of the chunks as it found them. */
interface HalfRow {
  unready: number;
  held: string;
  state: string;
}

/** Whether two statements found the same chunks, readable, with the same stale keys. */
function sameChunks(a: HalfRow, b: HalfRow): boolean {
  return !a.unready && !b.unready && a.held === b.held && a.state === b.state;
}

/**
 * Runs `half(1)` on the search thread and `half(0)` here, at once, then `finish` with both rows while the
 * thread still holds the index. ALONE when the thread does not take its half up, its read fails, or the
 * two found different chunks; undefined when the chunks are too far behind to be read (unready).
 */
async function inTwoHalves<R extends HalfRow, T>(
  db: Executor,
  beside: ReaderBeside,
  half: (i: number) => RawBuilder<R>,
  finish: (mine: R, other: R) => T | typeof ALONE | Promise<T | typeof ALONE>,
): Promise<T | undefined | typeof ALONE> {
  const theirs = half(1).compile(db);
  const read = await beside.readBeside(theirs.sql, theirs.parameters, BESIDE_WAIT_MS);
  if (!read) return ALONE;
  try {
    const mine = (await half(0).execute(db)).rows[0]!;
    if (mine.unready) return undefined;
    const other = ((await read.rows.catch(() => [])) as R[])[0];
    return other && sameChunks(other, mine) ? await finish(mine, other) : ALONE;
  } finally {
    read.release();
  }
}
