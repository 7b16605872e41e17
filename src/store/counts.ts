// Reads the counts that triggers maintain (migrations 0002, 0004, 0005): a bucket's count is the sum of its
// shards, one row per shard, so the read costs the same at ten rows or ten million.
import { sql } from './kysely.js';
import { prepared } from './prepared.js';
import type { Executor } from './store.js';

type CountsTable = 'contact_counts' | 'email_counts';

/** A bucket's count: the sum of its shard rows (null when it has none), as a statement of its own. */
export function bucketSum(db: Executor, table: CountsTable, organizationId: string, bucket: string) {
  return db
    .selectFrom(table)
    .select((eb) => eb.fn.sum<number | string | null>('n').as('n'))
    .where('organization_id', '=', organizationId)
    .where('bucket', '=', bucket);
}

/** A sum as read back: PostgreSQL's numeric arrives as text, a bucket without rows as null. */
const asCount = (n: number | string | null | undefined): number => Number(n ?? 0);

/** A reader of one counts table; read on every page, so compiled once (see prepared.ts). */
export function maintainedCounts(table: CountsTable) {
  const sum = prepared((db: Executor, organizationId: string, bucket: string) =>
    bucketSum(db, table, organizationId, bucket),
  );
  return async (db: Executor, organizationId: string, bucket: string): Promise<number> =>
    asCount((await sum.first(db, organizationId, bucket))?.n);
}

/**
 * A page's extra column `total`: the bucket's maintained count, read by the page's own statement, so that
 * PostgreSQL answers a page and its total in one round trip and both come from one snapshot. Uncorrelated, so
 * each store reads it once a statement. An empty page carries none (pageTotal): its caller reads the count
 * alone.
 */
export function countColumn(db: Executor, table: CountsTable, organizationId: string, bucket: string) {
  return bucketSum(db, table, organizationId, bucket).as('total');
}

/** The total a page's rows carry (countColumn), or undefined for a page without rows. */
export function pageTotal(rows: readonly { total: number | string | null }[]): number | undefined {
  return rows.length > 0 ? asCount(rows[0]!.total) : undefined;
}

/**
 * PostgreSQL: merges every bucket's per-connection shard rows (migration 0005) into its shard 0, so a read
 * sums a few rows however many connections have come and gone. Rows a connection's open transaction holds
 * are skipped until the next fold; writers never touch shard 0, so a fold never waits on them.
 */
export async function foldCountShards(db: Executor): Promise<void> {
  await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{
      ok: boolean;
    }>`select pg_try_advisory_xact_lock(hashtext('mailroom: fold count shards')) as ok`.execute(trx);
    if (!rows[0]?.ok) return; // another process is folding
    for (const table of ['contact_counts', 'email_counts'] as const) {
      const t = sql.table(table);
      await sql`WITH folded AS (
          DELETE FROM ${t} WHERE (organization_id, bucket, shard) IN (
            SELECT organization_id, bucket, shard FROM ${t} WHERE shard <> 0 FOR UPDATE SKIP LOCKED)
          RETURNING organization_id, bucket, n)
        INSERT INTO ${t} AS c (organization_id, bucket, shard, n)
        SELECT organization_id, bucket, 0, sum(n) FROM folded
        GROUP BY organization_id, bucket HAVING sum(n) <> 0 ORDER BY organization_id, bucket
        ON CONFLICT (organization_id, bucket, shard) DO UPDATE SET n = c.n + EXCLUDED.n`.execute(trx);
    }
  });
}
