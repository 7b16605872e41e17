// 0011 (PostgreSQL): each organisation's contacts keep a version of their addresses, so the total of an
// email search can be kept and used again until an address changes (search/kept-searches.ts): counting a
// common term's matches is slow whatever plan PostgreSQL takes, and would be done on every page.
//
// The version is a count in contact_counts, bucket `addresses`, that 0005's statement triggers on contacts
// now raise by one for each contact inserted, deleted or readdressed, into the shard of the connection as
// every other count. A bucket's sum only grows, so any committed change gives a sum never seen before,
// and the fold (counts.ts) keeps sums as they are. On SQLite the index file's state is the version.
import type { Kysely, Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { COUNTED, deltas, statementTrigger, upsert } from './migrations-0005.js';

/** A row of (organization_id, 'addresses', 1) for each contact in `rows`. */
const changed = (rows: 'new_rows' | 'old_rows') =>
  `SELECT r.organization_id, 'addresses' AS bucket, 1 AS delta FROM ${rows} r`;

/** A row `r` has no row of the same contact, organisation and address in `other`: its address changed. */
export const noSameAddressIn = (other: 'new_rows' | 'old_rows') => `NOT EXISTS (SELECT 1 FROM ${other} o
  WHERE o.id = r.id AND o.organization_id = r.organization_id AND o.email_lower = r.email_lower)`;

/** Rows of `rows` with no row of the same contact, organisation and address in `other`. */
const readdressed = (rows: 'new_rows' | 'old_rows', other: 'new_rows' | 'old_rows') =>
  `${changed(rows)} WHERE ${noSameAddressIn(other)}`;

async function versionAddresses(db: Kysely<unknown>): Promise<void> {
  const { buckets, updatable } = COUNTED.find((c) => c.table === 'contacts')!;
  const inserted = `${deltas('new_rows', buckets, 1)} UNION ALL ${changed('new_rows')}`;
  await statementTrigger(
    db,
    'contacts_count_ins',
    'INSERT',
    'contacts',
    upsert('contact_counts', inserted, false),
  );
  const deleted = `${deltas('old_rows', buckets, -1)} UNION ALL ${changed('old_rows')}`;
  await statementTrigger(
    db,
    'contacts_count_del',
    'DELETE',
    'contacts',
    upsert('contact_counts', deleted, true),
  );
  // A contact readdressed counts once (its new row); one moved to another organisation would count in both.
  const moved = `${deltas('old_rows', updatable!, -1)} UNION ALL ${deltas('new_rows', updatable!, 1)}
    UNION ALL ${readdressed('new_rows', 'old_rows')}
    UNION ALL ${readdressed('old_rows', 'new_rows')} AND NOT EXISTS (SELECT 1 FROM new_rows n
      WHERE n.id = r.id AND n.organization_id = r.organization_id)`;
  await statementTrigger(
    db,
    'contacts_count_upd',
    'UPDATE',
    'contacts',
    upsert('contact_counts', moved, false),
  );
}

export function addressVersions(dialect: DialectName): Migration {
  return {
    async up(db: Kysely<unknown>) {
      if (dialect === 'postgres') await versionAddresses(db);
    },
  };
}
