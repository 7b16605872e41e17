// 0012 (PostgreSQL): each organisation's addresses in chunks, kept by statement triggers on contacts, for
// the total of an email search that many contacts match (address-chunks-postgres.ts). The chunks of the
// contacts already there are written here, in the migration's transaction: the triggers, created first,
// hold writes to contacts until it commits, so no contact is missed or counted twice (about 2 s at a
// million contacts). SQLite keeps its chunks in the search index file (address-chunks.ts).
import { type Kysely, type Migration, sql } from 'kysely';
import type { DialectName } from './dialect.js';
import { CHUNKS_TABLE, LOOSE_CHARS, chunkRows, rebuildAddressChunks } from './address-chunks-postgres.js';
import { ORG_EXISTS, statementTrigger } from './migrations-0005.js';
import { noSameAddressIn } from './migrations-0011.js';

/** Rows of an organisation being deleted are skipped: its chunks go with it (cascade). */
const LIVE = ORG_EXISTS('r.organization_id');

const append = (select: string) =>
  `INSERT INTO ${CHUNKS_TABLE} (organization_id, sign, chars, addresses) ${select};`;

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
  await statementTrigger(db, 'contacts_chunks_ins', 'INSERT', 'contacts', append(chunkRows('new_rows', 1)));
  await statementTrigger(
    db,
    'contacts_chunks_del',
    'DELETE',
    'contacts',
    append(chunkRows('old_rows', -1, LIVE)),
  );
  await statementTrigger(
    db,
    'contacts_chunks_upd',
    'UPDATE',
    'contacts',
    append(
      `${chunkRows('old_rows', -1, `${noSameAddressIn('new_rows')} AND ${LIVE}`)}
      UNION ALL ${chunkRows('new_rows', 1, noSameAddressIn('old_rows'))}`,
    ),
  );
  await rebuildAddressChunks(db, null);
}

export function addressChunksOnPostgres(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await addressChunks(db);
    },
  };
}
