// Table types for kysely. Portable column types on both stores: ids and timestamps are TEXT (UTC ISO 8601
// with milliseconds and Z, which sorts correctly as text), flags are INTEGER 0/1 and JSON is TEXT, so one
// query path serves SQLite and PostgreSQL without per-dialect value mapping.
import type { Generated, Insertable, Selectable } from 'kysely';

export interface OrganizationsTable {
  id: string;
  name: string;
  created_at: string;
  /** 1 for the organisation keys go to when none is named (migration 0013); at most one. */
  is_default: Generated<number>;
}

export interface ApiKeysTable {
  id: string;
  organization_id: string;
  name: string;
  key_hash: string;
  key_prefix: string;
  permissions: string;
  created_at: string;
  revoked_at: string | null;
}

export interface ListsTable {
  id: string;
  organization_id: string;
  name: string;
  description: string | null;
  contact_count: Generated<number>;
  created_at: string;
  updated_at: string;
}

export interface ContactsTable {
  id: string;
  organization_id: string;
  email: string;
  email_lower: string;
  first_name: string | null;
  last_name: string | null;
  unsubscribed: number;
  custom_fields: string;
  tags: string;
  created_at: string;
  updated_at: string;
  /** The contact as the API shows it (renderContact), or null: rendered on read (contactJson). */
  json: string | null;
}

/**
 * PostgreSQL only (migration 0016): each contact's organisation, created_at, address and subscription,
 * kept by triggers on contacts; the trigram index on `email_lower` is here.
 */
export interface ContactAddressesTable {
  id: string;
  organization_id: string;
  created_at: string;
  email_lower: string;
  unsubscribed: number;
}

export interface ContactTagsTable {
  contact_id: string;
  organization_id: string;
  tag: string;
  contact_created_at: string;
}

export interface ListMembersTable {
  list_id: string;
  contact_id: string;
  created_at: string;
}

export interface EmailsTable {
  id: string;
  organization_id: string;
  status: string;
  from_address: string;
  to_addresses: string;
  cc_addresses: string;
  bcc_addresses: string;
  reply_to: string;
  subject: string;
  /** Null from 0018 on: the bodies are in email_bodies. Emails accepted before keep theirs here. */
  html: string | null;
  text: string | null;
  headers: string;
  tags: string;
  message_id: string;
  attempts: number;
  next_attempt_at: string | null;
  lease_until: string | null;
  lease_owner: string | null;
  last_error: string | null;
  created_at: string;
  updated_at: string;
}

/** An email's bodies, apart from its row, which every status change rewrites (0018). */
export interface EmailBodiesTable {
  email_id: string;
  html: string | null;
  text: string | null;
}

export interface EmailRecipientsTable {
  email_id: string;
  position: number;
  kind: string;
  address: string;
  status: string;
  response: string | null;
  updated_at: string;
}

export interface EmailEventsTable {
  id: string;
  email_id: string;
  type: string;
  at: string;
  detail: string | null;
}

export interface IdempotencyKeysTable {
  organization_id: string;
  key: string;
  request_hash: string;
  email_id: string;
  created_at: string;
}

/** Counts that triggers maintain (migrations 0002, 0004, 0005): a bucket's count is the sum of its shards. */
export interface CountsTable {
  organization_id: string;
  bucket: string;
  shard: number;
  n: number | string;
}

export interface Database {
  organizations: OrganizationsTable;
  api_keys: ApiKeysTable;
  lists: ListsTable;
  contacts: ContactsTable;
  contact_tags: ContactTagsTable;
  contact_addresses: ContactAddressesTable;
  list_members: ListMembersTable;
  emails: EmailsTable;
  email_bodies: EmailBodiesTable;
  email_recipients: EmailRecipientsTable;
  email_events: EmailEventsTable;
  idempotency_keys: IdempotencyKeysTable;
  contact_counts: CountsTable;
  email_counts: CountsTable;
}

export type ListRow = Selectable<ListsTable>;
export type ContactRow = Selectable<ContactsTable>;
/** A contact to insert; without `json` (as on a database before 0008) it is rendered on read. */
export type NewContact = Insertable<ContactsTable>;
export type EmailRow = Selectable<EmailsTable>;
export type NewEmail = Insertable<EmailsTable>;
