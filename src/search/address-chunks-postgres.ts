// PostgreSQL: each organisation's addresses packed into rows of text, for the total of an email substring
// that many contacts hold. A count through the trigram index (or any scan) reads a heap row and tests it for
// each match, and a trigram common to every address ("exa" of example.com) makes the index read a posting
// per contact first. A chunk is one string of ~16k characters, in which `string_to_array(addresses, term)`
// finds every occurrence at memchr speed.
//
// Each row holds addresses with a sign, +1 or -1: the organisation's addresses are the multiset of its
// positive rows minus its negative ones. Migration 0012's statement triggers on contacts append one row per
// statement and organisation (+1 for each address inserted, -1 for each deleted, both for a readdressed
// contact) in the writer's own transaction, and never update one. So writers never wait on each other for
// chunks (no row is shared), and a count is exact under MVCC: its snapshot holds exactly the rows of the
// transactions it sees, whatever is being written or folded meanwhile. `foldAddressChunks`, every few
// seconds in each process, merges the small rows that pile up (an address added and deleted cancels out),
// and writes the organisation's chunks anew from its contacts once deleted addresses are an eighth of what
// is held.
//
// By domain (migration 0015): a row says how many addresses it holds (`n`) and, when they all share one,
// their domain. A term that the domain holds (`example` in a@example.com), or `@` and the start of the domain
// (`@exa`), is in each of the row's addresses: such a row counts `n` and is not read, so a term every address
// holds is not cut out of every chunk at each occurrence. Rebuilds and merges give each domain of
// `DOMAIN_CHARS` or more rows of its own, and a statement's row has its addresses' domain when they share
// one. Rows of any domain that a rebuild did not write ("unsorted": a merge's small domains, a bulk insert's
// statement, the rows of before 0015) call for a rebuild once they weigh a quarter of what is held (and
// UNSORTED_MIN_CHARS), as deletions do at an eighth.
import type { Kysely } from 'kysely';
import { sql } from '../store/kysely.js';
import type { Executor } from '../store/store.js';
import { END } from './address-chunks.js';
import { isStatementCanceled } from '../store/dialect.js';

/** Characters of addresses a chunk is filled to. */
export const PG_CHUNK_CHARS = 16_384;

/**
 * A row shorter than this is loose: the fold merges it with the organisation's other loose rows. A row a
 * rebuild wrote is not, however short: it is the last of its domain's (or of the small domains'), and a
 * merge would only move its addresses to rows of any domain.
 */
export const LOOSE_CHARS = PG_CHUNK_CHARS / 2;

export const CHUNKS_TABLE = 'contact_address_chunks';

/**
 * A domain whose addresses fill this many characters has rows of its own when an organisation's chunks are
 * written anew or merged: a term its name holds (`example`, `.com`, `@exam`) is then counted a row at a
 * time (`n`), not searched for in each address.
 */
export const DOMAIN_CHARS = LOOSE_CHARS;

/**
 * An address's domain as SQL, as `chunkDomainOf` finds it: what follows its first @, up to any second one
 * ('' without one). What a row's `domain` holds is in each of its addresses after an @.
 */
const domainSql = (address: string) => `split_part(${address}, '@', 2)`;

/** An address's domain, as `domainSql` finds it. */
function chunkDomainOf(address: string): string {
  const at = address.indexOf('@');
  if (at < 0) return '';
  const next = address.indexOf('@', at + 1);
  return address.slice(at + 1, next < 0 ? undefined : next);
}

/**
 * Writes the chunks of `organizationId` (every organisation's when null) afresh from its contacts, in one
 * statement with the delete of what it held: both read the same snapshot, so a writer committing meanwhile
 * keeps its own row and is not counted twice. A domain of `domainChars` characters or more gets rows of its
 * own; the others share rows. Every row written is marked `rebuilt`: its domain-less rows are as sorted as
 * they can be, and do not call for another rebuild (foldAddressChunks).
 */
export async function rebuildAddressChunks(
  db: Executor | Kysely<unknown>,
  organizationId: string | null,
  domainChars = DOMAIN_CHARS,
): Promise<void> {
  const whose = organizationId === null ? sql`true` : sql`organization_id = ${organizationId}`;
  const table = sql.table(CHUNKS_TABLE);
  await sql`with gone as (delete from ${table} where ${whose}),
    addresses as (select organization_id, email_lower, ${sql.raw(domainSql('email_lower'))} as domain
      from contacts where ${whose}),
    own as (select organization_id, domain from addresses group by organization_id, domain
      having sum(length(email_lower) + 1) >= ${domainChars} and domain <> ''),
    placed as (select a.organization_id, a.email_lower, o.domain
      from addresses a left join own o on o.organization_id = a.organization_id and o.domain = a.domain)
    insert into ${table} (organization_id, sign, chars, n, domain, rebuilt, addresses)
    select organization_id, 1, sum(length(email_lower) + 1), count(*), domain, true,
      string_agg(email_lower || ${END}, '')
    from (select organization_id, domain, email_lower, sum(length(email_lower) + 1)
        over (partition by organization_id, domain rows unbounded preceding) / ${sql.lit(PG_CHUNK_CHARS)} as part
      from placed) c
    group by organization_id, domain, part`.execute(db);
}

