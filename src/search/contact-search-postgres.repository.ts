// Email substring pages on PostgreSQL. The caller's plain query walks the organisation's created_at index
// newest first, testing each address: a page after a few rows when the matches are spread through time,
// but every contact before them, on every page, when they are all old (a domain imported long ago). So the
// walk here has a budget, about twice what spread matches need; when it does not fill the page, the page
// is sorted out of the matches the trigram index finds and they are counted, in one statement if it can
// within a few ms, else counted in the address chunks and then sorted, unless there is none to find. A
// deep page of a term many contacts hold stays with the plain walk, which costs less than sorting every
// match. undefined (or no `contacts`, beside a total counted first) means "use the plain walk".
import type { RawBuilder, SqlBool } from 'kysely';
import { sql } from '../store/kysely.js';
import { walkNewest } from './contact-walk.js';
import type { Executor } from '../store/store.js';
import { containsText, isStatementCanceled, isTrigramSearchable } from '../store/dialect.js';
import type { Page } from '../paging.js';
import { rowCount } from '../store/prepared.js';
import { organizationSize } from '../contacts/contact-counts.repository.js';
import type { ContactFilter } from '../contacts/contacts.repository.js';
import { contactJson } from '../contacts/contact-fields.js';
import { END, isChunkSearchable } from './address-chunks.js';
import { CHUNKS_TABLE } from './address-chunks-postgres.js';
import { inOneSnapshot } from '../store/snapshot.js';
import { matchCase } from '../validation/addresses.js';

/** Contacts walked at least before the trigram index is asked: a walk this short costs little. */
const WALK_BUDGET = 5_000;
/** A walk expected to pass more contacts than this first sorts the matches, when few (MATCH_COST). */
const DEEP_WALK = 20_000;
/**
 * A walk expected to pass more contacts than this is the plain walk's: a deep page of an even term, where
 * sorting every match costs more. Up to it, a walk with a budget of twice that goes first, and the matches
 * are sorted when it falls short: matches all older than the rest (an import) would make a plain walk pass
 * every newer contact.
 */
const LONG_WALK = 100_000;
/** The deepest page (offset + limit) tried this way while the total is not known. */
const DEEP_REACH = 2_000;
/**
 * A match sorted through the trigram index costs about as much as this many contacts walked: its heap row
 * read and rechecked, and more where pg_trgm hands over candidates that do not match.
 */
const MATCH_COST = 10;

function conditions(filter: ContactFilter, term: string): RawBuilder<SqlBool> {
  const unsubscribed =
    filter.unsubscribed === undefined
      ? sql``
      : sql`and unsubscribed = ${sql.lit(filter.unsubscribed ? 1 : 0)}`;
  return sql<SqlBool>`${containsText('postgres', 'email_lower', term)} ${unsubscribed}`;
}

/**
 * The page sorted out of every match, when their total is known (kept, or counted in the address chunks):
 * the matches are found through the trigram index on the narrow table of addresses (migration 0016), which
 * holds the order keys, and only the page's rows are read from contacts.
 */
async function sortMatches(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  term: string,
  page: Page,
): Promise<string[]> {
  const { rows } = await sql<{ json: string }>`select ${contactJson('postgres', 'c')} as json
    from (select created_at, id from contact_addresses
      where organization_id = ${organizationId} and ${conditions(filter, term)}
      order by created_at desc, id desc
      limit ${rowCount(page.limit)} offset ${rowCount((page.page - 1) * page.limit)}) p
    join contacts c on c.id = p.id
    order by p.created_at desc, p.id desc`.execute(db);
  return rows.map((r) => r.json);
}

/**
 * The page sorted out of every match, and their total, in one statement: each match's order keys are
 * gathered once (materialized, from the narrow table through the trigram index), counted, and sorted for
 * the page, whose rows alone are read from contacts to be rendered. A count and a page in statements of
 * their own would read every match twice, and where pg_trgm cannot narrow a term, every candidate's row
 * twice. A count over the sorted rows themselves (a window) makes PostgreSQL sort every match, past
 * work_mem on disk, where this sorts their keys for a top-N heap.
 */
async function sortAndCountMatches(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  term: string,
  page: Page,
): Promise<{ contacts: string[]; total: number }> {
  const { rows } = await sql<{ total: string; json: string | null }>`with m as materialized (
      select created_at, id from contact_addresses
      where organization_id = ${organizationId} and ${conditions(filter, term)}),
    p as (select created_at, id from m order by created_at desc, id desc
      limit ${rowCount(page.limit)} offset ${rowCount((page.page - 1) * page.limit)})
    select (select count(*) from m) as total, ${contactJson('postgres', 'c')} as json
    from (select 1) one left join (p join contacts c on c.id = p.id) on true
    order by p.created_at desc, p.id desc`.execute(db);
  return {
    contacts: rows.flatMap((r) => (r.json === null ? [] : [r.json])),
    total: Number(rows[0]!.total),
  };
}

