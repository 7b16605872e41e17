// 0007: the index for the unsubscribed filter holds only unsubscribed contacts, so a contact create writes
// one b-tree fewer. Most contacts are subscribed, and a page of them is found by walking the organisation's
// created_at index past the few that are not. Queries name the filter's value as a literal, so the planner
// can match this index's WHERE.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { statements } from './statement-migrations.js';

export function unsubscribedOnlyIndex(dialect: DialectName): Migration {
  return statements(dialect, [
    // Built first: on PostgreSQL building holds off writes to contacts but not reads, while dropping an
    // index holds off reads too, until the commit; so the drop comes last, just before it.
    `CREATE INDEX contacts_org_unsubscribed ON contacts (organization_id, created_at, id)
       WHERE unsubscribed = 1`,
    `DROP INDEX contacts_org_unsub_created`,
  ]);
}
