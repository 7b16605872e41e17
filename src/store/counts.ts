// Reads the counts that triggers maintain (migrations 0002 and 0004): a bucket's count is the sum of its
// shards, one row per shard, so the read costs the same at ten rows or ten million.
import { prepared } from './prepared.js';
import type { Executor } from './store.js';

/** A reader of one counts table; read on every page, so compiled once (see prepared.ts). */
export function maintainedCounts(table: 'contact_counts' | 'email_counts') {
  const sum = prepared((db: Executor, organizationId: string, bucket: string) =>
    db
      .selectFrom(table)
      .select((eb) => eb.fn.sum<number | string | null>('n').as('n'))
      .where('organization_id', '=', organizationId)
      .where('bucket', '=', bucket),
  );
  return async (db: Executor, organizationId: string, bucket: string): Promise<number> =>
    Number((await sum.first(db, organizationId, bucket))?.n ?? 0);
}
