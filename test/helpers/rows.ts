// Contact and email rows written straight through the repository (insertContacts), for store tests that need many.
import type { ContactRow, NewEmail } from '../../src/store/schema.js';

/**
 * A contact row with no names, fields or tags, and no JSON text column (added by migration 0008, so the
 * row suits databases of any migration; a page renders contacts without it).
 */
export function contactRow(
  organizationId: string,
  id: string,
  email: string,
  createdAt: string,
  unsubscribed = false,
): Omit<ContactRow, 'json'> {
  return {
    id,
    organization_id: organizationId,
    email,
    email_lower: email.toLowerCase(),
    first_name: null,
    last_name: null,
    unsubscribed: unsubscribed ? 1 : 0,
    custom_fields: '{}',
    tags: '[]',
    created_at: createdAt,
    updated_at: createdAt,
  };
}

/** A queued email row, due at `at`, with `fields` over its defaults (one `to` address is the caller's to add). */
export function emailRow(
  organizationId: string,
  id: string,
  at: string,
  fields: Partial<NewEmail> = {},
): NewEmail {
  return {
    id,
    organization_id: organizationId,
    status: 'queued',
    from_address: 'a@example.org',
    to_addresses: '[]',
    cc_addresses: '[]',
    bcc_addresses: '[]',
    reply_to: '[]',
    subject: 's',
    html: null,
    text: 't',
    headers: '{}',
    tags: '[]',
    message_id: `<${id}@example.org>`,
    attempts: 0,
    next_attempt_at: at,
    lease_until: null,
    lease_owner: null,
    last_error: null,
    created_at: at,
    updated_at: at,
    ...fields,
  };
}
