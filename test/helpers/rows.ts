// Contact rows written straight through the repository (insertContacts), for store tests that need many.
import type { ContactRow } from '../../src/store/schema.js';

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
