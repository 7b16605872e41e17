import { Type } from 'typebox';
import {
  ContactsError,
  PageQuery,
  Pagination,
  Timestamp,
  BODY,
  errorResponses,
  NullableString,
  CustomFieldValue,
  LookupId,
  FreeKeys,
  Success,
} from '../http/schemas.js';

import { withRules } from '../validation/ajv.js';
import { MAX_CUSTOM_FIELDS, MAX_EMAIL_LOOKUP, MAX_TAGS, createRules, updateRules } from './contacts.rules.js';

// No maxLength: its limit is on the address once trimmed, which the rules check (contacts.rules.ts).
const Email = Type.String({
  minLength: 1,
  description: 'Email address (trimmed; at most 254 characters)',
});
// An update's email is one of two things, by whether `id` is given (contacts.rules.ts updateRules).
const UpdateEmail = Type.String({
  minLength: 1,
  description: `With id: the contact's new address (trimmed; at most 254 characters), or the address it holds, exactly as read, which an earlier release may have taken under looser rules. Without id: the address of the contact to change (case-insensitive; not blank; at most ${MAX_EMAIL_LOOKUP} characters; none matching is a 404)`,
});
const PersonName = Type.String({ maxLength: 100 });
const ContactId = LookupId('Contact id; one Mailroom never issued is not found (404)');
// A tag of spaces alone is refused, as a blank list name is: no one could tell it from another, or want it.
const Tags = Type.Array(Type.String({ minLength: 1, maxLength: 64, pattern: '\\S' }), { maxItems: MAX_TAGS });
const CustomValue = CustomFieldValue;
// A request may name up to 100 keys: removing 50 (null) and setting 50 in one update. The 50-key and
// 16 KiB limits are on what the contact then holds (contacts.rules.ts).
const CustomFields = FreeKeys(CustomValue, {
  maxProperties: 2 * MAX_CUSTOM_FIELDS,
  description:
    'Flat object: keys of 1 to 100 characters (not only spaces), values strings, numbers, booleans or null (null removes the field). The contact holds at most 50 keys and 16 KiB; a request names at most 100 keys.',
});

const Contact = Type.Object(
  {
    id: Type.String(),
    email: Type.String(),
    firstName: NullableString,
    lastName: NullableString,
    tags: Type.Array(Type.String()),
    customFields: FreeKeys(CustomValue),
    unsubscribed: Type.Boolean(),
    createdAt: Timestamp,
  },
  { title: 'Contact' },
);

const errors = errorResponses(ContactsError);
const ContactResponse = Type.Object({ success: Success, contact: Contact });

export const listContactsSchema = {
  operationId: 'listContacts',
  summary: 'List contacts',
  tags: ['contacts'],
  querystring: Type.Object({
    ...PageQuery,
    email: Type.Optional(
      Type.String({ maxLength: MAX_EMAIL_LOOKUP, description: 'Case-insensitive substring of the email' }),
    ),
    tag: Type.Optional(Type.String({ maxLength: 64, description: 'Exact tag' })),
    unsubscribed: Type.Optional(Type.Boolean()),
  }),
  response: {
    200: Type.Object({ success: Success, contacts: Type.Array(Contact), pagination: Pagination }),
    ...errors,
  },
};

export const createContactSchema = {
  operationId: 'createContact',
  summary: 'Create a contact',
  tags: ['contacts'],
  body: withRules(
    Type.Object(
      {
        email: Email,
        firstName: Type.Optional(PersonName),
        lastName: Type.Optional(PersonName),
        tags: Type.Optional(Tags),
        customFields: Type.Optional(CustomFields),
        unsubscribed: Type.Optional(Type.Boolean()),
      },
      { additionalProperties: false },
    ),
    createRules,
  ),
  response: { 201: ContactResponse, ...errorResponses(ContactsError, 409, ...BODY) },
};

export const updateContactSchema = {
  operationId: 'updateContact',
  summary: 'Update a contact, identified by id or email',
  description:
    'id or email is required, and at least one field to change. When both id and email are given, id identifies the contact and email is its new address. tags replaces all tags; customFields is merged, and a null value removes that field.',
  tags: ['contacts'],
  body: withRules(
    Type.Object(
      {
        id: Type.Optional(ContactId),
        email: Type.Optional(UpdateEmail),
        firstName: Type.Optional(Type.Union([PersonName, Type.Null()])),
        lastName: Type.Optional(Type.Union([PersonName, Type.Null()])),
        tags: Type.Optional(Tags),
        customFields: Type.Optional(CustomFields),
        unsubscribed: Type.Optional(Type.Boolean()),
      },
      { additionalProperties: false },
    ),
    updateRules,
  ),
  response: { 200: ContactResponse, ...errorResponses(ContactsError, 404, 409, ...BODY) },
};

export const deleteContactSchema = {
  operationId: 'deleteContact',
  summary: 'Delete a contact, identified by id or email',
  description:
    'id or email is required (neither is a 400). When both are given, only a contact with that id and that email is deleted.',
  tags: ['contacts'],
  querystring: Type.Object({
    id: Type.Optional(ContactId),
    // Blank is a 400, as the email of a create is: not a search for "Contact    not found".
    email: Type.Optional(Type.String({ minLength: 1, maxLength: MAX_EMAIL_LOOKUP, pattern: '\\S' })),
  }),
  response: {
    200: Type.Object({ success: Success, message: Type.String() }),
    ...errorResponses(ContactsError, 404, ...BODY),
  },
};
