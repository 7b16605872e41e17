// 0008: each contact keeps its API JSON in `json`, written by the app when it writes the contact, so a page
// reads one stored text per contact instead of rendering it from eight columns, most of a page's cost.
// Contacts stored before 0008 have none and are rendered on read (contactJson's coalesce); nothing is
// backfilled, so the migration is instant on any size. The trigger makes a stale text impossible: an update
// that changes a rendered column's value without writing a new `json` (a writer other than the contacts
// service) clears it; one that writes the same values (a sync resending a contact as it is) keeps it.
import type { Migration } from 'kysely';
import type { DialectName } from './dialect.js';
import { statements } from './statement-migrations.js';

const COLUMNS = [
  'id',
  'email',
  'first_name',
  'last_name',
  'tags',
  'custom_fields',
  'unsubscribed',
  'created_at',
];
const RENDERED = COLUMNS.join(', ');
const row = (prefix: string) => COLUMNS.map((c) => `${prefix}.${c}`).join(', ');

const SQLITE = [
  `ALTER TABLE contacts ADD COLUMN json TEXT`,
  `CREATE TRIGGER contacts_json_stale AFTER UPDATE OF ${RENDERED} ON contacts
     WHEN NEW.json IS OLD.json AND (${row('NEW')}) IS NOT (${row('OLD')}) BEGIN
     UPDATE contacts SET json = NULL WHERE rowid = NEW.rowid;
   END`,
];

// Adding a nullable column without a default only changes the catalogue: the lock it takes on contacts
// lasts as long as the migration's transaction, a few milliseconds.
const POSTGRES = [
  `ALTER TABLE contacts ADD COLUMN json text`,
  `CREATE FUNCTION contacts_json_stale() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     NEW.json := NULL;
     RETURN NEW;
   END $$`,
  `CREATE TRIGGER contacts_json_stale BEFORE UPDATE OF ${RENDERED} ON contacts
     FOR EACH ROW WHEN (NEW.json IS NOT DISTINCT FROM OLD.json
       AND (${row('NEW')}) IS DISTINCT FROM (${row('OLD')}))
     EXECUTE FUNCTION contacts_json_stale()`,
];

export function storedContactJson(dialect: DialectName): Migration {
  return statements(dialect, dialect === 'sqlite' ? SQLITE : POSTGRES);
}
