// 0010 (SQLite): the organisation's created_at index carries each contact's lowercased address too, so a page
// of an email search that walks it (a term many contacts match) tests each address in the index and reads
// only the contacts it keeps, not every one it passes. It replaces the old index (still one b-tree per
// contact written; its entries an address wider), built in the migration with writes waiting (about 2 s at a
// million contacts). PostgreSQL keeps its index: its walk can skip rows only in an index-only scan, which
// depends on vacuum, and its trigram index serves the search.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { sqliteStatements } from './statement-migrations.js';

export function createdIndexWithAddress(dialect: DialectName): Migration {
  return sqliteStatements(dialect, [
    `CREATE INDEX contacts_org_created_email ON contacts (organization_id, created_at, id, email_lower)`,
    `DROP INDEX contacts_org_created`,
  ]);
}