/** The advisory lock (two keys) a fold of the organisation's chunks holds. */
const foldLock = (organizationId: string) =>
  sql`hashtext('mailroom: fold address chunks'), hashtext(${organizationId})`;

/**
 * rebuildAddressChunks for one organisation, under the lock its folds take, once no fold holds it: a
 * rebuild beside another one (a fold's, in any process) deletes only the rows its snapshot saw, so the two
 * would write every address twice.
 */
export async function rebuildAddressChunksAlone(db: Executor, organizationId: string): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`select pg_advisory_xact_lock(${foldLock(organizationId)})`.execute(trx);
    await rebuildAddressChunks(trx, organizationId);
  });
}

export interface FoldOptions {
  /** An organisation's loose rows are merged once it has this many. */
  looseRows?: number;
  /** Loose rows merged in one fold, at most. */
  mergeMax?: number;
  /** A domain's addresses get rows of their own from this many characters (DOMAIN_CHARS). */
  domainChars?: number;
  /** Unsorted rows call for a rebuild from this many characters (UNSORTED_MIN_CHARS). */
  unsortedMinChars?: number;
  /** A fold's statements stop after this long, in ms (FOLD_STATEMENT_MS). */
  statementMs?: number;
}

/**
 * Unsorted rows of fewer characters than this never call for a rebuild: a search reads them in well under a
 * millisecond, and most organisations have some (a merge's small domains), so they are not even weighed.
 */
export const UNSORTED_MIN_CHARS = 4 * PG_CHUNK_CHARS;

/** Loose rows that make an organisation worth a fold. */
const LOOSE_ROWS = 32;

/**
 * Loose rows merged in one fold, at most: a backlog (writes while no process ran, say) is taken in turns,
 * one per fold, instead of read into memory at once.
 */
const MERGE_MAX = 20_000;

/**
 * Merges loose rows, and writes an organisation's chunks anew from its contacts when its negative rows
 * outweigh an eighth of its positive ones, or its unsorted rows (rows of any domain written since its last
 * rebuild, in which a term a domain's name holds is searched for address by address) a quarter of them and
 * at least UNSORTED_MIN_CHARS: a bulk import is then written anew about every quarter it grows, some five
 * times its size in all. Each organisation in a transaction of its own, under an advisory lock no other
 * process's fold can hold at once (one that cannot take it passes the organisation by). Returns the
 * organisations whose rows were merged or rebuilt.
 */
