// A contact's API shape from its columns, shared by every query that reads contacts for a response.
import { type RawBuilder, sql } from 'kysely';
import { type DialectName, jsonString } from '../store/dialect.js';
import type { ContactRow } from '../store/schema.js';

/** The columns a contact's API shape is made of (toContact, contactJson). */
export type ContactFields = Pick<
  ContactRow,
  'id' | 'email' | 'first_name' | 'last_name' | 'unsubscribed' | 'custom_fields' | 'tags' | 'created_at'
>;

/**
 * A contact as the API shows it (the Contact schema: its keys in order), as JSON text the store renders
 * from the columns of `table`. Pages read this one value per contact instead of eight: turning each column
 * into a JS value, then a contact object, then JSON again cost more than the query itself. Tags and custom
 * fields are stored as the JSON text JSON.stringify wrote, so they go in as they are. The same bytes as
 * the Contact schema's serialiser writes for toContact's object; test/api/contacts.test.ts holds every read
 * path to them.
 */
export function contactJson(dialect: DialectName, table: 'contacts' | 'c' = 'contacts'): RawBuilder<string> {
  const column = (name: string) => sql.ref<string | null>(`${table}.${name}`);
  const text = (name: string) => jsonString(dialect, column(name));
  return sql<string>`'{"id":' || ${text('id')} || ',"email":' || ${text('email')}
    || ',"firstName":' || ${text('first_name')} || ',"lastName":' || ${text('last_name')}
    || ',"tags":' || ${column('tags')} || ',"customFields":' || ${column('custom_fields')}
    || ',"unsubscribed":' || case when ${column('unsubscribed')} = 1 then 'true' else 'false' end
    || ',"createdAt":' || ${text('created_at')} || '}'`;
}
