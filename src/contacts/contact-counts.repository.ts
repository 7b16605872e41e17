// Reads the contact counts that triggers maintain (migrations 0002, 0005 and 0011). Only single-bucket
// filters have one; for the rest (an email substring, tag and unsubscribed together) the caller counts rows.
import { maintainedCounts } from '../store/counts.js';
import type { Executor } from '../store/store.js';
import type { ContactFilter } from './contacts.repository.js';

/** The maintained count's bucket for the filter, if it has one (single-bucket filters only). */
export function bucketOf(filter: ContactFilter): string | undefined {
  if (filter.email !== undefined) return undefined;
  if (filter.tag !== undefined) return filter.unsubscribed === undefined ? `tag:${filter.tag}` : undefined;
  if (filter.unsubscribed !== undefined) return `unsubscribed:${filter.unsubscribed ? 1 : 0}`;
  return 'all';
}

const contactCounts = maintainedCounts('contact_counts');

export async function findMaintainedCount(
  db: Executor,
  organizationId: string,
  filter: ContactFilter,
): Promise<number | undefined> {
  const bucket = bucketOf(filter);
  return bucket === undefined ? undefined : contactCounts(db, organizationId, bucket);
}

/** How many contacts the organisation has: the maintained count of all of them. */
export async function organizationSize(db: Executor, organizationId: string): Promise<number> {
  return (await findMaintainedCount(db, organizationId, {})) ?? 0;
}

/** How many of the organisation's contacts have the tag: its maintained count. */
export async function tagSize(db: Executor, organizationId: string, tag: string): Promise<number> {
  return (await findMaintainedCount(db, organizationId, { tag })) ?? 0;
}

/**
 * PostgreSQL: how many times a contact of the organisation was added, deleted or readdressed, a count that
 * only grows (migration 0011's `addresses` bucket).
 */
export function addressChanges(db: Executor, organizationId: string): Promise<number> {
  return contactCounts(db, organizationId, 'addresses');
}