export async function foldAddressChunks(
  db: Executor,
  {
    looseRows = LOOSE_ROWS,
    mergeMax = MERGE_MAX,
    domainChars = DOMAIN_CHARS,
    unsortedMinChars = UNSORTED_MIN_CHARS,
    statementMs = FOLD_STATEMENT_MS,
  }: FoldOptions = {},
): Promise<string[]> {
  // Organisations with loose rows enough to merge, those with negative rows at all (whether these weigh
  // an eighth is summed under the lock), and those with unsorted rows enough to weigh: each found through
  // a partial index, never the whole table.
  const table = sql.table(CHUNKS_TABLE);
  const { rows } = await sql<{ organization_id: string; loose: boolean }>`select organization_id,
      bool_or(loose) as loose
    from (select organization_id, true as loose from ${table}
        where ${LOOSE} group by organization_id having count(*) >= ${looseRows}
      union all
      select distinct organization_id, false from ${table} where sign < 0
      union all
      select organization_id, false from ${table} where ${UNSORTED}
        group by organization_id having sum(chars) >= ${unsortedMinChars}) candidates
    group by organization_id`.execute(db);
  const folded: string[] = [];
  for (const { organization_id: org, loose: merge } of rows) {
    const done = await db.transaction().execute(async (trx) => {
      const lock = sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(${foldLock(org)}) as ok`;
      const locked = await lock.execute(trx);
      if (!locked.rows[0]?.ok) return false;
      // Stopped by the server when the pool stops waiting for it (query_timeout), rather than left running
      // with the lock held: a very large organisation's rebuild can take that long.
      await sql`set local statement_timeout = ${sql.lit(statementMs)}`.execute(trx);
      // READ COMMITTED: each statement below sees every fold committed before this lock was granted.
      const merged = merge && (await mergeLoose(trx, org, mergeMax, domainChars));
      const sums = await sql<{ neg: string; pos: string; unsorted: string }>`select
          coalesce(sum(chars) filter (where sign < 0), 0) as neg,
          coalesce(sum(chars) filter (where sign > 0), 0) as pos,
          coalesce(sum(chars) filter (where ${UNSORTED}), 0) as unsorted
        from ${table} where organization_id = ${org}`.execute(trx);
      const row = sums.rows[0]!;
      const [neg, pos, unsorted] = [Number(row.neg), Number(row.pos), Number(row.unsorted)];
      const deleted = 8 * neg > pos;
      const unsortedMuch = unsorted >= unsortedMinChars && 4 * unsorted > pos;
      if ((!deleted && !unsortedMuch) || (gaveUp.get(org) ?? 0) > Date.now()) return merged;
      try {
        await rebuildAddressChunks(trx, org, domainChars);
      } catch (err) {
        // Too large to write anew within the timeout: its rows, though slower to read, stay exact; what it
        // merged is rolled back with the rebuild and merged again next time, without one.
        if (isStatementCanceled(err)) gaveUp.set(org, Date.now() + GIVE_UP_MS);
        throw err;
      }
      return true;
    });
    if (done) folded.push(org);
  }
  return folded;
}

/**
 * A fold's statements stop after this long (ms), a moment before the pool's query_timeout
 * (store/postgres-store.ts).
 */
const FOLD_STATEMENT_MS = 14_000;
/** How long this process's folds leave an organisation unrebuilt once its rebuild timed out (ms). */
const GIVE_UP_MS = 60 * 60_000;
/** Organisations whose rebuild timed out, and until when (Date.now()) no fold here tries again. */
const gaveUp = new Map<string, number>();

/** Loose rows, as SQL (a partial index of migration 0015). */
const LOOSE = sql.raw(`chars < ${LOOSE_CHARS} and not rebuilt`);

/** Positive rows of any domain not written by a rebuild, as SQL (a partial index of migration 0015). */
const UNSORTED = sql.raw('domain is null and not rebuilt and sign > 0');

/**
 * The organisation's loose rows as few full ones: an address both added and deleted among them goes, the
 * rest are packed again, positives and negatives apart, a domain's in rows of its own when they fill
 * `domainChars` characters. Only folds delete rows, and they hold the lock.
 */
async function mergeLoose(trx: Executor, org: string, max: number, domainChars: number): Promise<boolean> {
  const { rows } = await sql<{ id: string; sign: number; addresses: string }>`select id, sign, addresses
    from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org} and ${LOOSE}
    order by id limit ${max}`.execute(trx);
  if (rows.length < 2) return false;
  const net = new Map<string, number>();
  for (const row of rows) {
    const addresses = row.addresses.split(END);
    addresses.pop(); // every address ends with END: the split leaves an empty string after the last
    for (const address of addresses) net.set(address, (net.get(address) ?? 0) + Number(row.sign));
  }
  const packed: PackedRow[] = [];
  for (const sign of [1, -1]) {
    // The addresses of this sign by domain, as many times as they are held.
    const byDomain = new Map<string, { chars: number; addresses: string[] }>();
    for (const [address, n] of net) {
      for (let i = 0; i < n * sign; i++) {
        const domain = chunkDomainOf(address);
        let group = byDomain.get(domain);
        if (!group) byDomain.set(domain, (group = { chars: 0, addresses: [] }));
        group.addresses.push(address);
        group.chars += address.length + END.length;
      }
    }
    const shared: string[] = [];
    for (const [domain, group] of byDomain) {
      if (domain !== '' && group.chars >= domainChars) pack(packed, sign, domain, group.addresses);
      // One at a time: a backlog's domain may hold more addresses than a call takes arguments.
      else for (const address of group.addresses) shared.push(address);
    }
    pack(packed, sign, null, shared);
  }
  await sql`delete from ${sql.table(CHUNKS_TABLE)} where id = any(${rows.map((r) => r.id)}::bigint[])`.execute(
    trx,
  );
  if (packed.length > 0) {
    await sql`insert into ${sql.table(CHUNKS_TABLE)} (organization_id, sign, chars, n, domain, addresses)
      select ${org}, s, length(a), n, d, a
      from unnest(${packed.map((p) => p.sign)}::smallint[], ${packed.map((p) => p.n)}::integer[],
        ${packed.map((p) => p.domain)}::text[], ${packed.map((p) => p.text)}::text[]) as u(s, n, d, a)`.execute(
      trx,
    );
  }
  return true;
}

/** A row a merge writes: its addresses (each ended by END), how many, their domain if they share one. */
interface PackedRow {
  sign: number;
  domain: string | null;
  n: number;
  text: string;
}

/** The addresses as rows of about PG_CHUNK_CHARS characters each, appended to `packed`. */
function pack(packed: PackedRow[], sign: number, domain: string | null, addresses: readonly string[]): void {
  let text = '';
  let n = 0;
  for (const address of addresses) {
    text += address + END;
    n++;
    if (text.length >= PG_CHUNK_CHARS) {
      packed.push({ sign, domain, n, text });
      text = '';
      n = 0;
    }
  }
  if (text !== '') packed.push({ sign, domain, n, text });
}