/**
 * How many of the organisation's contacts the filter (an email term, with or without a subscription, no
 * tag) matches: in the address chunks where they can count it, else in the narrow table of addresses.
 * undefined for any other filter.
 */
export async function countByEmailOnPostgres(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  const chunked = await countByChunksOnPostgres(db, organizationId, filter);
  if (chunked !== undefined) return chunked;
  if (filter.tag !== undefined || filter.email === undefined) return undefined;
  const { rows } = await sql<{ n: string }>`select count(*) as n from contact_addresses
    where organization_id = ${organizationId} and ${conditions(filter, matchCase(filter.email))}`.execute(db);
  return Number(rows[0]!.n);
}

/** What tests (and benches) may change in pageByEmailOnPostgres. */
export interface SearchTuning {
  /** Newest contacts walked at least (WALK_BUDGET). */
  walkBudget?: number;
  /** The trigram index's time for a first page and count (ms; trigramSearchMs by default); 0 skips it. */
  trigramMs?: number;
}

export async function pageByEmailOnPostgres(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  page: Page,
  knownTotal: number | undefined,
  tuning: SearchTuning = {},
): Promise<{ contacts?: string[]; total?: number } | undefined> {
  let budget = tuning.walkBudget ?? WALK_BUDGET;
  if (filter.tag !== undefined || filter.email === undefined) return undefined;
  const term = matchCase(filter.email);
  // The trigram index cannot find a term shorter than a trigram.
  if (!isTrigramSearchable(term)) return undefined;
  const reach = page.page * page.limit;
  if (knownTotal === undefined && reach > DEEP_REACH) {
    // A deep page asked before its total is known: the total, which the caller would count after the page
    // anyway, is counted first and says how to find the page, where the plain walk would pass every
    // contact for a term few hold. Without a page, the plain walk's, with the total.
    const total = await countByEmailOnPostgres(db, organizationId, filter);
    if (total === undefined) return undefined;
    return { ...(await pageByEmailOnPostgres(db, organizationId, filter, page, total, tuning)), total };
  }
  const size = await organizationSize(db, organizationId);
  // The trigram index's time for a search that does not know beforehand what the index will read.
  const ms = tuning.trigramMs ?? trigramSearchMs(size);
  if (knownTotal !== undefined) {
    if (reach - page.limit >= knownTotal) return { contacts: [] };
    // A walk reads about reach × size / total contacts to fill the page when the matches are spread.
    const expected = (reach * size) / Math.max(knownTotal, 1);
    if (expected > DEEP_WALK) {
      // Few matches are sorted for less than so long a walk. Within the index's time: a term pg_trgm cannot
      // narrow would have it read every contact, where the plain walk may find spread matches (and so, once
      // that time is up, does not sort them again after a walk).
      if (ms > 0 && knownTotal * MATCH_COST < expected) {
        const sorted = await trigramWithin(db, ms, (conn) =>
          sortMatches(conn, organizationId, filter, term, page),
        );
        return sorted ? { contacts: sorted } : undefined;
      }
      if (expected > LONG_WALK) return undefined;
    }
    budget = Math.max(budget, Math.ceil(2 * expected));
  }
  // A budget past the organisation's size is the plain walk (which also sees a contact that just came).
  if (budget >= size) return undefined;
  const walked = await walkNewest(db, 'postgres', organizationId, conditions(filter, term), page, budget);
  if (walked.length === page.limit) return { contacts: walked };
  if (knownTotal !== undefined) {
    return { contacts: await sortMatches(db, organizationId, filter, term, page) };
  }
  // The matches are old, few or none. The trigram index finds a few fastest, page and total at once, but a
  // term pg_trgm cannot narrow makes it read every contact (`e.t` is the words `e` and `t` to it, in every
  // address of example.test), so it has a few ms before the address chunks count instead, and the page is
  // sorted only if there is one this far.
  return (
    (await countThenSort(db, organizationId, filter, term, page, ms)) ??
    // The chunks cannot count the filter (`unsubscribed` beside the term, or a term holding END): the
    // trigram index does, however long it takes.
    sortAndCountMatches(db, organizationId, filter, term, page)
  );
}

