// The contact columns the API shows, shared by every query that reads contacts for a response.
import { sql } from 'kysely';
import type { ContactRow } from '../store/schema.js';

/** The columns a contact's API shape needs; each column read costs per row, so pages read only these. */
export const CONTACT_FIELDS = [
  'contacts.id',
  'contacts.email',
  'contacts.first_name',
  'contacts.last_name',
  'contacts.unsubscribed',
  'contacts.custom_fields',
  'contacts.tags',
  'contacts.created_at',
] as const;
export type ContactFields = Pick<
  ContactRow,
  'id' | 'email' | 'first_name' | 'last_name' | 'unsubscribed' | 'custom_fields' | 'tags' | 'created_at'
>;

/** The same columns for raw SQL, from a contacts table aliased `c`. */
export const CONTACT_FIELDS_SQL = sql.raw(CONTACT_FIELDS.map((f) => f.replace('contacts.', 'c.')).join(', '));
