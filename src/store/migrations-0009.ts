// 0009: the trigram index of contacts' emails moves out of the database into a file of its own
// (DATA_DIR/mailroom-search.sqlite), which a thread keeps (search/search-index.ts): in the database, its
// flushes and segment merges held SQLite's one write lock and the server's event loop, longer as it grew.
//
// What stays here is what the index needs to stay exact without a trigger reaching the other file:
// - search_key is a contact's address under a number that names one address only. An address change gives
//   the contact a new key (the index holds the old key under the old address), and no key is ever issued
//   twice: contacts_search_state.retired_to is the highest key deleted or replaced, and a new key is
//   above it and above every key in use.
// - contacts_search_retired logs each key deleted or replaced, so the thread can take it out of the index;
//   the store prunes what the thread has done. Until then an index entry whose key no contact holds is
//   only a false candidate, which the search's join to contacts drops.
// - contacts_search_state.source names this database, so an index file built for another one (a copy, a
//   restore) is known and built again.
// PostgreSQL needs nothing here.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { sqliteStatements } from './statement-migrations.js';

/** The key a contact takes when it is written, or when its address changes. */
const NEXT_KEY = `1 + max((SELECT coalesce(max(search_key), 0) FROM contacts),
  (SELECT retired_to FROM contacts_search_state))`;

const RETIRE = `INSERT INTO contacts_search_retired (search_key) VALUES (OLD.search_key);
  UPDATE contacts_search_state SET retired_to = OLD.search_key WHERE retired_to < OLD.search_key;`;

const STATEMENTS = [
  `DROP TRIGGER contacts_search_ins`,
  `DROP TRIGGER contacts_search_upd`,
  `DROP TRIGGER contacts_search_del`,
  `DROP TABLE contacts_search`,
  // AUTOINCREMENT: an id is never handed out again, even once pruned, so the index file can tell a
  // database that went back in time (a restore) from one it has kept up with.
  `CREATE TABLE contacts_search_retired (
     id INTEGER PRIMARY KEY AUTOINCREMENT,
     search_key INTEGER NOT NULL)`,
  `ALTER TABLE contacts_search_state ADD COLUMN retired_to INTEGER NOT NULL DEFAULT 0`,
  `ALTER TABLE contacts_search_state ADD COLUMN source TEXT NOT NULL DEFAULT ''`,
  // Every key below the old watermark may have been issued and deleted since: none of them again.
  `UPDATE contacts_search_state
     SET retired_to = max(indexed_to, (SELECT coalesce(max(search_key), 0) FROM contacts)),
       source = lower(hex(randomblob(16)))`,
  `ALTER TABLE contacts_search_state DROP COLUMN indexed_to`,
  `CREATE TRIGGER contacts_search_ins AFTER INSERT ON contacts BEGIN
     UPDATE contacts SET search_key = ${NEXT_KEY} WHERE rowid = NEW.rowid;
   END`,
  // The new key is taken after the old one is retired, so it is above it too.
  `CREATE TRIGGER contacts_search_upd AFTER UPDATE OF email_lower ON contacts
     WHEN OLD.email_lower IS NOT NEW.email_lower BEGIN
     ${RETIRE}
     UPDATE contacts SET search_key = ${NEXT_KEY} WHERE rowid = NEW.rowid;
   END`,
  // Deletes by the API and by an organisation's cascade alike.
  `CREATE TRIGGER contacts_search_del AFTER DELETE ON contacts BEGIN
     ${RETIRE}
   END`,
];

export function searchIndexFile(dialect: DialectName): Migration {
  return sqliteStatements(dialect, STATEMENTS);
}
