// PostgreSQL: each organisation's addresses packed into rows of text, for the total of an email substring
// that many contacts hold. Its count through the trigram index (or any scan) costs 130–270 ms at a million
// contacts: a match is a heap row read and a LIKE, about 0.2 µs each, and a trigram common to every address
// ("exa" of example.com) makes the index read a million postings first. A chunk is one string of ~16k
// characters: `string_to_array(addresses, term)` finds every occurrence in it at memchr speed, so counting
// a term one contact in nine holds reads 26 MB in about 35 ms (lz4: 12 MB on disk).
//
// Each row holds addresses with a sign, +1 or -1: the organisation's addresses are the multiset of its
// positive rows minus its negative ones. Migration 0012's statement triggers on contacts append one row per
// statement and organisation (+1 for each address inserted, -1 for each deleted, both for a readdressed
// contact), in the writer's own transaction, and never update one. So:
// - writers never wait on each other for chunks (no row is shared);
// - a count reads, in its snapshot, exactly the rows of the transactions it sees: it is exact under MVCC,
//   whatever is being written or folded meanwhile.
// Rows per statement pile up; `foldAddressChunks`, every few seconds in each process, merges an
// organisation's small rows into full ones (an address added and deleted cancels out), and writes the
// organisation's chunks anew from its contacts once deleted addresses are an eighth of what is held.
import { type Kysely, sql } from 'kysely';
import type { Executor } from './store.js';
import { END } from './address-chunks.js';

/** Characters of addresses a chunk is filled to. */
export const PG_CHUNK_CHARS = 16_384;

/** A row shorter than this is loose: the fold merges it with the organisation's other loose rows. */
export const LOOSE_CHARS = PG_CHUNK_CHARS / 2;

export const CHUNKS_TABLE = 'contact_address_chunks';

/** Rows of (organization_id, sign, chars, addresses) for `rows` (one per organisation), as SQL. */
export function chunkRows(rows: string, sign: 1 | -1, where = 'TRUE'): string {
  return `SELECT r.organization_id, ${sign}::smallint AS sign,
      sum(length(r.email_lower) + 1)::integer AS chars, string_agg(r.email_lower || E'\\n', '') AS addresses
    FROM ${rows} r WHERE ${where} GROUP BY r.organization_id`;
}

/**
 * Writes the chunks of `organizationId` (every organisation's when null) afresh from its contacts, in one
 * statement with the delete of what it held: both read the same snapshot, so a writer committing meanwhile
 * keeps its own row and is not counted twice.
 */
export async function rebuildAddressChunks(
  db: Executor | Kysely<unknown>,
  organizationId: string | null,
): Promise<void> {
  const whose = organizationId === null ? sql`true` : sql`organization_id = ${organizationId}`;
  const table = sql.table(CHUNKS_TABLE);
  await sql`with gone as (delete from ${table} where ${whose})
    insert into ${table} (organization_id, sign, chars, addresses)
    select organization_id, 1, sum(length(email_lower) + 1), string_agg(email_lower || ${END}, '')
    from (select organization_id, email_lower, sum(length(email_lower) + 1)
        over (partition by organization_id rows unbounded preceding) / ${sql.lit(PG_CHUNK_CHARS)} as part
      from contacts where ${whose}) c
    group by organization_id, part`.execute(db);
}

export interface FoldOptions {
  /** An organisation's loose rows are merged once it has this many. */
  looseRows?: number;
  /** Loose rows merged in one fold, at most. */
  mergeMax?: number;
}

/** Loose rows that make an organisation worth a fold. */
const LOOSE_ROWS = 32;

/**
 * Loose rows merged in one fold, at most: a backlog (writes while no process ran, say) is taken in turns,
 * one per fold, instead of read into memory at once.
 */
const MERGE_MAX = 20_000;

/**
 * Merges loose rows, and rebuilds organisations whose negative rows outweigh an eighth of their positive
 * ones; each organisation in a transaction of its own, under an advisory lock no other process's fold can
 * hold at once (one that cannot take it passes the organisation by). Returns the organisations whose rows
 * were merged or rebuilt.
 */
export async function foldAddressChunks(
  db: Executor,
  { looseRows = LOOSE_ROWS, mergeMax = MERGE_MAX }: FoldOptions = {},
): Promise<string[]> {
  // Organisations with loose rows enough to merge, and those with negative rows at all (whether these weigh
  // an eighth is summed under the lock): each found through its partial index, never the whole table.
  const table = sql.table(CHUNKS_TABLE);
  const { rows } = await sql<{ organization_id: string; loose: boolean }>`select organization_id,
      bool_or(loose) as loose
    from (select organization_id, true as loose from ${table}
        where chars < ${LOOSE_CHARS} group by organization_id having count(*) >= ${looseRows}
      union all
      select distinct organization_id, false from ${table} where sign < 0) candidates
    group by organization_id`.execute(db);
  const folded: string[] = [];
  for (const { organization_id: org, loose: merge } of rows) {
    const done = await db.transaction().execute(async (trx) => {
      const locked = await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(
          hashtext('mailroom: fold address chunks'), hashtext(${org})) as ok`.execute(trx);
      if (!locked.rows[0]?.ok) return false;
      // READ COMMITTED: each statement below sees every fold committed before this lock was granted.
      const merged = merge && (await mergeLoose(trx, org, mergeMax));
      const sums = await sql<{ neg: string; pos: string }>`select
          coalesce(sum(chars) filter (where sign < 0), 0) as neg,
          coalesce(sum(chars) filter (where sign > 0), 0) as pos
        from ${table} where organization_id = ${org}`.execute(trx);
      const { neg, pos } = sums.rows[0]!;
      if (8 * Number(neg) <= Number(pos)) return merged;
      await rebuildAddressChunks(trx, org);
      return true;
    });
    if (done) folded.push(org);
  }
  return folded;
}

/**
 * The organisation's loose rows as few full ones: an address both added and deleted among them goes, the
 * rest are packed again, positives and negatives apart. Only folds delete rows, and they hold the lock.
 */
async function mergeLoose(trx: Executor, org: string, max: number): Promise<boolean> {
  const { rows } = await sql<{ id: string; sign: number; addresses: string }>`select id, sign, addresses
    from ${sql.table(CHUNKS_TABLE)} where organization_id = ${org} and chars < ${LOOSE_CHARS}
    order by id limit ${max}`.execute(trx);
  if (rows.length < 2) return false;
  const net = new Map<string, number>();
  for (const row of rows) {
    const addresses = row.addresses.split(END);
    addresses.pop(); // every address ends with END: the split leaves an empty string after the last
    for (const address of addresses) net.set(address, (net.get(address) ?? 0) + Number(row.sign));
  }
  const packed: { sign: number; text: string }[] = [];
  for (const sign of [1, -1]) {
    let text = '';
    for (const [address, n] of net) {
      for (let i = 0; i < n * sign; i++) {
        text += address + END;
        if (text.length >= PG_CHUNK_CHARS) {
          packed.push({ sign, text });
          text = '';
        }
      }
    }
    if (text !== '') packed.push({ sign, text });
  }
  await sql`delete from ${sql.table(CHUNKS_TABLE)} where id = any(${rows.map((r) => r.id)}::bigint[])`.execute(
    trx,
  );
  if (packed.length > 0) {
    await sql`insert into ${sql.table(CHUNKS_TABLE)} (organization_id, sign, chars, addresses)
      select ${org}, s, length(a), a
      from unnest(${packed.map((p) => p.sign)}::smallint[], ${packed.map((p) => p.text)}::text[]) as u(s, a)`.execute(
      trx,
    );
  }
  return true;
}
