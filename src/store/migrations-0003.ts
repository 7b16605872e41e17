// 0003: an indexed email substring search on SQLite. A contentless FTS5 table with the trigram tokenizer
// indexes every contact's email_lower; triggers keep it exact inside the writing transaction, so no
// write path can forget it. Its rowid is contacts.search_key, an integer this migration owns: contacts'
// own rowids may be renumbered by VACUUM (the table has a TEXT primary key), search_key never is.
// Since migration 0006 new contacts are indexed in bulk, a moment later, instead (migrations-0006.ts).
// PostgreSQL needs nothing here: its trigram GIN index is created by the store's migrate.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { sqliteStatements } from './statement-migrations.js';

const STATEMENTS = [
  `ALTER TABLE contacts ADD COLUMN search_key INTEGER`,
  // Backfill: the current rowids are distinct, which is all a key needs.
  `UPDATE contacts SET search_key = rowid`,
  `CREATE UNIQUE INDEX contacts_search_key ON contacts (search_key)`,
  // case_sensitive 1: both sides are lowercased by the service already, so a match is exactly
  // instr(email_lower, term) > 0, the same as the LIKE it replaces; contentless_delete lets the
  // triggers delete and update rows by rowid without the old text.
  `CREATE VIRTUAL TABLE contacts_search USING fts5(email_lower,
     tokenize = 'trigram case_sensitive 1', content = '', contentless_delete = 1)`,
  `INSERT INTO contacts_search (rowid, email_lower) SELECT search_key, email_lower FROM contacts`,
  // A new contact takes the next key (one probe of the unique index), then is indexed under it.
  `CREATE TRIGGER contacts_search_ins AFTER INSERT ON contacts BEGIN
     UPDATE contacts SET search_key = (SELECT coalesce(max(search_key), 0) + 1 FROM contacts)
       WHERE rowid = NEW.rowid;
     INSERT INTO contacts_search (rowid, email_lower)
       SELECT search_key, NEW.email_lower FROM contacts WHERE rowid = NEW.rowid;
   END`,
  `CREATE TRIGGER contacts_search_upd AFTER UPDATE OF email_lower ON contacts
     WHEN OLD.email_lower IS NOT NEW.email_lower BEGIN
     UPDATE contacts_search SET email_lower = NEW.email_lower WHERE rowid = NEW.search_key;
   END`,
  // Deletes by the API and by an organisation's cascade alike.
  `CREATE TRIGGER contacts_search_del AFTER DELETE ON contacts BEGIN
     DELETE FROM contacts_search WHERE rowid = OLD.search_key;
   END`,
];

export function contactSearch(dialect: DialectName): Migration {
  return sqliteStatements(dialect, STATEMENTS);
}
