// 0015 (PostgreSQL): address chunks by domain, so that a term every address of a domain holds (`example`,
// `.com`, `@exam`) is not sought in each address of every chunk. Rows say how many addresses they hold (`n`)
// and, when all share one, their domain; a row whose domain holds the term counts `n` without being read
// (search/address-chunks-postgres.ts, search/contact-search-postgres.repository.ts). `rebuilt` marks the rows
// a rebuild wrote, whose domain-less ones hold only domains too small for rows of their own.
//
// The rows already there stay as they are (n is 0 where no domain is, and unread): the server's fold rewrites
// each organisation's chunks by domain, in a statement of its own, the first time it runs. Done here, for
// every organisation in one statement, it would hold the table locked, every search count waiting, for as
// long as the whole store takes. n keeps its default, so that the
// previous release's fold (a rolling deploy, a rollback) can still write rows.
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';
import { CHUNKS_TABLE, LOOSE_CHARS } from '../search/address-chunks-postgres.js';
import { chunkTriggers } from './migrations-0012.js';

/**
 * Rows of (organization_id, sign, chars, n, domain, addresses) for `rows` (one per organisation), as SQL:
 * a statement's addresses all of one domain (a single contact's, say) make a row of that domain.
 */
function chunkRows(rows: string, sign: 1 | -1, where = 'TRUE'): string {
  return `SELECT r.organization_id, ${sign}::smallint AS sign,
      sum(length(r.email_lower) + 1)::integer AS chars, count(*)::integer AS n,
      CASE WHEN min(r.domain) = max(r.domain) THEN min(r.domain) END AS domain,
      string_agg(r.email_lower || E'\\n', '') AS addresses
    FROM (SELECT *, split_part(email_lower, '@', 2) AS domain FROM ${rows}) r WHERE ${where}
    GROUP BY r.organization_id`;
}

/** The columns chunkRows gives, in its order. */
const CHUNK_COLUMNS = 'organization_id, sign, chars, n, domain, addresses';

async function chunksByDomain(db: Kysely<unknown>): Promise<void> {
  // Writers lock contacts, then this table (their triggers append to it): the migration takes the two in
  // the same order, or a writer holding contacts and waiting for this table would deadlock with it.
  await sql.raw(`LOCK TABLE contacts IN SHARE ROW EXCLUSIVE MODE`).execute(db);
  // Adding a column with a constant default changes only the catalogue, not the rows.
  await sql
    .raw(
      `ALTER TABLE ${CHUNKS_TABLE} ADD COLUMN n integer NOT NULL DEFAULT 0, ADD COLUMN domain text,
        ADD COLUMN rebuilt boolean NOT NULL DEFAULT false`,
    )
    .execute(db);
  // What a fold looks for every few seconds (foldAddressChunks), found without reading the whole table:
  // loose rows (a rebuild's are not), and those of any domain that a rebuild did not write.
  await sql.raw(`DROP INDEX ${CHUNKS_TABLE}_loose`).execute(db);
  await sql
    .raw(
      `CREATE INDEX ${CHUNKS_TABLE}_loose ON ${CHUNKS_TABLE} (organization_id)
        WHERE chars < ${LOOSE_CHARS} AND NOT rebuilt`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE INDEX ${CHUNKS_TABLE}_unsorted ON ${CHUNKS_TABLE} (organization_id)
        WHERE domain IS NULL AND NOT rebuilt AND sign > 0`,
    )
    .execute(db);
  await chunkTriggers(db, chunkRows, CHUNK_COLUMNS);
}

export function addressChunksByDomain(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await chunksByDomain(db);
    },
  };
}
