import { Type } from 'typebox';
import {
  ContactsError,
  IdParams,
  LookupId,
  PageQuery,
  Pagination,
  Timestamp,
  BODY,
  errorResponses,
  NullableString,
  Success,
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

/** The create response has no updatedAt (api-v1.md 4.1). Titles name them in the OpenAPI document. */
const CreatedList = Type.Object(ListFields, { title: 'CreatedList' });
const List = Type.Object({ ...ListFields, updatedAt: Timestamp }, { title: 'List' });

const errors = errorResponses(ContactsError);
const lookupErrors = errorResponses(ContactsError, 404);
// Unknown ids are skipped and listed in notFound (contract.md). Ids Mailroom issues are 36 characters.
const ContactIds = (description: string) =>
  Type.Array(LookupId(description), { minItems: 1, maxItems: 100, description: 'At most 100 contact ids' });

export const listAllSchema = {
  operationId: 'listLists',
  summary: 'List contact lists',
  tags: ['lists'],
  querystring: Type.Object(PageQuery),
  response: {
    200: Type.Object({ success: Success, lists: Type.Array(List), pagination: Pagination }),
    ...errors,
  },
};

export const getListSchema = {
  operationId: 'getList',
  summary: 'Get a contact list',
  tags: ['lists'],
  params: IdParams,
  response: { 200: Type.Object({ success: Success, list: List }), ...lookupErrors },
};

export const createListSchema = {
  operationId: 'createList',
  summary: 'Create a contact list',
  tags: ['lists'],
  body: Type.Object({ name: Name, description: Type.Optional(Description) }, { additionalProperties: false }),
  response: {
    201: Type.Object({ success: Success, list: CreatedList }),
    ...errorResponses(ContactsError, ...BODY),
  },
};

export const updateListSchema = {
  operationId: 'updateList',
  summary: 'Update a contact list',
  description:
    'name or description is required. description: null clears it; name: null counts as not given (a list always has a name), so a body of name: null alone is a 400.',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object(
    { name: Type.Optional(Name), description: Type.Optional(Description) },
    { additionalProperties: false, minProperties: 1 },
  ),
  response: {
    200: Type.Object({ success: Success, list: List }),
    ...errorResponses(ContactsError, 404, ...BODY),
  },
};

export const deleteListSchema = {
  operationId: 'deleteList',
  summary: 'Delete a contact list (its contacts are kept)',
  tags: ['lists'],
  params: IdParams,
  response: {
    200: Type.Object({ success: Success, message: Type.String() }),
    ...errorResponses(ContactsError, 404, ...BODY),
  },
};

export const addContactsSchema = {
  operationId: 'addContactsToList',
  summary: 'Add contacts to a list',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object(
    { contactIds: ContactIds('Contact id; unknown ids are listed in notFound') },
    { additionalProperties: false },
  ),
  response: {
    200: Type.Object({
      success: Success,
      added: Type.Integer(),
      message: Type.String(),
      notFound: Type.Array(Type.String()),
    }),
    ...errorResponses(ContactsError, 404, ...BODY),
  },
};

export const removeContactsSchema = {
  operationId: 'removeContactsFromList',
  summary: 'Remove contacts from a list',
  tags: ['lists'],
  params: IdParams,
  body: Type.Object(
    {
      contactIds: ContactIds(
        'Contact id; ids that are not in the list are skipped, and not counted in removed',
      ),
    },
    { additionalProperties: false },
  ),
  response: {
    200: Type.Object({ success: Success, removed: Type.Integer(), message: Type.String() }),
    ...errorResponses(ContactsError, 404, ...BODY),
  },
};
