import { Type } from 'typebox';
import {
  ContactsError,
  IdParams,
  LookupId,
  PageQuery,
  Pagination,
  Timestamp,
  errorResponses,
  NullableString,
} from '../http/schemas.js';

// A name must say something: blank (only spaces) is refused like empty.
const Name = Type.String({ minLength: 1, maxLength: 100, pattern: '\\S' });
// Returned as null when unset, so null is accepted too (and clears it on update).
const Description = Type.Unsafe<string | null>({ type: ['string', 'null'], maxLength: 500 });

const ListFields = {
  id: Type.String(),
  name: Type.String(),
  description: NullableString,
  contactCount: Type.Integer(),
  createdAt: Timestamp,
};

/** The create response has no updatedAt (api-v1.md 4.1). */
export const CreatedList = Type.Object(ListFields);
export const List = Type.Object({ ...ListFields, updatedAt: Timestamp });

const errors = errorResponses(ContactsError);
// Unknown ids are skipped and listed in notFound (contract.md). Ids Mailroom issues are 36 characters.
const ContactIds = Type.Array(LookupId('Contact id; unknown ids are listed in notFound'), {
  minItems: 1,
  maxItems: 100,
});

export const listAllSchema = {
  summary: 'List contact lists',
  tags: ['lists'],
  querystring: Type.Object(PageQuery),
  response: {
    200: Type.Object({ success: Type.Boolean(), lists: Type.Array(List), pagination: Pagination }),
    ...errors,
  },
};

export const getListSchema = {
  summary: 'Get a contact list',
  tags: ['lists'],
  params: IdParams,
  response: { 200: Type.Object({ success: Type.Boolean(), list: List }), ...errors },
};

export const createListSchema = {
  summary: 'Create a contact list',
  tags: ['lists'],
  body: Type.Object({ name: Name, description: Type.Optional(Description) }, { additionalProperties: false }),
  response: { 201: Type.Object({ success: Type.Boolean(), list: CreatedList }), ...errors },
};

export const updateListSchema = {
  summary: 'Update a contact list',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object(
    { name: Type.Optional(Name), description: Type.Optional(Description) },
    { additionalProperties: false, minProperties: 1 },
  ),
  response: { 200: Type.Object({ success: Type.Boolean(), list: List }), ...errors },
};

export const deleteListSchema = {
  summary: 'Delete a contact list (its contacts are kept)',
  tags: ['lists'],
  params: IdParams,
  response: { 200: Type.Object({ success: Type.Boolean(), message: Type.String() }), ...errors },
};

export const addContactsSchema = {
  summary: 'Add contacts to a list',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object({ contactIds: ContactIds }, { additionalProperties: false }),
  response: {
    200: Type.Object({
      success: Type.Boolean(),
      added: Type.Integer(),
      message: Type.String(),
      notFound: Type.Array(Type.String()),
    }),
    ...errors,
  },
};

export const removeContactsSchema = {
  summary: 'Remove contacts from a list',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object({ contactIds: ContactIds }, { additionalProperties: false }),
  response: {
    200: Type.Object({ success: Type.Boolean(), removed: Type.Integer(), message: Type.String() }),
    ...errors,
  },
};
