// Reads the counts that migration 0002's triggers maintain. Only single-bucket filters have one;
// for the rest (an email substring, tag and unsubscribed together) the caller counts rows.
import { prepared } from '../store/prepared.js';
import type { Executor } from '../store/store.js';
import type { ContactFilter } from './contacts.repository.js';

function bucketOf(filter: ContactFilter): string | undefined {
  if (filter.email !== undefined && filter.email !== '') return undefined;
  if (filter.tag !== undefined) return filter.unsubscribed === undefined ? `tag:${filter.tag}` : undefined;
  if (filter.unsubscribed !== undefined) return `unsubscribed:${filter.unsubscribed ? 1 : 0}`;
  return 'all';
}

export async function findMaintainedCount(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  const bucket = bucketOf(filter);
  if (bucket === undefined) return undefined;
  const row = await countOfBucket.first(db, organizationId, bucket);
  return Number(row?.n ?? 0);
}

// Read on every contacts page: compiled once (see store/prepared.ts).
const countOfBucket = prepared((db: Executor, organizationId: string, bucket: string) =>
  db
    .selectFrom('contact_counts')
    .select((eb) => eb.fn.sum<number | string | null>('n').as('n'))
    .where('organization_id', '=', organizationId)
    .where('bucket', '=', bucket),
);
