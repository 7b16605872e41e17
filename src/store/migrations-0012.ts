// 0012 (PostgreSQL): each organisation's addresses in chunks, kept by statement triggers on contacts, for
// the total of an email search that many contacts match (search/address-chunks-postgres.ts). The chunks of
// the contacts already there are written here, in the migration's transaction: the triggers, created first,
// hold writes to contacts until it commits, so no contact is missed or counted twice (about 2 s at a
// million contacts). SQLite keeps its chunks in the search index file (search/address-chunks.ts).
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';
import { CHUNKS_TABLE, LOOSE_CHARS, PG_CHUNK_CHARS } from '../search/address-chunks-postgres.js';
import { END } from '../search/address-chunks.js';
import { ORG_EXISTS, statementTrigger } from './migrations-0005.js';
import { noSameAddressIn } from './migrations-0011.js';

/** Rows of an organisation being deleted are skipped: its chunks go with it (cascade). */
const LIVE = ORG_EXISTS('r.organization_id');

// The rows and the first build as this migration wrote them; 0015 added columns and writes them anew.

/** Rows of (organization_id, sign, chars, addresses) for `rows` (one per organisation), as SQL. */
function chunkRows(rows: string, sign: 1 | -1, where = 'TRUE'): string {
  return `SELECT r.organization_id, ${sign}::smallint AS sign,
      sum(length(r.email_lower) + 1)::integer AS chars, string_agg(r.email_lower || E'\\n', '') AS addresses
    FROM ${rows} r WHERE ${where} GROUP BY r.organization_id`;
}

async function buildChunks(db: Kysely<unknown>): Promise<void> {
  await sql`insert into ${sql.table(CHUNKS_TABLE)} (organization_id, sign, chars, addresses)
    select organization_id, 1, sum(length(email_lower) + 1), string_agg(email_lower || ${END}, '')
    from (select organization_id, email_lower, sum(length(email_lower) + 1)
        over (partition by organization_id rows unbounded preceding) / ${sql.lit(PG_CHUNK_CHARS)} as part
      from contacts) c
    group by organization_id, part`.execute(db);
}

/**
 * The statement triggers on contacts that append a row per statement and organisation of `rows` (chunkRows'
 * shape): inserted addresses +1, deleted ones -1, a readdressed contact's both. Replaced in place (0015).
 */
export async function chunkTriggers(
  db: Kysely<unknown>,
  rows: (rows: string, sign: 1 | -1, where?: string) => string,
  columns: string,
): Promise<void> {
  const append = (select: string) => `INSERT INTO ${CHUNKS_TABLE} (${columns}) ${select};`;
  await statementTrigger(db, 'contacts_chunks_ins', 'INSERT', 'contacts', append(rows('new_rows', 1)));
  await statementTrigger(db, 'contacts_chunks_del', 'DELETE', 'contacts', append(rows('old_rows', -1, LIVE)));
  await statementTrigger(
    db,
    'contacts_chunks_upd',
    'UPDATE',
    'contacts',
    append(
      `${rows('old_rows', -1, `${noSameAddressIn('new_rows')} AND ${LIVE}`)}
      UNION ALL ${rows('new_rows', 1, noSameAddressIn('old_rows'))}`,
    ),
  );
}

async function addressChunks(db: Kysely<unknown>): Promise<void> {
  await sql
    .raw(
      `CREATE TABLE ${CHUNKS_TABLE} (
        id bigserial PRIMARY KEY,
        organization_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
        sign smallint NOT NULL CHECK (sign IN (1, -1)),
        chars integer NOT NULL,
        addresses text NOT NULL)`,
    )
    .execute(db);
  await sql.raw(`CREATE INDEX ${CHUNKS_TABLE}_org ON ${CHUNKS_TABLE} (organization_id)`).execute(db);
  // What the fold looks for every few seconds, found without reading the whole table.
  await sql
    .raw(
      `CREATE INDEX ${CHUNKS_TABLE}_loose ON ${CHUNKS_TABLE} (organization_id) WHERE chars < ${LOOSE_CHARS}`,
    )
    .execute(db);
  await sql
    .raw(`CREATE INDEX ${CHUNKS_TABLE}_negative ON ${CHUNKS_TABLE} (organization_id) WHERE sign < 0`)
    .execute(db);
  // lz4 reads back about a fifth faster than the default pglz here, where the server has it (PostgreSQL 14+
  // built with it).
  const { rows } = await sql<{ lz4: boolean }>`select exists (select 1 from pg_settings
      where name = 'default_toast_compression' and 'lz4' = any(enumvals)) as lz4`.execute(db);
  if (rows[0]?.lz4) {
    await sql.raw(`ALTER TABLE ${CHUNKS_TABLE} ALTER COLUMN addresses SET COMPRESSION lz4`).execute(db);
  }
  await chunkTriggers(db, chunkRows, 'organization_id, sign, chars, addresses');
  await buildChunks(db);
}

export function addressChunksOnPostgres(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await addressChunks(db);
    },
  };
}
