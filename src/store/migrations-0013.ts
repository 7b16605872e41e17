// 0013: the default organisation is marked, not taken to be the oldest, which gave a key created without
// `--org` the contacts of whatever organisation an operator had created first. The contract's default
// organisation is one of its own, created on first use: a store whose oldest organisation is that one (named
// "Default", as `keys create` made it) keeps it as the default; any other gets a new one at the next key
// without --org. The partial unique index allows one default, and makes two processes creating it at once
// agree.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { statements } from './statement-migrations.js';

export function markedDefaultOrganization(dialect: DialectName): Migration {
  return statements(dialect, [
    `ALTER TABLE organizations ADD COLUMN is_default integer NOT NULL DEFAULT 0`,
    `UPDATE organizations SET is_default = 1 WHERE id = (
       SELECT id FROM organizations ORDER BY created_at, id LIMIT 1) AND name = 'Default'`,
    `CREATE UNIQUE INDEX organizations_default ON organizations (is_default) WHERE is_default = 1`,
  ]);
}
