// 0005: on PostgreSQL, counts kept once per statement and per connection instead of once per row, and email
// counts there too; on both stores, deleting an organisation no longer trips over its own counts.
//
// Row triggers that add to a random shard lock counter rows in no fixed order, so two multi-row statements
// can deadlock, and each holds every shard of its bucket until it commits. Here each statement first adds up
// the rows it wrote (its transition tables), then writes one upsert per bucket into its connection's shard
// (the backend's process id). A connection runs one transaction at a time, so no two open transactions share
// a counter row: writers never wait on each other for counts, and cannot deadlock on them. (A shard per
// transaction is not enough: two that drew the same shard and touched buckets in opposite orders deadlocked.)
// Readers sum a bucket's rows; foldCountShards (counts.ts) merges them into shard 0 now and then.
//
// Deletes skip an organisation that is itself being deleted: its count rows go with it (cascade), and a count
// row written for it would break the foreign key. On SQLite the row triggers of 0002 and 0004 stay (one
// writer, no lock order to keep); only their delete triggers are made again with that condition.
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';
import { counter, createCountsTable, createRowTriggers } from './migrations-0002.js';
import { countExistingEmails } from './migrations-0004.js';

/**
 * What a table's rows count towards: the buckets every row is in, and those an update can move it between,
 * as SQL over a row named `r`.
 */
interface Counted {
  table: string;
  countsTable: 'contact_counts' | 'email_counts';
  buckets: (r: string) => string[];
  updatable?: (r: string) => string[];
}

export const COUNTED: Counted[] = [
  {
    table: 'contacts',
    countsTable: 'contact_counts',
    buckets: (r) => [`'all'`, `'unsubscribed:' || ${r}.unsubscribed`],
    updatable: (r) => [`'unsubscribed:' || ${r}.unsubscribed`],
  },
  { table: 'contact_tags', countsTable: 'contact_counts', buckets: (r) => [`'tag:' || ${r}.tag`] },
  {
    table: 'emails',
    countsTable: 'email_counts',
    buckets: (r) => [`'all'`, `'status:' || ${r}.status`],
    updatable: (r) => [`'status:' || ${r}.status`],
  },
];

/** The organisation `org` (SQL) still exists: it is not being deleted in this statement's transaction. */
export const ORG_EXISTS = (org: string) => `EXISTS (SELECT 1 FROM organizations o WHERE o.id = ${org})`;

/** Rows of (organization_id, bucket, delta) for the rows in `rows`, each adding `sign`. */
export function deltas(
  rows: 'new_rows' | 'old_rows',
  buckets: (r: string) => string[],
  sign: 1 | -1,
): string {
  return buckets('r')
    .map((b) => `SELECT r.organization_id, ${b} AS bucket, ${sign} AS delta FROM ${rows} r`)
    .join(' UNION ALL ');
}

/** One upsert per bucket the statement changed, into the shard of this connection. */
export function upsert(countsTable: string, changes: string, onlyLiveOrgs: boolean): string {
  return `INSERT INTO ${countsTable} AS c (organization_id, bucket, shard, n)
    SELECT organization_id, bucket, pg_backend_pid(), sum(delta)
    FROM (${changes}) d ${onlyLiveOrgs ? `WHERE ${ORG_EXISTS('d.organization_id')}` : ''}
    GROUP BY organization_id, bucket HAVING sum(delta) <> 0
    ON CONFLICT (organization_id, bucket, shard) DO UPDATE SET n = c.n + EXCLUDED.n;`;
}

export async function statementTrigger(
  db: Kysely<unknown>,
  name: string,
  event: 'INSERT' | 'UPDATE' | 'DELETE',
  table: string,
  body: string,
): Promise<void> {
  const transition = {
    INSERT: 'NEW TABLE AS new_rows',
    UPDATE: 'OLD TABLE AS old_rows NEW TABLE AS new_rows',
    DELETE: 'OLD TABLE AS old_rows',
  }[event];
  // OR REPLACE: 0002's row trigger of the same name becomes this one in place. Replacing a trigger locks
  // out writes to its table until the migration commits, but not reads; dropping it would lock out reads
  // too, and readers that lock contact_tags before contacts (tag pages) would deadlock with it.
  await sql
    .raw(
      `CREATE OR REPLACE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ${body} RETURN NULL; END $$`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE OR REPLACE TRIGGER ${name} AFTER ${event} ON ${table} REFERENCING ${transition} FOR EACH STATEMENT EXECUTE FUNCTION ${name}()`,
    )
    .execute(db);
}

async function countPerStatement(db: Kysely<unknown>): Promise<void> {
  await createCountsTable(db, 'email_counts');

  for (const { table, countsTable, buckets, updatable } of COUNTED) {
    const prefix = `${table}_count`;
    await statementTrigger(
      db,
      `${prefix}_ins`,
      'INSERT',
      table,
      upsert(countsTable, deltas('new_rows', buckets, 1), false),
    );
    await statementTrigger(
      db,
      `${prefix}_del`,
      'DELETE',
      table,
      upsert(countsTable, deltas('old_rows', buckets, -1), true),
    );
    if (updatable) {
      // Rows whose bucket did not change add -1 and +1 to it, which the HAVING drops: no write, no lock.
      const moved = `${deltas('old_rows', updatable, -1)} UNION ALL ${deltas('new_rows', updatable, 1)}`;
      await statementTrigger(db, `${prefix}_upd`, 'UPDATE', table, upsert(countsTable, moved, false));
    }
  }
  // Emails accepted before this migration. The new triggers hold a lock on the emails table until this
  // transaction commits, so no email can slip in between the two.
  await countExistingEmails(db);
}

/** SQLite: the delete triggers of 0002 and 0004 again, skipping an organisation that is being deleted. */
async function skipDeletedOrganisations(db: Kysely<unknown>): Promise<void> {
  // Each drop and its create commit together: the whole run is one transaction (migrateToLatest).
  for (const { table, countsTable, buckets } of COUNTED) {
    const name = `${table}_count_del`;
    const { bump } = counter('sqlite', countsTable);
    const body = buckets('OLD')
      .map((b) => bump('OLD.organization_id', b, -1))
      .join('\n');
    await sql.raw(`DROP TRIGGER IF EXISTS ${name}`).execute(db);
    await createRowTriggers(db, 'sqlite', [[name, 'DELETE', table, body, ORG_EXISTS('OLD.organization_id')]]);
  }
}

export function countsPerStatement(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await (dialect === 'postgres' ? countPerStatement(db) : skipDeletedOrganisations(db));
    },
  };
}
