// 0006 (SQLite): 0003's trigram index is filled in bulk, after the fact, instead of by a trigger inside every
// contact's insert: in bulk a contact costs a fraction of what indexing it within its group commit does
// (search/search-index.ts). contacts_search_state.indexed_to is a watermark: every contact whose search_key
// is at or below it is in the index under its current address (the update and delete triggers keep those
// exact); those above it are not yet, and a search reads them from contacts itself. A new key is always above
// the watermark, even when the highest contact was deleted, so no contact is taken for indexed too soon.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { sqliteStatements } from './statement-migrations.js';

const WATERMARK = `(SELECT indexed_to FROM contacts_search_state)`;

const STATEMENTS = [
  `CREATE TABLE contacts_search_state (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     indexed_to INTEGER NOT NULL)`,
  `INSERT INTO contacts_search_state (id, indexed_to) SELECT 1, coalesce(max(search_key), 0) FROM contacts`,
  // Without its one row every new key would be NULL, and the index would never learn of the contact.
  `CREATE TRIGGER contacts_search_state_kept BEFORE DELETE ON contacts_search_state BEGIN
     SELECT RAISE(ABORT, 'contacts_search_state keeps its row');
   END`,
  `DROP TRIGGER contacts_search_ins`,
  `CREATE TRIGGER contacts_search_ins AFTER INSERT ON contacts BEGIN
     UPDATE contacts
       SET search_key = 1 + max((SELECT coalesce(max(search_key), 0) FROM contacts), ${WATERMARK})
       WHERE rowid = NEW.rowid;
   END`,
  `DROP TRIGGER contacts_search_upd`,
  `CREATE TRIGGER contacts_search_upd AFTER UPDATE OF email_lower ON contacts
     WHEN OLD.email_lower IS NOT NEW.email_lower AND NEW.search_key <= ${WATERMARK} BEGIN
     UPDATE contacts_search SET email_lower = NEW.email_lower WHERE rowid = NEW.search_key;
   END`,
  `DROP TRIGGER contacts_search_del`,
  `CREATE TRIGGER contacts_search_del AFTER DELETE ON contacts
     WHEN OLD.search_key <= ${WATERMARK} BEGIN
     DELETE FROM contacts_search WHERE rowid = OLD.search_key;
   END`,
];

export function deferredContactSearch(dialect: DialectName): Migration {
  return sqliteStatements(dialect, STATEMENTS);
}
