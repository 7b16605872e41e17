// A contact's API shape from its columns, shared by every query that reads contacts for a response.
import type { RawBuilder } from 'kysely';
import { sql } from '../store/kysely.js';
import { type DialectName, jsonString } from '../store/dialect.js';
import type { ContactRow } from '../store/schema.js';

/** The columns a contact's API shape is made of (toContact, contactJson, renderContact). */
export type ContactFields = Pick<
  ContactRow,
  'id' | 'email' | 'first_name' | 'last_name' | 'unsubscribed' | 'custom_fields' | 'tags' | 'created_at'
>;

/**
 * A contact as the API shows it (the Contact schema: its keys in order), as JSON text: the text stored
 * with the contact when it was written (renderContact, migration 0008), else rendered by the store from
 * the columns of `table`. Pages read this one value per contact instead of eight: turning each column into
 * a JS value, an object and JSON again costs more than the query itself, and rendering in the query is
 * still a large share of a page, hence the stored text. Tags and custom fields are stored as JSON.stringify
 * wrote them, so they go in as they are. The same bytes as the Contact schema's serialiser writes for
 * toContact's object: test/api/contacts.test.ts holds every read path, stored and rendered, to them.
 */
export function contactJson(dialect: DialectName, table: 'contacts' | 'c' = 'contacts'): RawBuilder<string> {
  const column = (name: string) => sql.ref<string | null>(`${table}.${name}`);
  const text = (name: string) => jsonString(dialect, column(name));
  return sql<string>`coalesce(${column('json')}, '{"id":' || ${text('id')} || ',"email":' || ${text('email')}
    || ',"firstName":' || ${text('first_name')} || ',"lastName":' || ${text('last_name')}
    || ',"tags":' || ${column('tags')} || ',"customFields":' || ${column('custom_fields')}
    || ',"unsubscribed":' || case when ${column('unsubscribed')} = 1 then 'true' else 'false' end
    || ',"createdAt":' || ${text('created_at')} || '}')`;
}

/** The same text as contactJson's, from a row in hand: what a contact's `json` column stores. */
export function renderContact(r: ContactFields): string {
  const q = JSON.stringify;
  return (
    `{"id":${q(r.id)},"email":${q(r.email)},"firstName":${q(r.first_name)},` +
    `"lastName":${q(r.last_name)},"tags":${r.tags},"customFields":${r.custom_fields},` +
    `"unsubscribed":${Number(r.unsubscribed) === 1},"createdAt":${q(r.created_at)}}`
  );
}
