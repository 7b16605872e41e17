// 0015 (PostgreSQL): address chunks by domain. A term that every address of a domain holds (`example`,
// `.com`, `@exam`) was searched for in each address, cut out of every chunk where it stood: 120 ms for a
// term all of a million contacts hold, 35 ms for one a ninth hold. Rows now say how many addresses they
// hold (`n`) and, when these all share one, their domain; a row whose domain holds the term counts `n`
// without being read (address-chunks-postgres.ts, contact-search-postgres.repository.ts). `rebuilt` marks
// the rows a rebuild wrote, whose domain-less rows hold only domains too small for rows of their own.
// The triggers write a statement's row with its domain when its addresses share one (a single contact's),
// and every organisation's chunks are written anew here, by domain: the triggers, replaced first, hold
// writes to contacts until the migration commits, so no contact is missed or counted twice.
import { type Kysely, type Migration, sql } from 'kysely';
import type { DialectName } from './dialect.js';
import {
  CHUNKS_TABLE,
  CHUNK_COLUMNS,
  LOOSE_CHARS,
  chunkRows,
  rebuildAddressChunks,
} from './address-chunks-postgres.js';
import { chunkTriggers } from './migrations-0012.js';

async function chunksByDomain(db: Kysely<unknown>): Promise<void> {
  // Adding a column with a constant default changes only the catalogue, not the rows.
  await sql
    .raw(
      `ALTER TABLE ${CHUNKS_TABLE} ADD COLUMN n integer NOT NULL DEFAULT 0, ADD COLUMN domain text,
        ADD COLUMN rebuilt boolean NOT NULL DEFAULT false`,
    )
    .execute(db);
  await sql.raw(`ALTER TABLE ${CHUNKS_TABLE} ALTER COLUMN n DROP DEFAULT`).execute(db);
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
  await rebuildAddressChunks(db, null);
}

export function addressChunksByDomain(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await chunksByDomain(db);
    },
  };
}
