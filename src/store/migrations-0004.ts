// 0004: maintained email counts on SQLite, so a page of emails does not count every email the organisation
// ever sent to fill in `pagination.total`: the same triggers as the contact counts (0002), per organisation
// and per status. Not on PostgreSQL: there many processes' multi-row statements accept emails and change
// their statuses at once, and per-row counter updates lock counter rows in no fixed order, so concurrent
// batches deadlock. 0005 brings them to PostgreSQL with triggers per statement.
import type { Kysely, Migration } from 'kysely';
import { sql } from './kysely.js';
import type { DialectName } from './dialect.js';
import { counter } from './migrations-0002.js';

export function emailCounts(dialect: DialectName): Migration {
  const { bump, create } = counter(dialect, 'email_counts');
  const status = (row: 'NEW' | 'OLD') => `'status:' || ${row}.status`;
  return {
    async up(db: Kysely<unknown>) {
      if (dialect !== 'sqlite') return;
      await create(db, [
        [
          'emails_count_ins',
          'INSERT',
          'emails',
          [bump('NEW.organization_id', `'all'`, 1), bump('NEW.organization_id', status('NEW'), 1)].join('\n'),
        ],
        [
          'emails_count_del',
          'DELETE',
          'emails',
          [bump('OLD.organization_id', `'all'`, -1), bump('OLD.organization_id', status('OLD'), -1)].join(
            '\n',
          ),
        ],
        [
          'emails_count_upd',
          'UPDATE OF status',
          'emails',
          [
            bump('OLD.organization_id', status('OLD'), -1),
            bump('NEW.organization_id', status('NEW'), 1),
          ].join('\n'),
          'OLD.status <> NEW.status',
        ],
      ]);
      await countExistingEmails(db);
    },
  };
}

/** Counts for the emails accepted before the counts table existed. */
export async function countExistingEmails(db: Kysely<unknown>): Promise<void> {
  await sql`INSERT INTO email_counts (organization_id, bucket, shard, n)
    SELECT organization_id, 'all', 0, count(*) FROM emails GROUP BY organization_id
    UNION ALL
    SELECT organization_id, 'status:' || status, 0, count(*) FROM emails GROUP BY organization_id, status`.execute(
    db,
  );
}
