// 0016 (PostgreSQL): each contact's address, created_at and subscription in a narrow table of their own, kept
// by statement triggers on contacts, for the trigram index (search/trigram-index.ts) to find an email term's
// matches in. pg_trgm hands over candidates that must each be read to be rechecked, and a term whose pieces
// stand in many other addresses (`s10000-2` in every `s100000-2…`) hands over many times its matches: rows a
// third the size of contacts' take a third of the blocks to read. Bulk inserts of contacts cost PostgreSQL
// about a quarter more for the second row and its id index. The rows of the contacts already there are
// written here, in the migration's transaction, behind a lock that holds writes to contacts until it commits
// (seconds at a million contacts).
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';
import { statementTrigger } from './migrations-0005.js';

const TABLE = 'contact_addresses';
const COLUMNS = 'id, organization_id, created_at, email_lower, unsubscribed';

/** Contacts copied by one statement of the migration. */
const BACKFILL_ROWS = 50_000;

async function contactAddresses(db: Kysely<unknown>): Promise<void> {
  // Writers lock contacts, then this table (their triggers write to it): the migration takes the two in
  // the same order (as 0015 does).
  await sql.raw(`LOCK TABLE contacts IN SHARE ROW EXCLUSIVE MODE`).execute(db);
  // No foreign keys: a key checked for each row inserted costs a lookup per contact, and the rows go with
  // their contacts through the triggers, an organisation's too (its contacts' delete cascades).
  await sql
    .raw(
      `CREATE TABLE ${TABLE} (
        id text PRIMARY KEY,
        organization_id text NOT NULL,
        created_at text NOT NULL,
        email_lower text NOT NULL,
        unsubscribed integer NOT NULL)`,
    )
    .execute(db);
  await statementTrigger(
    db,
    'contacts_addresses_ins',
    'INSERT',
    'contacts',
    `INSERT INTO ${TABLE} (${COLUMNS}) SELECT ${COLUMNS} FROM new_rows;`,
  );
  await statementTrigger(
    db,
    'contacts_addresses_del',
    'DELETE',
    'contacts',
    `DELETE FROM ${TABLE} a USING old_rows o WHERE a.id = o.id;`,
  );
  // Only rows whose address or subscription changed are written (a PATCH of a name changes neither).
  await statementTrigger(
    db,
    'contacts_addresses_upd',
    'UPDATE',
    'contacts',
    `UPDATE ${TABLE} a SET organization_id = n.organization_id, created_at = n.created_at,
        email_lower = n.email_lower, unsubscribed = n.unsubscribed
      FROM new_rows n JOIN old_rows o ON o.id = n.id
      WHERE a.id = n.id AND (o.organization_id, o.created_at, o.email_lower, o.unsubscribed)
        IS DISTINCT FROM (n.organization_id, n.created_at, n.email_lower, n.unsubscribed);`,
  );
  // In statements of a bounded size, as when migrations ran within the pool's query_timeout (they now run
  // without one: postgres-migrate.ts); the id index too is written a statement at a time.
  let after: string | null | undefined = '';
  do {
    const { rows } = await sql<{ last: string | null }>`with b as (
        insert into ${sql.raw(TABLE)} (${sql.raw(COLUMNS)})
        select ${sql.raw(COLUMNS)} from contacts where id > ${after} order by id limit ${sql.lit(BACKFILL_ROWS)}
        returning id)
      select max(id) as last from b`.execute(db);
    after = rows[0]?.last;
  } while (after);
}

export function contactAddressesOnPostgres(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await contactAddresses(db);
    },
  };
}
