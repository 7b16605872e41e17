// 0002: maintained contact counts, so a page of contacts does not count a million rows to fill in
// `pagination.total`. Triggers keep them exact inside the writing transaction: totals per organisation,
// per subscription state and per tag. On PostgreSQL each bucket is split over a few shard rows so
// concurrent writers in one organisation do not queue on a single counter row; readers sum the shards.
import { type Kysely, type Migration, sql } from 'kysely';
import type { DialectName } from './dialect.js';

export const COUNT_SHARDS = 8;

const BUCKETS = {
  insert: [`'all'`, `'unsubscribed:' || NEW.unsubscribed`],
  delete: [`'all'`, `'unsubscribed:' || OLD.unsubscribed`],
};

export function contactCounts(dialect: DialectName): Migration {
  const shard = dialect === 'postgres' ? `floor(random() * ${COUNT_SHARDS})::int` : '0';
  const bump = (org: string, bucket: string, delta: number) =>
    `INSERT INTO contact_counts (organization_id, bucket, shard, n) VALUES (${org}, ${bucket}, ${shard}, ${delta})
       ON CONFLICT (organization_id, bucket, shard) DO UPDATE SET n = contact_counts.n + ${delta};`;
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
      await db.schema
        .createTable('contact_counts')
        .addColumn('organization_id', 'text', (c) =>
          c.notNull().references('organizations.id').onDelete('cascade'),
        )
        .addColumn('bucket', 'text', (c) => c.notNull())
        .addColumn('shard', 'integer', (c) => c.notNull())
        .addColumn('n', 'bigint', (c) => c.notNull())
        .addPrimaryKeyConstraint('contact_counts_pk', ['organization_id', 'bucket', 'shard'])
        .execute();

      if (dialect === 'sqlite') {
        await sql
          .raw(`CREATE TRIGGER contacts_count_ins AFTER INSERT ON contacts BEGIN ${contactIns} END`)
          .execute(db);
        await sql
          .raw(`CREATE TRIGGER contacts_count_del AFTER DELETE ON contacts BEGIN ${contactDel} END`)
          .execute(db);
        await sql
          .raw(
            `CREATE TRIGGER contacts_count_upd AFTER UPDATE OF unsubscribed ON contacts
             WHEN OLD.unsubscribed <> NEW.unsubscribed BEGIN ${unsubUpd} END`,
          )
          .execute(db);
        await sql
          .raw(`CREATE TRIGGER contact_tags_count_ins AFTER INSERT ON contact_tags BEGIN ${tagIns} END`)
          .execute(db);
        await sql
          .raw(`CREATE TRIGGER contact_tags_count_del AFTER DELETE ON contact_tags BEGIN ${tagDel} END`)
          .execute(db);
      } else {
        const fn = (name: string, body: string) =>
          sql.raw(
            `CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ${body} RETURN NULL; END $$`,
          );
        await fn('contacts_count_ins', contactIns).execute(db);
        await fn('contacts_count_del', contactDel).execute(db);
        await fn('contacts_count_upd', unsubUpd).execute(db);
        await fn('contact_tags_count_ins', tagIns).execute(db);
        await fn('contact_tags_count_del', tagDel).execute(db);
        const trigger = (name: string, when: string, table: string, fnName: string, cond = '') =>
          sql.raw(
            `CREATE TRIGGER ${name} AFTER ${when} ON ${table} FOR EACH ROW ${cond} EXECUTE FUNCTION ${fnName}()`,
          );
        await trigger('contacts_count_ins', 'INSERT', 'contacts', 'contacts_count_ins').execute(db);
        await trigger('contacts_count_del', 'DELETE', 'contacts', 'contacts_count_del').execute(db);
        await trigger(
          'contacts_count_upd',
          'UPDATE OF unsubscribed',
          'contacts',
          'contacts_count_upd',
          'WHEN (OLD.unsubscribed <> NEW.unsubscribed)',
        ).execute(db);
        await trigger('contact_tags_count_ins', 'INSERT', 'contact_tags', 'contact_tags_count_ins').execute(
          db,
        );
        await trigger('contact_tags_count_del', 'DELETE', 'contact_tags', 'contact_tags_count_del').execute(
          db,
        );
      }

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
