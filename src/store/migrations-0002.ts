// 0002: maintained contact counts, so a page of contacts does not count a million rows to fill in
// `pagination.total`. Triggers keep them exact inside the writing transaction: totals per organisation,
// per subscription state and per tag. On PostgreSQL each bucket is split over a few shard rows so
// concurrent writers in one organisation do not queue on a single counter row; readers sum the shards.
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';

export const COUNT_SHARDS = 8;

const BUCKETS = {
  insert: [`'all'`, `'unsubscribed:' || NEW.unsubscribed`],
  delete: [`'all'`, `'unsubscribed:' || OLD.unsubscribed`],
};

/** A trigger that keeps a count: the statement it runs, and when. */
export type CountTrigger = [name: string, event: string, table: string, body: string, when?: string];

/**
 * The count table and trigger SQL for one `<name>_counts` table: `bump` adds `delta` to a bucket (on
 * PostgreSQL to a random shard of it), `create` makes the table and its triggers.
 */
export function counter(dialect: DialectName, countsTable: string) {
  const shard = dialect === 'postgres' ? `floor(random() * ${COUNT_SHARDS})::int` : '0';
  return {
    bump: (org: string, bucket: string, delta: number) =>
      `INSERT INTO ${countsTable} (organization_id, bucket, shard, n) VALUES (${org}, ${bucket}, ${shard}, ${delta})
       ON CONFLICT (organization_id, bucket, shard) DO UPDATE SET n = ${countsTable}.n + ${delta};`,

    async create(db: Kysely<unknown>, triggers: CountTrigger[]): Promise<void> {
      await createCountsTable(db, countsTable);
      await createRowTriggers(db, dialect, triggers);
    },
  };
}

/** A counts table: one row per organisation, bucket and shard; a bucket's count is the sum of its shards. */
export async function createCountsTable(db: Kysely<unknown>, countsTable: string): Promise<void> {
  await db.schema
    .createTable(countsTable)
    .addColumn('organization_id', 'text', (c) =>
      c.notNull().references('organizations.id').onDelete('cascade'),
    )
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('shard', 'integer', (c) => c.notNull())
    .addColumn('n', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint(`${countsTable}_pk`, ['organization_id', 'bucket', 'shard'])
    .execute();
}

/** Triggers that run their body once per row written (on PostgreSQL through a function of the same name). */
export async function createRowTriggers(
  db: Kysely<unknown>,
  dialect: DialectName,
  triggers: CountTrigger[],
): Promise<void> {
  for (const [name, event, table, body, when] of triggers) {
    const condition = when ? `WHEN (${when})` : '';
    if (dialect === 'sqlite') {
      await sql
        .raw(`CREATE TRIGGER ${name} AFTER ${event} ON ${table} ${condition} BEGIN ${body} END`)
        .execute(db);
    } else {
      await sql
        .raw(
          `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ${body} RETURN NULL; END $$`,
        )
        .execute(db);
      await sql
        .raw(
          `CREATE TRIGGER ${name} AFTER ${event} ON ${table} FOR EACH ROW ${condition} EXECUTE FUNCTION ${name}()`,
        )
        .execute(db);
    }
  }
}

export function contactCounts(dialect: DialectName): Migration {
  const { bump, create } = counter(dialect, 'contact_counts');
  const contactIns = BUCKETS.insert.map((b) => bump('NEW.organization_id', b, 1)).join('\n');
  const contactDel = BUCKETS.delete.map((b) => bump('OLD.organization_id', b, -1)).join('\n');
  const unsubUpd = [
    bump('OLD.organization_id', BUCKETS.delete[1]!, -1),
    bump('NEW.organization_id', BUCKETS.insert[1]!, 1),
  ].join('\n');
  const tagIns = bump('NEW.organization_id', `'tag:' || NEW.tag`, 1);
  const tagDel = bump('OLD.organization_id', `'tag:' || OLD.tag`, -1);

  return {
    async up(db: Kysely<unknown>) {
      await create(db, [
        ['contacts_count_ins', 'INSERT', 'contacts', contactIns],
        ['contacts_count_del', 'DELETE', 'contacts', contactDel],
        [
          'contacts_count_upd',
          'UPDATE OF unsubscribed',
          'contacts',
          unsubUpd,
          'OLD.unsubscribed <> NEW.unsubscribed',
        ],
        ['contact_tags_count_ins', 'INSERT', 'contact_tags', tagIns],
        ['contact_tags_count_del', 'DELETE', 'contact_tags', tagDel],
      ]);

      // Counts for data written before this migration.
      await sql`INSERT INTO contact_counts (organization_id, bucket, shard, n)
        SELECT organization_id, 'all', 0, count(*) FROM contacts GROUP BY organization_id
        UNION ALL
        SELECT organization_id, 'unsubscribed:' || unsubscribed, 0, count(*) FROM contacts GROUP BY organization_id, unsubscribed
        UNION ALL
        SELECT organization_id, 'tag:' || tag, 0, count(*) FROM contact_tags GROUP BY organization_id, tag`.execute(
        db,
      );
    },
  };
}