/**
 * The chunks are counted in this many parts at once, each on a connection of its own: PostgreSQL will not
 * plan a parallel scan of them (their heap is small; the addresses are in TOAST), so one statement counts
 * on one core. Under load the parts cost the same CPU in all; sharing one snapshot (store/snapshot.ts)
 * costs only a few round trips.
 */
const COUNT_PARTS = 2;

/**
 * The organisation's contacts whose address holds the term, counted in its address chunks (migration
 * 0012), for a fraction of any count of the contacts themselves. undefined when the chunks cannot answer:
 * another filter beside the term (they hold addresses only), or a term that would match across two
 * addresses.
 *
 * `string_to_array(addresses, term)` cuts a chunk at each occurrence, left to right, never overlapping.
 * Every address holding the term is cut at least once (the cut before it ends in an earlier address), so
 * the addresses holding it are the occurrences that are the first of their address: those whose piece
 * before them holds an address's end, and the first occurrence of the chunk. Counting the pieces that hold
 * an end does both, once the first piece is taken away when it holds one: with no occurrence the one piece
 * is the whole chunk, which counts 1 - 1 = 0, and the last piece always holds the chunk's final end, which
 * stands for the first occurrence. (`offset 0` keeps the array from being made twice.)
 *
 * Outside a transaction the parts run on connections of their own, in one snapshot: the first exports it
 * and the others take it up (SET TRANSACTION SNAPSHOT). In snapshots of their own, a fold that repacks the
 * organisation's chunks (address-chunks-postgres.ts) committing between them would be seen by one part and
 * not the other, and its addresses counted twice or not at all. The total is kept only under the version
 * of the addresses read before it (kept-searches.ts).
 */
export async function countByChunksOnPostgres(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  const count = chunkCounter(organizationId, filter);
  if (!count) return undefined;
  // In a transaction the parts would only queue on its one connection; it is one snapshot already.
  if (db.isTransaction) return count(db, 0, 1);
  const counts = await inOneSnapshot(db, COUNT_PARTS, count);
  return counts.reduce((sum, n) => sum + n, 0);
}

/**
 * What counts part `part` of `parts` of the organisation's chunks (by id), for the filter's term; undefined
 * when the chunks cannot count the filter (see countByChunksOnPostgres).
 */
function chunkCounter(
  organizationId: string,
  filter: ContactFilter,
): ((conn: Executor, part: number, parts: number) => Promise<number>) | undefined {
  if (filter.tag !== undefined || filter.unsubscribed !== undefined || filter.email === undefined) {
    return undefined;
  }
  const term = matchCase(filter.email);
  if (!isChunkSearchable(term)) return undefined;
  // A row whose domain holds the term (or, for `@…`, begins with what follows the @) holds it in each of
  // its `n` addresses, and is not read; `covered` is null for the rest, which are searched.
  const at = term.indexOf('@');
  const inDomain = at < 0 ? term : null;
  const afterAt = at === 0 && !term.includes('@', 1) ? term.slice(1) : null;
  return (conn, part, parts) =>
    sql<{ n: string }>`select coalesce(sum(sign * case when covered then n else
        (select count(*) from unnest(p) piece where strpos(piece, ${END}) > 0)
        - (strpos(p[1], ${END}) > 0)::int end), 0) as n
      from (select sign, n, covered,
          case when covered then null else string_to_array(addresses, ${term}) end as p
        from (select sign, n, addresses, domain <> '' and (strpos(domain, ${inDomain}::text) > 0
              or starts_with(domain, ${afterAt}::text)) as covered
            from ${sql.table(CHUNKS_TABLE)}
            where organization_id = ${organizationId} and id % ${parts} = ${part}) r
        offset 0) chunks`
      .execute(conn)
      .then(({ rows }) => Number(rows[0]!.n));
}

/**
 * How long (ms) the trigram index may sort and count a term's matches before the address chunks count them
 * instead. The chunks read every address, whatever the term matches; the index reads only its matches:
 * quick for thousands that sit together, slow for many spread through the table or read from the OS's
 * cache after a bulk load, and slowest for a term pg_trgm cannot narrow (`e.t`), where it reads every
 * contact to find none. Which is which cannot be told beforehand, so the index is given about what the
 * chunks cost on a fast machine, in proportion to the organisation's size, and a fifth more for sorting the
 * page beside the count: 60 µs a thousand contacts, 10 to 60 ms. Less would cut off old matches asked right
 * after a bulk load, and a small organisation's that the index sorts and counts faster than the chunks
 * count them. Past it, the page is still sorted through the index once the chunks have counted, so the time
 * is lost only where there is no page this far. Under 100,000 contacts the chunks count in a few ms, and
 * the index is not asked first (0); where the chunks cannot count the filter, it is asked with no time
 * limit (pageByEmailOnPostgres).
 */
function trigramSearchMs(size: number): number {
  return size < 100_000 ? 0 : Math.min(60, Math.max(10, Math.round((size * 6) / 100_000)));
}

/**
 * `read` on a connection of `db`, unless it takes longer than `ms`: undefined then. In the caller's
 * transaction, or in one of its own (a savepoint needs one).
 */
async function trigramWithin<T>(
  db: Executor,
  ms: number,
  read: (conn: Executor) => Promise<T>,
): Promise<T | undefined> {
  if (db.isTransaction) return withinMs(db, ms, () => read(db));
  const [answer] = await inOneSnapshot(db, 1, (conn) => withinMs(conn, ms, () => read(conn)));
  return answer;
}

/**
 * `read` on `conn`, unless it takes longer than `ms`: undefined then. In a savepoint, so a statement stopped
 * by its timeout leaves the transaction (and its snapshot) usable, and the timeout goes with the savepoint.
 */
async function withinMs<T>(conn: Executor, ms: number, read: () => Promise<T>): Promise<T | undefined> {
  await sql`savepoint trigram_search`.execute(conn);
  try {
    await sql`set local statement_timeout = ${sql.lit(ms)}`.execute(conn);
    return await read();
  } catch (err) {
    if (isStatementCanceled(err)) return undefined;
    throw err;
  } finally {
    await rollbackToTrigramSearch(conn);
  }
}

/**
 * Back to the savepoint, which also ends the short timeout. The rollback itself runs under that timeout
 * (SET LOCAL ends only once it has run), so a stall of the server past it cancels the rollback too; it is
 * then tried again (allowed in a failed transaction; the savepoint stays until it succeeds).
 */
async function rollbackToTrigramSearch(conn: Executor): Promise<void> {
  for (let tries = 1; ; tries++) {
    try {
      await sql`rollback to savepoint trigram_search`.execute(conn);
      return;
    } catch (err) {
      if (!isStatementCanceled(err) || tries >= 3) throw err;
    }
  }
}

/**
 * The page and the total of matches the walk did not reach. The trigram index sorts and counts them first,
 * in one statement, within trigramSearchMs; past it, the address chunks count, in parts on connections of
 * their own where the pool has room, and the page is sorted (sortMatches) on the first part's, in their
 * snapshot, once every part has counted, unless there is none this far. Undefined when the chunks cannot
 * count the filter.
 */
async function countThenSort(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
  term: string,
  page: Page,
  trigramMs: number,
): Promise<{ contacts: string[]; total: number } | undefined> {
  const count = chunkCounter(organizationId, filter);
  if (!count) return undefined;
  const reach = page.page * page.limit;
  const finish = async (conn: Executor, total: number) => {
    if (reach - page.limit >= total) return { contacts: [], total };
    return { contacts: await sortMatches(conn, organizationId, filter, term, page), total };
  };
  const byTrigrams =
    trigramMs > 0
      ? await trigramWithin(db, trigramMs, (conn) =>
          sortAndCountMatches(conn, organizationId, filter, term, page),
        )
      : undefined;
  if (byTrigrams) return byTrigrams;
  if (db.isTransaction) return finish(db, await count(db, 0, 1));
  return countByChunksThenSort(db, count, finish);
}

/** countThenSort's count in the address chunks, in parts at once, then the page on the first part's. */
async function countByChunksThenSort<T>(
  db: Executor,
  count: (conn: Executor, part: number, parts: number) => Promise<number>,
  finish: (conn: Executor, total: number) => Promise<T>,
): Promise<T> {
  // Each part's count, settled when it is done; the first part waits for the others' before the page.
  const settle: { resolve: (n: number) => void; reject: (err: unknown) => void }[] = [];
  const counted = Array.from(
    { length: COUNT_PARTS },
    () => new Promise<number>((resolve, reject) => settle.push({ resolve, reject })),
  );
  // A part that fails fails the call through inOneSnapshot; the first part then stops waiting for it.
  for (const promise of counted) promise.catch(() => undefined);
  const parts = await inOneSnapshot(db, COUNT_PARTS, async (conn, i, n) => {
    const mine = count(conn, i, n);
    mine.then(settle[i]!.resolve, settle[i]!.reject);
    if (i > 0) return mine.then(() => undefined);
    const all = await Promise.all(counted.slice(0, n));
    return finish(
      conn,
      all.reduce((sum, x) => sum + x, 0),
    );
  });
  return parts[0]!;
}
